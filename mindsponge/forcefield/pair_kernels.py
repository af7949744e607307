"""Pair sets and the kernels that evaluate Lennard-Jones + Coulomb over them.

A :class:`PairSet` holds atom pairs ``(first, second)`` with their parameters (``f q_i q_j`` in
kJ/mol nm, ``sigma_ij^2`` in nm^2, ``4 eps_ij`` in kJ/mol; the first ``len(sigma_squared)`` pairs
have Lennard-Jones) and, for a periodic box, the ``(3, P)`` lattice shifts (nm) of their minimum
images. :func:`pair_kernel` returns the energies ``(E_LJ, E_Coulomb)`` (``()`` kJ/mol) either built
from differentiable operations or, with ``keep_factors``, as a result object whose
``gradient(grad_lj, grad_coulomb, n_atoms)`` gives ``(N, 3)`` kJ/mol/nm lazily; :class:`AnalyticEnergies`
attaches such gradients to energies for autograd. Used by :mod:`mindsponge.forcefield.nonbonded`
and :mod:`mindsponge.forcefield.custom`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from mindsponge import space

__all__ = [
    "CoulombKind", "PairSet", "PairResult", "CompiledPairResult", "AnalyticEnergies", "pair_kernel",
    "compiled_pair_kernel", "flat_index", "lattice_shifts", "lj_first", "unwrap_to_reference",
]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@dataclass(frozen=True)
class CoulombKind:
    """How the Coulomb part of a pair kernel is evaluated.

    kind: ``"plain"`` (1/r), ``"ewald"`` (erfc(alpha r)/r), ``"erf"`` (-erf(alpha r)/r, the
    exclusion correction) or ``"reaction_field"`` (1/r + krf r^2 - crf).
    """

    kind: str
    alpha: float = 0.0
    krf: float = 0.0
    crf: float = 0.0


@dataclass
class PairSet:
    """Pairs with their parameters; the first ``len(sigma_squared)`` pairs have Lennard-Jones."""

    first: Tensor
    second: Tensor
    charge_products: Tensor  # f q_i q_j, kJ/mol nm
    sigma_squared: Tensor  # nm^2
    epsilon4: Tensor  # 4 eps, kJ/mol
    shifts: Tensor | None = None  # (3, P) lattice vectors added to the displacements, nm
    flat_first: Tensor | None = None  # (3 P,) see flat_index: a 1-D index_add_ scatters fastest
    flat_second: Tensor | None = None


def flat_index(atoms: Tensor, n_atoms: int) -> Tensor:
    """``(3 P,)`` indices ``component * N + atom`` into a flattened ``(3, N)`` array."""
    return (torch.arange(3, device=atoms.device)[:, None] * n_atoms + atoms).reshape(-1)


def lattice_shifts(
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


def unwrap_to_reference(positions: Tensor, box: Tensor, reference: Tensor) -> Tensor:
    """``positions`` moved by lattice vectors back next to ``reference`` (the positions of the
    last neighbour-list build), so that the pair shifts of that build stay minimum images."""
    moved = positions.detach() - reference.to(positions.dtype)
    return positions - (moved - space.minimum_image(moved, box.detach()))


def lj_first(first, second, charge_products, sigma, epsilon) -> PairSet:
    """Order pairs so that those with non-zero epsilon come first (LJ is evaluated only on them),
    each group sorted by its first atom (for locality of the gathers and scatters)."""
    active = epsilon != 0
    n_lj = int(active.sum())
    in_order = n_lj == len(first) and bool((first[1:] >= first[:-1]).all())  # e.g. a neighbour list
    if len(first) > 0 and not in_order:
        order = torch.argsort((~active).long() * (int(first.max()) + 1) + first, stable=True)
        first, second, charge_products = first[order], second[order], charge_products[order]
        sigma, epsilon = sigma[order[:n_lj]], epsilon[order[:n_lj]]
    return PairSet(first, second, charge_products, sigma * sigma, 4.0 * epsilon)


class PairResult:
    """Energies of a pair kernel and the per-pair force factors to build its gradient lazily."""

    def __init__(self, energies, pairs: PairSet, displacement, coulomb_factor, lj_factor):
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
        flat_first = pairs.flat_first if pairs.flat_first is not None else flat_index(pairs.first, n_atoms)
        flat_second = (pairs.flat_second if pairs.flat_second is not None
                       else flat_index(pairs.second, n_atoms))
        flat = force_on_second.reshape(-1)
        gradient = flat.new_zeros(3 * n_atoms)
        gradient.index_add_(0, flat_first, flat)
        gradient.index_add_(0, flat_second, flat, alpha=-1.0)
        return gradient.view(3, n_atoms).T


class CompiledPairResult:
    """Energies and gradients of a pair kernel from the compiled kernel (same interface as
    :class:`PairResult`).

    ``gradients`` is ``(2, N, 3)`` (dE_LJ/dx, dE_Coulomb/dx) or ``(1, N, 3)`` (d(E_LJ + E_Coulomb)/dx,
    half the kernel's scattering); with the latter, ``separate()`` returns the ``(2, N, 3)`` ones, called
    only when a gradient weights the two energies differently (e.g. the force of one named component).
    """

    def __init__(self, energies, gradients: Tensor, separate=None):
        self.energies = energies
        self.gradients = gradients
        self._separate = separate

    def gradient(self, grad_lj: Tensor, grad_coulomb: Tensor, n_atoms: int) -> Tensor:
        """dE/dx for ``grad_lj * E_LJ + grad_coulomb * E_Coulomb``, ``(N, 3)``."""
        if len(self.gradients) == 1:
            if torch.equal(grad_lj, grad_coulomb):
                return grad_lj * self.gradients[0]
            self.gradients = self._separate()
        return torch.add(grad_lj * self.gradients[0], self.gradients[1], alpha=grad_coulomb)


_COULOMB_KINDS = {"plain": 0, "reaction_field": 1, "ewald": 2, "erf": 3}


def compiled_pair_kernel(kernels, positions: Tensor, box: Tensor | None, pairs: PairSet, coulomb: CoulombKind,
                          cutoff: float | None, switch_distance: float | None) -> CompiledPairResult:
    """:func:`pair_kernel` with ``keep_factors`` in one pass of the compiled kernel (CPU, no graph)."""
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
    return CompiledPairResult((energies[0], energies[1]), gradients)


def pair_kernel(positions: Tensor, box: Tensor | None, pairs: PairSet, coulomb: CoulombKind,
                 cutoff: float | None, switch_distance: float | None, keep_factors: bool, kernels=None):
    """Lennard-Jones and Coulomb energies of a set of pairs.

    Displacements ``(3, P)`` are ``positions[second] - positions[first] + pairs.shifts`` when the pair set
    carries lattice shifts (then ``positions`` must be unwrapped consistently, see
    :func:`unwrap_to_reference`), else the minimum image in ``box`` (or none without a box).

    Returns ``(e_lj, e_coulomb)`` built from differentiable operations when ``keep_factors`` is
    false, else a :class:`PairResult` (computed without a graph) that can produce forces, from the
    compiled ``kernels`` (:mod:`mindsponge._kernels`) when given.
    """
    if keep_factors and kernels is not None:
        return compiled_pair_kernel(kernels, positions, box, pairs, coulomb, cutoff, switch_distance)
    displacement = _displacements(positions, box, pairs)
    dx, dy, dz = displacement.unbind(0)
    r2 = torch.addcmul(torch.addcmul(dx * dx, dy, dy), dz, dz)
    charge_products, epsilon4 = pairs.charge_products, pairs.epsilon4
    n_lj = len(epsilon4)
    if cutoff is not None:  # zero parameters beyond the cutoff: energies and forces vanish there
        inside = r2 < cutoff * cutoff
        charge_products = torch.where(inside, charge_products, 0.0)
        epsilon4 = torch.where(inside[:n_lj], epsilon4, 0.0)
    inverse_r = torch.rsqrt(r2)
    e_coulomb, f_coulomb = _coulomb_terms(coulomb, charge_products, r2, inverse_r, keep_factors)
    e_lj, f_lj = _lennard_jones_terms(pairs.sigma_squared, epsilon4, r2[:n_lj], inverse_r[:n_lj], cutoff,
                                      switch_distance, keep_factors)
    accumulate = torch.float64 if r2.dtype == torch.float32 else r2.dtype
    energies = (e_lj.sum(dtype=accumulate).to(r2.dtype), e_coulomb.sum(dtype=accumulate).to(r2.dtype))
    if not keep_factors:
        return energies
    return PairResult(energies, pairs, displacement, f_coulomb, f_lj)


def _displacements(positions: Tensor, box: Tensor | None, pairs: PairSet) -> Tensor:
    """``(3, P)`` displacements ``second - first`` (nm): shifted, minimum images or direct."""
    # components along the rows, (3, P): contiguous per component, no reductions over a size-3 axis
    columns = positions.T.contiguous()
    displacement = columns.index_select(1, pairs.second) - columns.index_select(1, pairs.first)
    if pairs.shifts is not None:
        return displacement + pairs.shifts
    if box is not None:
        return space.minimum_image(displacement.T, box).T
    return displacement


def _coulomb_terms(coulomb: CoulombKind, charge_products: Tensor, r2: Tensor, inverse_r: Tensor,
                   keep_factors: bool) -> tuple[Tensor, Tensor | None]:
    """Per-pair Coulomb energies (kJ/mol) and, with ``keep_factors``, ``-(dE/dr)/r`` (kJ/mol/nm^2)."""
    inverse_r2 = inverse_r * inverse_r
    if coulomb.kind == "plain":
        e_coulomb = charge_products * inverse_r
        return e_coulomb, e_coulomb * inverse_r2 if keep_factors else None
    if coulomb.kind == "reaction_field":
        e_coulomb = charge_products * (inverse_r + coulomb.krf * r2 - coulomb.crf)
        f_coulomb = charge_products * (inverse_r * inverse_r2 - 2.0 * coulomb.krf) if keep_factors else None
        return e_coulomb, f_coulomb
    alpha = coulomb.alpha
    alpha_r = alpha * (r2 * inverse_r)
    if coulomb.kind == "ewald":
        e_coulomb = charge_products * torch.special.erfc(alpha_r) * inverse_r
    else:  # "erf": minus the long-range part
        e_coulomb = -charge_products * torch.special.erf(alpha_r) * inverse_r
    if not keep_factors:
        return e_coulomb, None
    # both: -(dE/dr)/r = (E + qq 2 alpha/sqrt(pi) exp(-alpha^2 r^2)) / r^2
    gaussian = (alpha * _TWO_OVER_SQRT_PI) * torch.exp(-alpha_r * alpha_r)
    return e_coulomb, (e_coulomb + charge_products * gaussian) * inverse_r2


def _lennard_jones_terms(sigma_squared: Tensor, epsilon4: Tensor, r2: Tensor, inverse_r: Tensor,
                         cutoff: float | None, switch_distance: float | None,
                         keep_factors: bool) -> tuple[Tensor, Tensor | None]:
    """Per-pair (switched) LJ energies (kJ/mol) and, with ``keep_factors``, ``-(dE/dr)/r`` (kJ/mol/nm^2)."""
    inverse_r2 = inverse_r * inverse_r
    s6 = (sigma_squared * inverse_r2) ** 3
    e_lj = epsilon4 * (s6 * s6 - s6)
    f_lj = epsilon4 * (12.0 * s6 * s6 - 6.0 * s6) * inverse_r2 if keep_factors else None
    if switch_distance is None:
        return e_lj, f_lj
    width = cutoff - switch_distance
    x = ((r2 * inverse_r - switch_distance) / width).clamp(0.0, 1.0)
    switch = 1.0 + x * x * x * (-10.0 + x * (15.0 - 6.0 * x))
    if keep_factors:
        switch_derivative = x * x * (-30.0 + x * (60.0 - 30.0 * x)) / width
        f_lj = f_lj * switch - e_lj * switch_derivative * inverse_r
    return e_lj * switch, f_lj


class AnalyticEnergies(torch.autograd.Function):
    """Energies whose gradient with respect to positions is supplied analytically.

    ``parts`` is a list of ``(kind, payload)``: ``("pair", PairResult)`` contributes two
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

