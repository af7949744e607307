"""Energy + forces throughput of mindsponge's SchNet against torchmd-net's SchNet ("graph-network").

Both models get the same hyperparameters (64 features and filters, 3 interactions, 20 Gaussians
on [0, 0.5 nm], cosine cutoff at 0.5 nm, shifted-softplus activation, no neighbour embedding;
the parameter counts differ only by torchmd-net's embedding table for 100 elements instead of 8)
and the same batch: ``--molecules`` copies of ethanol with random displacements, one graph per
molecule. One call is a forward pass to per-molecule energies and the backward pass to forces
(``-dE/dx``, no graph kept), as in MD or inference. The rounds alternate between the two so that
both see the same machine load; the best round of each counts. Prints molecules/s for both and the
ratio mindsponge / torchmd-net last (above 1: mindsponge is faster).

    python benchmarks/learned_potential.py [--quick] [--molecules 64] [--threads 2]
"""

import argparse
import os
import time

import ase.build
import torch

import mindsponge as ms


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and a smaller batch")
    parser.add_argument("--molecules", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
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


if __name__ == "__main__":
    main()
