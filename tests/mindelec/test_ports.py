"""mindelec.ports: S-parameters of a dielectric slab from FDTD against the transfer-matrix (Airy)
formula, the S-parameter arithmetic on analytic data, and Touchstone round trips through scikit-rf."""

import math

import numpy as np
import pytest
import skrf
import torch

from common.geometry import Interval, Rectangle, rasterize
from common.units import SPEED_OF_LIGHT
from mindelec import fdfd, fdtd, ports

FREQUENCY = 1e12
WAVELENGTH = SPEED_OF_LIGHT / FREQUENCY


def slab_s_parameters(frequencies, permittivity, thickness, before, after):
    """S11 and S21 of a lossless slab in vacuum, phasors exp(+j omega t), reference planes ``before``
    the front face and ``after`` the back face (m)."""
    wavenumber = 2 * math.pi * frequencies / SPEED_OF_LIGHT
    index = math.sqrt(permittivity)
    interface = (1 - index) / (1 + index)
    round_trip = torch.exp(-2j * index * wavenumber * thickness)
    denominator = 1 - interface**2 * round_trip
    reflection = interface * (1 - round_trip) / denominator
    transmission = (1 - interface**2) * torch.exp(-1j * index * wavenumber * thickness) / denominator
    return (
        reflection * torch.exp(-2j * wavenumber * before),
        transmission * torch.exp(-1j * wavenumber * (before + after)),
    )


def test_slab_two_port_matches_transfer_matrix():
    # 1D FDTD, 60 cells per vacuum wavelength at f0 (20 per wavelength inside the slab at 1.5 f0),
    # a slab of eps 4 and 30 cells (half a wavelength at f0) whose faces lie on cell boundaries
    spacing = WAVELENGTH / 60
    cells = 360
    length = cells * spacing

    def node(i):
        return -length / 2 + i * spacing

    front, back = node(180) + spacing / 2, node(210) + spacing / 2
    slab = fdtd.Structure(Interval(front, back), fdtd.Medium(permittivity=4.0))
    frequencies = torch.linspace(0.5 * FREQUENCY, 1.5 * FREQUENCY, 21, dtype=torch.float64)
    port_list = [ports.WaveguidePort("in", (node(120),)), ports.WaveguidePort("out", (node(270),))]
    waveform = fdtd.GaussianPulse(f0=FREQUENCY, fwidth=FREQUENCY)

    def run(structures):
        sim = fdtd.Simulation(
            size=(length,),
            cell_size=spacing,
            boundary=fdtd.PML(thickness=30),
            sources=[fdtd.PointDipole((node(60),), "Ez", waveform)],
            structures=structures,
            monitors=[port.monitor(frequencies) for port in port_list],
            dtype=torch.float64,
        )
        return sim.run(until=25 / FREQUENCY, progress=False)

    column = ports.s_parameters(run([]), run([slab]), port_list, source_port=0)
    assert column.shape == (21, 2)
    s11, s21 = slab_s_parameters(frequencies, 4.0, back - front, front - node(120), node(270) - back)
    # the differences are the FDTD's numerical dispersion inside the slab (second order: 0.0125 and
    # 0.021 at 80 cells per wavelength, 0.0225 and 0.038 at 60)
    assert (column[:, 0] - s11).abs().max() < 0.03
    assert (column[:, 1] - s21).abs().max() < 0.05
    # the band spans reflection zeros and maxima (|S11| from 0 to 0.6 at the quarter-wave points)
    assert s11.abs().min() < 1e-3 and s11.abs().max() > 0.59
    # a lossless slab: |S11|^2 + |S21|^2 = 1
    assert ((column.abs() ** 2).sum(dim=1) - 1).abs().max() < 1e-4


def test_scattering_column_on_analytic_amplitudes():
    frequencies = torch.linspace(1e9, 2e9, 5, dtype=torch.float64)
    incident = torch.exp(1j * frequencies / 1e9)  # arbitrary source spectrum at port 1
    line = torch.exp(-2j * math.pi * frequencies * 1e-9)  # port 1 -> port 2 in the empty feed
    s11 = 0.3 * torch.exp(0.7j * frequencies / 1e9)
    s21 = 0.8 * torch.exp(-1.1j * frequencies / 1e9)
    reference = torch.stack([incident, incident * line])
    device = torch.stack([incident * (1 + s11), incident * s21])
    column = ports.scattering_column(reference, device, source_port=0)
    assert torch.allclose(column, torch.stack([s11, s21], dim=1))
    # the source on port 2 (index 1): S22, S12
    column = ports.scattering_column(reference.flip(0), device.flip(0), source_port=1)
    assert torch.allclose(column, torch.stack([s21, s11], dim=1))


def test_port_amplitude_projects_on_the_mode_profile():
    nodes = torch.linspace(-1, 1, 41, dtype=torch.float64)
    fundamental = torch.cos(math.pi * nodes / 2)
    second = torch.sin(math.pi * nodes)  # orthogonal to the fundamental
    amplitudes = torch.tensor([1.0 + 2.0j, -0.5j], dtype=torch.complex128)
    field = amplitudes[:, None] * fundamental + 3.0 * second
    result = {"port:p": {"Ez": field.reshape(2, 1, 41)}}  # (F, 1, M) as a 2D DFT monitor gives it
    port = ports.WaveguidePort("p", (0.0, 0.0), span=1e-3, profile=fundamental)
    assert torch.allclose(port.amplitude(result), amplitudes)
    with pytest.raises(ValueError, match="profile has 20 values"):
        ports.WaveguidePort("p", (0.0, 0.0), span=1e-3, profile=fundamental[:20]).amplitude(result)
    with pytest.raises(KeyError, match="port:q"):
        ports.WaveguidePort("q", (0.0, 0.0), span=1e-3).amplitude(result)


@pytest.mark.parametrize("port_count", [1, 2, 3])
def test_touchstone_round_trip(tmp_path, port_count):
    generator = np.random.default_rng(port_count)
    frequencies = np.linspace(1e9, 5e9, 9)
    s_matrix = generator.normal(size=(9, port_count, port_count)) + 1j * generator.normal(
        size=(9, port_count, port_count)
    )
    path = ports.write_touchstone(tmp_path / f"device.s{port_count}p", torch.as_tensor(frequencies), s_matrix)
    network = skrf.Network(str(path))
    np.testing.assert_allclose(network.f, frequencies, rtol=1e-12)
    np.testing.assert_allclose(network.s, s_matrix, rtol=1e-9, atol=1e-12)
    assert np.allclose(network.z0, 50.0)


def test_to_network_and_bad_input(tmp_path):
    frequencies = torch.tensor([1e9, 2e9])
    network = ports.to_network(frequencies, torch.zeros(2, 2, 2, dtype=torch.complex128), z0=75.0, name="dut")
    assert network.nports == 2 and np.allclose(network.z0, 75.0) and network.name == "dut"
    with pytest.raises(ValueError, match=r"must end in \.s2p"):
        ports.write_touchstone(tmp_path / "device.s1p", frequencies, np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="s_matrix has shape"):
        ports.to_network(frequencies, np.zeros((3, 2, 2)))
    with pytest.raises(ValueError, match="strictly increasing"):
        ports.to_network(torch.tensor([2e9, 1e9]), np.zeros((2, 1, 1)))
    with pytest.raises(ValueError, match="needs its span"):
        ports.WaveguidePort("a", (0.0, 0.0)).monitor([1e9])
    with pytest.raises(ValueError, match="source_port 2"):
        ports.scattering_column(torch.ones(2, 3), torch.ones(2, 3), source_port=2)
    # a port outside the domain is refused by the FDTD, naming the port's monitor
    monitor = ports.WaveguidePort("far", (1.0,)).monitor([FREQUENCY])
    with pytest.raises(ValueError, match="port:far"):
        fdtd.Simulation(size=(WAVELENGTH,), cell_size=WAVELENGTH / 20, monitors=[monitor])


def test_waveguide_ports_in_2d_match_fdfd():
    # a slab waveguide (eps 4, 0.3 wavelength wide: single mode) cut by a 0.25-wavelength air gap;
    # ports project Ez on the guide's fundamental mode (from the FDFD mode solver, on the same
    # nodes). The FDFD with the same line source and the same port arithmetic, at the frequency
    # the leapfrog scheme actually solves, sin(pi f dt) / (pi dt), agrees to 2e-5 (float32 FDTD).
    spacing = WAVELENGTH / 20
    shape = (120, 50)
    size = (shape[0] * spacing, shape[1] * spacing)
    width, gap, pml = 0.3 * WAVELENGTH, 0.25 * WAVELENGTH, 12
    source_x, port_x = -2.2 * WAVELENGTH, (-1.5 * WAVELENGTH, 1.5 * WAVELENGTH)
    guide = fdtd.Structure(
        Rectangle((-size[0], -width / 2), (size[0], width / 2)), fdtd.Medium(permittivity=4.0)
    )
    air_gap = fdtd.Structure(
        Rectangle((-gap / 2, -size[1]), (gap / 2, size[1])), fdtd.Medium(permittivity=1.0)
    )
    grid = fdtd.Grid(size, spacing)
    x_nodes, y_nodes = grid.coordinates("Ez", 0), grid.coordinates("Ez", 1)

    def permittivity_of(structures):  # the FDTD's sub-cell average on the Ez nodes
        permittivity = torch.ones(shape, dtype=torch.float64)
        for structure in structures:
            fill = rasterize(structure.geometry, [x_nodes, y_nodes], [spacing, spacing], supersample=4)
            permittivity = permittivity * (1 - fill) + fill * structure.medium.permittivity
        return permittivity

    layouts = ([guide], [guide, air_gap])
    permittivities = [permittivity_of(structures) for structures in layouts]
    profile = fdfd.Simulation(size, spacing, FREQUENCY, permittivities[0], pml).mode("x", port_x[0]).profile
    port_list = [
        ports.WaveguidePort(str(k + 1), (x, 0.0), span=size[1], profile=profile) for k, x in enumerate(port_x)
    ]
    frequencies = torch.linspace(0.8 * FREQUENCY, 1.2 * FREQUENCY, 5, dtype=torch.float64)
    source = fdtd.CurrentSource(
        "Ez",
        fdtd.GaussianPulse(f0=FREQUENCY, fwidth=0.6 * FREQUENCY),
        center=(source_x, 0.0),
        size=(0.0, width),
    )
    results = []
    for structures in layouts:
        sim = fdtd.Simulation(
            size=size,
            cell_size=spacing,
            boundary=fdtd.PML(thickness=pml),
            sources=[source],
            structures=structures,
            monitors=[port.monitor(frequencies) for port in port_list],
        )
        results.append(sim.run(until=25 / FREQUENCY, progress=False))
    column = ports.s_parameters(results[0], results[1], port_list, source_port=0)

    # the FDFD: the same sheet current (amplitude / dx on the source's nodes), the same projections
    current = torch.zeros(shape, dtype=torch.complex128)
    current[int(torch.argmin((x_nodes - source_x).abs()))] = (
        y_nodes.abs() <= width / 2 * (1 + 1e-9)
    ) / spacing
    port_nodes = [int(torch.argmin((x_nodes - x).abs())) for x in port_x]
    expected = []
    for frequency in frequencies.tolist():
        solved = math.sin(math.pi * frequency * sim.dt) / (math.pi * sim.dt)
        amplitudes = []
        for permittivity in permittivities:
            field = fdfd.Simulation(size, spacing, solved, permittivity, pml).solve(current)
            amplitudes.append(
                torch.stack([(field[i] * profile).sum() / (profile**2).sum() for i in port_nodes])
            )
        expected.append(ports.scattering_column(amplitudes[0][:, None], amplitudes[1][:, None], 0)[0])
    expected = torch.stack(expected)
    assert (column - expected).abs().max() < 1e-4
    # the gap reflects (|S11| ~ 0.5) and radiates: |S11|^2 + |S21|^2 from 0.89 down to 0.77
    power = (column.abs() ** 2).sum(dim=1)
    assert (power < 0.95).all() and (power > 0.7).all()
