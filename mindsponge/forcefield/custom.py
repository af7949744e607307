"""Energy terms given by an OpenMM-style expression: the counterparts of OpenMM's Custom*Forces.

Each term evaluates an energy expression (:mod:`mindsponge.forcefield.expressions`: Lepton's
language, tabulated functions, ``;`` definitions) on all its interactions at once and sums the
results; forces come from autograd. The expression sees:

- :class:`CustomBond` (OpenMM ``CustomBondForce``): ``r`` (nm) between two atoms;
- :class:`CustomAngle` (``CustomAngleForce``): ``theta`` (rad) at the middle of three atoms;
- :class:`CustomTorsion` (``CustomTorsionForce``): the dihedral ``theta`` (rad, ``[-pi, pi]``);
- :class:`CustomExternal` (``CustomExternalForce``): ``x, y, z`` (nm) of one atom, and
  ``periodicdistance(x, y, z, x0, y0, z0)``;
- :class:`CustomCompoundBond` (``CustomCompoundBondForce``): ``x1, y1, z1, x2...`` of particles
  ``p1, p2...``, ``distance(p1, p2)``, ``angle(p1, p2, p3)``, ``dihedral(p1, p2, p3, p4)``;
- :class:`CustomCentroidBond` (``CustomCentroidBondForce``): the same on weighted centres of
  atom groups ``g1, g2...``;
- :class:`CustomNonbonded` (``CustomNonbondedForce``): ``r`` (nm) of a pair, per-particle
  parameters with suffixes ``1`` and ``2``;
- :class:`CustomGB` (``CustomGBForce``): per-particle computed values (of one particle, or summed
  over its pairs) and energy terms of one particle or of pairs;

plus per-interaction parameters, global parameters and tabulated functions. Global parameters
are a buffer (``term.expression.global_values``, names in ``global_names``) holding OpenMM's
default values; :meth:`ExpressionEnergy.set_global_parameter` changes one (as
``Context.setParameter`` does in OpenMM). With ``periodic=True`` differences between atoms
use the minimum image (OpenMM's ``setUsesPeriodicBoundaryConditions``); otherwise the box is
ignored, so molecules must be whole.

:class:`CustomNonbonded` follows OpenMM's ``CustomNonbondedForce``: all pairs not excluded (or
only those of its interaction groups, each pair once per group it belongs to), a cutoff with or
without periodic images, the same optional switching function as ``NonbondedForce``, and
OpenMM's long-range correction (the same numerical integral over particle classes, see
:meth:`CustomNonbonded.long_range_coefficient`).

Example::

    lj14 = CustomBond(pairs, "4*epsilon*((sigma/r)^12-(sigma/r)^6)", ["sigma", "epsilon"], table)
    restraint = CustomExternal(atoms, "k*periodicdistance(x, y, z, x0, y0, z0)^2",
                               ["x0", "y0", "z0"], reference, global_parameters={"k": 1000.0})
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from mindsponge import _kernels, space
from mindsponge.forcefield.base import EnergyTerm
from mindsponge.forcefield.bonded import _BondedTerm, _dihedral, _norm
from mindsponge.forcefield.expressions import ExpressionError, TabulatedFunction, compile_expression
from mindsponge.forcefield.pair_kernels import (
    _AnalyticEnergies,
    _Coulomb,
    _flat_index,
    _lattice_shifts,
    _lj_first,
    _pair_kernel,
    _PairResult,
    _PairSet,
    _unwrap_to_reference,
)
from mindsponge.neighbors import NeighborList, all_pairs, pair_keys

__all__ = [
    "ExpressionEnergy",
    "CustomBond",
    "CustomAngle",
    "CustomTorsion",
    "CustomExternal",
    "CustomCompoundBond",
    "CustomCentroidBond",
    "CustomNonbonded",
    "CustomGB",
]


class ExpressionEnergy(nn.Module):
    """An energy expression with its per-interaction parameters, global parameters and tables.

    Args:
        energy: the expression (OpenMM's language).
        parameter_names: names of the per-interaction parameters.
        parameters: ``(M, P)`` values, one row per interaction (``P = len(parameter_names)``).
        global_parameters: name to default value.
        functions: tabulated functions by name (:class:`~.expressions.TabulatedFunction` modules).
        variables: the names the term itself provides (``r``, ``theta``, ``x1``...).
        particles: particle names of compound and centroid bonds.
        context: what the expression belongs to, for error messages.
        dynamic: the variables that change between calls (``("r",)`` for pair terms), see
            :func:`~mindsponge.forcefield.expressions.compile_expression`.

    Raises:
        ExpressionError: the expression does not compile, or uses a variable that is neither a
            parameter nor provided by the term (the message names it and what is allowed).
    """

    def __init__(
        self,
        energy: str,
        parameter_names: Sequence[str] = (),
        parameters=None,
        global_parameters: Mapping[str, float] | None = None,
        functions: Mapping[str, TabulatedFunction] | None = None,
        variables: Sequence[str] = (),
        particles: Sequence[str] = (),
        context: str = "expression",
        dynamic: Sequence[str] | None = None,
    ):
        super().__init__()
        functions = dict(functions or {})
        global_parameters = dict(global_parameters or {})
        self.parameter_names = [str(name) for name in parameter_names]
        table = (
            torch.zeros((0, len(self.parameter_names)), dtype=torch.float64)
            if parameters is None
            else torch.as_tensor(parameters, dtype=torch.float64)
        )
        if table.ndim == 1 and len(self.parameter_names) == 0:
            table = table.reshape(-1, 0)
        if table.ndim != 2 or table.shape[1] != len(self.parameter_names):
            raise ExpressionError(
                f"{context}: parameters must have shape (M, {len(self.parameter_names)}) for "
                f"{self.parameter_names}, got {tuple(table.shape)}"
            )
        self.register_buffer("table", table)
        self.global_names = list(global_parameters)
        self.register_buffer(
            "global_values",
            torch.tensor([float(value) for value in global_parameters.values()], dtype=torch.float64),
        )
        for name, function in functions.items():
            if not isinstance(function, TabulatedFunction):
                raise ExpressionError(
                    f"{context}: tabulated function {name!r} must be a TabulatedFunction, "
                    f"got {type(function).__name__}"
                )
        self.functions = nn.ModuleDict(functions)
        self.context = context
        self.compiled = compile_expression(
            energy, {name: f.n_arguments for name, f in functions.items()}, particles, context, dynamic
        )
        allowed = set(variables) | set(self.parameter_names) | set(self.global_names)
        unknown = self.compiled.variables - allowed
        if unknown:
            raise ExpressionError(
                f"{context}: expression {energy!r} uses unknown variable(s) {sorted(unknown)}; it may use "
                f"{sorted(allowed)}"
            )

    @property
    def energy(self) -> str:
        """The expression's source text."""
        return self.compiled.expression

    @property
    def global_parameters(self) -> dict[str, float]:
        """Current values of the global parameters, by name."""
        return dict(zip(self.global_names, self.global_values.tolist()))

    def set_global_parameter(self, name: str, value: float) -> None:
        """Change a global parameter (in place: like ``Context.setParameter`` in OpenMM)."""
        if name not in self.global_names:
            raise KeyError(f"{self.context}: no global parameter {name!r}; it has {self.global_names}")
        with torch.no_grad():
            self.global_values[self.global_names.index(name)] = float(value)

    def parameter_variables(self, dtype: torch.dtype, rows: Tensor | None = None) -> dict[str, Tensor]:
        """The per-interaction parameters (all rows, or ``rows``) and the global parameters as
        variables of the expression, in ``dtype``."""
        table = self.table if rows is None else self.table[rows]
        table = table.to(dtype)
        variables = {name: table[:, column] for column, name in enumerate(self.parameter_names)}
        values = self.global_values.to(dtype)
        variables.update({name: values[index] for index, name in enumerate(self.global_names)})
        return variables

    def forward(
        self, variables: Mapping[str, Tensor], box: Tensor | None = None, static_cache: dict | None = None
    ) -> Tensor:
        """Per-interaction energies, kJ/mol, broadcast over the shapes of ``variables`` (see
        :meth:`~mindsponge.forcefield.expressions.CompiledExpression.__call__` for ``static_cache``)."""
        return self.compiled(variables, self.functions, box, static_cache)

    def extra_repr(self) -> str:
        return f"energy={self.energy!r}, parameters={self.parameter_names}, globals={self.global_parameters}"


def _total(energies: Tensor, count: int, positions: Tensor) -> Tensor:
    """Sum of per-interaction energies; a constant expression counts once per interaction and
    stays attached to the positions' graph."""
    if energies.ndim == 0:
        energies = energies * count
    total = energies.sum()
    if not total.requires_grad and positions.requires_grad:
        total = total + 0.0 * positions.sum()
    return total.to(positions.dtype)


class _CustomBonded(_BondedTerm):
    """Atoms, per-interaction parameters and an expression of the geometric variables."""

    variables: tuple[str, ...] = ()

    def __init__(
        self,
        atoms,
        energy: str,
        parameter_names: Sequence[str] = (),
        parameters=None,
        global_parameters: Mapping[str, float] | None = None,
        functions: Mapping[str, TabulatedFunction] | None = None,
        periodic: bool = False,
        name: str | None = None,
    ):
        super().__init__(atoms, {}, periodic, False, name)
        if parameters is None:
            parameters = torch.zeros((len(self), len(parameter_names)), dtype=torch.float64)
        self.expression = ExpressionEnergy(
            energy,
            parameter_names,
            parameters,
            global_parameters,
            functions,
            self.variables,
            self._particles(),
            f"{type(self).__name__} {self.name!r}",
        )
        if self.expression.table.shape[0] != len(self):
            raise ExpressionError(
                f"{type(self).__name__} {self.name!r}: {self.expression.table.shape[0]} parameter rows for "
                f"{len(self)} interactions"
            )

    def _particles(self) -> tuple[str, ...]:
        return ()

    def _geometry(self, positions: Tensor, box: Tensor | None) -> dict[str, Tensor]:
        raise NotImplementedError

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        self._check_atoms(positions)
        variables = self.expression.parameter_variables(positions.dtype)
        variables.update(self._geometry(positions, box))
        energies = self.expression(variables, box if self.periodic else None)
        return _total(energies, len(self), positions)


class CustomBond(_CustomBonded):
    """Bonds with an energy expression of ``r`` (nm) (OpenMM ``CustomBondForce``).

    Args:
        atoms: ``(M, 2)`` integer tensor.
        energy: the expression, kJ/mol.
        parameter_names: per-bond parameter names.
        parameters: ``(M, P)`` per-bond values.
        global_parameters: name to value.
        functions: tabulated functions by name.
        periodic: minimum-image bond vectors (needs a box).
        name: term name (default ``"CustomBond"``).
    """

    atoms_per_term = 2
    variables = ("r",)

    def _geometry(self, positions, box):
        return {"r": _norm(self._displacement(positions, box, 0, 1))}


class CustomAngle(_CustomBonded):
    """Angles with an energy expression of ``theta`` (rad, at the middle atom) (OpenMM
    ``CustomAngleForce``). Arguments as :class:`CustomBond` with ``(M, 3)`` atoms."""

    atoms_per_term = 3
    variables = ("theta",)

    def _geometry(self, positions, box):
        first = self._displacement(positions, box, 1, 0)
        second = self._displacement(positions, box, 1, 2)
        return {"theta": torch.atan2(_norm(torch.cross(first, second, dim=-1)), (first * second).sum(-1))}


class CustomTorsion(_CustomBonded):
    """Torsions with an energy expression of the dihedral ``theta`` (rad, ``[-pi, pi]``, IUPAC sign)
    (OpenMM ``CustomTorsionForce``). Arguments as :class:`CustomBond` with ``(M, 4)`` atoms."""

    atoms_per_term = 4
    variables = ("theta",)

    def _geometry(self, positions, box):
        return {
            "theta": _dihedral(*(self._displacement(positions, box, start, start + 1) for start in range(3)))
        }


class CustomExternal(_CustomBonded):
    """A per-atom energy of the atom's coordinates ``x, y, z`` (nm) (OpenMM ``CustomExternalForce``),
    e.g. position restraints ``k*periodicdistance(x, y, z, x0, y0, z0)^2``.

    The coordinates are the positions as given (not wrapped into the box); ``periodicdistance``
    uses the minimum image and needs a box.

    Args:
        atoms: ``(M,)`` integer tensor.
        energy, parameter_names, parameters, global_parameters, functions, name: as :class:`CustomBond`.
    """

    atoms_per_term = 1
    variables = ("x", "y", "z")

    def __init__(
        self,
        atoms,
        energy: str,
        parameter_names: Sequence[str] = (),
        parameters=None,
        global_parameters: Mapping[str, float] | None = None,
        functions: Mapping[str, TabulatedFunction] | None = None,
        name: str | None = None,
    ):
        atoms = torch.as_tensor(atoms).reshape(-1, 1)
        super().__init__(
            atoms, energy, parameter_names, parameters, global_parameters, functions, periodic=True, name=name
        )

    def _geometry(self, positions, box):
        coordinates = positions[self.atoms[:, 0]]
        return {"x": coordinates[:, 0], "y": coordinates[:, 1], "z": coordinates[:, 2]}

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        if self.expression.compiled.uses_box and box is None:
            raise ValueError(f"CustomExternal {self.name!r}: periodicdistance() needs a box, got box=None")
        return super().forward(positions, box)


def _point_variables(points: Tensor) -> dict[str, Tensor]:
    """``x1, y1, z1, x2...`` from points ``(M, n, 3)``."""
    variables = {}
    for index in range(points.shape[1]):
        for axis, label in enumerate("xyz"):
            variables[f"{label}{index + 1}"] = points[:, index, axis]
    return variables


class CustomCompoundBond(_CustomBonded):
    """Interactions of ``n`` particles ``p1...pn`` with an expression of their coordinates
    ``x1, y1, z1...`` and of ``distance``, ``angle`` and ``dihedral`` on them (OpenMM
    ``CustomCompoundBondForce``).

    Args:
        atoms: ``(M, n)`` integer tensor.
        energy, parameter_names, parameters, global_parameters, functions, periodic, name: as
            :class:`CustomBond`.
    """

    def __init__(
        self,
        atoms,
        energy: str,
        parameter_names: Sequence[str] = (),
        parameters=None,
        global_parameters: Mapping[str, float] | None = None,
        functions: Mapping[str, TabulatedFunction] | None = None,
        periodic: bool = False,
        name: str | None = None,
    ):
        atoms = torch.as_tensor(atoms)
        self.atoms_per_term = int(atoms.shape[1]) if atoms.ndim == 2 else 1
        self.variables = tuple(f"{axis}{index + 1}" for index in range(self.atoms_per_term) for axis in "xyz")
        super().__init__(
            atoms, energy, parameter_names, parameters, global_parameters, functions, periodic, name
        )

    def _particles(self):
        return tuple(f"p{index + 1}" for index in range(self.atoms_per_term))

    def _geometry(self, positions, box):
        return _point_variables(positions[self.atoms])


class CustomCentroidBond(EnergyTerm):
    """Interactions of ``n`` weighted centres of atom groups ``g1...gn`` (OpenMM
    ``CustomCentroidBondForce``): the expression sees the centres' coordinates ``x1, y1, z1...``
    and ``distance``, ``angle``, ``dihedral`` of groups.

    Args:
        groups: sequence of ``(atoms, weights)``, one per group: atom indices and their weights
            (normalised to sum 1 here; pass the masses for centres of mass).
        bonds: ``(M, n)`` integer tensor of group indices.
        energy, parameter_names, parameters, global_parameters, functions: as :class:`CustomBond`.
        periodic: minimum-image differences between centres (the centres themselves are weighted
            averages of the positions as given, so each group must be whole, as in OpenMM).
        name: term name (default ``"CustomCentroidBond"``).
    """

    def __init__(
        self,
        groups,
        bonds,
        energy: str,
        parameter_names: Sequence[str] = (),
        parameters=None,
        global_parameters: Mapping[str, float] | None = None,
        functions: Mapping[str, TabulatedFunction] | None = None,
        periodic: bool = False,
        name: str | None = None,
    ):
        super().__init__(name)
        members, weights, owners = [], [], []
        for number, (atoms, group_weights) in enumerate(groups):
            atoms = [int(atom) for atom in atoms]
            group_weights = np.asarray(group_weights, dtype=np.float64).reshape(-1)
            if len(atoms) == 0 or len(group_weights) != len(atoms) or not group_weights.sum() != 0:
                raise ExpressionError(
                    f"CustomCentroidBond {self.name!r}: group {number} needs one weight per atom with a "
                    f"non-zero sum, got {len(atoms)} atoms and weights {group_weights.tolist()}"
                )
            members += atoms
            weights += (group_weights / group_weights.sum()).tolist()
            owners += [number] * len(atoms)
        self.register_buffer("members", torch.tensor(members, dtype=torch.long))
        self.register_buffer("weights", torch.tensor(weights, dtype=torch.float64))
        self.register_buffer("owners", torch.tensor(owners, dtype=torch.long))
        self.n_groups = len(groups)
        bonds = torch.as_tensor(bonds, dtype=torch.long)
        if bonds.ndim != 2 or (bonds.numel() and (int(bonds.min()) < 0 or int(bonds.max()) >= self.n_groups)):
            raise ExpressionError(
                f"CustomCentroidBond {self.name!r}: bonds must be an (M, n) tensor of group "
                f"indices below {self.n_groups}, got shape {tuple(bonds.shape)}"
            )
        self.register_buffer("bonds", bonds)
        self.periodic = bool(periodic)
        n = bonds.shape[1]
        if parameters is None:
            parameters = torch.zeros((len(bonds), len(parameter_names)), dtype=torch.float64)
        self.expression = ExpressionEnergy(
            energy,
            parameter_names,
            parameters,
            global_parameters,
            functions,
            [f"{axis}{index + 1}" for index in range(n) for axis in "xyz"],
            [f"g{index + 1}" for index in range(n)],
            f"CustomCentroidBond {self.name!r}",
        )

    @property
    def is_empty(self) -> bool:
        return len(self.bonds) == 0

    def centers(self, positions: Tensor) -> Tensor:
        """Weighted centres of the groups, ``(G, 3)`` nm."""
        weighted = positions[self.members] * self.weights.to(positions.dtype).unsqueeze(-1)
        return positions.new_zeros((self.n_groups, 3)).index_add(0, self.owners, weighted)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        if self.periodic and box is None:
            raise ValueError(
                f"CustomCentroidBond {self.name!r} uses periodic boundary conditions but box is None"
            )
        variables = self.expression.parameter_variables(positions.dtype)
        variables.update(_point_variables(self.centers(positions)[self.bonds]))
        energies = self.expression(variables, box if self.periodic else None)
        return _total(energies, len(self.bonds), positions)


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
    lennard_jones: _PairSet | None
    variables: dict | None = None
    static_cache: dict | None = None
    geometry: _PairSet | None = None


class CustomNonbonded(EnergyTerm):
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

    Forces are analytic: autograd differentiates the expression with respect to ``r`` only, and
    the chain rule through the pair displacements is done by hand. An energy of the form
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
        exclusions = (
            torch.zeros((0, 2), dtype=torch.long)
            if exclusions is None
            else torch.as_tensor(exclusions, dtype=torch.long).reshape(-1, 2)
        )
        self.register_buffer("exclusions", exclusions)
        self.groups: Tensor | None = None  # (G, 2, N) membership of the interaction groups' two sets
        if interaction_groups:
            membership = torch.zeros((len(interaction_groups), 2, self.n_atoms), dtype=torch.bool)
            for number, (first, second) in enumerate(interaction_groups):
                membership[number, 0, torch.as_tensor(sorted(first), dtype=torch.long)] = True
                membership[number, 1, torch.as_tensor(sorted(second), dtype=torch.long)] = True
            del self.groups
            self.register_buffer("groups", membership)
        self.neighbors = (
            None if self.cutoff is None else NeighborList(self.cutoff, skin=skin, exclusions=exclusions)
        )
        self._pairs_cache: tuple | None = None
        self._pair_set_cache: tuple | None = None
        self._lrc_cache: tuple | None = None
        self.lennard_jones_kernel = True
        self._used_lennard_jones_kernel = False
        self._lennard_jones_cache: tuple | None = None

    @property
    def is_empty(self) -> bool:
        return self.n_atoms < 2

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
        first, second = pairs[:, 0], pairs[:, 1]
        weight = None
        if self.groups is not None:
            in_first, in_second = self.groups[:, 0], self.groups[:, 1]
            multiplicity = (
                (in_first[:, first] & in_second[:, second]) | (in_second[:, first] & in_first[:, second])
            ).sum(0)
            selected = torch.nonzero(multiplicity > 0).squeeze(1)
            first, second, weight = first[selected], second[selected], multiplicity[selected].to(dtype)
        if parameters_need_grad:
            return _CustomPairs(first, second, weight, False, None)
        lennard_jones = None
        if self.lennard_jones_kernel:
            lennard_jones = self._lennard_jones_pairs(first, second, weight, dtype, box)
        pair_set = _CustomPairs(first, second, weight, True, lennard_jones)
        self._pair_set_cache = (key, pair_set)
        return pair_set

    def _expression_inputs(self, pair_set: _CustomPairs, dtype: torch.dtype) -> tuple[dict, dict | None]:
        """The variables and static cache of the expression on a pair set (made on first use)."""
        if pair_set.variables is None:
            pair_set.variables = self._pair_variables(dtype, pair_set.first, pair_set.second)
            pair_set.static_cache = {} if pair_set.cached else None
        return pair_set.variables, pair_set.static_cache

    def _geometry(self, pair_set: _CustomPairs, box: Tensor | None, dtype: torch.dtype) -> _PairSet:
        """The pairs with lattice shifts and scatter indices for analytic forces (made on first use)."""
        if pair_set.geometry is None:
            first, second = pair_set.first, pair_set.second
            zeros = torch.zeros(len(first), dtype=dtype, device=first.device)
            geometry = _PairSet(first, second, zeros, zeros[:0], zeros[:0])
            geometry.flat_first = _flat_index(first, self.n_atoms)
            geometry.flat_second = _flat_index(second, self.n_atoms)
            if box is not None:
                reference = self.neighbors.reference_positions.to(dtype)
                geometry.shifts = _lattice_shifts(first, second, box, reference, self.neighbors.list_cutoff)
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
    ) -> _PairSet | None:
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
        pairs = _lj_first(first, second, charge_products, sigma, epsilon)
        if box is not None:
            reference = self.neighbors.reference_positions.to(dtype)
            pairs.shifts = _lattice_shifts(
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
        return _total(energies, len(distance), positions)

    def _analytic_energy(self, positions: Tensor, box: Tensor | None, pair_set: _CustomPairs) -> Tensor:
        """The energy with forces from ``dE/dr`` of each pair: autograd runs on the expression
        of ``r`` alone ``(P,)``, the displacements are differentiated by hand (lattice shifts
        of the neighbour-list build, no minimum image per call)."""
        geometry = self._geometry(pair_set, box, positions.dtype)
        with torch.no_grad():
            at = positions.detach()
            if box is not None:
                at = _unwrap_to_reference(at, box, self.neighbors.reference_positions)
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
        result = _PairResult((energy.detach(), zero), geometry, displacement, geometry.charge_products,
                             -derivative / distance)

        def recompute(differentiable_positions):  # for create_graph: the autograd formulation
            total = self._autograd_energy(differentiable_positions, box, pair_set)
            return total, 0.0 * total

        energy, _ = _AnalyticEnergies.apply(positions, [("pair", result)], recompute)
        return energy

    def _lennard_jones_energy(self, positions: Tensor, box: Tensor | None, pairs: _PairSet) -> Tensor:
        """Energy of a Lennard-Jones pair set by the kernels of :class:`~.nonbonded.Nonbonded`
        (compiled when available), with analytic forces."""
        cutoff, switch_distance = self.cutoff, self.switch_distance

        def evaluate(at: Tensor, keep_factors: bool, kernels=None):
            if box is not None:
                at = _unwrap_to_reference(at, box, self.neighbors.reference_positions)
            coulomb = _Coulomb("plain")  # the pairs have zero charges
            return _pair_kernel(at, box, pairs, coulomb, cutoff, switch_distance, keep_factors, kernels)

        with torch.no_grad():
            detached = positions.detach()
            result = evaluate(detached, True, _kernels.usable(detached))
        energy, _ = _AnalyticEnergies.apply(positions, [("pair", result)], lambda at: evaluate(at, False))
        return energy

    @property
    def uses_lennard_jones_kernel(self) -> bool:
        """Whether the last evaluation ran on the Lennard-Jones kernel of
        :class:`~mindsponge.forcefield.nonbonded.Nonbonded` (see the class docstring)."""
        return self._used_lennard_jones_kernel

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        if positions.ndim != 2 or positions.shape != (self.n_atoms, 3):
            raise ValueError(
                f"{self.name}: positions must be a ({self.n_atoms}, 3) tensor in nm, "
                f"got {tuple(positions.shape)}"
            )
        if self.periodic:
            if box is None:
                raise ValueError(
                    f"CustomNonbonded {self.name!r} uses periodic boundary conditions but box is None"
                )
            space.check_box(box)
        else:
            box = None
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
        """OpenMM's long-range correction coefficient ``C`` (kJ/mol nm^3; the energy is ``C / V``).

        As ``CustomNonbondedForceImpl::calcLongRangeCorrection``: particles are grouped into
        classes of equal parameters, and for each pair of classes the energy is integrated
        from the cutoff to infinity (substituting ``x = r_c / r``) and, with switching, weighted
        by ``1 - S`` over the switching interval, by the same iterated midpoint rule (tripling
        the points until the relative change is below 1e-5), weighted by the number of
        interacting pairs of those classes. Computed once per set of global parameter values.
        """
        key = (tuple(self.expression.global_values.tolist()), self.particle_parameters._version)
        if self._lrc_cache is None or self._lrc_cache[0] != key:
            self._lrc_cache = (key, self._compute_long_range_coefficient())
        return torch.as_tensor(self._lrc_cache[1], dtype=dtype)

    def _class_pair_counts(self, classes: np.ndarray, n_classes: int) -> np.ndarray:
        """Number of interacting pairs for each pair of classes ``(C, C)`` (upper triangle used)."""
        if self.groups is None:
            counts = np.bincount(classes, minlength=n_classes).astype(np.float64)
            pairs = np.outer(counts, counts)
            pairs[np.diag_indices(n_classes)] = counts * (counts + 1) / 2
            return pairs
        pairs = np.zeros((n_classes, n_classes))
        for in_first, in_second in self.groups.numpy():
            first = np.bincount(classes[in_first], minlength=n_classes).astype(np.float64)
            second = np.bincount(classes[in_second], minlength=n_classes).astype(np.float64)
            both = np.bincount(classes[in_first & in_second], minlength=n_classes).astype(np.float64)
            ordered = np.outer(first, second)
            group = ordered + ordered.T - np.outer(both, both)
            group[np.diag_indices(n_classes)] = np.diag(ordered) - both * (both + 1) / 2
            pairs += group
        return pairs

    def _compute_long_range_coefficient(self) -> float:
        classes_table, classes = self._particle_classes()
        n_classes = len(classes_table)
        counts = self._class_pair_counts(classes.numpy(), n_classes)
        first, second = np.triu_indices(n_classes)
        weights = counts[first, second]
        values = self._particle_values(torch.float64, classes_table)
        base = self._global_values(torch.float64)
        for value_name, per_class in values.items():
            base[f"{value_name}1"] = per_class[torch.as_tensor(first)].unsqueeze(1)
            base[f"{value_name}2"] = per_class[torch.as_tensor(second)].unsqueeze(1)

        def energy(r: np.ndarray) -> np.ndarray:
            variables = dict(base)
            variables["r"] = torch.as_tensor(r, dtype=torch.float64).unsqueeze(0)
            with torch.no_grad():
                result = self.expression(variables)
            return torch.broadcast_to(result, (len(first), len(r))).numpy()

        cutoff = self.cutoff
        tail = _iterated_midpoint(
            lambda x: energy(cutoff / x) * (cutoff / x) ** 4,
            len(first),
            "does the energy go to 0 faster than 1/r^2?",
        )
        integrals = tail / cutoff
        if self.switch_distance is not None:
            start, width = self.switch_distance, cutoff - self.switch_distance
            switched = _iterated_midpoint(
                lambda x: (
                    x
                    * x
                    * x
                    * (10 + x * (-15 + x * 6))
                    * energy(start + x * width)
                    * (start + x * width) ** 2
                ),
                len(first),
                "is the energy finite everywhere in the switching interval?",
            )
            integrals = integrals + switched * width
        n = float(self.n_atoms)
        total = float((weights * integrals).sum()) / (n * (n + 1) / 2)
        return 2 * math.pi * n * n * total


def _iterated_midpoint(function, count: int, hint: str) -> np.ndarray:
    """Integrals over ``[0, 1]`` of ``count`` functions (``function(x) -> (count, len(x))``) by
    OpenMM's rule: midpoints of 1, 3, 9... intervals, reusing the previous points, until each
    relative change is below 1e-5 (after at least four rounds)."""
    sums = np.zeros(count)
    done = np.zeros(count, dtype=bool)
    n_points = 1
    for iteration in range(11):
        index = np.arange(n_points)
        index = index[index % 3 != 1]
        x = (index + 0.5) / n_points
        new = function(x).sum(1)
        updated = new / n_points + sums / 3
        with np.errstate(divide="ignore", invalid="ignore"):
            change = np.abs((updated - sums) / updated)
        sums = np.where(done, sums, updated)
        converged = (iteration > 2) & ((change < 1e-5) | (updated == 0))
        failing = (iteration == 10) | ((iteration > 7) & (change > 1e-3))
        if np.any(failing & ~done & ~converged):
            raise ExpressionError(f"CustomNonbonded: the long-range correction did not converge; {hint}")
        done |= converged
        if done.all():
            return sums
        n_points *= 3
    raise ExpressionError(f"CustomNonbonded: the long-range correction did not converge; {hint}")


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
        exclusions = (
            torch.zeros((0, 2), dtype=torch.long)
            if exclusions is None
            else torch.as_tensor(exclusions, dtype=torch.long).reshape(-1, 2)
        )
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
        if self.periodic:
            if box is None:
                raise ValueError(f"CustomGB {self.name!r} uses periodic boundary conditions but box is None")
            space.check_box(box)
        else:
            box = None
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
        return _total(total if total is not None else zero, 1, positions)
