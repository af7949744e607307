"""OpenMM expressions compiled to torch: sympy trees become nested closures.

:func:`compile_expression` reads an expression (:mod:`.parsing`), then the compiler turns each
sympy tree into closures ``node(environment) -> value`` built from torch operations
(:mod:`.language`), resolving names to the definitions after them (Lepton's rule), computing
each definition once per call, and keeping the parts that depend on no ``dynamic`` variable in
the call's static cache (:mod:`.evaluation`).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from functools import reduce

import sympy
import torch

from mindsponge.forcefield.expressions.evaluation import CompiledExpression, cached
from mindsponge.forcefield.expressions.language import (
    LEPTON_FUNCTIONS,
    PARTICLE_FUNCTIONS,
    POINT_FUNCTIONS,
    ExpressionError,
    NegativePower,
    broadcast,
    point_function,
    square,
)
from mindsponge.forcefield.expressions.parsing import parse_part, split_parts


def compile_expression(
    expression: str,
    tabulated: Mapping[str, int] | None = None,
    particles: Sequence[str] = (),
    context: str = "expression",
    dynamic: Sequence[str] | None = None,
) -> CompiledExpression:
    """Parse an OpenMM (Lepton) energy expression into a :class:`CompiledExpression`.

    Args:
        expression: the expression, with optional ``; name = value`` definitions after it.
        tabulated: names of the tabulated functions it may call, to their number of arguments.
        particles: names of the particles that ``distance``, ``angle`` and ``dihedral`` may take
            (``p1, p2...`` for compound bonds, ``g1, g2...`` for centroid bonds); particle ``k``
            (1-based) has the coordinates ``xk, yk, zk``.
        context: what the expression belongs to, for error messages (e.g. ``"OpenMM force 3
            (CustomBondForce 'LJ14')"``).
        dynamic: names of the variables that change from call to call (``r`` of a pair term);
            the largest parts that depend on none of them (combination rules, table look-ups)
            are then kept in the ``static_cache`` of a call when one is given.

    Returns:
        the compiled expression.

    Raises:
        ExpressionError: bad syntax, an unknown function, a function given the wrong number of
            arguments, or a particle function given something other than particle names.
    """
    if not isinstance(expression, str):
        raise ExpressionError(f"{context}: an expression must be a string, got {type(expression).__name__}")
    tabulated = dict(tabulated or {})
    particle_index = {name: number + 1 for number, name in enumerate(particles)}
    primary, names, bodies = split_parts(expression, context)
    compiler = _Compiler(expression, context, tabulated, particle_index, names, bodies, dynamic)
    primary_tree = parse_part(primary, compiler.error)
    root = compiler._node(primary_tree, 0)
    compiled = CompiledExpression(
        expression,
        root,
        frozenset(compiler.free_variables),
        frozenset(compiler.used_tabulated),
        compiler.uses_box,
    )
    if compiler.dynamic is not None and len(compiler.dynamic) == 1:
        compiled.inverse_powers = compiler.inverse_powers(primary_tree, next(iter(compiler.dynamic)))
    # its nodes are closures, which do not pickle: a pickled expression is compiled again from these
    compiled.arguments = (expression, tabulated, tuple(particles), context,
                          None if dynamic is None else tuple(dynamic))
    return compiled


class _Compiler:
    """Turns the sympy tree of each part into nested closures ``node(environment) -> value``."""

    def __init__(
        self,
        expression: str,
        context: str,
        tabulated: dict[str, int],
        particle_index: dict[str, int],
        definition_names: list[str],
        definition_bodies: list[str],
        dynamic: Sequence[str] | None,
    ):
        self.expression, self.context = expression, context  # what it compiles, and for whom
        self.tabulated, self.particle_index = tabulated, particle_index  # name -> argument count / index
        self.definition_names, self.definition_bodies = definition_names, definition_bodies
        # compiled on first use, so that unused definitions add no variables (as in Lepton)
        self.definitions: list = [None] * len(definition_names)
        self.trees: list = [None] * len(definition_names)
        self.dynamic = None if dynamic is None else frozenset(dynamic)
        self.static_depth = 0  # > 0 while building the inside of a cached static part
        self.free_variables: set[str] = set()
        self.used_tabulated: set[str] = set()
        self.uses_box = False

    def error(self, what: str) -> ExpressionError:
        return ExpressionError(f"{self.context}: expression {self.expression!r}: {what}")

    def _definition_tree(self, index: int):
        if self.trees[index] is None:
            self.trees[index] = parse_part(self.definition_bodies[index], self.error)
        return self.trees[index]

    def _resolve(self, name: str, scope: int) -> int | None:
        """Index of the definition a name refers to from position ``scope``, or ``None``."""
        for index in range(scope, len(self.definition_names)):
            if self.definition_names[index] == name:
                return index
        return None

    def _dependencies(self, tree, scope: int) -> set[str]:
        """Free variables a tree depends on, through the definitions it uses."""
        names: set[str] = set()
        for symbol in tree.free_symbols:
            index = self._resolve(symbol.name, scope)
            if index is None:
                names.add(symbol.name)
            else:
                names |= self._dependencies(self._definition_tree(index), index + 1)
        return names

    def _is_static(self, tree, scope: int) -> bool:
        return self.dynamic is not None and not (self._dependencies(tree, scope) & self.dynamic)

    def _inline(self, tree, scope: int, inlined: dict[int, object]):
        """``tree`` with the definitions it uses substituted (recursively; ``inlined`` keeps the
        substituted definitions by index)."""
        replacements = {}
        for symbol in tree.free_symbols:
            index = self._resolve(symbol.name, scope)
            if index is not None:
                if index not in inlined:
                    inlined[index] = self._inline(self._definition_tree(index), index + 1, inlined)
                replacements[symbol] = inlined[index]
        return tree.xreplace(replacements) if replacements else tree

    def inverse_powers(self, tree, variable: str) -> dict[int, CompiledExpression] | None:
        """Coefficients ``c_k`` (compiled, by power ``k > 0``) if the part ``tree`` is
        ``sum_k c_k / variable^k`` with ``c_k`` free of ``variable``, else ``None``."""
        inverse = sympy.Dummy("inverse")
        inlined = self._inline(tree, 0, {})
        if _tree_size(inlined, {}) > _MAX_INLINED_SIZE:  # definitions used many times: not worth it
            return None
        try:
            inlined = inlined.xreplace({sympy.Symbol(variable): 1 / inverse})
            # distribute products and powers of products, but keep sums inside powers unexpanded
            expanded = sympy.expand(inlined, multinomial=False, power_exp=False, log=False)
            terms = sympy.collect(expanded, inverse, evaluate=False)
        except Exception:  # an expression sympy cannot rearrange simply takes the generic path
            return None
        coefficients = {}
        for monomial, coefficient in terms.items():
            power = sympy.degree(monomial, inverse) if monomial.is_polynomial(inverse) else None
            if power is None or power < 1 or not monomial.is_Pow and monomial != inverse:
                return None
            if inverse in coefficient.free_symbols:
                return None
            beyond = len(self.definition_names)  # no name refers to a definition any more
            coefficients[int(power)] = CompiledExpression(
                str(coefficient),
                self._node(coefficient, beyond),
                frozenset(self._dependencies(coefficient, beyond)),
                frozenset(self.used_tabulated),
                False,
            )
        return coefficients or None

    def _node(self, tree, scope: int):
        if tree.is_Number or tree.is_Symbol or self.static_depth or not self._is_static(tree, scope):
            return self._build(tree, scope)
        self.static_depth += 1
        try:
            node = self._build(tree, scope)
        finally:
            self.static_depth -= 1
        return cached(node)

    def _build(self, tree, scope: int):
        if tree.is_Number:
            return self._constant(tree)
        if tree.is_Symbol:
            return self._symbol(tree.name, scope)
        if tree.is_Add:
            return _fold(operator.add, [self._node(arg, scope) for arg in tree.args])
        if tree.is_Mul:
            return _fold(operator.mul, [self._node(arg, scope) for arg in tree.args])
        if tree.is_Pow:
            return self._power(tree, scope)
        if isinstance(tree, sympy.core.function.AppliedUndef):
            return self._function(str(tree.func), tree.args, scope)
        raise self.error(f"unsupported construct {tree} ({type(tree).__name__})")

    def _constant(self, tree):
        if not tree.is_finite or not tree.is_real:
            raise self.error(f"the constant {tree} is not a finite real number")
        value = float(tree)
        return lambda environment: value

    def _symbol(self, name: str, scope: int):
        index = self._resolve(name, scope)
        if index is not None:
            return self._definition(index)
        if name in self.particle_index:
            raise self.error(f"particle {name!r} can only be an argument of distance, angle or dihedral")
        self.free_variables.add(name)
        return lambda environment: environment.variables[name]

    def _definition(self, index: int):
        if self.definitions[index] is None:
            depth, self.static_depth = self.static_depth, 0  # a definition is cached on its own
            try:
                self.definitions[index] = self._node(self._definition_tree(index), index + 1)
            finally:
                self.static_depth = depth

        def value(environment):
            if index not in environment.definitions:
                environment.definitions[index] = self.definitions[index](environment)
            return environment.definitions[index]

        return value

    def _power(self, tree, scope: int):
        base = self._node(tree.base, scope)
        exponent = tree.exp
        if exponent.is_Integer:
            power = int(exponent)
            if power == 2:
                return lambda environment: square(environment.tensor(base(environment)))
            if power == -1:
                return lambda environment: torch.reciprocal(environment.tensor(base(environment)))
            if power < 0:
                return lambda environment: NegativePower.apply(environment.tensor(base(environment)), power)
            return lambda environment: environment.tensor(base(environment)) ** power
        if exponent == sympy.Rational(1, 2):
            return lambda environment: torch.sqrt(environment.tensor(base(environment)))
        if exponent == sympy.Rational(-1, 2):
            return lambda environment: torch.rsqrt(environment.tensor(base(environment)))
        exponent_node = self._node(exponent, scope)
        return lambda environment: torch.pow(
            environment.tensor(base(environment)), environment.tensor(exponent_node(environment))
        )

    def _function(self, name: str, args, scope: int):
        count = len(args)
        if name in PARTICLE_FUNCTIONS and self.particle_index:
            point_name, expected = PARTICLE_FUNCTIONS[name]
            self._check_count(name, count, expected)
            indices = []
            for arg in args:
                if not arg.is_Symbol or arg.name not in self.particle_index:
                    raise self.error(
                        f"the arguments of {name}() must be particle names "
                        f"{sorted(self.particle_index)}, got {arg}"
                    )
                indices.append(self.particle_index[arg.name])
            coordinates = [sympy.Symbol(f"{axis}{index}") for index in indices for axis in "xyz"]
            return self._function(point_name, coordinates, scope)
        arguments = [self._node(arg, scope) for arg in args]
        if name in LEPTON_FUNCTIONS:
            expected, implementation = LEPTON_FUNCTIONS[name]
            self._check_count(name, count, expected)
            return lambda environment: implementation(
                *broadcast([environment.tensor(argument(environment)) for argument in arguments])
            )
        if name in self.tabulated:
            self._check_count(name, count, self.tabulated[name])
            self.used_tabulated.add(name)
            return lambda environment: environment.functions[name](
                *broadcast([environment.tensor(argument(environment)) for argument in arguments])
            )
        if name in POINT_FUNCTIONS:
            points = POINT_FUNCTIONS[name]
            self._check_count(name, count, 3 * points)
            self.uses_box = True
            periodic_only = name == "periodicdistance"

            def geometry(environment):
                values = broadcast([environment.tensor(argument(environment)) for argument in arguments])
                if periodic_only and environment.box is None:
                    raise self.error("periodicdistance() needs a periodic box, got box=None")
                points_xyz = [torch.stack(values[3 * k : 3 * k + 3], dim=-1) for k in range(points)]
                return point_function(name, points_xyz, environment.box)

            return geometry
        known = sorted(
            [
                *LEPTON_FUNCTIONS,
                *self.tabulated,
                *POINT_FUNCTIONS,
                *(PARTICLE_FUNCTIONS if self.particle_index else ()),
            ]
        )
        raise self.error(f"function {name!r} is not supported (known functions: {', '.join(known)})")

    def _check_count(self, name: str, count: int, expected: int) -> None:
        if count != expected:
            raise self.error(f"function {name!r} takes {expected} argument(s), got {count}")


def _fold(combine, nodes: list):
    """A node combining the values of ``nodes`` from left to right (a sum or a product)."""

    def fold(environment):
        return reduce(combine, (node(environment) for node in nodes[1:]), nodes[0](environment))

    return fold


_MAX_INLINED_SIZE = 500  # nodes of an expression with its definitions substituted


def _tree_size(tree, sizes: dict) -> int:
    """Number of nodes of a sympy tree, counting shared subtrees once per use (memoised in
    ``sizes``, so the count itself stays cheap however large the result)."""
    if tree not in sizes:
        sizes[tree] = 1 + sum(_tree_size(argument, sizes) for argument in tree.args)
    return sizes[tree]
