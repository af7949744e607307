"""A tiny hydration free energy of toluene (vacuum and 216 TIP3P waters, Amber files) runs end to end through
``mindsponge fe``: both legs, NPT equilibration of the box, HREX, results, plots. Not a validation: a few
iterations of a few steps (``mindsponge.examples.hydration`` at its ``small`` size, made smaller)."""

import json

import numpy as np
import pytest


@pytest.mark.slow
def test_toluene_hydration_runs_end_to_end(tmp_path):
    from mindsponge import cli_free_energy
    from mindsponge.examples import hydration
    from mindsponge.free_energy_analysis import FreeEnergySamples

    path = hydration.prepare(tmp_path, "small")
    text = path.read_text().replace("steps_per_iteration = 20", "steps_per_iteration = 10")
    path.write_text(text.replace("iterations = 6", "iterations = 4"))
    result = cli_free_energy.run(path, progress=False)
    written = json.loads((tmp_path / "results" / "results.json").read_text())
    assert written["combined"]["kind"] == "hydration"
    legs = written["legs"]
    combined = written["combined"]["kT"]["value"]
    assert combined == result["combined"]["kT"]["value"]
    assert np.isclose(combined, legs["vacuum"]["kT"]["mbar"] - legs["solvent"]["kT"]["mbar"])
    assert np.isfinite(combined) and written["combined"]["kcal/mol"]["error"] > 0
    samples = FreeEnergySamples.load(tmp_path / "results" / "solvent" / "u_kn.npz")
    assert samples.u_kn.shape == (4, 16) and samples.samples_per_state.tolist() == [4] * 4
    assert (tmp_path / "results" / "solvent" / "overlap.png").exists()
