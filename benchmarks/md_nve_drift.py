"""Energy conservation in NVE: mindsponge (float64, float32) against OpenMM on the same system.

A box of rigid TIP3P water (216 molecules, 648 atoms; SETTLE) with PME (0.9 nm cutoff,
Lennard-Jones switched from 0.8 nm, Ewald error tolerance 1e-5), velocity Verlet at 1 fs,
no centre-of-mass motion removal. OpenMM minimises the box and thermalises it at 300 K
(Langevin, 5 ps); every engine then starts from exactly these positions and velocities and
integrates ``--ps`` picoseconds of NVE (default 20 ps), recording the total energy every 10 fs:

- OpenMM Reference platform (double precision) with ``VerletIntegrator``;
- OpenMM CPU platform (mixed precision: single-precision forces), for context;
- mindsponge float64 and float32 (state, forces and integration in that dtype) with
  :class:`mindsponge.integrators.VelocityVerlet` and ``constraints="water"``.

Printed for each: the total-energy fluctuation per degree of freedom (standard deviation,
kJ/mol/dof; measurable in a few ps) and the drift per degree of freedom (slope of a linear fit,
kJ/mol/ns/dof; noise dominates fits shorter than ~20 ps). The last line is the ratio of the
mindsponge float64 fluctuation to OpenMM Reference's.

Usage::

    .venv/bin/python benchmarks/md_nve_drift.py [--quick] [--ps 20] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from md_common import (
    drift_per_dof,
    mindsponge_simulation,
    openmm_context,
    openmm_equilibrated,
    run_engines,
    sample_series,
    tip3p_water,
)

DT = 0.001  # ps
EVERY = 10  # steps between energy samples
WATERS = 216
EWALD_TOLERANCE = 1e-5


def nve_system():
    """The water box and OpenMM System of this benchmark (rebuilt identically in every process)."""
    return tip3p_water(WATERS, ewald_tolerance=EWALD_TOLERANCE, switch_distance=0.8,
                       remove_center_of_mass_motion=False)


def openmm_series(platform, positions, velocities, n_samples, progress, output):
    """Total energies (kJ/mol) every ``EVERY`` steps of OpenMM velocity Verlet on ``platform``."""
    import openmm
    from openmm import unit

    _, openmm_system = nve_system()
    integrator = openmm.VerletIntegrator(DT)
    integrator.setConstraintTolerance(1e-10)
    context = openmm_context(openmm_system, integrator, platform=platform, positions=positions)
    context.setVelocities(velocities)

    def total_energy():
        state = context.getState(getEnergy=True)
        total = state.getPotentialEnergy() + state.getKineticEnergy()
        return total.value_in_unit(unit.kilojoule_per_mole)

    return sample_series(
        lambda: integrator.step(EVERY), total_energy, n_samples, f"OpenMM {platform}", progress, output
    )


def mindsponge_series(dtype, positions, velocities, n_samples, progress, output):
    """Total energies (kJ/mol) every ``EVERY`` steps of mindsponge velocity Verlet in ``dtype``."""
    import mindsponge as ms

    system, openmm_system = nve_system()
    simulation = mindsponge_simulation(
        system, openmm_system, ms.integrators.VelocityVerlet(DT), dtype=dtype, positions=positions,
        velocities=velocities, remove_center_of_mass_motion=False, constraint_tolerance=1e-10,
    )
    if simulation.degrees_of_freedom != 6 * WATERS:
        raise RuntimeError(f"mindsponge counts {simulation.degrees_of_freedom} degrees of freedom")
    return sample_series(
        lambda: simulation.run(EVERY), lambda: simulation.observables(pressure=False)["total"], n_samples,
        f"mindsponge {dtype}", progress, output,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 ps instead of --ps (fluctuation only)")
    parser.add_argument("--ps", type=float, default=20.0, help="length of each NVE run, ps (default 20)")
    parser.add_argument("--jobs", type=int, default=1, help="engines run at a time, in processes (default 1)")
    parser.add_argument("--output", default=None, help="directory for the series (.npy)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    arguments = parser.parse_args()
    if not arguments.ps > 0:
        parser.error(f"--ps must be positive, got {arguments.ps}")
    torch.set_num_threads(1)
    length = 2.0 if arguments.quick else arguments.ps
    n_samples = round(length / (DT * EVERY))
    progress = not arguments.no_progress
    print("load average (1, 5, 15 min) at start: " + ", ".join(f"{load:.2f}" for load in os.getloadavg()))

    system, openmm_system = nve_system()
    positions, velocities = openmm_equilibrated(system, openmm_system, steps=2500)
    times = DT * EVERY * np.arange(1, n_samples + 1)
    start = (positions, velocities, n_samples, progress, arguments.output)
    finished = run_engines(
        {
            "OpenMM Reference (double)": (openmm_series, ("Reference", *start)),
            "OpenMM CPU (mixed)": (openmm_series, ("CPU", *start)),
            "mindsponge float64": (mindsponge_series, (torch.float64, *start)),
            "mindsponge float32": (mindsponge_series, (torch.float32, *start)),
        },
        arguments.jobs,
    )
    dof = 6 * WATERS  # 9 coordinates - 3 constraints per water, no centre-of-mass removal
    print(
        f"NVE, {WATERS} rigid TIP3P waters ({3 * WATERS} atoms, {dof} degrees of freedom), PME 0.9 nm "
        f"(switch 0.8 nm, tolerance {EWALD_TOLERANCE:g}), dt {1e3 * DT:g} fs, {length:g} ps, "
        f"energy every {EVERY} steps"
    )
    print(f"{'engine':<28s} {'fluctuation':>14s} {'drift':>18s} {'mean total':>13s} {'wall':>8s}")
    print(f"{'':<28s} {'kJ/mol/dof':>14s} {'kJ/mol/ns/dof':>18s} {'kJ/mol':>13s} {'s':>8s}")
    fluctuations = {}
    for name, (energies, seconds) in finished.items():
        drift, fluctuation = drift_per_dof(times, energies, dof)
        fluctuations[name] = fluctuation
        print(f"{name:<28s} {fluctuation:14.3e} {drift:18.3e} {energies.mean():13.2f} {seconds:8.1f}")
    if length < 20:
        print(f"(a {length:g} ps fit does not resolve the drift: noise alone gives ~0.1 kJ/mol/ns/dof)")
    ratio = fluctuations["mindsponge float64"] / fluctuations["OpenMM Reference (double)"]
    print(f"ratio of total-energy fluctuations mindsponge float64 / OpenMM Reference: {ratio:.3f}")


if __name__ == "__main__":
    main()
