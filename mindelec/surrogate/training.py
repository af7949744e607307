"""The training of every surrogate: :func:`fit` (the shared :class:`common.training.TrainingLoop`
with a mean-squared-error epoch), and the error measures :func:`relative_error` and :func:`db`."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import torch
from torch import nn

from common.deprecation import renamed_arguments
from common.errors import ConfigurationError, NonFiniteResultError
from common.training import History, TrainingLoop

__all__ = ["fit", "relative_error", "db"]


def _split(count: int, validation_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not 0 <= validation_fraction < 1:
        raise ConfigurationError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    validation = round(validation_fraction * count)
    if count - validation < 1:
        raise ConfigurationError(f"fit: {count} samples leave none for training")
    return order[validation:], order[:validation]


class _Epochs:
    """One epoch of minibatch training on ``inputs``/``targets``: the unit of :func:`fit`'s loop."""

    def __init__(self, loop: TrainingLoop, network, inputs, targets, loss, batch_size, seed, context):
        self.loop, self.network, self.inputs, self.targets = loop, network, inputs, targets
        self.loss, self.batch_size, self.context = loss, batch_size, context
        self.model, self.optimizer, self.schedule = loop.model, loop.optimizer, loop.scheduler
        self.train_index = torch.as_tensor(loop.split["train_indices"], dtype=torch.long)
        self.validation_index = torch.as_tensor(loop.split["validation_indices"], dtype=torch.long)
        # the sampler only orders the training indices (a DistributedSampler shards them); batches are
        # sliced from the tensors directly
        self.generator = None
        if context is None:
            self.generator = torch.Generator().manual_seed(seed)
            if loop.extra.get("sampler_state") is not None:
                self.generator.set_state(loop.extra["sampler_state"])
            self.sampler = torch.utils.data.RandomSampler(self.train_index, generator=self.generator)
        else:
            self.sampler = context.sampler(self.train_index, shuffle=True, seed=seed)

    def __call__(self) -> dict:
        epoch = self.loop.done
        if self.context is not None:
            self.context.set_epoch(self.sampler, epoch)
        train_loss = self._train()
        validation_loss = self._validate()
        if self.context is not None:
            train_loss = float(self.context.all_reduce_mean(torch.tensor(train_loss, dtype=torch.float64)))
        record = {"step": self.loop.extra["steps"], "epoch": epoch + 1, "loss": train_loss,
                  "validation_loss": validation_loss, "learning_rate": self.schedule.get_last_lr()[0]}
        self.schedule.step()
        self.loop.extra["sampler_state"] = None if self.generator is None else self.generator.get_state()
        return record

    def _train(self) -> float:
        self.model.train()
        total, count = 0.0, 0
        order = self.train_index[torch.as_tensor(list(self.sampler), dtype=torch.long)]
        for batch in order.split(self.batch_size):
            batch_inputs, batch_targets = self.inputs[batch], self.targets[batch]
            self.optimizer.zero_grad()
            value = self.loss(self.network(batch_inputs), batch_targets)
            value.backward()
            self.optimizer.step()
            total, count = total + float(value.detach()) * len(batch_inputs), count + len(batch_inputs)
            self.loop.extra["steps"] += 1
        return total / count

    def _validate(self) -> float:
        if not len(self.validation_index):
            return math.nan
        self.model.eval()
        with torch.no_grad():
            prediction = self.model(self.inputs[self.validation_index])
            return float(self.loss(prediction, self.targets[self.validation_index]))

    def score(self, record) -> float:
        """What the best weights minimise: the validation loss (the training loss without validation)."""
        return record["validation_loss"] if len(self.validation_index) else record["loss"]


def _threads(threads, context) -> int | None:
    """The thread budget: as given, else the ``torchrun`` context's share of the cores, else the default."""
    if threads is None and context is not None:
        return context.threads
    return threads


def _check_arguments(inputs, targets, epochs) -> None:
    if len(inputs) != len(targets):
        raise ConfigurationError(f"fit: inputs hold {len(inputs)} samples but targets {len(targets)}")
    if not (isinstance(epochs, int) and epochs >= 1):
        raise ConfigurationError(f"fit: epochs must be a positive integer, got {epochs!r}")


@renamed_arguments(lr="learning_rate", lr_decay="learning_rate_decay")
def fit(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    epochs: int = 1000,
    learning_rate: float = 3e-3,
    batch_size: int = 64,
    validation_fraction: float = 0.2,
    seed: int = 0,
    learning_rate_decay: float = 0.01,
    weight_decay: float = 0.0,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 100,
    progress: bool = True,
    context=None,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    resume: bool = True,
    threads: int | None = None,
    log: str | os.PathLike | None = None,
    tensorboard: str | os.PathLike | None = None,
) -> History:
    """Train ``model`` so that ``model(inputs) ~ targets`` (mean squared error by default).

    Adam with a cosine learning-rate schedule from ``learning_rate`` to ``learning_rate *
    learning_rate_decay``; the samples are split
    once (seeded) into training and validation sets; at the end the model holds the weights of the
    epoch with the lowest validation loss (the training loss without a validation set). The loop is
    :class:`common.training.TrainingLoop`.

    Resuming: when ``checkpoint`` names an existing file (and ``resume`` is true), training continues
    from it: the model, optimiser, schedule, best weights, history, the stored train/validation split
    and the shuffling generator's state are restored, so a run killed at any moment and started again
    with the same call ends with the same weights and history, bit for bit, as one that was never
    interrupted (epochs after the last checkpoint are redone). A checkpoint of a finished run returns
    at once.

    Args:
        model: maps ``(B, ...)`` inputs to ``(B, ...)`` outputs shaped like ``targets``.
        inputs, targets: ``(N, ...)`` tensors, already on the model's device and dtype.
        epochs: passes over the training set.
        learning_rate, learning_rate_decay, weight_decay: Adam settings (see above; ``lr`` and
            ``lr_decay``: the deprecated names).
        batch_size: samples per step (per process under ``torchrun``).
        validation_fraction: share of the samples held out (``0``: none).
        seed: the split and shuffling seed.
        checkpoint: optional file; an atomic checkpoint (kind ``"mindelec.surrogate.fit"``, format
            :data:`common.training.CHECKPOINT_FORMAT`) is written every ``checkpoint_every`` epochs and
            at the end (by the main process only), with the history as CSV next to it
            (``<checkpoint>.history.csv``).
        progress: show a progress bar (main process only).
        context: a ``common.parallel.DistributedContext`` for data-parallel training (each process sees
            a shard of the training set; gradients and training losses are averaged over processes, every
            process evaluates the whole validation set); ``None``: alone.
        loss: ``loss(prediction, target) -> 0-d tensor``; default mean squared error.
        resume: continue from an existing ``checkpoint`` (default); ``False`` starts at epoch 0 and
            overwrites it.
        threads: CPU threads (default :func:`common.threads.default_threads`).
        log, tensorboard: optional CSV log file and TensorBoard directory (see ``TrainingLoop``).

    Returns:
        a :class:`common.training.History`: ``step`` (optimiser steps done), ``epoch`` (epochs done,
        from 1), ``loss`` (training), ``validation_loss`` (``nan`` without validation),
        ``learning_rate`` (lists, one entry per epoch), ``best_epoch`` (the ``epoch`` of the kept
        weights), ``train_indices`` and ``validation_indices`` (lists). The old keys ``train_loss``
        and ``lr`` still read, with a ``DeprecationWarning``.

    Raises:
        ValueError: if inputs and targets have different sample counts or there is nothing to train on.
        DataError: (a ValueError) if the checkpoint to resume is not a :func:`fit` checkpoint (naming the
            kind expected and found).
        ConfigurationError: (a ValueError) if it was written with other settings (named) or sample count.
        FloatingPointError: if no epoch gave a finite loss.
    """
    _check_arguments(inputs, targets, epochs)
    train_index, validation_index = _split(len(inputs), validation_fraction, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    decay = learning_rate_decay
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda epoch: decay + (1 - decay) * 0.5 * (1 + math.cos(math.pi * epoch / epochs))
    )
    # the keys checkpoints were written with (a resume compares them)
    settings = {"epochs": epochs, "lr": learning_rate, "batch_size": batch_size,
                "validation_fraction": validation_fraction, "seed": seed,
                "lr_decay": learning_rate_decay, "weight_decay": weight_decay}
    loop = TrainingLoop(
        model, optimizer, schedule, kind="mindelec.surrogate.fit", checkpoint=checkpoint,
        checkpoint_every=checkpoint_every, description=f"fit {type(model).__name__}", progress=progress,
        is_main=context is None or context.is_main, threads=_threads(threads, context), log=log,
        tensorboard=tensorboard,
        split={"train_indices": train_index.tolist(), "validation_indices": validation_index.tolist()},
        settings=settings,
    )
    loop.extra["steps"] = 0
    if resume:
        loop.resume_if_present()
    network = model if context is None else context.wrap(model)
    epoch = _Epochs(loop, network, inputs, targets, loss or nn.functional.mse_loss, batch_size, seed, context)
    loop.best = epoch.score
    try:
        history = loop.run(epochs, epoch)
    finally:
        loop.close()
    if loop.best_state is None:
        raise NonFiniteResultError(
            f"fit: every epoch's loss was nan or inf (last {history['loss'][-1]}); "
            "lower lr or check the data for nan"
        )
    history.update(best_epoch=loop.best_at, **loop.split)
    loop.restore_best()
    model.eval()
    return history


def relative_error(prediction: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Per-sample relative L2 error ``||prediction - reference|| / ||reference||``: ``(B, ...) -> (B,)``."""
    if prediction.shape != reference.shape:
        raise ConfigurationError(
            f"relative_error: prediction {tuple(prediction.shape)} and reference "
            f"{tuple(reference.shape)} differ in shape"
        )
    difference = (prediction - reference).reshape(len(reference), -1)
    return torch.linalg.vector_norm(difference, dim=1) / torch.linalg.vector_norm(
        reference.reshape(len(reference), -1), dim=1
    ).clamp(min=torch.finfo(reference.real.dtype).tiny)


def db(s: torch.Tensor) -> torch.Tensor:
    """``20 log10 |s|`` (dB), floored at -240 dB; same shape as ``s``."""
    return 20 * torch.log10(s.abs().clamp(min=1e-12))
