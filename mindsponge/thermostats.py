"""Thermostats (NVT), split around the steps of :class:`~mindsponge.integrators.VelocityVerlet`.

A thermostat has ``apply(state, context) -> state`` and acts over ``context.dt``. The integrator
holds it (``VelocityVerlet(dt, thermostat=Bussi(...))``, or ``Simulation(..., thermostat=...)``,
which puts it there) and applies it for half a step before and after each velocity-Verlet step,
with a :class:`~mindsponge.context.DynamicsContext` whose ``dt`` is half the step (jax-md's
``nvt_nose_hoover``). From the context it reads the masses, the degrees of freedom, the time and
the generator. It keeps its own variables in ``state.extras`` (so they go into checkpoints). The
compiled step loop (:mod:`mindsponge.step_loop`) runs the three thermostats below the same way.

- :class:`Bussi`: stochastic velocity rescaling (Bussi, Donadio & Parrinello, J. Chem. Phys.
  126, 014101 (2007)): the kinetic energy follows the exact canonical distribution.
- :class:`BerendsenThermostat`: weak coupling; right mean temperature, too narrow a kinetic-energy
  distribution (it does not sample the canonical ensemble; use for equilibration).
- :class:`NoseHooverChain`: deterministic chain of Nose-Hoover thermostats (Martyna, Klein &
  Tuckerman 1992), propagated by the Trotter scheme of Martyna et al., Mol. Phys. 87, 1117
  (1996) over one time step.
- Langevin dynamics is an integrator: :class:`mindsponge.integrators.LangevinMiddle`; it is
  re-exported here as ``Langevin`` for discoverability.

Units: K, ps, kJ/mol.
"""

import math

import torch

from common import checks, units
from common.deprecation import moved_attributes
from mindsponge import thermo
from mindsponge.integrators import Integrator, _check_positive
from mindsponge.integrators import LangevinMiddle as Langevin

__all__ = ["BerendsenThermostat", "Bussi", "Langevin", "NoseHooverChain"]


class _Thermostat:
    def __init__(self, temperature, time_constant):
        owner = type(self).__name__
        self.temperature = _check_positive(temperature, "temperature (K)", owner)
        self.time_constant = _check_positive(time_constant, "time_constant (ps)", owner)

    __repr__ = Integrator.__repr__


class Bussi(_Thermostat):
    """Stochastic velocity rescaling (canonical).

    ``stochastic``: it draws random numbers (from ``context.generator``, state in ``state.rng_state``).

    Args:
        temperature: target temperature, K.
        time_constant: relaxation time tau of the kinetic energy, ps.
    """

    stochastic = True

    def apply(self, state, context):
        """Rescale the velocities of ``state`` by the Bussi factor for the time ``context.dt``."""
        generator = context.generator
        generator.set_state(state.rng_state)
        dof = context.degrees_of_freedom
        velocities = state.velocities
        kinetic = thermo.kinetic_energy(velocities, context.masses)
        target = 0.5 * dof * units.BOLTZMANN_MD * self.temperature
        decay = math.exp(-context.dt / self.time_constant)
        normals = torch.randn(dof, generator=generator, dtype=velocities.dtype, device=velocities.device)
        first, rest = normals[0], (normals[1:] * normals[1:]).sum()
        ratio = target / (dof * kinetic)
        scale_squared = (
            decay
            + (1 - decay) * (rest + first * first) * ratio
            + 2 * first * torch.sqrt(decay * (1 - decay) * ratio)
        )
        sign = torch.sign(first + torch.sqrt(decay / ((1 - decay) * ratio)))
        scale = sign * torch.sqrt(scale_squared)
        return state.replace(velocities=velocities * scale, rng_state=generator.get_state())


class BerendsenThermostat(_Thermostat):
    """Berendsen weak-coupling velocity scaling (not canonical; for equilibration).

    Args:
        temperature: target temperature, K.
        time_constant: coupling time tau, ps.
    """

    def apply(self, state, context):
        """Scale the velocities of ``state`` towards the target temperature (one step of ``context``)."""
        kinetic = thermo.kinetic_energy(state.velocities, context.masses)
        current = thermo.temperature(kinetic, context.degrees_of_freedom)
        factor = 1 + context.dt / self.time_constant * (self.temperature / current - 1)
        return state.replace(velocities=state.velocities * torch.sqrt(torch.clamp(factor, min=0.0)))


class NoseHooverChain(_Thermostat):
    """Nose-Hoover chain thermostat (canonical for ergodic systems).

    Args:
        temperature: target temperature, K.
        time_constant: period tau of the thermostat oscillation, ps (masses
            ``Q_1 = dof k T tau^2``, ``Q_i = k T tau^2``).
        chain_length: number of thermostats in the chain.

    The chain's positions and velocities are in ``state.extras`` (``"nhc_positions"``,
    ``"nhc_velocities"``); :meth:`energy` gives its contribution to the conserved energy.
    """

    def __init__(self, temperature, time_constant=0.1, chain_length=3):
        super().__init__(temperature, time_constant)
        checks.positive_int(chain_length, "NoseHooverChain: chain_length")
        self.chain_length = chain_length

    def _masses(self, dof, dtype, device):
        thermal = units.BOLTZMANN_MD * self.temperature
        masses = torch.full((self.chain_length,), thermal * self.time_constant**2, dtype=dtype, device=device)
        masses[0] = dof * masses[0]
        return masses

    def _chain(self, state):
        zeros = state.velocities.new_zeros(self.chain_length)
        return state.extras.get("nhc_positions", zeros), state.extras.get("nhc_velocities", zeros)

    def apply(self, state, context):
        """Propagate the chain by one time step of ``context`` and scale the velocities accordingly."""
        dof = context.degrees_of_freedom
        velocities = state.velocities
        masses = self._masses(dof, velocities.dtype, velocities.device)
        thermal = units.BOLTZMANN_MD * self.temperature
        positions, chain = self._chain(state)
        positions, chain = positions.clone(), list(chain.unbind())
        kinetic2 = 2 * thermo.kinetic_energy(velocities, context.masses)
        h = context.dt
        last = self.chain_length - 1

        def force(index, kinetic_twice):
            if index == 0:
                return (kinetic_twice - dof * thermal) / masses[0]
            return (masses[index - 1] * chain[index - 1] ** 2 - thermal) / masses[index]

        chain[last] = chain[last] + 0.5 * h * force(last, kinetic2)
        for index in range(last - 1, -1, -1):
            damping = torch.exp(-0.25 * h * chain[index + 1])
            chain[index] = (chain[index] * damping + 0.5 * h * force(index, kinetic2)) * damping
        scale = torch.exp(-h * chain[0])
        kinetic2 = kinetic2 * scale * scale
        positions = positions + h * torch.stack(chain)
        for index in range(last):
            damping = torch.exp(-0.25 * h * chain[index + 1])
            chain[index] = (chain[index] * damping + 0.5 * h * force(index, kinetic2)) * damping
        chain[last] = chain[last] + 0.5 * h * force(last, kinetic2)
        extras = dict(state.extras, nhc_positions=positions, nhc_velocities=torch.stack(chain))
        return state.replace(velocities=velocities * scale, extras=extras)

    def energy(self, state, context):
        """Energy of the chain (kJ/mol): add to the total energy for the conserved quantity.

        ``context`` is anything with the run's ``degrees_of_freedom``: the simulation's
        :class:`~mindsponge.context.DynamicsContext` (``sim.context``) or the simulation.
        """
        dof = context.degrees_of_freedom
        positions, chain = self._chain(state)
        masses = self._masses(dof, positions.dtype, positions.device)
        thermal = units.BOLTZMANN_MD * self.temperature
        return float(
            0.5 * (masses * chain * chain).sum() + thermal * (dof * positions[0] + positions[1:].sum())
        )


# ``Berendsen`` was the name of both a thermostat and a barostat
__getattr__ = moved_attributes(__name__, {"Berendsen": "mindsponge.thermostats:BerendsenThermostat"})
