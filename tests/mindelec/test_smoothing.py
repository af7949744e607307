"""Anisotropic subpixel smoothing (Farjadpour et al., Opt. Lett. 31, 2972 (2006)): second-order interfaces.

The reference is the transverse-resonance equation of a 2D PEC cavity of side L, a quarter filled
with a dielectric slab: TE modes ``Hz = X(x) cos(k_y (y + L/2))``, ``k_y = pi / L``, with
``k_i^2 = eps_i omega^2 / c^2 - k_y^2`` in each layer, ``Hz`` and ``(1/eps) dHz/dx`` continuous at the
interface and ``dHz/dx = 0`` on the walls:

    (k1 / eps1) sin(k1 a) cos(k2 b) + (k2 / eps2) sin(k2 b) cos(k1 a) = 0,   a + b = L.

Its ``E_x`` crosses the interface (normal to it), where the arithmetic fill-fraction mean is first-order
accurate and the subpixel average second-order. The interface sits half-way between two integer nodes at
every resolution used (``a N / L = integer + 1/2``), so the first-order error does not change sign.
The FDTD frequency comes from a matrix-pencil fit of a probe's ringing after the source pulse.
"""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq

from common import geometry
from common.units import SPEED_OF_LIGHT
from mindelec import fdtd

SIDE = 1e-3  # cavity side L (m)
PERMITTIVITY = 4.0
FILLED = 0.25 * SIDE  # the slab fills -L/2 < x < -L/2 + a


def _resonance_equation(omega, ky):
    k1 = np.sqrt(complex(PERMITTIVITY * omega**2 / SPEED_OF_LIGHT**2 - ky**2))
    k2 = np.sqrt(complex(omega**2 / SPEED_OF_LIGHT**2 - ky**2))
    rest = SIDE - FILLED
    value = (k1 / PERMITTIVITY) * np.sin(k1 * FILLED) * np.cos(k2 * rest) + k2 * np.sin(k2 * rest) * np.cos(
        k1 * FILLED
    )
    return value.real  # real for real or imaginary k (even in k)


def _lowest_resonance():
    """The lowest TE resonance (Hz) with k_y = pi / L, from the transcendental equation."""
    ky = math.pi / SIDE
    omegas = 2 * math.pi * np.linspace(50e9, 300e9, 2000)
    values = [_resonance_equation(w, ky) for w in omegas]
    for w0, w1, v0, v1 in zip(omegas[:-1], omegas[1:], values[:-1], values[1:]):
        if v0 * v1 < 0:
            return brentq(_resonance_equation, w0, w1, args=(ky,), xtol=1e-6) / (2 * math.pi)
    raise AssertionError("no resonance found")


def _matrix_pencil(signal, dt, order=16):
    """Frequencies (Hz, > 0) of the damped sinusoids in ``signal`` sampled every ``dt`` (Hua, Sarkar 1990)."""
    rows = len(signal) // 3
    hankel = np.array([signal[i : i + rows + 1] for i in range(len(signal) - rows)])
    _, _, right = np.linalg.svd(hankel, full_matrices=False)
    basis = right[:order].conj().T
    poles = np.linalg.eigvals(np.linalg.pinv(basis[:-1]) @ basis[1:])
    frequencies = np.angle(poles) / (2 * math.pi * dt)
    return frequencies[frequencies > 0]


def _fdtd_resonance(cells, subpixel, target):
    slab = fdtd.Structure(
        geometry.Rectangle((-SIDE, -SIDE), (-SIDE / 2 + FILLED, SIDE)), fdtd.Medium(PERMITTIVITY)
    )
    sim = fdtd.Simulation(
        size=(SIDE, SIDE),
        cell_size=SIDE / cells,
        polarization="TE",
        structures=[slab],
        sources=[
            fdtd.PointDipole((0.13 * SIDE, 0.21 * SIDE), "Ex", fdtd.GaussianPulse(target, 0.3 * target))
        ],
        monitors=[fdtd.FieldProbe("p", (-0.31 * SIDE, 0.37 * SIDE), ("Hz",))],
        dtype=torch.float64,
        subpixel=subpixel,
    )
    series = sim.run(until=30 / target, progress=False)["p"]["Hz"].numpy()
    stride = max(1, int(1 / (8 * target * sim.dt)))
    found = _matrix_pencil(series[len(series) // 3 :: stride], sim.dt * stride)
    return float(found[np.argmin(np.abs(found - target))])


def test_cavity_resonance_converges_at_second_order_with_smoothing():
    exact = _lowest_resonance()
    cells = [10, 14, 18, 22]  # a N / L = 2.5, 3.5, 4.5, 5.5 cells: the interface mid-cell each time
    errors = {
        subpixel: [abs(_fdtd_resonance(n, subpixel, exact) - exact) / exact for n in cells]
        for subpixel in (False, True)
    }
    slopes = {key: -np.polyfit(np.log(cells), np.log(value), 1)[0] for key, value in errors.items()}
    # measured: 1.05 (arithmetic mean, errors 1.9e-2 .. 8.3e-3) and 2.01 (smoothed, 6.8e-4 .. 1.4e-4)
    assert 0.8 < slopes[False] < 1.4, (slopes, errors)
    assert 1.7 < slopes[True] < 2.4, (slopes, errors)
    assert all(s < u / 20 for s, u in zip(errors[True], errors[False])), errors


def test_cut_volume_matches_dense_sampling_of_a_tilted_edge():
    """The closed-form planar fill of cells cut by a large disk's edge agrees with 64x64 sub-samples."""
    from mindelec.fdtd.smoothing import _planar_fill

    disk = fdtd.Structure(geometry.Disk((0.0, 0.0), 0.37), fdtd.Medium(2.0))
    axis = torch.linspace(-0.5, 0.5, 51, dtype=torch.float64)
    spacing = float(axis[1] - axis[0])
    points = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), dim=-1).reshape(-1, 2)
    fill, cut, normals = _planar_fill(disk, 0, points, torch.tensor([spacing, spacing], dtype=torch.float64))
    dense = geometry.rasterize(disk.geometry, [axis, axis], [spacing, spacing], supersample=64).reshape(-1)
    assert cut.sum() > 50  # the edge cuts many cells
    # the planar cut misses the arc's sagitta, up to about h / (12 R) = 4.5e-3 of a cell here (measured
    # 5.5e-3 with the sampling's own error); the default 4x4 sampling is off by up to 1/8
    assert torch.allclose(fill, dense, atol=8e-3)
    radial = points[cut] / points[cut].norm(dim=1, keepdim=True)
    assert torch.allclose(normals, radial, atol=1e-12)


def test_tm_and_uniform_media_are_unchanged():
    """Ez in 2D TM is tangential to every interface: smoothing leaves its coefficients as they were."""
    disk = fdtd.Structure(geometry.Disk((0.0, 0.0), 0.3e-3), fdtd.Medium(3.0))
    plain, smoothed = (
        fdtd.Simulation(size=(1e-3, 1e-3), cell_size=0.05e-3, structures=[disk], subpixel=s)._coefficients()
        for s in (False, True)
    )
    assert torch.equal(plain[0]["Ez"][1], smoothed[0]["Ez"][1])
    te = fdtd.Simulation(size=(1e-3, 1e-3), cell_size=0.05e-3, polarization="TE", subpixel=True)
    assert te._coefficients()[0]["Ex"][1] == pytest.approx(te.dt / 8.8541878128e-12)


def test_gradient_through_smoothed_coefficients_matches_finite_differences():
    """The smoothed permittivity stays differentiable in the medium's permittivity (2D TE, curved edge)."""

    def probe_energy(permittivity):
        sim = fdtd.Simulation(
            size=(1e-3, 1e-3),
            cell_size=0.05e-3,
            polarization="TE",
            dtype=torch.float64,
            subpixel=True,
            structures=[fdtd.Structure(geometry.Disk((0.0, 0.0), 0.23e-3), fdtd.Medium(permittivity))],
            sources=[fdtd.PointDipole((0.3e-3, 0.1e-3), "Ex", fdtd.GaussianPulse(150e9, 100e9))],
            monitors=[fdtd.FieldProbe("p", (-0.2e-3, 0.1e-3), ("Hz",))],
        )
        return (sim.run(steps=150, progress=False)["p"]["Hz"] ** 2).sum()

    permittivity = torch.tensor(4.0, dtype=torch.float64, requires_grad=True)
    probe_energy(permittivity).backward()
    step = 1e-4
    central = (probe_energy(4.0 + step) - probe_energy(4.0 - step)) / (2 * step)
    assert float(permittivity.grad) == pytest.approx(float(central), rel=1e-6)  # measured 4e-10
