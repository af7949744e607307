"""The ASE calculator against the potential it wraps (unit conversion) and against ASE's own numerical
forces and stress (finite differences by ASE), for molecules, rotated triclinic cells and force fields."""

import ase.build
import numpy as np
import pytest
import torch
from ase import Atoms
from ase.calculators.fd import calculate_numerical_forces, calculate_numerical_stress

import mindsponge as ms
from mindsponge.interop.ase import Calculator

EV_TO_KJ_PER_MOL = 96.48533212331


def model():
    torch.manual_seed(0)
    potential = ms.potentials.PaiNN(cutoff=0.5, features=16, interactions=2).double()
    potential.energy_scale.fill_(50.0)
    return potential


def test_molecule_energy_and_forces_agree_with_the_potential():
    atoms = ase.build.molecule("CH3CH2OH")
    potential = model()
    atoms.calc = Calculator(potential)
    positions = torch.tensor(atoms.positions * 0.1)
    numbers = torch.tensor(atoms.numbers)
    energy, forces = ms.forcefield.energy_and_forces(potential.bind(numbers), positions)
    assert abs(atoms.get_potential_energy() * EV_TO_KJ_PER_MOL - float(energy)) < 1e-9
    np.testing.assert_allclose(atoms.get_forces() * EV_TO_KJ_PER_MOL * 10.0, forces.numpy(), atol=1e-8)
    numerical = calculate_numerical_forces(atoms, eps=1e-4)
    np.testing.assert_allclose(atoms.get_forces(), numerical, rtol=1e-5, atol=1e-6)
    assert "stress" not in atoms.calc.results
    # a bound potential gives the same numbers
    atoms.calc = Calculator(potential.bind(numbers))
    assert abs(atoms.get_potential_energy() * EV_TO_KJ_PER_MOL - float(energy)) < 1e-9


def periodic_atoms(seed=0):
    generator = np.random.default_rng(seed)
    cell = np.array([[12.0, 0.0, 0.0], [2.0, 11.5, 0.0], [-1.0, 3.0, 11.0]])  # Angstrom, triclinic
    fractional = generator.random((30, 3))
    numbers = generator.choice([1, 6, 8], 30)
    return Atoms(numbers=numbers, positions=fractional @ cell, cell=cell, pbc=True)


def test_periodic_stress_matches_ase_numerical_stress():
    atoms = periodic_atoms()
    atoms.calc = Calculator(model())
    stress = atoms.get_stress()
    numerical = calculate_numerical_stress(atoms, eps=1e-6)
    assert np.abs(stress).max() > 1e-5
    np.testing.assert_allclose(stress, numerical, atol=1e-6 * np.abs(numerical).max() + 1e-12, rtol=1e-5)


def test_rotated_cell_gives_rotated_forces_and_stress():
    """A cell in an arbitrary orientation (not lower triangular): same energy, forces and stress rotated."""
    atoms = periodic_atoms(1)
    potential = model()
    atoms.calc = Calculator(potential)
    energy, forces, stress = atoms.get_potential_energy(), atoms.get_forces(), atoms.get_stress(voigt=False)
    rotated = atoms.copy()
    rotated.rotate(37.0, (1.0, 2.0, -0.5), rotate_cell=True)
    rotation = np.linalg.solve(atoms.cell[:], rotated.cell[:]).T  # rows: new = old @ rotation.T
    rotated.calc = Calculator(potential)
    assert abs(rotated.get_potential_energy() - energy) < 1e-9
    np.testing.assert_allclose(rotated.get_forces(), forces @ rotation.T, atol=1e-9)
    np.testing.assert_allclose(rotated.get_stress(voigt=False), rotation @ stress @ rotation.T, atol=1e-10)
    numerical = calculate_numerical_forces(rotated, eps=1e-5)
    np.testing.assert_allclose(rotated.get_forces(), numerical, rtol=1e-4, atol=1e-6)


def test_forcefield_through_ase_and_bad_pbc():
    from mindsponge.forcefield.bonded import HarmonicBond

    k, length = 2.0e5, 0.1  # kJ/mol/nm^2, nm
    bond = HarmonicBond(torch.tensor([[0, 1]]), torch.tensor([length], dtype=torch.float64),
                        torch.tensor([k], dtype=torch.float64))
    forcefield = ms.ForceField([bond])
    atoms = Atoms("OH", positions=[[0, 0, 0], [1.1, 0, 0]])
    atoms.calc = Calculator(forcefield)
    assert abs(atoms.get_potential_energy() * EV_TO_KJ_PER_MOL - 0.5 * k * 0.01**2) < 1e-9
    assert abs(atoms.get_forces()[1, 0] * EV_TO_KJ_PER_MOL * 10.0 + k * 0.01) < 1e-7
    atoms.pbc = [True, False, True]
    atoms.cell = [10.0, 10.0, 10.0]
    with pytest.raises(ValueError, match="pbc all True or all False"):
        atoms.get_potential_energy()
