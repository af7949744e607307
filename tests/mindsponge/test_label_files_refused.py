"""Label files that are damaged or ambiguous are refused with a message naming the file and the
configuration, never read into silently wrong numbers: truncated and non-numeric extxyz, broken npz,
NaN labels, non-integer atomic numbers, slabs periodic along two axes, a mix of periodic and
non-periodic frames, extra labels an ASE database would shadow, periodic data given to training, and
labels an ASE reader keeps as calculator results under another name."""

import numpy as np
import pytest

pytest.importorskip("ase")
import ase  # noqa: E402
import ase.io  # noqa: E402
from ase.calculators.singlepoint import SinglePointCalculator  # noqa: E402

from common.errors import DataError  # noqa: E402
from mindsponge.label_io import main, read_configurations, read_labels, write_labels  # noqa: E402
from mindsponge.train import TrainingData  # noqa: E402

EV = 96.485332123  # kJ/mol per eV


def water(index, cell=None, pbc=False, energy=-10.0):
    rng = np.random.default_rng(index)
    positions = np.array([[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]]) + rng.normal(0, 0.02, (3, 3))
    atoms = ase.Atoms("OH2", positions=positions, cell=cell, pbc=pbc)
    atoms.calc = SinglePointCalculator(atoms, energy=energy - index, forces=rng.normal(size=(3, 3)))
    return atoms


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.extxyz"
    ase.io.write(path, [water(index) for index in range(3)], format="extxyz")
    return path


def test_truncated_and_non_numeric_extxyz_name_the_file_and_configuration(good, tmp_path):
    lines = good.read_text().splitlines()
    cut = tmp_path / "cut.extxyz"
    cut.write_text("\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]) + "\n")
    with pytest.raises(DataError, match=r"cut\.extxyz: configuration 2 .*extxyz"):
        read_labels(cut)
    header = tmp_path / "header_only.extxyz"
    header.write_text("\n".join(lines[:12]) + "\n")  # the third frame's count and comment, no atoms
    with pytest.raises(DataError, match=r"header_only\.extxyz: configuration 2"):
        TrainingData.from_file(header)
    words = tmp_path / "words.extxyz"
    words.write_text(good.read_text().replace("energy=-11.0", "energy=abc"))
    with pytest.raises(DataError, match=r"words\.extxyz: configuration 1: energy .*must be numbers"):
        read_labels(words)


def test_broken_npz_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "labels.npz"
    write_labels(path, read_labels_of_three(tmp_path))
    broken = tmp_path / "broken.npz"
    broken.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DataError, match=r"broken\.npz cannot be read as an npz archive"):
        read_labels(broken)


def read_labels_of_three(tmp_path):
    path = tmp_path / "three.extxyz"
    ase.io.write(path, [water(index) for index in range(3)], format="extxyz")
    return read_labels(path)


def test_nan_labels_and_fractional_atomic_numbers_are_refused(tmp_path):
    labels = read_labels_of_three(tmp_path)
    labels["energy"][1] = np.nan
    with pytest.raises(DataError, match=r"energy.* of configuration 1 is not finite"):
        write_labels(tmp_path / "nan.npz", labels)
    np.savez(tmp_path / "nan.npz", **labels)
    with pytest.raises(DataError, match=r"nan\.npz: .*configuration 1 is not finite"):
        read_labels(tmp_path / "nan.npz")
    frames = [water(index) for index in range(5)]
    frames[4].calc.results["energy"] = np.nan
    frames[1] = ase.Atoms("CH4", positions=np.eye(5, 3) * 1.1, calculator=None)
    frames[1].calc = SinglePointCalculator(frames[1], energy=-5.0, forces=np.zeros((5, 3)))
    ase.io.write(tmp_path / "mixed.extxyz", frames, format="extxyz")
    with pytest.raises(DataError, match=r"mixed\.extxyz: configuration 4: energy is not finite"):
        TrainingData.from_file(tmp_path / "mixed.extxyz")  # the file's frame, not the index among waters
    labels = read_labels_of_three(tmp_path)
    labels["atomic_numbers"] = labels["atomic_numbers"].astype(float) + 0.3
    np.savez(tmp_path / "fractional.npz", **labels)
    with pytest.raises(DataError, match=r"fractional\.npz: .*whole numbers"):
        read_labels(tmp_path / "fractional.npz")


def test_partly_periodic_and_mixed_periodic_files_are_refused(tmp_path):
    ase.io.write(tmp_path / "slab.extxyz", [water(0, cell=[5, 5, 5], pbc=[True, True, False])])
    with pytest.raises(DataError, match=r"slab\.extxyz: configuration 0 is periodic along some axes only"):
        read_labels(tmp_path / "slab.extxyz")
    frames = [water(0, cell=[5, 5, 5], pbc=True), water(1)]
    ase.io.write(tmp_path / "mix.extxyz", frames, format="extxyz")
    with pytest.raises(DataError, match=r"configuration 1 is not periodic, the first is"):
        read_labels(tmp_path / "mix.extxyz")
    configurations = read_configurations(tmp_path / "mix.extxyz")  # one by one, each as it is
    assert "box" in configurations[0] and "box" not in configurations[1]
    np.testing.assert_allclose(configurations[0]["box"], np.eye(3) * 0.5)


def test_training_refuses_periodic_samples(tmp_path):
    frames = [water(index, cell=[0.8, 0.8, 0.8], pbc=True) for index in range(3)]
    ase.io.write(tmp_path / "box.extxyz", frames)
    with pytest.raises(DataError, match=r"box\.extxyz'?: sample 0 is periodic"):
        TrainingData.from_file(tmp_path / "box.extxyz")
    write_labels(tmp_path / "box.h5", read_labels(tmp_path / "box.extxyz"))
    with pytest.raises(DataError, match=r"box\.h5'? is periodic"):
        TrainingData.from_file(tmp_path / "box.h5")


@pytest.mark.parametrize("name", ["charge", "mass", "natoms", "id"])
def test_extra_labels_an_ase_database_shadows_are_refused(tmp_path, name):
    labels = read_labels_of_three(tmp_path)
    labels[name] = np.array([0.0, 1.0, 2.0])
    with pytest.raises(DataError, match=rf"\[{name!r}\].*ASE database"):
        write_labels(tmp_path / "labels.db", labels)
    write_labels(tmp_path / "labels.extxyz", labels)  # extxyz keeps them
    np.testing.assert_array_equal(read_labels(tmp_path / "labels.extxyz")[name], [0.0, 1.0, 2.0])


def test_a_calculator_result_under_another_name_is_found(tmp_path):
    frames = [water(index) for index in range(2)]
    for frame in frames:
        frame.calc.results["free_energy"] = frame.calc.results["energy"] - 0.5
    ase.io.write(tmp_path / "dft.extxyz", frames, format="extxyz")
    labels = read_labels(tmp_path / "dft.extxyz", keys={"energy": "free_energy"})
    np.testing.assert_allclose(labels["energy"], (np.array([-10.0, -11.0]) - 0.5) * EV, rtol=1e-7)


def test_converter_reports_a_bad_file_without_a_traceback(tmp_path, capsys):
    (tmp_path / "empty.extxyz").write_text("")
    assert main([str(tmp_path / "empty.extxyz"), str(tmp_path / "out.npz")]) == 2
    assert "empty.extxyz" in capsys.readouterr().err
