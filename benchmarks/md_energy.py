"""Energy + forces evaluations per second: mindsponge (float32) against OpenMM's CPU platform.

TIP3P-FB water boxes of about 3,000 and 24,000 atoms with PME (0.9 nm cutoff, OpenMM's
default error tolerance 5e-4), parameterised by OpenMM (amber14 files) and translated
with :func:`mindsponge.interop.openmm.from_openmm`. OpenMM runs on its CPU platform with 2
threads, mindsponge with 2 torch threads, in the same process; both evaluate energy and
forces at the same positions (each OpenMM ``getState`` recomputes them). The two sides are
timed in alternating rounds and the best round of each is reported (the machine is shared:
the load average is printed).

mindsponge is timed with its compiled CPU kernels (:mod:`mindsponge._kernels`, built once per
machine; the build or load time is printed) and with its pure torch path
(``Nonbonded.compiled = False``). Also printed: the time of each energy term alone, the
stages of the non-bonded term (neighbour-list build, PME, an evaluation that includes a
rebuild, as happens every 10-20 steps in dynamics), the top torch ops, and the peak resident
memory of a fresh process that loads the 24,000-atom System (serialized) and evaluates it
(``VmHWM``). The ratio mindsponge/OpenMM comes last.

A CHARMM36 row follows: the solvated tripeptide of the tests (1,319 atoms, PME, NBFIX, built by
OpenMM's ``charmm36.xml``: its Lennard-Jones is a CustomNonbondedForce with per-type tables),
with the ``LennardJones`` custom term on the Lennard-Jones kernel (the default) and on the
generic expression path (``lennard_jones_kernel = False``).

Usage::

    .venv/bin/python benchmarks/md_energy.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

import numpy as np
import torch
from md_common import best_of_rounds, print_load_average, report_kernels_and_load, time_calls

THREADS = 2
CUTOFF = 0.9  # nm
SIZES = {"3k": 3.25, "24k": 6.25}  # box edge (nm) -> about 3,000 and 24,000 atoms


def build_water_box(edge: float):
    """An OpenMM System of TIP3P-FB water with PME, positions (nm) and box (nm)."""
    import openmm
    from openmm import app, unit

    forcefield = app.ForceField("amber14-all.xml", "amber14/tip3pfb.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(edge, edge, edge) * unit.nanometer)
    system = forcefield.createSystem(
        modeller.topology, nonbondedMethod=app.PME, nonbondedCutoff=CUTOFF * unit.nanometer
    )
    positions = np.array(modeller.getPositions().value_in_unit(unit.nanometer))
    box = np.array(
        [list(vector.value_in_unit(unit.nanometer)) for vector in system.getDefaultPeriodicBoxVectors()]
    )
    return system, positions, box


def charmm36_peptide():
    """The CHARMM36 System of the tests (``tests/mindsponge/data``), positions (nm) and box (nm)."""
    import gzip

    import openmm
    from openmm import app, unit

    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "mindsponge", "data")
    with gzip.open(os.path.join(data, "charmm36_peptide_system.xml.gz"), "rt") as handle:
        system = openmm.XmlSerializer.deserialize(handle.read())
    positions = np.array(app.PDBFile(os.path.join(data, "charmm36_peptide.pdb")).getPositions()
                         .value_in_unit(unit.nanometer))
    box = np.array(
        [list(vector.value_in_unit(unit.nanometer)) for vector in system.getDefaultPeriodicBoxVectors()]
    )
    return system, positions, box


def charmm36_row(repeats: int, rounds: int) -> float:
    """Time the CHARMM36 peptide box (see the module docstring); returns the OpenMM/mindsponge ratio."""
    system, positions, box = charmm36_peptide()
    openmm_call, context = openmm_evaluator(system, positions)
    forcefield, x, box_tensor = mindsponge_model(system, positions, box)
    generic, _, _ = mindsponge_model(system, positions, box)
    generic["LennardJones"].lennard_jones_kernel = False
    evaluators = {"openmm": openmm_call, "kernel": mindsponge_evaluator(forcefield, x, box_tensor),
                  "generic": mindsponge_evaluator(generic, x, box_tensor)}
    best = best_of_rounds(evaluators, repeats, rounds)
    del context
    print(
        f"CHARMM36 peptide {x.shape[0]} atoms, PME, best of {rounds} rounds of {repeats}. "
        f"OpenMM CPU ({THREADS} thr) {1e3 * best['openmm']:.1f} ms, mindsponge float32 "
        f"{1e3 * best['kernel']:.1f} ms (LennardJones custom term on the generic expression path: "
        f"{1e3 * best['generic']:.1f} ms)"
    )
    print(f"LennardJones on the Lennard-Jones kernel: {forcefield['LennardJones'].uses_lennard_jones_kernel}")
    print(profile(forcefield, x, box_tensor, rows=0))
    print("generic expression path (lennard_jones_kernel = False):")
    print(profile(generic, x, box_tensor, rows=0))
    return best["openmm"] / best["kernel"]


def openmm_evaluator(system, positions):
    import openmm

    platform = openmm.Platform.getPlatformByName("CPU")
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform, {"Threads": str(THREADS)})
    context.setPositions(positions)
    return lambda: context.getState(getEnergy=True, getForces=True), context


def mindsponge_model(system, positions, box, compiled: bool = True):
    from mindsponge.forcefield.nonbonded import Nonbonded
    from mindsponge.interop.openmm import from_openmm

    forcefield = from_openmm(system).to(torch.float32)
    for term in forcefield:
        if isinstance(term, Nonbonded):
            term.compiled = compiled
    return forcefield, torch.tensor(positions, dtype=torch.float32), torch.tensor(box, dtype=torch.float32)


def mindsponge_evaluator(forcefield, positions, box):
    from mindsponge.forcefield import energy_and_forces

    return lambda: energy_and_forces(forcefield, positions, box)


def nonbonded_stages(term, positions, box) -> list[str]:
    """Times of the stages of a ``Nonbonded`` term, from its public building blocks."""
    from mindsponge.forcefield import ForceField, energy_and_forces
    from mindsponge.forcefield.ewald import PMEReciprocal
    from mindsponge.neighbors import NeighborList

    lines = []
    neighbors = term.neighbors
    if neighbors is not None:
        def search():  # with the compiled kernels the pairs are searched when first asked for: as clusters
            fresh = NeighborList(neighbors.cutoff, neighbors.skin, neighbors.exclusions,
                                 compiled=term.compiled)
            fresh.build(positions, box)
            if term.compiled:
                fresh.clusters()

        build = time_calls(search, 2, 1)
        single = ForceField([term])

        def evaluate_after_rebuild():
            neighbors.build(positions, box)
            energy_and_forces(single, positions, box)

        rebuild = time_calls(evaluate_after_rebuild, 2, 1)
        lines.append(
            f"    evaluation with a rebuild {1e3 * rebuild:8.2f} ms (list build + pair set + evaluation)"
        )
        check = time_calls(lambda: neighbors.needs_rebuild(positions, box), 5, 1)
        lines.append(
            f"    neighbour list build      {1e3 * build:8.2f} ms (the cluster search when compiled; "
            "rebuilt only after moves > skin/2)"
        )
        lines.append(f"    neighbour list check      {1e3 * check:8.2f} ms (every call)")
        if neighbors.pairs is not None:
            lines.append(f"    listed pairs              {len(neighbors.pairs):8d}")
    if term.method == "pme" and term.pme_grid is not None:
        pme = PMEReciprocal(term.alpha, term.pme_grid, term.pme_order, compiled=term.compiled)
        charges = term.charges.to(positions.dtype)
        reciprocal = time_calls(lambda: pme(positions, charges, box, True), 3, 1)
        lines.append(
            f"    PME reciprocal (grid {term.pme_grid}) {1e3 * reciprocal:8.2f} ms (spread, FFT, gather)"
        )
    return lines


def profile(forcefield, positions, box, rows: int = 12) -> str:
    """Time of each term alone, stages of the non-bonded term, and top torch ops by self CPU time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from mindsponge.forcefield import ForceField, energy_and_forces

    lines = ["mindsponge: time of each term alone (energy + forces):"]
    for term in forcefield:
        single = ForceField([term])
        seconds = time_calls(lambda single=single: energy_and_forces(single, positions, box), 3, warmup=1)
        lines.append(f"  {term.name:<24s} {1e3 * seconds:8.2f} ms")
        if type(term).__name__ == "Nonbonded":
            lines.extend(nonbonded_stages(term, positions, box))
    if rows:
        with torch_profile(activities=[ProfilerActivity.CPU]) as profiler:
            for _ in range(3):
                energy_and_forces(forcefield, positions, box)
        lines.append("torch.profiler, top torch ops by self CPU time (3 evaluations; compiled kernels "
                     "are not listed: they are the rest of the time):")
        lines.append(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))
    return "\n".join(lines)


def peak_rss_mib() -> float:
    """Peak resident memory of this process, MiB.

    ``VmHWM`` from ``/proc/self/status`` on Linux (``ru_maxrss`` would include the parent's peak,
    which survives ``fork`` and ``exec``), else ``resource.getrusage``.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_child(directory: str) -> None:
    """Run in a fresh process: load the saved System, evaluate energy+forces, print peak RSS as JSON."""
    import openmm

    torch.set_num_threads(THREADS)
    with open(os.path.join(directory, "system.xml")) as handle:
        system = openmm.XmlSerializer.deserialize(handle.read())
    positions = np.load(os.path.join(directory, "positions.npy"))
    box = np.load(os.path.join(directory, "box.npy"))
    forcefield, x, box_tensor = mindsponge_model(system, positions, box)
    del system
    before = peak_rss_mib()
    from mindsponge.forcefield import energy_and_forces

    for _ in range(2):
        energy_and_forces(forcefield, x, box_tensor)
    print(json.dumps({"atoms": x.shape[0], "peak_rss_mib": peak_rss_mib(), "before_mib": before}))


def peak_rss(system, positions, box) -> dict:
    """Peak RSS (MiB) of a fresh process that loads this System and evaluates energy and forces."""
    import openmm

    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "system.xml"), "w") as handle:
            handle.write(openmm.XmlSerializer.serialize(system))
        np.save(os.path.join(directory, "positions.npy"), positions)
        np.save(os.path.join(directory, "box.npy"), box)
        child = subprocess.run(
            [sys.executable, __file__, "--rss-child", directory], capture_output=True, text=True, check=True
        )
    return json.loads(child.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the ~3,000-atom box, fewer repeats")
    parser.add_argument("--rss-child", default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.rss_child is not None:
        peak_rss_child(arguments.rss_child)
        return

    torch.set_num_threads(THREADS)
    from common import extensions

    report_kernels_and_load()
    sizes = ["3k"] if arguments.quick else ["3k", "24k"]
    repeats = {"3k": 5 if arguments.quick else 10, "24k": 3}
    rounds = 3 if arguments.quick else 5
    ratios = {}
    for label in sizes:
        system, positions, box = build_water_box(SIZES[label])
        atoms = positions.shape[0]
        openmm_call, context = openmm_evaluator(system, positions)
        forcefield, x, box_tensor = mindsponge_model(system, positions, box)
        pure, _, _ = mindsponge_model(system, positions, box, compiled=False)
        evaluators = {"openmm": openmm_call, "compiled": mindsponge_evaluator(forcefield, x, box_tensor),
                      "torch": mindsponge_evaluator(pure, x, box_tensor)}
        best = best_of_rounds(evaluators, repeats[label], rounds)
        del context
        reference, ours = best["openmm"], best["compiled"]
        ratios[label] = reference / ours
        print(
            f"TIP3P {atoms} atoms, PME {CUTOFF} nm, best of {rounds} rounds of {repeats[label]}. "
            f"OpenMM CPU ({THREADS} thr) {1 / reference:.2f} eval/s ({1e3 * reference:.1f} ms), "
            f"mindsponge float32 {1 / ours:.2f} eval/s ({1e3 * ours:.1f} ms; pure torch path "
            f"{1e3 * best['torch']:.1f} ms)"
        )
        print(profile(forcefield, x, box_tensor))
        if label == "3k" or not arguments.quick:
            print("pure torch path (compiled=False):")
            print(profile(pure, x, box_tensor, rows=0))
        if label == "24k":
            rss = peak_rss(system, positions, box)
            print(
                f"peak RSS, fresh process evaluating the {rss['atoms']}-atom box (energy+forces, float32): "
                f"{rss['peak_rss_mib']:.0f} MiB ({rss['before_mib']:.0f} MiB loaded, before evaluating): "
                f"{'under 2 GiB' if rss['peak_rss_mib'] < 2048 else 'OVER the 2 GiB budget'}"
            )
    ratios["charmm36 1319"] = charmm36_row(5 if arguments.quick else 10, rounds)
    print_load_average("end")
    if extensions.build_seconds:
        print(f"kernel build/load seconds this run: {extensions.build_seconds}")
    for label, ratio in ratios.items():
        print(f"ratio mindsponge/OpenMM-CPU evaluations per second ({label} atoms): {ratio:.3f}")


if __name__ == "__main__":
    main()
