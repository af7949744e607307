"""Reading OpenMM forces: their rows in MD units, their parameters and tables, and the error
for what mindsponge cannot translate."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from common.errors import ConfigurationError

SUPPORTED_FORCES = (
    "HarmonicBondForce",
    "HarmonicAngleForce",
    "PeriodicTorsionForce",
    "CMAPTorsionForce",
    "NonbondedForce",
    "CustomBondForce",
    "CustomAngleForce",
    "CustomTorsionForce",
    "CustomExternalForce",
    "CustomCompoundBondForce",
    "CustomCentroidBondForce (explicit group weights)",
    "CustomNonbondedForce",
    "CustomGBForce",
    "CMMotionRemover, MonteCarloBarostat, MonteCarloAnisotropicBarostat (used by the Simulation)",
)

# CustomTorsionForce energy expressions of harmonic impropers (whitespace removed, a numeric

class UnsupportedOpenMMForceError(ConfigurationError):
    """An OpenMM force, or an option of one, that mindsponge cannot translate."""


def unsupported(index: int, force, what: str) -> UnsupportedOpenMMForceError:
    """The error for OpenMM force number ``index`` that cannot be read: ``what``, and what is supported."""
    return UnsupportedOpenMMForceError(
        f"OpenMM force {index} ({type(force).__name__}, name {force.getName()!r}): {what}. "
        f"mindsponge supports {', '.join(SUPPORTED_FORCES)}"
    )


def table(rows: list, atoms_per_term: int, values_per_term: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split OpenMM parameter rows ``(atom, ..., value, ...)`` into atoms ``(M, k)`` and values ``(V, M)``."""
    atoms = torch.tensor([row[:atoms_per_term] for row in rows], dtype=torch.long).reshape(
        len(rows), atoms_per_term
    )
    values = torch.tensor(
        [[md(value) for value in row[atoms_per_term:]] for row in rows], dtype=torch.float64
    )
    return atoms, values.reshape(len(rows), values_per_term).T


def tabulated_functions(index: int, force) -> dict:
    """The force's tabulated functions as :mod:`~mindsponge.forcefield.expressions` modules."""
    import openmm

    from mindsponge.forcefield import expressions

    functions = {}
    for number in range(force.getNumTabulatedFunctions()):
        name = force.getTabulatedFunctionName(number)
        function = force.getTabulatedFunction(number)
        parameters = function.getFunctionParameters()
        if isinstance(function, openmm.Continuous1DFunction):
            values, low, high = parameters
            table = expressions.Continuous1DFunction(values, low, high, function.getPeriodic())
        elif isinstance(function, openmm.Continuous2DFunction):
            table = expressions.Continuous2DFunction(*parameters, periodic=function.getPeriodic())
        elif isinstance(function, openmm.Continuous3DFunction):
            table = expressions.Continuous3DFunction(*parameters, periodic=function.getPeriodic())
        elif isinstance(function, openmm.Discrete1DFunction):
            table = expressions.Discrete1DFunction(parameters)
        elif isinstance(function, openmm.Discrete2DFunction):
            table = expressions.Discrete2DFunction(*parameters)
        elif isinstance(function, openmm.Discrete3DFunction):
            table = expressions.Discrete3DFunction(*parameters)
        else:
            raise unsupported(index, force, f"tabulated function {name!r} is a {type(function).__name__}")
        functions[name] = table
    return functions


def global_parameters(force) -> dict[str, float]:
    """The default values of a Custom force's global parameters, by name (OpenMM's units: nm, kJ/mol, ps)."""
    return {
        force.getGlobalParameterName(number): md(force.getGlobalParameterDefaultValue(number))
        for number in range(force.getNumGlobalParameters())
    }


def parameter_rows(rows: list, count: int, width: int) -> torch.Tensor:
    """Per-item parameter lists as a float64 tensor of shape (``count``, ``width``)."""
    values = torch.tensor([[md(value) for value in row] for row in rows], dtype=torch.float64)
    return values.reshape(count, width)


def md(value) -> float:
    """A float in OpenMM's MD units from a float or an ``openmm.unit.Quantity``."""
    if hasattr(value, "value_in_unit_system"):
        from openmm import unit

        return float(value.value_in_unit_system(unit.md_unit_system))
    return float(value)



@contextmanager
def translating(index: int, force):
    """Turn an :class:`~mindsponge.forcefield.expressions.ExpressionError` raised while a force
    is translated into an :class:`UnsupportedOpenMMForceError` naming the force."""
    from mindsponge.forcefield.expressions import ExpressionError

    try:
        yield
    except ExpressionError as error:
        raise unsupported(index, force, str(error)) from error
