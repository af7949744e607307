"""mindelec refuses what its grids cannot represent (issue 19, part 7): frequencies beyond the time-step and
spatial Nyquist limits, negative frequencies, source spectra beyond the grid, NaN/inf material values
(naming the object and the cell), and grids larger than the memory, each with the limit in the message.

The limits are checked against independent facts: the DFT of samples taken every dt cannot tell f from
1/dt - f (numpy), a source's -40 dB point is read off a numpy FFT of its waveform, and a medium of
permittivity 4 halves the wavelength (so the spatial limit)."""

import re

import numpy as np
import pytest
import torch

import mindelec as me
from common import threads as threads_module
from common.errors import ConfigurationError, DataError
from common.geometry import Rectangle
from common.units import SPEED_OF_LIGHT

fdtd = me.fdtd
SIZE, CELL_SIZE = (1e-3, 1e-3), 2e-5  # 50 x 50 cells: the spatial limit is c / (2 dx) = 7.49 THz
PULSE = fdtd.GaussianPulse(f0=150e9, fwidth=100e9)


def _simulation(**overrides):
    arguments = dict(
        size=SIZE,
        cell_size=CELL_SIZE,
        boundary=fdtd.PML(8),
        sources=[fdtd.PointDipole((0, 0), "Ez", PULSE)],
        monitors=[fdtd.FieldProbe("p", (2e-4, 0), ("Ez",))],
    )
    arguments.update(overrides)
    return fdtd.Simulation(**arguments)


def _limit_in(message):
    """The limit (Hz) the message states: 'this grid carries at most X Hz'."""
    return float(re.search(r"carries at most ([0-9.e+-]+) Hz", message).group(1))


def test_sampling_every_dt_cannot_tell_f_from_one_over_dt_minus_f():
    """Why the time-step limit: beyond 1/(2 dt) a running DFT aliases (numpy, no mindelec involved)."""
    dt, steps = 1e-12, 4000
    times = np.arange(steps) * dt
    nyquist, offset = 0.5 / dt, 0.1e12
    above, below = nyquist + offset, nyquist - offset
    samples = np.cos(2 * np.pi * above * times)
    # the samples of cos(2 pi (f_N + d) t) and cos(2 pi (f_N - d) t) are identical at t = n dt
    assert np.allclose(samples, np.cos(2 * np.pi * below * times), atol=1e-9)


def test_monitor_frequencies_beyond_the_grid_are_refused_with_the_limit():
    reference = _simulation()
    dx = reference.grid.spacing[0]
    spatial = SPEED_OF_LIGHT / (2 * dx)  # two cells per wavelength in vacuum
    nyquist = 0.5 / reference.dt
    assert nyquist > spatial  # a stable 2D step: 1/(2 dt) >= c sqrt(2) / (2 dx)
    assert reference.max_frequency == pytest.approx(spatial, rel=1e-12)
    for frequency in (1.01 * spatial, 1.01 * nyquist):
        with pytest.raises(ConfigurationError, match="DFTMonitor\\('d'.*beyond the grid's limit") as error:
            _simulation(monitors=[fdtd.DFTMonitor("d", [1e11, frequency], ("Ez",))])
        message = str(error.value)
        assert _limit_in(message) == pytest.approx(spatial, rel=1e-5)
        assert f"1/(2 dt) = {nyquist:.6g} Hz" in message
    with pytest.raises(ConfigurationError, match="FluxMonitor\\('f'"):
        _simulation(monitors=[fdtd.FluxMonitor("f", [1.01 * spatial], center=(0, 0), size=(0, 4e-4))])
    # just below the limit it runs, with a warning: fewer than 10 cells per wavelength
    with pytest.warns(UserWarning, match="fewer than 10 cells per wavelength"):
        _simulation(monitors=[fdtd.DFTMonitor("d", [0.99 * spatial], ("Ez",))])


def test_the_densest_medium_sets_the_spatial_limit():
    vacuum = _simulation().max_frequency
    block = fdtd.Structure(Rectangle((-1e-4, -1e-4), (1e-4, 1e-4)), fdtd.Medium(permittivity=4.0))
    dense = _simulation(structures=[block])
    # permittivity 4: the wavelength is halved, so is the highest frequency with two cells per wavelength
    assert dense.max_frequency == pytest.approx(vacuum / 2, rel=1e-12)
    with pytest.raises(ConfigurationError, match="beyond the grid's limit"):
        _simulation(structures=[block], monitors=[fdtd.DFTMonitor("d", [0.6 * vacuum], ("Ez",))])
    design = fdtd.DesignRegion((0, 0), (2e-4, 2e-4), torch.full((11, 11), 9.0))
    assert _simulation(design_regions=[design]).max_frequency == pytest.approx(vacuum / 3, rel=1e-12)


@pytest.mark.parametrize("frequencies", [[-1e9], [1e11, -2e11], [float("nan")], [float("inf")]])
def test_negative_or_non_finite_monitor_frequencies_are_refused(frequencies):
    with pytest.raises(ConfigurationError, match="DFTMonitor\\('d'\\): frequency .* finite and >= 0"):
        fdtd.DFTMonitor("d", frequencies, ("Ez",))
    with pytest.raises(ConfigurationError, match="FluxMonitor\\('f'\\)"):
        fdtd.FluxMonitor("f", frequencies, center=(0, 0), size=(0, 1e-4))


@pytest.mark.parametrize(
    "waveform", [fdtd.GaussianPulse(f0=3e12, fwidth=2e12), fdtd.Ricker(f0=1e12)], ids=["gaussian", "ricker"]
)
def test_spectrum_limit_is_the_minus_40_db_point_of_the_waveform(waveform):
    dt, steps = 2e-15, 2**17
    values = waveform(torch.arange(steps, dtype=torch.float64) * dt).numpy()
    spectrum = np.abs(np.fft.rfft(values))
    frequencies = np.fft.rfftfreq(steps, dt)
    limit = waveform.spectrum_limit()
    assert np.interp(limit, frequencies, spectrum) / spectrum.max() == pytest.approx(0.01, rel=1e-3)
    beyond = frequencies > limit
    assert spectrum[beyond].max() <= 0.01 * spectrum.max() * (1 + 1e-3)


def test_sources_whose_spectrum_the_grid_cannot_carry_are_refused():
    limit = _simulation().max_frequency  # 7.49 THz
    wide = fdtd.GaussianPulse(f0=4e12, fwidth=3e12)  # -40 dB at 4 + 1.52 * 3 = 8.55 THz
    with pytest.raises(ConfigurationError, match="PointDipole.*spectrum reaches 8.55.* Hz") as error:
        _simulation(sources=[fdtd.PointDipole((0, 0), "Ez", wide)])
    assert _limit_in(str(error.value)) == pytest.approx(limit, rel=1e-5)
    with pytest.raises(ConfigurationError, match="CurrentSource.*Ricker"):
        _simulation(sources=[fdtd.CurrentSource("Ez", fdtd.Ricker(f0=3e12), center=(0, 0), size=(0, 2e-4))])
    with pytest.raises(ConfigurationError, match="PlaneWave.*spectrum reaches"):
        _simulation(
            boundary=(fdtd.PML(8), fdtd.Periodic()), sources=[fdtd.PlaneWave(wide, x0=-2e-4)]
        )
    with pytest.raises(ConfigurationError, match="ContinuousWave.*spectrum reaches 8e\\+12"):
        _simulation(sources=[fdtd.PointDipole((0, 0), "Ez", fdtd.ContinuousWave(8e12))])
    # the same pulse narrowed so that its -40 dB point (4 + 1.52 * 2 = 7.03 THz) fits is accepted
    _simulation(sources=[fdtd.PointDipole((0, 0), "Ez", fdtd.GaussianPulse(f0=4e12, fwidth=2e12))])
    # a plain callable has no stated spectrum and is not checked
    _simulation(sources=[fdtd.PointDipole((0, 0), "Ez", lambda times: torch.sin(1e14 * times))])


def test_fdfd_frequency_beyond_the_spatial_limit_is_refused():
    cells, spacing = 40, 2e-5
    vacuum = torch.ones(cells, cells, dtype=torch.float64)
    limit = SPEED_OF_LIGHT / (2 * spacing)
    sim = me.fdfd.Simulation((cells * spacing,) * 2, spacing, 0.4 * limit, vacuum, pml_thickness=8)
    assert sim.max_frequency == pytest.approx(limit, rel=1e-12)
    with pytest.raises(ConfigurationError, match=re.escape(f"beyond what the grid carries, {limit:.6g} Hz")):
        me.fdfd.Simulation((cells * spacing,) * 2, spacing, 1.01 * limit, vacuum, pml_thickness=8)
    dense = vacuum.clone()
    dense[10:20, 10:20] = 4.0
    with pytest.raises(ConfigurationError, match=re.escape(f"{limit / 2:.6g} Hz") + ".*eps_r = 4"):
        me.fdfd.Simulation((cells * spacing,) * 2, spacing, 0.6 * limit, dense, pml_thickness=8)


def test_fdfd_refuses_nan_or_inf_permittivity_and_sources_naming_the_cell():
    cells, spacing = 40, 2e-5
    permittivity = torch.ones(cells, cells, dtype=torch.float64)
    permittivity[12, 30] = float("nan")
    permittivity[20, 5] = float("inf")
    with pytest.raises(DataError, match="permittivity is not finite at cell \\(12, 30\\): nan \\(2 cells"):
        me.fdfd.Simulation((cells * spacing,) * 2, spacing, 1e12, permittivity, pml_thickness=8)
    sim = me.fdfd.Simulation((cells * spacing,) * 2, spacing, 1e12, torch.ones_like(permittivity), 8)
    source = sim.point_source((0.0, 0.0))
    source[3, 4] = complex("nan")
    with pytest.raises(DataError, match="source is not finite at cell \\(3, 4\\)"):
        sim.solve(source)


def test_nan_and_inf_materials_are_refused_naming_the_object_and_cell():
    with pytest.raises(DataError, match="Medium\\(permittivity=nan\\): permittivity is not finite: nan"):
        fdtd.Medium(permittivity=float("nan"))
    with pytest.raises(DataError, match="Medium: conductivity is not finite: inf"):
        fdtd.Medium(conductivity=float("inf"))
    values = torch.full((11, 11), 2.0)
    values[4, 7] = float("inf")
    expected = "permittivity of DesignRegion\\(center=\\(0.0, 0.0\\).*cell \\(4, 7\\): inf"
    with pytest.raises(DataError, match=expected):
        fdtd.DesignRegion((0, 0), (2e-4, 2e-4), values)
    values[4, 7] = float("nan")
    with pytest.raises(DataError, match="cell \\(4, 7\\): nan"):
        fdtd.DesignRegion((0, 0), (2e-4, 2e-4), values)


def test_a_design_changed_in_place_to_nan_is_refused_when_the_run_starts():
    """Issue 19: a NaN design permittivity was caught 256 steps late as 'negative permittivity'."""
    design = torch.full((11, 11), 2.0, requires_grad=True)
    sim = _simulation(design_regions=[fdtd.DesignRegion((0, 0), (2e-4, 2e-4), design)])
    with torch.no_grad():
        design[5, 2] = float("nan")  # e.g. an optimiser step that went wrong
    with pytest.raises(DataError, match="DesignRegion.*not finite at cell \\(5, 2\\)"):
        sim.run(steps=300, progress=False)
    medium = fdtd.Medium(permittivity=torch.full((50, 50), 1.0))
    block = fdtd.Structure(Rectangle((-1e-4, -1e-4), (1e-4, 1e-4)), medium)
    sim = _simulation(structures=[block])
    medium.permittivity[10, 20] = float("inf")
    expected = "structure 0 \\(Rectangle.*Medium: permittivity is not finite at cell \\(10, 20\\)"
    with pytest.raises(DataError, match=expected):
        sim.run(steps=5, progress=False)


def test_a_grid_typed_in_the_wrong_unit_is_refused_before_allocation():
    # 1 m at 1e-5 m per cell in 3D: 1e15 cells, 6 fields of 4 bytes: at least 2.4e16 bytes (2.2e7 GiB)
    with pytest.raises(ConfigurationError, match="needs about ([0-9.e+]+) GiB") as error:
        fdtd.Simulation(size=(1.0, 1.0, 1.0), cell_size=1e-5)
    needed = float(re.search(r"needs about ([0-9.e+]+) GiB", str(error.value)).group(1))
    assert needed >= 1e15 * 6 * 4 / 2**30
    assert "1e+15 cells" in str(error.value) and "in metres" in str(error.value)


def test_memory_refusal_counts_fields_and_snapshots(monkeypatch):
    sim = _simulation(monitors=[fdtd.Snapshots("s", every=1, components=("Ez",))])
    base = sim.memory_estimate()
    # 2D TM in vacuum: Ez, Hx, Hy and one buffer of 50 x 50 float32 values
    assert base == 50 * 50 * 4 * 4
    # 1000 snapshots of Ez add 1000 frames of 50 x 50 float32 values
    assert sim.memory_estimate(steps=1000) == base + 1000 * 50 * 50 * 4
    monkeypatch.setattr(threads_module, "available_memory", lambda device: base + 100 * 50 * 50 * 4)
    sim.run(steps=50, progress=False)
    with pytest.raises(ConfigurationError, match="GiB, more than the"):
        sim.run(steps=1000, progress=False)
    monkeypatch.setattr(threads_module, "available_memory", lambda device: base - 1)
    with pytest.raises(ConfigurationError, match="50 x 50 cells"):
        _simulation()

