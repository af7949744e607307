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
    # slabs of two rows: most slabs hold no boundary cell; the result does not depend on chunking
    assert torch.equal(geo.rasterize(disk, [x, x], [h, h], chunk_size=80), fraction)


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


# ------------------------------------------------------------------ sampling: points inside, on the boundary

SHAPES = {
    "interval": geo.Interval(-1, 2),
    "rectangle": geo.Rectangle((0, -1), (2, 0.5)),
    "disk": geo.Disk((0.5, -0.5), 0.8),
    "polygon": geo.Polygon([(0, 0), (1, 0), (1, 0.5), (0.5, 0.5), (0.5, 1), (0, 1)]),
    "box": geo.Box((0, 0, 0), (1, 2, 3)),
    "sphere": geo.Sphere((0, 0, 1), 0.7),
    "cylinder": geo.Cylinder((0, 1, 0), 0.5, 2.0, axis=1),
    "plate": geo.Rectangle((0, 0), (2, 1)) - geo.Disk((1, 0.5), 0.25),
    "two_disks": geo.Disk((0, 0), 1) | geo.Disk((1, 0), 1),
    "lens": geo.Disk((0, 0), 1) & geo.Disk((1, 0), 1),
    "shell": geo.Sphere((0, 0, 0), 1) - geo.Sphere((0.2, 0, 0), 0.5),
    "capped": ((geo.Box((-1, -1, -1), (1, 1, 1)) & geo.Sphere((0, 0, 0), 1.3))
               - geo.Cylinder((0, 0, 0), 0.4, 3)),
}


@pytest.mark.parametrize("sampler", geo.SAMPLERS)
@pytest.mark.parametrize("name", SHAPES)
def test_sampled_interior_points_are_inside(name, sampler):
    shape = SHAPES[name]
    for dtype in DTYPES:
        points = shape.sample_interior(300, sampler=sampler, seed=3, dtype=dtype)
        assert points.shape == (300, shape.dim) and points.dtype == dtype
        assert shape.contains(points).all()
        assert torch.unique(points, dim=0).shape[0] == 300


def on_analytic_boundary(name, points, normals):
    """Distance of each point to the analytic boundary and error of its normal, per shape."""
    x = points[:, 0]
    if name == "interval":
        distance = torch.minimum((x + 1).abs(), (x - 2).abs())
        expected = torch.where(x < 0.5, -1.0, 1.0).to(points)[:, None]
    elif name == "disk":
        offset = points - torch.tensor([0.5, -0.5]).to(points)
        distance = (offset.norm(dim=1) - 0.8).abs()
        expected = offset / 0.8
    elif name == "sphere":
        offset = points - torch.tensor([0.0, 0.0, 1.0]).to(points)
        distance = (offset.norm(dim=1) - 0.7).abs()
        expected = offset / 0.7
    elif name == "cylinder":
        radial = points[:, [0, 2]]
        axial = points[:, 1] - 1
        lateral = (radial.norm(dim=1) - 0.5).abs() < 1e-9
        distance = torch.where(lateral, (axial.abs() - 1).clamp(min=0),
                               (axial.abs() - 1).abs() + (radial.norm(dim=1) - 0.5).clamp(min=0))
        expected = torch.zeros_like(points)
        expected[:, [0, 2]] = torch.where(lateral[:, None], radial / 0.5, 0.0)
        expected[:, 1] = torch.where(lateral, 0.0, torch.sign(axial))
    elif name == "plate":  # the rectangle's sides outside the hole, or the hole's circle (normal inward)
        offset = points - torch.tensor([1.0, 0.5]).to(points)
        on_hole = (offset.norm(dim=1) - 0.25).abs() < 1e-9
        y = points[:, 1]
        side = torch.stack([x.abs(), (x - 2).abs(), y.abs(), (y - 1).abs()], 1)
        axis_normals = torch.tensor([[-1.0, 0], [1, 0], [0, -1], [0, 1]]).to(points)
        distance = torch.where(on_hole, 0.0, side.min(1).values)
        expected = torch.where(on_hole[:, None], -offset / 0.25, axis_normals[side.argmin(1)])
    else:
        raise KeyError(name)
    return distance, (normals - expected).norm(dim=1)


@pytest.mark.parametrize("sampler", geo.SAMPLERS)
@pytest.mark.parametrize("name", ["interval", "disk", "sphere", "cylinder", "plate"])
def test_boundary_points_and_normals_match_the_analytic_boundary(name, sampler):
    shape = SHAPES[name]
    points, normals = shape.sample_boundary(400, sampler=sampler, seed=5, dtype=torch.float64)
    distance, normal_error = on_analytic_boundary(name, points, normals)
    assert distance.max() < 1e-12
    assert normal_error.max() < 1e-12
    assert torch.allclose(shape.boundary_normal(points), normals, atol=1e-12)


def test_box_and_polygon_boundary_points_lie_on_faces_and_edges():
    box = SHAPES["box"]
    points, normals = box.sample_boundary(600, sampler="sobol", seed=1, dtype=torch.float64)
    hi = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    on_lower, on_upper = points.abs() < 1e-12, (points - hi).abs() < 1e-12
    assert ((on_lower | on_upper).sum(1) >= 1).all()
    # the normal is -e_i on a lower face and +e_i on an upper face
    assert torch.equal(normals, on_upper.double() - on_lower.double())
    ell = SHAPES["polygon"]
    points, normals = ell.sample_boundary(600, seed=1, dtype=torch.float64)
    x, y = points.unbind(1)
    edges = [((y.abs() < 1e-12) & (x <= 1), (0, -1)), (((x - 1).abs() < 1e-12) & (y <= 0.5), (1, 0)),
             (((y - 0.5).abs() < 1e-12) & (x >= 0.5), (0, 1)),
             (((x - 0.5).abs() < 1e-12) & (y >= 0.5), (1, 0)),
             (((y - 1).abs() < 1e-12) & (x <= 0.5), (0, 1)), ((x.abs() < 1e-12), (-1, 0))]
    matched = torch.zeros(len(points), dtype=torch.bool)
    for on_edge, normal in edges:
        correct = on_edge & (normals - torch.tensor(normal, dtype=torch.float64)).norm(dim=1).lt(1e-12)
        matched |= correct
    assert matched.all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", SHAPES)
def test_normals_are_unit_and_outward(name, dtype):
    shape = SHAPES[name]
    points, normals = shape.sample_boundary(500, sampler="sobol", seed=7, dtype=dtype)
    assert points.shape == normals.shape == (500, shape.dim) and normals.dtype == dtype
    assert torch.allclose(normals.norm(dim=1), torch.ones(500, dtype=dtype), atol=10 * torch.finfo(dtype).eps)
    assert shape.contains(points).all()
    step = 1e-3
    assert shape.contains(points - step * normals).all()
    assert not shape.contains(points + step * normals).any()


# ------------------------------------------------------------------ sampling: coverage and distribution

@pytest.mark.parametrize("name, volume", [
    ("disk", math.pi * 0.64),
    ("sphere", 4 / 3 * math.pi * 0.343),
    ("plate", 2 - math.pi / 16),
    ("shell", 4 / 3 * math.pi * (1 - 0.125)),
    ("lens", 2 * math.acos(0.5) - 0.5 * math.sqrt(3)),  # two unit disks one radius apart
    ("two_disks", 2 * math.pi - (2 * math.acos(0.5) - 0.5 * math.sqrt(3))),
])
def test_monte_carlo_volume_matches_analytic_value(name, volume):
    shape = SHAPES[name]
    lo, hi = (b.double() for b in shape.bounds)
    n = 20000
    fraction = float(shape.contains(random_points(lo, hi, n, seed=11)).double().mean())
    box_volume = float(torch.prod(hi - lo))
    sigma = box_volume * math.sqrt(fraction * (1 - fraction) / n)
    assert abs(fraction * box_volume - volume) < 4 * sigma
    if name in ("disk", "sphere"):
        assert shape.volume == pytest.approx(volume, rel=1e-14)


def test_interior_samples_are_uniform_in_non_box_shapes():
    # rejection sampling must not distort the density: the inner half-radius disk/ball holds
    # 1/4 (2D) or 1/8 (3D) of the points, the plate is mirror symmetric about x = 1
    n = 20000
    disk_points = SHAPES["disk"].sample_interior(n, seed=1, dtype=torch.float64)
    radius = (disk_points - torch.tensor([0.5, -0.5], dtype=torch.float64)).norm(dim=1)
    inner = float((radius < 0.4).double().mean())
    assert abs(inner - 0.25) < 4 * math.sqrt(0.25 * 0.75 / n)
    ball_points = SHAPES["sphere"].sample_interior(n, sampler="sobol", seed=1, dtype=torch.float64)
    radius = (ball_points - torch.tensor([0, 0, 1.0], dtype=torch.float64)).norm(dim=1)
    inner = float((radius < 0.35).double().mean())
    assert abs(inner - 0.125) < 4 * math.sqrt(0.125 * 0.875 / n)
    plate_points = SHAPES["plate"].sample_interior(n, seed=2, dtype=torch.float64)
    left = float((plate_points[:, 0] < 1).double().mean())
    assert abs(left - 0.5) < 4 * math.sqrt(0.25 / n)


def test_latin_hypercube_hits_every_stratum_once():
    n = 97
    for shape in (geo.Box((0, -1, 2), (1, 1, 5)), geo.Rectangle((0, 0), (3, 1)) * geo.TimeDomain(0, 2)):
        points = shape.sample_interior(n, sampler="lhs", seed=4, dtype=torch.float64)
        lo, hi = (b.double() for b in shape.bounds)
        strata = torch.floor((points - lo) / (hi - lo) * n).long()
        for axis in range(shape.dim):
            assert torch.equal(strata[:, axis].sort().values, torch.arange(n))
    # boundary of a rectangle: the perimeter coordinate is stratified
    points, _ = geo.Rectangle((0, 0), (2, 1)).sample_boundary(60, sampler="lhs", seed=4, dtype=torch.float64)
    x, y = points.unbind(1)
    arclength = torch.where(y.abs() < 1e-12, x, torch.where((x - 2).abs() < 1e-12, 2 + y,
                            torch.where((y - 1).abs() < 1e-12, 3 + (2 - x), 5 + (1 - y))))
    assert torch.equal(torch.floor(arclength / 6 * 60).long().sort().values, torch.arange(60))


def test_sobol_has_lower_discrepancy_than_uniform():
    from scipy.stats import qmc

    box = geo.Box((0, 0, 0), (2, 1, 4))
    scale = torch.tensor([2.0, 1.0, 4.0], dtype=torch.float64)
    discrepancy = {}
    for sampler in ("uniform", "sobol", "lhs"):
        unit = (box.sample_interior(256, sampler=sampler, seed=0, dtype=torch.float64) / scale).numpy()
        discrepancy[sampler] = qmc.discrepancy(unit)
    assert discrepancy["sobol"] < 0.2 * discrepancy["uniform"]
    assert discrepancy["sobol"] < discrepancy["lhs"]


def side_fractions(points):
    """Fractions of rectangle [0, 2] x [0, 1] boundary points on bottom, right, top, left sides."""
    x, y = points.double().unbind(1)
    sides = [y.abs() < 1e-6, (x - 2).abs() < 1e-6, (y - 1).abs() < 1e-6, x.abs() < 1e-6]
    return torch.stack([s.double().mean() for s in sides])


@pytest.mark.parametrize("sampler", geo.SAMPLERS)
def test_boundary_sampling_is_proportional_to_measure(sampler):
    n = 6000
    expected = torch.tensor([2, 1, 2, 1], dtype=torch.float64) / 6
    points, _ = geo.Rectangle((0, 0), (2, 1)).sample_boundary(n, sampler=sampler, seed=8)
    tolerance = 4 * math.sqrt(0.25 / n) if sampler == "uniform" else 2 / n
    assert (side_fractions(points) - expected).abs().max() < tolerance
    # box faces in proportion to their areas (1x2, 1x3, 2x3 pairs; total 22)
    points, normals = SHAPES["box"].sample_boundary(n, sampler=sampler, seed=8, dtype=torch.float64)
    face_area = torch.tensor([6.0, 3.0, 2.0], dtype=torch.float64)
    for axis in range(3):
        fraction = float((normals[:, axis] != 0).double().mean())
        assert abs(fraction - 2 * face_area[axis] / 22) < 4 * math.sqrt(0.25 / n)
    # cylinder: lateral surface 2 pi r h against two caps 2 pi r^2
    cylinder = SHAPES["cylinder"]
    points, normals = cylinder.sample_boundary(n, sampler=sampler, seed=8, dtype=torch.float64)
    lateral = float((normals[:, 1] == 0).double().mean())
    assert abs(lateral - 2.0 / (2.0 + 0.5)) < 4 * math.sqrt(0.25 / n)
    # sphere: Archimedes, z uniform on [-r, r]
    points, _ = SHAPES["sphere"].sample_boundary(n, sampler=sampler, seed=8, dtype=torch.float64)
    upper_cap = float((points[:, 2] > 1 + 0.35).double().mean())
    assert abs(upper_cap - 0.25) < 4 * math.sqrt(0.25 / n)


def test_csg_boundary_sampling_is_proportional_to_measure():
    n = 20000
    binomial = 4 * math.sqrt(0.25 / n)
    # plate: outer perimeter 6, hole circumference pi / 2
    points, _ = SHAPES["plate"].sample_boundary(n, seed=9, dtype=torch.float64)
    radius = (points - torch.tensor([1.0, 0.5], dtype=torch.float64)).norm(dim=1)
    on_hole = float((radius < 0.3).double().mean())
    assert abs(on_hole - (math.pi / 2) / (6 + math.pi / 2)) < binomial
    # two unit disks one radius apart: each keeps an arc of 4 pi / 3, uniformly covered
    points, normals = SHAPES["two_disks"].sample_boundary(n, sampler="sobol", seed=9, dtype=torch.float64)
    first = points[:, 0] < 0.5
    assert abs(float(first.double().mean()) - 0.5) < binomial
    angle = torch.atan2(points[first, 1], points[first, 0]).abs()  # kept arc: |angle| in [pi / 3, pi]
    assert angle.min() > math.pi / 3 - 1e-9
    assert abs(float((angle < 2 * math.pi / 3).double().mean()) - 0.5) < 2 * binomial
    # coincident faces: touching rectangles share no boundary; equal faces are sampled once
    halves = geo.Rectangle((0, 0), (1, 1)) | geo.Rectangle((1, 0), (2, 1))
    corner = geo.Rectangle((0, 0), (2, 1)) & geo.Rectangle((0, 0), (1, 2))
    notch = geo.Rectangle((0, 0), (2, 1)) - geo.Rectangle((1, 0), (3, 1))
    for shape, expected in ((halves, [2, 1, 2, 1]), (corner, [1, 1, 1, 1]), (notch, [1, 1, 1, 1])):
        points, normals = shape.sample_boundary(n, seed=10, dtype=torch.float64)
        expected = torch.tensor(expected, dtype=torch.float64) / sum(expected)
        if shape is halves:
            fractions = side_fractions(points)
        else:  # the unit square [0, 1]^2, right side at x = 1
            fractions = side_fractions(points * torch.tensor([2.0, 1.0], dtype=torch.float64))
        assert (fractions - expected).abs().max() < binomial, shape
        assert torch.allclose(fractions.sum(), torch.tensor(1.0, dtype=torch.float64))


# ------------------------------------------------------------------ space x time

def test_space_time_sampling_columns_and_ranges():
    space = SHAPES["plate"]
    domain = space * geo.TimeDomain(1.0, 3.0)
    assert domain.dim == 3
    assert (geo.Disk((0, 0), 1) * geo.TimeDomain(1, 3)).volume == pytest.approx(2 * math.pi)
    n = 4000
    points = domain.sample_interior(n, sampler="sobol", seed=0, dtype=torch.float64)
    assert points.shape == (n, 3)
    assert space.contains(points[:, :2]).all()
    times = points[:, 2]
    assert times.min() >= 1 and times.max() <= 3
    assert abs(float(times.mean()) - 2) < 0.01  # Sobol: far tighter than uniform's 0.018 sigma
    boundary, normals = domain.sample_boundary(n, seed=0, dtype=torch.float64)
    assert boundary.shape == normals.shape == (n, 3)
    assert torch.equal(normals[:, 2], torch.zeros(n, dtype=torch.float64))
    assert not space.contains(boundary[:, :2] + 1e-3 * normals[:, :2]).any()
    assert boundary[:, 2].min() >= 1 and boundary[:, 2].max() <= 3
    assert abs(float(boundary[:, 2].mean()) - 2) < 4 * (2 / math.sqrt(12 * n))
    initial = domain.sample_initial(100, seed=0, dtype=torch.float64)
    assert torch.equal(initial[:, 2], torch.ones(100, dtype=torch.float64))
    assert space.contains(initial[:, :2]).all()
    assert domain.contains(points).all()
    late = points.clone()
    late[:, 2] = 3.5
    assert not domain.contains(late).any()
    with pytest.raises(TypeError, match="spatial shape"):
        domain * geo.TimeDomain(0, 1)


# ------------------------------------------------------------------ seeds, dtypes, bad arguments

def test_seeds_make_samples_reproducible():
    import numpy as np

    shape = SHAPES["plate"]
    assert torch.equal(shape.sample_interior(np.int64(5), seed=np.int64(3)), shape.sample_interior(5, seed=3))
    for sampler in geo.SAMPLERS:
        first = shape.sample_interior(50, sampler=sampler, seed=1)
        assert torch.equal(first, shape.sample_interior(50, sampler=sampler, seed=1))
        assert not torch.equal(first, shape.sample_interior(50, sampler=sampler, seed=2))
        boundary = shape.sample_boundary(50, sampler=sampler, seed=1)
        again = shape.sample_boundary(50, sampler=sampler, seed=1)
        assert all(torch.equal(a, b) for a, b in zip(boundary, again))
    torch.manual_seed(0)
    first = shape.sample_interior(20)
    torch.manual_seed(0)
    assert torch.equal(first, shape.sample_interior(20))


def test_bad_sampling_arguments_raise():
    disk = SHAPES["disk"]
    with pytest.raises(ValueError, match="sampler must be one of"):
        disk.sample_interior(10, sampler="halton")
    with pytest.raises(ValueError, match="n must be a positive integer"):
        disk.sample_interior(0)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        disk.sample_boundary(-5)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        disk.sample_boundary(2.5)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        disk.sample_boundary(5, seed=-1)
    with pytest.raises(ValueError, match="dtype"):
        disk.sample_interior(10, dtype=torch.int64)
    with pytest.raises(ValueError, match="empty"):
        (geo.Disk((0, 0), 1) & geo.Disk((3, 0), 1)).sample_interior(10)
    with pytest.raises(NotImplementedError, match="Monte Carlo"):
        _ = SHAPES["plate"].volume


def test_docstring_examples_run():
    import doctest

    from common.geometry import raster, shapes

    for module in (geo, shapes, raster):
        assert doctest.testmod(module).failed == 0, module.__name__
