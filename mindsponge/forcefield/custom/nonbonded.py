"""OpenMM's ``CustomNonbondedForce``: pair interactions given by an expression of ``r``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from common.errors import ConfigurationError
from mindsponge import _kernels, space
from mindsponge.forcefield.base import EnergyTerm
from mindsponge.forcefield.bonded import _norm
from mindsponge.forcefield.custom import long_range
from mindsponge.forcefield.custom.compiled import CompiledPairs, expression_pair_term
from mindsponge.forcefield.custom.energy import ExpressionEnergy, exclusion_pairs, pair_box, total_energy
from mindsponge.forcefield.expressions import ExpressionError, TabulatedFunction
from mindsponge.forcefield.expressions.program import FIRST, SECOND
from mindsponge.forcefield.pair_kernels import (
    AnalyticEnergies,
    CoulombKind,
    PairResult,
    PairSet,
    flat_index,
    lattice_shifts,
    lj_first,
    pair_kernel,
    unwrap_to_reference,
)
from mindsponge.neighbors import NeighborList, all_pairs, pair_keys

# up to this many interaction-group pairs per atom, search only them (see _CandidateNeighborList)
_CANDIDATES_PER_ATOM = 32


def _group_candidates(membership: Tensor, exclusions: Tensor | None) -> Tensor | None:
    """Every pair ``i < j`` of the interaction groups (``(G, 2, N)`` membership), excluded pairs left out;
    ``None`` when there are too many to list (more than ``_CANDIDATES_PER_ATOM`` per atom)."""
    n_atoms = membership.shape[-1]
    counts = membership.sum(-1)  # (G, 2)
    if int((counts[:, 0] * counts[:, 1]).sum()) > _CANDIDATES_PER_ATOM * n_atoms:
        return None
    keys = []
    for first_set, second_set in membership:
        first, second = torch.nonzero(first_set).squeeze(1), torch.nonzero(second_set).squeeze(1)
        i, j = torch.meshgrid(first, second, indexing="ij")
        i, j = i.reshape(-1), j.reshape(-1)
        distinct = i != j
        i, j = i[distinct], j[distinct]
        keys.append(torch.minimum(i, j) * n_atoms + torch.maximum(i, j))
    keys = torch.unique(torch.cat(keys))
    if exclusions is not None and len(exclusions) > 0:
        keys = keys[~torch.isin(keys, torch.unique(pair_keys(exclusions, n_atoms)))]
    return torch.stack([keys // n_atoms, keys % n_atoms], dim=1).contiguous()


class _CandidateNeighborList(NeighborList):
    """A Verlet list over given candidate pairs: at each build, those within ``cutoff + skin`` (minimum
    image). For interaction groups with a small set (an alchemical ligand against its solvent) this is
    much cheaper than a cell search over all atoms followed by filtering to the groups; same pairs."""

    def __init__(self, cutoff: float, skin: float, candidates: Tensor):
        super().__init__(cutoff, skin=skin)
        self.candidates = candidates

    def build(self, positions: Tensor, box: Tensor | None = None) -> None:
        positions = positions.detach()
        if box is not None:
            box = box.detach().to(positions)
            if self.cutoff > space.max_cutoff(box) + 1e-12:
                raise space.BoxTooSmallError(
                    f"NeighborList cutoff {self.cutoff} nm is longer than half the box "
                    f"({space.max_cutoff(box)} nm); use a larger box or a shorter cutoff", box)
        candidates = self.candidates.to(positions.device)
        offsets = space.minimum_image(positions[candidates[:, 1]] - positions[candidates[:, 0]], box)
        near = (offsets * offsets).sum(-1) <= self.list_cutoff**2
        self._store(positions, box, candidates[near].contiguous(), None)


@dataclass
class _CustomPairs:
    """The pairs a :class:`CustomNonbonded` evaluates, between two neighbour-list builds.

    ``first``, ``second``: the candidate pairs (those of the interaction groups, with their
    multiplicity as ``weight``); ``cached``: the parameters do not require grad, so the set is
    kept until the next build and forces may be analytic; ``lennard_jones``: the Lennard-Jones
    pair set when the energy has that form. Filled on first use: ``variables``, the per-particle
    values of both atoms and the global parameters as expression variables; ``static_cache``,
    the expression's parts that do not depend on ``r`` (when cached); ``geometry``, the pairs
    with their lattice shifts and scatter indices for analytic forces.
    """

    first: Tensor
    second: Tensor
    weight: Tensor | None
    cached: bool
    lennard_jones: PairSet | None
    variables: dict | None = None
    static_cache: dict | None = None
    geometry: PairSet | None = None


class CustomNonbonded(CompiledPairs, EnergyTerm):
    """Pair interactions with an energy expression of ``r`` (OpenMM ``CustomNonbondedForce``).

    The expression sees ``r`` (nm), the per-particle parameters of both atoms as ``name1`` and
    ``name2``, computed values (per-particle expressions of the parameters and global
    parameters, also with suffixes ``1`` and ``2``), global parameters and tabulated functions.

    Args:
        energy: the pair energy expression, kJ/mol.
        parameter_names: per-particle parameter names.
        parameters: ``(N, P)`` per-particle values.
        global_parameters: name to value.
        functions: tabulated functions by name.
        computed_values: sequence of ``(name, expression)`` per-particle values.
        cutoff: cutoff distance, nm; ``None`` for all pairs (OpenMM ``NoCutoff``).
        periodic: minimum-image pairs in the box (``CutoffPeriodic``); ``False`` ignores the box
            (``NoCutoff``, ``CutoffNonPeriodic``). Needs a cutoff.
        switch_distance: start of OpenMM's switching function ``1 - 10x^3 + 15x^4 - 6x^5``, nm, or
            ``None``.
        long_range_correction: add OpenMM's long-range correction ``C / V`` (periodic only).
        exclusions: ``(E, 2)`` integer tensor of pairs that do not interact.
        interaction_groups: sequence of ``(set1, set2)`` atom index collections; when given, only
            pairs with one atom in each set of a group interact, once per group.
        skin: Verlet skin of the neighbour list, nm.
        name: term name (default ``"CustomNonbonded"``).

    Forces are analytic. On CPU the expression runs on the compiled expression kernel
    (:mod:`~mindsponge.forcefield.custom.compiled`: energy and ``dE/dr`` of every pair in one
    pass, in float64; also the step loop's form of this term) unless it has no compiled form
    (tabulated functions), the cutoff is over all atoms rather than interaction groups, or
    ``compiled_expression = False``; otherwise autograd differentiates the expression with respect
    to ``r`` only and the chain rule through the pair displacements is done by hand. An energy of the form
    ``A/r^12 - B/r^6`` (CHARMM's ``acoef(type1, type2)/r^12 - bcoef(type1, type2)/r^6``, or
    ``4*eps*((sig/r)^12-(sig/r)^6)`` with combination rules in definitions) with ``A, B > 0``
    (or both zero) on every pair runs on the Lennard-Jones kernel of
    :class:`~mindsponge.forcefield.nonbonded.Nonbonded` (compiled on CPU);
    :attr:`uses_lennard_jones_kernel` tells whether the last call did, and setting the attribute
    ``lennard_jones_kernel = False`` turns this off. Parameters or a box that require grad take
    the plain autograd path.

    Raises:
        ExpressionError: a bad expression or argument (the message names it).
    """

    def __init__(
        self,
        energy: str,
        parameter_names: Sequence[str],
        parameters,
        *,
        global_parameters: Mapping[str, float] | None = None,
        functions: Mapping[str, TabulatedFunction] | None = None,
        computed_values: Sequence[tuple[str, str]] = (),
        cutoff: float | None = None,
        periodic: bool = False,
        switch_distance: float | None = None,
        long_range_correction: bool = False,
        exclusions=None,
        interaction_groups=None,
        skin: float = 0.1,
        name: str | None = None,
    ):
        super().__init__(name)
        context = f"CustomNonbonded {self.name!r}"
        table = torch.as_tensor(parameters, dtype=torch.float64)
        if table.ndim == 1:
            table = table.reshape(-1, len(parameter_names))
        if table.ndim != 2 or table.shape[1] != len(parameter_names):
            raise ExpressionError(
                f"{context}: parameters must have shape (N, {len(parameter_names)}), got {tuple(table.shape)}"
            )
        self.register_buffer("particle_parameters", table)
        self.n_atoms = table.shape[0]
        names = list(parameter_names)
        self.computed_names = [value_name for value_name, _ in computed_values]
        self.computed = nn.ModuleList(
            ExpressionEnergy(  # global parameters come from self.expression (one buffer for all)
                expression,
                functions=functions,
                variables=names + list(global_parameters or {}),
                context=f"{context} computed value {value_name!r}",
            )
            for value_name, expression in computed_values
        )
        pair_variables = ["r"] + [
            f"{base}{suffix}" for base in names + self.computed_names for suffix in "12"
        ]
        self.expression = ExpressionEnergy(
            energy, (), None, global_parameters, functions, pair_variables, context=context, dynamic=("r",)
        )
        self.parameter_names = names
        if cutoff is None and (periodic or switch_distance is not None or long_range_correction):
            raise ExpressionError(
                f"{context}: periodic boxes, switching and the long-range correction need a cutoff"
            )
        self.cutoff = None if cutoff is None else float(cutoff)
        if self.cutoff is not None and not self.cutoff > 0:
            raise ExpressionError(f"{context}: cutoff must be positive, got {cutoff}")
        self.periodic = bool(periodic)
        if switch_distance is not None and not 0 <= switch_distance < self.cutoff:
            raise ExpressionError(
                f"{context}: switch_distance must lie in [0, cutoff={self.cutoff}), got {switch_distance}"
            )
        self.switch_distance = None if switch_distance is None else float(switch_distance)
        self.long_range_correction = bool(long_range_correction) and self.periodic
        exclusions = exclusion_pairs(exclusions)
        self.register_buffer("exclusions", exclusions)
        self.groups: Tensor | None = None  # (G, 2, N) membership of the interaction groups' two sets
        if interaction_groups:
            membership = torch.zeros((len(interaction_groups), 2, self.n_atoms), dtype=torch.bool)
            for number, (first, second) in enumerate(interaction_groups):
                membership[number, 0, torch.as_tensor(sorted(first), dtype=torch.long)] = True
                membership[number, 1, torch.as_tensor(sorted(second), dtype=torch.long)] = True
            del self.groups
            self.register_buffer("groups", membership)
        # interaction groups of which none has atoms on both sides (a ligand against an empty rest)
        self._no_group_pairs = bool(interaction_groups) and not bool(
            (membership[:, 0].any(-1) & membership[:, 1].any(-1)).any())
        self.neighbors = None
        if self.cutoff is not None:
            candidates = _group_candidates(membership, exclusions) if interaction_groups else None
            if candidates is not None and len(candidates) <= _CANDIDATES_PER_ATOM * self.n_atoms:
                self.neighbors = _CandidateNeighborList(self.cutoff, skin, candidates)
            else:
                self.neighbors = NeighborList(self.cutoff, skin=skin, exclusions=exclusions)
        self._pairs_cache: tuple | None = None
        self._pair_set_cache: tuple | None = None
        self._lrc_cache: tuple | None = None
        self.lennard_jones_kernel = True
        self._used_lennard_jones_kernel = False
        self._lennard_jones_cache: tuple | None = None

    @property
    def is_empty(self) -> bool:
        """Fewer than two atoms, or interaction groups of which none has atoms on both sides."""
        return self.n_atoms < 2 or self._no_group_pairs

    def extra_repr(self) -> str:
        return (
            f"name={self.name!r}, n_atoms={self.n_atoms}, cutoff={self.cutoff}, periodic={self.periodic}, "
            f"switch_distance={self.switch_distance}, long_range_correction={self.long_range_correction}"
        )

    # --- per-particle values -------------------------------------------------------------

    def _particle_values(self, dtype: torch.dtype, table: Tensor | None = None) -> dict[str, Tensor]:
        """Per-particle parameters and computed values ``(N,)`` (or per row of ``table``)."""
        table = (self.particle_parameters if table is None else table).to(dtype)
        values = {name: table[:, column] for column, name in enumerate(self.parameter_names)}
        for value_name, computed in zip(self.computed_names, self.computed):
            variables = self._global_values(dtype)
            variables.update(values)
            values[value_name] = torch.broadcast_to(computed(variables), (len(table),))
        return values

    def _particle_classes(self) -> tuple[Tensor, Tensor]:
        """Distinct rows of the parameters ``(C, P)`` (float64) and the class of each particle ``(N,)``."""
        table = self.particle_parameters.detach().double()
        if table.shape[1] == 0:  # no per-particle parameters: one class
            return table[:1], torch.zeros(self.n_atoms, dtype=torch.long, device=table.device)
        return torch.unique(table, dim=0, return_inverse=True)

    def _global_values(self, dtype: torch.dtype) -> dict[str, Tensor]:
        return self.expression.parameter_variables(dtype)

    # --- pairs ---------------------------------------------------------------------------

    def _pairs(self, positions: Tensor, box: Tensor | None) -> tuple[Tensor, tuple]:
        """The candidate pairs ``(P, 2)`` and a key that changes whenever they do."""
        if self.neighbors is not None:
            pairs = self.neighbors.update(positions.detach(), box)
            return pairs, ("list", self.neighbors.n_builds)
        key = ("all", len(positions), positions.device)
        if self._pairs_cache is None or self._pairs_cache[0] != key:
            self._pairs_cache = (key, all_pairs(len(positions), self.exclusions, device=positions.device))
        return self._pairs_cache[1], key

    def _pair_set(self, positions: Tensor, box: Tensor | None) -> _CustomPairs:
        """The pairs to evaluate (see :class:`_CustomPairs`). Rebuilt when the pairs, the dtype
        or the parameters change; parameters that require grad are never cached."""
        pairs, pairs_key = self._pairs(positions, box)
        dtype = positions.dtype
        parameters_need_grad = (
            self.particle_parameters.requires_grad or self.expression.global_values.requires_grad
        )
        key = (
            pairs_key,
            dtype,
            positions.device,
            self.particle_parameters._version,
            tuple(self.expression.global_values.tolist()),
            self.lennard_jones_kernel,
        )
        if not parameters_need_grad and self._pair_set_cache is not None and self._pair_set_cache[0] == key:
            return self._pair_set_cache[1]
        first, second, weight = self._group_pairs(pairs, dtype)
        if parameters_need_grad:
            return _CustomPairs(first, second, weight, False, None)
        lennard_jones = None
        if self.lennard_jones_kernel:
            lennard_jones = self._lennard_jones_pairs(first, second, weight, dtype, box)
        pair_set = _CustomPairs(first, second, weight, True, lennard_jones)
        self._pair_set_cache = (key, pair_set)
        return pair_set

    def _group_pairs(self, pairs: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor | None]:
        """``(first, second, weight)`` of the candidate pairs ``(P, 2)`` that interact: with interaction
        groups, those in at least one group and how many (``weight``, else ``None``)."""
        first, second = pairs[:, 0], pairs[:, 1]
        if self.groups is None:
            return first, second, None
        in_first, in_second = self.groups[:, 0], self.groups[:, 1]
        multiplicity = (
            (in_first[:, first] & in_second[:, second]) | (in_second[:, first] & in_first[:, second])
        ).sum(0)
        selected = torch.nonzero(multiplicity > 0).squeeze(1)
        return first[selected], second[selected], multiplicity[selected].to(dtype)

    def _expression_inputs(self, pair_set: _CustomPairs, dtype: torch.dtype) -> tuple[dict, dict | None]:
        """The variables and static cache of the expression on a pair set (made on first use)."""
        if pair_set.variables is None:
            pair_set.variables = self._pair_variables(dtype, pair_set.first, pair_set.second)
            pair_set.static_cache = {} if pair_set.cached else None
        return pair_set.variables, pair_set.static_cache

    def _geometry(self, pair_set: _CustomPairs, box: Tensor | None, dtype: torch.dtype) -> PairSet:
        """The pairs with lattice shifts and scatter indices for analytic forces (made on first use)."""
        if pair_set.geometry is None:
            first, second = pair_set.first, pair_set.second
            zeros = torch.zeros(len(first), dtype=dtype, device=first.device)
            geometry = PairSet(first, second, zeros, zeros[:0], zeros[:0])
            geometry.flat_first = flat_index(first, self.n_atoms)
            geometry.flat_second = flat_index(second, self.n_atoms)
            if box is not None:
                reference = self.neighbors.reference_positions.to(dtype)
                geometry.shifts = lattice_shifts(first, second, box, reference, self.neighbors.list_cutoff)
            pair_set.geometry = geometry
        return pair_set.geometry

    def _pair_variables(self, dtype: torch.dtype, first: Tensor, second: Tensor) -> dict[str, Tensor]:
        """The global parameters and the per-particle values of both atoms of each pair."""
        variables = self._global_values(dtype)
        for value_name, per_particle in self._particle_values(dtype).items():
            variables[f"{value_name}1"] = per_particle[first]
            variables[f"{value_name}2"] = per_particle[second]
        return variables

    def _lennard_jones_classes(self) -> tuple[Tensor, int, Tensor, Tensor] | None:
        """``(classes, C, sigma, epsilon)`` when the energy is ``A/r^12 - B/r^6`` (see
        :attr:`~mindsponge.forcefield.expressions.CompiledExpression.inverse_powers`) with
        ``A, B > 0`` or ``A = B = 0`` for every pair of particle classes (particles of equal
        parameters): the class of each particle ``(N,)`` and ``sigma`` (nm), ``epsilon`` (kJ/mol)
        of each pair of classes ``(C * C,)`` (``sigma^6 = A/B``, ``4 eps = B^2/A``), float64;
        else ``None``. Computed once per set of parameter values."""
        powers = self.expression.compiled.inverse_powers
        if powers is None or set(powers) != {6, 12}:
            return None
        key = (self.particle_parameters._version, tuple(self.expression.global_values.tolist()))
        if self._lennard_jones_cache is not None and self._lennard_jones_cache[0] == key:
            return self._lennard_jones_cache[1]
        table, classes = self._particle_classes()
        n_classes = len(table)
        index = torch.arange(n_classes, device=table.device)
        first, second = index.repeat_interleave(n_classes), index.repeat(n_classes)
        variables = self._global_values(torch.float64)
        for value_name, per_class in self._particle_values(torch.float64, table).items():
            variables[f"{value_name}1"], variables[f"{value_name}2"] = per_class[first], per_class[second]
        # unused by the coefficients, but sets their dtype when they are constants
        variables["r"] = torch.ones((), dtype=torch.float64)
        with torch.no_grad():
            repulsion = torch.broadcast_to(powers[12](variables, self.expression.functions), first.shape)
            dispersion = -torch.broadcast_to(powers[6](variables, self.expression.functions), first.shape)
        positive = (repulsion > 0) & (dispersion > 0)
        result = None
        if bool((positive | ((repulsion == 0) & (dispersion == 0))).all()):
            repulsion = torch.where(positive, repulsion, 1.0)
            dispersion = torch.where(positive, dispersion, 1.0)
            sigma = torch.where(positive, (repulsion / dispersion) ** (1 / 6), 0.0)
            epsilon = torch.where(positive, dispersion * dispersion / (4 * repulsion), 0.0)
            result = (classes, n_classes, sigma, epsilon)
        self._lennard_jones_cache = (key, result)
        return result

    def _lennard_jones_pairs(
        self, first: Tensor, second: Tensor, weight: Tensor | None, dtype: torch.dtype, box: Tensor | None
    ) -> PairSet | None:
        """The pairs as a Lennard-Jones pair set of :mod:`~mindsponge.forcefield.nonbonded`'s
        kernels (``sigma^2``, ``4 eps`` per pair, lattice shifts of the neighbour-list build)
        when the energy has that form (see :meth:`_lennard_jones_classes`), else ``None``."""
        classes = self._lennard_jones_classes()
        if classes is None:
            return None
        particle_class, n_classes, class_sigma, class_epsilon = classes
        index = particle_class[first] * n_classes + particle_class[second]
        sigma, epsilon = class_sigma[index].to(dtype), class_epsilon[index].to(dtype)
        if weight is not None:  # a pair in several interaction groups counts once per group
            epsilon = epsilon * weight
        charge_products = torch.zeros(len(first), dtype=dtype, device=first.device)
        pairs = lj_first(first, second, charge_products, sigma, epsilon)
        if box is not None:
            reference = self.neighbors.reference_positions.to(dtype)
            pairs.shifts = lattice_shifts(
                pairs.first, pairs.second, box, reference, self.neighbors.list_cutoff
            )
        return pairs

    def _expression_energies(self, distance: Tensor, pair_set: _CustomPairs) -> Tensor:
        """The expression on the pairs at ``distance`` ``(P,)`` nm, ``(P,)`` kJ/mol."""
        variables, static_cache = self._expression_inputs(pair_set, distance.dtype)
        variables = dict(variables)
        variables["r"] = distance
        return torch.broadcast_to(self.expression(variables, static_cache=static_cache), distance.shape)

    def _finish(
        self, distance: Tensor, energies: Tensor, pair_set: _CustomPairs, derivative: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Pair energies switched, weighted by the interaction groups and zero beyond the cutoff,
        and the same for their derivative ``dE/dr`` when given (``distance`` then carries no graph)."""
        if self.switch_distance is not None:
            width = self.cutoff - self.switch_distance
            x = ((distance - self.switch_distance) / width).clamp(min=0)
            switch = 1 + x * x * x * (-10 + x * (15 - 6 * x))
            if derivative is not None:
                derivative = derivative * switch + energies * (x * x * (-30 + x * (60 - 30 * x)) / width)
            energies = energies * switch
        if pair_set.weight is not None:
            energies = energies * pair_set.weight
            derivative = None if derivative is None else derivative * pair_set.weight
        if self.cutoff is not None:  # the listed pairs reach cutoff + skin
            inside, zero = distance.detach() < self.cutoff, torch.zeros((), dtype=energies.dtype)
            energies = torch.where(inside, energies, zero)
            derivative = None if derivative is None else torch.where(inside, derivative, zero)
        return energies, derivative

    def _autograd_energy(self, positions: Tensor, box: Tensor | None, pair_set: _CustomPairs) -> Tensor:
        """The energy built from differentiable operations (forces by autograd)."""
        first, second = pair_set.first, pair_set.second
        distance = _norm(space.minimum_image(positions[second] - positions[first], box))
        energies, _ = self._finish(distance, self._expression_energies(distance, pair_set), pair_set)
        return total_energy(energies, len(distance), positions)

    def _analytic_energy(self, positions: Tensor, box: Tensor | None, pair_set: _CustomPairs) -> Tensor:
        """The energy with forces from ``dE/dr`` of each pair: autograd runs on the expression
        of ``r`` alone ``(P,)``, the displacements are differentiated by hand (lattice shifts
        of the neighbour-list build, no minimum image per call)."""
        geometry = self._geometry(pair_set, box, positions.dtype)
        with torch.no_grad():
            at = positions.detach()
            if box is not None:
                at = unwrap_to_reference(at, box, self.neighbors.reference_positions)
            columns = at.T.contiguous()
            displacement = columns.index_select(1, geometry.second) - columns.index_select(1, geometry.first)
            if geometry.shifts is not None:
                displacement = displacement + geometry.shifts
            dx, dy, dz = displacement.unbind(0)
            distance = torch.sqrt(torch.addcmul(torch.addcmul(dx * dx, dy, dy), dz, dz))
        with torch.enable_grad():  # the expression's graph in r alone
            leaf = distance.detach().requires_grad_()
            energies = self._expression_energies(leaf, pair_set)
            if energies.requires_grad:
                (derivative,) = torch.autograd.grad(energies.sum(), leaf)
            else:  # a constant expression
                derivative = torch.zeros_like(distance)
        energies, derivative = self._finish(distance, energies.detach(), pair_set, derivative)
        energy = energies.sum()
        zero = torch.zeros((), dtype=energy.dtype, device=energy.device)
        # a pair result whose "Lennard-Jones" factor is -(dE/dr)/r and "Coulomb" part is zero
        result = PairResult((energy.detach(), zero), geometry, displacement, geometry.charge_products,
                             -derivative / distance)

        def recompute(differentiable_positions):  # for create_graph: the autograd formulation
            total = self._autograd_energy(differentiable_positions, box, pair_set)
            return total, 0.0 * total

        energy, _ = AnalyticEnergies.apply(positions, [("pair", result)], recompute)
        return energy

    def _lennard_jones_energy(self, positions: Tensor, box: Tensor | None, pairs: PairSet) -> Tensor:
        """Energy of a Lennard-Jones pair set by the kernels of :class:`~.nonbonded.Nonbonded`
        (compiled when available), with analytic forces."""
        cutoff, switch_distance = self.cutoff, self.switch_distance

        def evaluate(at: Tensor, keep_factors: bool, kernels=None):
            if box is not None:
                at = unwrap_to_reference(at, box, self.neighbors.reference_positions)
            coulomb = CoulombKind("plain")  # the pairs have zero charges
            return pair_kernel(at, box, pairs, coulomb, cutoff, switch_distance, keep_factors, kernels)

        with torch.no_grad():
            detached = positions.detach()
            result = evaluate(detached, True, _kernels.usable(detached))
        energy, _ = AnalyticEnergies.apply(positions, [("pair", result)], lambda at: evaluate(at, False))
        return energy

    @property
    def uses_lennard_jones_kernel(self) -> bool:
        """Whether the last evaluation ran on the Lennard-Jones kernel of
        :class:`~mindsponge.forcefield.nonbonded.Nonbonded` (see the class docstring)."""
        return self._used_lennard_jones_kernel

    # --- the compiled expression kernel (see mindsponge.forcefield.custom.compiled) ---------

    def _expression_kernel_term(self, kernels):
        """The kernel term over every non-excluded pair (no cutoff) or over the interaction groups'
        candidate pairs (a cutoff; the kernel keeps its own Verlet list), else ``None`` (a cutoff
        over all atoms keeps the cell-list search of the torch code)."""
        if self.cutoff is None:
            pairs = all_pairs(self.n_atoms, self.exclusions)
        elif isinstance(self.neighbors, _CandidateNeighborList):
            pairs = self.neighbors.candidates
        else:
            return None
        first, second, weight = self._group_pairs(pairs.cpu(), torch.float64)
        values = self._particle_values(torch.float64)
        inputs = {f"{name}{suffix}": (source, column) for column, name in enumerate(values)
                  for suffix, source in (("1", FIRST), ("2", SECOND))}
        table = torch.stack(list(values.values()), dim=1) if values else torch.zeros((self.n_atoms, 0))
        return expression_pair_term(
            kernels, self.expression, inputs, first, second, particle_table=table, weights=weight,
            cutoff=self.cutoff, skin=0.1 if self.neighbors is None else self.neighbors.skin,
            switch_distance=self.switch_distance, periodic=self.periodic,
            long_range=float(self.long_range_coefficient()) if self.long_range_correction else 0.0)

    def _kernel_key(self) -> tuple:
        return (self.particle_parameters._version, tuple(self.expression.global_values.tolist()))

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        if positions.ndim != 2 or positions.shape != (self.n_atoms, 3):
            raise ConfigurationError(
                f"{self.name}: positions must be a ({self.n_atoms}, 3) tensor in nm, "
                f"got {tuple(positions.shape)}"
            )
        box = pair_box(self, box)
        if not (self.lennard_jones_kernel and self._lennard_jones_classes() is not None):
            energy = self._expression_kernel_energy(positions, box)
            if energy is not None:
                self._used_lennard_jones_kernel = False
                return energy
        return self._torch_energy(positions, box)

    def _torch_energy(self, positions: Tensor, box: Tensor | None) -> Tensor:
        """The energy by the torch code: the Lennard-Jones kernel, the expression with ``dE/dr``
        by autograd, or autograd throughout (see the class docstring)."""
        pair_set = self._pair_set(positions, box)
        analytic = pair_set.cached and not (box is not None and box.requires_grad)
        self._used_lennard_jones_kernel = (
            analytic and self.lennard_jones_kernel and pair_set.lennard_jones is not None
        )
        if self._used_lennard_jones_kernel:
            total = self._lennard_jones_energy(positions, box, pair_set.lennard_jones)
        elif analytic and torch.is_grad_enabled() and positions.requires_grad:
            total = self._analytic_energy(positions, box, pair_set)
        else:
            total = self._autograd_energy(positions, box, pair_set)
        if self.long_range_correction:
            total = total + self.long_range_coefficient(positions.dtype) / space.volume(box)
        return total

    # --- long-range correction -----------------------------------------------------------

    def long_range_coefficient(self, dtype: torch.dtype = torch.float64) -> Tensor:
        """OpenMM's long-range correction coefficient ``C`` (kJ/mol nm^3; the energy is ``C / V``),
        as ``CustomNonbondedForceImpl::calcLongRangeCorrection`` (see
        :mod:`~mindsponge.forcefield.custom.long_range`). Computed once per set of global
        parameter values."""
        key = (tuple(self.expression.global_values.tolist()), self.particle_parameters._version)
        if self._lrc_cache is None or self._lrc_cache[0] != key:
            self._lrc_cache = (key, long_range.coefficient(self))
        return torch.as_tensor(self._lrc_cache[1], dtype=dtype)
