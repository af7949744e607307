"""Non-bonded interactions: Lennard-Jones and Coulomb, with the semantics of OpenMM's ``NonbondedForce``.

Every pair of atoms ``i < j`` that is neither excluded nor an exception interacts through::

    E_LJ(r)   = 4 eps_ij ((sigma_ij / r)^12 - (sigma_ij / r)^6) * S(r)
    sigma_ij  = (sigma_i + sigma_j) / 2,  eps_ij = sqrt(eps_i eps_j)     (Lorentz-Berthelot)
    S(r)      = 1 - 10 x^3 + 15 x^4 - 6 x^5,  x = (r - r_s) / (r_c - r_s)  for r_s < r < r_c
                (only with ``switch_distance`` r_s; otherwise S = 1)

and a Coulomb term ``f q_i q_j g(r)`` (``f`` = 1/(4 pi eps0) =
:data:`common.units.COULOMB_MD` = 138.93545764438198 kJ/mol nm/e^2, OpenMM 8.6's value) that
depends on ``method``:

========================  =====================================  ====================================
``method``                ``g(r)`` for ``r < r_c`` (0 beyond)    OpenMM equivalent
========================  =====================================  ====================================
``"nocutoff"``            ``1/r`` for all pairs, no box          ``NoCutoff``
``"reaction_field"``      ``1/r + k_rf r^2 - c_rf``              ``CutoffNonPeriodic`` (box ``None``) or
                                                                 ``CutoffPeriodic`` (with a box)
``"cutoff"``              ``1/r - 1/r_c``                        the same with reaction-field
                                                                 dielectric 1 (``k_rf = 0``)
``"ewald"``, ``"pme"``    ``erfc(alpha r)/r`` + reciprocal sum   ``Ewald``, ``PME``
========================  =====================================  ====================================

with ``k_rf = (eps_rf - 1) / ((2 eps_rf + 1) r_c^3)`` and ``c_rf = 3 eps_rf / ((2 eps_rf + 1) r_c)``.
Lennard-Jones is truncated at ``r_c`` (not shifted) for every method except ``"nocutoff"``.
Ewald and PME add the reciprocal-space sum (:mod:`mindsponge.forcefield.ewald`), the self
energy ``-f alpha/sqrt(pi) sum_i q_i^2`` and, for every excluded pair and every exception
pair, ``-f q_i q_j erf(alpha r)/r`` (minimum image), which removes what the reciprocal sum
counted for them. As in OpenMM, excluded pairs get no reaction-field term.

**Exceptions** (OpenMM ``NonbondedForce`` exceptions with non-zero parameters, e.g. scaled 1-4
pairs) replace the normal interaction of their pair (they are excluded from it) by::

    f qq_ij / r + 4 eps_ij ((sigma_ij / r)^12 - (sigma_ij / r)^6)

with their own ``qq_ij``, ``sigma_ij``, ``eps_ij``, without cutoff, switching or reaction field,
and without periodic images (OpenMM's default; ``exceptions_periodic=True`` matches
``setExceptionsUsePeriodicBoundaryConditions(True)``). Exceptions with all-zero parameters are
plain ``exclusions``.

**Long-range dispersion correction** (with a box, any method but ``"nocutoff"``): ``C / V``
with OpenMM's coefficient (``NonbondedForceImpl::calcDispersionCorrection``, including the
switching-function integral), computed once from the particle parameters; it ignores
exclusions and exceptions, as OpenMM does, and is a constant with respect to the parameters.

**Named components** (:meth:`Nonbonded.energy_terms`), each ``()`` kJ/mol:

- ``"lennard_jones"``: LJ of all listed pairs within the cutoff, plus the LJ part of exceptions.
- ``"coulomb_direct"``: the direct-space Coulomb of pairs within the cutoff (``g(r)`` above), plus
  the Coulomb part of exceptions.
- ``"coulomb_reciprocal"`` (Ewald/PME): the reciprocal-space sum plus the self energy
  ``-f alpha/sqrt(pi) sum_i q_i^2`` plus, for a system with net charge ``Q``, the energy of
  its neutralising background ``-f pi Q^2 / (2 V alpha^2)``. This is exactly what OpenMM
  reports for the force group given to ``NonbondedForce.setReciprocalSpaceForceGroup``
  (OpenMM puts the self and background energies there).
- ``"coulomb_exclusions"`` (Ewald/PME, when there are excluded or exception pairs): the
  ``-f q_i q_j erf(alpha r)/r`` corrections of all excluded and exception pairs.
- ``"dispersion_correction"`` (periodic, when enabled): ``C / V``.

OpenMM's direct-space part of the ``NonbondedForce`` (its own force group) equals
``lennard_jones + coulomb_direct + coulomb_exclusions + dispersion_correction``.

**Forces.** By default energies and forces come from one pass: pair terms keep the per-pair
force factors and scatter them only when a gradient is asked for (a custom
:class:`torch.autograd.Function`), and PME interpolates its forces from the grid, so
``torch.autograd.grad(E, positions)`` costs little more than the energy. These analytic
gradients are first derivatives with respect to positions only. When the forces themselves
must be differentiable (``create_graph=True``: force matching, Hessians), the backward pass
recomputes the energy from differentiable operations and differentiates that (slower, same
values). With ``analytic_forces=False``, or automatically when a parameter or the box requires
grad, the energy is always built from differentiable operations (parameter gradients).

**Compiled kernels.** For CPU tensors with analytic forces the heavy parts run as C++
kernels (:mod:`mindsponge._kernels`, compiled on first use by :mod:`common.extensions`,
about a minute once per machine): the direct-space sum over the neighbour list in
compressed rows (``neighbor_forces``: per-atom parameters combined in the kernel, minimum
image on the fly, so a rebuild needs no per-pair preparation; each row's neighbours are
gathered into contiguous buffers and the LJ and Coulomb energies and forces computed in
SIMD lanes, real-space Ewald ``erfc`` in float32 from the Numerical Recipes Chebyshev fit,
relative error below 1.2e-7, and from libm in float64; energies accumulated in float64,
per-thread force buffers), the exclusion and exception corrections (``pair_forces``, with a
cubic Hermite ``erfc`` table), the cell-list search, and PME charge spreading and force
gathering. Everything else (CUDA, autograd through the
energy, ``analytic_forces=False``, ``compiled=False``, ``MINDSCIENCE_NO_EXTENSIONS=1``, no
compiler) uses the pure torch code, which gives the same values to round-off; the tests
compare both paths with each other and with OpenMM's Reference platform.

**Performance notes** (``benchmarks/md_energy.py``: TIP3P, PME, 0.9 nm cutoff, float32,
2 threads, energy + forces, best of 5 alternating rounds against OpenMM's CPU platform on
2 threads; shared 2-core machine, load average about 1.8 during the run)::

                                    3,378 atoms (691k pairs)     24,144 atoms (4.97M pairs)
    OpenMM CPU                       7.1 ms                        51.6 ms
    pure torch path                 38.1 ms  (0.19x)              381 ms   (0.14x)
    compiled kernels                 7.7 ms  (0.92x)               55.7 ms  (0.93x)
      PME (spread, FFT, gather)       2.0 ms  (torch: 7.5 ms)       19 ms   (torch: 59 ms)
    neighbour-list build            ~10 ms   (torch: 150 ms)       ~80 ms   (torch: 1.4 s)

(before the compressed-row kernel: 17.5 ms and 85 ms, 0.58x and 0.66x.)

In dynamics (rigid water, 2 fs) the list is rebuilt about every 6 steps, so a step costs
about one evaluation plus a sixth of a rebuild. The torch path caches the direct-space pairs
per neighbour-list build with their parameters, their minimum-image lattice shifts (so evaluations need no
rounding) and flat scatter indices, with the Lennard-Jones pairs (non-zero epsilon, only
O-O in TIP3P) first. ``torch.compile`` of the torch pair kernel gave no measurable gain on
the 2-core machine for a ~70 s compile, so it is not used.

The net PME force is not exactly zero (B-spline interpolation is not translation invariant
on the grid); OpenMM has the same small net force.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from common.errors import ConfigurationError
from common.units import COULOMB_MD
from mindsponge import _kernels, space
from mindsponge.forcefield.base import EnergyTerm
from mindsponge.forcefield.ewald import (
    PMEReciprocal,
    ewald_alpha,
    ewald_kmax,
    ewald_reciprocal,
    pme_grid_size,
)
from mindsponge.neighbors import NeighborList, all_pairs, pair_keys

__all__ = ["Nonbonded", "NonbondedMethodError", "dispersion_coefficient"]

METHODS = ("nocutoff", "cutoff", "reaction_field", "ewald", "pme")
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


class NonbondedMethodError(ConfigurationError):
    """An option that the chosen non-bonded method does not support (e.g. PME without a box)."""


@dataclass(frozen=True)
class _Coulomb:
    """How the Coulomb part of a pair kernel is evaluated.

    kind: ``"plain"`` (1/r), ``"ewald"`` (erfc(alpha r)/r), ``"erf"`` (-erf(alpha r)/r, the
    exclusion correction) or ``"reaction_field"`` (1/r + krf r^2 - crf).
    """

    kind: str
    alpha: float = 0.0
    krf: float = 0.0
    crf: float = 0.0


@dataclass
class _PairSet:
    """Pairs with their parameters; the first ``len(sigma_squared)`` pairs have Lennard-Jones."""

    first: Tensor
    second: Tensor
    charge_products: Tensor  # f q_i q_j, kJ/mol nm
    sigma_squared: Tensor  # nm^2
    epsilon4: Tensor  # 4 eps, kJ/mol
    shifts: Tensor | None = None  # (3, P) lattice vectors added to the displacements, nm
    flat_first: Tensor | None = None  # (3 P,) see _flat_index: a 1-D index_add_ scatters fastest
    flat_second: Tensor | None = None


def _flat_index(atoms: Tensor, n_atoms: int) -> Tensor:
    """``(3 P,)`` indices ``component * N + atom`` into a flattened ``(3, N)`` array."""
    return (torch.arange(3, device=atoms.device)[:, None] * n_atoms + atoms).reshape(-1)


def _lattice_shifts(
    first: Tensor, second: Tensor, box: Tensor, reference: Tensor, list_cutoff: float
) -> Tensor:
    """``(3, P)`` lattice vectors that turn ``reference[second] - reference[first]`` into its
    shortest image (nm): the shifts of a pair set built with a neighbour list of cutoff plus skin
    ``list_cutoff`` (nm). Listed pairs are up to ``list_cutoff`` apart; beyond
    :func:`~mindsponge.space.max_cutoff` (a small box) only :func:`~mindsponge.space.nearest_image`
    finds the image that comes within the cutoff before the next rebuild."""
    columns = reference.T.contiguous()  # (3, N): gathers and rounding on contiguous rows
    direct = (columns.index_select(1, second) - columns.index_select(1, first)).T
    image = space.minimum_image if list_cutoff <= space.max_cutoff(box) else space.nearest_image
    return (image(direct, box.detach()) - direct).T.contiguous()


def _unwrap_to_reference(positions: Tensor, box: Tensor, reference: Tensor) -> Tensor:
    """``positions`` moved by lattice vectors back next to ``reference`` (the positions of the
    last neighbour-list build), so that the pair shifts of that build stay minimum images."""
    moved = positions.detach() - reference.to(positions.dtype)
    return positions - (moved - space.minimum_image(moved, box.detach()))


def _lj_first(first, second, charge_products, sigma, epsilon) -> _PairSet:
    """Order pairs so that those with non-zero epsilon come first (LJ is evaluated only on them),
    each group sorted by its first atom (for locality of the gathers and scatters)."""
    active = epsilon != 0
    n_lj = int(active.sum())
    in_order = n_lj == len(first) and bool((first[1:] >= first[:-1]).all())  # e.g. a neighbour list
    if len(first) > 0 and not in_order:
        order = torch.argsort((~active).long() * (int(first.max()) + 1) + first, stable=True)
        first, second, charge_products = first[order], second[order], charge_products[order]
        sigma, epsilon = sigma[order[:n_lj]], epsilon[order[:n_lj]]
    return _PairSet(first, second, charge_products, sigma * sigma, 4.0 * epsilon)


class _PairResult:
    """Energies of a pair kernel and the per-pair force factors to build its gradient lazily."""

    def __init__(self, energies, pairs: _PairSet, displacement, coulomb_factor, lj_factor):
        self.energies = energies
        self.pairs, self.displacement = pairs, displacement
        self.coulomb_factor, self.lj_factor = coulomb_factor, lj_factor

    def gradient(self, grad_lj: Tensor, grad_coulomb: Tensor, n_atoms: int) -> Tensor:
        """dE/dx for ``grad_lj * E_LJ + grad_coulomb * E_Coulomb``, ``(N, 3)``."""
        factor = grad_coulomb * self.coulomb_factor
        n_lj = len(self.lj_factor)
        factor[:n_lj] += grad_lj * self.lj_factor
        force_on_second = self.displacement * factor  # (3, P)
        pairs = self.pairs
        flat_first = pairs.flat_first if pairs.flat_first is not None else _flat_index(pairs.first, n_atoms)
        flat_second = (pairs.flat_second if pairs.flat_second is not None
                       else _flat_index(pairs.second, n_atoms))
        flat = force_on_second.reshape(-1)
        gradient = flat.new_zeros(3 * n_atoms)
        gradient.index_add_(0, flat_first, flat)
        gradient.index_add_(0, flat_second, flat, alpha=-1.0)
        return gradient.view(3, n_atoms).T


class _CompiledPairResult:
    """Energies and gradients of a pair kernel from the compiled kernel (same interface as
    :class:`_PairResult`)."""

    def __init__(self, energies, gradients: Tensor):
        self.energies = energies
        self.gradients = gradients  # (2, N, 3): dE_LJ/dx, dE_Coulomb/dx

    def gradient(self, grad_lj: Tensor, grad_coulomb: Tensor, n_atoms: int) -> Tensor:
        """dE/dx for ``grad_lj * E_LJ + grad_coulomb * E_Coulomb``, ``(N, 3)``."""
        return torch.add(grad_lj * self.gradients[0], self.gradients[1], alpha=grad_coulomb)


_COULOMB_KINDS = {"plain": 0, "reaction_field": 1, "ewald": 2, "erf": 3}


def _compiled_pair_kernel(kernels, positions: Tensor, box: Tensor | None, pairs: _PairSet, coulomb: _Coulomb,
                          cutoff: float | None, switch_distance: float | None) -> _CompiledPairResult:
    """:func:`_pair_kernel` with ``keep_factors`` in one pass of the compiled kernel (CPU, no graph)."""
    shifts = pairs.shifts
    if shifts is None and box is not None:  # small pair sets (exclusions, exceptions): shifts now
        direct = positions.index_select(0, pairs.second) - positions.index_select(0, pairs.first)
        shifts = (space.minimum_image(direct, box) - direct).T
    dtype = positions.dtype  # parameters may have another dtype than the positions
    energies, gradients = kernels.pair_forces(
        positions, pairs.first, pairs.second, positions.new_zeros(0) if shifts is None else shifts.to(dtype),
        pairs.charge_products.to(dtype), pairs.sigma_squared.to(dtype), pairs.epsilon4.to(dtype),
        -1.0 if cutoff is None else cutoff,
        -1.0 if switch_distance is None else switch_distance, _COULOMB_KINDS[coulomb.kind], coulomb.alpha,
        coulomb.krf, coulomb.crf)
    energies = energies.to(positions.dtype)
    return _CompiledPairResult((energies[0], energies[1]), gradients)


def _pair_kernel(positions: Tensor, box: Tensor | None, pairs: _PairSet, coulomb: _Coulomb,
                 cutoff: float | None, switch_distance: float | None, keep_factors: bool, kernels=None):
    """Lennard-Jones and Coulomb energies of a set of pairs.

    Displacements ``(3, P)`` are ``positions[second] - positions[first] + pairs.shifts`` when the pair set
    carries lattice shifts (then ``positions`` must be unwrapped consistently, see
    :meth:`Nonbonded._direct_pairs`), else the minimum image in ``box`` (or none without a box).

    Returns ``(e_lj, e_coulomb)`` built from differentiable operations when ``keep_factors`` is
    false, else a :class:`_PairResult` (computed without a graph) that can produce forces, from the
    compiled ``kernels`` (:mod:`mindsponge._kernels`) when given.
    """
    if keep_factors and kernels is not None:
        return _compiled_pair_kernel(kernels, positions, box, pairs, coulomb, cutoff, switch_distance)
    # components along the rows, (3, P): contiguous per component, no reductions over a size-3 axis
    columns = positions.T.contiguous()
    displacement = columns.index_select(1, pairs.second) - columns.index_select(1, pairs.first)
    if pairs.shifts is not None:
        displacement = displacement + pairs.shifts
    elif box is not None:
        displacement = space.minimum_image(displacement.T, box).T
    dx, dy, dz = displacement.unbind(0)
    r2 = torch.addcmul(torch.addcmul(dx * dx, dy, dy), dz, dz)
    charge_products, epsilon4 = pairs.charge_products, pairs.epsilon4
    n_lj = len(epsilon4)
    if cutoff is not None:  # zero parameters beyond the cutoff: energies and forces vanish there
        inside = r2 < cutoff * cutoff
        charge_products = torch.where(inside, charge_products, 0.0)
        epsilon4 = torch.where(inside[:n_lj], epsilon4, 0.0)
    inverse_r = torch.rsqrt(r2)
    inverse_r2 = inverse_r * inverse_r
    f_coulomb = None
    if coulomb.kind == "plain":
        e_coulomb = charge_products * inverse_r
        if keep_factors:
            f_coulomb = e_coulomb * inverse_r2
    elif coulomb.kind == "reaction_field":
        e_coulomb = charge_products * (inverse_r + coulomb.krf * r2 - coulomb.crf)
        if keep_factors:
            f_coulomb = charge_products * (inverse_r * inverse_r2 - 2.0 * coulomb.krf)
    else:
        alpha = coulomb.alpha
        alpha_r = alpha * (r2 * inverse_r)
        if coulomb.kind == "ewald":
            e_coulomb = charge_products * torch.special.erfc(alpha_r) * inverse_r
        else:  # "erf": minus the long-range part
            e_coulomb = -charge_products * torch.special.erf(alpha_r) * inverse_r
        if keep_factors:  # both: -(dE/dr)/r = (E + qq 2 alpha/sqrt(pi) exp(-alpha^2 r^2)) / r^2
            gaussian = (alpha * _TWO_OVER_SQRT_PI) * torch.exp(-alpha_r * alpha_r)
            f_coulomb = (e_coulomb + charge_products * gaussian) * inverse_r2
    lj_inverse_r2 = inverse_r2[:n_lj]
    s6 = (pairs.sigma_squared * lj_inverse_r2) ** 3
    e_lj = epsilon4 * (s6 * s6 - s6)
    f_lj = epsilon4 * (12.0 * s6 * s6 - 6.0 * s6) * lj_inverse_r2 if keep_factors else None
    if switch_distance is not None:
        r_lj = r2[:n_lj] * inverse_r[:n_lj]
        width = cutoff - switch_distance
        x = ((r_lj - switch_distance) / width).clamp(0.0, 1.0)
        switch = 1.0 + x * x * x * (-10.0 + x * (15.0 - 6.0 * x))
        if keep_factors:
            switch_derivative = x * x * (-30.0 + x * (60.0 - 30.0 * x)) / width
            f_lj = f_lj * switch - e_lj * switch_derivative * inverse_r[:n_lj]
        e_lj = e_lj * switch
    accumulate = torch.float64 if r2.dtype == torch.float32 else r2.dtype
    energies = (e_lj.sum(dtype=accumulate).to(r2.dtype), e_coulomb.sum(dtype=accumulate).to(r2.dtype))
    if not keep_factors:
        return energies
    return _PairResult(energies, pairs, displacement, f_coulomb, f_lj)


class _AnalyticEnergies(torch.autograd.Function):
    """Energies whose gradient with respect to positions is supplied analytically.

    ``parts`` is a list of ``(kind, payload)``: ``("pair", _PairResult)`` contributes two
    energies (LJ, Coulomb) with lazily scattered forces; ``("forces", (energy, forces))``
    contributes one energy with precomputed forces. ``recompute(positions)`` returns the same
    energies built from differentiable operations: it is used only when the gradient itself
    must be differentiable (``create_graph=True``).
    """

    @staticmethod
    def forward(ctx, positions, parts, recompute):
        ctx.parts, ctx.recompute = parts, recompute
        ctx.n_atoms = len(positions)
        ctx.save_for_backward(positions)
        outputs = []
        for kind, payload in parts:
            outputs.extend(payload.energies if kind == "pair" else (payload[0],))
        return tuple(output.clone() for output in outputs)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():  # create_graph: differentiate the autograd formulation
            (positions,) = ctx.saved_tensors
            outputs = ctx.recompute(positions)
            (gradient,) = torch.autograd.grad(outputs, positions, grads, create_graph=True)
            return gradient, None, None
        gradient = None
        index = 0
        for kind, payload in ctx.parts:
            if kind == "pair":
                part = payload.gradient(grads[index], grads[index + 1], ctx.n_atoms)
                index += 2
            else:
                part = -grads[index] * payload[1]
                index += 1
            gradient = part if gradient is None else gradient + part
        return gradient, None, None


def dispersion_coefficient(sigma: Tensor, epsilon: Tensor, cutoff: float,
                           switch_distance: float | None = None) -> float:
    """OpenMM's long-range dispersion coefficient ``C`` (kJ/mol nm^3); the correction is ``C / V``.

    Atoms are grouped in classes of equal ``(sigma, epsilon)``; with the Lorentz-Berthelot
    combination of each pair of classes, ``C = 8 pi N^2 (<eps sigma^12>/(9 r_c^9) -
    <eps sigma^6>/(3 r_c^3) + <switch integral>)``, averages over the ``N (N + 1) / 2`` pairs
    (``NonbondedForceImpl::calcDispersionCorrection``).

    Args:
        sigma: ``(N,)`` nm. epsilon: ``(N,)`` kJ/mol. cutoff: nm.
        switch_distance: nm, or ``None`` without switching.
    """
    pairs = np.stack([sigma.detach().cpu().double().numpy(), epsilon.detach().cpu().double().numpy()], 1)
    classes, counts = np.unique(pairs, axis=0, return_counts=True)
    counts = counts.astype(np.float64)
    class_sigma = 0.5 * (classes[:, None, 0] + classes[None, :, 0])
    class_epsilon = np.sqrt(classes[:, None, 1] * classes[None, :, 1])
    weight = np.outer(counts, counts)
    np.fill_diagonal(weight, 0.0)
    weight = 0.5 * weight + np.diag(counts * (counts + 1) / 2)
    sigma6 = class_sigma**6
    total12 = (weight * class_epsilon * sigma6 * sigma6).sum()
    total6 = (weight * class_epsilon * sigma6).sum()
    total_switch = 0.0
    if switch_distance is not None:
        integral = (_switch_integral(cutoff, switch_distance, cutoff, class_sigma)
                    - _switch_integral(switch_distance, switch_distance, cutoff, class_sigma))
        total_switch = (weight * class_epsilon * integral).sum()
    n_atoms = float(len(sigma))
    n_interactions = n_atoms * (n_atoms + 1) / 2
    return float(8 * n_atoms * n_atoms * math.pi * (total12 / n_interactions / (9 * cutoff**9)
                                                   - total6 / n_interactions / (3 * cutoff**3)
                                                   + total_switch / n_interactions))


def _switch_integral(r, rs, rc, sigma):
    """Indefinite integral of the switched LJ tail (OpenMM's ``NonbondedForceImpl::evalIntegral``)."""
    a = 1.0 / (rc - rs)
    a2, a3 = a * a, a * a * a
    sig6 = sigma**6
    rs2, rs3 = rs * rs, rs**3
    r2, r3, r4, r5, r6, r9 = r**2, r**3, r**4, r**5, r**6, r**9
    return sig6 * a3 * ((
        sig6 * (
            + rs3 * 28 * (6 * rs2 * a2 + 15 * rs * a + 10)
            - r * rs2 * 945 * (rs2 * a2 + 2 * rs * a + 1)
            + r2 * rs * 1080 * (2 * rs2 * a2 + 3 * rs * a + 1)
            - r3 * 420 * (6 * rs2 * a2 + 6 * rs * a + 1)
            + r4 * 756 * (2 * rs * a2 + a)
            - r5 * 378 * a2)
        - r6 * (
            + rs3 * 84 * (6 * rs2 * a2 + 15 * rs * a + 10)
            - r * rs2 * 3780 * (rs2 * a2 + 2 * rs * a + 1)
            + r2 * rs * 7560 * (2 * rs2 * a2 + 3 * rs * a + 1))
    ) / (252 * r9)
        - math.log(r) * 10 * (6 * rs2 * a2 + 6 * rs * a + 1)
        + r * 15 * (2 * rs * a2 + a)
        - r2 * 3 * a2)


def _vector(values, name: str, n: int | None) -> Tensor:
    tensor = torch.as_tensor(values)
    if not tensor.is_floating_point():
        tensor = tensor.to(torch.get_default_dtype())
    if tensor.ndim != 1 or (n is not None and len(tensor) != n):
        expected = f"({n},)" if n is not None else "(X,)"
        raise ValueError(f"{name} must be a {expected} tensor, got shape {tuple(tensor.shape)}")
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return tensor


def _index_pairs(values, name: str, n_atoms: int) -> Tensor:
    if values is None:
        return torch.zeros((0, 2), dtype=torch.long)
    pairs = torch.as_tensor(values)
    if pairs.numel() == 0:
        return torch.zeros((0, 2), dtype=torch.long)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.is_floating_point():
        raise ValueError(f"{name} must be an (E, 2) integer tensor of atom index pairs, got "
                         f"{tuple(pairs.shape)} {pairs.dtype}")
    if bool((pairs < 0).any()) or bool((pairs >= n_atoms).any()):
        raise ValueError(f"{name} holds atom indices outside [0, {n_atoms})")
    if bool((pairs[:, 0] == pairs[:, 1]).any()):
        raise ValueError(f"{name} pairs an atom with itself")
    return pairs.long()


class Nonbonded(EnergyTerm):
    """Lennard-Jones and Coulomb interactions, identical to OpenMM's ``NonbondedForce``.

    See the module docstring for the energy expressions and the named components.

    Args:
        charges: ``(N,)`` tensor, e.
        sigma: ``(N,)`` tensor, nm.
        epsilon: ``(N,)`` tensor, kJ/mol.
        method: ``"pme"``, ``"ewald"``, ``"reaction_field"``, ``"cutoff"`` or ``"nocutoff"``.
        cutoff: r_c, nm (ignored by ``"nocutoff"``).
        switch_distance: r_s in ``[0, r_c)``, nm, to switch LJ off smoothly; ``None`` for a plain
            truncation (OpenMM's ``setUseSwitchingFunction``). Ignored by ``"nocutoff"``, as OpenMM.
        dispersion_correction: add the long-range LJ correction (periodic methods only).
        ewald_tolerance: OpenMM's ``ewaldErrorTolerance``; gives ``alpha``, the PME grid and the
            Ewald ``kmax`` when those are not given.
        alpha: Ewald splitting parameter, 1/nm, or ``None`` (from the tolerance).
        pme_grid: ``(n_x, n_y, n_z)``, or ``None`` (from the tolerance and the box of each call,
            like OpenMM's ``calcPMEParameters``, fixed at the first call).
        pme_order: B-spline order of PME.
        ewald_kmax: ``(kx, ky, kz)`` for ``"ewald"``, or ``None`` (from the tolerance, like
            OpenMM's ``calcEwaldParameters``, fixed at the first call).
        reaction_field_dielectric: eps_rf of ``"reaction_field"``.
        exclusions: ``(E, 2)`` long tensor of pairs with no LJ and no Coulomb interaction.
        exceptions: ``(X, 2)`` long tensor of exception pairs (they are excluded from the
            normal interaction and computed with their own parameters, see module docstring).
        exception_charge_products: ``(X,)`` tensor, e^2.
        exception_sigma: ``(X,)`` tensor, nm.
        exception_epsilon: ``(X,)`` tensor, kJ/mol.
        exceptions_periodic: apply the minimum image to exception pairs.
        skin: Verlet skin of the neighbour list, nm.
        analytic_forces: compute forces analytically with the energy (see module docstring).
        compiled: with analytic forces on CPU, use the compiled kernels (:mod:`mindsponge._kernels`:
            pair forces, cell-list build, PME spreading and gathering) when they are available;
            ``False`` always uses the pure torch code (same results to round-off).
        name: name of the term (its components have the fixed names listed above).

    Raises:
        ValueError: inconsistent shapes, unknown method, bad cutoff or switching distance.
        NonbondedMethodError: a periodic method (``"ewald"``, ``"pme"``) called without a box.
    """

    def __init__(self, charges, sigma, epsilon, *, method: str = "pme", cutoff: float = 1.0,
                 switch_distance: float | None = None, dispersion_correction: bool = True,
                 ewald_tolerance: float = 5e-4, alpha: float | None = None,
                 pme_grid: tuple[int, int, int] | None = None, pme_order: int = 5,
                 ewald_kmax: tuple[int, int, int] | None = None,
                 reaction_field_dielectric: float = 78.3, exclusions=None, exceptions=None,
                 exception_charge_products=None, exception_sigma=None, exception_epsilon=None,
                 exceptions_periodic: bool = False, skin: float = 0.1, analytic_forces: bool = True,
                 compiled: bool = True, name: str | None = None):
        super().__init__(name)
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        charges = _vector(charges, "charges", None)
        n_atoms = len(charges)
        sigma = _vector(sigma, "sigma", n_atoms).to(charges.dtype)
        epsilon = _vector(epsilon, "epsilon", n_atoms).to(charges.dtype)
        if bool((epsilon < 0).any()) or bool((sigma < 0).any()):
            raise ValueError("sigma and epsilon must be non-negative")
        if not (isinstance(cutoff, int | float) and cutoff > 0 and math.isfinite(cutoff)):
            raise ValueError(f"cutoff must be a positive number of nm, got {cutoff!r}")
        if method == "nocutoff":
            switch_distance = None
        if switch_distance is not None and not 0.0 <= switch_distance < cutoff:
            raise ValueError(f"switch_distance must lie in [0, cutoff={cutoff}) nm, got {switch_distance!r}")
        self.method = method
        self.cutoff = float(cutoff)
        self.switch_distance = None if switch_distance is None else float(switch_distance)
        self.use_dispersion_correction = bool(dispersion_correction) and method != "nocutoff"
        self.ewald_tolerance = float(ewald_tolerance)
        self.pme_order = int(pme_order)
        self.exceptions_periodic = bool(exceptions_periodic)
        self.analytic_forces = bool(analytic_forces)
        self._compiled = bool(compiled)
        self.register_buffer("charges", charges)
        self.register_buffer("sigma", sigma)
        self.register_buffer("epsilon", epsilon)

        exceptions = _index_pairs(exceptions, "exceptions", n_atoms)
        n_exceptions = len(exceptions)
        exception_parameters = []
        for values, label in ((exception_charge_products, "exception_charge_products"),
                              (exception_sigma, "exception_sigma"), (exception_epsilon, "exception_epsilon")):
            if values is None:
                if n_exceptions:
                    raise ValueError(f"{label} is required with {n_exceptions} exceptions")
                values = torch.zeros(0)
            exception_parameters.append(_vector(values, label, n_exceptions).to(charges.dtype))
        self.register_buffer("exceptions", exceptions)
        self.register_buffer("exception_charge_products", exception_parameters[0])
        self.register_buffer("exception_sigma", exception_parameters[1])
        self.register_buffer("exception_epsilon", exception_parameters[2])
        exclusions = _index_pairs(exclusions, "exclusions", n_atoms)
        # every pair whose normal interaction is removed: exclusions and exceptions, each once
        excluded = torch.cat([exclusions, exceptions])
        keys = torch.unique(pair_keys(excluded, n_atoms))
        self.register_buffer("excluded_pairs", torch.stack([keys // n_atoms, keys % n_atoms], 1))

        self.alpha = None
        if method in ("ewald", "pme"):
            self.alpha = float(alpha) if alpha is not None else ewald_alpha(self.cutoff, self.ewald_tolerance)
        elif method == "reaction_field":
            dielectric = float(reaction_field_dielectric)
            self.krf = (dielectric - 1.0) / ((2.0 * dielectric + 1.0) * self.cutoff**3)
            self.crf = 3.0 * dielectric / ((2.0 * dielectric + 1.0) * self.cutoff)
        elif method == "cutoff":
            self.krf, self.crf = 0.0, 1.0 / self.cutoff
        self.pme_grid = None if pme_grid is None else tuple(int(n) for n in pme_grid)
        self.ewald_kmax = None if ewald_kmax is None else tuple(int(k) for k in ewald_kmax)
        self._pme: PMEReciprocal | None = None
        self.dispersion_coefficient = 0.0
        if self.use_dispersion_correction:
            self.dispersion_coefficient = dispersion_coefficient(sigma, epsilon, self.cutoff,
                                                                 self.switch_distance)
        self.neighbors = (None if method == "nocutoff" else
                          NeighborList(self.cutoff, skin=skin, exclusions=self.excluded_pairs,
                                       compiled=self._compiled))
        self._pair_cache: tuple | None = None
        self._atom_parameters: tuple | None = None  # (key, f^1/2 q, sigma / 2, 2 eps^1/2) of the kernel

    @property
    def compiled(self) -> bool:
        """Whether CPU analytic forces use the compiled kernels; settable (also sets the
        neighbour list's and PME's choice)."""
        return self._compiled

    @compiled.setter
    def compiled(self, value: bool) -> None:
        self._compiled = bool(value)
        if self.neighbors is not None:
            self.neighbors.compiled = self._compiled
        if self._pme is not None:
            self._pme.compiled = self._compiled

    def extra_repr(self) -> str:
        return (f"name={self.name!r}, n_atoms={len(self.charges)}, method={self.method!r}, "
                f"cutoff={self.cutoff}, switch_distance={self.switch_distance}, alpha={self.alpha}, "
                f"pme_grid={self.pme_grid}")

    # --- pair sets -------------------------------------------------------------------------

    def _make_pairs(self, pairs: Tensor) -> _PairSet:
        first, second = pairs[:, 0], pairs[:, 1]
        charge_products = COULOMB_MD * self.charges[first] * self.charges[second]
        sigma = 0.5 * (self.sigma[first] + self.sigma[second])
        epsilon = torch.sqrt(self.epsilon[first] * self.epsilon[second])
        return _lj_first(first, second, charge_products, sigma, epsilon)

    def _direct_pairs(self, positions: Tensor, box: Tensor | None, cached: bool,
                      kernels=None) -> tuple[_PairSet, Tensor]:
        """Pairs of the direct-space sum and the positions to evaluate them at.

        With a periodic box, each pair carries the lattice shift that gave its minimum image
        when the neighbour list was built, and the positions are returned unwrapped back to
        the reference positions of that build (atoms that were wrapped into the box since are
        moved back by a lattice vector). Until the next rebuild no atom moves more than half
        the skin, so the shifts stay the minimum images and the kernel needs no rounding.
        The compiled ``kernels`` prepare the pair set in one pass (same pairs, same order).
        """
        if self.neighbors is None:
            key = ("all", len(positions), positions.device)
            if self._pair_cache is None or self._pair_cache[0] != key:
                pairs = all_pairs(len(positions), self.excluded_pairs, device=positions.device)
                self._pair_cache = (key, pairs, None)
        else:
            pairs = self.neighbors.update(positions, box)
            key = ("list", self.neighbors.n_builds, positions.device)
            if self._pair_cache is None or self._pair_cache[0] != key:
                self._pair_cache = (key, pairs, None)
        key, pairs, pair_set = self._pair_cache
        if not cached or pair_set is None or pair_set.charge_products.dtype != positions.dtype:
            reference = None if box is None else self.neighbors.reference_positions.to(positions.dtype)
            if kernels is not None:
                empty = positions.new_zeros(0)
                first, second, charge_products, sigma_squared, epsilon4, shifts = kernels.prepare_pairs(
                    pairs, empty if box is None else reference, empty if box is None else box.detach(),
                    *(values.to(positions.dtype) for values in (self.charges, self.sigma, self.epsilon)),
                    COULOMB_MD)
                pair_set = _PairSet(first, second, charge_products, sigma_squared, epsilon4,
                                    None if box is None else shifts)
            else:
                pair_set = self._make_pairs(pairs)
                if box is not None:
                    pair_set.shifts = _lattice_shifts(
                        pair_set.first, pair_set.second, box, reference, self.neighbors.list_cutoff
                    )
                if cached:
                    pair_set.flat_first = _flat_index(pair_set.first, len(positions))
                    pair_set.flat_second = _flat_index(pair_set.second, len(positions))
            if cached:
                self._pair_cache = (key, pairs, pair_set)
        if box is None:
            return pair_set, positions
        return pair_set, _unwrap_to_reference(positions, box, self.neighbors.reference_positions)

    def _neighbor_kernel(self, kernels, positions: Tensor, box: Tensor | None) -> _CompiledPairResult:
        """The direct-space sum by the compiled kernel over the neighbour list in compressed rows
        (``neighbor_forces``: per-atom parameters, minimum image on the fly, vectorised)."""
        starts, neighbors = self.neighbors.update_rows(positions, box)
        dtype = positions.dtype
        key = (dtype, self.charges._version, self.sigma._version, self.epsilon._version)
        if self._atom_parameters is None or self._atom_parameters[0] != key:  # per atom, cached
            self._atom_parameters = (key, (math.sqrt(COULOMB_MD) * self.charges).to(dtype),
                                     (0.5 * self.sigma).to(dtype), (2.0 * torch.sqrt(self.epsilon)).to(dtype))
        _, scaled_charges, half_sigma, epsilon_root2 = self._atom_parameters
        coulomb = self._coulomb()
        energies, gradients = kernels.neighbor_forces(
            positions, positions.new_zeros(0) if box is None else box, starts, neighbors, scaled_charges,
            half_sigma, epsilon_root2, self.cutoff,
            -1.0 if self.switch_distance is None else self.switch_distance, _COULOMB_KINDS[coulomb.kind],
            coulomb.alpha, coulomb.krf, coulomb.crf)
        energies = energies.to(dtype)
        return _CompiledPairResult((energies[0], energies[1]), gradients)

    def _exception_pairs(self) -> _PairSet:
        first, second = self.exceptions[:, 0], self.exceptions[:, 1]
        return _lj_first(first, second, COULOMB_MD * self.exception_charge_products,
                         self.exception_sigma, self.exception_epsilon)

    def _exclusion_pairs(self) -> _PairSet:
        first, second = self.excluded_pairs[:, 0], self.excluded_pairs[:, 1]
        charge_products = COULOMB_MD * self.charges[first] * self.charges[second]
        empty = charge_products.new_zeros(0)
        return _PairSet(first, second, charge_products, empty, empty)

    def _reciprocal(self, positions: Tensor, box: Tensor, compute_forces: bool):
        if self.method == "pme":
            if self._pme is None:
                grid = self.pme_grid or pme_grid_size(self.alpha, box, self.ewald_tolerance)
                self.pme_grid = grid
                self._pme = PMEReciprocal(self.alpha, grid, self.pme_order, compiled=self.compiled)
            return self._pme(positions, self.charges, box, compute_forces)
        if self.ewald_kmax is None:
            self.ewald_kmax = ewald_kmax(self.alpha, box, self.ewald_tolerance)
        return ewald_reciprocal(positions, self.charges, box, self.alpha, self.ewald_kmax, compute_forces)

    # --- energies --------------------------------------------------------------------------

    def _check(self, positions: Tensor, box: Tensor | None) -> Tensor | None:
        n_atoms = len(self.charges)
        if not isinstance(positions, Tensor) or positions.ndim != 2 or positions.shape != (n_atoms, 3):
            shape = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
            raise ValueError(f"{self.name}: positions must be a ({n_atoms}, 3) tensor in nm, got {shape}")
        if self.method == "nocutoff":
            return None
        if box is None and self.method in ("ewald", "pme"):
            raise NonbondedMethodError(
                f"{self.name}: method {self.method!r} needs a periodic box, got box=None")
        if box is not None:
            space.check_box(box)
        return box

    def energy_terms(self, positions: Tensor, box: Tensor | None = None) -> dict[str, Tensor]:
        """Named energy components (see the module docstring), each ``()`` kJ/mol.

        Args:
            positions: ``(N, 3)`` tensor, nm.
            box: ``(3, 3)`` tensor, nm (rows are box vectors, reduced form), or ``None``.

        Returns:
            dict with ``"lennard_jones"``, ``"coulomb_direct"``, and depending on the method
            ``"coulomb_reciprocal"``, ``"coulomb_exclusions"``, ``"dispersion_correction"``.
        """
        box = self._check(positions, box)
        parameters_need_grad = any(t.requires_grad for t in (self.charges, self.sigma, self.epsilon,
                                                             self.exception_charge_products,
                                                             self.exception_sigma, self.exception_epsilon))
        box_needs_grad = box is not None and box.requires_grad
        analytic = self.analytic_forces and not parameters_need_grad and not box_needs_grad
        if analytic:
            terms = self._analytic_terms(positions, box)
        else:
            terms = self._autograd_terms(positions, box)
        if self.use_dispersion_correction and box is not None:
            terms["dispersion_correction"] = self.dispersion_coefficient / space.volume(box)
        return terms

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Total non-bonded energy, ``()`` kJ/mol (sum of :meth:`energy_terms`)."""
        return sum(self.energy_terms(positions, box).values())

    def _coulomb(self) -> _Coulomb:
        if self.method in ("ewald", "pme"):
            return _Coulomb("ewald", alpha=self.alpha)
        if self.method in ("cutoff", "reaction_field"):
            return _Coulomb("reaction_field", krf=self.krf, crf=self.crf)
        return _Coulomb("plain")

    def _evaluate(self, positions: Tensor, box: Tensor | None, keep_factors: bool):
        """All parts: pair kernels (direct, exceptions, exclusion corrections) and reciprocal."""
        cutoff = None if self.method == "nocutoff" else self.cutoff
        kernels = _kernels.usable(positions) if keep_factors and self.compiled else None
        if kernels is not None and self.neighbors is not None and len(positions) < 2**31:
            parts = {"direct": self._neighbor_kernel(kernels, positions, box)}
        else:
            pair_set, unwrapped = self._direct_pairs(positions, box, keep_factors, kernels)
            parts = {"direct": _pair_kernel(unwrapped, box, pair_set, self._coulomb(), cutoff,
                                            self.switch_distance, keep_factors, kernels)}
        if len(self.exceptions):
            parts["exceptions"] = _pair_kernel(positions, box if self.exceptions_periodic else None,
                                               self._exception_pairs(), _Coulomb("plain"), None, None,
                                               keep_factors, kernels)
        if self.method in ("ewald", "pme"):
            if len(self.excluded_pairs):
                parts["exclusions"] = _pair_kernel(positions, box, self._exclusion_pairs(),
                                                   _Coulomb("erf", alpha=self.alpha), None, None,
                                                   keep_factors, kernels)
            reciprocal, forces = self._reciprocal(positions, box, keep_factors)
            self_energy = -COULOMB_MD * self.alpha / math.sqrt(math.pi) * (self.charges * self.charges).sum()
            # a net charge interacts with its neutralising background (as OpenMM)
            background = (-COULOMB_MD * math.pi * self.charges.sum() ** 2
                          / (2 * self.alpha**2 * space.volume(box)))
            constant = (self_energy + background).to(reciprocal.dtype)
            parts["reciprocal"] = (reciprocal + constant, forces)
        return parts

    def _autograd_terms(self, positions: Tensor, box: Tensor | None) -> dict[str, Tensor]:
        parts = self._evaluate(positions, box, keep_factors=False)
        energies = {name: (part[0],) if name == "reciprocal" else part for name, part in parts.items()}
        return self._assemble(energies)

    def _analytic_terms(self, positions: Tensor, box: Tensor | None) -> dict[str, Tensor]:
        with torch.no_grad():
            parts = self._evaluate(positions.detach(), None if box is None else box.detach(),
                                   keep_factors=True)
        names = [name for name in ("direct", "exceptions", "exclusions", "reciprocal") if name in parts]
        wrapped = [("forces" if name == "reciprocal" else "pair", parts[name]) for name in names]

        def recompute(differentiable_positions):
            again = self._evaluate(differentiable_positions, box, keep_factors=False)
            return tuple(energy for name in names for energy in again[name] if energy is not None)

        outputs = _AnalyticEnergies.apply(positions, wrapped, recompute)
        energies = {}
        index = 0
        for name, (kind, _) in zip(names, wrapped):
            count = 1 if kind == "forces" else 2
            energies[name] = outputs[index:index + count]
            index += count
        return self._assemble(energies)

    @staticmethod
    def _assemble(energies: dict) -> dict[str, Tensor]:
        """Named components from the energies of each part (pair parts give (LJ, Coulomb))."""
        e_lj, e_coulomb = energies["direct"]
        if "exceptions" in energies:
            e_lj = e_lj + energies["exceptions"][0]
            e_coulomb = e_coulomb + energies["exceptions"][1]
        terms = {"lennard_jones": e_lj, "coulomb_direct": e_coulomb}
        if "reciprocal" in energies:
            terms["coulomb_reciprocal"] = energies["reciprocal"][0]
        if "exclusions" in energies:
            terms["coulomb_exclusions"] = energies["exclusions"][1]
        return terms
