"""Barostats (NPT).

A barostat has ``every`` (steps) and ``apply(state, context) -> state``; the simulation calls
it, with its :class:`~mindsponge.context.DynamicsContext`, after every step whose number is a
multiple of ``every`` (after the thermostat). ``frequency=`` is the deprecated name of ``every=``.
Every barostat scales the molecules' centres of mass with the box (molecules move rigidly, so
constraints stay satisfied) and needs a periodic system (:class:`~mindsponge.simulation.Simulation`
refuses a barostat when the system's box is ``None``). Its state lives in ``state.extras`` and
goes into checkpoints.

- :class:`MonteCarloBarostat`: OpenMM's isotropic Monte Carlo barostat (Chow & Ferguson,
  Comput. Phys. Commun. 91, 283 (1995); Aqvist et al., Chem. Phys. Lett. 384, 288 (2004)).
  Every ``every`` steps the box volume is changed by a random ``dV`` in ``[-s, s]`` and the
  move is accepted with the Metropolis probability of

      w = dU + P dV - N_mol k T ln(V' / V),

  where ``N_mol`` is the number of molecules. The step ``s`` starts at 1% of the volume and
  adapts every 10 attempts towards an acceptance rate between 25% and 75% (capped at 30% of
  the volume), as OpenMM does. Velocities are not changed. Samples the isothermal-isobaric
  ensemble exactly (with a thermostat at the same temperature).
- :class:`MonteCarloAnisotropicBarostat`: OpenMM's ``MonteCarloAnisotropicBarostat``: each
  attempt picks one of the enabled axes at random and changes the volume by stretching the
  box along that axis only, with that axis's pressure in ``w``; each axis has its own step size.
- :class:`CRescale`: stochastic cell rescaling (Bernetti & Bussi 2020), isotropic; samples the
  isothermal-isobaric ensemble, with smooth volume dynamics.
- :class:`BerendsenBarostat`: weak coupling (Berendsen et al., J. Chem. Phys. 81, 3684 (1984)), isotropic.
  Relaxes the pressure to its target exponentially but suppresses the volume fluctuations: it
  does **not** sample the isothermal-isobaric ensemble (use it to equilibrate, then switch).

The pressure that :class:`CRescale` and :class:`BerendsenBarostat` couple to is the molecular-virial
pressure of :func:`mindsponge.thermo.pressure`, which is exact with rigid molecules and
constraints (constraint forces act inside molecules and drop out of the molecular virial).

Units: bar, K, ps, nm^3, kJ/mol, 1/bar.
"""

import math

import torch

from common import checks, units
from common.deprecation import moved_attributes, renamed_arguments, warn_deprecated
from common.errors import ConfigurationError, NonFiniteResultError
from mindsponge import thermo
from mindsponge.integrators import _check_positive

__all__ = ["BerendsenBarostat", "CRescale", "MonteCarloAnisotropicBarostat", "MonteCarloBarostat"]


def _check_pressure(pressure, owner):
    if isinstance(pressure, bool) or not isinstance(pressure, int | float) or not math.isfinite(pressure):
        raise ConfigurationError(f"{owner}: pressure must be a finite number of bar, got {pressure!r}")
    return float(pressure)


def _scale_molecules(context, positions, scale):
    """Positions with every molecule's centre of mass scaled by ``scale`` (a number or (3,) per axis)."""
    groups = context.molecules
    masses = context.masses.to(positions.dtype)
    n_molecules = int(groups.max()) + 1
    totals = masses.new_zeros(n_molecules).index_add(0, groups, masses)
    totals = torch.where(totals > 0, totals, torch.ones_like(totals))
    centers = positions.new_zeros((n_molecules, 3)).index_add(0, groups, masses[:, None] * positions)
    return positions + (scale - 1) * (centers / totals[:, None])[groups]


def _current_pressure(context, state):
    """Molecular-virial pressure of ``state``, bar (() tensor)."""
    return thermo.pressure(
        context.potential,
        state.positions,
        state.velocities,
        context.masses,
        state.box,
        context.molecules,
    )


class _Barostat:
    """What every barostat shares: its ``repr`` and the deprecated ``frequency`` attribute."""

    def __repr__(self):
        public = {key: value for key, value in vars(self).items() if not key.startswith("_")}
        return f"{type(self).__name__}({', '.join(f'{key}={value!r}' for key, value in public.items())})"

    @property
    def frequency(self):
        """Deprecated: use ``every``."""
        warn_deprecated(f"{type(self).__name__}.frequency", f"{type(self).__name__}.every")
        return self.every


class MonteCarloBarostat(_Barostat):
    """Isotropic Monte Carlo barostat (see the module docstring).

    Args:
        pressure: external pressure, bar.
        temperature: temperature of the ensemble, K (the thermostat's).
        every: attempt a volume move every this many steps (``frequency=``: deprecated name).

    Raises:
        ValueError: a non-positive temperature or ``every``, or a non-finite pressure.
    """

    @renamed_arguments(frequency="every")
    def __init__(self, pressure, temperature, every=25):
        owner = type(self).__name__
        self.pressure = _check_pressure(pressure, owner)
        self.temperature = _check_positive(temperature, "temperature (K)", owner)
        self.every = checks.positive_int(every, f"{owner}: every (steps)")

    # The isotropic barostat has one kind of move; the anisotropic one has one per axis.
    def _n_moves(self):
        return 1

    def _choose_move(self, generator, device):
        return 0

    def _move_pressure(self, move):
        return self.pressure

    def _axis_scales(self, volume_ratio, move):
        """Factors (3,) by which the box and the molecules' centres are stretched along x, y, z."""
        return (volume_ratio ** (1.0 / 3.0)).expand(3)

    def apply(self, state, context):
        """Attempt one volume move; returns the new (or the unchanged) state."""
        generator = context.generator
        generator.set_state(state.rng_state)
        dtype, device = state.positions.dtype, state.positions.device
        volume = torch.linalg.det(state.box).abs()
        extras = dict(state.extras)
        n_moves = self._n_moves()
        step_sizes = extras.get("barostat_volume_step", 0.01 * volume.expand(n_moves)).clone()
        counts = torch.zeros(n_moves, dtype=torch.long, device=device)
        attempted = extras.get("barostat_attempted", counts).clone()
        accepted = extras.get("barostat_accepted", counts).clone()
        move = self._choose_move(generator, device)
        uniforms = torch.rand(2, generator=generator, dtype=dtype, device=device)
        delta = step_sizes[move] * 2 * (uniforms[0] - 0.5)
        new_volume = volume + delta
        n_molecules = int(context.molecules.max()) + 1
        thermal = units.BOLTZMANN_MD * self.temperature
        moved = state
        if float(new_volume) > 0:
            scales = self._axis_scales(new_volume / volume, move)
            positions = _scale_molecules(context, state.positions, scales)
            box = state.box * scales  # every box vector stretched component-wise: V' = V prod(scales)
            energy, forces = context.energy_and_forces(positions, box)
            work = (
                energy
                - state.potential_energy
                + self._move_pressure(move) * units.BAR_NM3_TO_KJ_PER_MOL * delta
                - n_molecules * thermal * torch.log(new_volume / volume)
            )
            if float(work) <= 0 or float(uniforms[1]) < math.exp(-float(work) / thermal):
                moved = state.replace(positions=positions, box=box, forces=forces, potential_energy=energy)
                accepted[move] += 1
        attempted[move] += 1
        if int(attempted[move]) >= 10:
            rate = int(accepted[move]) / int(attempted[move])
            if rate < 0.25:
                step_sizes[move] = step_sizes[move] / 1.1
            elif rate > 0.75:
                step_sizes[move] = torch.minimum(step_sizes[move] * 1.1, 0.3 * volume)
            attempted[move], accepted[move] = 0, 0
        extras.update(
            barostat_volume_step=step_sizes, barostat_attempted=attempted, barostat_accepted=accepted
        )
        return moved.replace(extras=extras, rng_state=generator.get_state())


class MonteCarloAnisotropicBarostat(MonteCarloBarostat):
    """Anisotropic Monte Carlo barostat (OpenMM's ``MonteCarloAnisotropicBarostat``).

    Each attempt picks one enabled axis uniformly at random and stretches the box and the
    molecules' centres along that axis only (``x -> s x`` for the x axis, applied to the x
    components of all three box vectors, so a triclinic box in reduced form stays reduced; for
    an orthorhombic box this is exactly OpenMM's move), accepted with ``w`` of the module
    docstring using that axis's pressure. Step sizes adapt per axis. Axes that are not enabled
    keep their length exactly.

    Args:
        pressure: external pressure, bar: one number for all axes, or three ``(P_x, P_y, P_z)``.
        temperature: temperature of the ensemble, K.
        every: attempt a move every this many steps (``frequency=``: deprecated name).
        scale_x, scale_y, scale_z: which axes may change.

    Raises:
        ValueError: a bad pressure (not finite, or not one or three numbers), temperature or
            ``every``, or no axis enabled.
    """

    @renamed_arguments(frequency="every")
    def __init__(self, pressure, temperature, every=25, scale_x=True, scale_y=True, scale_z=True):
        owner = type(self).__name__
        pressures = tuple(pressure) if isinstance(pressure, list | tuple) else (pressure,) * 3
        if len(pressures) != 3:
            raise ConfigurationError(
                f"{owner}: pressure must be a number or three numbers (P_x, P_y, P_z) in bar, "
                f"got {pressure!r}"
            )
        super().__init__(pressures[0], temperature, every)
        self.pressure = tuple(_check_pressure(value, owner) for value in pressures)
        self.scale_x, self.scale_y, self.scale_z = bool(scale_x), bool(scale_y), bool(scale_z)
        self._axes = [axis for axis, enabled in enumerate((scale_x, scale_y, scale_z)) if enabled]
        if not self._axes:
            raise ConfigurationError(f"{owner}: at least one of scale_x, scale_y, scale_z must be True")

    def _n_moves(self):
        return 3

    def _choose_move(self, generator, device):
        pick = torch.randint(len(self._axes), (), generator=generator, device=device)
        return self._axes[int(pick)]

    def _move_pressure(self, move):
        return self.pressure[move]

    def _axis_scales(self, volume_ratio, move):
        scales = torch.ones(3, dtype=volume_ratio.dtype, device=volume_ratio.device)
        scales[move] = volume_ratio
        return scales


class CRescale(_Barostat):
    """Stochastic cell rescaling, isotropic (Bernetti & Bussi, J. Chem. Phys. 153, 114107 (2020)).

    Every ``every`` steps the logarithm of the volume takes an Euler-Maruyama step of

        d(ln V) = -(beta_T / tau_p) (P0 - P - k T / V) dt + sqrt(2 k T beta_T / (V tau_p)) dW,

    with ``P`` the instantaneous molecular-virial pressure (:func:`mindsponge.thermo.pressure`);
    the molecules' centres of mass and the box are scaled by ``mu = exp(d(ln V) / 3)`` and the
    velocities by ``1 / mu``. Samples the isothermal-isobaric ensemble (with a thermostat).

    Args:
        pressure: target pressure, bar.
        temperature: temperature, K.
        compressibility: isothermal compressibility beta_T, 1/bar (4.5e-5 for water).
        time_constant: relaxation time tau_p, ps.
        every: apply every this many steps (``frequency=``: deprecated name).

    Raises:
        ValueError: a non-finite pressure, a non-positive temperature, compressibility,
            time constant or ``every``.
    """

    @renamed_arguments(frequency="every")
    def __init__(self, pressure, temperature, compressibility=4.5e-5, time_constant=1.0, every=10):
        owner = type(self).__name__
        self.pressure = _check_pressure(pressure, owner)
        self.temperature = _check_positive(temperature, "temperature (K)", owner)
        self.compressibility = _check_positive(compressibility, "compressibility (1/bar)", owner)
        self.time_constant = _check_positive(time_constant, "time_constant (ps)", owner)
        self.every = checks.positive_int(every, f"{owner}: every (steps)")

    def apply(self, state, context):
        """Rescale the box, positions and velocities of ``state`` by one stochastic step."""
        generator = context.generator
        generator.set_state(state.rng_state)
        dtype, device = state.positions.dtype, state.positions.device
        current = _current_pressure(context, state)
        volume = torch.linalg.det(state.box).abs()
        thermal_pressure = units.BOLTZMANN_MD * self.temperature / volume * units.KJ_PER_MOL_NM3_TO_BAR
        interval = context.dt * self.every
        rate = self.compressibility / self.time_constant
        noise = torch.randn((), generator=generator, dtype=dtype, device=device)
        log_volume_change = (
            -rate * (self.pressure - current - thermal_pressure) * interval
            + torch.sqrt(2 * thermal_pressure * rate * interval) * noise
        )
        scale = torch.exp(log_volume_change / 3)
        positions = _scale_molecules(context, state.positions, scale)
        box = state.box * scale
        energy, forces = context.energy_and_forces(positions, box)
        return state.replace(
            positions=positions,
            velocities=state.velocities / scale,
            box=box,
            forces=forces,
            potential_energy=energy,
            rng_state=generator.get_state(),
        )


class BerendsenBarostat(_Barostat):
    """Berendsen weak-coupling barostat, isotropic (not isothermal-isobaric; for equilibration).

    Every ``every`` steps the box and the molecules' centres of mass are scaled by

        mu = 1 - beta_T (every dt / tau_p) (P0 - P) / 3

    (GROMACS's form), with ``P`` the instantaneous molecular-virial pressure; velocities are not
    changed. To first order the volume then relaxes as ``dV/dt = -(beta_T / tau_p) (P0 - <P>) V``,
    so the mean pressure reaches ``P0`` with time constant ``tau_p / (beta_T K)`` (``K`` the bulk
    modulus; ``tau_p`` when ``beta_T`` is the true compressibility). The volume fluctuations are
    too small: this does not sample the isothermal-isobaric ensemble.

    Args:
        pressure: target pressure, bar.
        compressibility: isothermal compressibility beta_T, 1/bar (4.5e-5 for water).
        time_constant: coupling time tau_p, ps.
        every: apply every this many steps (``frequency=``: deprecated name).

    Raises:
        ValueError: a non-finite pressure, a non-positive compressibility, time constant or
            ``every``.
        FloatingPointError: (from :meth:`apply`) a pressure so far from the target that the box
            would shrink or grow by more than a factor 2 in one coupling step.
    """

    @renamed_arguments(frequency="every")
    def __init__(self, pressure, compressibility=4.5e-5, time_constant=1.0, every=10):
        owner = type(self).__name__
        self.pressure = _check_pressure(pressure, owner)
        self.compressibility = _check_positive(compressibility, "compressibility (1/bar)", owner)
        self.time_constant = _check_positive(time_constant, "time_constant (ps)", owner)
        self.every = checks.positive_int(every, f"{owner}: every (steps)")

    def apply(self, state, context):
        """Scale the box and positions of ``state`` by one weak-coupling step."""
        current = _current_pressure(context, state)
        interval = context.dt * self.every
        scale = 1 - self.compressibility * interval / self.time_constant * (self.pressure - current) / 3
        if not 0.5 < float(scale) < 2.0:
            raise NonFiniteResultError(
                f"Berendsen barostat: the pressure {float(current):.4g} bar is so far from the target "
                f"{self.pressure:.4g} bar that the box would be scaled by {float(scale):.4g} at step "
                f"{state.step}; raise time_constant or lower compressibility"
            )
        positions = _scale_molecules(context, state.positions, scale)
        box = state.box * scale
        energy, forces = context.energy_and_forces(positions, box)
        return state.replace(positions=positions, box=box, forces=forces, potential_energy=energy)


# ``Berendsen`` was the name of both a thermostat and a barostat
__getattr__ = moved_attributes(__name__, {"Berendsen": "mindsponge.barostats:BerendsenBarostat"})
