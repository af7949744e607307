"""MD throughput: mindsponge (mixed precision, the compiled step loop) against OpenMM's CPU platform.

Systems (Langevin dynamics by the BAOAB "middle" scheme at 300 K, 1/ps, 2 fs; PME with OpenMM's
default error tolerance 5e-4 and the dispersion correction where there is a box):

- ``dipeptide``: alanine dipeptide in vacuum (22 atoms, ``amber14-all.xml``, no cutoff, bonds to
  hydrogen constrained): the fixed cost of a step;
- ``dipeptide-replicas``: 20 replicas of it as temperature replica exchange (300-400 K, exchanges every
  500 steps, :mod:`mindsponge.replica_exchange` in one process) against OpenMM stepping one context:
  the time per replica-step;
- ``tip4pew-peptide``: the dipeptide in TIP4P-Ew water with 0.15 M NaCl, 2.1 nm box (about 900
  particles with the massless sites), 0.9 nm cutoff, NPT with the System's ``MonteCarloBarostat``;
- ``3k``, ``24k``: boxes of rigid TIP3P water (``amber14/tip3p.xml``) of about 3,000 and 24,000 atoms,
  0.9 nm, SETTLE;
- ``3k-replicas``: 20 replicas of the 3k box (replica exchange at 300-330 K, exchanges every 50 steps);
- ``dodecahedron``: a 10-residue peptide in TIP3P in a 3 nm rhombic dodecahedron (about 1,700 atoms).

For each system and each thread setting (``--threads``: numbers set both engines' thread counts;
``default`` leaves OpenMM its default, every core, and mindsponge its default, following the load):
energy+forces (OpenMM ``getState(getEnergy, getForces)`` against ``Simulation.energy_and_forces``) and
dynamics (``integrator.step(n)`` against ``Simulation.run(n)``). OpenMM minimises and thermalises each
system; both engines start from that state and run in alternating rounds; the best round of each is
reported. ``--busy`` keeps one core busy with another process (a bounded busy loop) throughout: users'
machines are never idle, and on an idle machine OpenMM's worker thread sleeps between steps, which makes
its small systems several times slower than when its cores are awake (measured: alanine dipeptide 600
against 40-80 us a step). The ratios OpenMM time / ours (higher: mindsponge faster) come last.

Where mindsponge's time goes (``--profile``): the force evaluation against a whole step, and the top
torch ops of a few steps (compiled kernels are not listed).

Usage::

    .venv/bin/python benchmarks/md_dynamics.py [--quick] [--busy] [--cases dipeptide 3k ...]
        [--threads 1 2 default] [--profile]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from md_common import (
    best_of_rounds,
    busy_core,
    dipeptide_in_vacuum,
    mindsponge_simulation,
    openmm_context,
    openmm_equilibrated,
    peptide_in_dodecahedron,
    print_load_average,
    report_kernels_and_load,
    time_calls,
    tip3p_water,
    tip4pew_peptide_box,
)

DT = 0.002  # ps
TEMPERATURE = 300.0  # K
FRICTION = 1.0  # 1/ps
CASES = ("dipeptide", "dipeptide-replicas", "tip4pew-peptide", "3k", "3k-replicas", "24k", "dodecahedron")
WATERS = {"3k": 1000, "24k": 8000}  # water molecules -> 3,000 and 24,000 atoms
STEPS = {"dipeptide": 5000, "tip4pew-peptide": 200, "3k": 50, "24k": 10, "dodecahedron": 50}
EVALUATIONS = {"dipeptide": 500, "tip4pew-peptide": 50, "3k": 20, "24k": 4, "dodecahedron": 20}
REPLICAS = 20
REPLICA_ROUNDS = {"dipeptide-replicas": (4, 500), "3k-replicas": (2, 25)}  # rounds, steps per round


def ns_per_day(seconds_per_step: float) -> float:
    """Simulated nanoseconds per day at ``DT`` for a wall time per step."""
    return DT * 1e-3 * 86400.0 / seconds_per_step


def build(label: str):
    """``(system, openmm_system, constraints, description)`` of a benchmark case."""
    if label.startswith("dipeptide"):
        system, openmm_system = dipeptide_in_vacuum()
        return system, openmm_system, None, "alanine dipeptide in vacuum, amber14, HBonds"
    if label == "tip4pew-peptide":
        system, openmm_system = tip4pew_peptide_box()
        return system, openmm_system, None, "dipeptide + TIP4P-Ew + NaCl, NPT (the System's barostat)"
    if label == "dodecahedron":
        system, openmm_system = peptide_in_dodecahedron()
        return system, openmm_system, "water+hbonds", "10-residue peptide + TIP3P, 3 nm rhombic dodecahedron"
    system, openmm_system = tip3p_water(WATERS[label.split("-")[0]])
    return system, openmm_system, "water", "TIP3P, cubic box, PME 0.9 nm"


def step_profile(simulation, steps: int, rows: int = 12) -> str:
    """Force evaluation against a whole step, and the top torch ops of ``steps`` steps."""
    from torch.profiler import ProfilerActivity, profile

    state = simulation.state
    force = time_calls(lambda: simulation.energy_and_forces(state.positions, state.box), 3, warmup=1)
    step = time_calls(lambda: simulation.run(steps), 1, warmup=1) / steps
    lines = [
        f"  mindsponge step {1e3 * step:.3f} ms; energy+forces called from Python {1e3 * force:.3f} ms "
        f"(the compiled loop calls them from C++: the rest of the step is the integrator, constraints and "
        f"the loop)"
    ]
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        simulation.run(steps)
    lines.append(f"  torch.profiler, {steps} steps, top torch ops by self CPU time:")
    lines.append(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))
    return "\n".join(lines)


def _threads(setting):
    """``(torch threads or None, OpenMM Threads or None, mindsponge threads= argument)`` of a setting."""
    if setting == "default":
        return None, None, "auto"
    count = int(setting)
    return count, count, count


def measure_single(label, system, openmm_system, constraints, positions, velocities, setting, quick):
    """Energy+forces and dynamics of one system at one thread setting: (seconds per E+F, per step) each."""
    import openmm

    import mindsponge as ms

    torch_threads, openmm_threads, ours = _threads(setting)
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    simulation = mindsponge_simulation(
        system,
        openmm_system,
        ms.integrators.LangevinMiddle(DT, TEMPERATURE, FRICTION),
        dtype=torch.float32,
        positions=positions,
        velocities=velocities,
        constraints=constraints,
        threads=ours,
    )
    integrator = openmm.LangevinMiddleIntegrator(TEMPERATURE, FRICTION, DT)
    context = openmm_context(openmm_system, integrator, threads=openmm_threads, positions=positions)
    context.setVelocities(velocities)
    steps = 5 if quick else STEPS[label]
    evaluations = 2 if quick else EVALUATIONS[label]
    rounds = 2 if quick else 4
    state = simulation.state
    forces = best_of_rounds(
        {
            "openmm": lambda: context.getState(getEnergy=True, getForces=True),
            "mindsponge": lambda: simulation.energy_and_forces(state.positions, state.box),
        },
        repeats=evaluations,
        rounds=rounds,
        warmup=1,
    )
    dynamics = best_of_rounds(
        {"openmm": lambda: integrator.step(steps), "mindsponge": lambda: simulation.run(steps)},
        repeats=1,
        rounds=rounds,
        warmup=1,
    )
    temperature = simulation.observables(pressure=False)["temperature"]
    return (
        {name: value for name, value in forces.items()},
        {name: value / steps for name, value in dynamics.items()},
        temperature,
        simulation,
    )


def measure_replicas(label, system, openmm_system, constraints, positions, velocities, setting, quick):
    """Seconds per replica-step of ``REPLICAS`` replicas (replica exchange in one process) against OpenMM's
    seconds per step of one context."""
    import openmm

    import mindsponge as ms
    from mindsponge import replica_exchange as rex

    torch_threads, openmm_threads, _ = _threads(setting)
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    rounds, per_round = (1, 5) if quick else REPLICA_ROUNDS[label]
    high = 400.0 if label.startswith("dipeptide") else 330.0
    forcefield = ms.interop.openmm.from_openmm(openmm_system, dtype=torch.float32)
    start = system.replace(positions=torch.as_tensor(positions), velocities=torch.as_tensor(velocities))
    sampler = rex.ReplicaExchange(
        start.to(dtype=torch.float32),
        forcefield,
        [rex.ThermodynamicState(t) for t in rex.geometric_temperatures(TEMPERATURE, high, REPLICAS)],
        ms.integrators.LangevinMiddle(DT, TEMPERATURE, FRICTION),
        per_round,
        constraints=constraints,
        progress=False,
    )
    sampler.run(1)  # warm-up
    begin = time.perf_counter()
    sampler.run(rounds)
    ours = (time.perf_counter() - begin) / (rounds * per_round * REPLICAS)
    integrator = openmm.LangevinMiddleIntegrator(TEMPERATURE, FRICTION, DT)
    context = openmm_context(openmm_system, integrator, threads=openmm_threads, positions=positions)
    context.setVelocities(velocities)
    steps = rounds * per_round * 4
    integrator.step(per_round)
    reference = min(_timed_steps(integrator, steps) for _ in range(2 if quick else 3))
    acceptance = np.nanmean(sampler.record.acceptance()[np.arange(REPLICAS - 1), np.arange(1, REPLICAS)])
    return reference, ours, acceptance


def _timed_steps(integrator, steps):
    begin = time.perf_counter()
    integrator.step(steps)
    return (time.perf_counter() - begin) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short rounds (checks that everything runs)")
    parser.add_argument("--busy", action="store_true", help="keep one core busy with another process")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES), help="systems to run")
    parser.add_argument(
        "--threads",
        nargs="+",
        default=["1", "2", "default"],
        help="thread settings: numbers (both engines) or 'default' (default: 1 2 default)",
    )
    parser.add_argument("--profile", action="store_true", help="print where mindsponge's step time goes")
    arguments = parser.parse_args()
    report_kernels_and_load()
    ratios = {}
    with busy_core(arguments.busy):
        print(f"one core kept busy by another process: {arguments.busy}")
        for label in arguments.cases:
            system, openmm_system, constraints, description = build(label)
            positions, velocities = openmm_equilibrated(
                system, openmm_system, TEMPERATURE, steps=20 if arguments.quick else 200, threads=2
            )
            for setting in arguments.threads:
                if label.endswith("-replicas"):
                    reference, ours, acceptance = measure_replicas(
                        label,
                        system,
                        openmm_system,
                        constraints,
                        positions,
                        velocities,
                        setting,
                        arguments.quick,
                    )
                    ratios[label, setting, "per replica-step"] = reference / ours
                    print(
                        f"{label}: {description}, {REPLICAS} replicas, threads {setting}: OpenMM CPU one "
                        f"context {1e6 * reference:.1f} us/step, mindsponge {1e6 * ours:.1f} us per "
                        f"replica-step "
                        f"(mean neighbour acceptance {acceptance:.2f})",
                        flush=True,
                    )
                    continue
                forces, dynamics, temperature, simulation = measure_single(
                    label, system, openmm_system, constraints, positions, velocities, setting, arguments.quick
                )
                ratios[label, setting, "energy+forces"] = forces["openmm"] / forces["mindsponge"]
                ratios[label, setting, "dynamics"] = dynamics["openmm"] / dynamics["mindsponge"]
                openmm_step, our_step = dynamics["openmm"], dynamics["mindsponge"]
                print(
                    f"{label}: {description}, {system.n_atoms} particles, threads {setting}. Energy+forces: "
                    f"OpenMM CPU {1e3 * forces['openmm']:.3f} ms, mindsponge "
                    f"{1e3 * forces['mindsponge']:.3f} ms. Dynamics: OpenMM {1e3 * openmm_step:.3f} ms/step "
                    f"({ns_per_day(openmm_step):.1f} ns/day), mindsponge {1e3 * our_step:.3f} ms/step "
                    f"({ns_per_day(our_step):.1f} ns/day), "
                    f"{temperature:.0f} K",
                    flush=True,
                )
                if arguments.profile:
                    print(step_profile(simulation, 200 if label == "dipeptide" else 10))
    print_load_average("end")
    load = "one core busy" if arguments.busy else "idle"
    for (label, setting, kind), ratio in ratios.items():
        print(
            f"ratio OpenMM-CPU/mindsponge time, {load}, {kind:16s} {label:18s} threads {setting}: {ratio:.3f}"
        )


if __name__ == "__main__":
    main()
