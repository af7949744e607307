"""A physics-informed :class:`Problem`: named constraints over named inputs and outputs, their
sampling and their losses (see :mod:`common.pde`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from common.errors import ArgumentTypeError, ConfigurationError
from common.geometry import UnitSampler
from common.pde.constraints import Constraint, Data

__all__ = ["Problem", "relative_l2"]


def relative_l2(prediction: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Relative L2 error ``||prediction - reference|| / ||reference||`` over all entries (a 0-d tensor)."""
    if prediction.shape != reference.shape:
        raise ConfigurationError(
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
            raise ConfigurationError(
                f"constraint {name!r}: the residual function must return tensors of shape ({batch},) or "
                f"({batch}, m) (one row per point), got {getattr(part, 'shape', type(part).__name__)}"
            )
        columns.append(part[:, None] if part.dim() == 1 else part)
    return torch.cat(columns, dim=1)


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
            raise ConfigurationError("Problem: variables and outputs must be non-empty sequences of names")
        self.parameters = {
            name: (float(low), float(high)) for name, (low, high) in (parameters or {}).items()
        }
        for name, (low, high) in self.parameters.items():
            if not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise ConfigurationError(
                    f"Problem: parameter {name!r} needs a range low <= high, got {(low, high)}")
        names = self.variables + tuple(self.parameters)
        if len(set(names)) != len(names):
            raise ConfigurationError(f"Problem: variable and parameter names must be distinct, got {names}")
        self.constraints = {}
        for constraint in constraints:
            if not isinstance(constraint, Constraint):
                raise ArgumentTypeError(f"Problem: expected Constraint objects, got {constraint!r}")
            if constraint.name in self.constraints:
                raise ConfigurationError(f"Problem: two constraints are named {constraint.name!r}")
            expected = len(self.inputs) if isinstance(constraint, Data) else len(self.variables)
            if constraint.dim != expected:
                raise ConfigurationError(
                    f"Problem: constraint {constraint.name!r} has {constraint.dim}-dimensional points "
                    "but the "
                    f"problem expects {expected} ({', '.join(self.inputs[:expected])})"
                )
            self.constraints[constraint.name] = constraint
        if not self.constraints:
            raise ConfigurationError("Problem: at least one constraint is needed")

    @property
    def inputs(self) -> tuple[str, ...]:
        """Names of all network inputs: the variables, then the parameters."""
        return self.variables + tuple(self.parameters)

    def check_model(self, model: nn.Module, dtype: torch.dtype, device) -> None:
        """Raise ``ValueError`` unless ``model`` maps ``(B, len(inputs))`` to ``(B, len(outputs))``."""
        declared = getattr(model, "in_features", None)
        if declared is not None and declared != len(self.inputs):
            raise ConfigurationError(
                f"the model takes {declared} inputs but the problem has {len(self.inputs)} "
                f"({', '.join(self.inputs)})"
            )
        probe = torch.zeros(2, len(self.inputs), dtype=dtype, device=device)
        try:
            with torch.no_grad():
                outputs = model(probe)
        except RuntimeError as error:
            raise ConfigurationError(
                f"the model cannot take the problem's {len(self.inputs)} inputs ({', '.join(self.inputs)}): "
                f"{error}"
            ) from error
        if outputs.shape != (2, len(self.outputs)):
            raise ConfigurationError(
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
