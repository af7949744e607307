"""Normal-mode sampling: the finite-difference Hessian against autograd's exact one, xTB harmonic
frequencies against ASE's Vibrations with tblite's calculator, the rigid-body modes removed (6, or 5
for a linear molecule), and the sampled displacements following the classical harmonic distribution."""

import numpy as np
import pytest
import torch
from ase.data import atomic_masses

from common.errors import DataError
from mindsponge.molecules import load_molecule
from mindsponge.normal_modes import finite_difference_hessian, normal_modes, optimize, rigid_body_basis

BOLTZMANN_MD = 8.314462618e-3  # kJ/mol/K


class Springs(torch.nn.Module):
    """A bent triatomic: anharmonic bonds 0-1, 0-2 and a harmonic angle; an exact Hessian by autograd."""

    def forward(self, positions, box=None):
        first, second = positions[1] - positions[0], positions[2] - positions[0]
        lengths = torch.stack([first.norm(), second.norm()])
        angle = torch.acos(torch.dot(first, second) / (lengths[0] * lengths[1]))
        stretch = lengths - 0.1
        return (2e5 * stretch**2 + 3e6 * stretch**3).sum() + 300.0 * (angle - 1.8) ** 2


def springs_minimum():
    return np.array([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.1 * np.cos(1.8), 0.1 * np.sin(1.8), 0.0]])


def test_hessian_equals_autograd_hessian():
    positions = springs_minimum() + 0.002
    exact = torch.autograd.functional.hessian(
        lambda x: Springs()(x.reshape(3, 3)), torch.tensor(positions.reshape(-1))).numpy()
    np.testing.assert_allclose(finite_difference_hessian(Springs(), positions), exact,
                               atol=1e-4 * np.abs(exact).max())


def test_modes_exclude_rigid_body_motion():
    masses = np.array([16.0, 1.0, 1.0])
    modes = normal_modes(Springs(), springs_minimum(), masses)
    assert modes.eigenvalues.shape == (3,) and modes.vectors.shape == (3, 3, 3)
    rigid = rigid_body_basis(springs_minimum(), masses)
    assert rigid.shape == (9, 6)
    assert np.abs(rigid.T @ modes.vectors.reshape(3, 9).T).max() < 1e-10
    linear = np.array([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [-0.1, 0.0, 0.0]])
    assert rigid_body_basis(linear, masses).shape == (9, 5)
    with pytest.raises(DataError, match="not a minimum"):
        normal_modes(lambda x, box=None: -Springs()(x), springs_minimum(), masses)


def test_samples_follow_the_classical_harmonic_distribution():
    """<x^T H x / 2> = (3N - 6) k_B T / 2 with the Cartesian Hessian; no net translation or rotation."""
    masses = np.array([16.0, 1.0, 1.0])
    minimum = springs_minimum()
    modes = normal_modes(Springs(), minimum, masses)
    cartesian = finite_difference_hessian(Springs(), minimum)
    rng = np.random.default_rng(0)
    displacements = np.stack([modes.sample(500.0, rng) - minimum for _ in range(4000)])
    flat = displacements.reshape(len(displacements), -1)
    energies = 0.5 * np.einsum("si,ij,sj->s", flat, cartesian, flat)
    assert energies.mean() == pytest.approx(3 * BOLTZMANN_MD * 500.0 / 2, rel=0.05)
    np.testing.assert_allclose((masses[:, None] * displacements).sum(axis=1), 0.0, atol=1e-12)
    angular = np.cross(minimum, displacements) * masses[:, None]  # Eckart condition
    np.testing.assert_allclose(angular.sum(axis=1), 0.0, atol=1e-12)


def test_xtb_frequencies_match_ase_vibrations(tmp_path, monkeypatch):
    pytest.importorskip("tblite")
    from ase.vibrations import Vibrations
    from tblite.ase import TBLite

    from mindsponge.labels import XTB

    for source, count in (("water", 3), ("CO2", 4)):
        structure = load_molecule(source)
        potential = XTB(torch.tensor(structure.atomic_numbers))
        masses = atomic_masses[structure.atomic_numbers]
        minimum = optimize(potential, structure.positions, masses, tolerance=0.1)
        modes = normal_modes(potential, minimum, masses)
        atoms = structure.to_ase()
        atoms.positions = minimum * 10.0
        atoms.calc = TBLite(method="GFN2-xTB", verbosity=0)
        monkeypatch.chdir(tmp_path)
        vibrations = Vibrations(atoms, name=f"vib-{source}", delta=0.005)
        vibrations.run()
        reference = np.sort(vibrations.get_frequencies().real)[-count:]  # cm^-1, rigid-body modes ~0
        assert modes.wavenumbers.shape == (count,)
        np.testing.assert_allclose(modes.wavenumbers, reference, atol=1.0)


def test_xtb_sample_normal_modes_matches_tblite():
    pytest.importorskip("tblite")
    from tblite.ase import TBLite

    from mindsponge.labels import xtb_sample

    samples = [xtb_sample({"temperature": 300.0}, seed=seed, molecule="water", sampling="normal_modes")
               for seed in (0, 1)]
    assert np.abs(samples[0]["positions"] - samples[1]["positions"]).max() > 1e-5
    atoms = load_molecule("water").to_ase()
    atoms.positions = samples[0]["positions"] * 10.0
    atoms.calc = TBLite(method="GFN2-xTB", verbosity=0)
    reference = atoms.get_potential_energy() * 96.48533212331  # eV -> kJ/mol
    assert float(samples[0]["energy"]) == pytest.approx(reference, rel=1e-8)
