"""Training learned potentials on GFN2-xTB labels: accuracy, HDF5 input and its errors, early stopping,
checkpoint resume, and 2-process torchrun data parallelism against one process."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import mindsponge as ms
from common.io import H5Writer
from mindsponge.train import DatasetError, Trainer, TrainingData, main

pytest.importorskip("tblite")
from mindsponge.labels import xtb_sample  # noqa: E402

N_SAMPLES = 160


@pytest.fixture(scope="module")
def xtb_dataset(tmp_path_factory):
    """160 ethanol configurations (Gaussian displacements at 300-900 K) with GFN2-xTB labels, as HDF5."""
    path = tmp_path_factory.mktemp("xtb") / "ethanol_xtb.h5"
    temperatures = np.random.default_rng(0).uniform(300.0, 900.0, N_SAMPLES)
    with H5Writer(path) as writer:
        for seed, temperature in enumerate(temperatures):
            sample = xtb_sample({"temperature": float(temperature)}, seed=seed, sampling="displace")
            writer.append({"sample_id": seed, **sample})
    return path


def small_model(name="SchNet", dtype=torch.float32):
    torch.manual_seed(0)
    return ms.potentials.MODELS[name](features=32, interactions=2).to(dtype)


@pytest.mark.slow
def test_schnet_learns_xtb_forces(xtb_dataset):
    """Force MAE on held-out configurations far below the spread of the labels (what a model predicting
    the mean force would get)."""
    data = TrainingData.from_hdf5(xtb_dataset)
    assert len(data) == N_SAMPLES and data.positions.shape == (N_SAMPLES * 9, 3)
    spread = float((data.forces - data.forces.mean(0)).abs().mean())
    trainer = Trainer(small_model(), data, batch_size=8, learning_rate=3e-3, validation_fraction=0.2,
                      progress=False)
    before = trainer.evaluate()
    history = trainer.fit(epochs=30)
    after = trainer.evaluate()
    print(f"force label spread {spread:.1f} kJ/mol/nm; validation force MAE {before['force_mae']:.1f} "
          f"-> {after['force_mae']:.1f}, RMSE {after['force_rmse']:.1f}; energy MAE per atom "
          f"{after['energy_mae_per_atom']:.2f} kJ/mol")
    assert len(history["epoch"]) == 30 and history["epoch"][-1] == 30
    assert history["step"][-1] == 30 * 16  # 128 training samples in batches of 8
    assert after["force_mae"] < 0.2 * spread
    assert after["force_mae"] < 0.3 * before["force_mae"]
    assert after["force_rmse"] >= after["force_mae"]
    assert after["energy_mae_per_atom"] < float(data.energy.std()) / 9


def test_bad_dataset_files_raise(tmp_path, xtb_dataset):
    with pytest.raises(FileNotFoundError, match="missing.h5"):
        TrainingData.from_hdf5(tmp_path / "missing.h5")
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")
    with pytest.raises(DatasetError, match="empty.h5.*cannot be read"):
        TrainingData.from_hdf5(empty)
    corrupt = tmp_path / "corrupt.h5"
    corrupt.write_bytes(xtb_dataset.read_bytes()[:2000])
    with pytest.raises(DatasetError, match="corrupt.h5"):
        TrainingData.from_hdf5(corrupt)
    no_forces = tmp_path / "no_forces.h5"
    with H5Writer(no_forces) as writer:
        writer.append({"positions": np.zeros((3, 3)), "atomic_numbers": np.array([8, 1, 1]), "energy": 1.0})
    with pytest.raises(DatasetError, match=r"no column\(s\) \['forces'\]"):
        TrainingData.from_hdf5(no_forces)
    with pytest.raises(DatasetError, match=r"'forces' has shape \(2, 2, 3\) but positions \(2, 3, 3\)"):
        TrainingData.from_arrays(np.zeros((2, 3, 3)), [8, 1, 1], np.zeros(2), np.zeros((2, 2, 3)))
    with pytest.raises(DatasetError, match="no samples"):
        TrainingData.from_arrays(np.zeros((0, 3, 3)), [8, 1, 1], np.zeros(0), np.zeros((0, 3, 3)))
    bad = np.zeros((2, 3, 3))
    bad[1, 0, 0] = np.nan
    with pytest.raises(DatasetError, match="'positions' of sample 1 is not finite"):
        TrainingData.from_arrays(bad, [8, 1, 1], np.zeros(2), np.zeros((2, 3, 3)))


def test_mixed_molecule_sizes_and_batches(xtb_dataset):
    """Files with different molecules concatenate; a batch holds molecules of different sizes."""
    water = [xtb_sample({"temperature": 400.0}, seed=seed, molecule="water", sampling="displace")
             for seed in range(4)]
    water_data = TrainingData.from_arrays(
        np.stack([s["positions"] for s in water]), water[0]["atomic_numbers"],
        np.array([s["energy"] for s in water]), np.stack([s["forces"] for s in water]))
    data = TrainingData.concatenate([TrainingData.from_hdf5(xtb_dataset), water_data])
    assert len(data) == N_SAMPLES + 4 and data.n_atoms[-1] == 3 and data.n_atoms[0] == 9
    atoms, batch = data.atom_indices(torch.tensor([N_SAMPLES + 1, 0]))
    assert atoms.tolist() == list(range(N_SAMPLES * 9 + 3, N_SAMPLES * 9 + 6)) + list(range(9))
    assert batch.tolist() == [0] * 3 + [1] * 9


@pytest.mark.slow
def test_early_stopping_and_resume(tmp_path, xtb_dataset):
    data = TrainingData.from_hdf5(xtb_dataset).subset(torch.arange(24))
    # learning rate 0: the validation loss never improves, so training stops after `patience` epochs
    frozen = Trainer(small_model(), data, learning_rate=0.0, patience=2, progress=False)
    assert len(frozen.fit(epochs=50)["epoch"]) == 3
    # 2 epochs, then 2 more from the checkpoint == 4 epochs in one go (bit for bit)
    straight = Trainer(small_model(dtype=torch.float64), data, batch_size=4, progress=False)
    straight.fit(epochs=4)
    checkpoint = tmp_path / "train.chk"
    first = Trainer(small_model(dtype=torch.float64), data, batch_size=4, checkpoint=checkpoint,
                    progress=False)
    first.fit(epochs=2)
    resumed = Trainer(small_model(dtype=torch.float64), data, batch_size=4, checkpoint=checkpoint,
                      progress=False)
    history = resumed.fit(epochs=4)
    assert history["loss"] == straight.history["loss"]
    assert history["validation_loss"] == straight.history["validation_loss"]
    assert (tmp_path / "train.chk.history.csv").read_text().count("\n") == 5  # header + 4 epochs
    with pytest.warns(DeprecationWarning, match=r"history\[index\]"):
        first_epoch = history[0]  # the list of per-epoch dicts it used to be
    assert first_epoch["train_loss"] == history["loss"][0] and first_epoch["epoch"] == 1
    loaded = ms.potentials.load(checkpoint)
    assert type(loaded).__name__ == "SchNet"


@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
                    reason="torchrun not found next to the Python interpreter")
@pytest.mark.slow
def test_torchrun_two_processes_match_one(tmp_path, xtb_dataset):
    """`torchrun --nproc_per_node=2 -m mindsponge.train` (gloo) gives the losses of a single process."""
    data_path = tmp_path / "small.h5"
    table = TrainingData.from_hdf5(xtb_dataset)
    with H5Writer(data_path) as writer:
        for sample in range(20):
            atoms = slice(9 * sample, 9 * sample + 9)
            writer.append({"positions": table.positions[atoms].numpy(),
                           "atomic_numbers": table.atomic_numbers[atoms].numpy(),
                           "energy": float(table.energy[sample]), "forces": table.forces[atoms].numpy()})
    arguments = [str(data_path), "--epochs", "2", "--batch-size", "6", "--features", "16", "--interactions",
                 "1", "--dtype", "float64", "--quiet", "--validation-fraction", "0.2"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = tmp_path / "single.json"
    assert main([*arguments, "--history", str(single)]) == 0  # one process, in this one
    double = tmp_path / "double.json"
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    result = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", "-m", "mindsponge.train",
                             *arguments, "--history", str(double)],
                            env=environment, timeout=300, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    single_losses = json.loads(single.read_text())["loss"]
    double_losses = json.loads(double.read_text())["loss"]
    assert len(single_losses) == len(double_losses) == 2
    np.testing.assert_allclose(double_losses, single_losses, rtol=1e-8)
    assert single_losses[-1] < single_losses[0]
