"""Labels from other codes: MACE's ``REF_`` keys, molecules of different sizes in one file, the train
command line on extxyz, and a time limit that stops within an epoch."""

import json

import numpy as np
import pytest
import torch

pytest.importorskip("ase")
import ase  # noqa: E402
import ase.db  # noqa: E402
import ase.io  # noqa: E402

import mindsponge as ms  # noqa: E402
from common.errors import ConfigurationError, DataError, MindScienceError  # noqa: E402
from mindsponge.label_io import read_configurations, read_labels, write_labels  # noqa: E402
from mindsponge.train import Trainer, TrainingData, main  # noqa: E402

EV = 96.485332123  # kJ/mol per eV (CODATA), written out so the test does not trust the code's constant
ANGSTROM = 0.1  # nm


def mace_frames(sizes=(3, 5, 3, 4, 5, 3), seed=0):
    """Molecules of the given sizes with MACE-style labels: ``info["REF_energy"]`` eV and
    ``arrays["REF_forces"]`` eV/Å, and a ``config_type`` string MACE files carry."""
    rng = np.random.default_rng(seed)
    frames = []
    for index, size in enumerate(sizes):
        atoms = ase.Atoms(numbers=rng.choice([1, 6, 8], size=size), positions=rng.normal(size=(size, 3)))
        atoms.info["REF_energy"] = -10.0 * size + rng.normal()
        atoms.info["config_type"] = "Default"
        atoms.info["group"] = index // 2
        atoms.arrays["REF_forces"] = rng.normal(size=(size, 3))
        frames.append(atoms)
    return frames


def test_write_extxyz_with_mace_keys(tmp_path):
    """Labels written under ``REF_energy``/``REF_forces`` are where mace_run_train looks (plain ASE
    ``info``/``arrays``, eV and eV/Å, no calculator), and nowhere else."""
    rng = np.random.default_rng(1)
    labels = {"positions": rng.normal(size=(3, 4, 3)), "atomic_numbers": np.array([8, 1, 1, 6]),
              "energy": rng.normal(size=3) * 100.0, "forces": rng.normal(size=(3, 4, 3)) * 500.0}
    keys = {"energy": "REF_energy", "forces": "REF_forces"}
    path = write_labels(tmp_path / "train.extxyz", labels, keys=keys)
    for index, frame in enumerate(ase.io.read(path, index=":")):
        assert frame.calc is None
        np.testing.assert_allclose(frame.info["REF_energy"] * EV, labels["energy"][index], rtol=1e-7)
        np.testing.assert_allclose(frame.arrays["REF_forces"] * EV / ANGSTROM, labels["forces"][index],
                                   rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(frame.positions * ANGSTROM, labels["positions"][index], atol=1e-9)
    with pytest.raises(ConfigurationError, match="extxyz"):
        write_labels(tmp_path / "train.npz", labels, keys=keys)


def test_extxyz_with_mace_keys_and_mixed_sizes(tmp_path):
    path = tmp_path / "train.extxyz"
    ase.io.write(path, mace_frames(), format="extxyz")
    frames = ase.io.read(path, index=":")  # the values as the file holds them (8 significant digits)
    configurations = read_configurations(path, keys={"energy": "REF_energy", "forces": "REF_forces"})
    assert [len(c["positions"]) for c in configurations] == [len(frame) for frame in frames]
    for configuration, frame in zip(configurations, frames, strict=True):
        np.testing.assert_allclose(configuration["energy"], frame.info["REF_energy"] * EV, rtol=1e-9)
        np.testing.assert_allclose(configuration["forces"], frame.arrays["REF_forces"] * EV / ANGSTROM,
                                   rtol=1e-9)
        np.testing.assert_allclose(configuration["positions"], frame.positions * ANGSTROM, rtol=1e-12)
        np.testing.assert_array_equal(configuration["atomic_numbers"], frame.numbers)
        assert "config_type" not in configuration  # strings are not labels

    data = TrainingData.from_file(path, keys={"energy": "REF_energy", "forces": "REF_forces"})
    assert len(data) == len(frames)
    assert data.n_atoms.tolist() == [len(frame) for frame in frames]  # the file's order
    for sample, frame in enumerate(frames):
        atoms = slice(int(data.offsets[sample]), int(data.offsets[sample + 1]))
        np.testing.assert_allclose(data.energy[sample], frame.info["REF_energy"] * EV, rtol=1e-9)
        np.testing.assert_allclose(data.forces[atoms], frame.arrays["REF_forces"] * EV / ANGSTROM, rtol=1e-9)
        np.testing.assert_array_equal(data.atomic_numbers[atoms], frame.numbers)
    assert data.groups.tolist() == [frame.info["group"] for frame in frames]


def test_missing_labels_name_the_keys_a_file_has(tmp_path):
    path = tmp_path / "train.extxyz"
    ase.io.write(path, mace_frames(), format="extxyz")
    with pytest.raises(DataError, match=r"configuration 0 has no energy under 'energy'.*'REF_energy'"):
        read_configurations(path)
    with pytest.raises(DataError, match="configuration 0 has no forces under 'F'.*REF_forces"):
        read_configurations(path, keys={"energy": "REF_energy", "forces": "F"})
    with pytest.raises(ConfigurationError, match="unknown label"):
        read_configurations(path, keys={"stress": "REF_stress"})
    with pytest.raises(DataError, match="configuration 1 has 5 atoms, the first has 3.*read_configurations"):
        read_labels(path, keys={"energy": "REF_energy", "forces": "REF_forces"})
    with pytest.raises(MindScienceError, match=r"train.extxyz.*no energy under 'energy'"):
        TrainingData.from_file(path)


def test_ase_database_with_keys(tmp_path):
    frames = mace_frames(sizes=(3, 4))
    path = tmp_path / "train.db"
    with ase.db.connect(path) as database:
        for frame in frames:
            database.write(ase.Atoms(frame.numbers, frame.positions),
                           key_value_pairs={"REF_energy": frame.info["REF_energy"]},
                           data={"REF_forces": frame.arrays["REF_forces"]})
    configurations = read_configurations(path, keys={"energy": "REF_energy", "forces": "REF_forces"})
    for configuration, frame in zip(configurations, frames, strict=True):
        np.testing.assert_allclose(configuration["energy"], frame.info["REF_energy"] * EV, rtol=1e-9)
        np.testing.assert_allclose(configuration["forces"], frame.arrays["REF_forces"] * EV / ANGSTROM,
                                   rtol=1e-9)


def test_train_command_line_reads_extxyz(tmp_path, capsys):
    path = tmp_path / "train.extxyz"
    ase.io.write(path, mace_frames(sizes=(3, 4) * 4), format="extxyz")
    output = tmp_path / "model.pt"
    status = main([str(path), "--energy-key", "REF_energy", "--forces-key", "REF_forces", "--epochs", "2",
                   "--features", "8", "--interactions", "1", "--batch-size", "4", "--quiet",
                   "--output", str(output)])
    assert status == 0
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert np.isfinite(final["force_mae"])
    assert isinstance(ms.potentials.load(output), ms.potentials.LearnedPotential)
    assert main([str(path), "--epochs", "1", "--quiet"]) == 2  # a data error: a message, no traceback
    assert "no energy under 'energy'" in capsys.readouterr().err
    before = path.read_bytes()
    with pytest.raises(SystemExit):  # refused before reading the data: the split goes into an HDF5 file
        main([str(path), "--store-split", "--energy-key", "REF_energy", "--forces-key", "REF_forces"])
    assert "single HDF5" in capsys.readouterr().err and path.read_bytes() == before


def test_time_limit_stops_within_an_epoch(monkeypatch):
    """A clock that advances 1 s at every reading and a 2.5 s budget: the first epoch stops after its
    second batch (the old check, between epochs, ran all 8 batches of the epoch)."""
    import mindsponge.training.trainer as trainer_module

    class Clock:
        now = 0.0

        def monotonic(self):
            Clock.now += 1.0
            return Clock.now

    rng = np.random.default_rng(0)
    positions = rng.normal(scale=0.1, size=(34, 3, 3))
    data = TrainingData.from_arrays(positions, [8, 1, 1], rng.normal(size=34), rng.normal(size=(34, 3, 3)))
    torch.manual_seed(0)
    model = ms.potentials.SchNet(features=8, interactions=1).double()
    trainer = Trainer(model, data, batch_size=4, validation_fraction=0.1, progress=False)
    assert len(trainer.training) == 31  # 8 batches of 4 in an epoch
    monkeypatch.setattr(trainer_module, "time", Clock())
    history = trainer.fit(epochs=5, time_limit=2.5)
    assert history["epoch"] == [1]
    assert history["step"] == [2]
    with pytest.raises(ConfigurationError, match="time_limit"):
        trainer.fit(epochs=5, time_limit=0.0)
