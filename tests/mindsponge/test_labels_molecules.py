"""Labelling any molecule: XYZ, PDB, ase.Atoms and SMILES inputs against ASE's own readers and
tblite's ASE calculator; errors that name the file, line and atom."""

import ase
import ase.io
import numpy as np
import pytest

from common.errors import DataError
from mindsponge.labels import label, xtb_sample
from mindsponge.molecules import load_molecule, molecule, read_xyz

EV_TO_KJ_PER_MOL = 96.48533212331  # CODATA: e * N_A / 1000

WATER_XYZ = """3
water, Angstrom
O   0.000000   0.000000   0.119262
H   0.000000   0.763239  -0.477047
h   0.000000  -0.763239  -0.477047
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_xyz_matches_ase_reader(tmp_path):
    path = write(tmp_path, "water.xyz", WATER_XYZ)
    ours, reference = read_xyz(path), ase.io.read(path)
    assert ours.atomic_numbers.tolist() == reference.numbers.tolist() == [8, 1, 1]
    np.testing.assert_allclose(ours.positions, reference.positions * 0.1, rtol=0, atol=1e-15)
    assert load_molecule(path).source == str(path) and load_molecule(str(path)).positions.shape == (3, 3)


@pytest.mark.parametrize("line, message", [
    ("Xq  0.0 0.0 0.0", r"water.xyz:4: unknown element 'Xq'"),
    ("H   0.0 0.0", r"water.xyz:4: expected 'element x y z'"),
    ("H   0.0 abc 0.0", r"water.xyz:4: coordinates must be numbers"),
    ("H   0.0 nan 0.0", r"water.xyz:4: atom 1 has non-finite coordinates"),
])
def test_bad_xyz_names_file_line_and_atom(tmp_path, line, message):
    lines = WATER_XYZ.splitlines()
    lines[3] = line
    path = write(tmp_path, "water.xyz", "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=message):
        load_molecule(path)


def test_truncated_xyz_and_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"short.xyz:4: 3 atoms announced, the file ends after 2 atom lines"):
        load_molecule(write(tmp_path, "short.xyz", "\n".join(WATER_XYZ.splitlines()[:4]) + "\n"))
    with pytest.raises(DataError, match=r"count.xyz:1: the first line must be the number of atoms"):
        load_molecule(write(tmp_path, "count.xyz", "three\n" + WATER_XYZ.split("\n", 1)[1]))
    with pytest.raises(FileNotFoundError, match="nothing.xyz"):
        load_molecule(tmp_path / "nothing.xyz")


def test_pdb_and_atoms_sources(tmp_path):
    atoms = molecule("ethanol")
    ase.io.write(tmp_path / "ethanol.pdb", atoms)
    from_pdb = load_molecule(tmp_path / "ethanol.pdb")
    assert from_pdb.atomic_numbers.tolist() == atoms.numbers.tolist()
    np.testing.assert_allclose(from_pdb.positions, atoms.positions * 0.1, atol=1e-4)  # PDB keeps 1e-3 A
    from_atoms = load_molecule(atoms)
    np.testing.assert_array_equal(from_atoms.positions, atoms.positions * 0.1)
    atoms.positions[4, 1] = np.inf
    with pytest.raises(DataError, match="ase.Atoms: atom 4 has non-finite coordinates"):
        load_molecule(atoms)
    atoms.positions[4, 1] = 0.0
    atoms.set_cell([10.0, 10.0, 10.0], scale_atoms=False)
    atoms.pbc = True
    with pytest.raises(DataError, match="periodic structures are not molecules"):
        load_molecule(atoms)
    with pytest.raises(ValueError, match="unknown molecule 'unobtainium'"):
        load_molecule("unobtainium")


def test_smiles_through_rdkit():
    pytest.importorskip("rdkit")
    water = load_molecule("smiles:O")
    assert water.atomic_numbers.tolist() == [8, 1, 1] and water.charge == 0.0
    bonds = np.linalg.norm(water.positions[1:] - water.positions[0], axis=1)
    np.testing.assert_allclose(bonds, 0.096, atol=0.003)  # MMFF94 O-H, nm
    acetate = load_molecule("smiles:CC(=O)[O-]")
    assert acetate.charge == -1.0 and sorted(acetate.atomic_numbers.tolist()) == [1, 1, 1, 6, 6, 8, 8]
    first, again = load_molecule("smiles:CCO"), load_molecule("smiles:CCO")
    np.testing.assert_array_equal(first.positions, again.positions)  # fixed embedding seed
    with pytest.raises(DataError, match="cannot parse the SMILES 'C1CC'"):
        load_molecule("smiles:C1CC")


def test_label_a_structure_matches_tblite(tmp_path):
    pytest.importorskip("tblite")
    from tblite.ase import TBLite

    path = write(tmp_path, "water.xyz", WATER_XYZ)
    result = label("GFN2-xTB", path)
    atoms = ase.io.read(path)
    atoms.calc = TBLite(method="GFN2-xTB", verbosity=0)
    assert result["energy"] == pytest.approx(atoms.get_potential_energy() * EV_TO_KJ_PER_MOL, rel=1e-8)
    np.testing.assert_allclose(result["forces"], atoms.get_forces() * EV_TO_KJ_PER_MOL * 10.0, atol=1e-4)
    np.testing.assert_array_equal(result["atomic_numbers"], [8, 1, 1])
    with pytest.raises(ValueError, match="needs a structure"):
        label("GFN2-xTB", result["positions"])


def test_xtb_sample_of_a_file_and_a_smiles(tmp_path):
    pytest.importorskip("tblite")
    path = write(tmp_path, "water.xyz", WATER_XYZ)
    sample = xtb_sample({"temperature": 400.0}, seed=2, molecule=str(path), md_steps=5)
    assert sample["positions"].shape == (3, 3) and sample["atomic_numbers"].tolist() == [8, 1, 1]
    assert 1e-4 < np.abs(sample["positions"] - read_xyz(path).positions).max() < 0.02
    pytest.importorskip("rdkit")
    methane = xtb_sample({"temperature": 400.0}, seed=2, molecule="smiles:C", md_steps=5)
    assert methane["atomic_numbers"].tolist() == [6, 1, 1, 1, 1] and np.isfinite(methane["forces"]).all()


def test_shipped_uracil_recipe_labels_a_smiles_molecule(tmp_path):
    """datasets/uracil_xtb_small.toml: one sample, its energy is tblite's for the returned positions."""
    pytest.importorskip("tblite")
    pytest.importorskip("rdkit")
    from pathlib import Path

    from tblite.ase import TBLite

    from common import datasets

    recipe = Path(__file__).resolve().parents[2] / "datasets" / "uracil_xtb_small.toml"
    summary = datasets.generate(recipe, output=tmp_path / "uracil.h5", workers=0, limit=1, progress=False)
    assert (summary.succeeded, summary.failed) == (1, 0)
    table = datasets.read_dataset(tmp_path / "uracil.h5")
    assert table["positions"].shape == (1, 12, 3)
    assert sorted(table["atomic_numbers"][0].tolist()) == [1] * 4 + [6] * 4 + [7] * 2 + [8] * 2
    atoms = ase.Atoms(numbers=table["atomic_numbers"][0], positions=table["positions"][0] * 10.0)
    atoms.calc = TBLite(method="GFN2-xTB", verbosity=0)
    assert table["energy"][0] == pytest.approx(atoms.get_potential_energy() * EV_TO_KJ_PER_MOL, rel=1e-8)
