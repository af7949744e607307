"""The closed box surface: its flux (:class:`FluxBox`), shared with the near-to-far-field transform.

Six :class:`~mindelec.fdtd.FluxMonitor` planes around a source over-count its power: each plane sums
its nodes with full weight, so the nodes on an edge the planes share count twice (an error of about
``0.55 dx / h`` for a box of half-side ``h``). Here the surface is tiled by face cells instead: the box
spans the integer nodes ``lo_a .. hi_a`` along each axis ``a``; the face normal to ``a`` sits on the
integer node ``lo_a`` (outward normal ``-a``) or ``hi_a`` (``+a``) and is made of the cells between the
integer nodes along the other axes, whose centres are half nodes. The six faces tile the closed surface
exactly once, edges and corners included.

On a face cell centre the tangential fields are colocated from their Yee nodes: a component at a half
node along an axis where the centre is at an integer node (H along the normal: half a cell either side
of the face) or at an integer node where the centre is at a half node (E along a tangential axis of its
own direction's neighbour) is the mean of its two neighbours. The DFTs of the Yee-node fields (each at
its own sample times) are accumulated during the run and colocated at the end.
"""

import math
from dataclasses import dataclass

import torch

from common.errors import ConfigurationError

from .grid import ACTIVE_COMPONENTS, AXES
from .monitors import DFTMonitor, _DFTRecorder


@dataclass(frozen=True)
class Face:
    """One face of the box: normal ``axis`` (0, 1, 2), outward ``sign`` (+1 or -1), its integer node
    ``index`` along the normal, and the tangential axes ``(b, c)`` with ``(axis, b, c)`` cyclic."""

    axis: int
    sign: int
    index: int

    @property
    def tangential(self):
        """The two axes (0, 1, 2) along the face, in cyclic order after its normal."""
        return (self.axis + 1) % 3, (self.axis + 2) % 3

    @property
    def label(self):
        """``"+x"``, ``"-y"``...: the side of the box and the axis of its outward normal."""
        return ("+" if self.sign > 0 else "-") + AXES[self.axis]


def _box_nodes(grid, center, size, owner):
    """Per axis of the simulation, the integer nodes ``(lo, hi)`` of the box faces (``lo < hi``)."""
    if center is None or size is None:
        raise ConfigurationError(f"{owner}: give the box's center and size (m), one value per dimension")
    try:
        center = grid.check_inside(center, owner)
    except ValueError as error:  # a plain ValueError from the grid: the box's own refusal names it
        raise ConfigurationError(str(error)) from None
    size = tuple(float(value) for value in size)
    if len(size) != grid.ndim or any(not value > 0 for value in size):
        raise ConfigurationError(f"{owner}: size must hold {grid.ndim} positive extents (m), got {size}")
    nodes = []
    for a in range(grid.ndim):
        low = round((center[a] - size[a] / 2 + grid.size[a] / 2) / grid.spacing[a])
        high = round((center[a] + size[a] / 2 + grid.size[a] / 2) / grid.spacing[a])
        if low < 1 or high > grid.shape[a] - 1 or high <= low:
            raise ConfigurationError(
                f"{owner}: along {AXES[a]} the box faces fall on nodes {low} and {high}; they must be "
                f"distinct and lie at least one cell inside the domain (nodes 1 .. {grid.shape[a] - 1})"
            )
        nodes.append((low, high))
    return nodes


def _slab(grid, component, face, nodes):
    """Per axis, the index range of ``component`` whose values colocate onto ``face``'s cell centres,
    and whether two neighbours are averaged along that axis."""
    offsets = grid.offsets(component)
    ranges = []
    for a in range(3):
        if a >= grid.ndim:
            ranges.append((slice(0, 1), False))
        elif a == face.axis:  # centres on the integer node of the face
            average = offsets[a] != 0
            ranges.append((slice(face.index - average, face.index + 1), average))
        else:  # centres on the half nodes lo .. hi - 1
            low, high = nodes[a]
            average = offsets[a] == 0
            ranges.append((slice(low, high + average), average))
    return ranges


def _colocate(value, averaged):
    """Mean of neighbours along the axes flagged in ``averaged`` (axes 1.. of ``value``, F first)."""
    for a, average in enumerate(averaged):
        if average:
            length = value.shape[1 + a]
            value = 0.5 * (value.narrow(1 + a, 0, length - 1) + value.narrow(1 + a, 1, length - 1))
    return value


class BoxSurface:
    """The faces of a closed box on a grid and the tangential components each one needs.

    Attributes:
        faces: the :class:`Face` objects (two per axis of the simulation).
        nodes: per axis, the integer nodes ``(lo, hi)`` of the faces.
        entries: ``{(face label, component): (slices, averaged)}`` over the tangential components present.
    """

    def __init__(self, grid, polarization, center, size, owner):
        self.grid = grid
        self.nodes = _box_nodes(grid, center, size, owner)
        active = ACTIVE_COMPONENTS[(grid.ndim, polarization)]
        self.faces = [Face(a, sign, self.nodes[a][sign > 0]) for a in range(grid.ndim) for sign in (-1, 1)]
        self.entries = {}
        for face in self.faces:
            for b in face.tangential:
                for kind in "EH":
                    component = kind + AXES[b]
                    if component in active:
                        ranges = _slab(grid, component, face, self.nodes)
                        self.entries[(face.label, component)] = (
                            tuple(r[0] for r in ranges),
                            tuple(r[1] for r in ranges),
                        )

    def cell_area(self, face):
        """Area (m^2; m per unit length in 2D) of one cell of ``face``."""
        return math.prod(self.grid.spacing[b] for b in face.tangential if b < self.grid.ndim)

    def centres(self, face, dtype, device):
        """``(P, 3)`` coordinates (m) of ``face``'s cell centres, flattened in the order of its fields."""
        axes = []
        for a in range(3):
            if a >= self.grid.ndim:
                axes.append(torch.zeros(1, dtype=dtype, device=device))
                continue
            origin = -self.grid.size[a] / 2
            if a == face.axis:
                index = torch.tensor([float(face.index)], dtype=dtype, device=device)
            else:
                low, high = self.nodes[a]
                index = torch.arange(low, high, dtype=dtype, device=device) + 0.5
            axes.append(origin + index * self.grid.spacing[a])
        grids = torch.meshgrid(*axes, indexing="ij")
        return torch.stack([g.reshape(-1) for g in grids], dim=1)


class SurfaceRecorder(_DFTRecorder):
    """Running DFTs of the tangential fields around a :class:`BoxSurface`; ``finish`` hands the colocated
    face fields to ``build(surface, faces) -> output``."""

    WEIGHS_EDGES = True

    def __init__(self, name, frequencies, surface, dt, dtype, device, build):
        slices = {key: entry[0] for key, entry in surface.entries.items()}
        components = {key: key[1] for key in surface.entries}
        super().__init__(name, frequencies, slices, surface.grid, dt, dtype, device, components)
        self.surface, self.build = surface, build

    def face_fields(self):
        """``{face label: {component: (F, n1, n2, n3) complex}}`` on the face cell centres."""
        return colocated_faces(self.surface, self.transforms())

    def finish(self, samples):
        return self.build(self.surface, self.face_fields())


def colocated_faces(surface, transforms):
    """``{face label: {component: (F, n1, n2, n3) complex}}`` on ``surface``'s face cell centres, from the
    DFTs ``transforms[(face label, component)]`` of the Yee-node fields its ``entries`` name."""
    faces = {face.label: {} for face in surface.faces}
    for (label, component), value in transforms.items():
        faces[label][component] = _colocate(value, surface.entries[(label, component)][1])
    return faces


def surface_flux(surface, faces):
    """Outward ``Re oint (E x conj H) . n dA`` (F,) over the whole ``surface``, from its colocated
    ``faces``."""
    return sum(face_flux(surface, face, faces[face.label]) for face in surface.faces)


def face_flux(surface, face, fields):
    """Outward ``Re sum (E x conj H) . n dA`` over ``face``: (F,) from its colocated ``fields``."""
    b, c = face.tangential
    zero = torch.zeros_like(next(iter(fields.values())))
    get = fields.get
    normal = (
        get("E" + AXES[b], zero) * get("H" + AXES[c], zero).conj()
        - get("E" + AXES[c], zero) * get("H" + AXES[b], zero).conj()
    )
    return face.sign * normal.real.sum(dim=(1, 2, 3)) * surface.cell_area(face)


class FluxBox(DFTMonitor):
    """Poynting flux per frequency out of a closed box (3D) or rectangle (2D), each edge counted once.

    ``result[name]`` is ``{"flux": (F,), "faces": {"-x": (F,), "+x": ..., ...}, "frequencies": (F,)}``:
    the outward ``Re oint (E(f) x conj(H(f))) . n dA`` (W/Hz^2 for a pulse, in :class:`FluxMonitor`'s
    convention: the energy leaving is ``2 * integral_0^inf flux df``; per unit length along z in 2D), and
    each face's share. The faces sit on the integer nodes nearest to ``center +- size/2`` and tile the
    surface once (module docstring).

    Args:
        name: key of the result.
        frequencies: (Hz), finite and >= 0.
        center: (m), one coordinate per dimension.
        size: (m), one positive extent per dimension; the faces must lie at least one cell inside the
            domain (and, for a meaningful flux, outside the PML).
    """

    def __init__(self, name, frequencies, center, size):
        super().__init__(name, frequencies, components=(), center=center, size=size)

    def surface(self, grid, polarization):
        """The :class:`BoxSurface` of this monitor on ``grid`` (ConfigurationError if it does not fit)."""
        if grid.ndim < 2:
            raise ConfigurationError(f"{self!r}: a closed box needs a 2D or 3D simulation; use FluxMonitor")
        return BoxSurface(grid, polarization, self.center, self.size, repr(self))

    def recorder(self, grid, polarization, dt, dtype, device):
        return SurfaceRecorder(
            self.name, self.frequencies, self.surface(grid, polarization), dt, dtype, device, self._output
        )

    def _output(self, surface, faces):
        per_face = {face.label: face_flux(surface, face, faces[face.label]) for face in surface.faces}
        return {
            "flux": sum(per_face.values()),
            "faces": per_face,
            "frequencies": self.frequencies.to(next(iter(per_face.values())).device),
        }
