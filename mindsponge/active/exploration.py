"""Exploration: MD with the committee mean as the potential, recording the committee's uncertainty.

Every trajectory starts from a labelled configuration. Plain exploration runs Langevin NVT at a
temperature; umbrella exploration adds a harmonic restraint on a collective variable per
trajectory (one window per centre, started from the labelled frame whose CV is nearest the
centre), which drives the learned potential through regions such as a transition state that
unbiased MD would not visit. Every ``every`` steps the frame and its force disagreement are
recorded. A trajectory whose disagreement exceeds ``stop_above`` is stopped there (the model has
left the region it knows; the frames after would be meaningless), as is one that blows up.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import torch

from common import checks
from common.errors import ConfigurationError, SimulationError
from common.parallel import JobFailure, run_jobs
from mindsponge import bias as bias_module
from mindsponge import colvar as colvar_module
from mindsponge.active.uncertainty import UncertaintyReporter, _Runaway

__all__ = ["Umbrella", "Exploration", "explore", "distance_combination"]


def distance_combination(distances, coefficients) -> colvar_module.Colvar:
    """The CV ``sum_i c_i d(a_i, b_i)`` (nm) of atom pairs ``distances`` ``[(a, b), ...]``."""
    pairs = [tuple(int(atom) for atom in pair) for pair in distances]
    if any(len(pair) != 2 for pair in pairs):
        raise ConfigurationError(
            f"distance_combination: every entry of distances must be an atom pair, got {distances!r}"
        )
    return colvar_module.LinearCombination([colvar_module.Distance(pair) for pair in pairs], coefficients)


@dataclasses.dataclass
class Umbrella:
    """Umbrella windows on ``sum_i coefficients[i] * d(distances[i])`` (nm).

    Attributes:
        distances: atom pairs (0-based).
        coefficients: one per pair.
        centers: window centres, nm (one trajectory each per round).
        force_constant: kJ/mol/nm^2.
    """

    distances: list[tuple[int, int]]
    coefficients: list[float]
    centers: list[float]
    force_constant: float

    def __post_init__(self):
        if len(self.distances) != len(self.coefficients) or not self.distances:
            raise ConfigurationError("give one coefficient per distance (and at least one distance)")
        if not self.centers:
            raise ConfigurationError("centers must list at least one window centre")
        if not self.force_constant > 0:
            raise ConfigurationError(
                f"force_constant must be positive (kJ/mol/nm^2), got {self.force_constant}")

    def colvar(self) -> colvar_module.Colvar:
        """The CV (a :class:`~mindsponge.colvar.LinearCombination` of distances)."""
        return distance_combination(self.distances, self.coefficients)


@dataclasses.dataclass
class Exploration:
    """``[exploration]``: the MD that looks for uncertain configurations each round.

    Attributes:
        temperature: K.
        steps: MD steps per trajectory.
        every: steps between recorded frames.
        trajectories: trajectories per round without umbrella windows.
        timestep: ps.
        friction: Langevin friction, 1/ps.
        stop_factor: a trajectory stops once its disagreement exceeds ``stop_factor * threshold``.
        umbrella: optional umbrella windows (then one trajectory per centre).
        workers: processes that run the trajectories side by side, one thread each (0: one after
            the other in this process).
    """

    temperature: float = 300.0
    steps: int = 1000
    every: int = 10
    trajectories: int = 2
    timestep: float = 0.0005
    friction: float = 5.0
    stop_factor: float = 5.0
    umbrella: Umbrella | None = None
    workers: int = 0

    def __post_init__(self):
        for name in ("temperature", "timestep", "friction", "stop_factor"):
            checks.positive(getattr(self, name), name)
        checks.non_negative_int(self.workers, "workers (0 = the trajectories one after the other here)")
        for name in ("steps", "every", "trajectories"):
            checks.positive_int(getattr(self, name), name)


def _starts(settings: Exploration, data_positions: np.ndarray, seed: int) -> tuple[np.ndarray, list]:
    """Starting frames ``(T, N, 3)`` and the restraint of every trajectory (``None``: plain MD)."""
    if settings.umbrella is None:
        chosen = np.random.default_rng(seed).choice(len(data_positions), settings.trajectories)
        return data_positions[chosen], [None] * settings.trajectories
    umbrella = settings.umbrella
    colvar = umbrella.colvar()
    values = colvar(torch.as_tensor(data_positions), None).numpy()
    starts = np.stack(
        [data_positions[int(np.argmin(np.abs(values - center)))] for center in umbrella.centers]
    )
    restraints = [
        bias_module.HarmonicRestraint(colvar, center, umbrella.force_constant, name=f"window{index}")
        for index, center in enumerate(umbrella.centers)
    ]
    return starts, restraints


def _trajectory(committee, atomic_numbers, settings, stop_above, job):
    """One trajectory of ``job = (index, start, restraint, seed)``: ``(positions (F, N, 3),
    disagreement (F,), stopped early)``."""
    _, start, restraint, seed = job
    import ase

    from mindsponge.integrators import LangevinMiddle
    from mindsponge.potentials import SumPotential
    from mindsponge.simulation import Simulation
    from mindsponge.system import System

    system = System.from_ase(ase.Atoms(numbers=np.asarray(atomic_numbers), positions=10.0 * start))
    system = system.replace(positions=torch.as_tensor(start))
    potential = committee.bind(atomic_numbers)
    if restraint is not None:
        potential = SumPotential(potential, restraint)
    reporter = UncertaintyReporter(committee, atomic_numbers, settings.every, stop_above, keep="all")
    simulation = Simulation(
        system,
        potential,
        LangevinMiddle(settings.timestep, settings.temperature, settings.friction),
        reporters=[reporter],
        seed=seed,
        progress=False,
        overlap_distance=None,
    )
    simulation.set_velocities(settings.temperature, seed=seed)
    stopped = False
    try:
        simulation.run(settings.steps)
    except (_Runaway, SimulationError):
        stopped = True
    if not reporter.positions:  # stopped before the first record: keep the start
        reporter.positions.append(np.asarray(start, dtype=np.float64))
        reporter.disagreement.append(float(committee.force_disagreement(start[None], atomic_numbers)[0]))
    return np.stack(reporter.positions), np.asarray(reporter.disagreement), stopped


def explore(
    committee,
    atomic_numbers,
    data_positions,
    settings: Exploration,
    threshold: float,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, np.ndarray]:
    """Run the exploration trajectories of one round.

    Args:
        committee: the :class:`~mindsponge.active.Committee` (its mean is the potential).
        atomic_numbers: ``(N,)``.
        data_positions: ``(S, N, 3)`` nm labelled frames to start from.
        settings: an :class:`Exploration`.
        threshold: the disagreement (kJ/mol/nm) above which a frame is uncertain.
        seed: seeds the choice of starts and the dynamics.
        progress: a progress bar over trajectories.

    Returns:
        ``positions`` (F, N, 3) nm, ``disagreement`` (F,) kJ/mol/nm, ``trajectory`` (F,) index of
        the trajectory of every frame, ``stopped`` (T,) bool (stopped early).
    """
    from tqdm.auto import tqdm

    starts, restraints = _starts(settings, np.asarray(data_positions, dtype=np.float64), seed)
    jobs = [(index, starts[index], restraints[index], seed + index) for index in range(len(starts))]
    trajectory = functools.partial(
        _trajectory, committee, atomic_numbers, settings, settings.stop_factor * threshold
    )
    threads = 1 if settings.workers else None
    finished = {}
    for job, result in tqdm(
        run_jobs(trajectory, jobs, workers=settings.workers, threads=threads),
        total=len(jobs),
        desc="exploration",
        disable=not progress,
    ):
        if isinstance(result, JobFailure):
            raise SimulationError(f"exploration trajectory {job[0]} failed: {result}")
        finished[job[0]] = result
    parts = [finished[index] for index in range(len(jobs))]
    return {
        "positions": np.concatenate([part[0] for part in parts]),
        "disagreement": np.concatenate([part[1] for part in parts]),
        "trajectory": np.concatenate([np.full(len(part[1]), index) for index, part in enumerate(parts)]),
        "stopped": np.array([part[2] for part in parts]),
    }
