"""Binding free energy of CB7-B2 (host-guest, explicit TIP3P): mindsponge against openmmtools and experiment.

The protocol is that of ``benchmarks/free_energy.py`` (whose code this script uses): the same 14 states
(electrostatics annihilated, then sterics decoupled, openmmtools' ``AbsoluteAlchemicalFactory`` defaults),
Hamiltonian replica exchange with swap-all mixing, BAOAB / ``LangevinMiddleIntegrator`` at 300 K, 1/ps,
2 fs, MBAR over the states. Two legs:

- complex: openmmtools' ``cb7-b2/complex-explicit.prmtop``/``.inpcrd`` (CB7 atoms 0-125, B2 126-155, GAFF
  with AM1-BCC charges, TIP3P, tleap's box), PME, 0.9 nm cutoff, bonds to hydrogen constrained, rigid
  water, minimised and equilibrated once by OpenMM (NPT, 1 bar); a flat-bottom restraint between the
  centroids of the host's heavy atoms within 0.8 nm of the guest's centroid
  (:func:`mindsponge.restraints.select_centroid_atoms`) and the guest, K = 418.4 kJ/mol/nm^2 (1
  kcal/mol/A^2), r0 = the starting distance + 0.3 nm, on at every state (``lambda_restraints = 1``: it
  is flat where the bound guest sits). openmmtools runs its own
  ``openmmtools.forces.FlatBottomRestraintForce`` with those parameters; mindsponge runs
  :class:`mindsponge.restraints.CentroidRestraint`;
- solvent: the guest (``cb7-b2/ligand.prmtop``) in a TIP3P box built as the hydration benchmark builds it.

``dG_bind = dF_solvent - dF_complex - dG_restraint`` where ``dF`` is decoupled minus coupled and
``dG_restraint`` the standard-state correction (openmmtools' and ours are printed; they agree to 1e-8).
Host and guest carry net charge; the annihilated guest's charge is not neutralised (both sides alike).

Experiment: B2 is a bicyclo[2.2.2]octane guest of S. Moghaddam et al., J. Am. Chem. Soc. 133, 3570-3581
(2011), whose abstract reports these guests binding CB7 about as strongly as the ferrocene guest of
Rekharsky et al., PNAS 104, 20737 (2007) (dG = -21 kcal/mol); -21 kcal/mol is used here (B2's own table
value not checked; the APR calculation of Henriksen et al., JCTC 11, 4377 (2015) gives -21.25 +- 0.22 with
a related set-up).

Resumable: every leg and side checkpoints after every iteration under
``benchmarks/output/binding_free_energy/<size>/`` (openmmtools' NetCDF, our checkpoint, per-iteration
wall times) and a re-run continues. The full size takes longer than a machine lives (about 14 core-hours
for the four runs), so it also keeps what a run on another machine needs inside the repository, under
``benchmarks/data/binding_free_energy/full/``: the equilibrated boxes (``complex/``, ``solvent/``), from
which the restraint follows, and each leg and side's portable state (``carry/<leg>_<side>/``: our
checkpoint; openmmtools' replica positions, velocities, boxes, states and reduced potentials), written
every 10 minutes of sampling; a run on a fresh clone continues from them. The reduced potentials of each
finished leg and side go to ``<leg>_<side>.npz`` there (energies ``(T, R, K)`` kT, the state of each
replica ``(T, R)``, seconds per iteration) and the derived figures to ``results.json`` once all four are
done, so a later session can re-analyse or continue (``--iterations`` raises the target). ``--quick``
keeps everything under ``benchmarks/output``.

Usage::

    .venv/bin/python benchmarks/binding_free_energy.py [--quick] [--sides openmm mindsponge]
        [--legs complex solvent] [--iterations N]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import free_energy as hydration
import numpy as np
import torch
from md_common import print_load_average, report_kernels_and_load

SIZES = {
    "quick": {"iterations": 3, "steps": 20, "burn_in": 1, "equilibration": 500},
    "full": {"iterations": 300, "steps": 250, "burn_in": 30, "equilibration": 50000},
}
RECEPTOR, LIGAND = list(range(126)), list(range(126, 156))
SPRING_CONSTANT = 418.4  # kJ/mol/nm^2
WELL_MARGIN = 0.3  # nm added to the starting centroid distance
EXPERIMENT = -21.0  # kcal/mol (see the docstring)
HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "output", "binding_free_energy")
DATA = os.path.join(HERE, "data", "binding_free_energy")
hydration.MOLECULES["cb7-b2-guest"] = {"prmtop": "cb7-b2/ligand.prmtop",
                                       "coordinates": "cb7-b2/ligand.inpcrd", "experiment": None}


def complex_system(output: str, equilibration: int):
    """``(openmm_system, topology, positions (N, 3) nm, box (3, 3) nm)`` of the solvated complex, equilibrated
    by OpenMM (cached)."""
    from openmm import app, unit

    prmtop = app.AmberPrmtopFile(hydration.openmmtools_data("cb7-b2/complex-explicit.prmtop"))
    inpcrd = app.AmberInpcrdFile(hydration.openmmtools_data("cb7-b2/complex-explicit.inpcrd"))
    system = prmtop.createSystem(nonbondedMethod=app.PME, nonbondedCutoff=hydration.CUTOFF * unit.nanometer,
                                 constraints=app.HBonds, rigidWater=True)
    system.setDefaultPeriodicBoxVectors(*inpcrd.getBoxVectors())
    positions = np.asarray(inpcrd.getPositions(asNumpy=True).value_in_unit(unit.nanometer))
    positions, box = hydration.equilibrated(system, positions, output, equilibration)
    return system, prmtop.topology, positions, box


def restraint_of(openmm_system, positions):
    """The flat-bottom restraint (ours) chosen from the equilibrated complex (see the docstring)."""
    from mindsponge import restraints

    count = openmm_system.getNumParticles()
    masses = np.array([openmm_system.getParticleMass(i)._value for i in range(count)])
    receptor = restraints.select_centroid_atoms(positions, RECEPTOR, LIGAND, masses)
    centres = [np.average(positions[atoms], axis=0, weights=masses[atoms]) for atoms in (receptor, LIGAND)]
    return restraints.CentroidRestraint("flat-bottom", receptor, LIGAND, SPRING_CONSTANT,
                                        float(np.linalg.norm(centres[0] - centres[1])) + WELL_MARGIN)


def restrained_systems(openmm_system, restraint):
    """Two copies of the complex System: with openmmtools' ``FlatBottomRestraintForce`` (the reference) and
    with ours, the same parameters, both periodic."""
    import openmm
    from openmm import unit
    from openmmtools import forces

    from mindsponge import restraints

    reference = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(openmm_system))
    spring_constant = restraint.spring_constant * unit.kilojoule_per_mole / unit.nanometer**2
    force = forces.FlatBottomRestraintForce(spring_constant, restraint.well_radius * unit.nanometer,
                                            list(restraint.receptor_atoms), list(restraint.ligand_atoms))
    force.setUsesPeriodicBoundaryConditions(True)
    reference.addForce(force)
    ours = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(openmm_system))
    restraints.add_restraint(ours, restraint)
    return reference, ours, force


def save_run(run: dict, path: str) -> None:
    """A leg's reduced potentials, states and wall times, compressed (atomic)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.savez_compressed(path + ".partial.npz", energies=run["energies"].astype(np.float32),
                        replica_states=run["replica_states"].astype(np.int16),
                        seconds=np.asarray(run["seconds"]))
    os.replace(path + ".partial.npz", path)


def main() -> None:
    from openmm import unit
    from openmmtools import states as mmstates
    from pymbar.utils import ParameterError

    import mindsponge as ms

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binding", default="cb7-b2", choices=["cb7-b2"], help="the host-guest system")
    parser.add_argument("--quick", action="store_true", help="a few short iterations (exercises everything)")
    parser.add_argument("--iterations", type=int, default=None, help="override the size's iterations")
    parser.add_argument("--sides", nargs="+", default=["openmm", "mindsponge"],
                        choices=["openmm", "mindsponge"])
    parser.add_argument("--legs", nargs="+", default=["complex", "solvent"], choices=["complex", "solvent"],
                        help="the legs to run (the binding free energy needs both; a run of one leg stops "
                             "after it)")
    arguments = parser.parse_args()
    size_name = "quick" if arguments.quick else "full"
    size = dict(SIZES[size_name])
    if arguments.iterations is not None:
        size["iterations"] = arguments.iterations
    torch.set_num_threads(1)
    report_kernels_and_load()
    output = os.path.join(OUTPUT, size_name)
    data = os.path.join(DATA, size_name) if size_name == "full" else output  # the full size's files carry on
    states = ms.alchemy.lambda_schedule(electrostatics=hydration.ELECTROSTATICS, sterics=hydration.STERICS)
    start = time.perf_counter()
    plain, topology, positions, box = complex_system(os.path.join(data, "complex"), size["equilibration"])
    restraint = restraint_of(plain, positions)
    reference_system, our_system, reference_force = restrained_systems(plain, restraint)
    thermodynamic = mmstates.ThermodynamicState(reference_system, hydration.TEMPERATURE * unit.kelvin)
    corrections = {"openmm": reference_force.compute_standard_state_correction(thermodynamic),
                   "mindsponge": restraint.standard_state_correction(hydration.TEMPERATURE,
                                                                     max_volume=abs(np.linalg.det(box)))}
    solvent = hydration.solvated_system("cb7-b2-guest", os.path.join(data, "solvent"),
                                        size["equilibration"])
    print(f"complex: {plain.getNumParticles()} atoms, box {box[0, 0]:.3f} nm; restraint on "
          f"{len(restraint.receptor_atoms)} host atoms, r0 {restraint.well_radius:.3f} nm; standard-state "
          f"correction openmmtools {corrections['openmm']:.6f} kT, ours {corrections['mindsponge']:.6f} kT; "
          f"solvent: {solvent[0].getNumParticles()} atoms (set-up {time.perf_counter() - start:.0f} s)")
    print(f"{len(states)} states, {size['iterations']} iterations x {size['steps']} steps per state")
    legs = {"complex": ({"openmm": reference_system, "mindsponge": our_system}, topology, positions, box,
                        LIGAND),
            "solvent": ({"openmm": solvent[0], "mindsponge": solvent[0]}, solvent[1], solvent[2], solvent[3],
                        solvent[4])}
    figures = {}
    for leg in arguments.legs:
        systems, leg_topology, leg_positions, leg_box, atoms = legs[leg]
        for side in arguments.sides:
            directory = os.path.join(output, leg, side)
            carry = os.path.join(data, "carry", f"{leg}_{side}") if size_name == "full" else None
            if side == "openmm":
                run = hydration.run_openmmtools(systems[side], leg_positions, leg_box, atoms, states,
                                                size["iterations"], size["steps"], directory, carry=carry)
            else:
                run = hydration.run_mindsponge(systems[side], leg_topology, leg_positions, leg_box, atoms,
                                               states, size["iterations"], size["steps"], directory,
                                               carry=carry)
            save_run(run, os.path.join(data, f"{leg}_{side}.npz"))
            try:
                result = hydration.free_energy(run, size["burn_in"])
            except ParameterError as error:  # too few samples to overlap (--quick)
                result = {"delta_f": float("nan"), "error": float("nan"), "mbar_failed": str(error)[:200]}
            timed = run["seconds"][1:] or run["seconds"]
            result["seconds_per_iteration"] = float(np.median(timed))
            result["ns_per_day_per_window"] = hydration.ns_per_day_per_window(timed, size["steps"],
                                                                              len(states))
            figures[f"{leg}/{side}"] = result
            print(f"  {leg:7s} {side:10s} dF = {result['delta_f']:8.3f} +- {result['error']:.3f} kcal/mol, "
                  f"{result['seconds_per_iteration']:.1f} s per iteration ({len(states)} replicas x "
                  f"{size['steps']} steps), {result['ns_per_day_per_window']:.2f} ns/day per window")
    if len(arguments.legs) < len(legs):
        print_load_average("end (one leg: no binding free energy)")
        return
    kcal = hydration.TEMPERATURE * 0.0083144626 / hydration.KJ_PER_KCAL
    results = {"size": size, "states": [state.parameters for state in states], "legs": figures,
               "restraint": {"receptor_atoms": list(restraint.receptor_atoms),
                             "well_radius_nm": restraint.well_radius,
                             "spring_constant": restraint.spring_constant,
                             "correction_kT": corrections}, "experiment_kcal_per_mol": EXPERIMENT}
    for side in arguments.sides:
        complex_leg, solvent_leg = figures[f"complex/{side}"], figures[f"solvent/{side}"]
        value = solvent_leg["delta_f"] - complex_leg["delta_f"] - kcal * corrections[side]
        error = float(np.hypot(complex_leg["error"], solvent_leg["error"]))
        results[side] = {"dG_bind": value, "error": error}
        print(f"  {side}: dG_bind = {value:.2f} +- {error:.2f} kcal/mol (experiment {EXPERIMENT:.1f})")
    for leg in legs:
        steps_total = SIZES["full"]["iterations"] * SIZES["full"]["steps"] / size["steps"]
        for side in arguments.sides:
            hours = figures[f"{leg}/{side}"]["seconds_per_iteration"] * steps_total / 3600
            print(f"  full size ({SIZES['full']['iterations']} x {SIZES['full']['steps']} steps), "
                  f"{leg} {side}: about {hours:.0f} h at this speed")
    results["date"], results["load_average_at_end"] = time.strftime("%Y-%m-%d"), list(os.getloadavg())
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, "results.json"), "w") as handle:
        json.dump(results, handle, indent=1)
    print_load_average("end")


if __name__ == "__main__":
    main()
