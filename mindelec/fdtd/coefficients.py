"""Materials on the grid: the update coefficients of every field component.

``update_coefficients`` rasterises the structures (sub-cell fill fractions at each component's
nodes), mixes the media by those fractions (later structures override earlier ones), writes the design
regions' permittivity into their boxes and returns, per E component, ``(ca, cb, poles)`` with

* ``ca = (1 - l) / (1 + l)`` and ``cb = dt / (eps0 eps_r) / (1 + l)``, ``l = sigma dt / (2 eps0 eps_r)``
  (``ca = 1`` exactly where the media are lossless: the step skips the ``E *= ca`` pass);
* ``poles``: per dispersive medium ``(c1, c2, c3)``, the coefficients of
  ``P^{n+1} = c1 P^n + c2 P^{n-1} + c3 E^n`` (``c3`` carries the medium's fill weight);

and per H component ``ch = dt / (mu0 mu_r)``. Uniform values stay floats; varying ones are tensors of
the grid shape. PEC fills zero ``ca`` and ``cb`` where they cover half a node or more (in conformal
runs, where they cover the whole edge or all but ``EDGE_MINIMUM`` of it: :mod:`mindelec.fdtd.conformal`).
:class:`~mindelec.fdtd.materials.AxialConductivity` structures are not mixed: their conductivity, times
their fill, is added to that of the one E component along their axis. With ``subpixel=True`` the E
components' permittivity and conductivity are the anisotropic subpixel averages of
:mod:`mindelec.fdtd.smoothing` instead of the arithmetic fill-fraction means.
"""

import torch

from common.units import VACUUM_PERMEABILITY, VACUUM_PERMITTIVITY

from .grid import H_COMPONENTS
from .materials import PEC, AxialConductivity, Medium, PECSheet
from .smoothing import smoothed_media

#: PEC zeroes an E node whose dual cell it covers this much or more: half, so that the tangential E on
#: a face lying on a node plane (covered exactly half) is zeroed and the conductor ends at its face (the
#: margin absorbs rounding)
_HALF_COVERED = 0.5 - 1e-6

#: a structure's region of cells reaches this fraction of a cell beyond the cells its bounding box meets
#: (rounding of the node coordinates)
_REGION_PAD = 1e-6


def _overlap(first, second) -> bool:
    """Whether two regions (index slices per axis) share a node."""
    return all(a.start < b.stop and b.start < a.stop for a, b in zip(first, second))


def update_coefficients(
    grid, active, dt, default_medium, structures, design, dtype, device, subpixel=False, conformal=None
):
    """``(electric, magnetic)``: ``electric[c] = (ca, cb, poles)``, ``magnetic[c] = dt / mu`` (see above).

    Args:
        grid: the :class:`~mindelec.fdtd.Grid`.
        active: the simulated components.
        dt: the time step (s).
        default_medium: the :class:`Medium` filling the rest of the domain.
        structures: :class:`Structure` objects, later ones overriding earlier ones.
        design: ``[(DesignRegion, its index slices)]``, applied after the structures.
        dtype, device: of the coefficient tensors.
        subpixel: smooth the permittivity at dielectric interfaces anisotropically
            (:mod:`mindelec.fdtd.smoothing`) instead of the arithmetic fill-fraction mean.
        conformal: the :class:`~mindelec.fdtd.conformal.ConformalGeometry` or None: within its
            ``edge_region``, E is zero where its edge's fraction outside the PEC is 0 (the staircase rule
            elsewhere).
    """
    axial = [s for s in structures if isinstance(s.medium, AxialConductivity)]  # added, not mixed
    mixer = media_mixer(grid, default_medium, structures, dtype, device)
    electric, magnetic = {}, {}
    for component in active:
        if component in H_COMPONENTS:
            permeability = mixer.uniform("permeability")
            if permeability is None:  # media of other permeabilities: mixed by their fills
                permeability = mixer.mix(mixer.weights(component), "permeability")
            magnetic[component] = dt / (VACUUM_PERMEABILITY * permeability)
            continue
        weights = mixer.weights(component)
        if subpixel:
            permittivity, conductivity = smoothed_media(mixer, weights, component)
        else:
            permittivity = mixer.mix(weights, "permittivity")
            conductivity = mixer.mix(weights, "conductivity")
        for region, slices in design:
            permittivity = mixer.with_design(permittivity, region, slices)
        conductivity = conductivity + mixer.axial_conductivity(component, axial)
        ca, cb = _lossy_coefficients(dt, permittivity, conductivity)
        poles = mixer.poles(weights, dt)
        conductor = sum((w for w, m in zip(weights, mixer.media) if isinstance(m, PEC)), 0.0)
        if isinstance(conductor, torch.Tensor):
            inside = conductor >= _HALF_COVERED
            if conformal is not None:
                covered = conformal.fractions[component] == 0
                inside = torch.where(conformal.edge_region.to(device), covered.to(device), inside)
            ca, cb = (
                torch.where(inside, 0.0, torch.as_tensor(c, dtype=dtype, device=device)) for c in (ca, cb)
            )
        electric[component] = (ca, cb, poles)
    return electric, magnetic


def media_mixer(grid, default_medium, structures, dtype, device):
    """The mixer of the default medium and the structures' media (``AxialConductivity`` ones left out)."""
    mixed = [s for s in structures if not isinstance(s.medium, AxialConductivity)]
    return _Mixer(grid, default_medium, mixed, dtype, device)


def _lossy_coefficients(dt, permittivity, conductivity):
    """``(ca, cb)`` of ``E = ca E + cb curl H`` for a relative permittivity and a conductivity (S/m)."""
    if isinstance(conductivity, float) and conductivity == 0.0:  # lossless: no E *= ca pass
        return 1.0, dt / (VACUUM_PERMITTIVITY * permittivity)
    loss = conductivity * dt / (2 * VACUUM_PERMITTIVITY * permittivity)
    return (1 - loss) / (1 + loss), dt / (VACUUM_PERMITTIVITY * permittivity) / (1 + loss)


class _Mixer:
    """The media of a simulation (default first, then the structures') mixed by their fill fractions."""

    def __init__(self, grid, default_medium, structures, dtype, device):
        self.grid, self.default_medium, self.structures = grid, default_medium, structures
        self.media = [default_medium] + [s.medium for s in structures]
        self.dtype, self.device = dtype, device

    def _region(self, component, geometry):
        """Index slices of ``component``'s nodes whose cells meet ``geometry``'s bounding box (the whole grid
        for a geometry without one); ``None`` when no cell does."""
        try:
            lo, hi = geometry.bounds_float64
        except NotImplementedError:
            return tuple(slice(0, n) for n in self.grid.shape)
        region = []
        for axis in range(self.grid.ndim):
            centers = self.grid.coordinates(component, axis, torch.float64)
            reach = self.grid.spacing[axis] * (0.5 + _REGION_PAD)
            index = ((centers + reach >= float(lo[axis])) & (centers - reach <= float(hi[axis]))).nonzero()
            if len(index) == 0:
                return None
            region.append(slice(int(index[0]), int(index[-1]) + 1))
        return tuple(region) + tuple(slice(0, n) for n in self.grid.shape[self.grid.ndim:])

    def _rasterize(self, component, geometry, supersample, region=None):
        """Fill fraction of ``geometry`` at ``component``'s nodes: over the grid, or over the index slices
        ``region`` only (a tensor of that block's shape)."""
        from common.geometry import rasterize

        grid = self.grid
        region = region or tuple(slice(0, n) for n in grid.shape)
        centers = [grid.coordinates(component, a, torch.float64)[region[a]] for a in range(grid.ndim)]
        spacing = list(grid.spacing[: grid.ndim])
        fill = torch.as_tensor(rasterize(geometry, centers, spacing, supersample=supersample))
        return fill.to(dtype=self.dtype, device=self.device).reshape([s.stop - s.start for s in region])

    def _placed(self, component, geometry, supersample):
        """Fill fraction (tensor of the grid shape) of ``geometry``, rasterised over the cells its bounding
        box meets (zero elsewhere: the same values as over the whole grid)."""
        fill = torch.zeros(self.grid.shape, dtype=self.dtype, device=self.device)
        region = self._region(component, geometry)
        if region is not None:
            fill[region] = self._rasterize(component, geometry, supersample, region)
        return fill

    def _fill_fractions(self, component, structures):
        """Per structure, its fill fraction (tensor of the grid shape) at ``component``'s nodes."""
        return [self._placed(component, s.geometry, 1 if isinstance(s.medium, PECSheet) else 4)
                for s in structures]

    def axial_conductivity(self, component, axial):
        """``sum fill * conductivity`` (S/m) of the ``AxialConductivity`` structures along ``component``."""
        along = [s for s in axial if s.medium.axis == component[1]]
        fills = self._fill_fractions(component, along)
        return sum((fill * s.medium.conductivity for fill, s in zip(fills, along)), 0.0)

    def uniform(self, name):
        """The media's common value of ``name`` (a float) when every medium (PEC counting as the default
        medium, as in :meth:`mix`) has the same number; ``None`` otherwise."""
        values = {getattr(m if isinstance(m, Medium) else self.default_medium, name) for m in self.media}
        if len(values) == 1 and isinstance(value := values.pop(), (int, float)):
            return float(value)
        return None

    def weights(self, component):
        """Effective weight of each medium (default, then structures) at ``component``'s nodes.

        Later structures override earlier ones on the part of a cell they cover. Structure ``k`` keeps
        what the union of structures ``k..n`` covers minus what the union of ``k+1..n`` covers, so
        structures that abut or overlap within a cell share it as their geometry does. (Multiplying
        ``1 - fill`` factors would treat their coverages as independent: two boxes meeting on a node plane
        would leave a quarter of it to the default medium.) PEC sheets cover a node or not, so their
        union is the largest of their fills. Structure ``k`` changes the union only over the cells its
        bounding box meets, so the union is rasterised there, of the structures whose boxes meet those
        cells (the values are those of the whole grid's union; the cost grows with the structures' sizes,
        not with their count squared).
        """
        if not self.structures:
            return [1.0]
        empty = torch.zeros(self.grid.shape, dtype=self.dtype, device=self.device)
        covered, solid_fill, sheets = [empty], empty, empty  # covered[j]: by the last j structures
        solids = []  # (geometry, region) of the solids met so far, the last structure first
        for structure in reversed(self.structures):
            region = self._region(component, structure.geometry)
            if region is not None and isinstance(structure.medium, PECSheet):
                sheets = sheets.clone()
                sheets[region] = torch.maximum(
                    sheets[region], self._rasterize(component, structure.geometry, 1, region))
            elif region is not None:
                solids.insert(0, (structure.geometry, region))
                members = [geometry for geometry, other in solids if _overlap(region, other)]
                union = members[-1]
                for geometry in reversed(members[:-1]):  # structure k | (k+1 | (... | n))
                    union = geometry | union
                solid_fill = solid_fill.clone()
                solid_fill[region] = self._rasterize(component, union, 4, region)
            covered.append(torch.maximum(solid_fill, sheets))
        covered = covered[::-1]  # covered[k]: by structures k..n-1; covered[-1] = 0
        return [1 - covered[0]] + [covered[k] - covered[k + 1] for k in range(len(self.structures))]

    def mix(self, weights, name):
        """``sum_k weight_k * medium_k.name``; a float when uniform, else a full tensor.

        PEC parts count with the default medium's value (their E is zeroed anyway; this keeps mu finite).
        """
        total = 0.0
        for weight, medium in zip(weights, self.media):
            medium = medium if isinstance(medium, Medium) else self.default_medium
            total = total + weight * getattr(medium, name)
        if isinstance(total, torch.Tensor):
            total = total.to(dtype=self.dtype, device=self.device)
            return torch.broadcast_to(total, self.grid.shape)
        return float(total)

    def with_design(self, permittivity, region, slices):
        """``permittivity`` (float or tensor) as a full tensor with ``region``'s values in its box."""
        full = torch.empty(self.grid.shape, dtype=self.dtype, device=self.device)
        full.copy_(permittivity if isinstance(permittivity, torch.Tensor) else torch.tensor(permittivity))
        design = region.permittivity.to(dtype=self.dtype, device=self.device)
        index = tuple(
            torch.arange(s.start, s.stop, device=self.device).reshape([-1 if a == i else 1 for a in range(3)])
            for i, s in enumerate(slices)
        )
        return full.index_put(index, design.reshape([s.stop - s.start for s in slices]))

    def poles(self, weights, dt):
        """Per dispersive medium present, ``(c1, c2, c3)`` with ``c3`` weighted by its fill."""
        poles = []
        for weight, medium in zip(weights, self.media):
            pole = medium._pole() if isinstance(medium, Medium) else None
            if pole is None:
                continue
            numerator, omega0_squared, gamma = pole
            denominator = 1 + gamma * dt / 2
            weight = torch.as_tensor(weight, dtype=self.dtype, device=self.device)
            weight = torch.broadcast_to(weight, self.grid.shape)
            poles.append(
                (
                    (2 - omega0_squared * dt**2) / denominator,
                    -(1 - gamma * dt / 2) / denominator,
                    weight * (VACUUM_PERMITTIVITY * numerator * dt**2 / denominator),
                )
            )
        return poles
