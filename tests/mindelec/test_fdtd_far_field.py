"""Closed-box flux and near-to-far-field transform against the Hertzian dipole (Balanis ch. 4).

One run of a z-dipole in vacuum (PML around it) carries a FluxBox, a NearToFarMonitor and, for
contrast, six FluxMonitor planes on the same box at 10 cells from the source. The analytic power
of a current moment ``I l`` is ``eta0 k^2 |I l|^2 / (12 pi)`` time-averaged for a peak phasor; in the
monitors' convention (``Re E x conj H`` of the DFT spectra, no 1/2) that is ``eta0 k^2 |I l(f)|^2 / (6 pi)``
with ``I l(f)`` the DFT of the source's moment, ``amplitude * waveform`` at the E update times.
"""

import math

import matplotlib
import numpy as np
import pytest
import torch

import mindelec as me
from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT, VACUUM_IMPEDANCE

matplotlib.use("Agg")
fdtd = me.fdtd

SPACING = 1e-3
CELLS = 50
HALF_SIDE = 10  # cells from the source to the box faces
WAVELENGTH = 25 * SPACING


def _analytic_power(waveform, frequencies, dt, steps):
    """``eta0 k^2 |I l(f)|^2 / (6 pi)`` for the unit-amplitude dipole (W/Hz^2)."""
    times = (torch.arange(steps, dtype=torch.float64) + 0.5) * dt  # E sources act at (n + 1/2) dt
    moment = (waveform(times)[:, None] * torch.exp(-2j * math.pi * frequencies[None] * times[:, None])).sum(
        0
    ) * dt
    k = 2 * math.pi * frequencies / SPEED_OF_LIGHT
    return VACUUM_IMPEDANCE * k**2 * moment.abs() ** 2 / (6 * math.pi)


@pytest.fixture(scope="module")
def dipole_run():
    frequency = SPEED_OF_LIGHT / WAVELENGTH
    waveform = fdtd.GaussianPulse(frequency, 0.5 * frequency)
    frequencies = torch.tensor([0.8, 1.0, 1.2], dtype=torch.float64) * frequency
    box = dict(center=(0, 0, 0), size=(2 * HALF_SIDE * SPACING,) * 3)
    half = HALF_SIDE * SPACING
    planes = [
        fdtd.FluxMonitor(
            f"plane{axis}{sign}",
            frequencies,
            center=tuple(sign * half if a == axis else 0 for a in range(3)),
            size=tuple(0 if a == axis else 2 * half for a in range(3)),
        )
        for axis in range(3)
        for sign in (-1, 1)
    ]
    length = CELLS * SPACING
    sim = fdtd.Simulation(
        size=(length,) * 3,
        cell_size=SPACING,
        boundary=fdtd.PML(10),
        dtype=torch.float64,
        # Ez lives half a cell up along z: the dipole sits on its node, centred in the box
        sources=[fdtd.PointDipole((0, 0, 0.5 * SPACING), "Ez", waveform)],
        monitors=[fdtd.FluxBox("box", frequencies, **box), fdtd.NearToFarMonitor("far", frequencies, **box)]
        + planes,
    )
    result = sim.run(until=waveform.duration + 3 * length / SPEED_OF_LIGHT, progress=False)
    power = _analytic_power(waveform, frequencies, sim.dt, 2 * result.steps)
    return result, power


def test_flux_box_gives_the_dipole_power_where_six_planes_over_count(dipole_run):
    result, power = dipole_run
    assert torch.allclose(result["box"]["flux"] / power, torch.ones_like(power), atol=0.02)
    faces = result["box"]["faces"]
    assert set(faces) == {"-x", "+x", "-y", "+y", "-z", "+z"}
    assert torch.allclose(sum(faces.values()), result["box"]["flux"])
    planes = sum(sign * result[f"plane{axis}{sign}"]["flux"] for axis in range(3) for sign in (-1, 1))
    assert bool((planes / power > 1.03).all())  # the shared edges counted twice (the 5.6 %)


def test_near_to_far_pattern_follows_sin_squared(dipole_run):
    far = dipole_run[0]["far"]
    theta = torch.linspace(0.05, math.pi - 0.05, 60, dtype=torch.float64)
    for phi in (0.0, 0.9, 2.5):
        intensity = far.intensity(theta, torch.full_like(theta, phi))
        equator = far.intensity(torch.tensor(math.pi / 2), torch.tensor(phi))
        assert torch.allclose(intensity / equator[:, None], torch.sin(theta) ** 2, atol=0.01)


@pytest.mark.slow
def test_near_to_far_directivity_and_power(dipole_run):
    far = dipole_run[0]["far"]
    power = dipole_run[1]
    assert torch.allclose(far.directivity(), torch.full_like(power, 1.5), rtol=0.01)
    assert torch.allclose(far.directivity(math.pi / 2, 1.0), torch.full_like(power, 1.5), rtol=0.01)
    assert torch.allclose(far.radiated_power / power, torch.ones_like(power), atol=0.02)
    # both from one far-field pass: the same power, and the peak a Hertzian dipole's 1.5 P / (4 pi)
    radiated, peak = far.power_and_peak()
    assert torch.allclose(radiated, far.radiated_power, rtol=1e-12, atol=0.0)
    assert torch.allclose(4 * math.pi * peak / radiated, far.directivity(), rtol=1e-12, atol=0.0)
    assert torch.allclose(peak / power, torch.full_like(power, 1.5 / (4 * math.pi)), rtol=0.03)
    # a lossless dipole fed with exactly the power it radiates: efficiency 1, gain = directivity
    assert torch.allclose(far.efficiency(power), torch.ones_like(power), atol=0.02)
    assert torch.allclose(far.gain(power), far.directivity(), rtol=0.02)
    e_theta, e_phi = far.pattern(torch.tensor([[0.5, 1.0]]), 0.0)
    assert e_theta.shape == (3, 1, 2) and e_theta.dtype == torch.complex128
    assert bool((e_phi.abs() < 0.01 * e_theta.abs()).all())  # a z-dipole radiates E_theta only
    # one frequency of the result gives that frequency's figures, from its own currents
    last = far.at_frequency(-1)
    assert torch.equal(far.at_frequency(np.int64(2))["frequencies"], last["frequencies"])
    assert last["frequencies"].tolist() == far["frequencies"][-1:].tolist()
    assert torch.allclose(last.directivity(), far.directivity()[-1:], rtol=1e-12, atol=0.0)
    assert torch.allclose(last.gain(power[-1]), far.gain(power)[-1:], rtol=1e-12, atol=0.0)
    assert torch.allclose(last.radiated_power, far.radiated_power[-1:], rtol=1e-12, atol=0.0)
    assert not torch.allclose(far.at_frequency(0).radiated_power, last.radiated_power, rtol=0.05, atol=0.0)
    for index in (3, -4, 1.0):
        with pytest.raises(ConfigurationError, match=r"at_frequency: index must be an integer in \[-3, 3\)"):
            far.at_frequency(index)


def test_pattern_plots_draw(dipole_run):
    far = dipole_run[0]["far"]
    polar = far.plot_polar(phi=0.0)
    # the elevation cut of a z-dipole: a null along the axis, its maximum 1.76 dBi at broadside
    values = polar.lines[0].get_ydata()
    assert values.max() == pytest.approx(10 * math.log10(1.5), abs=0.05)
    assert far.plot_3d(points=(9, 17)).name == "3d"
    with pytest.raises(ConfigurationError, match="phi .* or theta"):
        far.plot_polar(phi=0.0, theta=1.0)


def test_flux_box_and_near_to_far_refuse_bad_set_ups():
    sim_args = dict(size=(20e-3,) * 3, cell_size=SPACING, boundary=fdtd.PML(4))
    with pytest.raises(ConfigurationError, match="FluxBox\\('box'.*inside the domain"):
        fdtd.Simulation(
            **sim_args, monitors=[fdtd.FluxBox("box", [1e9], center=(0, 0, 0), size=(20e-3, 4e-3, 4e-3))]
        )
    with pytest.raises(ConfigurationError, match="3D simulation"):
        fdtd.Simulation(
            size=(20e-3,) * 2,
            cell_size=SPACING,
            monitors=[fdtd.NearToFarMonitor("far", [1e9], center=(0, 0), size=(8e-3, 8e-3))],
        )
    with pytest.raises(ConfigurationError, match="default medium must be vacuum"):
        fdtd.Simulation(
            **sim_args,
            default_medium=fdtd.Medium(permittivity=2.0),
            monitors=[fdtd.NearToFarMonitor("far", [1e9], center=(0, 0, 0), size=(8e-3,) * 3)],
        )
    with pytest.raises(ConfigurationError, match="positive extents"):
        fdtd.Simulation(
            **sim_args, monitors=[fdtd.FluxBox("box", [1e9], center=(0, 0, 0), size=(4e-3, 0, 4e-3))]
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_flux_box_in_2d_gives_the_line_source_power(dtype):
    """TM line current ``I`` along z: radiated power per unit length ``eta0 k |I(f)|^2 / 4`` in the
    monitors' convention (twice the time average ``eta0 k |I|^2 / 8`` of a peak phasor)."""
    frequency = SPEED_OF_LIGHT / WAVELENGTH
    waveform = fdtd.GaussianPulse(frequency, 0.5 * frequency)
    frequencies = torch.tensor([0.9, 1.1], dtype=torch.float64) * frequency
    length = 80 * SPACING
    sim = fdtd.Simulation(
        size=(length, length),
        cell_size=SPACING,
        boundary=fdtd.PML(15),
        dtype=dtype,
        sources=[fdtd.PointDipole((0, 0), "Ez", waveform)],
        monitors=[fdtd.FluxBox("box", frequencies, center=(0, 0), size=(20 * SPACING, 20 * SPACING))],
    )
    result = sim.run(until=waveform.duration + 4 * length / SPEED_OF_LIGHT, progress=False)
    times = (torch.arange(2 * result.steps, dtype=torch.float64) + 0.5) * sim.dt
    current = (waveform(times)[:, None] * torch.exp(-2j * math.pi * frequencies * times[:, None])).sum(
        0
    ) * sim.dt
    k = 2 * math.pi * frequencies / SPEED_OF_LIGHT
    expected = VACUUM_IMPEDANCE * k * current.abs() ** 2 / 4
    flux = result["box"]["flux"]
    assert flux.dtype == torch.float64  # fluxes come in double precision whatever the run's dtype
    assert torch.allclose(flux.double() / expected, torch.ones_like(expected), atol=0.02)


def test_decimated_dft_matches_the_every_step_dft():
    """Within the sources' band the DFTs sample every stride-th step; a waveform that does not state its
    spectrum (a plain function) gets every step. Both give the same DFT fields and flux."""
    frequency = SPEED_OF_LIGHT / WAVELENGTH
    pulse = fdtd.GaussianPulse(frequency, 0.5 * frequency)
    frequencies = torch.tensor([0.7, 1.0, 1.3], dtype=torch.float64) * frequency
    length = 40 * SPACING
    results = []
    for waveform in (pulse, lambda times: pulse(times)):
        sim = fdtd.Simulation(
            size=(length, length),
            cell_size=SPACING,
            boundary=fdtd.PML(10),
            dtype=torch.float64,
            sources=[fdtd.PointDipole((0, 0), "Ez", waveform)],
            monitors=[
                fdtd.DFTMonitor(
                    "dft", frequencies, ("Ez", "Hx"), center=(0, 0), size=(10 * SPACING, 10 * SPACING)
                ),
                fdtd.FluxBox("box", frequencies, center=(0, 0), size=(10 * SPACING, 10 * SPACING)),
            ],
        )
        strides = [recorder.stride for recorder in sim._recorders()]
        results.append((strides, sim.run(until=pulse.duration + 3 * length / SPEED_OF_LIGHT, progress=False)))
    (decimated_strides, decimated), (full_strides, full) = results
    assert min(decimated_strides) >= 4 and full_strides == [1, 1]
    for component in ("Ez", "Hx"):
        scale = full["dft"][component].abs().max()
        assert float((decimated["dft"][component] - full["dft"][component]).abs().max() / scale) < 1e-4
    assert torch.allclose(decimated["box"]["flux"], full["box"]["flux"], rtol=1e-4)
