"""OpenMM's tabulated functions as torch modules (see :mod:`mindsponge.forcefield.expressions`).

``Continuous1DFunction`` is a natural (or periodic) cubic spline, ``Continuous2DFunction`` and
``Continuous3DFunction`` bicubic and tricubic patches whose knot derivatives come from such
splines, all zero outside their range unless periodic; ``Discrete1D/2D/3DFunction`` round their
arguments to the nearest integer (halves away from zero) and clamp them to the table. Their
tables are float64 buffers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from mindsponge.forcefield.expressions.language import ExpressionError


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
