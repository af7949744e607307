"""mindelec.phone: the reference phone as an FDTD simulation, its figures of merit and its dataset generator.

Compared against physics and the recipe machinery, not against numbers of the code under test:

* with every medium lossless, the power leaving through the near-to-far box equals the power the port
  accepts (energy conservation), within 2 % where the antenna accepts at least half of the incident
  power (the run lasts 40 ns, about 40 core-s: the lossless phone rings; at 10 ns the balance was off by
  up to 55 %, and at 40 ns a narrow feature at 1.4 GHz, where the port takes 41 %, is still off by 4 %);
* with the phone's lossy media (a 15 ns run, the full recipe's), the total efficiency does not exceed the
  mismatch limit ``1 - |S11|^2`` where the port accepts a fifth of the incident power or more, and stays
  2 % under it where it accepts half (the battery and the dielectrics absorb); the small recipe's 8 ns
  runs stop before the fields decay, and their truncated spectra can cross the limit;
* a limited run of the shipped small recipe resumes with only the missing design, the first one kept, and
  records the arm height as drawn;
* bad cells, alignments, arm heights and parameter names are refused before any FDTD run, and the grid
  draws the arm height and the feed-to-short distance within a cell of the design;
* designs moved onto the grid (``design_on_grid``) are drawn without moving the phone: two designs have
  their housing centred and their frame on the same cells, where a design off the grid moves the phone;
* under a flat phantom of head liquid, the lossless phone's accepted power equals what leaves through the
  far box plus what the phantom absorbs (``sigma |E|^2 / 2`` summed over its cells: an independent volume
  integral), and the peak 1 g SAR lies over the antenna's end of the phone.
"""

import pathlib

import numpy as np
import pytest

import common.datasets as datasets
from common.errors import ConfigurationError
from mindelec import phone
from mindelec.cad_phone import PhoneDesign

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMALL = {"air": 6e-3, "pml": 6}  # a small domain around the phone


def test_bad_cells_arm_heights_and_parameters_are_refused_and_the_drawn_design_is_within_a_cell():
    with pytest.raises(ConfigurationError, match=r"cell \(m\) must be a positive number, got -0.001"):
        phone.phone_simulation(None, cell=-1e-3)
    with pytest.raises(ConfigurationError, match="align 0.002 m a multiple of it"):
        phone.phone_simulation(None, cell=1.5e-3, align=2e-3)
    with pytest.raises(ConfigurationError, match="arm lies 1.5 mm above the copper on 1.5 mm cells"):
        phone.phone_simulation(PhoneDesign(antenna_height=2.0), cell=1.5e-3, **SMALL)
    with pytest.raises(ConfigurationError, match=r"\['antenna_width'\] are not PhoneDesign fields"):
        phone.phone_sample({"antenna_width": 3.0}, 0)
    with pytest.raises(ConfigurationError, match="feed_to_short 20.0 mm must lie between"):
        phone.phone_sample({"antenna_length": 20.0, "feed_to_short": 20.0}, 0)
    design = PhoneDesign(antenna_height=4.2, feed_to_short=6.8)
    model = phone.phone_simulation(design, cell=1.5e-3, **SMALL)
    for name in ("antenna_height", "feed_to_short"):
        assert abs(model.drawn[name] - getattr(design, name)) <= 1.5 + 1e-9, (name, model.drawn)
        assert model.drawn[name] / 1.5 == pytest.approx(round(model.drawn[name] / 1.5))  # whole cells
    names = {structure.name for structure in model.simulation.structures}
    expected = {"housing", "battery", "ground_plane", "ifa_arm", "ifa_short_pin", "frame_top"}
    assert expected <= names, names


@pytest.mark.slow
def test_the_drawn_design_has_wires_on_nodes_and_conformal_rims_where_the_cad_puts_them():
    design = PhoneDesign(antenna_length=29.3, clearance=11.4, frame_gap=2.7)
    staircase = phone.phone_simulation(design, cell=1.5e-3, **SMALL).drawn
    conformal = phone.phone_simulation(design, cell=1.5e-3, subpixel=True, **SMALL).drawn
    for drawn in (staircase, conformal):  # the 1 mm arm is a wire on 1.5 mm cells: ends and line on nodes
        assert drawn["antenna_length"] / 1.5 == pytest.approx(round(drawn["antenna_length"] / 1.5)), drawn
        assert abs(drawn["antenna_length"] - 29.3) <= 1.5, drawn
        # the phone moves to put the ground plane's edge (the feed's foot) on a node: drawn as asked
        assert drawn["clearance"] == pytest.approx(11.4, abs=1e-9), drawn
    assert staircase["frame_gap"] / 1.5 == pytest.approx(round(staircase["frame_gap"] / 1.5)), staircase
    assert conformal["frame_gap"] == pytest.approx(2.7, abs=1e-9)  # the plates' rims as in the CAD
    fine = phone.phone_simulation(design, cell=0.75e-3, subpixel=True, **SMALL).drawn  # the arm a sheet
    assert (fine["antenna_length"], fine["clearance"]) == pytest.approx((29.3, 11.4), abs=1e-9), fine



def test_thin_wire_pins_take_the_cads_radius_and_the_feed_pin_keeps_the_ports_gap():
    """``wires="thin"``: the 0.3 mm square pins become ThinWires of radius 0.59 x 0.3 mm, joined to the
    copper and to their stubs, the feed pin with the port's edge open; on 1.5 mm cells the arm is a thin
    wire too, its free end on the half-node plane nearest the CAD's, so the arm's length as drawn is
    within half a cell of the design's at each end."""
    from mindelec import fdtd

    design = PhoneDesign(antenna_length=29.3)
    model = phone.phone_simulation(design, cell=1.5e-3, wires="thin", **SMALL)
    wires = {s.name: s for s in model.simulation.structures if isinstance(s, fdtd.ThinWire)}
    feed = wires.pop(None)  # the feed pin, made by phone_simulation
    assert feed.joined == (True, True) and feed.gaps == [0]
    assert feed.radius == pytest.approx(0.59 * 0.3e-3, rel=1e-3)
    assert wires["ifa_short_pin"].joined == (True, True)
    assert wires["ifa_short_pin"].radius == pytest.approx(feed.radius)
    assert set(wires) == {"ifa_arm", "ifa_short_stub", "ifa_feed_stub", "ifa_short_pin"}
    assert abs(model.drawn["antenna_length"] - 29.3) <= 1.5 + 1e-9, model.drawn
    with pytest.raises(ConfigurationError, match="wires must be 'bare' or 'thin'"):
        phone.phone_simulation(design, cell=1.5e-3, wires="round", **SMALL)


@pytest.mark.parametrize("wires", ["bare", "thin"])
def test_a_port_gap_of_whole_cells_is_the_same_feed_on_every_grid(wires):
    """``port_gap=1.5 mm`` on 0.75 mm cells: a port two cells long above the copper, the feed pin's two
    gap edges open (thin) or the bare line from the gap's top; the same drawn gap as one 1.5 mm cell."""
    from mindelec import fdtd

    coarse = phone.phone_simulation(None, cell=1.5e-3, wires=wires, **SMALL)
    fine = phone.phone_simulation(None, cell=0.75e-3, wires=wires, port_gap=1.5e-3, **SMALL)
    assert coarse.drawn["port_gap"] == fine.drawn["port_gap"] == pytest.approx(1.5)
    for model in (coarse, fine):
        bottom = model.port.center[2] - model.port.size[2] / 2
        assert model.port.size[2] == pytest.approx(1.5e-3)
        pins = [s for s in model.simulation.structures if isinstance(s, fdtd.ThinWire) and s.name is None]
        if wires == "thin":
            assert pins[0].gaps == list(range(round(1.5e-3 / model.simulation.grid.spacing[2])))
            assert pins[0].start[2] == pytest.approx(bottom)
    with pytest.raises(ConfigurationError, match="port_gap 0.001 m must be a whole number of 0.00075 m"):
        phone.phone_simulation(None, cell=0.75e-3, port_gap=1e-3, **SMALL)
    with pytest.raises(ConfigurationError, match=r"gap \(3 mm\) and a cell of feed pin do not fit"):
        phone.phone_simulation(None, cell=1.5e-3, port_gap=3e-3, **SMALL)

def test_designs_moved_onto_the_grid_put_every_phone_on_the_same_cells():
    designs = [PhoneDesign(feed_to_short=6.165, clearance=11.4),
               PhoneDesign(feed_to_short=8.3, clearance=7.9)]
    housings, fixed = [], []
    for design in designs:
        moved = phone.design_on_grid(design, 1.5e-3)
        assert abs(moved.feed_to_short - design.feed_to_short) <= 0.75 + 1e-9, moved
        assert abs(moved.clearance - design.clearance) <= 0.75 + 1e-9, moved
        foot = np.array(moved.feed_foot) / 1.5
        np.testing.assert_allclose(foot, np.round(foot), atol=1e-9)  # on a node of the 1.5 mm grid
        model = phone.phone_simulation(moved, cell=1.5e-3, **SMALL)
        # the clearance drawn: the board's end (70 mm from the centre) less the edge's node
        assert model.drawn["clearance"] == pytest.approx(moved.clearance, abs=1e-9), model.drawn
        assert (70.0 - model.drawn["clearance"]) / 1.5 == pytest.approx(round((70.0 - moved.clearance) / 1.5))
        housings.append(model.assembly.body("housing").bounds)
        # the parts that no design parameter moves lie on the same cells for both designs
        fixed.append(np.stack([model.assembly.body(name).bounds
                               for name in ("pcb", "frame_top", "frame_bottom")]))
    np.testing.assert_allclose(fixed[0], fixed[1], atol=1e-12)
    for housing in housings:  # the phone, centred in its file, was not moved in x and y
        np.testing.assert_allclose(housing[0][:2], -housing[1][:2], atol=1e-12)
    as_asked = phone.phone_simulation(designs[0], cell=1.5e-3, **SMALL).assembly.body("housing").bounds
    assert abs(as_asked[0][0] + as_asked[1][0]) > 1e-4  # off the grid, the phone moves to put the feed on it
    with pytest.raises(ConfigurationError, match=r"design_on_grid: cell \(m\) must be a positive"):
        phone.design_on_grid(designs[0], 0.0)


@pytest.mark.slow
def test_lossless_phone_radiates_what_its_port_accepts_and_the_lossy_one_less():
    model = phone.phone_simulation(None, cell=1.5e-3, lossless=True, **SMALL)
    result = model.simulation.run(until=40e-9, until_decayed=1e-4, progress=False)
    figures = phone.figures_of_merit(result)
    far = figures["far_frequencies"]
    matched = np.interp(far, figures["frequencies"], np.abs(figures["s11"]) ** 2) < 0.5
    assert matched.sum() >= 3, np.abs(figures["s11"])
    balance = figures["radiation_efficiency"][matched]
    assert np.abs(balance - 1).max() < 0.02, balance
    assert [f for f, _ in phone.resonances(figures["frequencies"], figures["s11"])]  # a dip below -6 dB
    lossy = phone.phone_simulation(None, cell=1.5e-3, **SMALL).simulation
    lossy = phone.figures_of_merit(lossy.run(until=15e-9, until_decayed=1e-4, progress=False))
    limit = np.interp(far, lossy["frequencies"], 1 - np.abs(lossy["s11"]) ** 2)
    total = lossy["total_efficiency"]
    assert (limit > 0.5).sum() >= 3, limit
    assert (total <= 1.02 * limit)[limit > 0.2].all(), (total, limit)  # lossy media: radiated <= accepted
    assert (total < 0.98 * limit)[limit > 0.5].all(), (total, limit)  # the battery absorbs


@pytest.mark.slow
def test_small_phone_recipe_resumes_with_the_missing_design_only(tmp_path):
    recipe = ROOT / "datasets" / "phone_antenna_small.toml"
    output = tmp_path / "phone.h5"
    first = datasets.generate(recipe, output=output, workers=0, limit=1, progress=False)
    assert (first.succeeded, first.failed) == (1, 0), first
    kept = datasets.read_dataset(output)["s11_real"][0].copy()
    second = datasets.generate(recipe, output=output, workers=0, limit=2, progress=False)
    assert (second.succeeded, second.failed) == (1, 0), second  # only the missing design ran
    table = datasets.read_dataset(output)
    assert table["sample_id"].tolist() == [0, 1]
    np.testing.assert_array_equal(table["s11_real"][0], kept)
    drawn = datasets.sample_parameters(datasets.load_recipe(recipe))[:2]
    assert np.all(np.abs(table["antenna_height_used"] - [p["antenna_height"] for p in drawn]) <= 1.5 + 1e-9)


def test_phantom_placements_and_models_without_a_phantom_are_refused_by_name():
    with pytest.raises(ConfigurationError, match=r"PhantomPlacement\(frequency=2100000000.0\): spacing"):
        phone.PhantomPlacement(2.1e9, spacing=-1e-3)
    with pytest.raises(ConfigurationError, match="phantom must be a PhantomPlacement"):
        phone.phone_simulation(None, cell=1.5e-3, phantom=2.1e9)
    with pytest.raises(ConfigurationError, match=r"PhantomPlacement\(frequency=100000000.0\): .*300"):
        phone.PhantomPlacement(100e6)  # the liquid's table: 300 MHz - 6 GHz
    model = phone.phone_simulation(None, cell=1.5e-3, **SMALL)
    with pytest.raises(ConfigurationError, match="phone_sar: the model has no phantom"):
        phone.phone_sar(model, None)


@pytest.mark.slow
def test_lossless_phone_over_a_phantom_loses_its_accepted_power_to_radiation_and_the_phantom_only():
    placement = phone.PhantomPlacement(2.1e9, spacing=5e-3, margin=6e-3, depth=30e-3)
    model = phone.phone_simulation(None, cell=1.5e-3, lossless=True, band=(1.5e9, 2.7e9), phantom=placement,
                                   **SMALL)
    assert 5.0 <= model.drawn["phantom_spacing"] <= 6.5 + 1e-9, model.drawn  # asked 5 mm, within a cell
    result = model.simulation.run(until=40e-9, until_decayed=1e-4, progress=False)
    sar = phone.phone_sar(model, result)
    assert sar["absorbed_phantom"] > 0.05, sar  # the phantom 6 mm away takes a real share
    assert abs(sar["absorbed_phone"]) < 0.02, sar  # radiated + absorbed in the phantom = accepted
    assert sar["sar_1g"] > sar["sar_10g"] > 0, sar
    ground = model.assembly.body("ground_plane").bounds
    assert sar["centre_1g"][1] > ground.mean(0)[1], sar  # over the antenna's half of the phone
