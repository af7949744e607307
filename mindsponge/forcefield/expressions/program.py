"""Expressions of one variable as instruction lists for the compiled pair kernel.

:func:`lower_expression` turns an OpenMM (Lepton) expression of a distance ``r`` into a
:class:`PairProgram`: a straight-line list of instructions over registers holding dual numbers
(a value and its derivative with respect to ``r``), so that the kernel
(``mindsponge._kernels``, ``ExpressionPairTerm``) computes each pair's energy and ``dE/dr`` in one
pass, without autograd or a Python call per step. Global parameters are folded in as constants
(the program is rebuilt when they change), sub-expressions of constants only are computed here,
and every definition and repeated sub-tree is computed once per pair. The other variables are
inputs the kernel reads per pair: a column of the pair's own parameters (a ``CustomBondForce``)
or of either atom's per-particle values (a ``CustomNonbondedForce``: ``sigma1``, ``sigma2``).

Expressions with tabulated or geometric functions (``pointdistance``...) are not lowered
(:func:`lower_expression` returns ``None``); their terms keep the torch code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import sympy
import torch
from torch import Tensor

from mindsponge.forcefield.expressions.language import LEPTON_FUNCTIONS, ExpressionError
from mindsponge.forcefield.expressions.parsing import parse_part, split_parts

__all__ = ["OPCODES", "PAIR", "FIRST", "SECOND", "PairProgram", "lower_expression"]

# the kernel's instruction set (expression_term.cpp): name -> opcode; an instruction is
# (opcode, destination, a, b, c) over registers, with one float64 constant
OPCODES = {name: code for code, name in enumerate(
    "const variable input add mul powi powc pow select min max atan2 sqrt exp log sin cos tan asin acos "
    "atan sinh cosh tanh erf erfc abs floor ceil step delta recip".split())}
PAIR, FIRST, SECOND = 0, 1, 2  # where an input column is read: the pair's row, the first or second atom's

# Lepton functions written with others
_REWRITES = {"square": lambda x: x**2, "cube": lambda x: x**3, "sec": lambda x: 1 / sympy.Function("cos")(x),
             "csc": lambda x: 1 / sympy.Function("sin")(x), "cot": lambda x: 1 / sympy.Function("tan")(x)}
_FOLD = {  # constant folding, float64 as the kernel computes
    **{name: getattr(math, name)
       for name in "sqrt exp log sin cos tan asin acos atan sinh cosh tanh erf erfc floor ceil".split()},
    "abs": abs, "step": lambda x: float(x >= 0), "delta": lambda x: float(x == 0), "recip": lambda x: 1.0 / x,
    "min": min, "max": max, "atan2": math.atan2, "select": lambda x, y, z: y if x != 0 else z,
}


@dataclass(frozen=True)
class PairProgram:
    """A lowered expression (see the module docstring).

    Attributes:
        code: ``(I, 5)`` int64, each instruction's opcode, destination register and operands.
        values: ``(I,)`` float64, each instruction's constant (a ``const``'s value, an exponent).
        registers: how many registers the program uses.
        result: the register holding the energy (and ``dE/dr``) at the end.
    """

    code: Tensor
    values: Tensor
    registers: int
    result: int


class _Lowering:
    """Walks the sympy trees of an expression's parts, emitting instructions (memoised per sub-tree)."""

    def __init__(self, names, bodies, variable, inputs, constants, context):
        self.names, self.bodies, self.variable = names, bodies, variable
        self.inputs, self.constants, self.context = inputs, constants, context
        self.instructions: list[tuple[int, int, int, int, int, float]] = []
        self.registers = 0
        self.memo: dict = {}
        self.definitions: dict[int, tuple] = {}

    def error(self, what: str) -> ExpressionError:
        return ExpressionError(f"{self.context}: {what}")

    def emit(self, op: str, a: int = 0, b: int = 0, c: int = 0, value: float = 0.0) -> tuple:
        self.instructions.append((OPCODES[op], self.registers, a, b, c, float(value)))
        self.registers += 1
        return ("register", self.registers - 1)

    def register(self, node: tuple) -> int:
        """The register of a lowered node (a constant is loaded into one)."""
        return node[1] if node[0] == "register" else self.emit("const", value=node[1])[1]

    def lower(self, tree, scope: int) -> tuple:
        """``("constant", value)`` or ``("register", index)`` of a sub-tree at definition scope ``scope``."""
        key = (tree, scope)
        if key not in self.memo:
            self.memo[key] = self._lower(tree, scope)
        return self.memo[key]

    def _lower(self, tree, scope: int) -> tuple:
        if tree.is_Number:
            value = float(tree)
            if not math.isfinite(value):
                raise self.error(f"the constant {tree} is not finite")
            return ("constant", value)
        if tree.is_Symbol:
            return self._symbol(tree.name, scope)
        if tree.is_Add or tree.is_Mul:
            op = "add" if tree.is_Add else "mul"
            nodes = [self.lower(argument, scope) for argument in tree.args]
            constant = [node[1] for node in nodes if node[0] == "constant"]
            registers = [node[1] for node in nodes if node[0] == "register"]
            folded = math.fsum(constant) if op == "add" else math.prod(constant)
            if not registers:
                return ("constant", folded)
            if constant and folded != (0.0 if op == "add" else 1.0):
                registers.append(self.emit("const", value=folded)[1])
            node = ("register", registers[0])
            for register in registers[1:]:
                node = self.emit(op, node[1], register)
            return node
        if tree.is_Pow:
            return self._power(tree, scope)
        if isinstance(tree, sympy.core.function.AppliedUndef):
            return self._function(str(tree.func), tree.args, scope)
        raise self.error(f"unsupported construct {tree} ({type(tree).__name__})")

    def _symbol(self, name: str, scope: int) -> tuple:
        for index in range(scope, len(self.names)):
            if self.names[index] == name:  # Lepton's rule: the first definition after the use
                if index not in self.definitions:
                    tree = parse_part(self.bodies[index], self.error)
                    self.definitions[index] = self.lower(tree, index + 1)
                return self.definitions[index]
        if name == self.variable:
            return self.emit("variable")
        if name in self.constants:
            return ("constant", float(self.constants[name]))
        if name in self.inputs:
            source, column = self.inputs[name]
            return self.emit("input", source, column)
        raise self.error(f"unknown variable {name!r}")

    def _power(self, tree, scope: int) -> tuple:
        base = self.lower(tree.base, scope)
        exponent = self.lower(tree.exp, scope)
        if base[0] == exponent[0] == "constant":
            return ("constant", _fold_power(base[1], exponent[1]))
        if exponent[0] == "constant":
            value = exponent[1]
            if value == 0.5:
                return self.emit("sqrt", base[1])
            if value == int(value) and abs(value) <= 64:
                return self.emit("powi", base[1], value=value)
            return self.emit("powc", base[1], value=value)
        return self.emit("pow", self.register(base), exponent[1])

    def _function(self, name: str, args, scope: int) -> tuple:
        if name in _REWRITES and len(args) == 1:
            return self.lower(_REWRITES[name](args[0]), scope)
        if name not in LEPTON_FUNCTIONS:
            raise self.error(f"function {name!r} has no compiled form")
        expected = LEPTON_FUNCTIONS[name][0]
        if len(args) != expected:
            raise self.error(f"function {name!r} takes {expected} argument(s), got {len(args)}")
        nodes = [self.lower(argument, scope) for argument in args]
        if all(node[0] == "constant" for node in nodes):
            return ("constant", float(_FOLD[name](*(node[1] for node in nodes))))
        registers = [self.register(node) for node in nodes]
        return self.emit(name, *registers)


def _fold_power(base: float, exponent: float) -> float:
    try:
        value = float(base) ** float(exponent)
    except ZeroDivisionError:
        value = math.inf
    if isinstance(value, complex) or not math.isfinite(value):
        raise ExpressionError(f"the constant {base}^{exponent} is not a finite real number")
    return value


def lower_expression(expression: str, variable: str, inputs: Mapping[str, tuple[int, int]],
                     constants: Mapping[str, float], context: str = "expression") -> PairProgram | None:
    """The program computing ``expression`` and its derivative with respect to ``variable``.

    Args:
        expression: OpenMM's expression language, with ``;`` definitions.
        variable: the name of the distance (``"r"``).
        inputs: the other variables by name, as ``(source, column)``: ``source`` one of :data:`PAIR`
            (the pair's own parameters), :data:`FIRST`, :data:`SECOND` (either atom's values).
        constants: global parameters, by name, with their current values.
        context: what the expression belongs to, for messages.

    Returns:
        the program, or ``None`` when the expression uses something without a compiled form
        (tabulated or geometric functions, a variable not given, a constant part that is not finite).
    """
    primary, names, bodies = split_parts(expression, context)
    lowering = _Lowering(names, bodies, variable, dict(inputs), dict(constants), context)
    try:
        result = lowering.register(lowering.lower(parse_part(primary, lowering.error), 0))
    except (ExpressionError, OverflowError, ValueError, ZeroDivisionError):
        return None
    rows = lowering.instructions
    code = torch.tensor([row[:5] for row in rows], dtype=torch.long).reshape(-1, 5)
    values = torch.tensor([row[5] for row in rows], dtype=torch.float64)
    return PairProgram(code, values, lowering.registers, result)
