"""Equilibration detection of mindsponge.free_energy_analysis against an exact free energy.

Two 1D harmonic states ``u_k(x) = k x^2 / 2`` (kT units) differ by ``0.5 ln(k1 / k0)`` exactly. Samples
are exact draws, one per state per iteration, except that the first iterations come from a distribution
three times too wide (a run started away from equilibrium): a fixed short burn-in keeps them and biases
MBAR; :func:`discard_equilibration` must find where they end.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pymbar")

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
