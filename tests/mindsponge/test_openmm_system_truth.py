"""The OpenMM System is the truth: masses (hydrogen mass repartitioning), constraints and their
distances come from it on every import path; contradicting constraints are refused naming the
bond; overlaps are named at set-up and the minimiser recovers them; mixed precision by default.

The system is alanine dipeptide (ACE-ALA-NME, ``data/alanine_dipeptide.pdb``) in TIP3P-FB
water (a 1.8 nm cubic box, about 500 atoms, PME with a 0.8 nm cutoff), built with
``constraints=HBonds``, rigid water and ``hydrogenMass=3 amu``, and run at 4 fs.
"""

import os
import warnings

import numpy as np
import pytest
import torch

import mindsponge as ms
from common.errors import ConfigurationError
from mindsponge.constraints import Rattle
from mindsponge.interop.openmm import from_openmm, load
from mindsponge.overlaps import OverlapError, OverlapWarning

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402

DIPEPTIDE = os.path.join(os.path.dirname(__file__), "data", "alanine_dipeptide.pdb")
KB = 0.00831446261815324  # kJ/mol/K
DT, FRICTION, TEMPERATURE = 0.004, 1.0, 300.0
# constraint tolerance of the deterministic comparison: at the default 1e-5 a bond of 0.1 nm may end up to
# 1e-6 nm off on either side, which after the velocity correction of a 4 fs step is up to 5e-4 nm/ps apart
TIGHT = 1e-10
# the HMR sampling test: friction (1/ps), steps per run (4 ps), our runs and OpenMM's (its steps are cheap)
HMR_FRICTION, HMR_STEPS, HMR_RUNS, HMR_REFERENCE_RUNS = 10.0, 1000, 3, 10
# two-sided Student t bound for the difference of the run means: P(|t| > 4.5) = 1e-3 at 11 degrees of freedom
HMR_BOUND = 4.5


def _atom(topology, index):
    atom = list(topology.atoms())[index]
    return f"atom {index} ({atom.name} of {atom.residue.name} {atom.residue.id})"


@pytest.fixture(scope="module")
def hmr_case(tmp_path_factory):
    """The solvated dipeptide with HMR + HBonds, serialized; positions and velocities after 10 ps of
    OpenMM dynamics at 300 K."""
    forcefield = app.ForceField("amber14-all.xml", "amber14/tip3pfb.xml")
    pdb = app.PDBFile(DIPEPTIDE)
    modeller = app.Modeller(pdb.topology, pdb.positions)
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(1.8, 1.8, 1.8) * unit.nanometer)
    openmm_system = forcefield.createSystem(
        modeller.topology,
        nonbondedMethod=app.PME,
        nonbondedCutoff=0.8 * unit.nanometer,
        constraints=app.HBonds,
        rigidWater=True,
        hydrogenMass=3 * unit.amu,
    )
    directory = tmp_path_factory.mktemp("hmr")
    xml, pdb_path = directory / "system.xml", directory / "solvated.pdb"
    xml.write_text(openmm.XmlSerializer.serialize(openmm_system))
    with open(pdb_path, "w") as handle:
        app.PDBFile.writeFile(modeller.topology, modeller.positions, handle)
    integrator = openmm.LangevinMiddleIntegrator(TEMPERATURE, FRICTION, DT)
    integrator.setRandomNumberSeed(1)
    context = _context(openmm_system, integrator)
    context.setPositions(modeller.positions)
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 0)
    context.setVelocitiesToTemperature(TEMPERATURE, 1)
    integrator.step(2500)  # 10 ps: after 2 ps the box is still warming (about 291 K over the next 1.6 ps)
    state = context.getState(getPositions=True, getVelocities=True)
    return {
        "openmm_system": openmm_system,
        "topology": app.PDBFile(str(pdb_path)).topology,  # names and numbers as in the PDB file
        "xml": xml,
        "pdb": pdb_path,
        "positions": state.getPositions(asNumpy=True).value_in_unit(unit.nanometer),
        "velocities": state.getVelocities(asNumpy=True).value_in_unit(unit.nanometer / unit.picosecond),
    }


def _context(openmm_system, integrator):
    platform = openmm.Platform.getPlatformByName("CPU")
    return openmm.Context(openmm_system, integrator, platform, {"Threads": "1"})


def _openmm_masses(openmm_system):
    masses = [openmm_system.getParticleMass(i) for i in range(openmm_system.getNumParticles())]
    return torch.tensor([mass.value_in_unit(unit.dalton) for mass in masses], dtype=torch.float64)


def _openmm_constraints(openmm_system):
    rows = [openmm_system.getConstraintParameters(i) for i in range(openmm_system.getNumConstraints())]
    pairs = torch.tensor([row[:2] for row in rows])
    distances = torch.tensor([row[2].value_in_unit(unit.nanometer) for row in rows], dtype=torch.float64)
    return pairs, distances


def _degrees_of_freedom(openmm_system):
    return 3 * openmm_system.getNumParticles() - openmm_system.getNumConstraints() - 3


def _simulation(case, system, forcefield, friction=FRICTION, **options):
    system = system.replace(
        positions=torch.tensor(case["positions"]), velocities=torch.tensor(case["velocities"])
    )
    integrator = ms.integrators.LangevinMiddle(dt=DT, temperature=TEMPERATURE, friction=friction)
    options.setdefault("seed", 3)
    return ms.Simulation(system, forcefield, integrator, progress=False, **options)


def _max_constraint_error(positions, pairs, distances):
    lengths = torch.linalg.vector_norm(positions[pairs[:, 1]] - positions[pairs[:, 0]], dim=-1)
    return float(((lengths - distances) / distances).abs().max())


def _run_spread(*groups):
    """The spread (standard deviation) of one run's mean, pooled over groups of runs that may differ in
    their expectation; its degrees of freedom are the number of runs minus the number of groups.

    It is measured between whole runs, not estimated inside one: the potential energy of the box moves on
    a time scale of several ps, so within a 4 ps run neither pymbar's statistical inefficiency nor block
    means see it. Their estimates of the error of one run's mean potential energy were 12-43 kJ/mol, mostly
    under 20; eight runs from one state spread by 50 (ours) and 64 (OpenMM's), and single-run comparisons
    had failed at 4-5 of their estimated errors."""
    squares = sum(((group - group.mean()) ** 2).sum() for group in groups)
    return np.sqrt(squares / (sum(len(group) for group in groups) - len(groups)))


def _openmm_samples(openmm_system, positions, velocities, steps, every, seed):
    """OpenMM's LangevinMiddleIntegrator (CPU platform, random seed ``seed``) from the same state:
    every ``every`` steps the kinetic temperature of its velocities projected on the constraints by OpenMM
    (``applyVelocityConstraints`` in a second Context), the potential energy and the energy of
    the heavy-atom bonds (the only HarmonicBondForce terms left by HBonds)."""
    openmm_system = openmm.XmlSerializer.clone(openmm_system)
    for force in openmm_system.getForces():
        force.setForceGroup(1 if isinstance(force, openmm.HarmonicBondForce) else 0)
    integrator = openmm.LangevinMiddleIntegrator(TEMPERATURE, HMR_FRICTION, DT)
    integrator.setRandomNumberSeed(seed)
    context = _context(openmm_system, integrator)
    context.setPositions(positions)
    context.setVelocities(velocities)
    projector = openmm.VerletIntegrator(DT)
    projector.setConstraintTolerance(1e-8)
    projection = _context(openmm_system, projector)
    masses = _openmm_masses(openmm_system).numpy()[:, None]
    kinetic_to_temperature = 1.0 / (_degrees_of_freedom(openmm_system) * KB)
    temperatures, potentials, bonds = [], [], []
    for _ in range(steps // every):
        integrator.step(every)
        state = context.getState(getPositions=True, getVelocities=True, getEnergy=True)
        projection.setPositions(state.getPositions())
        projection.setVelocities(state.getVelocities())
        projection.applyVelocityConstraints(1e-8)
        projected = projection.getState(getVelocities=True).getVelocities(asNumpy=True)
        projected = projected.value_in_unit(unit.nanometer / unit.picosecond)
        temperatures.append(float((masses * projected**2).sum()) * kinetic_to_temperature)
        potentials.append(state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole))
        bond = context.getState(getEnergy=True, groups={1}).getPotentialEnergy()
        bonds.append(bond.value_in_unit(unit.kilojoule_per_mole))
    return temperatures, potentials, bonds


@pytest.mark.slow
def test_hmr_hbonds_at_4fs_through_load_agrees_with_openmm(hmr_case):
    """LangevinMiddle at 4 fs on the HMR + HBonds System samples as OpenMM's LangevinMiddleIntegrator.

    The friction is 10/ps: the kinetic temperature of the box then decorrelates in about 0.05 ps
    (0.5-1 ps at 1/ps), and the random kick of the O step along the constraints (what the
    constraint handling must get right) is ten times larger than at 1/ps. From the same state,
    ``HMR_RUNS`` runs of ours and ``HMR_REFERENCE_RUNS`` of OpenMM's (4 ps each, other random
    seeds) give one mean per run of: the kinetic temperature, the potential energy and the energy
    of the nine heavy-atom bonds (stiff: the C=O stretch has a period of about 20 fs, five steps).
    Our run means and OpenMM's must have the same expectation (a two-sample t test on the
    spread between runs, see ``_run_spread``), and our temperatures the bath's. Run means of the
    temperature spread by about 2.5 K: our integrator at a bath of 290 or 310 K fails the test
    (t = 5.8), one at 306 K passes it.

    OpenMM's own ``getKineticEnergy`` is that of its stored velocities, which keep a component
    along the constraints (from the O step's random kick and the centripetal part of the
    constraint correction; our step removes it, OpenMM's next constrained kick does, so the
    positions are the same); at 10/ps it reads 3.4 K above the kinetic temperature of the
    constrained degrees of freedom. OpenMM's
    velocities are therefore projected on the constraints, by OpenMM, before comparing.
    """
    openmm_system = hmr_case["openmm_system"]
    pairs, distances = _openmm_constraints(openmm_system)
    every = 4
    ours, worst = [], 0.0
    for seed in range(1, HMR_RUNS + 1):
        system, forcefield = load(hmr_case["xml"], hmr_case["pdb"])
        simulation = _simulation(hmr_case, system, forcefield, friction=HMR_FRICTION, seed=seed)
        if seed == 1:
            assert simulation.precision.compute == torch.float32  # mixed precision by default
            assert torch.equal(simulation.masses, _openmm_masses(openmm_system))
            # CH3 gave 3 x 1.992
            assert float(simulation.masses[1]) == pytest.approx(12.01 - 3 * (3.0 - 1.008))
            assert simulation.constraints.n_constraints == openmm_system.getNumConstraints()
            assert simulation.degrees_of_freedom == _degrees_of_freedom(openmm_system)
        bonds = simulation.forcefield["HarmonicBond"]
        assert len(bonds) == 9  # the heavy-atom bonds: HBonds removed the others
        temperatures, potentials, bond_energies = [], [], []
        for _ in range(HMR_STEPS // every):
            simulation.run(every)
            values = simulation.observables(pressure=False)
            temperatures.append(values["temperature"])
            potentials.append(values["potential"])
            positions = simulation.state.positions
            bond_energies.append(float(bonds(positions.to(simulation.precision.compute), None)))
            worst = max(worst, _max_constraint_error(positions, pairs, distances))
        ours.append([np.mean(temperatures), np.mean(potentials), np.mean(bond_energies)])
    assert worst < 1e-5

    start = (openmm_system, hmr_case["positions"], hmr_case["velocities"])
    theirs = [
        np.mean(_openmm_samples(*start, HMR_STEPS, every, seed=100 + seed), axis=1)
        for seed in range(HMR_REFERENCE_RUNS)
    ]
    ours, theirs = np.array(ours), np.array(theirs)
    # Student t statistics on HMR_RUNS + HMR_REFERENCE_RUNS - 2 degrees of freedom
    for column, name in enumerate(("temperature", "potential", "heavy-atom bond energy")):
        spread = _run_spread(ours[:, column], theirs[:, column])
        statistic = (ours[:, column].mean() - theirs[:, column].mean()) / (
            spread * np.sqrt(1 / HMR_RUNS + 1 / HMR_REFERENCE_RUNS)
        )
        assert abs(statistic) < HMR_BOUND, (name, ours[:, column], theirs[:, column], statistic)
    spread = _run_spread(ours[:, 0], theirs[:, 0])
    statistic = (ours[:, 0].mean() - TEMPERATURE) / (spread / np.sqrt(HMR_RUNS))
    assert abs(statistic) < HMR_BOUND, ("temperature against the bath", ours[:, 0], statistic)


def test_langevin_middle_steps_as_openmm_with_hmr_and_hbonds(hmr_case):
    """With a negligible friction (noise of about 1e-9 nm per step) LangevinMiddle is deterministic,
    and 10 steps of 4 fs from the same state give the positions of OpenMM's LangevinMiddleIntegrator
    (Reference platform, double): the same kick, half drifts and constraint corrections. Our
    velocities are OpenMM's projected on the constraints (OpenMM leaves the part along them to
    the next step's constrained kick), so our kinetic energy is OpenMM's minus that part."""
    openmm_system = hmr_case["openmm_system"]
    system, forcefield = load(hmr_case["xml"], hmr_case["pdb"])
    steps, friction = 10, 1e-9
    simulation = _simulation(hmr_case, system, forcefield, friction=friction, precision="double",
                             constraint_tolerance=TIGHT)
    simulation.run(steps)
    integrator = openmm.LangevinMiddleIntegrator(TEMPERATURE, friction, DT)
    integrator.setConstraintTolerance(TIGHT)
    integrator.setRandomNumberSeed(5)
    context = openmm.Context(openmm_system, integrator, openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(hmr_case["positions"])
    context.setVelocities(hmr_case["velocities"])
    integrator.step(steps)
    state = context.getState(getPositions=True, getVelocities=True, getEnergy=True)
    positions = torch.tensor(state.getPositions(asNumpy=True).value_in_unit(unit.nanometer))
    velocities = state.getVelocities(asNumpy=True)
    velocities = torch.tensor(velocities.value_in_unit(unit.nanometer / unit.picosecond))
    # atoms moved up to 0.11 nm; both constrain to TIGHT: measured 8e-6 to 2e-5 nm from four starting states
    # (the simulation started with the waters whose centre lay outside the box moved in by a box vector)
    difference = ms.space.minimum_image(simulation.state.positions - positions, simulation.state.box)
    assert float(difference.abs().max()) < 5e-5
    context.applyVelocityConstraints(TIGHT)
    projected = context.getState(getVelocities=True).getVelocities(asNumpy=True)
    projected = torch.tensor(projected.value_in_unit(unit.nanometer / unit.picosecond))
    # measured from four starting states: 4e-5 to 1e-4 nm/ps from the projected velocities (at the default
    # tolerance 6e-5 to 1.3e-4, and once 6.2e-4 in a full run), 0.57 nm/ps from the stored ones
    assert float((simulation.state.velocities - projected).abs().max()) < 5e-4
    assert float((velocities - projected).abs().max()) > 0.05
    masses = _openmm_masses(openmm_system)[:, None]
    ours = simulation.observables(pressure=False)["kinetic"]
    assert ours == pytest.approx(0.5 * float((masses * projected**2).sum()), rel=1e-5)
    assert ours < state.getKineticEnergy().value_in_unit(unit.kilojoule_per_mole)


def test_readme_path_from_pdb_and_from_openmm_takes_the_systems_masses(hmr_case):
    openmm_system = hmr_case["openmm_system"]
    system = ms.System.from_pdb(hmr_case["pdb"])  # element masses
    assert float(system.masses[0]) == pytest.approx(1.008, abs=1e-3)
    forcefield = from_openmm(openmm_system)
    simulation = _simulation(hmr_case, system, forcefield)
    assert torch.equal(simulation.masses, _openmm_masses(openmm_system))
    loaded = _simulation(hmr_case, *load(hmr_case["xml"], hmr_case["pdb"]))
    simulation.run(25)
    loaded.run(25)
    # the same masses, constraints and forces: the same trajectory as through load()
    assert torch.equal(simulation.state.positions, loaded.state.positions)
    pairs, distances = _openmm_constraints(openmm_system)
    assert _max_constraint_error(simulation.state.positions, pairs, distances) < 1e-5


def test_constraints_that_contradict_the_system_name_the_bond(hmr_case):
    openmm_system, topology = hmr_case["openmm_system"], hmr_case["topology"]
    system, forcefield = load(hmr_case["xml"], hmr_case["pdb"])
    pairs, distances = _openmm_constraints(openmm_system)
    first = f"{_atom(topology, int(pairs[0, 0]))} and {_atom(topology, int(pairs[0, 1]))}"
    # OpenMM removed the bond terms of constrained bonds: running them free must be refused
    for choice in ("none", "water"):
        with pytest.raises(ConfigurationError) as error:
            _simulation(hmr_case, system, forcefield, constraints=choice)
        message = str(error.value)
        assert f"bond between {first} free" in message and f"{float(distances[0]):.6f} nm" in message, message
    # constraints at other distances than the System's
    stretched = distances * 1.02
    with pytest.raises(ConfigurationError) as error:
        _simulation(hmr_case, system, forcefield, constraints=Rattle(pairs, stretched))
    message = str(error.value)
    assert f"bond between {first} at {float(stretched[0]):.6f} nm" in message, message
    assert f"constrains it to {float(distances[0]):.6f} nm" in message, message
    # naming the System's own constraints is accepted, with the System's distances
    agreeing = _simulation(hmr_case, system, forcefield, constraints="water+hbonds")
    assert agreeing.constraints.n_constraints == openmm_system.getNumConstraints()
    chosen = dict(
        zip(
            map(tuple, agreeing.constraints.pairs().sort(dim=1).values.tolist()),
            agreeing.constraints.distances().tolist(),
            strict=True,
        )
    )
    expected = dict(zip(map(tuple, pairs.sort(dim=1).values.tolist()), distances.tolist(), strict=True))
    assert chosen.keys() == expected.keys()
    # the same distances (SETTLE's rounded to float32 as OpenMM rounds them)
    assert max(abs(chosen[key] - expected[key]) / expected[key] for key in expected) < 1e-7


@pytest.mark.slow
def test_overlap_named_at_set_up_and_the_minimiser_recovers_like_openmm(hmr_case):
    openmm_system, topology = hmr_case["openmm_system"], hmr_case["topology"]
    system, forcefield = load(hmr_case["xml"], hmr_case["pdb"])
    oxygens = [atom.index for atom in topology.atoms() if atom.residue.name == "HOH" and atom.name == "O"]
    first, second = oxygens[10], oxygens[50]
    positions = torch.tensor(hmr_case["positions"])
    # the second water becomes the first one inverted through its oxygen (a rigid water with the
    # hydrogens pointing away) and moved 0.01 nm along x: the two oxygens are the closest pair,
    # whatever orientations the waters had after the dynamics
    offset = torch.tensor([0.01, 0.0, 0.0], dtype=torch.float64)
    positions[second : second + 3] = 2 * positions[first] - positions[first : first + 3] + offset
    system = system.replace(positions=positions)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        simulation = ms.Simulation(
            system, forcefield, ms.integrators.LangevinMiddle(DT, TEMPERATURE, FRICTION), progress=False
        )
    messages = [str(w.message) for w in caught if issubclass(w.category, OverlapWarning)]
    pair = f"{_atom(topology, first)} and {_atom(topology, second)} are 0.0100 nm apart"
    assert len(messages) == 1 and pair in messages[0], messages
    assert simulation.overlaps[0][:2] == (first, second)
    with pytest.raises(OverlapError, match="minimize"):
        simulation.run(1)

    # 250 iterations: OpenMM's depth is passed after about 50 (measured on this box after 2 ps of
    # dynamics: -9359 kJ/mol after 50, -9594 after 200, OpenMM -9414); the 400 more that took it
    # to a 40 kJ/mol/nm force (where float32 energies stop the line search) made this test slow
    result = simulation.minimize(tolerance=10.0, max_iterations=250)
    assert simulation.overlaps == []
    assert result.max_force < 1e3, result  # from over 1e5 kJ/mol/nm at the overlap
    context = _context(openmm_system, openmm.VerletIntegrator(0.001))
    context.setPositions(positions.numpy())
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 0)
    reference = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    # OpenMM's energy at our minimum (our own energy is float32 forces, mixed precision)
    context.setPositions(simulation.state.positions.numpy())
    ours = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    assert ours == pytest.approx(result.energy, abs=2.0)
    # as deep as OpenMM's minimum (OpenMM's stops at 10 kJ/mol/nm; different local minima) ...
    assert ours < reference + 0.01 * abs(reference), (ours, reference)
    # ... and sane: near OpenMM's minimum of the same structure without the overlap
    context.setPositions(hmr_case["positions"])
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 0)
    undisturbed = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    assert abs(ours - undisturbed) < 0.05 * abs(undisturbed), (ours, undisturbed)
    pairs, distances = _openmm_constraints(openmm_system)
    assert _max_constraint_error(simulation.state.positions, pairs, distances) < 1e-5
    simulation.set_velocities(TEMPERATURE, seed=1)
    simulation.run(10)  # dynamics now starts


def test_precision_default_and_explicit_forcefield_dtype():
    from mindsponge.forcefield.bonded import HarmonicBond

    system = ms.System(
        torch.tensor([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0]], dtype=torch.float64), torch.tensor([12.0, 16.0])
    )

    def forcefield():
        bond = HarmonicBond(torch.tensor([[0, 1]]), torch.tensor([0.12]), torch.tensor([1000.0]))
        return ms.ForceField([bond])

    integrator = ms.integrators.VelocityVerlet(0.001)
    default = ms.Simulation(system, forcefield(), integrator, progress=False)
    assert (default.precision.compute, default.precision.accumulate) == (torch.float32, torch.float64)
    assert default.state.forces.dtype == torch.float64 and default.state.positions.dtype == torch.float64
    honoured = ms.Simulation(system, forcefield().to(torch.float64), integrator, progress=False)
    assert honoured.precision.compute == torch.float64
    doubled = ms.Simulation(system, forcefield().double(), integrator, progress=False)
    assert doubled.precision.compute == torch.float64
    with pytest.raises(ConfigurationError, match=r"forcefield.to\(torch.float32\).*float64"):
        ms.Simulation(system, forcefield().to(torch.float32), integrator, precision="double", progress=False)
    with pytest.raises(ConfigurationError, match=r"float32"):
        ms.Simulation(system, forcefield().float(), integrator, precision="double", progress=False)


def test_command_line_hydrogen_mass(tmp_path):
    from mindsponge.cli import run

    config, output = tmp_path / "run.toml", tmp_path / "out"
    config.write_text(
        f"""
steps = 5
constraints = "hbonds"
minimize_tolerance = 50.0

[system]
pdb = "{DIPEPTIDE}"

[forcefield]
files = ["amber14-all.xml"]
nonbonded_method = "NoCutoff"
hydrogen_mass = 3.0

[integrator]
dt = 0.004

[output]
directory = "{output}"
report_every = 5
"""
    )
    simulation = run(config, progress=False)
    pdb = app.PDBFile(DIPEPTIDE)
    openmm_system = app.ForceField("amber14-all.xml").createSystem(
        pdb.topology, nonbondedMethod=app.NoCutoff, constraints=app.HBonds, hydrogenMass=3 * unit.amu
    )
    assert torch.equal(simulation.masses, _openmm_masses(openmm_system))
    hydrogens = [atom.index for atom in pdb.topology.atoms() if atom.element.symbol == "H"]
    assert torch.all(simulation.masses[hydrogens] == 3.0)
    assert simulation.constraints.n_constraints == openmm_system.getNumConstraints() == len(hydrogens)
    pairs, distances = _openmm_constraints(openmm_system)
    assert _max_constraint_error(simulation.state.positions, pairs, distances) < 1e-5
