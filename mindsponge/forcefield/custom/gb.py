"""OpenMM's ``CustomGBForce``: energies built from per-particle computed values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from mindsponge import space
from mindsponge.forcefield.base import EnergyTerm
from mindsponge.forcefield.bonded import _norm
from mindsponge.forcefield.custom.energy import ExpressionEnergy, exclusion_pairs, pair_box, total_energy
from mindsponge.forcefield.expressions import ExpressionError, TabulatedFunction
from mindsponge.neighbors import NeighborList, all_pairs, pair_keys

_GB_KINDS = ("single", "pair", "pair_no_exclusions")


class CustomGB(EnergyTerm):
    """Generalized-Born-style energies built from per-particle computed values (OpenMM
    ``CustomGBForce``; e.g. Amber's OBC2 implicit solvent from ``implicit/obc2.xml``).

    Computed values are evaluated in order, each of one ``kind``:

    - ``"single"``: an expression of the particle's parameters, its earlier computed values
      (no suffix), its coordinates ``x, y, z`` and the global parameters;
    - ``"pair"`` / ``"pair_no_exclusions"``: for particle 1, the sum over every other particle 2
      within the cutoff (excluded partners left out, or not) of an expression of ``r``, the
      parameters and earlier values of both particles (suffixes ``1`` and ``2``).

    The energy is the sum of energy terms, each ``"single"`` (summed over particles, seeing all
    computed values) or a pair kind (summed over pairs ``i < j`` within the cutoff, with suffixes).

    Args:
        parameter_names: per-particle parameter names.
        parameters: ``(N, P)`` values.
        computed_values: sequence of ``(name, expression, kind)``.
        energy_terms: sequence of ``(expression, kind)``.
        global_parameters: name to value.
        functions: tabulated functions by name.
        cutoff: nm, or ``None`` for all pairs.
        periodic: minimum-image pairs (needs a cutoff and a box).
        exclusions: ``(E, 2)`` integer tensor.
        skin: Verlet skin of the neighbour list, nm.
        name: term name (default ``"CustomGB"``).

    The global parameters are the buffer of ``term.globals`` (an :class:`ExpressionEnergy`; change
    them with ``term.globals.set_global_parameter``).
    """

    def __init__(
        self,
        parameter_names: Sequence[str],
        parameters,
        computed_values: Sequence[tuple[str, str, str]],
        energy_terms: Sequence[tuple[str, str]],
        *,
        global_parameters: Mapping[str, float] | None = None,
        functions: Mapping[str, TabulatedFunction] | None = None,
        cutoff: float | None = None,
        periodic: bool = False,
        exclusions=None,
        skin: float = 0.1,
        name: str | None = None,
    ):
        super().__init__(name)
        context = f"CustomGB {self.name!r}"
        names = list(parameter_names)
        table = torch.as_tensor(parameters, dtype=torch.float64).reshape(-1, len(names))
        self.register_buffer("particle_parameters", table)
        self.parameter_names = names
        self.n_atoms = table.shape[0]
        global_parameters = dict(global_parameters or {})
        self.globals = ExpressionEnergy("0", global_parameters=global_parameters, context=context)
        self.value_names, self.value_kinds = [], []
        expressions = []
        for value_name, expression, kind in computed_values:
            earlier = list(self.value_names)
            expressions.append(
                self._compile(
                    expression,
                    kind,
                    earlier,
                    functions,
                    global_parameters,
                    f"{context} computed value {value_name!r}",
                )
            )
            self.value_names.append(value_name)
            self.value_kinds.append(self._check_kind(kind, context))
        self.values = nn.ModuleList(expressions)
        self.energy_kinds = [self._check_kind(kind, context) for _, kind in energy_terms]
        self.energies = nn.ModuleList(
            self._compile(
                expression,
                kind,
                self.value_names,
                functions,
                global_parameters,
                f"{context} energy term {number}",
            )
            for number, (expression, kind) in enumerate(energy_terms)
        )
        if cutoff is None and periodic:
            raise ExpressionError(f"{context}: periodic boundary conditions need a cutoff")
        self.cutoff = None if cutoff is None else float(cutoff)
        self.periodic = bool(periodic)
        exclusions = exclusion_pairs(exclusions)
        self.register_buffer("exclusions", exclusions)
        self.neighbors = None if self.cutoff is None else NeighborList(self.cutoff, skin=skin)
        self._pairs_cache: tuple | None = None

    @staticmethod
    def _check_kind(kind: str, context: str) -> str:
        if kind not in _GB_KINDS:
            raise ExpressionError(f"{context}: kind must be one of {_GB_KINDS}, got {kind!r}")
        return kind

    def _compile(self, expression, kind, value_names, functions, global_parameters, context):
        if kind == "single":
            variables = ["x", "y", "z", *self.parameter_names, *value_names]
        else:
            variables = ["r"] + [
                f"{base}{suffix}" for base in self.parameter_names + list(value_names) for suffix in "12"
            ]
        return ExpressionEnergy(
            expression,
            functions=functions,
            variables=[*variables, *global_parameters],
            context=context,
        )

    @property
    def is_empty(self) -> bool:
        return self.n_atoms == 0

    def _pairs(self, positions: Tensor, box: Tensor | None) -> tuple[Tensor, Tensor]:
        """All pairs ``i < j`` to consider and whether each one is excluded."""
        if self.neighbors is not None:
            pairs = self.neighbors.update(positions.detach(), box)
            key = ("list", self.neighbors.n_builds)
        else:
            key = ("all", len(positions))
            pairs = None
        if self._pairs_cache is None or self._pairs_cache[0] != key:
            if pairs is None:
                pairs = all_pairs(len(positions), device=positions.device)
            excluded = torch.isin(
                pair_keys(pairs, self.n_atoms), pair_keys(self.exclusions.to(pairs.device), self.n_atoms)
            )
            self._pairs_cache = (key, pairs, excluded)
        return self._pairs_cache[1], self._pairs_cache[2]

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        box = pair_box(self, box)
        dtype = positions.dtype
        pairs, excluded = self._pairs(positions, box)
        first, second = pairs[:, 0], pairs[:, 1]
        distance = _norm(space.minimum_image(positions[second] - positions[first], box))
        within = torch.ones_like(excluded) if self.cutoff is None else distance.detach() < self.cutoff
        masks = {"pair": within & ~excluded, "pair_no_exclusions": within}
        table = self.particle_parameters.to(dtype)
        per_particle = {name: table[:, column] for column, name in enumerate(self.parameter_names)}
        global_values = self.globals.parameter_variables(dtype)
        coordinates = {"x": positions[:, 0], "y": positions[:, 1], "z": positions[:, 2]}
        zero = torch.zeros((), dtype=dtype, device=positions.device)

        def single(expression):
            variables = {**global_values, **coordinates, **per_particle}
            return torch.broadcast_to(expression(variables), (self.n_atoms,))

        def pair_energies(expression, atom1, atom2):
            variables = dict(global_values)
            variables["r"] = distance
            for base, values in per_particle.items():
                variables[f"{base}1"], variables[f"{base}2"] = values[atom1], values[atom2]
            return torch.broadcast_to(expression(variables), distance.shape)

        for value_name, kind, expression in zip(self.value_names, self.value_kinds, self.values):
            if kind == "single":
                per_particle[value_name] = single(expression)
                continue
            mask = masks[kind]
            forward_terms = torch.where(mask, pair_energies(expression, first, second), zero)
            backward_terms = torch.where(mask, pair_energies(expression, second, first), zero)
            summed = positions.new_zeros(self.n_atoms).index_add(0, first, forward_terms)
            per_particle[value_name] = summed.index_add(0, second, backward_terms)
        total = None
        for kind, expression in zip(self.energy_kinds, self.energies):
            if kind == "single":
                energy = single(expression).sum()
            else:
                energy = torch.where(masks[kind], pair_energies(expression, first, second), zero).sum()
            total = energy if total is None else total + energy
        return total_energy(total if total is not None else zero, 1, positions)
