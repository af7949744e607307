"""CAD meshes as shapes: loading and repairing meshes, :class:`MeshGeometry`, and FDTD structures from them.

* :func:`load_mesh` reads STL, OBJ, PLY (anything trimesh reads) and :func:`repair_mesh` merges
  duplicate vertices, drops degenerate and duplicate faces, fills small holes and makes the normals
  consistent and outward; :func:`require_watertight` refuses a mesh that does not bound a volume.
* :class:`MeshGeometry` wraps a watertight triangle mesh as a ``common.geometry`` shape
  (``contains``, ``sample_interior``, ``sample_boundary``, ``volume``), so it goes wherever a shape
  goes, in particular into ``mindelec.fdtd.Structure``: the FDTD rasterises it with the same sub-cell
  averaging as the analytic shapes. :func:`structure_from_cad` does file -> checked ``Structure``
  (:func:`require_in_grid`: inside the FDTD domain).
  Inside/outside comes from ray-crossing parity (triangles binned along the ray), distances from
  exact point-triangle distances, both in torch (chunked, any device, float32/float64).

Grids of these shapes are in :mod:`mindelec.voxels`, labelled point clouds in :mod:`mindelec.point_clouds`,
demo devices in :mod:`mindelec.devices`.

Units: whatever length unit the mesh is in times ``scale`` must give metres for the FDTD
(``load_mesh(path, scale=1e-3)`` for a CAD file in mm). Signed distances are positive inside
(the convention of trimesh and of ``common.geometry`` margins).
"""

from __future__ import annotations

import pathlib

import numpy as np
import torch

from common.errors import ArgumentTypeError, ConfigurationError, DataError, MissingFileError
from common.geometry import Geometry
from common.geometry.base import split_by_measure

__all__ = [
    "load_mesh",
    "repair_mesh",
    "require_watertight",
    "require_in_grid",
    "MeshGeometry",
    "structure_from_cad",
]

MESH_SUFFIXES = (".stl", ".obj", ".ply", ".off", ".glb", ".gltf")
_PAIR_BUDGET = 2**20  # point-triangle pairs evaluated at once (bounds the memory to ~100 MB)


def load_mesh(path, repair: bool = True, scale: float = 1.0):
    """Read a triangle mesh from a CAD export (STL, OBJ, PLY, OFF, glTF) with trimesh.

    Args:
        path: the file.
        repair: run :func:`repair_mesh` on it.
        scale: factor applied to the coordinates (e.g. ``1e-3`` for a file in mm, to get metres).

    Returns:
        ``trimesh.Trimesh`` (a multi-body file is concatenated into one mesh).

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: for an unsupported suffix or a file without triangles.
    """
    import trimesh

    path = pathlib.Path(path)
    if not path.is_file():
        raise MissingFileError(f"load_mesh: mesh file {str(path)!r} does not exist")
    if path.suffix.lower() not in MESH_SUFFIXES:
        raise ConfigurationError(
            f"load_mesh: {str(path)!r} has suffix {path.suffix!r}; expected one of {MESH_SUFFIXES}"
        )
    _check_binary_stl(path)
    loaded = trimesh.load(str(path), force="mesh", process=True)
    if not isinstance(loaded, trimesh.Trimesh) or len(loaded.faces) == 0:
        raise ConfigurationError(f"load_mesh: {str(path)!r} holds no triangles")
    mesh = loaded.copy()
    if scale != 1.0:
        mesh.apply_scale(float(scale))
    mesh.metadata["name"] = path.name
    return repair_mesh(mesh) if repair else mesh


def _check_binary_stl(path: pathlib.Path) -> None:
    """Refuse a binary STL whose size disagrees with the triangle count in its header (a truncated or
    damaged file, which trimesh would read as empty)."""
    if path.suffix.lower() != ".stl":
        return
    with open(path, "rb") as file:
        head = file.read(84)
    count = int.from_bytes(head[80:84], "little") if len(head) == 84 else -1
    size = path.stat().st_size
    if size == 84 + 50 * count or head.lstrip()[:5].lower() == b"solid":  # binary as counted, or ASCII
        return
    if len(head) == 84:
        raise DataError(f"load_mesh: {str(path)!r} is a binary STL whose header counts {count} triangles "
                        f"({84 + 50 * count} bytes) but the file has {size} bytes: truncated or damaged")


def repair_mesh(mesh):
    """A repaired copy: merged vertices, no degenerate/duplicate faces, holes filled, outward normals.

    Hole filling closes small holes (trimesh fills holes bounded by three or four edges); larger
    openings stay and :func:`require_watertight` reports them.

    Args:
        mesh: ``trimesh.Trimesh``.

    Returns:
        ``trimesh.Trimesh`` (the input is not changed).
    """
    import trimesh

    if not isinstance(mesh, trimesh.Trimesh):
        raise ArgumentTypeError(f"repair_mesh: expected a trimesh.Trimesh, got {type(mesh).__name__}")
    mesh = mesh.copy()
    mesh.merge_vertices()
    mesh.update_faces(mesh.nondegenerate_faces())
    mesh.update_faces(mesh.unique_faces())
    mesh.remove_unreferenced_vertices()
    trimesh.repair.fill_holes(mesh)
    trimesh.repair.fix_normals(mesh)  # consistent winding, then outward (positive volume)
    return mesh


def _mesh_name(mesh) -> str:
    return str(mesh.metadata.get("name", "mesh"))


def require_watertight(mesh, what: str = "mesh") -> None:
    """Raise ``ValueError`` unless ``mesh`` is closed and consistently wound (it bounds a volume).

    Args:
        mesh: ``trimesh.Trimesh``.
        what: how the error names the mesh (e.g. its file).
    """
    import trimesh

    if not isinstance(mesh, trimesh.Trimesh):
        raise ArgumentTypeError(f"{what}: expected a trimesh.Trimesh, got {type(mesh).__name__}")
    if not mesh.is_watertight:
        edges = trimesh.grouping.group_rows(mesh.edges_sorted, require_count=1)
        raise ConfigurationError(
            f"{what} {_mesh_name(mesh)!r} is not watertight ({len(edges)} boundary edges): a volume (voxels, "
            "signed distances, interior points, an FDTD structure) needs a closed surface; repair_mesh fills "
            "small holes, larger ones must be closed in the CAD model"
        )
    if not mesh.is_winding_consistent:
        raise ConfigurationError(
            f"{what} {_mesh_name(mesh)!r} has inconsistent face winding; run repair_mesh on it")


def _segment_distance_squared(offset, edge, edge_length_squared):
    """Squared distance from points to segments; offset (P, T, 3) from the segment start, edge (T, 3)."""
    t = ((offset * edge).sum(-1) / edge_length_squared.clamp(min=1e-300)).clamp(0.0, 1.0)
    return (offset - t[..., None] * edge).square().sum(-1)


def _cross_2d(u, v):
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


# a fixed generic rotation: rays along its third axis meet no edge or vertex of axis-aligned meshes
_RAY_FRAME = torch.linalg.qr(
    torch.tensor([[0.8, 0.3, 0.52], [-0.27, 0.91, 0.31], [-0.5, -0.2, 0.84]], dtype=torch.float64)
)[0]


class MeshGeometry(Geometry):
    """A closed triangle mesh as a 3D ``common.geometry`` shape.

    Args:
        mesh: a watertight ``trimesh.Trimesh`` (coordinates in the caller's length unit, metres for
            the FDTD).
        name: how errors and ``repr`` name it (default: the mesh's file name).
        bins: the ray-casting acceleration grid has ``bins x bins`` columns.

    Attributes:
        triangles: ``(T, 3, 3)`` float64 vertex coordinates per face (outward winding).

    Inside/outside: the parity of the crossings of a ray from the point (along a fixed generic
    direction), with the triangles binned into columns along the ray, so a query costs a few
    triangles per point. Exact distances (:meth:`signed_distance`) test every triangle. The margin
    that rasterisation uses (see ``common.geometry.base``) is the cheaper lower bound
    ``max(0, distance to the nearest vertex - longest edge)``, with the sign of inside/outside:
    cells farther than that from the surface are classified without sub-sampling.

    Raises:
        ValueError: if the mesh is not watertight (see :func:`require_watertight`).
    """

    dim = 3

    def __init__(self, mesh, name: str | None = None, bins: int = 32):
        self.name = name or _mesh_name(mesh)
        require_watertight(mesh, f"MeshGeometry({self.name!r})")
        self.mesh = mesh
        self.triangles = torch.tensor(np.array(mesh.triangles), dtype=torch.float64)
        self._vertices = torch.tensor(np.array(mesh.vertices), dtype=torch.float64)
        self._longest_edge = float(np.array(mesh.edges_unique_length).max())
        self._areas = torch.tensor(np.array(mesh.area_faces), dtype=torch.float64)
        self._face_normals = torch.tensor(np.array(mesh.face_normals), dtype=torch.float64)
        self._volume = float(abs(mesh.volume))
        lo, hi = np.asarray(mesh.bounds, dtype=np.float64)
        self._lo, self._hi = torch.tensor(lo), torch.tensor(hi)
        self._build_columns(int(bins))

    def __repr__(self) -> str:
        return f"MeshGeometry({self.name!r}, faces={len(self.triangles)})"

    @property
    def bounds_float64(self):
        return self._lo.clone(), self._hi.clone()

    @property
    def volume(self) -> float:
        """Enclosed volume (length unit cubed)."""
        return self._volume

    @property
    def boundary_measure(self) -> float:
        """Surface area (length unit squared)."""
        return float(self._areas.sum())

    # ------------------------------------------------------------------ inside/outside by ray parity
    def _build_columns(self, bins: int) -> None:
        """Bin the triangles, in the ray frame, into ``bins x bins`` columns along the ray."""
        rotated = self.triangles @ _RAY_FRAME  # (T, 3, 3), third coordinate along the ray
        self._rotated = rotated
        flat = rotated[..., :2]
        self._column_lo = flat.reshape(-1, 2).amin(0)
        extent = (flat.reshape(-1, 2).amax(0) - self._column_lo).clamp(min=1e-300)
        self._column_size, self._bins = extent / bins, bins
        first = self._column_index(flat.amin(1))
        last = self._column_index(flat.amax(1))
        span = last - first + 1
        counts = span[:, 0] * span[:, 1]
        face = torch.repeat_interleave(torch.arange(len(rotated)), counts)
        local = torch.arange(int(counts.sum())) - torch.repeat_interleave(
            torch.cumsum(counts, 0) - counts, counts
        )
        column = (first[face, 0] + local // span[face, 1]) * bins + first[face, 1] + local % span[face, 1]
        order = torch.argsort(column, stable=True)
        self._column_faces = face[order]
        self._column_counts = torch.bincount(column, minlength=bins * bins)
        self._column_starts = torch.cumsum(self._column_counts, 0) - self._column_counts

    def _column_index(self, flat):
        index = torch.floor((flat - self._column_lo.to(flat)) / self._column_size.to(flat)).long()
        return index.clamp(0, self._bins - 1)

    def _parity_inside(self, points):
        """``(B,)`` bool: an odd number of crossings of the ray from each point."""
        device = points.device
        rotated_points = points @ _RAY_FRAME.to(points)
        flat = rotated_points[:, :2]
        lo = self._column_lo.to(points)
        hi = lo + self._column_size.to(points) * self._bins
        in_shadow = ((flat >= lo) & (flat <= hi)).all(-1)
        crossings = torch.zeros(len(points), dtype=torch.long, device=device)
        candidates = in_shadow.nonzero().flatten()
        if len(candidates) == 0:
            return crossings.bool()
        index = self._column_index(flat[candidates])
        column = index[:, 0] * self._bins + index[:, 1]
        counts = self._column_counts.to(device)[column]
        starts = self._column_starts.to(device)[column]
        faces_in_columns = self._column_faces.to(device)
        triangles = self._rotated.to(dtype=points.dtype, device=device)
        mean_count = max(1, int(counts.float().mean().ceil()))
        for block in torch.arange(len(candidates), device=device).split(max(1, _PAIR_BUDGET // mean_count)):
            block_counts = counts[block]
            point = torch.repeat_interleave(block, block_counts)
            local = torch.arange(len(point), device=device) - torch.repeat_interleave(
                torch.cumsum(block_counts, 0) - block_counts, block_counts
            )
            face = faces_in_columns[starts[point] + local]
            a, b, c = triangles[face, 0], triangles[face, 1], triangles[face, 2]
            q = rotated_points[candidates[point]]
            edge_ab, edge_bc, edge_ca = (
                _cross_2d(v - u, q[:, :2] - u[:, :2]) for u, v in ((a, b), (b, c), (c, a))
            )
            area = edge_ab + edge_bc + edge_ca
            hit = ((edge_ab > 0) & (edge_bc > 0) & (edge_ca > 0)) | (
                (edge_ab < 0) & (edge_bc < 0) & (edge_ca < 0)
            )
            safe_area = torch.where(area == 0, torch.ones_like(area), area)
            height = (edge_bc * a[:, 2] + edge_ca * b[:, 2] + edge_ab * c[:, 2]) / safe_area
            hit &= height > q[:, 2]
            crossings.index_add_(0, candidates[point[hit]], torch.ones_like(point[hit]))
        return crossings % 2 == 1

    def _nearest_vertex_distance(self, points):
        vertices = self._vertices.to(points)
        chunk = max(1, _PAIR_BUDGET // len(vertices))
        return torch.cat([torch.cdist(block, vertices).amin(1) for block in points.split(chunk)])

    # ------------------------------------------------------------------ exact distances
    def _nearest_faces(self, points):
        """Exact unsigned distance ``(B,)`` and the nearest face ``(B,)``, testing every triangle."""
        triangles = self.triangles.to(dtype=points.dtype, device=points.device)
        a, b, c = triangles[:, 0], triangles[:, 1], triangles[:, 2]
        normal = torch.linalg.cross(b - a, c - a)
        normal_length_squared = normal.square().sum(-1)
        edges = [(a, b - a), (b, c - b), (c, a - c)]
        edge_lengths = [edge.square().sum(-1) for _, edge in edges]
        distances, nearest = [], []
        for block in points.split(max(1, _PAIR_BUDGET // len(triangles))):
            p = block[:, None, :]
            offsets = [p - start for start, _ in edges]
            inside = torch.ones(len(block), len(triangles), dtype=torch.bool, device=points.device)
            for (_, edge), offset in zip(edges, offsets):
                inside &= (torch.linalg.cross(edge.expand_as(offset), offset) * normal).sum(-1) >= 0
            plane = (offsets[0] * normal).sum(-1).square() / normal_length_squared.clamp(min=1e-300)
            to_edges = torch.stack(
                [
                    _segment_distance_squared(offset, edge, length)
                    for offset, (_, edge), length in zip(offsets, edges, edge_lengths)
                ]
            ).amin(0)
            best, face = torch.where(inside & (normal_length_squared > 0), plane, to_edges).min(dim=1)
            distances.append(best.sqrt())
            nearest.append(face)
        return torch.cat(distances), torch.cat(nearest)

    def signed_distance(self, points: torch.Tensor) -> torch.Tensor:
        """Exact signed distance to the surface, positive inside (tests every triangle: O(B T)).

        Args:
            points: ``(B, 3)`` tensor (length unit of the mesh).

        Returns:
            ``(B,)`` tensor, dtype and device of ``points``.
        """
        points = self.check_points(points)
        distance = self._nearest_faces(points)[0]
        return torch.where(self._parity_inside(points), distance, -distance)

    def contains(self, points: torch.Tensor, tolerance: float | None = None) -> torch.Tensor:
        """Which points lie in the closed mesh.

        Args:
            points: ``(B, 3)`` tensor.
            tolerance: points outside within this exact distance of the surface count as inside; default
                ``None``: ray parity alone (points on the surface itself may go either way).

        Returns:
            ``(B,)`` bool tensor.
        """
        points = self.check_points(points)
        inside = self._parity_inside(points)
        if tolerance is not None:
            outside = (~inside).nonzero().flatten()
            if len(outside):
                inside[outside] = self._nearest_faces(points[outside])[0] <= tolerance
        return inside

    def _margin(self, points):
        bound = (self._nearest_vertex_distance(points) - self._longest_edge).clamp(min=0.0)
        return torch.where(self._parity_inside(points), bound, -bound)

    def _inside(self, points):
        return self._parity_inside(points)

    def _normal(self, points):
        face = self._nearest_faces(points)[1]
        return self._face_normals.to(dtype=points.dtype, device=points.device)[face]

    def _interior_acceptance(self) -> float:
        return min(self._volume / float(torch.prod(self._hi - self._lo)), 1.0)

    _boundary_param_dim = 3

    def _boundary_from_unit(self, unit):
        # face by area, then the square-root map of the unit square onto the triangle (uniform in area)
        face, local = split_by_measure(unit[:, 0], self._areas)
        triangles = self.triangles.to(unit)[face]
        root, v = local.sqrt()[:, None], unit[:, 2:3]
        points = triangles[:, 0] * (1 - root) + triangles[:, 1] * root * (1 - v) + triangles[:, 2] * root * v
        normals = self._face_normals.to(unit)[face]
        return points, normals, torch.ones(len(unit), dtype=torch.bool, device=unit.device)


def require_in_grid(geometry: Geometry, grid, what: str) -> None:
    """Raise ``ValueError`` unless ``geometry`` lies inside the domain of an FDTD grid (m).

    A CAD part outside the domain usually means wrong units (``scale``) or position.

    Args:
        geometry: a shape of the grid's dimension (bounds in m).
        grid: a ``mindelec.fdtd.Grid`` (or a ``Simulation``); its domain is centred on the origin.
        what: how the error names the caller.
    """
    grid = getattr(grid, "grid", grid)
    if geometry.dim != grid.ndim:
        raise ConfigurationError(f"{what}: a {geometry.dim}D shape does not fit a {grid.ndim}D grid")
    lo, hi = geometry.bounds_float64
    half = torch.tensor(grid.size[: grid.ndim], dtype=torch.float64) / 2
    slack = 1e-9 * float(half.max())
    outside = ((lo < -half - slack) | (hi > half + slack)).nonzero().flatten().tolist()
    if outside:
        raise ConfigurationError(
            f"{what} {geometry!r} extends outside the FDTD grid along {['xyz'[a] for a in outside]}: bounds "
            f"{lo.tolist()} .. {hi.tolist()} m, the domain -{half.tolist()} .. {half.tolist()} m; "
            "check the mesh's units (scale) and position"
        )


def structure_from_cad(mesh_or_path, medium, grid=None, scale: float = 1.0, repair: bool = True):
    """A ``mindelec.fdtd.Structure`` straight from a CAD mesh.

    Args:
        mesh_or_path: a file (see :func:`load_mesh`) or a ``trimesh.Trimesh`` (in metres after ``scale``).
        medium: the ``mindelec.fdtd`` medium filling it (``Medium``, ``Drude``, ``Lorentz``, ``PEC``).
        grid: optional ``mindelec.fdtd.Grid`` (or ``Simulation``): the mesh must lie inside its domain.
        scale: coordinate factor (``1e-3`` for a file in mm).
        repair: repair the mesh first (see :func:`repair_mesh`).

    Raises:
        ValueError: for a mesh that is not watertight or that extends outside ``grid``.
    """
    from mindelec import fdtd

    if isinstance(mesh_or_path, (str, pathlib.Path)):
        mesh = load_mesh(mesh_or_path, repair=repair, scale=scale)
    else:
        mesh = repair_mesh(mesh_or_path) if repair else mesh_or_path.copy()
        if scale != 1.0:
            mesh.apply_scale(float(scale))
    geometry = MeshGeometry(mesh)
    if grid is not None:
        require_in_grid(geometry, grid, "structure_from_cad")
    return fdtd.Structure(geometry, medium)
