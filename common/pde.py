"""Physics-informed training: a :class:`Problem` of named constraints, a :class:`Trainer` to fit a model.

A problem is a set of named constraints, each a residual that should vanish on its own set of
points, drawn by its own sampler with its own point count and weight:

- :class:`Residual`: a PDE residual ``fn(points, outputs)`` in the interior of a domain;
- :class:`Boundary`: ``fn(points, outputs, normals)`` on the boundary of a domain (for a
  space x time domain, the lateral boundary ``boundary(space) x [t0, t1]``);
- :class:`Initial`: ``fn(points, outputs)`` on the initial slice ``space x {t0}`` of a space x time domain;
- :class:`Data`: supervised values at given points (``outputs - values``).

Residual functions are plain functions of tensors: ``points`` is ``(B, d)`` with
``requires_grad=True`` (the problem's variables in order, parameters last), ``outputs`` is the
model's ``(B, k)`` output, and derivatives come from :mod:`common.autodiff`. A function returns a
tensor ``(B,)`` or ``(B, m)`` or a tuple of such tensors (one per equation); the constraint's loss
is the mean square of all of them. Nothing here knows any physics: a Poisson, Burgers or Maxwell
problem is a choice of residual functions.

Parametric problems: ``Problem(..., parameters={"permittivity": (1.0, 4.0)})`` appends one input
column per parameter, sampled over its range for every constraint point, so one network learns the
whole family; a range ``(value, value)`` fixes the parameter (fine-tuning for one value).

Example (1D Poisson, ``-u'' = pi^2 sin(pi x)`` on ``[0, 1]``, ``u(0) = u(1) = 0``)::

    from common import autodiff as ad, geometry as geo, nn as cnn, pde
    line = geo.Interval(0.0, 1.0)
    problem = pde.Problem(("x",), ("u",), [
        pde.Residual("pde", line, lambda x, u: ad.laplacian(u, x) + math.pi**2 * torch.sin(math.pi * x[:, 0]),
                     n_points=128),
        pde.Boundary("walls", line, lambda x, u, normals: u, n_points=2, weight=10.0),
    ])
    trainer = pde.Trainer(problem, cnn.MLP(1, 1, 32, 3), lr=1e-2, steps=2000, lbfgs_steps=200)
    trainer.train()
    trainer.history["loss"][-1]
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from common.checks import positive_int
from common.geometry import Geometry, SpaceTime, TimeDomain, UnitSampler
from common.geometry.samplers import check_count, check_sampler
from common.threads import default_threads, thread_budget

__all__ = ["Boundary", "Constraint", "Data", "Initial", "Problem", "Residual", "Trainer", "relative_l2"]

# A sampler is a name ("uniform", "sobol", "lhs") or a callable ``(n, seed, dtype, device) -> (n, d)``.
Sampler = str | Callable[..., torch.Tensor]


def relative_l2(prediction: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Relative L2 error ``||prediction - reference|| / ||reference||`` over all entries (a 0-d tensor)."""
    if prediction.shape != reference.shape:
        raise ValueError(
            f"relative_l2: prediction has shape {tuple(prediction.shape)} but reference has shape "
            f"{tuple(reference.shape)}"
        )
    return torch.linalg.vector_norm(prediction - reference) / torch.linalg.vector_norm(reference)


def _residual_matrix(residual, batch: int, name: str) -> torch.Tensor:
    """Stack a residual (tensor or tuple of tensors, each (B,) or (B, m)) into (B, M)."""
    parts = residual if isinstance(residual, (tuple, list)) else (residual,)
    columns = []
    for part in parts:
        if not isinstance(part, torch.Tensor) or part.dim() not in (1, 2) or part.shape[0] != batch:
            raise ValueError(
                f"constraint {name!r}: the residual function must return tensors of shape ({batch},) or "
                f"({batch}, m) (one row per point), got {getattr(part, 'shape', type(part).__name__)}"
            )
        columns.append(part[:, None] if part.dim() == 1 else part)
    return torch.cat(columns, dim=1)


def _check_weight(weight, name: str) -> float:
    weight = float(weight)
    if not (math.isfinite(weight) and weight >= 0):
        raise ValueError(f"constraint {name!r}: weight must be a non-negative number, got {weight!r}")
    return weight


class Constraint:
    """Base class: a named residual that should vanish on points drawn by a sampler.

    Args:
        name: key of the constraint in losses and history.
        n_points: points drawn per (re)sampling (> 0).
        weight: fixed loss weight (>= 0); adaptive weighting multiplies it.
        sampler: ``"uniform"``, ``"sobol"``, ``"lhs"``, or a callable
            ``sampler(n, seed, dtype, device) -> (n, d) points``.
    """

    def __init__(self, name: str, n_points: int, weight: float = 1.0, sampler: Sampler = "sobol"):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a constraint name must be a non-empty string, got {name!r}")
        self.name = name
        self.n_points = check_count(n_points, f"constraint {name!r}: n_points")
        self.weight = _check_weight(weight, name)
        if not callable(sampler):
            check_sampler(sampler)
        self.sampler = sampler

    @property
    def dim(self) -> int:
        """Number of coordinates of the points this constraint draws (before parameters)."""
        raise NotImplementedError

    def sample(self, seed: int, dtype: torch.dtype, device) -> dict[str, torch.Tensor]:
        """Draw this constraint's points: a dict with at least ``"points"`` ``(n_points, dim)``."""
        raise NotImplementedError

    def residual(self, points: torch.Tensor, outputs: torch.Tensor, batch: Mapping[str, torch.Tensor]):
        """The residual at ``points`` given the model ``outputs`` there (tensor(s) with B rows)."""
        raise NotImplementedError

    def reduce(self, squares: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
        """The constraint's loss from the per-point mean squared residual ``(B,)``: their mean."""
        return squares.mean()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, n_points={self.n_points}, weight={self.weight})"


class _DomainConstraint(Constraint):
    def __init__(self, name, domain, function, n_points, weight=1.0, sampler="sobol"):
        super().__init__(name, n_points, weight, sampler)
        if not isinstance(domain, Geometry):
            raise TypeError(
                f"constraint {name!r}: domain must be a common.geometry shape (e.g. Rectangle(...) * "
                f"TimeDomain(...)), got {type(domain).__name__}"
            )
        if not callable(function):
            raise TypeError(f"constraint {name!r}: the residual function must be callable, got {function!r}")
        self.domain, self.function = domain, function

    @property
    def dim(self) -> int:
        return self.domain.dim

    def _draw(self, draw_with_sampler, seed, dtype, device):
        if callable(self.sampler):
            points = self.sampler(self.n_points, seed, dtype, device)
            if not isinstance(points, torch.Tensor) or points.shape != (self.n_points, self.dim):
                raise ValueError(
                    f"constraint {self.name!r}: the sampler must return "
                    f"({self.n_points}, {self.dim}) points, "
                    f"got {getattr(points, 'shape', type(points).__name__)}"
                )
            return points.to(dtype=dtype, device=device)
        return draw_with_sampler(self.n_points, sampler=self.sampler, seed=seed, dtype=dtype, device=device)


class Residual(_DomainConstraint):
    """A PDE residual ``function(points, outputs)`` on the interior of ``domain``.

    Args:
        name: key of the constraint.
        domain: a :mod:`common.geometry` shape of the problem's coordinate dimension
            (e.g. ``Rectangle(...) * TimeDomain(...)``).
        function: ``(points (B, d), outputs (B, k)) -> (B,) | (B, m) | tuple of those``.
        n_points, weight, sampler: see :class:`Constraint`.
        causal_bins: 0 (plain mean), or the number of time bins of causal weighting (Wang, Sankaran &
            Perdikaris 2022, "Respecting causality"): the loss is ``mean_i w_i L_i`` over bins of the last
            coordinate (time), ``w_i = exp(-causal_epsilon * sum_{j < i} L_j)`` (detached), so later
            times are fitted once earlier ones are.
        causal_epsilon: steepness of the causal weights (in inverse units of the loss).
    """

    def __init__(
        self,
        name,
        domain,
        function,
        n_points,
        weight=1.0,
        sampler="sobol",
        causal_bins: int = 0,
        causal_epsilon: float = 1.0,
    ):
        super().__init__(name, domain, function, n_points, weight, sampler)
        if isinstance(causal_bins, bool) or not isinstance(causal_bins, int) or causal_bins < 0:
            raise ValueError(
                f"constraint {name!r}: causal_bins must be a non-negative integer, got {causal_bins!r}"
            )
        self.causal_bins, self.causal_epsilon = causal_bins, float(causal_epsilon)
        self.causal_weights = None

    def sample(self, seed, dtype, device):
        return {"points": self._draw(self.domain.sample_interior, seed, dtype, device)}

    def reduce(self, squares, points):
        if not self.causal_bins:
            return squares.mean()
        lo, hi = (bound[-1].item() for bound in self.domain.bounds_float64)
        fraction = (points[:, self.domain.dim - 1].detach() - lo) / (hi - lo)
        bins = (fraction * self.causal_bins).long().clamp_(0, self.causal_bins - 1)
        sums = torch.zeros(self.causal_bins, dtype=squares.dtype, device=squares.device).index_add(
            0, bins, squares
        )
        counts = torch.bincount(bins, minlength=self.causal_bins).clamp_(min=1).to(squares.dtype)
        bin_losses = sums / counts
        before = torch.cumsum(bin_losses.detach(), 0) - bin_losses.detach()
        self.causal_weights = torch.exp(-self.causal_epsilon * before)
        return (self.causal_weights * bin_losses).mean()

    def residual(self, points, outputs, batch):
        return self.function(points, outputs)


def _has_boundary(domain: Geometry) -> bool:
    if isinstance(domain, TimeDomain):
        return False  # a pure time interval has an initial and a final instant, no spatial boundary
    try:
        domain._boundary_param_dim  # noqa: B018 - raises for shapes without a boundary sampler
        return domain.boundary_measure > 0
    except NotImplementedError:
        return False


class Boundary(_DomainConstraint):
    """A boundary condition ``function(points, outputs, normals)`` on the boundary of ``domain``.

    For a space x time domain the points lie on ``boundary(space) x [t0, t1]`` and ``normals``
    are the outward spatial normals with a zero time component.

    Args:
        name: key of the constraint.
        domain: a shape with a boundary (not a bare :class:`~common.geometry.TimeDomain`).
        function: ``(points (B, d), outputs (B, k), normals (B, d)) -> residual``.
        n_points, weight, sampler: see :class:`Constraint`; a callable sampler returns points only
            (normals then come from ``domain.boundary_normal``).

    Raises:
        ValueError: if ``domain`` has no boundary to sample.
    """

    def __init__(self, name, domain, function, n_points, weight=1.0, sampler="sobol"):
        super().__init__(name, domain, function, n_points, weight, sampler)
        if not _has_boundary(domain):
            raise ValueError(
                f"constraint {name!r}: domain {domain!r} has no boundary to sample (a bare TimeDomain has "
                "only initial and final instants: use Initial for t = t0); give a spatial shape or "
                "space * TimeDomain"
            )

    def sample(self, seed, dtype, device):
        if callable(self.sampler):
            points = self._draw(None, seed, dtype, device)
            return {"points": points, "normals": self.domain.boundary_normal(points)}
        points, normals = self.domain.sample_boundary(
            self.n_points, sampler=self.sampler, seed=seed, dtype=dtype, device=device
        )
        return {"points": points, "normals": normals}

    def residual(self, points, outputs, batch):
        return self.function(points, outputs, batch["normals"])


class Initial(_DomainConstraint):
    """An initial condition ``function(points, outputs)`` on ``space x {t0}`` of a space x time domain.

    Args:
        name: key of the constraint.
        domain: ``space * TimeDomain(t0, t1)``.
        function: ``(points (B, d + 1), outputs (B, k)) -> residual`` (time is the last column).
        n_points, weight, sampler: see :class:`Constraint`.

    Raises:
        TypeError: if ``domain`` is not a space x time product.
    """

    def __init__(self, name, domain, function, n_points, weight=1.0, sampler="sobol"):
        if not isinstance(domain, SpaceTime):
            raise TypeError(
                f"constraint {name!r}: an initial condition needs a space x time domain "
                f"(space * TimeDomain(t0, t1)), got {domain!r}"
            )
        super().__init__(name, domain, function, n_points, weight, sampler)

    def sample(self, seed, dtype, device):
        return {"points": self._draw(self.domain.sample_initial, seed, dtype, device)}

    def residual(self, points, outputs, batch):
        return self.function(points, outputs)


class Data(Constraint):
    """Supervised values: ``outputs[:, components] - values`` at given points.

    Args:
        name: key of the constraint.
        points: ``(N, n_inputs)`` all input columns of the network (coordinates, then parameters).
        values: ``(N, len(components))`` target outputs.
        components: indices of the model outputs that ``values`` give (default: all, in order).
        n_points: minibatch drawn at every resampling (default: all N points every step).
        weight: loss weight.
    """

    def __init__(
        self,
        name,
        points,
        values,
        components: Sequence[int] | None = None,
        n_points: int | None = None,
        weight: float = 1.0,
    ):
        points, values = torch.as_tensor(points), torch.as_tensor(values)
        if points.dim() != 2 or values.dim() not in (1, 2) or len(points) != len(values) or len(points) == 0:
            raise ValueError(
                f"constraint {name!r}: points must be (N, n_inputs) and values (N, n_outputs) with the same "
                f"N > 0, got {tuple(points.shape)} and {tuple(values.shape)}"
            )
        super().__init__(name, len(points) if n_points is None else n_points, weight, "uniform")
        self.points = points
        self.values = values[:, None] if values.dim() == 1 else values
        self.components = list(range(self.values.shape[1])) if components is None else list(components)
        if len(self.components) != self.values.shape[1]:
            raise ValueError(
                f"constraint {name!r}: {len(self.components)} components given for values with "
                f"{self.values.shape[1]} columns"
            )

    @property
    def dim(self) -> int:
        return self.points.shape[1]

    def sample(self, seed, dtype, device):
        if self.n_points >= len(self.points):
            index = torch.arange(len(self.points))
        else:
            index = torch.randperm(len(self.points), generator=torch.Generator().manual_seed(seed))
            index = index[: self.n_points]
        return {
            "points": self.points[index].to(dtype=dtype, device=device),
            "values": self.values[index].to(dtype=dtype, device=device),
        }

    def residual(self, points, outputs, batch):
        return outputs[:, self.components] - batch["values"]


class Problem:
    """A set of named constraints over a tuple of named input variables and named outputs.

    Args:
        variables: names of the coordinate inputs in column order, e.g. ``("x", "y", "t")``
            (time last for space x time domains).
        outputs: names of the model outputs, e.g. ``("Ex", "Ey", "Hz")``.
        constraints: :class:`Constraint` objects with distinct names.
        parameters: optional ``{name: (low, high)}`` extra inputs appended after ``variables``,
            drawn uniformly (or by the constraint's sampler) over their ranges for every point.

    Raises:
        ValueError: duplicate names, or a constraint whose points do not have ``len(variables)``
            coordinates (``len(variables) + len(parameters)`` for :class:`Data`).
    """

    def __init__(
        self,
        variables: Sequence[str],
        outputs: Sequence[str],
        constraints: Sequence[Constraint],
        parameters: Mapping[str, tuple[float, float]] | None = None,
    ):
        self.variables, self.outputs = tuple(variables), tuple(outputs)
        if not self.variables or not self.outputs:
            raise ValueError("Problem: variables and outputs must be non-empty sequences of names")
        self.parameters = {
            name: (float(low), float(high)) for name, (low, high) in (parameters or {}).items()
        }
        for name, (low, high) in self.parameters.items():
            if not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise ValueError(f"Problem: parameter {name!r} needs a range low <= high, got {(low, high)}")
        names = self.variables + tuple(self.parameters)
        if len(set(names)) != len(names):
            raise ValueError(f"Problem: variable and parameter names must be distinct, got {names}")
        self.constraints = {}
        for constraint in constraints:
            if not isinstance(constraint, Constraint):
                raise TypeError(f"Problem: expected Constraint objects, got {constraint!r}")
            if constraint.name in self.constraints:
                raise ValueError(f"Problem: two constraints are named {constraint.name!r}")
            expected = len(self.inputs) if isinstance(constraint, Data) else len(self.variables)
            if constraint.dim != expected:
                raise ValueError(
                    f"Problem: constraint {constraint.name!r} has {constraint.dim}-dimensional points "
                    "but the "
                    f"problem expects {expected} ({', '.join(self.inputs[:expected])})"
                )
            self.constraints[constraint.name] = constraint
        if not self.constraints:
            raise ValueError("Problem: at least one constraint is needed")

    @property
    def inputs(self) -> tuple[str, ...]:
        """Names of all network inputs: the variables, then the parameters."""
        return self.variables + tuple(self.parameters)

    def check_model(self, model: nn.Module, dtype: torch.dtype, device) -> None:
        """Raise ``ValueError`` unless ``model`` maps ``(B, len(inputs))`` to ``(B, len(outputs))``."""
        declared = getattr(model, "in_features", None)
        if declared is not None and declared != len(self.inputs):
            raise ValueError(
                f"the model takes {declared} inputs but the problem has {len(self.inputs)} "
                f"({', '.join(self.inputs)})"
            )
        probe = torch.zeros(2, len(self.inputs), dtype=dtype, device=device)
        try:
            with torch.no_grad():
                outputs = model(probe)
        except RuntimeError as error:
            raise ValueError(
                f"the model cannot take the problem's {len(self.inputs)} inputs ({', '.join(self.inputs)}): "
                f"{error}"
            ) from error
        if outputs.shape != (2, len(self.outputs)):
            raise ValueError(
                f"the model must return (B, {len(self.outputs)}) outputs ({', '.join(self.outputs)}), "
                f"got shape {tuple(outputs.shape)} for B = 2"
            )

    def sample(self, seed: int, dtype: torch.dtype, device) -> dict[str, dict[str, torch.Tensor]]:
        """Draw the points of every constraint (parameters appended): ``{name: batch}``."""
        batches = {}
        for index, constraint in enumerate(self.constraints.values()):
            constraint_seed = (seed * 1_000_003 + index * 7919) % (2**62)
            batch = constraint.sample(constraint_seed, dtype, device)
            if self.parameters and not isinstance(constraint, Data):
                sampler = constraint.sampler if isinstance(constraint.sampler, str) else "uniform"
                unit = UnitSampler(sampler, len(self.parameters), constraint_seed + 1, dtype, device)
                unit = unit(constraint.n_points)
                low, high = (
                    torch.tensor(bound, dtype=dtype, device=device)
                    for bound in zip(*self.parameters.values())
                )
                batch["points"] = torch.cat([batch["points"], low + (high - low) * unit], dim=1)
            batches[constraint.name] = batch
        return batches

    def losses(
        self, model: nn.Module, batches: Mapping[str, Mapping[str, torch.Tensor]]
    ) -> dict[str, torch.Tensor]:
        """Mean square residual of every constraint: ``{name: 0-d tensor}`` (keeps the graph)."""
        losses = {}
        for name, constraint in self.constraints.items():
            batch = batches[name]
            points = batch["points"].detach().requires_grad_(not isinstance(constraint, Data))
            outputs = model(points)
            residual = _residual_matrix(constraint.residual(points, outputs, batch), len(points), name)
            losses[name] = constraint.reduce(residual.pow(2).mean(1), points)
        return losses

    def __repr__(self) -> str:
        return (
            f"Problem(variables={self.variables}, outputs={self.outputs}, parameters={self.parameters}, "
            f"constraints={list(self.constraints.values())})"
        )


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
    raise ValueError(
        f"Trainer: lr_schedule must be None, 'constant', 'exponential', 'cosine' or a callable "
        f"step -> factor, got {schedule!r}"
    )


class Trainer:
    """Fit a model to a :class:`Problem`: Adam, then optionally L-BFGS.

    Every step draws nothing new unless the points are due for resampling; evaluates each
    constraint's mean square residual; and minimises ``sum_i weight_i * balance_i * loss_i``.

    Args:
        problem: the :class:`Problem`.
        model: a pointwise ``nn.Module`` mapping ``(B, len(problem.inputs))`` to
            ``(B, len(problem.outputs))``; its parameters fix dtype and device.
        steps: Adam steps of :meth:`train`.
        lr: Adam learning rate.
        lr_schedule: ``None``/``"constant"``, ``"exponential"`` (factor ``lr_decay`` reached at
            ``steps``), ``"cosine"`` (from 1 to ``lr_decay``) or a callable ``step -> factor``.
        lr_decay: final learning-rate factor of the built-in schedules.
        lbfgs_steps: L-BFGS iterations after Adam (0: none), on the points current at the end of Adam.
        resample_every: draw new collocation points every this many steps (0: never).
        balance: adaptive weighting: ``None`` (fixed weights) or ``"gradnorm"`` (gradient-norm
            balancing, Wang, Teng & Perdikaris 2021: ``balance_i = sum_j |grad L_j| / |grad L_i|``,
            smoothed by ``balance_momentum``, recomputed every ``balance_every`` steps).
        balance_every, balance_momentum: see ``balance``.
        checkpoint: optional file path; an atomic checkpoint (:func:`common.io.save_checkpoint`)
            is written every ``checkpoint_every`` steps and at the end; :meth:`resume` restarts from it.
        checkpoint_every: interval in steps.
        log_every: record the losses in :attr:`history` every this many steps.
        monitor: optional ``monitor(model) -> {name: float}`` (e.g. errors against a reference),
            called every ``monitor_every`` steps; its values go to :attr:`history`.
        monitor_every: interval in steps.
        seed: seed of the point sampling.
        progress: show a tqdm progress bar.
        threads: CPU threads :meth:`train` uses (torch and the OpenMP/BLAS pools, restored
            afterwards; :func:`common.threads.thread_budget`); default
            ``common.threads.default_threads()``: the cores divided by the processes ``torchrun``
            started on this machine, at most ``OMP_NUM_THREADS`` if set.

    Attributes:
        history: dict of lists: ``step``, ``evaluations`` (cumulative collocation-point model
            evaluations), ``loss``, ``lr``, ``loss/<name>``, ``balance/<name>`` and monitor values
            (``monitor/<name>``, with ``monitor_step``).
        step: Adam steps done. evaluations: point evaluations done (sum of batch sizes per step).
    """

    def __init__(
        self,
        problem: Problem,
        model: nn.Module,
        steps: int = 1000,
        lr: float = 1e-3,
        lr_schedule=None,
        lr_decay: float = 0.1,
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
    ):
        if not isinstance(problem, Problem):
            raise TypeError(f"Trainer: problem must be a common.pde.Problem, got {type(problem).__name__}")
        parameters = list(model.parameters())
        if not parameters:
            raise ValueError("Trainer: the model has no parameters to train")
        self.dtype, self.device = parameters[0].dtype, parameters[0].device
        problem.check_model(model, self.dtype, self.device)
        if balance not in (None, "gradnorm"):
            raise ValueError(f"Trainer: balance must be None or 'gradnorm', got {balance!r}")
        for name, value in (
            ("steps", steps),
            ("lbfgs_steps", lbfgs_steps),
            ("resample_every", resample_every),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Trainer: {name} must be a non-negative integer, got {value!r}")
        for name, value in (
            ("balance_every", balance_every),
            ("checkpoint_every", checkpoint_every),
            ("log_every", log_every),
            ("monitor_every", monitor_every),
        ):
            check_count(value, f"Trainer: {name}")
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
        self.threads = default_threads() if threads is None else positive_int(threads, "Trainer: threads")
        self.optimizer = torch.optim.Adam(parameters, lr=lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _schedule_factor(lr_schedule, steps, lr_decay)
        )
        self.balance_weights = {name: 1.0 for name in problem.constraints}
        self.step, self.evaluations, self.resamplings, self.lbfgs_done = 0, 0, 0, 0
        self.history: dict[str, list] = {}
        self.batches = problem.sample(self.seed, self.dtype, self.device)

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

    def _record(self, losses: Mapping[str, torch.Tensor], total: torch.Tensor) -> None:
        entries = {
            "step": self.step + self.lbfgs_done,
            "evaluations": self.evaluations,
            "loss": float(total.detach()),
            "lr": self.optimizer.param_groups[0]["lr"],
        }
        for name, loss in losses.items():
            entries[f"loss/{name}"] = float(loss.detach())
            entries[f"balance/{name}"] = self.balance_weights[name]
        for key, value in entries.items():
            self.history.setdefault(key, []).append(value)

    def _run_monitor(self) -> None:
        if self.monitor is None:
            return
        values = self.monitor(self.model)
        self.history.setdefault("monitor_step", []).append(self.step + self.lbfgs_done)
        self.history.setdefault("monitor_evaluations", []).append(self.evaluations)
        for key, value in values.items():
            self.history.setdefault(f"monitor/{key}", []).append(float(value))

    # ------------------------------------------------------------------ training
    def train(
        self,
        steps: int | None = None,
        lbfgs_steps: int | None = None,
        stop: Callable[[Mapping[str, list]], bool] | None = None,
    ) -> dict[str, list]:
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
        with thread_budget(self.threads):  # explicit: see the ``threads`` argument
            return self._train(steps, lbfgs_steps, stop)

    def _train(self, steps: int | None, lbfgs_steps: int | None, stop) -> dict[str, list]:
        from tqdm.auto import tqdm

        steps = self.steps if steps is None else steps
        lbfgs_steps = self.lbfgs_steps if lbfgs_steps is None else lbfgs_steps
        self.model.train()
        stopped = False
        with tqdm(
            total=max(steps - self.step, 0), disable=not self.progress, desc="Adam", leave=False
        ) as bar:
            while self.step < steps:
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
                self.step += 1
                if self.step % self.log_every == 0 or self.step == steps:
                    self._record(losses, total)
                    bar.set_postfix(loss=f"{float(total.detach()):.3e}")
                if self.step % self.monitor_every == 0:
                    self._run_monitor()
                    stopped = stop is not None and stop(self.history)
                if self.checkpoint is not None and self.step % self.checkpoint_every == 0:
                    self.save(self.checkpoint)
                bar.update(1)
                if stopped:
                    break
        if lbfgs_steps and not stopped:
            self._lbfgs(lbfgs_steps)
        if self.checkpoint is not None:
            self.save(self.checkpoint)
        return self.history

    def _lbfgs(self, iterations: int) -> None:
        from tqdm.auto import tqdm

        optimizer = torch.optim.LBFGS(
            self.model.parameters(),
            lr=1.0,
            max_iter=iterations,
            history_size=50,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-12,
            tolerance_change=1e-15,
        )
        bar = tqdm(total=iterations, disable=not self.progress, desc="L-BFGS", leave=False)

        def closure():
            optimizer.zero_grad(set_to_none=True)
            losses = self.problem.losses(self.model, self.batches)
            total = self._weighted(losses)
            total.backward()
            self.evaluations += self.points_per_step
            self.lbfgs_done += 1
            if self.lbfgs_done % self.log_every == 0:
                self._record(losses, total)
            bar.update(1)
            bar.set_postfix(loss=f"{float(total.detach()):.3e}")
            return total

        optimizer.step(closure)
        bar.close()
        losses = self.problem.losses(self.model, self.batches)
        self._record(losses, self._weighted(losses))
        self._run_monitor()

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """Everything needed to continue training: model, optimiser, schedule, counters, history."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "counters": {
                "step": self.step,
                "evaluations": self.evaluations,
                "resamplings": self.resamplings,
                "lbfgs_done": self.lbfgs_done,
            },
            "balance_weights": dict(self.balance_weights),
            "history": self.history,
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write :meth:`state` atomically to ``path`` (:func:`common.io.save_checkpoint`)."""
        from common.io import save_checkpoint

        state = self.state()
        state["scheduler"] = {key: value for key, value in state["scheduler"].items() if key != "lr_lambdas"}
        save_checkpoint(path, state, kind="common.pde.Trainer")

    def resume(self, path: str | os.PathLike) -> None:
        """Load a checkpoint written by :meth:`save` (same problem and model layout) and continue from it."""
        from common.io import load_checkpoint

        state = load_checkpoint(path, map_location=self.device, kind="common.pde.Trainer")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        scheduler_state = dict(state["scheduler"], lr_lambdas=[None])
        self.scheduler.load_state_dict(scheduler_state)
        counters = state["counters"]
        self.step, self.evaluations = counters["step"], counters["evaluations"]
        self.resamplings, self.lbfgs_done = counters["resamplings"], counters["lbfgs_done"]
        self.balance_weights = dict(state["balance_weights"])
        self.history = {key: list(value) for key, value in state["history"].items()}
        self.batches = self.problem.sample(self.seed + self.resamplings, self.dtype, self.device)
