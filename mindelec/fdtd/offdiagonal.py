"""The off-diagonal elements of the subpixel-smoothed inverse permittivity (``Simulation(subpixel=True)``).

:mod:`mindelec.fdtd.smoothing` gives each E component the diagonal element of the effective tensor
``eps_eff^-1 = P <eps^-1> + (1 - P) <eps>^-1`` (``P = n n^T``). At a tilted or curved interface the tensor
also couples the components: ``(eps_eff^-1)_cd = n_c n_d (<eps^-1> - 1 / <eps>)``. This module adds these
elements, on the few cells where they are not zero. Measured on a curved interface (the lowest TE resonance
of a dielectric disk in a PEC cavity against a particular-solutions reference,
``tests/mindelec/test_smoothing.py``): the errors drop 3.6-13x below those of the diagonal alone, and the
fitted order rises from 1.0 to 1.25, not to 2 (the average of the other components across the interface,
where they jump, keeps a first-order error, about a tenth of the diagonal's up to 128 cells; Werner and
Cary find first order for their scheme too). A variant with the element taken at each E node, times the
four-point average of the other component, measured order 1.5 on the same disk (12-128 cells), but it is
not symmetric, so the energy argument below does not hold for it; it is not used.

The scheme (symmetric, after Werner and Cary, J. Comput. Phys. 226, 1085 (2007)): the element
``k_cd(p)`` lives on the integer node ``p`` where an ``E_c`` edge pair and an ``E_d`` edge pair meet
(``E_c`` at ``p -+ e_c / 2``, ``E_d`` at ``p -+ e_d / 2``), evaluated over the cell centred on ``p`` as
the diagonal ones are over theirs. After the (diagonal) E update of a step, with ``s_d = (curl H - J)_d``
recovered from each node's increment ``s_d = (E_d^{n+1} - E_d^n) / cb_d``,

    E_c(a) += (dt / eps0) sum_{p next to a} (k_cd(p) / 4) sum_{b next to p} s_d(b),

and the same with ``c`` and ``d`` exchanged. The discrete inverse permittivity is then a symmetric matrix
(the element of a pair ``(a, b)`` is ``k_cd / 4`` of the one node they share), and it stays positive
definite: each node's diagonal element is shared among the coupled corners it belongs to (``t``), and each
``|k_cd(p)|`` is capped so that the corner's block ``[[diag(t_a), k/4], [k/4, diag(t_b)]]`` is (with a
margin of 5 %): ``(k/4)^2 (1/t_a1 + 1/t_a2)(1/t_b1 + 1/t_b2) < 1``. The cap binds only at high contrast
(none of the disk's corners at eps 12, a quarter at eps 50). The leapfrog then conserves a positive energy
(tested to round-off at eps 50). The couplings can raise the largest eigenvalue of the matrix above 1, its
vacuum value, on which the time-step limit rests (1.03-1.06 at eps 12 and 1.10 at eps 50 for the disks of
the tests); runs from random fields over 20000 steps at the default Courant number 0.99 stayed bounded,
but no proof covers it, so a step above the limit that Gershgorin's bound guarantees (the largest row sum
of the matrix: 0.94-0.98 of the Yee limit for those disks) warns and names the Courant number to pass.

Recovering ``s_d`` from the increments includes the CPML corrections, sources and
plane-wave corrections of the step, and costs a gather and a scatter over the coupled nodes only: about
20 small torch operations per step, measured at +270 us per step on a 100^2 TE grid and +470 us on 400^2
(0.3 and 0.8 ms without; one thread, a shared machine), negligible on large 3D grids.

In 3D the same code couples the three pairs (x, y), (x, z), (y, z) on their integer nodes; it is tested
there for agreement between the compiled and torch paths only, not for convergence.

Where the elements are left out (the node keeps its diagonal smoothing): nodes with losses, dispersion or
PEC (``ca != 1``, a polarisation pole, ``cb = 0``), nodes in a design region, E nodes on the PEC walls,
corners whose cell a PEC structure reaches, and corners without both neighbour pairs on the grid (the
first integer node of a non-periodic axis). ``subpixel="diagonal"`` leaves all of them out (the diagonal
smoothing alone); 1D and 2D TM have a single E component and nothing to couple.
"""

import math
import warnings
from dataclasses import dataclass, replace
from itertools import combinations

import torch

from common.units import VACUUM_PERMITTIVITY

from .boundaries import Periodic
from .coefficients import media_mixer
from .grid import E_COMPONENTS, component_axis
from .materials import PEC
from .smoothing import _CHUNK, cell_means, node_points

#: the cap on the coupling, as a fraction of what keeps the inverse-permittivity matrix positive definite
_CAP = 0.95
#: corners where ``|n_c n_d|`` is below this are not coupled (interfaces along the axes)
_NEGLIGIBLE = 1e-6


def check_subpixel(value):
    """``Simulation(subpixel=...)``: False, True (the full tensor) or ``"diagonal"``; else a ValueError."""
    if value is False or value is True or (isinstance(value, str) and value == "diagonal"):
        return value
    raise ValueError(
        f"Simulation subpixel: expected False, True (the full smoothed tensor) or 'diagonal' (its diagonal "
        f"only), got {value!r}"
    )


@dataclass(frozen=True)
class _Pair:
    """The couplings of ``E_first`` and ``E_second`` on ``M`` corners: per corner its two nodes of each
    component (flat indices ``(M, 2)``), ``dt k / (4 eps0)`` ``(M,)``, ``1 / cb`` at the nodes ``(M, 2)``."""

    first: str
    second: str
    first_nodes: torch.Tensor
    second_nodes: torch.Tensor
    coupling: torch.Tensor
    first_scale: torch.Tensor
    second_scale: torch.Tensor


_TENSORS = ("coupling", "first_scale", "second_scale")


class OffDiagonalUpdate:
    """The sparse off-diagonal correction of the E update (module docstring), applied by the Yee stepper.

    Args:
        pairs: per pair of E components with coupled corners, a ``_Pair`` (nodes, couplings, scales).
    """

    def __init__(self, pairs):
        self.pairs = pairs

    @property
    def corners(self):
        """The number of coupled corners (all component pairs)."""
        return sum(pair.coupling.shape[0] for pair in self.pairs)

    def map_tensors(self, function):
        """A copy with ``function`` applied to every coefficient tensor (for the stepper's checkpointing)."""
        return OffDiagonalUpdate(
            [
                replace(pair, **{name: function(getattr(pair, name)) for name in _TENSORS})
                for pair in self.pairs
            ]
        )

    def gather(self, fields):
        """The coupled nodes' E before the step's E update: per pair, ``(first (M, 2), second (M, 2))``."""
        return [
            (fields[p.first].reshape(-1)[p.first_nodes], fields[p.second].reshape(-1)[p.second_nodes])
            for p in self.pairs
        ]

    def apply(self, fields, before, inplace):
        """Add the off-diagonal terms to ``fields`` (E after the step's diagonal update; ``before`` from
        :meth:`gather`); in place if ``inplace``, else the corrected components are new tensors."""
        additions = {}
        for pair, (first_before, second_before) in zip(self.pairs, before):
            first = (fields[pair.first].reshape(-1)[pair.first_nodes] - first_before) * pair.first_scale
            second = (fields[pair.second].reshape(-1)[pair.second_nodes] - second_before) * pair.second_scale
            additions.setdefault(pair.first, []).append((pair.first_nodes, pair.coupling * second.sum(1)))
            additions.setdefault(pair.second, []).append((pair.second_nodes, pair.coupling * first.sum(1)))
        for component, parts in additions.items():
            nodes = torch.cat([n.reshape(-1) for n, _ in parts])
            values = torch.cat([v.unsqueeze(1).expand(-1, 2).reshape(-1) for _, v in parts])
            field = fields[component]
            if inplace:
                field.reshape(-1).index_add_(0, nodes, values)
            else:
                fields[component] = field.reshape(-1).index_add(0, nodes, values).reshape(field.shape)


def off_diagonal_update(simulation, electric):
    """The :class:`OffDiagonalUpdate` of ``simulation`` (``subpixel=True``), or None when nothing couples.

    Args:
        simulation: the :class:`~mindelec.fdtd.Simulation` (grid, media, boundaries, design regions, dt).
        electric: its E coefficients ``{component: (ca, cb, poles)}`` (:mod:`mindelec.fdtd.coefficients`).
    """
    grid = simulation.grid
    components = [c for c in E_COMPONENTS if c in simulation.active and component_axis(c) < grid.ndim]
    if simulation.subpixel is not True or len(components) < 2:
        return None
    mixer = media_mixer(
        grid, simulation.default_medium, simulation.structures, simulation.dtype, simulation.device
    )
    if not mixer.structures:
        return None
    mean, inverse_mean, normals = cell_means(mixer, None)
    anisotropy = inverse_mean - 1 / mean
    reached = _reached_by_conductors(mixer)
    periodic = [isinstance(b, Periodic) for b in simulation.boundaries]
    diagonal, eligible = {}, {}
    for component in components:
        ca, cb, poles = electric[component]
        diagonal[component] = torch.broadcast_to(
            torch.as_tensor(cb, dtype=simulation.dtype, device=simulation.device), grid.shape
        ).reshape(-1)
        eligible[component] = _eligible_nodes(simulation, component, ca, cb, poles, periodic)
    candidates = [
        _corners(pair, normals, anisotropy, reached, eligible, grid.shape, periodic)
        for pair in combinations(components, 2)
    ]
    candidates = [candidate for candidate in candidates if candidate is not None]
    if not candidates:
        return None
    scale = VACUUM_PERMITTIVITY / simulation.dt  # cb = dt / (eps0 eps): the diagonal elements are cb / scale
    shares = _diagonal_shares(candidates, diagonal)
    pairs = []
    for (first, second), nodes, element in candidates:
        # the corner's 4 x 4 block [[diag(t_a), k/4], [k/4, diag(t_b)]] (t: the nodes' diagonal shares) is
        # positive definite when (k/4)^2 (1/t_a1 + 1/t_a2)(1/t_b1 + 1/t_b2) < 1
        inverse_sums = [(1 / shares[c][n]).sum(1) for c, n in zip((first, second), nodes)]
        cap = _CAP * 4 * scale / torch.sqrt(inverse_sums[0] * inverse_sums[1])
        element = torch.maximum(torch.minimum(element, cap), -cap)
        cb_first, cb_second = diagonal[first][nodes[0]], diagonal[second][nodes[1]]
        pairs.append(
            _Pair(first, second, nodes[0], nodes[1], element / (4 * scale), 1 / cb_first, 1 / cb_second)
        )
    _check_time_step(simulation, diagonal, pairs)
    return OffDiagonalUpdate(pairs)


def _check_time_step(simulation, diagonal, pairs):
    """Warn when the time step exceeds the limit the couplings guarantee.

    By Gershgorin's theorem the largest eigenvalue of the coupled inverse-permittivity matrix is at most
    the largest row sum ``cb_a + sum |element|``; the Yee limit rests on the largest diagonal element, so
    a step is guaranteed stable when ``(dt / dt_limit)^2`` times their ratio is at most 1.
    """
    rows = {component: values.abs().clone() for component, values in diagonal.items()}
    for pair in pairs:
        weight = (2 * pair.coupling.abs()).unsqueeze(1).expand(-1, 2).reshape(-1)
        rows[pair.first].index_add_(0, pair.first_nodes.reshape(-1), weight)
        rows[pair.second].index_add_(0, pair.second_nodes.reshape(-1), weight)
    bound = max(float(row.max()) for row in rows.values()) / max(float(d.max()) for d in diagonal.values())
    courant = simulation.dt / simulation.dt_limit
    if courant * courant * bound > 1:
        warnings.warn(
            f"Simulation subpixel=True: the off-diagonal terms raise the bound on the stable time step's "
            f"eigenvalue by a factor {bound:.3g}; the step ({courant:.3g} of the Yee limit) is stable "
            f"for certain up to courant={1 / math.sqrt(bound):.3g} (pass it, or subpixel='diagonal'); "
            f"runs above it have stayed bounded in the tests, with no proof",
            stacklevel=4,
        )


def _corners(pair, normals, anisotropy, reached, eligible, shape, periodic):
    """``(pair, (first nodes (M, 2), second nodes (M, 2)), k (M,))`` of the corners that couple the two
    components of ``pair``, or None."""
    axes = [component_axis(component) for component in pair]
    product = normals[..., axes[0]] * normals[..., axes[1]]
    corners = ((product.abs() > _NEGLIGIBLE) & ~reached).nonzero()
    nodes, valid = zip(*(_neighbours(corners, axis, shape, periodic[axis]) for axis in axes))
    keep = valid[0] & valid[1] & eligible[pair[0]][nodes[0]].all(1) & eligible[pair[1]][nodes[1]].all(1)
    if not bool(keep.any()):
        return None
    corners = corners[keep]
    return pair, (nodes[0][keep], nodes[1][keep]), (anisotropy * product)[tuple(corners.T)]


def _diagonal_shares(candidates, diagonal):
    """Per component, its diagonal ``cb`` (flat) divided among the coupled corners each node belongs to."""
    counts = {component: torch.zeros_like(value) for component, value in diagonal.items()}
    for pair, nodes, _ in candidates:
        for component, index in zip(pair, nodes):
            counts[component].index_add_(
                0, index.reshape(-1), torch.ones_like(index.reshape(-1), dtype=counts[component].dtype)
            )
    return {component: diagonal[component] / counts[component].clamp_min(1) for component in diagonal}


def _reached_by_conductors(mixer):
    """Integer nodes (bool, grid shape) whose cell a PEC structure covers or cuts."""
    grid = mixer.grid
    points = node_points(grid, None)
    reach = 0.5 * sum(grid.spacing[a] ** 2 for a in range(grid.ndim)) ** 0.5
    reached = torch.zeros(points.shape[0], dtype=torch.bool)
    for structure in mixer.structures:
        if isinstance(structure.medium, PEC):
            margin = torch.cat([structure.geometry._margin(chunk) for chunk in points.split(_CHUNK)])
            reached |= margin > -reach
    return reached.reshape(grid.shape).to(mixer.device)


def _eligible_nodes(simulation, component, ca, cb, poles, periodic):
    """``component``'s nodes (flat bool) that may be coupled: lossless, non-dispersive, not PEC, not in a
    design region, not on a PEC wall."""
    grid = simulation.grid
    eligible = torch.ones(grid.shape, dtype=torch.bool, device=simulation.device)
    for condition in [torch.as_tensor(ca) == 1, torch.as_tensor(cb) > 0] + [c3 == 0 for _, _, c3 in poles]:
        eligible &= condition.detach().to(simulation.device)
    for slices in simulation._design_slices:
        eligible[slices] = False
    axis = component_axis(component)
    for a in range(grid.ndim):
        if a != axis and not periodic[a]:
            eligible.narrow(a, 0, 1).fill_(False)
    return eligible.reshape(-1)


def _neighbours(corners, axis, shape, periodic):
    """The E nodes along ``axis`` on either side of each corner (integer-node indices ``(M, 3)``).

    Returns flat indices ``(M, 2)`` (the nodes at ``p - e/2`` and ``p + e/2``, indices ``p - 1`` and ``p``)
    and whether both exist ``(M,)`` (the first is off the grid at ``p = 0`` of a non-periodic axis).
    """
    lower = corners.clone()
    lower[:, axis] -= 1
    valid = lower[:, axis] >= 0
    if periodic:
        lower[:, axis] %= shape[axis]
        valid = torch.ones_like(valid)
    lower[:, axis].clamp_(min=0)

    def flat(index):
        return (index[:, 0] * shape[1] + index[:, 1]) * shape[2] + index[:, 2]

    return torch.stack([flat(lower), flat(corners)], dim=1), valid
