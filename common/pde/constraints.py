"""The constraints of a physics-informed problem: :class:`Residual`, :class:`Boundary`,
:class:`Initial` and :class:`Data` (see :mod:`common.pde`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError
from common.geometry import Geometry, SpaceTime, TimeDomain
from common.geometry.samplers import check_count, check_sampler

__all__ = ["Boundary", "Constraint", "Data", "Initial", "Residual", "Sampler"]

# A sampler is a name ("uniform", "sobol", "lhs") or a callable ``(n, seed, dtype, device) -> (n, d)``.
Sampler = str | Callable[..., torch.Tensor]


def _check_weight(weight, name: str) -> float:
    weight = float(weight)
    if not (math.isfinite(weight) and weight >= 0):
        raise ConfigurationError(f"constraint {name!r}: weight must be a non-negative number, got {weight!r}")
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
            raise ConfigurationError(f"a constraint name must be a non-empty string, got {name!r}")
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
            raise ArgumentTypeError(
                f"constraint {name!r}: domain must be a common.geometry shape (e.g. Rectangle(...) * "
                f"TimeDomain(...)), got {type(domain).__name__}"
            )
        if not callable(function):
            raise ArgumentTypeError(
                f"constraint {name!r}: the residual function must be callable, got {function!r}")
        self.domain, self.function = domain, function

    @property
    def dim(self) -> int:
        return self.domain.dim

    def _draw(self, draw_with_sampler, seed, dtype, device):
        if callable(self.sampler):
            points = self.sampler(self.n_points, seed, dtype, device)
            if not isinstance(points, torch.Tensor) or points.shape != (self.n_points, self.dim):
                raise ConfigurationError(
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
        checks.non_negative_int(causal_bins, f"constraint {name!r}: causal_bins")
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
            raise ConfigurationError(
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
            raise ArgumentTypeError(
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
            raise ConfigurationError(
                f"constraint {name!r}: points must be (N, n_inputs) and values (N, n_outputs) with the same "
                f"N > 0, got {tuple(points.shape)} and {tuple(values.shape)}"
            )
        super().__init__(name, len(points) if n_points is None else n_points, weight, "uniform")
        self.points = points
        self.values = values[:, None] if values.dim() == 1 else values
        self.components = list(range(self.values.shape[1])) if components is None else list(components)
        if len(self.components) != self.values.shape[1]:
            raise ConfigurationError(
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
