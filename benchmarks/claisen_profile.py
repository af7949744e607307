"""The Claisen rearrangement's free-energy profile: learned potentials against GFN2-xTB.

The full-size protocol of ``notebooks/reactive_claisen.ipynb`` with single models instead of the
active-learning committee (:mod:`mindsponge.active.claisen`):

1. GFN2-xTB umbrella sampling along s = d(O2-C3) - d(C0-C5), windows started from configurations a
   restraint pulled through the centres (``starts="pulled"``), the frames of every window labelled
   with GFN2-xTB's energies and forces, the restraint taken out (``TrajectoryLabels``); MBAR profile,
   barrier and reaction free energy, and the same from each half of the samples (their spread);
   at full size read from ``benchmarks/data/claisen_reference*.npz`` when there (see :func:`reference`);
2. each model (``--models``) trained on every ``--stride``-th stored labelled frame (1,704 at full
   size, every 125 fs of every window) for ``--minutes`` on one
   core (80/10/10 split, Adam with a moving average of the weights, clipped gradients, forces and
   energies weighted 1:1 and energies 1000:1 after ``--switch`` epochs);
3. the learned profile, every window started from the last frame of the reference's, all windows as
   copies of the molecule in one simulation (``replicas=True``); the windows whose molecule came
   apart (``ring_conformation``) are named.

Printed last: each model's barrier and reaction free energy minus GFN2-xTB's (kJ/mol; the goal is
4 in magnitude) and GFN2-xTB's MD step time over the learned one's per window (the goal is 20). The
trained models are kept in ``--output`` (a run started again reuses them). The active-learning
committee's profile is ``benchmarks/claisen_committee.py``.
``--quick``: 17 short windows, 2-minute training (a smoke test: the figures mean nothing).

    OMP_NUM_THREADS=1 python benchmarks/claisen_profile.py [--quick] [--models SchNet PaiNN]
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np
import torch

import mindsponge as ms
from mindsponge.active import claisen
from mindsponge.bias import UmbrellaSampling
from mindsponge.label_io import read_labels, write_labels
from mindsponge.labels import XTB, TrajectoryLabels
from mindsponge.training import Trainer, TrainingData

TEMPERATURE = 300.0  # K
FULL = {"centers": (-0.35, 0.35, 71), "force_constant": 100000.0, "equilibration": 1000, "steps": 6000,
        "every": 10, "record": 50, "keep": 5}  # claisen.SIZES["full"], frames recorded every 25 fs
QUICK = {"centers": (-0.3, 0.2, 17), "force_constant": 20000.0, "equilibration": 20, "steps": 60, "every": 4,
         "record": 4, "keep": 1}
DATA = pathlib.Path(__file__).parent / "data"
STORED = (DATA / "claisen_reference.npz", DATA / "claisen_reference_labels.npz")
"""The full-size reference: MBAR samples of s (nm), window ends (nm), GFN2-xTB's step time (s), the
windows; and the labelled frames (:func:`mindsponge.label_io.read_labels`)."""


def profile_numbers(umbrella, edges) -> tuple[float, float]:
    grid, free_energy = umbrella.free_energy(edges)
    return claisen.barrier_and_reaction(grid, free_energy)[:2]


def halves(umbrella, edges) -> list[tuple[float, float]]:
    """Barrier and reaction free energy from the first and the second half of every window's samples."""
    results = []
    for part in (0, 1):
        half = UmbrellaSampling(umbrella.colvar, umbrella.centers, umbrella.force_constant, TEMPERATURE)
        for window, samples in enumerate(umbrella.samples):
            middle = len(samples) // 2
            half.add_samples(window, samples[:middle] if part == 0 else samples[middle:])
        results.append(profile_numbers(half, edges))
    return results


def reference(size, centers, force_constant, output: pathlib.Path):
    """The GFN2-xTB run, or its stored result: umbrella samples, window ends, MD step time, labels.

    At full size the result is kept in ``benchmarks/data`` (:data:`STORED`; the labelled frames
    every 125 fs, every fifth of those recorded), so that no later run repeats the 40 minutes of
    GFN2-xTB; a quick run keeps it in ``output``.
    """
    samples_path, labels_path = STORED if size is FULL else (output / "reference.npz",
                                                              output / "reference_labels.npz")
    numbers = claisen.reactant().atomic_numbers
    if not samples_path.is_file():
        labels = TrajectoryLabels(every=size["record"])
        umbrella, frames, seconds = claisen.umbrella_profile(
            XTB(numbers), centers, force_constant, TEMPERATURE, size["steps"], size["equilibration"],
            every=size["every"], seed=1, starts="pulled", labels=labels)
        kept = {key: values[:: size["keep"]] for key, values in labels.labels().items()}
        write_labels(labels_path, {**kept, "atomic_numbers": numbers.numpy()}, overwrite=True)
        np.savez_compressed(samples_path, samples=np.stack(umbrella.samples), frames=frames, seconds=seconds,
                            centers=centers, force_constant=force_constant)
    with np.load(samples_path) as saved:
        if not np.allclose(saved["centers"], centers) or float(saved["force_constant"]) != force_constant:
            raise ValueError(f"{samples_path}: stored for other windows; remove it to run the reference anew")
        umbrella = UmbrellaSampling(claisen.reaction_coordinate(), centers, force_constant, TEMPERATURE)
        for window, samples in enumerate(saved["samples"]):
            umbrella.add_samples(window, samples)
        return umbrella, saved["frames"], float(saved["seconds"]), read_labels(labels_path)


def trained(name: str, labels: dict, stride: int, minutes: float, switch: int, output: pathlib.Path):
    """A model (64 features, 3 interactions) trained on every ``stride``-th stored frame, or reloaded."""
    path = output / f"{name}.pt"
    if not path.is_file():
        data = TrainingData.from_arrays(
            labels["positions"][::stride], labels["atomic_numbers"][::stride], labels["energy"][::stride],
            labels["forces"][::stride], source="reference labels")
        torch.manual_seed(0)
        model = ms.potentials.MODELS[name](cutoff=0.5, features=64, interactions=3)
        trainer = Trainer(model, data, energy_weight=1000.0, force_weight=1.0,
                          weight_schedule={0: (1.0, 1.0), switch: (1000.0, 1.0)}, batch_size=16,
                          learning_rate=1e-3, validation_fraction=0.1, test_fraction=0.1, ema_decay=0.99,
                          gradient_clip=100.0, patience=60, checkpoint=output / f"{name}.chk", progress=True,
                          threads=1)
        trainer.fit(10_000, time_limit=60.0 * minutes)
        test = trainer.test_metrics
        print(f"{name}: {len(data)} frames, test force MAE {test['force_mae']:.1f} kJ/mol/nm, energy MAE "
              f"{test['energy_mae']:.2f} kJ/mol", flush=True)
        ms.potentials.save(trainer.model, path)
    return ms.potentials.load(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test at a tiny size")
    parser.add_argument("--models", nargs="+", default=["SchNet", "PaiNN"],
                        choices=["SchNet", "PaiNN", "ACENet"])
    parser.add_argument("--minutes", type=float, default=34.0, help="training budget per model")
    parser.add_argument("--stride", type=int, default=1,
                        help="train on every stride-th stored labelled frame (kept every 125 fs)")
    parser.add_argument("--switch", type=int, default=80, help="epoch from which energies weigh 1000:1")
    parser.add_argument("--output", type=pathlib.Path,
                        default=pathlib.Path(__file__).parent / "output" / "claisen_profile")
    args = parser.parse_args()
    size = QUICK if args.quick else FULL
    minutes, switch = (2.0, 5) if args.quick else (args.minutes, args.switch)
    output = args.output / ("quick" if args.quick else "full")
    output.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    centers = np.linspace(*size["centers"])
    force_constant = size["force_constant"]  # kJ/mol/nm^2
    edges = np.linspace(centers[0] - 0.02, centers[-1] + 0.02, 101)

    umbrella, frames, xtb_seconds, labels = reference(size, centers, force_constant, output)
    barrier, reaction = profile_numbers(umbrella, edges)
    print(f"GFN2-xTB: barrier {barrier:.1f} kJ/mol, reaction {reaction:.1f} kJ/mol (halves: "
          + ", ".join(f"{b:.1f} and {r:.1f}" for b, r in halves(umbrella, edges))
          + f"), {1e3 * xtb_seconds:.2f} ms per step, {len(labels['energy'])} labelled frames", flush=True)
    numbers = claisen.reactant().atomic_numbers
    results = {}
    for name in args.models:
        model = trained(name, labels, args.stride, minutes, switch, output)
        learned, learned_frames, seconds = claisen.umbrella_profile(
            model.bind(numbers), centers, force_constant, TEMPERATURE, size["steps"], size["equilibration"],
            every=size["every"], seed=1, starts=frames, replicas=True)
        apart = [f"{center:+.2f}" for center, kind in zip(centers, claisen.ring_conformation(learned_frames))
                 if kind == "apart"]
        results[name] = (*profile_numbers(learned, edges), seconds)
        print(f"{name}: barrier {results[name][0]:.1f} kJ/mol, reaction {results[name][1]:.1f} kJ/mol, "
              f"{1e3 * seconds:.2f} ms per window step; windows come apart: {', '.join(apart) or 'none'}",
              flush=True)
    for name, (learned_barrier, learned_reaction, seconds) in results.items():
        print(f"{name} - GFN2-xTB: barrier {learned_barrier - barrier:+.1f} kJ/mol, reaction "
              f"{learned_reaction - reaction:+.1f} kJ/mol; ratio GFN2-xTB/{name} MD step time per window: "
              f"{xtb_seconds / seconds:.2f}")


if __name__ == "__main__":
    main()
