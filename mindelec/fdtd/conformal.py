"""Conformal PEC (Dey and Mittra): perfect conductors cut the Yee cells where their surfaces lie.

A staircased conductor (the default: E is zero at nodes whose cell is half covered or more) moves its
surface by up to half a cell, an error of first order in the cell size that also jumps about from one grid
to the next. With ``Simulation(subpixel=True)`` (or ``"diagonal"``), PEC structures in 2D and 3D runs are
conformal instead, in the finite-integration form of Dey and Mittra, IEEE Microwave Guided Wave Lett. 7,
273 (1997):

* every E edge (one cell along its component, through its node) partly outside the conductors is active:
  its value is the mean field along the part outside. Edges wholly inside keep ``E = 0``;
* Faraday's law on each H face counts each edge with the fraction ``w`` of its length outside the
  conductors and divides by the face's mass, the fraction ``A`` of its area outside:
  ``dH/dt = -(1 / mu A) sum_edges sign w E / h`` (``A = w = 1`` is Yee's);
* Ampere's law is Yee's: the dual faces are not cut.

With E's energy weighted by ``w`` and H's by the masses, the scheme is symmetric and the leapfrog conserves
a positive energy. Dividing by a small ``A`` would force a time step far below Yee's (17-500x in 3D);
small faces are handled in one of two ways:

* **2D TE: merged faces.** Each face with ``0 < A < 1/2`` is merged with the neighbour across its longest
  edge (among those with ``A >= 1/2``): the two carry one ``Hz``, updated by the sum of their circulations
  over the sum of their areas. The edge between them drops out of both updates, as it drops out of the
  merged face's circulation. Yee's time step is kept. A circular cavity's lowest uniform TE resonance
  converges at second order (relative error x N^2 0.73-0.86 over 16-64 cells; the staircase's errors are
  erratic, 1e-3 to 7e-2, 8-80x larger except where a grid happens to suit it).
* **2D TM and 3D: compensated masses.** There the edge between two merged faces still belongs to faces of
  another H component and, with its own component's curl gone, carried a spurious wave along the wall (3-6
  spurious modes within 10 % of a sphere's lowest resonance). Instead, a face with ``0 < A <
  SMALL_FACE`` gets the mass ``SMALL_FACE``, and the excess is taken from its largest neighbour of the same
  component (across one of its edges), which keeps at least ``LENDER_FLOOR``: the total mass, the magnetic
  energy of a smooth field, is kept, so the scheme stays second order (clamping alone was order 1.5). E
  edges with less than ``EDGE_MINIMUM`` of their length outside are held at zero: they kept Yee's whole
  mass against a tiny stiffness and gave spurious modes at the wall below the resonance. The time step is
  Yee's times :func:`time_step_factor`, from Gershgorin's bound on the operator (0.54-0.58 of Yee's limit
  on 2D TM disks, 0.62-0.65 on a sphere, 0.65 on a rod and a sphere; at ``courant=1`` the largest
  eigenvalue of the probed operator is then 0.74-0.84 of the leapfrog's bound). Measured
  (``tests/mindelec/test_conformal.py``): a circular TM cavity converges at second order (error x N^2
  0.41-0.49 over 12-64 cells; the staircase 1.4-7 %), a sphere's lowest mode too (-5.7e-3 and -3.1e-3
  with 12 and 16 cells across 1.1 diameters, x N^2 0.8; the staircase -10 % and -7 %), with no mode at the
  wall within 35 % of a sphere's or a cylinder's resonances.

Solids' fractions are the planar cuts of :mod:`mindelec.fdtd.smoothing` (their shapes must give normals),
with the conductor closed by ``_CLOSED`` of a cell, so that edges and faces lying on its surface are
covered; a 2D TM run's ``Ez`` edges run along the invariant axis, inside a conductor or not.

Zero-thickness sheets (:func:`~mindelec.fdtd.pec_sheet`, on a node plane) cover the edges and faces in
their plane by their exact overlap, and the edges and faces across their free rims take the singular
field's factors (:mod:`mindelec.fdtd.sheet_rims`).

In the stepper (:class:`ConformalUpdate`), the cut faces are corrected after every H update (the compiled
kernel's or torch's, with sources and plane-wave corrections): Yee's curl is taken back out and the
conformal one put in, a gather of the faces' edges: in 2D TE +75-140 us per step on 100^2-400^2 grids with
a plate and a disk (float32, one thread; the set-up takes 0.04-0.4 s more); in 3D, where each face's edges
carry one precomputed coefficient, +0.7-0.9 ms (+45-65 %) and +2.5 ms (+27-29 %) per step on 64^3 and
100^3 grids with a sphere and a rod (17,000 and 42,000 faces; set-up +0.9 and +2.5 s), whose time step
was 0.58-0.60 of Yee's.

In a PML slab the CPML stretches the derivatives along the slab's axis with Yee's differences. Where the
conductors continue unchanged along that axis (every fraction in the slab equal to the one at its inner
face: a line, a ground plane or a rod that runs into the PML) the two edges of such a derivative carry the
face's own weight, so Yee's difference is the conformal one and the faces there stay conformal
(:func:`_conformal_region`). Elsewhere in a slab faces keep the staircase, and so do the edges of faces
there: each edge carries one weight in all its faces' updates. In the compensated scheme the faces at the
rim of the conformal region (with such an edge) keep a whole cell's mass. A conductor that cuts a slab's
first layer and changes within the slab turns to the staircase there, a step in its cross-section, and the
simulation warns (:class:`~mindelec.fdtd.PlacementWarning`, naming the structure). Staircasing every slab
had done this to every line that ran into the PML: a 50 ohm microstrip on FR4 read a standing wave of
6-10 % in ``|V|`` and ``V / I`` of 47.7-56.9 ohm along it (the staircase's line 0.4-0.9 %); with its
conformal strip continued through the slab 0.4-0.8 %, and a coplanar line 0.1-0.7 % (32-38 % before)
(``tests/mindelec/test_conformal_lines.py``).
"""

import math
import warnings
from dataclasses import dataclass, replace

import torch

from .boundaries import PML, Periodic
from .coefficients import media_mixer
from .grid import AXES, E_COMPONENTS, H_COMPONENTS, component_axis, flat_index
from .materials import PEC, PECSheet
from .placement import PlacementWarning
from .sheet_rims import rim_factors, sheets_cover
from .smoothing import _planar_fill, _region_weights, node_points
from .updates import curl_terms

#: 2D TE: faces with less than this fraction of their area outside the conductors are merged with a neighbour
MERGE_THRESHOLD = 0.5
#: 2D TM and 3D: E edges with less than this fraction of their length outside the conductors are held at zero
EDGE_MINIMUM = 0.05
#: 2D TM and 3D: faces with less than this fraction outside get this mass, taken from a neighbour
SMALL_FACE = 0.1
#: 2D TM and 3D: a neighbour lends mass to small faces only while its own stays at least this
LENDER_FLOOR = 0.3
#: conductors are grown by this fraction of the smallest cell side: what lies on their surface is covered
_CLOSED = 1e-6
#: fractions closer than this are the same (a conductor continued along a PML slab's axis)
_SAME = 1e-9


@dataclass(frozen=True)
class ConformalGeometry:
    """What the conductors cut: per component, the ``fractions`` (float64, grid shape) of its E edges or H
    faces outside them; ``region`` (bool, grid shape): the cells outside the PML slabs, where the conformal
    rule applies (the staircase inside them); ``edge_region``: the E edges all of whose faces lie in
    ``region`` (each edge takes one weight in every face's update, which keeps the scheme conservative);
    ``compensated``: small faces take mass from a neighbour
    (2D TM and 3D) instead of merging with it (2D TE)."""

    fractions: dict
    region: torch.Tensor
    edge_region: torch.Tensor
    compensated: bool = False


@dataclass(frozen=True)
class _Faces:
    """The conformal faces of one H component: flat indices ``(F,)``, their masses (area fractions) ``(F,)``,
    ``dt / mu`` at them ``(F,)``, their groups ``(F,)`` (merged faces share one) with ``1 / area`` per group
    ``(G,)`` (0 for faces wholly inside), and per curl edge ``(E component, flat indices (F,), Yee's
    coefficient (F,), the conformal one (F,))``. Without merging (``group`` None) each face is its own
    group: ``inverse_group_area`` is 1 (0 for faces wholly inside) and each edge carries one coefficient,
    ``(E component, flat indices (F,), None, conformal / mass - Yee's (F,))``."""

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
            if f.group is None:  # H + ch (conformal / mass - Yee's) curl, as below for groups of one
                update = sum(k * fields[c].reshape(-1)[i] for c, i, _, k in f.edges)
                values = f.inverse_group_area * (flat[f.faces] + f.ch * update)
            else:
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
    """The :class:`ConformalGeometry` of ``simulation``'s PEC structures, or None (a 1D run,
    ``subpixel`` off, or no conductor cuts a cell)."""
    grid = simulation.grid
    if not simulation.subpixel or grid.ndim == 1:
        return None
    if not any(isinstance(s.medium, PEC) for s in simulation.structures):
        return None
    compensated = not (grid.ndim == 2 and simulation.polarization == "TE")
    fractions, cut = _fractions(simulation, compensated)
    if not any(bool(((f > 0) & (f != 1)).any()) for f in fractions.values()):
        return None
    region = _conformal_region(fractions, cut, simulation)
    edge_region = region.clone()  # an edge also borders the faces one cell back along the other axes
    for axis in range(grid.ndim):
        if isinstance(simulation.boundaries[axis], Periodic):
            edge_region &= region.roll(1, axis)
        else:
            length = grid.shape[axis] - 1
            edge_region.narrow(axis, 1, length).logical_and_(region.narrow(axis, 0, length))
    return ConformalGeometry(fractions, region, edge_region, compensated)


def _conformal_region(fractions, cut, simulation):
    """The cells where the conformal rule applies (bool, grid shape): those outside the PML slabs, and those
    in a slab whose conductors continue the ones at the slab's inner face unchanged along its axis (every
    component's fraction equal to that in the first cell inside, and so in every cell between).

    There the CPML's stretch of the derivatives along the slab's axis, built on Yee's differences, is the
    conformal one: the two edges of such a derivative carry one weight, the face's (the face and its edges
    cut by the same section), so a line that runs into the PML keeps one cross-section and one impedance.
    Where the conductors change within a slab its cells keep the staircase, and a conductor that cuts the
    slab's first layer then changes treatment there (:func:`_warn_at_pml`).
    """
    grid = simulation.grid
    region = torch.ones(grid.shape, dtype=torch.bool)
    stacked = torch.stack(list(fractions.values()))
    for axis, boundary in enumerate(simulation.boundaries[: grid.ndim]):
        if not isinstance(boundary, PML):
            continue
        cells, thickness = grid.shape[axis], boundary.thickness
        continued = torch.ones(grid.shape, dtype=torch.bool)
        for inner, outward in ((thickness, range(thickness - 1, -1, -1)),
                               (cells - thickness - 1, range(cells - thickness, cells))):
            face = stacked.select(axis + 1, inner)
            running = torch.ones(face.shape[1:], dtype=torch.bool)
            for index in outward:  # slab layers from the inner face out: equal to it so far
                running = running & ((stacked.select(axis + 1, index) - face).abs() < _SAME).all(0)
                continued.select(axis, index).copy_(running)
        region &= continued
    _warn_at_pml(region, cut, simulation)
    return region


def _warn_at_pml(region, cut, simulation):
    """Warn (PlacementWarning) when a conductor cuts the cells of a PML slab's first layer (a fraction there
    neither 0 nor 1) but does not continue unchanged from the slab's inner face: those cells are staircased,
    a step in the conductor's cross-section that reflects part of what crosses it. (A conductor near the
    slab but outside it, whose rim factors reach the inner face, changes nothing there.)"""
    grid = simulation.grid
    for axis, boundary in enumerate(simulation.boundaries[: grid.ndim]):
        if not isinstance(boundary, PML):
            continue
        cells, thickness = grid.shape[axis], boundary.thickness
        for first in (thickness - 1, cells - thickness):
            changed = cut.select(axis, first) & ~region.select(axis, first)
            if not bool(changed.any()):
                continue
            position = torch.tensor(grid.spacing[: grid.ndim], dtype=torch.float64)
            index = changed.nonzero()[0].tolist()
            index.insert(axis, first)
            point = (torch.tensor(index[: grid.ndim], dtype=torch.float64) * position
                     - torch.tensor(grid.size[: grid.ndim], dtype=torch.float64) / 2)
            names = _conductors_at(simulation.structures, point, float(position.max()))
            warnings.warn(
                f"Simulation subpixel={simulation.subpixel!r}: {names} changes along {AXES[axis]} within "
                f"the PML ({thickness} cells at each end), so its conformal treatment cannot continue there "
                f"and turns to the staircase at the PML's inner face (near cell {tuple(index[:grid.ndim])}): "
                "the step reflects part of a wave that crosses it (a line that runs into the PML reads a "
                "standing wave of a few %). Keep conductors uniform along the PML's axis through it, or use "
                "subpixel=False",
                PlacementWarning, stacklevel=6)
            return


def _conductors_at(structures, point, reach):
    """The PEC structures within ``reach`` (m) of ``point`` (m), named by index and repr for a warning."""
    found = [f"structure {index} ({structure!r})" for index, structure in enumerate(structures)
             if isinstance(structure.medium, PEC)
             and bool(structure.geometry.contains(point[None], tolerance=reach).any())]
    return " and ".join(found) if found else "a conductor"


def _fractions(simulation, compensated):
    """Per active component, the outside fractions of its edges or faces (:func:`_outside_fraction`), with
    E edges under ``EDGE_MINIMUM`` held at zero (compensated scheme) and the factors of sheets' free rims
    (:func:`~mindelec.fdtd.sheet_rims.rim_factors`); and where a conductor cuts an edge or face of a cell
    (bool, grid shape: some component's outside fraction, before the rims' factors, strictly between 0 and
    1)."""
    grid = simulation.grid
    mixer = media_mixer(grid, simulation.default_medium, simulation.structures, torch.float64, "cpu")
    sheets = any(isinstance(s.medium, PECSheet) for s in simulation.structures)
    fractions, cut = {}, torch.zeros(grid.shape, dtype=torch.bool)
    for component in simulation.active:
        points = node_points(grid, component)
        fraction = _outside_fraction(mixer, component, points, simulation.structures)
        if compensated and component[0] == "E":
            fraction = torch.where(fraction < EDGE_MINIMUM, 0.0, fraction)
        cut |= (fraction > _SAME) & (fraction < 1 - _SAME)
        if sheets:
            factors = rim_factors(simulation.structures, grid, component, points)
            fraction = fraction * factors.reshape(grid.shape)
        fractions[component] = fraction
    return fractions, cut


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
    # per E component: the edge's weight in the circulations, 0 where E is held at zero; outside the edge
    # region, where E follows the staircase, a whole edge (as in the Yee faces beside it)
    weights = {}
    for component in E_COMPONENTS:
        if component in simulation.active:
            cb = torch.broadcast_to(torch.as_tensor(electric[component][1]).detach().cpu(), grid.shape)
            fraction = torch.where(geometry.edge_region, fractions[component], 1.0)
            weights[component] = (fraction * (cb != 0)).reshape(-1)
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
        if geometry.compensated:  # each face its own group: one coefficient per edge, no pooling
            moved = [(c, i.to(device), None, (w * inverse - y).to(device, dtype)) for c, i, y, w in edges]
            group, inverse = None, (group_area > 0).to(torch.float64)
        else:
            moved = [(c, i.to(device), y.to(device, dtype), w.to(device, dtype)) for c, i, y, w in edges]
            group = group.to(device)
        faces.append(
            _Faces(component, index.to(device), area.to(device, dtype), ch, group, inverse.to(device, dtype),
                   tuple(moved))
        )
    return ConformalUpdate(faces) if faces else None


def _layout(component, simulation, periodic):
    """The curl of H ``component``'s faces (all of them, flat): ``(edges, neighbours)`` with ``edges`` a list
    of ``(E component, flat index (N,), Yee's coefficient (N,), 0 off the grid)`` and ``neighbours`` a list of
    ``(face index (N,), valid (N,))``, the face of the same component across each of those edges."""
    grid = simulation.grid
    shape = grid.shape
    position = torch.stack(torch.unravel_index(torch.arange(math.prod(shape)), shape), dim=1)
    edges, neighbours = [], []
    for source, axis, sign in curl_terms(component, simulation.active, grid.ndim):
        for step, scale in ((1, 1.0), (0, -1.0)):  # forward difference: E(q + e_axis) - E(q)
            moved = position.clone()
            moved[:, axis] += step
            inside = moved[:, axis] < shape[axis]
            across = position.clone()
            across[:, axis] += 1 if step == 1 else -1
            valid = (across[:, axis] >= 0) & (across[:, axis] < shape[axis])
            if periodic[axis]:
                moved[:, axis] %= shape[axis]
                across[:, axis] %= shape[axis]
                inside, valid = torch.ones_like(inside), torch.ones_like(valid)
            moved[:, axis].clamp_(max=shape[axis] - 1)
            across[:, axis].clamp_(0, shape[axis] - 1)
            coefficient = torch.where(inside, scale * sign / grid.spacing[axis], 0.0).to(torch.float64)
            edges.append((source, flat_index(moved, shape), coefficient))
            neighbours.append((flat_index(across, shape), valid))
    return edges, neighbours


def _faces(component, geometry, weights, simulation, periodic):
    """``(faces, mass, group, group mass, edges)`` of the faces of H ``component`` that the conductors cut
    (outside the PML slabs), with their merge partners (2D TE) or the neighbours that lend them mass (2D TM,
    3D); None if none is cut. A face's mass is its area fraction, a small face's ``SMALL_FACE`` and its
    lender's the rest."""
    area = geometry.fractions[component].reshape(-1)
    layout, across = _layout(component, simulation, periodic)
    edges = [(source, index, c, weights[source][index] * (c != 0)) for source, index, c in layout]
    in_region = geometry.region.reshape(-1)
    # an edge held at zero (w = 0) adds nothing to either curl: only fractional or weighed edges differ
    partial_edge = torch.stack([(c != 0) & (w > 0) & (w != 1) for _, _, c, w in edges]).any(0)
    live_edge = torch.stack([(c != 0) & (w > 0) for _, _, c, w in edges]).any(0)
    # a face whose edges are all held at zero keeps its H under either update
    cut = in_region & live_edge & ((area != 1) | partial_edge)
    if not bool(cut.any()):
        return None
    if geometry.compensated:
        mass, inner = _masses(geometry, area, layout, across)
        index = (cut | (inner & (mass != area))).nonzero()[:, 0]  # lenders the conductors do not cut join in
        group = torch.arange(index.numel())
        picked = [(source, i[index], c[index], c[index] * w[index]) for source, i, c, w in edges]
        return index, mass[index], group, mass[index], picked
    neighbours = [(other, valid, w) for (other, valid), (_, _, _, w) in zip(across, edges)]
    owner, dead = _merge(area, cut, in_region, neighbours)
    members = cut.clone()
    members[owner[cut]] = True  # partners that the conductors do not cut themselves
    index = members.nonzero()[:, 0]
    masters, group = torch.unique(owner[index], return_inverse=True)
    group_area = torch.zeros(masters.numel(), dtype=torch.float64).index_add(0, group, area[index])
    group_area[dead[masters]] = 0.0  # slivers left alone: H = 0, as inside the conductor
    picked = [(source, i[index], c[index], c[index] * w[index]) for source, i, c, w in edges]
    return index, area[index], group, group_area, picked


def _masses(geometry, area, layout, across):
    """``(masses, inner)`` of a component's faces (flat, all faces) in the compensated scheme: inside the
    region and off its rim, :func:`_compensate`'s (``inner``); on the rim (a face with an edge outside the
    edge region, a whole staircase edge: a small mass there would need a far shorter step) 1, or 0 for a
    face wholly inside a conductor; outside the region 1 (Yee's faces)."""
    edge_region = geometry.edge_region.reshape(-1)
    rim = torch.stack([(c != 0) & ~edge_region[index] for _, index, c in layout]).any(0)
    region = geometry.region.reshape(-1)
    inner = region & ~rim
    outer = torch.where(region & (area == 0), 0.0, 1.0).to(area.dtype)
    return torch.where(inner, _compensate(area, inner, across), outer), inner


def _compensate(area, in_region, across):
    """The faces' masses (flat, all faces; 2D TM and 3D): a face with ``0 < A < SMALL_FACE`` inside the
    region gets ``SMALL_FACE``, and the excess is taken from its largest neighbour of the same component
    (across one of its edges) if that keeps at least ``LENDER_FLOOR`` (else the face keeps the excess: its
    magnetic energy is then slightly overcounted). The total mass, the magnetic energy of a smooth field, is
    kept, which keeps the scheme second order; clamping alone (the excess from nowhere) made it order 1.5."""
    mass = area.clone()
    small = (in_region & (area > 0) & (area < SMALL_FACE)).nonzero()[:, 0]
    if small.numel() == 0:
        return mass
    others = torch.stack([other[small] for other, _ in across])
    score = torch.stack([torch.where(valid[small] & in_region[other[small]], area[other[small]], -1.0)
                         for other, valid in across])
    best = score.max(0)
    lender = others.gather(0, best.indices[None])[0]
    excess = torch.where(best.values >= 0, SMALL_FACE - area[small], 0.0)  # 0: no neighbour in the region
    taken = torch.zeros_like(area).index_add(0, lender, excess)
    lends = (best.values >= 0) & (area[lender] - taken[lender] >= LENDER_FLOOR)
    mass[small] = SMALL_FACE
    return mass.index_add(0, lender[lends], -excess[lends])


def time_step_factor(simulation, geometry):
    """The factor (at most 1) on Yee's stable time step that keeps the compensated scheme (2D TM, 3D) stable:
    ``sqrt(4 sum_a 1/h_a^2 / G)`` with ``G`` Gershgorin's bound (the largest absolute row sum) on the
    symmetrized H operator ``M^-1/2 C W C^T M^-1/2`` in vacuum (masses ``M``, edge weights ``W``; with
    ``c_max`` as in Yee's limit, media only lower it). 1 for 2D TE (the merged scheme keeps Yee's step) and
    without conformal geometry. In 3D the bound costs at least 13 % of the step (Yee's own rows give 16 for
    its 12); on 2D TM disks, spheres and cylinders the true largest eigenvalue was 0.74-0.84 of it."""
    if geometry is None or not geometry.compensated:
        return 1.0
    grid = simulation.grid
    periodic = [isinstance(b, Periodic) for b in simulation.boundaries]
    fractions = geometry.fractions
    edges = geometry.edge_region.reshape(-1)
    weights = {c: torch.where(edges, f.reshape(-1), 1.0) for c, f in fractions.items() if c[0] == "E"}
    layouts, scales = {}, {}
    gathered = {c: torch.zeros(math.prod(grid.shape), dtype=torch.float64) for c in weights}
    for component in (c for c in simulation.active if c[0] == "H"):
        area = geometry.fractions[component].reshape(-1)
        layouts[component], across = _layout(component, simulation, periodic)
        mass = _masses(geometry, area, layouts[component], across)[0]
        scales[component] = torch.where(mass > 0, mass.clamp_min(1e-300).rsqrt(), 0.0)
        for source, index, c in layouts[component]:
            gathered[source].index_add_(0, index, c.abs() * scales[component])
    bound = 0.0
    for component, layout in layouts.items():
        rows = sum(c.abs() * weights[source][index] * gathered[source][index] for source, index, c in layout)
        bound = max(bound, float((scales[component] * rows).max()))
    yee = 4 * sum(1 / h**2 for h in grid.spacing[: grid.ndim])
    return min(1.0, math.sqrt(yee / bound))


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


def _outside_fraction(mixer, component, points, structures):
    """The fraction of ``component``'s edge (E) or face (H) at ``points`` (its nodes, ``(n, d)``, m) outside
    every PEC structure (float64, grid shape): solids by their planar cuts (closed by ``_CLOSED``; an edge
    along a 2D run's invariant axis by whether its node lies in them), sheets by their exact overlap
    (:func:`~mindelec.fdtd.sheet_rims.sheets_cover`, their free rims placed among the simulation's
    ``structures``)."""
    grid = mixer.grid
    axis = component_axis(component)
    axes = [axis] if component[0] == "E" else [a for a in range(grid.ndim) if a != axis]
    spacing = torch.tensor(grid.spacing[: grid.ndim], dtype=torch.float64)
    solids = [s for s in mixer.structures if not isinstance(s.medium, PECSheet)]
    covered = torch.zeros(points.shape[0], dtype=torch.float64)
    closed = _CLOSED * float(spacing.min())
    if component[0] == "E" and axis >= grid.ndim and any(isinstance(s.medium, PEC) for s in solids):
        # a 2D TM run's Ez: its edge runs along the invariant axis, wholly inside a structure or not
        for structure in solids:  # the last structure holding a node decides, as in the fills below
            conductor = isinstance(structure.medium, PEC)
            holds = structure.geometry.contains(points, tolerance=closed if conductor else 0.0)
            covered = torch.where(holds, float(conductor), covered)
    elif any(isinstance(s.medium, PEC) for s in solids):
        fills = []
        for index, structure in enumerate(solids):
            grow = closed if isinstance(structure.medium, PEC) else 0.0
            fills.append(_planar_fill(structure, index, points, spacing, [axes], grow=grow)[0][0])
        shares = _region_weights(fills, solids, points, spacing, axes)
        covered = sum(w for w, s in zip(shares[1:], solids) if isinstance(s.medium, PEC))
    sheets = [s for s in mixer.structures if isinstance(s.medium, PECSheet)]
    if sheets:
        covered = torch.maximum(covered, sheets_cover(sheets, grid, points, axes, structures))
    return (1 - covered.clamp(0.0, 1.0)).reshape(grid.shape)
