"""Umbrella sampling along one collective variable: harmonic windows, their sampling (one after the other,
or together as Hamiltonian replica exchange) and the free-energy profile (MBAR or WHAM).

Example (24 windows on a torsion, run as replica exchange)::

    from mindsponge.umbrella import UmbrellaSampling
    umbrella = UmbrellaSampling(phi, np.linspace(-np.pi, np.pi, 24, endpoint=False), 100.0, 300.0)
    umbrella.run_exchange(system, forcefield, ms.integrators.LangevinMiddle(0.002, 300.0, 1.0),
                          rounds=400, steps_per_round=100)
    centers, profile = umbrella.free_energy(np.linspace(-np.pi, np.pi, 37))   # kJ/mol

Units: the collective variable's, kJ/mol, K.
"""

import time

import numpy as np
import torch

from common.errors import ArgumentTypeError, ConfigurationError, OutOfRangeError
from common.units import BOLTZMANN_MD
from mindsponge.bias import ColvarReporter, HarmonicRestraint
from mindsponge.colvar import Colvar
from mindsponge.forcefield.base import EnergyTerm

__all__ = ["UmbrellaSampling"]


class UmbrellaSampling:
    """Umbrella sampling along one CV: harmonic windows, sampling, and the free-energy profile.

    Args:
        colvar: the CV.
        centers: window centres (CV units).
        force_constant: kJ/mol per CV unit squared (one for all windows).
        temperature: K.

    ``restraints[i]`` is the :class:`HarmonicRestraint` of window ``i``. :meth:`run` samples the
    windows one after the other; :meth:`run_exchange` samples them together as Hamiltonian replica
    exchange (neighbouring windows swap configurations); windows sampled elsewhere (in parallel) are
    added with :meth:`add_samples`. :meth:`free_energy` combines them by MBAR (``pymbar``) or WHAM.
    """

    def __init__(self, colvar, centers, force_constant, temperature):
        if not isinstance(colvar, Colvar):
            raise ArgumentTypeError(f"UmbrellaSampling: colvar must be a Colvar, got {colvar!r}")
        if not temperature > 0 or not force_constant > 0:
            raise ConfigurationError("UmbrellaSampling: temperature and force_constant must be positive")
        self.colvar = colvar
        self.centers = [float(center) for center in centers]
        if len(self.centers) < 2:
            raise ConfigurationError(f"UmbrellaSampling: needs at least two windows, got {len(self.centers)}")
        self.force_constant = float(force_constant)
        self.temperature = float(temperature)
        self.restraints = [
            HarmonicRestraint(colvar, center, force_constant, name=f"umbrella{index}")
            for index, center in enumerate(self.centers)
        ]
        self.samples = [None] * len(self.centers)

    def add_samples(self, window, values):
        """Set the CV samples of window ``window`` (a 1D array, CV units)."""
        if not 0 <= window < len(self.centers):
            raise OutOfRangeError(
                f"UmbrellaSampling: window {window} out of range (0..{len(self.centers) - 1})")
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if len(values) == 0:
            raise ConfigurationError(f"UmbrellaSampling: window {window} has no samples")
        self.samples[window] = values

    def run(self, simulate, steps, every=10, equilibration=0, progress=True):
        """Sample every window.

        Args:
            simulate: callable ``(restraint, window) -> Simulation`` that returns a ready
                simulation whose force field contains ``restraint`` (e.g. a fresh force field with
                ``ff.add(restraint)``, velocities set).
            steps: production steps per window.
            every: steps between samples.
            equilibration: steps run first and not sampled.
            progress: show a progress bar over the windows.
        """
        from tqdm.auto import tqdm

        for window in tqdm(range(len(self.centers)), disable=not progress, desc="umbrella windows"):
            simulation = simulate(self.restraints[window], window)
            if equilibration:
                simulation.run(equilibration)
            recorder = ColvarReporter(self.colvar, every=every)
            simulation.reporters.append(recorder)
            simulation.run(steps)
            simulation.reporters.remove(recorder)
            self.add_samples(window, recorder.values[:, 0])

    def run_exchange(
        self, system, forcefield, integrator, rounds, steps_per_round, sample_every=10, **options
    ):
        """Sample every window at once as Hamiltonian replica exchange (one replica per window, neighbouring
        windows swapping configurations every ``steps_per_round`` steps: :mod:`mindsponge.replica_exchange`).

        Args:
            system: the :class:`~mindsponge.system.System`.
            forcefield: the unbiased :class:`~mindsponge.forcefield.ForceField`; window ``k`` runs it with
                ``restraints[k]`` added. Any other potential module ``(positions, box) -> energy`` (kJ/mol:
                a bound learned potential, :class:`~mindsponge.labels.XTB`) is taken as the one term of a
                force field; it is evaluated once per replica and round for the exchanges, whose
                acceptance then depends on the restraints alone.
            integrator: an integrator at this sampling's temperature (``LangevinMiddle``, or
                ``VelocityVerlet`` with a thermostat).
            rounds: exchange rounds.
            steps_per_round: MD steps between exchanges.
            sample_every: steps between the CV samples of each window.
            options: further arguments of :class:`~mindsponge.replica_exchange.ReplicaExchange` (``starts``,
                ``seed``, ``checkpoint``, ``workers``, ``scheduler``, ``exchange``, ``progress``...).

        Returns:
            the :class:`~mindsponge.replica_exchange.ExchangeRecord` (acceptance, round trips); the samples
            of every window are set (:meth:`free_energy` combines them).
        """
        from mindsponge.forcefield.base import ForceField
        from mindsponge.replica_exchange import ReplicaExchange, ThermodynamicState

        if not isinstance(forcefield, ForceField):
            if not isinstance(forcefield, torch.nn.Module):
                raise ArgumentTypeError(
                    "UmbrellaSampling.run_exchange: forcefield must be a ForceField or a potential module "
                    f"(positions, box) -> energy, got {type(forcefield).__name__}"
                )
            forcefield = ForceField([_PotentialTerm(forcefield)])
        states = [
            ThermodynamicState(
                self.temperature,
                ForceField(
                    [*forcefield.terms, restraint],
                    virtual_sites=forcefield.virtual_sites,
                    masses=forcefield.masses,
                    constraints=forcefield.constraints,
                ),
            )
            for restraint in self.restraints
        ]
        sampler = ReplicaExchange(
            system,
            forcefield,
            states,
            integrator,
            steps_per_round,
            colvars=[self.colvar],
            sample_every=sample_every,
            **options,
        )
        record = sampler.run(rounds)
        for window, values in enumerate(record.samples):
            self.add_samples(window, np.asarray(values, dtype=np.float64)[:, 0])
        return record

    def run_replicas(self, system, potential, integrator, steps, equilibration=0, every=10, starts=None,
                     pull_steps=0, seed=0):
        """Sample every window at once as copies of one molecule in one simulation
        (:mod:`mindsponge.replicas`): one call of a learned potential per step for all windows.

        Args:
            system: the molecule (vacuum, no box).
            potential: a bound learned potential or committee (it has ``replicated(count)``).
            integrator: an integrator at this sampling's temperature (e.g. ``LangevinMiddle``).
            steps: production steps, sampled every ``every`` steps.
            equilibration: steps run first and not sampled (after the pull).
            starts: optional ``(K, N, 3)`` nm, one configuration per window in the order of ``centers``
                (e.g. the last frames of another potential's windows); default: the system's for all.
            pull_steps: steps over which each window's centre moves from its copy's starting CV value to the
                window's own centre (the short way round a periodic CV), before the equilibration: windows
                that start far from their centre are not thrown there by the full restraint.
            seed: the random seed (velocities and the thermostat).

        Returns:
            ``(frames, seconds_per_step)``: the last configuration of every window ``(K, N, 3)`` nm, and the
            wall time of one production step of all windows over their number (s). The samples of every
            window are set (:meth:`free_energy`, :meth:`population`).

        Raises:
            TypeError: a potential without ``replicated``.
            ValueError: ``starts`` of the wrong shape or not finite, or negative step counts.
        """
        from mindsponge.potentials import SumPotential
        from mindsponge.replicas import ReplicaColvarReporter, WindowRestraints, replicate, split
        from mindsponge.simulation import Simulation

        if not hasattr(potential, "replicated"):
            raise ArgumentTypeError(
                f"UmbrellaSampling.run_replicas: the potential must have replicated(count) (a bound learned "
                f"potential or committee), got {type(potential).__name__}")
        for name, value in (("steps", steps), ("equilibration", equilibration), ("pull_steps", pull_steps)):
            if not isinstance(value, int) or value < 0:
                raise ConfigurationError(
                    f"UmbrellaSampling.run_replicas: {name} must be a non-negative int, got {value!r}")
        count = len(self.centers)
        if starts is not None:
            starts = torch.as_tensor(np.asarray(starts, dtype=np.float64))
            if starts.shape != (count, system.n_atoms, 3) or not bool(torch.isfinite(starts).all()):
                raise ConfigurationError(
                    f"UmbrellaSampling.run_replicas: starts must be finite ({count}, {system.n_atoms}, 3)"
                    f" nm, one configuration per window, got shape {tuple(starts.shape)}")
        copies = replicate(system, count, positions=starts)
        targets = torch.tensor(self.centers, dtype=torch.float64)
        begin = self.colvar(copies.positions.reshape(count, -1, 3), None).detach().double().cpu()
        windows = WindowRestraints(self.colvar, begin if pull_steps else targets, self.force_constant)
        simulation = Simulation(copies, SumPotential(potential.replicated(count), windows), integrator,
                                seed=seed, progress=False, overlap_distance=None)
        simulation.set_velocities(self.temperature, seed=seed)
        if pull_steps:
            distance = self.colvar.difference(targets, begin)
            for done in range(0, pull_steps, 10):
                fraction = min(1.0, (done + 10) / pull_steps)
                windows.centers.copy_((begin + fraction * distance).to(windows.centers.dtype))
                simulation.run(min(10, pull_steps - done))
            windows.centers.copy_(targets.to(windows.centers.dtype))
        simulation.run(equilibration)
        recorder = ReplicaColvarReporter(self.colvar, count, every=every)
        simulation.reporters.append(recorder)
        began = time.perf_counter()
        simulation.run(steps)
        seconds = time.perf_counter() - began
        simulation.reporters.remove(recorder)
        for window in range(count):
            self.add_samples(window, recorder.values[:, window])
        frames = split(simulation.state.positions.detach().cpu(), count).numpy()
        return frames, seconds / max(steps, 1) / count

    def population(self, inside, blocks=5):
        """Unbiased probability that the CV lies in a region, by MBAR over all windows' samples.

        Args:
            inside: callable ``values -> bool array`` on CV values (a 1D float64 array, CV units), e.g.
                ``lambda s: np.abs(s) < np.radians(120)`` for the gauche region of a torsion.
            blocks: every window's samples are cut into this many contiguous blocks in time; the estimate is
                repeated on each set of blocks (block ``b`` of every window), and the standard error is their
                spread over ``sqrt(blocks)``: an error that counts time correlation, as long as a block is
                longer than the CV's correlation time.

        Returns:
            ``(probability, standard_error)``, from all samples and from the blocks.

        Raises:
            ValueError: a window without samples (or fewer than ``blocks``), ``blocks`` under 2, or ``inside``
                not giving one bool per value.
        """
        missing = [index for index, samples in enumerate(self.samples) if samples is None]
        if missing:
            raise ConfigurationError(
                f"UmbrellaSampling: windows {missing} have no samples (run or add_samples first)")
        if not isinstance(blocks, int) or blocks < 2:
            raise ConfigurationError(
                f"UmbrellaSampling.population: blocks must be an int >= 2, got {blocks!r}")
        short = [index for index, samples in enumerate(self.samples) if len(samples) < blocks]
        if short:
            raise ConfigurationError(
                f"UmbrellaSampling.population: windows {short} have fewer samples than the {blocks} blocks")
        probability = self._population(self.samples, inside)
        parts = [
            self._population([np.array_split(samples, blocks)[block] for samples in self.samples], inside)
            for block in range(blocks)
        ]
        return probability, float(np.std(parts, ddof=1) / np.sqrt(blocks))

    def _population(self, samples, inside):
        """The MBAR probability of ``inside`` under no bias from the per-window ``samples``."""
        import pymbar
        from scipy.special import logsumexp

        values = np.concatenate(samples)
        counts = np.array([len(part) for part in samples])
        flags = np.asarray(inside(values))
        if flags.shape != values.shape or flags.dtype != bool:
            raise ConfigurationError(
                f"UmbrellaSampling.population: inside must return one bool per value, got an array of "
                f"{flags.dtype} {flags.shape} for {values.shape[0]} values")
        reduced = self._reduced_bias(values)  # (K, n)
        free_energies = pymbar.MBAR(reduced, counts, verbose=False).f_k
        log_weights = -logsumexp(free_energies[:, None] - reduced, b=counts[:, None], axis=0)
        if not flags.any():
            return 0.0
        return float(np.exp(logsumexp(log_weights[flags]) - logsumexp(log_weights)))

    def _reduced_bias(self, values):
        """``beta w_k(x)``: (K, len(values)) reduced bias energies of every window at ``values``."""
        values = torch.as_tensor(values, dtype=torch.float64)
        centers = torch.tensor(self.centers, dtype=torch.float64)
        differences = self.colvar.difference(values[None, :], centers[:, None])
        return (0.5 * self.force_constant * differences**2 / (BOLTZMANN_MD * self.temperature)).numpy()

    def free_energy(self, bin_edges, method="mbar", tolerance=1e-10, max_iterations=100_000):
        """Free-energy profile from all windows.

        Args:
            bin_edges: ``(B + 1,)`` increasing bin edges (CV units).
            method: ``"mbar"`` (pymbar's histogram FES) or ``"wham"``.
            tolerance, max_iterations: convergence of WHAM's self-consistent iteration (in kT).

        Returns:
            ``(bin_centers, free_energy)``: ``(B,)`` arrays; ``free_energy`` in kJ/mol with its
            minimum at 0, ``nan`` in empty bins.

        Raises:
            ValueError: a window has no samples, or an unknown method.
        """
        missing = [index for index, samples in enumerate(self.samples) if samples is None]
        if missing:
            raise ConfigurationError(
                f"UmbrellaSampling: windows {missing} have no samples (run or add_samples first)"
            )
        edges = np.asarray(bin_edges, dtype=np.float64)
        if edges.ndim != 1 or len(edges) < 2 or not np.all(np.diff(edges) > 0):
            raise ConfigurationError(
                "UmbrellaSampling: bin_edges must be an increasing 1D array of at least 2 edges")
        centers = 0.5 * (edges[1:] + edges[:-1])
        values = np.concatenate(self.samples)
        counts = np.array([len(samples) for samples in self.samples])
        kT = BOLTZMANN_MD * self.temperature
        if method == "mbar":
            free_energy = self._mbar(values, counts, edges, centers)
        elif method == "wham":
            free_energy = self._wham(values, counts, edges, centers, tolerance, max_iterations)
        else:
            raise ConfigurationError(f"UmbrellaSampling: method must be 'mbar' or 'wham', got {method!r}")
        free_energy = kT * free_energy
        return centers, free_energy - np.nanmin(free_energy)

    def _mbar(self, values, counts, edges, centers):
        import pymbar

        fes = pymbar.FES(self._reduced_bias(values), counts, verbose=False)
        fes.generate_fes(np.zeros(len(values)), values, histogram_parameters={"bin_edges": edges})
        inside = (values >= edges[0]) & (values < edges[-1])
        occupied = np.bincount(np.digitize(values[inside], edges) - 1, minlength=len(centers)) > 0
        result = np.full(len(centers), np.nan)
        result[occupied] = fes.get_fes(centers[occupied], reference_point="from-lowest")["f_i"]
        return result

    def _wham(self, values, counts, edges, centers, tolerance, max_iterations):
        histogram = np.stack([np.histogram(samples, bins=edges)[0] for samples in self.samples]).sum(0)
        bias = self._reduced_bias(centers)  # (K, B)
        offsets = np.zeros(len(self.centers))
        occupied = histogram > 0
        for _ in range(max_iterations):
            denominator = (counts[:, None] * np.exp(offsets[:, None] - bias)).sum(0)
            probability = np.where(occupied, histogram / denominator, 0.0)
            new_offsets = -np.log((probability[None, :] * np.exp(-bias)).sum(1))
            new_offsets -= new_offsets[0]
            converged = np.max(np.abs(new_offsets - offsets)) < tolerance
            offsets = new_offsets
            if converged:
                break
        with np.errstate(divide="ignore"):
            return np.where(occupied, -np.log(probability), np.nan)


class _PotentialTerm(EnergyTerm):
    """A potential module ``(positions, box) -> energy`` as the one term of a force field."""

    def __init__(self, potential):
        super().__init__("potential")
        self.potential = potential

    def forward(self, positions, box=None):
        return self.potential(positions, box)
