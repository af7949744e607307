"""Minimisers: L-BFGS and FIRE reach the force tolerance and the minimum OpenMM's
LocalEnergyMinimizer finds (flexible TIP3P water cluster in vacuum), and rigid water stays rigid."""

import numpy as np
import pytest
import torch

import mindsponge as ms
from mindsponge.build import water_box
from mindsponge.minimize import minimize
from mindsponge.topology import Atom

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402


@pytest.fixture(scope="module")
def water_cluster():
    """Four flexible TIP3P waters cut from a box, in vacuum (no cutoff)."""
    box = water_box(27, seed=4)
    oxygens = box.positions[0::3]
    nearest = torch.argsort(torch.linalg.vector_norm(oxygens - oxygens[0], dim=-1))[:4]
    atoms = (3 * nearest[:, None] + torch.arange(3)).reshape(-1)
    topology = ms.Topology(
        [
            Atom(box.topology.atoms[i].name, box.topology.atoms[i].element, k // 3)
            for k, i in enumerate(atoms.tolist())
        ],
        box.topology.residues[:4],
        [(3 * w, 3 * w + 1) for w in range(4)] + [(3 * w, 3 * w + 2) for w in range(4)],
    )
    positions = box.positions[atoms]
    openmm_system = app.ForceField("tip3p.xml").createSystem(
        topology.to_openmm(), nonbondedMethod=app.NoCutoff, rigidWater=False, constraints=None
    )
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(12)]
    system = ms.System(positions, torch.tensor(masses, dtype=torch.float64), topology=topology)
    return system, openmm_system


def _openmm_minimum(openmm_system, positions):
    context = openmm.Context(
        openmm_system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    context.setPositions(positions)
    openmm.LocalEnergyMinimizer.minimize(context, 0.1, 0)
    state = context.getState(getEnergy=True, getForces=True)
    forces = state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer)
    return state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole), np.linalg.norm(
        forces, axis=1
    ).max()


@pytest.mark.parametrize("method", ["lbfgs", "fire"])
def test_minimum_matches_openmm(water_cluster, method):
    system, openmm_system = water_cluster
    reference_energy, reference_force = _openmm_minimum(openmm_system, system.positions.numpy())
    simulation = ms.Simulation(
        system,
        ms.interop.openmm.from_openmm(openmm_system),
        ms.integrators.VelocityVerlet(0.001),
        progress=False,
        precision="double",  # a 1 kJ/mol/nm tolerance and energies compared to 0.05 kJ/mol
    )
    start = simulation.observables()["potential"]
    tolerance = 1.0
    result = simulation.minimize(tolerance=tolerance, max_iterations=20000, method=method)
    assert result.converged and result.max_force < tolerance
    forces = ms.forces(simulation.forcefield, simulation.state.positions)
    assert float(torch.linalg.vector_norm(forces, dim=-1).max()) < tolerance
    assert result.energy < start - 10.0
    # same local minimum: energies agree far better than the depth of the minimisation
    assert result.energy == pytest.approx(reference_energy, abs=0.05), (
        result.energy,
        reference_energy,
        reference_force,
    )


def test_minimize_keeps_rigid_water_rigid():
    system = water_box(27, seed=1)
    openmm_system = app.ForceField("tip3p.xml").createSystem(
        system.topology.to_openmm(system.box),
        nonbondedMethod=app.CutoffPeriodic,
        nonbondedCutoff=0.45 * unit.nanometer,
        rigidWater=True,
    )
    simulation = ms.Simulation(
        system,
        ms.interop.openmm.from_openmm(openmm_system),
        ms.integrators.VelocityVerlet(0.001),
        constraints="water",
        progress=False,
    )
    start = simulation.observables()["potential"]
    result = simulation.minimize(tolerance=20.0, max_iterations=2000, method="lbfgs")
    assert result.energy < start
    (settle,) = simulation.constraints.parts
    pairs = simulation.constraints.pairs()
    positions = simulation.state.positions
    distances = torch.linalg.vector_norm(positions[pairs[:, 1]] - positions[pairs[:, 0]], dim=-1)
    target = torch.stack([settle.oh_distance, settle.oh_distance, settle.hh_distance], 1).reshape(-1)
    assert float((distances - target).abs().max()) < 1e-8


def test_minimize_arguments():
    def force(positions, box):
        return (positions**2).sum(), -2 * positions

    positions = torch.ones(3, 3, dtype=torch.float64)
    masses = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="method"):
        minimize(force, positions, masses, method="cg")
    with pytest.raises(ValueError, match="tolerance"):
        minimize(force, positions, masses, tolerance=0.0)
    with pytest.raises(ValueError, match="max_iterations"):
        minimize(force, positions, masses, max_iterations=0)
    # a quadratic bowl: the minimum is the origin
    result = minimize(force, positions, masses, tolerance=1e-6, progress=False)
    assert result.converged and float(result.positions.abs().max()) < 1e-6


def test_force_keyword_is_the_deprecated_name_of_energy_and_forces():
    def bowl(positions, box):
        return (positions**2).sum(), -2 * positions

    positions = torch.ones(3, 3, dtype=torch.float64)
    masses = torch.ones(3, dtype=torch.float64)
    with pytest.warns(DeprecationWarning, match=r"force=.*energy_and_forces="):
        result = minimize(force=bowl, positions=positions, masses=masses, tolerance=1e-6, progress=False)
    assert result.converged


class _FloatSprings(torch.nn.Module):
    """Every pair of atoms joined by a spring (rest length: the distance in a reference geometry), plus
    the large constant a learned potential carries (its element energies): in float32 the energy is near
    -41,000 kJ/mol and moves in steps of 0.004 kJ/mol, as a learned potential's does at the default
    precision."""

    def __init__(self, reference, dtype):
        super().__init__()
        first, second = torch.triu_indices(len(reference), len(reference), 1)
        self.register_buffer("first", first)
        self.register_buffer("second", second)
        rest = torch.linalg.vector_norm(reference[first] - reference[second], dim=-1)
        self.register_buffer("rest", rest.to(dtype))
        self.register_buffer("offset", torch.tensor(-41000.0, dtype=dtype))

    def forward(self, positions, box=None):
        positions = positions.to(self.rest.dtype)
        distances = torch.linalg.vector_norm(positions[self.first] - positions[self.second], dim=-1)
        return self.offset + 500.0 * ((distances - self.rest) ** 2).sum()


def test_minimizer_converges_on_a_float32_energy_as_in_double():
    """The Armijo test cannot see decreases below the energy's resolution; the forces decide there
    (before: 2,000 iterations without converging, against 12 in double)."""
    import ase.build

    system = ms.System.from_ase(ase.build.molecule("CH3CH2OH"))
    generator = torch.Generator().manual_seed(1)
    start = system.positions + 0.01 * torch.randn(system.positions.shape, generator=generator,
                                                  dtype=torch.float64)
    results = {}
    for precision, dtype in (("mixed", torch.float32), ("double", torch.float64)):
        simulation = ms.Simulation(system.replace(positions=start), _FloatSprings(system.positions, dtype),
                                   ms.integrators.VelocityVerlet(0.0005), progress=False, precision=precision)
        results[precision] = simulation.minimize(tolerance=1.0, max_iterations=500)
        assert results[precision].converged and results[precision].max_force < 1.0
    assert results["mixed"].iterations <= 1.5 * results["double"].iterations + 5
    assert torch.allclose(results["mixed"].positions, results["double"].positions, atol=1e-3)


def test_minimizer_at_the_default_precision_takes_about_the_iterations_of_double(water_cluster):
    system, openmm_system = water_cluster
    iterations = {}
    for precision in ("mixed", "double"):
        simulation = ms.Simulation(system, ms.interop.openmm.from_openmm(openmm_system),
                                   ms.integrators.VelocityVerlet(0.001), progress=False, precision=precision)
        result = simulation.minimize(tolerance=1.0, max_iterations=2000)
        assert result.converged
        iterations[precision] = result.iterations
    assert iterations["mixed"] <= 1.5 * iterations["double"] + 10
