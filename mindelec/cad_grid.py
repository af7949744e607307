"""CAD bodies on an FDTD grid: what each body of a :class:`~mindelec.cad_assembly.Assembly` becomes.

:func:`assembly_structures` (``Assembly.structures(grid)``) turns the bodies into
``mindelec.fdtd.Structure`` objects for a given grid, refusing, naming the file and the body
(``ConfigurationError``), what would vanish or depend on where the grid falls:

* a body smaller than one cell along every axis is refused: as PEC it would vanish (a cell needs to
  be half covered), as a dielectric it would only blur into the averaged cells; refine the cells or map
  it to ``"ignore"``;
* a PEC body no thicker than a cell along one axis (a plate) or two (a pin) becomes a zero-thickness
  sheet or a one-cell wire (:func:`mindelec.fdtd.pec_sheet`; its rims conformal with
  ``Simulation(subpixel=True)``) on the nearest node plane (line) through it, a wire's ends moved to the
  nearest nodes, provided it is an axis-aligned box (sheets are rectangles); another thin PEC shape, or
  a wire shorter than half a cell, is refused. Parts that touch in the CAD still touch on the grid: an
  end that meets another thin part is carried on to that part's node plane when the collapse moved the
  plane beyond it (a 1 mm stub ending at a 1 mm arm's rim, on 1 mm cells, would otherwise stop a cell
  short of the arm: an open circuit); a thin part meeting a PEC *solid* is not adjusted. Plates apart
  in the CAD stay apart on the grid: two plates on one node plane whose facing rims would meet once the
  staircase rounds them (a gap under about a cell and a half: a phone frame's cut) get their rims on the
  node lines one cell apart around the gap's centre; with conformal metal (``conformal=True``) the rims,
  and so the gap, stay as drawn;
* a PEC solid whose walls are no thicker than a cell over more than 1 % of its surface (measured along
  each face's inward normal, :attr:`~mindelec.cad_assembly.Body.wall_thickness`) is refused: a
  conductor takes the E edges of cells more than half covered, so such a wall vanishes or appears
  depending on where the grid falls (a 1 mm frame ring vanished on a 1.5 mm grid and stood on a 1 mm
  one); build it from plates;
* a dielectric thinner than a cell along some axes stays a solid: the sub-cell averaging carries its
  fill fraction.

Structures come in this order (later ones override earlier ones where they overlap): dielectric bodies
by decreasing volume (a part inside another wins), then PEC solids, then PEC sheets and wires.

:func:`drawn_bounds` says where a sheet or wire ends up on the grid (its node plane, its rims or ends),
the design as drawn, for recording beside the design as asked.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from common.errors import ConfigurationError

from . import fdtd
from .cad import require_in_grid
from .cad_materials import IGNORE
from .fdtd.materials import SHEET_MARGIN, PECSheet

__all__ = ["assembly_structures", "drawn_bounds", "equivalent_radius", "wire_radius"]

_BOX_TOLERANCE = 1e-6  # relative volume difference under which a thin body is its bounding box
_CELL_TIE = 1e-6  # a length within this relative distance of a cell counts as one cell
_JOIN_TOLERANCE = 1e-3  # metal parts closer than this fraction of a cell touch
_THIN_AREA = 0.01  # a PEC solid is refused when walls no thicker than a cell cover this much of its surface


def _where(assembly, body) -> str:
    return f"{assembly.path}: body {body.name!r}"


def _mm(values) -> str:
    return " x ".join(f"{1e3 * float(v):.4g}" for v in values)


def assembly_structures(assembly, grid, wires: str = "bare", conformal: bool = False) -> list:
    """The bodies of ``assembly`` as ``mindelec.fdtd.Structure`` objects on ``grid`` (see the module
    docstring); ``Assembly.structures(grid)`` calls this.

    Args:
        assembly: a :class:`~mindelec.cad_assembly.Assembly` loaded with materials.
        grid: a 3D ``mindelec.fdtd.Grid`` (or anything with a ``.grid``): the cells decide which
            bodies are sheets and where those lie; every body must lie inside its domain.
        wires: how a PEC body thinner than a cell along two axes is drawn. ``"bare"``: a line of zeroed
            edges, which acts as a wire of radius 0.2 cells whatever the body's cross-section (so its
            inductance changes with the cells); ``"thin"``: a :class:`~mindelec.fdtd.ThinWire` of the
            cross-section's equivalent radius (:func:`equivalent_radius`; at most
            :data:`~mindelec.fdtd.thin_wire.STABLE_RADIUS` cells), its ends joined
            (``ThinWire(joined=...)``) where they lie on other metal on the grid.
        conformal: whether the simulation cuts metal conformally (``Simulation(subpixel=True)``): sheets'
            rims then stay where the CAD puts them, so a gap between two plates keeps its width instead of
            becoming one cell (the staircase's reopening of gaps that its rounding would close).

    Returns:
        list of ``Structure`` named after their bodies (``structure.name``), ``"ignore"`` bodies
        left out: dielectrics by decreasing volume, then PEC solids, then PEC sheets and wires.

    Raises:
        ConfigurationError: naming the body, for one without a medium, outside the domain, smaller
            than a cell along every axis, or thin, PEC and not an axis-aligned box; for a grid that
            is not 3D.
    """
    grid = getattr(grid, "grid", grid)
    if grid.ndim != 3:
        raise ConfigurationError(f"{assembly.path}: a CAD assembly needs a 3D grid; this one is {grid.ndim}D")
    if wires not in ("bare", "thin"):
        raise ConfigurationError(f"{assembly.path}: wires must be 'bare' or 'thin', got {wires!r}")
    spacing = np.asarray(grid.spacing[:3], dtype=np.float64)
    dielectrics, solids, thin_metal = [], [], []
    for body in assembly.bodies:
        if body.medium is None:
            raise ConfigurationError(
                f"{_where(assembly, body)} has no medium: load the assembly with materials= (a TOML table "
                "or a dict of body names or glob patterns to media)"
            )
        if body.medium == IGNORE:
            continue
        extents = body.extents
        thin = [axis for axis in range(3) if extents[axis] <= spacing[axis] * (1 + _CELL_TIE)]
        if len(thin) == 3:
            raise ConfigurationError(
                f"{_where(assembly, body)} measures {_mm(extents)} mm, smaller than one cell "
                f"({_mm(spacing)} mm) along every axis: it would vanish from the grid (PEC) or only "
                "blur into its cells (dielectric); refine the cells or map it to \"ignore\" in the "
                "materials table"
            )
        require_in_grid(body.geometry, grid, _where(assembly, body))
        if isinstance(body.medium, fdtd.PEC) and thin:
            thin_metal.append((body, thin))
        elif isinstance(body.medium, fdtd.PEC):
            _check_walls(assembly, body, spacing)
            solids.append(fdtd.Structure(body.geometry, body.medium, name=body.name))
        else:
            dielectrics.append((-body.volume, len(dielectrics), body))
    ordered = [
        fdtd.Structure(body.geometry, body.medium, name=body.name) for *_, body in sorted(dielectrics)]
    return ordered + solids + _thin_structures(assembly, thin_metal, solids, grid, wires, conformal)


def _thin_structures(assembly, thin_metal, solids, grid, wires, conformal) -> list:
    """The thin PEC bodies ``thin_metal`` (``(body, thin axes)``) as sheets and wires (see
    :func:`assembly_structures`), joined to each other and to the PEC ``solids``."""
    bounds = [_joined_bounds(body, thin, thin_metal, grid) for body, thin in thin_metal]
    if not conformal:
        _keep_gaps_open(assembly, thin_metal, bounds, grid)
    sheets = [
        _sheet(assembly, body, thin, grid, joined) for (body, thin), joined in zip(thin_metal, bounds)
    ]
    if wires == "thin":
        metal = solids + sheets
        sheets = [
            _thin_wire(assembly, sheet, body, grid, [other for other in metal if other is not sheet])
            if len(thin) == 2 else sheet
            for sheet, (body, thin) in zip(sheets, thin_metal)
        ]
    return sheets


def equivalent_radius(width: float, thickness: float) -> float:
    """The radius (m) of the round wire equivalent to a conductor of rectangular cross-section ``width``
    x ``thickness`` (m): ``(w + t) / 4 (1 + 0.18 t / w)``, ``t <= w``. Exact in both limits of the
    conformal-mapping result (Balanis, *Antenna Theory*, sec. 9.7): a strip's ``w / 4`` and a square's
    ``0.59 w``; between them an interpolation."""
    wide, narrow = max(width, thickness), min(width, thickness)
    return (wide + narrow) / 4 * (1 + 0.18 * narrow / wide)


def wire_radius(width: float, thickness: float, cell: float) -> float:
    """The radius (m) a thin wire of that cross-section (m) takes on cells of ``cell`` (m) across it:
    :func:`equivalent_radius`, at most :data:`~mindelec.fdtd.thin_wire.STABLE_RADIUS` cells."""
    return min(equivalent_radius(width, thickness), fdtd.thin_wire.STABLE_RADIUS * cell)


def _thin_wire(assembly, sheet, body, grid, metal):
    """The wire ``sheet`` (a :func:`_sheet` line of zeroed edges for ``body``) as a
    :class:`~mindelec.fdtd.ThinWire` of the body's equivalent radius. An end whose node lies on another
    structure of ``metal`` (sheets, wires, solids) is joined there; a free end goes to the half-node plane
    nearest the CAD's end (a thin wire's free end lies half a cell beyond its last node)."""
    low, high = drawn_bounds(sheet, grid)
    (axis,) = np.flatnonzero(high - low > 0)
    across = [a for a in range(3) if a != axis]
    extents = body.extents
    cell, step, origin = min(grid.spacing[a] for a in across), grid.spacing[axis], -grid.size[axis] / 2
    radius = wire_radius(extents[across[0]], extents[across[1]], cell)
    ends, joined = [low.copy(), high.copy()], []
    for end, cad_end in zip(ends, (body.bounds[0][axis], body.bounds[1][axis])):
        node = torch.as_tensor(end, dtype=torch.float64)[None]
        touching = any(bool(other.geometry.contains(node)[0]) for other in metal)
        joined.append(touching)
        if not touching:
            end[axis] = origin + (math.floor((cad_end - origin) / step) + 0.5) * step
    if ends[1][axis] - ends[0][axis] < step * (1 + joined.count(False) / 2) * (1 - 1e-6):
        raise ConfigurationError(
            f"{_where(assembly, body)}: as a thin wire on {1e3 * step:.4g} mm cells it spans no Yee edge "
            f"between its ends ({_mm(ends[0])} and {_mm(ends[1])} mm); refine the cells or draw it bare "
            "(wires='bare')")
    cells = tuple(grid.spacing[:3])
    wire = fdtd.ThinWire(tuple(ends[0]), tuple(ends[1]), radius, cells, joined=tuple(joined))
    wire.name = body.name
    return wire


def _check_walls(assembly, body, spacing):
    """Refuse a PEC solid with walls no thicker than a cell (measured along each face's normal)."""
    thickness, area = body.wall_thickness
    normals = np.abs(np.asarray(body.mesh.face_normals, dtype=np.float64))
    cell = normals @ spacing / normals.sum(axis=1)  # the cell along the face's normal
    thin = thickness <= cell * (1 + _CELL_TIE)
    if area[thin].sum() > _THIN_AREA * area.sum():
        raise ConfigurationError(
            f"{_where(assembly, body)} is PEC with walls {1e3 * thickness[thin].min():.4g} mm thick over "
            f"{area[thin].sum() / area.sum():.0%} of its surface, no thicker than the cells "
            f"({_mm(spacing)} mm): a conductor needs a cell more than half covered, so such a wall "
            "vanishes or appears depending on where the grid falls; refine the cells below the wall's "
            "thickness, or build it from axis-aligned plates (each becomes a sheet)"
        )

def _sheet(assembly, body, thin, grid, bounds):
    """A thin PEC box as a :func:`mindelec.fdtd.pec_sheet` on the nearest node plane(s); ``bounds``
    (2, 3) are its own, with the ends that touch other collapsed metal moved onto that metal's nodes."""
    lo, hi = body.bounds
    box_volume = float(np.prod(hi - lo))
    if abs(body.volume - box_volume) > _BOX_TOLERANCE * box_volume:
        raise ConfigurationError(
            f"{_where(assembly, body)} is PEC and thinner than a cell along {[('xyz')[a] for a in thin]} "
            f"({_mm(hi - lo)} mm against cells of {_mm(grid.spacing)} mm), but not an axis-aligned box "
            f"(volume {body.volume:.4g} m^3, its bounding box {box_volume:.4g} m^3): a thin conductor "
            "becomes a zero-thickness sheet, and sheets are rectangles; split it into rectangles in the "
            "CAD model, make it at least a cell thick, or refine the cells"
        )
    lo, hi = bounds
    center, size = (lo + hi) / 2, hi - lo
    for axis in thin:
        center[axis], size[axis] = _node(grid, axis, center[axis]), 0.0
    if len(thin) == 2:  # a wire: its ends on nodes too, so that it meets the sheets it joins
        (axis,) = set(range(3)) - set(thin)
        start, stop = _node(grid, axis, lo[axis]), _node(grid, axis, hi[axis])
        if stop <= start:
            raise ConfigurationError(
                f"{_where(assembly, body)} is a PEC wire {1e3 * size[axis]:.4g} mm long along {'xyz'[axis]}, "
                f"shorter than half a cell ({1e3 * grid.spacing[axis]:.4g} mm): it spans no Yee edge")
        center[axis], size[axis] = (start + stop) / 2, stop - start
    sheet = fdtd.pec_sheet(tuple(center), tuple(size), grid.spacing[:3])
    return fdtd.Structure(sheet.geometry, sheet.medium, name=body.name)


def _node(grid, axis, position) -> float:
    """The integer-node coordinate of ``grid`` nearest ``position`` (m) along ``axis``."""
    spacing = grid.spacing[axis]
    return -grid.size[axis] / 2 + round((position + grid.size[axis] / 2) / spacing) * spacing


def _joined_bounds(body, thin, thin_metal, grid) -> np.ndarray:
    """``body``'s bounds (2, 3; m) with each end along a non-thin axis extended to the node plane of any
    thin PEC part that touches that end and collapses along that axis onto a plane beyond it, so that the
    two still meet once both lie on nodes: a 1 mm stub butting onto a 1 mm arm's rim would otherwise stop
    a cell short of the arm's node line on a 1 mm grid, and a pin at a ground plate's rim could land just
    off the plate. ``thin_metal`` lists ``(body, thin axes)`` of every thin PEC part."""
    lo, hi = body.bounds
    bounds = np.array([lo, hi])
    for axis in set(range(3)) - set(thin):
        tolerance = _JOIN_TOLERANCE * grid.spacing[axis]
        across = [a for a in range(3) if a != axis]
        for other, other_thin in thin_metal:
            other_lo, other_hi = other.bounds
            if other is body or axis not in other_thin or not all(
                other_lo[a] - tolerance <= hi[a] and lo[a] <= other_hi[a] + tolerance for a in across
            ):
                continue
            plane = _node(grid, axis, (other_lo[axis] + other_hi[axis]) / 2)
            for end, sign in ((0, -1), (1, 1)):
                touches = other_lo[axis] - tolerance <= bounds[end][axis] <= other_hi[axis] + tolerance
                if touches and sign * (plane - bounds[end][axis]) > 0:
                    bounds[end][axis] = plane
    return bounds


def drawn_bounds(structure, grid, conformal: bool = False) -> np.ndarray:
    """Where the grid draws a PEC sheet or wire of :func:`assembly_structures` (or
    :func:`mindelec.fdtd.pec_sheet`): ``(2, 3)`` low and high coordinates (m).

    Along its zero extents it lies on its node plane (line), low = high. Along the others its rims are
    where the CAD puts them with conformal cells (``Simulation(subpixel=True)``, which cuts a plate's rim
    between node lines), else on the node lines its staircase reaches (a rim rounds outward from a quarter
    cell past a node line). A wire's ends are on node lines either way, but a
    :class:`~mindelec.fdtd.ThinWire`'s free ends, which lie half a cell beyond its last nodes.

    Args:
        structure: the ``Structure`` of a sheet or wire (its geometry the ``Box`` of ``pec_sheet``).
        grid: the ``mindelec.fdtd.Grid`` (or anything with a ``.grid``) it was made for.
        conformal: whether the simulation cuts metal conformally (``subpixel`` not False).

    Raises:
        ConfigurationError: naming the structure, for one that is not a PEC sheet or wire.
    """
    grid = getattr(grid, "grid", grid)
    if not isinstance(structure.medium, PECSheet):
        raise ConfigurationError(
            f"drawn_bounds: structure {structure.name!r} is not a PEC sheet or wire (its medium is "
            f"{type(structure.medium).__name__})")
    low, high = structure.geometry.lo.numpy().copy(), structure.geometry.hi.numpy().copy()
    spacing = np.asarray(grid.spacing[:3], dtype=np.float64)
    zero = high - low < spacing  # pec_sheet: a cell fraction thick across, extent + half a cell along
    low[zero] = high[zero] = (low[zero] + high[zero]) / 2
    wire = int(zero.sum()) == 2
    for axis in np.flatnonzero(~zero):
        low[axis] += SHEET_MARGIN * spacing[axis]
        high[axis] -= SHEET_MARGIN * spacing[axis]
        if wire or not conformal:
            first, last = _rim_nodes(grid, axis, low[axis], high[axis])
            origin = -grid.size[axis] / 2
            low[axis], high[axis] = origin + first * spacing[axis], origin + last * spacing[axis]
    if isinstance(structure, fdtd.ThinWire):
        axis = structure.axis
        low[axis], high[axis] = structure.start[axis], structure.end[axis]
    return np.array([low, high])


def _rim_nodes(grid, axis, low, high) -> tuple[int, int]:
    """The first and last node lines along ``axis`` that a plate's staircase edges reach for a rim at
    ``low`` and ``high`` (m): :func:`mindelec.fdtd.pec_sheet` widens the plate by a quarter cell and
    covers the edges whose midpoints lie inside, so a rim rounds outward from a quarter cell past a
    node line (a tie counts as covered)."""
    origin, spacing = -grid.size[axis] / 2, grid.spacing[axis]
    first = math.ceil((low - origin) / spacing + SHEET_MARGIN - _CELL_TIE) - 1
    last = math.floor((high - origin) / spacing - SHEET_MARGIN + _CELL_TIE) + 1
    return first, last


def _keep_gaps_open(assembly, thin_metal, bounds, grid):
    """Reopen, in place, the gaps that close on the grid between two plates apart in the CAD.

    Two plates on one node plane (a frame's side cut by a gap, a slot in a ground plane) whose facing
    rims lie less than about a cell and a half apart meet on a node line once the staircase rounds both
    rims outward: the gap is shorted. Here both rims of such a pair go onto the node lines one cell
    apart around the gap's centre (the gap becomes exactly one cell). ``bounds`` are the plates' (2, 3)
    bounds (m) from :func:`_joined_bounds`, in the order of ``thin_metal``.

    Raises:
        ConfigurationError: naming both bodies, when the one-cell gap leaves one of them no cell wide.
    """
    plates = [(index, body, thin[0]) for index, (body, thin) in enumerate(thin_metal) if len(thin) == 1]
    for i, first, normal in plates:
        for j, second, other_normal in plates:
            if other_normal != normal or _node(grid, normal, bounds[i][:, normal].mean()) != _node(
                grid, normal, bounds[j][:, normal].mean()
            ):
                continue
            for axis in set(range(3)) - {normal}:
                (across,) = set(range(3)) - {normal, axis}
                tolerance = _JOIN_TOLERANCE * grid.spacing[axis]
                low_part, high_part = bounds[i], bounds[j]
                gap = high_part[0][axis] - low_part[1][axis]
                overlap = min(low_part[1][across], high_part[1][across]) - max(
                    low_part[0][across], high_part[0][across])
                if gap <= tolerance or overlap <= _JOIN_TOLERANCE * grid.spacing[across]:
                    continue
                first_node = _rim_nodes(grid, axis, *high_part[:, axis])[0]
                if first_node > _rim_nodes(grid, axis, *low_part[:, axis])[1]:
                    continue  # still apart on the grid
                centre = (low_part[1][axis] + high_part[0][axis]) / 2
                below = _node(grid, axis, centre - grid.spacing[axis] / 2)
                low_part[1][axis], high_part[0][axis] = below, below + grid.spacing[axis]
                for part, body in ((low_part, first), (high_part, second)):
                    if part[1][axis] - part[0][axis] < grid.spacing[axis] * (1 - _CELL_TIE):
                        raise ConfigurationError(
                            f"{_where(assembly, body)}: keeping its {1e3 * gap:.4g} mm gap to body "
                            f"{(second if body is first else first).name!r} open on "
                            f"{1e3 * grid.spacing[axis]:.4g} mm cells leaves it less than a cell wide "
                            f"along {'xyz'[axis]}; refine the cells"
                        )
