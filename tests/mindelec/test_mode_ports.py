"""Mode sources, mode monitors and mode ports (mindelec.fdtd.ModeSource/ModeMonitor, mindelec.ports.ModePort):
a straight 3D metallic waveguide is transparent (|S21| >= 0.99, |S11| <= 0.01 over the band); a dielectric
step in it gives the exact (single-mode) mode-matching S11 and S21 to 0.01; a width step in a 2D slab
waveguide gives the S11 and S21 of the FDFD (mindelec.fdfd) with its own mode source and mode
decomposition on the same reference lines, to 0.01 in modulus and with the same phase; a microstrip
through-line whose port planes cut its strip (a pec_sheet) is matched (|S11| below -30 dB) with the mode's
phase, its FDTD fields carry the ports' impedance, and scikit-rf's renormalisation to 50 ohm gives a line
section of that impedance."""

import math

import numpy as np
import pytest
import skrf
import torch

from common.errors import ConfigurationError
from common.geometry import Box, Rectangle, rasterize
from common.units import SPEED_OF_LIGHT, VACUUM_PERMITTIVITY
from mindelec import fdfd, fdtd, ports
from mindelec.fdtd.coefficients import update_coefficients


def test_straight_metallic_waveguide_is_transparent(tmp_path):
    # a hollow 20 x 10 mm rectangular guide (TE10 cut-off 7.5 GHz, TE20 15 GHz), PEC walls, PML at
    # both ends, 1 mm cells; ports 40 mm apart, one run per excited port
    size, cell = (0.1, 0.02, 0.01), 1e-3
    boundary = (fdtd.PML(thickness=15), fdtd.PEC(), fdtd.PEC())
    port_list = [
        ports.ModePort("1", fdtd.CrossSection(-0.02, size, cell), direction=1),
        ports.ModePort("2", fdtd.CrossSection(0.02, size, cell), direction=-1),
    ]
    frequencies = torch.linspace(10e9, 13e9, 7, dtype=torch.float64)
    pulse = fdtd.GaussianPulse(f0=11.5e9, fwidth=4e9)
    monitors = [port.monitor(frequencies) for port in port_list]
    results = [
        fdtd.Simulation(size, cell, boundary, sources=port.source(pulse).currents, monitors=monitors).run(
            until=3.5e-9, progress=False
        )
        for port in port_list
    ]
    s_matrix = ports.mode_s_matrix(results, port_list)
    assert s_matrix.shape == (7, 2, 2)
    assert (s_matrix[:, 1, 0].abs() >= 0.99).all() and (s_matrix[:, 0, 1].abs() >= 0.99).all()
    assert (s_matrix[:, 0, 0].abs() <= 0.01).all() and (s_matrix[:, 1, 1].abs() <= 0.01).all()
    # the phase of S21 is the TE10 delay over the 40 mm between the reference planes (continuum
    # beta; the 1 mm grid's dispersion is below 0.05 rad here)
    beta = 2 * math.pi * frequencies / SPEED_OF_LIGHT * torch.sqrt(1 - (7.5e9 / frequencies) ** 2)
    phase_error = torch.angle(s_matrix[:, 1, 0] * torch.exp(1j * beta * 0.04))
    assert phase_error.abs().max() < 0.05
    # broadband normalisation: the mode the source launches, divided by the source's spectrum, carries
    # 1 W per unit of the waveform across the band, delayed by the 3.5 cells to the reference plane
    source = port_list[0].source(pulse)
    spectrum = source.spectrum(frequencies, results[0].dt, results[0].metadata["steps"])
    launched = port_list[0].waves(results[0])[0] / spectrum
    assert (launched.abs() - 1).abs().max() < 0.01
    distance = port_list[0].monitor(frequencies).reference_position - source.cross_section.position
    assert abs(distance - 3.5e-3) < 1e-9
    assert torch.angle(launched * torch.exp(1j * beta * distance)).abs().max() < 0.02
    path = ports.write_touchstone(tmp_path / "guide.s2p", frequencies, s_matrix)
    network = skrf.Network(str(path))
    assert network.nports == 2
    assert abs(network.s - s_matrix.numpy()).max() < 1e-6


def test_dielectric_step_in_metallic_waveguide_matches_mode_matching():
    # the same 20 x 10 mm guide filled with eps 2.25 from x = 0 on: TE10 on both sides (the step does
    # not couple to other modes), so mode matching is exact: with 1 W modes, S11 = (b1 - b2) / (b1 + b2)
    # and |S21| = 2 sqrt(b1 b2) / (b1 + b2), b = sqrt(eps k0^2 - (pi / a)^2). Measured differences on the
    # 1 mm grid (17 cells per wavelength in the filling at 12 GHz): 5e-3 (S11), 6e-3 (S21)
    size, cell = (0.1, 0.02, 0.01), 1e-3
    filling = [fdtd.Structure(Box((0.0, -0.02, -0.02), (0.1, 0.02, 0.02)), fdtd.Medium(permittivity=2.25))]
    port_list = [
        ports.ModePort("1", fdtd.CrossSection(-0.02, size, cell, structures=filling), direction=1),
        ports.ModePort("2", fdtd.CrossSection(0.02, size, cell, structures=filling), direction=-1),
    ]
    frequencies = torch.linspace(9e9, 12e9, 4, dtype=torch.float64)
    result = fdtd.Simulation(
        size,
        cell,
        (fdtd.PML(thickness=15), fdtd.PEC(), fdtd.PEC()),
        structures=filling,
        sources=port_list[0].source(fdtd.GaussianPulse(f0=10.5e9, fwidth=4e9)).currents,
        monitors=[port.monitor(frequencies) for port in port_list],
    ).run(until=3.5e-9, progress=False)
    s_matrix = ports.mode_s_matrix([result], port_list[:1])[:, 0, 0]
    incoming = port_list[0].waves(result)[0]
    s21 = port_list[1].waves(result)[1] / incoming
    k0 = 2 * math.pi * frequencies / SPEED_OF_LIGHT
    empty, filled = (torch.sqrt(eps * k0**2 - (math.pi / 0.02) ** 2) for eps in (1.0, 2.25))
    assert ((s_matrix.abs() - ((empty - filled) / (empty + filled)).abs()).abs() < 0.01).all()
    assert ((s21.abs() - 2 * torch.sqrt(empty * filled) / (empty + filled)).abs() < 0.01).all()


def _fdfd_permittivity(size, cell, structures, polarization):
    """The FDFD's permittivity on its main-field nodes: for TM the FDTD's own sub-cell average on the Ez
    nodes; for TE (main field Hz at the cell centres) each cell's filling."""
    grid = fdtd.Grid(size, cell)
    if polarization == "TM":
        electric, _ = update_coefficients(
            grid, ("Ez",), 1.0, fdtd.Medium(), structures, [], torch.float64, "cpu"
        )
        return 1.0 / (VACUUM_PERMITTIVITY * electric["Ez"][1][:, :, 0])
    centres = [grid.coordinates("Hz", axis) for axis in (0, 1)]
    permittivity = torch.ones(grid.shape[:2], dtype=torch.float64)
    for structure in structures:
        fill = rasterize(structure.geometry, centres, [cell, cell], supersample=8)
        permittivity = permittivity * (1 - fill) + fill * structure.medium.permittivity
    return permittivity


@pytest.mark.parametrize("polarization", ["TM", "TE"])
def test_width_step_in_2d_matches_fdfd(polarization):
    # a slab guide (eps 4) whose width steps from 6 to 14 cells (0.25 to 0.58 wavelengths) at x = 0, TM
    # and TE: FDTD with mode ports against the FDFD at the frequency the leapfrog scheme solves,
    # sin(pi f dt) / (pi dt), with FDFD's mode source and mode_amplitudes read on the ModeMonitors'
    # reference lines. Measured complex differences: S11 below 2e-3, S21 below 4e-3 (TM), 8e-3 (TE)
    frequency = 1e12
    wavelength = SPEED_OF_LIGHT / frequency
    cell, pml = wavelength / 24, 12
    size = (110 * cell, 60 * cell)
    # widths of whole cells, edges on cell faces (the FDFD's TE weights, 1 / the mean permittivity of
    # two cells, are then the FDTD's own sub-cell averages); the step at x = 0 is a node plane. The
    # narrow guide runs through: two abutting structures would mix to 3.25, not 4, on the step's nodes
    narrow, wide = 6 * cell, 14 * cell
    structures = [
        fdtd.Structure(
            Rectangle((-size[0], -narrow / 2), (size[0], narrow / 2)), fdtd.Medium(permittivity=4.0)
        ),
        fdtd.Structure(Rectangle((0.0, -wide / 2), (size[0], wide / 2)), fdtd.Medium(permittivity=4.0)),
    ]
    arguments = dict(size=size, cell_size=cell, structures=structures, polarization=polarization)
    port_list = [
        ports.ModePort("1", fdtd.CrossSection(-1.5 * wavelength, **arguments), direction=1),
        ports.ModePort("2", fdtd.CrossSection(1.5 * wavelength, **arguments), direction=-1),
    ]
    frequencies = torch.linspace(0.85 * frequency, 1.15 * frequency, 4, dtype=torch.float64)
    source = port_list[0].source(fdtd.GaussianPulse(f0=frequency, fwidth=0.5 * frequency))
    sim = fdtd.Simulation(
        size,
        cell,
        fdtd.PML(thickness=pml),
        structures=structures,
        dtype=torch.float64,
        polarization=polarization,
        sources=source.currents,
        monitors=[port.monitor(frequencies) for port in port_list],
    )
    result = sim.run(until=30 / frequency, progress=False)
    incoming = port_list[0].waves(result)[0]
    # the slab mode's profile changes over the +-15 % band (the centre profile's overlap with the band
    # edges' modes is 0.997-0.998); with the source's per-frequency correction the launched mode carries
    # 1 W/m per unit of the waveform to 1e-3 (measured), without it 3e-3 off
    launched = incoming / source.spectrum(frequencies, sim.dt, result.metadata["steps"])
    assert (launched.abs() - 1).abs().max() < 2e-3
    s11, s21 = (port.waves(result)[1] / incoming for port in port_list)

    permittivity = _fdfd_permittivity(size, cell, structures, polarization)
    references = [port.monitor(frequencies).reference_position for port in port_list]
    for k, value in enumerate(frequencies.tolist()):
        solved = math.sin(math.pi * value * sim.dt) / (math.pi * sim.dt)
        solver = fdfd.Simulation(size, cell, solved, permittivity, pml, polarization)
        mode_in = solver.mode("x", -1.7 * wavelength)
        field = solver.solve(solver.mode_source(mode_in, direction=1))
        forward, backward = solver.mode_amplitudes(field, solver.mode("x", references[0]), references[0])
        # FDFD's TE amplitudes are of its main field H_z, a ModeMonitor's of E: a reflected wave has
        # opposite signs in the two conventions
        backward = backward if polarization == "TM" else -backward
        transmitted, _ = solver.mode_amplitudes(field, solver.mode("x", references[1]), references[1])
        assert abs(abs(s11[k]) - abs(backward / forward)) < 0.01
        assert abs(abs(s21[k]) - abs(transmitted / forward)) < 0.01
        # the same reference planes: the complex values agree (half a cell apart would turn S11 by
        # 2 kappa dx / 2, about 0.45 rad here)
        assert abs(s11[k] - backward / forward) < 0.01
        assert abs(s21[k] - transmitted / forward) < 0.01
    assert (s11.abs() > 0.02).all()  # the step does reflect: the comparison is not of two zeros


def test_mode_source_refuses_bad_input():
    size, cell = (0.1, 0.02, 0.01), 1e-3
    section = fdtd.CrossSection(0.0, size, cell)
    pulse = fdtd.GaussianPulse(f0=11.5e9, fwidth=4e9)
    with pytest.raises(ConfigurationError, match="direction"):
        fdtd.ModeSource(section, pulse, direction=2)
    with pytest.raises(ConfigurationError, match="n_eff"):  # below the TE10 cut-off: evanescent
        fdtd.ModeSource(section, fdtd.GaussianPulse(f0=5e9, fwidth=1e9))
    with pytest.raises(ConfigurationError, match="inside the domain"):
        fdtd.CrossSection(0.05, size, cell)
    with pytest.raises(ConfigurationError, match="run once per excited port"):
        ports.mode_s_matrix([], [ports.ModePort("1", section)])
    line = fdtd.CrossSection(0.0, size[:2], cell, polarization="TE")
    with pytest.raises(ValueError, match="polarization 'TE'"):
        fdtd.Simulation(size[:2], cell, monitors=[fdtd.ModeMonitor("m", line, [11.5e9])])


# a microstrip on FR4 in a 12.8 x 6.4 mm PEC box (ground: the bottom wall), 0.4 mm cells: the strip 8 cells
# wide, the substrate 4 thick; the strip is a pec_sheet, as the FDTD models of Sheen et al. (1990)
MICROSTRIP_SIZE, MICROSTRIP_CELL = (40e-3, 12.8e-3, 6.4e-3), 0.4e-3


def _microstrip_structures():
    substrate_top = -MICROSTRIP_SIZE[2] / 2 + 1.6e-3
    return [
        fdtd.Structure(Box((-1.0, -1.0, -1.0), (1.0, 1.0, substrate_top)), fdtd.Medium(permittivity=4.4)),
        fdtd.pec_sheet((0.0, 0.0, substrate_top), (1.0, 3.2e-3, 0.0), MICROSTRIP_CELL),
    ]


def test_cross_section_through_a_strip_solves_the_fdtd_staircase():
    """The port plane through a pec_sheet strip pins the nodes mindelec.lines pins for the same microstrip,
    so its mode and impedance are those of the stand-alone solvers on the builder's arrays."""
    from mindelec import line_impedance, lines, modes

    structures = _microstrip_structures()
    section = fdtd.CrossSection(-10e-3, MICROSTRIP_SIZE, MICROSTRIP_CELL, structures=structures)
    permittivity, conductor = lines.microstrip_section(
        3.2e-3, 1.6e-3, 4.4, MICROSTRIP_CELL, *MICROSTRIP_SIZE[1:]
    )
    assert torch.equal(section.conductor, conductor)
    alone = modes.cross_section_modes(permittivity, MICROSTRIP_CELL, 4e9, conductor=conductor)
    assert abs(section.modes(4e9).effective_index[0] - alone.effective_index[0]) < 1e-9
    impedance = section.impedance(4e9)
    assert abs(impedance.power_current / line_impedance.mode_impedance(alone).power_current - 1) < 1e-9
    port = ports.ModePort("1", section)
    assert torch.allclose(port.impedance([4e9]), torch.tensor([impedance.power_current], dtype=torch.float64))
    with pytest.raises(ConfigurationError, match="definition must be"):
        port.impedance([4e9], definition="voltage")
    with pytest.raises(ConfigurationError, match="no metal crosses the plane"):
        fdtd.CrossSection(0.0, (0.1, 0.02, 0.01), 1e-3).impedance(10e9)
    lossy = [fdtd.Structure(Box((-1.0, -1.0, -1.0), (1.0, 1.0, -1.6e-3)), fdtd.Medium(4.4, conductivity=0.1))]
    with pytest.raises(ConfigurationError, match=r"structure 2 .* is lossy"):  # metal, yes; loss, not yet
        fdtd.CrossSection(-10e-3, MICROSTRIP_SIZE, MICROSTRIP_CELL, structures=structures + lossy)


@pytest.mark.slow  # 15-30 s: `make test` runs it, `make check` does not
def test_microstrip_through_line_is_matched_with_the_port_impedance():
    """A 40 mm FR4 microstrip between two mode ports 20 mm apart (float32, one run; the line is symmetric
    and reciprocal, so S22 = S11 and S12 = S21). Measured: |S11| below -84 dB, |S21| = 1 to 1e-4, the phase
    of S21 that of the mode's beta over 20 mm to 1.5 mrad; the FDTD's own |V / I| midway (voltage and
    current integrals of its DFT fields) the ports' Z_VI to 2.8e-3, V and I the mode's times the incoming
    amplitude to 2.3e-3 and 5e-4. Renormalised to 50 ohm (scikit-rf), the
    S-parameters are those of a line section of the port impedance Z_PI (43.6 ohm on this coarse, boxed
    grid) and electrical length beta L (Pozar, Microwave Engineering, sec. 4.3 and 2.4)."""
    from mindelec import line_impedance

    structures = _microstrip_structures()
    sections = [
        fdtd.CrossSection(x, MICROSTRIP_SIZE, MICROSTRIP_CELL, structures=structures) for x in (-10e-3, 10e-3)
    ]
    port_list = [ports.ModePort(str(k + 1), sections[k], direction=(1, -1)[k]) for k in (0, 1)]
    frequencies = torch.linspace(2e9, 6e9, 5, dtype=torch.float64)
    midway = fdtd.DFTMonitor("midway", frequencies, ("Ey", "Ez", "Hy", "Hz"), (0.0, 0.0, 0.0),
                             (0.0, *MICROSTRIP_SIZE[1:]))
    result = fdtd.Simulation(
        MICROSTRIP_SIZE,
        MICROSTRIP_CELL,
        (fdtd.PML(thickness=10), fdtd.PEC(), fdtd.PEC()),
        structures=structures,
        sources=port_list[0].source(fdtd.GaussianPulse(f0=4e9, fwidth=4e9)).currents,
        monitors=[port.monitor(frequencies) for port in port_list] + [midway],
        dtype=torch.float32,
    ).run(until=3e-9, progress=False)
    incoming = port_list[0].waves(result)[0]
    s11, s21 = (port.waves(result)[1] / incoming for port in port_list)
    assert (s11.abs() < 10 ** (-30 / 20)).all()
    assert ((s21.abs() - 1).abs() < 1e-3).all()
    beta = torch.stack([sections[0].modes(float(f)).propagation_constant[0].real for f in frequencies])
    planes = [port.monitor(frequencies).reference_position for port in port_list]
    length = planes[1] - planes[0]
    assert abs(length - 20e-3) < 1e-9
    assert torch.angle(s21 * torch.exp(1j * beta * length)).abs().max() < 0.01
    # the FDTD line's own impedance, from its fields midway, against the ports' (mode solver)
    for index, frequency in enumerate(frequencies.tolist()):
        fields = {name: result["midway"][name][index, 0].to(torch.complex128) for name in ("Ey", "Ez", "Hy")}
        fields["Hz"] = result["midway"]["Hz"][index, 0].to(torch.complex128)
        zero = torch.zeros_like(fields["Ey"])
        measured = line_impedance.line_impedance(
            torch.stack([zero, fields["Ey"], fields["Ez"]]), torch.stack([zero, fields["Hy"], fields["Hz"]]),
            sections[0].conductor, MICROSTRIP_CELL,
        )
        expected = sections[0].impedance(frequency)
        assert abs(abs(measured.voltage_current) / abs(expected.voltage_current) - 1) < 5e-3
        # and the wave's voltage and current are the mode's times the port's incoming amplitude
        assert abs(abs(measured.voltage / incoming[index]) / abs(expected.voltage) - 1) < 5e-3
        assert abs(abs(measured.current / incoming[index]) / abs(expected.current) - 1) < 5e-3
    # 50 ohm S-parameters: a section of line of the port impedance
    s_matrix = torch.stack([torch.stack([s11, s21], -1), torch.stack([s21, s11], -1)], -1)
    network = ports.mode_network(frequencies, s_matrix, port_list)
    impedance = port_list[0].impedance(frequencies)
    assert network.z0.shape == (5, 2) and np.allclose(network.z0.real, impedance.numpy()[:, None])
    network.renormalize(50.0)
    theta = (beta * length).numpy()
    z, z0 = impedance.numpy(), 50.0
    denominator = 2 * z * z0 * np.cos(theta) + 1j * (z**2 + z0**2) * np.sin(theta)
    assert np.abs(network.s[:, 0, 0] - 1j * (z**2 - z0**2) * np.sin(theta) / denominator).max() < 2e-3
    assert np.abs(network.s[:, 1, 0] - 2 * z * z0 / denominator).max() < 2e-3
    assert np.abs(network.s[:, 0, 0]).max() > 0.05  # a 43.6 ohm line is visibly mismatched to 50 ohm
