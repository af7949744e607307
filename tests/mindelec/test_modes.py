"""mindelec.modes against analytic truth: metal waveguide cutoffs, slab dispersion, a silicon strip.

Grid-error tolerances: the Yee scheme is second order, so an error bound is ``C h^2`` with ``C``
read off the known discrete dispersion (metal guide) or checked by halving the cell (slab, strip).
"""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq

from common.errors import ConfigurationError, DataError
from common.units import SPEED_OF_LIGHT, VACUUM_PERMEABILITY
from mindelec import modes

# WR-90 rectangular waveguide (a x b), hollow, PEC walls
WIDTH, HEIGHT = 22.86e-3, 10.16e-3

# silicon-on-insulator at 1550 nm
WAVELENGTH = 1.55e-6
N_SILICON, N_OXIDE = 3.48, 1.444
THICKNESS = 220e-9


def metal_guide_modes(cells, frequency, num_modes):
    """Hollow WR-90: ``cells`` cells across the wide side ``a`` (along y), ``b`` along z."""
    cells_z = round(cells * HEIGHT / WIDTH)
    return modes.cross_section_modes(
        torch.ones(cells, cells_z, dtype=torch.float64),
        (WIDTH / cells, HEIGHT / cells_z),
        frequency,
        num_modes=num_modes,
    )


def cutoff_frequency(effective_index, frequency):
    """``f_c = c k_c / (2 pi)`` with ``k_c^2 = k0^2 - beta^2`` (hollow guide)."""
    k0 = 2 * math.pi * frequency / SPEED_OF_LIGHT
    beta_squared = (effective_index**2).real * k0**2
    return SPEED_OF_LIGHT * math.sqrt(k0**2 - beta_squared) / (2 * math.pi)


@pytest.mark.parametrize("order", [1, 2])
def test_rectangular_waveguide_te_m0_cutoff_and_beta(order):
    """TE10 and TE20 of WR-90: f_c = m c / (2 a) (Pozar, Microwave Engineering, eq. 3.84)."""
    cells, frequency = 40, 14e9  # TE20 (13.1 GHz) propagates; TE01 (14.75 GHz) does not
    result = metal_guide_modes(cells, frequency, num_modes=2)
    effective_index = result.effective_index[order - 1].item()
    exact_cutoff = order * SPEED_OF_LIGHT / (2 * WIDTH)
    k0 = 2 * math.pi * frequency / SPEED_OF_LIGHT
    exact_beta = math.sqrt(k0**2 - (2 * math.pi * exact_cutoff / SPEED_OF_LIGHT) ** 2)
    # the grid's sin(k_c h / 2) / (h / 2) lowers k_c by (k_c h)^2 / 24 (relative)
    grid_error = (order * math.pi / cells) ** 2 / 24
    cutoff = cutoff_frequency(effective_index, frequency)
    assert abs(cutoff / exact_cutoff - 1) < 1.5 * grid_error
    assert (
        abs(result.propagation_constant[order - 1].item() / exact_beta - 1)
        < 1.5 * grid_error * (exact_cutoff / frequency) ** 2 / (1 - (exact_cutoff / frequency) ** 2) + 1e-12
    )
    # TE_m0: E along the narrow side only, no E_x
    electric = result.electric[order - 1].abs()
    assert electric[2].max() > 1e6 * max(electric[0].max(), electric[1].max())


def test_rectangular_waveguide_converges_at_second_order():
    exact = SPEED_OF_LIGHT / (2 * WIDTH)
    errors = [
        abs(cutoff_frequency(metal_guide_modes(n, 10e9, 1).effective_index[0].item(), 10e9) - exact)
        for n in (10, 20)
    ]
    assert 3.5 < errors[0] / errors[1] < 4.5


def test_evanescent_mode_has_negative_imaginary_index():
    """Below TE20's cutoff its ``beta`` is ``-j |beta|``: the field decays along +x."""
    result = metal_guide_modes(20, 10e9, num_modes=2)
    evanescent = result.effective_index[1].item()
    assert abs(evanescent.real) < 1e-12 and evanescent.imag < 0
    exact = math.sqrt((SPEED_OF_LIGHT / WIDTH / 10e9) ** 2 - 1)
    assert abs(-evanescent.imag / exact - 1) < 0.02


def slab_effective_index(polarization):
    """Fundamental even mode of the symmetric Si/SiO2 slab (Marcuse; Okamoto, Fundamentals of
    Optical Waveguides, eq. 2.22 / 2.40): ``kappa tan(kappa d / 2) = r gamma``, ``r = 1`` for E in the
    layers (mindelec's 2D "TM", E_z) and ``r = (n1 / n2)^2`` for H in the layers ("TE")."""
    k0 = 2 * math.pi / WAVELENGTH
    ratio = 1.0 if polarization == "TM" else (N_SILICON / N_OXIDE) ** 2

    def dispersion(n):
        kappa = k0 * math.sqrt(N_SILICON**2 - n**2)
        gamma = k0 * math.sqrt(n**2 - N_OXIDE**2)
        return kappa * math.tan(kappa * THICKNESS / 2) - ratio * gamma

    lowest = max(N_OXIDE, math.sqrt(max(N_SILICON**2 - (math.pi / (k0 * THICKNESS)) ** 2, 0.0)))
    return brentq(dispersion, lowest + 1e-12, N_SILICON - 1e-12, xtol=1e-14)


def slab_profile(cell):
    cells = round(2.2e-6 / cell)
    core = round(THICKNESS / cell)
    permittivity = np.full(cells, N_OXIDE**2)
    start = (cells - core) // 2
    permittivity[start : start + core] = N_SILICON**2
    return permittivity


@pytest.mark.parametrize("polarization, tolerance", [("TM", 1e-3), ("TE", 3e-3)])
def test_slab_effective_index_matches_transcendental_equation(polarization, tolerance):
    """10 nm cells (44 per wavelength in Si); errors measured 6.3e-4 (TM) and 1.9e-3 (TE), second order."""
    exact = slab_effective_index(polarization)
    errors = []
    for cell in (20e-9, 10e-9):
        result = modes.line_modes(slab_profile(cell), cell, SPEED_OF_LIGHT / WAVELENGTH, polarization)
        errors.append(abs(result.effective_index[0].item() - exact))
    assert errors[1] < tolerance
    assert 3.5 < errors[0] / errors[1] < 4.5


def test_slab_mode_fields_follow_polarization_and_carry_one_watt():
    result = modes.line_modes(slab_profile(10e-9), 10e-9, SPEED_OF_LIGHT / WAVELENGTH, "TM")
    electric, magnetic = result.electric[0], result.magnetic[0]
    assert electric.shape == (3, 220)
    assert electric[:2].abs().max() == 0 and magnetic[2].abs().max() == 0
    power = 0.5 * (electric[1] * magnetic[2].conj() - electric[2] * magnetic[1].conj()).sum() * 10e-9
    assert abs(power.real - 1.0) < 1e-9  # W per metre along z
    assert abs(electric[2]).argmax() in range(100, 120)  # peak in the core


def test_slab_with_pml_keeps_guided_index_and_absorbs_radiation():
    """A PML leaves the guided mode as it is (its field has decayed there) and turns the box's
    radiation modes into lossy ones (``Im n_eff < 0`` in the ``exp(j omega t)`` convention)."""
    exact = slab_effective_index("TM")
    frequency = SPEED_OF_LIGHT / WAVELENGTH
    bare = modes.line_modes(slab_profile(10e-9), 10e-9, frequency, "TM", num_modes=2).effective_index
    lined = modes.line_modes(slab_profile(10e-9), 10e-9, frequency, "TM", num_modes=4, pml_cells=40)
    guided, *radiation = lined.effective_index.tolist()
    assert abs(guided - exact) < 1e-3 and abs(guided.imag) < 1e-6
    assert abs(bare[1].imag) < 1e-12  # a standing wave between the PEC walls
    assert all(mode.imag < -1e-3 for mode in radiation)


def test_te10_profile_is_the_analytic_sine():
    """TE10: E_z = E0 sin(pi y / a) and H_y = -E_z / Z_TE with Z_TE = omega mu0 / beta (Pozar,
    Microwave Engineering, sec. 3.3); on the grid's nodes the discrete mode's E_z is an exact sine."""
    cells, frequency = 40, 10e9
    result = metal_guide_modes(cells, frequency, num_modes=1)
    e_z = result.electric[0, 2, :, 5]  # integer y nodes i * a / cells
    sine = torch.sin(math.pi * torch.arange(cells, dtype=torch.float64) / cells)
    assert torch.allclose(e_z / e_z[cells // 2], sine.to(e_z.dtype), atol=1e-9)
    omega_mu0 = 2 * math.pi * frequency * VACUUM_PERMEABILITY
    wave_impedance = omega_mu0 / result.propagation_constant[0].real  # Z_TE = omega mu0 / beta
    h_y = result.magnetic[0, 1, 1:, 5]  # H_y shares E_z's nodes away from the y = 0 wall
    assert torch.allclose(h_y, -e_z[1:] / wave_impedance, rtol=1e-9, atol=0)


def strip_permittivity(cell):
    """220 x 500 nm silicon (220 nm along y) in oxide, 1.4 x 1.7 um cross-section."""
    cells_y, cells_z = round(1.4e-6 / cell), round(1.7e-6 / cell)
    core_y, core_z = round(THICKNESS / cell), round(500e-9 / cell)
    permittivity = torch.full((cells_y, cells_z), N_OXIDE**2, dtype=torch.float64)
    y0, z0 = (cells_y - core_y) // 2, (cells_z - core_z) // 2
    permittivity[y0 : y0 + core_y, z0 : z0 + core_z] = N_SILICON**2
    return permittivity


def test_silicon_strip_matches_published_effective_index():
    """TE0 of the 500 x 220 nm SOI strip at 1550 nm: n_eff = 2.44 (Chrostowski & Hochberg, Silicon
    Photonics Design, Cambridge University Press 2015, ch. 3, oxide-clad strip; the compact models
    fitted with the book's mode-solver scripts by SiEPIC course reports give 2.4437 and 2.445 at
    1.55 um). The reference is known to about +-0.005 (silicon and oxide indices, meshing); the 20 nm
    grid changes n_eff by 1.2e-3 when halved (measured 2.4481 -> 2.4493); hence 0.015."""
    result = modes.cross_section_modes(
        strip_permittivity(20e-9), 20e-9, SPEED_OF_LIGHT / WAVELENGTH, num_modes=2
    )
    te0, tm0 = result.effective_index.real.tolist()
    assert abs(te0 - 2.44) < 0.015
    assert N_OXIDE < tm0 < te0
    electric = result.electric[0].abs().amax(dim=(1, 2))
    assert electric[2] > 2 * electric[1]  # quasi-TE: E mostly along the 500 nm width (z)
    assert isinstance(result.effective_index, torch.Tensor) and result.electric.dtype == torch.complex128
    assert result.electric.shape == (2, 3, 70, 85)


@pytest.mark.slow
def test_silicon_strip_agrees_with_tidy3d_and_converges_towards_it():
    """The strip's TE0 and TM0 against Tidy3D's local mode solver on the same staircased grid (PEC walls,
    no subpixel averaging): within 0.01 at 20 nm (measured -0.0069 and +0.0019) and at least twice as
    close at 10 nm (-0.0017, +0.0006): the two Yee placements of the permittivity converge together."""
    td = pytest.importorskip("tidy3d")
    from tidy3d.plugins.mode import ModeSolver

    td.config.logging.level = "ERROR"

    def tidy3d_indices(cell):
        um = 1e6
        simulation = td.Simulation(
            size=(1.0, 1.4, 1.7),
            grid_spec=td.GridSpec.uniform(dl=cell * um),
            structures=[td.Structure(geometry=td.Box(size=(td.inf, THICKNESS * um, 0.5)),
                                     medium=td.Medium(permittivity=N_SILICON**2))],
            medium=td.Medium(permittivity=N_OXIDE**2),
            run_time=1e-12,
            boundary_spec=td.BoundarySpec.all_sides(td.PECBoundary()),
            subpixel=False,
        )
        solver = ModeSolver(simulation=simulation, plane=td.Box(size=(0, 1.4, 1.7)),
                            mode_spec=td.ModeSpec(num_modes=2), freqs=[td.C_0 / (WAVELENGTH * um)])
        return torch.tensor(sorted(solver.solve().n_eff.values.reshape(-1).tolist(), reverse=True))

    differences = []
    for cell in (20e-9, 10e-9):
        frequency = SPEED_OF_LIGHT / WAVELENGTH
        ours = modes.cross_section_modes(strip_permittivity(cell), cell, frequency, num_modes=2)
        indices = ours.effective_index.real.sort(descending=True).values
        differences.append((indices - tidy3d_indices(cell)).abs())
    assert (differences[0] < 0.01).all()
    assert (differences[1] < differences[0] / 2).all()


def test_numpy_and_per_component_permittivity_agree_with_cell_values():
    permittivity = strip_permittivity(40e-9)
    frequency = SPEED_OF_LIGHT / WAVELENGTH
    from_tensor = modes.cross_section_modes(permittivity, 40e-9, frequency).effective_index
    from_numpy = modes.cross_section_modes(permittivity.numpy(), 40e-9, frequency).effective_index
    assert torch.allclose(from_tensor, from_numpy, rtol=0, atol=1e-12)
    per_cell = torch.full((30, 30), 2.0, dtype=torch.float64)
    per_component = modes.cross_section_modes(per_cell.expand(3, 30, 30), 40e-9, frequency).effective_index
    assert torch.allclose(
        per_component, modes.cross_section_modes(per_cell, 40e-9, frequency).effective_index
    )


@pytest.mark.parametrize(
    "permittivity, error, words",
    [
        (
            torch.tensor([[1.0, float("nan"), 1.0]] * 4),
            DataError,
            "permittivity is not finite at cell (0, 1)",
        ),
        (torch.ones(4, 4, 4), ConfigurationError, "(3, ny, nz)"),
        (torch.ones(2, 8), ConfigurationError, "at least 3 cells"),
        (-torch.ones(5, 5), DataError, "positive real part"),
        ([[1.0]], ConfigurationError, "tensor or numpy array"),
    ],
)
def test_bad_permittivity_is_refused(permittivity, error, words):
    with pytest.raises(error, match=None) as caught:
        modes.cross_section_modes(permittivity, 1e-3, 1e9)
    assert words in str(caught.value)


def test_unresolved_frequency_is_refused():
    with pytest.raises(ConfigurationError, match="frequency=.*fewer than 10"):
        modes.cross_section_modes(torch.full((20, 20), 12.0), 50e-9, SPEED_OF_LIGHT / 1.55e-6)


def test_more_modes_than_the_grid_holds_is_refused():
    with pytest.raises(ConfigurationError, match="num_modes=20 exceeds the 9 eigenmodes"):
        modes.line_modes(torch.ones(10), 1e-3, 1e9, "TM", num_modes=20)
    with pytest.raises(ConfigurationError, match="num_modes must be a positive int"):
        modes.line_modes(torch.ones(10), 1e-3, 1e9, "TM", num_modes=0)


@pytest.mark.parametrize(
    "keywords, words",
    [
        ({"polarization": "TEM"}, "polarization must be"),
        ({"cell_size": -1.0}, "cell_size must be a positive"),
        ({"frequency": float("inf")}, "frequency must be a positive"),
        ({"pml_cells": 5}, "leaves no interior"),
    ],
)
def test_bad_line_arguments_are_refused(keywords, words):
    arguments = {"permittivity": torch.ones(12), "cell_size": 1e-3, "frequency": 1e9, **keywords}
    with pytest.raises(ConfigurationError) as caught:
        modes.line_modes(**arguments)
    assert words in str(caught.value)


@pytest.mark.parametrize("polarization, orders", [("TM", (1, 2, 3)), ("TE", (0, 1, 2))])
def test_parallel_plate_line_modes_match_analytic_cutoffs(polarization, orders):
    """A 1D line between PEC plates (gap a): k_y = m pi / a, m = 1, 2, ... for E_z ("TM"), and
    m = 0 (the TEM mode, n_eff = 1), 1, ... for E_y ("TE"); the grid's discrete dispersion is exact
    for these sines and cosines: k_y = (2 / h) sin(m pi h / (2 a))."""
    cells, gap, frequency = 50, 0.1, 10e9
    result = modes.line_modes(torch.ones(cells), gap / cells, frequency, polarization, num_modes=3)
    k0 = 2 * math.pi * frequency / SPEED_OF_LIGHT
    h = gap / cells
    for m, index in zip(orders, result.effective_index.tolist()):
        k_y = 2 / h * math.sin(m * math.pi * h / (2 * gap))
        assert abs(index.real - math.sqrt(1 - (k_y / k0) ** 2)) < 1e-9


@pytest.mark.parametrize("axis, narrow", [("y", 2), ("z", 1)])
def test_other_propagation_axes_give_the_same_modes_permuted(axis, narrow):
    """WR-90 with its wide side along x, travelling along y or z: the same TE10/TE20 indices as along
    x (the same discrete problem), E along the narrow side, E_z or E_y a sine across the wide side."""
    cells, cells_narrow, frequency = 40, 18, 14e9
    along_x = metal_guide_modes(cells, frequency, num_modes=2)
    result = modes.cross_section_modes(
        torch.ones(cells, cells_narrow, dtype=torch.float64),
        (WIDTH / cells, HEIGHT / cells_narrow),
        frequency,
        num_modes=2,
        axis=axis,
    )
    assert torch.allclose(result.effective_index, along_x.effective_index, rtol=1e-10, atol=0)
    electric = result.electric[0].abs().amax(dim=(1, 2))
    assert electric[narrow] > 1e6 * (electric.sum() - electric[narrow])
    profile = result.electric[0, narrow, :, 5]
    sine = torch.sin(math.pi * torch.arange(cells, dtype=torch.float64) / cells)
    assert torch.allclose(profile / profile[cells // 2], sine.to(profile.dtype), atol=1e-9)
    assert result.cell_size == (WIDTH / cells, HEIGHT / cells_narrow)


def test_unknown_axis_is_refused():
    with pytest.raises(ConfigurationError, match="axis must be"):
        modes.cross_section_modes(torch.ones(5, 5), 1e-3, 1e9, axis="w")


@pytest.mark.parametrize("axis, narrow", [("x", 2), ("y", 2), ("z", 1)])
def test_per_component_permittivity_reaches_its_component(axis, narrow):
    """A guide filled with a uniaxial medium: TE10 (E along the narrow side only) sees that
    component's permittivity alone, beta^2 = k0^2 eps_narrow - (pi / a)^2 (on the grid, k_c is
    (2 / h) sin(pi h / (2 a)), exact for the discrete sine)."""
    cells, cells_narrow, frequency = 40, 18, 10e9
    permittivity = torch.ones(3, cells, cells_narrow, dtype=torch.float64)
    permittivity[narrow] = 2.0
    result = modes.cross_section_modes(
        permittivity, (WIDTH / cells, HEIGHT / cells_narrow), frequency, num_modes=1, axis=axis
    )
    k0 = 2 * math.pi * frequency / SPEED_OF_LIGHT
    h = WIDTH / cells
    k_c = 2 / h * math.sin(math.pi * h / (2 * WIDTH))
    assert abs(result.propagation_constant[0].item() - math.sqrt(2 * k0**2 - k_c**2)) < 1e-9 * k0


@pytest.mark.parametrize("polarization, carried", [("TM", ("Ez", "Hx", "Hy")), ("TE", ("Ex", "Ey", "Hz"))])
def test_line_along_x_gives_modes_along_y(polarization, carried):
    """A line along x of a 2D simulation, modes along y: the slab's index again (to the grid error
    of the x-axis test) and only the components the 2D polarization carries; power along +y is
    1/2 Re(E_z H_x* - E_x H_z*) = 1 W/m."""
    exact = slab_effective_index(polarization)
    result = modes.line_modes(slab_profile(10e-9), 10e-9, SPEED_OF_LIGHT / WAVELENGTH, polarization, axis="y")
    tolerance = 1e-3 if polarization == "TM" else 3e-3
    assert abs(result.effective_index[0].item() - exact) < tolerance
    fields = {f"E{c}": result.electric[0, i] for i, c in enumerate("xyz")}
    fields.update({f"H{c}": result.magnetic[0, i] for i, c in enumerate("xyz")})
    for name, values in fields.items():
        assert (values.abs().max() > 0) == (name in carried), name
    power = 0.5 * (fields["Ez"] * fields["Hx"].conj() - fields["Ex"] * fields["Hz"].conj()).sum().real * 10e-9
    assert abs(power - 1.0) < 1e-9


def test_modes_are_orthogonal_and_carry_one_watt():
    """Lossless reciprocal guides: 1/2 sum (E_m x H_n) . x dA = delta_mn W (Snyder & Love, Optical
    Waveguide Theory, eq. 11-13); the Yee grid pairs E_y with H_z and E_z with H_y on shared nodes."""
    result = modes.cross_section_modes(
        strip_permittivity(40e-9), 40e-9, SPEED_OF_LIGHT / WAVELENGTH, num_modes=4
    )
    electric, magnetic = result.electric, result.magnetic
    overlap = torch.einsum("myz,nyz->mn", electric[:, 1], magnetic[:, 2])
    overlap = 0.5 * (overlap - torch.einsum("myz,nyz->mn", electric[:, 2], magnetic[:, 1])) * (40e-9) ** 2
    assert torch.allclose(overlap.abs(), torch.eye(4, dtype=torch.float64), atol=1e-9)
