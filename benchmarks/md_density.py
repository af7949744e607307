"""Density of TIP3P water at 300 K and 1 bar: mindsponge against OpenMM, same force field and settings.

A box of rigid TIP3P water (``--waters``, default 216; ``amber14/tip3p.xml``, PME 0.9 nm with
OpenMM's defaults: Ewald tolerance 5e-4, long-range dispersion correction; SETTLE). OpenMM
minimises it and thermalises it at 300 K (NVT, 5 ps); both engines then start from these
positions and velocities and run Langevin dynamics (BAOAB "middle" scheme, 2 fs, 1/ps) at
300 K with an isotropic Monte Carlo barostat at 1 bar (a volume move every 25 steps):

- OpenMM: ``LangevinMiddleIntegrator`` + ``MonteCarloBarostat``, CPU platform, 1 thread;
- mindsponge float64: :class:`~mindsponge.integrators.LangevinMiddle` +
  :class:`~mindsponge.barostats.MonteCarloBarostat`, ``constraints="water"``.

After ``--equilibrate`` ps (default 10) the density is sampled every 0.1 ps for
``--production`` ps (default 80). Printed for each engine: the mean density with its standard
error (from the statistical inefficiency of the series), then their relative difference with
its combined standard error, against the 1% goal. The last line is the ratio of the densities.
``--quick`` runs 2 + 4 ps (a smoke test: the error bars are then wide).

Usage::

    .venv/bin/python benchmarks/md_density.py [--quick] [--equilibrate 10] [--production 80] [--jobs 2]
"""

from __future__ import annotations

import argparse
import math
import os

import torch
from md_common import (
    mean_and_error,
    mindsponge_simulation,
    openmm_context,
    openmm_equilibrated,
    run_engines,
    sample_series,
    tip3p_water,
)

from common import units

DT = 0.002  # ps
TEMPERATURE = 300.0  # K
PRESSURE = 1.0  # bar
FRICTION = 1.0  # 1/ps
BAROSTAT_FREQUENCY = 25  # steps
SAMPLE_EVERY = 50  # steps (0.1 ps)


def openmm_densities(waters, positions, velocities, equilibrate, samples, progress, output):
    """Densities (g/cm^3) every ``SAMPLE_EVERY`` steps of OpenMM Langevin + Monte Carlo NPT."""
    import openmm
    from openmm import unit

    system, openmm_system = tip3p_water(waters)
    openmm_system.addForce(openmm.MonteCarloBarostat(PRESSURE, TEMPERATURE, BAROSTAT_FREQUENCY))
    integrator = openmm.LangevinMiddleIntegrator(TEMPERATURE, FRICTION, DT)
    integrator.setRandomNumberSeed(2)
    context = openmm_context(openmm_system, integrator, positions=positions)
    context.setVelocities(velocities)
    integrator.step(equilibrate)
    mass = float(system.masses.sum())

    def density():
        volume = context.getState().getPeriodicBoxVolume().value_in_unit(unit.nanometer**3)
        return mass / volume * units.AMU_PER_NM3_TO_G_PER_CM3

    advance = lambda: integrator.step(SAMPLE_EVERY)  # noqa: E731
    return sample_series(advance, density, samples, "OpenMM NPT", progress, output)


def mindsponge_densities(waters, positions, velocities, equilibrate, samples, progress, output):
    """Densities (g/cm^3) every ``SAMPLE_EVERY`` steps of mindsponge Langevin + Monte Carlo NPT."""
    import mindsponge as ms

    system, openmm_system = tip3p_water(waters)
    simulation = mindsponge_simulation(
        system, openmm_system, ms.integrators.LangevinMiddle(DT, TEMPERATURE, FRICTION),
        positions=positions, velocities=velocities, seed=2,
        barostat=ms.barostats.MonteCarloBarostat(PRESSURE, TEMPERATURE, BAROSTAT_FREQUENCY),
    )
    simulation.run(equilibrate)
    return sample_series(
        lambda: simulation.run(SAMPLE_EVERY),
        lambda: simulation.observables(pressure=False)["density"],
        samples,
        "mindsponge NPT", progress, output,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 ps equilibration + 4 ps production")
    parser.add_argument("--waters", type=int, default=216, help="number of water molecules (default 216)")
    parser.add_argument("--equilibrate", type=float, default=10.0, help="NPT equilibration, ps (default 10)")
    parser.add_argument("--production", type=float, default=80.0, help="NPT production, ps (default 80)")
    parser.add_argument("--jobs", type=int, default=1, help="engines run at a time, in processes (default 1)")
    parser.add_argument("--output", default=None, help="directory for the series (.npy)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    arguments = parser.parse_args()
    for name in ("waters", "equilibrate", "production"):
        if not getattr(arguments, name) > 0:
            parser.error(f"--{name} must be positive, got {getattr(arguments, name)}")
    equilibrate_ps, production_ps = (arguments.equilibrate, arguments.production)
    if arguments.quick:
        equilibrate_ps, production_ps = 2.0, 4.0
    equilibrate = round(equilibrate_ps / DT)
    samples = round(production_ps / (DT * SAMPLE_EVERY))
    progress = not arguments.no_progress
    torch.set_num_threads(1)
    print("load average (1, 5, 15 min) at start: " + ", ".join(f"{load:.2f}" for load in os.getloadavg()))

    system, openmm_system = tip3p_water(arguments.waters)
    positions, velocities = openmm_equilibrated(system, openmm_system, TEMPERATURE, steps=2500)
    start = (arguments.waters, positions, velocities, equilibrate, samples, progress, arguments.output)
    finished = run_engines(
        {"OpenMM CPU": (openmm_densities, start), "mindsponge float64": (mindsponge_densities, start)},
        arguments.jobs,
    )
    results = {}
    for name, (densities, seconds) in finished.items():
        results[name] = mean_and_error(densities)
        mean, error, inefficiency = results[name]
        print(
            f"{name:<20s} density {mean:.4f} +- {error:.4f} g/cm^3 (standard error; statistical "
            f"inefficiency {inefficiency:.1f} samples of 0.1 ps; {len(densities)} samples; {seconds:.0f} s)"
        )
    (reference, reference_error, _), (ours, our_error, _) = results.values()
    difference = ours / reference - 1.0
    error = math.hypot(our_error / reference, reference_error * ours / reference**2)
    print(
        f"TIP3P, {arguments.waters} waters, {TEMPERATURE:g} K, {PRESSURE:g} bar, PME 0.9 nm, "
        f"{equilibrate_ps:g} ps equilibration + {production_ps:g} ps production per engine: "
        f"relative difference {100 * difference:+.2f} % +- {100 * error:.2f} % "
        f"({'within' if abs(difference) < 0.01 else 'NOT within'} the 1 % goal)"
    )
    print(f"ratio of densities mindsponge/OpenMM: {ours / reference:.4f}")


if __name__ == "__main__":
    main()
