"""2.5D FDTD structures from GDSII layouts (``gdstk``, the ``cad`` extra).

A planar device (a photonic chip, a printed antenna, a microstrip circuit) is drawn as polygons on
GDS layers; each layer becomes a slab of one medium between two heights. :func:`structures_from_gds`
reads a GDS file (or takes a ``gdstk.Library``), flattens a cell (references and repetitions applied,
paths turned into polygons) and returns :class:`mindelec.fdtd.Structure` objects:

* 3D: each polygon of a layer ``(layer, datatype)`` mapped to ``(z_min, z_max, medium)`` becomes a
  :class:`Prism` (the polygon extruded from ``z_min`` to ``z_max``, m);
* 2D: a layer mapped to a medium alone becomes the polygon itself (the x-y plane).

Layers are laid down in the order of the map (later layers override earlier ones where they overlap,
as :class:`~mindelec.fdtd.Structure` does); layers of the file that are not in the map are skipped,
and a mapped layer with no polygon is refused (a misspelt layer number would otherwise vanish).
Coordinates are converted to metres with the file's user unit (``library.unit``, e.g. 1e-6 for um).

Example::

    structures = structures_from_gds("ring.gds", {(1, 0): (-110e-9, 110e-9, Medium(3.48**2))})
    sim = fdtd.Simulation(size=(6e-6, 6e-6, 2e-6), cell_size=40e-9, structures=structures, ...)
"""

from __future__ import annotations

import pathlib

import torch

from common.errors import ArgumentTypeError, ConfigurationError, MissingFileError
from common.geometry import Geometry, Polygon
from common.geometry.base import unit_axis_normal

__all__ = ["Prism", "structures_from_gds"]


class Prism(Geometry):
    """A 2D :class:`common.geometry.Polygon` extruded along z between ``z_min`` and ``z_max``.

    Args:
        polygon: the cross-section (its vertices in the length unit of the heights).
        z_min, z_max: the bottom and top heights (``z_max > z_min``).

    Membership, signed distance (exact inside, a lower bound outside, as for ``Box``) and the normal of the
    nearest face, which is what the FDTD's rasterisation and subpixel smoothing use. Sampling is not
    provided.
    """

    dim = 3

    def __init__(self, polygon: Polygon, z_min: float, z_max: float):
        if not isinstance(polygon, Polygon):
            raise ArgumentTypeError(
                f"Prism: polygon must be a common.geometry.Polygon, got {type(polygon).__name__}")
        self.polygon, self.z_min, self.z_max = polygon, float(z_min), float(z_max)
        if not self.z_max > self.z_min:
            raise ConfigurationError(f"Prism: z_max must exceed z_min, got z_min={z_min}, z_max={z_max}")

    def __repr__(self) -> str:
        return f"Prism({self.polygon!r}, z_min={self.z_min:g}, z_max={self.z_max:g})"

    @property
    def bounds_float64(self):
        """Bounding box ``(lo, hi)``: ``(3,)`` float64 tensors, the polygon's box and the two heights."""
        low, high = self.polygon.bounds_float64
        z = torch.tensor([self.z_min, self.z_max], dtype=torch.float64)
        return torch.cat([low, z[:1]]), torch.cat([high, z[1:]])

    @property
    def volume(self) -> float:
        """The polygon's area times the height (length unit cubed)."""
        return self.polygon.area * (self.z_max - self.z_min)

    def _distances(self, points):
        """``(in-plane margin, bottom margin, top margin)`` of ``(B, 3)`` points (positive inside)."""
        return self.polygon._margin(points[:, :2]), points[:, 2] - self.z_min, self.z_max - points[:, 2]

    def _margin(self, points):
        plane, bottom, top = self._distances(points)
        return torch.minimum(plane, torch.minimum(bottom, top))

    def _normal(self, points):
        plane, bottom, top = self._distances(points)
        nearest = torch.stack([plane.abs(), bottom.abs(), top.abs()], dim=1).argmin(dim=1)
        normals = torch.cat([self.polygon._normal(points[:, :2]), points.new_zeros(len(points), 1)], dim=1)
        caps = unit_axis_normal(torch.full_like(nearest, 2), torch.where(nearest == 1, -1.0, 1.0), 3, points)
        return torch.where((nearest == 0)[:, None], normals, caps)


def _library(source):
    import gdstk

    if isinstance(source, gdstk.Library):
        return source
    path = pathlib.Path(source)
    if not path.is_file():
        raise MissingFileError(f"structures_from_gds: no GDS file at {path}")
    return gdstk.read_gds(str(path))


def _cell(library, name):
    cells = {cell.name: cell for cell in library.cells}
    if name is not None:
        if name not in cells:
            raise ConfigurationError(
                f"structures_from_gds: no cell {name!r}; the library has {sorted(cells)}"
            )
        return cells[name]
    top = library.top_level()
    if len(top) != 1:
        raise ConfigurationError(
            f"structures_from_gds: the library has {len(top)} top-level cells "
            f"({sorted(c.name for c in top)}); pass cell= to choose one"
        )
    return top[0]


def _layer_key(key):
    """``(layer, datatype)`` from a map key: an int layer (datatype 0) or a pair."""
    if isinstance(key, int):
        return key, 0
    if isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, int) for k in key):
        return key
    raise ConfigurationError(
        f"structures_from_gds: a layer key must be an int or (layer, datatype), got {key!r}"
    )


def _structure_of(points, scale, spec, key):
    from mindelec import fdtd

    polygon = Polygon(torch.as_tensor(points, dtype=torch.float64) * scale)
    if isinstance(spec, (fdtd.Medium, fdtd.PEC)):
        return fdtd.Structure(polygon, spec)
    try:
        z_min, z_max, medium = spec
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"structures_from_gds: layer {key} must map to a medium (2D) or (z_min, z_max, medium) (3D, m), "
            f"got {spec!r}"
        ) from None
    return fdtd.Structure(Prism(polygon, z_min, z_max), medium)


def structures_from_gds(source, layers, cell=None):
    """FDTD structures from the polygons of a GDS layout; see the module docstring.

    Args:
        source: a GDS file path or a ``gdstk.Library``.
        layers: ``{layer or (layer, datatype): medium}`` (2D) or ``{...: (z_min, z_max, medium)}`` (3D,
            heights in m); the order is the stacking order.
        cell: the cell's name; default the library's single top-level cell.

    Returns:
        a list of :class:`mindelec.fdtd.Structure`, one per polygon, in the layer map's order.

    Raises:
        ImportError: without ``gdstk`` (``pip install mindscience-torch[cad]``).
        FileNotFoundError: for a missing file.
        ConfigurationError: for an unknown cell, several top-level cells and no ``cell``, a bad layer key or
            value, or a mapped layer without polygons (naming it).
    """
    library = _library(source)
    chosen = _cell(library, cell)
    by_layer = {}
    for polygon in chosen.get_polygons():
        by_layer.setdefault((polygon.layer, polygon.datatype), []).append(polygon.points)
    structures = []
    for key, spec in layers.items():
        layer = _layer_key(key)
        if layer not in by_layer:
            raise ConfigurationError(
                f"structures_from_gds: layer {layer} has no polygon in cell {chosen.name!r}; "
                f"its layers are {sorted(by_layer)}"
            )
        structures += [_structure_of(points, library.unit, spec, layer) for points in by_layer[layer]]
    return structures
