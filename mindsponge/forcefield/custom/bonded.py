"""Custom bonded terms: OpenMM's CustomBond/Angle/Torsion/External/CompoundBond/CentroidBondForce."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from common.errors import ConfigurationError
from mindsponge.forcefield.base import EnergyTerm
from mindsponge.forcefield.bonded import _angle, _BondedTerm, _dihedral, _norm
from mindsponge.forcefield.custom.compiled import CompiledPairs, expression_pair_term
from mindsponge.forcefield.custom.energy import ExpressionEnergy, total_energy
from mindsponge.forcefield.expressions import ExpressionError, TabulatedFunction
from mindsponge.forcefield.expressions.program import PAIR


class _CustomBonded(_BondedTerm):
    """Atoms, per-interaction parameters and an expression of the geometric variables."""

    variables: tuple[str, ...] = ()
    always_periodic = False  # the box always reaches the expression, whatever ``periodic`` says

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
        atoms = self._arrange(torch.as_tensor(atoms))
        super().__init__(atoms, {}, periodic or self.always_periodic, False, name)
        self.expression = ExpressionEnergy.for_interactions(
            len(self),
            energy,
            parameter_names,
            parameters,
            global_parameters,
            functions,
            self.variables,
            self._particles(),
            f"{type(self).__name__} {self.name!r}",
        )

    def _arrange(self, atoms: Tensor) -> Tensor:
        """The atoms as ``(M, atoms_per_term)`` (subclasses reshape them, or learn ``n`` from them)."""
        return atoms

    def _particles(self) -> tuple[str, ...]:
        return ()

    def _geometry(self, positions: Tensor, box: Tensor | None) -> dict[str, Tensor]:
        raise NotImplementedError

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        self._check_atoms(positions)
        variables = self.expression.parameter_variables(positions.dtype)
        variables.update(self._geometry(positions, box))
        energies = self.expression(variables, box if self.periodic else None)
        return total_energy(energies, len(self), positions)


class CustomBond(CompiledPairs, _CustomBonded):
    """Bonds with an energy expression of ``r`` (nm) (OpenMM ``CustomBondForce``).

    On CPU the expression runs on the compiled expression kernel, energy and ``dE/dr`` in one
    pass (:mod:`~mindsponge.forcefield.custom.compiled`; also the step loop's form of the term),
    unless it has no compiled form or ``compiled_expression = False``.

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

    def _expression_kernel_term(self, kernels):
        inputs = {name: (PAIR, column) for column, name in enumerate(self.expression.parameter_names)}
        return expression_pair_term(kernels, self.expression, inputs, self.atoms[:, 0], self.atoms[:, 1],
                                    pair_table=self.expression.table, periodic=self.periodic)

    def _kernel_key(self) -> tuple:
        return (self.expression.table._version, tuple(self.expression.global_values.tolist()))

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        self._check_atoms(positions)
        if self.periodic and box is None:
            raise ConfigurationError(
                f"CustomBond {self.name!r} uses periodic boundary conditions but box is None")
        energy = self._expression_kernel_energy(positions, box if self.periodic else None)
        return self._torch_energy(positions, box) if energy is None else energy

    def _torch_energy(self, positions: Tensor, box: Tensor | None) -> Tensor:
        return super().forward(positions, box)


class CustomAngle(_CustomBonded):
    """Angles with an energy expression of ``theta`` (rad, at the middle atom) (OpenMM
    ``CustomAngleForce``). Arguments as :class:`CustomBond` with ``(M, 3)`` atoms."""

    atoms_per_term = 3
    variables = ("theta",)

    def _geometry(self, positions, box):
        first = self._displacement(positions, box, 1, 0)
        second = self._displacement(positions, box, 1, 2)
        return {"theta": _angle(first, second)}


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
        periodic: the box always reaches ``periodicdistance`` (as in OpenMM); pass ``name`` by
            keyword.
    """

    atoms_per_term = 1
    variables = ("x", "y", "z")

    always_periodic = True

    def _arrange(self, atoms):
        return atoms.reshape(-1, 1)

    def _geometry(self, positions, box):
        coordinates = positions[self.atoms[:, 0]]
        return {"x": coordinates[:, 0], "y": coordinates[:, 1], "z": coordinates[:, 2]}

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        if self.expression.compiled.uses_box and box is None:
            raise ConfigurationError(
                f"CustomExternal {self.name!r}: periodicdistance() needs a box, got box=None")
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

    def _arrange(self, atoms):
        self.atoms_per_term = int(atoms.shape[1]) if atoms.ndim == 2 else 1
        self.variables = tuple(f"{axis}{index + 1}" for index in range(self.atoms_per_term) for axis in "xyz")
        return atoms

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
        self.expression = ExpressionEnergy.for_interactions(
            len(bonds),
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
            raise ConfigurationError(
                f"CustomCentroidBond {self.name!r} uses periodic boundary conditions but box is None"
            )
        variables = self.expression.parameter_variables(positions.dtype)
        variables.update(_point_variables(self.centers(positions)[self.bonds]))
        energies = self.expression(variables, box if self.periodic else None)
        return total_energy(energies, len(self.bonds), positions)
