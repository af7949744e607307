"""What integrators, thermostats and barostats may read of the simulation that runs them.

A :class:`~mindsponge.simulation.Simulation` builds one :class:`DynamicsContext` when it is
created (``sim.context``) and passes it to every phase of a step::

    state = integrator.step(state, context)      # the thermostat's half steps inside
    state = barostat.apply(state, context)

so that they map a state to a new state knowing only the fixed data of the run (masses, degrees
of freedom, time step, constraints, molecules, the generator and the force field as callables) and
never the simulation itself. Their own variables live in ``state.extras``, the generator's state in
``state.rng_state``: everything a step depends on stays in the state (and in checkpoints).

Units: amu, ps, kJ/mol, nm.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["DynamicsContext"]


@dataclass(frozen=True, eq=False)
class DynamicsContext:
    """The fixed data of a run, read by thermostats and barostats.

    Attributes:
        masses: (N,) tensor, amu (the integration dtype).
        degrees_of_freedom: number of degrees of freedom (constraints and centre-of-mass
            motion removal subtracted).
        dt: time step of the integrator, ps.
        generator: ``torch.Generator`` of the stochastic parts: load ``state.rng_state`` into it
            before drawing and store ``generator.get_state()`` in the returned state.
        molecules: (N,) long tensor, the molecule index of every atom (barostats scale the
            molecules' centres of mass).
        energy_and_forces: callable ``(positions, box) -> (energy, forces)``, kJ/mol and
            kJ/mol/nm, in the integration dtype.
        potential: callable ``(positions, box) -> energy``, kJ/mol, without forces (for the
            virial pressure of :func:`mindsponge.thermo.pressure`).
        constraints: the :class:`~mindsponge.constraints.Constraints` integrators apply, or ``None``.
    """

    masses: torch.Tensor
    degrees_of_freedom: int
    dt: float
    generator: torch.Generator
    molecules: torch.Tensor
    energy_and_forces: Callable
    potential: Callable
    constraints: object = None
