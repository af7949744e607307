"""What a compiled expression is at run time: the evaluation environment and the callable."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from mindsponge.forcefield.expressions.language import ExpressionError


class Environment:
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
        """``value`` as a tensor of the environment's dtype and device (floating tensors are kept)."""
        if isinstance(value, Tensor):
            return value if value.is_floating_point() else value.to(self.dtype)
        return torch.as_tensor(value, dtype=self.dtype, device=self.device)

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
        arguments: the arguments of :func:`compile_expression` that made it (it pickles as them).
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
        self.arguments = (expression,)  # compile_expression's arguments (set by it): what pickles

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
        environment = Environment(variables, functions or {}, box, static_cache)
        return environment.tensor(self._root(environment))

    def __reduce__(self):
        """Pickled as the arguments of :func:`compile_expression` (its nodes are closures): force fields
        with custom forces go to worker processes."""
        from mindsponge.forcefield.expressions.compiler import compile_expression

        return compile_expression, self.arguments

    def __repr__(self) -> str:
        return f"CompiledExpression({self.expression!r})"

def cached(node):
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
