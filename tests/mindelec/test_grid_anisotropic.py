"""Cells with a different edge per axis, and zero-thickness PEC sheets, against the resonances of a PEC box.

A rectangular PEC cavity ``a x b x d`` has TM_mn0 modes (Ez, uniform along z) at
``f = (c / 2) sqrt((m / a)^2 + (n / b)^2)``. On a Yee grid the same mode rings at the discrete
dispersion relation ``(sin(pi f dt) / (c dt))^2 = sum_axes sin(k_a d_a / 2)^2 / (d_a / 2)^2`` with
``k_x = m pi / a``, ``k_y = n pi / b``, ``k_z = 0`` (Taflove and Hagness, ch. 4): both references are
analytic; the discrete one isolates the spacing each axis uses from the grid's dispersion error.
"""

import math

import numpy as np
import pytest
import torch

import mindelec as me
from common.units import SPEED_OF_LIGHT

SIZE = (10e-3, 6e-3, 4e-3)
CELLS = (0.5e-3, 0.3e-3, 0.25e-3)


def _ringing_frequency(sim, steps, band):
    """The frequency (Hz) of the strongest spectral line of the probe "p" in ``band``."""
    series = sim.run(steps=steps, progress=False)["p"]["Ez"].double().numpy()
    padded = 1 << 18
    spectrum = np.abs(np.fft.rfft(series * np.hanning(len(series)), padded))
    frequencies = np.fft.rfftfreq(padded, sim.dt)
    inside = np.nonzero((frequencies > band[0]) & (frequencies < band[1]))[0]
    peak = inside[np.argmax(spectrum[inside])]
    left, middle, right = np.log(spectrum[peak - 1 : peak + 2])
    shift = 0.5 * (left - right) / (left - 2 * middle + right)  # parabolic refinement in log amplitude
    return frequencies[peak] + shift * (frequencies[1] - frequencies[0])


def _discrete_frequency(a, b, dt, cells):
    """The Yee-grid frequency (Hz) of the TM110 mode of an ``a x b`` PEC box with these cells."""
    waves = ((math.pi / a, cells[0]), (math.pi / b, cells[1]))
    total = sum((math.sin(k * h / 2) / (h / 2)) ** 2 for k, h in waves)
    return math.asin(SPEED_OF_LIGHT * dt * math.sqrt(total) / 2) / (math.pi * dt)


def _cavity(f0, structures=()):
    waveform = me.fdtd.GaussianPulse(f0=f0, fwidth=12e9)
    return me.fdtd.Simulation(
        size=SIZE,
        cell_size=CELLS,
        structures=structures,
        sources=[me.fdtd.CurrentSource("Ez", waveform, center=(-2.1e-3, 1.05e-3, 0), size=(0, 0, SIZE[2]))],
        monitors=[me.fdtd.FieldProbe("p", position=(-1.4e-3, -0.9e-3, 0), components=("Ez",))],
        dtype=torch.float64,
        threads=1,
    )


def test_per_axis_cells_counts_and_stability_limit():
    grid = me.fdtd.Grid(SIZE, CELLS)
    assert grid.shape == (20, 20, 16)
    assert grid.spacing == pytest.approx(CELLS, rel=1e-12)
    sim = _cavity(29e9)
    expected = 1 / (SPEED_OF_LIGHT * math.sqrt(sum(1 / h**2 for h in CELLS)))
    assert sim.dt_limit == pytest.approx(expected, rel=1e-12)


def test_bad_per_axis_cells_are_refused():
    with pytest.raises(ValueError, match="one per axis"):
        me.fdtd.Grid(SIZE, (1e-3, 1e-3))
    with pytest.raises(ValueError, match="positive"):
        me.fdtd.Grid(SIZE, (1e-3, -1e-3, 1e-3))


def test_anisotropic_cavity_rings_at_the_tm110_frequency():
    sim = _cavity(29e9)
    measured = _ringing_frequency(sim, 4000, (24e9, 34e9))
    continuum = SPEED_OF_LIGHT / 2 * math.hypot(1 / SIZE[0], 1 / SIZE[1])
    assert measured == pytest.approx(_discrete_frequency(SIZE[0], SIZE[1], sim.dt, CELLS), rel=3e-4)
    assert measured == pytest.approx(continuum, rel=1e-2)


def test_pec_sheet_halves_the_cavity():
    sheet = me.fdtd.pec_sheet(center=(0, 0, 0), size=(0, SIZE[1], SIZE[2]), cell_size=CELLS)
    sim = _cavity(39e9, structures=[sheet])
    electric, _ = sim._coefficients()
    middle = sim.grid.shape[0] // 2  # the integer-node plane x = 0
    for component in ("Ey", "Ez"):  # tangential: zero on the plate, rim included
        assert torch.all(torch.as_tensor(electric[component][1])[middle] == 0)
    assert torch.all(torch.as_tensor(electric["Ex"][1]) > 0)  # normal: untouched
    measured = _ringing_frequency(sim, 4000, (33e9, 45e9))
    half = SIZE[0] / 2
    assert measured == pytest.approx(_discrete_frequency(half, SIZE[1], sim.dt, CELLS), rel=3e-4)


@pytest.mark.parametrize("hole", [False, True])
def test_pec_solid_with_faces_on_node_planes_is_drawn_to_its_faces(hole):
    """A PEC block whose face lies on a node plane zeroes the tangential E on that face, as the PEC walls
    and sheets do: the cavity left beside it rings at the Yee grid's own frequency for its size. Two
    cases: the block fills the half x > 0 (the cavity is the other half), and a block fills the domain
    but for a vacuum cavity whose four side faces lie on node planes (a hole cut by a later structure)."""
    from common.geometry import Box

    big = 1.0
    if hole:
        a, b = SIZE[0] - 4 * CELLS[0], SIZE[1] - 4 * CELLS[1]  # two cells of metal on every side
        structures = [
            me.fdtd.Structure(Box((-big, -big, -big), (big, big, big)), me.fdtd.PEC()),
            me.fdtd.Structure(Box((-a / 2, -b / 2, -big), (a / 2, b / 2, big)), me.fdtd.Medium()),
        ]
        band = (24e9, 40e9)
    else:
        a, b = SIZE[0] / 2, SIZE[1]
        structures = [me.fdtd.Structure(Box((0.0, -big, -big), (big, big, big)), me.fdtd.PEC())]
        band = (33e9, 45e9)
    sim = _cavity(sum(band) / 2, structures=structures)
    measured = _ringing_frequency(sim, 4000, band)
    assert measured == pytest.approx(_discrete_frequency(a, b, sim.dt, CELLS), rel=3e-4)
