"""Lumped ports and resistors in 3D FDTD, against circuit values and thin-wire dipole theory.

* A port closing a one-cell-high loop of PEC wire through a 100 ohm lumped resistor: at low frequency
  the loop is a series R-L circuit, so Re Z_in is the resistor's 100 ohm and Im Z_in / omega a constant
  positive inductance; the power the port delivers is what its source makes available times
  ``1 - |S11|^2`` (this checks the Norton source's normalisation against the waveform).
* A thin half-wave dipole in free space, a wire of zeroed Ez edges (equivalent radius about 0.2 cells,
  ``me.fdtd.thin_wire.BARE_RADIUS``) fed by a one-cell gap: at its first series resonance the input
  resistance is the classical thin-wire value, 73 ohm within 10 % (King's theory gives 73 + j42.5 ohm at
  L = lambda/2 for a vanishing radius; a wire of radius a resonates slightly below lambda/2, at a
  resistance of 65-73 ohm). At L = lambda/2 itself this model reads 108 + j75 ohm (21 cells) and
  97 + j65 ohm (41 cells), not 73 + j42.5: its resonance sits at L = 0.445 and 0.46 lambda, as if the
  wire were about 1.3 cells longer than its zeroed edges, so the test compares at the resonance. (For
  a radius of 0.135 cells, L/a = 156 and 304, the moment-method dipole of ``tests/mindelec/test_thin_wire.py``
  gives 94 + j44 and 89 + j46 ohm at L = lambda/2 and resonances at 0.469 and 0.473 lambda with 72.7 and
  72.2 ohm: King's 73 + j42.5 belongs to a vanishing radius. ``me.fdtd.ThinWire`` models a wire of a given
  radius, ends half a cell beyond its zeroed edges; that file tests it.)
  ``MINDELEC_DIPOLE_CELLS`` selects the wire length in cells (default 21; 41 for the finer validation).
"""

import math
import os

import numpy as np
import pytest
import skrf
import torch

import mindelec as me
from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT

CELL = 1e-3


def _loop(frequencies, until=3e-9):
    waveform = me.fdtd.GaussianPulse(f0=1.5e9, fwidth=3e9)
    port = me.fdtd.LumpedPort(
        "feed", center=(0, 0, CELL / 2), size=(CELL, CELL, CELL), waveform=waveform, frequencies=frequencies
    )
    load = me.fdtd.lumped_resistor(
        center=(4 * CELL, 0, CELL / 2), size=(CELL,) * 3, axis="z", resistance=100.0
    )
    wires = [
        me.fdtd.pec_sheet(center=(2 * CELL, 0, z), size=(4 * CELL, 0, 0), cell_size=CELL) for z in (0, CELL)
    ]
    sim = me.fdtd.Simulation(
        size=(24 * CELL,) * 3,
        cell_size=CELL,
        boundary=me.fdtd.PML(thickness=8),
        structures=[*wires, load, port.resistor],
        sources=[port.source],
        monitors=[port],
        dtype=torch.float64,
        threads=1,
    )
    return port, sim.run(until=until, progress=False)


def test_port_into_a_resistor_loop_sees_the_series_circuit(tmp_path):
    frequencies = torch.tensor([0.2e9, 0.4e9, 0.7e9, 1.0e9])
    port, result = _loop(frequencies)
    output = result["feed"]
    impedance = output["impedance"]
    assert torch.allclose(impedance.real, torch.full_like(impedance.real, 100.0), rtol=1e-2)
    inductance = impedance.imag / (2 * math.pi * frequencies)
    assert float(inductance.min()) > 0
    assert float(inductance.max() - inductance.min()) < 0.02 * float(inductance.mean())
    s11 = output["s11"]
    assert torch.allclose(s11, (impedance - 50) / (impedance + 50))
    delivered = output["incident_power"] * (1 - s11.abs() ** 2)
    assert torch.allclose(output["accepted_power"], delivered, rtol=1e-2)
    written = port.write_touchstone(result, tmp_path / "loop")
    network = skrf.Network(written)
    assert np.allclose(network.f, frequencies.numpy())
    assert np.allclose(network.s[:, 0, 0], s11.numpy(), atol=1e-6)
    assert np.allclose(network.z0, 50.0)


def test_port_warns_when_the_run_stops_before_the_gap_voltage_decays():
    with pytest.warns(UserWarning, match="truncated record"):
        _loop(torch.tensor([1e9]), until=0.3e-9)


def test_port_off_the_yee_cells_is_refused():
    waveform = me.fdtd.GaussianPulse(f0=1.5e9, fwidth=3e9)
    port = me.fdtd.LumpedPort(
        "feed", center=(0, 0, 0), size=(CELL,) * 3, waveform=waveform, frequencies=[1e9]
    )
    with pytest.raises(ConfigurationError, match="feed.*node plane"):
        me.fdtd.Simulation(size=(12 * CELL,) * 3, cell_size=CELL, sources=[port.source], monitors=[port])
    with pytest.raises(ConfigurationError, match="3D"):
        me.fdtd.Simulation(size=(12 * CELL,) * 2, cell_size=CELL, monitors=[port])
    with pytest.raises(ConfigurationError, match="impedance"):
        me.fdtd.LumpedPort("feed", (0, 0, 0), (CELL,) * 3, waveform, [1e9], impedance=-50)


def test_port_whose_gap_lies_in_pec_is_refused_before_the_run():
    """No current can cross a gap a PEC block covers: refused when the run starts, naming the port."""
    waveform = me.fdtd.GaussianPulse(f0=1.5e9, fwidth=3e9)
    port = me.fdtd.LumpedPort("feed", center=(0, 0, CELL / 2), size=(CELL,) * 3, waveform=waveform,
                              frequencies=[1e9])
    from common.geometry import Box

    block = me.fdtd.Structure(Box((-2 * CELL,) * 3, (2 * CELL,) * 3), me.fdtd.PEC())
    simulation = me.fdtd.Simulation(size=(12 * CELL,) * 3, cell_size=CELL, boundary=me.fdtd.PML(thickness=3),
                                    structures=[block, port.resistor], sources=[port.source], monitors=[port])
    with pytest.raises(ConfigurationError, match="'feed'.*1 of its 1 gap edges lie inside a PEC"):
        simulation.run(steps=5, progress=False)


def _dipole_run(cells, ratios, monitors=lambda frequencies, box: []):
    """Run a ``cells``-long wire dipole fed at its centre by a 50 ohm port, at ``ratios`` x the frequency of
    L = lambda/2; ``monitors(frequencies, box)`` adds monitors on a closed box 2 cells inside the PML.
    Returns ``(frequencies, result)``."""
    margin, pml = max(8, cells // 3), 8
    lower, upper = cells // 2, cells - 1 - cells // 2  # arm lengths in cells around the one-cell gap
    across = 2 * (margin + pml + 1)
    along = 2 * (max(lower, upper + 1) + margin + pml)
    half_wave = SPEED_OF_LIGHT / (2 * cells * CELL)
    frequencies = torch.as_tensor(ratios, dtype=torch.float64) * half_wave
    waveform = me.fdtd.GaussianPulse(f0=half_wave, fwidth=1.2 * half_wave)
    port = me.fdtd.LumpedPort(
        "feed", center=(0, 0, CELL / 2), size=(CELL,) * 3, waveform=waveform, frequencies=frequencies
    )
    arms = [
        me.fdtd.pec_sheet(center=(0, 0, -lower * CELL / 2), size=(0, 0, lower * CELL), cell_size=CELL),
        me.fdtd.pec_sheet(center=(0, 0, (1 + upper / 2) * CELL), size=(0, 0, upper * CELL), cell_size=CELL),
    ]
    box = ((across - 2 * pml - 4) * CELL, (across - 2 * pml - 4) * CELL, (along - 2 * pml - 4) * CELL)
    sim = me.fdtd.Simulation(
        size=(across * CELL, across * CELL, along * CELL),
        cell_size=CELL,
        boundary=me.fdtd.PML(thickness=pml),
        structures=[*arms, port.resistor],
        sources=[port.source],
        monitors=[port, *monitors(frequencies, box)],
        threads=1,
    )
    return frequencies / half_wave, sim.run(until=40 * cells * CELL / SPEED_OF_LIGHT, progress=False)


def _dipole(cells):
    """Input impedance ``(frequencies / f_half, Z)`` of a ``cells``-long wire dipole fed at its centre."""
    ratio, result = _dipole_run(cells, torch.linspace(0.7, 1.2, 26))
    return ratio.numpy(), result["feed"]["impedance"].numpy()


def test_half_wave_dipole_power_balance_pattern_and_directivity():
    """What the port accepts leaves through a closed flux box and reaches the far field (lossless wire in
    vacuum); at L = lambda/2 the pattern is the half-wave dipole's cos(pi/2 cos theta)/sin theta and the
    directivity 1.64 (thin-wire theory), within 2 % (measured 1.67)."""
    ratio, result = _dipole_run(
        21, [0.9, 1.0],
        lambda frequencies, box: [me.fdtd.FluxBox("box", frequencies, (0, 0, 0), box),
                                  me.fdtd.NearToFarMonitor("far", frequencies, (0, 0, 0), box)],
    )
    accepted = result["feed"]["accepted_power"]
    far = result["far"]
    assert torch.allclose(result["box"]["flux"].double(), accepted, rtol=5e-3)
    assert torch.allclose(far.radiated_power.double(), accepted, rtol=5e-3)
    assert torch.allclose(far.efficiency(accepted).double(), torch.ones(2, dtype=torch.float64), rtol=5e-3)
    assert float(far.directivity()[1]) == pytest.approx(1.64, rel=0.02)
    theta = torch.linspace(0.2, math.pi - 0.2, 41, dtype=torch.float64)
    intensity = far.intensity(theta, torch.zeros_like(theta))[1].double()
    half_wave = (torch.cos(math.pi / 2 * torch.cos(theta)) / torch.sin(theta)) ** 2
    normalised = intensity / intensity.max()
    # within 3 % of the peak (measured 2.3 %: the wire's current is not exactly sinusoidal), and clearly
    # not a short dipole's sin^2 theta (13 % away)
    assert (normalised - half_wave / half_wave.max()).abs().max() < 0.03
    assert (normalised - torch.sin(theta) ** 2).abs().max() > 0.1


def test_half_wave_dipole_resonates_at_the_thin_wire_resistance():
    cells = int(os.environ.get("MINDELEC_DIPOLE_CELLS", "21"))
    ratio, impedance = _dipole(cells)
    crossing = np.nonzero((impedance.imag[:-1] < 0) & (impedance.imag[1:] >= 0))[0]
    assert len(crossing) == 1, impedance
    k = crossing[0]
    weight = -impedance.imag[k] / (impedance.imag[k + 1] - impedance.imag[k])
    resonance = ratio[k] + weight * (ratio[k + 1] - ratio[k])
    resistance = impedance.real[k] + weight * (impedance.real[k + 1] - impedance.real[k])
    print(f"{cells} cells: series resonance at L = {resonance / 2:.3f} lambda, R = {resistance:.1f} ohm")
    assert 0.8 < resonance < 1.0  # a wire of finite radius resonates below L = lambda / 2
    assert resistance == pytest.approx(73.0, rel=0.10)


def test_resistor_conductivity_acts_on_its_axis_only():
    from common.geometry import Box

    dielectric = me.fdtd.Structure(Box((-1, -1, -1), (1, 1, 1)), me.fdtd.Medium(permittivity=2.2))
    resistor = me.fdtd.lumped_resistor(
        center=(0, 0, CELL), size=(CELL, CELL, 2 * CELL), axis="z", resistance=50.0
    )
    assert resistor.medium.conductivity == pytest.approx(2 * CELL / (50.0 * CELL * CELL))
    sim = me.fdtd.Simulation(size=(8 * CELL,) * 3, cell_size=CELL, structures=[dielectric, resistor])
    electric, _ = sim._coefficients()
    ca_z = torch.as_tensor(electric["Ez"][0])
    assert int((ca_z < 1).sum()) == 2  # the two series Ez edges of the resistor, nothing else
    for component in ("Ex", "Ey"):
        ca, cb = electric[component][:2]
        assert torch.all(torch.as_tensor(ca) == 1)  # lossless: the resistor leaves them alone
        assert torch.allclose(
            torch.as_tensor(cb), torch.as_tensor(sim.dt / (8.8541878128e-12 * 2.2)), rtol=1e-5
        )
    with pytest.raises(ValueError, match="zero extent"):
        me.fdtd.pec_sheet((0, 0, 0), (CELL, CELL, CELL), cell_size=CELL)
