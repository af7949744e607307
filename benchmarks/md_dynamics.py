"""MD throughput (ns/day): mindsponge (float32) against OpenMM's CPU platform, NVT Langevin.

Boxes of rigid TIP3P water (``amber14/tip3p.xml``, built by ``ms.build.water_box``) of about
3,000 and 24,000 atoms, PME with a 0.9 nm cutoff (OpenMM's default error tolerance 5e-4,
dispersion correction), SETTLE, Langevin dynamics by the BAOAB "middle" scheme at 300 K,
1/ps, 2 fs:

- OpenMM: ``LangevinMiddleIntegrator`` on its CPU platform with 2 threads (``rigidWater``);
- mindsponge: :class:`~mindsponge.integrators.LangevinMiddle` with ``constraints="water"``,
  everything in float32, 2 torch threads, compiled CPU kernels (built once per machine).

OpenMM minimises and briefly thermalises each box; both engines start from that state. They
run in alternating rounds of the same number of steps and the best round of each is reported
(the machine is shared: the load average is printed). Also printed: where mindsponge's step
time goes (the force evaluation alone against a whole step: the difference is the integrator,
SETTLE, centre-of-mass removal and the Python of ``Simulation.run``), and the top torch ops
of a few steps by self CPU time. The ratio mindsponge/OpenMM ns/day comes last.

The figures need an otherwise idle machine: with more runnable processes than cores, torch's
intra-op thread pool costs milliseconds per small op (measured at load average 9 on 2 cores:
``sqrt`` of 1,000 floats 8 ms with 2 threads, 2 us with 1; ``round`` of 9,000 floats 5 ms vs
2 us), which lands on the integrator and SETTLE (many small ops per step) far more than on
OpenMM; the step-time split printed below shows it.

TorchMD is not compared: ``pip install --dry-run torchmd`` would leave torch alone, but
TorchMD has no PME (cutoff electrostatics with an optional reaction field only) and no
constraints (no rigid water), so it cannot run this system with these settings.

Usage::

    .venv/bin/python benchmarks/md_dynamics.py [--quick]
"""

from __future__ import annotations

import argparse

import torch
from md_common import (
    best_of_rounds,
    mindsponge_simulation,
    openmm_context,
    openmm_equilibrated,
    print_load_average,
    report_kernels_and_load,
    time_calls,
    tip3p_water,
)

THREADS = 2
DT = 0.002  # ps
TEMPERATURE = 300.0  # K
FRICTION = 1.0  # 1/ps
SIZES = {"3k": 1000, "24k": 8000}  # water molecules -> 3,000 and 24,000 atoms


def ns_per_day(seconds_per_step: float) -> float:
    """Simulated nanoseconds per day at ``DT`` for a wall time per step."""
    return DT * 1e-3 * 86400.0 / seconds_per_step


def step_profile(simulation, steps: int, rows: int = 12) -> str:
    """Force evaluation against a whole step, and the top torch ops of ``steps`` steps."""
    from torch.profiler import ProfilerActivity, profile

    state = simulation.state
    force = time_calls(lambda: simulation.force(state.positions, state.box), 3, warmup=1)
    step = time_calls(lambda: simulation.run(steps), 1, warmup=1) / steps
    lines = [
        f"  mindsponge step {1e3 * step:.1f} ms = force evaluation {1e3 * force:.1f} ms "
        f"({100 * force / step:.0f} %) + the rest (integrator, SETTLE, Python) {1e3 * (step - force):.1f} ms"
    ]
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        simulation.run(steps)
    lines.append(f"  torch.profiler, {steps} steps, top torch ops by self CPU time (compiled kernels are "
                 "not listed: they are the rest of the time):")
    lines.append(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the ~3,000-atom box, short rounds")
    parser.add_argument("--threads", type=int, default=THREADS, help="threads of both engines (default 2)")
    arguments = parser.parse_args()
    threads = arguments.threads
    torch.set_num_threads(threads)
    import openmm

    import mindsponge as ms

    report_kernels_and_load()
    sizes = ["3k"] if arguments.quick else ["3k", "24k"]
    steps = {"3k": 20 if arguments.quick else 50, "24k": 10}
    rounds = 3 if arguments.quick else 4
    ratios = {}
    for label in sizes:
        system, openmm_system = tip3p_water(SIZES[label])
        positions, velocities = openmm_equilibrated(
            system, openmm_system, TEMPERATURE, steps=100, threads=threads
        )
        integrator = openmm.LangevinMiddleIntegrator(TEMPERATURE, FRICTION, DT)
        context = openmm_context(openmm_system, integrator, threads=threads, positions=positions)
        context.setVelocities(velocities)
        simulation = mindsponge_simulation(
            system, openmm_system, ms.integrators.LangevinMiddle(DT, TEMPERATURE, FRICTION),
            dtype=torch.float32, positions=positions, velocities=velocities,
        )
        count = steps[label]
        best = best_of_rounds(
            {"openmm": lambda count=count, integrator=integrator: integrator.step(count),
             "mindsponge": lambda count=count, simulation=simulation: simulation.run(count)},
            repeats=1, rounds=rounds, warmup=1,
        )
        reference, ours = ns_per_day(best["openmm"] / count), ns_per_day(best["mindsponge"] / count)
        ratios[label] = ours / reference
        print(
            f"TIP3P {system.n_atoms} atoms, PME 0.9 nm, SETTLE, Langevin 2 fs, best of {rounds} rounds of "
            f"{count} steps: OpenMM CPU ({threads} thr) {reference:.2f} ns/day "
            f"({1e3 * best['openmm'] / count:.1f} ms/step), mindsponge float32 {ours:.2f} ns/day "
            f"({1e3 * best['mindsponge'] / count:.1f} ms/step); "
            f"temperature {simulation.energies(pressure=False)['temperature']:.0f} K"
        )
        print(step_profile(simulation, max(count // 2, 5)))
        del context
    print_load_average("end")
    for label, ratio in ratios.items():
        print(f"ratio mindsponge/OpenMM-CPU ns/day ({label} atoms): {ratio:.3f}")


if __name__ == "__main__":
    main()
