"""Conformal PEC in 2D TE (Dey and Mittra): perfect conductors cut the Yee cells where their surfaces lie.

A staircased conductor (the default: E is zero at nodes whose cell is more than half covered) moves its
surface by up to half a cell, an error of first order in the cell size that also jumps about from one grid
to the next. With ``Simulation(subpixel=True)`` (or ``"diagonal"``), PEC structures in 2D TE runs are
conformal instead, in the finite-integration form of Dey and Mittra, IEEE Microwave Guided Wave Lett. 7,
273 (1997):

* every E edge (one cell along its component, through its node) partly outside the conductors is active:
  its value is the mean field along the part outside. Edges wholly inside keep ``E = 0``;
* Faraday's law on each ``Hz`` cell counts each edge with the fraction ``w`` of its length outside the
  conductors and divides by the fraction ``A`` of the cell's area outside:
  ``dHz/dt = -(1 / mu A) sum_edges sign w E / h`` (``A = w = 1`` is Yee's);
* Ampere's law is Yee's: the dual faces are not cut.

Dividing by a small ``A`` would force a time step far below Yee's (20-60x on a circular cavity, in an
operator model). Instead, each cell with ``0 < A < 1/2`` is merged with the neighbour across its longest
edge (among those with ``A >= 1/2``): the two carry one ``Hz``, updated by the sum of their circulations
over the sum of their areas. The edge between them then drops out of both updates (its two cells' ``Hz``
are equal), as it drops out of the merged cell's circulation: the merged scheme is finite integration on
the merged cells, symmetric, so the leapfrog conserves a positive energy. Measured on a circular cavity
(``tests/mindelec/test_conformal.py``): its lowest uniform TE resonance converges at second order
(relative error x N^2 0.73-0.86 over 16-64 cells; the staircase's errors are erratic, 1e-3 to 7e-2, and
8-80x larger except where a grid happens to suit it), the largest eigenvalue of the H update stays below
the staircase's at Yee's limit, and no spurious mode lies within 25 % of the resonance. Cells wholly
inside (``A = 0``) keep ``Hz = 0``.

Solids' fractions are the planar cuts of :mod:`mindelec.fdtd.smoothing` (their shapes must give normals),
with the conductor closed by ``_CLOSED`` of a cell, so that edges and faces lying on its surface are
covered. PEC sheets keep the staircase (a node inside or not).

In the stepper (:class:`ConformalUpdate`), the cut cells are corrected after every H update (the compiled
kernel's or torch's, with sources and plane-wave corrections): Yee's curl is taken back out and the
conformal one put in, a gather of four edges per cell: +75-140 us per step on 100^2-400^2 grids with a
plate and a disk (float32, one thread; the set-up takes 0.04-0.4 s more). Cells in a PML slab keep the
staircase (their CPML terms are built on Yee's differences).

Not in 2D TM nor in 3D: there the edge between two merged cells still belongs to cells of another H
component, and with its own component's curl gone it carries a spurious wave along the surface (2D TM:
``Ez`` just above a PEC plate running into the PML rang for thousands of steps at 1e-2 of the peak, where
the staircase decays to 1e-6; 3D: spurious modes at the wall within 10 % of a sphere's lowest resonance,
and of a cylinder's for modes varying along its axis). Without merging, the scheme is clean and second
order there too (sphere: error x N^2 = 1.0 over 12-24 cells) but needs a time step 17-500x below Yee's.
Those runs keep the staircase.
"""

from dataclasses import dataclass, replace

import torch

from .boundaries import PML, Periodic
from .coefficients import media_mixer
from .grid import E_COMPONENTS, H_COMPONENTS, component_axis, flat_index
from .materials import PEC, PECSheet
from .smoothing import _planar_fill, _region_weights, node_points
from .updates import curl_terms

#: faces with less than this fraction of their area outside the conductors are merged with a neighbour
MERGE_THRESHOLD = 0.5
#: conductors are grown by this fraction of the smallest cell side: what lies on their surface is covered
_CLOSED = 1e-6


@dataclass(frozen=True)
class ConformalGeometry:
    """What the conductors cut: per component, the ``fractions`` (float64, grid shape) of its E edges or H
    faces outside them; ``region`` (bool, grid shape): the cells outside the PML slabs, where the conformal
    rule applies (the staircase inside them)."""

    fractions: dict
    region: torch.Tensor


@dataclass(frozen=True)
class _Faces:
    """The conformal faces of one H component: flat indices ``(F,)``, their area fractions ``(F,)``,
    ``dt / mu`` at them ``(F,)``, their groups ``(F,)`` (merged faces share one) with ``1 / area`` per group
    ``(G,)`` (0 for faces wholly inside), and per curl edge ``(E component, flat indices (F,), Yee's
    coefficient (F,), the conformal one (F,))``."""

    component: str
    faces: torch.Tensor
    area: torch.Tensor
    ch: torch.Tensor
    group: torch.Tensor
    inverse_group_area: torch.Tensor
    edges: tuple


class ConformalUpdate:
    """The conformal correction of the H update (module docstring), applied by the Yee stepper."""

    def __init__(self, faces):
        self.faces = faces

    @property
    def count(self):
        """The number of corrected faces (all H components)."""
        return sum(int(f.faces.numel()) for f in self.faces)

    def map_tensors(self, function):
        """A copy with ``function`` applied to the ``dt / mu`` tensors (for the stepper's checkpointing)."""
        return ConformalUpdate([replace(f, ch=function(f.ch)) for f in self.faces])

    def apply(self, fields, inplace):
        """Replace Yee's curl by the conformal one at the faces (after the step's H updates).

        ``H + ch curl_Yee`` recovers ``H^{n-1/2}`` plus whatever the step added besides the curl (sources,
        plane-wave corrections); merged faces pool it weighted by area.
        """
        for f in self.faces:
            field = fields[f.component]
            flat = field.reshape(-1)
            yee, conformal = 0.0, 0.0
            for component, index, yee_coefficient, conformal_coefficient in f.edges:
                values = fields[component].reshape(-1)[index]
                yee = yee + yee_coefficient * values
                conformal = conformal + conformal_coefficient * values
            pooled = f.area * (flat[f.faces] - f.ch * yee) + f.ch * conformal
            total = torch.zeros_like(f.inverse_group_area).index_add(0, f.group, pooled)
            values = (total * f.inverse_group_area)[f.group]
            if inplace:
                flat.index_copy_(0, f.faces, values)
            else:
                fields[f.component] = flat.index_copy(0, f.faces, values).reshape(field.shape)


def conformal_geometry(simulation):
    """The :class:`ConformalGeometry` of ``simulation``'s PEC structures, or None (not a 2D TE run,
    ``subpixel`` off, or no conductor cuts a cell)."""
    grid = simulation.grid
    if not simulation.subpixel or grid.ndim != 2 or simulation.polarization != "TE":
        return None
    if not any(isinstance(s.medium, PEC) for s in simulation.structures):
        return None
    mixer = media_mixer(grid, simulation.default_medium, simulation.structures, torch.float64, "cpu")
    fractions = {component: _outside_fraction(mixer, component) for component in simulation.active}
    if not any(bool(((f > 0) & (f < 1)).any()) for f in fractions.values()):
        return None
    region = torch.ones(grid.shape, dtype=torch.bool)
    for axis, boundary in enumerate(simulation.boundaries[: grid.ndim]):
        if isinstance(boundary, PML):
            region.narrow(axis, 0, boundary.thickness).fill_(False)
            region.narrow(axis, grid.shape[axis] - boundary.thickness, boundary.thickness).fill_(False)
    return ConformalGeometry(fractions, region)


def conformal_update(simulation, geometry, electric, magnetic):
    """The :class:`ConformalUpdate` of ``simulation`` for its coefficients, or None when no face is cut.

    Args:
        simulation: the :class:`~mindelec.fdtd.Simulation`.
        geometry: from :func:`conformal_geometry` (not None).
        electric, magnetic: the coefficients (``cb = 0`` marks the E edges held at zero).
    """
    fractions = geometry.fractions
    grid, device, dtype = simulation.grid, simulation.device, simulation.dtype
    periodic = [isinstance(b, Periodic) for b in simulation.boundaries]
    weights = {}  # per E component: the edge's weight in the circulations (0 where E is held at zero)
    for component in E_COMPONENTS:
        if component in simulation.active:
            cb = torch.broadcast_to(torch.as_tensor(electric[component][1]).detach().cpu(), grid.shape)
            weights[component] = (fractions[component] * (cb != 0)).reshape(-1)
    faces = []
    for component in H_COMPONENTS:
        if component not in simulation.active:
            continue
        built = _faces(component, geometry, weights, simulation, periodic)
        if built is None:
            continue
        index, area, group, group_area, edges = built
        ch = torch.broadcast_to(torch.as_tensor(magnetic[component], dtype=dtype), grid.shape)
        ch = ch.reshape(-1).to(device)[index.to(device)]
        inverse = torch.where(group_area > 0, 1 / group_area.clamp_min(1e-300), 0.0)
        moved = [(c, i.to(device), y.to(device, dtype), w.to(device, dtype)) for c, i, y, w in edges]
        faces.append(
            _Faces(component, index.to(device), area.to(device, dtype), ch, group.to(device),
                   inverse.to(device, dtype), tuple(moved))
        )
    return ConformalUpdate(faces) if faces else None


def _faces(component, geometry, weights, simulation, periodic):
    """``(faces, area, group, group area, edges)`` of the faces of H ``component`` that the conductors
    cut (outside the PML slabs), with their merge partners; None if none is cut."""
    grid = simulation.grid
    shape = grid.shape
    area = geometry.fractions[component].reshape(-1)
    edges = []  # (E component, flat index (N,), Yee's coefficient (N,), weight (N,)) over all faces
    neighbours = []  # (face index (N,), valid (N,), shared edge weight (N,))
    flat_all = torch.arange(area.numel())
    position = torch.stack(torch.unravel_index(flat_all, shape), dim=1)

    def neighbour(axis, step, shared):
        across = position.clone()
        across[:, axis] += step
        valid = (across[:, axis] >= 0) & (across[:, axis] < shape[axis])
        if periodic[axis]:
            across[:, axis] %= shape[axis]
            valid = torch.ones_like(valid)
        across[:, axis].clamp_(0, shape[axis] - 1)
        neighbours.append((flat_index(across, shape), valid, shared))

    for source, axis, sign in curl_terms(component, simulation.active, grid.ndim):
        for step, scale in ((1, 1.0), (0, -1.0)):  # forward difference: E(q + e_axis) - E(q)
            moved = position.clone()
            moved[:, axis] += step
            inside = moved[:, axis] < shape[axis]
            if periodic[axis]:
                moved[:, axis] %= shape[axis]
                inside = torch.ones_like(inside)
            moved[:, axis].clamp_(max=shape[axis] - 1)
            index = flat_index(moved, shape)
            coefficient = torch.where(inside, scale * sign / grid.spacing[axis], 0.0).to(torch.float64)
            weight = weights[source][index] * inside
            edges.append((source, index, coefficient, weight))
            neighbour(axis, 1 if step == 1 else -1, weight)  # the face on the other side of this edge
    in_region = geometry.region.reshape(-1)
    partial_edge = torch.stack([(c != 0) & (w < 1) for _, _, c, w in edges]).any(0)
    live_edge = torch.stack([(c != 0) & (w > 0) for _, _, c, w in edges]).any(0)
    # a face whose edges are all held at zero keeps its H under either update
    cut = in_region & live_edge & ((area < 1) | partial_edge)
    if not bool(cut.any()):
        return None
    owner, dead = _merge(area, cut, in_region, neighbours)
    members = cut.clone()
    members[owner[cut]] = True  # partners that the conductors do not cut themselves
    index = members.nonzero()[:, 0]
    masters, group = torch.unique(owner[index], return_inverse=True)
    group_area = torch.zeros(masters.numel(), dtype=torch.float64).index_add(0, group, area[index])
    group_area[dead[masters]] = 0.0  # slivers left alone: H = 0, as inside the conductor
    picked = [(source, i[index], c[index], c[index] * w[index]) for source, i, c, w in edges]
    return index, area[index], group, group_area, picked


def _merge(area, cut, in_region, neighbours):
    """``(owner, dead)`` (flat, all faces): the face whose H each face takes (itself unless merged) and the
    slivers held at ``H = 0``.

    A cut face with ``0 < A < MERGE_THRESHOLD`` joins the neighbour across its longest edge among those with
    ``A >= MERGE_THRESHOLD``; failing one (a sliver whose neighbours are all small), the group of a
    neighbour that the first pass made large enough; failing that it is dropped (``H = 0``: at most
    ``MERGE_THRESHOLD`` of a cell treated as conductor).
    """
    owner = torch.arange(area.numel())
    dead = torch.zeros_like(cut)
    others = torch.stack([other for other, _, _ in neighbours])
    for large_enough in ("face", "group"):
        small = cut & (area > 0) & (area < MERGE_THRESHOLD) & (owner == torch.arange(area.numel()))
        size = area if large_enough == "face" else torch.zeros_like(area).index_add(0, owner, area)[owner]
        if large_enough == "group":
            small &= size < MERGE_THRESHOLD
        if not bool(small.any()):
            break
        score = torch.stack([
            torch.where(valid & (size[other] >= MERGE_THRESHOLD) & in_region[other], shared, -1.0)
            for other, valid, shared in neighbours
        ])[:, small]
        best = score.argmax(0)
        chosen = others[:, small].gather(0, best[None])[0]
        has_partner = score.gather(0, best[None])[0] >= 0
        owner[small.nonzero()[:, 0][has_partner]] = owner[chosen[has_partner]]
        dead[small.nonzero()[:, 0][~has_partner]] = large_enough == "group"
    return owner, dead


def _outside_fraction(mixer, component):
    """The fraction of ``component``'s edge (E) or face (H) outside every PEC structure (float64, grid
    shape): solids by their planar cuts (closed by ``_CLOSED``), sheets by whether the node lies in them."""
    grid = mixer.grid
    axis = component_axis(component)
    axes = [axis] if component[0] == "E" else [a for a in range(grid.ndim) if a != axis]
    points = node_points(grid, component)
    spacing = torch.tensor(grid.spacing[: grid.ndim], dtype=torch.float64)
    solids = [s for s in mixer.structures if not isinstance(s.medium, PECSheet)]
    covered = torch.zeros(points.shape[0], dtype=torch.float64)
    if any(isinstance(s.medium, PEC) for s in solids):
        closed = _CLOSED * float(spacing.min())
        fills = []
        for index, structure in enumerate(solids):
            grow = closed if isinstance(structure.medium, PEC) else 0.0
            fills.append(_planar_fill(structure, index, points, spacing, [axes], grow=grow)[0][0])
        shares = _region_weights(fills, solids, points, spacing, axes)
        covered = sum(w for w, s in zip(shares[1:], solids) if isinstance(s.medium, PEC))
    for structure in mixer.structures:
        if isinstance(structure.medium, PECSheet):
            covered = torch.maximum(covered, (structure.geometry._margin(points) > 0).to(torch.float64))
    return (1 - covered.clamp(0.0, 1.0)).reshape(grid.shape)
