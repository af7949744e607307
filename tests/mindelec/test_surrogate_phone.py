"""mindelec.surrogate.phone: the phone's inverse design over its recipe's ranges.

Compared against an analytic answer: an ensemble stand-in whose S11 has two Gaussian dips in ``|S11|``,
one at the arm's quarter-wave resonance ``c / (4 (L + h))`` and one set by the frame gap
(``1.2 + 0.2 gap`` GHz), so that the designs with dips at both targets are known in closed form; the
search must land on them (both dips within a quarter of their width of the targets), with each input on
the lattice the recipe's grid draws it on, and the single-target search must put its dip on the target too.
"""

import pathlib

import pytest
import torch

import common.datasets as datasets
from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT
from mindelec.surrogate.phone import INPUTS, drawn_steps, phone_inverse_design

ROOT = pathlib.Path(__file__).resolve().parents[2]
FREQUENCIES = torch.linspace(0.5e9, 3.5e9, 121, dtype=torch.float64)
WIDTH = 0.08e9  # of each dip (Hz)


def dips(designs):
    """``(B, 2)`` the two dip frequencies (Hz) of designs ``(B, 5)`` in the order of ``INPUTS``."""
    column = {name: designs[:, INPUTS.index(name)] for name in INPUTS}
    arm = SPEED_OF_LIGHT / (4e-3 * (column["antenna_length_used"] + column["antenna_height_used"]))
    return torch.stack([arm, 1.2e9 + 0.2e9 * column["frame_gap_used"]], 1)


class _Member:
    parameter_names = INPUTS


class TwoDipEnsemble:
    """What ``Ensemble`` offers the search, with an analytic S11: ``|S11| = 1 - 0.95 (g1 + g2)`` (Gaussian
    dips, -26 dB at each dip's centre), a real reflection coefficient, no spread."""

    members = [_Member()]
    frequencies = FREQUENCIES

    def predict(self, designs, output="s11"):
        centres = dips(designs)
        bumps = torch.exp(-(((FREQUENCIES[None, :, None] - centres[:, None, :]) / WIDTH) ** 2)).sum(-1)
        s11 = (1 - 0.95 * bumps.clamp(max=1)).to(torch.complex128)
        return s11, torch.zeros_like(s11.real)


@pytest.mark.parametrize("recipe_name, gap", [("phone_antenna_small", 3.0), ("phone_antenna", 2.6)])
def test_dual_band_tune_lands_on_the_analytic_designs_and_the_single_target_search_on_its_dip(
    recipe_name, gap
):
    # the small recipe is staircased (every input on whole cells), the full one conformal (the frame gap free)
    recipe = datasets.load_recipe(ROOT / "datasets" / f"{recipe_name}.toml")
    ensemble = TwoDipEnsemble()
    arm_sum = 33.0  # L + h (mm) of designs inside the recipe's ranges; the gap (mm) one the grid draws
    targets = (SPEED_OF_LIGHT / (4 * arm_sum * 1e-3), 1.2e9 + 0.2e9 * gap)  # 2.27 and 1.72 / 1.8 GHz
    found = phone_inverse_design(ensemble, targets, recipe)
    design = found["parameters"]
    steps = drawn_steps(recipe.generator.options)
    assert set(steps) == set(INPUTS) - ({"frame_gap_used"} if recipe_name == "phone_antenna" else set())
    # on one grid the ground plane's edge is on a node: the clearance on 70 mm (the board's end) less cells
    assert steps["clearance_used"] == pytest.approx((1.5, 70.0))
    for name, lattice in steps.items():  # each input on the lattice the grid draws it on
        step, origin = lattice if isinstance(lattice, tuple) else (lattice, 0.0)
        points = (design[name] - origin) / step
        assert points == pytest.approx(round(points)), (name, design)
    row = torch.tensor([[design[name] for name in INPUTS]], dtype=torch.float64)
    # both dips within a quarter of their width (20 MHz, under 1.2 % of either target) of the targets
    assert (dips(row)[0] - torch.tensor(targets)).abs().max() < WIDTH / 4, (dips(row), targets)
    assert float(found["predicted_db"].max()) < -15, found["predicted_db"]
    single = phone_inverse_design(ensemble, 2.0e9, recipe)
    row = torch.tensor([[single["parameters"][name] for name in INPUTS]], dtype=torch.float64)
    assert float(dips(row).sub(2.0e9).abs().min()) < float(FREQUENCIES[1] - FREQUENCIES[0])
    with pytest.raises(ConfigurationError, match="dual_band_design: .* two different frequencies"):
        phone_inverse_design(ensemble, (2.0e9, 2.0e9), recipe)
    with pytest.raises(ConfigurationError, match="two different frequencies in the band"):
        phone_inverse_design(ensemble, (2.0e9, 4.0e9), recipe)
