"""``mindsponge run`` with a ``[replicas]`` table: temperature replica exchange of the configured system.

Every replica runs ``steps`` steps in all, in rounds of ``steps_per_round`` with exchanges between them
(:class:`mindsponge.replica_exchange.ReplicaExchange`). The output directory holds

- ``replicas.chk``: the sampler after the last completed round; ``--resume`` continues from it;
- ``replicas.csv``: one row per round: ``round``, ``time`` (ps per replica), the state of every replica
  (``state0``, ``state1``...) and the reduced potential of every replica in its state (``u0``, ``u1``...);
- ``exchange.csv``: for every pair of neighbouring temperatures, the swaps attempted and accepted and the
  acceptance; then the round trips of every replica and the MBAR free energy of every state (kT, with its
  uncertainty).

The configured ``[integrator]`` (and ``[thermostat]``) is copied at each temperature. The system is
minimised once (``minimize = true``) before the replicas start from it with velocities at their own
temperatures.
"""

from __future__ import annotations

import csv

import numpy as np

__all__ = ["run"]


def run(config, system, forcefield, integrator, thermostat, precision, resume, progress):
    """Run the replica exchange of ``config`` (a :class:`mindsponge.cli.RunConfig` with ``replicas``).

    Returns:
        the :class:`~mindsponge.replica_exchange.ReplicaExchange`.
    """
    import mindsponge as ms
    from mindsponge import replica_exchange as rex

    settings, output = config.replicas, config.output
    output.directory.mkdir(parents=True, exist_ok=True)
    temperatures = settings.temperatures or rex.geometric_temperatures(
        settings.low, settings.high, settings.count
    )
    if thermostat is not None:
        integrator = integrator.with_thermostat(thermostat)
    forcefield.barostat = None  # constant volume (a barostat of an OpenMM System is refused by the config)
    checkpoint = output.directory / "replicas.chk"
    if not resume and checkpoint.exists():
        checkpoint.unlink()  # a new run
    starts = None
    if config.minimize and not resume:
        simulation = ms.Simulation(
            system,
            forcefield,
            integrator,
            constraints=config.constraints,
            precision=precision,
            progress=progress,
        )
        simulation.minimize(tolerance=config.minimize_tolerance)
        starts = simulation.state.positions.expand(len(temperatures), -1, -1)
    sampler = rex.ReplicaExchange(
        system,
        forcefield,
        [rex.ThermodynamicState(temperature) for temperature in temperatures],
        integrator,
        settings.steps_per_round,
        exchange=settings.exchange,
        starts=starts,
        constraints=config.constraints,
        precision=precision,
        seed=config.seed,
        checkpoint=checkpoint,
        workers=settings.workers,
        scheduler=settings.scheduler,
        progress=progress,
    )
    if resume:
        sampler.load_checkpoint(checkpoint)
    rounds = config.steps // settings.steps_per_round
    sampler.run(max(rounds - sampler.rounds_done, 0))
    _write_tables(sampler, output.directory, integrator.dt)
    return sampler


def _write_tables(sampler, directory, dt):
    """``replicas.csv`` and ``exchange.csv`` (see the module docstring)."""
    record = sampler.record
    count = record.n_states
    states = record.state_trajectory()
    reduced = np.asarray(record.reduced_potentials).reshape(-1, count, count)
    with open(directory / "replicas.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["round", "time", *(f"state{r}" for r in range(count)), *(f"u{r}" for r in range(count))]
        )
        for index, row in enumerate(states):
            before = states[index - 1] if index else np.arange(count)  # the state each replica ran in
            energies = reduced[index][np.arange(count), before]
            writer.writerow(
                [
                    index + 1,
                    f"{(index + 1) * sampler.steps_per_round * dt:.6f}",
                    *row.tolist(),
                    *(f"{value:.10g}" for value in energies),
                ]
            )
    acceptance = record.acceptance()
    trips = record.round_trips()
    with open(directory / "exchange.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["pair", "temperatures", "attempted", "accepted", "acceptance"])
        for state in range(count - 1):
            writer.writerow(
                [
                    f"{state}-{state + 1}",
                    f"{record.temperatures[state]:g}-{record.temperatures[state + 1]:g}",
                    record.attempted[state, state + 1],
                    record.accepted[state, state + 1],
                    f"{acceptance[state, state + 1]:.4f}",
                ]
            )
        writer.writerow([])
        writer.writerow(["replica", "round_trips"])
        for replica, value in enumerate(trips):
            writer.writerow([replica, value])
        if len(states) >= 4:
            free, error = record.free_energies(discard=len(states) // 10)
            writer.writerow([])
            writer.writerow(["state", "temperature", "free_energy_kT", "uncertainty_kT"])
            for state in range(count):
                writer.writerow(
                    [state, f"{record.temperatures[state]:g}", f"{free[state]:.6f}", f"{error[state]:.6f}"]
                )
