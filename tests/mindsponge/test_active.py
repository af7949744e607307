"""mindsponge.active: the committee flags frames only outside the region it was trained on, the
labelling resumes without relabelling, and the command line runs.

The tiny case is H2 (GFN2-xTB labels from tblite): the initial data are Gaussian displacements at
50-150 K, so the H-H distance stays within about 0.067-0.087 nm. The exploration has two umbrella
windows on the H-H distance, one at the equilibrium 0.074 nm (inside the data) and one pulling
towards 0.15 nm (outside). The threshold is the largest disagreement of the round-0 committee on
its own training frames. Every frame flagged and labelled must then lie outside the training
range of H-H distances, and the window inside must give none.
"""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
import torch

pytest.importorskip("tblite")

from common.errors import ConfigurationError, DataError  # noqa: E402
from mindsponge import active  # noqa: E402
from mindsponge import labels as labels_module  # noqa: E402
from mindsponge.active.__main__ import main  # noqa: E402

INITIAL = """
name = "h2_displaced"
[generator]
function = "mindsponge.labels:xtb_sample"
options = { molecule = "H2", sampling = "displace" }
labels = ["positions", "atomic_numbers", "energy", "forces"]
[parameters]
temperature = { low = 50.0, high = 150.0 }
[sampling]
method = "sobol"
n = 32
seed = 0
[output]
path = "unused.h5"
"""

CONFIG = """
initial = "initial.toml"
directory = "run"
max_rounds = 1
[selection]
threshold = {threshold}
max_frames = 6
[committee]
size = 3
features = 16
interactions = 1
cutoff = 0.4
dtype = "float64"
epochs = 60
retrain_epochs = 3
batch_size = 8
learning_rate = 0.01
[exploration]
temperature = 300.0
steps = 200
every = 10
stop_factor = 100.0
[exploration.umbrella]
distances = [[0, 1]]
coefficients = [1.0]
centers = [0.074, 0.15]
force_constant = 200000.0
"""


def _bond_lengths(positions) -> np.ndarray:
    positions = np.asarray(positions)
    return np.linalg.norm(positions[:, 0] - positions[:, 1], axis=-1)


@pytest.fixture(scope="module")
def interrupted_then_resumed(tmp_path_factory):
    """Round 0, then round 1 interrupted after two labels, then resumed; what each step did."""
    folder = tmp_path_factory.mktemp("active")
    (folder / "initial.toml").write_text(INITIAL)
    (folder / "config.toml").write_text(CONFIG.format(threshold=1.0))
    config, base = active.load_config(folder / "config.toml")
    run = active.ActiveLearning(config, base, progress=False)
    run.run(max_rounds=0)
    data = run.training_data(0)
    known = data.positions.reshape(len(data), -1, 3)
    round0 = run.load_committee(0)
    threshold = float(round0.force_disagreement(known, data.atomic_numbers[:2]).max())
    (folder / "config.toml").write_text(CONFIG.format(threshold=threshold))

    original, calls = labels_module.label, []

    def counted(potential, positions, *args, **kwargs):
        calls.append(np.asarray(positions).copy())
        if len(calls) == 3 and interrupt:
            raise KeyboardInterrupt
        return original(potential, positions, *args, **kwargs)

    labels_module.label = counted
    try:
        interrupt = True
        config, base = active.load_config(folder / "config.toml")
        with pytest.raises(KeyboardInterrupt):
            active.ActiveLearning(config, base, progress=False).run()
        first = len(calls) - 1  # the third call was interrupted
        interrupt = False
        run = active.ActiveLearning(config, base, progress=False)
        records = run.run()
    finally:
        labels_module.label = original
    return {
        "run": run,
        "records": records,
        "threshold": threshold,
        "round0": round0,
        "known": known.numpy(),
        "first_calls": first,
        "resumed_calls": len(calls) - first - 1,
        "folder": folder,
    }


@pytest.mark.slow
def test_flagged_frames_lie_outside_the_training_region(interrupted_then_resumed):
    result = interrupted_then_resumed
    run, threshold = result["run"], result["threshold"]
    known = _bond_lengths(result["known"])
    explored = run.exploration(1)
    lengths = _bond_lengths(explored["positions"])
    flagged = explored["disagreement"] > threshold
    assert flagged.any(), "the window outside the data should make the committee disagree"
    inside = (lengths >= known.min()) & (lengths <= known.max())
    assert inside.any() and not (flagged & inside).any(), (
        lengths[flagged & inside],
        known.min(),
        known.max(),
    )
    assert not flagged[explored["trajectory"] == 0].any()  # the window at equilibrium, within the data
    with h5py.File(run.round_directory(1) / "labels.h5") as handle:
        labelled = handle["positions"][: int(handle.attrs.get("_committed", len(handle["positions"])))]
    candidates = np.load(run.round_directory(1) / "candidates.npz")["positions"]
    assert len(labelled) == len(candidates) == result["records"][1]["added_frames"] > 0
    outside = _bond_lengths(labelled)
    assert np.all((outside < known.min()) | (outside > known.max())), outside
    disagreement = result["round0"].force_disagreement(candidates, [1, 1]).numpy()
    assert np.all(disagreement > threshold)


def test_resumed_labelling_does_not_relabel(interrupted_then_resumed):
    result = interrupted_then_resumed
    candidates = np.load(result["run"].round_directory(1) / "candidates.npz")["positions"]
    assert result["first_calls"] == 2
    assert result["resumed_calls"] == len(candidates) - 2
    table = result["run"].round_directory(1) / "labels.h5"
    with h5py.File(table) as handle:
        ids = handle["sample_id"][:]
    assert sorted(ids.tolist()) == list(range(len(candidates)))


def test_log_has_a_row_per_round(interrupted_then_resumed):
    run = interrupted_then_resumed["run"]
    lines = (run.directory / "rounds.csv").read_text().splitlines()
    assert lines[0].split(",") == list(active.LOG_COLUMNS)
    assert len(lines) == 3  # header, round 0, round 1
    assert interrupted_then_resumed["records"][1]["training_frames"] == 32 + len(
        np.load(run.round_directory(1) / "candidates.npz")["positions"]
    )


def test_a_run_resumes_from_the_records_the_labels_and_the_last_committee_alone(
    interrupted_then_resumed, tmp_path
):
    """What a repository keeps of a run (every round's record and labels, the last committee's models)
    is enough to resume it: nothing is trained or labelled again and the committee is round 1's."""
    source = interrupted_then_resumed["run"]
    kept = tmp_path / "run"
    for path in source.directory.rglob("*"):
        name = path.relative_to(source.directory)
        if path.name in ("record.json", "labels.h5", "initial.h5") or (
            name.parts[0] == "round_001" and path.suffix == ".pt"
        ):
            (kept / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, kept / name)
    config = source.config
    config = type(config)(**{**vars(config), "directory": str(kept)})
    resumed = active.ActiveLearning(config, source.base, progress=False)
    assert resumed.run() == interrupted_then_resumed["records"]
    assert not (kept / "round_000" / "model_0.pt").exists()
    frames = torch.as_tensor(interrupted_then_resumed["known"][:3])
    numbers = resumed.training_data(0).atomic_numbers[:2]
    np.testing.assert_array_equal(resumed.committee.force_disagreement(frames, numbers),
                                  source.committee.force_disagreement(frames, numbers))


def _copy_run(source, target, keep) -> active.ActiveLearning:
    """A run in ``target`` with the files of ``source``'s directory that ``keep(relative path)`` accepts."""
    for path in source.directory.rglob("*"):
        name = path.relative_to(source.directory)
        if path.is_file() and keep(name):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target / name)
    config = type(source.config)(**{**vars(source.config), "directory": str(target)})
    return active.ActiveLearning(config, source.base, progress=False)


def test_supplied_frames_stand_in_for_the_exploration_and_only_the_uncertain_are_labelled(
    interrupted_then_resumed, tmp_path
):
    """Frames from elsewhere (a production run) as round 1's exploration: those at the training data's
    bond lengths are left, those stretched past them are labelled and trained on."""
    result = interrupted_then_resumed
    run = _copy_run(result["run"], tmp_path / "run", lambda name: name.parts[0] != "round_001")
    known = result["known"][:4]
    stretched = known.copy()
    stretched[:, 1] = known[:, 0] + (known[:, 1] - known[:, 0]) * (0.14 / _bond_lengths(known))[:, None]
    explored = run.supply_exploration(1, np.concatenate([known, stretched]), [1, 1])
    flagged = explored["disagreement"] > result["threshold"]
    np.testing.assert_array_equal(flagged, [False] * 4 + [True] * 4)
    records = run.run(max_rounds=1)
    assert records[1]["explored_frames"] == 8 and records[1]["added_frames"] == 4
    assert records[1]["training_frames"] == 32 + 4
    with h5py.File(run.round_directory(1) / "labels.h5") as handle:
        np.testing.assert_allclose(_bond_lengths(handle["positions"][:]), 0.14)
    with pytest.raises(ConfigurationError, match="round 1 .* is explored already"):
        run.supply_exploration(1, stretched, [1, 1])
    with pytest.raises(ConfigurationError, match=r"shape \(4, 1, 3\); expected \(frames, 2, 3\)"):
        run.supply_exploration(2, stretched[:, :1], [1, 1])
    stretched[2, 1, 0] = np.nan
    with pytest.raises(DataError, match="supplied positions of frame 2"):
        run.supply_exploration(2, stretched, [1, 1])
    with pytest.raises(ConfigurationError, match="round 3: the rounds before it"):
        run.supply_exploration(3, known, [1, 1])


def test_a_finished_round_whose_labels_are_missing_is_named_not_dropped_silently(
    interrupted_then_resumed, tmp_path
):
    result = interrupted_then_resumed
    run = _copy_run(result["run"], tmp_path / "run", lambda name: name.name != "labels.h5")
    added = result["records"][1]["added_frames"]
    missing = rf"round_001/labels.h5 is missing: the {added} frames round 1 labelled"
    with pytest.warns(UserWarning, match=missing):
        data = run.training_data(1)
    assert len(data) == 32


def test_command_line_resumes_and_plots(interrupted_then_resumed, tmp_path, capsys):
    folder = tmp_path / "copy"
    shutil.copytree(interrupted_then_resumed["folder"], folder)
    status = main([str(folder / "config.toml"), "--quiet", "--plot", str(tmp_path / "rounds.png")])
    assert status == 1  # one round, not converged
    assert "round=1" in capsys.readouterr().out
    assert (tmp_path / "rounds.png").stat().st_size > 0


def test_command_line_refuses_a_bad_configuration(tmp_path, capsys):
    (tmp_path / "bad.toml").write_text('initial = "x.h5"\n[selection]\nthreshold = -1.0\n')
    assert main([str(tmp_path / "bad.toml")]) == 2
    assert "threshold" in capsys.readouterr().err


def test_force_disagreement_is_the_largest_per_atom_rms_deviation():
    from mindsponge.potentials import SchNet

    torch.manual_seed(0)
    committee = active.Committee([SchNet(cutoff=0.5, features=8, interactions=1).double() for _ in range(2)])
    positions = torch.tensor([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.0, 0.12, 0.03]], dtype=torch.float64)
    numbers = torch.tensor([8, 1, 1])
    forces = []
    for model in committee.models:  # each model on its own, by autograd
        x = positions.clone().requires_grad_(True)
        (gradient,) = torch.autograd.grad(model(x, numbers), x)
        forces.append(-gradient)
    mean = (forces[0] + forces[1]) / 2
    expected = torch.sqrt(((forces[0] - mean) ** 2 + (forces[1] - mean) ** 2).sum(-1) / 2).max()
    assert torch.allclose(committee.force_disagreement(positions[None], numbers)[0], expected, rtol=1e-12)
    energy = committee.bind(numbers)(positions)
    assert torch.allclose(
        energy, (committee.models[0](positions, numbers) + committee.models[1](positions, numbers)) / 2
    )


def test_force_disagreement_in_a_periodic_box_uses_the_box():
    """Frames in a box: each model's forces with the box (minimum image across the faces), not those of
    the cluster in vacuum; the frames of a batch are evaluated alike."""
    from mindsponge.potentials import SchNet

    torch.manual_seed(1)
    committee = active.Committee([SchNet(cutoff=0.4, features=8, interactions=1).double() for _ in range(2)])
    box = torch.eye(3, dtype=torch.float64) * 0.9
    rng = np.random.default_rng(2)
    frames = torch.as_tensor(rng.uniform(0.0, 0.9, size=(3, 6, 3)))
    numbers = torch.tensor([8, 1, 1, 8, 1, 1])
    expected, vacuum = [], []
    for frame in frames:
        forces = {True: [], False: []}
        for model in committee.models:
            for periodic in (True, False):
                x = frame.clone().requires_grad_(True)
                (gradient,) = torch.autograd.grad(model(x, numbers, box if periodic else None), x)
                forces[periodic].append(-gradient)
        for periodic, values in forces.items():
            mean = (values[0] + values[1]) / 2
            rms = torch.sqrt(((values[0] - mean) ** 2 + (values[1] - mean) ** 2).sum(-1) / 2).max()
            (expected if periodic else vacuum).append(rms)
    got = committee.force_disagreement(frames, numbers, box=box)
    assert torch.allclose(got, torch.stack(expected), rtol=1e-10)
    assert not torch.allclose(got, torch.stack(vacuum), rtol=1e-3)  # the box matters for these frames


def test_select_frames_takes_only_flagged_frames_at_most_max():
    disagreement = np.array([1.0, 50.0, 2.0, 80.0, 60.0, 3.0, 99.0])
    assert active.select_frames(disagreement, 10.0, 10).tolist() == [1, 3, 4, 6]
    chosen = active.select_frames(disagreement, 10.0, 2)
    assert chosen.tolist() == [1, 6]  # the least and the most uncertain of the flagged
    assert active.select_frames(disagreement, 100.0, 5).size == 0


def test_committee_refuses_a_single_model():
    from mindsponge.potentials import SchNet

    with pytest.raises(ValueError, match="at least 2"):
        active.Committee([SchNet(cutoff=0.5, features=8, interactions=1)])


def test_a_frame_gfn2_cannot_label_is_recorded_as_failed_and_left_out(tmp_path):
    frames = np.array([[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0], [0.0, 0.0, 0.074]]])  # nm
    active.write_frames(tmp_path / "frames.npz", frames, [1, 1])
    summary = active.label_frames(tmp_path / "frames.npz", 2, tmp_path / "labels.h5", progress=False)
    assert summary.unresolved == [0]  # two H at one point: tblite refuses
    with h5py.File(tmp_path / "labels.h5") as handle:
        assert handle["sample_id"][:].tolist() == [1]
        energy = float(handle["energy"][0])
    reference = labels_module.label(labels_module.XTB(torch.tensor([1, 1])), torch.tensor(frames[1]))
    assert energy == pytest.approx(float(reference["energy"]), abs=1e-6)


def test_committee_members_train_with_the_configured_average_clipping_and_weights(tmp_path, monkeypatch):
    """``[committee]`` ``ema_decay``, ``gradient_clip`` and ``weight_schedule`` reach every member's
    Trainer; a schedule key that is not an epoch is refused."""
    from common.config import ConfigError
    from mindsponge.active import loop

    seen = []

    class RecordingTrainer:
        def __init__(self, model, data, **options):
            seen.append(options)
            self.model = model

        def fit(self, epochs):
            pass

        def evaluate(self):
            return {"force_mae": 1.0}

    monkeypatch.setattr(loop, "Trainer", RecordingTrainer)
    options = "\n".join(["learning_rate = 0.01", "ema_decay = 0.99", "gradient_clip = 50.0",
                         'weight_schedule = { "5" = [100.0, 1.0] }',
                         'retrain_weight_schedule = { "0" = [1.0, 1.0], "2" = [100.0, 1.0] }'])
    text = CONFIG.format(threshold=1.0).replace("learning_rate = 0.01", options)
    (tmp_path / "config.toml").write_text(text)
    config, base = active.load_config(tmp_path / "config.toml")
    run = active.ActiveLearning(config, base, progress=False)
    committee, _ = run.train(0, None, None)
    assert len(committee) == len(seen) == 3
    assert all(options["ema_decay"] == 0.99 and options["gradient_clip"] == 50.0 for options in seen)
    assert all(options["weight_schedule"] == {5: (100.0, 1.0)} for options in seen)
    run.train(1, None, committee)  # warm-started retraining: its own schedule
    assert all(options["weight_schedule"] == {0: (1.0, 1.0), 2: (100.0, 1.0)} for options in seen[3:])
    (tmp_path / "config.toml").write_text(text.replace('"5" =', '"five" ='))
    with pytest.raises(ConfigError, match="weight_schedule: keys must be first epochs"):
        active.load_config(tmp_path / "config.toml")


def _h2_training_data(frames: int = 24):
    from mindsponge.train import TrainingData

    generator = np.random.default_rng(0)
    distance = 0.074 + 0.01 * generator.standard_normal(frames)
    positions = np.zeros((frames, 2, 3))
    positions[:, 1, 0] = distance
    force = 3.0e5 * (distance - 0.074)  # a harmonic bond, kJ/mol/nm
    forces = np.zeros((frames, 2, 3))
    forces[:, 0, 0], forces[:, 1, 0] = force, -force
    energy = 1.5e5 * (distance - 0.074) ** 2
    numbers = np.ones((frames, 2), dtype=np.int64)
    return TrainingData.from_arrays(positions, numbers, energy, forces, source="H2")


@pytest.mark.slow
def test_committee_members_train_side_by_side_as_one_after_the_other_and_keep_finished_members(tmp_path):
    """``[committee] workers = 2`` trains the members in two processes to the same weights as in this
    process; a member whose model was saved is not trained again when the round is run again."""
    data = _h2_training_data()
    predictions, folders = {}, {}
    for workers in (0, 2):
        (tmp_path / f"{workers}").mkdir()
        text = CONFIG.format(threshold=1.0).replace("epochs = 60", "epochs = 4")
        text = text.replace("learning_rate = 0.01", f"learning_rate = 0.01\nworkers = {workers}")
        (tmp_path / f"{workers}" / "config.toml").write_text(text)
        config, base = active.load_config(tmp_path / f"{workers}" / "config.toml")
        run = active.ActiveLearning(config, base, progress=False)
        committee, error = run.train(0, data, None)
        energy = committee.models[2](data.positions[:2], data.atomic_numbers[:2]).item()
        predictions[workers] = (energy, error)
        folders[workers] = run
    np.testing.assert_allclose(predictions[2], predictions[0], rtol=1e-8)

    run = folders[2]
    folder = run.round_directory(0)
    kept = {member: (folder / f"model_{member}.pt").stat().st_mtime_ns for member in (0, 2)}
    (folder / "model_1.pt").unlink()
    (folder / "model_1.chk").unlink()
    committee, error = run.train(0, data, None)
    assert {member: (folder / f"model_{member}.pt").stat().st_mtime_ns for member in (0, 2)} == kept
    assert committee.models[2](data.positions[:2], data.atomic_numbers[:2]).item() == predictions[2][0]
    assert error == pytest.approx(predictions[2][1], rel=1e-12)


def test_committee_workers_must_be_a_non_negative_count(tmp_path):
    from common.config import ConfigError

    text = CONFIG.format(threshold=1.0).replace("learning_rate = 0.01", "learning_rate = 0.01\nworkers = -1")
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(ConfigError, match="workers"):
        active.load_config(tmp_path / "config.toml")


def test_exploration_trajectories_run_side_by_side_as_one_after_the_other():
    """``[exploration] workers = 2`` gives the frames and disagreements of the in-process run."""
    from mindsponge import potentials
    from mindsponge.active.exploration import Exploration, Umbrella, explore

    torch.manual_seed(0)
    committee = active.Committee(
        [potentials.MODELS["SchNet"](cutoff=0.4, features=8, interactions=1).double() for _ in range(2)]
    )
    starts = _h2_training_data(4).positions.reshape(4, 2, 3).numpy()
    umbrella = Umbrella([(0, 1)], [1.0], [0.07, 0.09, 0.11], 200000.0)
    results = {
        workers: explore(committee, torch.ones(2, dtype=torch.int64), starts,
                         Exploration(steps=40, every=10, umbrella=umbrella, workers=workers), 1.0,
                         progress=False)
        for workers in (0, 2)
    }
    assert results[0]["trajectory"].tolist() == results[2]["trajectory"].tolist()
    assert len(set(results[0]["trajectory"].tolist())) == 3
    np.testing.assert_allclose(results[2]["positions"], results[0]["positions"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(results[2]["disagreement"], results[0]["disagreement"], rtol=1e-10)
