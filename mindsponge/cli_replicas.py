"""``mindsponge run`` with a ``[replicas]`` table: temperature replica exchange of the configured system.

Every replica runs ``steps`` steps in all, in rounds of ``steps_per_round`` with exchanges between them
(:class:`mindsponge.replica_exchange.ReplicaExchange`); ``steps`` must be a whole number of rounds, one or
more (:meth:`ReplicasConfig.rounds`). The output directory holds

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
from dataclasses import dataclass
from typing import Literal

import numpy as np

from common import checks
from common.errors import ConfigurationError

__all__ = ["ReplicasConfig", "run", "OUTPUT_FILES"]

#: the files a replica exchange writes into the output folder
OUTPUT_FILES = ("replicas.chk", "replicas.csv", "exchange.csv")


@dataclass
class ReplicasConfig:
    """``[replicas]``: temperature replica exchange (:class:`mindsponge.replica_exchange.ReplicaExchange`).

    Attributes:
        temperatures: the temperatures (K), increasing; or give ``low``, ``high`` and ``count``.
        low, high: the lowest and highest temperature (K) of a geometric ladder of ``count``.
        count: the number of replicas of that ladder.
        steps_per_round: MD steps between exchanges.
        exchange: ``"neighbors"`` (neighbouring temperatures) or ``"all"`` (Gibbs sampling).
        workers: local processes running replicas (0: in this process).
        scheduler: a Dask scheduler address (``"tcp://host:8786"``): replicas run on that cluster.
    """

    temperatures: list[float] | None = None
    low: float | None = None
    high: float | None = None
    count: int | None = None
    steps_per_round: int = 500
    exchange: Literal["neighbors", "all"] = "neighbors"
    workers: int = 0
    scheduler: str | None = None

    def __post_init__(self):
        ladder = (self.low, self.high, self.count)
        if (self.temperatures is None) == all(value is None for value in ladder):
            raise ConfigurationError("give either temperatures or low, high and count")
        if self.temperatures is None and any(value is None for value in ladder):
            raise ConfigurationError("a geometric ladder needs all of low, high and count")
        if self.temperatures is not None:
            pairs = zip(self.temperatures, self.temperatures[1:])
            if len(self.temperatures) < 2 or any(higher <= lower for lower, higher in pairs) or not (
                    self.temperatures[0] > 0):
                raise ConfigurationError(
                    f"temperatures must be two or more positive, increasing values in K, "
                                 f"got {self.temperatures}")
        else:
            checks.positive(self.low, "low (K)")
            if not self.high > self.low:
                raise ConfigurationError(
                    f"high must be above the lowest temperature ({self.low} K), got {self.high}")
            if self.count < 2:
                raise ConfigurationError(f"count must be 2 or more replicas, got {self.count}")
        checks.positive_int(self.steps_per_round, "steps_per_round")
        checks.non_negative_int(self.workers, "workers")

    def rounds(self, steps: int) -> int:
        """The rounds of ``steps`` MD steps per replica (the run's ``steps``).

        Raises:
            ConfigurationError: ``steps`` is not a whole number of rounds, one or more; the message names
                ``steps`` alone, so that a check in the run's configuration reports that key's line.
        """
        if steps < self.steps_per_round or steps % self.steps_per_round:
            raise ConfigurationError(
                f"steps must be a whole number (one or more) of rounds of steps_per_round = "
                f"{self.steps_per_round} MD steps, got {steps}: a replica exchange runs whole rounds, so "
                f"give {max(1, round(steps / self.steps_per_round)) * self.steps_per_round}, or change "
                "steps_per_round")
        return steps // self.steps_per_round


def run(config, files, system, forcefield, integrator, thermostat, barostat, precision, resume, progress):
    """Run the replica exchange of ``config`` (a :class:`mindsponge.cli.RunConfig` with ``replicas``).

    Args:
        files: :data:`OUTPUT_FILES` by name, resolved inside the output folder
            (:meth:`common.output_paths.OutputFolder.file`).

    Returns:
        the :class:`~mindsponge.replica_exchange.ReplicaExchange`.
    """
    import mindsponge as ms
    from mindsponge import replica_exchange as rex

    settings = config.replicas
    rounds = settings.rounds(config.steps)
    config.output.directory.mkdir(parents=True, exist_ok=True)
    temperatures = settings.temperatures or rex.geometric_temperatures(
        settings.low, settings.high, settings.count
    )
    if thermostat is not None:
        integrator = integrator.with_thermostat(thermostat)
    forcefield.barostat = None  # the [barostat] table's, or constant volume
    checkpoint = files["replicas.chk"]
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
        barostat=barostat,
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
    sampler.run(max(rounds - sampler.rounds_done, 0))
    _write_tables(sampler, files, integrator.dt)
    return sampler


def _write_tables(sampler, files, dt):
    """``replicas.csv`` and ``exchange.csv`` (see the module docstring)."""
    record = sampler.record
    count = record.n_states
    states = record.state_trajectory()
    reduced = np.asarray(record.reduced_potentials).reshape(-1, count, count)
    with open(files["replicas.csv"], "w", newline="") as handle:
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
    with open(files["exchange.csv"], "w", newline="") as handle:
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
