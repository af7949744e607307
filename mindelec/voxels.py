"""FDTD-aligned voxel tensors of shapes: signed distances, fill fractions, materials, permittivity.

:func:`node_coordinates` gives a Yee component's node coordinates; :func:`signed_distance_grid`,
:func:`fill_fractions`, :func:`material_grid` and :func:`permittivity_grid` give ``(nx[, ny[, nz]])``
tensors aligned with them, with the FDTD's own sub-cell averaging, for any ``common.geometry`` shape
(analytic, or a CAD :class:`mindelec.cad.MeshGeometry`). Lengths in metres.
"""

from __future__ import annotations

import torch

from common.errors import ArgumentTypeError
from common.geometry import Geometry, rasterize
from mindelec.cad import MeshGeometry, require_in_grid

__all__ = ["node_coordinates", "signed_distance_grid", "fill_fractions", "material_grid", "permittivity_grid"]


def node_coordinates(
    grid, component: str | None = "Ez", dtype=torch.float64, device=None
) -> list[torch.Tensor]:
    """Coordinates (m) of ``component``'s Yee nodes: one 1D tensor per axis of the simulation.

    Args:
        grid: a ``mindelec.fdtd.Grid`` (or anything with ``ndim`` and ``coordinates``; a ``Simulation``'s
            ``.grid``).
        component: e.g. ``"Ez"``; ``None`` for the integer nodes (cell corners).
    """
    grid = getattr(grid, "grid", grid)
    if component is None:
        return [
            (-grid.size[a] / 2 + torch.arange(grid.shape[a], dtype=dtype) * grid.spacing[a]).to(device)
            for a in range(grid.ndim)
        ]
    return [grid.coordinates(component, a, dtype, device) for a in range(grid.ndim)]


def signed_distance_grid(
    geometry: Geometry, grid, component: str | None = "Ez", dtype=torch.float64, device=None
) -> torch.Tensor:
    """Signed distance (m, positive inside) on the nodes of ``component`` of an FDTD grid.

    Exact for a :class:`MeshGeometry`; for other shapes their margin (exact inside the primitives,
    a lower bound of the distance elsewhere, see ``common.geometry.base``).

    Returns:
        tensor of shape ``(nx[, ny[, nz]])``.
    """
    centers = node_coordinates(grid, component, dtype, device)
    points = torch.stack(torch.meshgrid(*centers, indexing="ij"), -1).reshape(-1, len(centers))
    if isinstance(geometry, MeshGeometry):
        values = geometry.signed_distance(points)
    else:
        values = geometry._margin(geometry.check_points(points))
    return values.reshape(tuple(len(c) for c in centers))


def fill_fractions(
    geometry: Geometry,
    grid,
    component: str | None = "Ez",
    supersample: int = 4,
    dtype=torch.float64,
    device=None,
) -> torch.Tensor:
    """Covered fraction of each Yee cell of ``component``, as the FDTD's sub-cell averaging computes it.

    Args:
        geometry: a shape of the grid's dimension (e.g. a :class:`MeshGeometry`).
        grid: ``mindelec.fdtd.Grid`` or ``Simulation``.
        component: whose nodes (``"Ez"``...), ``None`` for the integer nodes.
        supersample: sub-points per cell and axis in cells cut by the surface (1: centre-point mask).

    Returns:
        ``(nx[, ny[, nz]])`` tensor in ``[0, 1]``.

    Raises:
        ValueError: if a :class:`MeshGeometry` extends outside the grid's domain (CAD in the wrong units
            or position; analytic shapes may reach past the domain, e.g. into a PEC wall).
    """
    if isinstance(geometry, MeshGeometry):
        require_in_grid(geometry, grid, "fill_fractions")
    grid = getattr(grid, "grid", grid)
    centers = node_coordinates(grid, component, dtype, device)
    return rasterize(geometry, centers, list(grid.spacing[: grid.ndim]), supersample=supersample)


def _structure_list(structures):
    from mindelec import fdtd

    structures = list(structures)
    for index, structure in enumerate(structures):
        if not isinstance(structure, fdtd.Structure):
            raise ArgumentTypeError(
                f"structures[{index}] must be a mindelec.fdtd.Structure, got {type(structure).__name__}"
            )
    return structures


def material_grid(structures, grid, component: str | None = "Ez", supersample: int = 4) -> torch.Tensor:
    """Voxel material labels aligned with an FDTD grid: 0 background, ``k`` for ``structures[k - 1]``.

    A node takes the label of the last structure covering at least half its cell (later structures
    override earlier ones, as in the FDTD).

    Returns:
        ``(nx[, ny[, nz]])`` int64 tensor.
    """
    structures = _structure_list(structures)
    grid = getattr(grid, "grid", grid)
    labels = torch.zeros(grid.shape[: grid.ndim], dtype=torch.int64)
    for index, structure in enumerate(structures, start=1):
        labels[fill_fractions(structure.geometry, grid, component, supersample) >= 0.5] = index
    return labels


def permittivity_grid(
    structures, grid, component: str | None = "Ez", background: float = 1.0, supersample: int = 4
) -> torch.Tensor:
    """Relative permittivity on ``component``'s nodes, mixed by fill fraction as the FDTD does.

    Args:
        structures: ``mindelec.fdtd.Structure`` objects with non-dispersive ``Medium`` fillings.
        background: permittivity of the default medium.

    Returns:
        ``(nx[, ny[, nz]])`` float64 tensor.
    """
    from mindelec import fdtd

    grid = getattr(grid, "grid", grid)
    permittivity = torch.full(grid.shape[: grid.ndim], float(background), dtype=torch.float64)
    for index, structure in enumerate(_structure_list(structures)):
        if not isinstance(structure.medium, fdtd.Medium):
            raise ArgumentTypeError(
                f"permittivity_grid: structures[{index}] is filled with {structure.medium!r}; "
                "only Medium fillings have a permittivity"
            )
        fill = fill_fractions(structure.geometry, grid, component, supersample)
        permittivity = permittivity * (1 - fill) + fill * float(structure.medium.permittivity)
    return permittivity
