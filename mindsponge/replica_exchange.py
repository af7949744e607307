"""Replica exchange: temperature (REMD) and Hamiltonian (HREX) exchange between thermodynamic states.

A family of :class:`ThermodynamicState` (a temperature and a potential each: the same force field at
several temperatures, or umbrella windows, or alchemical states at one temperature) is sampled by as
many replicas. :class:`ReplicaExchange` runs rounds: every replica runs ``steps_per_round`` steps of
MD in its current state (each replica its own :class:`~mindsponge.state.State`, random stream
included), then the reduced potentials ``u[r, k] = beta_k U_k(x_r)`` of every replica in every state
are computed and states are exchanged between replicas:

- ``exchange="neighbors"``: Metropolis swaps between neighbouring states ``(k, k + 1)``, the even
  pairs in even rounds and the odd pairs in odd rounds;
- ``exchange="all"``: Gibbs sampling over all permutations, approximated as openmmtools' ``swap-all``
  does, by ``R^3`` Metropolis swaps of random pairs of replicas.

At constant pressure (``barostat=``, or the force field's: a Monte Carlo or C-rescale barostat), every
replica moves its box in its rounds with a copy of the barostat at its state's temperature, and the
reduced potentials are ``u[r, k] = beta_k (U_k(x_r) + p V_r)``: the exchanges and MBAR sample the
isothermal-isobaric ensemble of every state (openmmtools' ``multistate`` does the same).

A replica that moves to another temperature has its velocities scaled by ``sqrt(T_new / T_old)``. The
roles are openmmtools' ``multistate`` split: states (:class:`ThermodynamicState`), the sampler
(:class:`ReplicaExchange`), what it records (:class:`ExchangeRecord`: the state of every replica after
every round, the reduced-potential matrices, the attempted and accepted swaps, collective-variable
samples) and its analysis (acceptance matrix, round trips, MBAR through pymbar).

Where replicas run: one process by default (``workers=0``), each replica's steps in the compiled step
loop (:mod:`mindsponge.step_loop`), so small systems run at the loop's speed, periodic boxes
included; or on a local process pool (``workers=N``) or a Dask cluster (``scheduler=``) through
:func:`common.parallel.run_jobs`. A replica's round depends only on its state, its thermodynamic state
and the number of steps (neighbour lists are rebuilt at the start of every round, and the compiled
kernels do not depend on the thread count), so the run is the same bit for bit wherever replicas run.
With ``checkpoint=`` the sampler writes everything after every round (atomically); a run that dies,
or loses a worker, continues from the last completed round with :meth:`ReplicaExchange.run` on a new
sampler made with the same arguments.

Example (REMD of alanine dipeptide at 8 temperatures)::

    from mindsponge import replica_exchange as rex
    states = [rex.ThermodynamicState(t) for t in rex.geometric_temperatures(300.0, 500.0, 8)]
    sampler = rex.ReplicaExchange(system, forcefield, states,
                                  ms.integrators.LangevinMiddle(0.002, 300.0, 1.0), steps_per_round=500)
    sampler.run(rounds=200)
    sampler.record.acceptance()          # (K, K) fraction of accepted swaps
    sampler.record.round_trips()         # per replica
    sampler.record.free_energies()       # (Delta f in kT, its uncertainty) from MBAR

Units: K, kJ/mol, ps; reduced potentials in kT.
"""

from __future__ import annotations

import math
import os
import uuid
from dataclasses import dataclass, field

import numpy as np
import torch

from common import checks, io
from common.errors import ConfigurationError, SimulationError
from common.units import BAR_NM3_TO_KJ_PER_MOL, BOLTZMANN_MD
from mindsponge.replica_rounds import RoundSpec, run_round, simulation_of
from mindsponge.state import State

__all__ = ["ExchangeRecord", "ReplicaExchange", "ThermodynamicState", "geometric_temperatures"]

CHECKPOINT_KIND = "mindsponge.ReplicaExchange"
EXCHANGES = ("neighbors", "all")


@dataclass(frozen=True)
class ThermodynamicState:
    """One state of the family.

    Attributes:
        temperature: K.
        potential: the potential of this state, a callable ``(positions, box) -> energy`` (kJ/mol),
            usually a :class:`~mindsponge.forcefield.ForceField` (the base force field plus a restraint,
            for an umbrella window); ``None``: the sampler's force field.
    """

    temperature: float
    potential: object = None

    def __post_init__(self):
        if not (
            isinstance(self.temperature, int | float)
            and math.isfinite(self.temperature)
            and self.temperature > 0
        ):
            raise ConfigurationError(
                f"ThermodynamicState: temperature must be a positive number of K, got {self.temperature!r}"
            )


def geometric_temperatures(low: float, high: float, count: int) -> list[float]:
    """``count`` temperatures from ``low`` to ``high`` (K) in geometric progression (equal acceptance for a
    constant heat capacity)."""
    checks.positive_int(count, "geometric_temperatures: count")
    if not 0 < low < high:
        raise ConfigurationError(f"geometric_temperatures: need 0 < low < high, got {low!r}, {high!r}")
    if count == 1:
        return [float(low)]
    return [float(low * (high / low) ** (index / (count - 1))) for index in range(count)]


@dataclass
class ExchangeRecord:
    """What a replica-exchange run recorded, round by round (``T`` rounds, ``R`` replicas = ``K`` states).

    Attributes:
        temperatures: ``(K,)`` K.
        states: ``(T, R)`` int, the state of every replica after each round's exchanges.
        reduced_potentials: ``(T, R, K)``: ``u[t, r, k] = beta_k U_k(x_r)`` at the end of round ``t``
            (before its exchanges), kT.
        attempted, accepted: ``(K, K)`` int, swaps attempted and accepted between each pair of states.
        samples: per state, the collective-variable values recorded while a replica was in it (``(n, D)``).
    """

    temperatures: np.ndarray
    states: list = field(default_factory=list)
    reduced_potentials: list = field(default_factory=list)
    attempted: np.ndarray | None = None
    accepted: np.ndarray | None = None
    samples: list = field(default_factory=list)

    @property
    def n_states(self) -> int:
        """Number of states ``K``."""
        return len(self.temperatures)

    def state_trajectory(self) -> np.ndarray:
        """``(T, R)`` int: the state of each replica after every round."""
        return np.asarray(self.states, dtype=np.int64).reshape(-1, self.n_states)

    def replica_trajectory(self) -> np.ndarray:
        """``(T, K)`` int: the replica in each state after every round."""
        states = self.state_trajectory()
        replicas = np.empty_like(states)
        for row, assignment in enumerate(states):
            replicas[row, assignment] = np.arange(self.n_states)
        return replicas

    def acceptance(self) -> np.ndarray:
        """``(K, K)``: the fraction of attempted swaps accepted between each pair of states (``nan`` where
        none were attempted)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.attempted > 0, self.accepted / np.maximum(self.attempted, 1), np.nan)

    def round_trips(self) -> np.ndarray:
        """``(R,)`` int: for each replica, the number of trips from the first state to the last and back
        (replica ``r`` starts in state ``r``)."""
        states = np.vstack([np.arange(self.n_states), self.state_trajectory()])
        trips = np.zeros(self.n_states, dtype=np.int64)
        last = self.n_states - 1
        for replica in range(self.n_states):
            target = last  # first reach the last state, then the first
            reached_first = False
            for state in states[:, replica]:
                if not reached_first:
                    reached_first = state == 0
                    continue
                if state == target:
                    if target == 0:
                        trips[replica] += 1
                    target = 0 if target == last else last
        return trips

    def u_kn(self, discard: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(u_kn, N_k)`` for MBAR: the reduced potential of every sample (the configuration in each state
        after every round from ``discard`` on) in every state, ``(K, K T')``, and the samples per state
        ``(K,)``."""
        potentials = np.asarray(self.reduced_potentials, dtype=np.float64)[discard:]  # (T', R, K)
        replicas = self.replica_trajectory()[discard:]  # (T', K)
        rounds = len(potentials)
        # sample n = (state k, round t): the configuration of replica replicas[t, k]
        by_state = potentials[np.arange(rounds)[:, None], replicas]  # (T', K state of origin, K evaluated)
        u_kn = by_state.transpose(2, 1, 0).reshape(self.n_states, -1)
        return u_kn, np.full(self.n_states, rounds, dtype=np.int64)

    def mbar(self, discard: int = 0):
        """A ``pymbar.MBAR`` over all states and samples (see :meth:`u_kn`)."""
        import logging

        import pymbar

        u_kn, counts = self.u_kn(discard)
        quiet = logging.getLogger("pymbar")  # its notices (JAX, timeseries) are not about this analysis
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            return pymbar.MBAR(u_kn, counts)
        finally:
            quiet.setLevel(level)

    def free_energies(
        self, discard: int = 0, uncertainty_method: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(Delta f, d Delta f)``: the reduced free energy of every state relative to the first, kT, and its
        analytic uncertainty (MBAR; ``uncertainty_method="bootstrap"`` needs an MBAR made with
        ``n_bootstraps``)."""
        result = self.mbar(discard).compute_free_energy_differences(uncertainty_method=uncertainty_method)
        return result["Delta_f"][0], result["dDelta_f"][0]


class ReplicaExchange:
    """Replica exchange over a family of thermodynamic states (see the module docstring).

    Args:
        system: the :class:`~mindsponge.system.System` every replica starts from (or give ``starts``).
        forcefield: the potential of states whose ``potential`` is ``None``.
        states: the :class:`ThermodynamicState` family, ordered (neighbours exchange); one replica each.
        integrator: a template: :class:`~mindsponge.integrators.LangevinMiddle`, or
            :class:`~mindsponge.integrators.VelocityVerlet` with a thermostat; each state gets a copy at its
            temperature.
        steps_per_round: MD steps between exchanges.
        exchange: ``"neighbors"`` or ``"all"`` (see the module docstring).
        starts: optional ``(R, N, 3)`` nm: each replica's starting positions (default: the system's).
        barostat: a :class:`~mindsponge.barostats.MonteCarloBarostat` (isotropic or anisotropic at one
            pressure) or :class:`~mindsponge.barostats.CRescale`: sample at constant pressure (each state's
            simulation gets a copy at its temperature). ``None``: the force field's barostat (an OpenMM
            System's), or constant volume.
        constraints, precision, remove_center_of_mass_motion: as :class:`~mindsponge.simulation.Simulation`.
        colvars: collective variables recorded for every replica at the end of every round
            (:attr:`colvar_values`), and every ``sample_every`` steps into ``record.samples`` of the
            state the replica is in.
        sample_every: steps between collective-variable samples within rounds (``None``: only at the
            ends of rounds).
        seed: seeds the replicas' velocities and random streams and the exchanges.
        checkpoint: optional path written after every round; :meth:`run` continues from it when it exists.
        workers: ``0`` (default) runs replicas in this process; ``N`` on ``N`` local processes.
        scheduler: a Dask scheduler address or ``distributed.Client``: replicas on that cluster.
        progress: a progress bar over rounds.

    Raises:
        common.errors.ConfigurationError: fewer than two states, a bad exchange kind, a barostat that does
            not sample the isothermal-isobaric ensemble (Berendsen) or has several pressures, a periodic-box
            barostat on a system without a box, ``starts`` of the wrong shape.
    """

    def __init__(
        self,
        system,
        forcefield,
        states,
        integrator,
        steps_per_round,
        *,
        exchange="neighbors",
        starts=None,
        barostat=None,
        constraints=None,
        precision=None,
        remove_center_of_mass_motion=None,
        colvars=(),
        sample_every=None,
        seed=0,
        checkpoint=None,
        workers=0,
        scheduler=None,
        progress=True,
    ):
        states = tuple(states)
        if len(states) < 2 or not all(isinstance(state, ThermodynamicState) for state in states):
            raise ConfigurationError("ReplicaExchange: states must be two or more ThermodynamicState")
        if exchange not in EXCHANGES:
            raise ConfigurationError(
                f"ReplicaExchange: exchange must be one of {EXCHANGES}, got {exchange!r}"
            )
        if barostat is None:
            barostat = getattr(forcefield, "barostat", None)
        barostat = _checked_barostat(barostat, system)
        self.pressure = None if barostat is None else _pressure(barostat)  # bar
        self.steps_per_round = checks.positive_int(steps_per_round, "ReplicaExchange: steps_per_round")
        if sample_every is not None:
            checks.positive_int(sample_every, "ReplicaExchange: sample_every")
        self.exchange, self.seed = exchange, int(seed)
        self.checkpoint, self.workers, self.scheduler, self.progress = (
            checkpoint,
            workers,
            scheduler,
            progress,
        )
        self.states = states
        self.temperatures = np.array([state.temperature for state in states])
        self._spec = RoundSpec(
            uuid.uuid4().hex,
            system,
            forcefield,
            states,
            integrator,
            constraints,
            precision,
            tuple(colvars),
            sample_every,
            remove_center_of_mass_motion,
            barostat,
        )
        self.record = ExchangeRecord(
            self.temperatures,
            attempted=np.zeros((len(states),) * 2, dtype=np.int64),
            accepted=np.zeros((len(states),) * 2, dtype=np.int64),
            samples=[[] for _ in states],
        )
        self.colvar_values: list = []  # (T, R, D)
        self._rng = np.random.default_rng(self.seed)
        self.replica_states = self._initial_states(starts)
        self.assignment = np.arange(len(states))  # state of each replica
        self._moved = np.zeros(len(states), dtype=bool)  # replicas that changed state in the last exchange
        self._shared = all(state.potential is None for state in states)  # one Hamiltonian (REMD)
        self.rounds_done = 0

    @property
    def n_replicas(self) -> int:
        """``R``, one replica per state."""
        return len(self.states)

    def _initial_states(self, starts):
        """Each replica's starting state in its own state: positions, velocities at its temperature,
        forces."""
        count = self.n_replicas
        if starts is not None:
            starts = torch.as_tensor(starts, dtype=torch.float64)
            if tuple(starts.shape) != (count, self._spec.system.n_atoms, 3):
                raise ConfigurationError(
                    f"ReplicaExchange: starts must be ({count}, {self._spec.system.n_atoms}, 3) "
                    f"nm, got {tuple(starts.shape)}"
                )
            checks.finite(starts.reshape(count, -1), "starts", item="replica")
        result = []
        for replica in range(count):
            simulation = simulation_of(self._spec, replica)
            state = simulation.state
            if starts is not None:
                state = simulation._with_forces(state.replace(positions=starts[replica].to(state.positions)))
                simulation.state = state
            simulation.set_velocities(self.states[replica].temperature, seed=self.seed * 100_003 + replica)
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + replica)
            result.append(simulation.state.replace(rng_state=generator.get_state(), step=0, time=0.0))
        return result

    # --- running ---------------------------------------------------------------------------------
    def run(self, rounds: int):
        """Run ``rounds`` more rounds (continuing from the checkpoint file when one exists and nothing has
        run yet in this sampler).

        Raises:
            common.errors.SimulationError: a replica's round failed (blow-up), naming the replica and the
                state; with a checkpoint, the last completed round is in it.
        """
        from tqdm.auto import tqdm

        checks.non_negative_int(rounds, "ReplicaExchange.run: rounds")
        if self.checkpoint is not None and self.rounds_done == 0 and os.path.exists(self.checkpoint):
            self.load_checkpoint(self.checkpoint)
        for _ in tqdm(range(rounds), desc="replica exchange", unit="round", disable=not self.progress):
            self._round()
            if self.checkpoint is not None:
                self.save_checkpoint(self.checkpoint)
        return self.record

    def _round(self):
        from common import parallel

        jobs = []
        for replica, state in enumerate(self.replica_states):
            index = int(self.assignment[replica])
            recompute = bool(self._moved[replica]) and not self._shared  # another Hamiltonian: its forces
            jobs.append(
                {
                    "spec": self._spec,
                    "replica": replica,
                    "state": index,
                    "steps": self.steps_per_round,
                    "start": state.to_dict(),
                    "recompute": recompute,
                }
            )
        results = [None] * self.n_replicas
        for job, result in parallel.run_jobs(
            run_round, jobs, workers=self.workers, scheduler=self.scheduler, retries=0
        ):
            if isinstance(result, parallel.JobFailure):
                raise SimulationError(
                    f"replica {job['replica']} in state {job['state']} "
                    f"(T = {self.temperatures[job['state']]:g} K) "
                    f"failed in round {self.rounds_done + 1}: {result.message}"
                )
            results[job["replica"]] = result
        energies = np.array([result["energies"] for result in results])  # (R, K) kJ/mol
        if self.pressure is not None:  # the enthalpy: p V of each replica's box
            volumes = np.array([abs(float(torch.linalg.det(State.from_dict(result["state"]).box)))
                                for result in results])
            energies = energies + (self.pressure * BAR_NM3_TO_KJ_PER_MOL * volumes)[:, None]
        reduced = energies / (BOLTZMANN_MD * self.temperatures[None, :])
        for replica, result in enumerate(results):
            self.replica_states[replica] = State.from_dict(result["state"])
            self.record.samples[int(self.assignment[replica])].extend(result["samples"])
        self.colvar_values.append([result["colvars"] for result in results])
        self.record.reduced_potentials.append(reduced)
        before = self.assignment.copy()
        self._exchange(reduced)
        self._moved = self.assignment != before
        self._rescale_velocities(before)
        self.record.states.append(self.assignment.copy())
        self.rounds_done += 1

    def _exchange(self, reduced):
        """Swap states between replicas (Metropolis), updating the assignment and the swap counts."""
        count = self.n_replicas
        if self.exchange == "neighbors":
            first = np.arange(self.rounds_done % 2, count - 1, 2)
            second = first + 1
        else:  # count^3 attempts between uniformly drawn pairs of distinct states, drawn at once
            first = self._rng.integers(count, size=count**3)
            second = self._rng.integers(count - 1, size=count**3)
            second += second >= first
        thresholds = -np.log1p(-self._rng.random(len(first)))  # accept when delta <= an Exp(1) draw
        replica_of = np.empty(count, dtype=np.int64)
        replica_of[self.assignment] = np.arange(count)
        replica_of, energies, accepted = replica_of.tolist(), np.asarray(reduced, dtype=float).tolist(), []
        # the attempts depend on one another through replica_of: a loop over plain Python numbers
        attempts = zip(first.tolist(), second.tolist(), thresholds.tolist())
        for attempt, (a, b, threshold) in enumerate(attempts):
            i, j = replica_of[a], replica_of[b]
            row_i, row_j = energies[i], energies[j]
            if row_i[b] + row_j[a] - row_i[a] - row_j[b] <= threshold:
                accepted.append(attempt)
                replica_of[a], replica_of[b] = j, i
        for counts, index in ((self.record.attempted, slice(None)), (self.record.accepted, accepted)):
            np.add.at(counts, (first[index], second[index]), 1)
            np.add.at(counts, (second[index], first[index]), 1)
        self.assignment[np.asarray(replica_of)] = np.arange(count)

    def _rescale_velocities(self, before):
        for replica, (old, new) in enumerate(zip(before, self.assignment, strict=True)):
            if old != new:
                state = self.replica_states[replica]
                factor = math.sqrt(self.temperatures[new] / self.temperatures[old])
                self.replica_states[replica] = state.replace(velocities=state.velocities * factor)

    # --- checkpoints -----------------------------------------------------------------------------
    def save_checkpoint(self, path):
        """Write everything a continued run needs to ``path`` (atomically, checksummed)."""
        record = self.record
        colvars = len(self._spec.colvars)

        def tensor(values, dtype, shape):  # tensors, not numpy arrays: an empty array is stored as bytes()
            return torch.as_tensor(np.asarray(values, dtype=dtype).reshape(shape))

        io.save_checkpoint(
            path,
            {
                "rounds_done": self.rounds_done,
                "temperatures": tensor(self.temperatures, np.float64, -1),
                "replica_states": [state.to_dict() for state in self.replica_states],
                "assignment": tensor(self.assignment, np.int64, -1),
                "moved": tensor(self._moved, bool, -1),
                "rng": _encode_rng(self._rng),
                "states": tensor(record.states, np.int64, (-1, self.n_replicas)),
                "reduced_potentials": tensor(
                    record.reduced_potentials, np.float64, (-1, self.n_replicas, self.n_replicas)
                ),
                "attempted": tensor(record.attempted, np.int64, record.attempted.shape),
                "accepted": tensor(record.accepted, np.int64, record.accepted.shape),
                "samples": [tensor(values, np.float64, (len(values), colvars)) for values in record.samples],
                "colvar_values": tensor(
                    self.colvar_values, np.float64, (len(self.colvar_values), self.n_replicas, colvars)
                ),
            },
            kind=CHECKPOINT_KIND,
        )

    def load_checkpoint(self, path):
        """Continue from a checkpoint written by :meth:`save_checkpoint` (of a sampler made with the same
        states).

        Raises:
            common.errors.DataError: a damaged checkpoint or one of another kind.
            common.errors.ConfigurationError: a checkpoint of other temperatures or another replica count.
        """
        data = io.load_checkpoint(path, kind=CHECKPOINT_KIND)
        if not np.array_equal(data["temperatures"].numpy(), self.temperatures):
            raise ConfigurationError(
                f"{path}: a checkpoint of the temperatures {data['temperatures'].tolist()} K, "
                f"this sampler has {list(self.temperatures)}"
            )
        self.rounds_done = int(data["rounds_done"])
        self.replica_states = [State.from_dict(state) for state in data["replica_states"]]
        self.assignment = data["assignment"].numpy().copy()
        self._moved = data["moved"].numpy().copy()
        self._rng = _decode_rng(data["rng"])
        record = self.record
        record.states = list(data["states"].numpy().copy())
        record.reduced_potentials = list(data["reduced_potentials"].numpy().copy())
        record.attempted = data["attempted"].numpy().copy()
        record.accepted = data["accepted"].numpy().copy()
        record.samples = [values.tolist() for values in data["samples"]]
        self.colvar_values = data["colvar_values"].tolist()


def _checked_barostat(barostat, system):
    """``barostat`` if replica exchange can sample with it (see :class:`ReplicaExchange`), else refused."""
    from mindsponge import barostats

    if barostat is None:
        return None
    if not isinstance(barostat, barostats.MonteCarloBarostat | barostats.CRescale):
        raise ConfigurationError(
            f"ReplicaExchange: {type(barostat).__name__} does not sample the isothermal-isobaric ensemble: "
            "use MonteCarloBarostat, MonteCarloAnisotropicBarostat or CRescale")
    if system.box is None:
        raise ConfigurationError("ReplicaExchange: a barostat needs a periodic system; this System's box is "
                                 "None")
    _pressure(barostat)
    return barostat


def _pressure(barostat) -> float:
    """The barostat's one pressure (bar)."""
    pressures = np.atleast_1d(np.asarray(barostat.pressure, dtype=np.float64))
    if not np.all(pressures == pressures[0]):
        raise ConfigurationError(
            f"ReplicaExchange: the barostat's pressures {pressures.tolist()} bar differ along the axes: the "
            "reduced potentials need one pressure")
    return float(pressures[0])


def _encode_rng(generator: np.random.Generator) -> dict:
    state = generator.bit_generator.state
    return {
        "bit_generator": state["bit_generator"],
        "state": str(state["state"]["state"]),
        "inc": str(state["state"]["inc"]),
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }


def _decode_rng(data: dict) -> np.random.Generator:
    generator = np.random.default_rng()
    generator.bit_generator.state = {
        "bit_generator": data["bit_generator"],
        "state": {"state": int(data["state"]), "inc": int(data["inc"])},
        "has_uint32": int(data["has_uint32"]),
        "uinteger": int(data["uinteger"]),
    }
    return generator
