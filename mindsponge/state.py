"""The dynamical state of a simulation: positions, velocities, box, step, time, RNG state.

A :class:`State` is immutable: an integrator step maps a state (and a force callable) to a
new state, and reporters read states without changing them (the shape of jax-md's
``simulate``). Besides what a user looks at, a state carries what a step needs to continue
exactly: the forces and potential energy at its positions (so a step evaluates the force
field once, and a restarted run does not recompute them with a different summation order),
the state of the random-number generator of stochastic integrators and thermostats, and any
internal variables of a thermostat or barostat (``extras``).

Units: positions nm, velocities nm/ps, box nm, time ps, forces kJ/mol/nm, energy kJ/mol.
"""

import dataclasses
from dataclasses import dataclass, field

import torch

from common.errors import ConfigurationError

__all__ = ["State"]


@dataclass(frozen=True, eq=False)
class State:
    """Immutable dynamical state.

    Attributes:
        positions: (N, 3) tensor, nm (not wrapped into the box, so molecules stay whole).
        velocities: (N, 3) tensor, nm/ps.
        box: (3, 3) tensor of box vectors (rows), nm, or ``None`` without periodic boundaries.
        step: number of integration steps taken.
        time: simulated time, ps.
        forces: (N, 3) tensor, kJ/mol/nm, at ``positions``, or ``None`` if not computed yet.
        potential_energy: () tensor, kJ/mol, at ``positions``, or ``None``.
        rng_state: ``torch.Generator.get_state()`` of the stochastic parts (uint8 tensor), or
            ``None`` for deterministic dynamics.
        extras: dict of named tensors: internal variables of thermostats and barostats
            (e.g. Nose-Hoover chain velocities).
    """

    positions: torch.Tensor
    velocities: torch.Tensor
    box: torch.Tensor | None = None
    step: int = 0
    time: float = 0.0
    forces: torch.Tensor | None = None
    potential_energy: torch.Tensor | None = None
    rng_state: torch.Tensor | None = None
    extras: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("positions", "velocities"):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.shape[1] != 3:
                shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ConfigurationError(f"State.{name} must be an (N, 3) tensor, got {shape}")
        if self.velocities.shape != self.positions.shape:
            raise ConfigurationError(
                f"State.velocities has shape {tuple(self.velocities.shape)} but positions "
                f"{tuple(self.positions.shape)}"
            )
        if self.box is not None and (not isinstance(self.box, torch.Tensor) or self.box.shape != (3, 3)):
            raise ConfigurationError("State.box must be a (3, 3) tensor of box vectors (rows) in nm, or None")

    def replace(self, **changes):
        """A new State with some fields replaced."""
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        """The state as a plain dict of tensors and numbers (for :func:`common.io.save_checkpoint`)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data):
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: a field is missing (the message names it).
        """
        names = [field.name for field in dataclasses.fields(cls)]
        missing = [name for name in names if name not in data]
        if missing:
            raise ConfigurationError(f"State data lacks the fields {missing}")
        return cls(**{name: data[name] for name in names})
