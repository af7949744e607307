"""mindsponge.System and Topology: validation, dtype/device moves, ASE and OpenMM conversions."""

import os

import numpy as np
import pytest
import torch
from ase import Atoms
from ase.build import bulk, molecule
from ase.geometry import get_distances

import mindsponge as ms
from common import units
from common.errors import DataError
from mindsponge import space
from mindsponge.system import LengthUnitError
from mindsponge.topology import Atom, Residue, Topology

DATA = os.path.join(os.path.dirname(__file__), "data")


def small_system(dtype=torch.float64, box=True, moving=True):
    """Two waters and an extra particle in a triclinic box."""
    topology = Topology(
        [Atom("O", "O", 0), Atom("H1", "H", 0), Atom("H2", "H", 0), Atom("M", None, 0), Atom("NA", "Na", 1)],
        [Residue("HOH", 1, "A"), Residue("NA", 2, "B", "", 1)],
        [(0, 1), (0, 2)],
    )
    positions = torch.tensor(
        [[0.1, 0.2, 0.3], [0.18, 0.25, 0.3], [0.05, 0.27, 0.3], [0.11, 0.21, 0.3], [1.2, 1.0, 0.9]],
        dtype=dtype,
    )
    generator = torch.Generator().manual_seed(0)
    velocities = torch.randn(5, 3, generator=generator, dtype=dtype)
    velocities[3] = 0.0  # the massless extra particle carries no momentum
    return ms.System(
        positions=positions,
        masses=torch.tensor([15.999, 1.008, 1.008, 0.0, 22.99], dtype=dtype),
        charges=torch.tensor([0.0, 0.52422, 0.52422, -1.04844, 1.0], dtype=dtype),
        box=space.box_from_lengths_and_angles(2.0, 2.2, 2.4, 80.0, 95.0, 100.0, dtype=dtype) if box else None,
        topology=topology,
        velocities=velocities if moving else None,
    )


def assert_systems_equal(first, second, atol=1e-12):
    assert first.n_atoms == second.n_atoms
    for name in ("positions", "masses", "charges", "box", "velocities"):
        a, b = getattr(first, name), getattr(second, name)
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=atol, msg=name)
    assert first.topology == second.topology


def test_construction_defaults_and_conversions():
    system = ms.System([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0]], [1.0, 2.0])
    assert system.dtype == torch.get_default_dtype()
    assert system.n_atoms == 2 and system.box is None and system.topology is None
    assert torch.equal(system.charges, torch.zeros(2))
    assert not system.periodic
    # non-positions inputs follow the positions' dtype
    system64 = ms.System(torch.zeros(2, 3, dtype=torch.float64), np.array([1.0, 2.0], dtype=np.float32))
    assert system64.masses.dtype == torch.float64


def test_volume_and_density_match_ase():
    system = small_system()
    atoms = system.to_ase()
    assert float(system.volume) == pytest.approx(atoms.get_volume() * 1e-3, rel=1e-12)  # Å^3 -> nm^3
    grams = atoms.get_masses().sum() / units.AVOGADRO
    cubic_centimetres = atoms.get_volume() * 1e-24
    assert float(system.density) == pytest.approx(grams / cubic_centimetres, rel=1e-12)
    with pytest.raises(ValueError, match="periodic box"):
        _ = small_system(box=False).volume


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_to_returns_new_system(dtype):
    system = small_system()
    moved = system.to(dtype=dtype)
    assert moved is not system and system.dtype == torch.float64
    for name in ("positions", "masses", "charges", "box", "velocities"):
        assert getattr(moved, name).dtype == dtype
    torch.testing.assert_close(moved.positions.double(), system.positions, rtol=1e-6, atol=0)
    assert moved.topology is system.topology
    assert moved.to(device="cpu").device.type == "cpu"
    if torch.cuda.is_available():
        on_gpu = system.to(device="cuda")
        assert on_gpu.box.device.type == "cuda" and on_gpu.masses.device.type == "cuda"
        assert float(on_gpu.density) == pytest.approx(float(system.density))


def test_replace_validates():
    system = small_system()
    shifted = system.replace(positions=system.positions + 0.1)
    torch.testing.assert_close(
        shifted.positions - system.positions, torch.full((5, 3), 0.1, dtype=torch.float64)
    )
    with pytest.raises(ValueError, match=r"masses must have shape \(3,\) to match positions"):
        system.replace(positions=system.positions[:3])


@pytest.mark.parametrize(
    "changes, error, message",
    [
        ({"positions": torch.zeros(5, 2)}, ValueError, r"positions must have shape \(N, 3\)"),
        ({"masses": torch.ones(4)}, ValueError, r"masses must have shape \(5,\)"),
        ({"charges": torch.zeros(5, 1)}, ValueError, "charges must have shape"),
        ({"velocities": torch.zeros(5)}, ValueError, "velocities must have shape"),
        (
            {"masses": torch.tensor([15.999, 1.008, -1.0, 0.0, 22.99])},
            ValueError,
            "atom 2 .'H2'. has mass -1",
        ),
        ({"masses": torch.tensor([15.999, 0.0, 1.008, 0.0, 22.99])}, ValueError, "atom 1 .'H1'. has mass 0"),
        ({"box": torch.eye(3) * torch.tensor([2.0, 0.0, 2.0])}, space.BoxError, "singular"),
        (
            {"box": torch.tensor([[2.0, 0.1, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])},
            space.BoxError,
            "triangular",
        ),
        ({"box": "big"}, TypeError, "box must be convertible"),
        ({"topology": "water"}, TypeError, "topology must be a mindsponge Topology"),
    ],
)
def test_bad_input_names_the_argument(changes, error, message):
    system = small_system()
    with pytest.raises(error, match=message):
        system.replace(
            **{name: value.double() if torch.is_tensor(value) else value for name, value in changes.items()}
        )


def test_nan_position_names_the_atom():
    positions = small_system().positions.clone()
    positions[3, 1] = float("nan")
    with pytest.raises(DataError, match=r"positions of atom 3 are not finite: \(.*nan"):
        small_system().replace(positions=positions)
    velocities = torch.zeros_like(positions)
    velocities[1, 0] = float("inf")
    with pytest.raises(DataError, match=r"velocities of atom 1 are not finite: \(inf"):
        small_system().replace(velocities=velocities)
    box = small_system().box.clone()
    box[2, 2] = float("inf")
    with pytest.raises(DataError, match=r"box vector 2 is not finite"):
        small_system().replace(box=box)


def test_lengths_in_the_wrong_unit_are_refused_and_positions_anywhere_accepted():
    system = small_system()
    # positions given in Angstrom by mistake: the O-H bonds are ten times too long
    with pytest.raises(LengthUnitError, match=r"atom 0 \('O' of residue HOH\).*look like Angstrom") as caught:
        system.replace(positions=system.positions * 10)
    assert caught.value.atom_index == 0
    # a box in nm read as Angstrom: denser than any matter
    with pytest.raises(LengthUnitError, match=r"denser than any matter"):
        system.replace(box=system.box / 100)
    # atoms anywhere are accepted, as OpenMM writes them (unwrapped): several box lengths away too
    moved = system.replace(positions=system.positions - system.box[0] * 3.7 + system.box[2] * 12.0)
    assert torch.equal(moved.positions, system.positions - system.box[0] * 3.7 + system.box[2] * 12.0)
    with pytest.warns(DeprecationWarning, match="AtomOutsideBoxError is deprecated"):
        from mindsponge.system import AtomOutsideBoxError
    assert AtomOutsideBoxError is LengthUnitError


def test_topology_properties_and_validation():
    system = small_system()
    topology = system.topology
    assert topology.n_atoms == 5 and topology.n_residues == 2
    assert topology.elements == ["O", "H", "H", None, "Na"]
    assert topology.atomic_numbers.tolist() == [8, 1, 1, 0, 11]
    assert topology.residue_indices.tolist() == [0, 0, 0, 0, 1]
    assert topology.bond_tensor().tolist() == [[0, 1], [0, 2]] and topology.bond_tensor().dtype == torch.long
    assert [chain_id for chain_id, _ in topology.chains()] == ["A", "B"]
    torch.testing.assert_close(system.atomic_numbers, topology.atomic_numbers)
    with pytest.raises(ValueError, match="atom 0 \\('X1'\\): unknown element 'Xx'"):
        Topology([Atom("X1", "Xx", 0)], [Residue("UNK", 1)])
    with pytest.raises(ValueError, match="residue_index 3 is out of range"):
        Topology([Atom("C1", "C", 3)], [Residue("UNK", 1)])
    with pytest.raises(ValueError, match=r"bond 0 \(0, 0\)"):
        Topology([Atom("C1", "C", 0)], [Residue("UNK", 1)], [(0, 0)])


def test_topology_masses_and_numbers_match_openmm_elements():
    app = pytest.importorskip("openmm.app")
    topology = small_system().topology
    for atom, mass, number in zip(
        topology.atoms, topology.masses().tolist(), topology.atomic_numbers.tolist()
    ):
        if atom.element is None:
            assert mass == 0 and number == 0
            continue
        element = app.Element.getBySymbol(atom.element)
        assert number == element.atomic_number
        assert mass == pytest.approx(element.mass._value, rel=1e-4)  # ASE (IUPAC 2016) vs OpenMM masses


@pytest.mark.parametrize("box", [True, False])
def test_ase_round_trip(box):
    system = small_system(box=box)
    atoms = system.to_ase()
    np.testing.assert_allclose(atoms.get_positions(), system.positions.numpy() * 10, atol=1e-12)
    if box:
        np.testing.assert_allclose(atoms.cell[:], system.box.numpy() * 10, atol=1e-12)
        assert atoms.pbc.all()
        assert atoms.cell.volume * 1e-3 == pytest.approx(float(system.volume), rel=1e-12)
    else:
        assert not atoms.pbc.any()
    assert atoms.get_chemical_symbols() == ["O", "H", "H", "X", "Na"]
    np.testing.assert_allclose(atoms.get_initial_charges(), system.charges.numpy())
    np.testing.assert_allclose(atoms.get_masses(), system.masses.numpy())
    # velocities: nm/ps -> Å/fs -> ASE units (ASE's own conversion)
    from ase import units as ase_units

    massive = system.masses.numpy() > 0
    ase_velocities = atoms.get_momenta()[massive] / atoms.get_masses()[massive, None]
    np.testing.assert_allclose(
        ase_velocities * ase_units.fs, system.velocities.numpy()[massive] * 10 / 1000, rtol=1e-12
    )
    assert_systems_equal(ms.System.from_ase(atoms), system)


def test_from_ase_molecule_and_rotated_cell():
    water = ms.System.from_ase(molecule("H2O"))
    assert water.box is None and water.topology.elements == ["O", "H", "H"]
    torch.testing.assert_close(
        water.masses.sum(), torch.tensor(18.015, dtype=torch.float64), atol=1e-3, rtol=0
    )
    # primitive fcc copper: its cell is not lower triangular, so from_ase rotates it
    atoms = bulk("Cu", "fcc", a=3.6).repeat((4, 4, 4))
    atoms.rattle(0.05, seed=1)
    system = ms.System.from_ase(atoms)
    space.check_box(system.box)
    assert float(system.volume) == pytest.approx(atoms.get_volume() * 1e-3, rel=1e-12)
    assert float(system.density) == pytest.approx(8.96, rel=0.05)  # copper
    # every minimum-image distance is kept (ASE's exact search on the original cell)
    _, reference = get_distances(atoms.get_positions(), cell=atoms.cell, pbc=True)
    displacements = system.positions[None, :, :] - system.positions[:, None, :]
    ours = torch.linalg.norm(space.minimum_image(displacements, system.box), dim=-1).numpy() * 10
    within = reference < space.max_cutoff(system.box) * 10
    np.testing.assert_allclose(ours[within], reference[within], atol=1e-9)


def test_from_ase_reads_ase_pdb_arrays(tmp_path):
    atoms = Atoms("OH2", positions=[[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]], cell=[20, 20, 20], pbc=True)
    path = tmp_path / "water.pdb"
    atoms.write(path)
    from ase.io import read

    system = ms.System.from_ase(read(path))
    assert [atom.name for atom in system.topology.atoms] == ["O", "H", "H"]
    assert system.topology.residues[0].name == "MOL"


def test_topology_openmm_round_trip():
    app = pytest.importorskip("openmm.app")
    openmm_topology = app.PDBFile(os.path.join(DATA, "multichain.pdb")).topology
    topology = Topology.from_openmm(openmm_topology)
    assert topology.n_atoms == openmm_topology.getNumAtoms()
    assert len(topology.chains()) == openmm_topology.getNumChains() == 3
    back = topology.to_openmm(box=torch.eye(3, dtype=torch.float64) * 2.5)
    assert [(a.name, a.element, a.residue.name, a.residue.id, a.residue.chain.id) for a in back.atoms()] == [
        (a.name, a.element, a.residue.name, a.residue.id, a.residue.chain.id) for a in openmm_topology.atoms()
    ]
    assert sorted((a.index, b.index) for a, b in back.bonds()) == sorted(
        (a.index, b.index) for a, b in openmm_topology.bonds()
    )
    from openmm import unit

    vectors = back.getPeriodicBoxVectors().value_in_unit(unit.nanometer)
    np.testing.assert_allclose(np.array([list(vector) for vector in vectors]), np.eye(3) * 2.5)
    assert Topology.from_openmm(back) == topology


def test_atoms_out_of_residue_order_are_rejected_by_openmm_and_pdb_export(tmp_path):
    pytest.importorskip("openmm")
    topology = Topology(
        [Atom("C1", "C", 0), Atom("O1", "O", 1), Atom("C2", "C", 0)], [Residue("A", 1), Residue("B", 2)]
    )
    with pytest.raises(ValueError, match=r"to_openmm .* atom 2 \('C2'\) belongs to residue 0"):
        topology.to_openmm()
    system = ms.System(
        torch.zeros(3, 3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), topology=topology
    )
    with pytest.raises(ValueError, match="write_pdb"):
        system.to_pdb(tmp_path / "out.pdb")


def test_from_ase_rejects_partial_periodicity():
    atoms = molecule("H2O")
    atoms.set_cell([10.0, 10.0, 10.0])
    atoms.pbc = [True, True, False]
    with pytest.raises(ValueError, match="periodic in all three directions or none"):
        ms.System.from_ase(atoms)
