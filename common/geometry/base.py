"""The :class:`Geometry` base class: membership, sampling and CSG operators shared by all shapes.

A shape is described by a *margin* function: positive inside, zero on the boundary,
negative outside, and 1-Lipschitz (``|margin(p)|`` never exceeds the distance from ``p``
to the boundary; it equals it for the primitives' interiors). Membership, the CSG
combinations (max for union, min for intersection, ``min(a, -b)`` for difference) and the
fast path of rasterisation (cells whose centre margin exceeds their half-diagonal are
entirely inside or outside) all follow from it.

Coordinates carry whatever length unit the caller uses (metres in ``mindelec.fdtd``);
shapes keep their parameters in float64 and compute in the dtype and on the device of
the points they are given.
"""

from __future__ import annotations

import numpy as np
import torch

from common.errors import ArgumentTypeError, ConfigurationError

from .samplers import UnitSampler, check_count, rejection_sample, resolve_dtype


def as_vector(value, name: str, length: int | None = None) -> torch.Tensor:
    """``value`` as a finite float64 CPU vector of ``length`` entries, or ``ValueError`` naming ``name``."""
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        value = value.copy()  # torch warns on read-only arrays (CAD bounds); the vector is a copy anyway
    try:
        vector = torch.as_tensor(value, dtype=torch.float64).detach().cpu().reshape(-1).clone()
    except (TypeError, ValueError, RuntimeError) as error:
        raise ConfigurationError(f"{name} must be a sequence of numbers, got {value!r}") from error
    if length is not None and vector.numel() != length:
        raise ConfigurationError(f"{name} must have {length} coordinates, got {vector.numel()} ({value!r})")
    if vector.numel() == 0 or not bool(torch.isfinite(vector).all()):
        raise ConfigurationError(f"{name} must be finite numbers, got {value!r}")
    return vector


def as_positive(value, name: str) -> float:
    """``value`` as a finite float ``> 0``, or ``ValueError`` naming ``name``."""
    number = float(as_vector(value, name, 1)[0])
    if not number > 0:
        raise ConfigurationError(f"{name} must be > 0, got {number}")
    return number


def check_bounds(lo: torch.Tensor, hi: torch.Tensor, what: str) -> None:
    """Raise ``ValueError`` unless ``lo < hi`` on every axis."""
    bad = (lo >= hi).nonzero().flatten().tolist()
    if bad:
        raise ConfigurationError(
            f"{what}: inverted or empty bounds on axis {bad}: lower corner {lo.tolist()} "
                         f"must be strictly below upper corner {hi.tolist()} on every axis")


def split_by_measure(unit: torch.Tensor, measures: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a unit coordinate among pieces in proportion to their measures.

    Args:
        unit: ``(m,)`` values in ``[0, 1)``.
        measures: ``(p,)`` non-negative piece measures (lengths, areas, ...).

    Returns:
        ``(index, local)``: ``(m,)`` piece index and ``(m,)`` position in ``[0, 1]``
        within the piece's share of ``[0, 1)``. The map is measure preserving: uniform
        (or low-discrepancy) ``unit`` gives pieces hit in proportion to their measures and
        uniform ``local`` within each.
    """
    measures = measures.to(dtype=unit.dtype, device=unit.device)
    ends = torch.cumsum(measures, 0) / measures.sum()
    index = torch.searchsorted(ends, unit.contiguous(), right=True).clamp_(max=len(measures) - 1)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    width = (ends - starts)[index].clamp(min=torch.finfo(unit.dtype).tiny)
    local = ((unit - starts[index]) / width).clamp_(0.0, 1.0)
    return index, local


class Geometry:
    """Base class of all shapes (primitives, CSG combinations, space x time products).

    Attributes:
        dim: number of coordinates ``d`` of a point.

    Subclasses implement ``_margin`` (see the module docstring), ``_normal`` (outward unit
    normal of the nearest boundary piece), ``bounds_float64``, and the boundary
    parametrisation ``_boundary_from_unit`` with its parameter count
    ``_boundary_param_dim``.
    """

    dim: int

    # ------------------------------------------------------------------ description
    @property
    def bounds_float64(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Axis-aligned bounding box ``(lo, hi)``, each a ``(d,)`` float64 CPU tensor."""
        raise NotImplementedError

    @property
    def bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Axis-aligned bounding box ``(lo, hi)``: two ``(d,)`` tensors (default dtype, length unit)."""
        lo, hi = self.bounds_float64
        return lo.to(torch.get_default_dtype()), hi.to(torch.get_default_dtype())

    @property
    def volume(self) -> float:
        """Measure of the shape: length (1D), area (2D), volume (3D), in length units to the power ``d``."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form volume; estimate it by "
                                  "Monte Carlo: bounding-box volume times the fraction of sample_interior "
                                  "candidates that `contains` accepts")

    @property
    def measure(self) -> float:
        """Alias of :attr:`volume`."""
        return self.volume

    @property
    def boundary_measure(self) -> float:
        """Measure of the boundary: point count (1D), perimeter (2D), surface area (3D)."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form boundary measure")

    @property
    def scale(self) -> float:
        """Largest absolute coordinate or extent of the bounding box (sets the default tolerances)."""
        lo, hi = self.bounds_float64
        return float(torch.cat([lo.abs(), hi.abs(), hi - lo]).max())

    def tolerance(self, dtype: torch.dtype) -> float:
        """Default distance within which a point counts as on the boundary, for points of ``dtype``."""
        return 100.0 * torch.finfo(dtype).eps * self.scale

    # ------------------------------------------------------------------ membership
    def check_points(self, points, name: str = "points") -> torch.Tensor:
        """Return ``points`` as a floating ``(B, d)`` tensor or raise ``ValueError``/``TypeError``."""
        if not isinstance(points, torch.Tensor):
            raise ArgumentTypeError(f"{name} must be a torch.Tensor of shape (B, {self.dim}), "
                            f"got {type(points).__name__}")
        if points.dim() != 2 or points.shape[-1] != self.dim:
            raise ConfigurationError(f"{name} must have shape (B, {self.dim}) for this {self.dim}D "
                             f"{type(self).__name__}, got {tuple(points.shape)}")
        if not points.is_floating_point():
            points = points.to(torch.get_default_dtype())
        return points

    def _margin(self, points: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _normal(self, points: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def contains(self, points: torch.Tensor, tolerance: float | None = None) -> torch.Tensor:
        """Which points lie in the closed shape.

        Args:
            points: ``(B, d)`` tensor (length unit of the shape).
            tolerance: points within this distance outside the boundary still count as
                inside; default ``100 * eps(dtype) * scale``.

        Returns:
            ``(B,)`` bool tensor on the device of ``points``.
        """
        points = self.check_points(points)
        if tolerance is None:
            return self._inside(points)
        return self._margin(points) >= -tolerance

    def _inside(self, points: torch.Tensor) -> torch.Tensor:
        """``contains`` with the default tolerance, without argument checks."""
        return self._margin(points) >= -self.tolerance(points.dtype)

    def boundary_normal(self, points: torch.Tensor) -> torch.Tensor:
        """Outward unit normals at boundary points.

        Args:
            points: ``(B, d)`` points on the boundary. For a point off the boundary the
                result is the outward normal of the nearest boundary piece (face, edge, arc).

        Returns:
            ``(B, d)`` unit vectors, dtype and device of ``points``.
        """
        return self._normal(self.check_points(points))

    # ------------------------------------------------------------------ sampling
    def _interior_acceptance(self) -> float:
        """A priori fraction of the bounding box inside the shape (1 means: the shape is its box)."""
        lo, hi = self.bounds_float64
        try:
            return min(self.volume / float(torch.prod(hi - lo)), 1.0)
        except NotImplementedError:
            return 0.5

    def sample_interior(self, n: int, sampler: str = "uniform", seed: int | None = None,
                        dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
        """Points in the shape, by rejection from its bounding box (batched, vectorised).

        Args:
            n: number of points (> 0).
            sampler: ``"uniform"``, ``"sobol"`` or ``"lhs"`` (see :class:`UnitSampler`). For
                shapes that are not boxes the accepted subset of a Sobol/LHS design keeps its
                uniformity but not the exact stratification.
            seed: integer seed (``None``: drawn from torch's global generator).
            dtype: floating dtype of the result (default: torch default dtype).
            device: device of the result (default: CPU).

        Returns:
            ``(n, d)`` tensor of points.
        """
        check_count(n)
        dtype = resolve_dtype(dtype)
        lo, hi = (b.to(dtype=dtype, device=device) for b in self.bounds_float64)
        draw = UnitSampler(sampler, self.dim, seed, dtype, device)

        def candidates(unit):
            points = lo + (hi - lo) * unit
            return (points,), self._inside(points)

        acceptance = self._interior_acceptance()
        if acceptance > 1.0 - 1e-12:
            acceptance = 1.0
        return rejection_sample(n, draw, candidates, acceptance, f"sample_interior of {self!r}")[0]

    @property
    def _boundary_param_dim(self) -> int:
        raise NotImplementedError

    def _boundary_from_unit(self, unit: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Map ``(m, k)`` unit points to ``(points (m, d), normals (m, d), keep (m,))``.

        The map is measure preserving onto a candidate set that contains the boundary;
        ``keep`` marks the candidates that lie on the boundary of this shape.
        """
        raise NotImplementedError

    def sample_boundary(self, n: int, sampler: str = "uniform", seed: int | None = None,
                        dtype: torch.dtype | None = None, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Points on the boundary, uniformly distributed over its measure, with outward unit normals.

        Primitives map the unit cube onto their boundary by a measure-preserving
        parametrisation (faces, edges and arcs in proportion to their measure). CSG shapes
        draw candidates on the boundaries of their primitives (each in proportion to its
        boundary measure), keep those on the boundary of the result (normals of subtracted
        parts flipped) and repeat until ``n`` are kept.

        Args:
            n: number of points (> 0).
            sampler: ``"uniform"``, ``"sobol"`` or ``"lhs"``.
            seed: integer seed (``None``: drawn from torch's global generator).
            dtype: floating dtype (default: torch default dtype).
            device: device (default: CPU).

        Returns:
            ``(points, normals)``: two ``(n, d)`` tensors; normals are outward unit vectors.
        """
        check_count(n)
        dtype = resolve_dtype(dtype)
        draw = UnitSampler(sampler, self._boundary_param_dim, seed, dtype, device)

        def candidates(unit):
            points, normals, keep = self._boundary_from_unit(unit)
            return (points, normals), keep

        acceptance = 1.0 if self._boundary_is_exact else 0.5
        return rejection_sample(n, draw, candidates, acceptance, f"sample_boundary of {self!r}")

    _boundary_is_exact = True  # primitives: every candidate lies on the boundary

    # ------------------------------------------------------------------ CSG
    def _boundary_pieces(self) -> list[tuple[Geometry, float]]:
        """Primitives whose boundaries cover this shape's boundary, with the normal orientation (+1/-1)."""
        return [(self, 1.0)]

    def _check_operand(self, other, operator: str) -> None:
        if not isinstance(other, Geometry):
            raise ArgumentTypeError(
                f"{operator}: both operands must be geometry shapes, got {type(other).__name__}")
        if other.dim != self.dim:
            raise ConfigurationError(f"{operator}: operands must have the same dimension, got {self.dim}D "
                             f"{type(self).__name__} and {other.dim}D {type(other).__name__}")

    def __or__(self, other: Geometry) -> Geometry:
        from .csg import Union

        return Union(self, other)

    def __and__(self, other: Geometry) -> Geometry:
        from .csg import Intersection

        return Intersection(self, other)

    def __sub__(self, other: Geometry) -> Geometry:
        from .csg import Difference

        return Difference(self, other)

    def __mul__(self, other: Geometry) -> Geometry:
        from .csg import SpaceTime

        return SpaceTime(self, other)


def unit_axis_normal(axis: torch.Tensor, sign: torch.Tensor, dim: int, like: torch.Tensor) -> torch.Tensor:
    """``(m, dim)`` normals ``sign * e_axis``, dtype/device of ``like``."""
    normals = like.new_zeros(len(axis), dim)
    normals[torch.arange(len(axis), device=like.device), axis] = sign.to(like.dtype)
    return normals

