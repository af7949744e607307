"""Conformer populations of a learned potential against GFN2-xTB MD: 2-fluoroethanol (OCCF).

RDKit's one geometry of ``OCCF`` is anti (O-C-C-F near 180 degrees), but GFN2-xTB MD at 300 K
spends most of its time gauche (near +-60: the gauche effect and the O-H...F contact). A model
trained on samples that all start from that one geometry has never seen gauche, and its MD
populations are wrong without a sign. This script measures that, and the fix: samples started from
every conformer of RDKit's ETKDG ensemble (``xtb_sample``'s default ``conformers=10``), and the better
fix: decorrelated frames of long trajectories from those conformers at several temperatures
(``sampling="trajectory"``, the shipped recipe ``datasets/fluoroethanol_xtb.toml``).

1. Reference: Langevin MD under GFN2-xTB (tblite) at 300 K, several independent trajectories
   started in turn from each conformer of the ETKDG ensemble (anti, gauche+, gauche-), so that the
   populations do not depend on which basin one trajectory starts in.
2. Three datasets of ``xtb_sample`` labels: frames 100 fs apart of GFN2-xTB trajectories at 300, 450 and
   600 K from the conformers (405 samples, ``datasets/fluoroethanol_xtb.toml``); and the ends of 40-step
   GFN2-xTB runs at 300-600 K (400 samples) from the conformer ensemble, and from the single geometry
   (``conformers=1``, the old default).
3. One ACENet per dataset, trained for the same wall-clock budget.
4. Learned MD of the same length from the same starts, the trajectories run as batched replicas.
5. Umbrella sampling along the O-C-C-F torsion (24 windows 15 degrees apart, all the way round), for
   GFN2-xTB and for the model on the trajectory data by the same protocol: the windows sampled together as
   Hamiltonian replica exchange (:meth:`UmbrellaSampling.run_exchange`, neighbours swap every 50 fs),
   started from a relaxed GFN2-xTB scan (restrained minimisations at every centre, cached), the gauche
   population by MBAR (:meth:`UmbrellaSampling.population`) with block errors. Plain MD crosses between
   anti and gauche a few times in 20 ps, so its populations carry errors of several points per side; the
   windows need no crossing. Windows run one after the other instead (each from the end of the one
   before) carried a slow degree of freedom from window to window: their gauche- and gauche+ populations,
   equal for this achiral molecule, differed by 23 points, far beyond their block errors. The exchanges
   let configurations travel between windows; the gauche-/gauche+ difference is printed as the check.
   Along the relaxed scan, the model's energies are compared with GFN2-xTB's (the minimum-energy profile).

Printed: the gauche fraction (|O-C-C-F| < 120 degrees) of each, with the standard error over
trajectories, and the median torsion of the gauche frames (where the model puts the gauche well); then the
windows' populations (gauche- and gauche+ apart, and the neighbour acceptance) and the relaxed-scan gauche
minimum; last, the difference learned (trajectory data) - GFN2-xTB in percentage points from
the umbrella windows (and from plain MD).
Every stage is cached under ``benchmarks/output/conformer_populations`` (a killed run resumes at the
stage it reached, the windows at their last exchange round); the populations are written to
``benchmarks/data/conformer_populations.json``.

    python benchmarks/conformer_populations.py [--quick] [--threads 2] [--only STAGE] [--budget S]

``--only reference|learned|comparisons`` runs one part and fills its cache (GFN2-xTB MD and windows; the
model on the trajectory data, its MD and windows; the two short-run comparisons), so that the parts can run
side by side on separate cores; a run without it reads every cache, runs what is missing, and writes the
result. ``--budget S`` trains for S seconds instead (its models and their runs cached apart; with
``--without-comparisons`` only the model on the trajectory data); the JSON keeps one entry per budget.
"""

import argparse
import json
import os
import pathlib
import time

import ase
import numpy as np
import torch

import mindsponge as ms
from common import datasets
from mindsponge.bias import HarmonicRestraint
from mindsponge.colvar import Torsion
from mindsponge.replicas import ReplicaColvarReporter, replicate
from mindsponge.training import Trainer, TrainingData
from mindsponge.umbrella import UmbrellaSampling

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUTPUT = pathlib.Path(__file__).parent / "output" / "conformer_populations"  # gitignored
RESULT = pathlib.Path(__file__).parent / "data" / "conformer_populations.json"
SMILES = "OCCF"
TORSION = (0, 1, 2, 3)  # O-C-C-F in RDKit's atom order of OCCF
TEMPERATURE, TIMESTEP, FRICTION = 300.0, 0.0005, 5.0  # K, ps, 1/ps
RECIPE = """
name = "fluoroethanol_{name}"
description = "2-fluoroethanol, GFN2-xTB MD at 300-600 K from {what}, GFN2-xTB energies and forces"
[generator]
function = "mindsponge.labels:xtb_sample"
options = {{ molecule = "smiles:OCCF", sampling = "md", md_steps = 40, conformers = {conformers} }}
labels = ["positions", "atomic_numbers", "energy", "forces"]
[parameters]
temperature = {{ low = 300.0, high = 600.0 }}
[sampling]
method = "sobol"
n = {samples}
seed = 0
[output]
path = "fluoroethanol_{name}.h5"
"""
# trajectories x ps of the reference and of the learned MD on the trajectory data, samples per dataset,
# training budget s, and the trajectories of the two short-run comparisons (ensemble, single geometry)
SIZES = {
    "full": {"trajectories": 12, "picoseconds": 20.0, "samples": 400, "budget": 300.0, "comparisons": 6,
             "window_picoseconds": 10.0, "equilibration": 1000},
    "quick": {"trajectories": 3, "picoseconds": 2.0, "samples": 96, "budget": 45.0, "comparisons": 3,
              "window_picoseconds": 0.2, "equilibration": 100},
}
WINDOW_CENTERS = np.radians(np.arange(-180.0, 180.0, 15.0))  # rad, all the way round
WINDOW_FORCE_CONSTANT = 80.0  # kJ/mol/rad^2: a window's width sqrt(kT/k) is 10 degrees
WINDOW_EVERY, STEPS_PER_ROUND = 10, 100  # steps between samples and between exchanges
SCAN_FORCE_CONSTANT = 5000.0  # kJ/mol/rad^2: the restraint of the relaxed scan's minimisations
EDGES = np.radians(np.arange(-180.0, 180.1, 10.0))  # bins of the free-energy profile


def is_gauche(torsions: np.ndarray) -> np.ndarray:
    """|O-C-C-F| < 120 degrees, of torsions in rad."""
    return np.abs(np.degrees(torsions)) < 120.0


def gauche_centre(torsions: np.ndarray) -> float:
    """Median |O-C-C-F| (degrees) of the gauche frames of torsions ``(T, R)`` rad: the gauche well."""
    return float(np.median(np.abs(np.degrees(torsions))[is_gauche(torsions)]))


def gauche_fraction(torsions: np.ndarray) -> tuple[float, float]:
    """Gauche fraction of torsions ``(T, R)`` rad and its standard error over the ``R`` trajectories."""
    gauche = is_gauche(torsions).mean(0)
    error = gauche.std(ddof=1) / np.sqrt(len(gauche)) if len(gauche) > 1 else float("nan")
    return float(gauche.mean()), float(error)


def starts(count: int):
    """The first structure, its ``ase.Atoms``, and ``count`` starting positions ``(count, N, 3)`` nm that
    cycle through the conformer ensemble."""
    ensemble = ms.molecules.conformers(f"smiles:{SMILES}")
    first = ensemble[0]
    atoms = ase.Atoms(numbers=first.atomic_numbers, positions=10.0 * first.positions)
    return first, atoms, np.stack([ensemble[index % len(ensemble)].positions for index in range(count)])


def run_md(potential, system, count: int, steps: int, seed: int) -> np.ndarray:
    """Langevin MD at 300 K of ``count`` copies: the O-C-C-F torsions ``(T, count)`` rad, every 10 fs."""
    integrator = ms.integrators.LangevinMiddle(TIMESTEP, TEMPERATURE, FRICTION)
    simulation = ms.Simulation(system, potential, integrator, seed=seed, progress=True, overlap_distance=None)
    simulation.set_velocities(TEMPERATURE, seed=seed)
    recorder = ReplicaColvarReporter(Torsion(TORSION), count, every=20)
    simulation.reporters.append(recorder)
    simulation.run(steps)
    return recorder.values


def reference(size: dict) -> np.ndarray:
    """GFN2-xTB torsions ``(T, R)``; each trajectory cached as it finishes."""
    structure, atoms, positions = starts(size["trajectories"])
    steps = int(round(size["picoseconds"] / TIMESTEP))
    columns = []
    for trajectory in range(size["trajectories"]):
        path = OUTPUT / f"xtb_{size['picoseconds']:g}ps_{trajectory}.npy"
        if not path.exists():
            system = ms.System.from_ase(atoms).replace(positions=torch.as_tensor(positions[trajectory]))
            start = time.perf_counter()
            values = run_md(ms.labels.XTB(structure.atomic_numbers), system, 1, steps, seed=trajectory)
            np.save(path, values[:, 0])
            print(f"GFN2-xTB trajectory {trajectory}: {steps} steps in {time.perf_counter() - start:.0f} s")
        columns.append(np.load(path))
    return np.stack(columns, axis=1)


def umbrella_of(samples: np.ndarray) -> UmbrellaSampling:
    """The windows' sampling with the torsion samples ``(K, T)`` rad of every window."""
    umbrella = UmbrellaSampling(Torsion(TORSION), WINDOW_CENTERS, WINDOW_FORCE_CONSTANT, TEMPERATURE)
    for window, values in enumerate(samples):
        umbrella.add_samples(window, values)
    return umbrella


def relaxed_scan() -> dict:
    """GFN2-xTB minima of the molecule restrained to every window centre (from the anti geometry and from
    every ETKDG conformer, the lowest kept), cached: ``geometries`` ``(K, N, 3)`` nm and ``energies`` ``(K,)``
    kJ/mol (unrestrained). They start the windows, and along them a model's minimum-energy torsion profile
    is compared with GFN2-xTB's."""
    path = OUTPUT / "xtb_relaxed_scan.npz"
    if not path.exists():
        ensemble = ms.molecules.conformers(f"smiles:{SMILES}")
        atoms = ase.Atoms(numbers=ensemble[0].atomic_numbers, positions=10.0 * ensemble[0].positions)
        xtb = ms.labels.XTB(ensemble[0].atomic_numbers)
        geometries, energies = [], []
        for center in WINDOW_CENTERS:
            best = None
            for structure in ensemble:
                restraint = HarmonicRestraint(Torsion(TORSION), float(center), SCAN_FORCE_CONSTANT)
                system = ms.System.from_ase(atoms).replace(positions=torch.as_tensor(structure.positions))
                simulation = ms.Simulation(system, ms.potentials.SumPotential(xtb, restraint),
                                           ms.integrators.LangevinMiddle(TIMESTEP, TEMPERATURE, FRICTION),
                                           precision="double", progress=False, overlap_distance=None)
                simulation.minimize(tolerance=1.0, max_iterations=500)
                positions = simulation.state.positions.detach().clone()
                energy = float(xtb(positions, None))
                if best is None or energy < best[0]:
                    best = (energy, positions.numpy())
            energies.append(best[0])
            geometries.append(best[1])
        partial = OUTPUT / "xtb_relaxed_scan.tmp.npz"
        np.savez(partial, geometries=np.array(geometries), energies=np.array(energies))
        os.replace(partial, path)
    return dict(np.load(path))


def exchange_windows(name: str, potential, size: dict) -> tuple[UmbrellaSampling, dict]:
    """The windows sampled together as Hamiltonian replica exchange under ``potential`` (neighbours swap
    every :data:`STEPS_PER_ROUND` steps), started from the relaxed scan, the first ``equilibration`` steps'
    samples dropped; resumable from its checkpoint, the samples cached. Returns the sampling and
    ``{"neighbour_acceptance", "seconds"}``."""
    path = OUTPUT / f"{name}_exchange_{size['window_picoseconds']:g}ps.npz"
    if not path.exists():
        structure, atoms, _ = starts(1)
        umbrella = umbrella_of([])
        rounds = (size["equilibration"] + window_steps(size)) // STEPS_PER_ROUND
        start = time.perf_counter()
        integrator = ms.integrators.LangevinMiddle(TIMESTEP, TEMPERATURE, FRICTION)
        record = umbrella.run_exchange(
            ms.System.from_ase(atoms), potential, integrator, rounds=rounds, steps_per_round=STEPS_PER_ROUND,
            sample_every=WINDOW_EVERY,
            starts=relaxed_scan()["geometries"], precision="double", seed=400,
            checkpoint=OUTPUT / f"{name}_exchange_{size['window_picoseconds']:g}ps.chk")
        seconds = time.perf_counter() - start
        count = len(WINDOW_CENTERS)
        acceptance = record.acceptance()[np.arange(count - 1), np.arange(1, count)]
        print(f"{name} exchange windows: {count} x {rounds * STEPS_PER_ROUND} steps in {seconds:.0f} s, "
              f"neighbour acceptance {acceptance.min():.2f}-{acceptance.max():.2f}")
        np.savez(path, samples=np.stack(umbrella.samples), acceptance=acceptance, seconds=seconds)
    cached = np.load(path)
    dropped = size["equilibration"] // WINDOW_EVERY
    details = {"neighbour_acceptance": [round(float(value), 3) for value in cached["acceptance"]],
               "seconds": round(float(cached["seconds"]))}
    return umbrella_of(cached["samples"][:, dropped:]), details


def window_steps(size: dict) -> int:
    return int(round(size["window_picoseconds"] / TIMESTEP))


def dataset(name: str, conformers: int, size: dict) -> pathlib.Path:
    if name == "trajectory":  # the shipped recipe (its small variant for --quick)
        full = size["samples"] == SIZES["full"]["samples"]
        stem = "fluoroethanol_xtb" if full else "fluoroethanol_xtb_small"
        path = OUTPUT / f"{stem}.h5"
        datasets.generate(ROOT / "datasets" / f"{stem}.toml", output=path, workers=1, progress=True)
        return path
    what = "every ETKDG conformer" if conformers > 1 else "one RDKit geometry"
    recipe = datasets.loads_recipe(RECIPE.format(name=name, what=what, conformers=conformers,
                                                 samples=size["samples"]))
    path = OUTPUT / f"fluoroethanol_{name}_{size['samples']}.h5"
    datasets.generate(recipe, output=path, workers=1, progress=True)
    return path


def model_tag(size: dict) -> str:
    """The samples and the training budget, which name a model's caches."""
    return f"{size['samples']}_{size['budget']:g}s"


def validation_mae(name: str, size: dict) -> float:
    """The saved model's validation force MAE, kJ/mol/nm."""
    return round(float(torch.load(OUTPUT / f"{name}_{model_tag(size)}.pt")["force_mae"]), 2)


def trained(name: str, path: pathlib.Path, size: dict):
    """ACENet trained on the ``name`` data for the budget, or its saved weights (so that the plain MD and the
    windows of one invocation or of separate ones use the same model)."""
    saved = OUTPUT / f"{name}_{model_tag(size)}.pt"
    torch.manual_seed(0)
    model = ms.potentials.ACENet(cutoff=0.5, features=32, interactions=2, max_l=2, correlation=3)
    if saved.exists():
        state = torch.load(saved)
        model.load_state_dict(state["model"])
        print(f"ACENet on the {name} data (saved): validation force MAE {state['force_mae']:.1f} kJ/mol/nm")
        return model
    data = TrainingData.from_hdf5(path)
    trainer = Trainer(model, data, batch_size=8, learning_rate=5e-3, ema_decay=0.99, validation_fraction=0.1,
                      checkpoint=OUTPUT / f"{name}_{model_tag(size)}.chk", progress=False)
    trainer.fit(epochs=10_000, time_limit=size["budget"])
    metrics = trainer.evaluate()
    print(f"ACENet on the {name} data: validation force MAE {metrics['force_mae']:.1f} kJ/mol/nm")
    torch.save({"model": trainer.model.state_dict(), "force_mae": float(metrics["force_mae"])}, saved)
    return trained(name, path, size)  # the saved weights, as every later invocation will use them


def learned(name: str, conformers: int, size: dict) -> np.ndarray:
    """Learned-MD torsions ``(T, R)`` of the model trained on the ``name`` data: the trajectories as batched
    replicas (cached: the data, the training and the MD run only when the file is missing)."""
    count = size["trajectories"] if name == "trajectory" else size["comparisons"]
    path = OUTPUT / f"learned_{name}_{model_tag(size)}_{count}x{size['picoseconds']:g}ps.npy"
    if not path.exists():
        model = trained(name, dataset(name, conformers, size), size)
        structure, atoms, positions = starts(count)
        system = replicate(ms.System.from_ase(atoms), count, positions=torch.as_tensor(positions))
        potential = model.double().bind(torch.as_tensor(structure.atomic_numbers), replicas=count)
        steps = int(round(size["picoseconds"] / TIMESTEP))
        np.save(path, run_md(potential, system, count, steps, seed=100))
    return np.load(path)


def reference_windows(size: dict) -> tuple[UmbrellaSampling, dict]:
    """The exchange windows under GFN2-xTB, and its relaxed-scan energies."""
    structure, _, _ = starts(1)
    umbrella, details = exchange_windows("xtb", ms.labels.XTB(structure.atomic_numbers), size)
    details["scan_energy_kj_per_mol"] = scan_profile(relaxed_scan()["energies"])
    return umbrella, details


def learned_windows(size: dict) -> tuple[UmbrellaSampling, dict]:
    """The exchange windows under the model on the trajectory data, and its minimum-energy profile along the
    relaxed scan against GFN2-xTB's."""
    model = trained("trajectory", dataset("trajectory", 10, size), size)
    structure, _, _ = starts(1)
    potential = model.double().bind(torch.as_tensor(structure.atomic_numbers))
    umbrella, details = exchange_windows(f"learned_{model_tag(size)}", potential, size)
    scan = relaxed_scan()
    with torch.no_grad():
        energies = np.array([float(potential(torch.as_tensor(positions), None))
                             for positions in scan["geometries"]])
    details["scan_energy_kj_per_mol"] = scan_profile(energies)
    return umbrella, details


def scan_profile(energies: np.ndarray) -> list[float]:
    """Energies along the relaxed scan relative to the anti one (the window at -180 degrees), kJ/mol."""
    return [round(float(value), 3) for value in energies - energies[0]]


def mirror_populations(umbrella: UmbrellaSampling) -> dict:
    """The populations of gauche- (-120 < O-C-C-F < 0 degrees) and gauche+ (0 to 120): for this achiral
    molecule they are equal, so their difference shows an error that the block errors may miss."""
    degrees = np.degrees
    result = {}
    for key, inside in (("gauche_minus", lambda values: (degrees(values) > -120.0) & (degrees(values) < 0.0)),
                        ("gauche_plus", lambda values: (degrees(values) >= 0.0) & (degrees(values) < 120.0))):
        mean, error = umbrella.population(inside)
        result[key] = {"mean": mean, "standard_error_of_5_blocks": error}
    return result


def profile(umbrella: UmbrellaSampling) -> list[float]:
    """The free-energy profile along the torsion on :data:`EDGES`, kJ/mol (minimum 0)."""
    return [round(float(value), 3) for value in umbrella.free_energy(EDGES)[1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=("reference", "learned", "comparisons"),
                        help="run one part (filling its cache) and stop")
    parser.add_argument("--budget", type=float, help="training seconds per model (default: the size's)")
    parser.add_argument("--without-comparisons", dest="comparisons", action="store_false",
                        help="only the model on the trajectory data (not the two short-run comparisons)")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    size = dict(SIZES["quick" if arguments.quick else "full"])
    size["budget"] = arguments.budget or size["budget"]
    OUTPUT.mkdir(parents=True, exist_ok=True)
    if arguments.only == "reference":
        reference(size), reference_windows(size)
        return
    if arguments.only == "learned":
        learned("trajectory", 10, size), learned_windows(size)
        return
    if arguments.only == "comparisons":
        learned("ensemble", 10, size), learned("single", 1, size)
        return
    names = (("trajectory", 10),) + ((("ensemble", 10), ("single", 1)) if arguments.comparisons else ())
    reference_torsions = reference(size)
    results = {"reference": gauche_fraction(reference_torsions)}
    centres = {"reference": gauche_centre(reference_torsions)}
    for name, conformers in names:
        torsions = learned(name, conformers, size)
        results[name], centres[name] = gauche_fraction(torsions), gauche_centre(torsions)
    labels = {"reference": "GFN2-xTB MD", "trajectory": "ACENet, trajectory frames (the shipped recipe)",
              "ensemble": "ACENet, data from the conformer ensemble",
              "single": "ACENet, data from one geometry (conformers=1)"}
    for key, (fraction, error) in results.items():
        print(f"{labels[key]:64s} gauche {100 * fraction:5.1f} +- {100 * error:4.1f} %, "
              f"median |O-C-C-F| of gauche frames {centres[key]:5.1f} deg")
    windows = {"reference": reference_windows(size), "trajectory": learned_windows(size)}
    populations = {key: umbrella.population(is_gauche) for key, (umbrella, _) in windows.items()}
    mirrors = {key: mirror_populations(umbrella) for key, (umbrella, _) in windows.items()}
    for key, (fraction, error) in populations.items():
        label = f"{labels[key]}, exchange windows"
        minus, plus = (100 * mirrors[key][side]["mean"] for side in ("gauche_minus", "gauche_plus"))
        print(f"{label:64s} gauche {100 * fraction:5.1f} +- {100 * error:4.1f} % "
              f"(gauche- {minus:4.1f}, gauche+ {plus:4.1f}; acceptance "
              f"{min(windows[key][1]['neighbour_acceptance']):.2f}-{max(windows[key][1]['neighbour_acceptance']):.2f})")
    scans = {key: np.array(details["scan_energy_kj_per_mol"]) for key, (_, details) in windows.items()}
    gauche_scan = np.abs(np.degrees(WINDOW_CENTERS)) < 120.0
    print("relaxed-scan energy of the gauche minimum relative to anti, kJ/mol: "
          + ", ".join(f"{labels[key]} {values[gauche_scan].min():+.2f}" for key, values in scans.items()))
    if not arguments.quick:  # one entry per training budget
        RESULT.parent.mkdir(exist_ok=True)
        record = json.loads(RESULT.read_text()) if RESULT.exists() else {}
        record = record if "runs" in record else {"runs": {}}
        record["how"] = "python benchmarks/conformer_populations.py [--budget S --without-comparisons]"
        record["runs"][f"{size['budget']:g}s"] = {
            "size": size,
            "validation_force_mae_kj_per_mol_nm": {name: validation_mae(name, size) for name, _ in names},
            "gauche_fraction": {key: {"mean": value[0], "standard_error": value[1]}
                                for key, value in results.items()},
            "gauche_median_torsion_degrees": centres,
            "umbrella": {
                "protocol": "Hamiltonian replica exchange between the windows "
                            "(UmbrellaSampling.run_exchange), started from the GFN2-xTB relaxed scan",
                "windows": len(WINDOW_CENTERS), "force_constant_kj_per_mol_rad2": WINDOW_FORCE_CONSTANT,
                "steps_per_window": window_steps(size), "equilibration_steps": size["equilibration"],
                "steps_per_exchange": STEPS_PER_ROUND, "sample_every_steps": WINDOW_EVERY,
                "gauche_fraction": {key: {"mean": value[0], "standard_error_of_5_blocks": value[1]}
                                    for key, value in populations.items()},
                "mirror_check": mirrors,
                "run": {key: details for key, (_, details) in windows.items()},
                "profile_bin_edges_degrees": np.degrees(EDGES).round(6).tolist(),
                "profile_kj_per_mol": {key: profile(umbrella) for key, (umbrella, _) in windows.items()},
                "relaxed_scan_centres_degrees": np.degrees(WINDOW_CENTERS).round(6).tolist()},
            "threads": arguments.threads, "cpu": os.cpu_count()}
        RESULT.write_text(json.dumps(record, indent=1) + "\n")
    for what, values in (("plain MD", results), ("exchange windows", populations)):
        difference = 100 * (values["trajectory"][0] - values["reference"][0])
        combined = 100 * np.hypot(values["trajectory"][1], values["reference"][1])
        print(f"gauche population, learned (trajectory data) - GFN2-xTB, {what}: {difference:+.1f} points "
              f"(combined standard error {combined:.1f})")


if __name__ == "__main__":
    main()
