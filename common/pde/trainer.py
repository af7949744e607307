"""The :class:`Trainer` of a physics-informed :class:`~common.pde.Problem`: Adam, then L-BFGS, on
the shared :class:`common.training.TrainingLoop` (see :mod:`common.pde`)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping

import torch
from torch import nn

from common import progress as progress_bars
from common.checks import non_negative_int, positive_int
from common.deprecation import deprecated_method, renamed_arguments
from common.errors import ArgumentTypeError, ConfigurationError
from common.geometry.samplers import check_count
from common.pde.problem import Problem
from common.training import History, TrainingLoop

__all__ = ["Trainer"]


def _schedule_factor(schedule, steps: int, decay: float) -> Callable[[int], float]:
    if callable(schedule):
        return schedule
    if schedule in (None, "constant"):
        return lambda step: 1.0
    if schedule == "exponential":
        return lambda step: decay ** (min(step, steps) / max(steps, 1))
    if schedule == "cosine":
        return lambda step: (
            decay + (1 - decay) * 0.5 * (1 + math.cos(math.pi * min(step, steps) / max(steps, 1)))
        )
    raise ConfigurationError(
        f"Trainer: learning_rate_schedule must be None, 'constant', 'exponential', 'cosine' or a callable "
        f"step -> factor, got {schedule!r}"
    )


def _check_arguments(problem, model, balance, steps, lbfgs_steps, resample_every, *intervals) -> list:
    """The model's parameters, after checking the :class:`Trainer` arguments (naming the bad one)."""
    if not isinstance(problem, Problem):
        raise ArgumentTypeError(
            f"Trainer: problem must be a common.pde.Problem, got {type(problem).__name__}")
    parameters = list(model.parameters())
    if not parameters:
        raise ConfigurationError("Trainer: the model has no parameters to train")
    if balance not in (None, "gradnorm"):
        raise ConfigurationError(f"Trainer: balance must be None or 'gradnorm', got {balance!r}")
    for name, value in (("steps", steps), ("lbfgs_steps", lbfgs_steps), ("resample_every", resample_every)):
        non_negative_int(value, f"Trainer: {name}")
    names = ("balance_every", "checkpoint_every", "log_every", "monitor_every")
    for name, value in zip(names, intervals, strict=True):
        check_count(value, f"Trainer: {name}")
    return parameters


def _extra(name: str, doc: str) -> property:
    """A :class:`Trainer` attribute kept in its loop's ``extra`` state (so checkpoints hold it)."""
    return property(lambda self: self.loop.extra[name],
                    lambda self, value: self.loop.extra.__setitem__(name, value), doc=doc)


class Trainer:
    """Fit a model to a :class:`Problem`: Adam, then optionally L-BFGS.

    Every step draws nothing new unless the points are due for resampling; evaluates each
    constraint's mean square residual; and minimises ``sum_i weight_i * balance_i * loss_i``.

    Args:
        problem: the :class:`Problem`.
        model: a pointwise ``nn.Module`` mapping ``(B, len(problem.inputs))`` to
            ``(B, len(problem.outputs))``; its parameters fix dtype and device.
        steps: Adam steps of :meth:`fit`.
        learning_rate: Adam learning rate (``lr``: its deprecated name).
        learning_rate_schedule: ``None``/``"constant"``, ``"exponential"`` (factor
            ``learning_rate_decay`` reached at ``steps``), ``"cosine"`` (from 1 to
            ``learning_rate_decay``) or a callable ``step -> factor`` (``lr_schedule``: its deprecated name).
        learning_rate_decay: final learning-rate factor of the built-in schedules (``lr_decay``: its
            deprecated name).
        lbfgs_steps: L-BFGS iterations after Adam (0: none), on the points current at the end of Adam.
        resample_every: draw new collocation points every this many steps (0: never).
        balance: adaptive weighting: ``None`` (fixed weights) or ``"gradnorm"`` (gradient-norm
            balancing, Wang, Teng & Perdikaris 2021: ``balance_i = sum_j |grad L_j| / |grad L_i|``,
            smoothed by ``balance_momentum``, recomputed every ``balance_every`` steps).
        balance_every, balance_momentum: see ``balance``.
        checkpoint: optional file path; an atomic checkpoint (:func:`common.io.save_checkpoint`)
            is written every ``checkpoint_every`` steps and at the end, with the history as CSV next
            to it (``<checkpoint>.history.csv``); :meth:`resume` restarts from it.
        checkpoint_every: interval in steps.
        log_every: record the losses in :attr:`history` every this many steps.
        monitor: optional ``monitor(model) -> {name: float}`` (e.g. errors against a reference),
            called every ``monitor_every`` steps; its values go to :attr:`history`.
        monitor_every: interval in steps.
        seed: seed of the point sampling.
        progress: show a tqdm progress bar.
        threads: CPU threads :meth:`fit` uses (torch and the OpenMP/BLAS pools, restored
            afterwards; :func:`common.threads.thread_budget`); default
            ``common.threads.default_threads()``: the cores divided by the processes ``torchrun``
            started on this machine, at most ``OMP_NUM_THREADS`` if set.
        log: optional CSV file every record is appended to as training runs.
        tensorboard: optional TensorBoard log directory (needs the ``tensorboard`` package).

    The steps run on the shared :class:`common.training.TrainingLoop` (:attr:`loop`).

    Attributes:
        history: a :class:`common.training.History` (a dict of lists): ``step``, ``evaluations``
            (cumulative collocation-point model evaluations), ``loss``, ``learning_rate``,
            ``loss/<name>``, ``balance/<name>`` and monitor values (``monitor/<name>``, with
            ``monitor_step``). ``history["lr"]`` still reads ``learning_rate`` for one release, with
            a ``DeprecationWarning``.
        step: Adam steps done. evaluations: point evaluations done (sum of batch sizes per step).
    """

    @renamed_arguments(lr="learning_rate", lr_schedule="learning_rate_schedule",
                       lr_decay="learning_rate_decay")
    def __init__(
        self,
        problem: Problem,
        model: nn.Module,
        steps: int = 1000,
        learning_rate: float = 1e-3,
        learning_rate_schedule=None,
        learning_rate_decay: float = 0.1,
        lbfgs_steps: int = 0,
        resample_every: int = 0,
        balance: str | None = None,
        balance_every: int = 100,
        balance_momentum: float = 0.9,
        checkpoint: str | os.PathLike | None = None,
        checkpoint_every: int = 1000,
        log_every: int = 10,
        monitor: Callable[[nn.Module], Mapping[str, float]] | None = None,
        monitor_every: int = 100,
        seed: int = 0,
        progress: bool = True,
        threads: int | None = None,
        log: str | os.PathLike | None = None,
        tensorboard: str | os.PathLike | None = None,
    ):
        parameters = _check_arguments(problem, model, balance, steps, lbfgs_steps, resample_every,
                                      balance_every, checkpoint_every, log_every, monitor_every)
        self.dtype, self.device = parameters[0].dtype, parameters[0].device
        problem.check_model(model, self.dtype, self.device)
        self.problem, self.model = problem, model
        self.steps, self.lbfgs_steps, self.resample_every = steps, lbfgs_steps, resample_every
        self.balance, self.balance_every, self.balance_momentum = (
            balance,
            balance_every,
            float(balance_momentum),
        )
        self.checkpoint, self.checkpoint_every = checkpoint, checkpoint_every
        self.log_every, self.monitor, self.monitor_every = log_every, monitor, monitor_every
        self.seed, self.progress = int(seed), progress
        self.optimizer = torch.optim.Adam(parameters, lr=learning_rate)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _schedule_factor(learning_rate_schedule, steps, learning_rate_decay)
        )
        self.loop = TrainingLoop(
            model, self.optimizer, self.scheduler, kind="common.pde.Trainer", checkpoint=checkpoint,
            checkpoint_every=checkpoint_every, unit="step", description="Adam", progress=progress,
            threads=None if threads is None else positive_int(threads, "Trainer: threads"), log=log,
            tensorboard=tensorboard,
        )
        self.loop.extra.update(evaluations=0, resamplings=0, lbfgs_done=0,
                               balance_weights={name: 1.0 for name in problem.constraints})
        self.batches = problem.sample(self.seed, self.dtype, self.device)
        self._stopped = False

    # the loop's counter and extra state, under the names this class always had
    step = property(lambda self: self.loop.done, lambda self, value: setattr(self.loop, "done", value),
                    doc="Adam steps done.")
    evaluations = _extra("evaluations", "Collocation-point model evaluations done.")
    resamplings = _extra("resamplings", "Times the points were drawn anew.")
    lbfgs_done = _extra("lbfgs_done", "L-BFGS function evaluations done.")
    balance_weights = _extra("balance_weights", "The adaptive weight of every constraint.")
    history = property(lambda self: self.loop.history, doc="The :class:`common.training.History`.")
    threads = property(lambda self: self.loop.threads, doc="CPU threads of :meth:`fit`.")

    # ------------------------------------------------------------------ pieces
    @property
    def points_per_step(self) -> int:
        """Collocation points evaluated per step (sum over constraints)."""
        return sum(len(batch["points"]) for batch in self.batches.values())

    def _weighted(self, losses: Mapping[str, torch.Tensor]) -> torch.Tensor:
        constraints = self.problem.constraints
        return sum(
            constraints[name].weight * self.balance_weights[name] * loss for name, loss in losses.items()
        )

    def _update_balance(self, losses: Mapping[str, torch.Tensor]) -> None:
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        norms = {}
        for name, loss in losses.items():
            if self.problem.constraints[name].weight == 0:
                continue
            gradients = torch.autograd.grad(loss, parameters, retain_graph=True, allow_unused=True)
            squares = [g.pow(2).sum() for g in gradients if g is not None]
            norms[name] = float(torch.sqrt(sum(squares))) if squares else 0.0
        total = sum(norms.values())
        for name, norm in norms.items():
            if norm > 0:
                target = total / norm
                momentum = self.balance_momentum
                self.balance_weights[name] = momentum * self.balance_weights[name] + (1 - momentum) * target

    def _record(self, losses: Mapping[str, torch.Tensor], total: torch.Tensor, adam_steps: int) -> None:
        entries = {
            "step": adam_steps + self.lbfgs_done,
            "evaluations": self.evaluations,
            "loss": float(total.detach()),
            "learning_rate": self.optimizer.param_groups[0]["lr"],
        }
        for name, loss in losses.items():
            entries[f"loss/{name}"] = float(loss.detach())
            entries[f"balance/{name}"] = self.balance_weights[name]
        self.loop.record(entries)

    def _run_monitor(self, adam_steps: int) -> None:
        if self.monitor is None:
            return
        values = self.monitor(self.model)
        self.loop.record({"monitor_step": adam_steps + self.lbfgs_done,
                          "monitor_evaluations": self.evaluations,
                          **{f"monitor/{key}": float(value) for key, value in values.items()}})

    # ------------------------------------------------------------------ training
    def fit(
        self,
        steps: int | None = None,
        lbfgs_steps: int | None = None,
        stop: Callable[[Mapping[str, list]], bool] | None = None,
    ) -> History:
        """Run the remaining Adam steps (up to ``steps`` in total), then ``lbfgs_steps`` of L-BFGS.

        Args:
            steps: total Adam steps to reach (default: the constructor's ``steps``); a resumed
                trainer continues from :attr:`step`.
            lbfgs_steps: L-BFGS iterations (default: the constructor's).
            stop: optional ``stop(history) -> bool`` checked after every monitor call; training ends
                early when it returns True (e.g. a target error reached).

        Returns:
            :attr:`history`.
        """
        steps = self.steps if steps is None else steps
        lbfgs_steps = self.lbfgs_steps if lbfgs_steps is None else lbfgs_steps
        self.model.train()
        self._stopped = False
        with self.loop.budget():  # explicit: see the ``threads`` argument
            self.loop.run(steps, lambda: self._adam_step(steps, stop), stop=lambda: self._stopped,
                          save_at_end=False)
            if lbfgs_steps and not self._stopped:
                self._lbfgs(lbfgs_steps)
        self.loop.save()
        self.loop.close()
        return self.history

    train = deprecated_method("fit")  # one training verb across common, mindsponge and mindelec

    def _adam_step(self, steps: int, stop) -> None:
        """One Adam step (drawing new points first when due), then the records due after it."""
        if self.resample_every and self.step and self.step % self.resample_every == 0:
            self.resamplings += 1
            self.batches = self.problem.sample(self.seed + self.resamplings, self.dtype, self.device)
        losses = self.problem.losses(self.model, self.batches)
        if self.balance and self.step % self.balance_every == 0:
            self._update_balance(losses)
        total = self._weighted(losses)
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.evaluations += self.points_per_step
        done = self.step + 1  # the loop counts the step when this returns
        if done % self.log_every == 0 or done == steps:
            self._record(losses, total, done)
        if done % self.monitor_every == 0:
            self._run_monitor(done)
            self._stopped = stop is not None and stop(self.history)

    def _lbfgs(self, iterations: int) -> None:
        optimizer = torch.optim.LBFGS(
            self.model.parameters(),
            lr=1.0,
            max_iter=iterations,
            history_size=50,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-12,
            tolerance_change=1e-15,
        )
        bar = progress_bars.bar(total=iterations, enabled=self.progress, desc="L-BFGS", leave=False)

        def closure():
            optimizer.zero_grad(set_to_none=True)
            losses = self.problem.losses(self.model, self.batches)
            total = self._weighted(losses)
            total.backward()
            self.evaluations += self.points_per_step
            self.lbfgs_done += 1
            if self.lbfgs_done % self.log_every == 0:
                self._record(losses, total, self.step)
            bar.update(1)
            bar.set_postfix(loss=f"{float(total.detach()):.3e}")
            return total

        optimizer.step(closure)
        bar.close()
        losses = self.problem.losses(self.model, self.batches)
        self._record(losses, self._weighted(losses), self.step)
        self._run_monitor(self.step)

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """Everything needed to continue training (:meth:`common.training.TrainingLoop.state`): model,
        optimiser, schedule, steps, history, and the counters and balance weights (``extra``)."""
        return self.loop.state()

    def save(self, path: str | os.PathLike) -> None:
        """Write :meth:`state` atomically to ``path`` (:func:`common.io.save_checkpoint`), and the
        history as CSV next to it."""
        self.loop.save(path)

    def resume(self, path: str | os.PathLike) -> None:
        """Load a checkpoint written by :meth:`save` (same problem and model layout) and continue from it."""
        self.loop.resume(path, map_location=self.device)
        self.batches = self.problem.sample(self.seed + self.resamplings, self.dtype, self.device)
