"""SAR (mindelec.sar): the cube averaging against closed forms, the tissue table, refusals, and a coarse run
of the standards' 900 MHz reference dipole over a flat phantom against their 1 g / 10 g SAR and the power
balance.

The cube averages are checked where the answer is known exactly: a uniform SAR averages to itself at any
cube position; a SAR decaying as ``exp(-2 z / delta)`` from a flat surface has its peak cube against the
surface, with the mean ``(delta / 2 L)(1 - exp(-2 L / delta))``; a single hot voxel in a corner of the tissue
is reached only by cubes touching the three faces there, mean ``SAR V_voxel / L^3``.
"""

import math

import pytest
import torch

import mindelec as me
from common.errors import ConfigurationError, DataError

GRAM = 1e-3  # kg


def test_local_sar_is_sigma_e_squared_over_two_rho():
    field = torch.tensor([1.0 + 0j, 2j, 0.0]).reshape(3, 1)
    sar = me.sar.local_sar(field, conductivity=0.97, density=1000.0)
    assert float(sar) == pytest.approx(0.97 * 5 / 2000, rel=1e-12)


@pytest.mark.parametrize("spacing", [1.3e-3, (1e-3, 1.7e-3, 2.2e-3)])
def test_uniform_sar_averages_to_itself(spacing):
    sar = torch.full((30, 20, 18), 2.5, dtype=torch.float64)
    for grams in (1, 10):
        average = me.sar.mass_averaged_sar(sar, spacing, grams * GRAM)
        assert average.value == pytest.approx(2.5, rel=1e-12)
        assert average.side == pytest.approx((grams * GRAM / 1000.0) ** (1 / 3), rel=1e-12)


def _decaying(spacing, delta, shape):
    """Voxel means of ``exp(-2 z / delta)`` for tissue at ``z >= 0`` (the cell means, exact)."""
    z = torch.arange(shape[2], dtype=torch.float64) * spacing
    means = delta / (2 * spacing) * (torch.exp(-2 * z / delta) - torch.exp(-2 * (z + spacing) / delta))
    return means.expand(*shape).clone()


@pytest.mark.parametrize("grams, tolerance", [(1, 1e-12), (10, 2.5e-3)])
def test_decaying_sar_peaks_at_the_surface_with_the_closed_form_mean(grams, tolerance):
    """1 g at 1 mm voxels: the 10 mm side is 10 whole voxels, exact. 10 g: the 21.54 mm side ends in 0.54 of a
    voxel whose mean stands in for the mean over that fraction; that layer is 2.5 % of the cube and the SAR
    changes by 1 - exp(-2 h / delta) = 10 % across it, so the error is below 2.5e-3 (measured 1.6e-4)."""
    spacing, delta = 1e-3, 20e-3
    sar = _decaying(spacing, delta, (40, 40, 50))
    average = me.sar.mass_averaged_sar(sar, spacing, grams * GRAM)
    side = (grams * GRAM / 1000.0) ** (1 / 3)
    exact = delta / (2 * side) * (1 - math.exp(-2 * side / delta))
    assert average.value == pytest.approx(exact, rel=tolerance)
    assert average.center[2] == pytest.approx(side / 2, rel=1e-9)  # the cube's face on the surface


def test_cubes_stay_inside_the_tissue():
    """Air voxels (tissue fraction 0) above the surface carry a large SAR that no cube may take in; a single
    hot voxel in a corner of the tissue is reached by the cube against the three faces there; a tissue slab
    thinner than the cube holds none."""
    spacing = 1e-3
    sar = torch.zeros(30, 30, 30, dtype=torch.float64)
    tissue = torch.ones_like(sar)
    tissue[:, :, 20:] = 0
    sar[:, :, 20:] = 100.0  # in the air
    sar[0, 0, 0] = 1000.0  # the corner voxel of the tissue
    average = me.sar.mass_averaged_sar(sar, spacing, GRAM, tissue=tissue)
    assert average.value == pytest.approx(1000.0 * spacing**3 / 1e-6, rel=1e-12)
    assert average.center == pytest.approx((5e-3, 5e-3, 5e-3), rel=1e-9)
    tissue[:, :, 9:] = 0  # 9 mm of tissue: no 10 mm cube fits
    with pytest.raises(ConfigurationError, match="fits wholly inside the tissue"):
        me.sar.mass_averaged_sar(sar, spacing, GRAM, tissue=tissue)


def test_head_tissue_table_and_its_range():
    assert me.sar.head_tissue_properties(900e6) == pytest.approx((41.5, 0.97))
    assert me.sar.head_tissue_properties(1800e6) == pytest.approx((40.0, 1.40))
    # halfway between the 900 and 1450 MHz rows: linear interpolation
    assert me.sar.head_tissue_properties(1175e6) == pytest.approx((41.0, 1.085))
    medium = me.sar.head_tissue(2450e6)
    assert (medium.permittivity, medium.conductivity) == pytest.approx((39.2, 1.80))
    for frequency in (299e6, 6.1e9, math.nan):
        with pytest.raises(ConfigurationError, match="outside the standard's table"):
            me.sar.head_tissue_properties(frequency)
    with pytest.raises(ConfigurationError, match="outside the standard's table"):
        me.sar.FlatPhantom(100e6, surface=0.0, size=(0.1, 0.1, 0.1))


def test_refusals_name_the_argument():
    field = torch.ones(3, 4, 4, 4, dtype=torch.complex128)
    field[1, 2, 2, 2] = complex(math.nan, 0)
    with pytest.raises(DataError, match="local_sar: field holds NaN"):
        me.sar.local_sar(field, 1.0)
    with pytest.raises(ConfigurationError, match=r"shape \(3, ...\)"):
        me.sar.local_sar(torch.ones(2, 4), 1.0)
    sar = torch.ones(12, 12, 12)
    for mass in (0.0, -1e-3, math.nan):
        with pytest.raises(ConfigurationError, match="mass_averaged_sar: mass"):
            me.sar.mass_averaged_sar(sar, 1e-3, mass)
    with pytest.raises(ConfigurationError, match="longer than the voxel grid"):
        me.sar.mass_averaged_sar(sar, 1e-3, 10 * GRAM)
    sar[3, 3, 3] = math.nan
    with pytest.raises(DataError, match="sar holds NaN"):
        me.sar.mass_averaged_sar(sar, 1e-3, GRAM)
    with pytest.raises(ConfigurationError, match="no reference dipole"):
        me.sar.dipole_over_phantom(2.45e9, 3e-3, (0.1, 0.1, 0.05))


@pytest.fixture(scope="module")
def coarse_dipole():
    """The 900 MHz reference dipole 15 mm under a 204 x 130 x 60 mm phantom, 5 mm cells (67 x 52 x 39)."""
    setup = me.sar.dipole_over_phantom(900e6, cell_size=5e-3, liquid_size=(0.2, 0.13, 0.06), margin=3, pml=6)
    return me.sar.validate_dipole(setup)


def test_reference_dipole_sar_on_a_coarse_grid(coarse_dipole, validation_figure):
    """The standards' 10.8 W/kg (1 g) and 6.99 W/kg (10 g) per watt at 900 MHz within 15 %. At 5 mm cells the
    10 mm cube is 2 cells across and the 15 mm spacing 3 cells, and the dipole a thin wire of 1.25 mm (not
    1.8 mm) radius; measured +9.5 % and +5.3 % here (+6.6 % and +5.6 % at 3 mm). The 10 % goal is judged
    on the conformal arms of the slow test below and of ``benchmarks/sar_dipole.py``."""
    figures = coarse_dipole
    validation_figure(f"900 MHz, 5 mm cells: 1 g {figures['sar_1g']:.2f} W/kg ({figures['error_1g']:+.1%}), "
                      f"10 g {figures['sar_10g']:.2f} W/kg ({figures['error_10g']:+.1%})")
    assert abs(coarse_dipole["error_1g"]) < 0.15
    assert abs(coarse_dipole["error_10g"]) < 0.15
    assert coarse_dipole["centre_1g"][:2] == pytest.approx((0.0, 0.0), abs=5e-3)  # above the feed


def test_power_balance_of_the_dipole_over_the_phantom(coarse_dipole):
    """Radiated (flux through a box around everything) plus absorbed (sum of sigma |E|^2 / 2 over the
    phantom's edges) equals the power the port accepts within 1 % (measured 0.11 %); most is absorbed."""
    assert coarse_dipole["balance"] == pytest.approx(1.0, abs=0.01)
    assert 0.5 < coarse_dipole["absorbed"] < 1.0 and coarse_dipole["radiated"] > 0.05


@pytest.mark.slow
def test_reference_dipole_sar_with_conformal_arms():
    """The 900 MHz dipole with conformal PEC arms of its own 1.8 mm radius, 3 mm cells (115 x 84 x 67, about
    60-95 s on one loaded core): 1 g and 10 g SAR within the 10 % goal (measured +5.4 % and +4.2 %; +2.6 % and
    +1.7 % at 2 mm in ``benchmarks/sar_dipole.py``), the power balance within 1 %."""
    setup = me.sar.dipole_over_phantom(900e6, cell_size=3e-3, liquid_size=(0.24, 0.15, 0.09), margin=4,
                                       conformal=True)
    figures = me.sar.validate_dipole(setup)
    assert abs(figures["error_1g"]) < 0.10 and abs(figures["error_10g"]) < 0.10
    assert figures["balance"] == pytest.approx(1.0, abs=0.01)
