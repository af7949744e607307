"""The training loop shared by ``common.pde.Trainer``, ``mindsponge.train.Trainer`` and
``mindelec.surrogate.fit``.

A trainer supplies what is specific to it, a function doing one *unit* of work (one optimiser
step, or one epoch) and returning the record of that unit (or ``None``); the :class:`TrainingLoop`
does the rest, the same way for all:

- counts the units done (:attr:`TrainingLoop.done`) and runs until a total or a ``stop()``;
- appends records to one :class:`~common.training.History` (same keys everywhere) and to the
  optional CSV log and TensorBoard event files;
- keeps the weights of the best record (by a ``best(record) -> score`` the trainer gives);
- writes an atomic checkpoint (:func:`common.io.save_checkpoint`) every ``checkpoint_every``
  units and at the end, with the history also written as CSV next to it
  (``<checkpoint>.history.csv``), and resumes from it: model, optimiser, schedule, counter,
  history, best weights, the stored train/validation split, the run's settings (checked) and
  whatever extra state the trainer keeps (sampler generators, counters);
- trains under the thread budget (:func:`common.threads.thread_budget`) and shows a progress
  bar (:func:`common.progress.bar`).

Example::

    loop = TrainingLoop(model, optimizer, scheduler, kind="my.trainer", checkpoint="run.chk",
                        split={"train_indices": train, "validation_indices": validation})
    loop.resume_if_present()
    def epoch():
        ...                                     # the optimiser steps of one epoch
        return {"step": steps, "epoch": loop.done + 1, "loss": loss, "validation_loss": ...}
    history = loop.run(epochs, epoch)
"""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Callable, Mapping

import torch

from common import progress as progress_bars
from common.checks import positive_int
from common.errors import ConfigurationError, DataError
from common.threads import default_threads, thread_budget
from common.training.history import History
from common.training.logs import open_logs

__all__ = ["TrainingLoop", "CHECKPOINT_FORMAT", "history_path"]

#: the ``format`` entry of every training checkpoint (checked when one is resumed)
CHECKPOINT_FORMAT = "common.training/1"


def history_path(checkpoint: str | os.PathLike) -> pathlib.Path:
    """Where the history of a run checkpointed at ``checkpoint`` is written: ``<checkpoint>.history.csv``."""
    checkpoint = pathlib.Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + ".history.csv")


def _scheduler_state(scheduler) -> dict:
    # a LambdaLR keeps the __dict__ of callable objects given as lambdas: not ours to store
    return {key: value for key, value in scheduler.state_dict().items() if key != "lr_lambdas"}


def _load_scheduler_state(scheduler, state: dict) -> None:
    if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        state = dict(state, lr_lambdas=[None] * len(scheduler.lr_lambdas))
    scheduler.load_state_dict(state)


class TrainingLoop:
    """Run units of training, record, keep the best weights, checkpoint and resume (module docstring).

    Args:
        model: the module trained (its ``state_dict`` is checkpointed; under data parallelism the
            unwrapped module).
        optimizer: its optimiser (checkpointed).
        scheduler: an optional learning-rate scheduler (checkpointed; the unit steps it).
        kind: the checkpoint kind (``"mindsponge.train"``), checked on resume.
        checkpoint: optional checkpoint path; ``None``: no checkpoints.
        checkpoint_every: units between checkpoints (one is also written at the end of :meth:`run`).
        unit: ``"step"`` or ``"epoch"`` (for the progress bar).
        description: the progress bar's label.
        progress: show a progress bar (on the main process).
        is_main: whether this process writes checkpoints and logs (rank 0 under ``torchrun``).
        threads: CPU threads of :meth:`run` (default :func:`common.threads.default_threads`).
        log: optional CSV file every record is appended to as it is taken.
        tensorboard: optional directory of TensorBoard event files (needs ``tensorboard``).
        best: optional ``best(record) -> score``; the weights of the record with the lowest score
            are kept (:attr:`best_state`, restored by :meth:`restore_best`).
        split: optional ``{name: indices}`` (e.g. ``train_indices``, ``validation_indices``) stored
            in the checkpoint; a resumed run uses the stored one (:attr:`split`).
        settings: optional ``{name: value}`` of the run; resuming with other values raises.
        model_state: ``model -> state`` stored as ``model`` (default ``model.state_dict()``);
            load_model_state: ``(model, state) -> None`` its inverse.

    Attributes:
        done: units done. history: the :class:`~common.training.History`.
        best_state, best_score, best_at: the best weights, their score and :attr:`done` then.
    """

    def __init__(self, model: torch.nn.Module, optimizer, scheduler=None, *, kind: str, checkpoint=None,
                 checkpoint_every: int = 1, unit: str = "epoch", description: str | None = None,
                 progress: bool = True, is_main: bool = True, threads: int | None = None, log=None,
                 tensorboard=None, best: Callable[[Mapping], float] | None = None,
                 split: Mapping[str, list] | None = None, settings: Mapping | None = None,
                 model_state: Callable | None = None, load_model_state: Callable | None = None):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.kind, self.checkpoint = kind, checkpoint
        self.checkpoint_every = positive_int(checkpoint_every, f"{kind}: checkpoint_every")
        self.unit, self.description = unit, description or kind
        self.progress, self.is_main = progress, is_main
        self.threads = default_threads() if threads is None else positive_int(threads, f"{kind}: threads")
        self.logs = open_logs(log, tensorboard) if is_main else []
        self.best = best
        self.split = {name: list(indices) for name, indices in (split or {}).items()}
        self.settings = dict(settings or {})
        self.model_state = model_state or (lambda module: module.state_dict())
        self.load_model_state = load_model_state or (lambda module, state: module.load_state_dict(state))
        self.done = 0
        self.history = History()
        self.best_state, self.best_score, self.best_at = None, math.inf, None
        self.extra: dict = {}
        self._postfix: dict = {}

    # ------------------------------------------------------------------ the loop
    def budget(self):
        """The thread budget of this run, as a context manager."""
        return thread_budget(self.threads)

    def run(self, total: int, unit: Callable[[], Mapping | None], stop: Callable[[], bool] | None = None,
            save_at_end: bool = True) -> History:
        """Run ``unit()`` until :attr:`done` reaches ``total`` or ``stop()`` (checked before each unit).

        Args:
            total: units to have done at the end (a resumed run continues from :attr:`done`).
            unit: does one unit of training; returns its record (a dict for :attr:`history`) or ``None``.
            stop: optional early stop, e.g. no better validation loss for a while.
            save_at_end: write a checkpoint when the loop ends (if there is a checkpoint path).

        Returns:
            :attr:`history`.
        """
        for log in self.logs:
            log.start(self.history.rows())
        with self.budget(), progress_bars.bar(total=total, initial=min(self.done, total),
                                              enabled=self.progress and self.is_main,
                                              desc=self.description, unit=self.unit, leave=False) as bar:
            while self.done < total and not (stop is not None and stop()):
                record = unit()
                self.done += 1
                if record is not None:
                    self.record(record)
                    self._track_best(record)
                if self._postfix:
                    bar.set_postfix(self._postfix, refresh=False)
                if self.done % self.checkpoint_every == 0:
                    self.save()
                bar.update(1)
        if save_at_end:
            self.save()
        return self.history

    def record(self, record: Mapping) -> None:
        """Append ``record`` to :attr:`history` and to the logs."""
        self.history.append(record)
        self._postfix = _postfix(record) or self._postfix
        for log in self.logs:
            log.write(dict(record))

    def _track_best(self, record: Mapping) -> None:
        if self.best is None:
            return
        score = self.best(record)
        if score < self.best_score:
            self.best_score, self.best_at = score, self.done
            self.best_state = {key: value.detach().clone() for key, value in self.model.state_dict().items()}

    def restore_best(self) -> None:
        """Load :attr:`best_state` into the model (if a record was ever the best)."""
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)

    def close(self) -> None:
        """Close the logs (TensorBoard event files)."""
        for log in self.logs:
            log.close()

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """Everything needed to continue: model, optimiser, schedule, counter, history, best, split, extra."""
        return {
            "format": CHECKPOINT_FORMAT,
            "model": self.model_state(self.model),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else _scheduler_state(self.scheduler),
            "done": self.done,
            "history": self.history.state_dict(),
            "best_state": self.best_state,
            "best_score": self.best_score,
            "best_at": self.best_at,
            "split": self.split,
            "settings": self.settings,
            "extra": self.extra,
        }

    def save(self, path: str | os.PathLike | None = None) -> None:
        """Write :meth:`state` atomically to ``path`` (default the checkpoint; nothing without one),
        and the history as CSV next to it (:func:`history_path`). Only on the main process."""
        from common.io import save_checkpoint

        path = self.checkpoint if path is None else path
        if path is None or not self.is_main:
            return
        save_checkpoint(path, self.state(), kind=self.kind)
        self.history.write_csv(history_path(path))

    def resume_if_present(self) -> bool:
        """Resume from the checkpoint if the file exists; whether it did."""
        if self.checkpoint is None or not os.path.isfile(self.checkpoint):
            return False
        self.resume(self.checkpoint)
        return True

    def resume(self, path: str | os.PathLike, map_location=None) -> None:
        """Load a checkpoint written by :meth:`save` for the same model and settings, and continue from it.

        Raises:
            DataError: a checkpoint of another kind or format (named).
            ConfigurationError: one written with other settings, or a split of another sample count.
        """
        from common.io import load_checkpoint

        state = load_checkpoint(path, map_location=map_location, kind=self.kind)
        found = state.get("format") if isinstance(state, dict) else None
        if found != CHECKPOINT_FORMAT:
            raise DataError(
                f"checkpoint {os.fspath(path)!r} is not a {CHECKPOINT_FORMAT!r} checkpoint (found format "
                f"{found!r}); pass another checkpoint path, or start over without it"
            )
        self._check_settings(path, state["settings"])
        self._check_split(path, state["split"])
        self.load_model_state(self.model, state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            _load_scheduler_state(self.scheduler, state["scheduler"])
        self.done, self.history = state["done"], History.from_state_dict(state["history"])
        self.best_state, self.best_score = state["best_state"], state["best_score"]
        self.best_at = state["best_at"]
        self.split, self.extra = state["split"], state["extra"]

    def _check_settings(self, path, stored: Mapping) -> None:
        for key, value in self.settings.items():
            if stored.get(key) != value:
                raise ConfigurationError(
                    f"checkpoint {os.fspath(path)!r} was written with {key} = {stored.get(key)!r}, "
                    f"this call has {value!r}; use the same settings to resume, or resume=False to start over"
                )

    def _check_split(self, path, stored: Mapping) -> None:
        count = sum(len(indices) for indices in self.split.values())
        indices = [index for part in stored.values() for index in part]
        if self.split and sorted(indices) != list(range(count)):
            raise ConfigurationError(
                f"checkpoint {os.fspath(path)!r} splits {len(indices)} samples; this call has {count}"
            )


def _postfix(record: Mapping) -> dict:
    return {key: f"{record[key]:.4g}" for key in ("loss", "validation_loss") if key in record
            and isinstance(record[key], float)}


