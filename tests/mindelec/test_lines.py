"""Transmission lines with metal: the mode solvers (mindelec.modes with a conductor, mindelec.quasi_tem) and
the characteristic impedance (mindelec.line_impedance) against closed forms (mindelec.lines, themselves
checked against scikit-rf's independent implementations) and exact TEM relations.

Zero-thickness strips converge at first order in the cell size (the field is singular at their edges: on
the FR4 microstrip the strip looks about 0.7 cell wider than its node span), so the microstrip and
coplanar tests compare both the finer grid's value and the first-order Richardson extrapolation
``2 X(d/2) - X(d)`` with the closed forms. The PEC box around each line is several line widths away; it
changes ``Z0`` and ``eps_eff`` by under 0.3 % (measured by doubling it).
"""

import math

import numpy as np
import pytest
import torch

from common.errors import ConfigurationError, DataError
from common.units import VACUUM_PERMITTIVITY
from mindelec import conductors, line_impedance, lines, modes, quasi_tem

# a 50 ohm microstrip on FR4 (zero-thickness strip), in a 48 x 24 mm PEC box
STRIP, SUBSTRATE, FR4 = 3.0e-3, 1.6e-3, 4.4
BOX = (48e-3, 24e-3)


def microstrip(cell):
    return lines.microstrip_section(STRIP, SUBSTRATE, FR4, cell, *BOX)


def extrapolated(coarse, fine):
    """First-order Richardson extrapolation from cells ``d`` and ``d / 2``."""
    return 2 * fine - coarse


def test_closed_forms_agree_with_scikit_rf():
    """lines' Hammerstad-Jensen / Kirschning-Jansen microstrip and conductor-backed CPW against scikit-rf's
    MLine and CPW (zero thickness, lossless, frequency-invariant substrate)."""
    skrf = pytest.importorskip("skrf")
    frequencies = [1e6, 1e9, 5e9, 20e9]
    band = skrf.Frequency.from_f(frequencies, unit="Hz")
    common = dict(frequency=band, t=None, rho=0, tand=0, diel="frequencyinvariant", z0_port=50)
    line = skrf.media.MLine(w=STRIP, h=SUBSTRATE, ep_r=FR4, disp="kirschningjansen", **common)
    ours = np.array([lines.microstrip_dispersive(STRIP, SUBSTRATE, FR4, f) for f in frequencies])
    assert np.allclose(ours[:, 0], line.z0.real, rtol=1e-8)
    assert np.allclose(ours[:, 1], line.ep_reff_f.real, rtol=1e-8)
    assert abs(lines.microstrip_static(STRIP, SUBSTRATE, FR4)[0] - ours[0, 0]) < 1e-3  # 1 MHz ~ static
    cpw = skrf.media.CPW(w=1e-3, s=0.2e-3, h=0.8e-3, ep_r=4.4, has_metal_backside=True, **common)
    z0, eps_eff = lines.coplanar_backed(1e-3, 0.2e-3, 0.8e-3, 4.4)
    assert abs(z0 / cpw.z0[0].real - 1) < 1e-5 and abs(eps_eff / cpw.ep_reff_f[0].real - 1) < 1e-5


def test_microstrip_quasi_tem_matches_hammerstad_jensen():
    """0.2 and 0.1 mm cells (15 and 30 across the strip). Measured: Z0 49.06, 49.76 ohm, extrapolated 50.46
    (Hammerstad-Jensen 50.62: -0.3 %); eps_eff 3.326, 3.319, extrapolated 3.312 (3.3255: -0.4 %)."""
    z_exact, eps_exact = lines.microstrip_static(STRIP, SUBSTRATE, FR4)
    coarse, fine = (quasi_tem.quasi_tem_line(*microstrip(cell), cell) for cell in (0.2e-3, 0.1e-3))
    assert abs(fine.impedance / z_exact - 1) < 0.02
    assert abs(fine.effective_permittivity / eps_exact - 1) < 0.01
    assert abs(extrapolated(coarse.impedance, fine.impedance) / z_exact - 1) < 0.01
    eps_eff = extrapolated(coarse.effective_permittivity, fine.effective_permittivity)
    assert abs(eps_eff / eps_exact - 1) < 0.01
    assert coarse.impedance < fine.impedance < z_exact  # from below: the strip looks wider
    # the potential: 1 V on the strip (node row 8 at 0.2 mm), 0 on the ground (bottom wall)
    potential = coarse.potential
    assert potential[120, 8] == 1.0 and potential[120, 0] == 0.0 and 0 < potential[120, 4] < 1


@pytest.mark.slow  # 15-30 s: `make test` runs it, `make check` does not
def test_full_wave_tends_to_the_quasi_tem_solution_at_low_frequency():
    """At 300 and 600 MHz (near the solver's lowest frequency for 0.2 mm cells,
    modes.MAX_CELLS_PER_WAVELENGTH) the full-wave mode departs from the electrostatic one of the same grid
    as f^2, the start of the line's dispersion: n_eff^2 by 4.6e-4 and 1.8e-3 (measured), Z_PI by -1.9e-4,
    Z_PV by +1.1e-3 (it rises fastest, Jansen & Kirschning 1983)."""
    cell = 0.2e-3
    permittivity, conductor = microstrip(cell)
    static = quasi_tem.quasi_tem_line(permittivity, conductor, cell)
    departures = []
    for frequency in (300e6, 600e6):
        mode = modes.cross_section_modes(permittivity, cell, frequency, conductor=conductor)
        departures.append(mode.effective_index[0].real.item() ** 2 / static.effective_permittivity - 1)
    assert 0 < departures[0] < 1e-3 and 3.5 < departures[1] / departures[0] < 4.5
    mode = modes.cross_section_modes(permittivity, cell, 300e6, conductor=conductor)
    impedance = line_impedance.mode_impedance(mode)
    for value in (impedance.power_current, impedance.power_voltage, impedance.voltage_current.real):
        assert abs(value / static.impedance - 1) < 2e-3
    assert abs(impedance.power - 1.0) < 1e-9  # the solver's 1 W normalisation
    assert impedance.voltage_path == ((120, 8), (120, 0))  # straight down to the ground plane


@pytest.mark.slow
def test_microstrip_full_wave_matches_kirschning_jansen():
    """Full-wave n_eff^2 and the power-current Z0 (Jansen & Kirschning's definition) at 1 and 5 GHz, 0.2
    and 0.1 mm cells. Measured at 0.1 mm: eps_eff -0.2 %, +0.4 %; Z_PI -1.8 %, -1.1 %; extrapolated:
    eps_eff -0.4 %, +0.2 %, Z_PI -0.4 %, +0.3 %."""
    results = {}
    for cell in (0.2e-3, 0.1e-3):
        permittivity, conductor = microstrip(cell)
        for frequency in (1e9, 5e9):
            mode = modes.cross_section_modes(permittivity, cell, frequency, conductor=conductor)
            results[cell, frequency] = (
                mode.effective_index[0].real.item() ** 2,
                line_impedance.mode_impedance(mode).power_current,
            )
    for frequency in (1e9, 5e9):
        z_exact, eps_exact = lines.microstrip_dispersive(STRIP, SUBSTRATE, FR4, frequency)
        (eps_coarse, z_coarse), (eps_fine, z_fine) = results[0.2e-3, frequency], results[0.1e-3, frequency]
        assert abs(eps_fine / eps_exact - 1) < 0.01 and abs(z_fine / z_exact - 1) < 0.02
        assert abs(extrapolated(eps_coarse, eps_fine) / eps_exact - 1) < 0.01
        assert abs(extrapolated(z_coarse, z_fine) / z_exact - 1) < 0.01
    # dispersion: eps_eff rises by 0.113 from 1 to 5 GHz (Kirschning-Jansen), 0.133 on the fine grid
    rise = results[0.1e-3, 5e9][0] - results[0.1e-3, 1e9][0]
    exact_rise = lines.microstrip_dispersive(STRIP, SUBSTRATE, FR4, 5e9)[1] - lines.microstrip_dispersive(
        STRIP, SUBSTRATE, FR4, 1e9
    )[1]
    assert abs(rise / exact_rise - 1) < 0.25


@pytest.mark.slow  # 15-30 s: `make test` runs it, `make check` does not
def test_coplanar_waveguide_matches_conformal_mapping():
    """Conductor-backed CPW, w = 1 mm, gaps 0.2 mm, h = 0.8 mm FR4, in a 12 x 8 mm box: quasi-TEM at 0.05 and
    0.025 mm cells (4 and 8 across a gap) extrapolated, within 2 % (Z0) and 1 % (eps_eff) of the conformal
    mapping (48.93 ohm, 2.886); the full-wave mode at 1 GHz on the coarse grid is the same solution (the
    closed form's dispersion to 1 GHz is 2e-4)."""
    z_exact, eps_exact = lines.coplanar_backed(1e-3, 0.2e-3, 0.8e-3, 4.4)
    solved = []
    for cell in (0.05e-3, 0.025e-3):
        permittivity, conductor = lines.coplanar_section(1e-3, 0.2e-3, 0.8e-3, 4.4, cell, 12e-3, 8e-3)
        solved.append(quasi_tem.quasi_tem_line(permittivity, conductor, cell))
    z0 = extrapolated(solved[0].impedance, solved[1].impedance)
    eps_eff = extrapolated(solved[0].effective_permittivity, solved[1].effective_permittivity)
    assert abs(z0 / z_exact - 1) < 0.02 and abs(eps_eff / eps_exact - 1) < 0.01
    permittivity, conductor = lines.coplanar_section(1e-3, 0.2e-3, 0.8e-3, 4.4, 0.05e-3, 12e-3, 8e-3)
    mode = modes.cross_section_modes(permittivity, 0.05e-3, 1e9, conductor=conductor)
    impedance = line_impedance.mode_impedance(mode)
    assert abs(mode.effective_index[0].real.item() ** 2 / solved[0].effective_permittivity - 1) < 1e-3
    assert abs(impedance.power_current / solved[0].impedance - 1) < 1e-3
    (i0, j0), (i1, j1) = impedance.voltage_path
    assert j0 == j1 == 16 and abs(i1 - i0) == 4  # across a 4-cell gap, not down through the substrate


def test_coax_is_exactly_tem_and_matches_the_log_formula():
    """Coax a = 1 mm, b = 2.3 mm, PTFE (eps 2.1): the full-wave mode is TEM, n_eff = sqrt(eps_r) and the
    three impedance definitions agree to the eigen-solve's round-off (1e-16 / (k0 h)^4 = 1e-6); quasi-TEM
    gives the same Z0. The staircased circles
    converge at first order: +4.9 %, +2.8 %, +1.5 % at 10, 20, 40 cells per inner radius (measured);
    40 cells are needed for 2 %."""
    exact = lines.coax_impedance(1e-3, 2.3e-3, 2.1)
    errors = [
        quasi_tem.quasi_tem_line(*lines.coax_section(1e-3, 2.3e-3, 2.1, cell), cell).impedance / exact - 1
        for cell in (0.1e-3, 0.05e-3, 0.025e-3)
    ]
    assert errors[0] > errors[1] > errors[2] > 0 and errors[2] < 0.02
    cell = 0.05e-3
    permittivity, conductor = lines.coax_section(1e-3, 2.3e-3, 2.1, cell)
    mode = modes.cross_section_modes(permittivity, cell, 3e9, conductor=conductor)
    assert abs(mode.effective_index[0].item() - math.sqrt(2.1)) < 1e-5
    impedance = line_impedance.mode_impedance(mode)
    static = quasi_tem.quasi_tem_line(permittivity, conductor, cell).impedance
    for value in (impedance.power_current, impedance.power_voltage, impedance.voltage_current):
        assert abs(value / static - 1) < 1e-5


def test_lossy_dielectric_gives_the_complex_tem_index_and_impedance():
    """Coax filled with a conducting dielectric (sigma = 0.5 S/m at 10 GHz, loss tangent 0.43): a TEM line
    with n_eff^2 = eps_r - j sigma / (omega eps0) and Z0 scaled by sqrt(eps_r / eps_c) (Pozar sec. 2.7,
    G / omega C = sigma / (omega eps0 eps_r)), both exact on the grid."""
    cell, frequency, sigma = 0.1e-3, 10e9, 0.5
    permittivity, pec = lines.coax_section(1e-3, 2.3e-3, 2.1, cell)
    conductivity = torch.where(pec, math.inf, sigma).double()  # per node: PEC, or the lossy filling
    lossless = modes.cross_section_modes(permittivity, cell, frequency, conductor=pec)
    lossy = modes.cross_section_modes(permittivity, cell, frequency, conductor=conductivity)
    complex_permittivity = 2.1 - 1j * sigma / (2 * math.pi * frequency * VACUUM_PERMITTIVITY)
    assert abs(lossy.effective_index[0].item() ** 2 - complex_permittivity) < 1e-9
    assert lossy.effective_index[0].imag < 0  # decays along +x
    ratio = line_impedance.mode_impedance(lossy).voltage_current / line_impedance.mode_impedance(
        lossless
    ).voltage_current
    assert abs(ratio - np.sqrt(2.1 / complex_permittivity)) < 1e-7
    assert torch.equal(lossy.conductor, pec)


@pytest.mark.parametrize("axis", ["y", "z"])
def test_other_propagation_axes_give_the_same_line(axis):
    """The microstrip travelling along y (cross-section (x, z)) or z (cross-section (x, y), the board
    along x and its normal along y): the same n_eff and impedances as along x. The node mask's components
    follow the caller's axes: (E_x, E_y, E_z) are (across, along, up) for y and (across, up, along) for z."""
    cell = 0.4e-3
    permittivity, conductor = lines.microstrip_section(3.2e-3, SUBSTRATE, FR4, cell, 19.2e-3, 9.6e-3)
    along_x = modes.cross_section_modes(permittivity, cell, 2e9, conductor=conductor)
    reference = line_impedance.mode_impedance(along_x)
    conductor = conductor[[1, 0, 2]] if axis == "y" else conductor[[1, 2, 0]]
    mode = modes.cross_section_modes(permittivity, cell, 2e9, conductor=conductor, axis=axis)
    assert abs(mode.effective_index[0] - along_x.effective_index[0]) < 1e-9
    impedance = line_impedance.mode_impedance(mode, axis=axis)
    assert abs(impedance.power_current / reference.power_current - 1) < 1e-9
    assert abs(impedance.voltage_current / reference.voltage_current - 1) < 1e-9


def test_per_cell_metal_closes_the_cell_and_matches_the_node_mask():
    """A PEC cell pins its four edges and corners; the stripline (a 2-cell-thick strip centred between the
    walls) solves the same from cells as from the equivalent node mask, and Z_VI of the TEM mode equals
    quasi-TEM's to round-off."""
    cells = np.zeros((40, 21), dtype=bool)
    cells[14:26, 9:11] = True
    nodes = conductors.pec_nodes(cells)
    assert nodes[0, 14:27, 9:12].all() and not nodes[0, 13, 10] and not nodes[0, 20, 12]
    assert nodes[1, 14:26, 9:12].all() and not nodes[1, 26, 10]
    assert nodes[2, 14:27, 9:11].all() and not nodes[2, 20, 11]
    permittivity = torch.full((40, 21), 2.2, dtype=torch.float64)
    by_cell = modes.cross_section_modes(permittivity, 0.1e-3, 10e9, conductor=cells)
    by_node = modes.cross_section_modes(permittivity, 0.1e-3, 10e9, conductor=nodes)
    assert abs(by_cell.effective_index[0] - by_node.effective_index[0]) < 1e-12
    assert abs(by_cell.effective_index[0].item() - math.sqrt(2.2)) < 1e-9  # TEM in a homogeneous filling
    static = quasi_tem.quasi_tem_line(permittivity, cells, 0.1e-3).impedance
    assert abs(line_impedance.mode_impedance(by_cell).voltage_current / static - 1) < 1e-8


def test_paths_can_be_given_and_are_checked():
    cell = 0.4e-3
    permittivity, conductor = lines.microstrip_section(3.2e-3, SUBSTRATE, FR4, cell, 19.2e-3, 9.6e-3)
    mode = modes.cross_section_modes(permittivity, cell, 1e9, conductor=conductor)
    automatic = line_impedance.mode_impedance(mode)
    assert automatic.voltage_path == ((24, 4), (24, 0)) and automatic.current_contour == (20, 28, 4, 4)
    # another path down from the strip and a looser contour: the same quasi-TEM V and I to 1 %
    given = line_impedance.mode_impedance(
        mode, voltage_path=((21, 4), (21, 0)), current_contour=(18, 30, 2, 6)
    )
    assert abs(given.voltage / automatic.voltage - 1) < 0.01
    assert abs(given.current / automatic.current - 1) < 0.01
    for paths, words in [
        ({"voltage_path": ((24, 5), (24, 0))}, "start on the signal conductor"),
        ({"voltage_path": ((24, 4), (26, 0))}, "along one axis"),
        ({"voltage_path": ((18, 4), (27, 4))}, "start on the signal"),
        ({"current_contour": (21, 28, 3, 5)}, "whole signal conductor"),
        ({"current_contour": (18, 30, 0, 6)}, "inside the walls"),
        ({"signal": (24, 0)}, "touches the ground"),
        ({"signal": (10, 10)}, "not on a conductor"),
    ]:
        with pytest.raises(ConfigurationError, match=words):
            line_impedance.mode_impedance(mode, **paths)


def test_bad_lines_are_refused():
    permittivity = torch.full((30, 20), 2.0, dtype=torch.float64)
    touching = np.zeros((30, 20), dtype=bool)
    touching[10:20, 5] = touching[15, :6] = True  # a strip joined to the bottom wall by a post
    with pytest.raises(ConfigurationError, match="no signal conductor: every conductor touches the ground"):
        quasi_tem.quasi_tem_line(permittivity, touching, 1e-3)
    two = np.zeros((30, 20), dtype=bool)
    two[5:10, 8] = two[20:25, 8] = True
    with pytest.raises(ConfigurationError, match="2 conductors are separate from the ground; pick"):
        quasi_tem.quasi_tem_line(permittivity, two, 1e-3)
    left = quasi_tem.quasi_tem_line(permittivity, two, 1e-3, signal=(6, 8))
    assert left.potential[6, 8] == 1.0 and left.potential[21, 8] == 0.0  # the other one grounded
    ring = np.zeros((30, 20), dtype=bool)
    ring[10:20, 5:15] = True
    ring[12:18, 7:13] = False
    ring[14:16, 9:11] = True  # a wire inside a closed box: no straight path from the box to the ground
    mode = modes.cross_section_modes(permittivity, 1e-3, 1e9, conductor=ring, num_modes=1)
    with pytest.raises(ConfigurationError, match="2 conductors"):
        line_impedance.mode_impedance(mode)
    enclosed = line_impedance.mode_impedance(mode, signal=(15, 10))  # the current needs no voltage path
    assert enclosed.voltage is None and enclosed.voltage_path is None and enclosed.power_current > 0
    with pytest.raises(ConfigurationError, match="no straight path through dielectric.*Z_PV"):
        _ = enclosed.power_voltage
    with pytest.raises(ConfigurationError, match="no straight path through dielectric.*Z_VI"):
        _ = enclosed.voltage_current
    with pytest.raises(ConfigurationError, match="passes through metal"):
        line_impedance.mode_impedance(mode, signal=(15, 10), voltage_path=((15, 10), (15, 0)))
    with pytest.raises(ConfigurationError, match="solved without a conductor"):
        line_impedance.mode_impedance(modes.cross_section_modes(permittivity, 1e-3, 1e9))
    with pytest.raises(ConfigurationError, match=r"conductor must have shape \(30, 20\) per cell"):
        modes.cross_section_modes(permittivity, 1e-3, 1e9, conductor=np.zeros((20, 30), dtype=bool))
    with pytest.raises(DataError, match="conductivities >= 0"):
        quasi_tem.quasi_tem_line(permittivity, -np.ones((30, 20)), 1e-3)
    with pytest.raises(ConfigurationError, match="fewer than 10"):  # the wavelength in eps 2 spans 7 cells
        modes.cross_section_modes(permittivity, 1e-3, 30e9, conductor=two)
    with pytest.raises(ConfigurationError, match="too low for cell_size"):  # 0.3 m wavelength, 30 um cells
        modes.cross_section_modes(permittivity, 30e-6, 1e9, conductor=two)
    with pytest.raises(ConfigurationError, match="whole number"):
        lines.microstrip_section(3.05e-3, SUBSTRATE, FR4, 0.1e-3, *BOX)
    with pytest.raises(ConfigurationError, match="quasi_tem_line: no signal conductor"):
        quasi_tem.quasi_tem_line(permittivity, np.zeros((30, 20), dtype=bool), 1e-3)  # no metal, no line

