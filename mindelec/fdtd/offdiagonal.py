"""The off-diagonal elements of the subpixel-smoothed inverse permittivity (``Simulation(subpixel=True)``).

:mod:`mindelec.fdtd.smoothing` gives each E component the diagonal element of the effective tensor
``eps_eff^-1 = P <eps^-1> + (1 - P) <eps>^-1`` (``P = n n^T``; ``<eps^-1>`` over the node's edge, ``<eps>``
over its dual face). At a tilted or curved interface the tensor also couples the components:
``(eps_eff^-1)_cd = n_c n_d (<eps^-1> - 1 / <eps>)``. This module adds these elements, on the few nodes
where they are not zero. With them the lowest TE resonance of a dielectric disk in a PEC cavity converges
at second order against a particular-solutions reference (``tests/mindelec/test_smoothing.py``: error
times N^2 between 0.22 and 0.48 over 12-128 cells per side, fitted order 1.83; the diagonal alone is first
order, 22x worse at 128 cells).

The scheme: each ``E_c`` node ``a`` carries its element ``k_cd(a)``, from its own means and normal. The
finite-integration reading of the tensor (:mod:`mindelec.fdtd.smoothing`) couples ``E_c(a)`` to the mean of
``D_d`` over the four ``E_d`` nodes ``b`` around it, ``k_cd(a) / 4`` each, which is not symmetric. The
symmetric version used here gives the pair ``(a, b)`` the mean of its two elements,
``K_ab = (k_cd(a) + k_dc(b)) / 8`` (on the semi-discrete disk problem, 12-128 cells, the non-symmetric form
converges at order 2.0-2.2 with errors up to 2.2x smaller, this one at order 1.8-1.9). Each pair ``(a, b)`` of
neighbours shares one integer node ``p`` (``E_c`` at ``p -+ e_c / 2``, ``E_d`` at ``p -+ e_d / 2``): the
pairs are stored per corner, a ``2 x 2`` block each. After the (diagonal) E update of a step, with
``s_d = (curl H - J)_d`` recovered from each node's increment ``s_d = (E_d^{n+1} - E_d^n) / cb_d``,

    E_c(a) += (dt / eps0) sum_{b next to a} K_ab s_d(b),

and the same with ``c`` and ``d`` exchanged. The discrete inverse permittivity is then a symmetric matrix,
and it stays positive definite: each node's diagonal element is shared among the coupled corners it
belongs to (``t``), and each corner's block is scaled down where needed so that
``[[diag(t_a), K], [K^T, diag(t_b)]]`` is (with a margin of 5 %: the largest singular value of
``diag(t_a)^-1/2 K diag(t_b)^-1/2`` at most 0.95). The cap binds only at high contrast (on the disks of the
tests, not at eps 50, at some corners at eps 200). The leapfrog then conserves a positive energy (tested
to round-off at eps 200). The couplings can raise the largest eigenvalue of the matrix above 1, its vacuum
value, on which the time-step limit rests (1.003-1.010 for eps 12-5000 on the disks of the tests); no proof
covers the default Courant number 0.99 then, so a step above the limit that Gershgorin's bound guarantees
(the largest row sum of the matrix) warns and names the Courant number to pass.

Recovering ``s_d`` from the increments includes the CPML corrections, sources and
plane-wave corrections of the step, and costs a gather and a scatter over the coupled nodes only: about
20 small torch operations per step, measured at +110 us per step on a 100^2 TE grid with a disk and
+140 us on 400^2 (50 and 280 us without; float32, one thread), negligible on large 3D grids.

In 3D the same code couples the three pairs (x, y), (x, z), (y, z) on their integer nodes. Tested there:
a cylinder along each axis, periodic along it, gives the 2D disk's resonance to 1e-10 (each pair once, with
the 3D edges and square faces), and the compiled and torch paths agree. Convergence at a surface curved in
two directions (a sphere) has no exact reference in the tests.

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

from common.errors import ConfigurationError
from common.units import VACUUM_PERMITTIVITY

from .boundaries import Periodic
from .coefficients import media_mixer
from .grid import E_COMPONENTS, component_axis, flat_index
from .materials import PEC
from .smoothing import _CHUNK, edge_face_means, node_points

#: the cap on the coupling, as a fraction of what keeps the inverse-permittivity matrix positive definite
_CAP = 0.95
#: node elements ``|k_cd|`` below this are left out (interfaces along the axes)
_NEGLIGIBLE = 1e-6


def check_subpixel(value):
    """``Simulation(subpixel=...)``: False, True (the full tensor) or ``"diagonal"``; else a ValueError."""
    if value is False or value is True or (isinstance(value, str) and value == "diagonal"):
        return value
    raise ConfigurationError(
        f"Simulation subpixel: expected False, True (the full smoothed tensor) or 'diagonal' (its diagonal "
        f"only), got {value!r}"
    )


@dataclass(frozen=True)
class _Pair:
    """The couplings of ``E_first`` and ``E_second`` on ``M`` corners: per corner its two nodes of each
    component (flat indices ``(M, 2)``), the coupling ``dt K_ab / eps0`` of each of its four node pairs
    ``(M, 2, 2)`` (first node, second node), ``1 / cb`` at the nodes ``(M, 2)``."""

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
            additions.setdefault(pair.first, []).append(
                (pair.first_nodes, torch.einsum("mst,mt->ms", pair.coupling, second))
            )
            additions.setdefault(pair.second, []).append(
                (pair.second_nodes, torch.einsum("mst,ms->mt", pair.coupling, first))
            )
        for component, parts in additions.items():
            nodes = torch.cat([n.reshape(-1) for n, _ in parts])
            values = torch.cat([v.reshape(-1) for _, v in parts])
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
    reached = _reached_by_conductors(mixer)
    periodic = [isinstance(b, Periodic) for b in simulation.boundaries]
    diagonal, eligible, anisotropy, normals = {}, {}, {}, {}
    for component in components:
        ca, cb, poles = electric[component]
        diagonal[component] = torch.broadcast_to(
            torch.as_tensor(cb, dtype=simulation.dtype, device=simulation.device), grid.shape
        ).reshape(-1)
        eligible[component] = _eligible_nodes(simulation, component, ca, cb, poles, periodic)
        mean, inverse_mean, normals[component] = edge_face_means(mixer, component)
        anisotropy[component] = torch.broadcast_to(inverse_mean - 1 / mean, grid.shape).reshape(-1)
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
    for (first, second), nodes, elements in candidates:
        # the corner's 4 x 4 block [[diag(t_a), K], [K^T, diag(t_b)]] (t: the nodes' diagonal shares) is
        # positive definite when the largest singular value of diag(t_a)^-1/2 K diag(t_b)^-1/2 is below 1
        weighted = elements / torch.sqrt(
            shares[first][nodes[0]].unsqueeze(2) * shares[second][nodes[1]].unsqueeze(1)
        )
        largest = torch.linalg.matrix_norm(weighted / scale, ord=2)
        elements = elements * torch.clamp(_CAP / largest.clamp_min(1e-300), max=1.0).view(-1, 1, 1)
        cb_first, cb_second = diagonal[first][nodes[0]], diagonal[second][nodes[1]]
        pairs.append(_Pair(first, second, nodes[0], nodes[1], elements / scale, 1 / cb_first, 1 / cb_second))
    _check_time_step(simulation, diagonal, pairs)
    return OffDiagonalUpdate(pairs)


def _check_time_step(simulation, diagonal, pairs):
    """Warn when the time step exceeds the limit the couplings guarantee.

    By Gershgorin's theorem the largest eigenvalue of the coupled inverse-permittivity matrix is at most
    the largest row sum ``cb_a + sum |element|``; the Yee limit rests on the largest diagonal element, so
    a step is guaranteed stable when ``(dt / dt_limit)^2`` times their ratio is at most 1.
    """
    rows = {component: values.detach().abs().clone() for component, values in diagonal.items()}
    for pair in pairs:
        magnitude = pair.coupling.detach().abs()
        rows[pair.first].index_add_(0, pair.first_nodes.reshape(-1), magnitude.sum(2).reshape(-1))
        rows[pair.second].index_add_(0, pair.second_nodes.reshape(-1), magnitude.sum(1).reshape(-1))
    bound = max(float(row.max()) for row in rows.values()) / max(
        float(d.detach().max()) for d in diagonal.values()
    )
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
    """``(pair, (first nodes (M, 2), second nodes (M, 2)), K (M, 2, 2))`` of the corners that couple the
    two components of ``pair``, or None.

    Each node ``a`` of ``E_c`` carries its element ``k_cd(a) = n_c n_d (<1/eps>_edge - 1 / <eps>_face)``;
    the pair ``(a, b)`` of ``E_c`` and ``E_d`` nodes around a corner gets ``(k_cd(a) + k_dc(b)) / 8``.
    """
    axes = [component_axis(component) for component in pair]
    elements = [
        anisotropy[component]
        * (normals[component][..., axes[0]] * normals[component][..., axes[1]]).reshape(-1)
        for component in pair
    ]
    near = torch.zeros(shape, dtype=torch.bool, device=reached.device)
    for element, axis in zip(elements, axes):  # the node i along its axis touches corners i and i + 1
        nonzero = (element.abs() > _NEGLIGIBLE).reshape(shape)
        near |= nonzero | nonzero.roll(1, axis)
    corners = (near & ~reached).nonzero()
    nodes, valid = zip(*(_neighbours(corners, axis, shape, periodic[axis]) for axis in axes))
    keep = valid[0] & valid[1] & eligible[pair[0]][nodes[0]].all(1) & eligible[pair[1]][nodes[1]].all(1)
    if not bool(keep.any()):
        return None
    nodes = (nodes[0][keep], nodes[1][keep])
    coupling = (elements[0][nodes[0]].unsqueeze(2) + elements[1][nodes[1]].unsqueeze(1)) / 8
    return pair, nodes, coupling


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
    return torch.stack([flat_index(lower, shape), flat_index(corners, shape)], dim=1), valid
