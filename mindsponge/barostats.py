"""Barostats (NPT).

:class:`MonteCarloBarostat` is the isotropic Monte Carlo barostat of OpenMM (Chow & Ferguson,
Comput. Phys. Commun. 91, 283 (1995); Aqvist et al., Chem. Phys. Lett. 384, 288 (2004)):
every ``frequency`` steps the box volume is changed by a random ``dV`` in
``[-s, s]``, the molecules' centres of mass are scaled with the box (molecules move rigidly,
so constraints stay satisfied), and the move is accepted with the Metropolis probability of

    w = dU + P dV - N_mol k T ln(V' / V),

where ``N_mol`` is the number of molecules. The step ``s`` starts at 1% of the volume and adapts
every 10 attempts towards an acceptance rate between 25% and 75%, as OpenMM does. Velocities
are not changed. The barostat's state (step size, counters) lives in ``state.extras``.

Units: bar, K, nm^3, kJ/mol.
"""

import math

import torch

from common import units

__all__ = ["CRescale", "MonteCarloBarostat"]


def _scale_molecules(simulation, positions, scale):
    """Positions with every molecule's centre of mass scaled by ``scale`` (molecules move rigidly)."""
    groups = simulation.molecules
    masses = simulation.masses.to(positions.dtype)
    n_molecules = int(groups.max()) + 1
    totals = masses.new_zeros(n_molecules).index_add(0, groups, masses)
    totals = torch.where(totals > 0, totals, torch.ones_like(totals))
    centers = positions.new_zeros((n_molecules, 3)).index_add(0, groups, masses[:, None] * positions)
    return positions + (scale - 1) * (centers / totals[:, None])[groups]


class MonteCarloBarostat:
    """Isotropic Monte Carlo barostat.

    Args:
        pressure: external pressure, bar.
        temperature: temperature of the ensemble, K (the thermostat's).
        frequency: attempt a volume move every this many steps.

    Raises:
        ValueError: a non-positive temperature or frequency, or a non-finite pressure.
    """

    def __init__(self, pressure, temperature, frequency=25):
        if not math.isfinite(pressure):
            raise ValueError(f"MonteCarloBarostat: pressure must be a finite number of bar, got {pressure!r}")
        if not temperature > 0:
            raise ValueError(f"MonteCarloBarostat: temperature must be positive (K), got {temperature!r}")
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency <= 0:
            raise ValueError(
                f"MonteCarloBarostat: frequency must be a positive int (steps), got {frequency!r}"
            )
        self.pressure = float(pressure)
        self.temperature = float(temperature)
        self.frequency = frequency

    def __repr__(self):
        return (
            f"MonteCarloBarostat(pressure={self.pressure!r}, temperature={self.temperature!r}, "
            f"frequency={self.frequency!r})"
        )

    def apply(self, simulation, state):
        """Attempt one volume move; returns the new (or the unchanged) state."""
        generator = simulation.generator
        generator.set_state(state.rng_state)
        dtype, device = state.positions.dtype, state.positions.device
        volume = torch.linalg.det(state.box).abs()
        extras = dict(state.extras)
        step_size = extras.get("barostat_volume_step", 0.01 * volume)
        attempted = extras.get("barostat_attempted", torch.zeros((), dtype=torch.long, device=device))
        accepted = extras.get("barostat_accepted", torch.zeros((), dtype=torch.long, device=device))
        uniforms = torch.rand(2, generator=generator, dtype=dtype, device=device)
        delta = step_size * 2 * (uniforms[0] - 0.5)
        new_volume = volume + delta
        groups = simulation.molecules
        n_molecules = int(groups.max()) + 1
        thermal = units.BOLTZMANN_MD * self.temperature
        moved = state
        if float(new_volume) > 0:
            scale = (new_volume / volume) ** (1.0 / 3.0)
            positions = _scale_molecules(simulation, state.positions, scale)
            box = state.box * scale
            energy, forces = simulation.force(positions, box)
            work = (
                energy
                - state.potential_energy
                + self.pressure * units.BAR_NM3_TO_KJ_PER_MOL * delta
                - n_molecules * thermal * torch.log(new_volume / volume)
            )
            if float(work) <= 0 or float(uniforms[1]) < math.exp(-float(work) / thermal):
                moved = state.replace(positions=positions, box=box, forces=forces, potential_energy=energy)
                accepted = accepted + 1
        attempted = attempted + 1
        if int(attempted) >= 10:
            rate = int(accepted) / int(attempted)
            if rate < 0.25:
                step_size = step_size / 1.1
            elif rate > 0.75:
                step_size = torch.minimum(step_size * 1.1, 0.3 * volume)
            attempted, accepted = attempted * 0, accepted * 0
        extras.update(
            barostat_volume_step=step_size, barostat_attempted=attempted, barostat_accepted=accepted
        )
        return moved.replace(extras=extras, rng_state=generator.get_state())


class CRescale:
    """Stochastic cell rescaling, isotropic (Bernetti & Bussi, J. Chem. Phys. 153, 114107 (2020)).

    Every ``frequency`` steps the logarithm of the volume takes an Euler-Maruyama step of

        d(ln V) = -(beta_T / tau_p) (P0 - P - k T / V) dt + sqrt(2 k T beta_T / (V tau_p)) dW,

    with ``P`` the instantaneous molecular-virial pressure (:func:`mindsponge.thermo.pressure`);
    the molecules' centres of mass and the box are scaled by ``mu = exp(d(ln V) / 3)`` and the
    velocities by ``1 / mu``. Samples the isothermal-isobaric ensemble (with a thermostat).

    Args:
        pressure: target pressure, bar.
        temperature: temperature, K.
        compressibility: isothermal compressibility beta_T, 1/bar (4.5e-5 for water).
        time_constant: relaxation time tau_p, ps.
        frequency: apply every this many steps.
    """

    def __init__(self, pressure, temperature, compressibility=4.5e-5, time_constant=1.0, frequency=10):
        if not math.isfinite(pressure):
            raise ValueError(f"CRescale: pressure must be a finite number of bar, got {pressure!r}")
        for name, value in (
            ("temperature (K)", temperature),
            ("compressibility (1/bar)", compressibility),
            ("time_constant (ps)", time_constant),
        ):
            if not value > 0:
                raise ValueError(f"CRescale: {name} must be positive, got {value!r}")
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency <= 0:
            raise ValueError(f"CRescale: frequency must be a positive int (steps), got {frequency!r}")
        self.pressure, self.temperature = float(pressure), float(temperature)
        self.compressibility, self.time_constant = float(compressibility), float(time_constant)
        self.frequency = frequency

    def __repr__(self):
        return (
            f"CRescale(pressure={self.pressure!r}, temperature={self.temperature!r}, "
            f"compressibility={self.compressibility!r}, time_constant={self.time_constant!r}, "
            f"frequency={self.frequency!r})"
        )

    def apply(self, simulation, state):
        """Rescale the box, positions and velocities of ``state`` by one stochastic step."""
        from mindsponge import thermo

        generator = simulation.generator
        generator.set_state(state.rng_state)
        dtype, device = state.positions.dtype, state.positions.device
        current = thermo.pressure(
            simulation.potential,
            state.positions,
            state.velocities,
            simulation.masses,
            state.box,
            simulation.molecules,
        )
        volume = torch.linalg.det(state.box).abs()
        thermal_pressure = units.BOLTZMANN_MD * self.temperature / volume * units.KJ_PER_MOL_NM3_TO_BAR
        interval = simulation.integrator.dt * self.frequency
        rate = self.compressibility / self.time_constant
        noise = torch.randn((), generator=generator, dtype=dtype, device=device)
        log_volume_change = (
            -rate * (self.pressure - current - thermal_pressure) * interval
            + torch.sqrt(2 * thermal_pressure * rate * interval) * noise
        )
        scale = torch.exp(log_volume_change / 3)
        positions = _scale_molecules(simulation, state.positions, scale)
        box = state.box * scale
        energy, forces = simulation.force(positions, box)
        return state.replace(
            positions=positions,
            velocities=state.velocities / scale,
            box=box,
            forces=forces,
            potential_energy=energy,
            rng_state=generator.get_state(),
        )
