"""Learned potentials: SchNet throughput against torchmd-net, and the accuracy and cost of our
equivariant ACENet against mace-torch's MACE.

Throughput: mindsponge's SchNet against torchmd-net's SchNet ("graph-network").

Both models get the same hyperparameters (64 features and filters, 3 interactions, 20 Gaussians
on [0, 0.5 nm], cosine cutoff at 0.5 nm, shifted-softplus activation, no neighbour embedding;
the parameter counts differ only by torchmd-net's embedding table for 100 elements instead of 8)
and the same batch: ``--molecules`` copies of ethanol with random displacements, one graph per
molecule. One call is a forward pass to per-molecule energies and the backward pass to forces
(``-dE/dx``, no graph kept), as in MD or inference. The rounds alternate between the two so that
both see the same machine load; the best round of each counts. Prints molecules/s for both and the
ratio mindsponge / torchmd-net last (above 1: mindsponge is faster).

Accuracy: our ACENet (:class:`mindsponge.training.Trainer`, the recipe in ``OURS``) against
mace-torch trained by its own ``mace_run_train`` with its small-molecule (rMD17) recipe
(:func:`mace_recipe`), on uracil, ethanol and 2-fluoroethanol (``smiles:OCCF``). The data are
GFN2-xTB MD samples (:func:`mindsponge.labels.xtb_sample` through a ``common.datasets`` recipe,
cached under ``benchmarks/output/learned_potential``, gitignored), 400 per molecule, split 80/10/10
(:func:`mindsponge.training.make_split`, seed 0); the split is written as extxyz with MACE's
``REF_energy``/``REF_forces`` keys, so both train on the same 320, validate on the same 40 and are
tested on the same held-out 40. The budget: MACE trains 10 epochs on one thread and its CPU time
(``RUSAGE_CHILDREN``: its whole run, start-up and final error tables included) is measured; ours
gets the same CPU time of its own process (``Trainer.fit(clock="cpu")``, one thread), so the
machine's load does not decide. Printed per molecule: test force MAE (kJ/mol/nm) and energy MAE
(kJ/mol) of both, CPU and wall seconds, and ms per energy+forces call of one molecule in float32
(MACE's model on a prepared graph); last, on how many molecules ours is at or below MACE's force
MAE. A full-size run records its molecules in ``benchmarks/data/learned_potential.json``, one entry per
budget. ``--epochs N``: MACE trains N epochs (default 10; its second stage starts at 3/4 of them) and ours
gets that CPU time. ``--quick``: 100 samples, MACE 2 epochs of 16 channels. ``--molecule NAME``
(repeatable) picks molecules, so that two processes can run molecules side by side.

    python benchmarks/learned_potential.py [--quick] [--part all|throughput|accuracy] [--threads 2]
        [--molecule uracil|ethanol|fluoroethanol] [--epochs 10]
"""

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import time

import ase.build
import ase.io
import numpy as np
import torch

import mindsponge as ms
from common import datasets, units
from mindsponge.label_io import read_labels, write_labels
from mindsponge.training import Trainer, TrainingData, make_split

CACHE = pathlib.Path(__file__).parent / "output" / "learned_potential"  # gitignored
RESULTS = pathlib.Path(__file__).parent / "data" / "learned_potential.json"
MACE_KEYS = {"energy": "REF_energy", "forces": "REF_forces"}
#: our recipe (ACENet and the Trainer's settings), the best measured (see docs/guide/mindsponge.md)
OURS = {"model": {"cutoff": 0.5, "features": 32, "interactions": 2, "max_l": 2, "correlation": 3},
        "trainer": {"batch_size": 8, "learning_rate": 5e-3, "ema_decay": 0.99, "gradient_clip": 100.0,
                    "energy_weight": 1.0, "force_weight": 1.0, "patience": 10_000, "scheduler_patience": 5,
                    "loss": "huber", "amsgrad": True, "warmup_steps": 200}}
MOLECULES = {"uracil": "O=C1C=CNC(=O)N1", "ethanol": "CCO", "fluoroethanol": "OCCF",
             "butane": "CCCC"}  # butane: the C-C-C-C torsion
RECIPE = """
name = "{name}_xtb"
description = "{name} from GFN2-xTB MD at 300-900 K, GFN2-xTB energies and forces"
[generator]
function = "mindsponge.labels:xtb_sample"
options = {{ molecule = "smiles:{smiles}", sampling = "md", md_steps = 20, method = "GFN2-xTB" }}
labels = ["positions", "atomic_numbers", "energy", "forces"]
[parameters]
temperature = {{ low = 300.0, high = 900.0 }}
[sampling]
method = "sobol"
n = 2048
seed = 0
[output]
path = "{name}_xtb.h5"
"""


def ethanol_batch(molecules: int, seed: int = 0):
    atoms = ase.build.molecule("CH3CH2OH")
    generator = torch.Generator().manual_seed(seed)
    base = torch.tensor(atoms.positions, dtype=torch.float32) * 0.1
    noise = torch.randn(molecules, len(atoms), 3, generator=generator)
    positions = base.repeat(molecules, 1, 1) + 0.01 * noise
    numbers = torch.tensor(atoms.numbers).repeat(molecules)
    batch = torch.arange(molecules).repeat_interleave(len(atoms))
    return positions.reshape(-1, 3), numbers, batch


def mindsponge_call(model, positions, numbers, batch):
    def call():
        positions_grad = positions.detach().requires_grad_(True)
        energies = model(positions_grad, numbers, batch=batch)
        (gradient,) = torch.autograd.grad(energies.sum(), positions_grad)
        return energies.detach(), -gradient
    return call


def torchmdnet_call(model, positions, numbers, batch):
    positions_angstrom = positions * 10.0  # torchmd-net works in Angstrom

    def call():
        energies, forces = model(numbers, positions_angstrom, batch=batch)
        return energies.detach(), forces
    return call


def build_torchmdnet(features, interactions, n_rbf, cutoff_nm, molecules_atoms):
    from torchmdnet.models.model import create_model

    args = {
        "model": "graph-network", "precision": 32, "embedding_dimension": features,
        "num_layers": interactions,
        "num_rbf": n_rbf, "rbf_type": "gauss", "trainable_rbf": False, "activation": "ssp",
        "neighbor_embedding": False, "cutoff_lower": 0.0, "cutoff_upper": cutoff_nm * 10.0, "max_z": 100,
        "max_num_neighbors": molecules_atoms, "aggr": "add", "derivative": True, "atom_filter": -1,
        "prior_model": None, "output_model": "Scalar", "reduce_op": "add", "box_vecs": None,
        "static_shapes": False, "check_errors": False,
    }
    return create_model(args)


def best_time(call, repeats):
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - start) / repeats




def xtb_data(name: str, samples: int) -> TrainingData:
    """The first ``samples`` configurations of ``name`` (GFN2-xTB MD, cached; generated if missing)."""
    path = CACHE / f"{name}_xtb.h5"
    CACHE.mkdir(parents=True, exist_ok=True)
    recipe = datasets.loads_recipe(RECIPE.format(name=name, smiles=MOLECULES[name]))
    datasets.generate(recipe, output=path, workers=0, limit=samples, progress=True)
    table = datasets.read_dataset(path)
    keep = table["sample_id"] < samples
    return TrainingData.from_arrays(table["positions"][keep], table["atomic_numbers"][keep],
                                    table["energy"][keep], table["forces"][keep], source=str(path))


def split_files(data: TrainingData, split: dict, directory: pathlib.Path) -> dict:
    """The split written as extxyz with MACE's ``REF_energy``/``REF_forces`` keys (eV, eV/Å):
    ``{"train": path, "valid": path, "test": path}``."""
    directory.mkdir(parents=True, exist_ok=True)
    atoms = int(data.n_atoms[0])
    paths = {}
    for part, key in (("train", "train_indices"), ("valid", "validation_indices"), ("test", "test_indices")):
        subset = data.subset(torch.as_tensor(split[key], dtype=torch.long))
        labels = {"positions": subset.positions.reshape(-1, atoms, 3).numpy(),
                  "atomic_numbers": subset.atomic_numbers.reshape(-1, atoms).numpy(),
                  "energy": subset.energy.numpy(), "forces": subset.forces.reshape(-1, atoms, 3).numpy()}
        paths[part] = write_labels(directory / f"{part}.xyz", labels, format="extxyz", overwrite=True,
                                   keys=MACE_KEYS)
    return paths


def mace_errors(model_path: pathlib.Path, path: pathlib.Path) -> dict:
    """Energy MAE (kJ/mol) and force MAE (kJ/mol/nm) of a mace-torch model on an extxyz file."""
    from mace.calculators import MACECalculator

    calculator = MACECalculator(model_paths=str(model_path), device="cpu", default_dtype="float64")
    reference = read_labels(path, keys=MACE_KEYS)
    energies, forces = [], []
    for frame in ase.io.read(path, index=":"):
        frame.calc = calculator
        energies.append(frame.get_potential_energy() * units.EV_TO_KJ_PER_MOL)
        forces.append(frame.get_forces() * units.EV_PER_ANGSTROM_TO_KJ_PER_MOL_NM)
    return {"energy_mae": float(np.abs(np.array(energies) - reference["energy"]).mean()),
            "force_mae": float(np.abs(np.array(forces) - reference["forces"]).mean())}


def mace_recipe(name: str, files: dict, epochs: int, channels: int) -> dict:
    """mace-torch trained by ``mace_run_train`` with its small-molecule (rMD17) recipe on one thread:
    float64, r_max 5 Å, 2 interactions, correlation 3, max_L 1, ``channels`` channels, batch 5,
    lr 0.01, AMSGrad, EMA 0.99, the weighted loss (energy 1, forces 100) and stage two (SWA: energy
    1000, forces 100, lr 1e-3) from MACE's default start (3/4 of ``epochs``), E0s fitted ("average").
    Its CPU time (user + system, ``RUSAGE_CHILDREN``) is the budget ours gets. Cached in the split's
    directory (``mace.json``) so that ours can be re-run against the same MACE."""
    directory = files["train"].parent
    settings = {"epochs": epochs, "channels": channels, "version": 1}
    record = directory / "mace.json"
    if record.exists() and json.loads(record.read_text())["settings"] == settings:
        return json.loads(record.read_text())
    command = [str(pathlib.Path(sys.executable).parent / "mace_run_train"), f"--name={name}", "--model=MACE",
               f"--train_file={files['train']}", f"--valid_file={files['valid']}",
               "--energy_key=REF_energy", "--forces_key=REF_forces", "--E0s=average",
               "--default_dtype=float64", "--device=cpu", "--r_max=5.0", "--num_interactions=2",
               "--correlation=3", "--max_L=1", f"--num_channels={channels}", "--batch_size=5",
               "--valid_batch_size=10", f"--max_num_epochs={epochs}", "--lr=0.01", "--amsgrad", "--ema",
               "--ema_decay=0.99", "--swa", "--loss=weighted", "--energy_weight=1", "--forces_weight=100",
               "--swa_energy_weight=1000", "--swa_forces_weight=100", "--swa_lr=1e-3",
               "--error_table=TotalMAE", "--num_workers=0", "--seed=0", f"--work_dir={directory}",
               f"--model_dir={directory}"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    with open(directory / "mace_run_train.log", "w") as log:
        subprocess.run(command, check=True, env=environment, cwd=directory, stdout=log, stderr=log)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {"settings": settings, "wall_s": time.perf_counter() - start,
              "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}
    # the model MACE's recipe ends with: the stage-two one, unless the stage-one one validates better
    candidates = [directory / f"{name}_stagetwo.model", directory / f"{name}.model"]
    validated = [(mace_errors(path, files["valid"])["force_mae"], str(path)) for path in candidates
                 if path.exists()]
    result["model"] = min(validated)[1]
    result["test"] = mace_errors(pathlib.Path(result["model"]), files["test"])
    record.write_text(json.dumps(result, indent=1))
    return result


def ours_recipe(data: TrainingData, split: dict, cpu_budget: float) -> tuple:
    """ACENet trained by :class:`mindsponge.training.Trainer` for ``cpu_budget`` s of this process's
    CPU time (one thread) on the same split; returns ``(model, results)``."""
    torch.manual_seed(0)
    model = ms.potentials.ACENet(**OURS["model"])
    trainer = Trainer(model, data, split=split, threads=1, progress=False, **OURS["trainer"])
    start, cpu_start = time.perf_counter(), time.process_time()
    history = trainer.fit(epochs=10_000, time_limit=cpu_budget, clock="cpu")
    test = trainer.test_metrics
    return trainer.model, {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu_start,
                           "epochs": history["epoch"][-1],
                           "test": {"energy_mae": test["energy_mae"], "force_mae": test["force_mae"]}}


def mace_call(model_path: str, atoms):
    """One energy+forces evaluation of a mace-torch model in float32 on a prepared graph (no neighbour
    search or conversion from ASE in the timing)."""
    from mace.calculators import MACECalculator

    calculator = MACECalculator(model_paths=model_path, device="cpu", default_dtype="float32")
    model, batch = calculator.models[0], calculator._atoms_to_batch(atoms)

    def call():
        output = model(batch.to_dict(), compute_stress=False, training=False)
        return output["energy"].detach(), output["forces"].detach()
    return call


def comparison(name: str, samples: int, epochs: int, channels: int) -> dict:
    """Ours against mace-torch's own recipe on one molecule: same data, split and CPU time."""
    data = xtb_data(name, samples)
    split = make_split(data, 0.1, 0.1, seed=0)
    files = split_files(data, split, CACHE / f"{name}_{samples}_split")
    mace = mace_recipe(name, files, epochs, channels)
    model, ours = ours_recipe(data, split, mace["cpu_s"])
    frame = ase.io.read(files["test"], index=0)
    numbers = torch.as_tensor(frame.numbers)
    positions = torch.as_tensor(frame.positions * units.ANGSTROM_TO_NM, dtype=torch.float32)
    batch = torch.zeros(len(numbers), dtype=torch.long)
    calls = {"ours": mindsponge_call(model.float(), positions, numbers, batch),
             "mace": mace_call(mace["model"], frame)}
    for label, call in calls.items():
        call()
        (ours if label == "ours" else mace)["ms_per_call"] = min(best_time(call, 20) for _ in range(3)) * 1e3
    print(f"{name} ({samples} samples, test {len(split['test_indices'])}): force MAE ours "
          f"{ours['test']['force_mae']:.1f} / MACE {mace['test']['force_mae']:.1f} kJ/mol/nm, energy MAE "
          f"ours {ours['test']['energy_mae']:.2f} / MACE {mace['test']['energy_mae']:.2f} kJ/mol; CPU s ours "
          f"{ours['cpu_s']:.0f} ({ours['epochs']} epochs) / MACE {mace['cpu_s']:.0f} ({epochs} epochs); "
          f"wall s {ours['wall_s']:.0f} / {mace['wall_s']:.0f}; ms per call "
          f"{ours['ms_per_call']:.2f} / {mace['ms_per_call']:.2f}", flush=True)
    return {"ours": ours, "mace": {key: mace[key] for key in ("cpu_s", "wall_s", "test", "ms_per_call")}}


def learned_accuracy(quick: bool, molecules: list[str], epochs: int | None = None) -> None:
    """Accuracy and cost of our ACENet against mace-torch trained by its own recipe for ``epochs`` (default
    10; the budget ours gets is MACE's CPU time); records the molecules run in the JSON, one entry per
    budget (other molecules and budgets are kept)."""
    samples, default_epochs, channels = (100, 2, 16) if quick else (400, 10, 32)
    epochs = default_epochs if epochs is None else epochs
    print(f"{samples} samples per molecule, MACE {epochs} epochs of {channels} channels, ours the same CPU "
          f"time; one thread each; load average {os.getloadavg()[0]:.1f} (a shared machine)", flush=True)
    results = {name: comparison(name, samples, epochs, channels) for name in molecules}
    wins = sum(value["ours"]["test"]["force_mae"] <= value["mace"]["test"]["force_mae"]
               for value in results.values())
    print(f"ours at or below MACE's test force MAE on {wins} of {len(results)} molecules")
    if not quick:
        recorded = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        entry = recorded.setdefault("budgets", {}).setdefault(
            f"mace_{epochs}_epochs", {"molecules": {}, "load_average_at_end": {}})
        entry.update({"samples": samples, "mace": {"epochs": epochs, "channels": channels}, "ours": OURS})
        for name, value in results.items():
            entry["molecules"][name] = value
            entry["load_average_at_end"][name] = os.getloadavg()[0]  # of the run that measured it
        RESULTS.write_text(json.dumps(recorded, indent=1) + "\n")


def throughput(args) -> None:
    """SchNet throughput against torchmd-net's SchNet on a batch of ethanol molecules."""
    molecules = 16 if args.quick else args.molecules
    rounds, repeats = (2, 3) if args.quick else (5, 10)
    features, interactions, n_rbf, cutoff = 64, 3, 20, 0.5
    positions, numbers, batch = ethanol_batch(molecules)
    torch.manual_seed(0)
    ours = ms.potentials.SchNet(cutoff=cutoff, features=features, interactions=interactions, n_rbf=n_rbf)
    calls = {"mindsponge": mindsponge_call(ours, positions, numbers, batch)}
    try:
        theirs = build_torchmdnet(features, interactions, n_rbf, cutoff, 9)
        calls["torchmd-net"] = torchmdnet_call(theirs, positions, numbers, batch)
        n_ours = sum(p.numel() for p in ours.parameters())
        n_theirs = sum(p.numel() for p in theirs.parameters())
        print(f"parameters: mindsponge {n_ours}, torchmd-net {n_theirs}")
    except ImportError as error:
        print(f"torchmd-net is not installed ({error}); pip install torchmd-net (see pyproject's dev extra)")
    for call in calls.values():  # warm-up (allocations, lazy initialisation)
        call()
    best = {name: float("inf") for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            best[name] = min(best[name], best_time(call, repeats))
    print(f"batch: {molecules} ethanol molecules ({len(positions)} atoms), {args.threads} threads, "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, seconds in best.items():
        print(f"{name:12s} {seconds * 1e3:8.2f} ms per energy+forces call, "
              f"{molecules / seconds:9.1f} molecules/s")
    if "torchmd-net" in best:
        print(f"ratio mindsponge/torchmd-net throughput: {best['torchmd-net'] / best['mindsponge']:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller data, budgets and batches")
    parser.add_argument("--molecules", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--part", choices=("all", "throughput", "accuracy"), default="all")
    parser.add_argument("--molecule", action="append", choices=("uracil", "ethanol", "fluoroethanol"),
                        help="accuracy on this molecule (repeatable; default all three)")
    parser.add_argument("--epochs", type=int,
                        help="MACE's epochs, whose CPU time is both budgets (default 10; --quick 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.part in ("all", "throughput"):
        throughput(args)
    if args.part in ("all", "accuracy"):
        learned_accuracy(args.quick, args.molecule or ["uracil", "ethanol", "fluoroethanol"], args.epochs)


if __name__ == "__main__":
    main()
