"""Integrators: NVE energy conservation with SETTLE side by side with OpenMM (fluctuation over
0.2 ps of PME water, drift over 3 ps of a water cluster), an analytic harmonic oscillator,
determinism and argument checks."""

import math

import numpy as np
import pytest
import torch

import mindsponge as ms
from mindsponge.build import water_box
from mindsponge.forcefield.bonded import HarmonicBond

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402


def test_velocity_verlet_harmonic_oscillator_analytic():
    # two atoms joined by a harmonic bond: r(t) = r0 + A cos(omega t), omega = sqrt(k / mu)
    k, r0, amplitude, masses = 1000.0, 0.1, 0.01, torch.tensor([1.0, 3.0], dtype=torch.float64)
    ff = ms.ForceField([HarmonicBond([[0, 1]], [r0], [k])])
    positions = torch.tensor([[0.0, 0.0, 0.0], [r0 + amplitude, 0.0, 0.0]], dtype=torch.float64)
    system = ms.System(positions, masses)
    dt = 0.001
    simulation = ms.Simulation(  # double: the energy is compared to 1e-7 relative
        system,
        ff,
        ms.integrators.VelocityVerlet(dt),
        remove_center_of_mass_motion=False,
        progress=False,
        precision="double",
    )
    reduced_mass = float(masses[0] * masses[1] / masses.sum())
    omega = math.sqrt(k / reduced_mass)
    times, lengths, energies = [], [], []
    for _ in range(200):
        simulation.run(1)
        state = simulation.state
        times.append(state.time)
        lengths.append(float(torch.linalg.vector_norm(state.positions[1] - state.positions[0])))
        energies.append(simulation.observables()["total"])
    expected = r0 + amplitude * np.cos(omega * np.array(times))
    # velocity Verlet's phase error after n steps: n (omega dt)^3 / 24
    assert np.abs(np.array(lengths) - expected).max() < amplitude * (200 * (omega * dt) ** 3 / 24 + 1e-3)
    initial = 0.5 * k * amplitude**2
    assert np.abs(np.array(energies) - initial).max() < initial * (omega * dt) ** 2 / 4


@pytest.fixture(scope="module")
def equilibrated_pme_water():
    """216 rigid TIP3P waters with PME, minimised and equilibrated at 300 K by OpenMM."""
    system = water_box(216, seed=1)
    openmm_system = app.ForceField("tip3p.xml").createSystem(
        system.topology.to_openmm(system.box),
        nonbondedMethod=app.PME,
        nonbondedCutoff=0.8 * unit.nanometer,
        rigidWater=True,
        removeCMMotion=False,
    )
    integrator = openmm.LangevinMiddleIntegrator(300.0, 5.0, 0.002)
    integrator.setRandomNumberSeed(1)
    context = openmm.Context(
        openmm_system, integrator, openmm.Platform.getPlatformByName("CPU"), {"Threads": "1"}
    )
    context.setPositions(system.positions.numpy())
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 200)
    context.setVelocitiesToTemperature(300.0, 1)
    integrator.step(500)
    state = context.getState(getPositions=True, getVelocities=True)
    positions = state.getPositions(asNumpy=True).value_in_unit(unit.nanometer)
    velocities = state.getVelocities(asNumpy=True).value_in_unit(unit.nanometer / unit.picosecond)
    return system, openmm_system, positions, velocities


@pytest.mark.slow
def test_nve_energy_fluctuation_as_openmm(equilibrated_pme_water):
    system, openmm_system, positions, velocities = equilibrated_pme_water
    dt, steps, every = 0.001, 200, 5
    # OpenMM VerletIntegrator, Reference platform (double precision), same start
    context = openmm.Context(
        openmm_system, openmm.VerletIntegrator(dt), openmm.Platform.getPlatformByName("Reference")
    )
    context.setPositions(positions)
    context.setVelocities(velocities)
    reference = []
    for _ in range(steps // every):
        context.getIntegrator().step(every)
        state = context.getState(getEnergy=True)
        reference.append(
            (state.getPotentialEnergy() + state.getKineticEnergy()).value_in_unit(unit.kilojoule_per_mole)
        )
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
    system = system.replace(
        positions=torch.tensor(positions),
        velocities=torch.tensor(velocities),
        masses=torch.tensor(masses, dtype=torch.float64),
    )
    simulation = ms.Simulation(
        system,
        ms.interop.openmm.from_openmm(openmm_system),
        ms.integrators.VelocityVerlet(dt),
        constraints="water",
        remove_center_of_mass_motion=False,
        progress=False,
    )
    dof = simulation.degrees_of_freedom
    assert dof == 6 * 216
    ours = []
    for _ in range(steps // every):
        simulation.run(every)
        ours.append(simulation.observables(pressure=False)["total"])
    fluctuation, reference_fluctuation = np.std(ours) / dof, np.std(reference) / dof
    assert 0.5 < fluctuation / reference_fluctuation < 2.0, (fluctuation, reference_fluctuation)
    # and both are small: well below 1e-3 kJ/mol per degree of freedom
    assert fluctuation < 1e-3
    # the rigid geometry is kept to 1e-10 nm in float64 along the run
    pairs = simulation.constraints.pairs()
    (settle,) = simulation.constraints.parts
    target = torch.stack([settle.oh_distance, settle.oh_distance, settle.hh_distance], 1).reshape(-1)
    final = simulation.state.positions
    distances = torch.linalg.vector_norm(final[pairs[:, 1]] - final[pairs[:, 0]], dim=-1)
    assert float((distances - target).abs().max()) < 1e-10



def test_nve_energy_drift_over_3_ps_as_openmm():
    """3 ps of NVE (3000 steps of 1 fs) of a cluster of 64 rigid TIP3P waters without cutoff (so
    that nothing but the integrator changes the energy), against OpenMM's VerletIntegrator with
    SETTLE from the same start (Reference platform, float64).

    The drift bound, 20 kJ/mol/ns (0.05 kJ/mol/ns per degree of freedom), holds for both with
    room (measured: mindsponge 4.7 +- 2.7, OpenMM 5.2 +- 2.7 kJ/mol/ns; fluctuations 0.041 and
    0.040 kJ/mol). Broken integrators fail: velocity Verlet without the RATTLE velocity
    projection fluctuates by 0.38 kJ/mol on this run (9 times OpenMM), explicit Euler drifts by
    6e5 kJ/mol/ns."""
    dt, steps, every = 0.001, 3000, 10
    cluster = water_box(64, seed=3)
    openmm_system = app.ForceField("tip3p.xml").createSystem(
        cluster.topology.to_openmm(None), nonbondedMethod=app.NoCutoff, rigidWater=True, removeCMMotion=False
    )
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(cluster.n_atoms)]
    masses = torch.tensor(masses, dtype=torch.float64)
    system = ms.System(cluster.positions, masses, topology=cluster.topology)
    forcefield = ms.interop.openmm.from_openmm(openmm_system)
    options = {"constraints": "water", "remove_center_of_mass_motion": False, "progress": False}
    langevin = ms.integrators.LangevinMiddle(dt, 300.0, 5.0)
    equilibration = ms.Simulation(system, forcefield, langevin, **options)
    equilibration.minimize(tolerance=10.0)
    equilibration.set_velocities(300.0, seed=1)
    equilibration.run(200)
    start = equilibration.state
    simulation = ms.Simulation(
        system.replace(positions=start.positions, velocities=start.velocities),
        forcefield,
        ms.integrators.VelocityVerlet(dt),
        **options,
    )
    context = openmm.Context(
        openmm_system, openmm.VerletIntegrator(dt), openmm.Platform.getPlatformByName("Reference")
    )
    context.setPositions(start.positions.numpy())
    context.setVelocities(start.velocities.numpy())
    times, ours, reference = [], [], []
    for _ in range(steps // every):
        simulation.run(every)
        times.append(simulation.state.time)
        ours.append(simulation.observables(pressure=False)["total"])
        context.getIntegrator().step(every)
        state = context.getState(getEnergy=True)
        reference.append(
            (state.getPotentialEnergy() + state.getKineticEnergy()).value_in_unit(unit.kilojoule_per_mole)
        )
    assert times[-1] == pytest.approx(3.0)  # ps
    ours = ms.analysis.energy_drift(torch.tensor(times), torch.tensor(ours))
    reference = ms.analysis.energy_drift(torch.tensor(times), torch.tensor(reference))
    assert abs(ours["drift"]) < 20.0, ours  # kJ/mol/ns
    assert abs(reference["drift"]) < 20.0, reference
    assert 0.5 < ours["fluctuation"] / reference["fluctuation"] < 2.0, (ours, reference)
    assert ours["fluctuation"] < 0.1, ours  # kJ/mol


def test_langevin_is_deterministic_given_seed():
    system = water_box(27)
    masses = system.masses

    def force(positions, box):
        return positions.new_zeros(()), torch.zeros_like(positions)

    integrator = ms.integrators.LangevinMiddle(0.002, 300.0, 1.0)
    generator = torch.Generator().manual_seed(3)
    state = ms.state.State(
        system.positions,
        torch.zeros_like(system.positions),
        system.box,
        forces=torch.zeros_like(system.positions),
        potential_energy=torch.zeros(()),
        rng_state=generator.get_state(),
    )
    first = integrator.step(state, force, masses, generator=generator)
    second = integrator.step(state, force, masses, generator=generator)
    assert torch.equal(first.velocities, second.velocities)
    assert not torch.equal(first.rng_state, state.rng_state)
    # free particles: the O step alone, v = sqrt((1 - a^2) kT / m) xi with a = exp(-gamma dt)
    decay = math.exp(-0.002)
    scaled = first.velocities * torch.sqrt(masses / ((1 - decay**2) * 0.00831446261815324 * 300.0))[:, None]
    assert abs(float(scaled.std()) - 1.0) < 0.1


def test_integrator_arguments():
    with pytest.raises(ValueError, match="dt"):
        ms.integrators.VelocityVerlet(0.0)
    with pytest.raises(ValueError, match="temperature"):
        ms.integrators.LangevinMiddle(0.002, -300.0, 1.0)
    with pytest.raises(ValueError, match="friction"):
        ms.integrators.LangevinMiddle(0.002, 300.0, float("nan"))


def test_mixed_precision_float32_forces_float64_state(equilibrated_pme_water):
    system, openmm_system, positions, velocities = equilibrated_pme_water
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
    system = system.replace(
        positions=torch.tensor(positions),
        velocities=torch.tensor(velocities),
        masses=torch.tensor(masses, dtype=torch.float64),
    )
    runs = {}
    for precision, dtype in (("mixed", torch.float32), ("double", torch.float64)):
        simulation = ms.Simulation(
            system,
            ms.interop.openmm.from_openmm(openmm_system, dtype=dtype),
            ms.integrators.VelocityVerlet(0.001),
            constraints="water",
            precision=precision,
            progress=False,
        )
        simulation.run(20)
        assert simulation.state.positions.dtype == simulation.state.velocities.dtype == torch.float64
        runs[precision] = simulation
    # float32 forces move the trajectory by float32 rounding only over 20 fs
    difference = (runs["mixed"].state.positions - runs["double"].state.positions).abs().max()
    assert float(difference) < 1e-5
    energies = runs["mixed"].observables(pressure=False), runs["double"].observables(pressure=False)
    assert energies[0]["total"] == pytest.approx(energies[1]["total"], abs=0.5)


@pytest.fixture(scope="module")
def flexible_water():
    """64 flexible TIP3P waters (reaction field) with OpenMM-equilibrated positions and velocities."""
    system = water_box(64, seed=3)
    openmm_system = app.ForceField("tip3p.xml").createSystem(
        system.topology.to_openmm(system.box),
        nonbondedMethod=app.CutoffPeriodic,
        nonbondedCutoff=0.6 * unit.nanometer,
        switchDistance=0.5 * unit.nanometer,
        rigidWater=False,
        constraints=None,
    )
    integrator = openmm.LangevinMiddleIntegrator(300.0, 5.0, 0.0005)
    integrator.setRandomNumberSeed(2)
    context = openmm.Context(
        openmm_system, integrator, openmm.Platform.getPlatformByName("CPU"), {"Threads": "1"}
    )
    context.setPositions(system.positions.numpy())
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 200)
    context.setVelocitiesToTemperature(300.0, 1)
    integrator.step(1000)
    state = context.getState(getPositions=True, getVelocities=True)
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
    system = system.replace(
        positions=torch.tensor(state.getPositions(asNumpy=True).value_in_unit(unit.nanometer)),
        velocities=torch.tensor(
            state.getVelocities(asNumpy=True).value_in_unit(unit.nanometer / unit.picosecond)
        ),
        masses=torch.tensor(masses, dtype=torch.float64),
    )
    return system, ms.interop.openmm.from_openmm(openmm_system)


def _run_total_energies(system, ff, integrator, steps, every):
    simulation = ms.Simulation(  # double: trajectories compared to 1e-12
        system, ff, integrator, remove_center_of_mass_motion=False, progress=False, precision="double"
    )
    energies = []
    for _ in range(steps // every):
        simulation.run(every)
        energies.append(simulation.observables(pressure=False)["total"])
    return simulation, np.array(energies)


def test_multiple_time_step_limits_and_energy_conservation(flexible_water):
    system, ff = flexible_water
    bonded = ms.ForceField([ff["HarmonicBond"], ff["HarmonicAngle"]])
    # everything fast: r-RESPA is velocity Verlet with the inner step
    respa, _ = _run_total_energies(system, ff, ms.integrators.MultipleTimeStep(0.001, 2, ff), 5, 5)
    verlet, _ = _run_total_energies(system, ff, ms.integrators.VelocityVerlet(0.0005), 10, 10)
    torch.testing.assert_close(respa.state.positions, verlet.state.positions, rtol=0, atol=1e-12)
    # nothing fast: r-RESPA is velocity Verlet with the outer step
    respa, _ = _run_total_energies(
        system, ff, ms.integrators.MultipleTimeStep(0.0005, 3, ms.ForceField()), 10, 10
    )
    torch.testing.assert_close(respa.state.positions, verlet.state.positions, rtol=0, atol=1e-12)
    # bonded terms every 0.5 fs, non-bonded every 1.5 fs: conserves energy nearly like Verlet at 0.5 fs
    # (fluctuation 1.47 against 0.43-0.51 kJ/mol, depending on the trajectory), far better than Verlet
    # at 1.5 fs (which the O-H stretch, period ~9 fs, makes unstable)
    _, reference = _run_total_energies(system, ff, ms.integrators.VelocityVerlet(0.0005), 300, 15)
    _, split = _run_total_energies(system, ff, ms.integrators.MultipleTimeStep(0.0015, 3, bonded), 100, 5)
    _, coarse = _run_total_energies(system, ff, ms.integrators.VelocityVerlet(0.0015), 100, 5)
    assert np.std(split) < 4 * np.std(reference)
    assert np.std(split) < 0.5 * np.std(coarse)
