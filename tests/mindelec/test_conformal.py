"""Conformal PEC (:mod:`mindelec.fdtd.conformal`, ``Simulation(subpixel=True)``): merged cells in 2D TE,
compensated masses in 2D TM and 3D.

The 2D reference is the circular PEC cavity: its lowest azimuthally uniform TE mode has ``J0'(kR) = 0``
(``Hz``; k R = 3.8317; TM: ``J0(kR) = 0``, k R = 2.4048). The cavity is the domain minus a disk
whose centre is off the grid's symmetry, so that every resolution cuts the cells differently. Source and
probe sit near the centre, where only the uniform modes have ``Hz`` (TE) or ``Ez`` (TM); the frequency is
a matrix-pencil fit of the ringing after the pulse. ``MINDELEC_CONFORMAL_FULL=1`` runs 12-64 cells.
"""

import math
import os

import numpy as np
import pytest
import torch
from scipy.special import jn_zeros, jnp_zeros
from test_smoothing import _matrix_pencil

from common import geometry
from common.units import SPEED_OF_LIGHT
from mindelec import fdtd
from mindelec.fdtd import conformal

RADIUS = 1e-3
SIDE = 2.2 * RADIUS
CENTER = (0.0371 * RADIUS, -0.0213 * RADIUS)
ROOTS = {"TE": jnp_zeros(0, 1)[0], "TM": jn_zeros(0, 1)[0]}
FULL = os.environ.get("MINDELEC_CONFORMAL_FULL") == "1"


def _exact(polarization):
    return ROOTS[polarization] / RADIUS * SPEED_OF_LIGHT / (2 * math.pi)


def _cavity(cells, polarization, subpixel, center=CENTER, radius=RADIUS, fill=None, amplitude=1.0, **options):
    """The 2D cavity with ``Hz`` (TE) or ``Ez`` (TM) driven and probed near its centre (``fill``: a medium
    filling it, its relative permittivity ``fill_guess`` centring the pulse)."""
    target = _exact(polarization) / math.sqrt(options.pop("fill_guess", 1.0))
    below = [] if fill is None else [fdtd.Structure(geometry.Rectangle((-SIDE, -SIDE), (SIDE, SIDE)), fill)]
    component = "Hz" if polarization == "TE" else "Ez"
    wall = geometry.Rectangle((-SIDE, -SIDE), (SIDE, SIDE)) - geometry.Disk(center, radius)
    source = (CENTER[0] + 0.013 * RADIUS, CENTER[1] + 0.011 * RADIUS)
    probe = (CENTER[0] - 0.017 * RADIUS, CENTER[1] + 0.009 * RADIUS)
    return fdtd.Simulation(
        size=(SIDE, SIDE),
        cell_size=SIDE / cells,
        polarization=polarization,
        structures=[*below, fdtd.Structure(wall, fdtd.PEC())],
        sources=[fdtd.PointDipole(source, component, fdtd.GaussianPulse(target, 0.3 * target), amplitude)],
        monitors=[fdtd.FieldProbe("p", probe, (component,))],
        dtype=torch.float64,
        subpixel=subpixel,
        **options,
    )


def _ringing_frequency(series, dt, target):
    stride = max(1, int(1 / (8 * target * dt)))
    found = _matrix_pencil(series[len(series) // 3 :: stride], dt * stride)
    return float(found[np.argmin(np.abs(found - target))])


def _error(cells, polarization, subpixel):
    sim = _cavity(cells, polarization, subpixel)
    target = _exact(polarization)
    series = sim.run(until=40 / target, progress=False)["p"]["Hz" if polarization == "TE" else "Ez"]
    return abs(_ringing_frequency(series.numpy(), sim.dt, target) - target) / target


@pytest.mark.parametrize("polarization", ["TE", "TM"])
def test_circular_cavity_converges_at_second_order(polarization):
    """TE (merged cells): relative error 2.8e-3 .. 2.1e-4 over 16-64 cells, 0.73-0.86 N^-2. TM (compensated
    masses): 1.8e-3 .. 1.0e-4 over 16-64 cells, 0.41-0.49 N^-2. The staircase is first order and, in TE,
    erratic: 1.0e-3 .. 7.3e-2 over the same cells, 8-80x the conformal errors except at 28 cells, where the
    staircase happens to suit the disk; in TM 5.2e-2 .. 1.4e-2. Asserted at the finest size (measured 65x in
    TE and 108x in TM at 48 cells)."""
    cells = [12, 16, 20, 24, 28, 32, 40, 48, 64] if FULL else [16, 24, 32, 48]
    errors = np.array([_error(n, polarization, True) for n in cells])
    order = -np.polyfit(np.log(cells), np.log(errors), 1)[0]
    scaled = errors * np.array(cells) ** 2
    assert order > 1.7, (order, errors)  # measured 1.9 (TE) and 2.1 (TM) on the CI set
    assert scaled.max() / scaled.min() < 2.5, scaled  # a first-order error would grow 3x over 16-48
    staircase = _error(cells[-1], polarization, False)
    assert staircase > 20 * errors[-1], (staircase, errors[-1])


def _h_operator(sim):
    """The matrix ``T`` (scipy sparse) of the H update's two-step recursion ``H^{n+1} - 2 H^n + H^{n-1} =
    -T H^n`` (2D or 3D, no sources), probed through the stepper: H set to one node per block of 5 per axis,
    E zero; the H change over the second of two steps is ``-T H``. The leapfrog is stable when the
    eigenvalues of ``T`` are at most 4."""
    import scipy.sparse as sparse

    stepper = sim._stepper(2)
    components = [c for c in sim.active if c[0] == "H"]
    shape = sim.grid.shape
    ndim = sim.grid.ndim
    count = math.prod(shape)
    index = np.indices(shape).reshape(3, -1).T[:, :ndim]
    rows, columns, values = [], [], []
    stride = 5
    with torch.no_grad():
        for column, component in enumerate(components):
            for colour in np.ndindex(*(stride,) * ndim):
                chosen = (index % stride == np.array(colour)).all(1)
                state = stepper.initial_state()
                state.fields[component].copy_(torch.as_tensor(chosen.reshape(shape), dtype=torch.float64))
                state = stepper.step(state, 0, inplace=True)
                first = {c: state.fields[c].clone() for c in components}
                state = stepper.step(state, 1, inplace=True)
                for row, other in enumerate(components):
                    change = (first[other] - state.fields[other]).reshape(-1).numpy()
                    hit = np.nonzero(change)[0]
                    source = colour + stride * np.round((index[hit] - np.array(colour)) / stride).astype(int)
                    source = np.clip(source, 0, np.array(shape[:ndim]) - 1)
                    flat = np.ravel_multi_index(tuple(source.T), shape[:ndim])
                    rows.append(row * count + hit)
                    columns.append(column * count + flat)
                    values.append(change[hit])
    rows, columns, values = (np.concatenate(a) for a in (rows, columns, values))
    return sparse.csc_matrix((values, (rows, columns)), shape=(len(components) * count,) * 2)


def _largest_eigenvalue(sim):
    """The largest eigenvalue of the probed H operator (the leapfrog is stable below 4)."""
    import scipy.sparse.linalg as sparse_linalg

    operator = _h_operator(sim)
    if operator.shape[0] <= 2000:
        return float(np.linalg.eigvals(operator.toarray()).real.max())
    return float(sparse_linalg.eigs(operator, k=1, which="LM", return_eigenvectors=False)[0].real)


def test_merged_cells_keep_the_yee_time_step():
    """Dividing by small cut areas would need a far smaller step (in an operator model, 20-60x); with the
    small faces merged, the largest eigenvalue of the H operator at the Yee limit (courant 1) stays below
    the leapfrog's bound 4, and below the staircase's on the same cavity (measured 0.960-0.991 of the bound,
    the staircase's 0.968-0.991), over cavities moved and resized at random."""
    rng, polarization = np.random.default_rng(7), "TE"
    for cells in (10, 14, 20):
        shift = tuple(rng.uniform(-0.1, 0.1, 2) * RADIUS)
        scale = rng.uniform(0.85, 1.0)
        largest = {}
        for subpixel in (False, True):
            sim = _cavity(cells, polarization, subpixel, shift, scale * RADIUS, amplitude=0.0, courant=1.0)
            largest[subpixel] = _largest_eigenvalue(sim) / 4
        assert largest[True] < 1.0, (cells, largest)
        assert largest[True] <= largest[False] + 1e-9, (cells, largest)


def test_2d_tm_small_faces_take_mass_and_the_step_is_bounded():
    """In TM the small faces (``Hx``, ``Hy`` segments mostly inside the conductor) take mass from a neighbour
    instead of merging (which left the edge between merged cells with one H component's curl only: a
    spurious surface wave); the time step is shortened by Gershgorin's bound, so the largest eigenvalue of
    the probed H operator stays below 4 at ``courant=1`` (measured 0.74-0.84 of it, at 0.55-0.58 of Yee's
    step), over cavities moved and resized at random. The total mass of the faces is that of their area
    fractions."""
    rng = np.random.default_rng(11)
    for cells in (10, 14, 20):
        shift = tuple(rng.uniform(-0.1, 0.1, 2) * RADIUS)
        sim = _cavity(cells, "TM", True, shift, rng.uniform(0.85, 1.0) * RADIUS, amplitude=0.0, courant=1.0)
        geometry_ = sim._conformal
        assert geometry_.compensated
        assert sim.dt < 0.8 * sim._stability_limit()
        largest = _largest_eigenvalue(sim) / 4
        assert largest < 1.0, (cells, largest)
        stepper = sim._stepper(1)
        for faces in stepper.conformal.faces:
            area = geometry_.fractions[faces.component].reshape(-1)[faces.faces.cpu()]
            assert float(faces.area.sum()) == pytest.approx(float(area.sum()), rel=1e-12)
            assert float(faces.area[area > 0].min()) >= conformal.SMALL_FACE - 1e-12


def _cavity_3d(cells, hole, target, subpixel, courant=0.99):
    side = 2.2 * RADIUS
    wall = fdtd.Structure(geometry.Box((-side,) * 3, (side,) * 3) - hole, fdtd.PEC())
    return fdtd.Simulation(
        size=(side,) * 3,
        cell_size=side / cells,
        structures=[wall],
        sources=[fdtd.PointDipole((0, 0, 0), "Ez", fdtd.GaussianPulse(target, 0.3 * target), amplitude=0.0)],
        dtype=torch.float64,
        subpixel=subpixel,
        courant=courant,
    )


def _modes_near(sim, target, centre, count=8, axis_only=False):
    """Frequencies of the ``count`` modes of the probed 3D H operator nearest ``target`` (semi-discrete,
    relative to ``target``) and, per mode, the fraction of its weight within 0.1 R of the wall (distance
    from ``centre``, or from the z axis through it with ``axis_only``)."""
    import scipy.sparse.linalg as sparse_linalg

    operator = _h_operator(sim)
    shift = 4 * math.sin(math.pi * target * sim.dt) ** 2
    values, vectors = sparse_linalg.eigs(operator, k=count, sigma=shift)
    points = np.concatenate([
        torch.stack(torch.meshgrid(*[sim.grid.coordinates(c, a) for a in range(3)], indexing="ij"), -1)
        .reshape(-1, 3).numpy()
        for c in ("Hx", "Hy", "Hz")
    ]) - np.array(centre)
    radius = np.linalg.norm(points[:, :2] if axis_only else points, axis=1) / RADIUS
    weights = np.abs(vectors) ** 2 / (np.abs(vectors) ** 2).sum(0)
    order = np.argsort(values.real)
    frequencies = np.sqrt(np.clip(values.real[order], 0, None)) / sim.dt / (2 * math.pi) / target - 1
    return frequencies, weights[radius > 0.9][:, order].sum(0)


@pytest.mark.slow
def test_3d_sphere_converges_at_second_order_without_spurious_modes():
    """A spherical PEC cavity off the grid's symmetry, lowest TM mode ``(x j1(x))' = 0`` at x = kR = 2.744,
    from the probed H operator: the threefold mode's errors x N^2 stay about 0.8 (measured -5.7e-3 and
    -3.1e-3 at 12 and 16 cells per 2.2 R; the staircase -1.0e-1 and -7.3e-2, first order), no mode within
    35 % of it lives at the wall (the merged scheme had 3-6 within 10 %; pure Dey-Mittra, with exact
    fractions, had modes below it from edges barely outside the conductor, which are now held at zero),
    and the largest eigenvalue stays below 4 at ``courant=1``."""
    from scipy.optimize import brentq
    from scipy.special import spherical_jn

    centre = (0.0371 * RADIUS, -0.0213 * RADIUS, 0.0157 * RADIUS)
    root = brentq(lambda x: spherical_jn(1, x) + x * spherical_jn(1, x, derivative=True), 2, 3.5)
    target = root / RADIUS * SPEED_OF_LIGHT / (2 * math.pi)
    scaled = []
    for cells in (12, 16):
        sim = _cavity_3d(cells, geometry.Sphere(centre, RADIUS), target, True, courant=1.0)
        frequencies, at_wall = _modes_near(sim, target, centre)
        near = np.abs(frequencies) < 0.35
        assert near.sum() == 3, frequencies  # the TM101 triplet alone within 35 %
        assert (at_wall[near] < 0.7).all(), (frequencies, at_wall)
        scaled.append(np.abs(frequencies[near]).max() * cells**2)
        assert _largest_eigenvalue(sim) < 4.0
        stair = _cavity_3d(cells, geometry.Sphere(centre, RADIUS), target, False)
        staircase, _ = _modes_near(stair, target, centre, count=4)
        assert np.abs(staircase).min() > 10 * np.abs(frequencies[near]).max(), (staircase, frequencies)
    assert max(scaled) < 1.2 and max(scaled) / min(scaled) < 1.5, scaled


def test_conductor_in_a_dielectric_converges_at_second_order():
    """A conductor in a dielectric: the cavity filled with eps 4 rings at half the empty cavity's frequency,
    at second order (measured error x N^2 1.8-1.9 over 16-64 cells)."""
    cells = [16, 24, 32, 48]
    target = _exact("TE") / 2
    errors = []
    for n in cells:
        sim = _cavity(n, "TE", True, fill=fdtd.Medium(4.0), fill_guess=4.0)
        series = sim.run(until=40 / target, progress=False)["p"]["Hz"].numpy()
        errors.append(abs(_ringing_frequency(series, sim.dt, target) - target) / target)
    errors = np.array(errors)
    order = -np.polyfit(np.log(cells), np.log(errors), 1)[0]
    assert order > 1.7, (order, errors)


def _paths_agree(run, permittivity):
    """``run(permittivity, compiled=True)`` -> a probe's series: the compiled kernel's path, the torch path
    and a differentiable run give the same fields, and the gradient of the series' energy with respect to
    the permittivity matches central differences."""
    compiled, plain = run(permittivity), run(permittivity, compiled=False)
    assert torch.allclose(compiled, plain, rtol=0, atol=1e-12 * compiled.abs().max())
    value = torch.tensor(permittivity, dtype=torch.float64, requires_grad=True)
    differentiable = run(value)
    assert torch.allclose(differentiable.detach(), compiled, rtol=0, atol=1e-12 * compiled.abs().max())
    (differentiable**2).sum().backward()
    step = 1e-4
    difference = ((run(permittivity + step) ** 2).sum() - (run(permittivity - step) ** 2).sum()) / (2 * step)
    assert float(value.grad) == pytest.approx(float(difference), rel=1e-5)


@pytest.mark.parametrize("polarization", ["TE", "TM"])
def test_compiled_torch_and_differentiable_paths_agree(polarization):
    """The correction after the compiled kernel's H update, after the torch path's, and out of place in a
    differentiable run give the same fields; the gradient of the probe's energy with respect to a dielectric
    insert's permittivity matches central differences."""
    component = "Hz" if polarization == "TE" else "Ez"

    def run(permittivity, compiled=True):
        fill = fdtd.Medium(permittivity)
        sim = _cavity(16, polarization, True, fill=fill, fill_guess=2.0, compiled=compiled)
        return sim.run(steps=400, progress=False)["p"][component]

    _paths_agree(run, 2.0)


@pytest.mark.parametrize("polarization", ["TE", "TM"])
def test_conductors_reaching_into_the_pml_radiate_away(polarization):
    """A tilted PEC plate running through the domain into the PML (staircased there: the CPML terms are
    built on Yee's differences, and the plate changes along the PML's axis, so the simulation warns, naming
    it) and a PEC disk: the pulse scatters and leaves through the PML; the fields
    stay finite and fall below 1e-3 of their peak (measured 1e-7 by step 4000 in TE, as the staircase, and
    6e-8 in TM, where merged cells had rung at 1e-2: a cut cell that the merging missed, an edge weighed
    differently by two of its faces, or a mismatch at the PML's edge would ring or grow)."""
    cell, cells = 1e-4, 60
    size = cells * cell
    corners = [(-1.0, -0.3), (1.0, -0.1), (1.0, -0.05), (-1.0, -0.25)]
    plate = geometry.Polygon([(x * size, y * size) for x, y in corners])
    disk = geometry.Disk((0.1 * size, 0.2 * size), 0.15 * size)
    frequency = SPEED_OF_LIGHT / (15 * cell)
    pulse = fdtd.GaussianPulse(frequency, 0.5 * frequency)
    component = "Hz" if polarization == "TE" else "Ez"
    with pytest.warns(fdtd.PlacementWarning, match=r"structure 0 \(Structure\(Polygon.* changes along x"):
        sim = fdtd.Simulation(
            size=(size, size),
            cell_size=cell,
            polarization=polarization,
            boundary=fdtd.PML(10),
            structures=[fdtd.Structure(plate, fdtd.PEC()), fdtd.Structure(disk, fdtd.PEC())],
            sources=[fdtd.PointDipole((-0.2 * size, 0.1 * size), component, pulse)],
            monitors=[fdtd.FieldProbe("p", (0.25 * size, 0.3 * size), (component,))],
            subpixel=True,
        )
    assert sim._stepper(1).conformal.count > 50
    series = sim.run(steps=4000, progress=False)["p"][component].abs()
    assert bool(torch.isfinite(series).all())
    assert float(series[-500:].max()) < 1e-3 * float(series.max())


@pytest.mark.slow
def test_3d_conductors_reaching_into_the_pml_radiate_away():
    """3D: a PEC rod running through the domain and both z PMLs, and a PEC sphere; the fields near the rod
    and behind it fall below 1e-4 of their peak after 6,000 steps (measured 2e-7 to 6e-6, at probes outside
    the PMLs: both had sat in them until the placement check refused it). Faces at the rim of the
    conformal region (an edge in the PML slab's staircase) keep a whole cell's mass: with a small mass
    there the time step had to fall to 0.39 of Yee's, and with an edge weighed differently by its faces on
    either side of the rim a static magnetic field was left at the rod. The rod, uniform along z, is now
    conformal through the z slabs too; the sphere, which reaches into the x PML, warns (it turns to the
    staircase there)."""
    cell, cells = 1e-4, 30
    size = cells * cell
    rod = geometry.Cylinder((0.05 * size, -0.07 * size, 0.0), 0.12 * size, 2 * size)
    ball = geometry.Sphere((0.2 * size, 0.2 * size, 0.1 * size), 0.12 * size)
    frequency = SPEED_OF_LIGHT / (12 * cell)
    near_rod = (0.05 * size - 0.12 * size - 1.5 * cell, -0.07 * size, 0.1 * size)  # outside the PMLs
    with pytest.warns(fdtd.PlacementWarning, match=r"structure 1 \(Structure\(Sphere"):
        sim = fdtd.Simulation(
            size=(size,) * 3,
            cell_size=cell,
            boundary=fdtd.PML(8),
            structures=[fdtd.Structure(rod, fdtd.PEC()), fdtd.Structure(ball, fdtd.PEC())],
            sources=[fdtd.PointDipole((-0.25 * size, 0.1 * size, 0.05 * size), "Ez",
                                      fdtd.GaussianPulse(frequency, 0.5 * frequency))],
            monitors=[
                fdtd.FieldProbe("behind", (0.18 * size, -0.2 * size, -0.1 * size), ("Ez", "Hx")),
                fdtd.FieldProbe("near", near_rod, ("Ez", "Hy")),
            ],
            subpixel=True,
        )
    assert sim._stepper(1).conformal.count > 500
    assert 0.5 * sim._stability_limit() < sim.dt < 0.8 * sim._stability_limit()
    result = sim.run(steps=6000, progress=False)
    for probe, components in (("behind", ("Ez", "Hx")), ("near", ("Ez", "Hy"))):
        for component in components:
            series = result[probe][component].abs()
            assert bool(torch.isfinite(series).all())
            assert float(series[-500:].max()) < 1e-4 * float(series.max())


def test_3d_cylinder_has_no_spurious_modes_along_its_axis():
    """A cylindrical cavity (its axis along z, the domain's PEC walls as end caps): the merged scheme had
    spurious wall modes for the modes varying along the axis. Within 35 % of TM010 (``J0(kR) = 0``) lie
    exactly the physical TM010, TE111 (twice) and TM011, none at the wall."""
    centre = (0.0371 * RADIUS, -0.0213 * RADIUS, 0.0)
    target = jn_zeros(0, 1)[0] / RADIUS * SPEED_OF_LIGHT / (2 * math.pi)
    sim = _cavity_3d(12, geometry.Cylinder(centre, RADIUS, 4 * SIDE), target, True)
    frequencies, at_wall = _modes_near(sim, target, centre, axis_only=True)
    near = np.abs(frequencies) < 0.35
    assert near.sum() == 4, frequencies
    assert (at_wall[near] < 0.7).all(), (frequencies, at_wall)
