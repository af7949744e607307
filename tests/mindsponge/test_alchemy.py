"""Alchemical states (mindsponge.alchemy) against openmmtools' AbsoluteAlchemicalFactory on OpenMM.

The reference is OpenMM's Reference platform (float64) evaluating the System that openmmtools' factory
builds, set to each state by openmmtools' ``AlchemicalState``; mindsponge builds its force field through
``ms.alchemy.alchemical_force_field`` and sets states with ``AlchemicalState.apply_to``. Energies and
forces must agree to 1e-6 relative at every lambda: alanine dipeptide in TIP3P with PME (exact
treatment) and with reaction field, and in vacuum, with annihilated and decoupled electrostatics.
The analytic case: the free energy between two force constants of a harmonic oscillator from
``reduced_potentials`` and MBAR.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch

openmm = pytest.importorskip("openmm")
pytest.importorskip("openmmtools")
pytest.importorskip("pymbar")
from openmm import unit  # noqa: E402

import mindsponge as ms  # noqa: E402
from common.errors import ConfigurationError, DataError, UnknownNameError  # noqa: E402
from common.units import BOLTZMANN_MD  # noqa: E402
from mindsponge.alchemy import AlchemicalRegion, AlchemicalState  # noqa: E402

with contextlib.redirect_stdout(io.StringIO()):  # pymbar's notice about JAX
    from openmmtools import alchemy, testsystems

TOLERANCE = 1e-6
LAMBDAS = [(1.0, 1.0), (1.0, 0.5), (1.0, 0.0), (0.5, 0.0), (0.2, 0.0), (0.0, 0.0), (0.6, 0.3)]


def _reference_system(case, atoms, **region_options):
    region = alchemy.AlchemicalRegion(alchemical_atoms=list(atoms), **region_options)
    return alchemy.AbsoluteAlchemicalFactory().create_alchemical_system(case.system, region)


def _compare(case, atoms, lambdas=LAMBDAS, **region_options):
    """Max relative energy and force differences per state: mindsponge vs OpenMM on openmmtools' System."""
    reference_system = _reference_system(case, atoms, **region_options)
    context = openmm.Context(reference_system, openmm.VerletIntegrator(0.001),
                             openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(case.positions)
    reference_state = alchemy.AlchemicalState.from_system(reference_system)
    force_field = ms.alchemy.alchemical_force_field(case.system, atoms, **region_options)
    positions = torch.tensor(case.positions.value_in_unit(unit.nanometer), dtype=torch.float64)
    box = None
    if case.system.usesPeriodicBoundaryConditions():
        vectors = case.system.getDefaultPeriodicBoxVectors()
        box = torch.tensor([vector.value_in_unit(unit.nanometer) for vector in vectors], dtype=torch.float64)
    errors = {}
    for lambda_sterics, lambda_electrostatics in lambdas:
        reference_state.lambda_sterics = lambda_sterics
        reference_state.lambda_electrostatics = lambda_electrostatics
        reference_state.apply_to_context(context)
        state = context.getState(getEnergy=True, getForces=True)
        energy_reference = state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
        forces_reference = state.getForces(asNumpy=True).value_in_unit(
            unit.kilojoule_per_mole / unit.nanometer)
        AlchemicalState(lambda_sterics, lambda_electrostatics).apply_to(force_field)
        energy, forces = ms.energy_and_forces(force_field, positions, box)
        errors[(lambda_sterics, lambda_electrostatics)] = (
            abs(float(energy) - energy_reference) / abs(energy_reference),
            float(np.abs(forces.numpy() - forces_reference).max() / np.abs(forces_reference).max()),
        )
    print(f"max relative (energy, force) differences per (lambda_sterics, lambda_electrostatics): {errors}")
    return force_field, errors


def _assert_close(errors):
    for lambdas, (energy_error, force_error) in errors.items():
        assert energy_error < TOLERANCE, (lambdas, energy_error)
        assert force_error < TOLERANCE, (lambdas, force_error)


@pytest.fixture(scope="module")
def explicit_pme():
    return testsystems.AlanineDipeptideExplicit(nonbondedMethod=openmm.app.PME)


@pytest.fixture(scope="module")
def explicit_reaction_field():
    return testsystems.AlanineDipeptideExplicit(nonbondedMethod=openmm.app.CutoffPeriodic)


@pytest.fixture(scope="module")
def vacuum():
    return testsystems.AlanineDipeptideVacuum()


def test_pme_exact_matches_openmmtools(explicit_pme):
    """Alanine dipeptide (the region, 22 atoms) in 2,247 TIP3P atoms, PME: charge offsets in the
    NonbondedForce (direct, exceptions, exclusions, reciprocal), soft-core sterics with the dispersion
    correction following lambda_sterics."""
    force_field, errors = _compare(explicit_pme, range(22))
    _assert_close(errors)
    assert force_field.global_parameters["softcore_alpha"] == 0.5
    assert force_field["Nonbonded"].global_parameters == {"lambda_electrostatics": 0.3}


def test_reaction_field_matches_openmmtools(explicit_reaction_field):
    """The same with reaction field (CutoffPeriodic): openmmtools' switched reaction field, decoupled."""
    _, errors = _compare(explicit_reaction_field, range(22), LAMBDAS[::2], annihilate_electrostatics=False)
    _assert_close(errors)


@pytest.mark.parametrize("annihilate", [True, False], ids=["annihilated", "decoupled"])
def test_vacuum_matches_openmmtools(vacuum, annihilate):
    """Vacuum (NoCutoff), a region of half the molecule (its internal interactions then matter):
    annihilated or decoupled electrostatics and sterics."""
    atoms = range(10)
    _, errors = _compare(vacuum, atoms, annihilate_electrostatics=annihilate, annihilate_sterics=annihilate)
    _assert_close(errors)


def test_decoupled_differs_from_annihilated(vacuum):
    """Decoupling keeps the region's internal interactions: at lambda = 0 the two differ, at 1 they agree."""
    positions = torch.tensor(vacuum.positions.value_in_unit(unit.nanometer), dtype=torch.float64)
    energies = {}
    for annihilate in (True, False):
        force_field = ms.alchemy.alchemical_force_field(vacuum.system, range(10),
                                                        annihilate_electrostatics=annihilate)
        energies[annihilate] = [float(AlchemicalState(1.0, value).apply_to(force_field)(positions))
                                for value in (1.0, 0.0)]
    assert energies[True][0] == pytest.approx(energies[False][0], rel=1e-12)
    assert abs(energies[True][1] - energies[False][1]) > 1.0


def test_nonbonded_offsets_match_openmm():
    """NonbondedForce global parameters with charge, sigma and epsilon offsets of particles and exceptions
    (an exception whose base values are zero included), PME with the dispersion correction."""
    generator = np.random.default_rng(3)
    n_atoms = 30
    force = openmm.NonbondedForce()
    force.setNonbondedMethod(openmm.NonbondedForce.PME)
    force.setCutoffDistance(0.8)
    force.setUseDispersionCorrection(True)
    system = openmm.System()
    system.setDefaultPeriodicBoxVectors(*(openmm.Vec3(*row) for row in 2.0 * np.eye(3)))
    for _ in range(n_atoms):
        system.addParticle(12.0)
        force.addParticle(generator.uniform(-0.5, 0.5), generator.uniform(0.25, 0.35),
                          generator.uniform(0.2, 0.8))
    force.addGlobalParameter("a", 0.4)
    force.addGlobalParameter("b", 1.0)
    for index in range(5):
        force.addParticleParameterOffset("a", index, 0.3, 0.02, -0.1)
    force.addParticleParameterOffset("b", 7, -0.2, 0.0, 0.0)
    force.addException(0, 1, 0.1, 0.3, 0.5)
    force.addException(2, 3, 0.0, 0.3, 0.0)
    force.addException(4, 9, 0.0, 0.3, 0.0)
    force.addExceptionParameterOffset("a", 1, 0.2, 0.01, 0.3)
    force.addExceptionParameterOffset("b", 0, -0.05, 0.0, 0.1)
    system.addForce(force)
    positions = generator.uniform(0.0, 2.0, (n_atoms, 3))
    for first, second in ((0, 1), (2, 3), (4, 9)):  # exception partners are neighbours (bonded atoms)
        positions[second] = positions[first] + generator.uniform(-0.1, 0.1, 3)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001),
                             openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions)
    force_field = ms.interop.openmm.from_openmm(system)
    assert force_field.global_parameters == {"a": 0.4, "b": 1.0}
    box = torch.tensor(2.0 * np.eye(3))
    for a, b in ((0.4, 1.0), (0.0, 0.3), (1.0, 0.0)):
        context.setParameter("a", a)
        context.setParameter("b", b)
        reference = context.getState(getEnergy=True).getPotentialEnergy()
        reference = reference.value_in_unit(unit.kilojoule_per_mole)
        energy = float(force_field.set_global_parameters(a=a, b=b)(torch.tensor(positions), box))
        assert energy == pytest.approx(reference, rel=TOLERANCE)


def test_harmonic_oscillator_free_energy_by_mbar():
    """Delta f between force constants k0 and k1 of a 1D harmonic oscillator is 0.5 ln(k1 / k0) kT:
    exact Boltzmann samples of three states, the reduced-potential matrix, MBAR."""
    from mindsponge.forcefield.custom import CustomExternal

    temperature, constants = 300.0, (400.0, 1600.0, 6400.0)  # K, kJ/mol/nm^2
    force_field = ms.ForceField([CustomExternal([0], "0.5*k*x^2", [], None, global_parameters={"k": 1.0})])
    generator = np.random.default_rng(11)
    kt = BOLTZMANN_MD * temperature  # kJ/mol
    samples = 500
    x = np.concatenate([generator.normal(0.0, np.sqrt(kt / k), samples) for k in constants])
    positions = torch.zeros((len(x), 1, 3), dtype=torch.float64)
    positions[:, 0, 0] = torch.tensor(x)
    u_kn = ms.alchemy.reduced_potentials(force_field, [{"k": k} for k in constants], positions,
                                         temperature=temperature)
    assert u_kn.shape == (3, 3 * samples)
    assert force_field.global_parameters == {"k": 1.0}  # left as it was
    result = ms.alchemy.mbar(u_kn, [samples] * 3)
    delta, uncertainty = result.difference(0, -1)
    expected = 0.5 * np.log(constants[-1] / constants[0])
    assert 0 < uncertainty < 0.1
    assert abs(delta - expected) < 4 * uncertainty, (delta, expected, uncertainty)
    assert result.overlap.shape == (3, 3) and np.allclose(result.overlap.sum(1), 1.0)


def test_mbar_refuses_nan_naming_the_state_and_sample():
    """A NaN reduced potential (a failed evaluation) surfaced as pymbar's LAPACK failure; +inf (a
    configuration impossible in a state) is allowed."""
    u_kn = np.zeros((2, 6))
    u_kn[0, 4] = np.nan
    with pytest.raises(DataError, match=r"NaN in state 0 for sample 4 \(drawn in state 1"):
        ms.alchemy.mbar(u_kn, [3, 3])
    u_kn[0, 4] = np.inf
    assert np.isfinite(ms.alchemy.mbar(u_kn, [3, 3]).delta_f).all()


def test_reduced_potentials_match_energies(vacuum):
    """u[k, n] = U_k(x_n) / kT, state by state, for a batch of configurations."""
    force_field = ms.alchemy.alchemical_force_field(vacuum.system, range(10))
    base = torch.tensor(vacuum.positions.value_in_unit(unit.nanometer), dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    positions = base + 0.005 * torch.randn((4, *base.shape), generator=generator, dtype=torch.float64)
    states = ms.alchemy.lambda_schedule(electrostatics=3, sterics=3)
    assert [(s.lambda_electrostatics, s.lambda_sterics) for s in states] == [
        (1.0, 1.0), (0.5, 1.0), (0.0, 1.0), (0.0, 0.5), (0.0, 0.0)]
    u_kn = ms.alchemy.reduced_potentials(force_field, states, positions, temperature=300.0)
    beta = 1.0 / (BOLTZMANN_MD * 300.0)
    for k, state in enumerate(states):
        state.apply_to(force_field)
        for n in range(len(positions)):
            assert float(u_kn[k, n]) == pytest.approx(beta * float(force_field(positions[n])), rel=1e-12)


def test_refusals(vacuum, explicit_pme):
    with pytest.raises(ConfigurationError, match="empty"):
        AlchemicalRegion([])
    with pytest.raises(ConfigurationError, match="outside the System's 22 particles"):
        ms.alchemy.alchemical_force_field(vacuum.system, [3, 22])
    with pytest.raises(ConfigurationError, match="negative"):
        AlchemicalRegion([-1, 2])
    with pytest.raises(ConfigurationError, match="more than once"):
        AlchemicalRegion([1, 2, 2])
    for value in (-0.1, 1.5, float("nan")):
        with pytest.raises(ConfigurationError, match=r"lambda_sterics must be a number in \[0, 1\]"):
            AlchemicalState(lambda_sterics=value)
    with pytest.raises(ConfigurationError, match="lambda_electrostatics"):
        AlchemicalState(lambda_electrostatics=2)
    with pytest.raises(ConfigurationError, match="decoupled electrostatics"):
        ms.alchemy.alchemical_force_field(explicit_pme.system, range(22), annihilate_electrostatics=False)
    force_field = ms.alchemy.alchemical_force_field(vacuum.system, range(10))
    with pytest.raises(UnknownNameError, match="lambda_sterix"):
        force_field.set_global_parameters(lambda_sterix=0.5)
    with pytest.raises(UnknownNameError, match="lambda_torsions"):
        ms.alchemy.reduced_potentials(force_field, [{"lambda_torsions": 0.5}], torch.zeros(22, 3),
                                      temperature=300.0)
    with pytest.raises(ConfigurationError, match="finite number"):
        force_field.set_global_parameters(lambda_sterics="half")
    plain = ms.interop.openmm.from_openmm(vacuum.system)
    with pytest.raises(UnknownNameError, match="alchemical_force_field"):
        AlchemicalState(0.5, 0.5).apply_to(plain)


@pytest.mark.slow
def test_independent_windows_of_a_harmonic_oscillator(tmp_path):
    """Langevin MD of one particle in 0.5 k r^2 at three force constants (independent windows): MBAR on
    the saved u_kn gives Delta f = 1.5 ln(k2 / k0) kT (3D). The samples are correlated, so MBAR's
    uncertainty (about 0.04 kT here) is too small; over seeds the estimate scatters by about 0.1 kT, and
    the bound is 0.3 kT (the exact-sampling test above checks MBAR at 4 sigma)."""
    from mindsponge.forcefield.custom import CustomExternal

    force_field = ms.ForceField([CustomExternal([0], "0.5*k*(x^2+y^2+z^2)", [], None,
                                                global_parameters={"k": 1.0})])
    system = ms.System(positions=torch.zeros((1, 3), dtype=torch.float64),
                       masses=torch.tensor([1.0], dtype=torch.float64))
    constants = (400.0, 800.0, 1600.0)  # kJ/mol/nm^2
    integrator = ms.integrators.LangevinMiddle(dt=0.002, temperature=300.0, friction=40.0)
    samples = ms.alchemy.sample_states(system, force_field, [{"k": k} for k in constants], integrator,
                                       steps=6000, every=10, equilibration=200, precision="double", seed=2,
                                       path=tmp_path / "u_kn.npz", remove_center_of_mass_motion=False)
    loaded = ms.alchemy.StateSamples.load(tmp_path / "u_kn.npz")
    np.testing.assert_array_equal(loaded.u_kn, samples.u_kn)
    assert loaded.states == ({"k": 400.0}, {"k": 800.0}, {"k": 1600.0}) and loaded.temperature == 300.0
    assert loaded.u_kn.shape == (3, 1800) and loaded.samples_per_state.tolist() == [600] * 3
    result = loaded.mbar()
    delta, uncertainty = result.difference(0, -1)
    expected = 1.5 * np.log(constants[-1] / constants[0])
    print(f"harmonic oscillator by MD: Delta f = {delta:.4f} +- {uncertainty:.4f} kT, exact {expected:.4f}")
    assert 0 < uncertainty < 0.1
    assert abs(delta - expected) < 0.3
    assert result.overlap[0, 1] > 0.1  # neighbouring states overlap


def test_a_simulation_follows_lambdas_set_after_it_was_built(vacuum):
    """Setting a global parameter after the Simulation exists changes its energies and forces at the
    next evaluation and run, as OpenMM's Context.setParameter does (its compiled loop is rebuilt)."""
    force_field = ms.alchemy.alchemical_force_field(vacuum.system, range(10))
    positions = torch.tensor(vacuum.positions.value_in_unit(unit.nanometer), dtype=torch.float64)
    system = ms.System(positions, force_field.masses)
    simulation = ms.Simulation(system, force_field, ms.integrators.LangevinMiddle(0.0005, 300.0, 5.0),
                               progress=False, overlap_distance=None, precision="double")
    full, _ = simulation.energy_and_forces(simulation.state.positions, None)
    AlchemicalState(lambda_sterics=0.3, lambda_electrostatics=0.0).apply_to(force_field)
    scaled, scaled_forces = simulation.energy_and_forces(simulation.state.positions, None)
    expected, expected_forces = ms.energy_and_forces(force_field, simulation.state.positions, None)
    assert abs(float(full) - float(scaled)) > 1.0
    torch.testing.assert_close(scaled, expected.to(scaled), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(scaled_forces, expected_forces.to(scaled_forces), rtol=1e-9, atol=1e-6)
    state = simulation.run(0)  # the state's forces follow too
    torch.testing.assert_close(state.forces, expected_forces.to(state.forces), rtol=1e-9, atol=1e-6)


def test_an_alchemical_force_field_that_ran_pickles_for_worker_processes(vacuum):
    """A force field whose Simulation ran (compiled kernels and torch expressions built) goes to a worker
    process by pickle and gives the same energy and forces there."""
    import pickle

    force_field = ms.alchemy.alchemical_force_field(vacuum.system, range(10))
    AlchemicalState(lambda_sterics=0.4, lambda_electrostatics=0.0).apply_to(force_field)
    positions = torch.tensor(vacuum.positions.value_in_unit(unit.nanometer), dtype=torch.float64)
    simulation = ms.Simulation(ms.System(positions, force_field.masses), force_field,
                               ms.integrators.LangevinMiddle(0.0005, 300.0, 5.0), progress=False,
                               overlap_distance=None, precision="double")
    simulation.run(5)
    positions = simulation.state.positions
    copied = pickle.loads(pickle.dumps(force_field))
    energy, forces = ms.energy_and_forces(force_field, positions, None)
    copied_energy, copied_forces = ms.energy_and_forces(copied, positions, None)
    torch.testing.assert_close(copied_energy, energy, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(copied_forces, forces, rtol=1e-12, atol=1e-9)


def test_copies_per_state_share_the_terms_no_state_changes(vacuum):
    """force_fields_at: one force field per state; states giving a term the same lambdas share one copy of
    it (not the original's), and each copy's energy and forces equal openmmtools' at its state."""
    atoms = range(10)
    force_field = ms.alchemy.alchemical_force_field(vacuum.system, atoms)
    states = [AlchemicalState(1.0, 0.5), AlchemicalState(0.4, 0.0), AlchemicalState(0.7, 0.0)]
    copies = ms.alchemy.force_fields_at(force_field, states)
    assert copies[0]["HarmonicBond"] is copies[1]["HarmonicBond"] is copies[2]["HarmonicBond"]
    assert copies[0]["HarmonicBond"] is not force_field["HarmonicBond"]
    for lambda_name, same in (("lambda_sterics", ()), ("lambda_electrostatics", ((1, 2),))):
        names = [term.name for term in force_field.terms if lambda_name in term.global_parameters]
        assert names
        for first, second in ((0, 1), (0, 2), (1, 2)):
            shared = (first, second) in same
            assert all((copies[first][name] is copies[second][name]) == shared for name in names)
    reference_system = _reference_system(vacuum, atoms)
    context = openmm.Context(reference_system, openmm.VerletIntegrator(0.001),
                             openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(vacuum.positions)
    reference_state = alchemy.AlchemicalState.from_system(reference_system)
    positions = torch.tensor(vacuum.positions.value_in_unit(unit.nanometer), dtype=torch.float64)
    for state, copy_at_state in zip(states, copies):
        reference_state.lambda_sterics = state.lambda_sterics
        reference_state.lambda_electrostatics = state.lambda_electrostatics
        reference_state.apply_to_context(context)
        expected = context.getState(getEnergy=True, getForces=True)
        energy, forces = ms.energy_and_forces(copy_at_state, positions)
        reference_energy = expected.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
        reference_forces = expected.getForces(asNumpy=True).value_in_unit(
            unit.kilojoule_per_mole / unit.nanometer)
        assert abs(float(energy) - reference_energy) < TOLERANCE * abs(reference_energy)
        assert np.abs(forces.numpy() - reference_forces).max() < TOLERANCE * np.abs(reference_forces).max()


def test_energy_matrix_terms_through_kernels_match_the_force_field(explicit_pme):
    """The replica exchange's energy matrix evaluates each distinct term of the states' copies through its
    compiled form (PME with charge offsets, soft-core custom terms): each copy's sum equals its energy."""
    from types import SimpleNamespace

    from mindsponge.replica_rounds import _WORKER_TERM_PROGRAMS, _term_energy

    force_field = ms.alchemy.alchemical_force_field(explicit_pme.system, range(22))
    copies = ms.alchemy.force_fields_at(force_field, [AlchemicalState(1.0, 0.5), AlchemicalState(0.4, 0.0)])
    positions = torch.tensor(explicit_pme.positions.value_in_unit(unit.nanometer), dtype=torch.float64)
    vectors = explicit_pme.system.getDefaultPeriodicBoxVectors()
    box = torch.tensor([vector.value_in_unit(unit.nanometer) for vector in vectors], dtype=torch.float64)
    spec = SimpleNamespace(key="test_energy_matrix", barostat=None)
    for copy_at_state in copies:
        terms = [term for term in copy_at_state.terms if not term.is_empty]
        total = sum(_term_energy(spec, term, positions, box) for term in terms)
        expected = float(copy_at_state(positions, box))
        assert abs(total - expected) < 1e-9 * abs(expected)
    compiled = [key for key, program in _WORKER_TERM_PROGRAMS.items() if key[0] == spec.key and program]
    assert len(compiled) >= 4  # bonded terms, PME at two lambdas, the soft-core terms
