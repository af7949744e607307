"""FDFD and FDTD agree on the same 2D scatterer at one frequency.

A dielectric disk (eps 4, radius 0.5 wavelength) next to a line current (TM, Ez), 20 cells per
wavelength, 20-cell PMLs. The FDTD runs a Gaussian pulse and takes the DFT of Ez; dividing by the
DFT of the source current (sampled where the FDTD applies it, at (n + 1/2) dt) gives the response
to a unit harmonic current, which the FDFD computes directly with the same current normalisation
(``amplitude / (dx dy)`` on one node) and the same permittivity per Ez node (the FDTD's sub-cell
average, from ``common.geometry.rasterize``).

The leapfrog time step replaces ``omega`` by ``(2 / dt) sin(omega dt / 2)`` in the discrete
equations, so the FDTD's DFT at ``f`` solves exactly the FDFD problem at
``f~ = sin(pi f dt) / (pi dt)``. At ``f~`` the two agree to 4e-4 (relative L2 over the region,
the rest being PML differences and the finite run); at ``f`` itself they differ by the FDTD's
temporal dispersion, 2.3 %.
"""

import math

import pytest
import torch

from common.geometry import Disk, rasterize
from common.units import SPEED_OF_LIGHT
from mindelec import fdfd, fdtd

FREQUENCY = 1e12
WAVELENGTH = SPEED_OF_LIGHT / FREQUENCY


@pytest.fixture(scope="module")
def fields():
    spacing = WAVELENGTH / 20
    cells, pml = 120, 20
    length = cells * spacing
    disk = Disk((0.6 * WAVELENGTH, 0.0), 0.5 * WAVELENGTH)
    source_position = (-0.8 * WAVELENGTH, 0.0)
    waveform = fdtd.GaussianPulse(f0=FREQUENCY, fwidth=0.5 * FREQUENCY)
    region = length - 2 * (pml + 1) * spacing
    time_domain = fdtd.Simulation(
        size=(length, length),
        cell_size=spacing,
        boundary=fdtd.PML(thickness=pml),
        sources=[fdtd.PointDipole(source_position, "Ez", waveform)],
        structures=[fdtd.Structure(disk, fdtd.Medium(permittivity=4.0))],
        monitors=[fdtd.DFTMonitor("dft", [FREQUENCY], ("Ez",), center=(0.0, 0.0), size=(region, region))],
        dtype=torch.float64,
    )
    result = time_domain.run(until=60 / FREQUENCY, progress=False)
    dt = time_domain.dt
    source_times = (torch.arange(result.steps, dtype=torch.float64) + 0.5) * dt
    spectrum = (waveform(source_times) * torch.exp(-2j * math.pi * FREQUENCY * source_times)).sum() * dt
    reference = result["dft"]["Ez"][0] / spectrum
    x_nodes = time_domain.grid.coordinates("Ez", 0)
    y_nodes = time_domain.grid.coordinates("Ez", 1)
    permittivity = 1.0 + 3.0 * rasterize(disk, [x_nodes, y_nodes], [spacing, spacing], supersample=4)
    monitor_x = result["dft"]["coordinates"]["Ez"]["x"]
    monitor_y = result["dft"]["coordinates"]["Ez"]["y"]
    first = (
        int(torch.argmin((x_nodes - monitor_x[0]).abs())),
        int(torch.argmin((y_nodes - monitor_y[0]).abs())),
    )
    window = (slice(first[0], first[0] + len(monitor_x)), slice(first[1], first[1] + len(monitor_y)))
    # away from the source node, where the field is singular
    distance = torch.hypot(monitor_x[:, None] - source_position[0], monitor_y[None, :] - source_position[1])
    mask = distance > 0.3 * WAVELENGTH

    def frequency_domain(frequency):
        sim = fdfd.Simulation((length, length), spacing, frequency, permittivity, pml_thickness=pml)
        assert torch.allclose(sim.coordinates[0], x_nodes)  # the same Ez nodes
        return sim.solve(sim.point_source(source_position))[window]

    corrected = math.sin(math.pi * FREQUENCY * dt) / (math.pi * dt)
    return reference[mask], frequency_domain(corrected)[mask], frequency_domain(FREQUENCY)[mask]


def relative_error(field, reference):
    return (torch.linalg.norm(field - reference) / torch.linalg.norm(reference)).item()


def test_fdfd_matches_fdtd_dft_on_dielectric_disk(fields):
    reference, at_corrected_frequency, _ = fields
    assert relative_error(at_corrected_frequency, reference) < 2e-3


def test_fdfd_at_physical_frequency_differs_by_fdtd_time_dispersion(fields):
    reference, _, at_frequency = fields
    # (omega dt)^2 / 24 relative error in k^2, accumulated over about 3 wavelengths of propagation
    assert relative_error(at_frequency, reference) < 0.04
