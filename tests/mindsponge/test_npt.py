"""Constant pressure as OpenMM runs it: molecules with virtual sites, the System's own barostat, positions
anywhere, and a box that shrinks too far.

- A 4-site (TIP4P-Ew) and a 5-site (TIP5P) water is one molecule with its massless sites, as OpenMM's
  ``Context.getMolecules`` counts it; the Monte Carlo barostat's ``N kT ln(V'/V)`` counts waters, not
  particles. Counting every site as a molecule of its own had made a TIP4P-Ew box 3-6 % too light.
- TIP4P-Ew water under the System's ``MonteCarloBarostat`` reaches OpenMM CPU's density within four
  combined standard errors (statistical inefficiency by pymbar). CI runs 150 waters for 100 ps on each
  side; ``MINDSPONGE_NPT_FULL=1`` runs 216 waters for 300 ps. Four, not three: the box volume decorrelates
  over tens of picoseconds, and pymbar's inefficiency from a series this short is low. Measured on 150
  waters (2026-12-05): 32 ps windows of 200 ps runs gave inefficiencies of 12-117 where the whole runs
  gave 52-109, and standard errors of 0.002-0.01 g/cm^3 where the windows' means spread by 0.004-0.008;
  one 40 ps comparison came out 3.3 "standard errors" apart (ours 0.9895, OpenMM 1.0098) while five
  200 ps runs of ours (0.9913-0.9998, mean 0.9949) and four of OpenMM's (0.9882-0.9983, mean 0.9935)
  agree.
- Positions written by OpenMM without ``enforcePeriodicBox`` (molecules several box lengths away) load
  and give OpenMM's energy.
- A barostat that shrinks the box below twice the cutoff stops the run like a blow-up, naming the step,
  the barostat and the box, with the last good state in the checkpoint.
"""

import os

import numpy as np
import pytest
import torch

import mindsponge as ms
from mindsponge import barostats
from mindsponge.simulation import SimulationBlowUpError

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402

FULL = os.environ.get("MINDSPONGE_NPT_FULL") == "1"
TEMPERATURE, PRESSURE = 300.0, 1.0
ERRORS_APART = 4  # how many combined standard errors two densities may differ by (see the module's notes)


def _solvent(model, boxsize=2.0):
    """A box of ``model`` water from OpenMM's Modeller, written and read back through a PDB and the System."""
    files = {"tip4pew": "tip4pew.xml", "tip5p": "tip5p.xml"}[model]
    forcefield = app.ForceField(files)
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(
        forcefield, model=model, boxSize=openmm.Vec3(boxsize, boxsize, boxsize) * unit.nanometer
    )
    openmm_system = forcefield.createSystem(
        modeller.topology, nonbondedMethod=app.PME, nonbondedCutoff=0.7 * unit.nanometer
    )
    openmm_system.addForce(openmm.MonteCarloBarostat(PRESSURE, TEMPERATURE, 25))
    return modeller, openmm_system


@pytest.mark.parametrize("model", ["tip4pew", "tip5p"])
def test_water_with_virtual_sites_is_one_molecule(tmp_path, model):
    modeller, openmm_system = _solvent(model)
    pdb, xml = tmp_path / "water.pdb", tmp_path / "system.xml"
    with open(pdb, "w") as handle:
        app.PDBFile.writeFile(modeller.topology, modeller.positions, handle)
    xml.write_text(openmm.XmlSerializer.serialize(openmm_system))
    system, forcefield = ms.interop.openmm.load(str(xml), str(pdb))
    n_waters = modeller.topology.getNumResidues()
    simulation = ms.Simulation(
        system,
        forcefield,
        ms.integrators.LangevinMiddle(0.002, TEMPERATURE, 1.0),
        progress=False,
        overlap_distance=None,
    )
    assert isinstance(simulation.barostat, barostats.MonteCarloBarostat)  # the System's, used by default
    assert simulation.barostat.pressure == PRESSURE and simulation.barostat.temperature == TEMPERATURE
    assert int(simulation.context.molecules.max()) + 1 == n_waters
    context = openmm.Context(
        openmm_system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    openmm_molecules = [sorted(molecule) for molecule in context.getMolecules()]
    ours = [
        sorted(np.nonzero(simulation.molecules.numpy() == index)[0].tolist()) for index in range(n_waters)
    ]
    assert sorted(ours) == sorted(openmm_molecules)


def _mean_and_error(series):
    from pymbar import timeseries

    values = np.asarray(series[len(series) // 5 :])  # the first fifth as equilibration
    inefficiency = timeseries.statistical_inefficiency(values)
    return values.mean(), values.std() * np.sqrt(inefficiency / len(values))


def _densities(system, openmm_system, steps, label, validation_figure):
    """Mean densities (g/cm^3) and the combined standard error, ours and OpenMM CPU's, from the same start
    and protocol (minimised, Langevin 2 fs at 300 K, the System's barostat every 25 steps)."""
    forcefield = ms.interop.openmm.from_openmm(openmm_system)
    simulation = ms.Simulation(
        system, forcefield, ms.integrators.LangevinMiddle(0.002, TEMPERATURE, 1.0), progress=False, seed=3
    )
    simulation.minimize()
    simulation.set_velocities(TEMPERATURE, seed=3)
    ours = []
    for _ in range(steps // 25):
        simulation.run(25)
        ours.append(simulation.observables(pressure=False)["density"])
    integrator = openmm.LangevinMiddleIntegrator(TEMPERATURE, 1.0, 0.002)
    integrator.setRandomNumberSeed(3)
    context = openmm.Context(
        openmm_system, integrator, openmm.Platform.getPlatformByName("CPU"), {"Threads": "1"}
    )  # one thread: the same run every time on a machine
    context.setPeriodicBoxVectors(*system.box.numpy())
    context.setPositions(simulation.system.positions.numpy())
    openmm.LocalEnergyMinimizer.minimize(context)
    context.setVelocitiesToTemperature(TEMPERATURE, 3)
    mass = float(simulation.masses.sum())
    reference = []
    for _ in range(steps // 25):
        integrator.step(25)
        volume = context.getState().getPeriodicBoxVolume().value_in_unit(unit.nanometer**3)
        reference.append(mass / volume * 1.66053906660e-3)  # amu/nm^3 -> g/cm^3
    mean, error = _mean_and_error(ours)
    reference_mean, reference_error = _mean_and_error(reference)
    combined = float(np.hypot(error, reference_error))
    validation_figure(
        f"{label}, {steps * 0.002:.0f} ps each: {mean:.4f} +- {error:.4f} g/cm^3, OpenMM CPU "
        f"{reference_mean:.4f} +- {reference_error:.4f}, {abs(mean - reference_mean) / combined:.1f} "
        "combined standard errors apart"
    )
    return mean, reference_mean, combined


@pytest.mark.slow
def test_tip4pew_density_matches_openmm(validation_figure):
    n_waters, steps = (216, 150_000) if FULL else (150, 50_000)
    system = ms.build.water_box(n_molecules=n_waters, model="tip4pew", seed=5)
    openmm_system = app.ForceField("tip4pew.xml").createSystem(
        system.topology.to_openmm(system.box), nonbondedMethod=app.PME, nonbondedCutoff=0.7 * unit.nanometer
    )
    openmm_system.addForce(openmm.MonteCarloBarostat(PRESSURE, TEMPERATURE, 25))
    mean, reference, combined = _densities(
        system, openmm_system, steps, f"{n_waters} TIP4P-Ew", validation_figure
    )
    assert abs(mean - reference) < ERRORS_APART * combined
    assert combined < 0.01  # tells a 4 % error for certain, and a 3 % one (what the sites counted as
    # molecules gave) at the 0.006 measured


@pytest.mark.slow
def test_tip4pew_peptide_box_density_matches_openmm(tmp_path, validation_figure):
    """Alanine dipeptide in TIP4P-Ew with 0.15 M NaCl (HBonds, PME 0.9 nm), the kind of box the report of
    the molecule count came from (0.966 g/cm^3 against OpenMM's 1.020 when the sites counted as molecules)."""
    steps = 50_000 if FULL else 20_000
    pdb = app.PDBFile(os.path.join(os.path.dirname(__file__), "data", "alanine_dipeptide.pdb"))
    forcefield = app.ForceField("amber14-all.xml", "amber14/tip4pew.xml")
    modeller = app.Modeller(pdb.topology, pdb.positions)
    size = openmm.Vec3(2.2, 2.2, 2.2) * unit.nanometer
    modeller.addSolvent(forcefield, model="tip4pew", boxSize=size, ionicStrength=0.15 * unit.molar)
    openmm_system = forcefield.createSystem(
        modeller.topology,
        nonbondedMethod=app.PME,
        nonbondedCutoff=0.9 * unit.nanometer,
        constraints=app.HBonds,
    )
    openmm_system.addForce(openmm.MonteCarloBarostat(PRESSURE, TEMPERATURE, 25))
    path, xml = tmp_path / "box.pdb", tmp_path / "system.xml"
    with open(path, "w") as handle:
        app.PDBFile.writeFile(modeller.topology, modeller.positions, handle)
    xml.write_text(openmm.XmlSerializer.serialize(openmm_system))
    system, _ = ms.interop.openmm.load(str(xml), str(path))
    label = f"dipeptide in TIP4P-Ew + NaCl ({system.n_atoms} particles)"
    mean, reference, combined = _densities(system, openmm_system, steps, label, validation_figure)
    assert abs(mean - reference) < ERRORS_APART * combined
    assert combined < 0.012


def test_positions_as_openmm_writes_them_load_and_give_openmms_energy(tmp_path):
    """Molecules moved by several box vectors (an unwrapped trajectory frame) load and run."""
    modeller, openmm_system = _solvent("tip4pew")
    box = np.asarray(modeller.topology.getPeriodicBoxVectors().value_in_unit(unit.nanometer))
    positions = np.asarray(modeller.positions.value_in_unit(unit.nanometer))
    generator = np.random.default_rng(0)
    for residue in modeller.topology.residues():  # each water somewhere among the periodic images
        atoms = [atom.index for atom in residue.atoms()]
        positions[atoms] += generator.integers(-4, 5, size=3) @ box
    pdb, xml = tmp_path / "unwrapped.pdb", tmp_path / "system.xml"
    with open(pdb, "w") as handle:
        app.PDBFile.writeFile(modeller.topology, positions * unit.nanometer, handle)
    xml.write_text(openmm.XmlSerializer.serialize(openmm_system))
    system, forcefield = ms.interop.openmm.load(str(xml), str(pdb))
    assert float(np.abs(system.positions.numpy()).max()) > 3 * box[0, 0]
    context = openmm.Context(
        openmm_system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    context.setPositions(app.PDBFile(str(pdb)).positions)
    context.computeVirtualSites()  # as an integrator does: the sites follow their parents
    reference = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    energy = float(ms.energy_and_forces(forcefield, system.positions, system.box)[0])
    assert abs(energy - reference) < 1e-6 * abs(reference)
    simulation = ms.Simulation(
        system,
        forcefield,
        ms.integrators.LangevinMiddle(0.002, TEMPERATURE, 1.0),
        progress=False,
        precision="double",
        overlap_distance=None,
    )
    fractional = ms.space.fractional(simulation.state.positions, simulation.state.box)
    assert float(fractional.min()) > -0.2 and float(fractional.max()) < 1.2  # wrapped by molecule
    simulation.run(20)


def test_a_box_shrunk_below_the_cutoff_stops_with_the_step_barostat_and_box(tmp_path):
    system = ms.build.water_box(n_molecules=60, model="tip4pew", seed=1)  # about 1.22 nm across
    openmm_system = app.ForceField("tip4pew.xml").createSystem(
        system.topology.to_openmm(system.box), nonbondedMethod=app.PME, nonbondedCutoff=0.58 * unit.nanometer
    )
    forcefield = ms.interop.openmm.from_openmm(openmm_system)
    path = tmp_path / "run.chk"
    crushing = barostats.MonteCarloBarostat(50_000.0, TEMPERATURE, every=5)
    simulation = ms.Simulation(
        system,
        forcefield,
        ms.integrators.LangevinMiddle(0.002, TEMPERATURE, 1.0),
        barostat=crushing,
        checkpoint=path,
        checkpoint_every=10**6,
        progress=False,
    )
    simulation.set_velocities(TEMPERATURE, seed=1)
    with pytest.raises(
        SimulationBlowUpError, match=r"step (\d+).*MonteCarloBarostat shrank the box"
    ) as error:
        simulation.run(20_000)
    step = error.value.step
    assert step % 5 == 0 and "nm" in str(error.value)
    restored = ms.Simulation(
        system,
        forcefield,
        ms.integrators.LangevinMiddle(0.002, TEMPERATURE, 1.0),
        barostat=crushing,
        progress=False,
    )
    restored.load_checkpoint(path)
    assert restored.state.step == step and torch.equal(restored.state.box, simulation.state.box)
    assert 2 * 0.58 <= float(torch.diagonal(restored.state.box).min())


@pytest.mark.parametrize(
    ("force", "message"),
    [
        (lambda: openmm.AndersenThermostat(300.0, 1.0), "LangevinMiddle"),
        (
            lambda: openmm.MonteCarloMembraneBarostat(
                1.0,
                0.0,
                300.0,
                openmm.MonteCarloMembraneBarostat.XYIsotropic,
                openmm.MonteCarloMembraneBarostat.ZFree,
            ),
            "MonteCarloAnisotropicBarostat",
        ),
    ],
    ids=["andersen", "membrane"],
)
def test_refused_forces_say_what_to_use_instead(force, message):
    openmm_system = openmm.System()
    openmm_system.addParticle(12.0)
    openmm_system.addForce(force())
    with pytest.raises(ms.interop.openmm.UnsupportedOpenMMForceError, match=message):
        ms.interop.openmm.from_openmm(openmm_system)


def test_a_drude_system_is_refused_as_drude_before_its_other_forces_are_read():
    openmm_system = openmm.System()
    for _ in range(3):
        openmm_system.addParticle(12.0)
    nonbonded = openmm.NonbondedForce()  # no cutoff, but switching asked for: not the error to report
    nonbonded.setNonbondedMethod(openmm.NonbondedForce.NoCutoff)
    nonbonded.setUseSwitchingFunction(True)
    for _ in range(3):
        nonbonded.addParticle(0.0, 0.3, 0.5)
    openmm_system.addForce(nonbonded)
    drude = openmm.DrudeForce()
    drude.addParticle(1, 0, -1, -1, -1, -1.0, 0.001, 1.0, 1.0)
    openmm_system.addForce(drude)
    with pytest.raises(
        ms.interop.openmm.UnsupportedOpenMMForceError, match=r"force 1 \(DrudeForce.*Drude polarisable"
    ):
        ms.interop.openmm.from_openmm(openmm_system)


def test_anisotropic_barostat_and_center_of_mass_remover_of_the_system_are_used():
    modeller, openmm_system = _solvent("tip4pew")
    openmm_system.removeForce(
        [type(force).__name__ for force in openmm_system.getForces()].index("MonteCarloBarostat")
    )
    openmm_system.addForce(
        openmm.MonteCarloAnisotropicBarostat(
            openmm.Vec3(1.0, 2.0, 3.0) * unit.bar, 310.0, False, True, True, 10
        )
    )
    forcefield = ms.interop.openmm.from_openmm(openmm_system)
    assert isinstance(forcefield.barostat, barostats.MonteCarloAnisotropicBarostat)
    assert forcefield.barostat.pressure == (1.0, 2.0, 3.0) and forcefield.barostat.every == 10
    assert forcefield.barostat.scale_x is False and forcefield.barostat.scale_y is True
    assert forcefield.remove_center_of_mass_motion is True
    without = [
        index
        for index, force in enumerate(openmm_system.getForces())
        if isinstance(force, openmm.CMMotionRemover)
    ]
    openmm_system.removeForce(without[0])
    assert ms.interop.openmm.from_openmm(openmm_system).remove_center_of_mass_motion is False
