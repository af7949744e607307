"""Mixed-precision policy: the dtype things are computed in vs the dtype they are accumulated in.

Most of the work of a simulation is elementwise (pair forces, field updates), where
float32 is accurate enough and twice as fast as float64. Sums over many terms and
quantities integrated over many steps are not: the rounding error of a float32 sum
of ``n`` terms grows like ``n`` times the float32 epsilon (1.2e-7) in the worst
case, and a trajectory integrated in float32 drifts. OpenMM's "mixed" precision
therefore computes forces in float32 and accumulates energies, and integrates
positions and velocities, in float64. :class:`Precision` names that choice:

* ``compute``: dtype of the per-term work (forces of each pair, field updates).
* ``accumulate``: dtype of reductions (total energy, virial) and of the state that
  is integrated over time (positions, velocities, the time itself).

Presets: ``Precision.single()`` (float32/float32), ``Precision.mixed()``
(float32/float64, as OpenMM's mixed), ``Precision.double()`` (float64/float64).

Example:
    >>> import torch
    >>> precision = Precision.from_name("mixed")
    >>> positions = torch.rand(100, 3, dtype=torch.float64)       # state: accumulate dtype
    >>> pair_energies = precision.to_compute(positions).sum(-1)   # work in float32
    >>> precision.sum(pair_energies).dtype                        # total in float64
    torch.float64
"""

import dataclasses

import torch

from common.errors import ArgumentTypeError, ConfigurationError

__all__ = ["Precision"]

_PRESETS = {
    "single": (torch.float32, torch.float32),
    "mixed": (torch.float32, torch.float64),
    "double": (torch.float64, torch.float64),
}


@dataclasses.dataclass(frozen=True)
class Precision:
    """A mixed-precision policy: ``compute`` dtype for per-term work, ``accumulate`` dtype for sums and state.

    Args:
        compute: floating dtype of elementwise work (e.g. torch.float32).
        accumulate: floating dtype of reductions and integrated state; at least as
            precise as ``compute``.

    Raises:
        TypeError: if a dtype is not a floating torch dtype.
        ValueError: if ``accumulate`` is less precise than ``compute``.
    """

    compute: torch.dtype = torch.float32
    accumulate: torch.dtype = torch.float64

    def __post_init__(self):
        for name in ("compute", "accumulate"):
            dtype = getattr(self, name)
            if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
                raise ArgumentTypeError(f"Precision: {name} must be a floating torch dtype, got {dtype!r}")
        if torch.finfo(self.accumulate).eps > torch.finfo(self.compute).eps:
            raise ConfigurationError(
                f"Precision: accumulate dtype {self.accumulate} is less precise than "
                f"compute dtype {self.compute}"
            )

    @classmethod
    def single(cls) -> "Precision":
        """float32 everywhere: fastest, for short runs and training."""
        return cls(*_PRESETS["single"])

    @classmethod
    def mixed(cls) -> "Precision":
        """float32 work, float64 sums and integrated state (OpenMM's "mixed")."""
        return cls(*_PRESETS["mixed"])

    @classmethod
    def double(cls) -> "Precision":
        """float64 everywhere: the reference for validation."""
        return cls(*_PRESETS["double"])

    @classmethod
    def from_name(cls, name: str) -> "Precision":
        """The preset called ``name``: ``"single"``, ``"mixed"`` or ``"double"``."""
        if name not in _PRESETS:
            raise ConfigurationError(
                f"Precision.from_name: unknown precision {name!r}; expected one of {', '.join(_PRESETS)}"
            )
        return cls(*_PRESETS[name])

    @property
    def name(self) -> str | None:
        """The preset name of this policy, or None if it is not a preset."""
        for name, dtypes in _PRESETS.items():
            if dtypes == (self.compute, self.accumulate):
                return name
        return None

    def to_compute(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` in the compute dtype (same device); integer and bool tensors pass unchanged."""
        return tensor.to(self.compute) if tensor.is_floating_point() else tensor

    def to_accumulate(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` in the accumulate dtype (same device); integer and bool tensors pass unchanged."""
        return tensor.to(self.accumulate) if tensor.is_floating_point() else tensor

    def sum(
        self, tensor: torch.Tensor, dim: int | tuple[int, ...] | None = None, keepdim: bool = False
    ) -> torch.Tensor:
        """Sum ``tensor`` with accumulation in the accumulate dtype; the result has that dtype.

        Args:
            tensor: values of any floating dtype, e.g. per-pair energies (P,) in compute dtype.
            dim: dimension(s) to reduce; None reduces all.
            keepdim: keep the reduced dimensions with size 1.

        Returns:
            The sum, in the accumulate dtype, differentiable.
        """
        if dim is None:
            return tensor.sum(dtype=self.accumulate)
        return tensor.sum(dim=dim, keepdim=keepdim, dtype=self.accumulate)

    def index_add(self, target_size: int, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Scatter-sum ``values`` into ``target_size`` rows, accumulated in the accumulate dtype.

        Typical use: per-pair forces (P, 3) in compute dtype summed onto atoms (N, 3).

        Args:
            target_size: number of rows of the result (N).
            index: (P,) int64 row of each value.
            values: (P, ...) values.

        Returns:
            (N, ...) sums in the accumulate dtype, on the device of ``values``.
        """
        result = values.new_zeros((target_size, *values.shape[1:]), dtype=self.accumulate)
        return result.index_add(0, index, values.to(self.accumulate))
