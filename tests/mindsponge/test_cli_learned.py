"""``mindsponge run`` on a learned potential: a committee's production run records its uncertainty, warns
naming the step where the run leaves the training data, keeps the flagged frames through a resume, and
``--active`` labels them with GFN2-xTB and retrains.

The case is H2 with GFN2-xTB labels (tblite): a committee of two small SchNet models trained on bond
lengths 0.064-0.084 nm; the run starts stretched to 0.14 nm, outside the data.
"""

import json
import warnings

import numpy as np
import pytest
import torch

from common.errors import ConfigurationError
from mindsponge import active, cli, potentials
from mindsponge.label_io import write_labels
from mindsponge.labels import XTB, label
from mindsponge.potentials import SchNet
from mindsponge.train import Trainer, TrainingData

pytest.importorskip("tblite")

NUMBERS = np.array([1, 1])


def h2_frames(distances):
    """``(F, 2, 3)`` nm: H2 along random directions at ``distances`` nm."""
    directions = np.random.default_rng(0).normal(size=(len(distances), 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return np.stack([np.zeros((len(distances), 3)), distances[:, None] * directions], axis=1)


def xtb_labels(frames):
    return label(XTB(torch.as_tensor(NUMBERS)), torch.as_tensor(frames))


@pytest.fixture(scope="module")
def committee_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("committee")
    positions = h2_frames(np.random.default_rng(1).uniform(0.064, 0.084, 48))
    labels = xtb_labels(positions)
    write_labels(folder / "data.npz", {"positions": positions, "atomic_numbers": np.tile(NUMBERS, (48, 1)),
                                       "energy": labels["energy"], "forces": labels["forces"]})
    data = TrainingData.from_file([folder / "data.npz"])
    for seed in range(2):
        torch.manual_seed(seed)
        model = SchNet(cutoff=0.3, features=8, interactions=1).double()
        Trainer(model, data, learning_rate=0.02, batch_size=16, seed=seed, progress=False).fit(epochs=30)
        potentials.save(model, folder / f"model_{seed}.pt")
    (folder / "h2.xyz").write_text("2\nstretched H2\nH 0 0 0\nH 1.4 0 0\n")
    return folder


def check_flagged_frames(output, config) -> list[int]:
    """The steps of ``flagged.npz``, checked against ``uncertainty.csv``: every record above the threshold,
    each with its disagreement and a stretched frame."""
    rows = [row.split(",") for row in (output / "uncertainty.csv").read_text().splitlines()[1:]]
    recorded = {int(step): float(value) for step, value in rows}
    threshold = float(config.read_text().split("threshold = ")[1].split("\n")[0])
    with np.load(output / "flagged.npz") as flagged:
        steps = flagged["steps"].tolist()
        assert steps == [step for step, value in recorded.items() if value > threshold]
        np.testing.assert_allclose(flagged["disagreement"], [recorded[step] for step in steps], rtol=1e-5)
        assert np.linalg.norm(flagged["positions"][0, 1] - flagged["positions"][0, 0]) > 0.1
    return steps


def write_config(folder, steps=20, active_table=True, **changes):
    committee = active.Committee([potentials.load(folder / f"model_{i}.pt") for i in range(2)])
    inside = committee.force_disagreement(torch.tensor([[[0, 0, 0], [0.0741, 0, 0]]], dtype=torch.float64),
                                          NUMBERS)
    settings = {
        "steps": steps, "constraints": '"none"', "minimize": "false",
        "system": 'molecule = "h2.xyz"',
        "integrator": "dt = 0.0005\ntemperature = 1.0\nfriction = 5.0",
        "potential": f'models = ["model_0.pt", "model_1.pt"]\nthreshold = {3 * float(inside[0])}\n'
                     "uncertainty_every = 5",
        "active": 'data = "data.npz"\nmax_frames = 3\nepochs = 40\nlearning_rate = 0.02',
        "output": 'directory = "run"\ntrajectory = ""\ncheckpoint_every = 10',
    }
    settings.update(changes)
    if not active_table:
        settings.pop("active")
    tables = ("system", "integrator", "potential", "active", "output")
    lines = [f"{key} = {value}" for key, value in settings.items() if key not in tables]
    for key in tables:
        if key in settings:
            lines += [f"[{key}]", settings[key]]
    path = folder / "run.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_committee_run_warns_keeps_the_flagged_frames_and_active_retrains(committee_files):
    config = write_config(committee_files)
    with pytest.warns(active.OutOfDistributionWarning, match=r"step 5: the committee's force disagreement"):
        assert cli.main(["run", str(config), "--quiet", "--active"]) == 0
    output = committee_files / "run"
    rows = (output / "uncertainty.csv").read_text().splitlines()
    assert rows[0] == "step,disagreement" and [int(row.split(",")[0]) for row in rows[1:]] == [5, 10, 15, 20]
    flagged_steps = check_flagged_frames(output, config)
    assert flagged_steps[0] == 5 and len(flagged_steps) >= 3
    # the labels are GFN2-xTB's on the frames chosen, and retraining fixed the committee there
    labels = TrainingData.from_hdf5([output / "active" / "labels.h5"])
    assert len(labels) == 3
    reference = xtb_labels(labels.positions.reshape(3, 2, 3).numpy())
    np.testing.assert_allclose(labels.energy.numpy(), reference["energy"], rtol=1e-9)
    summary = json.loads((output / "active" / "summary.json").read_text())
    assert summary["labelled_frames"] == 3
    assert summary["force_error_after"] < 0.2 * summary["force_error_before"], summary
    assert all((output / "active" / f"model_{i}.pt").is_file() for i in range(2))


def test_a_resumed_run_keeps_the_frames_flagged_before_it_stopped(committee_files):
    first = write_config(committee_files, steps=10, output='directory = "resumed"\ntrajectory = ""')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", active.OutOfDistributionWarning)
        assert cli.main(["run", str(first), "--quiet"]) == 0
        second = write_config(committee_files, steps=20, output='directory = "resumed"\ntrajectory = ""')
        assert cli.main(["run", str(second), "--quiet", "--resume"]) == 0
    output = committee_files / "resumed"
    rows = (output / "uncertainty.csv").read_text().splitlines()[1:]
    assert [int(row.split(",")[0]) for row in rows] == [5, 10, 15, 20]
    assert check_flagged_frames(output, second)[0] == 5  # flagged before the first run stopped


@pytest.mark.parametrize("changes, message", [
    ({"potential": 'models = ["model_0.pt"]\nthreshold = 1.0'}, "threshold needs a committee"),
    ({"constraints": '"hbonds"'}, "runs without constraints"),
    ({"system": 'pdb = "h2.pdb"'}, r"needs \[system\] molecule"),
])
def test_contradictory_settings_are_refused_naming_the_key(committee_files, changes, message):
    config = write_config(committee_files, **changes)
    with pytest.raises(ConfigurationError, match=message):
        cli.run(config, progress=False)


def test_a_molecule_needs_a_potential_and_active_needs_its_table(committee_files, tmp_path):
    config = write_config(committee_files, active_table=False)
    with pytest.raises(ConfigurationError, match=r"--active needs an \[active\] table"):
        cli.run(config, progress=False, active=True)
    text = config.read_text()
    start = text.index("[potential]")
    end = text.index("[output]")
    config.write_text(text[:start] + text[end:])
    with pytest.raises(ConfigurationError, match=r"molecule.*runs on a learned potential"):
        cli.run(config, progress=False)
