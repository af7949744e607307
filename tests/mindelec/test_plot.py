"""Simulation.plot: the set-up picture has an artist for every source, monitor, port and PML slab, and the
permittivity it shades is the one the run uses."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.contour import ContourSet  # noqa: E402

from common import geometry  # noqa: E402
from mindelec import fdtd  # noqa: E402
from mindelec.ports import WaveguidePort  # noqa: E402

PULSE = fdtd.GaussianPulse(f0=150e9, fwidth=100e9)


def _labels(ax):
    return {artist.get_label() for artist in ax.get_children() if isinstance(artist.get_label(), str)}


def test_2d_picture_draws_every_object():
    port = WaveguidePort("in", position=(-0.5e-3, 0.0), axis="x", span=1e-3)
    sim = fdtd.Simulation(
        size=(2e-3, 2e-3),
        cell_size=40e-6,
        boundary=fdtd.PML(thickness=5),
        sources=[
            fdtd.PointDipole((0, 0), "Ez", PULSE),
            fdtd.CurrentSource("Ez", PULSE, center=(-0.6e-3, 0), size=(0, 0.8e-3)),
        ],
        structures=[
            fdtd.Structure(geometry.Disk((0.4e-3, 0), 0.3e-3), fdtd.Medium(4.0)),
            fdtd.Structure(geometry.Rectangle((-0.8e-3, -0.5e-3), (-0.7e-3, 0.5e-3)), fdtd.PEC()),
        ],
        monitors=[
            fdtd.FieldProbe("p", (2e-4, 0)),
            port.monitor([150e9]),
            fdtd.FluxMonitor("flux", [150e9], center=(0.7e-3, 0), size=(0, 1e-3)),
        ],
    )
    region = fdtd.DesignRegion((0.0, 0.6e-3), (0.4e-3, 0.2e-3), torch.full((11, 5), 2.0))
    sim = fdtd.Simulation(
        size=(2e-3, 2e-3),
        cell_size=40e-6,
        boundary=fdtd.PML(thickness=5),
        sources=sim.sources,
        structures=sim.structures,
        monitors=sim.monitors,
        design_regions=[region],
    )
    ax = sim.plot()
    labels = _labels(ax)
    expected = {
        "design region 0",
        "source 0: PointDipole",
        "source 1: CurrentSource",
        "monitor p",
        "port in",
        "monitor flux",
        "PML x-",
        "PML x+",
        "PML y-",
        "PML y+",
        "structure 0",
        "structure 1",
        "PEC",
    }
    assert expected <= labels, expected - labels
    assert sum(isinstance(a, ContourSet) for a in ax.get_children()) == 2
    assert ax.get_xlabel() == "x (mm)"
    # the permittivity image spans the disk's value: 1 (vacuum) to 4 inside
    image = ax.get_images()[0]
    assert image.get_array().max() == pytest.approx(4.0) and image.get_array().min() == pytest.approx(1.0)
    plt.close(ax.figure)


def test_3d_section_and_refusal():
    sim = fdtd.Simulation(
        size=(1e-3, 1e-3, 1e-3),
        cell_size=100e-6,
        boundary=fdtd.PML(thickness=2),
        sources=[fdtd.PointDipole((0, 0, 0), "Ez", PULSE)],
        structures=[
            fdtd.Structure(geometry.Box((-2e-4, -2e-4, -1e-4), (2e-4, 2e-4, 1e-4)), fdtd.Medium(3.0))
        ],
        monitors=[fdtd.FluxMonitor("top", [150e9], center=(0, 0, 2e-4), size=(4e-4, 4e-4, 0))],
    )
    ax = sim.plot(normal="y", position=0.0)
    labels = _labels(ax)
    # the flux plane z = 0.2 mm is a line in the y = 0 section; the box is outlined; PML on x and z
    assert {"source 0: PointDipole", "monitor top", "structure 0", "PML x-", "PML z+"} <= labels
    assert "PML y-" not in labels
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x (mm)", "z (mm)")
    # a section above the box shows no structure and not the dipole, but still the flux plane
    above = sim.plot(normal="z", position=2e-4)
    assert "structure 0" not in _labels(above) and "source 0: PointDipole" not in _labels(above)
    assert "monitor top" in _labels(above)
    with pytest.raises(ValueError, match="z = 0.002 m lies outside the domain"):
        sim.plot(normal="z", position=2e-3)
    with pytest.raises(ValueError, match="normal must be"):
        sim.plot(normal="w")
    plt.close("all")


def test_a_lumped_port_in_a_dielectric_leaves_the_dielectric_permittivity_in_the_picture():
    """A lumped resistor's medium (``AxialConductivity``) only adds a conductivity along its axis: the
    section through it shows the substrate's permittivity there, the air's elsewhere."""
    from mindelec.fdtd.plotting import _Section, permittivity_section, structure_fills

    port = fdtd.LumpedPort(
        "feed", center=(0, 0, 5e-5), size=(1e-4,) * 3, waveform=PULSE, frequencies=torch.tensor([100e9]))
    substrate = fdtd.Structure(geometry.Box((-3e-4, -3e-4, -1e-4), (3e-4, 3e-4, 2e-4)), fdtd.Medium(4.4))
    sim = fdtd.Simulation(
        size=(1e-3, 1e-3, 1e-3), cell_size=100e-6, boundary=fdtd.PML(thickness=2),
        structures=[substrate, port.resistor], sources=[port.source], monitors=[port],
    )
    section = _Section(sim.grid, "z", 5e-5)
    permittivity, conductor = permittivity_section(sim, section, structure_fills(sim, section))
    middle = [n // 2 for n in permittivity.shape]
    assert float(permittivity[middle[0], middle[1]]) == pytest.approx(4.4)  # the port's cell
    assert float(permittivity[0, 0]) == pytest.approx(1.0) and float(conductor.max()) == 0.0
    sim.plot(normal="z", position=5e-5)  # the whole picture (it raised on the resistor's medium)
    plt.close("all")


def test_1d_line_plot():
    sim = fdtd.Simulation(
        size=(1e-3,),
        cell_size=10e-6,
        boundary=fdtd.PML(thickness=10),
        sources=[fdtd.PointDipole((-3e-4,), "Ez", PULSE)],
        structures=[fdtd.Structure(geometry.Interval(0.0, 2e-4), fdtd.Medium(2.5))],
        monitors=[fdtd.FieldProbe("p", (3e-4,))],
    )
    ax = sim.plot()
    (line,) = [a for a in ax.get_lines() if a.get_label() == "permittivity"]
    assert max(line.get_ydata()) == pytest.approx(2.5) and min(line.get_ydata()) == pytest.approx(1.0)
    assert {"source 0: PointDipole", "monitor p", "PML x-", "PML x+"} <= _labels(ax)
    plt.close(ax.figure)
