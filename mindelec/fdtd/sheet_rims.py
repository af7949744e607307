"""Zero-thickness PEC sheets in conformal runs: what they cover, and the field's singularity at their rims.

A sheet (:func:`~mindelec.fdtd.pec_sheet`, on a node plane) covers the E edges and H faces lying in its
plane by their exact overlap with its rectangle (:func:`sheet_cover`), so that a rim between node lines cuts
the edges and faces it crosses: the thin-solid limit of :mod:`mindelec.fdtd.conformal`'s fractions.

At a free rim the field components across the rim grow as ``r^(-1/2)`` (Meixner's edge condition): the
magnetic field normal to the sheet and along its plane across the rim for a field along the rim (``E``
parallel to it), the electric field across the rim for a magnetic field along it. A Yee node near the rim
stands for the mean over its edge or face poorly: on a node line, a rim's staircase or conformal sheet
acts 0.3-0.36 cells longer than drawn at any resolution, a first-order error. :func:`rim_factors` weighs
the edges and faces that cross the rim (within a cell of it) by the ratio of the singular profile's mean
over the element to its value at the node (a static-field edge correction in the manner of Shorthouse
and Railton, IEEE Trans. MTT 1992): ``sqrt(2)`` for the elements starting at a rim on a node line,
tapering to 1 at a cell; the element that a rim crosses takes ``sqrt(2)`` times its outside fraction (the
profile's mean over the part outside against its value at that part's middle). The factors vary
continuously with the rim. A rim that touches another conductor (a sheet continuing it, a sheet or
solid it meets), a lumped element (a port's or resistor's gap) or lies on the domain's boundary is not
free and takes none. Coplanar sheets that abut
within an element cover it by their union's exact share, so a plate drawn in pieces is the whole plate.

The factors alone leave a rim acting up to 0.15 cells longer than drawn, by an amount that depends only on
where the rim lies in its cell, the same in cells at every resolution: a first-order error. That amount is
a property of the discrete rim (its neighbourhood, at small cells, is a half-plane in a uniform field), so
:func:`placed_rim` removes it: a free rim is placed, for its covers and factors, where the discrete rim
acts at the drawn position (0 to 0.16 cells inward, by :data:`RIM_OFFSETS` and :data:`RIM_EXCESS`,
measured once on the septum below in TM, extrapolated to zero cell size), on sheets at least two cells
across the rim; narrower strips keep their drawn rims. Placements past 0.92 of a cell are not used: there
the crossed element's share falls under the merging and holding thresholds and the rim acts
discontinuously.

Measured on a septum in a cavity against mode matching (``tests/mindelec/test_conformal_sheets.py``), the
rim moved across a cell in sixteenths at 4 and 8 cells per mm: the sheet acts -0.077 to -0.067 and -0.039
to -0.035 cells longer than drawn in TM (``E`` along the rim), 0.0056 to 0.0093 and 0.0020 to 0.0039 in
TE, whose placement the TM table gave; the offset halving with the cell is second-order convergence. At
fixed rims the resonance's error falls as the cell's square (orders 1.9-2.0 in TM from 4 to 32 cells per
mm, 2.4-2.7 in TE from 4 to 16). Before the placement the sheet acted -0.065 to 0.063 (TM) and 0.010 to
0.132 cells (TE) longer, the staircase -0.34 to 0.58 and 0.23 to 1.07 cells. The time step is shortened as
for solids (:func:`~mindelec.fdtd.conformal.time_step_factor`):
0.78-0.82 of Yee's with off-grid plates and a wire, 0.70 and 0.81 with a patch and its feed line over a
ground plane on 64^3 and 100^3 grids, where the set-up takes 1.0-1.6 s and 3.5-4 s more and the step
costs the staircase's within the noise (1,300 and 2,200 corrected faces; float32, one thread).
"""

import math

import torch

from .grid import component_axis
from .materials import PEC, AxialConductivity, PECSheet

#: a rim's factors reach this many cells from it (tapering linearly to 1)
RIM_REACH = 1.0

#: free rims are placed (:func:`placed_rim`) on sheets at least this many cells across them
PLACED_WIDTH = 2.0

#: the elements a sheet's cover is computed for lie within this many cells of its rectangle along every
#: axis (an element a cell long reaches half a cell; a placed rim lies inside the drawn one)
_COVER_REACH = 1.5

#: Where a free rim is placed (module docstring): a rim that the covers and factors place ``RIM_OFFSETS``
#: cells past the last node line on its sheet acts ``RIM_EXCESS`` cells further out than that (a sheet
#: that much longer). Measured on the septum against mode matching (TM, ``E`` along the rim), extrapolated
#: from 16 and 32 cells per mm to zero cell size; it stops short of the offsets beyond 0.92, where the
#: crossed element's merged or held-zero share makes the rim act discontinuously.
RIM_OFFSETS = (
    0.0, 0.03125, 0.0625, 0.09375, 0.125, 0.15625, 0.1875, 0.21875, 0.25, 0.28125, 0.3125, 0.34375,
    0.375, 0.40625, 0.4375, 0.46875, 0.5, 0.53125, 0.5625, 0.59375, 0.625, 0.65625, 0.6875, 0.71875,
    0.75, 0.78125, 0.8125, 0.84375, 0.875, 0.8828125, 0.890625, 0.8984375, 0.90625, 0.9140625, 0.921875,
)
RIM_EXCESS = (
    0.0679, 0.0717, 0.0737, 0.0739, 0.0721, 0.0689, 0.0644, 0.0586, 0.0521, 0.0452, 0.0377, 0.0304,
    0.0234, 0.0168, 0.0109, 0.0061, 0.0024, 0.0001, -0.0005, 0.0006, 0.004, 0.0097, 0.0178, 0.0288,
    0.0426, 0.0594, 0.0792, 0.1015, 0.1255, 0.1314, 0.1374, 0.1434, 0.1493, 0.1546, 0.1599,
)


def sheet_cover(structure, grid, points, axes, structures=None):
    """The fraction of each element (the E edges or H faces at ``points`` ``(n, d)`` (m), one cell along
    ``axes``) that a sheet covers: the exact overlap with the zero-thickness rectangle that
    :func:`~mindelec.fdtd.pec_sheet` records (edges and faces lying in its plane, the rim's included), or
    whether the node lies in the structure's shape for a sheet without one (float64, ``(n,)``). Given all
    the simulation's ``structures``, its free rims are where :func:`placed_rim` puts them."""
    sheet = structure.medium
    if sheet.center is None:
        return (structure.geometry._margin(points) > 0).to(torch.float64)
    # only elements within _COVER_REACH cells of the rectangle can meet it (its rims are placed inward)
    extents = torch.tensor([_extent(sheet, axis) for axis in range(grid.ndim)], dtype=torch.float64)
    reach = _COVER_REACH * torch.tensor(grid.spacing[: grid.ndim], dtype=torch.float64)
    index = ((points >= extents[:, 0] - reach) & (points <= extents[:, 1] + reach)).all(dim=1).nonzero()[:, 0]
    cover = torch.zeros(points.shape[0], dtype=torch.float64)
    if index.numel():
        cover[index] = _rectangle_cover(structure, grid, points[index], axes, structures)
    return cover


def _rectangle_cover(structure, grid, points, axes, structures):
    """:func:`sheet_cover` of a sheet with a rectangle, at ``points`` ``(n, d)`` (m)."""
    sheet = structure.medium
    cover = torch.ones(points.shape[0], dtype=torch.float64)
    for axis in range(grid.ndim):
        low, high = _extent(sheet, axis)
        if structures is not None:
            low, high = _placed_extent(structure, structures, grid, points, axis)
        spacing, position = grid.spacing[axis], points[:, axis]
        if axis in axes:  # the element spans a cell along this axis
            overlap = (position + spacing / 2).clamp(max=high) - (position - spacing / 2).clamp(min=low)
            fraction = (overlap / spacing).clamp(0.0, 1.0)  # rims within 1e-6 cells of a node: on it
            cover = cover * torch.where(fraction < 1e-6, 0.0, torch.where(fraction > 1 - 1e-6, 1.0, fraction))
        else:  # the element's node must lie in the sheet's extent (on its plane, for a zero extent)
            cover = cover * _within(position, low, high, spacing)
    return cover


def sheets_cover(sheets, grid, points, axes, structures=None):
    """The fraction of each element that the union of the ``sheets`` covers (float64, ``(n,)``):
    :func:`sheet_cover`'s (free rims placed, given all the simulation's ``structures``) where at most one
    sheet covers it in part, else the union's exact share (the element cut at every sheet's bounds, each
    piece covered or not; as pieces of one drawn conductor that abut on the element)."""
    covers = torch.stack([sheet_cover(s, grid, points, axes, structures) for s in sheets])
    union = covers.amax(0)
    shared = ((((covers > 0) & (covers < 1)).sum(0) >= 2) & (union < 1)).nonzero()[:, 0]
    for element in shared.tolist():  # few: where sheets' rims meet within an element
        point = points[element : element + 1]
        extents = [_element_extents(s, structures, grid, point) for s in sheets]
        cuts = []
        for axis in axes:
            middle, half = float(point[0, axis]), grid.spacing[axis] / 2
            bounds = {middle - half, middle + half}
            for extent in extents:
                if extent is not None:
                    bounds.update(b for b in extent[axis] if abs(b - middle) < half)
            cuts.append(torch.tensor(sorted(bounds), dtype=torch.float64))
        pieces = torch.meshgrid(*[(c[1:] + c[:-1]) / 2 for c in cuts], indexing="ij")
        middles = point.repeat(pieces[0].numel(), 1)
        for axis, middle in zip(axes, pieces):
            middles[:, axis] = middle.reshape(-1)
        inside = torch.zeros(middles.shape[0], dtype=torch.float64)
        for structure, extent in zip(sheets, extents):
            if extent is None:
                inside = torch.maximum(inside, sheet_cover(structure, grid, middles, ()))
                continue
            within = torch.ones_like(inside)
            for axis, (low, high) in enumerate(extent):
                within = within * _within(middles[:, axis], low, high, grid.spacing[axis])
            inside = torch.maximum(inside, within)
        sizes = torch.meshgrid(*[c.diff() / grid.spacing[a] for c, a in zip(cuts, axes)], indexing="ij")
        share = float((inside * math.prod(sizes).reshape(-1)).sum())
        union[element] = 1.0 if share > 1 - 1e-9 else share  # pieces that tile the element cover it
    return union


def _element_extents(structure, structures, grid, point):
    """A sheet's extent along each axis for the element at ``point`` ``(1, d)`` (m): ``[(low, high)]``
    (m), its free rims placed (given all the simulation's ``structures``); None for a sheet without a
    rectangle."""
    if structure.medium.center is None:
        return None
    if structures is None:
        return [_extent(structure.medium, axis) for axis in range(grid.ndim)]
    placed = [_placed_extent(structure, structures, grid, point, axis) for axis in range(grid.ndim)]
    return [(float(low[0]), float(high[0])) for low, high in placed]


def placed_rim(position, side, grid, axis):
    """Where the covers and factors put a free rim drawn at ``position`` (m) on ``axis`` (its sheet on the
    rim's ``-side`` side) so that it acts where it is drawn (m): :data:`RIM_OFFSETS` and
    :data:`RIM_EXCESS` inverted, up to 0.16 cells inward."""
    spacing = grid.spacing[axis]
    drawn = side * (position + grid.size[axis] / 2) / spacing  # cells outward from a node line
    acts = [offset + excess for offset, excess in zip(RIM_OFFSETS, RIM_EXCESS)]  # increasing
    line = math.floor(drawn - acts[0])  # the node line the placed rim lies beyond
    remainder = torch.tensor([drawn - line], dtype=torch.float64)
    offset = _interpolate(remainder, torch.tensor(acts, dtype=torch.float64),
                          torch.tensor(RIM_OFFSETS, dtype=torch.float64))
    return side * (line + float(offset)) * spacing - grid.size[axis] / 2


def rim_factors(structures, grid, component, points):
    """The factors (float64, ``(n,)``, 1 away from rims) on the outside fractions of ``component``'s
    elements at ``points`` ``(n, 3)`` (m) from the free rims of the plates among ``structures`` (module
    docstring): elements across a rim, within :data:`RIM_REACH` cells of its placed position, in the
    sheet's plane (E edges across the rim, H faces normal to the sheet) or in the layer of cells beside it
    (E edges normal to the sheet, H faces across the rim)."""
    factors = torch.ones(points.shape[0], dtype=torch.float64)
    axis = component_axis(component)
    for structure in structures:
        others = _other_conductors(structure, structures)
        for rim in _rims(structure, grid):
            if axis != rim[2]:  # parallel to the rim: regular there
                factors = factors * _rim(structure.medium, rim, others, grid, component, points)
    return factors


def _rims(structure, grid):
    """The rims of a plate (a sheet with one zero extent) that may be free: ``(normal, across, along,
    position, side)``, the sheet's normal axis, the rim at ``position`` (m) on axis ``across`` (the sheet
    on its ``-side`` side), running along axis ``along``; rims on the domain's walls (or across a periodic
    boundary) left out."""
    sheet = structure.medium
    if not isinstance(sheet, PECSheet) or sheet.center is None or grid.ndim != 3:
        return
    zero = [a for a in range(3) if sheet.size[a] == 0]
    if len(zero) != 1:  # wires: their ends are not rims of a plate
        return
    normal = zero[0]
    for across in (a for a in range(3) if a != normal):
        for side in (-1.0, 1.0):
            position = sheet.center[across] + side * sheet.size[across] / 2
            if abs(position) < grid.size[across] / 2 - 1e-6 * grid.spacing[across]:
                yield normal, across, 3 - normal - across, position, side


def _other_conductors(structure, structures):
    """The conductors other than ``structure``, and the lumped elements (ports) it may feed."""
    return [s for s in structures if s is not structure and isinstance(s.medium, (PEC, AxialConductivity))]


def _placed_extent(structure, structures, grid, points, axis):
    """The sheet's extent along ``axis`` per element at ``points`` (m, two ``(n,)`` tensors): its free rims
    where :func:`placed_rim` puts them for the elements beside a free stretch of the rim, else drawn."""
    low, high = _extent(structure.medium, axis)
    bounds = {-1.0: torch.full((points.shape[0],), low, dtype=torch.float64),
              1.0: torch.full((points.shape[0],), high, dtype=torch.float64)}
    others = _other_conductors(structure, structures)
    for rim in _rims(structure, grid):
        normal, across, along, position, side = rim
        if across != axis:
            continue
        near = ((points[:, axis] - position).abs() < grid.spacing[axis]).nonzero()[:, 0]
        plane = structure.medium.center[normal]
        beside = points[near].clone()  # the rim's point nearest each element, just inside the sheet's end
        first, last = _extent(structure.medium, along)
        inset = 1e-3 * grid.spacing[along]
        beside[:, along] = beside[:, along].clamp(min(first + inset, last), max(last - inset, first))
        free = ~_touching(others, grid, beside, along, across, normal, position, plane)
        bounds[side][near[free]] = _acting(structure.medium, rim, grid)
    return bounds[-1.0], bounds[1.0]


def _rim(sheet, rim, others, grid, component, points):
    """The factors of one rim of ``sheet`` (:func:`_rims`) for the elements beside its free stretches,
    taken about its placed position (:func:`placed_rim`)."""
    normal, across, along, drawn, side = rim
    in_plane = (component_axis(component) == across) == (component[0] == "E")
    plane = sheet.center[normal]
    layer = (points[:, normal] - plane).abs() / grid.spacing[normal]  # 0: the plane, 1/2: the layer beside
    spacing = grid.spacing[across]
    placed = _acting(sheet, rim, grid)
    outward = side * (points[:, across] - placed) / spacing  # the node's distance past the rim (cells)
    near = (layer - (0.0 if in_plane else 0.5)).abs() < 1e-6
    near &= (outward > -RIM_REACH - 0.5) & (outward < RIM_REACH + 0.5)
    near &= _within(points[:, along], *_extent(sheet, along), grid.spacing[along]) > 0
    index = near.nonzero()[:, 0]
    factors = torch.ones(points.shape[0], dtype=torch.float64)
    if index.numel() == 0:
        return factors
    outward = outward[index]
    if in_plane:  # E across the rim, H normal to the sheet
        start = outward - 0.5  # the element spans outward - 1/2 .. outward + 1/2
        crossing = (start < 0) & (start > -1)
        ratio = _in_plane_ratio(start.clamp(min=0.0))
        taper = (1 - start / RIM_REACH).clamp(0.0, 1.0)
        value = torch.where(crossing, math.sqrt(2), torch.where(start >= 0, 1 + (ratio - 1) * taper, 1.0))
    else:  # E normal to the sheet, H across the rim: the layer of cells beside it
        ratio = _beside_ratio(outward * spacing / grid.spacing[normal])  # offset in element lengths
        value = 1 + (ratio - 1) * (1 - outward.abs() / RIM_REACH).clamp(0.0, 1.0)
    free = ~_touching(others, grid, points[index], along, across, normal, drawn, plane)
    factors[index] = torch.where(free, value, 1.0)
    return factors


def _acting(sheet, rim, grid):
    """Where a free rim of ``sheet`` (:func:`_rims`) is taken to be (m): placed (:func:`placed_rim`) on a
    sheet at least :data:`PLACED_WIDTH` cells across it, else as drawn (on a narrower strip the two rims'
    fields meet within the cells the placement was measured over)."""
    normal, across, along, drawn, side = rim
    if sheet.size[across] < PLACED_WIDTH * grid.spacing[across]:
        return drawn
    return placed_rim(drawn, side, grid, across)


def _interpolate(x, xs, ys):
    """Piecewise-linear ``ys(xs)`` at ``x`` (``xs`` increasing; clamped to its ends)."""
    upper = torch.searchsorted(xs, x).clamp(1, xs.numel() - 1)
    weight = ((x - xs[upper - 1]) / (xs[upper] - xs[upper - 1])).clamp(0.0, 1.0)
    return ys[upper - 1] + weight * (ys[upper] - ys[upper - 1])


def _in_plane_ratio(start):
    """The ``r^(-1/2)`` profile's mean over ``[start, start + 1]`` (cells past the rim) over its value at the
    middle: ``2 (sqrt(s + 1) - sqrt(s)) sqrt(s + 1/2)``; ``sqrt(2)`` at 0, 1 far away."""
    return 2 * (torch.sqrt(start + 1) - torch.sqrt(start)) * torch.sqrt(start + 0.5)


def _beside_ratio(offset):
    """For an element normal to the sheet, from its plane to one length off it at ``offset`` lengths past
    the rim (negative: over the sheet): the mean over it of the singular component normal to the sheet,
    ``Im (w^(-1/2))`` with ``w = offset + i z``, over its value at the middle; ``sqrt(2)`` at the rim."""
    w = offset.to(torch.complex128)
    mean = -2 * (torch.sqrt(w + 1j) - torch.sqrt(w + 0j)).real  # the integral over z of Im(w^(-1/2))
    middle = torch.rsqrt(w + 0.5j).imag
    return mean / middle


def _touching(others, grid, points, along, across, normal, rim, plane):
    """Whether the rim point beside each element (on the rim, at the element's coordinate along it) lies in
    or on another conductor: a sheet continuing this one or meeting it, or a solid (bool, ``(n,)``)."""
    touching = torch.zeros(points.shape[0], dtype=torch.bool)
    if not others:
        return touching
    probe = torch.empty_like(points)
    probe[:, along] = points[:, along]
    probe[:, across] = rim
    probe[:, normal] = plane
    for structure in others:
        medium = structure.medium
        if isinstance(medium, PECSheet) and medium.center is not None:
            inside = torch.ones_like(touching)
            for axis in range(3):
                low, high = _extent(medium, axis)
                inside &= _within(probe[:, axis], low, high, grid.spacing[axis]) > 0
        else:
            tolerance = 1e-6 * min(grid.spacing)
            inside = structure.geometry.contains(probe, tolerance=tolerance)
        touching |= inside
    return touching


def _extent(sheet, axis):
    """The sheet's rectangle along ``axis``: ``(low, high)`` (m)."""
    return sheet.center[axis] - sheet.size[axis] / 2, sheet.center[axis] + sheet.size[axis] / 2


def _within(position, low, high, spacing):
    """1.0 where ``position`` lies in ``[low, high]`` within 1e-6 of ``spacing``, else 0.0."""
    tolerance = 1e-6 * spacing
    return ((position >= low - tolerance) & (position <= high + tolerance)).to(torch.float64)
