"""CAD assemblies (STEP, IGES, BREP) as named, tessellated bodies and the FDTD structures they make.

:func:`load_step` reads an assembly through gmsh's OpenCASCADE kernel (the ``cad`` extra): each solid
becomes a :class:`Body` with its name (the STEP product / label name; ``<file stem>_<k>`` where the
file has none, as BREP files), tessellated into a closed triangle mesh (trimesh, metres) whose chordal
deviation from the exact surfaces is at most ``tolerance`` (measured, not estimated: the distance of
every triangle's centroid and edge midpoints to the CAD surface, refining until it holds), and its
medium from a materials table (:mod:`mindelec.cad_materials`: names or glob patterns to media,
``"pec"`` or ``"ignore"``). :meth:`Assembly.structures` turns the bodies into
``mindelec.fdtd.Structure`` objects for a given grid (:mod:`mindelec.cad_grid`); ``Simulation.plot``
names them on the picture.

Refused, naming the file and the body (``ConfigurationError`` / ``DataError`` / ``MissingFileError``):
a missing file; a file OpenCASCADE cannot read (damaged, truncated) or that holds no solid; surfaces
or shells that bound no solid; a solid whose tessellation is not a closed 2-manifold (open or
non-manifold edges); a body the materials table does not cover. On a grid, :mod:`mindelec.cad_grid`
says what each body becomes and refuses what would vanish or depend on where the grid falls.

Units: metres. STEP and IGES coordinates are converted from the file's declared unit; BREP files have
none and are read as metres; ``scale`` multiplies after that.

:func:`write_step` writes solids built with gmsh's OCC API as a STEP file with their names (gmsh's own
STEP export numbers the products instead; the names are written into them), for tests and
parametric reference devices such as ``mindelec/examples/phone.step``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import os
import pathlib
import re
import tempfile

import numpy as np

from common.errors import ConfigurationError, DataError, MissingFileError, UnknownNameError

from .cad import MeshGeometry
from .cad_materials import MaterialTable, load_materials

__all__ = ["Body", "Assembly", "load_step", "write_step", "gmsh_session", "CAD_SUFFIXES"]

CAD_SUFFIXES = {
    ".step": "STEP", ".stp": "STEP", ".iges": "IGES", ".igs": "IGES", ".brep": "BREP", ".brp": "BREP"}
_FIRST_CURVATURE_DIVISIONS = 12  # elements per 2 pi of curvature in the first tessellation
_MAX_REFINEMENTS = 7  # doubling that up to 12 * 2**7 = 1536 elements per turn
_model_counter = itertools.count()


def _import_gmsh():
    try:
        import gmsh
    except ImportError:  # pragma: no cover - the cad extra is part of the test set-up
        raise ConfigurationError(
            "mindelec.cad_assembly needs gmsh (its OpenCASCADE kernel reads STEP, IGES and BREP): "
            "pip install 'mindscience-torch[cad]'"
        ) from None
    return gmsh


@contextlib.contextmanager
def gmsh_session():
    """A quiet gmsh session with a fresh model of its own; yields the ``gmsh`` module.

    gmsh is initialised here unless the caller already did (then only the model is added and removed).
    No configuration files are read and no signal handler is installed.
    """
    gmsh = _import_gmsh()
    started = not gmsh.isInitialized()
    if started:
        gmsh.initialize([], readConfigFiles=False, interruptible=False)
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.option.setNumber("General.Verbosity", 1)
        gmsh.model.add(f"mindelec_cad_{next(_model_counter)}")
        try:
            yield gmsh
        finally:
            gmsh.model.remove()
    finally:
        if started:
            gmsh.finalize()


@contextlib.contextmanager
def _quiet_stdout():
    """OpenCASCADE's STEP translators print statistics on the C-level stdout: send them to /dev/null."""
    try:
        stdout = os.dup(1)
    except OSError:  # no file descriptor 1 (some embedded interpreters)
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(stdout, 1)
        os.close(stdout)


@dataclasses.dataclass(frozen=True, eq=False)
class Body:
    """One solid of an assembly.

    Attributes:
        name: unique in the assembly (the CAD label, with ``.2``, ``.3``... for repeated labels).
        label: the CAD label (STEP product name), or the generated name.
        mesh: ``trimesh.Trimesh``, closed and outward wound, in m; ``mesh.vertices`` ``(V, 3)``,
            ``mesh.faces`` ``(T, 3)``.
        medium: the ``mindelec.fdtd`` medium (``Medium``, ``Drude``, ``Lorentz``, ``PEC``), ``"ignore"``,
            or ``None`` when the assembly was loaded without materials.
        deviation: the largest distance (m) found between the mesh (triangle centroids and edge
            midpoints) and the exact CAD surfaces; at most the load's ``tolerance``.
    """

    name: str
    label: str
    mesh: object
    medium: object
    deviation: float

    @property
    def volume(self) -> float:
        """Enclosed volume of the tessellation (m^3)."""
        return float(self.mesh.volume)

    @property
    def bounds(self) -> np.ndarray:
        """``(2, 3)`` lower and upper corners (m)."""
        return np.asarray(self.mesh.bounds, dtype=np.float64)

    @property
    def extents(self) -> np.ndarray:
        """``(3,)`` axis-aligned extents (m)."""
        return self.bounds[1] - self.bounds[0]

    @functools.cached_property
    def wall_thickness(self) -> tuple[np.ndarray, np.ndarray]:
        """``(thickness, area)``, each ``(T,)``: per triangle, the distance (m) from its centroid along the
        inward normal to the next surface of the body, and its area (m^2).

        For an axis-aligned plate of thickness ``t`` the faces of its two large sides read ``t``; a shape
        with no opposite surface along a face's normal (never for a closed mesh) reads ``inf``.
        """
        mesh = self.mesh
        normals = np.asarray(mesh.face_normals, dtype=np.float64)
        centers = np.asarray(mesh.triangles_center, dtype=np.float64)
        offset = 1e-9 * float(self.extents.max())  # start just inside, past the face the ray leaves
        hits, rays, _ = mesh.ray.intersects_location(centers - offset * normals, -normals, multiple_hits=True)
        thickness = np.full(len(mesh.faces), np.inf)
        distance = np.einsum("ij,ij->i", hits - centers[rays], -normals[rays])
        ahead = distance > 2 * offset
        np.minimum.at(thickness, rays[ahead], distance[ahead])
        return thickness, np.asarray(mesh.area_faces, dtype=np.float64)

    @functools.cached_property
    def geometry(self) -> MeshGeometry:
        """The body as a ``common.geometry`` shape (:class:`mindelec.cad.MeshGeometry`, m)."""
        return MeshGeometry(self.mesh, name=self.name)

    def __repr__(self) -> str:
        size = " x ".join(f"{1e3 * e:.4g}" for e in self.extents)
        return f"Body({self.name!r}, {size} mm, {self.medium!r}, faces={len(self.mesh.faces)})"


@dataclasses.dataclass(frozen=True)
class Assembly:
    """The bodies of a CAD file; see :func:`load_step`.

    Attributes:
        path: the file.
        bodies: tuple of :class:`Body`, in the file's order.
        tolerance: the chordal tolerance of the tessellation (m).
        materials: the :class:`~mindelec.cad_materials.MaterialTable` used, or ``None``.
    """

    path: pathlib.Path
    bodies: tuple
    tolerance: float
    materials: MaterialTable | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The bodies' names, in the file's order."""
        return tuple(body.name for body in self.bodies)

    def body(self, name: str) -> Body:
        """The body called ``name``.

        Raises:
            UnknownNameError: naming the file and the bodies it holds.
        """
        for body in self.bodies:
            if body.name == name:
                return body
        raise UnknownNameError(f"{self.path}: no body {name!r}; the bodies are {list(self.names)}")

    def translated(self, offset) -> Assembly:
        """The assembly moved by ``offset`` (m, 3 values): e.g. to put a feed point or a ground plane on the
        grid's nodes, the domain of a ``Simulation`` being centred on the origin.

        Raises:
            ConfigurationError: for an offset that is not 3 finite lengths.
        """
        offset = np.asarray(offset, dtype=np.float64)
        if offset.shape != (3,) or not np.isfinite(offset).all():
            raise ConfigurationError(
                f"{self.path}: translated(offset) needs 3 finite lengths (m), got {offset.tolist()}")
        bodies = tuple(
            dataclasses.replace(body, mesh=body.mesh.copy().apply_translation(offset))
            for body in self.bodies
        )
        return dataclasses.replace(self, bodies=bodies)

    def structures(self, grid, wires: str = "bare", conformal: bool = False) -> list:
        """The bodies as ``mindelec.fdtd.Structure`` objects on ``grid``, thin PEC pins as ``wires``
        (``"bare"`` or ``"thin"``), for a simulation that cuts metal ``conformal``-ly or not: see
        :func:`mindelec.cad_grid.assembly_structures`, which this calls."""
        from .cad_grid import assembly_structures

        return assembly_structures(self, grid, wires=wires, conformal=conformal)

    def __repr__(self) -> str:
        return f"Assembly({str(self.path)!r}, bodies={list(self.names)}, tolerance={self.tolerance:g} m)"


def load_step(path, tolerance: float = 1e-4, materials=None, scale: float = 1.0) -> Assembly:
    """Read a CAD assembly (STEP ``.step``/``.stp``, IGES ``.iges``/``.igs``, BREP ``.brep``/``.brp``).

    Args:
        path: the file.
        tolerance: the largest chordal deviation (m) of the triangle mesh from the exact surfaces; curved
            faces are refined until it holds (planar ones need no refinement).
        materials: a TOML file with a ``[materials]`` table, a dict or a
            :class:`~mindelec.cad_materials.MaterialTable` (body names or glob patterns to media, see
            :mod:`mindelec.cad_materials`); ``None``: bodies without media (for inspection; structures need
            them).
        scale: factor on the coordinates after the unit conversion (BREP files, which carry no unit, are
            read as metres: ``scale=1e-3`` for one drawn in mm).

    Returns:
        an :class:`Assembly`.

    Raises:
        MissingFileError: the file (or the materials file) does not exist.
        DataError: OpenCASCADE cannot read the file, or it holds no solid.
        ConfigurationError: an unknown suffix, a bad tolerance, surfaces bounding no solid, a solid that
            does not tessellate to a closed 2-manifold, or bodies the materials table does not cover
            (all of them named).
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise MissingFileError(f"load_step: CAD file {str(path)!r} does not exist")
    kind = CAD_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ConfigurationError(
            f"load_step: {str(path)!r} has suffix {path.suffix!r}; expected one of {sorted(CAD_SUFFIXES)} "
            "(meshes such as STL go through mindelec.cad.load_mesh)"
        )
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise ConfigurationError(f"load_step: tolerance must be a positive length (m), got {tolerance!r}")
    table = None if materials is None else load_materials(materials)
    with gmsh_session() as gmsh:
        labels = _import(gmsh, path, kind, scale)
        meshes, deviations = _tessellate(gmsh, path, [tag for tag, _ in labels], tolerance)
    names = _unique_names([label for _, label in labels])
    bodies = []
    missing = []
    for (tag, label), name in zip(labels, names):
        medium = None if table is None else table.lookup(name, label)
        if table is not None and medium is None:
            missing.append(name)
        meshes[tag].metadata["name"] = name
        bodies.append(Body(name, label, meshes[tag], medium, deviations[tag]))
    if missing:
        raise ConfigurationError(
            f"{path}: no material for the bodies {missing} in {table.source} (its patterns: "
            f"{list(table.patterns)}); add them, or map them to \"ignore\" to leave them out"
        )
    return Assembly(path, tuple(bodies), float(tolerance), table)


def _import(gmsh, path, kind, scale):
    """Import the file into the current model; ``[(volume tag, label)]`` in the file's order."""
    gmsh.option.setNumber("Geometry.OCCImportLabels", 1)
    gmsh.option.setString("Geometry.OCCTargetUnit", "M" if kind != "BREP" else "")
    try:
        with _quiet_stdout():
            gmsh.model.occ.importShapes(str(path), highestDimOnly=False)
        gmsh.model.occ.synchronize()
    except Exception as error:  # gmsh raises a bare Exception with OpenCASCADE's message
        raise DataError(
            f"{path}: OpenCASCADE could not read this {kind} file ({error}); is it damaged or truncated?"
        ) from None
    volumes = [tag for _, tag in gmsh.model.getEntities(3)]
    if not volumes:
        surfaces = len(gmsh.model.getEntities(2))
        raise DataError(
            f"{path}: the {kind} file holds no solid ({surfaces} surfaces); expected closed solids")
    free = [tag for _, tag in gmsh.model.getEntities(2) if len(gmsh.model.getAdjacencies(2, tag)[0]) == 0]
    if free:
        names = sorted({_label(gmsh, 2, tag) or f"surface {tag}" for tag in free})
        raise ConfigurationError(
            f"{path}: {len(free)} surfaces bound no solid ({names[:8]}): open shells or sheet bodies are not "
            "volumes; close them into solids (a metal sheet: give it its thickness) in the CAD model"
        )
    if scale != 1.0:
        if not (math.isfinite(scale) and scale > 0):
            raise ConfigurationError(f"load_step: scale must be a positive factor, got {scale!r}")
        gmsh.model.occ.dilate(gmsh.model.getEntities(3), 0, 0, 0, scale, scale, scale)
        gmsh.model.occ.synchronize()
    stem = re.sub(r"\W+", "_", path.stem)
    return [(tag, _label(gmsh, 3, tag) or f"{stem}_{index}") for index, tag in enumerate(volumes, start=1)]


def _label(gmsh, dim, tag) -> str:
    """The last part of gmsh's label path (``Shapes/<assembly>/<occurrence>/<product name>``)."""
    name = gmsh.model.getEntityName(dim, tag)
    return name.rstrip("/").rsplit("/", 1)[-1].strip() if name else ""


def _unique_names(labels):
    """The labels made unique: a repeated label gets ``.2``, ``.3``... (a suffix no label already has)."""
    taken, names = set(labels), []
    for label in labels:
        name, count = label, 1
        while name in names or (count > 1 and name in taken):
            count += 1
            name = f"{label}.{count}"
        names.append(name)
    return names


def _surface_deviation(gmsh, surface, triangles):
    """Largest distance (m) from the triangles' centroids and edge midpoints ``(T, 3, 3)`` to the surface.

    Each sample's distance is bounded from above twice: by its distance to the point gmsh projects it
    to, and by its distance to the nearest vertex of its triangle (the vertices lie on the surface);
    the smaller bound is taken, so a projection that fails (gmsh returns a face's seam point for
    samples on a thin cylinder) cannot keep the refinement going forever."""
    count = len(triangles)
    samples = np.concatenate(
        [triangles.mean(1), (triangles + np.roll(triangles, -1, axis=1)).reshape(-1, 3) / 2])
    owners = np.concatenate([np.arange(count), np.repeat(np.arange(count), 3)])
    closest, _ = gmsh.model.getClosestPoint(2, surface, samples.ravel())
    projected = np.linalg.norm(np.asarray(closest).reshape(-1, 3) - samples, axis=1)
    to_vertices = np.linalg.norm(triangles[owners] - samples[:, None, :], axis=2).min(1)
    return float(np.minimum(projected, to_vertices).max())


def _tessellate(gmsh, path, volumes, tolerance):
    """Closed triangle meshes of the volumes, refined until the chordal deviation is below tolerance."""
    lo, hi = np.array(gmsh.model.getBoundingBox(-1, -1)).reshape(2, 3)
    gmsh.option.setNumber("Mesh.MeshSizeMax", float(np.linalg.norm(hi - lo)))
    gmsh.option.setNumber("Mesh.MeshSizeMin", 0.0)
    gmsh.option.setNumber("Mesh.MeshSizeFromPoints", 0)
    divisions = _FIRST_CURVATURE_DIVISIONS
    for _ in range(_MAX_REFINEMENTS + 1):
        gmsh.option.setNumber("Mesh.MeshSizeFromCurvature", divisions)
        gmsh.model.mesh.clear()
        try:
            gmsh.model.mesh.generate(2)
        except Exception as error:
            raise DataError(f"{path}: gmsh could not tessellate the surfaces ({error})") from None
        node_tags, coordinates, _ = gmsh.model.mesh.getNodes()
        nodes = dict(zip(node_tags.tolist(), coordinates.reshape(-1, 3)))
        surfaces = {}
        for _, surface in gmsh.model.getEntities(2):
            types, _, element_nodes = gmsh.model.mesh.getElements(2, surface)
            if list(types) != [2]:
                raise DataError(
                    f"{path}: surface {surface} ({_label(gmsh, 2, surface) or 'unnamed'}) did not "
                    "tessellate into triangles; the CAD face may be degenerate"
                )
            tags = np.asarray(element_nodes[0], dtype=np.int64).reshape(-1, 3)
            triangles = np.array([nodes[t] for t in tags.ravel()]).reshape(-1, 3, 3)
            surfaces[surface] = (tags, _surface_deviation(gmsh, surface, triangles))
        worst = max(deviation for _, deviation in surfaces.values())
        if worst <= tolerance:
            break
        divisions *= 2
    else:
        raise ConfigurationError(
            f"{path}: the tessellation still deviates {worst:.3g} m from the surfaces after "
            f"{_MAX_REFINEMENTS} refinements ({divisions // 2} elements per turn); tolerance {tolerance:g} m "
            "is too fine for it"
        )
    meshes, deviations = {}, {}
    for volume in volumes:
        meshes[volume], deviations[volume] = _volume_mesh(gmsh, path, volume, nodes, surfaces)
    return meshes, deviations


def _volume_mesh(gmsh, path, volume, nodes, surfaces):
    """The closed mesh of one volume from its boundary surfaces' triangles (checked 2-manifold)."""
    import trimesh

    faces = []
    for _, signed in gmsh.model.getBoundary([(3, volume)], combined=False, oriented=True, recursive=False):
        tags = surfaces[abs(signed)][0]
        faces.append(tags if signed > 0 else tags[:, ::-1])
    faces = np.concatenate(faces)
    used, inverse = np.unique(faces, return_inverse=True)
    vertices = np.array([nodes[t] for t in used.tolist()])
    mesh = trimesh.Trimesh(vertices, inverse.reshape(-1, 3), process=False)
    edges = trimesh.grouping.group_rows(mesh.edges_sorted, require_count=None)
    counts = np.bincount([len(group) for group in edges], minlength=3)
    name = _label(gmsh, 3, volume) or f"volume {volume}"
    if len(counts) > 3 or counts[1]:
        raise ConfigurationError(
            f"{path}: body {name!r} is not a closed 2-manifold solid: {int(counts[1])} open edges, "
            f"{int(counts[3:].sum())} edges shared by more than two faces; heal it in the CAD model "
            "(solids that touch along an edge or a point must be separate bodies)"
        )
    trimesh.repair.fix_normals(mesh)  # gmsh orients each face's triangles by the face, not the solid
    mesh = _voids_inward(mesh)
    if not (mesh.is_winding_consistent and mesh.is_watertight):
        raise ConfigurationError(f"{path}: body {name!r} is not orientable (a closed solid has an inside)")
    if mesh.volume <= 0:
        raise ConfigurationError(f"{path}: body {name!r} encloses no volume")
    deviation = max(surfaces[abs(signed)][1] for _, signed in gmsh.model.getBoundary(
        [(3, volume)], combined=False, oriented=True, recursive=False))
    return mesh, deviation


def _voids_inward(mesh):
    """The mesh with each void's shell facing into the void: ``fix_normals`` turns every closed shell
    outward on its own, which counts a hollow solid's void as volume (a shell inside an odd number of
    the others bounds a void)."""
    import trimesh

    shells = mesh.split(only_watertight=False)
    if len(shells) < 2:
        return mesh
    for index, shell in enumerate(shells):
        inside = sum(bool(other.contains(shell.vertices[:1])[0]) for other_index, other in enumerate(shells)
                     if other_index != index)
        if inside % 2 == 1:
            shell.invert()
    return trimesh.util.concatenate(shells)


def _step_string(text: str) -> str:
    if not text or not text.isascii() or not text.isprintable():
        raise ConfigurationError(f"write_step: body names must be non-empty printable ASCII, got {text!r}")
    return text.replace("'", "''")


_OCCURRENCE = re.compile(r"NEXT_ASSEMBLY_USAGE_OCCURRENCE\(\s*'[^']*'")
_PRODUCT = re.compile(r"(?<![A-Z_])PRODUCT\(\s*'((?:[^']|'')*)'\s*,\s*'((?:[^']|'')*)'", re.DOTALL)


def write_step(path, named_volumes, model_name: str | None = None) -> pathlib.Path:
    """Write the current gmsh OCC model (inside :func:`gmsh_session`) as STEP, its solids named.

    Every solid of the model must be named. Coordinates are taken as metres (the file declares mm and
    holds mm).

    Args:
        path: the ``.step`` file to write.
        named_volumes: ``{name: volume tag}`` covering every 3D entity of the model.
        model_name: the assembly's product name (default: the file's stem).

    Returns:
        the path.

    Raises:
        ConfigurationError: for solids of the model left unnamed, names that are not unique printable
            ASCII, or an export whose products do not match the solids.
    """
    gmsh = _import_gmsh()
    path = pathlib.Path(path)
    gmsh.model.occ.synchronize()
    volumes = [tag for _, tag in gmsh.model.getEntities(3)]
    by_tag = {int(tag): name for name, tag in named_volumes.items()}
    if sorted(by_tag) != sorted(volumes):
        raise ConfigurationError(
            f"write_step: the model's solids {volumes} and the named ones {sorted(by_tag)} differ")
    names = [_step_string(by_tag[tag]) for tag in sorted(volumes)]
    gmsh.option.setString("Geometry.OCCTargetUnit", "M")
    gmsh.option.setString("Geometry.OCCSTEPTimeStamp", "2000-01-01T00:00:00")  # reproducible files
    with tempfile.TemporaryDirectory() as folder:
        scratch = pathlib.Path(folder) / "export.step"
        with _quiet_stdout():
            gmsh.write(str(scratch))
        text = scratch.read_text(encoding="ascii")
    products = _PRODUCT.findall(text)
    if len(products) == len(names) + 1 and len(names) > 1:
        names = [_step_string(model_name or path.stem)] + names
    if len(products) != len(names):
        raise ConfigurationError(
            f"write_step: gmsh wrote {len(products)} products for {len(volumes)} solids; cannot name them")
    replacements = iter(names)
    text = _PRODUCT.sub(lambda match: (lambda name: f"PRODUCT('{name}','{name}'")(next(replacements)), text)
    # OpenCASCADE numbers the assembly's occurrences by a counter of the whole process: renumber them
    # from 1, so that the same model always gives the same file
    occurrences = itertools.count(1)
    text = _OCCURRENCE.sub(lambda match: f"NEXT_ASSEMBLY_USAGE_OCCURRENCE('{next(occurrences)}'", text)
    path.write_text(text, encoding="ascii")
    return path
