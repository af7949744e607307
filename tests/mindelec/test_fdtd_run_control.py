"""run(until_decayed=...): a lossless cavity never decays, an open domain stops once its fields have gone."""

import pytest
import torch

import mindelec as me
from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT

fdtd = me.fdtd
SPACING = 1e-4
FREQUENCY = SPEED_OF_LIGHT / (20 * SPACING)


def _simulation(boundary, waveform, monitors=(), **overrides):
    return fdtd.Simulation(
        size=(60 * SPACING, 50 * SPACING),
        cell_size=SPACING,
        boundary=boundary,
        sources=[fdtd.PointDipole((3 * SPACING, 2 * SPACING), "Ez", waveform)],
        monitors=list(monitors),
        **overrides,
    )


def test_lossless_cavity_runs_to_the_maximum():
    """A PEC cavity keeps its energy (test_energy_conserved_in_closed_pec_box): no decay, no early stop."""
    waveform = fdtd.GaussianPulse(FREQUENCY, FREQUENCY)
    sim = _simulation(fdtd.PEC(), waveform)
    maximum = 3 * waveform.duration
    result = sim.run(until=maximum, until_decayed=1e-3, progress=False)
    assert result.steps == sim._steps(maximum, None)
    assert result.metadata["decayed"] is False


def test_open_domain_stops_after_the_source_once_the_probe_has_decayed():
    # a late pulse: the fields are ~0 before it, which must not count as decayed
    waveform = fdtd.GaussianPulse(FREQUENCY, FREQUENCY, delay=40 / FREQUENCY)
    probe = fdtd.FieldProbe("p", position=(-5 * SPACING, 0), components=("Ez",))
    sim = _simulation(fdtd.PML(10), waveform, monitors=[probe])
    maximum = 20 * waveform.duration
    decay = fdtd.Decay(threshold=1e-4, probe="p", check_every=20)
    result = sim.run(until=maximum, until_decayed=decay, progress=False)
    assert result.metadata["decayed"] is True
    assert result.steps < sim._steps(maximum, None) / 2  # stopped well before the maximum
    assert float(result.times[-1]) > waveform.duration  # not before the source turned off
    assert result.steps % decay.check_every == 0 and result.times.shape == (result.steps,)
    # the probe's own record: the last check window is below 1e-4 of the run's peak, the one before is not
    power = result["p"]["Ez"].double() ** 2
    assert float(power[-20:].max()) <= 1e-4 * float(power.max())
    assert float(power[-40:-20].max()) > 1e-4 * float(power.max())


def test_open_domain_stops_on_the_field_energy():
    waveform = fdtd.GaussianPulse(FREQUENCY, FREQUENCY)
    sim = _simulation(fdtd.PML(10), waveform)
    result = sim.run(until=30 * waveform.duration, until_decayed=1e-6, progress=False)
    assert result.metadata["decayed"] is True
    assert waveform.duration < float(result.times[-1]) < 10 * waveform.duration


def test_until_decayed_refusals():
    waveform = fdtd.GaussianPulse(FREQUENCY, FREQUENCY)
    with pytest.raises(ConfigurationError, match="threshold must lie in"):
        fdtd.Decay(threshold=2.0)
    with pytest.raises(ConfigurationError, match="no FieldProbe named 'q'"):
        _simulation(fdtd.PML(10), waveform).run(steps=10, until_decayed=fdtd.Decay(probe="q"), progress=False)
    design = fdtd.DesignRegion(
        center=(0, 0),
        size=(4 * SPACING, 4 * SPACING),
        permittivity=torch.full((5, 5), 2.0, requires_grad=True),
    )
    sim = _simulation(fdtd.PML(10), waveform, design_regions=[design])
    with pytest.raises(ConfigurationError, match="differentiable"):
        sim.run(steps=10, until_decayed=1e-3, progress=False)
