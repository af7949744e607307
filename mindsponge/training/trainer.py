"""Fit a learned potential to reference energies and forces: :class:`Trainer`.

:class:`Trainer` minimises::

    loss = energy_weight * mean_m ((E_m - E_m^ref) / N_m)^2 + force_weight * mean_{i,a} (F_ia - F_ia^ref)^2

in kJ/mol and kJ/mol/nm. The forces are ``-dE/dx`` with ``create_graph=True``, so the loss
differentiates them again (second order). What it does, as the state of the art does on small
data sets (MACE, NequIP, SchNetPack):

- splits the samples into training, validation and (optionally) test sets, at random or by
  trajectory (:func:`~mindsponge.training.data.make_split`); a split stored in the dataset or in
  the checkpoint is reused;
- fits the model's per-element energy references by least squares and its energy scale on the
  training set first (:meth:`~mindsponge.potentials.LearnedPotential.fit_statistics`);
- Adam, with the energy and force weights of the training loss changing at given epochs
  (``weight_schedule``, e.g. more weight on energies for the last epochs), the gradient norm
  clipped (``gradient_clip``), an exponential moving average of the weights (``ema_decay``)
  that is what is validated, kept as the best and checkpointed, and a reduce-on-plateau
  learning-rate schedule on the validation loss;
- stops early when the validation loss has not improved for ``patience`` epochs (or when a
  wall-clock ``time_limit`` is reached), restores the best weights, and reports the test-set
  metrics (:attr:`Trainer.test_metrics`);
- trains in float64 on request (``dtype="float64"``);
- MACE's recipe as options: a Huber loss (``loss="huber"``) on per-atom energies and force
  components, AMSGrad (``amsgrad=True``) and a linear learning-rate warm-up (``warmup_steps``);
- stops at a budget of wall-clock or of this process's CPU time (``fit(clock="cpu")``: equal
  budgets on a shared machine, whatever the load);
- writes an atomic checkpoint every epoch (resumable bit for bit: optimiser, schedule, moving
  average, the training weights behind it, split, history).

Data parallel: launched by ``torchrun`` (``torchrun --nproc_per_node=2 -m mindsponge.train
data.h5``), every process (:class:`common.parallel.DistributedContext`, gloo on CPU) takes its
slice of each global batch, and the gradients are summed over processes before every step, so
the update equals that of one process on the same global batch (up to summation order).
Validation runs on every process (no communication); only rank 0 writes checkpoints.

Example::

    data = TrainingData.from_hdf5("ethanol_xtb.h5")
    trainer = Trainer(ms.potentials.ACENet(), data, batch_size=16, test_fraction=0.1, ema_decay=0.99)
    history = trainer.fit(epochs=100)
    trainer.evaluate()     # {"energy_mae_per_atom": ..., "force_mae": ..., "force_rmse": ...}
    trainer.test_metrics   # the same on the test set
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import Tensor

from common import checks
from common.checks import positive_int
from common.errors import ArgumentTypeError, ConfigurationError
from common.parallel import DistributedContext
from common.threads import default_threads
from common.training import History, TrainingLoop
from mindsponge import potentials as potentials_module
from mindsponge.training.data import DatasetError, TrainingData, make_split

__all__ = ["Trainer", "CLOCKS"]

#: the clocks a time limit can count (``Trainer.fit(clock=...)``)
CLOCKS = {"wall": lambda: time.monotonic(), "cpu": lambda: time.process_time()}


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
        validation_fraction: share of samples (of groups with ``split_by="group"``) held out for
            validation (at least one).
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
        test_fraction: share held out as the test set (0: none), evaluated at the end of :meth:`fit`.
        split_by: ``"random"`` (per sample) or ``"group"`` (whole trajectories, ``data.groups``).
        split: an explicit ``{train,validation,test}_indices`` split; default the one stored in
            the dataset (``data.split``), else a new one (:func:`~mindsponge.training.make_split`).
        ema_decay: decay of the exponential moving average of the weights (e.g. 0.99), or ``None``.
        gradient_clip: maximum norm of the gradient (over all parameters) before a step, or ``None``.
        weight_schedule: ``{first epoch (0-based): (energy_weight, force_weight)}`` of the training
            loss from that epoch on; the validation loss (best weights, plateau, early stop) keeps
            ``energy_weight`` and ``force_weight`` so that epochs stay comparable.
        dtype: train in this dtype (``"float64"``, ``torch.float64``); default the model's.
        loss: ``"mse"`` (the squared errors above) or ``"huber"``: each squared error ``e^2``
            replaced by ``2 huber(e)``, quadratic below ``huber_delta`` and linear above
            (``torch.nn.functional.huber_loss`` times 2, so that small errors weigh as in ``"mse"``;
            MACE's ``--loss=huber``). The validation loss stays the MSE.
        huber_delta: ``(per-atom energy kJ/mol, force kJ/mol/nm)`` thresholds of the Huber loss;
            default MACE's 0.01 eV and 0.01 eV/Å (0.965 and 9.65).
        amsgrad: the AMSGrad variant of Adam (MACE's default).
        warmup_steps: the learning rate grows linearly from ``learning_rate / warmup_steps`` to
            ``learning_rate`` over the first optimiser steps (0: none); the plateau schedule takes
            over after them.
    """

    def __init__(self, model, data: TrainingData, *, energy_weight: float = 1.0, force_weight: float = 1.0,
                 learning_rate: float = 1e-3, batch_size: int = 16, validation_fraction: float = 0.1,
                 patience: int = 30, scheduler_patience: int = 10, scheduler_factor: float = 0.5,
                 min_learning_rate: float = 1e-5, checkpoint=None, seed: int = 0, progress: bool = True,
                 context: DistributedContext | None = None, fit_statistics: bool = True,
                 threads: int | None = None, log=None, tensorboard=None, test_fraction: float = 0.0,
                 split_by: str = "random", split: dict | None = None, ema_decay: float | None = None,
                 gradient_clip: float | None = None, weight_schedule: dict | None = None, dtype=None,
                 loss: str = "mse", huber_delta: tuple[float, float] = (0.9648533212, 9.648533212),
                 amsgrad: bool = False, warmup_steps: int = 0):
        _check_arguments(model, data, batch_size, ema_decay, gradient_clip)
        self.loss, self.huber_delta = _check_loss(loss, huber_delta)
        self.learning_rate = checks.non_negative(learning_rate, "Trainer: learning_rate")
        self.warmup_steps = checks.non_negative_int(warmup_steps, "Trainer: warmup_steps")
        self.context = DistributedContext.from_environment() if context is None else context
        if dtype is not None:
            model = model.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
        self.model = model.to(self.context.device)
        self.dtype = model.energy_scale.dtype
        self.energy_weight, self.force_weight = float(energy_weight), float(force_weight)
        self.weight_schedule = _check_schedule(weight_schedule)
        self.ema_decay, self.gradient_clip = ema_decay, gradient_clip
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.patience, self.checkpoint, self.progress = patience, checkpoint, progress
        self._deadline = None  # fit()'s time limit, s on self._clock
        self._clock = time.monotonic
        if split is None:
            split = data.split or make_split(data, validation_fraction, test_fraction, split_by, seed)
        self._use_split(split)
        if fit_statistics:
            batch = torch.repeat_interleave(torch.arange(len(self.training)), self.training.n_atoms)
            self.model.fit_statistics(self.training.energy, self.training.atomic_numbers, batch,
                                      forces=self.training.forces)
        optimizer = torch.optim.Adam(self.model.parameters(), lr=learning_rate, amsgrad=bool(amsgrad))
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, factor=scheduler_factor, patience=scheduler_patience, min_lr=min_learning_rate)
        self.loop = TrainingLoop(
            self.model, optimizer, scheduler, kind="mindsponge.train", checkpoint=checkpoint,
            description="training", progress=progress, is_main=self.context.is_main,
            threads=(positive_int(threads, "Trainer: threads") if threads is not None
                     else self.context.threads or default_threads()),
            log=log, tensorboard=tensorboard, best=lambda record: record["validation_loss"],
            split={name: list(split.get(name, [])) for name in ("train_indices", "validation_indices",
                                                                 "test_indices")},
            model_state=potentials_module.model_state,
            load_model_state=lambda module, state: module.load_state_dict(state["state_dict"]))
        self.loop.best_state = {key: value.clone() for key, value in self.model.state_dict().items()}
        self.loop.extra["steps"] = 0
        self.test_metrics: dict | None = None
        self._average: list[Tensor] | None = None

    def _use_split(self, split: dict) -> None:
        """Training, validation and test sets from ``{"train_indices", "validation_indices",
        "test_indices"}`` (the last may be missing)."""
        self.validation = self.data.subset(torch.as_tensor(split["validation_indices"], dtype=torch.long))
        self.training = self.data.subset(torch.as_tensor(split["train_indices"], dtype=torch.long))
        self.test = self.data.subset(torch.as_tensor(split.get("test_indices", []), dtype=torch.long))

    # the loop's state, under the names this class always had
    optimizer = property(lambda self: self.loop.optimizer, doc="The Adam optimiser (``torch.optim.Adam``).")
    scheduler = property(lambda self: self.loop.scheduler, doc="The reduce-on-plateau learning-rate schedule")
    threads = property(lambda self: self.loop.threads, doc="CPU threads :meth:`fit` uses.")
    history = property(lambda self: self.loop.history, doc="The :class:`common.training.History`.")
    epoch = property(lambda self: self.loop.done, doc="Epochs done.")
    best_loss = property(lambda self: self.loop.best_score, doc="The lowest validation loss so far.")
    best_state = property(lambda self: self.loop.best_state, doc="The weights of that epoch.")
    split = property(lambda self: self.loop.split, doc="``{train,validation,test}_indices`` in use.")

    def loss_weights(self, epoch: int) -> tuple[float, float]:
        """``(energy_weight, force_weight)`` of the training loss in epoch ``epoch`` (0-based): the
        latest ``weight_schedule`` entry at or before it, else the constructor's weights."""
        starts = [start for start in self.weight_schedule if start <= epoch]
        return self.weight_schedule[max(starts)] if starts else (self.energy_weight, self.force_weight)

    # --- one epoch -------------------------------------------------------------------------------
    def _loss(self, samples: Tensor, batch_samples: int, batch_atoms: int,
              weights: tuple[float, float]) -> Tensor:
        """This process's share of the loss of a global batch of ``batch_samples`` molecules and
        ``batch_atoms`` atoms (the squared errors of ``samples`` over the global counts)."""
        energies, forces, atoms = _predict(self.model, self.training, samples, self.dtype,
                                           self.context.device, create_graph=True)
        counts = self.training.n_atoms[samples].to(energies)
        energy_error = (energies - self.training.energy[samples].to(energies)) / counts
        force_error = forces - self.training.forces[atoms].to(forces)
        energy_term = self._squared(energy_error, self.huber_delta[0]).sum() / batch_samples
        force_term = self._squared(force_error, self.huber_delta[1]).sum() / (3.0 * batch_atoms)
        return weights[0] * energy_term + weights[1] * force_term

    def _squared(self, error: Tensor, delta: float) -> Tensor:
        """The squared errors, or their Huber version (``loss="huber"``), elementwise."""
        if self.loss == "mse":
            return error * error
        return 2.0 * torch.nn.functional.huber_loss(error, torch.zeros_like(error), reduction="none",
                                                    delta=delta)

    def _warm_up(self) -> None:
        """The learning rate of the next step during the warm-up (``warmup_steps``)."""
        steps = self.loop.extra["steps"]
        if steps < self.warmup_steps:
            for group in self.optimizer.param_groups:
                group["lr"] = self.learning_rate * (steps + 1) / self.warmup_steps

    def _train_epoch(self) -> float:
        context = self.context
        weights = self.loss_weights(self.loop.done)
        self._swap_in_training_weights()
        generator = torch.Generator().manual_seed(self.seed + 1 + self.loop.done)
        order = torch.randperm(len(self.training), generator=generator)
        total, count = 0.0, 0
        for start in range(0, len(order), self.batch_size):
            global_batch = order[start:start + self.batch_size]
            batch_atoms = int(self.training.n_atoms[global_batch].sum())
            shard = global_batch[context.rank::context.world_size]
            self.optimizer.zero_grad(set_to_none=False)
            if len(shard):
                loss = self._loss(shard, len(global_batch), batch_atoms, weights)
                loss.backward()
                value = float(loss.detach())
            else:
                value = 0.0
            if context.distributed:
                self._sum_gradients()
                mean = context.all_reduce_mean(torch.tensor(value, dtype=torch.float64))
                value = float(mean) * context.world_size
            if self.gradient_clip is not None:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.gradient_clip)
            self._warm_up()
            self.optimizer.step()
            self.loop.extra["steps"] += 1
            self._update_average()
            total += value * len(global_batch)
            count += len(global_batch)
            if self._past_deadline():
                break
        self._swap_in_average()
        return total / count

    # --- the moving average of the weights -------------------------------------------------------
    # Between epochs the model holds the average (validated, kept as the best, checkpointed) and
    # loop.extra["training_weights"] the weights the optimiser works on; during an epoch, the reverse.
    def _swap_in_training_weights(self) -> None:
        if self.ema_decay is None:
            return
        parameters = list(self.model.parameters())
        self._average = [parameter.detach().clone() for parameter in parameters]
        training = self.loop.extra.get("training_weights")
        if training is not None:
            with torch.no_grad():
                for parameter, value in zip(parameters, training, strict=True):
                    parameter.copy_(value)

    def _update_average(self) -> None:
        """``average <- d average + (1 - d) weights`` with ``d = min(ema_decay, (1 + n) / (10 + n))`` after
        ``n`` steps (the warm-up of torch-ema and MACE: early weights are soon forgotten)."""
        if self.ema_decay is None:
            return
        steps = self.loop.extra["steps"]
        decay = min(self.ema_decay, (1.0 + steps) / (10.0 + steps))
        with torch.no_grad():
            for average, parameter in zip(self._average, self.model.parameters(), strict=True):
                average.lerp_(parameter.detach(), 1.0 - decay)

    def _swap_in_average(self) -> None:
        if self.ema_decay is None:
            return
        parameters = list(self.model.parameters())
        self.loop.extra["training_weights"] = [parameter.detach().clone() for parameter in parameters]
        with torch.no_grad():
            for parameter, average in zip(parameters, self._average, strict=True):
                parameter.copy_(average)

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
    def fit(self, epochs: int, time_limit: float | None = None, clock: str = "wall") -> History:
        """Train for up to ``epochs`` epochs (resuming from ``checkpoint`` if it exists), on the shared
        :class:`common.training.TrainingLoop`; the model ends with the best validation weights (of
        the moving average with ``ema_decay``), and :attr:`test_metrics` holds their metrics on the
        test set (``None`` without one).

        A resumed run uses the train/validation/test split stored in the checkpoint.

        Args:
            epochs: total epochs (a resumed run counts those done).
            time_limit: optional budget of this call, s: training stops at the first batch
                boundary after it (that part epoch is validated and recorded like a whole one).
            clock: what ``time_limit`` counts: ``"wall"`` (elapsed time) or ``"cpu"`` (this
                process's CPU time over all its threads, ``time.process_time``: the same budget
                however loaded the machine is).

        Returns:
            the :class:`common.training.History`, one row per epoch: ``step`` (optimiser steps done),
            ``epoch`` (epochs done), ``loss`` (training), ``learning_rate`` and the validation metrics
            of :meth:`evaluate` (prefixed ``validation_``: ``validation_loss``, ...). Indexing it by
            an epoch number (``history[0]["train_loss"]``, the list of dicts it used to be) still
            works for one release, with a ``DeprecationWarning``.
        """
        if self.loop.resume_if_present():
            self._use_split(self.loop.split)
        if time_limit is not None:
            checks.positive(time_limit, "Trainer.fit: time_limit (s)")
        if clock not in CLOCKS:
            raise ConfigurationError(f"Trainer.fit: clock must be one of {sorted(CLOCKS)}, got {clock!r}")
        self._clock = CLOCKS[clock]
        self._deadline = None if time_limit is None else self._clock() + float(time_limit)
        try:
            self.loop.run(epochs, self._epoch,
                          stop=lambda: self._stale_epochs() >= self.patience or self._past_deadline())
        finally:
            self.loop.close()
        self.loop.restore_best()
        self.test_metrics = self.evaluate(self.test) if len(self.test) else None
        return self.history

    def _epoch(self) -> dict:
        """One epoch, then the validation metrics and the schedule step: the epoch's record."""
        energy_weight, force_weight = self.loss_weights(self.loop.done)
        train_loss = self._train_epoch()
        metrics = self.evaluate()
        self.scheduler.step(metrics["loss"])
        return {"step": self.loop.extra["steps"], "epoch": self.loop.done + 1, "loss": train_loss,
                "learning_rate": self.optimizer.param_groups[0]["lr"], "energy_weight": energy_weight,
                "force_weight": force_weight,
                **{f"validation_{key}": value for key, value in metrics.items()}}

    def _past_deadline(self) -> bool:
        """Whether :meth:`fit`'s time limit has passed (all processes agree: rank 0's clock decides)."""
        if self._deadline is None:
            return False
        past = self._clock() >= self._deadline
        if self.context.distributed:
            flag = torch.tensor(float(past and self.context.is_main), dtype=torch.float64)
            past = float(self.context.all_reduce_mean(flag)) > 0.0
        return past

    def _stale_epochs(self) -> int:
        """Epochs since the best validation loss."""
        losses = self.history.get("validation_loss", [])
        if not losses:
            return 0
        return len(losses) - 1 - int(np.argmin(losses))




def _check_arguments(model, data, batch_size, ema_decay, gradient_clip) -> None:
    if not isinstance(model, potentials_module.LearnedPotential):
        raise ArgumentTypeError(f"model must be a mindsponge LearnedPotential, got {type(model).__name__}")
    if not isinstance(data, TrainingData):
        raise ArgumentTypeError(f"data must be a TrainingData, got {type(data).__name__}")
    checks.positive_int(batch_size, "batch_size")
    if len(data) < 2:
        raise DatasetError(f"training needs at least 2 samples (one for validation), got {len(data)}")
    if ema_decay is not None and not 0.0 < ema_decay < 1.0:
        raise ConfigurationError(
            f"ema_decay must be in (0, 1) (or None: no moving average), got {ema_decay!r}")
    if gradient_clip is not None and not gradient_clip > 0:
        raise ConfigurationError(
            f"gradient_clip must be a positive gradient norm (or None), got {gradient_clip!r}")


def _check_loss(loss, huber_delta) -> tuple[str, tuple[float, float]]:
    if loss not in ("mse", "huber"):
        raise ConfigurationError(f"Trainer: loss must be 'mse' or 'huber', got {loss!r}")
    if len(huber_delta) != 2 or not min(huber_delta) > 0:
        raise ConfigurationError(f"Trainer: huber_delta must be two positive thresholds (per-atom energy "
                                 f"kJ/mol, force kJ/mol/nm), got {huber_delta!r}")
    return loss, (float(huber_delta[0]), float(huber_delta[1]))


def _check_schedule(schedule) -> dict[int, tuple[float, float]]:
    """``{first epoch (0-based): (energy_weight, force_weight)}``, checked."""
    checked = {}
    for start, weights in (schedule or {}).items():
        if isinstance(start, bool) or not isinstance(start, int) or start < 0 or len(weights) != 2 \
                or min(weights) < 0:
            raise ConfigurationError(
                f"weight_schedule maps epochs >= 0 to (energy_weight, force_weight) >= 0, got "
                             f"{start!r}: {weights!r}")
        checked[start] = (float(weights[0]), float(weights[1]))
    return checked
