"""Tests of common.geometry against closed-form membership, areas, volumes and perimeters."""

import math

import pytest
import torch

from common import geometry as geo

DTYPES = [torch.float32, torch.float64]


def random_points(lo, hi, n, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    lo, hi = torch.as_tensor(lo, dtype=dtype), torch.as_tensor(hi, dtype=dtype)
    return lo + (hi - lo) * torch.rand(n, len(lo), generator=generator, dtype=dtype)


def polygon_area_by_triangles(vertices):
    """Shoelace formula, written independently of the implementation."""
    total = 0.0
    for (x0, y0), (x1, y1) in zip(vertices, vertices[1:] + vertices[:1]):
        total += x0 * y1 - x1 * y0
    return abs(total) / 2


# ------------------------------------------------------------------ contains

@pytest.mark.parametrize("dtype", DTYPES)
def test_contains_primitives_match_closed_form_membership(dtype):
    points2 = random_points((-2, -2), (2, 2), 4000, dtype=dtype)
    x, y = points2[:, 0], points2[:, 1]
    assert torch.equal(geo.Rectangle((-1, -0.5), (1.5, 1)).contains(points2),
                       (x >= -1) & (x <= 1.5) & (y >= -0.5) & (y <= 1))
    assert torch.equal(geo.Disk((0.5, -0.25), 1.2).contains(points2),
                       (x - 0.5) ** 2 + (y + 0.25) ** 2 <= 1.2**2)
    # triangle (0,0) (1,0) (0,1) given clockwise: x >= 0, y >= 0, x + y <= 1
    triangle = geo.Polygon([(0, 0), (0, 1), (1, 0)])
    assert torch.equal(triangle.contains(points2), (x >= 0) & (y >= 0) & (x + y <= 1))
    # L-shaped (non-convex) polygon = unit square minus its upper-right quarter
    ell = geo.Polygon([(0, 0), (1, 0), (1, 0.5), (0.5, 0.5), (0.5, 1), (0, 1)])
    inside_square = (x >= 0) & (x <= 1) & (y >= 0) & (y <= 1)
    assert torch.equal(ell.contains(points2), inside_square & ~((x > 0.5) & (y > 0.5)))

    points3 = random_points((-2, -2, -2), (2, 2, 2), 4000, dtype=dtype)
    x, y, z = points3.unbind(1)
    assert torch.equal(geo.Box((-1, -1, 0), (1, 0.5, 1)).contains(points3),
                       (x.abs() <= 1) & (y >= -1) & (y <= 0.5) & (z >= 0) & (z <= 1))
    assert torch.equal(geo.Sphere((0, 0.5, 0), 1.1).contains(points3),
                       x**2 + (y - 0.5) ** 2 + z**2 <= 1.1**2)
    cylinder = geo.Cylinder((0.2, 0, 0), 0.8, 1.5, axis=0)
    assert torch.equal(cylinder.contains(points3), (y**2 + z**2 <= 0.64) & ((x - 0.2).abs() <= 0.75))

    points1 = random_points((-1,), (2,), 1000, dtype=dtype)
    assert torch.equal(geo.Interval(0, 1).contains(points1)[:, None], (points1 >= 0) & (points1 <= 1))


def test_boundary_points_count_as_inside():
    square = geo.Rectangle((0, 0), (1, 1))
    on_boundary = torch.tensor([[0.0, 0.5], [1.0, 1.0], [0.3, 1.0], [1.0, 0.0]])
    assert square.contains(on_boundary).all()
    outward = torch.tensor([[-1e-3, 0.0], [1e-3, 0], [0, 1e-3], [0, -1e-3]])
    assert not square.contains(on_boundary + outward).any()
    assert geo.Interval(0, 1).contains(torch.tensor([[0.0], [1.0]])).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_csg_contains_is_the_boolean_combination(dtype):
    a = geo.Rectangle((0, 0), (2, 1))
    b = geo.Disk((1.8, 0.9), 0.6)
    c = geo.Polygon([(0.2, -0.5), (1.0, 1.5), (1.4, -0.5)])
    points = random_points((-0.5, -1), (2.5, 2), 20000, seed=1, dtype=dtype)
    in_a, in_b, in_c = a.contains(points), b.contains(points), c.contains(points)
    assert torch.equal((a | b).contains(points), in_a | in_b)
    assert torch.equal((a & b).contains(points), in_a & in_b)
    assert torch.equal((a - b).contains(points), in_a & ~in_b)
    assert torch.equal(((a - b) | c).contains(points), (in_a & ~in_b) | in_c)
    assert torch.equal((a & (b | c)).contains(points), in_a & (in_b | in_c))
    shell = geo.Sphere((0, 0, 0), 1) - geo.Sphere((0, 0, 0), 0.5) - geo.Cylinder((0, 0, 0), 0.3, 3)
    points3 = random_points((-1.2,) * 3, (1.2,) * 3, 20000, seed=2, dtype=dtype)
    radius = points3.norm(dim=1)
    expected = (radius <= 1) & (radius > 0.5) & (points3[:, :2].norm(dim=1) > 0.3)
    assert (shell.contains(points3) == expected).float().mean() > 0.9999  # ties only at the boundary


def test_bounds():
    lo, hi = (geo.Disk((1, 2), 0.5) | geo.Rectangle((-1, 0), (0, 1))).bounds
    assert torch.allclose(lo, torch.tensor([-1.0, 0.0])) and torch.allclose(hi, torch.tensor([1.5, 2.5]))
    lo, hi = geo.Cylinder((0, 0, 1), 0.5, 4.0, axis=2).bounds
    assert torch.allclose(lo, torch.tensor([-0.5, -0.5, -1.0]))
    assert torch.allclose(hi, torch.tensor([0.5, 0.5, 3.0]))
    lo, hi = (geo.Rectangle((0, 0), (1, 1)) * geo.TimeDomain(0, 5)).bounds
    assert torch.allclose(hi, torch.tensor([1.0, 1.0, 5.0]))


# ------------------------------------------------------------------ rasterisation

def cell_centers(lo, hi, spacing, dtype=torch.float64):
    count = round((hi - lo) / spacing)
    return lo + spacing * (torch.arange(count, dtype=dtype) + 0.5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rasterized_disk_area(dtype):
    # off-centre disk, radius 13.3 cells. Measured relative area errors: 5.9e-3 (centre mask),
    # 3-4e-4 (supersample 4), 0.3-5e-5 (supersample 16); asserted: 1e-3 and 1e-4
    h = 0.05
    disk = geo.Disk((0.013, -0.021), 0.665)
    x = cell_centers(-1, 1, h, dtype)
    fraction = geo.rasterize(disk, [x, x], [h, h])
    assert fraction.shape == (40, 40) and fraction.dtype == dtype
    assert fraction.min() >= 0 and fraction.max() <= 1
    assert abs(float(fraction.sum()) * h * h / disk.volume - 1) < 1e-3
    assert ((fraction > 0) & (fraction < 1)).any()  # boundary cells are partially filled
    # centre-point mask: 0/1, equal to contains at the centres
    mask = geo.rasterize(disk, [x, x], [h, h], supersample=1)
    grid = torch.stack(torch.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    assert torch.equal(mask.reshape(-1), disk.contains(grid).to(dtype))
    # supersampling converges towards the exact area
    coarse = abs(float(mask.sum()) * h * h / disk.volume - 1)
    fine = abs(float(geo.rasterize(disk, [x, x], [h, h], supersample=16).sum()) * h * h / disk.volume - 1)
    assert fine < 1e-4 and fine < coarse


def test_rasterized_sphere_and_cylinder_volume():
    # supersample 4, 0.05 cells: sphere radius 9.1 cells, relative volume error < 1e-3
    h = 0.05
    x = cell_centers(-0.6, 0.6, h)
    sphere = geo.Sphere((0.011, -0.007, 0.003), 0.455)
    fraction = geo.rasterize(sphere, [x, x, x], [h, h, h])
    assert fraction.shape == (24, 24, 24)
    assert abs(float(fraction.sum()) * h**3 / sphere.volume - 1) < 1e-3
    # flat caps not aligned with sub-cell points: each cap's volume error is at most its area times
    # h / (2 s) (midpoint-rule quantisation along the axis); the lateral surface adds a little more
    cylinder = geo.Cylinder((0.01, 0.0, -0.02), 0.33, 0.81, axis=1)
    for supersample in (4, 16):
        fraction = geo.rasterize(cylinder, [x, x, x], [h, h, h], supersample, chunk_size=5000)  # chunked
        cap_bound = 2 * math.pi * 0.33**2 * h / (2 * supersample)
        assert abs(float(fraction.sum()) * h**3 - cylinder.volume) < 1.2 * cap_bound


def test_rasterized_polygon_and_csg_area():
    h = 0.02
    vertices = [(0.013, 0.021), (0.913, 0.107), (0.55, 0.38), (0.47, 0.91)]
    polygon = geo.Polygon(vertices)
    x = cell_centers(-0.2, 1.2, h)
    area = float(geo.rasterize(polygon, [x, x], [h, h]).sum()) * h * h
    assert abs(area / polygon_area_by_triangles(vertices) - 1) < 1e-3
    assert polygon.volume == pytest.approx(polygon_area_by_triangles(vertices), rel=1e-12)
    plate = geo.Rectangle((0.1, 0.1), (1.1, 0.7)) - geo.Disk((0.6, 0.4), 0.2)
    area = float(geo.rasterize(plate, [x, x], [h, h]).sum()) * h * h
    assert abs(area / (0.6 - math.pi * 0.04) - 1) < 1e-3


def test_rasterized_interval_and_anisotropic_grid():
    x = cell_centers(0, 1, 0.1)
    fraction = geo.rasterize(geo.Interval(0.23, 0.61), [x], [0.1], supersample=10)
    expected = torch.tensor([0, 0, 0.7, 1, 1, 1, 0.1, 0, 0, 0], dtype=torch.float64)
    assert torch.allclose(fraction, expected, atol=1e-12)
    # rectangle on a grid with different spacings per axis, edges on sub-cell positions
    xs, ys = cell_centers(0, 1, 0.1), cell_centers(0, 1, 0.25)
    fraction = geo.rasterize(geo.Rectangle((0.2, 0.3), (0.55, 1.0)), [xs, ys], [0.1, 0.25], supersample=20)
    assert fraction.shape == (10, 4)
    assert float(fraction.sum()) * 0.1 * 0.25 == pytest.approx(0.35 * 0.7, rel=1e-9)


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("make, message", [
    (lambda: geo.Rectangle((1, 0), (0, 1)), "inverted"),
    (lambda: geo.Box((0, 0, 0), (1, 1, 0)), "inverted"),
    (lambda: geo.Interval(2, 1), "inverted"),
    (lambda: geo.TimeDomain(1, 1), "inverted"),
    (lambda: geo.Disk((0, 0), -1), "radius"),
    (lambda: geo.Sphere((0, 0, 0), 0), "radius"),
    (lambda: geo.Disk((0, 0, 0), 1), "center"),
    (lambda: geo.Cylinder((0, 0, 0), 1, -2), "height"),
    (lambda: geo.Cylinder((0, 0, 0), 1, 2, axis=3), "axis"),
    (lambda: geo.Rectangle((0, 0, 0), (1, 1, 1)), "lower"),
    (lambda: geo.Polygon([(0, 0), (1, 1)]), "vertices"),
    (lambda: geo.Polygon([(0, 0), (1, 1), (2, 2)]), "zero area"),
    (lambda: geo.Polygon([(0, 0), (2, 2), (2, 0), (0, 1)]), "intersects itself"),
    (lambda: geo.Disk((0, 0), 1) | geo.Sphere((0, 0, 0), 1), "same dimension"),
])
def test_bad_shapes_raise_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_bad_points_and_grids_raise():
    disk = geo.Disk((0, 0), 1)
    with pytest.raises(ValueError, match=r"points must have shape \(B, 2\)"):
        disk.contains(torch.zeros(5, 3))
    with pytest.raises(ValueError, match=r"points must have shape \(B, 1\)"):
        geo.Interval(0, 1).contains(torch.zeros(5))
    with pytest.raises(TypeError, match="points"):
        disk.contains([[0.0, 0.0]])
    x = torch.linspace(0, 1, 5)
    with pytest.raises(ValueError, match="centers"):
        geo.rasterize(disk, [x], [0.1])
    with pytest.raises(ValueError, match="spacing"):
        geo.rasterize(disk, [x, x], [0.1, -0.1])
    with pytest.raises(ValueError, match="supersample"):
        geo.rasterize(disk, [x, x], [0.1, 0.1], supersample=0)
    with pytest.raises(TypeError, match="TimeDomain"):
        disk * geo.Interval(0, 1)
