"""Validators shared by the suite's entry points, with messages that say what and where.

Each function returns its (converted) argument or raises a :mod:`common.errors` exception
whose message names the argument and, for tensors, the first offending element, e.g.
``"positions of atom 17 are not finite: (nan, 0.1, 0.2)"``.

Example::

    from common import checks
    steps = checks.positive_int(steps, "steps")
    checks.finite(positions, "positions", item="atom")
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from common.errors import ConfigurationError, DataError

if TYPE_CHECKING:  # imported where used, so that configuration checks do not load torch
    import torch

__all__ = ["positive_int", "non_negative_int", "positive", "non_negative", "finite", "finite_cells",
           "positions"]


def positive_int(value, name: str) -> int:
    """``value`` as an int > 0; ``bool`` and non-integral numbers are refused.

    Raises:
        ConfigurationError: naming ``name`` and the value given.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive int, got {value!r}")
    return value


def non_negative_int(value, name: str) -> int:
    """``value`` as an int >= 0; ``bool`` and non-integral numbers are refused.

    Raises:
        ConfigurationError: naming ``name`` and the value given.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{name} must be a non-negative int, got {value!r}")
    return value


def positive(value, name: str) -> float:
    """``value`` as a float > 0 (an int is accepted); ``bool``, NaN and infinity are refused.

    Raises:
        ConfigurationError: naming ``name`` and the value given.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ConfigurationError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def non_negative(value, name: str) -> float:
    """``value`` as a finite float >= 0 (an int is accepted); ``bool`` and NaN are refused.

    Raises:
        ConfigurationError: naming ``name`` and the value given.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ConfigurationError(f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def finite(tensor: torch.Tensor, name: str, item: str = "element") -> torch.Tensor:
    """Refuse NaN or infinite entries, naming the first bad ``item`` along the first axis.

    Args:
        tensor: any floating tensor (integer tensors pass unchanged); a 0-d tensor is one item.
        name: what the tensor is (``"positions"``, ``"permittivity of DesignRegion 'lens'"``).
        item: what one index of the first axis is (``"atom"``, ``"cell"``, ``"sample"``; an item
            that starts with ``name``, such as ``"box vector"`` of ``"box"``, is named alone).

    Returns:
        ``tensor`` unchanged.

    Raises:
        DataError: with the index of the first row holding a non-finite value and that row's values.
    """
    import torch

    if not torch.is_floating_point(tensor) and not torch.is_complex(tensor):
        return tensor
    bad = ~torch.isfinite(tensor.detach())
    if not bool(bad.any()):
        return tensor
    if tensor.dim() == 0:
        raise DataError(f"{name} is not finite: {float(tensor)}")
    rows = bad.reshape(tensor.shape[0], -1).any(dim=1)
    first = int(torch.nonzero(rows)[0, 0])
    values = tensor.detach()[first].reshape(-1)[:6].tolist()
    shown = ", ".join(f"{value:.6g}" if isinstance(value, float) else str(value) for value in values)
    count = int(rows.sum())
    more = f" ({count} {item}s in all)" if count > 1 else ""
    if tensor.dim() == 1:
        raise DataError(f"{name} of {item} {first} is not finite: {shown}{more}")
    if item.startswith(name):  # the row is the thing itself: "box vector 1 is not finite: (...)"
        raise DataError(f"{item} {first} is not finite: ({shown}){more}")
    raise DataError(f"{name} of {item} {first} are not finite: ({shown}){more}")


def finite_cells(value, name: str):
    """Refuse a NaN or infinite value on a grid, naming the first bad cell.

    :func:`finite` names a row of the first axis; a grid (a material tensor, a source) needs the
    full cell index ``(i, j[, k])`` (x first), which this names, with the count of bad cells.

    Args:
        value: a float or a tensor of any shape (a 0-d or 1-element tensor is one value).
        name: what the value is, e.g. ``"permittivity of DesignRegion(center=(0.0, 0.0), ...)"``.

    Returns:
        ``value`` unchanged.

    Raises:
        DataError: ``"<name> is not finite at cell (3, 7): nan (2 cells in all)"``.
    """
    import torch

    if not isinstance(value, torch.Tensor):
        if not math.isfinite(value):
            raise DataError(f"{name} is not finite: {value}")
        return value
    bad = ~torch.isfinite(value.detach())
    if not bool(bad.any()):
        return value
    if value.numel() == 1:
        raise DataError(f"{name} is not finite: {float(value.detach().reshape(()))}")
    cell = tuple(int(index) for index in torch.nonzero(bad)[0])
    count = int(bad.sum())
    more = f" ({count} cells in all)" if count > 1 else ""
    raise DataError(f"{name} is not finite at cell {cell}: {float(value.detach()[cell])}{more}")


def positions(tensor, name: str = "positions") -> torch.Tensor:
    """Atomic positions: a floating tensor of shape (N, 3) with finite values (nm).

    Raises:
        ConfigurationError: wrong type or shape.
        DataError: a non-finite coordinate, naming the atom.
    """
    import torch

    if not isinstance(tensor, torch.Tensor) or not torch.is_floating_point(tensor):
        raise ConfigurationError(
            f"{name} must be a floating torch tensor of shape (N, 3), got {type(tensor).__name__}"
        )
    if tensor.dim() != 2 or tensor.shape[1] != 3:
        raise ConfigurationError(f"{name} must have shape (N, 3), got {tuple(tensor.shape)}")
    return finite(tensor, name, item="atom")
