"""Helpers shared by the mindsponge benchmarks (``md_*.py``): timing, TIP3P systems, statistics.

Not a benchmark itself (running it does nothing). The benchmarks import it as ``md_common``
(they run as scripts from this directory).

- timing: :func:`mean_seconds`, :func:`time_calls`, :func:`best_of_rounds`;
- systems: :func:`tip3p_water` (a mindsponge water box and the OpenMM System for it, with
  OpenMM's masses), :func:`peptide_in_dodecahedron` (a solvated peptide in a small rhombic
  dodecahedron, built by OpenMM's Modeller), :func:`dipeptide_in_vacuum`, :func:`tip4pew_peptide_box`
  (a 4-site water box with a peptide and NaCl, NPT), :func:`openmm_context`,
  :func:`openmm_equilibrated` (a start state minimised and thermalised by OpenMM, so both
  engines start from the same coordinates), :func:`mindsponge_simulation`;
- load: :func:`busy_core` (another process keeping one core busy while the engines are timed);
- statistics: :func:`mean_and_error` (mean with its standard error from the statistical
  inefficiency of the time series, pymbar), :func:`drift_per_dof` (linear fit).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
import time

import numpy as np
import torch


def mean_seconds(function, repeats: int) -> float:
    """Mean seconds per call of ``function`` over ``repeats`` calls."""
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - start) / repeats


def time_calls(function, repeats: int, warmup: int = 2) -> float:
    """Best-of-three mean seconds per call of ``function``."""
    for _ in range(warmup):
        function()
    return min(mean_seconds(function, repeats) for _ in range(3))


def best_of_rounds(functions: dict, repeats: int, rounds: int, warmup: int = 2) -> dict:
    """Best mean seconds per call of each function, timed in alternating rounds (fair under load)."""
    for function in functions.values():
        for _ in range(warmup):
            function()
    best = dict.fromkeys(functions, math.inf)
    for _ in range(rounds):
        for name, function in functions.items():
            best[name] = min(best[name], mean_seconds(function, repeats))
    return best


def tip3p_water(
    n_molecules: int,
    cutoff: float = 0.9,
    seed: int = 1,
    ewald_tolerance: float = 5e-4,
    switch_distance: float | None = None,
    remove_center_of_mass_motion: bool = True,
):
    """A cubic box of rigid TIP3P water (``ms.build.water_box``) and OpenMM's System for it.

    Args:
        n_molecules: number of waters (3 atoms each), at 0.997 g/cm^3.
        cutoff: non-bonded cutoff, nm (PME).
        seed: seed of the placement.
        ewald_tolerance: OpenMM's ``ewaldErrorTolerance`` (sets the PME splitting and grid).
        switch_distance: Lennard-Jones switching distance, nm, or ``None`` for none.
        remove_center_of_mass_motion: add OpenMM's ``CMMotionRemover``.

    Returns:
        ``(system, openmm_system)``: a float64 :class:`mindsponge.System` (positions (N, 3) nm,
        box (3, 3) nm, masses (N,) amu taken from the OpenMM System) and the
        ``openmm.System`` (``amber14/tip3p.xml``, PME, rigid water).
    """
    from openmm import app, unit

    import mindsponge as ms

    system = ms.build.water_box(n_molecules=n_molecules, model="tip3p", seed=seed)
    options = {"switchDistance": switch_distance * unit.nanometer} if switch_distance else {}
    openmm_system = app.ForceField("amber14/tip3p.xml").createSystem(
        system.topology.to_openmm(system.box),
        nonbondedMethod=app.PME,
        nonbondedCutoff=cutoff * unit.nanometer,
        ewaldErrorTolerance=ewald_tolerance,
        rigidWater=True,
        removeCMMotion=remove_center_of_mass_motion,
        **options,
    )
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
    return system.replace(masses=torch.tensor(masses, dtype=torch.float64)), openmm_system


def peptide_in_dodecahedron(
    n_residues: int = 10,
    box_length: float = 3.0,
    cutoff: float = 0.9,
    ewald_tolerance: float = 5e-4,
):
    """A peptide in TIP3P water in a small rhombic dodecahedron, and OpenMM's System for it.

    The peptide is the first ``n_residues`` residues of villin (OpenMM's ``test.pdb``) with a
    C-terminal oxygen added; ``openmm.app.Modeller`` adds the missing hydrogens and solvates it
    in a rhombic dodecahedron of box vectors ``(d, 0, 0), (0, d, 0), (d/2, d/2, d/sqrt(2))``
    (OpenMM's reduced form, ``d = box_length`` nm; ``cutoff`` must be at most ``d / (2 sqrt(2))``),
    neutralised with Na+/Cl-. With the defaults: about 1,800 atoms, 19 nm^3.

    Args:
        n_residues: residues of the peptide.
        box_length: ``d``, nm.
        cutoff: non-bonded cutoff, nm (PME).
        ewald_tolerance: OpenMM's ``ewaldErrorTolerance``.

    Returns:
        ``(system, openmm_system)``: a float64 :class:`mindsponge.System` (positions, the box and
        the masses of the OpenMM System) and the ``openmm.System`` (``amber14-all.xml`` and
        ``amber14/tip3p.xml``, PME, bonds to hydrogen constrained, rigid water).
    """
    import openmm
    from openmm import app, unit

    import mindsponge as ms

    pdb = app.PDBFile(os.path.join(os.path.dirname(app.__file__), "data", "test.pdb"))
    forcefield = app.ForceField("amber14-all.xml", "amber14/tip3p.xml")
    modeller = app.Modeller(pdb.topology, pdb.positions)
    protein = [residue for residue in modeller.topology.residues() if residue.name not in ("HOH", "Cl", "Na")]
    kept = protein[:n_residues]
    modeller.delete([residue for residue in modeller.topology.residues() if residue not in kept])
    last = list(modeller.topology.residues())[-1]
    atoms = {atom.name: atom for atom in last.atoms()}
    positions = np.asarray(modeller.positions.value_in_unit(unit.nanometer))
    carbon, alpha, oxygen = (positions[atoms[name].index] for name in ("C", "CA", "O"))
    direction = (carbon - alpha) + (carbon - oxygen)  # in the plane of CA, C, O, away from both
    terminal = carbon + 0.125 * direction / np.linalg.norm(direction)
    modeller.topology.addBond(atoms["C"], modeller.topology.addAtom("OXT", app.element.oxygen, last))
    modeller.positions = [openmm.Vec3(*row) for row in np.vstack([positions, terminal])] * unit.nanometer
    modeller.addHydrogens(forcefield)
    vectors = [openmm.Vec3(box_length, 0, 0), openmm.Vec3(0, box_length, 0),
               openmm.Vec3(box_length / 2, box_length / 2, box_length * math.sqrt(0.5))] * unit.nanometer
    modeller.addSolvent(forcefield, model="tip3p", boxVectors=vectors)
    openmm_system = forcefield.createSystem(
        modeller.topology, nonbondedMethod=app.PME, nonbondedCutoff=cutoff * unit.nanometer,
        ewaldErrorTolerance=ewald_tolerance, constraints=app.HBonds, rigidWater=True,
    )
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "peptide.pdb")
        with open(path, "w") as handle:
            app.PDBFile.writeFile(modeller.topology, modeller.positions, handle)
        system = ms.System.from_pdb(path)
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
    box = torch.tensor([list(vector.value_in_unit(unit.nanometer)) for vector in
                        openmm_system.getDefaultPeriodicBoxVectors()], dtype=torch.float64)
    return system.replace(masses=torch.tensor(masses, dtype=torch.float64), box=box), openmm_system


DIPEPTIDE_PDB = os.path.join(os.path.dirname(__file__), "..", "tests", "mindsponge", "data",
                             "alanine_dipeptide.pdb")


def dipeptide_in_vacuum():
    """Alanine dipeptide in vacuum (``amber14-all.xml``, no cutoff, bonds to hydrogen constrained, OpenMM's
    ``CMMotionRemover``): ``(system, openmm_system)`` (22 atoms)."""
    from openmm import app

    import mindsponge as ms

    path = DIPEPTIDE_PDB
    pdb = app.PDBFile(path)
    openmm_system = app.ForceField("amber14-all.xml").createSystem(pdb.topology, nonbondedMethod=app.NoCutoff,
                                                                   constraints=app.HBonds)
    return ms.System.from_pdb(path), openmm_system


def tip4pew_peptide_box(box_length: float = 2.1, cutoff: float = 0.9, pressure: float = 1.0,
                        temperature: float = 300.0):
    """Alanine dipeptide in TIP4P-Ew water with 0.15 M NaCl in a cubic box of ``box_length`` nm (about 900
    particles with the massless sites), ``amber14-all.xml`` + ``amber14/tip4pew.xml``, PME, bonds to
    hydrogen constrained, rigid water, and a ``MonteCarloBarostat`` (every 25 steps) in the System:
    ``(system, openmm_system)`` (the box and masses of the System)."""
    import openmm
    from openmm import app, unit

    import mindsponge as ms

    pdb = app.PDBFile(DIPEPTIDE_PDB)
    forcefield = app.ForceField("amber14-all.xml", "amber14/tip4pew.xml")
    modeller = app.Modeller(pdb.topology, pdb.positions)
    size = openmm.Vec3(box_length, box_length, box_length) * unit.nanometer
    modeller.addSolvent(forcefield, model="tip4pew", boxSize=size, ionicStrength=0.15 * unit.molar)
    openmm_system = forcefield.createSystem(modeller.topology, nonbondedMethod=app.PME,
                                            nonbondedCutoff=cutoff * unit.nanometer, constraints=app.HBonds)
    openmm_system.addForce(openmm.MonteCarloBarostat(pressure, temperature, 25))
    with tempfile.TemporaryDirectory() as directory:
        structure = os.path.join(directory, "box.pdb")
        with open(structure, "w") as handle:
            app.PDBFile.writeFile(modeller.topology, modeller.positions, handle)
        system = ms.System.from_pdb(structure)
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
    box = torch.tensor([list(vector.value_in_unit(unit.nanometer)) for vector in
                        openmm_system.getDefaultPeriodicBoxVectors()], dtype=torch.float64)
    return system.replace(masses=torch.tensor(masses, dtype=torch.float64), box=box), openmm_system


@contextlib.contextmanager
def busy_core(enabled: bool, seconds: float = 3600.0):
    """Keep one core busy with another process (a bounded busy loop: it ends by itself after ``seconds``),
    as users' machines are: a browser, another job. ``enabled=False`` does nothing."""
    import subprocess
    import sys

    if not enabled:
        yield None
        return
    loop = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"
    process = subprocess.Popen([sys.executable, "-c", loop])
    time.sleep(0.5)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def openmm_context(openmm_system, integrator, platform: str = "CPU", threads: int | None = 1, positions=None):
    """An ``openmm.Context`` on ``platform`` (``"CPU"`` with ``threads`` threads, its default with ``None``,
    or ``"Reference"``)."""
    import openmm

    properties = {"Threads": str(threads)} if platform == "CPU" and threads is not None else {}
    platform = openmm.Platform.getPlatformByName(platform)
    context = openmm.Context(openmm_system, integrator, platform, properties)
    if positions is not None:
        context.setPositions(np.asarray(positions))
    return context


def openmm_equilibrated(system, openmm_system, temperature: float = 300.0, steps: int = 2500, seed: int = 1,
                        threads: int = 1):
    """Positions and velocities (nm, nm/ps; (N, 3) float64 arrays) after OpenMM (CPU platform,
    ``threads`` threads) minimises the box and runs ``steps`` steps of Langevin dynamics (2 fs,
    1/ps) at ``temperature`` (K)."""
    import openmm
    from openmm import unit

    integrator = openmm.LangevinMiddleIntegrator(temperature, 1.0, 0.002)
    integrator.setRandomNumberSeed(seed)
    context = openmm_context(openmm_system, integrator, threads=threads, positions=system.positions.numpy())
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 500)
    context.setVelocitiesToTemperature(temperature, seed)
    integrator.step(steps)
    state = context.getState(getPositions=True, getVelocities=True)
    positions = state.getPositions(asNumpy=True).value_in_unit(unit.nanometer)
    velocities = state.getVelocities(asNumpy=True).value_in_unit(unit.nanometer / unit.picosecond)
    return np.asarray(positions), np.asarray(velocities)


def mindsponge_simulation(system, openmm_system, integrator, dtype=torch.float64, positions=None,
                          velocities=None, constraints="water", **options):
    """A :class:`mindsponge.Simulation` of ``system`` under the force field of ``openmm_system``.

    Everything (state, force field, integration) is in ``dtype``; ``constraints`` as in
    :class:`mindsponge.Simulation` (default ``"water"``: SETTLE); ``positions`` / ``velocities``
    ((N, 3) arrays, nm and nm/ps) replace the system's; ``options`` go to
    :class:`mindsponge.Simulation` (``progress`` defaults to ``False``).
    """
    import mindsponge as ms

    changes = {}
    if positions is not None:
        changes["positions"] = torch.as_tensor(positions, dtype=torch.float64)
    if velocities is not None:
        changes["velocities"] = torch.as_tensor(velocities, dtype=torch.float64)
    system = system.replace(**changes).to(dtype=dtype)
    forcefield = ms.interop.openmm.from_openmm(openmm_system, dtype=dtype)
    options.setdefault("progress", False)
    return ms.Simulation(system, forcefield, integrator, constraints=constraints, **options)


def mean_and_error(series) -> tuple[float, float, float]:
    """Mean of a correlated time series, its standard error, and the statistical inefficiency g.

    The error is ``std / sqrt(n / g)`` with g from :func:`pymbar.timeseries.statistical_inefficiency`
    (g = 1 + 2 * integrated autocorrelation time, in samples).
    """
    notices = io.StringIO()  # pymbar prints notices on import and use
    with contextlib.redirect_stdout(notices), contextlib.redirect_stderr(notices):
        from pymbar import timeseries

        series = np.asarray(series, dtype=np.float64)
        inefficiency = float(timeseries.statistical_inefficiency(series))
    error = float(series.std(ddof=1) / math.sqrt(len(series) / inefficiency))
    return float(series.mean()), error, inefficiency


def drift_per_dof(times_ps, energies, dof: int) -> tuple[float, float]:
    """Drift of a total-energy series per degree of freedom, kJ/mol/ns/dof, by a linear fit,
    and the fluctuation (standard deviation) per degree of freedom, kJ/mol/dof."""
    times_ps, energies = np.asarray(times_ps, dtype=np.float64), np.asarray(energies, dtype=np.float64)
    slope = np.polyfit(times_ps, energies, 1)[0]  # kJ/mol/ps
    return float(1e3 * slope / dof), float(energies.std() / dof)


def _timed(function, arguments):
    torch.set_num_threads(1)
    start = time.perf_counter()
    result = function(*arguments)
    return result, time.perf_counter() - start


def run_engines(tasks: dict, jobs: int = 1) -> dict:
    """Run ``{name: (function, arguments)}`` (top-level functions, picklable arguments), ``jobs``
    at a time in separate processes (1: in this process, one after the other), each with one torch
    thread. Returns ``{name: (result, wall seconds)}`` in the order of ``tasks``."""
    if jobs <= 1:
        return {name: _timed(function, arguments) for name, (function, arguments) in tasks.items()}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {
            name: pool.submit(_timed, function, arguments) for name, (function, arguments) in tasks.items()
        }
        return {name: future.result() for name, future in futures.items()}


def sample_series(advance, measure, n_samples: int, label: str, progress: bool = True, output=None):
    """``n_samples`` values of ``measure()``, each taken after ``advance()``, as an array.

    With a directory ``output``, the series so far is saved to ``output/<label>.npy`` every 100
    samples and at the end (so a long run killed part-way still leaves its data).
    """
    from tqdm.auto import tqdm

    path = None
    if output is not None:
        os.makedirs(output, exist_ok=True)
        path = os.path.join(output, "".join(c if c.isalnum() else "_" for c in label) + ".npy")
    values = []
    for index in tqdm(range(n_samples), desc=label, disable=not progress):
        advance()
        values.append(measure())
        if path is not None and ((index + 1) % 100 == 0 or index + 1 == n_samples):
            np.save(path, np.array(values))
    return np.array(values)


def report_kernels_and_load() -> None:
    """Load (or build) the compiled MD kernels and print whether they are available, how long that
    took, and the machine's load average (the benchmarks' ratios assume an otherwise idle machine)."""
    from mindsponge import _kernels

    start = time.perf_counter()
    kernels = _kernels.nonbonded()
    print(f"compiled kernels: {'available' if kernels is not None else 'UNAVAILABLE (pure torch only)'}, "
          f"built or loaded in {time.perf_counter() - start:.1f} s "
          f"(a first build on a machine compiles for about a minute; later runs load the cached build)")
    print_load_average("start")


def print_load_average(when: str) -> None:
    """Print the 1, 5 and 15 minute load averages, labelled ``when`` (e.g. "start", "end")."""
    print(f"load average (1, 5, 15 min) at {when}: " + ", ".join(f"{load:.2f}" for load in os.getloadavg()))
