"""Rasterisation of shapes onto rectilinear grids: the covered fraction of every cell.

Used by ``mindelec.fdtd`` for sub-cell permittivity averaging. Only cells cut by the
boundary are supersampled: a shape's margin is 1-Lipschitz (see :mod:`common.geometry.base`), so a cell
whose centre margin exceeds its half-diagonal is entirely inside or entirely outside.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError

from .base import Geometry
from .csg import SpaceTime


def _check_grid(shape, centers, spacing, supersample) -> tuple[list[torch.Tensor], list[float]]:
    if not isinstance(shape, Geometry) or isinstance(shape, SpaceTime):
        raise ArgumentTypeError(f"shape must be a spatial common.geometry shape, got {type(shape).__name__}")
    if len(centers) != shape.dim:
        raise ConfigurationError(
            f"centers must hold one 1D tensor per axis ({shape.dim} for this {shape.dim}D "
                         f"{type(shape).__name__}), got {len(centers)}")
    if len(spacing) != shape.dim:
        raise ConfigurationError(
            f"spacing must hold one cell size per axis ({shape.dim}), got {len(spacing)}")
    checked = [_check_centers(axis, axis_centers) for axis, axis_centers in enumerate(centers)]
    sizes = [_check_size(axis, size) for axis, size in enumerate(spacing)]
    checks.positive_int(supersample, "supersample (sub-points per cell and axis)")
    return checked, sizes


def _check_centers(axis: int, axis_centers) -> torch.Tensor:
    """The cell centres of one axis as a floating 1D tensor (default dtype unless already floating)."""
    if not isinstance(axis_centers, torch.Tensor):
        axis_centers = torch.as_tensor(axis_centers, dtype=torch.get_default_dtype())
    if axis_centers.dim() != 1 or len(axis_centers) == 0:
        raise ConfigurationError(f"centers[{axis}] must be a non-empty 1D tensor of cell-centre coordinates, "
                         f"got shape {tuple(axis_centers.shape)}")
    if not axis_centers.is_floating_point():
        axis_centers = axis_centers.to(torch.get_default_dtype())
    return axis_centers


def _check_size(axis: int, size) -> float:
    size = float(size)
    if not (math.isfinite(size) and size > 0):
        raise ConfigurationError(f"spacing[{axis}] must be a finite cell size > 0, got {size}")
    return size


def rasterize(shape: Geometry, centers: Sequence[torch.Tensor], spacing: Sequence[float],
              supersample: int = 4, chunk_size: int = 2**18) -> torch.Tensor:
    """Fraction of every grid cell covered by ``shape``.

    Args:
        shape: a spatial shape of dimension ``d``.
        centers: ``d`` 1D tensors, the cell-centre coordinates along each axis (length unit of
            the shape, e.g. metres); cells are ``[c - h/2, c + h/2]`` along each axis.
        spacing: ``d`` cell sizes ``h`` (same unit).
        supersample: sub-points per cell and axis. ``supersample=s`` evaluates ``s**d``
            midpoint-rule sub-points in each cell cut by the boundary; ``1`` gives the
            centre-point mask (0 or 1).
        chunk_size: number of points evaluated at once (bounds the memory).

    Returns:
        ``(len(centers[0]), ..., len(centers[d-1]))`` tensor of fractions in ``[0, 1]``, in
        the dtype and on the device of ``centers[0]``. Summed and multiplied by the cell
        volume it estimates the shape's volume inside the grid.

    Example:
        >>> from common.geometry import Disk, rasterize
        >>> x = torch.linspace(-1, 1, 41, dtype=torch.float64)
        >>> fraction = rasterize(Disk((0, 0), 0.5), [x, x], [0.05, 0.05])
        >>> round(float(fraction.sum()) * 0.05**2, 3)  # pi / 4 = 0.785
        0.785
    """
    centers, sizes = _check_grid(shape, centers, spacing, supersample)
    dtype, device = centers[0].dtype, centers[0].device
    centers = [c.to(dtype=dtype, device=device) for c in centers]
    grid_shape = tuple(len(c) for c in centers)
    tolerance = shape.tolerance(dtype)
    half_diagonal = 0.5 * math.sqrt(sum(h * h for h in sizes))
    axis_offsets = [((torch.arange(supersample, dtype=dtype, device=device) + 0.5) / supersample - 0.5) * h
                    for h in sizes]
    sub_offsets = torch.stack(torch.meshgrid(*axis_offsets, indexing="ij"), dim=-1).reshape(-1, shape.dim)

    rows_per_slab = max(1, chunk_size // max(1, math.prod(grid_shape[1:])))
    cells_per_chunk = max(1, chunk_size // len(sub_offsets))
    slabs = []
    for start in range(0, grid_shape[0], rows_per_slab):
        axes = [centers[0][start: start + rows_per_slab], *centers[1:]]
        points = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, shape.dim)
        if supersample == 1:
            slabs.append(shape._inside(points).to(dtype))
            continue
        margin = shape._margin(points)
        fraction = (margin > 0).to(dtype)
        cut = (margin.abs() <= half_diagonal + tolerance).nonzero().flatten()
        for cells in cut.split(cells_per_chunk):
            sub_points = (points[cells, None, :] + sub_offsets).reshape(-1, shape.dim)
            inside = shape._inside(sub_points).reshape(len(cells), len(sub_offsets))
            fraction[cells] = inside.to(dtype).mean(dim=1)
        slabs.append(fraction)
    return torch.cat(slabs).reshape(grid_shape)
