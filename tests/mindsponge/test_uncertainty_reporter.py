"""The committee's uncertainty along a production run: recorded, warned about where the run leaves the
training data (naming the step), flagged frames saved for labelling, and cut back on resume.

The case is a Morse diatomic (H2-like, analytic labels): a committee of two small SchNet models
trained on bond lengths 0.064-0.084 nm. MD at 50 K from the equilibrium stays inside; a molecule
started at 0.14 nm is outside from the first step.
"""

import warnings

import numpy as np
import pytest
import torch

from common.errors import ConfigurationError
from mindsponge import active
from mindsponge.integrators import LangevinMiddle
from mindsponge.potentials import SchNet
from mindsponge.simulation import Simulation
from mindsponge.system import System
from mindsponge.train import Trainer, TrainingData

ase = pytest.importorskip("ase")

NUMBERS = np.array([1, 1])


def morse(distance):
    """Energy (kJ/mol) and the force along the bond (kJ/mol/nm) of a Morse bond at ``distance`` nm."""
    depth, width, equilibrium = 430.0, 19.0, 0.0741
    decay = np.exp(-width * (distance - equilibrium))
    return depth * (1 - decay) ** 2, -2 * depth * width * decay * (1 - decay)


@pytest.fixture(scope="module")
def committee():
    rng = np.random.default_rng(0)
    distances = rng.uniform(0.064, 0.084, 48)
    directions = rng.normal(size=(48, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    positions = np.stack([np.zeros((48, 3)), distances[:, None] * directions], axis=1)
    energy, force = morse(distances)
    forces = np.stack([-force[:, None] * directions, force[:, None] * directions], axis=1)
    data = TrainingData.from_arrays(positions, NUMBERS, energy, forces)
    models = []
    for seed in range(2):
        torch.manual_seed(seed)
        model = SchNet(cutoff=0.3, features=8, interactions=1).double()
        Trainer(model, data, learning_rate=0.02, batch_size=16, seed=seed, progress=False).fit(epochs=30)
        models.append(model)
    return active.Committee(models)


def run(committee, distance, steps, reporter, temperature=50.0):
    atoms = ase.Atoms(numbers=NUMBERS, positions=[[0, 0, 0], [10 * distance, 0, 0]])
    simulation = Simulation(System.from_ase(atoms), committee.bind(NUMBERS),
                            LangevinMiddle(0.0005, temperature, 5.0), reporters=[reporter], seed=1,
                            progress=False, overlap_distance=None)
    simulation.set_velocities(temperature, seed=1)
    simulation.run(steps)
    return simulation


def test_a_run_inside_the_data_records_without_warning(committee, tmp_path):
    threshold = 3.0 * float(committee.force_disagreement(
        torch.tensor([[[0, 0, 0], [d, 0, 0]] for d in np.linspace(0.066, 0.082, 9)], dtype=torch.float64),
        NUMBERS).max())
    reporter = active.UncertaintyReporter(committee, NUMBERS, every=10, threshold=threshold,
                                          path=tmp_path / "uncertainty.csv", keep="all")
    with warnings.catch_warnings():
        warnings.simplefilter("error", active.OutOfDistributionWarning)
        run(committee, 0.0741, 200, reporter)
    assert reporter.steps == list(range(10, 201, 10))
    # each record is the committee's disagreement on the frame kept at that step
    recomputed = committee.force_disagreement(torch.as_tensor(np.stack(reporter.positions)), NUMBERS)
    np.testing.assert_allclose(reporter.disagreement, recomputed.numpy(), rtol=1e-10)
    rows = (tmp_path / "uncertainty.csv").read_text().splitlines()
    assert rows[0] == "step,disagreement" and len(rows) == 21
    assert reporter.flagged_frames()[0].shape == (0, 2, 3)


def test_leaving_the_data_warns_naming_the_step_and_flags_frames(committee, tmp_path):
    inside = float(committee.force_disagreement(
        torch.tensor([[[0, 0, 0], [0.0741, 0, 0]]], dtype=torch.float64), NUMBERS)[0])
    outside = float(committee.force_disagreement(
        torch.tensor([[[0, 0, 0], [0.14, 0, 0]]], dtype=torch.float64), NUMBERS)[0])
    assert outside > 4 * inside  # the committee does disagree away from its data
    threshold = 3.0 * inside
    reporter = active.UncertaintyReporter(committee, NUMBERS, every=5, threshold=threshold)
    with pytest.warns(active.OutOfDistributionWarning, match=r"step 5: the committee's force disagreement"):
        run(committee, 0.14, 5, reporter, temperature=1.0)
    positions, steps = reporter.flagged_frames()
    assert steps.tolist() == [5] and positions.shape == (1, 2, 3)
    assert np.linalg.norm(positions[0, 1] - positions[0, 0]) > 0.1
    path = reporter.write_flagged(tmp_path / "flagged.npz")
    with np.load(path) as saved:
        np.testing.assert_array_equal(saved["positions"], positions)
        np.testing.assert_array_equal(saved["atomic_numbers"], NUMBERS)


def test_truncate_cuts_records_and_file_back(committee, tmp_path):
    path = tmp_path / "uncertainty.csv"
    reporter = active.UncertaintyReporter(committee, NUMBERS, every=10, path=path, keep="all")
    run(committee, 0.0741, 50, reporter)
    reporter.truncate(30)
    assert reporter.steps == [10, 20, 30] and len(reporter.positions) == 3
    assert [row.split(",")[0] for row in path.read_text().splitlines()] == ["step", "10", "20", "30"]


def test_bad_settings_are_refused(committee):
    with pytest.raises(ConfigurationError, match="threshold"):
        active.UncertaintyReporter(committee, NUMBERS, every=10, threshold=-1.0)
    with pytest.raises(ConfigurationError, match="keep must be one of"):
        active.UncertaintyReporter(committee, NUMBERS, every=10, keep="some")
    with pytest.raises(ConfigurationError, match="every"):
        active.UncertaintyReporter(committee, NUMBERS, every=0)
    with pytest.raises(ConfigurationError, match="frames_path saves the flagged frames"):
        active.UncertaintyReporter(committee, NUMBERS, every=10, frames_path="flagged.npz")
    with pytest.raises(ConfigurationError, match="no threshold"):
        active.UncertaintyReporter(committee, NUMBERS, every=10).flagged_frames()
