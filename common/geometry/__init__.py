"""Geometry: primitives, CSG, point sampling and grid rasterisation.

Shapes (all coordinates in one length unit of the caller's choice, e.g. metres):

- :class:`Interval` ``(a, b)``, :class:`Rectangle` ``((x0, y0), (x1, y1))``, :class:`Box`
  ``(lo, hi)``, :class:`Disk` ``(center, radius)``, :class:`Sphere` ``(center, radius)``,
  :class:`Cylinder` ``(center, radius, height, axis=2)``, :class:`Polygon` ``(vertices)``;
- :class:`TimeDomain` ``(t0, t1)`` for space x time products ``space * TimeDomain(t0, t1)``
  (points ``(B, d + 1)``, time last);
- CSG: ``a | b`` (union), ``a & b`` (intersection), ``a - b`` (difference).

Every shape has ``dim``, ``bounds`` (``(lo, hi)``), ``contains(points (B, d)) -> (B,) bool``,
``sample_interior(n, sampler="uniform"|"sobol"|"lhs", seed=None, dtype=None, device=None)
-> (n, d)``, ``sample_boundary(n, ...) -> (points (n, d), outward unit normals (n, d))``,
``boundary_normal(points)``, and ``volume``/``boundary_measure`` where they have a closed
form. :func:`rasterize` gives the covered fraction of every cell of a grid.

Example:
    >>> from common import geometry as geo
    >>> plate = geo.Rectangle((0, 0), (2, 1)) - geo.Disk((1, 0.5), 0.25)
    >>> points = plate.sample_interior(1000, sampler="sobol", seed=0)
    >>> boundary, normals = plate.sample_boundary(200, seed=0)
    >>> bool(plate.contains(points).all())
    True
"""

from .base import Geometry
from .csg import Difference, Intersection, SpaceTime, Union
from .raster import rasterize
from .samplers import SAMPLERS, UnitSampler
from .shapes import Box, Cylinder, Disk, Interval, Polygon, Rectangle, Sphere, TimeDomain

__all__ = [
    "Geometry", "Interval", "Rectangle", "Box", "Disk", "Sphere", "Cylinder", "Polygon", "TimeDomain",
    "Union", "Intersection", "Difference", "SpaceTime", "rasterize", "UnitSampler", "SAMPLERS",
]
