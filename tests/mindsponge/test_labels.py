"""Reference labels: GFN2-xTB through tblite (units against tblite's own ASE calculator, forces against
finite differences), the dataset-generator contract of xtb_sample, and labels of a classical force field."""

import numpy as np
import pytest
import torch

import mindsponge as ms

pytest.importorskip("tblite")
from tblite.ase import TBLite  # noqa: E402

from common.errors import ConfigurationError  # noqa: E402
from mindsponge.labels import XTB, label, molecule, xtb_sample  # noqa: E402

EV_TO_KJ_PER_MOL = 96.48533212331  # CODATA: e * N_A / 1000


def ethanol_positions(seed=0):
    atoms = molecule("ethanol")
    generator = np.random.default_rng(seed)
    atoms.positions += 0.05 * generator.standard_normal(atoms.positions.shape)  # Angstrom
    return atoms


def test_xtb_energy_and_forces_match_tblite_ase_calculator():
    """Hartree/Bohr -> kJ/mol/nm (common.units) against tblite's own eV/Angstrom ASE interface."""
    atoms = ethanol_positions()
    atoms.calc = TBLite(method="GFN2-xTB", verbosity=0)
    reference_energy = atoms.get_potential_energy() * EV_TO_KJ_PER_MOL
    reference_forces = atoms.get_forces() * EV_TO_KJ_PER_MOL * 10.0  # eV/A -> kJ/mol/nm
    potential = XTB(torch.tensor(atoms.numbers))
    result = label(potential, torch.tensor(atoms.positions * 0.1))
    assert abs(result["energy"] - reference_energy) < 1e-5 * abs(reference_energy)
    np.testing.assert_allclose(result["forces"], reference_forces, atol=1e-3 * np.abs(reference_forces).max())


def test_xtb_forces_are_minus_finite_differences():
    atoms = ethanol_positions(1)
    potential = XTB(torch.tensor(atoms.numbers), accuracy=0.01)
    positions = torch.tensor(atoms.positions * 0.1)
    forces = ms.forces(potential, positions)
    step = 1e-5  # nm
    for atom, axis in [(0, 0), (2, 1), (5, 2), (8, 0)]:
        shifted = positions.clone()
        shifted[atom, axis] += step
        plus = float(potential(shifted))
        shifted[atom, axis] -= 2 * step
        minus = float(potential(shifted))
        finite = -(plus - minus) / (2 * step)
        assert abs(finite - float(forces[atom, axis])) < 2e-3 * float(forces.abs().max())


def _dihedral(positions, i, j, k, l):
    """The i-j-k-l dihedral angle, degrees (IUPAC sign), by the textbook formula."""
    b0, b1, b2 = positions[i] - positions[j], positions[k] - positions[j], positions[l] - positions[k]
    b1 = b1 / np.linalg.norm(b1)
    v, w = b0 - (b0 @ b1) * b1, b2 - (b2 @ b1) * b1
    return np.degrees(np.arctan2(np.cross(b1, v) @ w, v @ w))


def test_samples_start_from_every_conformer():
    """2-fluoroethanol (OCCF): one RDKit geometry is anti (O-C-C-F near 180 degrees), but MD visits
    gauche (near +-60) most of the time. The samples start from the ETKDG ensemble, so both rotamers
    are labelled; with conformers=1 every sample is anti, as before."""
    samples = [xtb_sample({"temperature": 300.0}, seed=seed, molecule="smiles:OCCF", md_steps=5)
               for seed in range(6)]
    angles = [abs(_dihedral(sample["positions"], 0, 1, 2, 3)) for sample in samples]
    assert any(angle > 150 for angle in angles) and any(30 < angle < 90 for angle in angles), angles
    single = [xtb_sample({"temperature": 300.0}, seed=seed, molecule="smiles:OCCF", md_steps=5, conformers=1)
              for seed in range(3)]
    assert all(abs(_dihedral(sample["positions"], 0, 1, 2, 3)) > 150 for sample in single)
    with pytest.raises(ConfigurationError, match="conformers: count must be a positive int"):
        xtb_sample({"temperature": 300.0}, seed=0, molecule="smiles:OCCF", conformers=0)


def test_xtb_sample_contract():
    first = xtb_sample({"temperature": 500.0}, seed=4, md_steps=5)
    again = xtb_sample({"temperature": 500.0}, seed=4, md_steps=5)
    other = xtb_sample({"temperature": 500.0}, seed=5, md_steps=5)
    assert set(first) == {"positions", "atomic_numbers", "energy", "forces", "temperature"}
    assert first["positions"].shape == (9, 3) and first["forces"].shape == (9, 3)
    assert first["energy"].shape == () and first["atomic_numbers"].tolist() == [6, 6, 8, 1, 1, 1, 1, 1, 1]
    np.testing.assert_array_equal(first["positions"], again["positions"])
    assert np.abs(first["positions"] - other["positions"]).max() > 1e-4
    # the MD moved the atoms, but not far (nm): bonds stay bonds
    reference = molecule("ethanol").positions * 0.1
    assert 1e-3 < np.abs(first["positions"] - reference).max() < 0.05
    # the label is the GFN2-xTB energy of the returned configuration, through tblite's ASE interface
    atoms = molecule("ethanol")
    atoms.positions = first["positions"] * 10.0
    atoms.calc = TBLite(method="GFN2-xTB", verbosity=0)
    assert abs(float(first["energy"]) - atoms.get_potential_energy() * EV_TO_KJ_PER_MOL) < 1e-2
    displaced = xtb_sample({"temperature": 300.0}, seed=1, sampling="displace")
    assert displaced["energy"] > first["energy"] - 200.0


def test_xtb_sample_bad_input():
    with pytest.raises(ValueError, match="temperature"):
        xtb_sample({"temperature": -1.0}, seed=0)
    with pytest.raises(ValueError, match="temperature"):
        xtb_sample({}, seed=0)
    with pytest.raises(ValueError, match="unknown molecule 'unobtainium'"):
        xtb_sample({"temperature": 300.0}, seed=0, molecule="unobtainium")
    with pytest.raises(ValueError, match="positions must be \\(9, 3\\)"):
        XTB(torch.tensor([6, 6, 8, 1, 1, 1, 1, 1, 1]))(torch.zeros(4, 3))


def test_label_of_a_forcefield_matches_analytic_harmonic_bonds():
    from mindsponge.forcefield.bonded import HarmonicBond

    k, length = 2.0e5, 0.1
    bond = HarmonicBond(torch.tensor([[0, 1]]), torch.tensor([length], dtype=torch.float64),
                        torch.tensor([k], dtype=torch.float64))
    forcefield = ms.ForceField([bond])
    distances = np.array([0.09, 0.1, 0.115])
    positions = np.zeros((3, 2, 3))
    positions[:, 1, 0] = distances
    result = label(forcefield, positions)
    np.testing.assert_allclose(result["energy"], 0.5 * k * (distances - length) ** 2, rtol=1e-12)
    np.testing.assert_allclose(result["forces"][:, 1, 0], -k * (distances - length), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(result["forces"][:, 0, 0], k * (distances - length), rtol=1e-12, atol=1e-9)
    with pytest.raises(ValueError, match="positions must be"):
        label(forcefield, np.zeros((3, 2)))


def test_trajectory_labels_of_a_gfn2_run():
    """A GFN2-xTB Langevin run labels its own frames: the recorded energies and forces are tblite's
    (through ASE) at the recorded positions."""
    from mindsponge.labels import TrajectoryLabels

    system = ms.System.from_ase(molecule("ethanol"))
    recorder = TrajectoryLabels(every=3)
    simulation = ms.Simulation(system, XTB(system.atomic_numbers),
                               ms.integrators.LangevinMiddle(dt=0.0005, temperature=600.0, friction=5.0),
                               reporters=[recorder], progress=False)
    simulation.set_velocities(temperature=600.0, seed=3)
    simulation.run(6)
    labels = recorder.labels()
    assert len(recorder) == 2 and labels["positions"].shape == (2, 9, 3)
    atoms = molecule("ethanol")
    atoms.positions = labels["positions"][-1] * 10.0
    atoms.calc = TBLite(method="GFN2-xTB", verbosity=0)
    assert abs(labels["energy"][-1] - atoms.get_potential_energy() * EV_TO_KJ_PER_MOL) < 1e-2
    forces = atoms.get_forces() * EV_TO_KJ_PER_MOL * 10.0
    np.testing.assert_allclose(labels["forces"][-1], forces, atol=1e-3 * np.abs(forces).max())
    with pytest.raises(ValueError, match="no frames"):
        TrajectoryLabels().labels()


def test_trajectory_labels_leave_out_the_bias_that_drove_the_run():
    """Under GFN2-xTB plus a strong umbrella restraint on a distance, a recorder given the restraint
    keeps tblite's own energies and forces (through ASE), not those of the sum."""
    from mindsponge.bias import HarmonicRestraint
    from mindsponge.colvar import Distance
    from mindsponge.labels import TrajectoryLabels
    from mindsponge.potentials import SumPotential

    system = ms.System.from_ase(molecule("ethanol"))
    restraint = HarmonicRestraint(Distance((0, 2)), 0.30, 50000.0)  # C...O pulled 0.06 nm apart
    recorder = TrajectoryLabels(every=4, bias=restraint)
    simulation = ms.Simulation(system, SumPotential(XTB(system.atomic_numbers), restraint),
                               ms.integrators.LangevinMiddle(dt=0.0005, temperature=300.0, friction=5.0),
                               reporters=[recorder], progress=False)
    simulation.set_velocities(temperature=300.0, seed=4)
    simulation.run(8)
    labels = recorder.labels()
    atoms = molecule("ethanol")
    atoms.positions = labels["positions"][-1] * 10.0
    atoms.calc = TBLite(method="GFN2-xTB", verbosity=0)
    forces = atoms.get_forces() * EV_TO_KJ_PER_MOL * 10.0
    restraint_energy = float(restraint(torch.as_tensor(labels["positions"][-1]), None))
    assert restraint_energy > 10.0  # the restraint is far from negligible
    assert abs(labels["energy"][-1] - atoms.get_potential_energy() * EV_TO_KJ_PER_MOL) < 1e-2
    np.testing.assert_allclose(labels["forces"][-1], forces, atol=1e-3 * np.abs(forces).max())


def test_trajectory_frames_are_one_long_run_whichever_order_computes_them():
    """``sampling="trajectory"``: frame j is the state after ``equilibration + j * stride`` steps of one
    Langevin run under GFN2-xTB (checked against that run made directly with a Simulation), whether the
    frames come in order (the trajectory continued), out of order or in a fresh process (run again);
    the label is tblite's for the frame; other temperatures and conformers are other trajectories. "The
    same" is to the SCF's convergence (1e-9 nm here): tblite starts each SCF from the last wavefunction of
    its calculator, which a continued trajectory has and a fresh one has not."""
    from mindsponge import labels as labels_module
    from mindsponge.integrators import LangevinMiddle
    from mindsponge.simulation import Simulation
    from mindsponge.system import System

    options = {"molecule": "smiles:OCCF", "sampling": "trajectory", "stride": 4, "equilibration": 6}
    labels_module._TRAJECTORIES.clear()
    in_order = [xtb_sample({"temperature": 400.0, "frame": frame}, seed=frame, **options)
                for frame in range(3)]
    labels_module._TRAJECTORIES.clear()
    alone = xtb_sample({"temperature": 400.0, "frame": 2}, seed=99, **options)
    backwards = xtb_sample({"temperature": 400.0, "frame": 1}, seed=7, **options)
    np.testing.assert_allclose(alone["positions"], in_order[2]["positions"], rtol=0, atol=1e-7)
    np.testing.assert_allclose(backwards["positions"], in_order[1]["positions"], rtol=0, atol=1e-7)
    # the same trajectory run directly: conformer 0, its seed from the key
    key = next(iter(labels_module._TRAJECTORIES))
    seed = labels_module.zlib.crc32(repr(key).encode())
    structure = labels_module._conformers("smiles:OCCF", 10, None)[0]
    system = System.from_ase(structure.to_ase()).replace(positions=torch.as_tensor(structure.positions))
    direct = Simulation(system, XTB(system.atomic_numbers), LangevinMiddle(0.0005, 400.0, 20.0), seed=seed,
                        progress=False, remove_center_of_mass_motion=False)
    direct.set_velocities(400.0, seed=seed)
    direct.run(6 + 2 * 4)
    np.testing.assert_allclose(direct.state.positions.numpy(), in_order[2]["positions"], rtol=0, atol=1e-7)
    steps = [np.abs(in_order[k + 1]["positions"] - in_order[k]["positions"]).max() for k in range(2)]
    assert min(steps) > 1e-4  # successive frames differ
    reference = label(XTB(system.atomic_numbers), torch.as_tensor(in_order[1]["positions"]))
    np.testing.assert_allclose(in_order[1]["forces"], reference["forces"], rtol=1e-10, atol=1e-8)
    hotter = xtb_sample({"temperature": 600.0, "frame": 2}, seed=0, **options)
    other_conformer = xtb_sample({"temperature": 400.0, "frame": 2, "conformer": 1}, seed=0, **options)
    for other in (hotter, other_conformer):
        assert np.abs(other["positions"] - in_order[2]["positions"]).max() > 1e-3


def test_trajectory_sampling_refuses_a_missing_or_bad_frame():
    for params in ({"temperature": 300.0}, {"temperature": 300.0, "frame": -1},
                   {"temperature": 300.0, "frame": 1.5}):
        with pytest.raises(ConfigurationError, match=r"params\['frame'\] must be a non-negative integer"):
            xtb_sample(params, seed=0, molecule="water", sampling="trajectory")
    with pytest.raises(ConfigurationError, match="stride"):
        xtb_sample({"temperature": 300.0, "frame": 0}, seed=0, molecule="water", sampling="trajectory",
                   stride=0)
