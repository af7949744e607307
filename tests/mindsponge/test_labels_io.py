"""Export and import of labelled configurations: exact npz and HDF5 round trips, extxyz and ASE db
round trips within their text/float precision, and ASE reading our files in its own units."""

import ase.db
import ase.io
import numpy as np
import pytest

from common.errors import DataError
from mindsponge.label_io import read_labels, write_labels

EV_TO_KJ_PER_MOL = 96.48533212331  # CODATA: e * N_A / 1000
EV_PER_ANGSTROM = EV_TO_KJ_PER_MOL * 10.0  # eV/A -> kJ/mol/nm


def water_labels(count=3, seed=0):
    generator = np.random.default_rng(seed)
    base = np.array([[0.0, 0.0, 0.0], [0.0957, 0.0, 0.0], [-0.024, 0.0927, 0.0]])
    return {"positions": base + 0.005 * generator.standard_normal((count, 3, 3)),
            "atomic_numbers": np.array([8, 1, 1]),
            "energy": -13300.0 + 10.0 * generator.standard_normal(count),
            "forces": 500.0 * generator.standard_normal((count, 3, 3)),
            "temperature": np.linspace(300.0, 900.0, count)}


def assert_labels_close(read, labels, atol_nm=1e-9, atol_force=1e-4):
    assert read["atomic_numbers"].shape == (len(labels["energy"]), 3)
    assert read["atomic_numbers"].dtype == np.int64
    assert (read["atomic_numbers"] == labels["atomic_numbers"]).all()
    np.testing.assert_allclose(read["positions"], labels["positions"], rtol=0, atol=atol_nm)
    np.testing.assert_allclose(read["energy"], labels["energy"], rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(read["forces"], labels["forces"], rtol=0, atol=atol_force)
    np.testing.assert_allclose(read["temperature"], labels["temperature"], rtol=1e-12)


def test_npz_round_trip_is_exact(tmp_path):
    labels = water_labels()
    read = read_labels(write_labels(tmp_path / "water.npz", labels))
    for key in ("positions", "energy", "forces", "temperature"):
        np.testing.assert_array_equal(read[key], labels[key])
    assert read["atomic_numbers"].shape == (3, 3)


def test_h5_round_trip_is_exact_and_trains(tmp_path):
    from mindsponge.train import TrainingData

    labels = water_labels()
    path = write_labels(tmp_path / "water.h5", labels)
    read = read_labels(path)
    for key in ("positions", "energy", "forces", "temperature"):
        np.testing.assert_array_equal(read[key], labels[key])
    data = TrainingData.from_hdf5(path)
    np.testing.assert_array_equal(data.forces.numpy(), labels["forces"].reshape(-1, 3))


@pytest.mark.parametrize("name", ["water.extxyz", "water.db"])
def test_ase_formats_round_trip(tmp_path, name):
    labels = water_labels()
    assert_labels_close(read_labels(write_labels(tmp_path / name, labels)), labels)


def test_ase_reads_our_extxyz_and_db_in_ev_and_angstrom(tmp_path):
    labels = water_labels()
    frames = ase.io.read(write_labels(tmp_path / "water.extxyz", labels), index=":")
    with ase.db.connect(write_labels(tmp_path / "water.db", labels)) as database:
        rows = [row.toatoms() for row in database.select()]
    for atoms_list in (frames, rows):
        for index, atoms in enumerate(atoms_list):
            np.testing.assert_allclose(atoms.positions, labels["positions"][index] * 10.0, atol=1e-7)
            forces = labels["forces"][index] / EV_PER_ANGSTROM
            np.testing.assert_allclose(atoms.get_forces(), forces, atol=1e-7)
            assert atoms.get_potential_energy() == pytest.approx(labels["energy"][index] / EV_TO_KJ_PER_MOL,
                                                                 rel=1e-12)
            assert list(atoms.numbers) == [8, 1, 1]


def test_periodic_box_round_trip(tmp_path):
    labels = water_labels(2)
    labels["box"] = np.broadcast_to(np.diag([1.2, 1.3, 1.4]), (2, 3, 3)).copy()
    for name in ("box.extxyz", "box.db", "box.npz"):
        np.testing.assert_allclose(read_labels(write_labels(tmp_path / name, labels))["box"], labels["box"])


def test_reads_a_generated_dataset(tmp_path):
    """A common.datasets HDF5 file of xtb_sample labels reads back as the same arrays, and exports."""
    pytest.importorskip("tblite")
    from common import datasets

    recipe = datasets.loads_recipe("""
name = "water_modes"
[generator]
function = "mindsponge.labels:xtb_sample"
options = { molecule = "water", sampling = "normal_modes" }
labels = ["positions", "atomic_numbers", "energy", "forces"]
[parameters]
temperature = { values = [300.0, 600.0] }
[sampling]
method = "grid"
seed = 0
[output]
path = "water_modes.h5"
""")
    path = tmp_path / "water_modes.h5"
    summary = datasets.generate(recipe, output=path, workers=1, progress=False)
    assert summary.exit_status == 0
    table = datasets.read_dataset(path)
    read = read_labels(path)
    for key in ("positions", "atomic_numbers", "energy", "forces", "temperature"):
        np.testing.assert_array_equal(read[key], table[key])
    assert_labels_close(read_labels(write_labels(tmp_path / "water.extxyz", read)), read)


def test_bad_labels_and_files(tmp_path):
    labels = water_labels()
    with pytest.raises(DataError, match="lack \\['forces'\\]"):
        write_labels(tmp_path / "a.npz", {key: value for key, value in labels.items() if key != "forces"})
    with pytest.raises(DataError, match=r"labels\['forces'\] has shape \(2, 3, 3\)"):
        write_labels(tmp_path / "a.npz", {**labels, "forces": labels["forces"][:2]})
    with pytest.raises(ValueError, match="unknown label format"):
        write_labels(tmp_path / "a.csv", labels)
    write_labels(tmp_path / "a.npz", labels)
    with pytest.raises(FileExistsError):
        write_labels(tmp_path / "a.npz", labels)
    write_labels(tmp_path / "a.npz", water_labels(seed=1), overwrite=True)
    with pytest.raises(FileNotFoundError):
        read_labels(tmp_path / "missing.extxyz")
    mixed = [ase.Atoms("H2O", positions=np.zeros((3, 3))), ase.Atoms("H2", positions=np.zeros((2, 3)))]
    from ase.calculators.singlepoint import SinglePointCalculator

    for atoms in mixed:
        atoms.calc = SinglePointCalculator(atoms, energy=0.0, forces=np.zeros((len(atoms), 3)))
    ase.io.write(tmp_path / "mixed.extxyz", mixed)
    with pytest.raises(DataError, match="configuration 1 has 2 atoms, the first has 3"):
        read_labels(tmp_path / "mixed.extxyz")


def test_command_line_converts_between_formats(tmp_path, capsys):
    from mindsponge.label_io import main

    labels = water_labels()
    write_labels(tmp_path / "water.h5", labels)
    assert main([str(tmp_path / "water.h5"), str(tmp_path / "water.extxyz")]) == 0
    assert "3 configurations of 3 atoms" in capsys.readouterr().out
    assert_labels_close(read_labels(tmp_path / "water.extxyz"), labels)
    assert main([str(tmp_path / "water.h5"), str(tmp_path / "water.extxyz")]) == 2  # no overwrite
    assert "water.extxyz exists; pass overwrite" in capsys.readouterr().err
