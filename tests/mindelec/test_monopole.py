"""A quarter-wave monopole over a PEC ground plane, against image theory and the moment-method dipole.

Set-up: a thin wire (``me.fdtd.ThinWire`` of radius ``a``) standing on a PEC sheet that crosses the whole
domain, PML included (an infinite ground plane), its base joined to the plane (``joined=(True, False)``),
fed by a one-cell 50 ohm lumped port at its base; the wire's height ``h`` runs from the ground to its end
(``n + 1/2`` cells: ``n`` edges, the gap the first, and the free end half a cell beyond the last node, as
:mod:`mindelec.fdtd.thin_wire` models free ends).

References (image theory, Balanis ch. 4.7): over an infinite ground the monopole and its image are a dipole
of length ``2h`` fed across a gap with twice the voltage and the same current, so

* its input impedance is half the dipole's: the moment-method dipole of length ``2h`` and radius ``a``
  (``tests/mindelec/wire_reference.py``, the reference of ``tests/mindelec/test_thin_wire.py``), halved;
  for a vanishing radius the textbook ``36.5 + j21.25`` ohm at ``h = lambda/4`` (King's 73.1 + j42.5 halved);
* its pattern in the upper half-space is the half-wave dipole's ``cos(pi/2 cos theta) / sin theta`` at
  ``h = lambda/4`` (sinusoidal current), and its directivity twice the dipole's: 3.28 (5.16 dBi) for the
  thin quarter-wave monopole (the power goes into half the sphere);
* the power the port accepts leaves through a flux box standing on the ground plane (lossless wire).

The far field comes from the near-to-far transform of a box standing on the ground plane with the images
of its currents (:meth:`mindelec.fdtd.NearToFarResult.over_ground`).
"""

import math

import numpy as np
import pytest
import torch
from wire_reference import moment_method_impedance  # tests/mindelec is on sys.path under pytest

import mindelec as me
from common.units import SPEED_OF_LIGHT

CELL = 1e-3
PML = 8


def _monopole(edges, radius, heights, far_heights=(0.25,), joined=True):
    """Run a monopole of ``edges`` zeroed edges (height ``h = (edges + 1/2)`` cells) and ``radius`` (m) over
    an infinite ground: the port at the frequencies where ``h / lambda`` is ``heights``, a flux box and a
    near-to-far monitor at ``far_heights``; the base joined to the plane, or (``joined=False``) a free end
    half a cell below it.

    Returns:
        ``(ground z in m, result)``: the port ``"feed"``, the flux box ``"box"`` and the near-to-far monitor
        ``"far"`` on a box standing on the ground plane.
    """
    margin = max(8, edges // 2)
    across = 2 * (margin + PML + 1)
    below, above = PML + 1, edges + 1 + margin + PML
    size = (across * CELL, across * CELL, (below + above) * CELL)
    ground = -size[2] / 2 + below * CELL
    height = (edges + 0.5) * CELL
    quarter = SPEED_OF_LIGHT / (4 * height)
    frequencies, far_frequencies = (
        4 * torch.as_tensor(h, dtype=torch.float64) * quarter for h in (heights, far_heights)
    )
    waveform = me.fdtd.GaussianPulse(f0=quarter, fwidth=1.2 * quarter)
    port = me.fdtd.LumpedPort(
        "feed", center=(0, 0, ground + CELL / 2), size=(CELL,) * 3, waveform=waveform, frequencies=frequencies
    )
    plane = me.fdtd.pec_sheet(center=(0, 0, ground), size=(size[0], size[1], 0), cell_size=CELL)
    if joined:
        wire = me.fdtd.ThinWire((0, 0, ground), (0, 0, ground + height), radius, CELL, gaps=[port.center],
                                joined=(True, False))
    else:  # a free end half a cell under the plane, its end correction acting where the fields are zero
        wire = me.fdtd.ThinWire((0, 0, ground - CELL / 2), (0, 0, ground + height), radius, CELL,
                                gaps=[port.center])
    top = size[2] / 2 - (PML + 2) * CELL  # the box: on the ground, two cells inside the PML elsewhere
    box = dict(center=(0, 0, (ground + top) / 2), size=((across - 2 * PML - 4) * CELL,) * 2 + (top - ground,))
    sim = me.fdtd.Simulation(
        size=size,
        cell_size=CELL,
        boundary=me.fdtd.PML(thickness=PML),
        structures=[plane, wire, port.resistor],
        sources=[port.source],
        monitors=[
            port,
            me.fdtd.FluxBox("box", far_frequencies, **box),
            me.fdtd.NearToFarMonitor("far", far_frequencies, **box),
        ],
        threads=1,
    )
    return ground, sim.run(until=80 * height / SPEED_OF_LIGHT, progress=False)


def _resonance(heights, impedance):
    """``(h / lambda, R)`` at the first series resonance (X from - to +), interpolated linearly."""
    crossing = np.nonzero((impedance.imag[:-1] < 0) & (impedance.imag[1:] >= 0))[0]
    assert len(crossing) == 1, impedance
    k = crossing[0]
    weight = -impedance.imag[k] / (impedance.imag[k + 1] - impedance.imag[k])
    resistance = impedance.real[k] + weight * (impedance.real[k + 1] - impedance.real[k])
    return heights[k] + weight * (heights[k + 1] - heights[k]), resistance


KING_MONOPOLE = 36.5 + 21.25j  # ohm, the thin quarter-wave monopole (King's half-wave dipole halved)


def _validate(edges, slenderness, validation_figure):
    """The monopole of ``edges`` zeroed edges and ``2h / a = slenderness`` against its references; returns
    ``(resonance error, resistance error, |Z(lambda/4) - King| / |King|, directivity, pattern error,
    power balance error)``."""
    heights = np.linspace(0.20, 0.275, 16)
    height = (edges + 0.5) * CELL
    ground, result = _monopole(edges, 2 * height / slenderness, np.append(heights, 0.25))
    impedance = result["feed"]["impedance"].numpy()
    # the dipole of length 2h: L = 1, lambda = 1 / (2 h / lambda); the monopole's impedance is half of it
    reference = np.array(
        [moment_method_impedance(1.0, 1 / slenderness, 1 / (2 * h), 60) / 2 for h in heights]
    )
    (length, resistance), (m_length, m_resistance) = (
        _resonance(heights, z) for z in (impedance[:-1], reference)
    )
    quarter = impedance[-1]
    far = result["far"].over_ground(ground)
    accepted = result["feed"]["accepted_power"][-1:]
    balance = max(
        abs(float(result["box"]["flux"].double()[0] / accepted[0]) - 1),
        abs(float(far.radiated_power.double()[0] / accepted[0]) - 1),
    )
    directivity = float(far.directivity()[0])
    theta = torch.linspace(0.2, math.pi / 2, 31, dtype=torch.float64)
    intensity = far.intensity(theta, torch.zeros_like(theta))[0].double()
    analytic = (torch.cos(math.pi / 2 * torch.cos(theta)) / torch.sin(theta)) ** 2
    pattern = float((intensity / intensity.max() - analytic / analytic.max()).abs().max())
    below = far.intensity(torch.tensor([2.0]), torch.tensor([0.0]))
    assert float(below[0]) == 0.0  # nothing under the ground
    validation_figure(
        f"{edges + 0.5} cells high, 2h/a = {slenderness}: resonance at h = {length:.4f} lambda (MoM dipole "
        f"{m_length:.4f}), R = {resistance:.2f} ohm (MoM / 2: {m_resistance:.2f}); Z(h = lambda/4) = "
        f"{quarter:.2f} ohm (King 36.5+21.25j); D = {directivity:.3f} = "
        f"{10 * math.log10(directivity):.2f} dBi "
        f"(3.28 = 5.16 dBi); pattern within {100 * pattern:.2f} % of cos(pi/2 cos t)/sin t; flux box and "
        f"far field = accepted power within {100 * balance:.3f} %"
    )
    return (
        length / m_length - 1,
        resistance / m_resistance - 1,
        abs(quarter - KING_MONOPOLE) / abs(KING_MONOPOLE),
        directivity,
        pattern,
        balance,
    )


def test_quarter_wave_monopole_coarse(validation_figure):
    """10.5 cells high, 2h/a = 50000 (about 4 s): resonance within 0.5 % of the moment method's (measured
    +0.06 %), R there within 3 % (35.8 against 36.1 ohm, measured -0.9 %), Z(lambda/4) within 10 % of King's
    36.5 + j21.25 (38.2 + j21.6 ohm, 4.2 %; the MoM's 39.0 + j22.1 at this radius is 7 % off it), D within
    2 % of 3.28 (3.270), the pattern within 2 % of the peak (0.02 %), the power balance within 1 %
    (0.08 %)."""
    resonance, resistance, king, directivity, pattern, balance = _validate(10, 50000, validation_figure)
    assert abs(resonance) < 0.005
    assert abs(resistance) < 0.03
    assert king < 0.10
    assert directivity == pytest.approx(3.28, rel=0.02)
    assert pattern < 0.02
    assert balance < 0.01


def test_a_joined_base_is_a_free_end_under_an_infinite_plane():
    """Under a plane that crosses the whole domain the fields are zero, so the end correction of a free end
    half a cell below it acts on nothing: the joined base gives the same impedance to round-off."""
    heights = np.linspace(0.22, 0.26, 3)
    impedances = [_monopole(6, 13 * CELL / 5000, heights, joined=joined)[1]["feed"]["impedance"]
                  for joined in (True, False)]
    assert torch.allclose(impedances[0], impedances[1], rtol=1e-9, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("slenderness", [5000, 50000])
def test_quarter_wave_monopole_fine(slenderness, validation_figure):
    """20.5 cells high (about 10 s each): resonance within 0.2 % of the moment method's (measured -0.11 % at
    2h/a = 5000, -0.01 % at 50000), R within 1.5 % (-0.25, -0.27 %), D within 1 % of 3.28 (3.282, 3.277),
    the pattern within 1 % (0.41, 0.23 %), the power balance within 0.5 % (0.02 %); Z(lambda/4) within 12 %
    of King's (39.8 + j23.3 ohm at 5000, 9.4 %; 38.7 + j22.1 at 50000, 5.5 %)."""
    resonance, resistance, king, directivity, pattern, balance = _validate(20, slenderness, validation_figure)
    assert abs(resonance) < 0.002
    assert abs(resistance) < 0.015
    assert king < 0.12
    assert directivity == pytest.approx(3.28, rel=0.01)
    assert pattern < 0.01
    assert balance < 0.005


@pytest.mark.parametrize(
    "current, factor",
    [
        ("electric_current", lambda kh: 4 * np.sin(kh) ** 2),  # horizontal J: its image opposes it
        ("magnetic_current", lambda kh: 4 * np.cos(kh) ** 2),  # horizontal M: its image repeats it
    ],
)
def test_over_ground_images_follow_the_array_factor(current, factor):
    """A horizontal current element at height d over a PEC plane: ``|AF|^2 = 4 sin^2(k d cos theta)`` for an
    electric one, ``4 cos^2(...)`` for a magnetic one (Balanis 4.7.2), against the element alone; a vertical
    one the other way round; zero below the plane; the half-space's power against the quadrature of
    the intensity over the upper hemisphere."""
    from common.errors import ConfigurationError

    wavelength, height, ground = 1.0, 0.3, -0.1
    k = 2 * math.pi / wavelength
    for axis, expected in ((0, factor), (2, lambda kh: 4 - factor(kh))):
        element = torch.zeros(1, 1, 3, dtype=torch.complex128)
        element[0, 0, axis] = 1.0
        currents = {kind: torch.zeros_like(element) for kind in ("electric_current", "magnetic_current")}
        currents[current] = element
        alone = me.fdtd.NearToFarResult(
            frequencies=torch.tensor([SPEED_OF_LIGHT / wavelength], dtype=torch.float64),
            positions=torch.tensor([[0.0, 0.0, ground + height]], dtype=torch.float64),
            areas=torch.ones(1, dtype=torch.float64),
            flux=torch.zeros(1, dtype=torch.float64),
            **currents,
        )
        over = alone.over_ground(ground)
        theta = torch.linspace(0.05, math.pi / 2 - 0.05, 20, dtype=torch.float64)
        phi = torch.full_like(theta, 0.7)
        ratio = (over.intensity(theta, phi) / alone.intensity(theta, phi))[0].numpy()
        assert np.allclose(ratio, expected(k * height * np.cos(theta.numpy())), rtol=1e-9, atol=1e-9)
        assert float(over.intensity(theta + math.pi / 2, phi).abs().max()) == 0.0
        nodes, weights = np.polynomial.legendre.leggauss(64)  # cos theta over 0 .. 1, phi over 0 .. 2 pi
        cosines = torch.as_tensor((nodes + 1) / 2)
        azimuths = torch.arange(128, dtype=torch.float64) * (2 * math.pi / 128)
        intensity = over.intensity(torch.arccos(cosines)[:, None], azimuths[None, :])[0]
        hemisphere = float((intensity * torch.as_tensor(weights)[:, None] / 2).sum() * 2 * math.pi / 128)
        assert float(over.radiated_power[0]) == pytest.approx(hemisphere, rel=1e-6)
    with pytest.raises(ConfigurationError, match="already over a ground"):
        over.over_ground(ground)
    with pytest.raises(ConfigurationError, match="axis must be"):
        alone.over_ground(0.0, axis="w")
