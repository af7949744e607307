"""Transmission lines in 3D FDTD between mode ports that cut their metal, against closed forms and circuit
theory: a microstrip through-line's impedance (from the FDTD's own fields) and effective permittivity (from
the phase of S21) against Hammerstad-Jensen / Kirschning-Jansen; an open-circuit shunt stub's notch against
an ideal-line circuit (scikit-rf) built on the mode solver's own Z0 and beta; and the refusals of ports that
cannot define a line's impedance.

A zero-thickness strip converges at first order in the cell size (its edge field is singular: the strip looks
about 0.7 cell wider), so the through-line is run at 0.8 and 0.4 mm cells and compared after the first-order
Richardson extrapolation ``2 X(d/2) - X(d)``, as tests/mindelec/test_lines.py does for the 2D solvers.
"""

import math

import numpy as np
import pytest
import torch

from common.errors import ConfigurationError
from common.geometry import Box
from common.units import SPEED_OF_LIGHT
from mindelec import fdtd, line_impedance, lines, modes, ports

# an FR4 microstrip, strip 3.2 mm on 1.6 mm (Hammerstad-Jensen 48.7 ohm, eps_eff 3.34)
STRIP, SUBSTRATE, FR4 = 3.2e-3, 1.6e-3, 4.4


def _microstrip(size, cell, strip_y=0.0):
    """The substrate on the bottom wall (the ground) and the strip along x, a pec_sheet on it."""
    top = -size[2] / 2 + SUBSTRATE
    return [
        fdtd.Structure(Box((-1.0, -1.0, -1.0), (1.0, 1.0, top)), fdtd.Medium(permittivity=FR4)),
        fdtd.pec_sheet((0.0, strip_y, top), (1.0, STRIP, 0.0), cell),
    ]


def _through_line(cell, frequencies):
    """One run of a 36 mm line in a 48 x 24 mm PEC box, ports at x = -+8 mm: (Z_PI from the FDTD's fields
    at x = 0, eps_eff from the phase of S21, |S11|), each (F,)."""
    size = (36e-3, 48e-3, 24e-3)
    structures = _microstrip(size, cell)
    sections = [fdtd.CrossSection(x, size, cell, structures=structures) for x in (-8e-3, 8e-3)]
    port_list = [ports.ModePort(str(k + 1), sections[k], direction=(1, -1)[k]) for k in (0, 1)]
    components = ("Ey", "Ez", "Hy", "Hz")
    midway = fdtd.DFTMonitor("midway", frequencies, components, (0.0, 0.0, 0.0), (0.0, *size[1:]))
    result = fdtd.Simulation(
        size,
        cell,
        (fdtd.PML(thickness=round(6.4e-3 / cell)), fdtd.PEC(), fdtd.PEC()),
        structures=structures,
        sources=port_list[0].source(fdtd.GaussianPulse(f0=3e9, fwidth=4e9)).currents,
        monitors=[port.monitor(frequencies) for port in port_list] + [midway],
        dtype=torch.float32,
    ).run(until=1.2e-9, progress=False)
    incoming = port_list[0].waves(result)[0]
    s11, s21 = (port.waves(result)[1] / incoming for port in port_list)
    planes = [port.monitor(frequencies).reference_position for port in port_list]
    k0 = 2 * math.pi * frequencies.numpy() / SPEED_OF_LIGHT
    eps_eff = (np.unwrap(np.angle(s21.numpy())) / (k0 * (planes[1] - planes[0]))) ** 2
    impedances = []
    for index in range(len(frequencies)):
        fields = {name: result["midway"][name][index, 0].to(torch.complex128) for name in components}
        zero = torch.zeros_like(fields["Ey"])
        measured = line_impedance.line_impedance(
            torch.stack([zero, fields["Ey"], fields["Ez"]]),
            torch.stack([zero, fields["Hy"], fields["Hz"]]),
            sections[0].conductor,
            cell,
        )
        impedances.append(measured.power_current)
    return np.array(impedances), eps_eff, s11.abs().numpy()


@pytest.mark.slow  # 15-30 s: `make test` runs it, `make check` does not
def test_microstrip_through_line_matches_hammerstad_jensen_and_kirschning_jansen():
    """Z_PI (Jansen & Kirschning's definition) of the FDTD's own fields and eps_eff from the phase of S21
    over the 16 mm between the ports, at 2, 3 and 4 GHz. Measured: Z_PI 43.6-43.8 ohm (0.8 mm cells),
    46.1-46.3 (0.4 mm), extrapolated -0.2 % from Kirschning-Jansen; eps_eff 3.44-3.52, 3.41-3.48,
    extrapolated -0.3 % to -0.1 %; |S11| below -90 dB on the fine grid."""
    frequencies = torch.tensor([2e9, 3e9, 4e9], dtype=torch.float64)
    (z_coarse, eps_coarse, _), (z_fine, eps_fine, s11) = (
        _through_line(cell, frequencies) for cell in (0.8e-3, 0.4e-3)
    )
    exact = np.array([lines.microstrip_dispersive(STRIP, SUBSTRATE, FR4, f) for f in frequencies.tolist()])
    z_extrapolated, eps_extrapolated = 2 * z_fine - z_coarse, 2 * eps_fine - eps_coarse
    assert np.abs(z_extrapolated / exact[:, 0] - 1).max() < 0.02, z_extrapolated
    assert np.abs(eps_extrapolated / exact[:, 1] - 1).max() < 0.01, eps_extrapolated
    assert (z_coarse < z_fine).all() and (z_fine < exact[:, 0]).all()  # from below: the strip looks wider
    assert (20 * np.log10(s11) < -30).all(), s11


def test_ports_refuse_lines_without_an_impedance():
    """A voltage-based impedance on a plane with no metal, or whose signal conductor has no straight path to
    the ground, and a line whose only return conductor would be walls the FDTD does not have."""
    size, cell = (12e-3, 12.8e-3, 6.4e-3), 0.4e-3
    bare = ports.ModePort("bare", fdtd.CrossSection(0.0, size, cell, structures=_microstrip(size, cell)[:1]))
    with pytest.raises(ConfigurationError, match="ModePort 'bare'.*no metal crosses the plane"):
        bare.impedance([4e9], definition="power_voltage")
    # a strip inside a floating shield (four pec_sheets): the current is defined, the voltage has no
    # straight path from the strip to the ground
    top = -size[2] / 2 + SUBSTRATE
    shield = [
        fdtd.pec_sheet((0.0, 0.0, top + 1.2e-3), (1.0, 4e-3, 0.0), cell),
        fdtd.pec_sheet((0.0, 0.0, top - 1.2e-3), (1.0, 4e-3, 0.0), cell),
        fdtd.pec_sheet((0.0, -2e-3, top), (1.0, 0.0, 2.4e-3), cell),
        fdtd.pec_sheet((0.0, 2e-3, top), (1.0, 0.0, 2.4e-3), cell),
    ]
    enclosed = fdtd.CrossSection(0.0, size, cell, structures=_microstrip(size, cell) + shield)
    port = ports.ModePort("shielded", enclosed)
    with pytest.raises(ConfigurationError, match="ModePort 'shielded'.*2 conductors are separate"):
        port.impedance([4e9])
    assert port.impedance([4e9], signal=(16, 4)).shape == (1,)  # power-current: no voltage path needed
    with pytest.raises(ConfigurationError, match="ModePort 'shielded'.*no straight path.*Z_PV"):
        port.impedance([4e9], definition="power_voltage", signal=(16, 4))
    with pytest.raises(ConfigurationError, match="ModePort 'shielded'.*Z_VI"):
        port.impedance([4e9], definition="voltage_current", signal=(16, 4))
    # a strip with no ground plane in a box of PML: the mode solver's walls would be its only return
    floating = fdtd.pec_sheet((0.0, 0.0, 0.0), (1.0, STRIP, 0.0), cell)
    section = fdtd.CrossSection(0.0, size, cell, structures=[floating])
    assert not section.has_return_conductor
    with pytest.raises(ConfigurationError, match="no return conductor"):
        fdtd.Simulation(size, cell, fdtd.PML(thickness=5), structures=[floating],
                        monitors=[ports.ModePort("1", section).monitor([4e9])])
    grounded = fdtd.CrossSection(0.0, size, cell, structures=_microstrip(size, cell))
    assert not grounded.has_return_conductor  # its ground is the bottom wall: needs a PEC boundary there
    monitor = ports.ModePort("1", grounded).monitor([4e9])
    boundary = (fdtd.PML(thickness=5), fdtd.PML(thickness=5), fdtd.PEC())
    fdtd.Simulation(size, cell, boundary, structures=_microstrip(size, cell), monitors=[monitor])
    plane = fdtd.pec_sheet((0.0, 0.0, -size[2] / 2 + 0.4e-3), (1.0, 1.0, 0.0), cell)
    assert fdtd.CrossSection(0.0, size, cell, structures=[plane, floating]).has_return_conductor


def _notch(frequencies, transmission):
    """The frequency of the smallest ``|S21|``, refined by a parabola through ``|S21|^2`` at its samples."""
    power = np.abs(transmission) ** 2
    k = int(np.clip(np.argmin(power), 1, len(power) - 2))
    a, b, _ = np.polyfit(frequencies[k - 1 : k + 2], power[k - 1 : k + 2], 2)
    return -b / (2 * a)


@pytest.mark.slow  # 15-30 s: `make test` runs it, `make check` does not
def test_open_stub_notch_matches_ideal_line_circuit():
    """An open-circuit shunt stub (3.2 mm wide, 8 mm from the through-line's edge) on the FR4 microstrip, 0.4
    mm cells, in a 36 x 19.2 x 6.4 mm box; one FDTD run. Circuit theory: scikit-rf lines of the mode
    solver's own Z0 and beta (the port's mode for the through-line, the (x, z) cross-section for the stub),
    the stub lengthened by its open end (Kirschning-Jansen-Koster) and measured from Hammerstad's T-junction
    reference plane (mindelec.lines). Measured: FDTD notch 4.84 GHz, circuit 4.75 GHz (+1.8 %; 4.90 GHz,
    +3 %, on 0.2 mm cells). The naive stub lengths are further off: from the through-line's edge + delta_l
    4.65 GHz (+4 %), from its centre line + delta_l 3.95 GHz (+23 %)."""
    skrf = pytest.importorskip("skrf")
    cell, stub, size = 0.4e-3, 8e-3, (36e-3, 19.2e-3, 6.4e-3)
    line_y = -size[1] / 2 + 4e-3 + STRIP / 2  # the through-line 4 mm from the wall, the stub towards +y
    top = -size[2] / 2 + SUBSTRATE
    structures = _microstrip(size, cell, line_y) + [
        fdtd.pec_sheet((0.0, line_y + STRIP / 2 + stub / 2, top), (STRIP, stub, 0.0), cell)
    ]
    sections = [fdtd.CrossSection(x, size, cell, structures=structures[:2]) for x in (-8e-3, 8e-3)]
    port_list = [ports.ModePort(str(k + 1), sections[k], direction=(1, -1)[k]) for k in (0, 1)]
    frequencies = torch.linspace(4.2e9, 5.4e9, 25, dtype=torch.float64)
    result = fdtd.Simulation(
        size,
        cell,
        (fdtd.PML(thickness=16), fdtd.PEC(), fdtd.PEC()),
        structures=structures,
        sources=port_list[0].source(fdtd.GaussianPulse(f0=4.5e9, fwidth=4e9)).currents,
        monitors=[port.monitor(frequencies) for port in port_list],
        dtype=torch.float32,
    ).run(until=4e-9, progress=False)
    incoming = port_list[0].waves(result)[0]
    s11, s21 = (port.waves(result)[1] / incoming for port in port_list)
    assert ((s11.abs() ** 2 + s21.abs() ** 2 - 1).abs() < 0.01).all()  # lossless, no box mode carries power
    measured = _notch(frequencies.numpy(), s21.numpy())

    # the circuit: through-line sections to the junction's centre, the stub a shunt open line
    f = frequencies.numpy()
    beta = np.array([sections[0].modes(float(v)).propagation_constant[0].real.item() for v in f])
    z_line = port_list[0].impedance(frequencies).numpy()
    stub_section = lines.microstrip_section(STRIP, SUBSTRATE, FR4, cell, size[0], size[2])  # (x, z) plane
    stub_modes = [
        modes.cross_section_modes(stub_section[0], cell, float(v), conductor=stub_section[1]) for v in f
    ]
    beta_stub = np.array([m.propagation_constant[0].real.item() for m in stub_modes])
    z_stub = np.array([line_impedance.mode_impedance(m).power_current for m in stub_modes])
    length = np.array([
        stub + STRIP / 2 - lines.microstrip_tee_stub_offset(STRIP, STRIP, SUBSTRATE, FR4, v)
        + lines.microstrip_open_end(STRIP, SUBSTRATE, FR4)
        for v in f
    ])
    admittance = 1j * np.tan(beta_stub * length) / z_stub
    abcd = np.zeros((len(f), 2, 2), dtype=complex)
    abcd[:, 0, 0] = abcd[:, 1, 1] = 1.0
    abcd[:, 1, 0] = admittance
    band = skrf.Frequency.from_f(f, unit="Hz")
    media = skrf.media.DefinedGammaZ0(band, z0=z_line, gamma=1j * beta)
    planes = [port.monitor(frequencies).reference_position for port in port_list]
    shunt = skrf.Network(frequency=band, s=skrf.network.a2s(abcd, z_line), z0=z_line)
    circuit = media.line(-planes[0], "m") ** shunt ** media.line(planes[1], "m")
    expected = _notch(f, circuit.s[:, 1, 0])
    assert abs(measured / expected - 1) < 0.04, (measured, expected)
    # the ports' 50 ohm S-parameters follow the circuit's away from the notch
    s_matrix = torch.stack([torch.stack([s11, s21], -1), torch.stack([s21, s11], -1)], -1)  # symmetric
    network = ports.mode_network(frequencies, s_matrix, port_list)
    network.renormalize(50.0)
    circuit.renormalize(50.0)
    assert np.abs(np.abs(network.s[[0, -1], 1, 0]) - np.abs(circuit.s[[0, -1], 1, 0])).max() < 0.1


def test_a_mode_port_across_conformal_rims_warns():
    """With ``subpixel=True`` a mode port whose plane crosses the rims of a strip that does not sit on the
    node lines pairs raw node values with the mode's fields, which its overlap does not weigh by the edges'
    open fractions: the run warns, naming the monitor; the staircased run does not."""
    import warnings

    size, cell = (36e-3, 48e-3, 24e-3), 0.8e-3
    top = -size[2] / 2 + SUBSTRATE
    structures = [_microstrip(size, cell)[0], fdtd.pec_sheet((0.0, 0.0, top), (1.0, 3.06e-3, 0.0), cell)]
    section = fdtd.CrossSection(-8e-3, size, cell, structures=structures)
    port = ports.ModePort("1", section)
    frequencies = torch.tensor([3e9])

    def run(subpixel):
        fdtd.Simulation(size, cell, (fdtd.PML(thickness=8), fdtd.PEC(), fdtd.PEC()), structures=structures,
                        sources=port.source(fdtd.GaussianPulse(f0=3e9, fwidth=4e9)).currents,
                        monitors=[port.monitor(frequencies)], subpixel=subpixel).run(steps=2, progress=False)

    with pytest.warns(fdtd.PlacementWarning, match="crosses the rims of conformal metal"):
        run(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fdtd.PlacementWarning)
        run(False)
