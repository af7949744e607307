"""The three ways :class:`~mindsponge.forcefield.nonbonded.Nonbonded` evaluates its pair parts.

Every backend has the same two methods:

- ``direct(term, positions, box)``: the direct-space sum of the term (its neighbour list, or all
  pairs without a cutoff; exclusions and exceptions removed);
- ``pairs(positions, box, pair_set, coulomb, cutoff, switch_distance)``: a small explicit
  :class:`~mindsponge.forcefield.pair_kernels.PairSet` (exceptions, exclusion corrections);

and the flag ``keeps_factors``. With it, results are objects with ``energies`` (``(E_LJ,
E_Coulomb)``, ``()`` kJ/mol each) and ``gradient(grad_lj, grad_coulomb, n_atoms)`` (``(N, 3)``,
kJ/mol/nm) for :class:`~mindsponge.forcefield.pair_kernels.AnalyticEnergies`; without it, results
are the two energies built from differentiable operations.

- :class:`TorchBackend` (``keeps_factors=False``): differentiable torch operations, for parameter
  or box gradients, ``analytic_forces=False`` and the recomputation of ``create_graph=True``.
- :class:`TorchBackend` (``keeps_factors=True``): torch operations without a graph, per-pair force
  factors scattered when a gradient is asked for (CUDA, ``compiled=False``, no compiler).
- :class:`CompiledBackend`: the C++ kernels of :mod:`mindsponge._kernels` (CPU, float32/float64).

A fourth way runs without Python at all: :func:`compiled_terms` turns the term into force terms of the
compiled step loop (:mod:`mindsponge.step_loop`), which keep their own neighbour list.

``positions`` are ``(N, 3)`` nm and ``box`` a ``(3, 3)`` nm tensor or ``None``. ``term`` provides
``neighbors`` (a :class:`~mindsponge.neighbors.NeighborList` or ``None``), ``excluded_pairs``,
``charges``, ``sigma``, ``epsilon``, ``direct_cutoff`` (nm or ``None``), ``switch_distance`` and
``direct_coulomb()``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from common.units import COULOMB_MD
from mindsponge.forcefield.pair_kernels import (
    _COULOMB_KINDS,
    CompiledPairResult,
    PairSet,
    compiled_pair_kernel,
    flat_index,
    lattice_shifts,
    lj_first,
    pair_kernel,
    unwrap_to_reference,
)
from mindsponge.neighbors import all_pairs

__all__ = ["CompiledBackend", "TorchBackend", "compiled_terms"]


class _DirectPairs:
    """The direct-space pair set of a term with its parameters, kept per neighbour-list build when
    ``cached`` (then also per dtype), and the positions to evaluate it at.

    With a periodic box, each pair carries the lattice shift that gave its minimum image when
    the neighbour list was built, and the positions are returned unwrapped back to the reference
    positions of that build (atoms that were wrapped into the box since are moved back by a
    lattice vector). Until the next rebuild no atom moves more than half the skin, so the shifts
    stay the minimum images and the kernel needs no rounding. ``kernels`` (compiled) prepare the
    pair set in one pass (same pairs, same order).
    """

    def __init__(self, cached: bool, kernels=None):
        self.cached, self.kernels = cached, kernels
        self._cache: tuple | None = None  # (key, (P, 2) pairs, PairSet or None)

    def __call__(self, term, positions: Tensor, box: Tensor | None) -> tuple[PairSet, Tensor]:
        key, pairs = self._listed_pairs(term, positions, box)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, pairs, None)
        pair_set = self._cache[2]
        if not self.cached or pair_set is None or pair_set.charge_products.dtype != positions.dtype:
            reference = None if box is None else term.neighbors.reference_positions.to(positions.dtype)
            pair_set = self._make(term, pairs, positions, box, reference)
            if self.cached:
                self._cache = (key, pairs, pair_set)
        if box is None:
            return pair_set, positions
        return pair_set, unwrap_to_reference(positions, box, term.neighbors.reference_positions)

    def _listed_pairs(self, term, positions: Tensor, box: Tensor | None) -> tuple[tuple, Tensor]:
        if term.neighbors is None:
            key = ("all", len(positions), positions.device)
            if self._cache is not None and self._cache[0] == key:
                return key, self._cache[1]
            return key, all_pairs(len(positions), term.excluded_pairs, device=positions.device)
        pairs = term.neighbors.update(positions, box)
        return ("list", term.neighbors.n_builds, positions.device), pairs

    def _make(self, term, pairs: Tensor, positions: Tensor, box: Tensor | None, reference) -> PairSet:
        if self.kernels is not None:
            empty = positions.new_zeros(0)
            first, second, charge_products, sigma_squared, epsilon4, shifts = self.kernels.prepare_pairs(
                pairs, empty if box is None else reference, empty if box is None else box.detach(),
                *(values.to(positions.dtype) for values in (term.charges, term.sigma, term.epsilon)),
                COULOMB_MD)
            return PairSet(first, second, charge_products, sigma_squared, epsilon4,
                            None if box is None else shifts)
        first, second = pairs[:, 0], pairs[:, 1]
        charge_products = COULOMB_MD * term.charges[first] * term.charges[second]
        sigma = 0.5 * (term.sigma[first] + term.sigma[second])
        epsilon = torch.sqrt(term.epsilon[first] * term.epsilon[second])
        pair_set = lj_first(first, second, charge_products, sigma, epsilon)
        if box is not None:
            pair_set.shifts = lattice_shifts(pair_set.first, pair_set.second, box, reference,
                                              term.neighbors.list_cutoff)
        if self.cached:
            pair_set.flat_first = flat_index(pair_set.first, len(positions))
            pair_set.flat_second = flat_index(pair_set.second, len(positions))
        return pair_set


class TorchBackend:
    """Pure torch pair sums: differentiable (``keeps_factors=False``) or with analytic forces."""

    def __init__(self, keeps_factors: bool):
        self.keeps_factors = bool(keeps_factors)
        self._direct_pairs = _DirectPairs(cached=self.keeps_factors)

    def direct(self, term, positions: Tensor, box: Tensor | None):
        """Direct-space (energy, forces, virial) of the non-bonded ``term``.

        ``positions`` (N, 3) nm; ``box`` (3, 3) nm or None.
        """
        pair_set, unwrapped = self._direct_pairs(term, positions, box)
        return pair_kernel(unwrapped, box, pair_set, term.direct_coulomb(), term.direct_cutoff,
                            term.switch_distance, self.keeps_factors)

    def pairs(self, positions: Tensor, box: Tensor | None, pair_set: PairSet, coulomb, cutoff,
              switch_distance):
        """Energy, forces and virial of an explicit :class:`PairSet` (exceptions, exclusion corrections)."""
        return pair_kernel(positions, box, pair_set, coulomb, cutoff, switch_distance, self.keeps_factors)


class CompiledBackend:
    """The compiled kernels (:mod:`mindsponge._kernels`), analytic forces, CPU float32/float64.

    The direct sum runs over the neighbour list as clusters of 8 atoms (``cluster_forces`` over
    :meth:`~mindsponge.neighbors.NeighborList.clusters`: per-atom parameters combined in the kernel,
    one cluster's atoms against a partner cluster's 8 in SIMD lanes; it accumulates the gradient of
    E_LJ + E_Coulomb, and the two apart are recomputed only for a gradient that weights them
    differently); without a neighbour list (``"nocutoff"``) over the cached all-pairs set
    (``pair_forces``).
    """

    keeps_factors = True

    def __init__(self, kernels):
        self.kernels = kernels
        self._direct_pairs = _DirectPairs(cached=True, kernels=kernels)
        self._atom_parameters: tuple | None = None  # (key, f^1/2 q, sigma / 2, 2 eps^1/2)

    def direct(self, term, positions: Tensor, box: Tensor | None):
        """Direct-space (energy, forces, virial) of ``term``; the compiled cluster kernel if it can."""
        if term.neighbors is not None and len(positions) < 2**31:
            clusters = term.neighbors.update_clusters(positions, box)
            if clusters is not None:
                return self._neighbor_clusters(term, positions, box, clusters)
        pair_set, unwrapped = self._direct_pairs(term, positions, box)
        return self.pairs(unwrapped, box, pair_set, term.direct_coulomb(), term.direct_cutoff,
                          term.switch_distance)

    def pairs(self, positions: Tensor, box: Tensor | None, pair_set: PairSet, coulomb, cutoff,
              switch_distance):
        """Energy, forces and virial of an explicit :class:`PairSet`, with the compiled pair kernel."""
        return compiled_pair_kernel(self.kernels, positions, box, pair_set, coulomb, cutoff, switch_distance)

    def _neighbor_clusters(self, term, positions: Tensor, box: Tensor | None, clusters) -> CompiledPairResult:
        dtype = positions.dtype
        key = (dtype, id(term.charges), term.charges._version, id(term.sigma), term.sigma._version,
               id(term.epsilon), term.epsilon._version)
        if self._atom_parameters is None or self._atom_parameters[0] != key:  # per atom, cached
            self._atom_parameters = (key, (math.sqrt(COULOMB_MD) * term.charges).to(dtype),
                                     (0.5 * term.sigma).to(dtype), (2.0 * torch.sqrt(term.epsilon)).to(dtype))
        _, scaled_charges, half_sigma, epsilon_root2 = self._atom_parameters
        coulomb = term.direct_coulomb()
        switch_distance = -1.0 if term.switch_distance is None else term.switch_distance
        arguments = (positions, positions.new_zeros(0) if box is None else box,
                     term.neighbors.reference_positions, *clusters, scaled_charges, half_sigma, epsilon_root2,
                     term.cutoff, switch_distance,
                     _COULOMB_KINDS[coulomb.kind], coulomb.alpha, coulomb.krf, coulomb.crf)
        # the gradient of E_LJ + E_Coulomb (what forces need); the two apart only if a gradient asks for them
        energies, gradients = self.kernels.cluster_forces(*arguments, True)
        energies = energies.to(dtype)
        return CompiledPairResult((energies[0], energies[1]), gradients,
                                  lambda: self.kernels.cluster_forces(*arguments, False)[1])


def compiled_terms(term, kernels, box: Tensor | None = None):
    """A :class:`~mindsponge.forcefield.nonbonded.Nonbonded` term as force terms of the compiled step loop
    (:mod:`mindsponge.step_loop`), or ``None`` where the loop calls the term back instead (``"ewald"``,
    ``compiled=False``, analytic forces off, parameters that require grad, CUDA, PME without a box).

    Without a cutoff (``"nocutoff"``): the all-pairs list and the exceptions as two fixed pair lists
    (``kernels.PairTerm``). With a cutoff: one ``kernels.NeighborNonbondedTerm`` with a neighbour list of its
    own (the cutoff and skin of ``term.neighbors``), the exceptions, the Ewald exclusion corrections, PME
    (its grid fixed now from ``box`` if the term has none yet) and the constant energies.

    Args:
        term: the ``Nonbonded`` term.
        kernels: the compiled module.
        box: ``(3, 3)`` nm, the box the run starts in, or ``None``.
    """
    parameters = (term.charges, term.sigma, term.epsilon, term.exception_charge_products,
                  term.exception_sigma, term.exception_epsilon)
    if (term.method == "ewald" or not (term.compiled and term.analytic_forces)
            or any(tensor.requires_grad for tensor in parameters) or term.charges.device.type != "cpu"
            or (box is None and term.method == "pme")):
        return None
    exceptions = term._exception_pairs()
    exception_term = None
    if len(exceptions.first):
        exception_term = kernels.PairTerm(
            exceptions.first, exceptions.second, exceptions.charge_products.detach(),
            exceptions.sigma_squared.detach(), exceptions.epsilon4.detach(), -1.0, -1.0, 0, 0.0, 0.0, 0.0,
            term.exceptions_periodic)
    if term.method == "nocutoff":
        first, second = all_pairs(len(term.charges), term.excluded_pairs).unbind(1)
        direct = lj_first(first, second, COULOMB_MD * term.charges[first] * term.charges[second],
                          0.5 * (term.sigma[first] + term.sigma[second]),
                          torch.sqrt(term.epsilon[first] * term.epsilon[second]))
        terms = [] if len(direct.first) == 0 else [kernels.PairTerm(
            direct.first, direct.second, direct.charge_products.detach(), direct.sigma_squared.detach(),
            direct.epsilon4.detach(), -1.0, -1.0, 0, 0.0, 0.0, 0.0, False)]
        return terms + ([] if exception_term is None else [exception_term])
    return [kernels.NeighborNonbondedTerm(_neighbor_spec(term, kernels, box, exception_term))]


def _neighbor_spec(term, kernels, box: Tensor | None, exception_term):
    """The ``kernels.NeighborNonbondedSpec`` of a ``Nonbonded`` term with a cutoff."""
    from mindsponge.forcefield.ewald import bspline_moduli, pme_grid_size

    charges = term.charges.detach()
    spec = kernels.NeighborNonbondedSpec()
    spec.charges = charges
    spec.scaled_charges = math.sqrt(COULOMB_MD) * charges
    spec.half_sigma = 0.5 * term.sigma.detach()
    spec.epsilon_root2 = 2.0 * torch.sqrt(term.epsilon.detach())
    spec.cutoff, spec.skin = term.cutoff, term.neighbors.skin
    spec.switch_distance = -1.0 if term.switch_distance is None else term.switch_distance
    coulomb = term.direct_coulomb()
    spec.kind = 2 if coulomb.kind == "ewald" else 1
    spec.alpha, spec.krf, spec.crf = coulomb.alpha, coulomb.krf, coulomb.crf
    spec.exclusion_starts, spec.exclusion_partners = term.neighbors.exclusion_table(len(charges))
    spec.exceptions = exception_term
    if term.method == "pme":
        exclusions = term._exclusion_pairs()
        if len(exclusions.first):
            empty = exclusions.charge_products.new_zeros(0)
            spec.exclusions = kernels.PairTerm(
                exclusions.first, exclusions.second, exclusions.charge_products.detach(), empty, empty,
                -1.0, -1.0, 3, term.alpha, 0.0, 0.0, True)
        if term.pme_grid is None:
            term.pme_grid = pme_grid_size(term.alpha, box, term.ewald_tolerance)
        spec.pme_grid, spec.pme_order = list(term.pme_grid), term.pme_order
        spec.pme_moduli = [bspline_moduli(size, term.pme_order, torch.float64) for size in term.pme_grid]
        squares = (charges.double() ** 2).sum()
        spec.constant = float(-COULOMB_MD * term.alpha / math.sqrt(math.pi) * squares)
        spec.background = float(-COULOMB_MD * math.pi * charges.double().sum() ** 2 / (2 * term.alpha**2))
    if term.use_dispersion_correction:
        spec.dispersion = term.dispersion_coefficient
    return spec

