"""Lepton's built-in functions in torch, and the geometric functions of points and particles.

The table :data:`LEPTON_FUNCTIONS` maps each name of OpenMM's expression language to its number
of arguments and its torch implementation; :func:`point_function` computes ``pointdistance``,
``pointangle``, ``pointdihedral`` and ``periodicdistance`` (nm, rad) on points ``(..., 3)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from common.errors import ConfigurationError


class ExpressionError(ConfigurationError):
    """An energy expression that cannot be compiled: bad syntax, unknown function or variable."""


# Lepton's functions that torch provides under the same name, of one argument (as in C)
_TORCH_NAMED = "sqrt exp log sin cos tan asin acos atan sinh cosh tanh erf erfc abs floor ceil"

# Lepton's built-in functions: name -> (number of arguments, torch implementation)
LEPTON_FUNCTIONS: dict[str, tuple[int, Callable[..., Tensor]]] = {
    **{name: (1, getattr(torch, name)) for name in _TORCH_NAMED.split()},
    "sec": (1, lambda x: 1.0 / torch.cos(x)),
    "csc": (1, lambda x: 1.0 / torch.sin(x)),
    "cot": (1, lambda x: 1.0 / torch.tan(x)),
    "atan2": (2, torch.atan2),
    "step": (1, lambda x: (x >= 0).to(x.dtype)),
    "delta": (1, lambda x: (x == 0).to(x.dtype)),
    "square": (1, lambda x: x * x),
    "cube": (1, lambda x: x * x * x),
    "recip": (1, torch.reciprocal),
    "min": (2, torch.minimum),
    "max": (2, torch.maximum),
    "select": (3, lambda x, y, z: torch.where(x != 0, y, z)),
}

# geometric functions of points: name -> number of points
POINT_FUNCTIONS = {"pointdistance": 2, "pointangle": 3, "pointdihedral": 4, "periodicdistance": 2}
# geometric functions of named particles (compound and centroid bonds) -> their point function
PARTICLE_FUNCTIONS = {
    "distance": ("pointdistance", 2),
    "angle": ("pointangle", 3),
    "dihedral": ("pointdihedral", 4),
}


def _minimum_image(vectors: Tensor, box: Tensor | None) -> Tensor:
    if box is None:
        return vectors
    from mindsponge.space import minimum_image

    return minimum_image(vectors, box.to(vectors))


def point_function(name: str, points: list[Tensor], box: Tensor | None) -> Tensor:
    """Distance (nm), angle (rad, at the second point) or dihedral (rad, ``[-pi, pi]``) of points
    ``(..., 3)``; minimum-image differences when ``box`` is given."""
    from mindsponge.forcefield.bonded import _angle, _dihedral, _norm

    if name in ("pointdistance", "periodicdistance"):
        return _norm(_minimum_image(points[0] - points[1], box))
    if name == "pointangle":
        first = _minimum_image(points[0] - points[1], box)
        second = _minimum_image(points[2] - points[1], box)
        return _angle(first, second)
    bonds = [_minimum_image(points[k + 1] - points[k], box) for k in range(3)]
    return _dihedral(*bonds)


class NegativePower(torch.autograd.Function):
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


def square(x: Tensor) -> Tensor:
    """``x * x`` (one multiplication, not a ``pow``)."""
    return x * x


def broadcast(values: list[Tensor]) -> list[Tensor]:
    """The tensors broadcast to one shape (unchanged when they already share it)."""
    if len(values) < 2 or all(value.shape == values[0].shape for value in values):
        return values
    return list(torch.broadcast_tensors(*values))
