"""Learned potentials: invariances, forces vs finite differences, periodic images, batches, errors,
hybrids."""

import ase.build
import pytest
import torch

import mindsponge as ms
from mindsponge.potentials import MODELS, MechanicalEmbedding, SumPotential, UnknownElementError

MODEL_NAMES = sorted(set(MODELS) - {"MACE"})  # mace-torch: tests/mindsponge/test_potentials_mace.py


def ethanol():
    """Ethanol (ase's G2 geometry): positions (9, 3) nm float64 and atomic numbers (9,)."""
    atoms = ase.build.molecule("CH3CH2OH")
    positions = torch.tensor(atoms.positions, dtype=torch.float64) * 0.1
    return positions, torch.tensor(atoms.numbers)


def make_model(name, **options):
    torch.manual_seed(0)
    model = MODELS[name](cutoff=0.5, features=32, interactions=2, **options).double()
    # non-trivial statistics so that shifts and scale are exercised
    model.element_shift.copy_(torch.linspace(-3.0, 3.0, model.n_elements, dtype=torch.float64))
    model.energy_scale.fill_(7.0)
    return model


def random_rotation(seed):
    generator = torch.Generator().manual_seed(seed)
    rotation, _ = torch.linalg.qr(torch.randn(3, 3, generator=generator, dtype=torch.float64))
    return rotation * torch.sign(torch.linalg.det(rotation))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_invariance_and_force_equivariance(name):
    model = make_model(name)
    positions, numbers = ethanol()
    potential = model.bind(numbers)
    energy, forces = ms.forcefield.energy_and_forces(potential, positions)
    rotation = random_rotation(1)
    moved = positions @ rotation.T + torch.tensor([0.3, -1.2, 2.5], dtype=torch.float64)
    energy_moved, forces_moved = ms.forcefield.energy_and_forces(potential, moved)
    assert abs(float(energy_moved - energy)) < 1e-5
    torch.testing.assert_close(forces_moved, forces @ rotation.T, atol=1e-5, rtol=0)
    permutation = torch.randperm(len(numbers), generator=torch.Generator().manual_seed(2))
    energy_permuted, forces_permuted = ms.forcefield.energy_and_forces(
        model.bind(numbers[permutation]), positions[permutation])
    assert abs(float(energy_permuted - energy)) < 1e-5
    torch.testing.assert_close(forces_permuted, forces[permutation], atol=1e-5, rtol=0)
    assert float(forces.abs().max()) > 1e-2  # the model is not trivially flat


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forces_are_minus_finite_differences(name):
    model = make_model(name)
    positions, numbers = ethanol()
    generator = torch.Generator().manual_seed(3)
    positions = positions + 0.01 * torch.randn(positions.shape, generator=generator, dtype=torch.float64)
    potential = model.bind(numbers)
    forces = ms.forces(potential, positions)
    step = 1e-6
    finite = torch.zeros_like(positions)
    with torch.no_grad():
        for atom in range(len(positions)):
            for axis in range(3):
                shifted = positions.clone()
                shifted[atom, axis] += step
                plus = potential(shifted)
                shifted[atom, axis] -= 2 * step
                minus = potential(shifted)
                finite[atom, axis] = -(plus - minus) / (2 * step)
    torch.testing.assert_close(forces, finite, atol=1e-6 * float(finite.abs().max()) + 1e-7, rtol=1e-5)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_periodic_images(name):
    """Same energy for an atom moved by a box vector, a molecule in a big box as in vacuum, and a
    2x2x2 supercell of a periodic liquid-like cell equal to 8 unit cells (the supercell's 320 atoms
    use the cell-list neighbour list, the cell the all-pairs search)."""
    model = make_model(name)
    positions, numbers = ethanol()
    vacuum = model(positions, numbers)
    big_box = torch.eye(3, dtype=torch.float64) * 3.0
    assert abs(float((model(positions, numbers, box=big_box) - vacuum).detach())) < 1e-9
    # a dense triclinic cell of 40 random atoms: neighbours across the faces interact
    box = torch.tensor([[1.1, 0.0, 0.0], [0.2, 1.05, 0.0], [-0.1, 0.3, 1.0]], dtype=torch.float64)
    generator = torch.Generator().manual_seed(4)
    crystal = torch.rand(40, 3, generator=generator, dtype=torch.float64) @ box
    numbers = torch.tensor([1, 6, 8])[torch.randint(0, 3, (40,), generator=generator)]
    cell_energy = model(crystal, numbers, box=box)
    shifted = crystal.clone()
    shifted[3] += box[0] - 2 * box[2]
    shifted[0] -= box[1]
    assert abs(float((model(shifted, numbers, box=box) - cell_energy).detach())) < 1e-9
    offsets = torch.stack(torch.meshgrid(*[torch.arange(2)] * 3, indexing="ij"), -1).reshape(-1, 3)
    images = (offsets.to(torch.float64) @ box).unsqueeze(1) + crystal.unsqueeze(0)
    supercell_energy = model(images.reshape(-1, 3), numbers.repeat(8), box=2 * box)
    assert model.neighbors.n_builds > 0
    torch.testing.assert_close(supercell_energy, 8 * cell_energy, atol=1e-8, rtol=1e-10)
    # the periodic cell is not the same atoms in vacuum: images really interact
    assert abs(float((cell_energy - model(crystal, numbers)).detach())) > 1e-3  # round-off: 1e-9


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_batch_matches_single_molecules(name):
    model = make_model(name)
    positions, numbers = ethanol()
    water = ase.build.molecule("H2O")
    water_positions = torch.tensor(water.positions, dtype=torch.float64) * 0.1
    water_numbers = torch.tensor(water.numbers)
    batch = torch.tensor([0] * 9 + [1] * 3)
    energies = model(torch.cat([positions, water_positions + 0.1]), torch.cat([numbers, water_numbers]),
                     batch=batch)
    expected = torch.stack([model(positions, numbers), model(water_positions, water_numbers)])
    torch.testing.assert_close(energies, expected, atol=1e-10, rtol=0)


def test_float32_model_accepts_float64_positions():
    model = MODELS["SchNet"](features=16, interactions=1)
    positions, numbers = ethanol()
    energy = model(positions, numbers)
    assert energy.dtype == torch.float64
    assert abs(float((energy - model.double()(positions, numbers)).detach())) < 1e-3


def test_unknown_and_untrained_elements_raise():
    model = MODELS["SchNet"](features=16, interactions=1).double()
    positions, numbers = ethanol()
    with pytest.raises(UnknownElementError, match=r"atom 2 has atomic number 26 \(Fe\).*not among"):
        model(positions, torch.tensor([6, 6, 26, 1, 1, 1, 1, 1, 1]))
    model.fit_statistics(torch.tensor([-100.0, -101.0]), numbers.repeat(2),
                         torch.arange(2).repeat_interleave(9))
    assert model.trained_elements == (1, 6, 8)
    with pytest.raises(UnknownElementError, match=r"atom 0 has atomic number 7 \(N\).*training data"):
        model(positions, torch.tensor([7, 6, 8, 1, 1, 1, 1, 1, 1]))
    with pytest.raises(ValueError, match="atomic_numbers has 8 entries but positions has 9"):
        model(positions, numbers[:8])
    with pytest.raises(ValueError, match=r"positions must be an \(N, 3\)"):
        model(positions[:, :2], numbers)


def test_fit_statistics_recovers_element_energies():
    """Energies that are exact sums of per-element values give those values back (least squares)."""
    model = MODELS["PaiNN"](features=16, interactions=1)
    true_shift = {1: -1300.0, 6: -99000.0, 8: -197000.0}
    molecules = [[6, 1, 1, 1, 1], [8, 1, 1], [6, 8, 1, 1, 1, 1], [6, 6, 1, 1, 1, 1, 1, 1], [8, 8]]
    numbers = torch.tensor([z for molecule in molecules for z in molecule])
    batch = torch.cat([torch.full((len(m),), k) for k, m in enumerate(molecules)])
    energies = torch.tensor([sum(true_shift[z] for z in molecule) for molecule in molecules],
                            dtype=torch.float64)
    model.fit_statistics(energies, numbers, batch, forces=torch.full((len(numbers), 3), 200.0))
    for z, value in true_shift.items():
        assert abs(float(model.element_shift[model.elements.index(z)]) - value) < 1e-3 * abs(value)
    assert abs(float(model.energy_scale) - 20.0) < 1e-4  # 0.1 nm x RMS force


def test_save_and_load_round_trip(tmp_path):
    model = make_model("MolCT")
    positions, numbers = ethanol()
    ms.potentials.save(model, tmp_path / "model.pt")
    loaded = ms.potentials.load(tmp_path / "model.pt")
    assert type(loaded).__name__ == "MolCT"
    assert float(loaded(positions, numbers) - model(positions, numbers)) == 0.0
    with pytest.raises(ValueError, match="not a saved mindsponge learned potential"):
        ms.potentials.model_from_state({"format": "other"})


def test_bound_potential_runs_in_simulation():
    system = ms.System.from_ase(ase.build.molecule("CH3CH2OH"))
    model = make_model("SchNet")
    simulation = ms.Simulation(
        system, model.bind(system.atomic_numbers),
        ms.integrators.LangevinMiddle(dt=0.0005, temperature=300.0, friction=1.0), progress=False,
        precision="double")  # the energy is compared to 1e-8
    simulation.set_velocities(temperature=300.0, seed=1)
    simulation.run(20)
    assert simulation.state.step == 20
    reference = model(simulation.state.positions, system.atomic_numbers)
    assert abs(simulation.observables()["potential"] - float(reference)) < 1e-8


def _harmonic_forcefield(bonds, n_atoms):
    from mindsponge.forcefield.bonded import HarmonicBond

    bonds = torch.tensor(bonds)
    return ms.ForceField([HarmonicBond(bonds, torch.full((len(bonds),), 0.12, dtype=torch.float64),
                                       torch.full((len(bonds),), 3e4, dtype=torch.float64))])


def test_sum_and_mechanical_embedding():
    """ML/MM with the classical region force field in place of the learned one gives back the full force
    field exactly; with a learned region, energies and forces are the parts' sums."""
    positions, numbers = ethanol()
    model = make_model("SchNet")
    # the full force field: bonds inside atoms 0..4 (the region) and between region and the rest
    full = _harmonic_forcefield([[0, 1], [1, 2], [3, 4], [4, 5], [5, 6], [7, 8], [2, 7]], 9)
    region_atoms = torch.arange(5)
    region_ff = _harmonic_forcefield([[0, 1], [1, 2], [3, 4]], 5)
    same = MechanicalEmbedding(region_ff, region_atoms, full, region_forcefield=region_ff)
    torch.testing.assert_close(ms.forces(same, positions), ms.forces(full, positions), atol=1e-9, rtol=0)
    assert abs(float(same(positions) - full(positions))) < 1e-9

    learned = model.bind(numbers[:5])
    hybrid = MechanicalEmbedding(learned, region_atoms, full, region_forcefield=region_ff)
    expected = full(positions) - region_ff(positions[:5]) + learned(positions[:5])
    assert abs(float(hybrid(positions) - expected)) < 1e-9
    assert set(hybrid.energy_terms(positions)) == {"ml", "mm", "mm_region"}
    expected_forces = ms.forces(full, positions)
    expected_forces[:5] += ms.forces(learned, positions[:5]) - ms.forces(region_ff, positions[:5])
    torch.testing.assert_close(ms.forces(hybrid, positions), expected_forces, atol=1e-9, rtol=0)

    total = SumPotential(model.bind(numbers), full)
    assert abs(float(total(positions) - model(positions, numbers) - full(positions))) < 1e-9
    assert set(total.energy_terms(positions)) == {"SchNet", "HarmonicBond"}
    with pytest.raises(ValueError, match="region atom 5 is out of range"):
        MechanicalEmbedding(learned, torch.arange(6), full)(positions[:5])
