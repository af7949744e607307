"""Constructive solid geometry (``a | b``, ``a & b``, ``a - b``) and space x time products (``space * time``).

CSG results are closed sets: ``contains`` of a union is ``contains(a) or contains(b)``,
of an intersection ``and``, of a difference ``contains(a) and not interior(b)``; points on
the boundary count as inside within the tolerance. Their boundaries are sampled from the
boundaries of the primitives they are built from (see :meth:`Geometry.sample_boundary`).
"""

from __future__ import annotations

import torch

from common.errors import ArgumentTypeError

from .base import Geometry, split_by_measure
from .shapes import TimeDomain


class _Combination(Geometry):
    """A boolean combination of two shapes of the same dimension.

    Args:
        first: left operand, a shape of dimension ``d``.
        second: right operand, a shape of dimension ``d`` (not a space x time product).
    """

    _operator: str
    _is_union = False  # margins combine by max (union) or min (intersection, difference)
    _second_sign = 1.0  # -1 for a difference: the second shape's outside counts
    _boundary_is_exact = False

    def __init__(self, first: Geometry, second: Geometry):
        first._check_operand(second, f"'{self._operator}'")
        for operand in (first, second):
            if isinstance(operand, SpaceTime):
                raise ArgumentTypeError(
                    f"'{self._operator}': combine the spatial shapes first, then multiply the "
                                "result by a TimeDomain (space x time products cannot be combined)")
        self.first, self.second = first, second
        self.dim = first.dim

    def __repr__(self) -> str:
        return f"({self.first!r} {self._operator} {self.second!r})"

    @property
    def bounds_float64(self):
        (lo_a, hi_a), (lo_b, hi_b) = self.first.bounds_float64, self.second.bounds_float64
        if self._second_sign < 0:
            return lo_a, hi_a
        if self._is_union:
            return torch.minimum(lo_a, lo_b), torch.maximum(hi_a, hi_b)
        return torch.maximum(lo_a, lo_b), torch.minimum(hi_a, hi_b)

    def _margin(self, points):
        combine = torch.maximum if self._is_union else torch.minimum
        return combine(self.first._margin(points), self._second_sign * self.second._margin(points))

    def _boundary_pieces(self):
        sign = self._second_sign
        second = [(piece, sign * orientation) for piece, orientation in self.second._boundary_pieces()]
        return self.first._boundary_pieces() + second

    @property
    def _boundary_param_dim(self) -> int:
        return max(piece._boundary_param_dim for piece, _ in self._boundary_pieces())

    def _normal(self, points):
        pieces = self._boundary_pieces()
        distance = torch.stack([piece._margin(points).abs() for piece, _ in pieces])  # (L, B)
        normals = torch.stack([sign * piece._normal(points) for piece, sign in pieces])  # (L, B, d)
        nearest = distance.argmin(dim=0)
        return normals[nearest, torch.arange(len(points), device=points.device)]

    def _boundary_from_unit(self, unit):
        pieces = self._boundary_pieces()
        measures = torch.tensor([piece.boundary_measure for piece, _ in pieces], dtype=torch.float64)
        index, local = split_by_measure(unit[:, 0], measures)
        points = unit.new_empty(len(unit), self.dim)
        normals = unit.new_empty(len(unit), self.dim)
        for i, (piece, sign) in enumerate(pieces):
            rows = index == i
            piece_unit = torch.cat([local[rows, None], unit[rows, 1: piece._boundary_param_dim]], dim=1)
            points[rows], piece_normals, _ = piece._boundary_from_unit(piece_unit)
            normals[rows] = sign * piece_normals
        return points, normals, self._on_boundary(points, normals, index, pieces)

    def _on_boundary(self, points, normals, index, pieces):
        """Which candidates lie on this shape's boundary with ``normals`` pointing outward.

        A candidate is kept if its margin is zero (within the tolerance), a short step
        along the normal leaves the shape and a short step against it enters it, and no
        earlier piece has the same boundary there with the same orientation (coincident
        faces are counted once).
        """
        tolerance = self.tolerance(points.dtype)
        step = torch.finfo(points.dtype).eps ** 0.5 * self.scale
        keep = self._margin(points).abs() <= tolerance
        keep &= self._margin(points - step * normals) >= -tolerance
        keep &= self._margin(points + step * normals) < -tolerance
        for j, (piece, sign) in enumerate(pieces[:-1]):
            later = index > j
            same = piece._margin(points[later]).abs() <= tolerance
            same &= (sign * piece._normal(points[later]) * normals[later]).sum(-1) > 0.5
            keep[later] &= ~same
        return keep


class Union(_Combination):
    """Points in either shape: ``first | second`` (both of dimension ``d``; points ``(B, d)``)."""

    _operator = "|"
    _is_union = True


class Intersection(_Combination):
    """Points in both shapes: ``first & second`` (both of dimension ``d``; points ``(B, d)``)."""

    _operator = "&"


class Difference(_Combination):
    """Points in ``first`` and not in the interior of ``second``: ``first - second``.

    The boundary of ``second`` inside ``first`` becomes boundary of the result, with its
    normals flipped (they point into ``second``). Its bounding box is that of ``first``.
    """

    _operator = "-"
    _second_sign = -1.0


class SpaceTime(Geometry):
    """Space x time product ``space * time``: points ``(B, d + 1)`` with time in the last column.

    Args:
        space: a spatial shape of dimension ``d`` (length unit).
        time: a :class:`TimeDomain` ``[t0, t1]`` (time unit).

    ``sample_interior`` draws ``(x, t)`` jointly (Sobol/LHS in ``d + 1`` dimensions).
    ``sample_boundary`` samples the lateral boundary ``boundary(space) x [t0, t1]`` (as
    DeepXDE does): normals are the spatial outward normals with a zero time component.
    Initial-condition points come from :meth:`sample_initial`. ``contains`` checks the
    spatial part with the spatial tolerance and the time part with the time tolerance, so
    the two units never mix.
    """

    def __init__(self, space: Geometry, time: TimeDomain):
        if not isinstance(time, TimeDomain):
            raise ArgumentTypeError(
                f"'*': the right operand must be a TimeDomain(t0, t1), got {type(time).__name__}")
        if isinstance(space, (TimeDomain, SpaceTime)) or not isinstance(space, Geometry):
            raise ArgumentTypeError(
                f"'*': the left operand must be a spatial shape, got {type(space).__name__}")
        self.space, self.time = space, time
        self.dim = space.dim + 1

    def __repr__(self) -> str:
        return f"({self.space!r} * {self.time!r})"

    @property
    def bounds_float64(self):
        (lo, hi), (t0, t1) = self.space.bounds_float64, self.time.bounds_float64
        return torch.cat([lo, t0]), torch.cat([hi, t1])

    @property
    def volume(self) -> float:
        """Space volume times duration (length^d x time)."""
        return self.space.volume * self.time.volume

    @property
    def boundary_measure(self) -> float:
        """Measure of the lateral boundary: space boundary measure times duration."""
        return self.space.boundary_measure * self.time.volume

    def _interior_acceptance(self) -> float:
        return self.space._interior_acceptance()

    def contains(self, points: torch.Tensor, tolerance: float | None = None) -> torch.Tensor:
        """``(B,)`` bool: spatial part (tolerance ``tolerance``) in space and time in ``[t0, t1]``.

        Args:
            points: ``(B, d + 1)``, time last.
            tolerance: spatial tolerance (length unit); the time tolerance is the
                TimeDomain's default.
        """
        points = self.check_points(points)
        return self.space.contains(points[:, :-1], tolerance) & self.time._inside(points[:, -1:])

    def _inside(self, points):
        return self.space._inside(points[:, :-1]) & self.time._inside(points[:, -1:])

    def _margin(self, points):
        # mixes length and time units: use it for its sign only (contains and _inside apply
        # each factor's own tolerance)
        return torch.minimum(self.space._margin(points[:, :-1]), self.time._margin(points[:, -1:]))

    def _normal(self, points):
        return torch.cat([self.space._normal(points[:, :-1]), torch.zeros_like(points[:, -1:])], dim=1)

    @property
    def _boundary_is_exact(self) -> bool:
        return self.space._boundary_is_exact

    @property
    def _boundary_param_dim(self) -> int:
        return self.space._boundary_param_dim + 1

    def _boundary_from_unit(self, unit):
        points, normals, keep = self.space._boundary_from_unit(unit[:, :-1])
        t0, t1 = (t.to(unit) for t in self.time.bounds_float64)
        times = t0 + (t1 - t0) * unit[:, -1:]
        return torch.cat([points, times], 1), torch.cat([normals, torch.zeros_like(times)], 1), keep

    def sample_initial(self, n: int, sampler: str = "uniform", seed: int | None = None,
                       dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
        """Points of the initial slice ``space x {t0}``: ``(n, d + 1)``, last column ``t0``.

        Arguments as :meth:`Geometry.sample_interior`.
        """
        points = self.space.sample_interior(n, sampler, seed, dtype, device)
        start = self.time.bounds_float64[0].to(points)
        return torch.cat([points, start.expand(len(points), 1)], dim=1)
