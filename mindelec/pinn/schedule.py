"""The training schedule of the time-domain PINN, in one call: growing time windows, then the whole interval.

:class:`Schedule` says how many Adam steps go to each phase (windows ``[0, k T / n]``, ``k = 1 .. n - 1``,
then ``[0, T]``) and the learning rate of every step: a linear warm-up, then a cosine decay over the *whole*
run (not restarted per window). :func:`train_schedule` runs it with one Adam whose state (moments and step
counts) carries over from phase to phase, so one invocation does what a run plus hand-tuned continuations
did. :func:`fine_tune` is the same schedule on a pre-trained model, with its early layers optionally frozen
(incremental training: a parametric model pre-trained over a permittivity range, fine-tuned to one value).
:func:`reference_monitor` turns an :class:`~mindelec.pinn.FDTDReference` into the trainer's monitor.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence

from torch import nn

from common import checks, pde
from common.deprecation import renamed_arguments, warn_deprecated
from common.errors import ConfigurationError
from mindelec.pinn.potential import PotentialTE
from mindelec.pinn.problems import point_source_problem
from mindelec.pinn.reference import FDTDReference
from mindelec.pinn.sources import PointSourceSetup, Scales

__all__ = ["Schedule", "fine_tune", "freeze_early_layers", "reference_monitor", "train_schedule"]


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Steps per phase and learning rate per step of :func:`train_schedule`.

    Attributes:
        steps: Adam steps in total.
        learning_rate: peak learning rate (``lr``: its deprecated name).
        windows: phases; the first ``windows - 1`` train on ``[0, k T / windows]`` and share
            ``(1 - whole_fraction) * steps`` equally, the last trains on ``[0, T]`` (1: no windows).
        whole_fraction: fraction of the steps spent on the whole interval, in (0, 1].
        final_factor: learning rate at the last step / ``learning_rate`` (cosine decay to there).
        warmup: steps of linear warm-up to ``learning_rate`` (0: none), e.g. for fine-tuning.
    """

    steps: int = 36000
    learning_rate: float = 2e-3
    windows: int = 6
    whole_fraction: float = 0.5
    final_factor: float = 0.01
    warmup: int = 0

    def __post_init__(self):
        for name in ("steps", "windows"):
            checks.positive_int(getattr(self, name), f"Schedule: {name}")
        for name in ("learning_rate", "whole_fraction", "final_factor"):
            checks.positive(getattr(self, name), f"Schedule: {name}")
        if not 0 < self.whole_fraction <= 1 or (self.windows == 1 and self.whole_fraction != 1):
            raise ConfigurationError(
                f"Schedule: whole_fraction must be in (0, 1] (1 with windows=1), got {self.whole_fraction!r} "
                f"with windows={self.windows}"
            )
        if not (self.learning_rate > 0 and 0 < self.final_factor <= 1):
            raise ConfigurationError(
                "Schedule: learning_rate must be positive and final_factor in (0, 1], got "
                f"{self.learning_rate!r}, {self.final_factor!r}"
            )
        if (
            isinstance(self.warmup, bool)
            or not isinstance(self.warmup, int)
            or not 0 <= self.warmup < self.steps
        ):
            raise ConfigurationError(
                f"Schedule: warmup must be an integer in [0, steps), got {self.warmup!r}")

    def phases(self) -> list[tuple[float, int]]:
        """``(fraction of T, steps)`` of every phase, in order; the steps add up to :attr:`steps`."""
        if self.windows == 1:
            return [(1.0, self.steps)]
        early = round(self.steps * (1 - self.whole_fraction)) // (self.windows - 1)
        parts = [(k / self.windows, early) for k in range(1, self.windows)]
        return [*parts, (1.0, self.steps - early * (self.windows - 1))]

    def factor(self, step: int) -> float:
        """Learning rate of (0-based) ``step`` over :attr:`learning_rate`: warm-up, then cosine to
        ``final_factor``."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        progress = min(step - self.warmup, self.steps) / max(self.steps - self.warmup, 1)
        return self.final_factor + (1 - self.final_factor) * 0.5 * (1 + math.cos(math.pi * progress))

    def trainer(self, problem: pde.Problem, model: nn.Module, **options) -> pde.Trainer:
        """A one-phase :class:`common.pde.Trainer` of this schedule: :attr:`steps` Adam steps at
        ``learning_rate * factor(step)``, points redrawn every step; ``options``: further trainer
        arguments."""
        return pde.Trainer(
            problem, model, steps=self.steps, learning_rate=self.learning_rate,
            learning_rate_schedule=self.factor, resample_every=1, **options
        )

    @property
    def lr(self) -> float:
        """Deprecated: :attr:`learning_rate`."""
        warn_deprecated("Schedule.lr", "Schedule.learning_rate")
        return self.learning_rate


Schedule.__init__ = renamed_arguments(lr="learning_rate")(Schedule.__init__)


def field_model(model: nn.Module) -> nn.Module:
    """The ``(B, inputs) -> (B, 3)`` Ex, Ey, Hz view of a model of either formulation."""
    return model.field_model() if isinstance(model, PotentialTE) else model


def reference_monitor(
    reference: FDTDReference, scales: Scales, parameters: Sequence[float] = (), components=("Ex", "Ey", "Hz")
) -> Callable[[nn.Module], dict[str, float]]:
    """``monitor(model) -> {component: relative L2 error, "max": the largest}`` against ``reference``.

    Args:
        reference: FDTD samples (:func:`~mindelec.pinn.fdtd_reference`).
        scales: the problem's units; parameters: values of the parameter columns (e.g. the permittivity).
    """

    def monitor(model):
        errors = reference.relative_errors(field_model(model), scales, components, parameters)
        return {**errors, "max": max(errors.values())}

    return monitor


def _carry_over(trainer: pde.Trainer, previous: pde.Trainer | None, learning_rate: float) -> None:
    """Give ``trainer`` the Adam state of ``previous`` (same parameters) at ``learning_rate``."""
    if previous is not None:
        trainer.optimizer.load_state_dict(previous.optimizer.state_dict())
    for group in trainer.optimizer.param_groups:
        group["lr"] = learning_rate


def _append(history: dict, trainer: pde.Trainer, offset: int, evaluations: int) -> None:
    """Append a phase's monitor records to the run's ``history`` (steps and evaluations made cumulative)."""
    for key, values in trainer.history.items():
        if key == "monitor_step":
            values = [offset + step for step in values]
        elif key == "monitor_evaluations":
            values = [evaluations + count for count in values]
        elif not key.startswith("monitor/"):
            continue
        history.setdefault(key, []).extend(values)


def train_schedule(
    setup: PointSourceSetup,
    model: nn.Module,
    schedule: Schedule,
    problem_options: Mapping | None = None,
    monitor: Callable[[nn.Module], Mapping[str, float]] | None = None,
    monitors: int = 20,
    seed: int = 0,
    progress: bool = True,
    **trainer_options,
) -> dict:
    """Train ``model`` on ``setup``'s point-source problem by ``schedule`` (module docstring), in one call.

    Every phase is a :class:`common.pde.Trainer` on :func:`point_source_problem` of the phase's interval
    (``problem_options`` passed on), resampling every step, continuing the previous phase's Adam state and the
    run's learning-rate curve :meth:`Schedule.factor`.

    Args:
        setup: the SI problem (a parametric one for pre-training).
        model: from :func:`~mindelec.pinn.default_model` on the whole problem (trained in place).
        schedule: the :class:`Schedule`.
        problem_options: keyword arguments of :func:`point_source_problem` (points, formulation, ...).
        monitor: optional ``monitor(model) -> {name: float}`` (:func:`reference_monitor`), called about
            ``monitors`` times over the run and at the end of every phase.
        seed: point-sampling seed of the first phase (phase ``i`` uses ``seed + 1000 i``).
        progress: progress bars.
        trainer_options: further :class:`common.pde.Trainer` arguments (e.g. ``balance``, ``threads``).

    Returns:
        ``{"history", "evaluations", "seconds", "errors", "trainer"}``: ``history`` holds ``monitor_step``,
        ``monitor_evaluations`` and ``monitor/<name>`` over the run; ``errors`` the last monitor values
        (``{}`` without a monitor); ``evaluations`` the collocation-point evaluations spent; ``trainer`` the
        last phase's :class:`common.pde.Trainer` (its optimiser holds the state of the whole run).
    """
    options = dict(problem_options or {})
    every = max(1, schedule.steps // max(monitors, 1))
    history, evaluations, offset, previous = {}, 0, 0, None
    start = time.perf_counter()
    for index, (fraction, steps) in enumerate(schedule.phases()):
        part = dataclasses.replace(setup, duration=setup.duration * fraction)
        problem, _ = point_source_problem(part, **options)
        trainer = pde.Trainer(
            problem,
            model,
            steps=steps,
            learning_rate=schedule.learning_rate,
            learning_rate_schedule=lambda step, offset=offset: schedule.factor(offset + step),
            resample_every=1,
            monitor=monitor,
            monitor_every=_divisor_near(steps, every),
            seed=seed + 1000 * index,
            progress=progress,
            log_every=max(1, min(50, steps)),
            **trainer_options,
        )
        _carry_over(trainer, previous, schedule.learning_rate * schedule.factor(offset))
        trainer.fit()
        _append(history, trainer, offset, evaluations)
        evaluations, offset, previous = evaluations + trainer.evaluations, offset + steps, trainer
    errors = {key[8:]: values[-1] for key, values in history.items() if key.startswith("monitor/")}
    return {
        "history": history,
        "evaluations": evaluations,
        "seconds": time.perf_counter() - start,
        "errors": errors,
        "trainer": previous,
    }


def _divisor_near(steps: int, every: int) -> int:
    """A monitor interval near ``every`` that divides ``steps``, so every phase ends on a monitor call."""
    count = max(1, round(steps / every))
    while steps % count:
        count += 1
    return steps // count


def freeze_early_layers(model: nn.Module, layers: int) -> list[nn.Parameter]:
    """Stop training the first ``layers`` hidden layers of every sub-network of ``model``'s MultiScaleMLP.

    Args:
        model: a :class:`PotentialTE` or a :class:`common.nn.MultiScaleMLP` (possibly wrapped, found as the
            first module with ``subnetworks``).
        layers: hidden layers to freeze from the input side (0: none).

    Returns:
        The parameters frozen (``requires_grad`` False), to thaw afterwards.
    """
    network = next((module for module in model.modules() if hasattr(module, "subnetworks")), None)
    if network is None:
        raise ConfigurationError(
            f"freeze_early_layers: {type(model).__name__} holds no MultiScaleMLP to freeze")
    depth = min(len(sub.hidden) for sub in network.subnetworks)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 0 <= layers <= depth:
        raise ConfigurationError(
            f"freeze_early_layers: layers must be an integer in [0, {depth}], got {layers!r}")
    frozen = [p for sub in network.subnetworks for layer in sub.hidden[:layers] for p in layer.parameters()]
    for parameter in frozen:
        parameter.requires_grad_(False)
    return frozen


def fine_tune(
    model: nn.Module,
    setup: PointSourceSetup,
    schedule: Schedule,
    freeze: int = 0,
    **options,
) -> dict:
    """Fine-tune a pre-trained ``model`` to ``setup`` (e.g. one unseen permittivity of a parametric model).

    :func:`train_schedule` with the first ``freeze`` hidden layers frozen (:func:`freeze_early_layers`;
    thawed again at the end); give ``schedule`` a lower ``learning_rate`` and a ``warmup`` so the pre-trained
    weights are not thrown away in the first steps. For a parametric model, pass ``setup`` with the
    permittivity as a one-point range ``(value, value)`` so the model keeps its parameter column.

    Args:
        model: the pre-trained model; setup, schedule, options: as :func:`train_schedule`.
        freeze: hidden layers to freeze from the input side.

    Returns:
        :func:`train_schedule`'s result.
    """
    frozen = freeze_early_layers(model, freeze)
    try:
        return train_schedule(setup, model, schedule, **options)
    finally:
        for parameter in frozen:
            parameter.requires_grad_(True)
