"""Free-energy estimates from the reduced potentials of a family of states: MBAR, BAR, uncertainties,
overlap, decorrelation and convergence.

The data of an alchemical (or any multi-state) run is a :class:`FreeEnergySamples`: the reduced
potential ``u_kn[k, n] = beta (U_k(x_n) + p V_n)`` of every sample ``n`` in every state ``k`` (kT), the
state each sample was drawn in, its iteration and its simulation time. It is saved as an ``.npz`` file
(:meth:`FreeEnergySamples.save`, the layout below) so that a run can be re-analysed without running it
again, and converts to alchemlyb's ``u_nk`` DataFrame (:meth:`FreeEnergySamples.to_u_nk`).

``.npz`` layout (one file per leg of a workflow)::

    u_kn           (K, N) float64   reduced potential of sample n in state k, kT
    state_index    (N,)   int64     the state sample n was drawn in (0..K-1)
    iteration      (N,)   int64     the iteration (exchange round) after which it was taken, from 0
    time           (N,)   float64   its simulation time within its replica, ps
    state_names    (P,)   str       the global parameters that define the states
    state_values   (K, P) float64   their values in every state (NaN: not set by that state)
    temperature    ()     float64   K
    format         ()     str       "mindsponge.FreeEnergySamples 1"

:func:`estimate` runs the estimators through pymbar 4: MBAR over all states with its analytic
uncertainty and, optionally, a bootstrap one (resampling each state's samples, ``bootstrap=`` times);
BAR between every pair of neighbouring states (``pymbar.other_estimators.bar``) summed along the path,
with the uncertainties of the steps added in quadrature; MBAR's overlap matrix.
:func:`discard_equilibration` drops the iterations before the run equilibrated (pymbar's
``detect_equilibration`` on the replicas' total reduced potential). :func:`decorrelate`
keeps every ``g``-th sample of each state, ``g`` its statistical inefficiency (``pymbar.timeseries``,
computed from the series of the state's reduced potential in its own state). :func:`convergence`
estimates the difference from the first (forward) and last (reverse) 10 %, 20 %... 100 % of every
state's samples. Plots: :mod:`mindsponge.free_energy_plots`.

Reduced potentials may be ``+inf`` (a configuration impossible in that state: atoms overlapping where their
interaction is on), never NaN (refused, naming the state and the sample). pymbar's BAR gives up on infinite
works, or on states too far apart to bracket the solution, by answering ``0 +- 0``; such a step is taken
from MBAR of its two states instead (the same estimator: MBAR of two states is BAR). A step between
identical states (every work exactly 0) is ``0 +- 0``. Neighbours whose overlap is below :data:`MIN_OVERLAP`
are warned about (``warnings.warn``, and :attr:`FreeEnergyEstimate.warnings`); where it is essentially nil
(below :data:`NO_OVERLAP`) the BAR and bootstrap uncertainties across that step are not numbers (``NaN``;
``None`` in :meth:`FreeEnergyEstimate.summary`): they would be tiny and wrong.

Signs: ``delta_f[i, j] = f_j - f_i`` (kT); along an alchemical schedule from the fully interacting
state (first) to the non-interacting one (last), ``delta_f[0, -1]`` is the free energy of decoupling
(or annihilating) the region.

Example::

    samples = FreeEnergySamples.load("solvent/u_kn.npz")
    result = estimate(decorrelate(samples), bootstrap=200)
    result.mbar_difference()              # (dF, analytic error) kT, first state to last
    result.bar_difference()               # (dF, error) kT, the sum of BAR over neighbouring steps
    result.overlap                        # (K, K)
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
import zipfile
from dataclasses import dataclass, field, replace

import numpy as np

from common.errors import ConfigurationError, DataError
from common.units import BOLTZMANN_MD

__all__ = ["ConvergenceResult", "FreeEnergyEstimate", "FreeEnergySamples", "convergence", "decorrelate",
           "discard_equilibration", "estimate", "finite_or_none", "refuse_nan", "statistical_inefficiencies",
           "KCAL_PER_KJ", "MIN_OVERLAP", "NO_OVERLAP"]

FORMAT = "mindsponge.FreeEnergySamples 1"
KCAL_PER_KJ = 1.0 / 4.184
#: neighbour overlap (MBAR's overlap matrix) below which an estimate is warned about: the threshold of
#: Klimovich, Shirts and Mobley, J. Comput. Aided Mol. Des. 29, 397 (2015) (alchemical-analysis), the
#: usual guide for placing alchemical states
MIN_OVERLAP = 0.03
#: neighbour overlap below which the states share no sample: BAR's and the bootstrap's uncertainties across
#: the step are then meaningless (pymbar returns tiny ones) and are reported as unknown
NO_OVERLAP = 1e-10


def finite_or_none(value) -> float | None:
    """``float(value)``, or ``None`` for NaN or an infinity (JSON has no such numbers)."""
    value = float(value)
    return value if math.isfinite(value) else None


def refuse_nan(u_kn: np.ndarray, state_index: np.ndarray, where: str) -> None:
    """Refuse NaN reduced potentials (``+inf`` is allowed: a configuration impossible in a state).

    Args:
        u_kn: ``(K, N)`` kT.
        state_index: ``(N,)`` the state each sample was drawn in.
        where: what holds them, for the message (``"FreeEnergySamples"``, ``"mbar"``).

    Raises:
        DataError: naming the first NaN's state and sample (and the state the sample was drawn in).
    """
    bad = np.isnan(u_kn)
    if bad.any():
        state, sample = (int(index[0]) for index in np.nonzero(bad))
        raise DataError(
            f"{where}: u_kn is NaN in state {state} for sample {sample} (drawn in state "
            f"{int(state_index[sample])}; {int(bad.sum())} NaN in all): an energy evaluation failed; "
            "a configuration impossible in a state has u = +inf, which is allowed")


@contextlib.contextmanager
def _pymbar():
    """pymbar without its notices (missing JAX, timeseries warnings), the global numpy RNG restored."""
    from mindsponge.alchemy import _quiet_import

    state = np.random.get_state()
    try:
        with _quiet_import():
            import pymbar

            yield pymbar
    finally:
        np.random.set_state(state)


@dataclass(frozen=True)
class FreeEnergySamples:
    """Reduced potentials of samples drawn in a family of states (see the module docstring for the file).

    Attributes:
        u_kn: ``(K, N)`` float64, kT.
        state_index: ``(N,)`` int, the state each sample was drawn in.
        iteration: ``(N,)`` int, the iteration each sample was taken after (from 0).
        time: ``(N,)`` float64, ps, the sample's simulation time.
        states: ``K`` dicts of global-parameter values (``{"lambda_sterics": 0.5, ...}``).
        temperature: K.
    """

    u_kn: np.ndarray
    state_index: np.ndarray
    iteration: np.ndarray
    time: np.ndarray
    states: tuple
    temperature: float

    def __post_init__(self):
        u_kn = np.asarray(self.u_kn, dtype=np.float64)
        index = np.asarray(self.state_index, dtype=np.int64).reshape(-1)
        iteration = np.asarray(self.iteration, dtype=np.int64).reshape(-1)
        time = np.asarray(self.time, dtype=np.float64).reshape(-1)
        if u_kn.ndim != 2 or u_kn.shape[0] != len(self.states):
            raise ConfigurationError(f"FreeEnergySamples: u_kn must be (K, N) with K = {len(self.states)} "
                                     f"states, got {u_kn.shape}")
        for name, values in (("state_index", index), ("iteration", iteration), ("time", time)):
            if len(values) != u_kn.shape[1]:
                raise ConfigurationError(f"FreeEnergySamples: {name} must have one entry per sample "
                                         f"({u_kn.shape[1]}), got {len(values)}")
        if len(index) and (index.min() < 0 or index.max() >= len(self.states)):
            raise ConfigurationError(f"FreeEnergySamples: state_index must lie in 0..{len(self.states) - 1}")
        refuse_nan(u_kn, index, "FreeEnergySamples")
        order = np.lexsort((iteration, index))  # by state, then in time: the order pymbar and BAR expect
        for name, values in (("u_kn", u_kn[:, order]), ("state_index", index[order]),
                             ("iteration", iteration[order]), ("time", time[order])):
            object.__setattr__(self, name, values)
        object.__setattr__(self, "states", tuple(dict(state) for state in self.states))
        object.__setattr__(self, "temperature", float(self.temperature))

    @property
    def n_states(self) -> int:
        """``K``."""
        return len(self.states)

    @property
    def samples_per_state(self) -> np.ndarray:
        """``(K,)`` int."""
        return np.bincount(self.state_index, minlength=self.n_states)

    @property
    def kT(self) -> float:  # noqa: N802 - the physical symbol
        """``k_B T`` in kJ/mol."""
        return BOLTZMANN_MD * self.temperature

    def select(self, mask) -> FreeEnergySamples:
        """The samples where ``mask`` (``(N,)`` bool, or indices) holds."""
        mask = np.asarray(mask)
        return replace(self, u_kn=self.u_kn[:, mask], state_index=self.state_index[mask],
                       iteration=self.iteration[mask], time=self.time[mask])

    def discard(self, iterations: int) -> FreeEnergySamples:
        """Without the samples of the first ``iterations`` iterations (equilibration)."""
        return self.select(self.iteration >= iterations)

    def own_state_series(self, state: int) -> np.ndarray:
        """The reduced potential of state ``state``'s samples in that state, in time order (kT)."""
        return self.u_kn[state, self.state_index == state]

    def save(self, path) -> None:
        """Write the ``.npz`` file of the module docstring (atomically: a temporary file renamed)."""
        names = sorted(set().union(*self.states)) if self.states else []
        values = np.array([[state.get(name, np.nan) for name in names] for state in self.states],
                          dtype=np.float64).reshape(self.n_states, len(names))
        temporary = f"{path}.partial.npz"
        np.savez(temporary, u_kn=self.u_kn, state_index=self.state_index, iteration=self.iteration,
                 time=self.time, state_names=np.array(names, dtype=str), state_values=values,
                 temperature=np.float64(self.temperature), format=np.array(FORMAT))
        os.replace(temporary, path)

    @classmethod
    def load(cls, path) -> FreeEnergySamples:
        """Read a file written by :meth:`save`.

        Raises:
            DataError: not such a file, a damaged (truncated, empty) one, a key missing or NaN reduced
                potentials; the file is named.
        """
        try:
            with np.load(path) as data:
                if str(data["format"]) != FORMAT:
                    raise DataError(f"not a FreeEnergySamples file (format {str(data['format'])!r})")
                names = [str(name) for name in data["state_names"]]
                states = tuple({name: float(value) for name, value in zip(names, row, strict=True)
                                if not np.isnan(value)} for row in data["state_values"])
                return cls(data["u_kn"], data["state_index"], data["iteration"], data["time"], states,
                           float(data["temperature"]))
        except DataError as error:  # another format, NaN reduced potentials
            raise DataError(f"{path}: {error}") from error
        except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
            raise DataError(f"{path}: cannot read FreeEnergySamples ({type(error).__name__}: {error})"
                            ) from error

    def to_u_nk(self):
        """alchemlyb's ``u_nk`` layout: a pandas DataFrame with one row per sample, indexed by ``time``
        (ps) and the state's parameters (``lambda_electrostatics``...), one column per state (labelled by
        its parameter values, a tuple where there are several), values in kT; ``attrs`` carries
        ``temperature`` (K) and ``energy_unit`` ("kT"), as alchemlyb's parsers set them."""
        import pandas as pd

        names = sorted(set().union(*self.states))
        labels = [tuple(state.get(name, np.nan) for name in names) for state in self.states]
        labels = [label[0] if len(label) == 1 else label for label in labels]
        index_columns = {"time": self.time}
        for position, name in enumerate(names):
            column = [labels[k] if len(names) == 1 else labels[k][position] for k in self.state_index]
            index_columns[name] = column
        index = pd.MultiIndex.from_arrays(list(index_columns.values()), names=list(index_columns))
        frame = pd.DataFrame(self.u_kn.T, index=index, columns=labels)
        frame.attrs = {"temperature": self.temperature, "energy_unit": "kT"}
        return frame


def statistical_inefficiencies(samples: FreeEnergySamples) -> np.ndarray:
    """``(K,)``: the statistical inefficiency ``g >= 1`` of every state's samples (pymbar.timeseries, from
    the series of the state's reduced potential in its own state); 1 for fewer than 3 samples or a
    constant series."""
    result = np.ones(samples.n_states)
    with _pymbar() as pymbar:
        for state in range(samples.n_states):
            series = samples.own_state_series(state)
            if len(series) >= 3 and np.ptp(series) > 0:
                result[state] = max(1.0, float(pymbar.timeseries.statistical_inefficiency(series)))
    return result


def discard_equilibration(samples: FreeEnergySamples) -> tuple[FreeEnergySamples, int]:
    """The samples from the iteration where the run is equilibrated on, and that iteration.

    The series is, per iteration, the sum over the samples of that iteration of their reduced potential in
    their own state (for replica exchange, the total reduced potential of the replicas, as openmmtools'
    analyzer takes it); ``pymbar.timeseries.detect_equilibration`` picks the start that leaves the most
    effectively independent samples. A run that starts away from equilibrium (every replica from one
    configuration, or a slow rearrangement) otherwise biases MBAR for longer than a fixed burn-in.

    Returns:
        ``(samples of iterations >= start, start)``; ``start`` 0 for fewer than 3 iterations or a constant
        series.
    """
    _check(samples)
    iterations, where = np.unique(samples.iteration, return_inverse=True)
    own = samples.u_kn[samples.state_index, np.arange(samples.u_kn.shape[1])]
    series = np.bincount(where, weights=own, minlength=len(iterations))
    if len(series) < 3 or np.ptp(series) == 0:
        return samples, 0
    with _pymbar() as pymbar:
        first = int(pymbar.timeseries.detect_equilibration(series)[0])
    start = int(iterations[first])
    return samples.select(samples.iteration >= start), start


def decorrelate(samples: FreeEnergySamples, inefficiencies=None) -> FreeEnergySamples:
    """Every state's samples subsampled by its statistical inefficiency (pymbar's
    ``subsample_correlated_data``), so that they are roughly independent."""
    if inefficiencies is None:
        inefficiencies = statistical_inefficiencies(samples)
    keep = []
    with _pymbar() as pymbar:
        for state in range(samples.n_states):
            where = np.flatnonzero(samples.state_index == state)
            if len(where) == 0:
                continue
            chosen = pymbar.timeseries.subsample_correlated_data(samples.u_kn[state, where],
                                                                 g=float(inefficiencies[state]))
            keep.extend(where[np.asarray(chosen, dtype=np.int64)])
    return samples.select(np.sort(np.asarray(keep, dtype=np.int64)))


@dataclass(frozen=True)
class FreeEnergyEstimate:
    """Free energies of a family of states (all in kT; ``K`` states).

    Attributes:
        delta_f: ``(K, K)`` MBAR ``f_j - f_i``.
        d_delta_f: ``(K, K)`` its analytic uncertainty (one standard deviation).
        d_delta_f_bootstrap: ``(K, K)`` its bootstrap uncertainty, or ``None`` (no bootstrap asked); NaN
            between states separated by a step without overlap (below :data:`NO_OVERLAP`).
        overlap: ``(K, K)`` MBAR's overlap matrix.
        bar_steps: ``(K - 1,)`` BAR ``f_{k+1} - f_k`` between neighbouring states.
        d_bar_steps: ``(K - 1,)`` their uncertainties (NaN: unknown, a step without overlap).
        samples_per_state: ``(K,)`` the samples used.
        temperature: K.
        statistical_inefficiency: ``(K,)`` of the samples given, when known.
        warnings: what makes the estimate doubtful (neighbours with too little overlap), as sentences.
    """

    delta_f: np.ndarray
    d_delta_f: np.ndarray
    d_delta_f_bootstrap: np.ndarray | None
    overlap: np.ndarray
    bar_steps: np.ndarray
    d_bar_steps: np.ndarray
    samples_per_state: np.ndarray
    temperature: float
    statistical_inefficiency: np.ndarray | None = field(default=None)
    warnings: tuple[str, ...] = ()

    def mbar_difference(self, first: int = 0, last: int = -1) -> tuple[float, float]:
        """``(f_last - f_first, analytic uncertainty)`` from MBAR, kT."""
        return float(self.delta_f[first, last]), float(self.d_delta_f[first, last])

    def bar_difference(self) -> tuple[float, float]:
        """``(f_last - f_first, uncertainty)``: BAR summed over the neighbouring steps, kT (the uncertainty
        is NaN when one step's is unknown)."""
        return float(self.bar_steps.sum()), float(np.sqrt(np.sum(self.d_bar_steps**2)))

    def neighbor_overlap(self) -> np.ndarray:
        """``(K - 1,)``: the overlap between each state and the next (MBAR's overlap matrix; below
        :data:`MIN_OVERLAP`, the states are too far apart)."""
        return np.array([self.overlap[k, k + 1] for k in range(len(self.overlap) - 1)])

    def summary(self) -> dict:
        """The first-to-last difference in kT, kJ/mol and kcal/mol with its uncertainties, the lowest
        neighbour overlap, the sample counts and the :attr:`warnings`, as plain numbers (for JSON: a number
        that is not finite, such as an unknown uncertainty, is ``None``)."""
        kT = BOLTZMANN_MD * self.temperature  # noqa: N806
        value, error = self.mbar_difference()
        bar_value, bar_error = self.bar_difference()
        bootstrap = None if self.d_delta_f_bootstrap is None else float(self.d_delta_f_bootstrap[0, -1])
        result = {}
        for unit, scale in (("kT", 1.0), ("kJ/mol", kT), ("kcal/mol", kT * KCAL_PER_KJ)):
            result[unit] = {
                "mbar": finite_or_none(value * scale), "mbar_error": finite_or_none(error * scale),
                "mbar_bootstrap_error": None if bootstrap is None else finite_or_none(bootstrap * scale),
                "bar": finite_or_none(bar_value * scale), "bar_error": finite_or_none(bar_error * scale),
            }
        overlap = self.neighbor_overlap()
        result["overlap_min"] = finite_or_none(overlap.min()) if len(overlap) else 1.0
        result["samples_per_state"] = [int(count) for count in self.samples_per_state]
        if self.statistical_inefficiency is not None:
            result["statistical_inefficiency"] = [finite_or_none(g) for g in self.statistical_inefficiency]
        result["temperature"] = self.temperature
        result["warnings"] = list(self.warnings)
        return result


def _bar_steps(samples: FreeEnergySamples, pymbar) -> tuple[np.ndarray, np.ndarray]:
    """BAR between every state and the next (see the module docstring for the steps pymbar's BAR cannot
    take)."""
    steps, errors = [], []
    for k in range(samples.n_states - 1):
        from_k = samples.state_index == k
        from_next = samples.state_index == k + 1
        if not from_k.any() or not from_next.any():
            raise ConfigurationError(f"BAR: states {k} and {k + 1} both need samples")
        work_forward = samples.u_kn[k + 1, from_k] - samples.u_kn[k, from_k]
        work_reverse = samples.u_kn[k, from_next] - samples.u_kn[k + 1, from_next]
        if not work_forward.any() and not work_reverse.any():  # identical states: pymbar's variance is NaN
            steps.append(0.0)
            errors.append(0.0)
            continue
        step, error = 0.0, 0.0  # what pymbar's BAR answers when it gives up (infinite works, no bracket)
        if np.isfinite(work_forward).all() and np.isfinite(work_reverse).all():
            result = pymbar.other_estimators.bar(work_forward, work_reverse, relative_tolerance=1e-12)
            step, error = float(result["Delta_f"]), float(result["dDelta_f"])
        if (step, error) == (0.0, 0.0) or not (math.isfinite(step) and math.isfinite(error)):
            pair = from_k | from_next  # MBAR of the two states, which is BAR
            estimator = pymbar.MBAR(samples.u_kn[k:k + 2, pair], [int(from_k.sum()), int(from_next.sum())],
                                    relative_tolerance=1e-12)
            result = estimator.compute_free_energy_differences()
            step, error = float(result["Delta_f"][0, 1]), float(result["dDelta_f"][0, 1])
        steps.append(step)
        errors.append(error)
    return np.array(steps), np.array(errors)


def _overlap_warnings(overlap: np.ndarray, states) -> tuple[str, ...]:
    """A sentence for every neighbour pair whose overlap is below :data:`MIN_OVERLAP`, each also given to
    ``warnings.warn``."""
    messages = []
    for k in range(len(overlap) - 1):
        if overlap[k, k + 1] < MIN_OVERLAP:
            unknown = (" (no overlap at all: BAR's and the bootstrap's uncertainties across it are unknown)"
                       if overlap[k, k + 1] < NO_OVERLAP else "")
            messages.append(
                f"states {k} {states[k]} and {k + 1} {states[k + 1]} overlap by {overlap[k, k + 1]:.3g}, "
                f"below {MIN_OVERLAP}{unknown}: the free energy across this step is unreliable; add states "
                "between them or sample longer")
            warnings.warn(messages[-1], RuntimeWarning, stacklevel=3)
    return tuple(messages)


def _check(samples) -> None:
    if not isinstance(samples, FreeEnergySamples):
        raise ConfigurationError(f"expected FreeEnergySamples, got {type(samples).__name__}")
    empty = np.flatnonzero(samples.samples_per_state == 0)
    if len(empty):
        raise ConfigurationError(f"state {int(empty[0])} has no samples (of {samples.n_states} states)")


def estimate(samples: FreeEnergySamples, *, bootstrap: int = 0, seed: int = 0,
             inefficiencies=None) -> FreeEnergyEstimate:
    """MBAR, BAR and the overlap matrix of ``samples`` (see the module docstring).

    Args:
        samples: :class:`FreeEnergySamples` (every state with samples); decorrelate them first
            (:func:`decorrelate`) for honest uncertainties.
        bootstrap: number of bootstrap resamplings for MBAR's bootstrap uncertainty (0: none).
        seed: seeds the bootstrap (the global numpy generator is restored afterwards).
        inefficiencies: optional ``(K,)`` statistical inefficiencies to record in the result.

    Returns:
        :class:`FreeEnergyEstimate`; a ``RuntimeWarning`` is issued for every neighbour pair whose overlap
        is below :data:`MIN_OVERLAP` (the same sentences are in its ``warnings``).
    """
    _check(samples)
    counts = samples.samples_per_state
    with _pymbar() as pymbar:
        np.random.seed(seed)  # pymbar draws its bootstrap from the global generator (reseeded randomly
        # unless rseed is given: pymbar 4 then keeps the state set here)
        estimator = pymbar.MBAR(samples.u_kn, counts, relative_tolerance=1e-12,
                                n_bootstraps=int(bootstrap), rseed=seed)
        analytic = estimator.compute_free_energy_differences()
        bootstrapped = None
        if bootstrap:
            bootstrapped = np.asarray(estimator.compute_free_energy_differences(
                uncertainty_method="bootstrap")["dDelta_f"])
        overlap = np.asarray(estimator.compute_overlap()["matrix"])
        steps, step_errors = _bar_steps(samples, pymbar)
    index = np.arange(samples.n_states)
    lower, upper = np.minimum.outer(index, index), np.maximum.outer(index, index)
    for k in np.flatnonzero(np.diagonal(overlap, 1) < NO_OVERLAP):  # steps without overlap
        step_errors[k] = np.nan
        if bootstrapped is not None:  # every pair of states on either side of the step
            bootstrapped[(lower <= k) & (upper > k)] = np.nan
    if inefficiencies is not None:
        inefficiencies = np.asarray(inefficiencies, dtype=np.float64)
    return FreeEnergyEstimate(np.asarray(analytic["Delta_f"]), np.asarray(analytic["dDelta_f"]), bootstrapped,
                              overlap, steps, step_errors, counts, samples.temperature, inefficiencies,
                              _overlap_warnings(overlap, samples.states))


@dataclass(frozen=True)
class ConvergenceResult:
    """The first-to-last free energy from growing fractions of the samples (kT).

    Attributes:
        fractions: ``(F,)`` the fraction of every state's samples used.
        forward, forward_error: ``(F,)`` from the first ``fraction`` of the samples.
        reverse, reverse_error: ``(F,)`` from the last ``fraction``.
    """

    fractions: np.ndarray
    forward: np.ndarray
    forward_error: np.ndarray
    reverse: np.ndarray
    reverse_error: np.ndarray


def convergence(samples: FreeEnergySamples, fractions=None) -> ConvergenceResult:
    """MBAR's first-to-last difference from the first and from the last ``fraction`` of every state's
    samples (time order), for ``fractions`` (default 0.1, 0.2, ... 1.0); each state keeps at least one
    sample."""
    _check(samples)
    fractions = np.linspace(0.1, 1.0, 10) if fractions is None else np.asarray(fractions, dtype=np.float64)
    if fractions.ndim != 1 or not len(fractions) or (fractions <= 0).any() or (fractions > 1).any():
        raise ConfigurationError(f"convergence: fractions must lie in (0, 1], got {fractions.tolist()}")
    position = np.empty(samples.u_kn.shape[1], dtype=np.int64)  # rank of each sample within its state
    counts = samples.samples_per_state
    for state in range(samples.n_states):
        position[samples.state_index == state] = np.arange(counts[state])
    per_sample_count = counts[samples.state_index]
    rows = {"forward": [], "reverse": []}
    with _pymbar() as pymbar:
        for fraction in fractions:
            keep = np.maximum(1, np.ceil(fraction * per_sample_count - 1e-9)).astype(np.int64)
            for direction, mask in (("forward", position < keep),
                                    ("reverse", position >= per_sample_count - keep)):
                part = samples.select(mask)
                estimator = pymbar.MBAR(part.u_kn, part.samples_per_state, relative_tolerance=1e-12)
                result = estimator.compute_free_energy_differences()
                rows[direction].append((result["Delta_f"][0, -1], result["dDelta_f"][0, -1]))
    forward, reverse = np.array(rows["forward"]), np.array(rows["reverse"])
    return ConvergenceResult(fractions, forward[:, 0], forward[:, 1], reverse[:, 0], reverse[:, 1])
