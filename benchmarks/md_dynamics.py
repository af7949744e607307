"""MD throughput: mindsponge (float32) against OpenMM's CPU platform at 1 and 2 threads.

Three systems, PME with a 0.9 nm cutoff (OpenMM's default error tolerance 5e-4, dispersion
correction), Langevin dynamics by the BAOAB "middle" scheme at 300 K, 1/ps, 2 fs:

- ``3k``, ``24k``: boxes of rigid TIP3P water (``amber14/tip3p.xml``, built by
  ``ms.build.water_box``) of about 3,000 and 24,000 atoms, SETTLE;
- ``dodecahedron``: a 10-residue peptide (the first residues of villin) in TIP3P in a 3 nm
  rhombic dodecahedron (about 1,700 atoms; ``amber14-all.xml``, built by OpenMM's Modeller),
  bonds to hydrogen constrained and rigid water (mindsponge ``constraints="water+hbonds"``).
  The box is so small that the 1.0 nm list cutoff (cutoff + skin) is within 6% of half its
  height: the neighbour search reaches cells through several periodic images.

For each system and each thread count (torch threads and OpenMM's ``Threads`` alike):

- energy+forces: OpenMM ``Context.getState(getEnergy=True, getForces=True)`` against
  ``Simulation.energy_and_forces`` (one evaluation at a fixed configuration, the neighbour list kept);
- NVT dynamics: OpenMM ``LangevinMiddleIntegrator`` against
  :class:`~mindsponge.integrators.LangevinMiddle` (everything in float32, compiled CPU kernels).

OpenMM minimises and briefly thermalises each system; both engines start from that state. They
run in alternating rounds and the best round of each is reported (the machine may be shared:
the load average is printed). Also printed: where mindsponge's step time goes at the highest
thread count (the force evaluation alone against a whole step: the difference is the integrator,
constraints, centre-of-mass removal and the Python of ``Simulation.run``), and the top torch ops
of a few steps by self CPU time. The ratios mindsponge/OpenMM (higher is faster: OpenMM's time
over ours for energy+forces, ns/day over ns/day for dynamics) come last.

The figures need an otherwise idle machine: with more runnable processes than cores, the
threads of torch's OpenMP pool spin and wait for each other at every parallel region (measured
with two busy-loop processes on the 2 cores: energy+forces of the 3k box took several times
longer with 2 torch threads than with 1; see ``threads`` of :class:`mindsponge.Simulation`).

Where mindsponge's time goes (one thread, idle machine, 2026-11-27, with the cluster-pair kernel;
cProfile of 200 steps (3k) and 50 steps (24k) of ``Simulation.run``, perf for the kernels' insides):

- 3k TIP3P (625k pairs within cutoff + skin = 1.0 nm, PME grid 28^3), about 7.3 ms a step under the
  profiler: the direct-space kernel ``cluster_forces`` 2.8 ms, PME spreading and gathering 0.65 ms
  each and the two FFTs 0.3 ms, the exclusion corrections 0.15 ms, the cluster list built once every
  5 steps (skin 0.1 nm) in 2.6 ms, so 0.5 ms a step, and about 1.5 ms of Python and small torch
  operations (autograd Function, casts, energy sums, SETTLE).
- 24k TIP3P (5.0M pairs): ``cluster_forces`` 23 ms, PME 11.5 ms, the list 25 ms once every 5 steps.
- The kernel: clusters of 8 atoms against the clusters they list, two atoms against the partner's 8
  in 16 SIMD lanes (see ``mindsponge/_kernels/cluster_forces.cpp``). The lanes hold 1.7x as many pairs as
  the list has (pairs of a cluster row beyond the list cutoff ride along), but the data are read and
  the forces accumulated as whole vectors: the per-atom row kernel it replaced spent about 30 % of
  its time gathering partners pair by pair and 15 % scattering their forces. With the hardware's
  reciprocal square root (AVX-512, one Newton step) it is 1.17x (3k), 1.20x (24k) and 1.14x
  (dodecahedron) faster than that kernel alone, and the cluster list builds 1.6-2.6x faster than the
  per-atom rows (3k 5.0 to 2.4 ms, 24k 34 to 21 ms).
- What is left: PME spreading and gathering (a third of the 24k energy+forces), and at two threads
  on the small dodecahedron, the fixed cost of a step (Python, the autograd Function, constraints).
  Two threads only pay off on an idle machine (see the paragraph above).

TorchMD is not compared: ``pip install --dry-run torchmd`` would leave torch alone, but
TorchMD has no PME (cutoff electrostatics with an optional reaction field only) and no
constraints (no rigid water), so it cannot run this system with these settings.

Usage::

    .venv/bin/python benchmarks/md_dynamics.py [--quick] [--cases 3k 24k dodecahedron] [--threads 1 2]
        [--profile]
"""

from __future__ import annotations

import argparse

import torch
from md_common import (
    best_of_rounds,
    mindsponge_simulation,
    openmm_context,
    openmm_equilibrated,
    peptide_in_dodecahedron,
    print_load_average,
    report_kernels_and_load,
    time_calls,
    tip3p_water,
)

THREADS = (1, 2)
DT = 0.002  # ps
TEMPERATURE = 300.0  # K
FRICTION = 1.0  # 1/ps
CASES = ("3k", "24k", "dodecahedron")
WATERS = {"3k": 1000, "24k": 8000}  # water molecules -> 3,000 and 24,000 atoms
STEPS = {"3k": 50, "24k": 10, "dodecahedron": 50}  # per timed round of dynamics
EVALUATIONS = {"3k": 20, "24k": 4, "dodecahedron": 20}  # per timed round of energy+forces


def ns_per_day(seconds_per_step: float) -> float:
    """Simulated nanoseconds per day at ``DT`` for a wall time per step."""
    return DT * 1e-3 * 86400.0 / seconds_per_step


def step_profile(simulation, steps: int, rows: int = 12) -> str:
    """Force evaluation against a whole step, and the top torch ops of ``steps`` steps."""
    from torch.profiler import ProfilerActivity, profile

    state = simulation.state
    force = time_calls(lambda: simulation.energy_and_forces(state.positions, state.box), 3, warmup=1)
    step = time_calls(lambda: simulation.run(steps), 1, warmup=1) / steps
    lines = [
        f"  mindsponge step {1e3 * step:.1f} ms = force evaluation {1e3 * force:.1f} ms "
        f"({100 * force / step:.0f} %) + the rest (integrator, constraints, Python) "
        f"{1e3 * (step - force):.1f} ms"
    ]
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        simulation.run(steps)
    lines.append(f"  torch.profiler, {steps} steps, top torch ops by self CPU time (compiled kernels are "
                 "not listed: they are the rest of the time):")
    lines.append(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))
    return "\n".join(lines)


def build(label: str):
    """``(system, openmm_system, constraints, description)`` of a benchmark case."""
    if label == "dodecahedron":
        system, openmm_system = peptide_in_dodecahedron()
        return system, openmm_system, "water+hbonds", "10-residue peptide + TIP3P, 3 nm rhombic dodecahedron"
    system, openmm_system = tip3p_water(WATERS[label])
    return system, openmm_system, "water", "TIP3P, cubic box"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short rounds (checks that everything runs)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES), help="systems to run")
    parser.add_argument("--threads", type=int, nargs="+", default=list(THREADS),
                        help="thread counts of both engines (default 1 2)")
    parser.add_argument("--profile", action="store_true", help="print where mindsponge's step time goes")
    arguments = parser.parse_args()
    import openmm

    import mindsponge as ms

    report_kernels_and_load()
    rounds = 2 if arguments.quick else 4
    ratios = {}
    for label in arguments.cases:
        system, openmm_system, constraints, description = build(label)
        positions, velocities = openmm_equilibrated(
            system, openmm_system, TEMPERATURE, steps=20 if arguments.quick else 100,
            threads=max(arguments.threads),
        )
        simulation = mindsponge_simulation(
            system, openmm_system, ms.integrators.LangevinMiddle(DT, TEMPERATURE, FRICTION),
            dtype=torch.float32, positions=positions, velocities=velocities, constraints=constraints,
        )
        steps = 2 if arguments.quick else STEPS[label]
        evaluations = 2 if arguments.quick else EVALUATIONS[label]
        for threads in arguments.threads:
            torch.set_num_threads(threads)
            integrator = openmm.LangevinMiddleIntegrator(TEMPERATURE, FRICTION, DT)
            context = openmm_context(openmm_system, integrator, threads=threads, positions=positions)
            context.setVelocities(velocities)
            state = simulation.state
            forces = best_of_rounds(
                {"openmm": lambda context=context: context.getState(getEnergy=True, getForces=True),
                 "mindsponge": lambda state=state, simulation=simulation: simulation.energy_and_forces(
                     state.positions, state.box)},
                repeats=evaluations, rounds=rounds, warmup=1,
            )
            dynamics = best_of_rounds(
                {"openmm": lambda integrator=integrator, steps=steps: integrator.step(steps),
                 "mindsponge": lambda simulation=simulation, steps=steps: simulation.run(steps)},
                repeats=1, rounds=rounds, warmup=1,
            )
            reference = ns_per_day(dynamics["openmm"] / steps)
            ours = ns_per_day(dynamics["mindsponge"] / steps)
            ratios[label, threads, "energy+forces"] = forces["openmm"] / forces["mindsponge"]
            ratios[label, threads, "NVT dynamics"] = ours / reference
            print(
                f"{label}: {description}, {system.n_atoms} atoms, PME 0.9 nm, {threads} thread(s), best of "
                f"{rounds} rounds. Energy+forces: OpenMM CPU {1e3 * forces['openmm']:.1f} ms, mindsponge "
                f"float32 {1e3 * forces['mindsponge']:.1f} ms. Langevin 2 fs, {steps} steps: OpenMM CPU "
                f"{reference:.2f} "
                f"ns/day ({1e3 * dynamics['openmm'] / steps:.1f} ms/step), mindsponge {ours:.2f} ns/day "
                f"({1e3 * dynamics['mindsponge'] / steps:.1f} ms/step); temperature "
                f"{simulation.energies(pressure=False)['temperature']:.0f} K", flush=True,
            )
            del context
        if arguments.profile:
            print(step_profile(simulation, max(steps // 2, 2)))
    print_load_average("end")
    for (label, threads, kind), ratio in ratios.items():
        print(f"ratio mindsponge/OpenMM-CPU {kind:13s} {label:12s} {threads} thread(s): {ratio:.3f}")


if __name__ == "__main__":
    main()
