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

__all__ = ["MonteCarloBarostat"]


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
            masses = simulation.masses.to(dtype)
            totals = masses.new_zeros(n_molecules).index_add(0, groups, masses)
            totals = torch.where(totals > 0, totals, torch.ones_like(totals))
            centers = state.positions.new_zeros((n_molecules, 3)).index_add(
                0, groups, masses[:, None] * state.positions
            )
            centers = centers / totals[:, None]
            positions = state.positions + (scale - 1) * centers[groups]
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
