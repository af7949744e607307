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

Accuracy: GFN2-xTB MD data (:func:`mindsponge.labels.xtb_sample`, cached under
``benchmarks/output/learned_potential``): uracil (400 and 2,000 samples) and butane (400; the
C-C-C-C torsion). Both models (2 layers, l <= 2, correlation 3, the same channels) are trained
with :class:`mindsponge.training.Trainer` on the same 80/10/10 split for the same wall-clock
budget; printed: validation and test force MAE, then ms per energy+forces call of one uracil and
MD steps/s (torchmd-net's SchNet of 64 features for scale), and last the ratios ACENet / MACE.
``--quick``: 160 samples of each molecule, 60 s per model, 32 channels.

    python benchmarks/learned_potential.py [--quick] [--part all|throughput|accuracy] [--threads 2]
"""

import argparse
import os
import pathlib
import time

import ase.build
import torch

import mindsponge as ms
from common import datasets
from mindsponge.training import Trainer, TrainingData, make_split

CACHE = pathlib.Path(__file__).parent / "output" / "learned_potential"  # gitignored
MOLECULES = {"uracil": "O=C1C=CNC(=O)N1", "butane": "CCCC"}  # butane: the C-C-C-C torsion
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


def models(size: dict) -> dict:
    """Our equivariant model and mace-torch's MACE of the same size (channels, layers, l, correlation)."""
    torch.manual_seed(0)
    ours = ms.potentials.ACENet(cutoff=0.5, features=size["features"], interactions=2, max_l=2, correlation=3)
    torch.manual_seed(0)
    mace = ms.potentials.MACE(cutoff=0.5, features=size["features"], interactions=2, max_l=2, correlation=3)
    return {"ACENet": ours, "MACE": mace}


def accuracy(name: str, samples: int, budget: float, size: dict) -> dict:
    """Validation and test force MAE (kJ/mol/nm) of each model after ``budget`` s of training on the
    same data and split."""
    data = xtb_data(name, samples)
    split = make_split(data, 0.1, 0.1, seed=0)
    results = {}
    for label, model in models(size).items():
        trainer = Trainer(model, data, split=split, batch_size=8, learning_rate=5e-3, ema_decay=0.99,
                          gradient_clip=100.0, energy_weight=1.0, force_weight=1.0, patience=50,
                          scheduler_patience=5, progress=False)
        start = time.perf_counter()
        history = trainer.fit(epochs=10_000, time_limit=budget)
        result = {"validation": trainer.evaluate()["force_mae"], "test": trainer.test_metrics["force_mae"],
                  "epochs": len(history["epoch"]), "seconds": time.perf_counter() - start,
                  "model": trainer.model}
        results[label] = result
        print(f"{name} ({samples} samples): {label:7s} validation force MAE {result['validation']:7.1f}, "
              f"test {result['test']:7.1f} kJ/mol/nm after {result['epochs']} epochs "
              f"({result['seconds']:.0f} s); "
              f"mean |force label| {float(data.forces.abs().mean()):.0f}", flush=True)
    return results


def inference(trained: dict, steps: int, repeats: int) -> dict:
    """ms per energy+forces evaluation of one uracil and MD steps/s in a Simulation, per model."""
    atoms = ms.molecules.load_molecule("smiles:O=C1C=CNC(=O)N1").to_ase()
    system = ms.System.from_ase(atoms)
    positions = system.positions.detach().to(torch.float32)
    numbers = torch.as_tensor(atoms.numbers)
    batch = torch.zeros(len(numbers), dtype=torch.long)
    calls = {label: mindsponge_call(model.float(), positions, numbers, batch)
             for label, model in trained.items()}
    try:
        torchmd = build_torchmdnet(64, 3, 20, 0.5, len(numbers))
        calls["torchmd-net SchNet"] = torchmdnet_call(torchmd, positions, numbers, batch)
    except ImportError as error:
        print(f"torchmd-net is not installed ({error})")
    results = {}
    for label, call in calls.items():
        call()
        results[label] = {"ms_per_force": best_time(call, repeats) * 1e3}
    for label, model in trained.items():
        simulation = ms.Simulation(system, model.bind(system.atomic_numbers),
                                   ms.integrators.LangevinMiddle(dt=0.0005, temperature=300.0, friction=1.0),
                                   progress=False)
        simulation.set_velocities(temperature=300.0, seed=0)
        simulation.run(2)
        start = time.perf_counter()
        simulation.run(steps)
        results[label]["md_steps_per_s"] = steps / (time.perf_counter() - start)
    for label, values in results.items():
        md = f", {values['md_steps_per_s']:7.1f} MD steps/s" if "md_steps_per_s" in values else ""
        print(f"{label:20s} {values['ms_per_force']:8.2f} ms per energy+forces call{md}")
    return results


def learned_accuracy(quick: bool) -> None:
    """Accuracy and cost of our ACENet against mace-torch's MACE; prints the ratios last."""
    size = {"features": 32 if quick else 64}
    budget = 60.0 if quick else 600.0
    cases = ([("uracil", 160), ("butane", 160)] if quick
             else [("uracil", 400), ("uracil", 2000), ("butane", 400)])
    print(f"training budget {budget:.0f} s per model, {size['features']} channels, load average "
          f"{os.getloadavg()[0]:.1f} (measured on a loaded machine)")
    ratios, uracil_models = [], None
    for name, samples in cases:
        results = accuracy(name, samples, budget, size)
        ratios.append(results["ACENet"]["test"] / results["MACE"]["test"])
        if name == "uracil" and uracil_models is None:  # the cost is measured on uracil
            uracil_models = {label: value["model"] for label, value in results.items()}
    cost = inference(uracil_models, steps=20 if quick else 200, repeats=5 if quick else 50)
    print("ratio ACENet/MACE test force MAE: " + ", ".join(
        f"{name} {samples}: {ratio:.2f}" for (name, samples), ratio in zip(cases, ratios, strict=True)))
    print(f"ratio ACENet/MACE inference cost (ms per force call): "
          f"{cost['ACENet']['ms_per_force'] / cost['MACE']['ms_per_force']:.2f}")


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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.part in ("all", "throughput"):
        throughput(args)
    if args.part in ("all", "accuracy"):
        learned_accuracy(args.quick)


if __name__ == "__main__":
    main()
