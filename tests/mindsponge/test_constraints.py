"""SETTLE and SHAKE/RATTLE: exact rigid geometry, agreement with OpenMM's constrained step, no
velocity along constraints, degrees of freedom."""

import os

import numpy as np
import pytest
import torch

import mindsponge as ms
from mindsponge import _kernels, constraint_sets
from mindsponge import constraints as cons
from mindsponge.build import water_box

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402


@pytest.fixture(scope="module")
def rigid_water():
    system = water_box(216, seed=1)
    openmm_system = app.ForceField("tip3p.xml").createSystem(
        system.topology.to_openmm(system.box),
        nonbondedMethod=app.PME,
        nonbondedCutoff=0.8 * unit.nanometer,
        rigidWater=True,
        removeCMMotion=False,
    )
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
    system = system.replace(masses=torch.tensor(masses, dtype=torch.float64))
    return system, openmm_system, ms.interop.openmm.from_openmm(openmm_system)


def _distances(positions, pairs):
    return torch.linalg.vector_norm(positions[pairs[:, 1]] - positions[pairs[:, 0]], dim=-1)


def _water_constraints(system, ff, compiled):
    """``from_system(system, "water")`` with SETTLE's compiled kernels on or off (asked for, they must
    build unless MINDSCIENCE_NO_EXTENSIONS=1 disables them)."""
    constraints = constraint_sets.from_system(system, "water", ff)
    (settle,) = constraints.parts
    settle.compiled = compiled
    if compiled and os.environ.get("MINDSCIENCE_NO_EXTENSIONS") == "1":
        pytest.skip("MINDSCIENCE_NO_EXTENSIONS=1")
    if compiled:
        assert _kernels.constraints(system.positions) is not None, "the constraint kernels failed to build"
    return constraints


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_settle_one_step_matches_openmm(rigid_water, compiled):
    system, openmm_system, ff = rigid_water
    dt = 0.002
    generator = torch.Generator().manual_seed(3)
    velocities = torch.randn(system.positions.shape, generator=generator, dtype=torch.float64)
    velocities = velocities * torch.sqrt(2.494 / system.masses)[:, None]
    # OpenMM Reference VerletIntegrator: v += dt F/m; x' = x + dt v; SETTLE(x'); v = (x' - x)/dt
    context = openmm.Context(
        openmm_system, openmm.VerletIntegrator(dt), openmm.Platform.getPlatformByName("Reference")
    )
    context.setPositions(system.positions.numpy())
    context.setVelocities(velocities.numpy())
    context.getIntegrator().step(1)
    expected = context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(unit.nanometer)

    constraints = _water_constraints(system, ff, compiled)
    forces = ms.forces(ff, system.positions, system.box)
    unconstrained = system.positions + dt * (velocities + dt * forces / system.masses[:, None])
    constrained = constraints.positions(system.positions, unconstrained, system.masses)
    np.testing.assert_allclose(constrained.numpy(), expected, rtol=0, atol=1e-9)
    # exact geometry: O-H and H-H distances to 1e-10 nm; the distances (taken from the built
    # geometry) are TIP3P's
    (settle,) = constraints.parts
    pairs = constraints.pairs()
    target = torch.stack([settle.oh_distance, settle.oh_distance, settle.hh_distance], 1).reshape(-1)
    assert float((_distances(constrained, pairs) - target).abs().max()) < 1e-10
    model = torch.tensor([0.09572, 0.09572, 2 * 0.09572 * np.sin(np.radians(104.52) / 2)]).repeat(216)
    assert float((target - model).abs().max()) < 1e-8
    assert constraints.n_constraints == 3 * 216


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_settle_velocities_rigid_and_momentum_conserving(rigid_water, compiled):
    system, _, ff = rigid_water
    constraints = _water_constraints(system, ff, compiled)
    generator = torch.Generator().manual_seed(5)
    velocities = torch.randn(system.positions.shape, generator=generator, dtype=torch.float64)
    rigid = constraints.velocities(system.positions, velocities, system.masses)
    pairs = constraints.pairs()
    bonds = system.positions[pairs[:, 1]] - system.positions[pairs[:, 0]]
    along = (bonds * (rigid[pairs[:, 1]] - rigid[pairs[:, 0]])).sum(-1)
    assert float(along.abs().max()) < 1e-12
    momentum = (system.masses[:, None] * (rigid - velocities)).reshape(-1, 3, 3).sum(1)
    assert float(momentum.abs().max()) < 1e-12
    # idempotent: a rigid motion is left unchanged
    torch.testing.assert_close(constraints.velocities(system.positions, rigid, system.masses), rigid)


def test_settle_compiled_equals_torch_in_float32_and_names_a_failed_water(rigid_water, require_compiled):
    """The compiled SETTLE follows the torch code: same float32 results to round-off; a water moved too
    far is named by its oxygen in both."""
    require_compiled(lambda: _kernels.constraints(torch.zeros(1)))
    system, _, ff = rigid_water
    generator = torch.Generator().manual_seed(11)
    reference = system.positions.float()
    moved = reference + 0.004 * torch.randn(reference.shape, generator=generator)
    velocities = torch.randn(reference.shape, generator=generator)
    masses = system.masses.float()
    results = {}
    for compiled in (True, False):
        constraints = _water_constraints(system, ff, compiled)
        placed = constraints.positions(reference, moved, masses)
        results[compiled] = (placed, constraints.velocities(placed, velocities, masses))
    torch.testing.assert_close(results[True][0], results[False][0], rtol=0, atol=2e-6)
    torch.testing.assert_close(results[True][1], results[False][1], rtol=1e-4, atol=1e-4)
    assert results[True][0].dtype == torch.float32
    broken = moved.clone()
    broken[3 * 7 + 1] += 0.5  # the first hydrogen of water 7 jumps 0.5 nm
    for compiled in (True, False):
        with pytest.raises(cons.ConstraintError, match=f"oxygen atom {3 * 7}:"):
            _water_constraints(system, ff, compiled).positions(reference, broken, masses)


@pytest.fixture(scope="module")
def peptide(villin_vacuum):
    n_atoms = villin_vacuum.system.getNumParticles()
    masses = [villin_vacuum.system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(n_atoms)]
    topology = ms.Topology.from_openmm(villin_vacuum.topology)
    positions = torch.as_tensor(villin_vacuum.positions, dtype=torch.float64)
    return ms.System(positions, torch.tensor(masses, dtype=torch.float64), topology=topology), villin_vacuum


def _rattle_constraints(system, ff, compiled, tolerance):
    """``from_system(system, "hbonds", ff)`` with the compiled SHAKE/RATTLE on or off."""
    constraints = constraint_sets.from_system(system, "hbonds", ff, tolerance=tolerance)
    for part in constraints.parts:
        part.compiled = compiled
    return constraints


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_rattle_hbonds_on_peptide(peptide, amber14, compiled):
    system, case = peptide
    ff = ms.interop.openmm.from_openmm(case.system)
    constraints = _rattle_constraints(system, ff, compiled, 1e-5)
    pairs = constraints.pairs()
    n_hbonds = sum("H" in (a1.element.symbol, a2.element.symbol) for a1, a2 in case.topology.bonds())
    assert len(pairs) == n_hbonds == constraints.n_constraints
    bond_term = ff["HarmonicBond"]
    table = {
        tuple(sorted(atoms)): length
        for atoms, length in zip(bond_term.atoms.tolist(), bond_term.length.tolist())
    }
    lengths = torch.tensor([table[tuple(sorted(pair))] for pair in pairs.tolist()], dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    velocities = 2 * torch.randn(system.positions.shape, generator=generator, dtype=torch.float64)
    dt = 0.002
    moved = system.positions + dt * velocities
    constrained = constraints.positions(system.positions, moved, system.masses)
    relative_error = (_distances(constrained, pairs) - lengths).abs() / lengths
    assert float(relative_error.max()) < 1e-5
    assert float(((_distances(moved, pairs) - lengths).abs() / lengths).max()) > 1e-3  # it had work to do
    rigid = constraints.velocities(constrained, velocities, system.masses)
    bonds = constrained[pairs[:, 1]] - constrained[pairs[:, 0]]
    along = (bonds * (rigid[pairs[:, 1]] - rigid[pairs[:, 0]])).sum(-1) / (bonds * bonds).sum(-1)
    assert float(along.abs().max()) < 1e-5
    # compare with OpenMM's constrained positions (same distances, tolerance 1e-5)
    constrained_system = amber14.createSystem(case.topology, constraints=app.HBonds)
    integrator = openmm.VerletIntegrator(dt)
    integrator.setConstraintTolerance(1e-8)
    context = openmm.Context(constrained_system, integrator, openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(moved.numpy())
    context.applyConstraints(1e-8)
    reference = context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(unit.nanometer)
    tight = _rattle_constraints(system, ff, compiled, 1e-10)
    ours = tight.positions(moved, moved, system.masses)
    # both project along the same bond directions to the same distances (OpenMM uses the current ones)
    assert np.abs(ours.numpy() - reference).max() < 1e-6


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_rattle_compiled_equals_torch_and_names_the_worst_bond(peptide, dtype, require_compiled):
    """The compiled SHAKE/RATTLE repeat the torch iterations: the same positions and velocities to
    round-off in float64 and float32; a bond stretched beyond repair is named by both."""
    require_compiled(lambda: _kernels.constraints(torch.zeros(1)))
    system, case = peptide
    ff = ms.interop.openmm.from_openmm(case.system)
    generator = torch.Generator().manual_seed(4)
    reference = system.positions.to(dtype)
    masses = system.masses.to(dtype)
    velocities = 2 * torch.randn(reference.shape, generator=generator, dtype=dtype)
    moved = reference + 0.002 * velocities
    results = {}
    for compiled in (True, False):
        constraints = _rattle_constraints(system, ff, compiled, 1e-5 if dtype == torch.float64 else 1e-4)
        placed = constraints.positions(reference, moved, masses)
        results[compiled] = (placed, constraints.velocities(placed, velocities, masses))
    atol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(results[True][0], results[False][0], rtol=0, atol=atol)
    torch.testing.assert_close(results[True][1], results[False][1], rtol=0, atol=1e3 * atol)
    assert results[True][0].dtype == dtype and results[True][1].dtype == dtype
    pairs = _rattle_constraints(system, ff, True, 1e-5).pairs()
    shared = torch.bincount(pairs.reshape(-1))
    i, j = next(pair for pair in pairs.tolist() if shared[pair[0]] == shared[pair[1]] == 1)  # e.g. C-H
    old = reference[j] - reference[i]
    sideways = torch.linalg.cross(old, torch.tensor([1.0, 2.0, 3.0], dtype=dtype))
    broken = moved.clone()
    # the hydrogen 0.5 nm from its heavy atom across the old bond: no move along it restores the length
    broken[j] = broken[i] + 0.5 * sideways / torch.linalg.vector_norm(sideways)
    for compiled in (True, False):
        constraints = _rattle_constraints(system, ff, compiled, 1e-5)
        with pytest.raises(cons.ConstraintError, match=rf"SHAKE did not converge.*atoms \({i}, {j}\)"):
            constraints.positions(reference, broken, masses)


def test_from_system_errors():
    system = water_box(27)
    with pytest.raises(ValueError, match="constraints must be one of"):
        constraint_sets.from_system(system, "allbonds")
    with pytest.raises(ValueError, match="topology"):
        constraint_sets.from_system(system.replace(topology=None), "water")
    assert constraint_sets.from_system(system, None) is None


def test_builders_at_their_old_place_warn_and_are_the_same_functions():
    for name in ("from_system", "from_pairs", "check_against_system", "KINDS"):
        with pytest.warns(DeprecationWarning, match=f"mindsponge.constraints.{name} is deprecated"):
            assert getattr(cons, name) is getattr(constraint_sets, name)
