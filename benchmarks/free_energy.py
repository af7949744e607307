"""Hydration free energies: mindsponge against openmmtools (OpenMM CPU) and experiment; speed per window.

The same alchemical protocol on both sides, for a small GAFF molecule of openmmtools' data (p-xylene, the
ligand of ``T4-lysozyme-L99A-implicit``; ``--molecules`` adds toluene and benzene, from
``benzene-toluene-implicit``):

- systems: the molecule in a cubic box of TIP3P water (OpenMM's Modeller, ``amber14/tip3p.xml``; the
  molecule's GAFF parameters from its prmtop through ParmEd; waters within 0.25 nm of it removed; PME
  with OpenMM's default error tolerance, 0.9 nm cutoff, dispersion correction, bonds to hydrogen
  constrained, rigid water, about 1,700 atoms) and the molecule in vacuum (no cutoff); hydrogens of the
  molecule at 1.5 amu (mass repartitioning from their heavy atoms; waters untouched). The box is
  equilibrated once by OpenMM (minimised, 10 ps NPT at 1 bar); both engines then run NVT at that box;
- alchemical region: the molecule, openmmtools' ``AbsoluteAlchemicalFactory`` with its defaults (exact
  PME, soft-core alpha 0.5, a = b = 1, c = 6, electrostatics annihilated, sterics decoupled, the same
  convention in vacuum); 14 states: 5 electrostatics (1 -> 0) then 10 sterics (1 -> 0, the first
  shared), :func:`mindsponge.alchemy.lambda_schedule`;
- sampling: Hamiltonian replica exchange, one replica per state, ``swap-all`` mixing after every
  iteration of ``steps`` steps of Langevin dynamics (BAOAB / ``LangevinMiddleIntegrator``, 300 K,
  1/ps, 2 fs). Reference: ``openmmtools.multistate.ReplicaExchangeSampler`` with a move that runs
  OpenMM's ``LangevinMiddleIntegrator`` (OpenMM CPU platform, one thread); ours:
  :class:`mindsponge.replica_exchange.ReplicaExchange` over :func:`mindsponge.alchemy.force_fields_at`
  of :func:`mindsponge.alchemy.alchemical_force_field` (float32, the compiled step loop, one thread);
- analysis, the same for both: the reduced potentials of every sample in every state (``u_kn``, the
  energies each sampler computed after each iteration), the first ``burn_in`` iterations dropped, MBAR
  (:func:`mindsponge.alchemy.mbar`, pymbar 4); ``dG_hyd = dF_vacuum - dF_solvent`` where ``dF`` is the
  free energy of the decoupled state minus the coupled one (kcal/mol), errors MBAR's analytic ones
  added in quadrature. No long-range correction beyond PME's dispersion correction (both sides alike).

Experimental values: FreeSolv (D. L. Mobley and J. P. Guthrie, J. Comput. Aided Mol. Des. 28, 711-720
(2014)), the ``expt`` column: p-xylene (1,4-xylene) -0.80, toluene -0.90, benzene -0.87 kcal/mol.

Speed: ns/day per window = simulated time of all windows / wall time, from the production iterations
(the reduced-potential matrix and checkpoints included on both sides), and a short timing run of each
side on the solvent leg, idle and with one core kept busy by another process (``--no-speed`` skips it).
The ratio ours / OpenMM comes last.

Every leg and side caches its state under ``benchmarks/output/free_energy/<size>/<molecule>/``
(openmmtools' NetCDF storage, our checkpoint, the per-iteration wall times), saved after every
iteration, so a killed run continues where it stopped. The derived figures go to
``benchmarks/data/free_energy.json``, one dated entry per molecule: a run of other molecules adds to it.

Usage::

    .venv/bin/python benchmarks/free_energy.py [--quick] [--molecules p-xylene] [--no-speed]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import time

import numpy as np
import torch
from md_common import busy_core, print_load_average, report_kernels_and_load

TEMPERATURE = 300.0  # K
FRICTION = 1.0  # 1/ps
DT = 0.002  # ps
HYDROGEN_MASS = 1.5  # amu
CUTOFF = 0.9  # nm
BOX = 2.6  # nm, edge of the water box before equilibration
KJ_PER_KCAL = 4.184
ELECTROSTATICS, STERICS = 5, 10
SIZES = {
    "quick": {"iterations": 3, "steps": 50, "burn_in": 1, "equilibration": 500},
    "full": {"iterations": 40, "steps": 250, "burn_in": 4, "equilibration": 5000},
}
SPEED = {"iterations": 3, "steps": 50}  # the timing runs on the solvent leg, idle and one core busy
OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "output", "free_energy")
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "free_energy.json")

# FreeSolv (Mobley & Guthrie 2014), experimental hydration free energies, kcal/mol, with the
# openmmtools data files of the molecule (GAFF prmtop and coordinates)
MOLECULES = {
    "p-xylene": {
        "prmtop": "T4-lysozyme-L99A-implicit/ligand.prmtop",
        "coordinates": "T4-lysozyme-L99A-implicit/ligand.crd",
        "experiment": -0.80,
    },
    # benzene-toluene-implicit: tleap's "solvent" phase is toluene alone, its "receptor" benzene alone
    "toluene": {
        "prmtop": "benzene-toluene-implicit/solvent.prmtop",
        "coordinates": "benzene-toluene-implicit/solvent.inpcrd",
        "experiment": -0.90,
    },
    "benzene": {
        "prmtop": "benzene-toluene-implicit/receptor.prmtop",
        "coordinates": "benzene-toluene-implicit/receptor.inpcrd",
        "experiment": -0.87,
    },
}


def _quiet():
    """Silence pymbar's and openmmtools' notices (JAX, timeseries) while importing and running them."""
    for name in ("pymbar", "openmmtools", "mpiplus"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return contextlib.redirect_stdout(io.StringIO())


def openmmtools_data(path: str) -> str:
    """Absolute path of a file in openmmtools' data folder."""
    import openmmtools

    return os.path.join(os.path.dirname(openmmtools.__file__), "data", path)


# --- systems ------------------------------------------------------------------------------------------
def ligand_structure(molecule: str):
    """The molecule's ParmEd structure (GAFF parameters, coordinates) from openmmtools' data."""
    import parmed

    entry = MOLECULES[molecule]
    return parmed.load_file(openmmtools_data(entry["prmtop"]), openmmtools_data(entry["coordinates"]))


def _repartition_hydrogens(openmm_system, structure, atoms) -> None:
    """Hydrogens among ``atoms`` to ``HYDROGEN_MASS``, taken from their bonded heavy atom (in place)."""
    from openmm import unit

    for bond in structure.bonds:
        first, second = bond.atom1, bond.atom2
        if first.idx not in atoms or second.idx not in atoms:
            continue
        if second.element == 1 and first.element != 1:
            first, second = second, first
        if first.element != 1 or second.element == 1:
            continue
        hydrogen = openmm_system.getParticleMass(first.idx).value_in_unit(unit.dalton)
        heavy = openmm_system.getParticleMass(second.idx).value_in_unit(unit.dalton)
        openmm_system.setParticleMass(first.idx, HYDROGEN_MASS)
        openmm_system.setParticleMass(second.idx, heavy - (HYDROGEN_MASS - hydrogen))


def vacuum_system(molecule: str):
    """``(openmm_system, topology, positions (N, 3) nm)`` of the molecule in vacuum."""
    from openmm import app

    structure = ligand_structure(molecule)
    system = structure.createSystem(nonbondedMethod=app.NoCutoff, constraints=app.HBonds,
                                    flexibleConstraints=False)
    _repartition_hydrogens(system, structure, set(range(len(structure.atoms))))
    return system, structure.topology, np.asarray(structure.coordinates) / 10.0


def solvated_structure(molecule: str):
    """The molecule (first) in a TIP3P box: a ParmEd structure, built by OpenMM's Modeller and ParmEd."""
    import openmm
    import parmed
    from openmm import app, unit

    ligand = ligand_structure(molecule)
    forcefield = app.ForceField("amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(BOX, BOX, BOX) * unit.nanometer)
    # flexible water so that ParmEd gets the O-H bond and H-O-H angle types it constrains (rigidWater below)
    water_system = forcefield.createSystem(modeller.topology, nonbondedMethod=app.PME, rigidWater=False)
    water = parmed.openmm.load_topology(modeller.topology, water_system, xyz=modeller.positions)
    waters = np.asarray(modeller.positions.value_in_unit(unit.nanometer))
    coordinates = np.asarray(ligand.coordinates) / 10.0
    ligand.coordinates = 10.0 * (coordinates - coordinates.mean(0) + waters.mean(0))
    combined = ligand + water
    positions = np.asarray(combined.coordinates) / 10.0
    count = len(ligand.atoms)
    overlapping = []
    for residue in combined.residues[1:]:
        atoms = [atom.idx for atom in residue.atoms]
        offsets = positions[atoms][:, None] - positions[:count][None]
        offsets -= BOX * np.round(offsets / BOX)
        if np.linalg.norm(offsets, axis=-1).min() < 0.25:
            overlapping.extend(atom.idx + 1 for atom in residue.atoms)
    combined.strip("@" + ",".join(str(index) for index in overlapping))
    combined.box = [10.0 * BOX] * 3 + [90.0] * 3
    return combined, count


def solvated_system(molecule: str, output: str, equilibration: int):
    """``(openmm_system, topology, positions (N, 3) nm, box (3, 3) nm, ligand atoms)`` of the solvated
    molecule after OpenMM's minimisation and ``equilibration`` steps of NPT (cached in ``output``)."""
    from openmm import app, unit

    structure, count = solvated_structure(molecule)
    system = structure.createSystem(nonbondedMethod=app.PME, nonbondedCutoff=CUTOFF * unit.nanometer,
                                    constraints=app.HBonds, rigidWater=True, flexibleConstraints=False)
    _repartition_hydrogens(system, structure, set(range(count)))
    positions, box = equilibrated(system, np.asarray(structure.coordinates) / 10.0, output, equilibration)
    return system, structure.topology, positions, box, list(range(count))


def equilibrated(system, positions, output: str, equilibration: int):
    """``(positions (N, 3) nm, box (3, 3) nm)`` after OpenMM's minimisation and ``equilibration`` steps of
    NPT at 1 bar (cached in ``output/equilibrated.npz``); sets the System's default box to it."""
    import openmm
    from openmm import unit

    path = os.path.join(output, "equilibrated.npz")
    if not os.path.exists(path):
        npt = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(system))
        npt.addForce(openmm.MonteCarloBarostat(1.0, TEMPERATURE, 25))
        integrator = openmm.LangevinMiddleIntegrator(TEMPERATURE, FRICTION, DT)
        integrator.setRandomNumberSeed(1)
        context = openmm.Context(npt, integrator, openmm.Platform.getPlatformByName("CPU"), {"Threads": "1"})
        context.setPositions(positions)
        openmm.LocalEnergyMinimizer.minimize(context, 10.0, 1000)
        context.setVelocitiesToTemperature(TEMPERATURE, 1)
        integrator.step(equilibration)
        state = context.getState(getPositions=True, getVelocities=True)
        box = np.asarray(state.getPeriodicBoxVectors(asNumpy=True).value_in_unit(unit.nanometer))
        positions = np.asarray(state.getPositions(asNumpy=True).value_in_unit(unit.nanometer))
        os.makedirs(output, exist_ok=True)
        np.savez(path + ".partial.npz", positions=positions, box=box)
        os.replace(path + ".partial.npz", path)
    with np.load(path) as data:
        positions, box = data["positions"], data["box"]
    system.setDefaultPeriodicBoxVectors(*(openmm.Vec3(*row) for row in box))
    return positions, box


def check_ligand_terms(solvated, vacuum, count: int) -> float:
    """Checks the molecule's terms in the solvated System against the vacuum System: the same charges and
    Lennard-Jones parameters, and the same bonded energies (bonds, angles, torsions: the change between two
    conformations). Returns the largest relative difference of those energies; AssertionError above 1e-9."""
    import openmm

    def parameters(system):
        force = next(f for f in system.getForces() if isinstance(f, openmm.NonbondedForce))
        return [tuple(x._value for x in force.getParticleParameters(i)) for i in range(count)]

    assert parameters(solvated) == parameters(vacuum), "the molecule's non-bonded parameters differ"
    # bonded terms never couple the molecule to water: the change of each bonded energy between two
    # conformations of the molecule (random ones, the waters anywhere) must be the same in both Systems
    generator = np.random.default_rng(0)
    conformations = [generator.normal(scale=0.3, size=(count, 3)) for _ in range(2)]
    waters = generator.uniform(0.0, 3.0, size=(solvated.getNumParticles() - count, 3))
    worst = 0.0
    for kind in (openmm.HarmonicBondForce, openmm.HarmonicAngleForce, openmm.PeriodicTorsionForce):
        changes = []
        for system in (solvated, vacuum):
            single = openmm.System()
            for index in range(system.getNumParticles()):
                single.addParticle(system.getParticleMass(index))
            force = next(f for f in system.getForces() if isinstance(f, kind))
            single.addForce(openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(force)))
            context = openmm.Context(single, openmm.VerletIntegrator(0.001),
                                     openmm.Platform.getPlatformByName("Reference"))
            energies = []
            for conformation in conformations:
                context.setPositions(conformation if system is vacuum else np.vstack([conformation, waters]))
                energies.append(context.getState(getEnergy=True).getPotentialEnergy()._value)
            changes.append(energies[1] - energies[0])
        worst = max(worst, abs(changes[0] - changes[1]) / max(1.0, abs(changes[1])))
    assert worst < 1e-9, f"the molecule's bonded energies differ by {worst} (relative)"
    return worst


# --- the reference: openmmtools -----------------------------------------------------------------------
def _langevin_middle_move():
    """An openmmtools MCMC move running OpenMM's ``LangevinMiddleIntegrator`` (the class is made here so that
    openmmtools is imported only when needed)."""
    import openmm
    from openmmtools import mcmc

    class LangevinMiddleMove(mcmc.BaseIntegratorMove):
        """``n_steps`` steps of ``openmm.LangevinMiddleIntegrator`` (300 K, 1/ps, 2 fs)."""

        def _get_integrator(self, thermodynamic_state):
            return openmm.LangevinMiddleIntegrator(thermodynamic_state.temperature, FRICTION, DT)

    LangevinMiddleMove.__module__ = __name__
    globals()["LangevinMiddleMove"] = LangevinMiddleMove  # openmmtools' storage finds it by name
    return LangevinMiddleMove


def _context_cache():
    import openmm
    from openmmtools import cache

    platform = openmm.Platform.getPlatformByName("CPU")
    return cache.ContextCache(capacity=None, time_to_live=None, platform=platform,
                              platform_properties={"Threads": "1"})


def run_openmmtools(openmm_system, positions, box, atoms, states, iterations, steps, directory,
                    carry: str | None = None) -> dict:
    """Replica exchange with openmmtools (continuing its storage in ``directory``): ``{"energies": (T, R, K)
    reduced, "replica_states": (T, R), "seconds": per-iteration wall times}``.

    ``carry``: a directory (inside the repository) that keeps the run's portable state: the replicas'
    positions, velocities, boxes and states, and every iteration's reduced potentials, written every
    :data:`CARRY_SECONDS` and when the run stops (``openmmtools_carry.npz``, a few MB). When it holds more
    iterations than ``directory`` (a new machine: no storage), the run continues from it: a fresh storage
    whose replicas start where the carried ones stopped, the earlier iterations' energies prepended."""
    with _quiet():
        from openmmtools import multistate

    os.makedirs(directory, exist_ok=True)
    storage = os.path.join(directory, "openmmtools.nc")
    timing = os.path.join(directory, "openmmtools_seconds.json")
    earlier_path = os.path.join(directory, "openmmtools_earlier.npz")  # the iterations before this storage
    carried = None if carry is None else os.path.join(carry, "openmmtools_carry.npz")
    seconds = json.load(open(timing)) if os.path.exists(timing) else []
    if carried is not None and os.path.exists(carried) and _iterations_in(carried) > len(seconds):
        for path in (storage, os.path.join(directory, "openmmtools_checkpoint.nc"), timing):
            if os.path.exists(path):
                os.remove(path)
        _write_atomically(earlier_path, lambda partial: _copy(carried, partial))
        seconds = []
    move_class = _langevin_middle_move()
    with _quiet():
        if os.path.exists(storage) and os.path.exists(timing):
            reporter = multistate.MultiStateReporter(storage, open_mode="a", checkpoint_interval=1)
            sampler = multistate.ReplicaExchangeSampler.from_storage(reporter)
        else:
            if os.path.exists(storage):
                os.remove(storage)  # created but no iteration finished: start again
            if not os.path.exists(earlier_path):
                seeds = [_sampler_state(positions, None, box)], None
            else:
                with np.load(earlier_path) as earlier:
                    seconds = earlier["seconds"].tolist()
                    seeds = ([_sampler_state(*replica) for replica in zip(
                        earlier["positions"], earlier["velocities"], earlier["boxes"])],
                        earlier["thermodynamic_states"].tolist())
            sampler = multistate.ReplicaExchangeSampler(mcmc_moves=move_class(n_steps=steps),
                                                        number_of_iterations=iterations,
                                                        replica_mixing_scheme="swap-all",
                                                        online_analysis_interval=None)
            reporter = multistate.MultiStateReporter(storage, checkpoint_interval=1)
            sampler.energy_context_cache = sampler.sampler_context_cache = _context_cache()
            sampler.create(_alchemical_states(openmm_system, atoms, states), seeds[0], storage=reporter,
                           initial_thermodynamic_states=seeds[1])
            json.dump(seconds, open(timing, "w"))
        earlier = _earlier_iterations(earlier_path)
        sampler.energy_context_cache = sampler.sampler_context_cache = _context_cache()
        sampler.number_of_iterations = max(sampler.number_of_iterations, iterations)
        last_carry = time.perf_counter()
        while len(earlier["energies"]) + sampler.iteration < iterations:
            start = time.perf_counter()
            sampler.run(n_iterations=1)
            seconds.append(time.perf_counter() - start)
            _write_atomically(timing, lambda partial: json.dump(seconds, open(partial, "w")))
            finished = len(earlier["energies"]) + sampler.iteration >= iterations
            if carried is not None and (finished or time.perf_counter() - last_carry > CARRY_SECONDS):
                _carry_openmmtools(carried, sampler, reporter, earlier, seconds)
                last_carry = time.perf_counter()
        energies, _, _ = reporter.read_energies()  # (T + 1, R, K) reduced, iteration 0: the start
        replica_states = reporter.read_replica_thermodynamic_states()  # (T + 1, R)
        reporter.close()
    energies = _after(earlier["energies"], np.asarray(energies)[1:])[:iterations]
    replica_states = _after(earlier["replica_states"], np.asarray(replica_states)[1:])[:iterations]
    return {"energies": energies, "replica_states": replica_states, "seconds": seconds[:iterations]}


#: how often (wall seconds) a run with ``carry=`` writes its portable state
CARRY_SECONDS = 600.0


def _alchemical_states(openmm_system, atoms, states) -> list:
    """openmmtools' compound thermodynamic states of ``states`` (lambdas) for the region ``atoms``."""
    from openmm import unit
    from openmmtools import alchemy
    from openmmtools import states as mmstates

    factory = alchemy.AbsoluteAlchemicalFactory()
    region = alchemy.AlchemicalRegion(alchemical_atoms=atoms)
    alchemical = factory.create_alchemical_system(openmm_system, region)
    reference = mmstates.ThermodynamicState(alchemical, TEMPERATURE * unit.kelvin)
    alchemical_state = alchemy.AlchemicalState.from_system(alchemical)
    thermodynamic_states = []
    for state in states:
        compound = mmstates.CompoundThermodynamicState(reference, [alchemical_state])
        compound.lambda_sterics = state.lambda_sterics
        compound.lambda_electrostatics = state.lambda_electrostatics
        thermodynamic_states.append(compound)
    return thermodynamic_states


def _sampler_state(positions, velocities, box):
    """An openmmtools ``SamplerState`` from nm, nm/ps and nm arrays (``None``: not set)."""
    from openmm import unit
    from openmmtools import states as mmstates

    state = mmstates.SamplerState(np.asarray(positions, dtype=np.float64) * unit.nanometer,
                                  box_vectors=None if box is None else np.asarray(box, dtype=np.float64)
                                  * unit.nanometer)
    if velocities is not None:
        state.velocities = np.asarray(velocities, dtype=np.float64) * unit.nanometer / unit.picosecond
    return state


def _earlier_iterations(path: str) -> dict:
    """The carried iterations a storage continues (none without ``path``): energies and states."""
    if not os.path.exists(path):
        return {"energies": np.zeros((0, 0, 0)), "replica_states": np.zeros((0, 0), dtype=int)}
    with np.load(path) as earlier:
        return {"energies": earlier["energies"], "replica_states": earlier["replica_states"]}


def _after(earlier: np.ndarray, later: np.ndarray) -> np.ndarray:
    """``later`` iterations appended to the ``earlier`` ones (which may be none)."""
    return np.concatenate([earlier, later]) if len(earlier) else later


def _carry_openmmtools(path, sampler, reporter, earlier, seconds) -> None:
    """Write the openmmtools run's portable state to ``path`` (see :func:`run_openmmtools`)."""
    from openmm import unit

    energies, _, _ = reporter.read_energies()
    replica_states = reporter.read_replica_thermodynamic_states()
    sampler_states, done = sampler.sampler_states, sampler.iteration + 1
    arrays = {
        "energies": _after(earlier["energies"], np.asarray(energies)[1:done]),
        "replica_states": _after(earlier["replica_states"], np.asarray(replica_states)[1:done]),
        "positions": np.array([s.positions.value_in_unit(unit.nanometer) for s in sampler_states]),
        "velocities": np.array([s.velocities.value_in_unit(unit.nanometer / unit.picosecond)
                                for s in sampler_states]),
        "boxes": np.array([s.box_vectors.value_in_unit(unit.nanometer) for s in sampler_states]),
        "thermodynamic_states": np.asarray(sampler._replica_thermodynamic_states),
        "seconds": np.asarray(seconds),
    }
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _write_atomically(path, lambda partial: np.savez_compressed(open(partial, "wb"), **arrays))


def _iterations_in(carried: str) -> int:
    """How many iterations a carried state holds (openmmtools' npz or our checkpoint's timing file)."""
    if carried.endswith(".npz"):
        with np.load(carried) as data:
            return len(data["seconds"])
    return len(json.load(open(carried)))


def _write_atomically(path: str, write) -> None:
    """``write(partial_path)`` then move the partial file to ``path``."""
    write(path + ".partial")
    os.replace(path + ".partial", path)


def _copy(source: str, destination: str) -> None:
    import shutil

    shutil.copyfile(source, destination)


# --- ours: mindsponge ---------------------------------------------------------------------------------
def run_mindsponge(openmm_system, topology, positions, box, atoms, states, iterations, steps,
                   directory, carry: str | None = None) -> dict:
    """Replica exchange with mindsponge (continuing its checkpoint in ``directory``): as
    :func:`run_openmmtools`; ``carry`` keeps a copy of the checkpoint and its timing file
    (``mindsponge.ckpt``, ``mindsponge_seconds.json``)."""
    import mindsponge as ms
    from mindsponge import replica_exchange as rex
    from mindsponge.topology import Topology

    os.makedirs(directory, exist_ok=True)
    names = ("mindsponge.ckpt", "mindsponge_seconds.json")
    checkpoint, timing = (os.path.join(directory, name) for name in names)
    carried = None if carry is None else [os.path.join(carry, name) for name in names]
    local = len(json.load(open(timing))) if os.path.exists(timing) else 0
    if carried is not None and all(map(os.path.exists, carried)) and _iterations_in(carried[1]) > local:
        for source, destination in zip(carried, (checkpoint, timing)):
            _write_atomically(destination, lambda partial, source=source: _copy(source, partial))
    forcefield = ms.alchemy.alchemical_force_field(openmm_system, atoms, dtype=torch.float32)
    masses = [openmm_system.getParticleMass(i)._value for i in range(openmm_system.getNumParticles())]
    system = ms.System(positions=torch.as_tensor(positions, dtype=torch.float32),
                       masses=torch.tensor(masses, dtype=torch.float32),
                       box=None if box is None else torch.as_tensor(box, dtype=torch.float32),
                       topology=Topology.from_openmm(topology))
    thermodynamic_states = [rex.ThermodynamicState(TEMPERATURE, potential=potential)
                            for potential in ms.alchemy.force_fields_at(forcefield, states)]
    sampler = rex.ReplicaExchange(system, forcefield, thermodynamic_states,
                                  ms.integrators.LangevinMiddle(DT, TEMPERATURE, FRICTION), steps,
                                  exchange="all", checkpoint=checkpoint, progress=False)
    sampler.run(0)  # loads the checkpoint if there is one
    seconds = json.load(open(timing)) if os.path.exists(timing) and sampler.rounds_done else []
    seconds = seconds[:sampler.rounds_done]
    last_carry = time.perf_counter()
    while sampler.rounds_done < iterations:
        start = time.perf_counter()
        sampler.run(1)
        seconds.append(time.perf_counter() - start)
        _write_atomically(timing, lambda partial: json.dump(seconds, open(partial, "w")))
        finished = sampler.rounds_done >= iterations
        if carried is not None and (finished or time.perf_counter() - last_carry > CARRY_SECONDS):
            os.makedirs(carry, exist_ok=True)  # the checkpoint first: its timing file says it is complete
            for source, destination in zip((checkpoint, timing), carried):
                _write_atomically(destination, lambda partial, source=source: _copy(source, partial))
            last_carry = time.perf_counter()
    record = sampler.record
    energies = np.asarray(record.reduced_potentials, dtype=np.float64)[:iterations]
    # the state each replica was sampled in during round t: the assignment before round t's exchange
    assignment = np.vstack([np.arange(len(states))[None], record.state_trajectory()])[:iterations]
    return {"energies": energies, "replica_states": assignment, "seconds": seconds[:iterations]}


# --- analysis -----------------------------------------------------------------------------------------
def free_energy(run: dict, burn_in: int) -> dict:
    """MBAR of a run's samples after ``burn_in`` iterations: ``dF`` (decoupled - coupled) and per
    neighbouring pair, kcal/mol, with errors, and the neighbour overlaps; and under ``"equilibrated"`` the
    same ``dF`` from the iterations after the one where the replicas' total reduced potential is
    equilibrated (pymbar's ``detect_equilibration``), each state's samples decorrelated (its statistical
    inefficiency): errors that count correlated samples once."""
    from mindsponge import free_energy_analysis as analysis

    rounds, count = run["replica_states"].shape
    by_state = run["energies"][np.arange(rounds)[:, None], np.argsort(run["replica_states"], axis=1)]
    samples = analysis.FreeEnergySamples(  # (T, K, K): the sample of state k after round t, in every state
        u_kn=by_state.transpose(2, 0, 1).reshape(count, -1), state_index=np.tile(np.arange(count), rounds),
        iteration=np.repeat(np.arange(rounds), count), time=np.repeat(np.arange(rounds), count).astype(float),
        states=[{"state": k} for k in range(count)], temperature=TEMPERATURE)
    kept, start = analysis.discard_equilibration(samples)
    with _quiet():
        result = analysis.estimate(samples.discard(burn_in))
        decorrelated = analysis.decorrelate(kept)
        equilibrated = analysis.estimate(decorrelated)
    kt = 0.0083144626 * TEMPERATURE / KJ_PER_KCAL  # kcal/mol
    value, error = equilibrated.mbar_difference()
    pairs = np.arange(count - 1)
    return {
        "delta_f": kt * float(result.delta_f[0, -1]),
        "error": kt * float(result.d_delta_f[0, -1]),
        "pairs": (kt * result.delta_f[pairs, pairs + 1]).round(4).tolist(),
        "pair_errors": (kt * result.d_delta_f[pairs, pairs + 1]).round(4).tolist(),
        "overlaps": result.overlap[pairs, pairs + 1].round(4).tolist(),
        "samples_per_state": rounds - burn_in,
        "equilibrated": {"delta_f": kt * value, "error": kt * error, "start_iteration": start,
                         "decorrelated_samples_per_state": decorrelated.samples_per_state.tolist()},
    }


def ns_per_day_per_window(seconds, steps: int, windows: int) -> float:
    """Simulated ns/day of one window: all windows' simulated time over the wall time (median iteration)."""
    return windows * steps * DT * 1e-3 * 86400.0 / float(np.median(seconds))


def speed_runs(solvent, states, directory, busy: bool) -> dict:
    """Short timing runs of both samplers on the solvent leg (fresh storage): ns/day per window."""
    import shutil

    openmm_system, topology, positions, box, atoms = solvent
    label = "busy" if busy else "idle"
    path = os.path.join(directory, f"speed_{label}")
    shutil.rmtree(path, ignore_errors=True)
    figures = {}
    with busy_core(busy):
        for name in ("openmm", "mindsponge"):
            if name == "openmm":
                run = run_openmmtools(openmm_system, positions, box, atoms, states, SPEED["iterations"],
                                      SPEED["steps"], os.path.join(path, name))
            else:
                run = run_mindsponge(openmm_system, topology, positions, box, atoms, states,
                                     SPEED["iterations"], SPEED["steps"], os.path.join(path, name))
            # the first iteration includes building contexts and compiling: time the later ones
            figures[name] = ns_per_day_per_window(run["seconds"][1:], SPEED["steps"], len(states))
    shutil.rmtree(path, ignore_errors=True)
    return figures


def run_molecule(molecule: str, size: dict, size_name: str, states, sides) -> tuple[dict, tuple]:
    """Both legs of one molecule with the samplers ``sides``: the figures of each (leg, side), and the solvent
    leg's ``(openmm_system, topology, positions, box, atoms)``."""
    output = os.path.join(OUTPUT, size_name, molecule)
    start = time.perf_counter()
    vacuum = vacuum_system(molecule)
    solvent = solvated_system(molecule, output, size["equilibration"])
    atoms = solvent[4]
    worst = check_ligand_terms(solvent[0], vacuum[0], len(atoms))
    print(f"{molecule}: {solvent[0].getNumParticles()} atoms solvated (box {solvent[3][0, 0]:.3f} nm after "
          f"NPT), {len(atoms)} in vacuum; bonded energies of the molecule solvated vs in vacuum differ by "
          f"{worst:.1e} (relative), non-bonded parameters identical "
          f"(set-up {time.perf_counter() - start:.0f} s)")
    legs = {"vacuum": (vacuum[0], vacuum[1], vacuum[2], None), "solvent": solvent[:4]}
    figures = {}
    for leg, (openmm_system, topology, positions, box) in legs.items():
        for side in sides:
            start = time.perf_counter()
            directory = os.path.join(output, leg, side)
            if side == "openmm":
                run = run_openmmtools(openmm_system, positions, box, atoms, states, size["iterations"],
                                      size["steps"], directory)
            else:
                run = run_mindsponge(openmm_system, topology, positions, box, atoms, states,
                                     size["iterations"], size["steps"], directory)
            result = free_energy(run, size["burn_in"])
            timed = run["seconds"][1:] or run["seconds"]  # the first iteration builds contexts, compiles
            result["ns_per_day_per_window"] = ns_per_day_per_window(timed, size["steps"], len(states))
            result["wall_seconds"] = float(np.sum(run["seconds"]))
            figures[(leg, side)] = result
            print(f"  {leg:7s} {side:10s} dF = {result['delta_f']:8.3f} +- {result['error']:.3f} kcal/mol, "
                  f"min overlap {min(result['overlaps']):.3f}, {result['ns_per_day_per_window']:.2f} ns/day "
                  f"per window, {result['wall_seconds']:.0f} s of sampling "
                  f"({time.perf_counter() - start:.0f} s now); equilibrated from iteration "
                  f"{result['equilibrated']['start_iteration']}, decorrelated: "
                  f"{result['equilibrated']['delta_f']:.3f} +- {result['equilibrated']['error']:.3f}")
    return figures, solvent


def hydration(molecule: str, figures: dict, solvent) -> dict:
    """The hydration free energies of both samplers from their legs, and how they compare."""
    entry = {"atoms_solvated": solvent[0].getNumParticles(), "box_nm": float(solvent[3][0, 0]),
             "experiment": MOLECULES[molecule]["experiment"], "legs": {}}
    for side in ("openmm", "mindsponge"):
        vacuum_leg, solvent_leg = figures[("vacuum", side)], figures[("solvent", side)]
        vacuum_run, solvent_run = vacuum_leg["equilibrated"], solvent_leg["equilibrated"]
        entry[side] = {
            "dG_hydration": vacuum_leg["delta_f"] - solvent_leg["delta_f"],
            "error": float(np.hypot(vacuum_leg["error"], solvent_leg["error"])),
            "dG_hydration_equilibrated": vacuum_run["delta_f"] - solvent_run["delta_f"],
            "error_equilibrated": float(np.hypot(vacuum_run["error"], solvent_run["error"])),
        }
        for leg in ("vacuum", "solvent"):
            entry["legs"][f"{leg}/{side}"] = figures[(leg, side)]
    ours, reference = entry["mindsponge"], entry["openmm"]
    entry["difference_in_sigma"] = (ours["dG_hydration"] - reference["dG_hydration"]) / float(
        np.hypot(ours["error"], reference["error"]))
    entry["difference_in_sigma_equilibrated"] = (
        ours["dG_hydration_equilibrated"] - reference["dG_hydration_equilibrated"]) / float(
        np.hypot(ours["error_equilibrated"], reference["error_equilibrated"]))
    return entry


def report(results: dict, speed: dict, size: dict, size_name: str, minutes: float) -> list[str]:
    """Print the hydration free energies and speeds; returns the speed ratios as text."""
    print()
    print(f"hydration free energies, kcal/mol ({size_name}: {size['iterations']} iterations x "
          f"{size['steps']} steps per state; sampling and analysis took {minutes:.1f} min)")
    for molecule, entry in results.items():
        ours, reference = entry["mindsponge"], entry["openmm"]
        print(f"  {molecule}: mindsponge {ours['dG_hydration']:.2f} +- {ours['error']:.2f}, openmmtools "
              f"{reference['dG_hydration']:.2f} +- {reference['error']:.2f}, difference "
              f"{entry['difference_in_sigma']:+.2f} sigma; experiment (FreeSolv) {entry['experiment']:.2f}")
        ours_start, reference_start = (entry["legs"][f"solvent/{side}"]["equilibrated"]["start_iteration"]
                                       for side in ("mindsponge", "openmm"))
        print(f"    equilibrated (solvent from iteration {ours_start} / {reference_start}), decorrelated: "
              f"mindsponge {ours['dG_hydration_equilibrated']:.2f} +- {ours['error_equilibrated']:.2f}, "
              f"openmmtools {reference['dG_hydration_equilibrated']:.2f} +- "
              f"{reference['error_equilibrated']:.2f}, difference "
              f"{entry['difference_in_sigma_equilibrated']:+.2f} sigma")
    ratios = []
    for molecule, entry in results.items():
        ours, reference = (entry["legs"][f"solvent/{side}"]["ns_per_day_per_window"]
                           for side in ("mindsponge", "openmm"))
        ratios.append(f"{molecule} production {ours / reference:.2f}")
        print(f"  {molecule} solvent, production: mindsponge {ours:.2f} ns/day per window, "
              f"OpenMM+openmmtools {reference:.2f}")
    for label, figures in speed.items():
        print(f"  timing run, {label}: mindsponge {figures['mindsponge']:.2f} ns/day per window, "
              f"OpenMM+openmmtools {figures['openmm']:.2f}")
        ratios.append(f"{label} {figures['mindsponge'] / figures['openmm']:.2f}")
    return ratios


def record(results: dict, speed: dict, size: dict, states, minutes: float) -> None:
    """Write the molecules of this run into ``benchmarks/data/free_energy.json``, keeping the entries of the
    molecules run before (each dated, with its size) when they used the same states; timing runs likewise
    replace the recorded ones only when this run made them."""
    stamp = {"date": time.strftime("%Y-%m-%d"), "size": size, "minutes_this_run": minutes,
             "load_average_at_end": [round(load, 2) for load in os.getloadavg()]}
    parameters = [state.parameters for state in states]
    recorded = {}
    if os.path.exists(DATA):
        with open(DATA) as handle:
            recorded = json.load(handle)
        if recorded.get("states") != parameters:
            print(f"  {os.path.relpath(DATA)} held other lambda states: its molecules are replaced")
            recorded = {}
    molecules = dict(recorded.get("molecules", {}))
    molecules.update({name: {**entry, **stamp} for name, entry in results.items()})
    made = {
        "made_by": "benchmarks/free_energy.py (full size); see its docstring for the protocol",
        "states": parameters,
        "molecules": molecules,
        "speed_ns_per_day_per_window": {**speed, **stamp} if speed else recorded.get(
            "speed_ns_per_day_per_window", {}),
    }
    os.makedirs(os.path.dirname(DATA), exist_ok=True)
    with open(DATA + ".partial", "w") as handle:
        json.dump(made, handle, indent=1)
    os.replace(DATA + ".partial", DATA)
    print(f"  derived results written to {os.path.relpath(DATA)} ({', '.join(sorted(molecules))})")


def main() -> None:
    import mindsponge as ms

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few iterations (exercises everything)")
    parser.add_argument("--iterations", type=int, default=None,
                        help="override the size's number of iterations (the caches are reused)")
    parser.add_argument("--molecules", nargs="+", default=["p-xylene"], choices=sorted(MOLECULES))
    parser.add_argument("--no-speed", action="store_true", help="skip the idle / busy timing runs")
    parser.add_argument("--sides", nargs="+", default=["openmm", "mindsponge"],
                        choices=["openmm", "mindsponge"],
                        help="run only these samplers (e.g. the reference first and ours later); both sides "
                             "start from one equilibrated box, so start the second process only once the "
                             "first has written output/free_energy/<size>/<molecule>/equilibrated.npz")
    arguments = parser.parse_args()
    size_name = "quick" if arguments.quick else "full"
    size = dict(SIZES[size_name])
    if arguments.iterations is not None:
        size["iterations"] = arguments.iterations
    torch.set_num_threads(1)
    print(f"mindsponge from {os.path.dirname(ms.__file__)}")
    report_kernels_and_load()
    states = ms.alchemy.lambda_schedule(electrostatics=ELECTROSTATICS, sterics=STERICS)
    print(f"{len(states)} states, {size['iterations']} iterations x {size['steps']} steps of {DT * 1e3:g} fs "
          f"per state, burn-in {size['burn_in']} iterations; one thread per engine")
    results = {}
    wall = time.perf_counter()
    both = len(arguments.sides) == 2
    for molecule in arguments.molecules:
        figures, solvent = run_molecule(molecule, size, size_name, states, arguments.sides)
        if both:
            results[molecule] = hydration(molecule, figures, solvent)
    minutes = (time.perf_counter() - wall) / 60
    speed = {}
    if not arguments.no_speed and both:
        for busy in (False, True):
            directory = os.path.join(OUTPUT, size_name)
            speed["busy" if busy else "idle"] = speed_runs(solvent, states, directory, busy)
    print_load_average("end")
    if not results:
        return
    ratios = report(results, speed, size, size_name, minutes)
    if not arguments.quick:
        record(results, speed, size, states, minutes)
    print("speed ratio mindsponge / OpenMM+openmmtools (ns/day per window): " + ", ".join(ratios))


if __name__ == "__main__":
    main()
