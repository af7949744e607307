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

Measured on a septum in a cavity against mode matching (``tests/mindelec/test_conformal_sheets.py``), the
rim moved across a cell in eighths: the sheet acts -0.065 to 0.063 cells (TM, ``E`` along the rim) and
0.010 to 0.132 cells (TE) longer than drawn, the same in cells at 4 and 8 cells per mm (so still first
order, with a constant 3-8x below the staircase's: -0.34 to 0.58 and 0.23 to 1.07 cells; the exact
fractions without the factors gave 0.09-0.32 and 0.15-0.36), and the resonance follows the rim
monotonically. The time step is shortened as for solids (:func:`~mindelec.fdtd.conformal.time_step_factor`):
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


def sheet_cover(structure, grid, points, axes):
    """The fraction of each element (the E edges or H faces at ``points`` ``(n, d)`` (m), one cell along
    ``axes``) that a sheet covers: the exact overlap with the zero-thickness rectangle that
    :func:`~mindelec.fdtd.pec_sheet` records (edges and faces lying in its plane, the rim's included), or
    whether the node lies in the structure's shape for a sheet without one (float64, ``(n,)``)."""
    sheet = structure.medium
    if sheet.center is None:
        return (structure.geometry._margin(points) > 0).to(torch.float64)
    cover = torch.ones(points.shape[0], dtype=torch.float64)
    for axis in range(grid.ndim):
        low, high = _extent(sheet, axis)
        spacing, position = grid.spacing[axis], points[:, axis]
        if axis in axes:  # the element spans a cell along this axis
            overlap = (position + spacing / 2).clamp(max=high) - (position - spacing / 2).clamp(min=low)
            fraction = (overlap / spacing).clamp(0.0, 1.0)  # rims within 1e-6 cells of a node: on it
            cover = cover * torch.where(fraction < 1e-6, 0.0, torch.where(fraction > 1 - 1e-6, 1.0, fraction))
        else:  # the element's node must lie in the sheet's extent (on its plane, for a zero extent)
            cover = cover * _within(position, low, high, spacing)
    return cover


def sheets_cover(structures, grid, points, axes):
    """The fraction of each element that the union of the sheets ``structures`` covers (float64, ``(n,)``):
    :func:`sheet_cover`'s where at most one sheet covers it in part, else the union's exact share (the
    element cut at every sheet's bounds, each piece covered or not; as pieces of one drawn conductor that
    abut on the element)."""
    covers = torch.stack([sheet_cover(s, grid, points, axes) for s in structures])
    union = covers.amax(0)
    shared = ((((covers > 0) & (covers < 1)).sum(0) >= 2) & (union < 1)).nonzero()[:, 0]
    for element in shared.tolist():  # few: where sheets' rims meet within an element
        point = points[element]
        cuts = []
        for axis in axes:
            half = grid.spacing[axis] / 2
            bounds = {float(point[axis]) - half, float(point[axis]) + half}
            for structure in structures:
                if structure.medium.center is not None:
                    bounds.update(b for b in _extent(structure.medium, axis) if abs(b - point[axis]) < half)
            cuts.append(torch.tensor(sorted(bounds), dtype=torch.float64))
        pieces = torch.meshgrid(*[(c[1:] + c[:-1]) / 2 for c in cuts], indexing="ij")
        middles = point.repeat(pieces[0].numel(), 1)
        for axis, middle in zip(axes, pieces):
            middles[:, axis] = middle.reshape(-1)
        inside = torch.stack([sheet_cover(s, grid, middles, ()) for s in structures]).amax(0)
        sizes = torch.meshgrid(*[c.diff() / grid.spacing[a] for c, a in zip(cuts, axes)], indexing="ij")
        share = float((inside * math.prod(sizes).reshape(-1)).sum())
        union[element] = 1.0 if share > 1 - 1e-9 else share  # pieces that tile the element cover it
    return union


def rim_factors(structures, grid, component, points):
    """The factors (float64, ``(n,)``, 1 away from rims) on the outside fractions of ``component``'s
    elements at ``points`` ``(n, 3)`` (m) from the free rims of the plates among ``structures`` (module
    docstring): elements across a rim, within :data:`RIM_REACH` cells of it, in the sheet's plane (E edges
    across the rim, H faces normal to the sheet) or in the layer of cells beside it (E edges normal to the
    sheet, H faces across the rim)."""
    factors = torch.ones(points.shape[0], dtype=torch.float64)
    axis = component_axis(component)
    for index, structure in enumerate(structures):
        sheet = structure.medium
        if not isinstance(sheet, PECSheet) or sheet.center is None or grid.ndim != 3:
            continue
        zero = [a for a in range(3) if sheet.size[a] == 0]
        if len(zero) != 1:  # wires: their ends are not rims of a plate
            continue
        normal = zero[0]
        others = [s for k, s in enumerate(structures)  # conductors, and lumped elements (ports) it feeds
                  if k != index and isinstance(s.medium, (PEC, AxialConductivity))]
        for across in (a for a in range(3) if a != normal):
            along = 3 - normal - across  # the rim runs along this axis
            if axis == along:
                continue  # parallel to the rim: regular there
            for side in (-1.0, 1.0):
                rim = sheet.center[across] + side * sheet.size[across] / 2
                if abs(rim) >= grid.size[across] / 2 - 1e-6 * grid.spacing[across]:
                    continue  # on a wall, across a periodic boundary or outside: not free
                rim = (normal, across, along, rim, side)
                factors = factors * _rim(sheet, rim, others, grid, component, points)
    return factors


def _rim(sheet, rim, others, grid, component, points):
    """The factors of one rim of ``sheet``: ``rim = (normal, across, along, position, side)``, the sheet's
    normal axis, the rim at ``position`` (m) on axis ``across`` (the sheet on its ``-side`` side), running
    along axis ``along``."""
    normal, across, along, rim, side = rim
    in_plane = (component_axis(component) == across) == (component[0] == "E")
    plane = sheet.center[normal]
    layer = (points[:, normal] - plane).abs() / grid.spacing[normal]  # 0: the plane, 1/2: the layer beside
    spacing = grid.spacing[across]
    outward = side * (points[:, across] - rim) / spacing  # the node's distance past the rim (cells)
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
    free = ~_touching(others, grid, points[index], along, across, normal, rim, plane)
    factors[index] = torch.where(free, value, 1.0)
    return factors


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
