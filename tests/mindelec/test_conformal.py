"""Conformal PEC in 2D TE (:mod:`mindelec.fdtd.conformal`, ``Simulation(subpixel=True)``).

The reference is the circular PEC cavity: its lowest azimuthally uniform TE mode has ``J0'(kR) = 0``
(``Hz``; k R = 3.8317; TM, ``J0(kR) = 0``, keeps the staircase). The cavity is the domain minus a disk
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


def test_circular_cavity_converges_at_second_order():
    """Measured relative error 2.8e-3 .. 2.1e-4 over 16-64 cells, 0.73-0.86 N^-2. The staircase is first
    order and erratic: 1.0e-3 .. 7.3e-2 over the same cells, 8-80x the conformal errors except at 28 cells,
    where the staircase happens to suit the disk (1.0e-3, as the conformal). Asserted at the finest size
    (measured 65x at 48 cells, 81x at 64)."""
    polarization = "TE"
    cells = [12, 16, 20, 24, 28, 32, 40, 48, 64] if FULL else [16, 24, 32, 48]
    errors = np.array([_error(n, polarization, True) for n in cells])
    order = -np.polyfit(np.log(cells), np.log(errors), 1)[0]
    scaled = errors * np.array(cells) ** 2
    assert order > 1.7, (order, errors)  # measured 1.9 on the CI set
    assert scaled.max() / scaled.min() < 2.5, scaled  # a first-order error would grow 3x over 16-48
    staircase = _error(cells[-1], polarization, False)
    assert staircase > 20 * errors[-1], (staircase, errors[-1])


def _h_operator(sim):
    """The matrix ``T`` of the H update's two-step recursion ``H^{n+1} - 2 H^n + H^{n-1} = -T H^n`` (2D, no
    sources), probed through the stepper: H set to one node per 5 x 5 block, E zero; the H change over the
    second of two steps is ``-T H``. The leapfrog is stable when the eigenvalues of ``T`` are at most 4."""
    stepper = sim._stepper(2)
    components = [c for c in sim.active if c[0] == "H"]
    shape = sim.grid.shape
    count = math.prod(shape)
    index = np.indices(shape).reshape(3, -1).T
    operator = np.zeros((len(components) * count,) * 2)
    stride = 5
    with torch.no_grad():
        for column, component in enumerate(components):
            for a in range(stride):
                for b in range(stride):
                    chosen = (index[:, 0] % stride == a) & (index[:, 1] % stride == b)
                    state = stepper.initial_state()
                    state.fields[component].copy_(torch.as_tensor(chosen.reshape(shape), dtype=torch.float64))
                    state = stepper.step(state, 0, inplace=True)
                    first = {c: state.fields[c].clone() for c in components}
                    state = stepper.step(state, 1, inplace=True)
                    for row, other in enumerate(components):
                        change = (first[other] - state.fields[other]).reshape(-1).numpy()
                        hit = np.nonzero(change)[0]
                        source = index[hit, :2] - np.array([a, b])
                        source = np.array([a, b]) + stride * np.round(source / stride).astype(int)
                        source = np.clip(source, 0, np.array(shape[:2]) - 1)
                        flat = source[:, 0] * shape[1] + source[:, 1]
                        operator[row * count + hit, column * count + flat] = change[hit]
    return operator


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
            largest[subpixel] = float(np.linalg.eigvals(_h_operator(sim)).real.max()) / 4
        assert largest[True] < 1.0, (cells, largest)
        assert largest[True] <= largest[False] + 1e-9, (cells, largest)


def test_2d_tm_keeps_the_staircase():
    """In TM the edge between two merged cells (``Ez``) still belongs to the other H component's cells and,
    with its own component's curl gone, carried a spurious wave along the wall (a PEC plate running into the
    PML rang at 1e-2 of the peak for thousands of steps): TM runs keep the staircase."""
    runs = {}
    for subpixel in (False, True):
        sim = _cavity(16, "TM", subpixel)
        assert conformal.conformal_geometry(sim) is None
        runs[subpixel] = sim.run(steps=300, progress=False)["p"]["Ez"]
    assert torch.allclose(runs[False], runs[True], rtol=0, atol=1e-12 * runs[False].abs().max())


@pytest.mark.parametrize("shape", ["sphere", "cylinder"])
def test_3d_runs_keep_the_staircase(shape):
    """In 3D the merged cells gave spurious surface modes (a sphere, and a cylinder for modes varying along
    its axis: eigenvectors of the probed H operator with over 70 % of their weight at the wall, within 10 %
    of the lowest resonance; none with the staircase), so 3D PEC stays staircased with ``subpixel=True``."""
    side = 2.2 * RADIUS
    center = (0.03 * RADIUS, -0.02 * RADIUS, 0.01 * RADIUS)
    hole = geometry.Sphere(center, RADIUS)
    if shape == "cylinder":
        hole = geometry.Cylinder(center, RADIUS, 2 * side)
    wall = geometry.Box((-side,) * 3, (side,) * 3) - hole
    runs = {}
    for subpixel in (False, True):
        sim = fdtd.Simulation(
            size=(side,) * 3,
            cell_size=side / 10,
            structures=[fdtd.Structure(wall, fdtd.PEC())],
            sources=[fdtd.PointDipole((3e-4, 2e-4, 1e-4), "Ez", fdtd.GaussianPulse(1.2e11, 4e10))],
            monitors=[fdtd.FieldProbe("p", (-0.2 * RADIUS, 0.1 * RADIUS, -0.2 * RADIUS), ("Ez",))],
            dtype=torch.float64,
            subpixel=subpixel,
        )
        assert conformal.conformal_geometry(sim) is None
        runs[subpixel] = sim.run(steps=200, progress=False)["p"]["Ez"]
    # equal up to the round-off of the (trivial) permittivity smoothing of a PEC-only set-up
    assert torch.allclose(runs[False], runs[True], rtol=0, atol=1e-12 * runs[False].abs().max())
    assert runs[True].abs().max() > 0


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


def test_compiled_torch_and_differentiable_paths_agree():
    """The correction after the compiled kernel's H update, after the torch path's, and out of place in a
    differentiable run give the same fields; the gradient of the probe's energy with respect to a dielectric
    insert's permittivity matches central differences."""

    def run(permittivity, compiled=True):
        sim = _cavity(16, "TE", True, fill=fdtd.Medium(permittivity), fill_guess=2.0, compiled=compiled)
        return sim.run(steps=400, progress=False)["p"]["Hz"]

    compiled, plain = run(2.0), run(2.0, compiled=False)
    assert torch.allclose(compiled, plain, rtol=0, atol=1e-12 * compiled.abs().max())
    permittivity = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    differentiable = run(permittivity)
    assert torch.allclose(differentiable.detach(), compiled, rtol=0, atol=1e-12 * compiled.abs().max())
    (differentiable**2).sum().backward()
    step = 1e-4
    difference = ((run(2.0 + step) ** 2).sum() - (run(2.0 - step) ** 2).sum()) / (2 * step)
    assert float(permittivity.grad) == pytest.approx(float(difference), rel=1e-5)


def test_conductors_reaching_into_the_pml_radiate_away():
    """A tilted PEC plate running through the domain into the PML (staircased there: the CPML terms are
    built on Yee's differences) and a PEC disk: the pulse scatters and leaves through the PML; the fields
    stay finite and fall below 1e-3 of their peak (measured 1e-7 by step 4000, as the staircase; a cut cell
    that the merging missed, or a mismatch at the PML's edge, would ring or grow)."""
    cell, cells, polarization = 1e-4, 60, "TE"
    size = cells * cell
    corners = [(-1.0, -0.3), (1.0, -0.1), (1.0, -0.05), (-1.0, -0.25)]
    plate = geometry.Polygon([(x * size, y * size) for x, y in corners])
    disk = geometry.Disk((0.1 * size, 0.2 * size), 0.15 * size)
    frequency = SPEED_OF_LIGHT / (15 * cell)
    pulse = fdtd.GaussianPulse(frequency, 0.5 * frequency)
    component = "Hz"
    sim = fdtd.Simulation(
        size=(size, size),
        cell_size=cell,
        polarization=polarization,
        boundary=fdtd.PML(10),
        structures=[fdtd.Structure(plate, fdtd.PEC()), fdtd.Structure(disk, fdtd.PEC())],
        sources=[fdtd.PointDipole((-0.2 * size, 0.1 * size), "Hz", pulse)],
        monitors=[fdtd.FieldProbe("p", (0.25 * size, 0.3 * size), (component,))],
        subpixel=True,
    )
    assert sim._stepper(1).conformal.count > 50
    series = sim.run(steps=4000, progress=False)["p"][component].abs()
    assert bool(torch.isfinite(series).all())
    assert float(series[-500:].max()) < 1e-3 * float(series.max())
