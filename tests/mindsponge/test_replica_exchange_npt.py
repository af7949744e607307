"""Replica exchange at constant pressure: every replica moves its box with the barostat at its state's
temperature, and the reduced potentials carry ``beta_k p V``.

The check is the ideal gas, whose isothermal-isobaric ensemble is known exactly: N molecules at pressure
``p`` have ``<V> = (N + 1) kT / p``. Temperature replica exchange over three temperatures must give every
state its own mean volume. (Without the ``p V`` term every swap of an ideal gas is accepted, and each
state's volumes are pulled toward the others': +5.5 %, +0.2 % and -4.7 %, 15 standard errors, in the run
below; with it -0.0 %, -0.6 % and +0.2 %.) The tolerance adds 0.5 % to four standard errors: the Monte
Carlo barostat adapts its volume step to its acceptance rate (as OpenMM's does), which breaks detailed
balance slightly, visibly so for a gas whose volume fluctuates this much (a single NPT run of 24 atoms,
whose volume fluctuates by 20 %, reads 0.5 +- 0.3 % low).
"""

import numpy as np
import pytest
import torch

from common.errors import ConfigurationError
from common.units import BAR_NM3_TO_KJ_PER_MOL, BOLTZMANN_MD
from mindsponge import barostats, integrators
from mindsponge import replica_exchange as rex
from mindsponge.system import System

ATOMS, PRESSURE = 200, 1000.0  # bar; the volume fluctuates by 1 / sqrt(N + 1) = 7 %
TEMPERATURES = (300.0, 330.0, 363.0)


class IdealGas(torch.nn.Module):
    """No interactions: zero energy and forces."""

    def forward(self, positions, box=None):
        return (positions * 0.0).sum()


def ideal_gas_system():
    volume = (ATOMS + 1) * BOLTZMANN_MD * TEMPERATURES[0] / (PRESSURE * BAR_NM3_TO_KJ_PER_MOL)
    edge = volume ** (1.0 / 3.0)
    positions = torch.rand(ATOMS, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * edge
    return System(positions=positions, masses=torch.full((ATOMS,), 40.0, dtype=torch.float64),
                  box=torch.eye(3, dtype=torch.float64) * edge)


def sampler(rounds_checkpoint=None, barostat=None):
    return rex.ReplicaExchange(
        ideal_gas_system(), IdealGas(), [rex.ThermodynamicState(t) for t in TEMPERATURES],
        integrators.LangevinMiddle(0.002, TEMPERATURES[0], 5.0), steps_per_round=10, exchange="neighbors",
        barostat=barostat or barostats.MonteCarloBarostat(PRESSURE, TEMPERATURES[0], every=1),
        precision="double", progress=False, checkpoint=rounds_checkpoint)


def volumes_by_state(record, discard):
    """Each state's sampled volumes (nm^3), from the reduced potentials ``beta_k p V`` of its samples."""
    u_kn, counts = record.u_kn(discard=discard)
    volumes = u_kn[0] * BOLTZMANN_MD * TEMPERATURES[0] / (PRESSURE * BAR_NM3_TO_KJ_PER_MOL)
    return np.split(volumes, np.cumsum(counts)[:-1])


def block_error(values, blocks=10):
    means = np.array([block.mean() for block in np.array_split(values, blocks)])
    return means.std(ddof=1) / np.sqrt(blocks)


@pytest.mark.slow
def test_every_state_has_the_ideal_gas_mean_volume():
    run = sampler()
    run.run(600)
    for temperature, volumes in zip(TEMPERATURES, volumes_by_state(run.record, discard=50), strict=True):
        exact = (ATOMS + 1) * BOLTZMANN_MD * temperature / (PRESSURE * BAR_NM3_TO_KJ_PER_MOL)
        error = block_error(volumes)
        assert abs(volumes.mean() - exact) < 4 * error + 0.005 * exact, (temperature, volumes.mean(), exact,
                                                                          error)
        assert error < 0.006 * exact  # the check has the power to see a per cent
    assert 0.05 < run.record.acceptance()[0, 1] < 0.95  # the states overlap and do exchange


def test_reduced_potentials_carry_p_v_and_the_boxes_move(tmp_path):
    run = sampler()
    run.run(3)
    first = np.array([float(torch.linalg.det(state.box)) for state in run.replica_states])
    run.run(1)
    volumes = np.array([float(torch.linalg.det(state.box)) for state in run.replica_states])
    assert not np.allclose(volumes, first)  # the barostat moved every box
    expected = (PRESSURE * BAR_NM3_TO_KJ_PER_MOL * volumes)[:, None] / (
        BOLTZMANN_MD * np.asarray(TEMPERATURES))[None, :]
    np.testing.assert_allclose(run.record.reduced_potentials[-1], expected, rtol=1e-12)


def test_a_resumed_npt_run_is_the_uninterrupted_one(tmp_path):
    whole = sampler()
    whole.run(6)
    checkpoint = tmp_path / "rex.ckpt"
    first = sampler(checkpoint)
    first.run(3)
    second = sampler(checkpoint)
    second.run(3)
    np.testing.assert_array_equal(np.array(second.record.reduced_potentials),
                                  np.array(whole.record.reduced_potentials))


def test_barostats_that_do_not_sample_npt_are_refused():
    with pytest.raises(ConfigurationError, match="BerendsenBarostat does not sample"):
        sampler(barostat=barostats.BerendsenBarostat(PRESSURE))
    anisotropic = barostats.MonteCarloAnisotropicBarostat((1.0, 2.0, 1.0), 300.0)
    with pytest.raises(ConfigurationError, match="pressures .* differ along the axes"):
        sampler(barostat=anisotropic)
