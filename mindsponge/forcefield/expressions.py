"""OpenMM's energy-expression language compiled to torch, and OpenMM's tabulated functions.

OpenMM's custom forces (``CustomBondForce``, ``CustomNonbondedForce``...) give their energy as a
string in the expression language of its Lepton library, for example::

    4*eps*((sigma/r)^12-(sigma/r)^6); sigma=0.5*(sigma1+sigma2); eps=sqrt(eps1*eps2)

The first part is the energy; the parts after ``;`` define intermediate values, each usable in
the parts before it. :func:`compile_expression` parses every part with sympy (``^`` is the
power, as in Lepton; Lepton's precedence and associativity are Python's) and turns the result
into a :class:`CompiledExpression`: a callable that maps named tensors to a tensor, built from
torch operations, so that forces come from autograd. Each intermediate value is computed once
per call.

Supported functions, with Lepton's definitions:

=================================================  ================================================
``sqrt exp log sin cos tan asin acos atan``        as in C (radians, natural logarithm)
``sec csc cot sinh cosh tanh erf erfc``
``atan2(y, x)``, ``min(a, b)``, ``max(a, b)``      as in C
``abs floor ceil``                                 as in C (zero derivative for ``floor``, ``ceil``)
``square(x)``, ``cube(x)``, ``recip(x)``           ``x^2``, ``x^3``, ``1/x``
``step(x)``                                        1 if ``x >= 0`` else 0
``delta(x)``                                       1 if ``x == 0`` else 0
``select(x, y, z)``                                ``y`` if ``x != 0`` else ``z``
tabulated functions, by name                       :class:`Continuous1DFunction` ... (below)
``pointdistance``, ``pointangle``,                 geometry of points given by coordinates
``pointdihedral``, ``periodicdistance``            (``pointdistance(x1,y1,z1,x2,y2,z2)``...), with
                                                   the minimum image when a box is given
``distance(p1,p2)``, ``angle(p1,p2,p3)``,          the same on named particles ``p1``... whose
``dihedral(p1,p2,p3,p4)``                          coordinates are ``x1, y1, z1``... (compound and
                                                   centroid bonds)
=================================================  ================================================

Anything else (an unknown function, a wrong number of arguments, an unknown variable) raises
:class:`ExpressionError` naming the expression, the function or variable, and the force it
belongs to.

Tabulated functions follow OpenMM's Reference platform: ``Continuous1DFunction`` is a natural
(or periodic) cubic spline, ``Continuous2DFunction``/``Continuous3DFunction`` are bicubic and
tricubic patches whose knot derivatives come from such splines, all zero outside their range
unless periodic; ``Discrete1D/2D/3DFunction`` round their arguments to the nearest integer
(halves away from zero) and clamp them to the table. Their tables are float64 buffers.

Example::

    energy = compile_expression("k*(r-r0)^2", context="my bond")
    energy({"k": torch.tensor([100.0]), "r": r, "r0": torch.tensor([0.1])})
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import sympy
import torch
from sympy.parsing.sympy_parser import convert_xor, parse_expr, standard_transformations
from torch import Tensor, nn

from common.errors import ConfigurationError

__all__ = [
    "ExpressionError",
    "CompiledExpression",
    "compile_expression",
    "LEPTON_FUNCTIONS",
    "TabulatedFunction",
    "Continuous1DFunction",
    "Continuous2DFunction",
    "Continuous3DFunction",
    "Discrete1DFunction",
    "Discrete2DFunction",
    "Discrete3DFunction",
]


class ExpressionError(ConfigurationError):
    """An energy expression that cannot be compiled: bad syntax, unknown function or variable."""


# Lepton's built-in functions: name -> (number of arguments, torch implementation)
LEPTON_FUNCTIONS: dict[str, tuple[int, Callable[..., Tensor]]] = {
    "sqrt": (1, torch.sqrt),
    "exp": (1, torch.exp),
    "log": (1, torch.log),
    "sin": (1, torch.sin),
    "cos": (1, torch.cos),
    "sec": (1, lambda x: 1.0 / torch.cos(x)),
    "csc": (1, lambda x: 1.0 / torch.sin(x)),
    "tan": (1, torch.tan),
    "cot": (1, lambda x: 1.0 / torch.tan(x)),
    "asin": (1, torch.asin),
    "acos": (1, torch.acos),
    "atan": (1, torch.atan),
    "atan2": (2, torch.atan2),
    "sinh": (1, torch.sinh),
    "cosh": (1, torch.cosh),
    "tanh": (1, torch.tanh),
    "erf": (1, torch.erf),
    "erfc": (1, torch.erfc),
    "step": (1, lambda x: (x >= 0).to(x.dtype)),
    "delta": (1, lambda x: (x == 0).to(x.dtype)),
    "square": (1, lambda x: x * x),
    "cube": (1, lambda x: x * x * x),
    "recip": (1, torch.reciprocal),
    "min": (2, torch.minimum),
    "max": (2, torch.maximum),
    "abs": (1, torch.abs),
    "floor": (1, torch.floor),
    "ceil": (1, torch.ceil),
    "select": (3, lambda x, y, z: torch.where(x != 0, y, z)),
}

# geometric functions of points: name -> number of points
_POINT_FUNCTIONS = {"pointdistance": 2, "pointangle": 3, "pointdihedral": 4, "periodicdistance": 2}
# geometric functions of named particles (compound and centroid bonds) -> their point function
_PARTICLE_FUNCTIONS = {
    "distance": ("pointdistance", 2),
    "angle": ("pointangle", 3),
    "dihedral": ("pointdihedral", 4),
}

_IDENTIFIER = re.compile(r"(?<![\w.])([A-Za-z_]\w*)(\s*\()?")
_ALLOWED_TEXT = re.compile(r"^[\w\s.+\-*/^(),]*$")


class _Environment:
    """What one evaluation sees: the variables, the tabulated functions, the box, and the
    values of the intermediate definitions computed so far."""

    def __init__(
        self,
        variables: Mapping[str, Tensor | float],
        functions: Mapping[str, Callable],
        box: Tensor | None,
        static_cache: dict | None = None,
    ):
        tensors = [value for value in variables.values() if isinstance(value, Tensor)]
        floating = [value for value in tensors if value.is_floating_point()]
        reference = floating[0] if floating else (tensors[0] if tensors else None)
        self.dtype = (
            reference.dtype
            if reference is not None and reference.is_floating_point()
            else torch.get_default_dtype()
        )
        self.device = reference.device if reference is not None else torch.device("cpu")
        self.variables = variables
        self.functions = functions
        self.box = box
        self.definitions: dict[int, Tensor] = {}
        self.static_cache = static_cache

    def tensor(self, value) -> Tensor:
        if isinstance(value, Tensor):
            return value if value.is_floating_point() else value.to(self.dtype)
        return torch.as_tensor(value, dtype=self.dtype, device=self.device)


def _minimum_image(vectors: Tensor, box: Tensor | None) -> Tensor:
    if box is None:
        return vectors
    from mindsponge.space import minimum_image

    return minimum_image(vectors, box.to(vectors))


def _point_function(name: str, points: list[Tensor], box: Tensor | None) -> Tensor:
    """Distance (nm), angle (rad, at the second point) or dihedral (rad, ``[-pi, pi]``) of points
    ``(..., 3)``; minimum-image differences when ``box`` is given."""
    from mindsponge.forcefield.bonded import _dihedral, _norm

    if name in ("pointdistance", "periodicdistance"):
        return _norm(_minimum_image(points[0] - points[1], box))
    if name == "pointangle":
        first = _minimum_image(points[0] - points[1], box)
        second = _minimum_image(points[2] - points[1], box)
        return torch.atan2(_norm(torch.cross(first, second, dim=-1)), (first * second).sum(-1))
    bonds = [_minimum_image(points[k + 1] - points[k], box) for k in range(3)]
    return _dihedral(*bonds)


class CompiledExpression:
    """An OpenMM energy expression as a torch callable (see the module docstring).

    Create it with :func:`compile_expression`. Calling it with a mapping of variable names to
    tensors (or floats), broadcastable to one another, returns their broadcast result.

    Attributes:
        expression: the source text.
        variables: names of the free variables the expression needs (frozenset).
        functions: names of the tabulated functions it calls (frozenset).
        uses_box: whether it calls a point function (``pointdistance``, ``periodicdistance``...),
            which takes the minimum image when a box is given.
        inverse_powers: for an expression compiled with one ``dynamic`` variable ``r`` that is,
            definitions substituted, ``sum_k c_k / r^k`` with coefficients ``c_k`` free of ``r``
            (the Lennard-Jones family: ``A/r^12 - B/r^6``, ``4*eps*((sig/r)^12 - (sig/r)^6)``),
            the coefficients as compiled expressions by power ``k``; otherwise ``None``.
    """

    def __init__(
        self,
        expression: str,
        root,
        variables: frozenset[str],
        functions: frozenset[str],
        uses_box: bool,
    ):
        self.expression = expression
        self._root = root
        self.variables = variables
        self.functions = functions
        self.uses_box = uses_box
        self.inverse_powers: dict[int, CompiledExpression] | None = None

    def __call__(
        self,
        variables: Mapping[str, Tensor | float],
        functions: Mapping[str, Callable] | None = None,
        box: Tensor | None = None,
        static_cache: dict | None = None,
    ) -> Tensor:
        """Evaluate the expression.

        Args:
            variables: a value for every name in :attr:`variables` (tensors of broadcastable
                shapes, or floats).
            functions: the tabulated functions by name (callables taking tensors).
            box: ``(3, 3)`` box (nm) for the minimum image in the point functions, or ``None``.
            static_cache: with an expression compiled with ``dynamic`` variables, a dict in which
                the parts that do not depend on them are kept between calls; pass the same dict
                while the other variables keep their values, and a new one when they change.

        Returns:
            the broadcast result, a tensor.
        """
        missing = self.variables - set(variables)
        if missing:
            raise ExpressionError(
                f"expression {self.expression!r}: no value given for variable(s) {sorted(missing)}"
            )
        environment = _Environment(variables, functions or {}, box, static_cache)
        return environment.tensor(self._root(environment))

    def __repr__(self) -> str:
        return f"CompiledExpression({self.expression!r})"


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
    parts = [part.strip() for part in expression.split(";")]
    primary, definition_texts = parts[0], [part for part in parts[1:] if part]
    if not primary:
        raise ExpressionError(f"{context}: expression {expression!r} has no energy before its first ';'")
    names: list[str] = []
    bodies: list[str] = []
    for text in definition_texts:
        name, equals, body = text.partition("=")
        if not equals or not name.strip() or not body.strip():
            raise ExpressionError(
                f"{context}: expression {expression!r}: the part {text!r} after ';' must be 'name = value'"
            )
        names.append(name.strip())
        bodies.append(body.strip())
    compiler = _Compiler(expression, context, tabulated, particle_index, names, bodies, dynamic)
    primary_tree = compiler.compile(primary, scope=0)
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
        self.expression = expression
        self.context = context
        self.tabulated = tabulated
        self.particle_index = particle_index
        self.definition_names = definition_names
        self.definition_bodies = definition_bodies
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

    def compile(self, text: str, scope: int):
        """Compile one part; names resolve to the definitions after position ``scope`` (Lepton's
        rule: a definition is visible to the parts before it)."""
        if not _ALLOWED_TEXT.match(text) or "**" in text:
            raise self.error(
                f"{text!r} holds characters outside OpenMM's expression language "
                "(names, numbers, + - * / ^, parentheses and commas)"
            )
        local: dict[str, object] = {}
        renamed: dict[str, str] = {}

        def rename(match: re.Match) -> str:
            name, call = match.group(1), match.group(2)
            key = (name, bool(call))
            if key not in renamed:
                safe = f"{'f' if call else 'v'}{len(renamed)}_"
                renamed[key] = safe
                local[safe] = sympy.Function(name) if call else sympy.Symbol(name)
            return renamed[key] + ("(" if call else "")

        try:
            tree = parse_expr(
                _IDENTIFIER.sub(rename, text),
                local_dict=local,
                transformations=standard_transformations + (convert_xor,),
            )
        except Exception as error:  # sympy raises SyntaxError, TokenError, TypeError...
            raise self.error(f"cannot parse {text!r}: {error}") from error
        return tree

    def _definition_tree(self, index: int):
        if self.trees[index] is None:
            self.trees[index] = self.compile(self.definition_bodies[index], scope=index + 1)
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
        return _cached(node)

    def _build(self, tree, scope: int):
        if tree.is_Number:
            if not tree.is_finite or not tree.is_real:
                raise self.error(f"the constant {tree} is not a finite real number")
            value = float(tree)
            return lambda environment: value
        if tree.is_Symbol:
            return self._symbol(tree.name, scope)
        if tree.is_Add:
            terms = [self._node(arg, scope) for arg in tree.args]

            def add(environment):
                total = terms[0](environment)
                for term in terms[1:]:
                    total = total + term(environment)
                return total

            return add
        if tree.is_Mul:
            factors = [self._node(arg, scope) for arg in tree.args]

            def multiply(environment):
                product = factors[0](environment)
                for factor in factors[1:]:
                    product = product * factor(environment)
                return product

            return multiply
        if tree.is_Pow:
            return self._power(tree, scope)
        if isinstance(tree, sympy.core.function.AppliedUndef):
            return self._function(str(tree.func), tree.args, scope)
        raise self.error(f"unsupported construct {tree} ({type(tree).__name__})")

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
                return lambda environment: _square(environment.tensor(base(environment)))
            if power == -1:
                return lambda environment: torch.reciprocal(environment.tensor(base(environment)))
            if power < 0:
                return lambda environment: _NegativePower.apply(environment.tensor(base(environment)), power)
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
        if name in _PARTICLE_FUNCTIONS and self.particle_index:
            point_name, expected = _PARTICLE_FUNCTIONS[name]
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
                *_broadcast([environment.tensor(argument(environment)) for argument in arguments])
            )
        if name in self.tabulated:
            self._check_count(name, count, self.tabulated[name])
            self.used_tabulated.add(name)
            return lambda environment: environment.functions[name](
                *_broadcast([environment.tensor(argument(environment)) for argument in arguments])
            )
        if name in _POINT_FUNCTIONS:
            points = _POINT_FUNCTIONS[name]
            self._check_count(name, count, 3 * points)
            self.uses_box = True
            periodic_only = name == "periodicdistance"

            def point_function(environment):
                values = _broadcast([environment.tensor(argument(environment)) for argument in arguments])
                if periodic_only and environment.box is None:
                    raise self.error("periodicdistance() needs a periodic box, got box=None")
                points_xyz = [torch.stack(values[3 * k : 3 * k + 3], dim=-1) for k in range(points)]
                return _point_function(name, points_xyz, environment.box)

            return point_function
        known = sorted(
            [
                *LEPTON_FUNCTIONS,
                *self.tabulated,
                *_POINT_FUNCTIONS,
                *(_PARTICLE_FUNCTIONS if self.particle_index else ()),
            ]
        )
        raise self.error(f"function {name!r} is not supported (known functions: {', '.join(known)})")

    def _check_count(self, name: str, count: int, expected: int) -> None:
        if count != expected:
            raise self.error(f"function {name!r} takes {expected} argument(s), got {count}")


_MAX_INLINED_SIZE = 500  # nodes of an expression with its definitions substituted


def _tree_size(tree, sizes: dict) -> int:
    """Number of nodes of a sympy tree, counting shared subtrees once per use (memoised in
    ``sizes``, so the count itself stays cheap however large the result)."""
    if tree not in sizes:
        sizes[tree] = 1 + sum(_tree_size(argument, sizes) for argument in tree.args)
    return sizes[tree]


def _cached(node):
    """``node`` with its value kept in the environment's static cache, when there is one."""

    def cached(environment):
        cache = environment.static_cache
        if cache is None:
            return node(environment)
        key = id(node)
        if key not in cache:
            cache[key] = node(environment)
        return cache[key]

    return cached


class _NegativePower(torch.autograd.Function):
    """``x ** n`` for a negative integer ``n`` whose derivative ``n x^n / x`` reuses the value
    (one ``pow`` instead of two; ``x = 0`` is a pole either way). Twice differentiable."""

    @staticmethod
    def forward(ctx, x: Tensor, power: int) -> Tensor:
        value = x**power
        ctx.power = power
        ctx.save_for_backward(x, value)
        return value

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, value = ctx.saved_tensors
        return grad * ctx.power * value / x, None


def _square(x: Tensor) -> Tensor:
    return x * x


def _broadcast(values: list[Tensor]) -> list[Tensor]:
    if len(values) < 2 or all(value.shape == values[0].shape for value in values):
        return values
    return list(torch.broadcast_tensors(*values))


# --- tabulated functions -----------------------------------------------------------------------


class TabulatedFunction(nn.Module):
    """Base of OpenMM's tabulated functions: a module called with ``n_arguments`` tensors of one
    shape, returning a tensor of that shape."""

    n_arguments: int = 1


def _round_half_away(x: Tensor) -> Tensor:
    """C's ``round``: halves away from zero (``torch.round`` rounds them to even)."""
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


class _Discrete(TabulatedFunction):
    def __init__(self, values, sizes: Sequence[int]):
        super().__init__()
        values = torch.as_tensor(np.asarray(values, dtype=np.float64)).reshape(-1)
        sizes = [int(size) for size in sizes]
        if int(np.prod(sizes)) != len(values) or min(sizes) < 1:
            raise ExpressionError(
                f"{type(self).__name__}: {len(values)} values do not fill a table of sizes {sizes}"
            )
        self.sizes = tuple(sizes)
        self.n_arguments = len(sizes)
        self.register_buffer("values", values)

    def forward(self, *arguments: Tensor) -> Tensor:
        index = None
        stride = 1
        for argument, size in zip(arguments, self.sizes):
            position = _round_half_away(argument.detach()).clamp(0, size - 1).long()
            index = position * stride if index is None else index + position * stride
            stride *= size
        return self.values.to(arguments[0].dtype)[index]

    def extra_repr(self) -> str:
        return f"sizes={self.sizes}"


class Discrete1DFunction(_Discrete):
    """OpenMM's ``Discrete1DFunction``: ``values[round(x)]``, the index clamped to the table.

    Args:
        values: ``(n,)`` values.
    """

    def __init__(self, values):
        super().__init__(values, [len(values)])


class Discrete2DFunction(_Discrete):
    """OpenMM's ``Discrete2DFunction`` (CHARMM's NBFIX tables): ``values[i + xsize j]`` with
    ``i = round(x)``, ``j = round(y)``, clamped to the table.

    Args:
        xsize, ysize: table sizes.
        values: ``(xsize * ysize,)`` values, ``x`` varying fastest (OpenMM's order).
    """

    def __init__(self, xsize: int, ysize: int, values):
        super().__init__(values, [xsize, ysize])


class Discrete3DFunction(_Discrete):
    """OpenMM's ``Discrete3DFunction``: ``values[i + xsize (j + ysize k)]``, clamped to the table.

    Args:
        xsize, ysize, zsize: table sizes.
        values: ``(xsize * ysize * zsize,)`` values, ``x`` fastest.
    """

    def __init__(self, xsize: int, ysize: int, zsize: int, values):
        super().__init__(values, [xsize, ysize, zsize])


def _spline_derivative(values: np.ndarray, knots: np.ndarray, axis: int, periodic: bool) -> np.ndarray:
    """First derivative at the knots of the natural (or periodic) cubic spline along ``axis``."""
    from scipy.interpolate import CubicSpline

    if len(knots) == 2 and not periodic:  # a straight line (OpenMM: zero second derivatives)
        slope = (np.take(values, [1], axis=axis) - np.take(values, [0], axis=axis)) / (knots[1] - knots[0])
        return np.concatenate([slope, slope], axis=axis)
    spline = CubicSpline(knots, values, axis=axis, bc_type="periodic" if periodic else "natural")
    return spline(knots, 1)


class _Continuous(TabulatedFunction):
    """Piecewise cubic Hermite interpolation on a uniform grid in 1, 2 or 3 dimensions.

    On each cell the function is the tensor product of cubic Hermite polynomials fitted to the
    values and the knot derivatives ``d/dx``, ``d/dy``, ``d2/dxdy``... of natural (or periodic)
    cubic splines, exactly OpenMM's spline (1D) and bicubic/tricubic patches (2D, 3D).
    """

    def __init__(self, values: np.ndarray, bounds: Sequence[tuple[float, float]], periodic: bool):
        super().__init__()
        values = np.asarray(values, dtype=np.float64)
        dimensions = values.ndim
        minimum_size = 3 if periodic else 2
        if min(values.shape) < minimum_size:
            raise ExpressionError(
                f"{type(self).__name__}: needs at least {minimum_size} points per axis, got {values.shape}"
            )
        for low, high in bounds:
            if not high > low:
                raise ExpressionError(f"{type(self).__name__}: range ({low}, {high}) is empty")
        if periodic:
            for axis in range(dimensions):
                first, last = np.take(values, 0, axis=axis), np.take(values, -1, axis=axis)
                if np.any(np.abs(first - last) > 1e-15 + 1e-15 * np.abs(last)):
                    raise ExpressionError(
                        f"{type(self).__name__}: a periodic table needs equal first and last values"
                    )
        knots = [np.linspace(low, high, size) for (low, high), size in zip(bounds, values.shape)]
        # tables[d] for derivative bits d (bit a set: derivative along axis a), scaled by the cell widths
        tables = []
        for bits in range(2**dimensions):
            table = values
            for axis in range(dimensions):
                if bits >> axis & 1:
                    table = _spline_derivative(table, knots[axis], axis, periodic)
                    table = table * (knots[axis][1] - knots[axis][0])
            tables.append(table)
        self.n_arguments = dimensions
        self.periodic = bool(periodic)
        self.bounds = tuple((float(low), float(high)) for low, high in bounds)
        self.register_buffer("tables", torch.as_tensor(np.stack(tables)))

    def forward(self, *arguments: Tensor) -> Tensor:
        dtype = arguments[0].dtype
        sizes = self.tables.shape[1:]
        inside = None
        cells, fractions = [], []
        for argument, (low, high), size in zip(arguments, self.bounds, sizes):
            if self.periodic:
                argument = _wrap(argument, low, high)
            else:
                valid = (argument >= low) & (argument <= high)
                inside = valid if inside is None else inside & valid
            scaled = (argument - low) * ((size - 1) / (high - low))
            cell = torch.clamp(torch.floor(scaled.detach()), 0, size - 2)
            cells.append(cell.long())
            fractions.append(scaled - cell)
        # Hermite basis on [0, 1]: [corner][derivative]
        bases = []
        for s in fractions:
            s2 = s * s
            s3 = s2 * s
            bases.append(((2 * s3 - 3 * s2 + 1, s3 - 2 * s2 + s), (-2 * s3 + 3 * s2, s3 - s2)))
        tables = self.tables.to(dtype)
        total = None
        dimensions = len(arguments)
        for corner in range(2**dimensions):
            index = tuple(cells[axis] + (corner >> axis & 1) for axis in range(dimensions))
            for bits in range(2**dimensions):
                weight = None
                for axis in range(dimensions):
                    factor = bases[axis][corner >> axis & 1][bits >> axis & 1]
                    weight = factor if weight is None else weight * factor
                term = weight * tables[(bits, *index)]
                total = term if total is None else total + term
        if inside is not None:
            total = torch.where(inside, total, torch.zeros((), dtype=dtype, device=total.device))
        return total

    def extra_repr(self) -> str:
        return f"sizes={tuple(self.tables.shape[1:])}, bounds={self.bounds}, periodic={self.periodic}"


def _wrap(x: Tensor, low: float, high: float) -> Tensor:
    """``x`` wrapped into ``[low, high)`` (OpenMM's periodic tabulated functions)."""
    length = high - low
    scaled = (x - low) / length
    return low + length * (scaled - torch.floor(scaled.detach()))


class Continuous1DFunction(_Continuous):
    """OpenMM's ``Continuous1DFunction``: a natural (or periodic) cubic spline through ``values``
    at ``n`` evenly spaced points from ``min`` to ``max``; zero outside unless periodic.

    Args:
        values: ``(n,)`` values (``n >= 2``; ``>= 3`` and first equal to last when periodic).
        min, max: range of the argument.
        periodic: wrap the argument into ``[min, max)``.
    """

    def __init__(self, values, min: float, max: float, periodic: bool = False):  # noqa: A002
        super().__init__(np.asarray(values, dtype=np.float64).reshape(-1), [(min, max)], periodic)


class Continuous2DFunction(_Continuous):
    """OpenMM's ``Continuous2DFunction``: bicubic patches on an ``xsize x ysize`` grid.

    Args:
        xsize, ysize: grid sizes.
        values: ``(xsize * ysize,)`` values, ``x`` varying fastest (OpenMM's order).
        xmin, xmax, ymin, ymax: ranges of the arguments.
        periodic: wrap both arguments into their ranges.
    """

    def __init__(
        self,
        xsize: int,
        ysize: int,
        values,
        xmin: float,
        xmax: float,
        ymin: float,
        ymax: float,
        periodic: bool = False,
    ):
        grid = np.asarray(values, dtype=np.float64).reshape(ysize, xsize).T
        super().__init__(grid, [(xmin, xmax), (ymin, ymax)], periodic)


class Continuous3DFunction(_Continuous):
    """OpenMM's ``Continuous3DFunction``: tricubic patches on an ``xsize x ysize x zsize`` grid.

    Args:
        xsize, ysize, zsize: grid sizes.
        values: ``(xsize * ysize * zsize,)`` values, ``x`` fastest, then ``y``.
        xmin, xmax, ymin, ymax, zmin, zmax: ranges of the arguments.
        periodic: wrap the arguments into their ranges.
    """

    def __init__(
        self,
        xsize: int,
        ysize: int,
        zsize: int,
        values,
        xmin: float,
        xmax: float,
        ymin: float,
        ymax: float,
        zmin: float,
        zmax: float,
        periodic: bool = False,
    ):
        grid = np.asarray(values, dtype=np.float64).reshape(zsize, ysize, xsize).transpose(2, 1, 0)
        super().__init__(grid, [(xmin, xmax), (ymin, ymax), (zmin, zmax)], periodic)
