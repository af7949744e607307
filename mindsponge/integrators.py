"""Time integrators: a step maps a :class:`~mindsponge.state.State` to the next one.

Every integrator exposes ``step(state, context)``, the protocol thermostats and barostats share
(``apply(state, context)``): ``context`` is the run's :class:`~mindsponge.context.DynamicsContext`,
from which a step reads

- ``context.energy_and_forces(positions, box) -> (energy, forces)``, the potential (kJ/mol) and
  forces (kJ/mol/nm) at new positions; a step calls it once, and the returned state carries the
  forces for the next step;
- ``context.masses``: (N,) tensor, amu; massless particles (virtual sites) are not moved;
- ``context.constraints``: a :class:`~mindsponge.constraints.Constraints` (or ``None``): positions are
  constrained after each drift, velocities after each kick (RATTLE);
- ``context.generator``: a ``torch.Generator`` for stochastic integrators; its state is loaded from
  ``state.rng_state`` before the step and stored in the returned state, so a step is a pure
  function of the state (a restarted run continues bit for bit).

A thermostat is part of the integrator, split around its step as in jax-md's ``nvt_nose_hoover``:
``VelocityVerlet(dt, thermostat=Bussi(...))`` applies the thermostat for half a step
(``thermostat.apply(state, context)`` with a context whose ``dt`` is ``dt / 2``), then the
velocity-Verlet step, then the thermostat's second half step (a symmetric Trotter splitting).
:class:`LangevinMiddle` is its own thermostat.

The older call ``step(state, force, masses, constraints=None, generator=None)`` still works, with a
``DeprecationWarning``.

Integration is done in the dtype of ``state.positions`` (float64 for mixed precision) whatever
dtype the forces come in. :class:`~mindsponge.simulation.Simulation` runs these steps in compiled
code (:mod:`mindsponge.step_loop`) where it can, operation by operation the same.

:class:`VelocityVerlet` samples the microcanonical (NVE) ensemble; :class:`LangevinMiddle` is
the BAOAB splitting of Langevin dynamics (Leimkuhler & Matthews 2013), the scheme of OpenMM's
``LangevinMiddleIntegrator``: kick by the full step, drift half a step, Ornstein-Uhlenbeck
velocity update, drift half a step, constrain. With constraints the velocities are corrected by
the constraint displacement over the step, as OpenMM corrects them, and then projected on the
constraints (RATTLE). The projection does not change the trajectory: the next step's kick is
projected anyway, and a projection is linear, so the positions are OpenMM's step for step
(tests/mindsponge/test_openmm_system_truth.py). It changes the velocities that are reported:
OpenMM's keep a part along the constraints (the O step's random kick and the centripetal
correction), which its ``getKineticEnergy`` counts; ours are the velocities of the constrained
degrees of freedom. Measured on an HMR + HBonds solvated dipeptide at 4 fs (1035 degrees of
freedom), OpenMM's reported temperature is above that of its own projected velocities by
about 0.7 K at negligible friction, 0.9 K at 1/ps and 3.4 K at 10/ps; ours agrees with the projected one
and with the bath (and, on rigid water at 2 fs, with the equipartition kinetic energy:
tests/mindsponge/test_thermostats.py).
"""

import dataclasses
import math

import torch

from common import checks, units
from common.deprecation import warn_deprecated
from common.errors import ArgumentTypeError, ConfigurationError
from mindsponge.context import DynamicsContext

__all__ = ["Integrator", "LangevinMiddle", "MultipleTimeStep", "VelocityVerlet"]


def _check_positive(value, name, owner):
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{owner}: {name} must be a positive number, got {value!r}")
    return float(value)


def _inverse_masses(masses, dtype):
    masses = masses.to(dtype)
    massive = masses > 0
    return torch.where(massive, 1.0 / torch.where(massive, masses, torch.ones_like(masses)), 0.0)[:, None]


class _PerMasses:
    """Values derived from the masses, computed once per masses tensor (a step reuses them).

    ``get(masses, dtype, key, make)`` returns ``make(inverse)``, ``inverse`` being the (N, 1) inverse
    masses in ``dtype`` (0 for massless particles), cached under ``key`` until another masses tensor,
    an in-place change of it or another dtype comes.
    """

    def __init__(self):
        self._owner = None
        self._values = {}

    def get(self, masses, dtype, key, make):
        owner = (masses, masses._version, dtype)
        if self._owner is None or self._owner[0] is not masses or self._owner[1:] != owner[1:]:
            self._owner = owner
            self._values = {"inverse": _inverse_masses(masses, dtype)}
        if key not in self._values:
            if len(self._values) > 8:  # e.g. a temperature changed at every step: keep few
                self._values = {"inverse": self._values["inverse"]}
            self._values[key] = make(self._values["inverse"])
        return self._values[key]


class Integrator:
    """Base class: a time step ``dt`` (ps) and the :meth:`step` contract of the module docstring."""

    stochastic = False

    def __init__(self, dt):
        self.dt = _check_positive(dt, "dt (ps)", type(self).__name__)
        self._per_masses = _PerMasses()

    def _inverse(self, masses, dtype):
        """(N, 1) inverse masses in ``dtype`` (0 for massless particles), cached per masses tensor."""
        return self._per_masses.get(masses, dtype, "inverse", None)

    def step(self, state, context, *legacy, **legacy_keywords):
        """Advance ``state`` by one step of ``dt``; returns the new :class:`~mindsponge.state.State`.

        Args:
            state: the :class:`~mindsponge.state.State` (with its forces).
            context: the run's :class:`~mindsponge.context.DynamicsContext` (see the module docstring).
                The older arguments ``(force, masses, constraints=None, generator=None)`` still work,
                with a ``DeprecationWarning``.
        """
        if not isinstance(context, DynamicsContext):
            context = self._legacy_context(context, *legacy, **legacy_keywords)
        return self._step(state, context)

    def _legacy_context(self, force, masses, constraints=None, generator=None):
        warn_deprecated(f"{type(self).__name__}.step(state, force, masses, constraints, generator)",
                        f"{type(self).__name__}.step(state, context)")
        return DynamicsContext(masses=masses, degrees_of_freedom=None, dt=self.dt, generator=generator,
                               molecules=None, energy_and_forces=force, potential=None,
                               constraints=constraints)

    def _step(self, state, context):
        raise NotImplementedError

    def _finish(self, state, positions, velocities, energy, forces, generator=None):
        return state.replace(
            positions=positions,
            velocities=velocities,
            step=state.step + 1,
            time=state.time + self.dt,
            forces=forces,
            potential_energy=energy,
            rng_state=state.rng_state if generator is None else generator.get_state(),
        )

    def __repr__(self):
        fields = ", ".join(f"{key}={value!r}" for key, value in vars(self).items() if not key.startswith("_"))
        return f"{type(self).__name__}({fields})"


class VelocityVerlet(Integrator):
    """Velocity Verlet with RATTLE constraints: NVE dynamics, or NVT with a thermostat split around it.

    Args:
        dt: time step, ps.
        thermostat: optional thermostat from :mod:`mindsponge.thermostats` (or anything with
            ``apply(state, context)``), applied for half a step before and after each step.
    """

    def __init__(self, dt, thermostat=None):
        super().__init__(dt)
        if thermostat is not None and not callable(getattr(thermostat, "apply", None)):
            raise ArgumentTypeError(
                f"VelocityVerlet: thermostat must have apply(state, context), got {thermostat!r}")
        self.thermostat = thermostat
        self._half = None  # (context, the same with dt / 2)

    @property
    def stochastic(self):
        """Whether the step draws random numbers (a stochastic thermostat)."""
        return bool(getattr(self.thermostat, "stochastic", False))

    def with_thermostat(self, thermostat):
        """A copy of this integrator with ``thermostat``."""
        return VelocityVerlet(self.dt, thermostat)

    def _half_context(self, context):
        if self._half is None or self._half[0] is not context:
            self._half = (context, dataclasses.replace(context, dt=0.5 * context.dt))
        return self._half[1]

    def _step(self, state, context):
        """One velocity-Verlet step, between two thermostat half steps."""
        if self.thermostat is not None:
            state = self.thermostat.apply(state, self._half_context(context))
        dt, masses, constraints = self.dt, context.masses, context.constraints
        inverse = self._inverse(masses, state.positions.dtype)
        velocities = _kick(state.velocities, state.forces, 0.5 * dt, inverse)
        positions = _drift(state.positions, velocities, dt)
        if constraints is not None:
            positions = constraints.positions(state.positions, positions, masses)
            velocities = (positions - state.positions) / dt
        energy, forces = context.energy_and_forces(positions, state.box)
        forces = forces.to(positions.dtype)
        velocities = _kick(velocities, forces, 0.5 * dt, inverse, out=velocities)
        if constraints is not None:
            velocities = constraints.velocities(positions, velocities, masses)
        state = self._finish(state, positions, velocities, energy, forces)
        if self.thermostat is not None:
            state = self.thermostat.apply(state, self._half_context(context))
        return state


class LangevinMiddle(Integrator):
    """Langevin dynamics by the BAOAB ("middle") scheme of OpenMM's LangevinMiddleIntegrator.

    Args:
        dt: time step, ps.
        temperature: heat-bath temperature, K.
        friction: collision rate gamma, 1/ps.
    """

    stochastic = True

    def __init__(self, dt, temperature, friction):
        super().__init__(dt)
        self.temperature = _check_positive(temperature, "temperature (K)", "LangevinMiddle")
        self.friction = _check_positive(friction, "friction (1/ps)", "LangevinMiddle")

    def _step(self, state, context):
        """One BAOAB step.

        Raises:
            ValueError: without a generator or without ``state.rng_state``.
        """
        force, masses = context.energy_and_forces, context.masses
        constraints, generator = context.constraints, context.generator
        if generator is None or state.rng_state is None:
            raise ConfigurationError("LangevinMiddle.step needs a torch.Generator and a state with rng_state")
        generator.set_state(state.rng_state)
        dt = self.dt
        dtype = state.positions.dtype
        inverse = self._inverse(masses, dtype)
        velocities = _kick(state.velocities, state.forces, dt, inverse)
        if constraints is not None:
            velocities = constraints.velocities(state.positions, velocities, masses)
        positions = _drift(state.positions, velocities, 0.5 * dt)
        decay, thermal = self._ornstein_uhlenbeck(dt)
        # the noise's scale thermal * sqrt(1 / m) per atom is computed once per masses tensor
        scale = self._per_masses.get(
            masses, dtype, ("noise", thermal), lambda inverse: thermal * torch.sqrt(inverse)
        )
        # the Gaussians are drawn in float32 whatever the dtype: on CPU torch draws float64 ones about 5x
        # slower (1.3 ms against 0.25 for 24,000 atoms, measured), and the 24-bit resolution of a unit
        # Gaussian is far below anything the thermal noise resolves
        noise = torch.randn(
            velocities.shape, generator=generator, dtype=torch.float32, device=velocities.device
        ).to(dtype)
        if _shares_memory(velocities, state.velocities):  # updated in place below: never the input state's
            velocities = velocities.clone()
        velocities.mul_(decay).add_(noise.mul_(scale))  # decay * v + (thermal * sqrt(1 / m)) * noise
        drifted = _drift(positions, velocities, 0.5 * dt, out=positions)
        if constraints is not None:
            constrained = constraints.positions(state.positions, drifted, masses)
            # the position correction spread over the whole step (the unconstrained limit is
            # leapfrog, v = (x_new - x) / dt), as OpenMM does: dividing by dt / 2 would double the
            # centripetal correction of rotating molecules and heat the system. What is left along
            # the constraints is then removed by projecting the velocities (RATTLE), so that the
            # kinetic energy is that of the constrained degrees of freedom (OpenMM leaves it to the
            # next step's constrained kick: the same positions, a higher reported temperature).
            spare = None if _shares_memory(constrained, drifted) else drifted  # reused as a buffer
            velocities.add_(torch.sub(constrained, drifted, out=spare).div_(dt))
            positions = constrained
            velocities = constraints.velocities(positions, velocities, masses)
        else:
            positions = drifted
        energy, forces = force(positions, state.box)
        return self._finish(state, positions, velocities, energy, forces.to(dtype), generator)

    def _ornstein_uhlenbeck(self, dt):
        """``(decay, thermal)`` of the O step: ``v <- decay v + thermal sqrt(1 / m) noise``."""
        decay = math.exp(-self.friction * dt)
        return decay, math.sqrt((1.0 - decay * decay) * units.BOLTZMANN_MD * self.temperature)


def _kick(velocities, forces, step, inverse, out=None):
    """``velocities + step * forces * inverse``, the same operations in the same order, into ``out``
    if given (one temporary instead of three)."""
    kick = torch.mul(forces, step)
    same_dtype = kick.dtype == torch.promote_types(kick.dtype, inverse.dtype)
    kick = kick.mul_(inverse) if same_dtype else kick * inverse
    return torch.add(velocities, kick, out=out)


def _drift(positions, velocities, step, out=None):
    """``positions + step * velocities`` (a multiplication and an addition, not a fused
    multiply-add, so the result is the same as the plain expression), into ``out`` if given."""
    return torch.add(positions, torch.mul(velocities, step), out=out)


def _shares_memory(tensor, other):
    return tensor.untyped_storage().data_ptr() == other.untyped_storage().data_ptr()


class MultipleTimeStep(Integrator):
    """Multiple time stepping (r-RESPA, Tuckerman, Berne & Martyna 1992): fast terms every inner step.

    The force field splits into a ``fast`` part (bonds, angles: cheap and stiff), integrated by
    velocity Verlet with the inner step ``dt / inner_steps``, and the rest (non-bonded:
    expensive and soft), whose forces kick the velocities by half the outer step ``dt`` before
    and after the inner steps. The slow forces are the total forces minus the fast ones, so
    the force field is evaluated once per outer step and the fast part ``inner_steps + 1`` times.

    Args:
        dt: outer time step, ps.
        inner_steps: number of inner steps per outer step.
        fast: module ``(positions, box) -> energy`` of the fast terms (e.g. a
            :class:`~mindsponge.forcefield.ForceField` of the bonded terms), in the dtype of the
            state.
    """

    def __init__(self, dt, inner_steps, fast):
        super().__init__(dt)
        checks.positive_int(inner_steps, "MultipleTimeStep: inner_steps")
        if not callable(fast):
            raise ArgumentTypeError(
                f"MultipleTimeStep: fast must be callable as fast(positions, box), got {fast!r}")
        self.inner_steps = inner_steps
        self.fast = fast

    def _fast_forces(self, positions, box):
        from mindsponge.forcefield.base import energy_and_forces

        return energy_and_forces(self.fast, positions, box)[1].to(positions.dtype)

    def _step(self, state, context):
        """One outer step."""
        force, masses, constraints = context.energy_and_forces, context.masses, context.constraints
        dt, inner = self.dt, self.dt / self.inner_steps
        inverse = self._inverse(masses, state.positions.dtype)
        fast = self._fast_forces(state.positions, state.box)
        velocities = state.velocities + 0.5 * dt * (state.forces - fast) * inverse
        positions = state.positions
        for _ in range(self.inner_steps):
            velocities = velocities + 0.5 * inner * fast * inverse
            moved = positions + inner * velocities
            if constraints is not None:
                moved = constraints.positions(positions, moved, masses)
                velocities = (moved - positions) / inner
            positions = moved
            fast = self._fast_forces(positions, state.box)
            velocities = velocities + 0.5 * inner * fast * inverse
            if constraints is not None:
                velocities = constraints.velocities(positions, velocities, masses)
        energy, forces = force(positions, state.box)
        forces = forces.to(positions.dtype)
        velocities = velocities + 0.5 * dt * (forces - fast) * inverse
        if constraints is not None:
            velocities = constraints.velocities(positions, velocities, masses)
        return self._finish(state, positions, velocities, energy, forces)

    def __repr__(self):
        fast = type(self.fast).__name__
        return f"MultipleTimeStep(dt={self.dt!r}, inner_steps={self.inner_steps!r}, fast={fast})"
