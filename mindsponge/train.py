"""Fit a learned potential to reference energies and forces from HDF5 datasets.

:class:`TrainingData` reads the columnar HDF5 tables written by :class:`common.io.H5Writer` (and
by the dataset generator, e.g. with :func:`mindsponge.labels.xtb_sample`): per sample
``positions`` (N, 3) nm, ``atomic_numbers`` (N,), ``energy`` () kJ/mol and ``forces`` (N, 3)
kJ/mol/nm. :class:`Trainer` minimises::

    loss = energy_weight * mean_m ((E_m - E_m^ref) / N_m)^2 + force_weight * mean_{i,a} (F_ia - F_ia^ref)^2

in kJ/mol and kJ/mol/nm. The forces are ``-dE/dx`` with ``create_graph=True``, so the loss
differentiates them again (second order). It splits off a validation set, fits the model's
per-element energy shifts and scale on the training set first, uses Adam with a
reduce-on-plateau learning-rate schedule, stops early when the validation loss has not improved
for ``patience`` epochs, restores the best weights, writes an atomic checkpoint every epoch
(resumable), and reports energy MAE per atom and force MAE/RMSE.

Data parallel: launched by ``torchrun`` (``torchrun --nproc_per_node=2 -m mindsponge.train
data.h5``), every process (:class:`common.parallel.DistributedContext`, gloo on CPU) takes its
slice of each global batch, and the gradients are summed over processes before every step, so
the update equals that of one process on the same global batch (up to summation order).
Validation runs on every process (no communication); only rank 0 writes checkpoints.

Example::

    data = TrainingData.from_hdf5("ethanol_xtb.h5")
    trainer = Trainer(ms.potentials.SchNet(), data, batch_size=16)
    history = trainer.fit(epochs=100)
    trainer.evaluate()     # {"energy_mae_per_atom": ..., "force_mae": ..., "force_rmse": ...}
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys

import numpy as np
import torch
from torch import Tensor

from common import io
from common.checks import positive_int
from common.errors import DataError
from common.parallel import DistributedContext
from common.threads import default_threads
from common.training import History, TrainingLoop
from mindsponge import potentials as potentials_module

__all__ = ["TrainingData", "Trainer", "DatasetError", "main"]

class DatasetError(DataError):
    """A dataset file that cannot be used for training (the message names the file and key)."""


@dataclasses.dataclass
class TrainingData:
    """Configurations with reference energies and forces, held in memory (flat over atoms).

    Attributes:
        positions: ``(A, 3)`` float64 tensor, nm, the atoms of all samples one after another.
        atomic_numbers: ``(A,)`` long tensor.
        energy: ``(S,)`` float64 tensor, kJ/mol.
        forces: ``(A, 3)`` float64 tensor, kJ/mol/nm.
        offsets: ``(S + 1,)`` long tensor: sample ``s`` holds atoms ``offsets[s]:offsets[s + 1]``.
    """

    positions: Tensor
    atomic_numbers: Tensor
    energy: Tensor
    forces: Tensor
    offsets: Tensor

    def __len__(self) -> int:
        return len(self.energy)

    @property
    def n_atoms(self) -> Tensor:
        """``(S,)`` atoms per sample."""
        return self.offsets[1:] - self.offsets[:-1]

    @classmethod
    def from_arrays(cls, positions, atomic_numbers, energy, forces, source: str = "arrays") -> TrainingData:
        """From ``positions`` (S, N, 3) nm, ``atomic_numbers`` (S, N) or (N,), ``energy`` (S,) kJ/mol,
        ``forces`` (S, N, 3) kJ/mol/nm.

        Raises:
            DatasetError: no samples, shapes that do not match (naming the keys), non-finite values
                (naming the first bad sample).
        """
        positions = np.asarray(positions, dtype=np.float64)
        numbers = np.asarray(atomic_numbers)
        energy = np.asarray(energy, dtype=np.float64).reshape(-1) if np.ndim(energy) else np.asarray(energy)
        forces = np.asarray(forces, dtype=np.float64)
        if positions.ndim != 3 or positions.shape[-1] != 3:
            raise DatasetError(f"{source}: 'positions' must be (samples, atoms, 3) nm, got {positions.shape}")
        samples, atoms = positions.shape[:2]
        if samples == 0:
            raise DatasetError(f"{source}: the dataset holds no samples")
        if numbers.shape == (atoms,):
            numbers = np.broadcast_to(numbers, (samples, atoms))
        expected = {"atomic_numbers": (samples, atoms), "energy": (samples,), "forces": (samples, atoms, 3)}
        for key, value in (("atomic_numbers", numbers), ("energy", energy), ("forces", forces)):
            if value.shape != expected[key]:
                raise DatasetError(
                    f"{source}: {key!r} has shape {value.shape} but positions {positions.shape} need "
                    f"{expected[key]}"
                )
        if not np.issubdtype(numbers.dtype, np.integer):
            raise DatasetError(f"{source}: 'atomic_numbers' must be integers, got {numbers.dtype}")
        for key, value in (("positions", positions), ("energy", energy), ("forces", forces)):
            finite = np.isfinite(value.reshape(samples, -1)).all(1)
            if not finite.all():
                raise DatasetError(f"{source}: {key!r} of sample {int(np.argmin(finite))} is not finite")
        return cls(torch.from_numpy(positions.reshape(-1, 3).copy()),
                   torch.from_numpy(numbers.reshape(-1).astype(np.int64)),
                   torch.from_numpy(energy.copy()), torch.from_numpy(forces.reshape(-1, 3).copy()),
                   torch.arange(samples + 1, dtype=torch.long) * atoms)

    @classmethod
    def from_hdf5(cls, paths, group: str = "/", keys: dict[str, str] | None = None) -> TrainingData:
        """Read one or more HDF5 tables written by :class:`common.io.H5Writer`.

        Args:
            paths: a file or a list of files (concatenated; the number of atoms may differ
                between files).
            group: the table in each file.
            keys: column names when they differ from ``positions``, ``atomic_numbers``,
                ``energy``, ``forces`` (e.g. ``{"energy": "energy_gfn2"}``).

        Raises:
            FileNotFoundError: a missing file.
            DatasetError: an unreadable (corrupt) file, a missing column, no samples, mismatched
                shapes or non-finite values (the message names the file and column).
        """
        names = {"positions": "positions", "atomic_numbers": "atomic_numbers", "energy": "energy",
                 "forces": "forces", **(keys or {})}
        paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        if not paths:
            raise DatasetError("TrainingData.from_hdf5: no files given")
        parts = []
        for path in paths:
            if not pathlib.Path(path).is_file():
                raise FileNotFoundError(f"dataset file {str(path)!r} does not exist")
            _check_hdf5(path)
            try:
                table = io.read_table(path, group=group)
            except (OSError, KeyError) as error:
                raise DatasetError(f"dataset file {str(path)!r} cannot be read as HDF5 ({error})") from error
            except ValueError as error:
                raise DatasetError(f"dataset file {str(path)!r}: {error}") from error
            missing = [name for name in names.values() if name not in table]
            if missing:
                raise DatasetError(
                    f"dataset file {str(path)!r} has no column(s) {missing}; it has {sorted(table)}")
            parts.append(cls.from_arrays(*(table[names[key]] for key in
                                           ("positions", "atomic_numbers", "energy", "forces")),
                                         source=f"dataset file {str(path)!r}"))
        return cls.concatenate(parts)

    @classmethod
    def concatenate(cls, parts: list[TrainingData]) -> TrainingData:
        """Samples of several datasets one after another."""
        atom_offsets = np.cumsum([0] + [len(part.positions) for part in parts[:-1]])
        shifted = [part.offsets[1:] + int(start) for part, start in zip(parts, atom_offsets, strict=True)]
        offsets = torch.cat([parts[0].offsets[:1], *shifted])
        return cls(torch.cat([p.positions for p in parts]), torch.cat([p.atomic_numbers for p in parts]),
                   torch.cat([p.energy for p in parts]), torch.cat([p.forces for p in parts]), offsets)

    def atom_indices(self, samples: Tensor) -> tuple[Tensor, Tensor]:
        """Atom indices ``(a,)`` of the given samples and the batch index ``(a,)`` (0..len(samples)-1)."""
        counts = self.n_atoms[samples]
        batch = torch.repeat_interleave(torch.arange(len(samples)), counts)
        starts = torch.repeat_interleave(self.offsets[samples] - (torch.cumsum(counts, 0) - counts), counts)
        return starts + torch.arange(int(counts.sum())), batch

    def subset(self, samples: Tensor) -> TrainingData:
        """The given samples ``(k,)`` as a new dataset."""
        atoms, _ = self.atom_indices(samples)
        counts = self.n_atoms[samples]
        return TrainingData(self.positions[atoms], self.atomic_numbers[atoms], self.energy[samples],
                            self.forces[atoms], torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)]))


def _check_hdf5(path) -> None:
    """Raise :class:`DatasetError` for an empty, truncated or non-HDF5 file.

    The SWMR reader of :func:`common.io.read_table` skips HDF5's end-of-file check (a file being
    written may grow) and retries damaged metadata for minutes, so a plain open checks first. A
    file left flagged "open for writing" by a killed writer is fine (the SWMR reader handles it).
    """
    import h5py

    try:
        h5py.File(path, "r").close()
    except OSError as error:
        if "already open for write" not in str(error):
            raise DatasetError(f"dataset file {str(path)!r} cannot be read as HDF5 ({error})") from error


def _predict(model, data: TrainingData, samples: Tensor, dtype, device, create_graph: bool):
    """Energies ``(k,)`` and forces ``(a, 3)`` of the model on the given samples."""
    atoms, batch = data.atom_indices(samples)
    positions = data.positions[atoms].to(device=device, dtype=dtype).requires_grad_(True)
    with torch.enable_grad():
        energies = model(positions, data.atomic_numbers[atoms].to(device), batch=batch.to(device))
        (gradient,) = torch.autograd.grad(energies.sum(), positions, create_graph=create_graph)
    return energies, -gradient, atoms


class Trainer:
    """Energy + force training of a learned potential (see the module docstring).

    Args:
        model: the potential (its dtype is the training dtype).
        data: a :class:`TrainingData`.
        energy_weight: weight of the per-atom energy MSE, 1/(kJ/mol)^2 times the loss unit.
        force_weight: weight of the force-component MSE, 1/(kJ/mol/nm)^2 times the loss unit.
        learning_rate: initial Adam learning rate.
        batch_size: molecules per global batch (split over processes).
        validation_fraction: share of samples held out (at least one sample).
        patience: stop after this many epochs without a better validation loss.
        scheduler_patience, scheduler_factor, min_learning_rate: reduce-on-plateau schedule.
        checkpoint: optional path of an atomic checkpoint written every epoch (rank 0), with the
            history as CSV next to it (``<checkpoint>.history.csv``); an existing checkpoint there
            is resumed by :meth:`fit` (with its stored train/validation split).
        seed: seed of the split and the batch order (the same on every process).
        progress: a progress bar over epochs (rank 0; :func:`common.progress.bar`).
        context: a :class:`common.parallel.DistributedContext`; default from the environment
            (``torchrun``), a single process otherwise.
        fit_statistics: fit the per-element shifts and scale on the training set first.
        threads: CPU threads :meth:`fit` uses (torch and the OpenMP/BLAS pools, restored
            afterwards; :func:`common.threads.thread_budget`); default the context's budget
            (under ``torchrun``: the cores divided by the processes on this machine).
        log: optional CSV file every epoch's record is appended to (rank 0).
        tensorboard: optional TensorBoard log directory (needs the ``tensorboard`` package).
    """

    def __init__(self, model, data: TrainingData, *, energy_weight: float = 1.0, force_weight: float = 1.0,
                 learning_rate: float = 1e-3, batch_size: int = 16, validation_fraction: float = 0.1,
                 patience: int = 30, scheduler_patience: int = 10, scheduler_factor: float = 0.5,
                 min_learning_rate: float = 1e-5, checkpoint=None, seed: int = 0, progress: bool = True,
                 context: DistributedContext | None = None, fit_statistics: bool = True,
                 threads: int | None = None, log=None, tensorboard=None):
        if not isinstance(model, potentials_module.LearnedPotential):
            raise TypeError(f"model must be a mindsponge LearnedPotential, got {type(model).__name__}")
        if not isinstance(data, TrainingData):
            raise TypeError(f"data must be a TrainingData, got {type(data).__name__}")
        if not 0.0 < validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if len(data) < 2:
            raise DatasetError(f"training needs at least 2 samples (one for validation), got {len(data)}")
        self.context = DistributedContext.from_environment() if context is None else context
        self.model = model.to(self.context.device)
        self.dtype = model.energy_scale.dtype
        self.energy_weight, self.force_weight = float(energy_weight), float(force_weight)
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.patience, self.checkpoint, self.progress = patience, checkpoint, progress
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))
        n_validation = max(1, int(round(validation_fraction * len(data))))
        split = {"train_indices": order[n_validation:].tolist(),
                 "validation_indices": order[:n_validation].tolist()}
        self._use_split(split)
        if fit_statistics:
            batch = torch.repeat_interleave(torch.arange(len(self.training)), self.training.n_atoms)
            self.model.fit_statistics(self.training.energy, self.training.atomic_numbers, batch,
                                      forces=self.training.forces)
        optimizer = torch.optim.Adam(self.model.parameters(), lr=learning_rate)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, factor=scheduler_factor, patience=scheduler_patience, min_lr=min_learning_rate)
        self.loop = TrainingLoop(
            self.model, optimizer, scheduler, kind="mindsponge.train", checkpoint=checkpoint,
            description="training", progress=progress, is_main=self.context.is_main,
            threads=(positive_int(threads, "Trainer: threads") if threads is not None
                     else self.context.threads or default_threads()),
            log=log, tensorboard=tensorboard, best=lambda record: record["validation_loss"], split=split,
            model_state=potentials_module.model_state,
            load_model_state=lambda module, state: module.load_state_dict(state["state_dict"]))
        self.loop.best_state = {key: value.clone() for key, value in self.model.state_dict().items()}
        self.loop.extra["steps"] = 0

    def _use_split(self, split: dict) -> None:
        """Training and validation sets from ``{"train_indices", "validation_indices"}``."""
        self.validation = self.data.subset(torch.as_tensor(split["validation_indices"], dtype=torch.long))
        self.training = self.data.subset(torch.as_tensor(split["train_indices"], dtype=torch.long))

    # the loop's state, under the names this class always had
    optimizer = property(lambda self: self.loop.optimizer)
    scheduler = property(lambda self: self.loop.scheduler)
    threads = property(lambda self: self.loop.threads)
    history = property(lambda self: self.loop.history, doc="The :class:`common.training.History`.")
    epoch = property(lambda self: self.loop.done, doc="Epochs done.")
    best_loss = property(lambda self: self.loop.best_score, doc="The lowest validation loss so far.")
    best_state = property(lambda self: self.loop.best_state, doc="The weights of that epoch.")

    # --- one epoch -------------------------------------------------------------------------------
    def _loss(self, samples: Tensor, batch_samples: int, batch_atoms: int) -> Tensor:
        """This process's share of the loss of a global batch of ``batch_samples`` molecules and
        ``batch_atoms`` atoms (the squared errors of ``samples`` over the global counts)."""
        energies, forces, atoms = _predict(self.model, self.training, samples, self.dtype,
                                           self.context.device, create_graph=True)
        counts = self.training.n_atoms[samples].to(energies)
        energy_error = (energies - self.training.energy[samples].to(energies)) / counts
        force_error = forces - self.training.forces[atoms].to(forces)
        energy_term = (energy_error * energy_error).sum() / batch_samples
        force_term = (force_error * force_error).sum() / (3.0 * batch_atoms)
        return self.energy_weight * energy_term + self.force_weight * force_term

    def _train_epoch(self) -> float:
        context = self.context
        generator = torch.Generator().manual_seed(self.seed + 1 + self.loop.done)
        order = torch.randperm(len(self.training), generator=generator)
        total, count = 0.0, 0
        for start in range(0, len(order), self.batch_size):
            global_batch = order[start:start + self.batch_size]
            batch_atoms = int(self.training.n_atoms[global_batch].sum())
            shard = global_batch[context.rank::context.world_size]
            self.optimizer.zero_grad(set_to_none=False)
            if len(shard):
                loss = self._loss(shard, len(global_batch), batch_atoms)
                loss.backward()
                value = float(loss.detach())
            else:
                value = 0.0
            if context.distributed:
                self._sum_gradients()
                mean = context.all_reduce_mean(torch.tensor(value, dtype=torch.float64))
                value = float(mean) * context.world_size
            self.optimizer.step()
            self.loop.extra["steps"] += 1
            total += value * len(global_batch)
            count += len(global_batch)
        return total / count

    def _sum_gradients(self) -> None:
        """Sum the gradients over processes (each holds the gradient of its share of the global mean)."""
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        flat = torch.cat([p.grad.reshape(-1) for p in parameters])
        flat = self.context.all_reduce_mean(flat) * self.context.world_size
        offset = 0
        for parameter in parameters:
            size = parameter.numel()
            parameter.grad.copy_(flat[offset:offset + size].view_as(parameter))
            offset += size

    # --- metrics ---------------------------------------------------------------------------------
    def evaluate(self, data: TrainingData | None = None, batch_size: int = 64) -> dict[str, float]:
        """Metrics of the model on ``data`` (default: the validation set).

        Returns:
            ``loss`` (as the training loss, over all of ``data``); ``energy_mae_per_atom`` and
            ``energy_mae`` (kJ/mol); ``force_mae`` and
            ``force_rmse`` (kJ/mol/nm, over components); ``n_samples``.
        """
        data = self.validation if data is None else data
        energy_errors, force_errors = [], []
        for start in range(0, len(data), batch_size):
            samples = torch.arange(start, min(start + batch_size, len(data)))
            energies, forces, atoms = _predict(self.model, data, samples, self.dtype, self.context.device,
                                               create_graph=False)
            energy_error = energies.detach().double().cpu() - data.energy[samples]
            energy_errors.append(energy_error / data.n_atoms[samples])
            force_errors.append(forces.detach().double().cpu() - data.forces[atoms])
        energy_error, force_error = torch.cat(energy_errors), torch.cat(force_errors)
        per_atom = data.n_atoms.double()
        loss = self.energy_weight * energy_error.pow(2).mean() + self.force_weight * force_error.pow(2).mean()
        return {
            "loss": float(loss),
            "energy_mae_per_atom": float(energy_error.abs().mean()),
            "energy_mae": float((energy_error * per_atom).abs().mean()),
            "force_mae": float(force_error.abs().mean()),
            "force_rmse": float(force_error.pow(2).mean().sqrt()),
            "n_samples": len(data),
        }

    # --- the loop --------------------------------------------------------------------------------
    def fit(self, epochs: int) -> History:
        """Train for up to ``epochs`` epochs (resuming from ``checkpoint`` if it exists), on the shared
        :class:`common.training.TrainingLoop`; the model ends with the best validation weights.

        A resumed run uses the train/validation split stored in the checkpoint.

        Returns:
            the :class:`common.training.History`, one row per epoch: ``step`` (optimiser steps done),
            ``epoch`` (epochs done), ``loss`` (training), ``learning_rate`` and the validation metrics
            of :meth:`evaluate` (prefixed ``validation_``: ``validation_loss``, ...). Indexing it by
            an epoch number (``history[0]["train_loss"]``, the list of dicts it used to be) still
            works for one release, with a ``DeprecationWarning``.
        """
        if self.loop.resume_if_present():
            self._use_split(self.loop.split)
        try:
            self.loop.run(epochs, self._epoch, stop=lambda: self._stale_epochs() >= self.patience)
        finally:
            self.loop.close()
        self.loop.restore_best()
        return self.history

    def _epoch(self) -> dict:
        """One epoch, then the validation metrics and the schedule step: the epoch's record."""
        train_loss = self._train_epoch()
        metrics = self.evaluate()
        self.scheduler.step(metrics["loss"])
        return {"step": self.loop.extra["steps"], "epoch": self.loop.done + 1, "loss": train_loss,
                "learning_rate": self.optimizer.param_groups[0]["lr"],
                **{f"validation_{key}": value for key, value in metrics.items()}}

    def _stale_epochs(self) -> int:
        """Epochs since the best validation loss."""
        losses = self.history.get("validation_loss", [])
        if not losses:
            return 0
        return len(losses) - 1 - int(np.argmin(losses))


def main(argv=None) -> int:
    """``python -m mindsponge.train DATA.h5 [...]`` (or under ``torchrun``): train and save a potential."""
    parser = argparse.ArgumentParser(prog="python -m mindsponge.train", description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="+",
                        help="HDF5 dataset files (positions, atomic_numbers, energy, forces)")
    parser.add_argument("--model", default="SchNet", choices=sorted(potentials_module.MODELS))
    parser.add_argument("--cutoff", type=float, default=0.5, help="nm")
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--interactions", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--force-weight", type=float, default=1.0)
    parser.add_argument("--energy-weight", type=float, default=1.0)
    parser.add_argument("--validation-fraction", type=float, default=0.1)
    parser.add_argument("--patience", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--checkpoint", help="checkpoint path (resumed if it exists)")
    parser.add_argument("--output", help="where to save the trained model (mindsponge.potentials.save)")
    parser.add_argument("--history", help="write the history as JSON here ({key: [value per epoch]})")
    parser.add_argument("--log", help="append every epoch's record to this CSV file as training runs")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    model = potentials_module.MODELS[args.model](cutoff=args.cutoff, features=args.features,
                                                 interactions=args.interactions)
    model = model.to(getattr(torch, args.dtype))
    data = TrainingData.from_hdf5(args.data)
    trainer = Trainer(model, data, energy_weight=args.energy_weight, force_weight=args.force_weight,
                      learning_rate=args.learning_rate, batch_size=args.batch_size,
                      validation_fraction=args.validation_fraction, patience=args.patience,
                      checkpoint=args.checkpoint, seed=args.seed, progress=not args.quiet, log=args.log)
    history = trainer.fit(args.epochs)
    if trainer.context.is_main:
        if args.output:
            potentials_module.save(trainer.model, args.output)
        if args.history:
            pathlib.Path(args.history).write_text(json.dumps(history, indent=1))  # {key: [per epoch]}
        final = trainer.evaluate()
        print(json.dumps({key: final[key] for key in ("energy_mae_per_atom", "force_mae", "force_rmse")}))
    trainer.context.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
