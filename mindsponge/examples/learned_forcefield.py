"""A learned force field for ethanol, end to end: GFN2-xTB sampling, training, MD, comparison.

1. Langevin MD of ethanol at a high temperature under GFN2-xTB (:class:`mindsponge.labels.XTB`),
   keeping the energies and forces of every other step (:class:`~mindsponge.labels.TrajectoryLabels`),
   written to HDF5 with :class:`common.io.H5Writer`;
2. SchNet and PaiNN trained on energies and forces (:class:`mindsponge.train.Trainer`);
3. NVT MD at the comparison temperature with each model and with GFN2-xTB;
4. potential-energy spread, C-O distance and H-O-C-C torsion of each trajectory.

Run ``python -m mindsponge.examples.learned_forcefield --size small`` (a few minutes on one
core; ``--size full`` for converged histograms). ``notebooks/learned_forcefield.ipynb`` walks
through the same functions with plots.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np
import torch

import mindsponge as ms
from common.io import H5Writer
from mindsponge.labels import XTB, TrajectoryLabels, label, molecule
from mindsponge.train import Trainer, TrainingData

__all__ = ["SIZES", "ethanol", "run_md", "write_dataset", "train", "torsion_and_distance", "compare", "main"]

# steps are 0.5 fs; frames are kept every other step
SIZES = {
    "small": {"sampling_steps": 240, "md_steps": 240, "epochs": 12, "features": 32, "interactions": 2},
    "full": {"sampling_steps": 6000, "md_steps": 6000, "epochs": 150, "features": 64, "interactions": 3},
}
TIMESTEP = 0.0005  # ps
FRICTION = 5.0  # 1/ps


def ethanol() -> ms.System:
    """Ethanol (ase's G2 geometry) as a System."""
    return ms.System.from_ase(molecule("ethanol"))


def run_md(system: ms.System, potential, temperature: float, steps: int, seed: int, every: int = 2) -> dict:
    """Langevin NVT run; returns the frames' ``positions`` (F, N, 3) nm, ``energy`` (F,) kJ/mol and
    ``forces`` (F, N, 3) kJ/mol/nm under ``potential`` (an :class:`XTB`, ``model.bind(numbers)``...)."""
    recorder = TrajectoryLabels(every=every)
    simulation = ms.Simulation(system, potential,
                               ms.integrators.LangevinMiddle(dt=TIMESTEP, temperature=temperature,
                                                             friction=FRICTION),
                               reporters=[recorder], seed=seed, progress=False)
    simulation.set_velocities(temperature=temperature, seed=seed)
    simulation.run(steps)
    return recorder.labels()


def write_dataset(path, frames: dict, atomic_numbers, attributes=None) -> pathlib.Path:
    """Write labelled frames as an H5Writer table (one record per frame); replaces ``path``."""
    path = pathlib.Path(path)
    path.unlink(missing_ok=True)
    numbers = np.asarray(atomic_numbers)
    with H5Writer(path, attributes=attributes) as writer:
        for index in range(len(frames["energy"])):
            writer.append({"sample_id": index, "positions": frames["positions"][index],
                           "atomic_numbers": numbers, "energy": frames["energy"][index],
                           "forces": frames["forces"][index]})
    return path


def train(name: str, data: TrainingData, epochs: int, features: int, interactions: int, checkpoint=None):
    """Train a fresh ``name`` model (``"SchNet"``, ``"PaiNN"``, ``"MolCT"``).

    Returns:
        ``(model, history, validation metrics)``.
    """
    torch.manual_seed(0)
    model = ms.potentials.MODELS[name](cutoff=0.5, features=features, interactions=interactions)
    if checkpoint is not None:
        pathlib.Path(checkpoint).unlink(missing_ok=True)
    trainer = Trainer(model, data, batch_size=8, learning_rate=3e-3, progress=False, checkpoint=checkpoint)
    history = trainer.fit(epochs)
    return model, history, trainer.evaluate()


def torsion_and_distance(system: ms.System, positions) -> tuple[np.ndarray, np.ndarray]:
    """C-O distances (nm) and H-O-C-C torsions (degrees) of frames ``(F, N, 3)`` nm of ethanol."""
    reference = system.positions
    elements = [atom.element for atom in system.topology.atoms]
    oxygen = elements.index("O")
    carbons = [i for i, element in enumerate(elements) if element == "C"]
    nearest = sorted(carbons, key=lambda c: float((reference[c] - reference[oxygen]).norm()))
    hydroxyl = min((i for i, element in enumerate(elements) if element == "H"),
                   key=lambda h: float((reference[h] - reference[oxygen]).norm()))
    distance = ms.colvar.Distance((nearest[0], oxygen))
    torsion = ms.colvar.Torsion((hydroxyl, oxygen, nearest[0], nearest[1]))
    frames = torch.as_tensor(positions)
    distances = np.array([float(distance(frame, None)) for frame in frames])
    torsions = np.degrees([float(torsion(frame, None)) for frame in frames])
    return distances, torsions


def compare(system: ms.System, trajectories: dict, reevaluate: int = 20) -> dict:
    """Energy spread, GFN2-xTB energy spread on ``reevaluate`` frames, C-O distance mean and spread."""
    xtb = XTB(system.atomic_numbers)
    summary = {}
    for name, frames in trajectories.items():
        distances, _ = torsion_and_distance(system, frames["positions"])
        subset = torch.as_tensor(frames["positions"][:: max(1, len(frames["energy"]) // reevaluate)])
        summary[name] = {
            "energy_std": float(frames["energy"].std()),
            "gfn2_energy_std_on_frames": float(label(xtb, subset)["energy"].std()),
            "co_distance_mean": float(distances.mean()),
            "co_distance_std": float(distances.std()),
        }
    return summary


def main(argv=None) -> dict:
    """Command line: ``--size small|full``, ``--output DIR``, ``--high-temperature`` and
    ``--temperature`` (K). Returns the summary of :func:`compare`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--output", default="learned_forcefield_output")
    parser.add_argument("--high-temperature", type=float, default=1000.0, help="sampling temperature, K")
    parser.add_argument("--temperature", type=float, default=500.0, help="comparison temperature, K")
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    output = pathlib.Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    system = ethanol()
    numbers = system.atomic_numbers
    sampled = run_md(system, XTB(numbers), args.high_temperature, size["sampling_steps"], seed=1)
    dataset = write_dataset(output / "ethanol_gfn2_md.h5", sampled, numbers,
                            {"method": "GFN2-xTB", "temperature": args.high_temperature})
    data = TrainingData.from_hdf5(dataset)
    trajectories = {"GFN2-xTB": run_md(system, XTB(numbers), args.temperature, size["md_steps"], seed=2)}
    for name in ("SchNet", "PaiNN"):
        model, history, metrics = train(name, data, size["epochs"], size["features"], size["interactions"],
                                        checkpoint=output / f"{name}.chk")
        ms.potentials.save(model, output / f"{name}.pt")
        epochs = len(history["epoch"])
        print(f"{name}: {epochs} epochs, validation force MAE {metrics['force_mae']:.0f} kJ/mol/nm")
        trajectories[name] = run_md(system, model.bind(numbers), args.temperature, size["md_steps"], seed=2)
    summary = compare(system, trajectories)
    (output / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    main()
