"""The expression of a custom term with its parameters, and what the custom terms share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from common.errors import ConfigurationError, UnknownNameError
from mindsponge import space
from mindsponge.forcefield.expressions import ExpressionError, TabulatedFunction, compile_expression


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

    @classmethod
    def for_interactions(
        cls,
        count: int,
        energy: str,
        parameter_names: Sequence[str],
        parameters,
        global_parameters: Mapping[str, float] | None,
        functions: Mapping[str, TabulatedFunction] | None,
        variables: Sequence[str],
        particles: Sequence[str],
        context: str,
    ) -> ExpressionEnergy:
        """The expression of a term with ``count`` interactions: ``parameters`` ``None`` means an
        empty ``(count, 0)`` table; otherwise it must hold one row per interaction.

        Raises:
            ExpressionError: see the class, or a number of rows other than ``count``.
        """
        if parameters is None:
            parameters = torch.zeros((count, len(parameter_names)), dtype=torch.float64)
        expression = cls(
            energy, parameter_names, parameters, global_parameters, functions, variables, particles, context
        )
        if expression.table.shape[0] != count:
            raise ExpressionError(
                f"{context}: {expression.table.shape[0]} parameter rows for {count} interactions"
            )
        return expression

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
            raise UnknownNameError(
                f"{self.context}: no global parameter {name!r}; it has {self.global_names}")
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


def total_energy(energies: Tensor, count: int, positions: Tensor) -> Tensor:
    """Sum of per-interaction energies; a constant expression counts once per interaction and
    stays attached to the positions' graph."""
    if energies.ndim == 0:
        energies = energies * count
    total = energies.sum()
    if not total.requires_grad and positions.requires_grad:
        total = total + 0.0 * positions.sum()
    return total.to(positions.dtype)


def exclusion_pairs(exclusions) -> Tensor:
    """Excluded pairs as an ``(E, 2)`` long tensor (``None``: none)."""
    if exclusions is None:
        return torch.zeros((0, 2), dtype=torch.long)
    return torch.as_tensor(exclusions, dtype=torch.long).reshape(-1, 2)


def pair_box(term, box: Tensor | None) -> Tensor | None:
    """The box a pair term works in: checked when ``term.periodic``, else ``None`` (ignored).

    Raises:
        ValueError: a periodic term without a box, or a malformed box.
    """
    if not term.periodic:
        return None
    if box is None:
        raise ConfigurationError(
            f"{type(term).__name__} {term.name!r} uses periodic boundary conditions but box is None"
        )
    space.check_box(box)
    return box
