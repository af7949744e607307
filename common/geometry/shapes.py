"""Primitive shapes: ``Interval``, ``Rectangle``, ``Box``, ``TimeDomain``, ``Disk``, ``Sphere``,
``Cylinder``, ``Polygon``.

All coordinates are in one length unit of the caller's choice (metres for FDTD
structures); times in ``TimeDomain`` are in the caller's time unit (seconds). Points
are ``(B, d)`` tensors, including ``(B, 1)`` for 1D shapes.
"""

from __future__ import annotations

import math

import torch

from common.errors import ConfigurationError

from .base import Geometry, as_positive, as_vector, check_bounds, split_by_measure, unit_axis_normal


class Box(Geometry):
    """Axis-aligned box ``[lo_0, hi_0] x ... x [lo_{d-1}, hi_{d-1}]`` in any dimension ``d`` (usually 3).

    Args:
        lo: ``(d,)`` lower corner (length unit).
        hi: ``(d,)`` upper corner (length unit); ``hi > lo`` on every axis.

    Example:
        >>> box = Box((0, 0, 0), (1, 2, 3))
        >>> box.volume, box.boundary_measure
        (6.0, 22.0)
    """

    _required_dim: int | None = None
    _names = ("lo", "hi")

    def __init__(self, lo, hi):
        lo_name, hi_name = self._names
        self.lo = as_vector(lo, lo_name, self._required_dim)
        self.hi = as_vector(hi, hi_name, len(self.lo))
        check_bounds(self.lo, self.hi, f"{type(self).__name__}({lo_name}, {hi_name})")
        self.dim = len(self.lo)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.lo.tolist()}, {self.hi.tolist()})"

    @property
    def bounds_float64(self):
        return self.lo, self.hi

    @property
    def volume(self) -> float:
        return float(torch.prod(self.hi - self.lo))

    def _face_measures(self) -> torch.Tensor:
        """``(2d,)`` measures of the faces: lower faces of axes 0..d-1, then upper faces."""
        extent = self.hi - self.lo
        per_axis = torch.stack([torch.prod(torch.cat([extent[:i], extent[i + 1:]])) for i in range(self.dim)])
        return torch.cat([per_axis, per_axis])

    @property
    def boundary_measure(self) -> float:
        return float(self._face_measures().sum())

    def _margin(self, points):
        lo, hi = self.lo.to(points), self.hi.to(points)
        return torch.minimum(points - lo, hi - points).amin(dim=-1)

    def _normal(self, points):
        lo, hi = self.lo.to(points), self.hi.to(points)
        face = torch.cat([(points - lo).abs(), (hi - points).abs()], dim=-1).argmin(dim=-1)
        return unit_axis_normal(face % self.dim, torch.where(face < self.dim, -1.0, 1.0), self.dim, points)

    @property
    def _boundary_param_dim(self) -> int:
        return max(self.dim - 1, 1)

    def _boundary_from_unit(self, unit):
        lo, hi = self.lo.to(unit), self.hi.to(unit)
        face, local = split_by_measure(unit[:, 0], self._face_measures())
        axis, upper = face % self.dim, face >= self.dim
        # fractional position inside the box: the free axes of the face take (local, unit[:, 1:]),
        # the face's own axis is 0 (lower face) or 1 (upper face)
        fraction = torch.cat([local[:, None], unit[:, 1:]], dim=1)[:, : self.dim - 1]
        free_axes = torch.tensor([[j for j in range(self.dim) if j != i] for i in range(self.dim)],
                                 dtype=torch.long, device=unit.device).reshape(self.dim, self.dim - 1)
        position = unit.new_zeros(len(unit), self.dim)
        position.scatter_(1, free_axes[axis], fraction)
        position[torch.arange(len(unit), device=unit.device), axis] = upper.to(unit.dtype)
        points = lo + (hi - lo) * position
        normals = unit_axis_normal(axis, torch.where(upper, 1.0, -1.0), self.dim, unit)
        return points, normals, torch.ones(len(unit), dtype=torch.bool, device=unit.device)


class Rectangle(Box):
    """Axis-aligned rectangle ``[x0, x1] x [y0, y1]``.

    Args:
        lower: ``(x0, y0)`` lower-left corner (length unit).
        upper: ``(x1, y1)`` upper-right corner (length unit), ``x1 > x0`` and ``y1 > y0``.
    """

    _required_dim = 2
    _names = ("lower", "upper")


class Interval(Box):
    """The closed interval ``[a, b]`` of the real line; points are ``(B, 1)`` tensors.

    Args:
        a: left end (length unit).
        b: right end (length unit), ``b > a``.

    Its boundary is the two end points (boundary measure 2, counting measure), with
    normals ``-1`` at ``a`` and ``+1`` at ``b``.
    """

    _required_dim = 1
    _names = ("a", "b")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({float(self.lo)}, {float(self.hi)})"


class TimeDomain(Interval):
    """A time interval ``[t0, t1]`` (time unit, e.g. seconds), the right factor of ``space * time``.

    Args:
        t0: start time.
        t1: end time, ``t1 > t0``.
    """

    _names = ("t0", "t1")


class _Ball(Geometry):
    """Closed ball ``|p - center| <= radius`` in 2 (disk) or 3 (sphere) dimensions."""

    _required_dim: int

    def __init__(self, center, radius):
        self.center = as_vector(center, "center", self._required_dim)
        self.radius = as_positive(radius, "radius")
        self.dim = self._required_dim

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.center.tolist()}, {self.radius})"

    @property
    def bounds_float64(self):
        return self.center - self.radius, self.center + self.radius

    def _margin(self, points):
        return self.radius - torch.linalg.vector_norm(points - self.center.to(points), dim=-1)

    def _normal(self, points):
        offset = points - self.center.to(points)
        length = torch.linalg.vector_norm(offset, dim=-1, keepdim=True)
        return offset / length.clamp(min=torch.finfo(points.dtype).tiny)

    def _direction_from_unit(self, unit):
        raise NotImplementedError

    def _boundary_from_unit(self, unit):
        direction = self._direction_from_unit(unit)
        points = self.center.to(unit) + self.radius * direction
        return points, direction, torch.ones(len(unit), dtype=torch.bool, device=unit.device)


class Disk(_Ball):
    """Closed disk ``|p - center| <= radius``.

    Args:
        center: ``(x, y)`` centre (length unit).
        radius: radius ``> 0`` (length unit).
    """

    _required_dim = 2

    @property
    def volume(self) -> float:
        return math.pi * self.radius**2

    @property
    def boundary_measure(self) -> float:
        return 2.0 * math.pi * self.radius

    _boundary_param_dim = 1

    def _direction_from_unit(self, unit):
        angle = 2.0 * math.pi * unit[:, 0]
        return torch.stack([torch.cos(angle), torch.sin(angle)], dim=-1)


class Sphere(_Ball):
    """Closed ball ``|p - center| <= radius`` in 3D (its boundary is the sphere surface).

    Args:
        center: ``(x, y, z)`` centre (length unit).
        radius: radius ``> 0`` (length unit).
    """

    _required_dim = 3

    @property
    def volume(self) -> float:
        return 4.0 / 3.0 * math.pi * self.radius**3

    @property
    def boundary_measure(self) -> float:
        return 4.0 * math.pi * self.radius**2

    _boundary_param_dim = 2

    def _direction_from_unit(self, unit):
        # Archimedes: z uniform in [-1, 1] and azimuth uniform give uniform points on the sphere
        z = 1.0 - 2.0 * unit[:, 0]
        azimuth = 2.0 * math.pi * unit[:, 1]
        rho = (1.0 - z * z).clamp(min=0.0).sqrt()
        return torch.stack([rho * torch.cos(azimuth), rho * torch.sin(azimuth), z], dim=-1)


class Cylinder(Geometry):
    """Closed solid circular cylinder in 3D, its axis parallel to a coordinate axis.

    Args:
        center: ``(x, y, z)`` centre of the cylinder (midpoint of its axis; length unit).
        radius: radius ``> 0`` (length unit).
        height: total length ``> 0`` along the axis (length unit).
        axis: coordinate axis of the cylinder axis: 0 (x), 1 (y) or 2 (z, default).
    """

    dim = 3

    def __init__(self, center, radius, height, axis: int = 2):
        self.center = as_vector(center, "center", 3)
        self.radius = as_positive(radius, "radius")
        self.height = as_positive(height, "height")
        if isinstance(axis, bool) or axis not in (0, 1, 2):
            raise ConfigurationError(f"axis must be 0, 1 or 2 (x, y or z), got {axis!r}")
        self.axis = int(axis)
        self._perpendicular = [i for i in range(3) if i != self.axis]

    def __repr__(self) -> str:
        return f"Cylinder({self.center.tolist()}, {self.radius}, {self.height}, axis={self.axis})"

    @property
    def bounds_float64(self):
        half = torch.full((3,), self.radius, dtype=torch.float64)
        half[self.axis] = self.height / 2
        return self.center - half, self.center + half

    @property
    def volume(self) -> float:
        return math.pi * self.radius**2 * self.height

    def _piece_measures(self) -> torch.Tensor:
        """Lateral surface, lower cap, upper cap."""
        cap = math.pi * self.radius**2
        return torch.tensor([2.0 * math.pi * self.radius * self.height, cap, cap], dtype=torch.float64)

    @property
    def boundary_measure(self) -> float:
        return float(self._piece_measures().sum())

    def _split(self, points):
        """Radial offset ``(B, 2)`` in the perpendicular plane and axial offset ``(B,)`` from the centre."""
        offset = points - self.center.to(points)
        return offset[:, self._perpendicular], offset[:, self.axis]

    def _margin(self, points):
        radial, axial = self._split(points)
        return torch.minimum(self.radius - torch.linalg.vector_norm(radial, dim=-1),
                             self.height / 2 - axial.abs())

    def _normal(self, points):
        radial, axial = self._split(points)
        radial_distance = torch.linalg.vector_norm(radial, dim=-1, keepdim=True)
        lateral = (self.radius - radial_distance).abs()[:, 0] <= (self.height / 2 - axial.abs()).abs()
        normals = points.new_zeros(points.shape)
        normals[:, self._perpendicular] = radial / radial_distance.clamp(min=torch.finfo(points.dtype).tiny)
        cap = points.new_zeros(points.shape)
        cap[:, self.axis] = torch.where(axial >= 0, 1.0, -1.0).to(points.dtype)
        return torch.where(lateral[:, None], normals, cap)

    _boundary_param_dim = 2

    def _boundary_from_unit(self, unit):
        piece, local = split_by_measure(unit[:, 0], self._piece_measures())
        azimuth = 2.0 * math.pi * unit[:, 1]
        direction = torch.stack([torch.cos(azimuth), torch.sin(azimuth)], dim=-1)
        lateral = piece == 0
        # lateral: on the rim, axial position uniform; caps: radius sqrt(local) * R is area preserving
        rho = torch.where(lateral, torch.ones_like(local), local.sqrt()) * self.radius
        axial = torch.where(lateral, (local - 0.5) * self.height,
                            torch.where(piece == 1, -0.5, 0.5).to(unit.dtype) * self.height)
        points = self.center.to(unit).expand(len(unit), 3).clone()
        points[:, self._perpendicular] += rho[:, None] * direction
        points[:, self.axis] += axial
        normals = unit.new_zeros(len(unit), 3)
        normals[:, self._perpendicular] = torch.where(lateral[:, None], direction, 0.0)
        normals[:, self.axis] = torch.where(lateral, 0.0, torch.where(piece == 1, -1.0, 1.0)).to(unit.dtype)
        return points, normals, torch.ones(len(unit), dtype=torch.bool, device=unit.device)


class Polygon(Geometry):
    """Closed simple polygon (not self-intersecting) in 2D.

    Args:
        vertices: ``(V, 2)`` vertices in order (clockwise or counter-clockwise, ``V >= 3``;
            the closing edge from the last to the first vertex is implied; length unit).
            Fewer than 3 vertices, zero area or two edges that cross raise ``ValueError``.
    """

    dim = 2

    def __init__(self, vertices):
        try:
            vertices = torch.as_tensor(vertices, dtype=torch.float64).detach().cpu().clone()
        except (TypeError, ValueError, RuntimeError) as error:
            raise ConfigurationError(
                f"vertices must be a (V, 2) array of numbers, got {vertices!r}") from error
        if vertices.dim() != 2 or vertices.shape[1] != 2 or len(vertices) < 3:
            raise ConfigurationError(
                f"vertices must have shape (V, 2) with V >= 3, got {tuple(vertices.shape)}")
        if not bool(torch.isfinite(vertices).all()):
            raise ConfigurationError("vertices must be finite numbers")
        following = vertices.roll(-1, 0)
        signed_area = 0.5 * float((vertices[:, 0] * following[:, 1] - following[:, 0] * vertices[:, 1]).sum())
        if signed_area == 0.0:
            raise ConfigurationError("vertices: the polygon has zero area")
        self.vertices = vertices if signed_area > 0 else vertices.flip(0)  # counter-clockwise
        self.area = abs(signed_area)
        self._check_simple()

    def __repr__(self) -> str:
        return f"Polygon({self.vertices.tolist()})"

    def _edges(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start = self.vertices.to(like)
        return start, start.roll(-1, 0) - start

    def _check_simple(self) -> None:
        start, edge = self._edges(self.vertices)
        count = len(start)

        def orientation(origin, direction, point):  # (V, V) sign of the cross product
            offset = point[None, :, :] - origin[:, None, :]
            return torch.sign(direction[:, None, 0] * offset[..., 1] - direction[:, None, 1] * offset[..., 0])

        end = start + edge
        # edges i and j cross properly iff each one's end points lie on opposite sides of the other
        crosses = (orientation(start, edge, start) * orientation(start, edge, end) < 0)
        crosses = crosses & crosses.T
        index = torch.arange(count)
        gap = (index[:, None] - index[None, :]).remainder(count)
        crosses &= (gap > 1) & (gap < count - 1)
        if bool(crosses.any()):
            i, j = crosses.nonzero()[0].tolist()
            raise ConfigurationError(f"vertices: the polygon intersects itself (edge {i} crosses edge {j})")

    @property
    def bounds_float64(self):
        return self.vertices.amin(0), self.vertices.amax(0)

    @property
    def volume(self) -> float:
        return self.area

    @property
    def boundary_measure(self) -> float:
        return float(torch.linalg.vector_norm(self._edges(self.vertices)[1], dim=-1).sum())

    def _nearest_edge(self, points) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Distance to the boundary ``(B,)``, index of the nearest edge ``(B,)``, inside flag ``(B,)``."""
        start, edge = self._edges(points)
        chunk = max(1, 2**22 // len(start))
        distances, nearest, inside = [], [], []
        for block in points.split(chunk):
            offset = block[:, None, :] - start[None]  # (b, V, 2)
            along = ((offset * edge).sum(-1) / (edge * edge).sum(-1)).clamp(0.0, 1.0)
            squared = (offset - along[..., None] * edge).square().sum(-1)
            value, index = squared.min(dim=-1)
            distances.append(value.sqrt())
            nearest.append(index)
            # even-odd rule: count the edges crossed by a ray in the +x direction
            y0, y1 = start[:, 1], start[:, 1] + edge[:, 1]
            straddles = (y0 > block[:, 1:2]) != (y1 > block[:, 1:2])
            slope = edge[:, 0] / torch.where(edge[:, 1] == 0, torch.ones_like(edge[:, 1]), edge[:, 1])
            crossing_x = start[:, 0] + (block[:, 1:2] - y0) * slope
            inside.append((straddles & (block[:, 0:1] < crossing_x)).sum(-1) % 2 == 1)
        return torch.cat(distances), torch.cat(nearest), torch.cat(inside)

    def _margin(self, points):
        distance, _, inside = self._nearest_edge(points)
        return torch.where(inside, distance, -distance)

    def _edge_normals(self, like) -> torch.Tensor:
        """``(V, 2)`` outward unit edge normals (counter-clockwise polygon: edges rotated by -90 degrees)."""
        _, edge = self._edges(like)
        normal = torch.stack([edge[:, 1], -edge[:, 0]], dim=-1)
        return normal / torch.linalg.vector_norm(normal, dim=-1, keepdim=True)

    def _normal(self, points):
        return self._edge_normals(points)[self._nearest_edge(points)[1]]

    _boundary_param_dim = 1

    def _boundary_from_unit(self, unit):
        start, edge = self._edges(unit)
        index, local = split_by_measure(unit[:, 0], torch.linalg.vector_norm(edge, dim=-1))
        points = start[index] + local[:, None] * edge[index]
        keep = torch.ones(len(unit), dtype=torch.bool, device=unit.device)
        return points, self._edge_normals(unit)[index], keep
