"""``python -m mindsponge.train DATA [...]`` (or under ``torchrun``): train and save a potential.

DATA: HDF5 tables, extxyz files, ASE databases or npz archives (:mod:`mindsponge.label_io`).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import torch

from common.errors import MindScienceError
from mindsponge import potentials as potentials_module
from mindsponge.training.data import TrainingData, store_split
from mindsponge.training.trainer import Trainer

__all__ = ["main"]


def main(argv=None) -> int:
    """``python -m mindsponge.train DATA.h5 [...]`` (or under ``torchrun``): train and save a potential."""
    parser = argparse.ArgumentParser(
        prog="python -m mindsponge.train",
        description="Fit a learned potential to reference energies and forces.")
    parser.add_argument("data", nargs="+",
                        help="dataset files: HDF5 tables (positions, atomic_numbers, energy, forces), "
                             "extxyz, "
                             "ASE databases or npz (mindsponge.label_io); molecules may differ in size")
    parser.add_argument("--energy-key", default="energy",
                        help="the files' name of the energy (MACE's extxyz files: REF_energy)")
    parser.add_argument("--forces-key", default="forces",
                        help="the files' name of the forces (MACE's extxyz files: REF_forces)")
    parser.add_argument("--model", default="SchNet", choices=sorted(potentials_module.MODELS))
    parser.add_argument("--cutoff", type=float, default=0.5, help="nm")
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--interactions", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--time-limit", type=float,
                        help="wall-clock budget, s: training stops at the first batch after it")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--force-weight", type=float, default=1.0)
    parser.add_argument("--energy-weight", type=float, default=1.0)
    parser.add_argument("--validation-fraction", type=float, default=0.1)
    parser.add_argument("--test-fraction", type=float, default=0.0)
    parser.add_argument("--split-by", choices=("random", "group"), default="random",
                        help="group: whole trajectories (the dataset's 'group' column) in one set")
    parser.add_argument("--store-split", action="store_true",
                        help="write the split into the (single) dataset file, where later runs find it")
    parser.add_argument("--ema-decay", type=float, help="moving average of the weights, e.g. 0.99")
    parser.add_argument("--gradient-clip", type=float, help="maximum gradient norm")
    parser.add_argument("--patience", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--checkpoint", help="checkpoint path (resumed if it exists)")
    parser.add_argument("--output", help="where to save the trained model (mindsponge.potentials.save)")
    parser.add_argument("--history", help="write the history as JSON here ({key: [value per epoch]})")
    parser.add_argument("--log", help="append every epoch's record to this CSV file as training runs")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.store_split and (len(args.data) != 1
                             or pathlib.Path(args.data[0]).suffix.lower() not in (".h5", ".hdf5")):
        parser.error("--store-split writes the split into the dataset: it needs a single HDF5 (.h5) file")
    try:
        return _train(args)
    except MindScienceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _train(args) -> int:
    """Train as the parsed arguments say; print the final metrics as JSON."""
    torch.manual_seed(args.seed)
    model = potentials_module.MODELS[args.model](cutoff=args.cutoff, features=args.features,
                                                 interactions=args.interactions)
    model = model.to(getattr(torch, args.dtype))
    data = TrainingData.from_file(args.data, keys={"energy": args.energy_key, "forces": args.forces_key})
    trainer = Trainer(model, data, energy_weight=args.energy_weight, force_weight=args.force_weight,
                      learning_rate=args.learning_rate, batch_size=args.batch_size,
                      validation_fraction=args.validation_fraction, patience=args.patience,
                      checkpoint=args.checkpoint, seed=args.seed, progress=not args.quiet, log=args.log,
                      test_fraction=args.test_fraction, split_by=args.split_by, ema_decay=args.ema_decay,
                      gradient_clip=args.gradient_clip)
    if args.store_split and trainer.context.is_main:
        store_split(args.data[0], trainer.split)
    history = trainer.fit(args.epochs, time_limit=args.time_limit)
    if trainer.context.is_main:
        if args.output:
            potentials_module.save(trainer.model, args.output)
        if args.history:
            pathlib.Path(args.history).write_text(json.dumps(history, indent=1))  # {key: [per epoch]}
        keys = ("energy_mae_per_atom", "force_mae", "force_rmse")
        final = {key: trainer.evaluate()[key] for key in keys}
        if trainer.test_metrics is not None:
            final["test"] = {key: trainer.test_metrics[key] for key in keys}
        print(json.dumps(final))
    trainer.context.close()
    return 0

