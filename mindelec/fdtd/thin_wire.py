"""Thin wires in 3D FDTD: a PEC wire of a given radius much smaller than a cell (the sub-cell model).

A grid-aligned wire of radius ``a`` along an integer-node line, modelled by local material parameters around
it (the approach of Railton, Paul and Dumanli, IEEE Trans. Electromagn. Compat., 2006, and of Asada, Baba et
al., who measured a bare line's equivalent radius as 0.199 cells; the factors are derived here from the
square lattice's Green's function):

* the E edges along the wire are zeroed (a :class:`~mindelec.fdtd.materials.PECSheet` line, as
  :func:`~mindelec.fdtd.pec_sheet` makes), except the feed gaps left open for a
  :class:`~mindelec.fdtd.LumpedPort`;
* around it, the fields fall off as ``1/r`` (a line charge ``q`` and current ``I``). On the grid, the charge
  of a wire node leaves through its four radial E edges (the spokes) and the current is the circulation of
  the four H components around a wire edge. The lattice's potential drop from a node to its four
  neighbours is ``q / (4 eps)``; a coaxial region's from ``r = a`` to ``r`` is ``(q / 2 pi eps) ln(r / a)``;
  with the lattice Green's function ``(1/2 pi)(ln r + gamma + 1.5 ln 2)`` far away, the two agree for the
  spokes' region when the spokes' permittivity is ``eps / s`` and the circulating H's permeability
  ``s mu``, with ``s = (2 / pi) ln(0.955 d / a)`` (:func:`radius_scale`, ``d`` the cell across). A bare
  line of zeroed edges (``s = 1``) is a wire of radius ``0.1985 d`` (:data:`BARE_RADIUS`).
* ``eps mu`` is unchanged, so waves along the wire keep the speed of light and its characteristic
  impedance is that of radius ``a``. So that no update runs faster than the time step allows, the H
  components along the wire at the four corners around each node (which see the spokes) take the
  permeability ``s mu`` too (they vanish for fields symmetric about the wire).
* The ends: the charge on the last node of the zeroed edges spreads over that node's dual cell, half a cell
  beyond the edges, as if the wire went on for half a cell. So the wire's ends lie on half-node planes (the
  centres of edges), its zeroed edges stop half a cell short of each end (a wire of ``n`` cells zeroes
  ``n - 1`` edges), and the axial edge just beyond each end node carries part of its charge.
* The lattice's fringe field around an end adds a capacitance that does not depend on the radius, so it
  lengthens a thin wire electrically by about ``0.04 s`` cells per end (its line capacitance goes as
  ``1 / s``): a dipole's resonance came 0.4-2.2 % short of the moment method's at 16-42 cells and
  ``L/a`` 500-50000, more for thinner wires and coarser cells. The axial edge beyond each end removes it:
  it takes the permittivity ``eps p / s`` and its circulating H the permeability ``s mu / p`` (``eps mu``
  unchanged), with ``p = 1 - END_CORRECTION s``; a wire so thin that ``p`` would fall below
  :data:`END_FLOOR` keeps the floor and warns (its resonance stays short).
* A joined end (``ThinWire(..., joined=...)``) meets another conductor on its end node: a pin standing on a
  ground plane, or joining an arm. Its zeroed edges run to that node, and it has no end correction: the
  charge and current go on into the conductor. The spokes at that node lie in the conductor where it is a
  plane or a line through the node (their update coefficient is zero there, so their correction is too).
  A quarter-wave monopole on a ground plane, its image a dipole, matches the moment method's dipole of
  twice its length (``tests/mindelec/test_monopole.py``).

Each corrected component gets ``(factor - 1) * coefficient * curl`` added after its Yee update
(:class:`WireCorrections`, a sparse step on the compiled and the torch paths alike, differentiable); the
scaled ``eps`` acts on the curl's coefficient ``cb``, exact in a lossless medium around the wire.

Measured against a moment-method solution at the same radius and length
(``tests/mindelec/test_thin_wire.py``): the dipole's resonance within 0.25 % at 16, 22, 30 and 42 cells and
``L/a`` = 500, 5000 and 50000 (0.4-2.2 % short without the end correction), its resistance within 2 %, the
reactance slope there within 1 %.
"""

import math
import warnings

import torch

from common.errors import ConfigurationError

from .grid import AXES, E_COMPONENTS, H_COMPONENTS
from .materials import PECSheet, Structure, pec_sheet
from .updates import curl_terms

#: the equivalent radius (in cells) of a bare line of zeroed edges: the square lattice's Green's function
#: ``(1/2 pi)(ln r + gamma + 1.5 ln 2)`` far away, ``exp(-gamma) / 2^1.5``
BARE_RADIUS = math.exp(-0.5772156649015329) / 2**1.5
#: where (in cells) the four spokes' coaxial region ends: ``BARE_RADIUS exp(pi / 2)`` (the lattice's drop
#: from a node to its neighbours is ``q / 4 eps``, a coaxial one's ``(q / 2 pi eps) ln(r / a)``)
EDGE_RADIUS = BARE_RADIUS * math.exp(math.pi / 2)
#: the end correction ``p = 1 - END_CORRECTION s`` of the axial edge beyond each end (module docstring):
#: the lattice's end capacitance, fitted to the moment method's resonances of dipoles of 22 cells at
#: ``L/a`` = 500, 5000 and 50000 (0.146, 0.170, 0.145 each) and checked at 16, 30 and 42 cells
END_CORRECTION = 0.15
#: the smallest ``p``: below it (``s > 6``, radii under about 8e-5 cells) the end correction is partial
END_FLOOR = 0.1
#: the largest radius (in cells) whose runs were checked to stay bounded with the time step of
#: :func:`time_step_factor` (``tests/mindelec/test_thin_wire.py``): thicker wires are modelled at this radius
#: where a caller chooses the radius for a CAD body (:func:`mindelec.cad_grid.assembly_structures`)
STABLE_RADIUS = 0.36
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
            axis); on an integer-node line of the grid across that axis. Along it, a free end lies on a
            half-node plane (an edge centre: the zeroed edges stop half a cell before it, see the module
            docstring) and a joined end on a node plane; the end nodes are at least one edge apart.
        radius: (m), ``0 < radius < cell / 2`` for the cell edges across the wire.
        cell_size: the simulation's cell size (m), one length or ``(dx, dy, dz)``.
        gaps: centres (m) of wire edges left open (not zeroed), e.g. ``[port.center]`` for the one-edge
            gap of a lumped port; the near-field correction still applies around them.
        joined: ``(at start, at end)``: whether that end meets another conductor on its end node (a pin
            standing on a ground plane, or joining an arm): the wire's charge and current go on into that
            conductor, so the end correction is left out there (free ends keep it).

    Attributes:
        axis: index (0-2) of the wire's axis; ``radius``, ``start``, ``end``, ``joined`` as given (ends in
            order, ``joined`` with them).
        edges: the number of edges between the end nodes, gaps included.
        gaps: the gaps' edge indices (0 the first edge after ``start``).

    Raises:
        ConfigurationError: for a wire not along one axis, a radius outside ``(0, cell / 2)``, ends off
            their planes, or a gap off the wire's edges. The grid alignment is checked when a
            :class:`Simulation` takes the wire.
    """

    def __init__(self, start, end, radius, cell_size, gaps=(), joined=(False, False)):
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
        joined = tuple(joined)
        if len(joined) != 2 or not all(isinstance(flag, bool) for flag in joined):
            raise ConfigurationError(f"{owner}: joined must be two booleans (at start, at end), got {joined}")
        if end[axis] < start[axis]:
            start, end, joined = end, start, joined[::-1]
        radius = float(radius)
        across = min(cells[a] for a in range(3) if a != axis)
        if not (math.isfinite(radius) and 0 < radius < across / 2):
            raise ConfigurationError(
                f"{owner}: radius {radius:g} m must be positive and below half a cell ({across / 2:g} m); "
                "thicker wires need a PEC structure resolved by the grid"
            )
        self.start, self.end, self.radius, self.axis, self.cells = start, end, radius, axis, cells
        self.joined, self.owner = joined, owner
        free = joined.count(False)
        edges = (end[axis] - start[axis]) / cells[axis] - free / 2
        if abs(edges - round(edges)) > ALIGNMENT_TOLERANCE or round(edges) < 1:
            planes = {2: "both ends on half-node planes", 1: "one end on a half-node plane, the joined one "
                      "on a node plane", 0: "both (joined) ends on node planes"}[free]
            raise ConfigurationError(
                f"{owner}: its length {end[axis] - start[axis]:.6g} m must be a whole number of cells plus "
                f"{free / 2:g}, at least {1 + free / 2:g} (cell {cells[axis]:.6g} m along {AXES[axis]}): "
                f"{planes}"
            )
        self.edges = round(edges)
        self.first = list(start)
        if not joined[0]:
            self.first[axis] += cells[axis] / 2  # the node half a cell inside a free start
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

    def end_nodes(self):
        """The coordinates (m) of the wire's first and last nodes (the zeroed edges and gaps between)."""
        last = list(self.first)
        last[self.axis] += self.edges * self.cells[self.axis]
        return tuple(self.first), tuple(last)

    def meets(self, other) -> bool:
        """Whether a joined end of this wire lies on ``other`` (a :class:`ThinWire`): on its line, between
        its end nodes, ends included (a pin standing on a stub at a corner)."""
        (low, high), axis = other.end_nodes(), other.axis
        tolerance = [ALIGNMENT_TOLERANCE * cell for cell in self.cells]
        for node, joined in zip(self.end_nodes(), self.joined):
            on_line = all(abs(node[a] - low[a]) <= tolerance[a] for a in range(3) if a != axis)
            along = low[axis] - tolerance[axis] <= node[axis] <= high[axis] + tolerance[axis]
            if joined and on_line and along:
                return True
        return False

    def __repr__(self):
        joined = f", joined={self.joined}" if any(self.joined) else ""
        ends = f"start={self.start}, end={self.end}"
        return f"ThinWire({ends}, radius={self.radius:g}, gaps={self.gaps}{joined})"


def radius_scale(spacing, radius):
    """``s = (2 / pi) ln(EDGE_RADIUS * spacing / radius)``: the factor on the permeability of the H
    circulating around a wire of ``radius`` (m) and the divisor of its spokes' permittivity, ``spacing`` (m)
    the cell across; 1 at the bare line's radius ``BARE_RADIUS * spacing``."""
    return 2.0 / math.pi * math.log(EDGE_RADIUS * spacing / radius)


def time_step_factor(structures) -> float:
    """The factor on the time step that the thin wires among ``structures`` need: ``sqrt(s)`` for the
    smallest scale ``s < 1`` (a wire thicker than the bare line, ``BARE_RADIUS`` cells: its circulating H
    takes the permeability ``s mu`` and updates faster than the lattice's), else 1. Without it a wire of
    0.36 cells' radius blew up within 512 steps at the default Courant number; with it 4,000 steps ran."""
    scales = [radius_scale(min(wire.cells[a] for a in range(3) if a != wire.axis), wire.radius)
              for wire in structures if isinstance(wire, ThinWire)]
    return math.sqrt(min(1.0, *scales)) if scales else 1.0


def end_factor(scale, owner="ThinWire"):
    """``p = 1 - END_CORRECTION s`` of a wire end (module docstring), ``scale`` its :func:`radius_scale`;
    at least :data:`END_FLOOR`, with a warning when the floor cuts the correction short."""
    factor = 1.0 - END_CORRECTION * scale
    if factor < END_FLOOR:
        warnings.warn(
            f"{owner}: so thin a wire (s = {scale:.3g}) needs an end correction p = {factor:.3g}, below the "
            f"floor {END_FLOOR}: it lengthens each end electrically by about "
            f"{0.25 * (END_FLOOR - factor):.2f} cells (a dipole's resonance comes short by that)",
            stacklevel=3,
        )
    return max(factor, END_FLOOR)


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
    """The sub-cell corrections around the thin wires of a simulation (see the module docstring).

    Per corrected component, the indices of its corrected nodes, a factor per node and the curl terms of its
    update: :meth:`apply` adds ``factor * coefficient * curl`` at those nodes after the Yee update, so that
    the four H components circulating around each wire edge see the permeability ``s mu`` and the four
    radial E edges (spokes) at each wire node the permittivity ``eps / s``.

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
        for number, wire in enumerate(wires):
            for component, row in self._wire_rows(grid, wire):
                rows.setdefault(component, []).append((*row, torch.full_like(row[-1], number)))
        junctions = torch.tensor([[a is b or a.meets(b) or b.meets(a) for b in wires] for a in wires])
        for component, parts in rows.items():
            columns = [torch.cat(column) for column in zip(*parts)]
            index, factor = self._merged(grid, wires, component, columns, junctions)
            active = H_COMPONENTS if component[0] == "E" else E_COMPONENTS
            terms = [
                (source, axis, sign / grid.spacing[axis])
                for source, axis, sign in curl_terms(component, active, 3)
            ]
            self.entries[component] = (index, factor, terms)

    @staticmethod
    def _merged(grid, wires, component, columns, junctions):
        """The rows' indices and factors, one row per node. A node two wires correct alike and from the
        same place (two wires meeting end to end along one line: the edge between their ends) is kept once;
        a node around a junction (wires of which one has a joined end on the other, ``junctions[a, b]``:
        a pin meeting a stub at a corner) takes the mean of the wires' factors; any other node corrected
        twice is refused (two wires side by side)."""
        *index, factor, role, owner = columns
        nodes = (index[0] * grid.shape[1] + index[1]) * grid.shape[2] + index[2]
        unique, inverse = torch.unique(nodes, return_inverse=True)
        first = torch.full(unique.shape, len(nodes), dtype=torch.long).scatter_reduce(
            0, inverse, torch.arange(len(nodes)), "amin"
        )
        alike = (factor == factor[first][inverse]) & (role == role[first][inverse])
        if not bool((alike | junctions[owner, owner[first][inverse]]).all()):
            raise ConfigurationError(
                f"{wires!r}: two thin wires share an {component} node around them; keep wires at least "
                "two cells apart (ends meeting along one line, of one radius, and wires joined at a corner "
                "with joined=... are fine)"
            )
        count = torch.zeros(unique.shape, dtype=torch.float64).index_add_(0, inverse, torch.ones_like(factor))
        total = torch.zeros(unique.shape, dtype=torch.float64).index_add_(0, inverse, factor)
        return tuple(column[first] for column in index), total / count

    def _wire_rows(self, grid, wire):
        """Per corrected component around ``wire``: ``(component, row)``, ``row`` the 5 columns ``(index x3,
        factor, role)``: the circulating H at each edge (gaps included) and the spokes at each node, on both
        sides of the wire across each of the two other axes."""
        owner, w = repr(wire), wire.axis
        first = "start" if wire.joined[0] else "start + half a cell"
        line = [_node_index(grid, wire.first[a], a, owner, "line" if a != w else first) for a in range(3)]
        last = line[w] + wire.edges
        if any(not 1 <= line[a] <= grid.shape[a] - 2 for a in range(3)) or last > grid.shape[w] - 2:
            raise ConfigurationError(f"{owner}: keep the wire at least one cell away from the domain's walls")
        across = [a for a in range(3) if a != w]
        scales = {}
        for d in across:
            if not grid.spacing[d] / 2 > wire.radius:
                raise ConfigurationError(
                    f"{owner}: radius {wire.radius:g} m is not below half the cell along {AXES[d]}"
                )
            scales[d] = radius_scale(grid.spacing[d], wire.radius)
        edges, nodes = torch.arange(line[w], last), torch.arange(line[w], last + 1)
        # the axial edges just beyond the free ends: eps p / s, their circulating H s mu / p
        ends = torch.tensor([edge for edge, joined in zip((line[w] - 1, last), wire.joined) if not joined])
        mean = (scales[across[0]] + scales[across[1]]) / 2
        end = end_factor(mean, owner) if len(ends) else 1.0
        rows = [("H", edges, {d: 1.0 / scales[d] - 1.0 for d in across}),
                ("E", nodes, {d: scales[d] - 1.0 for d in across})]
        if len(ends):
            yield "E" + AXES[w], self._row(line, w, ends, {}, mean / end - 1.0)
            rows.insert(1, ("H", ends, {d: end / scales[d] - 1.0 for d in across}))
        for d in across:
            for field, along, factors in rows:
                component = field + AXES[3 - w - d] if field == "H" else field + AXES[d]
                for offset in (0, -1):  # the node on the + side of the wire, then on the - side
                    yield component, self._row(line, w, along, {d: offset}, factors[d])
        axial = 2.0 / (scales[across[0]] + scales[across[1]]) - 1.0
        for first in (0, -1):
            for second in (0, -1):
                offsets = dict(zip(across, (first, second)))
                yield "H" + AXES[w], self._row(line, w, nodes, offsets, axial)

    @staticmethod
    def _row(line, w, along, offsets, factor):
        """``(index x3, factor, role)`` of the nodes ``along`` axis ``w`` on the wire's ``line``, shifted by
        ``offsets`` ({axis: cells}) across it; ``role`` tells the node's place around a wire along ``w``."""
        index = [torch.full_like(along, line[a] + offsets.get(a, 0)) for a in range(3)]
        index[w] = along
        role = 27 * w + sum((offsets.get(a, 0) + 1) * 3**a for a in range(3))
        return (*index, torch.full(along.shape, factor, dtype=torch.float64), torch.full_like(along, role))

    def __bool__(self):
        return bool(self.entries)

    def apply(self, field, component, coefficient, fields):
        """Add the corrections of ``component`` to ``field`` (after its Yee update, in place).

        Args:
            field: the component's tensor (grid shape); modified in place (a clone in differentiable runs).
            component: its name, e.g. ``"Hy"``.
            coefficient: the curl's coefficient of its update, ``dt / mu`` (H) or ``cb`` (E; ``dt / eps``
                in a lossless medium), a float or a grid-shape tensor.
            fields: ``{component: tensor}``, the fields the update read (``E^n`` for H, ``H^{n+1/2}`` for E).
        """
        if component not in self.entries:
            return
        index, factor, terms = self.entries[component]
        index = tuple(i.to(field.device) for i in index)
        shift = 1 if component[0] == "H" else -1  # forward differences for H, backward for E
        curl = 0.0
        for source, axis, weight in terms:
            values = fields[source]
            neighbour = list(index)
            neighbour[axis] = index[axis] + shift
            difference = values[tuple(neighbour)] - values[index]
            curl = curl + weight * (difference if shift == 1 else -difference)
        scale = factor.to(device=field.device, dtype=field.dtype)
        scale = scale * (coefficient[index] if isinstance(coefficient, torch.Tensor) else coefficient)
        field.index_put_(index, scale * curl, accumulate=True)
