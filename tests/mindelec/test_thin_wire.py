"""Thin wires of a given radius in 3D FDTD (``me.fdtd.ThinWire``), against a moment-method dipole.

Reference: a centre-fed dipole of length ``L`` and radius ``a`` with a delta-gap source, solved here by the
method of moments (the electric-field integral equation in mixed-potential form, reduced kernel
``exp(-jkR) / (4 pi R)`` with ``R = sqrt((z - z')^2 + a^2)``, piecewise-linear current, Galerkin testing; the
``1/R`` part of the inner integrals analytic, the rest by Gauss-Legendre quadrature). It converges in the
number of segments while the segments stay longer than a few radii (at ``a = 1e-5 lambda``: 78.05 + j44.38,
78.09 + j44.55, 78.11 + j44.65 ohm at 100, 200, 400 segments) and approaches King's thin-wire value
73 + j42.5 ohm only slowly as the radius vanishes (``L = lambda/2``: 78.1 + j44.6 ohm at ``a = 1e-5 lambda``,
80.4 + j45.5 at ``1e-4 lambda``, 86.6 + j46.8 at ``1e-3 lambda``).

Moment-method accuracy, 40 to 120 segments at L/a = 500 and 5000: the series resonance and the reactance
slope there change by less than 0.1 %, Z at L = lambda/2 by about 1 % (the delta gap's susceptance grows
slowly with refinement); the dipole tests use 60 segments.

Measured (dipole of 22 cells fed by a one-cell gap, ends half a cell beyond its zeroed edges; FDTD against
the moment method at the same length and radius; the resonance as L / lambda):

* L/a = 500 (a = lambda/1000 at L = lambda/2, 0.044 cells): resonance 0.4756 (0.4757), 71.3 ohm (72.0),
  reactance slope ``dX/d(L/lambda)`` there 1899 ohm (1892); Z(L = lambda/2) = 83.7 + j46.2 ohm (86.1 + j46.2).
* L/a = 5000: 0.4831 (0.4838), 71.3 ohm (72.1), 2779 ohm (2769); 79.3 + j47.0 ohm (80.2 + j45.0).
* L/a = 50000: 0.4883 (0.4879), 71.3 ohm (72.2), 3644 ohm (3646); 76.5 + j42.8 ohm (78.0 + j44.1), 4.0 %
  from King's 73.1 + j42.5.

Without the end correction (``END_CORRECTION = 0``) the resonances came 0.65, 1.3 and 1.6 % short at 22
cells and 0.2, 0.6 and 0.8 % at 42, and Z(L = lambda/2) at L/a = 50000 was 81.1 + j73.8 (22 cells) and
79.7 + j59.0 ohm (42), 21 % from King's. With it, at 16, 30 and 42 cells (run outside the suite): every
resonance within 0.25 %, e.g. 42 cells, L/a = 50000: 0.4879 (0.4879), 77.5 + j44.1 ohm, 5.5 % from King's.
``MINDELEC_THIN_WIRE_CELLS`` selects the dipole's length in cells (even, default 22; 42 for a finer run).
"""

import math
import os

import numpy as np
import pytest
import torch
from wire_reference import moment_method_impedance  # tests/mindelec is on sys.path under pytest

import mindelec as me
from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT

CELL = 1e-3


def _resonance(half_lengths, impedance):
    """``(L/lambda, R, dX/d(L/lambda))`` at the first series resonance (X from - to +), interpolated."""
    crossing = np.nonzero((impedance.imag[:-1] < 0) & (impedance.imag[1:] >= 0))[0]
    assert len(crossing) == 1, impedance
    k = crossing[0]
    weight = -impedance.imag[k] / (impedance.imag[k + 1] - impedance.imag[k])
    step = half_lengths[k + 1] - half_lengths[k]
    resistance = impedance.real[k] + weight * (impedance.real[k + 1] - impedance.real[k])
    return half_lengths[k] + weight * step, resistance, (impedance.imag[k + 1] - impedance.imag[k]) / step


def test_moment_method_converges_and_approaches_king_for_a_vanishing_radius():
    coarse, fine = (moment_method_impedance(0.5, 1e-5, 1.0, n) for n in (100, 200))
    assert abs(fine - coarse) < 5e-3 * abs(fine)
    king = 73.13 + 42.54j
    assert abs(fine - king) < 0.10 * abs(king)
    thicker = moment_method_impedance(0.5, 1e-3, 1.0, 100)
    assert thicker.real > fine.real + 5  # a thicker wire: more resistance at L = lambda/2


def _dipole(cells, radius, half_lengths):
    """Input impedance (ohm) of a thin-wire dipole of ``cells`` cells and ``radius`` (m) fed by a 50 ohm port
    in a one-cell gap at its centre, at the frequencies where ``L / lambda`` is ``half_lengths``."""
    span = cells - 1  # the zeroed edges and the gap, half a cell inside each end
    margin, pml = max(8, span // 3), 8
    lower, upper = span // 2, span - 1 - span // 2  # edges below and above the gap
    across = 2 * (margin + pml + 1)
    along = 2 * (max(lower, upper + 1) + margin + pml)
    half_wave = SPEED_OF_LIGHT / (2 * cells * CELL)
    waveform = me.fdtd.GaussianPulse(f0=half_wave, fwidth=1.2 * half_wave)
    frequencies = 2 * torch.as_tensor(half_lengths, dtype=torch.float64) * half_wave
    port = me.fdtd.LumpedPort(
        "feed", center=(0, 0, CELL / 2), size=(CELL,) * 3, waveform=waveform, frequencies=frequencies
    )
    start, end = (0, 0, -(lower + 0.5) * CELL), (0, 0, (upper + 1.5) * CELL)
    sim = me.fdtd.Simulation(
        size=(across * CELL, across * CELL, along * CELL),
        cell_size=CELL,
        boundary=me.fdtd.PML(thickness=pml),
        structures=[me.fdtd.ThinWire(start, end, radius, CELL, gaps=[port.center]), port.resistor],
        sources=[port.source],
        monitors=[port],
        threads=1,
    )
    result = sim.run(until=40 * cells * CELL / SPEED_OF_LIGHT, progress=False)
    return result["feed"]["impedance"].numpy()


@pytest.mark.parametrize("slenderness", [500, 5000, 50000])
def test_thin_wire_dipole_against_the_moment_method(slenderness, validation_figure):
    """L/a = 500, 5000 and 50000 (a = lambda/1000 .. lambda/100000 at L = lambda/2; 0.044 .. 0.00044 cells
    at 22 cells): the resonance within 0.5 % of the moment method's (measured 0.01, 0.15 and -0.08 %; 0.65,
    1.3 and 1.6 % short without the end correction), its resistance within 2 % (1.0-1.2 % low), the
    reactance slope there within 2 % (0.0-0.4 %). At L/a = 50000 the half-wave dipole's impedance is
    within 10 % of King's thin-wire 73.1 + j42.5 ohm (measured 76.5 + j42.8, 4.0 %; 21 % before)."""
    cells = int(os.environ.get("MINDELEC_THIN_WIRE_CELLS", "22"))
    if cells % 2:
        pytest.fail(f"MINDELEC_THIN_WIRE_CELLS={cells}: a centre-fed dipole needs an even number of cells")
    half_lengths = np.linspace(0.40, 0.55, 13)
    fdtd = _dipole(cells, cells * CELL / slenderness, half_lengths)
    # the same dipole by the moment method: L = 1, lambda = 1 / (L / lambda)
    reference = np.array([moment_method_impedance(1.0, 1 / slenderness, 1 / h, 60) for h in half_lengths])
    (f_length, f_resistance, f_slope), (m_length, m_resistance, m_slope) = (
        _resonance(half_lengths, z) for z in (fdtd, reference)
    )
    half = int(np.argmin(abs(half_lengths - 0.5)))
    validation_figure(
        f"{cells} cells, L/a = {slenderness}: resonance at L = {f_length:.4f} lambda (MoM {m_length:.4f}), "
        f"R = {f_resistance:.1f} ohm (MoM {m_resistance:.1f}), dX/d(L/lambda) = {f_slope:.0f} ohm (MoM "
        f"{m_slope:.0f}); Z(L = lambda/2) = {fdtd[half]:.1f} ohm (MoM {reference[half]:.1f}, King 73.1+42.5j)"
    )
    assert f_length == pytest.approx(m_length, rel=0.005)
    assert f_resistance == pytest.approx(m_resistance, rel=0.02)
    assert f_slope == pytest.approx(m_slope, rel=0.02)
    if slenderness == 50000:  # a = lambda / 100000 at L = lambda / 2: the vanishing radius of King's theory
        king = 73.13 + 42.54j
        assert abs(fdtd[half] - king) < 0.10 * abs(king), fdtd[half]


def _small_run(structures, port, differentiable=False, compiled=True):
    """A short run of a small grid; returns the port's gap-voltage DFT."""
    medium = me.fdtd.Medium(permittivity=torch.tensor(1.0, dtype=torch.float64, requires_grad=differentiable))
    from common.geometry import Box

    block = me.fdtd.Structure(Box((4 * CELL,) * 3, (6 * CELL,) * 3), medium)
    sim = me.fdtd.Simulation(
        size=(14 * CELL,) * 3,
        cell_size=CELL,
        structures=[block, *structures, port.resistor],
        sources=[port.source],
        monitors=[port],
        dtype=torch.float64,
        compiled=compiled,
    )
    with pytest.warns(UserWarning, match="truncated record"):
        result = sim.run(steps=40, progress=False)
    return medium, result["feed"]["voltage"]


def _port():
    waveform = me.fdtd.GaussianPulse(f0=25e9, fwidth=25e9)
    return me.fdtd.LumpedPort("feed", (0, 0, CELL / 2), (CELL,) * 3, waveform, [20e9, 25e9])


def test_thin_wire_at_the_bare_line_radius_is_the_bare_line_and_paths_agree(monkeypatch):
    """s = (2 / pi) ln(0.955 d / a) = 1 at the bare line's radius 0.1985 d: the corrections vanish but at
    the ends (the end correction), and without it the run is the pec_sheet wire's; at another radius the
    compiled, torch and differentiable paths give one answer, and gradients flow."""
    port = _port()
    bare_radius = CELL * me.fdtd.thin_wire.BARE_RADIUS
    bare_wire = me.fdtd.ThinWire((0, 0, -4.5 * CELL), (0, 0, 5.5 * CELL), bare_radius, CELL)
    grid = me.fdtd.Simulation(size=(14 * CELL,) * 3, cell_size=CELL, structures=[bare_wire]).grid
    corrections = me.fdtd.thin_wire.WireCorrections(grid, [bare_wire])
    end = me.fdtd.thin_wire.end_factor(1.0)
    expected = {"Ez": 1 / end - 1, "Hx": end - 1, "Hy": end - 1}  # eps p, mu / p beyond the ends
    for component, (index, factor, _) in corrections.entries.items():
        beyond_ends = (index[2] == 2) | (index[2] == 12)  # the edges beyond the end nodes 3 and 12
        corrected = factor.abs() > 1e-12
        if component in expected:
            assert torch.equal(corrected, beyond_ends), component
            assert torch.allclose(factor[corrected], torch.tensor(expected[component], dtype=torch.float64))
        else:
            assert not corrected.any(), component
    monkeypatch.setattr(me.fdtd.thin_wire, "END_CORRECTION", 0.0)
    arms = [
        me.fdtd.pec_sheet(center=(0, 0, -2 * CELL), size=(0, 0, 4 * CELL), cell_size=CELL),
        me.fdtd.pec_sheet(center=(0, 0, 3 * CELL), size=(0, 0, 4 * CELL), cell_size=CELL),
    ]
    start, end = (0, 0, -4.5 * CELL), (0, 0, 5.5 * CELL)
    equivalent = me.fdtd.ThinWire(start, end, bare_radius, CELL, gaps=[port.center])
    _, bare = _small_run(arms, port)
    _, same = _small_run([equivalent], port)
    assert torch.allclose(same, bare, rtol=1e-9, atol=0)
    monkeypatch.undo()  # the paths below with the end correction
    thin = me.fdtd.ThinWire(start, end, CELL / 100, CELL, gaps=[port.center])
    _, compiled = _small_run([thin], port)
    _, plain = _small_run([thin], port, compiled=False)
    medium, graph = _small_run([thin], port, differentiable=True)
    assert not torch.allclose(compiled, bare, rtol=1e-2, atol=0)
    assert torch.allclose(plain, compiled, rtol=1e-9, atol=0)
    assert torch.allclose(graph.detach(), compiled, rtol=1e-9, atol=0)
    (gradient,) = torch.autograd.grad(graph.abs().sum(), medium.permittivity)
    assert torch.isfinite(gradient) and gradient != 0


def test_thin_wire_ends_meeting_share_their_edge_and_a_very_thin_wire_stays_stable():
    """Two wires meeting end to end along one line correct the axial edge between their ends once (two
    radii there are refused); a wire of radius 1e-6 cells (the largest scale factors) stays bounded for
    4000 steps at the usual time step."""
    port = _port()
    halves = [
        me.fdtd.ThinWire((0, 0, -4.5 * CELL), (0, 0, 0.5 * CELL), CELL / 50, CELL),
        me.fdtd.ThinWire((0, 0, 0.5 * CELL), (0, 0, 5.5 * CELL), CELL / 50, CELL),
    ]
    grid = me.fdtd.Simulation(size=(14 * CELL,) * 3, cell_size=CELL, structures=halves).grid
    corrections = me.fdtd.thin_wire.WireCorrections(grid, halves)
    index, factor, _ = corrections.entries["Ez"]  # the axial edges beyond the ends: 3, one shared
    scale = me.fdtd.thin_wire.radius_scale(CELL, CELL / 50)
    assert sorted(index[2].tolist()) == [2, 7, 12]
    end = me.fdtd.thin_wire.end_factor(scale)
    assert torch.allclose(factor, torch.full((3,), scale / end - 1.0, dtype=torch.float64))
    mixed = [halves[0], me.fdtd.ThinWire((0, 0, 0.5 * CELL), (0, 0, 5.5 * CELL), CELL / 20, CELL)]
    with pytest.raises(ConfigurationError, match="of one radius"):
        me.fdtd.Simulation(size=(14 * CELL,) * 3, cell_size=CELL, structures=mixed)
    thin = me.fdtd.ThinWire((0, 0, -4.5 * CELL), (0, 0, 5.5 * CELL), CELL * 1e-6, CELL, gaps=[port.center])
    with pytest.warns(UserWarning, match="below the floor"):  # s = 8.8: the end correction is cut short
        sim = me.fdtd.Simulation(
            size=(14 * CELL,) * 3, cell_size=CELL, structures=[thin, port.resistor], sources=[port.source],
            monitors=[port],
        )
    result = sim.run(steps=4000, progress=False)
    voltage = result["feed"]["voltage"]
    assert torch.isfinite(voltage).all() and voltage.abs().max() < 1e3


def test_thin_wire_refuses_thick_skew_and_off_grid_wires():
    with pytest.raises(ConfigurationError, match="half a cell"):
        me.fdtd.ThinWire((0, 0, 0), (0, 0, 4 * CELL), CELL / 2, CELL)
    with pytest.raises(ConfigurationError, match="exactly one axis"):
        me.fdtd.ThinWire((0, 0, 0), (CELL, 0, 4 * CELL), CELL / 10, CELL)
    with pytest.raises(ConfigurationError, match="not the centre of one of the wire's edges"):
        me.fdtd.ThinWire((0, 0, 0), (0, 0, 4 * CELL), CELL / 10, CELL, gaps=[(0, 0, 1.5 * CELL)])
    with pytest.raises(ConfigurationError, match="whole number of cells"):
        me.fdtd.ThinWire((0, 0, 0), (0, 0, 4.5 * CELL), CELL / 10, CELL)
    off_grid = me.fdtd.ThinWire((CELL / 2, 0, -CELL / 2), (CELL / 2, 0, 3.5 * CELL), CELL / 10, CELL)
    with pytest.raises(ConfigurationError, match="x = 0.0005 m is not on an integer node"):
        me.fdtd.Simulation(size=(12 * CELL,) * 3, cell_size=CELL, structures=[off_grid])
    on_nodes = me.fdtd.ThinWire((0, 0, 0), (0, 0, 4 * CELL), CELL / 10, CELL)  # its ends must be half nodes
    with pytest.raises(ConfigurationError, match="start \\+ half a cell"):
        me.fdtd.Simulation(size=(12 * CELL,) * 3, cell_size=CELL, structures=[on_nodes])
    wires = [me.fdtd.ThinWire((x, 0, -CELL / 2), (x, 0, 3.5 * CELL), CELL / 10, CELL) for x in (0, CELL)]
    with pytest.raises(ConfigurationError, match="two cells apart"):
        me.fdtd.Simulation(size=(12 * CELL,) * 3, cell_size=CELL, structures=wires)


def test_a_wire_thicker_than_the_bare_line_gets_a_stable_time_step():
    """A wire of 0.36 cells' radius (thicker than the bare line's 0.1985: its circulating H updates faster
    than the lattice's) blew up within 512 steps at the default Courant number; the simulation now takes
    ``sqrt(s)`` of Yee's step (``s = radius_scale``) and its fields stay bounded and decay over 2,000 steps.
    Wires thinner than the bare line keep Yee's step."""
    radius = 0.36 * CELL
    scale = me.fdtd.thin_wire.radius_scale(CELL, radius)
    assert scale < 1

    def run(wire_radius):
        wire = me.fdtd.ThinWire((0, 0, -6.5 * CELL), (0, 0, 6.5 * CELL), wire_radius, CELL)
        source = me.fdtd.PointDipole((2 * CELL, 0, 0), "Ez", me.fdtd.GaussianPulse(20e9, 20e9))
        sim = me.fdtd.Simulation(size=(24 * CELL,) * 3, cell_size=CELL, boundary=me.fdtd.PML(6),
                                 structures=[wire], sources=[source], threads=1,
                                 monitors=[me.fdtd.FieldProbe("probe", (3 * CELL, 0, 0), ("Ez",))])
        return sim

    thick, thin = run(radius), run(CELL / 50)
    assert thick.dt_limit == pytest.approx(thin.dt_limit * math.sqrt(scale), rel=1e-12)
    field = torch.as_tensor(thick.run(steps=2000, progress=False)["probe"]["Ez"]).abs()
    assert torch.isfinite(field).all()
    assert field[-300:].max() < 1e-3 * field.max()


def test_joined_ends_drop_the_end_correction_and_wires_joined_at_a_corner_share_their_nodes():
    """A joined end (a pin on a plane or on another wire) sits on its end node and has no end correction;
    the free end keeps it. A pin joined at a corner to a stub of another radius takes the mean of the two
    wires' factors where their corrections meet; without ``joined`` the same two wires are refused (their
    corrections would overlap with nothing to say they touch)."""
    radius = CELL / 20
    pin = me.fdtd.ThinWire((0, 0, 0), (0, 0, 4.5 * CELL), radius, CELL, joined=(True, False))
    assert pin.edges == 4 and pin.end_nodes() == ((0, 0, 0), (0, 0, 4 * CELL))
    grid = me.fdtd.Simulation(size=(14 * CELL,) * 3, cell_size=CELL, structures=[pin]).grid
    index, factor, _ = me.fdtd.thin_wire.WireCorrections(grid, [pin]).entries["Ez"]
    assert index[2].tolist() == [11]  # only the edge beyond the free end (node 11), none below node 7
    scale = me.fdtd.thin_wire.radius_scale(CELL, radius)
    assert float(factor[0]) == pytest.approx(scale / me.fdtd.thin_wire.end_factor(scale) - 1)
    with pytest.raises(ConfigurationError, match="whole number of cells plus 0.5"):
        me.fdtd.ThinWire((0, 0, 0), (0, 0, 4 * CELL), radius, CELL, joined=(True, False))
    with pytest.raises(ConfigurationError, match="two booleans"):
        me.fdtd.ThinWire((0, 0, 0), (0, 0, 4 * CELL), radius, CELL, joined=(1, 0))

    def corner(joined):
        """The upright's top node and the stub's first are both the origin; joined there, or free."""
        top, first = ((0, 0, 0), (0, 0, 0)) if joined else ((0, 0, CELL / 2), (0, -CELL / 2, 0))
        upright = me.fdtd.ThinWire((0, 0, -3 * CELL), top, radius, CELL, joined=(True, joined))
        stub = me.fdtd.ThinWire(first, (0, 3.5 * CELL, 0), 2 * radius, CELL, joined=(joined, False))
        return upright, stub

    upright, stub = corner(True)
    apart = me.fdtd.ThinWire((3 * CELL, 0, 0), (3 * CELL, 0, 4.5 * CELL), radius, CELL, joined=(True, False))
    assert upright.meets(stub) and stub.meets(upright) and not upright.meets(apart)
    sim = me.fdtd.Simulation(size=(14 * CELL,) * 3, cell_size=CELL, structures=[upright, stub])
    corrections = me.fdtd.thin_wire.WireCorrections(sim.grid, [upright, stub])
    index, factor, _ = corrections.entries["Hx"]  # the Hx between the two wires' last and first edges
    node = (index[0] == 7) & (index[1] == 7) & (index[2] == 6)
    scales = [me.fdtd.thin_wire.radius_scale(CELL, r) for r in (radius, 2 * radius)]
    assert int(node.sum()) == 1
    assert float(factor[node][0]) == pytest.approx((1 / scales[0] - 1 + 1 / scales[1] - 1) / 2)
    with pytest.raises(ConfigurationError, match="two thin wires share an"):
        me.fdtd.Simulation(size=(14 * CELL,) * 3, cell_size=CELL, structures=list(corner(False)))
