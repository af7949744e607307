"""Thin wires in 3D FDTD: a PEC wire of a given radius much smaller than a cell (the sub-cell model).

A grid-aligned wire of radius ``a`` along an integer-node line (Umashankar, Taflove and Beker, IEEE Trans.
Antennas Propag. 35, 1248, 1987; Taflove and Hagness, *Computational Electrodynamics*, 3rd ed., sec. 10.4):

* the E edges along the wire are zeroed (a :class:`~mindelec.fdtd.materials.PECSheet` line, as
  :func:`~mindelec.fdtd.pec_sheet` makes), except the feed gaps left open for a
  :class:`~mindelec.fdtd.LumpedPort`;
* the four H components circulating around each wire edge (gap edges included), half a cell off the
  wire, take the near field of a line current into account. Near the wire the circulating H and the radial
  E fall off as ``1/r``; Faraday's law on the cell face between the wire's surface ``r = a`` and the next
  E edge at ``r = d`` (the spacing across) then reads, for ``H_y`` beside a z wire,
  ``dH_y/dt = (1/mu) [f (E_z(d) - E_z(wire)) / d - dE_x/dz]`` with ``f = 2 / ln(d / a)`` instead of the Yee
  ``f = 1``. (A bare zeroed line of edges is this model with ``f = 1``: a wire of equivalent radius
  ``a = d exp(-2) = 0.135 d``.) The step adds ``(dt / mu) (f - 1) (E_z(d) - E_z(wire)) / d`` to those H
  components after the Yee update (:class:`WireCorrections`, a sparse step on the compiled and the torch
  paths alike, differentiable); the radial E components need no change (their ``1/r`` cancels in their
  own update).

The wire's ends: the charge on the last node of the zeroed edges spreads over that node's dual cell, half a
cell beyond the edges, as if the wire went on for half a cell. So the wire's ends lie on half-node planes
(the centres of edges) and its zeroed edges stop half a cell short of each end: a wire of ``n`` cells zeroes
``n - 1`` edges. Measured against a moment-method solution at the same radius and length
(``tests/mindelec/test_thin_wire.py``, a dipole of 22 cells and radius ``L/500``), the model's dipole then
still resonates about 1 % (a quarter of a cell) lower, its resistance at resonance within 0.5 % and its
reactance slope there 12 % below the reference's; without the half-cell rule it would be 6 % (1.2 cells)
longer.
"""

import math

import torch

from common.errors import ConfigurationError

from .grid import AXES, E_COMPONENTS
from .materials import PECSheet, Structure, pec_sheet
from .updates import curl_terms

#: how far (in cells) a wire's length and gaps may sit from whole and half cells
ALIGNMENT_TOLERANCE = 1e-6
#: how far (in cells) a wire may sit from the grid's node lines and planes when a simulation takes it (the
#: grid's spacing, a whole fraction of the domain, may differ slightly from the wire's ``cell_size``)
GRID_TOLERANCE = 1e-3


def _cells(cell_size):
    cells = (
        tuple(float(c) for c in cell_size)
        if isinstance(cell_size, (tuple, list))
        else (float(cell_size),) * 3
    )
    if len(cells) != 3 or not all(math.isfinite(c) and c > 0 for c in cells):
        raise ConfigurationError(f"ThinWire: cell_size must be one positive length or 3 (m), got {cell_size}")
    return cells


class ThinWire(Structure):
    """A straight PEC wire of radius ``radius`` from ``start`` to ``end`` along one grid axis.

    Use it as a structure (``Simulation(structures=[wire, ...])``; a :class:`~mindelec.fdtd.LumpedPort`
    feeding it goes after it, its gap's centre in ``gaps``). See the module docstring for the model.

    Args:
        start, end: the wire's ends (m), 3 coordinates each, differing along one axis only (the wire's
            axis) by a whole number of cells (at least 2); on an integer-node line of the grid across that
            axis and on half-node planes (edge centres) along it. The zeroed edges run from half a cell
            after ``start`` to half a cell before ``end`` (see the module docstring).
        radius: (m), ``0 < radius < cell / 2`` for the cell edges across the wire.
        cell_size: the simulation's cell size (m), one length or ``(dx, dy, dz)``.
        gaps: centres (m) of wire edges left open (not zeroed), e.g. ``[port.center]`` for the one-edge
            gap of a lumped port; the near-field correction still applies around them.

    Attributes:
        axis: index (0-2) of the wire's axis; ``radius``, ``start``, ``end`` as given (ends in order).
        edges: the number of edges between the end nodes, gaps included.
        gaps: the gaps' edge indices (0 the first edge after ``start``).

    Raises:
        ConfigurationError: for a wire not along one axis, a radius outside ``(0, cell / 2)``, or a gap
            off the wire's edges. The grid alignment is checked when a :class:`Simulation` takes the wire.
    """

    def __init__(self, start, end, radius, cell_size, gaps=()):
        start, end = tuple(float(v) for v in start), tuple(float(v) for v in end)
        cells = _cells(cell_size)
        owner = f"ThinWire(start={start}, end={end})"
        if len(start) != 3 or len(end) != 3:
            raise ConfigurationError(f"{owner}: start and end need 3 coordinates each (m)")
        along = [a for a in range(3) if abs(end[a] - start[a]) > ALIGNMENT_TOLERANCE * cells[a]]
        if len(along) != 1:
            raise ConfigurationError(
                f"{owner}: the ends must differ along exactly one axis (a grid-aligned wire)"
            )
        axis = along[0]
        if end[axis] < start[axis]:
            start, end = end, start
        radius = float(radius)
        across = min(cells[a] for a in range(3) if a != axis)
        if not (math.isfinite(radius) and 0 < radius < across / 2):
            raise ConfigurationError(
                f"{owner}: radius {radius:g} m must be positive and below half a cell ({across / 2:g} m); "
                "thicker wires need a PEC structure resolved by the grid"
            )
        self.start, self.end, self.radius, self.axis, self.cells = start, end, radius, axis, cells
        self.owner = owner
        span = (end[axis] - start[axis]) / cells[axis]
        if abs(span - round(span)) > ALIGNMENT_TOLERANCE or round(span) < 2:
            raise ConfigurationError(
                f"{owner}: its length {end[axis] - start[axis]:.6g} m must be a whole number of cells, at "
                f"least 2 (cell {cells[axis]:.6g} m along {AXES[axis]}): the ends lie on half-node planes"
            )
        self.edges = round(span) - 1
        self.first = list(start)
        self.first[axis] += cells[axis] / 2  # the node half a cell inside the start
        self.gaps = [self._gap_edge(tuple(float(v) for v in gap)) for gap in gaps]
        super().__init__(self._zeroed_geometry(), PECSheet())

    def _gap_edge(self, gap):
        """The index of a gap's edge (0 the first edge), its centre checked to be one of the wire's edges'."""
        axis, step = self.axis, self.cells[self.axis]
        if len(gap) != 3:
            raise ConfigurationError(f"{self.owner}: a gap centre needs 3 coordinates (m), got {gap}")
        position = (gap[axis] - self.first[axis]) / step - 0.5
        off_line = any(
            abs(gap[a] - self.start[a]) > ALIGNMENT_TOLERANCE * self.cells[a] for a in range(3) if a != axis
        )
        if (
            off_line
            or abs(position - round(position)) > ALIGNMENT_TOLERANCE
            or not 0 <= round(position) < self.edges
        ):
            raise ConfigurationError(
                f"{self.owner}: gap centre {gap} is not the centre of one of the wire's edges (half a cell "
                f"from a node along {AXES[axis]}, on the wire's line)"
            )
        return round(position)

    def _zeroed_geometry(self):
        """The union of :func:`pec_sheet` wires over the edges between the gaps."""
        axis, step = self.axis, self.cells[self.axis]
        bounds = [-1, *sorted(set(self.gaps)), self.edges]
        geometry = None
        for low, high in zip(bounds[:-1], bounds[1:]):
            if high - low < 2:
                continue
            center, size = list(self.first), [0.0, 0.0, 0.0]
            center[axis] += (low + 1 + high) / 2 * step
            size[axis] = (high - low - 1) * step
            piece = pec_sheet(center, size, self.cells).geometry
            geometry = piece if geometry is None else geometry | piece
        if geometry is None:
            raise ConfigurationError(f"{self.owner}: the gaps leave no edge of the wire to zero")
        return geometry

    def __repr__(self):
        return f"ThinWire(start={self.start}, end={self.end}, radius={self.radius:g}, gaps={self.gaps})"


def _node_index(grid, position, a, owner, what):
    """The integer-node index of ``position`` (m) along axis ``a``, checked to be on a node."""
    cells = (position + grid.size[a] / 2) / grid.spacing[a]
    if abs(cells - round(cells)) > GRID_TOLERANCE:
        raise ConfigurationError(
            f"{owner}: its {what} {AXES[a]} = {position:.6g} m is not on an integer node of the grid "
            f"(spacing {grid.spacing[a]:.6g} m); thin wires run along the grid's node lines"
        )
    return round(cells)


class WireCorrections:
    """The near-field corrections of the H components around the thin wires of a simulation.

    Built from the grid and the structures; per (H component, E component along a wire), index tensors of
    the corrected H nodes and of the E edges one node ahead of them across the wire, and the factor
    ``(f - 1) sign / d`` per node (float64). :meth:`apply` adds ``ch factor (E[ahead] - E[h])`` to an H field
    after its Yee update (the E edge at the H node's own index is the one behind it).

    Raises:
        ConfigurationError: for a wire off the grid's node lines, too close to the domain's walls, in a
            non-3D simulation, or closer than two cells to another wire (their corrections would overlap).
    """

    def __init__(self, grid, structures):
        wires = [s for s in structures if isinstance(s, ThinWire)]
        self.entries = {}
        if wires and grid.ndim != 3:
            raise ConfigurationError(
                f"{wires[0]!r}: thin wires need a 3D simulation, this one is {grid.ndim}D"
            )
        rows = {}
        for wire in wires:
            for key, row in self._wire_rows(grid, wire):
                rows.setdefault(key, []).append(row)
        for (component, source), parts in rows.items():
            columns = [torch.cat(column) for column in zip(*parts)]
            self.entries[component, source] = (tuple(columns[0:3]), tuple(columns[3:6]), columns[6])
        self._check_overlaps(grid, wires)

    def _check_overlaps(self, grid, wires):
        """Refuse an H node corrected twice (two wires side by side)."""
        for component in {component for component, _ in self.entries}:
            nodes = torch.cat(
                [
                    (h[0] * grid.shape[1] + h[1]) * grid.shape[2] + h[2]
                    for (name, _), (h, _, _) in self.entries.items()
                    if name == component
                ]
            )
            if len(torch.unique(nodes)) != len(nodes):
                raise ConfigurationError(
                    f"{wires!r}: two thin wires share an {component} node around them; keep wires at least "
                    "two cells apart (ends meeting along one line are fine)"
                )

    def _wire_rows(self, grid, wire):
        """Per H component circulating around ``wire``: ``((component, E source), row)``, ``row`` the 7
        columns ``(H index x3, index x3 of the E edge ahead along the difference's axis, factor)``; the E
        edge behind has the H node's index."""
        owner, w = repr(wire), wire.axis
        line = [
            _node_index(grid, wire.first[a], a, owner, "line" if a != w else "start + half a cell")
            for a in range(3)
        ]
        last = line[w] + wire.edges
        along = torch.arange(line[w], last)
        if any(not 1 <= line[a] <= grid.shape[a] - 2 for a in range(3) if a != w) or last > grid.shape[w] - 1:
            raise ConfigurationError(f"{owner}: keep the wire at least one cell away from the domain's walls")
        source = "E" + AXES[w]
        for d in (a for a in range(3) if a != w):
            if not grid.spacing[d] / 2 > wire.radius:
                raise ConfigurationError(
                    f"{owner}: radius {wire.radius:g} m is not below half the cell along {AXES[d]}"
                )
            radius_factor = 2.0 / math.log(grid.spacing[d] / wire.radius) - 1.0
            component = "H" + AXES[3 - w - d]
            sign = next(
                s for src, axis, s in curl_terms(component, E_COMPONENTS, 3) if src == source and axis == d
            )
            factor = radius_factor * sign / grid.spacing[d]
            for offset in (0, -1):  # the H node on the + side of the wire, then on the - side
                index = [torch.full_like(along, line[a]) for a in range(3)]
                index[w] = along
                h = list(index)
                h[d] = h[d] + offset
                ahead = list(h)
                ahead[d] = h[d] + 1
                yield (component, source), (*h, *ahead, torch.full(along.shape, factor, dtype=torch.float64))

    def __bool__(self):
        return bool(self.entries)

    def apply(self, field, component, coefficient, electric):
        """Add the corrections of ``component`` to ``field`` (its H after the Yee update, in place).

        Args:
            field: the H component's tensor (grid shape); modified in place (a clone in differentiable runs).
            component: its name, e.g. ``"Hy"``.
            coefficient: ``ch = dt / mu`` there, a float or a grid-shape tensor.
            electric: ``{E component: tensor}``, the E fields the H update read (``E^n``).
        """
        for (name, source), (h, ahead, factor) in self.entries.items():
            if name != component:
                continue
            h, ahead = (tuple(i.to(field.device) for i in index) for index in (h, ahead))
            values = electric[source]
            scale = factor.to(device=field.device, dtype=field.dtype)
            scale = scale * (coefficient[h] if isinstance(coefficient, torch.Tensor) else coefficient)
            field.index_put_(h, scale * (values[ahead] - values[h]), accumulate=True)
