"""mindelec.cad, voxels, point_clouds and devices: CAD meshes (trimesh) to voxel grids, signed distances and
labelled point clouds, against analytic volumes and distances and against the FDTD structure of the
equivalent common.geometry shape; the old mindelec.data names warn and still work."""

import math

import numpy as np
import pytest
import torch
import trimesh

from common.geometry import Box, Sphere
from mindelec import cad, devices, fdtd, point_clouds, voxels

RADIUS = 3e-3


@pytest.fixture(scope="module")
def sphere_mesh():
    mesh = trimesh.creation.icosphere(subdivisions=4, radius=RADIUS)
    mesh.metadata["name"] = "sphere"
    return mesh


def box_mesh(lo, hi):
    mesh = trimesh.creation.box(extents=np.subtract(hi, lo))
    mesh.apply_translation(np.add(lo, hi) / 2)
    return mesh


@pytest.mark.slow
def test_sphere_voxels_match_analytic_volume_and_common_geometry(sphere_mesh):
    grid = fdtd.Grid((10e-3, 10e-3, 10e-3), 0.4e-3)
    mesh_shape = cad.MeshGeometry(sphere_mesh)
    analytic = Sphere((0, 0, 0), RADIUS)
    mesh_fill = voxels.fill_fractions(mesh_shape, grid, "Ez")
    analytic_fill = voxels.fill_fractions(analytic, grid, "Ez")
    assert mesh_fill.shape == (25, 25, 25)
    # volumes: the mesh's own (trimesh) to 0.5 %, the analytic sphere (the inscribed icosphere is 0.2 %
    # smaller) to 1 %; measured +0.16 % and -0.06 %
    voxel_volume = float(mesh_fill.sum()) * grid.cell_volume
    assert voxel_volume == pytest.approx(sphere_mesh.volume, rel=5e-3)
    assert voxel_volume == pytest.approx(4 / 3 * math.pi * RADIUS**3, rel=1e-2)
    # the material grids of a Structure from the mesh and from the Sphere differ only in interface cells
    labels = voxels.material_grid([fdtd.Structure(mesh_shape, fdtd.Medium(permittivity=4.0))], grid)
    expected = voxels.material_grid([fdtd.Structure(analytic, fdtd.Medium(permittivity=4.0))], grid)
    differ = labels != expected
    interface = (analytic_fill > 0) & (analytic_fill < 1)
    assert int(expected.sum()) > 1000 and bool(interface[differ].all())
    assert int(differ.sum()) < 0.05 * int(interface.sum())  # measured: 0 of 804 interface cells
    # fully covered / empty cells agree exactly
    assert torch.equal(mesh_fill[~interface] >= 0.5, analytic_fill[~interface] >= 0.5)


@pytest.mark.slow
def test_fdtd_runs_a_structure_from_a_cad_file(tmp_path, sphere_mesh):
    path = tmp_path / "sphere_mm.stl"
    scaled = sphere_mesh.copy()
    scaled.apply_scale(1e3)  # the CAD file is in mm
    scaled.export(path)
    size, spacing = (8e-3, 8e-3, 8e-3), 0.4e-3

    def probe(structure):
        sim = fdtd.Simulation(
            size=size,
            cell_size=spacing,
            boundary=fdtd.PML(thickness=4),
            sources=[fdtd.PointDipole((-2.4e-3, 0, 0), "Ez", fdtd.GaussianPulse(f0=30e9, fwidth=20e9))],
            structures=[structure],
            monitors=[fdtd.FieldProbe("p", (2.0e-3, 0, 0), ("Ez",))],
            dtype=torch.float64,
        )
        return sim.run(steps=80, progress=False)["p"]["Ez"]

    grid = fdtd.Grid(size, spacing)
    from_cad = cad.structure_from_cad(path, fdtd.Medium(permittivity=6.0), grid=grid, scale=1e-3)
    trace = probe(from_cad)
    analytic = probe(fdtd.Structure(Sphere((0, 0, 0), RADIUS), fdtd.Medium(permittivity=6.0)))
    vacuum = probe(fdtd.Structure(Sphere((0, 0, 0), RADIUS), fdtd.Medium(permittivity=1.0)))
    # the sphere changes the field at the probe by O(1); mesh and analytic sphere agree to a few %
    change = (analytic - vacuum).abs().max()
    assert change > 0.3 * vacuum.abs().max()
    assert (trace - analytic).abs().max() < 0.05 * change


def test_box_signed_distance_is_exact():
    lo, hi = np.array([-1.0, -0.5, -0.25]), np.array([1.0, 0.5, 0.75])
    shape = cad.MeshGeometry(box_mesh(lo, hi))
    points = torch.rand(2000, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 4 - 2
    lo_t, hi_t = torch.as_tensor(lo), torch.as_tensor(hi)
    outside = torch.maximum(lo_t - points, points - hi_t)
    expected = torch.where(
        (outside <= 0).all(1), -outside.amax(1), -outside.clamp(min=0).norm(dim=1)
    )  # analytic box SDF, positive inside
    assert torch.allclose(shape.signed_distance(points), expected, atol=1e-12)
    assert shape.volume == pytest.approx(2.0 * 1.0 * 1.0)
    assert torch.equal(shape.contains(points), expected >= 0)
    near = torch.tensor([[1.3, 0.0, 0.0], [1.05, 0.0, 0.0]], dtype=torch.float64)  # 0.3 and 0.05 outside
    assert shape.contains(near, tolerance=0.1).tolist() == [False, True]
    grid = fdtd.Grid((4.0, 4.0, 4.0), 0.25)
    sdf = voxels.signed_distance_grid(shape, grid, "Ez")
    assert sdf.shape == (16, 16, 16) and float(sdf.max()) == pytest.approx(0.5, abs=0.13)
    # float32 points give the same inside/outside
    assert torch.equal(shape.contains(points.float()), expected >= 0)


@pytest.mark.parametrize("suffix", [".stl", ".obj", ".ply"])
def test_load_and_repair(tmp_path, suffix, sphere_mesh):
    path = tmp_path / f"part{suffix}"
    sphere_mesh.export(path)
    mesh = cad.load_mesh(path, scale=2.0)
    assert mesh.is_watertight and mesh.volume == pytest.approx(8 * sphere_mesh.volume, rel=1e-6)
    # an STL-like soup (every face with its own vertices) and flipped normals: repaired
    soup = trimesh.Trimesh(
        sphere_mesh.triangles.reshape(-1, 3),
        np.arange(3 * len(sphere_mesh.faces)).reshape(-1, 3),
        process=False,
    )
    soup.invert()
    assert not soup.is_watertight
    repaired = cad.repair_mesh(soup)
    assert repaired.is_watertight and repaired.volume == pytest.approx(sphere_mesh.volume, rel=1e-9)


def test_bad_meshes(tmp_path, sphere_mesh):
    holed = sphere_mesh.copy()
    holed.update_faces(np.arange(len(holed.faces)) >= 40)  # a hole of 40 faces: too big to fill
    holed.metadata["name"] = "holed.stl"
    with pytest.raises(ValueError, match="'holed.stl' is not watertight"):
        cad.MeshGeometry(cad.repair_mesh(holed))
    with pytest.raises(ValueError, match="not watertight"):
        cad.structure_from_cad(holed, fdtd.Medium(permittivity=2.0))
    grid = fdtd.Grid((10e-3, 10e-3, 10e-3), 1e-3)
    in_mm = sphere_mesh.copy()
    in_mm.apply_scale(1e3)
    with pytest.raises(ValueError, match="extends outside the FDTD grid along \\['x', 'y', 'z'\\]"):
        cad.structure_from_cad(in_mm, fdtd.Medium(permittivity=2.0), grid=grid)
    shifted = sphere_mesh.copy()
    shifted.apply_translation((4e-3, 0, 0))
    with pytest.raises(ValueError, match="along \\['x'\\]"):
        voxels.fill_fractions(cad.MeshGeometry(shifted), grid)
    with pytest.raises(FileNotFoundError, match="missing.stl"):
        cad.load_mesh(tmp_path / "missing.stl")
    (tmp_path / "part.step").write_text("ISO-10303-21;")
    with pytest.raises(ValueError, match="suffix '.step'"):
        cad.load_mesh(tmp_path / "part.step")
    sphere_mesh.export(tmp_path / "whole.stl")  # binary: 84 bytes and 50 per triangle
    data = (tmp_path / "whole.stl").read_bytes()
    (tmp_path / "cut.stl").write_bytes(data[:-30])
    triangles = len(sphere_mesh.faces)
    with pytest.raises(ValueError, match=f"'.*cut.stl' is a binary STL whose header counts {triangles} "
                                         f"triangles .* but the file has {len(data) - 30} bytes"):
        cad.load_mesh(tmp_path / "cut.stl")


def test_point_cloud_density_and_labels(sphere_mesh):
    shape = cad.MeshGeometry(sphere_mesh)
    domain = Box((-5e-3, -5e-3, -5e-3), (5e-3, 5e-3, 5e-3))
    cloud = point_clouds.sample_point_cloud(
        [(shape, 2)], domain, surface_density=5e8, volume_density=2e10, seed=3
    )
    on_surface, labels, points = cloud["on_surface"], cloud["labels"], cloud["points"]
    n_surface, n_volume = int(on_surface.sum()), int((~on_surface).sum())
    assert n_surface == round(5e8 * sphere_mesh.area) and n_volume == 20000
    radius = points.norm(dim=1)
    # surface points lie on the icosphere (between its inscribed and circumscribed radii), normals radial
    assert bool((radius[on_surface] <= RADIUS * (1 + 1e-9)).all()) and bool(
        (radius[on_surface] > 0.995 * RADIUS).all()
    )
    cosine = (cloud["normals"][on_surface] * points[on_surface]).sum(1) / radius[on_surface]
    assert float(cosine.min()) > 0.99 and bool((labels[on_surface] == 2).all())
    # uniform density on the surface: each octant holds 1/8 of the points (binomial, 5 sigma)
    octant = ((points[on_surface] > 0).long() * torch.tensor([1, 2, 4])).sum(1)
    counts = torch.bincount(octant, minlength=8).double()
    assert float((counts - n_surface / 8).abs().max()) < 5 * math.sqrt(n_surface / 8 * 7 / 8)
    # volume points: labelled 2 inside the sphere, 0 outside; the labelled fraction is the volume ratio
    volume_labels, volume_radius = labels[~on_surface], radius[~on_surface]
    assert bool((volume_radius[volume_labels == 2] <= RADIUS).all())
    assert bool((volume_radius[volume_labels == 0] >= 0.995 * RADIUS).all())
    fraction = sphere_mesh.volume / 1e-6
    measured = float((volume_labels == 2).double().mean())
    assert abs(measured - fraction) < 5 * math.sqrt(fraction * (1 - fraction) / n_volume)
    with pytest.raises(ValueError, match="label 0"):
        point_clouds.sample_point_cloud([(shape, 0)], domain, 1e8, 1e9)


def test_patch_antenna_parts_and_waveguide_builder():
    parts = devices.patch_antenna_meshes(patch_length=12e-3, patch_width=16e-3)
    assert all(mesh.is_watertight for mesh in parts.values())
    assert parts["patch"].volume == pytest.approx(12e-3 * 16e-3 * 0.1e-3)
    assert parts["substrate"].volume == pytest.approx(30e-3 * 30e-3 * 1.6e-3)
    shapes = [(cad.MeshGeometry(parts[name]), label) for label, name in enumerate(("substrate", "patch"), 1)]
    cloud = point_clouds.sample_point_cloud(
        shapes, Box((-15e-3, -15e-3, -2e-3), (15e-3, 15e-3, 2e-3)), 2e6, 0, seed=0
    )
    patch_points = cloud["points"][cloud["labels"] == 2]
    assert bool((patch_points[:, 2] >= 0.8e-3 - 1e-9).all()) and bool(
        (patch_points[:, 0].abs() <= 6e-3 + 1e-9).all()
    )
    with pytest.raises(ValueError, match="must fit on the substrate"):
        devices.patch_antenna_meshes(patch_length=40e-3)
    (structure,) = devices.waveguide_obstacle(length=10e-3, width=5e-3, permittivity=3.0)
    grid = fdtd.Grid((40e-3, 20e-3), 1e-3)
    permittivity = voxels.permittivity_grid([structure], grid, "Ez")
    # Ez nodes at integer mm: along x 9 full nodes and 2 halves (faces at +-5 mm on nodes), along y the
    # wall node y = -10 mm, 4 full nodes and a half at -5 mm: 10 x 5.5 cells of the block
    assert float(((permittivity - 1) / 2).sum()) == pytest.approx(10 * 5.5, abs=1e-9)


OLD_DATA_NAMES = {
    "MESH_SUFFIXES": cad,
    "load_mesh": cad,
    "repair_mesh": cad,
    "require_watertight": cad,
    "MeshGeometry": cad,
    "structure_from_cad": cad,
    "node_coordinates": voxels,
    "signed_distance_grid": voxels,
    "fill_fractions": voxels,
    "material_grid": voxels,
    "permittivity_grid": voxels,
    "sample_point_cloud": point_clouds,
    "waveguide_obstacle": devices,
    "patch_antenna": devices,
}


@pytest.mark.parametrize("name", sorted(OLD_DATA_NAMES))
def test_old_mindelec_data_names_warn_and_still_work(name):
    from mindelec import data

    with pytest.warns(
        DeprecationWarning, match=f"mindelec.data.{name} is deprecated.*{OLD_DATA_NAMES[name].__name__}"
    ):
        moved = getattr(data, name)
    assert moved is getattr(OLD_DATA_NAMES[name], name)
    with pytest.raises(AttributeError):
        data.no_such_name  # noqa: B018
