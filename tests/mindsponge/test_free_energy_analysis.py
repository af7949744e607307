"""Equilibration detection of mindsponge.free_energy_analysis against an exact free energy, and the
estimators on the cases that used to give confident wrong numbers (infinite works, identical states,
states without overlap) or raw errors (NaN, damaged files).

Two 1D harmonic states ``u_k(x) = k x^2 / 2`` (kT units) differ by ``0.5 ln(k1 / k0)`` exactly. Samples
are exact draws, one per state per iteration, except that the first iterations come from a distribution
three times too wide (a run started away from equilibrium): a fixed short burn-in keeps them and biases
MBAR; :func:`discard_equilibration` must find where they end.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("pymbar")

from common.errors import DataError  # noqa: E402
from mindsponge.free_energy_analysis import FreeEnergySamples, discard_equilibration, estimate  # noqa: E402

FORCE_CONSTANTS = (1.0, 4.0)
EXACT = 0.5 * np.log(FORCE_CONSTANTS[1] / FORCE_CONSTANTS[0])


def _samples(iterations, transient, seed=0):
    generator = np.random.default_rng(seed)
    widths = np.array([[1 / np.sqrt(k) for k in FORCE_CONSTANTS]] * iterations)  # (T, K)
    widths[:transient] *= 3.0
    positions = generator.normal(size=widths.shape) * widths  # (T, K): the sample drawn in state k
    x = positions.reshape(-1)
    u_kn = np.array([0.5 * k * x**2 for k in FORCE_CONSTANTS])
    states = [{"lambda": 0.0}, {"lambda": 1.0}]
    iteration = np.repeat(np.arange(iterations), 2)
    return FreeEnergySamples(u_kn=u_kn, state_index=np.tile([0, 1], iterations), iteration=iteration,
                             time=iteration.astype(float), states=states, temperature=300.0)


def test_the_start_away_from_equilibrium_is_found_and_discarded():
    samples = _samples(iterations=600, transient=150)
    kept, start = discard_equilibration(samples)
    assert 140 <= start <= 220, start
    assert kept.iteration.min() == start and len(kept.iteration) == 2 * (600 - start)
    biased, biased_error = estimate(samples).mbar_difference()
    value, error = estimate(kept).mbar_difference()
    assert abs(biased - EXACT) > 4 * biased_error  # the transient matters: the test has teeth
    assert abs(value - EXACT) < 4 * error, (value, error, EXACT)


def test_an_equilibrated_run_keeps_nearly_everything():
    kept, start = discard_equilibration(_samples(iterations=400, transient=0, seed=1))
    assert start < 40, start
    value, error = estimate(kept).mbar_difference()
    assert abs(value - EXACT) < 4 * error


def test_a_leg_analysed_with_automatic_equilibration_records_where_it_started():
    from mindsponge.free_energy import analyze

    leg = analyze(_samples(iterations=600, transient=150, seed=2), equilibration="auto")
    summary = leg.summary()
    assert 140 <= summary["equilibration_iterations"] <= 220
    assert leg.used.iteration.min() >= summary["equilibration_iterations"]
    value, error = leg.estimate.mbar_difference()
    assert abs(value - EXACT) < 4 * error


def _gaussian_states(centres, widths, per_state=200, seed=0, temperature=300.0):
    """Exact samples of 1D states ``u_k(x) = (x - c_k)^2 / (2 w_k^2)`` (kT): ``f_k = -ln(sqrt(2 pi) w_k)``."""
    generator = np.random.default_rng(seed)
    x = np.concatenate([generator.normal(centre, width, per_state) for centre, width in zip(centres, widths)])
    u_kn = np.array([(x - centre) ** 2 / (2 * width**2) for centre, width in zip(centres, widths)])
    iteration = np.tile(np.arange(per_state), len(centres))
    return FreeEnergySamples(u_kn, np.repeat(np.arange(len(centres)), per_state), iteration,
                             iteration.astype(float), [{"k": float(k)} for k in range(len(centres))],
                             temperature)


def test_a_step_between_identical_states_is_zero_with_zero_error():
    """Works all exactly 0 (a lambda that changes nothing here): pymbar's BAR variance came out NaN, and
    results.json then held a bare NaN."""
    generator = np.random.default_rng(3)
    x = generator.normal(size=30)
    u_kn = np.array([x**2 / 2, x**2 / 2, 0.6 * x**2])
    iteration = np.tile(np.arange(10), 3)
    samples = FreeEnergySamples(u_kn, np.repeat([0, 1, 2], 10), iteration, iteration.astype(float),
                                [{"k": 1.0}, {"k": 1.0}, {"k": 1.2}], 300.0)
    result = estimate(samples)
    assert result.bar_steps[0] == 0.0 and result.d_bar_steps[0] == 0.0
    assert result.d_bar_steps[1] > 0
    summary = result.summary()
    assert summary["kT"]["bar_error"] > 0
    json.dumps(summary, allow_nan=False)  # strict JSON


def test_bar_with_an_infinite_work_is_mbar_of_the_pair_not_zero():
    """A sample impossible in the other state (u = +inf) made pymbar's BAR answer exactly 0 +- 0; the
    step is then MBAR of the two states (which is BAR), close to the exact -ln 1.5."""
    samples = _gaussian_states([0.0, 0.5], [1.0, 1.5])
    exact = -np.log(1.5)
    for state, sample in ((1, 5), (0, 205)):  # a forward work, then a reverse work, infinite
        u_kn = samples.u_kn.copy()
        u_kn[state, sample] = np.inf
        result = estimate(replace(samples, u_kn=u_kn))
        value, error = result.bar_difference()
        assert error > 0 and abs(value - exact) < 4 * error, (value, error, exact)
        assert (value, error) == pytest.approx(result.mbar_difference(), rel=1e-6)


def test_states_without_overlap_are_warned_about_and_their_errors_are_unknown():
    """Two states 40 widths apart share no sample: the estimate names the pair in a warning and in its
    summary, and BAR's and the bootstrap's uncertainties (tiny, and wrong) are unknown (None)."""
    with pytest.warns(RuntimeWarning, match=r"states 0 .* and 1 .* overlap by .* below 0.03"):
        result = estimate(_gaussian_states([0.0, 40.0], [1.0, 1.0]), bootstrap=5)
    summary = result.summary()
    assert len(summary["warnings"]) == 1 and "states 0" in summary["warnings"][0]
    assert summary["kT"]["bar_error"] is None and summary["kT"]["mbar_bootstrap_error"] is None
    json.dumps(summary, allow_nan=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        close = estimate(_gaussian_states([0.0, 0.5], [1.0, 1.0]), bootstrap=5)
    assert not [warning for warning in caught if "overlap by" in str(warning.message)]
    assert close.warnings == () and close.summary()["kT"]["mbar_bootstrap_error"] > 0


def test_nan_reduced_potentials_are_refused_naming_the_state_and_sample():
    """NaN (a failed energy evaluation) used to reach pymbar as a LAPACK failure; +inf stays allowed."""
    samples = _gaussian_states([0.0, 0.5], [1.0, 1.0], per_state=10)
    u_kn = samples.u_kn.copy()
    u_kn[1, 3] = np.nan
    with pytest.raises(DataError, match=r"NaN in state 1 for sample 3 \(drawn in state 0"):
        FreeEnergySamples(u_kn, samples.state_index, samples.iteration, samples.time, samples.states, 300.0)
    u_kn[1, 3] = np.inf
    FreeEnergySamples(u_kn, samples.state_index, samples.iteration, samples.time, samples.states, 300.0)


@pytest.mark.parametrize("kept", [0.5, 0.0])
def test_a_damaged_samples_file_is_refused_naming_it(tmp_path, kept):
    """A truncated or empty u_kn.npz raised zipfile's or numpy's own errors without the file's name."""
    path = tmp_path / "u_kn.npz"
    _gaussian_states([0.0, 0.5], [1.0, 1.0], per_state=10).save(path)
    assert FreeEnergySamples.load(path).u_kn.shape == (2, 20)
    content = path.read_bytes()
    path.write_bytes(content[: int(kept * len(content))])
    with pytest.raises(DataError, match=f"{path}: cannot read FreeEnergySamples"):
        FreeEnergySamples.load(path)
