"""mindelec.fdfd against analytic solutions: Hankel Green's function, PML absorption, slab-waveguide
modes, adjoint gradients against finite differences, and bad input."""

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.special
import torch

from common.units import SPEED_OF_LIGHT, VACUUM_PERMEABILITY, VACUUM_PERMITTIVITY
from mindelec import fdfd

FREQUENCY = 1e12
WAVELENGTH = SPEED_OF_LIGHT / FREQUENCY
OMEGA = 2 * math.pi * FREQUENCY


def free_space(cells, cells_per_wavelength, polarization, pml=20, dtype=torch.float64):
    spacing = WAVELENGTH / cells_per_wavelength
    permittivity = torch.ones(cells, cells, dtype=dtype)
    return fdfd.Simulation(
        (cells * spacing, cells * spacing), spacing, FREQUENCY, permittivity, pml, polarization=polarization
    )


def green_errors(sim):
    """Max relative complex error and max phase error (rad) against the Hankel function, 0.5-2 wavelengths."""
    field = sim.solve(sim.point_source((0.0, 0.0))).numpy()
    x, y = (c.numpy() for c in sim.coordinates)
    i, j = np.unravel_index(np.argmax(np.abs(sim.point_source((0.0, 0.0)).numpy())), sim.shape)
    distance = np.hypot(x[:, None] - x[i], y[None, :] - y[j])
    ring = (distance > 0.5 * WAVELENGTH) & (distance < 2.0 * WAVELENGTH)
    constant = VACUUM_PERMEABILITY if sim.polarization == "TM" else VACUUM_PERMITTIVITY
    # exp(+j omega t): a unit line current radiates -(omega c / 4) H0^(2)(k r)
    exact = -(OMEGA * constant / 4) * scipy.special.hankel2(0, 2 * math.pi / WAVELENGTH * distance[ring])
    ratio = field[ring] / exact
    return np.abs(ratio - 1).max(), np.abs(np.angle(ratio)).max(), np.abs(np.abs(ratio) - 1).max()


@pytest.mark.parametrize("polarization", ["TM", "TE"])
def test_point_source_matches_hankel_green_function(polarization, validation_figure):
    # 30 cells per wavelength, 0.5-2 wavelengths from the source: the phase error is the grid's
    # numerical dispersion, about (k dx)^2 / 24 * k r = 0.022 rad at 2 wavelengths
    error, phase_error, amplitude_error = green_errors(free_space(180, 30, polarization))
    validation_figure(f"{polarization}: amplitude {amplitude_error:.2%}, phase {phase_error:.3f} rad")
    assert phase_error < 0.025
    assert amplitude_error < 1e-2  # 0.7 % at the worst (diagonal) angle
    assert error < 0.025


def test_green_function_error_is_second_order():
    coarse, _, _ = green_errors(free_space(120, 20, "TM"))
    fine, _, _ = green_errors(free_space(240, 40, "TM"))
    assert 3.5 < coarse / fine < 4.5


@pytest.mark.parametrize("polarization", ["TM", "TE"])
def test_pml_absorbs(polarization):
    small = free_space(120, 30, polarization)
    large = free_space(240, 30, polarization)
    field = small.solve(small.point_source((0.0, 0.0)))
    reference = large.solve(large.point_source((0.0, 0.0)))[60:180, 60:180]
    interior = slice(20, 100)
    # reflections off the small domain's PML would show up as a difference inside it
    difference = (field - reference)[interior, interior].abs().max()
    assert difference / reference[interior, interior].abs().min() < 1e-4
    # the field decays through the PML: at the wall it is tiny compared with its inner face
    centre = field.shape[1] // 2
    assert field[0, centre].abs() < 1e-3 * field[20, centre].abs()


@pytest.mark.parametrize("polarization", ["TM", "TE"])
def test_radiated_power_through_a_closed_box(polarization):
    # a unit line current radiates omega mu0 / 8 W/m (TM); a unit magnetic one omega eps0 / 8 (TE)
    constant = VACUUM_PERMEABILITY if polarization == "TM" else VACUUM_PERMITTIVITY
    ratios = []
    for cells_per_wavelength in (15, 30):
        sim = free_space(
            4 * cells_per_wavelength, cells_per_wavelength, polarization, cells_per_wavelength // 2 + 5
        )
        source = sim.point_source((0.0, 0.0))
        field = sim.solve(source)
        x, _ = sim.coordinates
        centre, half_width = int(source.abs().sum(dim=1).argmax()), int(0.8 * cells_per_wavelength)
        spacing = sim.spacing[0]
        # the box's sides on the half-node lines around (2 half_width + 1)^2 nodes
        low, high = (
            (x[centre - half_width] - spacing / 2).item(),
            (x[centre + half_width] + spacing / 2).item(),
        )
        power = sum(
            sign * sim.flux(field, axis, position, span=(low, high))
            for axis in ("x", "y")
            for sign, position in ((1, high), (-1, low))
        )
        ratios.append(power.item() / (OMEGA * constant / 8))
    assert abs(ratios[1] - 1) < 0.01  # 0.55 % at 30 cells per wavelength, 2.3 % at 15
    assert 3.5 < (ratios[0] - 1) / (ratios[1] - 1) < 4.5  # second order


def slab_guide(polarization, core_permittivity=4.0, half_width=0.25, cells_per_wavelength=40):
    spacing = WAVELENGTH / cells_per_wavelength
    shape = (120, 100)
    size = (shape[0] * spacing, shape[1] * spacing)
    sim = fdfd.Simulation(size, spacing, FREQUENCY, torch.ones(shape, dtype=torch.float64), 15, polarization)
    _, y = sim.coordinates
    permittivity = torch.ones(shape, dtype=torch.float64)
    permittivity[:, y.abs() < half_width * WAVELENGTH] = core_permittivity
    core_cells = int((y.abs() < half_width * WAVELENGTH).sum())
    return fdfd.Simulation(size, spacing, FREQUENCY, permittivity, 15, polarization), core_cells * spacing / 2


def slab_effective_index(polarization, core_permittivity, half_width):
    """Fundamental even mode of a symmetric slab in vacuum: k_y tan(k_y a) = gamma, with the left side
    divided by eps_core for TE (Hz, whose (1/eps) dHz/dy is continuous)."""
    k0 = 2 * math.pi / WAVELENGTH
    width = half_width * WAVELENGTH
    scale = 1 / core_permittivity if polarization == "TE" else 1.0

    def mismatch(transverse):
        return transverse * math.tan(transverse * width) * scale - math.sqrt(
            k0**2 * (core_permittivity - 1) - transverse**2
        )

    upper = min(math.pi / (2 * width), k0 * math.sqrt(core_permittivity - 1)) * (1 - 1e-12)
    transverse = scipy.optimize.brentq(mismatch, 1e-9 * upper, upper)
    return math.sqrt(core_permittivity - (transverse / k0) ** 2)


@pytest.mark.parametrize("polarization", ["TM", "TE"])
def test_waveguide_mode_source_is_one_way_and_normalised(polarization):
    sim, half_width = slab_guide(polarization)
    mode = sim.mode("x", -0.9 * WAVELENGTH)
    # 40 cells per wavelength, eps 4 core of 20 (TE) or 19 (TM) cells: 0.4 % from the analytic index
    exact = slab_effective_index(polarization, 4.0, half_width / WAVELENGTH)
    assert mode.effective_index == pytest.approx(exact, rel=6e-3)
    field = sim.solve(sim.mode_source(mode, direction=+1, amplitude=1.0))
    forward, backward = sim.mode_amplitudes(field, mode, 0.2 * WAVELENGTH)
    assert abs(forward) == pytest.approx(1.0, abs=1e-6)
    assert abs(backward) < 1e-3  # the reflection off the far PML
    assert sim.flux(field, "x", 0.2 * WAVELENGTH) == pytest.approx(1.0, abs=1e-3)
    # nothing goes the other way
    assert abs(sim.flux(field, "x", -1.05 * WAVELENGTH)) < 1e-6
    # the phase advances by -kappa * distance
    far, _ = sim.mode_amplitudes(field, mode, 0.9 * WAVELENGTH)
    distance = 0.7 * WAVELENGTH
    assert (far / forward).numpy() == pytest.approx(np.exp(-1j * mode.wavenumber * distance), abs=1e-3)


def design_loss(permittivity, polarization):
    spacing = WAVELENGTH / 15
    shape = tuple(permittivity.shape)
    sim = fdfd.Simulation(
        (shape[0] * spacing, shape[1] * spacing), spacing, FREQUENCY, permittivity, 10, polarization
    )
    field = sim.solve(sim.point_source((-WAVELENGTH, 0.3 * WAVELENGTH)))
    scale = 1e-6 if polarization == "TM" else 1e3
    return (field[40:45, 20:40].abs() ** 2).sum() * scale + sim.flux(field, "x", WAVELENGTH) * 1e3


@pytest.mark.parametrize("polarization", ["TM", "TE"])
def test_adjoint_gradient_matches_finite_differences(polarization):
    generator = torch.Generator().manual_seed(0)
    base = 1.0 + torch.rand(60, 60, dtype=torch.float64, generator=generator)
    permittivity = base.clone().requires_grad_()
    design_loss(permittivity, polarization).backward()
    step = 1e-6
    for cell in [(30, 30), (25, 33), (12, 40)]:
        plus, minus = base.clone(), base.clone()
        plus[cell] += step
        minus[cell] -= step
        finite = (design_loss(plus, polarization) - design_loss(minus, polarization)).item() / (2 * step)
        assert permittivity.grad[cell].item() == pytest.approx(finite, rel=1e-5)


def test_gradient_with_respect_to_complex_permittivity_and_source():
    # a lossy medium (complex eps) and the source itself: compare with finite differences of
    # the real and imaginary parts (PyTorch's convention: grad = dL/dRe + j dL/dIm)
    generator = torch.Generator().manual_seed(1)
    base = (1.0 + torch.rand(40, 40, dtype=torch.float64, generator=generator)).to(torch.complex128) - 0.1j
    spacing = WAVELENGTH / 12

    def loss(permittivity, source):
        sim = fdfd.Simulation((40 * spacing, 40 * spacing), spacing, FREQUENCY, permittivity, 8)
        field = sim.solve(source)
        return (field[25:30, 10:30].abs() ** 2).sum() * 1e-6

    source = fdfd.Simulation((40 * spacing,) * 2, spacing, FREQUENCY, base, 8).point_source((0.0, 0.0))
    permittivity = base.clone().requires_grad_()
    source_variable = source.clone().requires_grad_()
    loss(permittivity, source_variable).backward()
    step = 1e-6
    cell = (20, 22)
    for direction in (1.0, 1j):
        plus, minus = base.clone(), base.clone()
        plus[cell] += step * direction
        minus[cell] -= step * direction
        finite = (loss(plus, source) - loss(minus, source)).item() / (2 * step)
        analytic = permittivity.grad[cell].real if direction == 1.0 else permittivity.grad[cell].imag
        assert analytic.item() == pytest.approx(finite, rel=1e-5)
    source_cell = (18, 20)
    source_step = 1e-3 * source.abs().max().item()
    plus, minus = source.clone(), source.clone()
    plus[source_cell] += source_step
    minus[source_cell] -= source_step
    finite = (loss(base, plus) - loss(base, minus)).item() / (2 * source_step)
    assert source_variable.grad[source_cell].real.item() == pytest.approx(finite, rel=1e-5)


def test_batched_sources_and_float32():
    sim = free_space(60, 15, "TM", pml=10)
    first = sim.point_source((0.0, 0.0))
    second = sim.point_source((0.2 * WAVELENGTH, -0.3 * WAVELENGTH), amplitude=2.0)
    both = sim.solve(torch.stack([first, second]))
    assert torch.allclose(both[1], sim.solve(second))
    single = free_space(60, 15, "TM", pml=10, dtype=torch.float32)
    field = single.solve(single.point_source((0.0, 0.0)))
    assert field.dtype == torch.complex64
    assert torch.allclose(
        field.to(torch.complex128), both[0], rtol=1e-4, atol=1e-4 * both[0].abs().max().item()
    )


def test_bad_input_raises_naming_the_object():
    spacing = WAVELENGTH / 10
    permittivity = torch.ones(40, 40)
    with pytest.raises(ValueError, match="permittivity has shape"):
        fdfd.Simulation((40 * spacing, 40 * spacing), spacing, FREQUENCY, torch.ones(40, 41))
    with pytest.raises(ValueError, match="PML of 20 cells"):
        fdfd.Simulation((40 * spacing, 40 * spacing), spacing, FREQUENCY, permittivity, pml_thickness=20)
    with pytest.raises(TypeError, match="permittivity must be a torch tensor"):
        fdfd.Simulation((40 * spacing, 40 * spacing), spacing, FREQUENCY, np.ones((40, 40)))
    with pytest.raises(ValueError, match="polarization"):
        fdfd.Simulation((40 * spacing, 40 * spacing), spacing, FREQUENCY, permittivity, polarization="TEM")
    sim = fdfd.Simulation((40 * spacing, 40 * spacing), spacing, FREQUENCY, permittivity, pml_thickness=5)
    with pytest.raises(ValueError, match="point_source: position .* outside the domain"):
        sim.point_source((30 * spacing, 0.0))
    with pytest.raises(ValueError, match="solve: source has shape"):
        sim.solve(torch.zeros(40, 39, dtype=torch.complex64))
    with pytest.raises(ValueError, match="not guided"):
        sim.mode("x", 0.0, span=(-0.15 * WAVELENGTH, 0.15 * WAVELENGTH))  # 3 nodes between walls: cut off


def test_fdfd_uses_the_fdtd_grid_and_the_old_resolution_keyword_warns():
    from mindelec import fdtd

    spacing = 1e-5
    permittivity = torch.ones(40, 30, dtype=torch.float64)
    sim = fdfd.Simulation((40 * spacing, 30 * spacing), cell_size=spacing, frequency=FREQUENCY,
                          permittivity=permittivity, pml_thickness=8, polarization="TE")
    grid = fdtd.Grid((40 * spacing, 30 * spacing), spacing)
    assert sim.grid.shape == grid.shape and sim.spacing == grid.spacing[:2]
    torch.testing.assert_close(sim.coordinates[1], grid.coordinates("Hz", 1))  # TE: Hz on the half nodes
    with pytest.warns(DeprecationWarning, match="cell_size"):
        old = fdfd.Simulation((40 * spacing, 30 * spacing), resolution=spacing, frequency=FREQUENCY,
                              permittivity=permittivity, pml_thickness=8)
    assert old.shape == (40, 30)
