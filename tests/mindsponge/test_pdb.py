"""The PDB reader and writer against openmm.app.PDBFile on the PDB files OpenMM ships and our own."""

import functools
import os

import numpy as np
import pytest
import torch

import mindsponge as ms
from mindsponge import space
from mindsponge.pdb import PDBError, read_pdb
from mindsponge.system import LengthUnitError

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402

OPENMM_DATA = os.path.join(os.path.dirname(app.__file__), "data")
DATA = os.path.join(os.path.dirname(__file__), "data")
MULTICHAIN = os.path.join(DATA, "multichain.pdb")

# test.pdb: villin in water (CRYST1, no chain id, amber names that OpenMM renames);
# tip4pew.pdb: virtual sites "M" without element column; swm4ndp.pdb: HETATM, EP extra particles;
# DLPC.pdb: a lipid bilayer with 27 chains; multichain.pdb: ours, see test_multichain_features
FILES = [os.path.join(OPENMM_DATA, name) for name in ("test.pdb", "tip4pew.pdb", "swm4ndp.pdb")] + [
    MULTICHAIN
]


@pytest.fixture(scope="module")
def lipid_pdb(tmp_path_factory):
    """The first 3,000 atoms (27 chains of HETATM lipids) of OpenMM's DLPC.pdb bilayer, their CONECT, END."""
    with open(os.path.join(OPENMM_DATA, "DLPC.pdb")) as file:
        all_lines = file.read().splitlines()
    connects = [line for line in all_lines if line.startswith("CONECT") and int(line[6:11]) <= 3000]
    lines = all_lines[:3003] + connects
    path = tmp_path_factory.mktemp("lipid") / "dlpc_part.pdb"
    path.write_text("\n".join(lines + ["END"]) + "\n")
    return str(path)


@functools.cache
def openmm_arrays(path):
    pdb = app.PDBFile(path)
    topology = pdb.topology
    vectors = topology.getPeriodicBoxVectors()
    box = None if vectors is None else np.array([vector.value_in_unit(unit.nanometer) for vector in vectors])
    return pdb, np.array(pdb.getPositions(asNumpy=True).value_in_unit(unit.nanometer)), box


def bond_set(pairs):
    return {frozenset(pair) for pair in pairs}


def test_reader_matches_openmm_on_lipids(lipid_pdb):
    system = ms.System.from_pdb(lipid_pdb)
    assert len(system.topology.chains()) > 5 and len(system.topology.bonds) > 2500
    test_reader_matches_openmm(lipid_pdb)


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_reader_matches_openmm(path):
    system = ms.System.from_pdb(path)
    pdb, positions, box = openmm_arrays(path)
    topology = pdb.topology
    assert system.n_atoms == topology.getNumAtoms()
    np.testing.assert_allclose(system.positions.numpy(), positions, rtol=0, atol=1e-12)
    np.testing.assert_allclose(system.box.numpy(), box, rtol=0, atol=1e-12)
    assert system.topology.elements == [
        None if a.element is None else a.element.symbol for a in topology.atoms()
    ]
    # OpenMM renames protonation variants to the standard residue (pdbNames.xml); we keep the file's names
    renamed = {"HIE": "HIS", "HID": "HIS", "HIP": "HIS", "CYX": "CYS", "ASH": "ASP", "GLH": "GLU"}
    ours = [
        (renamed.get(r.name, r.name), str(r.number), r.chain_id, r.insertion_code)
        for r in system.topology.residues
    ]
    theirs = [(r.name, r.id, r.chain.id, r.insertionCode.strip()) for r in topology.residues()]
    assert ours == theirs
    assert [
        [topology_residue.index for topology_residue in chain.residues()] for chain in topology.chains()
    ] == [indices for _, indices in system.topology.chains()]
    atom_residues = [atom.residue.index for atom in topology.atoms()]
    assert system.topology.residue_indices.tolist() == atom_residues
    if os.path.basename(path) != "test.pdb":  # OpenMM renames amber/GROMACS atom names (HB1 -> HB3, OW -> O)
        assert [atom.name for atom in system.topology.atoms] == [atom.name for atom in topology.atoms()]
    # bonds: CONECT records, water, and OpenMM's template bonds of standard residues
    assert bond_set(system.topology.bonds) == bond_set((a.index, b.index) for a, b in topology.bonds())
    # masses from elements
    masses = [
        0.0 if a.element is None else a.element.mass.value_in_unit(unit.dalton) for a in topology.atoms()
    ]
    np.testing.assert_allclose(system.masses.numpy(), masses, rtol=2e-4)  # ASE's IUPAC masses vs OpenMM's
    assert torch.all(system.charges == 0)


def test_multichain_features():
    structure = read_pdb(MULTICHAIN)
    topology = structure.topology
    # first model only, alternate location B dropped, insertion code kept, TER splits chains
    assert topology.n_atoms == 29
    assert [chain_id for chain_id, _ in topology.chains()] == ["A", "B", "C"]
    assert topology.residues[2].insertion_code == "A" and topology.residues[2].number == 2
    np.testing.assert_allclose(structure.positions[7].numpy(), [1.4, 1.28, 1.0], atol=1e-12)  # altloc A
    # elements from names where columns 77-78 are blank: 1H1 -> H, NA -> Na, CL -> Cl, lone CA -> Ca
    names = {atom.name: atom.element for atom in topology.atoms[13:]}
    assert names["1H1"] == "H" and names["NA"] == "Na" and names["CL"] == "Cl" and names["CA"] == "Ca"
    assert names["CL1"] == "Cl"  # element column "CL"
    # the triclinic CRYST1 box in reduced form
    a, b, c, alpha, beta, gamma = space.box_lengths_and_angles(structure.box)
    np.testing.assert_allclose([a, b, c, alpha, beta, gamma], [2.5, 2.6, 2.7, 80.0, 95.0, 100.0], atol=1e-9)
    assert structure.line_numbers[0] == 5


def test_tip4pew_virtual_sites_are_massless():
    system = ms.System.from_pdb(os.path.join(OPENMM_DATA, "tip4pew.pdb"))
    assert system.topology.elements[:4] == ["O", "H", "H", None]
    assert system.masses[3] == 0 and system.topology.atomic_numbers[3] == 0


def write_lines(tmp_path, lines, name="bad.pdb"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def multichain_lines():
    with open(MULTICHAIN) as file:
        return file.read().splitlines()


def test_truncated_atom_record(tmp_path):
    lines = multichain_lines()
    lines[6] = lines[6][:40]
    path = write_lines(tmp_path, lines)
    with pytest.raises(PDBError, match=rf"^{path}:7: ATOM record too short \(40 characters"):
        ms.System.from_pdb(path)


def test_unreadable_coordinates(tmp_path):
    lines = multichain_lines()
    lines[5] = lines[5][:32] + "xx" + lines[5][34:]
    path = write_lines(tmp_path, lines)
    with pytest.raises(PDBError, match=rf"^{path}:6: ATOM record for atom 'CA' has unreadable coordinates"):
        ms.System.from_pdb(path)


def test_unknown_element(tmp_path):
    lines = multichain_lines()
    lines[24] = lines[24][:12] + "XX1 " + lines[24][16:76] + "Xx"
    path = write_lines(tmp_path, lines)
    with pytest.raises(PDBError, match=rf"^{path}:25: unknown element 'Xx' for atom 'XX1'"):
        ms.System.from_pdb(path)


def test_element_that_cannot_be_inferred(tmp_path):
    lines = multichain_lines()
    lines[20] = lines[20][:12] + " QQ " + lines[20][16:]  # atom of MOL, no element column
    path = write_lines(tmp_path, lines)
    with pytest.raises(PDBError, match=rf"^{path}:21: cannot infer the element of atom 'QQ'"):
        ms.System.from_pdb(path)


def test_atoms_outside_the_cryst1_box(tmp_path):
    lines = multichain_lines()
    lines[2] = "CRYST1    2.500    2.600    2.700  90.00  90.00  90.00 P 1           1"  # nm typed as Å
    path = write_lines(tmp_path, lines)
    with pytest.raises(LengthUnitError, match=rf"^{path}: the box .* denser than any matter") as caught:
        ms.System.from_pdb(path)
    assert caught.value.atom_index is None


def test_no_box_without_cryst1_or_with_unit_cube(tmp_path):
    lines = [line for line in multichain_lines() if not line.startswith("CRYST1")]
    assert ms.System.from_pdb(write_lines(tmp_path, lines)).box is None
    lines.insert(0, "CRYST1    1.000    1.000    1.000  90.00  90.00  90.00 P 1           1")
    assert ms.System.from_pdb(write_lines(tmp_path, lines, "unit.pdb")).box is None


@pytest.mark.parametrize("path", [MULTICHAIN, os.path.join(OPENMM_DATA, "tip4pew.pdb")], ids=os.path.basename)
def test_write_read_round_trip(tmp_path, path):
    system = ms.System.from_pdb(path)
    output = str(tmp_path / "out.pdb")
    system.to_pdb(output)
    again = ms.System.from_pdb(output)
    torch.testing.assert_close(again.positions, system.positions, rtol=0, atol=5e-5)  # 3 decimals in Å
    torch.testing.assert_close(again.box, system.box, rtol=0, atol=1e-4)
    assert again.topology == system.topology
    # OpenMM reads our file to the same structure
    pdb, positions, box = openmm_arrays(output)
    np.testing.assert_allclose(positions, again.positions.numpy(), atol=1e-12)
    np.testing.assert_allclose(box, again.box.numpy(), atol=1e-12)
    assert bond_set((a.index, b.index) for a, b in pdb.topology.bonds()) == bond_set(system.topology.bonds)


def test_openmm_forcefield_parameterises_our_topology():
    """amber14 assigns the same parameters to our topology of villin (test.pdb) as to OpenMM's own."""
    path = os.path.join(OPENMM_DATA, "test.pdb")
    system = ms.System.from_pdb(path)
    forcefield = app.ForceField("amber14-all.xml", "amber14/tip3pfb.xml")

    def parameterise(topology, positions):
        modeller = app.Modeller(topology, positions)
        modeller.deleteWater()  # the 2,761 waters would only slow the test down
        return forcefield.createSystem(modeller.topology, nonbondedMethod=app.NoCutoff)

    pdb, positions, _ = openmm_arrays(path)
    ours = force_terms(parameterise(system.topology.to_openmm(), system.positions.numpy()))
    theirs = force_terms(parameterise(pdb.topology, positions))
    assert ours == theirs
    assert len(ours["HarmonicBondForce"]) == 589 and len(ours["NonbondedForce"]) == 584
    assert len(ours["PeriodicTorsionForce"]) > 1000


def force_terms(openmm_system):
    """Every force's terms as a set of (sorted atom indices, rounded parameters), order-independent."""
    terms = {
        "masses": tuple(
            openmm_system.getParticleMass(i)._value for i in range(openmm_system.getNumParticles())
        )
    }

    def values(parameters):
        return tuple(round(getattr(p, "_value", p), 10) for p in parameters)

    for force in openmm_system.getForces():
        name = type(force).__name__
        if name == "HarmonicBondForce":
            entries = [force.getBondParameters(i) for i in range(force.getNumBonds())]
            terms[name] = {(tuple(sorted(e[:2])), values(e[2:])) for e in entries}
        elif name == "HarmonicAngleForce":
            entries = [force.getAngleParameters(i) for i in range(force.getNumAngles())]
            terms[name] = {(tuple(e[:3]) if e[0] < e[2] else tuple(e[2::-1]), values(e[3:])) for e in entries}
        elif name == "PeriodicTorsionForce":
            entries = [force.getTorsionParameters(i) for i in range(force.getNumTorsions())]
            terms[name] = sorted((tuple(e[:4]), values(e[4:])) for e in entries)
        elif name == "NonbondedForce":
            terms[name] = [values(force.getParticleParameters(i)) for i in range(force.getNumParticles())]
            exceptions = [force.getExceptionParameters(i) for i in range(force.getNumExceptions())]
            terms["exceptions"] = {(tuple(sorted(e[:2])), values(e[2:])) for e in exceptions}
    return terms
