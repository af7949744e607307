"""Replica exchange (mindsponge.replica_exchange): free energies against an analytic case, REMD and HREX
against plain sampling, the bookkeeping of swaps and round trips, checkpoints, and Dask.

- Harmonic tethers (``U = k/2 |x - x0|^2`` for every particle): the configurational free energy at
  temperature ``T`` is ``-(3N/2) ln T`` + const in kT, so MBAR over REMD samples must give
  ``Delta f_k = (3N/2) ln(T_0/T_k)`` within its uncertainty (with the centre-of-mass motion left alone:
  removing it freezes the centre, and ``3N`` becomes ``3N - 3``, as measured before it was left alone).
- Alanine dipeptide in vacuum (amber14): the 300 K state of REMD over 6 temperatures gives the populations
  of the psi basins (alpha_R, -120 < psi < 50 degrees, against C7eq and C5) of a plain 300 K run that is
  ten times longer, within their combined errors (block averages). CI runs 300 rounds of 500 steps;
  ``MINDSPONGE_REMD_FULL=1`` runs 1000. (Measured: at 120 rounds the block errors of the 300 K state
  were too small by half, 3.4 of them from the plain run; at 600 rounds 0.281 +- 0.014 against
  0.257 +- 0.005 for 3 million plain steps.) (phi > 0, C7ax, is too rare at 300 K in vacuum for either run
  to measure: below 0.1 % in both.)
- Umbrella sampling of phi as HREX gives the profile of independent windows within their errors.
- A run continued from its checkpoint, and a run on a Dask cluster of two worker processes (one of them
  killed mid-run), equal the single-process run bit for bit.
"""

import math
import os

import numpy as np
import pytest
import torch

import mindsponge as ms
from common.errors import ConfigurationError
from mindsponge import replica_exchange as rex
from mindsponge.bias import UmbrellaSampling
from mindsponge.forcefield.base import EnergyTerm

openmm = pytest.importorskip("openmm")
from openmm import app  # noqa: E402

FULL = os.environ.get("MINDSPONGE_REMD_FULL") == "1"
DIPEPTIDE = "tests/mindsponge/data/alanine_dipeptide.pdb"
PHI = (4, 6, 8, 14)  # C(ACE)-N-CA-C
PSI = (6, 8, 14, 16)  # N-CA-C-N(NME)


def _dipeptide():
    pdb = app.PDBFile(DIPEPTIDE)
    openmm_system = app.ForceField("amber14-all.xml").createSystem(
        pdb.topology, nonbondedMethod=app.NoCutoff, constraints=app.HBonds
    )
    return ms.System.from_pdb(DIPEPTIDE), ms.interop.openmm.from_openmm(openmm_system)


class _Tethers(EnergyTerm):
    """Every particle tethered to its start: ``U = k/2 sum |x - x0|^2`` (kJ/mol, k in kJ/mol/nm^2)."""

    def __init__(self, anchors, k=500.0):
        super().__init__("tethers")
        self.register_buffer("anchors", anchors.clone())
        self.k = k

    def forward(self, positions, box=None):
        return 0.5 * self.k * ((positions - self.anchors.to(positions)) ** 2).sum()


def _tethered(n=6):
    positions = torch.arange(3 * n, dtype=torch.float64).reshape(n, 3) * 0.7
    system = ms.System(positions, torch.full((n,), 12.0, dtype=torch.float64))
    return system, ms.ForceField([_Tethers(positions)])


@pytest.mark.slow
@pytest.mark.slow
def test_mbar_free_energies_of_harmonic_tethers_match_the_analytic_ones(validation_figure):
    system, forcefield = _tethered()
    temperatures = rex.geometric_temperatures(300.0, 420.0, 4)
    sampler = rex.ReplicaExchange(
        system,
        forcefield,
        [rex.ThermodynamicState(t) for t in temperatures],
        ms.integrators.LangevinMiddle(0.004, 300.0, 10.0),
        steps_per_round=50,
        remove_center_of_mass_motion=False,
        progress=False,
        seed=1,
    )
    record = sampler.run(400)
    free, error = record.free_energies(discard=20)
    expected = 1.5 * system.n_atoms * np.log(temperatures[0] / np.asarray(temperatures))
    deviations = np.abs(free - expected)[1:] / error[1:]
    validation_figure(
        f"Delta f {np.round(free, 3).tolist()} kT against {np.round(expected, 3).tolist()}, "
        f"largest deviation {deviations.max():.1f} sigma"
    )
    assert np.all(deviations < 4), (free, expected, error)
    assert np.all(record.acceptance()[np.arange(3), np.arange(1, 4)] > 0.2)


def test_exchange_bookkeeping_swaps_and_round_trips():
    """With equal reduced potentials every swap is accepted: neighbours alternate even and odd pairs."""
    record = rex.ExchangeRecord(
        np.array([300.0, 310.0, 320.0]),
        attempted=np.zeros((3, 3), dtype=np.int64),
        accepted=np.zeros((3, 3), dtype=np.int64),
        samples=[[], [], []],
    )
    sampler = rex.ReplicaExchange.__new__(rex.ReplicaExchange)
    sampler.record, sampler.exchange, sampler.states = record, "neighbors", (None,) * 3
    sampler.assignment, sampler._rng, sampler.rounds_done = np.arange(3), np.random.default_rng(0), 0
    for round_index in range(8):
        sampler.rounds_done = round_index
        sampler._exchange(np.zeros((3, 3)))
        record.states.append(sampler.assignment.copy())
    # replica 0 goes 0 -> 1 -> 2 -> 2 -> 1 -> 0 -> 0 -> 1 -> 2
    assert record.state_trajectory()[:, 0].tolist() == [1, 2, 2, 1, 0, 0, 1, 2]
    assert record.accepted[0, 1] == record.attempted[0, 1] == 4 and record.attempted[0, 2] == 0
    assert record.round_trips()[0] == 1
    assert np.isnan(record.acceptance()[0, 2]) and record.acceptance()[1, 2] == 1.0
    replicas = record.replica_trajectory()
    assert all(sorted(row) == [0, 1, 2] for row in replicas)


@pytest.mark.parametrize("exchange", ["neighbors", "all"])
def test_exchanges_sample_assignments_with_their_boltzmann_weights(exchange):
    """With fixed reduced potentials u[replica, state], the exchanges are a Markov chain over assignments
    whose stationary distribution is exp(-sum_i u[i, state of i]) / Z: visited frequencies against the
    exact ones over all 24 assignments of 4 replicas."""
    import itertools

    reduced = np.random.default_rng(3).normal(scale=0.5, size=(4, 4))  # largest weight 0.21
    record = rex.ExchangeRecord(np.full(4, 300.0), attempted=np.zeros((4, 4), dtype=np.int64),
                                accepted=np.zeros((4, 4), dtype=np.int64), samples=[[], [], [], []])
    sampler = rex.ReplicaExchange.__new__(rex.ReplicaExchange)
    sampler.record, sampler.exchange, sampler.states = record, exchange, (None,) * 4
    sampler.assignment, sampler._rng = np.arange(4), np.random.default_rng(0)
    rounds = {"all": 4000, "neighbors": 40000}[exchange]  # one pair swap a round mixes slowly
    visits = {}
    for round_index in range(rounds):
        sampler.rounds_done = round_index
        sampler._exchange(reduced)
        key = tuple(sampler.assignment.tolist())
        visits[key] = visits.get(key, 0) + 1
    permutations = list(itertools.permutations(range(4)))
    weights = np.array([math.exp(-sum(reduced[i, state] for i, state in enumerate(p))) for p in permutations])
    exact = weights / weights.sum()
    observed = np.array([visits.get(p, 0) for p in permutations]) / rounds
    # the largest deviation over six seeds was 0.015 (neighbours) and 0.009 (all)
    assert np.abs(observed - exact).max() < 0.03, (observed.round(3), exact.round(3))
    attempts = {"all": 4**3 * rounds, "neighbors": 3 * rounds // 2}[exchange]  # pairs (0 1, 2 3), (1 2)
    assert record.attempted.sum() == 2 * attempts  # both orders of each pair


def _alpha_fraction(psi, blocks=8):
    """Fraction of psi in (-120, 50) degrees (alpha_R), and its standard error from ``blocks`` block
    averages."""
    inside = (np.asarray(psi).reshape(-1) > math.radians(-120)) & (
        np.asarray(psi).reshape(-1) < math.radians(50)
    )
    fractions = [float(block.mean()) for block in np.array_split(inside, blocks)]
    return float(inside.mean()), float(np.std(fractions, ddof=1) / math.sqrt(blocks))


@pytest.mark.slow
def test_remd_gives_the_phi_populations_of_a_long_plain_run(validation_figure):
    rounds = 1000 if FULL else 300
    system, forcefield = _dipeptide()
    psi = ms.colvar.Torsion(PSI)
    temperatures = rex.geometric_temperatures(300.0, 600.0, 6)
    sampler = rex.ReplicaExchange(
        system,
        forcefield,
        [rex.ThermodynamicState(t) for t in temperatures],
        ms.integrators.LangevinMiddle(0.002, 300.0, 1.0),
        steps_per_round=500,
        colvars=[psi],
        sample_every=50,
        progress=False,
        seed=2,
    )
    record = sampler.run(rounds)
    remd, remd_error = _alpha_fraction(np.asarray(record.samples[0])[len(record.samples[0]) // 10 :, 0])
    plain_steps = 10 * rounds * 500
    recorder = ms.bias.ColvarReporter([psi], every=50)
    simulation = ms.Simulation(
        system,
        forcefield,
        ms.integrators.LangevinMiddle(0.002, 300.0, 1.0),
        reporters=[recorder],
        progress=False,
        seed=5,
    )
    simulation.minimize()
    simulation.set_velocities(300.0, seed=5)
    simulation.run(plain_steps)
    plain, plain_error = _alpha_fraction(recorder.values[len(recorder.values) // 10 :, 0])
    combined = math.hypot(remd_error, plain_error)
    trips = record.round_trips()
    validation_figure(
        f"alpha_R population at 300 K: REMD {remd:.3f} +- {remd_error:.3f} ({rounds} rounds of 500 "
        f"steps, round trips {trips.tolist()}), plain MD {plain:.3f} +- {plain_error:.3f} "
        f"({plain_steps} steps)"
    )
    assert 0.02 < plain < 0.98  # an observable both runs sample
    assert abs(remd - plain) < 3 * combined
    assert trips.sum() >= 1
    assert np.all(record.acceptance()[np.arange(5), np.arange(1, 6)] > 0.1)


@pytest.mark.slow
def test_umbrella_sampling_as_hrex_matches_independent_windows(validation_figure):
    """24 windows of phi (k = 100 kJ/mol/rad^2, restraints compiled as impropers), both protocols from the
    same starts (each window equilibrated under its restraint); profiles compared where below 25 kJ/mol."""
    system, forcefield = _dipeptide()
    phi = ms.colvar.Torsion(PHI)
    centers = np.linspace(-math.pi, math.pi, 24, endpoint=False)
    steps = 40_000 if FULL else 10_000
    integrator = ms.integrators.LangevinMiddle(0.002, 300.0, 1.0)
    independent = UmbrellaSampling(phi, centers, force_constant=100.0, temperature=300.0)

    def windowed(restraint):
        return ms.ForceField(
            [*forcefield.terms, restraint], masses=forcefield.masses, constraints=forcefield.constraints
        )

    starts = []
    for window, restraint in enumerate(independent.restraints):
        simulation = ms.Simulation(system, windowed(restraint), integrator, progress=False, seed=window)
        simulation.minimize(max_iterations=500)
        simulation.set_velocities(300.0, seed=window)
        simulation.run(2000)
        starts.append(simulation.state.positions.clone())
    starts = torch.stack(starts)
    assert simulation.step_loop is not None and "umbrella23" in simulation.step_loop.compiled_names

    def simulate(restraint, window):
        simulation = ms.Simulation(system, windowed(restraint), integrator, progress=False, seed=window + 50)
        simulation.state = simulation._with_forces(simulation.state.replace(positions=starts[window]))
        simulation.set_velocities(300.0, seed=window + 50)
        return simulation

    independent.run(simulate, steps, every=10, progress=False)
    exchanged = UmbrellaSampling(phi, centers, force_constant=100.0, temperature=300.0)
    record = exchanged.run_exchange(
        system,
        forcefield,
        integrator,
        rounds=steps // 100,
        steps_per_round=100,
        sample_every=10,
        starts=starts,
        progress=False,
        seed=3,
    )
    edges = np.linspace(-math.pi, math.pi, 37)
    _, reference = independent.free_energy(edges)
    _, profile = exchanged.free_energy(edges)
    both = np.isfinite(profile) & np.isfinite(reference) & (reference < 25.0)
    difference = profile[both] - reference[both]
    difference -= difference.mean()
    rms = float(np.sqrt((difference**2).mean()))
    acceptance = record.acceptance()[np.arange(23), np.arange(1, 24)]
    validation_figure(
        f"phi profile, 24 windows x {steps} steps: HREX against independent windows, RMS "
        f"difference {rms:.2f} kJ/mol over {both.sum()} bins below 25 kJ/mol; neighbour "
        f"acceptance median {np.median(acceptance):.2f}"
    )
    assert both.sum() >= 20 and rms < 2.0
    assert np.median(acceptance) > 0.2


def _small_remd(**options):
    system, forcefield = _dipeptide()
    return rex.ReplicaExchange(
        system,
        forcefield,
        [rex.ThermodynamicState(t) for t in (300.0, 340.0, 390.0)],
        ms.integrators.LangevinMiddle(0.002, 300.0, 1.0),
        steps_per_round=40,
        progress=False,
        seed=7,
        **options,
    )


def _same(first, second):
    for a, b in zip(first.replica_states, second.replica_states, strict=True):
        for name in ("positions", "velocities", "forces", "potential_energy", "rng_state"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert np.array_equal(first.record.state_trajectory(), second.record.state_trajectory())
    assert np.array_equal(
        np.asarray(first.record.reduced_potentials), np.asarray(second.record.reduced_potentials)
    )


def test_a_run_continued_from_its_checkpoint_is_the_same(tmp_path):
    straight = _small_remd()
    straight.run(6)
    path = tmp_path / "remd.chk"
    first = _small_remd(checkpoint=path)
    first.run(3)
    continued = _small_remd(checkpoint=path)
    continued.run(3)  # reads the checkpoint of round 3 first
    assert continued.rounds_done == 6
    _same(straight, continued)


def _exit_on_marker(marker):
    """A collective variable that kills its worker process once (when ``marker`` exists)."""

    class Crash(ms.colvar.Torsion):
        def compute(self, positions, box):
            if os.path.exists(marker):
                os.remove(marker)
                os._exit(1)
            return super().compute(positions, box)

    return Crash(PHI)


@pytest.mark.slow
@pytest.mark.slow
def test_dask_workers_give_the_single_process_run_and_survive_a_killed_worker(tmp_path):
    distributed = pytest.importorskip("distributed")
    local = _small_remd(colvars=[ms.colvar.Torsion(PHI)])
    local.run(4)
    marker = tmp_path / "kill-a-worker"
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        remote = _small_remd(colvars=[_exit_on_marker(str(marker))], scheduler=client)
        remote.run(2)
        marker.write_text("")  # the next round's first sample on a worker kills that worker
        remote.run(2)
        assert not marker.exists()  # a worker died, and the round was run again elsewhere
    _same(local, remote)


def test_bad_arguments_are_refused():
    system, forcefield = _dipeptide()
    integrator = ms.integrators.LangevinMiddle(0.002, 300.0, 1.0)
    with pytest.raises(ConfigurationError, match="two or more"):
        rex.ReplicaExchange(system, forcefield, [rex.ThermodynamicState(300.0)], integrator, 10)
    with pytest.raises(ConfigurationError, match="exchange must be one of"):
        rex.ReplicaExchange(
            system, forcefield, [rex.ThermodynamicState(300.0)] * 2, integrator, 10, exchange="ring"
        )
    with pytest.raises(ConfigurationError, match="temperature must be a positive"):
        rex.ThermodynamicState(-5.0)
    with pytest.raises(ConfigurationError, match=r"starts must be \(2, 22, 3\)"):
        rex.ReplicaExchange(
            system,
            forcefield,
            [rex.ThermodynamicState(300.0)] * 2,
            integrator,
            10,
            starts=torch.zeros(3, 22, 3),
        )
    with pytest.raises(ConfigurationError, match="no temperature"):
        rex.ReplicaExchange(
            system, forcefield, [rex.ThermodynamicState(300.0)] * 2, ms.integrators.VelocityVerlet(0.002), 10
        )


def test_umbrella_exchange_takes_any_potential_module():
    """run_exchange with a potential that is not a ForceField (here the dipeptide's force field behind a
    SumPotential, as a learned potential or GFN2-xTB would be; no constraints, which a bare potential does
    not carry) samples what the ForceField itself samples: the same windows, seed and starts give the same
    samples (double precision, to 1e-6 rad) and the same exchanges; anything but a module is refused."""
    from mindsponge.potentials import SumPotential

    pdb = app.PDBFile(DIPEPTIDE)
    forcefield = ms.interop.openmm.from_openmm(
        app.ForceField("amber14-all.xml").createSystem(pdb.topology, nonbondedMethod=app.NoCutoff))
    system = ms.System.from_pdb(DIPEPTIDE).replace(masses=forcefield.masses)  # OpenMM's, as the force field's
    phi = ms.colvar.Torsion(PHI)
    start = float(phi(system.positions, None))
    centers = [start - 0.2, start, start + 0.2]
    integrator = ms.integrators.LangevinMiddle(0.0005, 300.0, 1.0)
    options = dict(rounds=4, steps_per_round=20, sample_every=5, precision="double", seed=5, progress=False)
    runs = []
    for potential in (forcefield, SumPotential(forcefield)):
        umbrella = UmbrellaSampling(phi, centers, force_constant=100.0, temperature=300.0)
        record = umbrella.run_exchange(system, potential, integrator, **options)
        runs.append((np.stack(umbrella.samples), np.array(record.states)))
    (samples, states), (wrapped_samples, wrapped_states) = runs
    assert samples.shape == (3, 16) and np.abs(samples - wrapped_samples).max() < 1e-6
    assert np.array_equal(states, wrapped_states)
    with pytest.raises(TypeError, match="a ForceField or a potential module"):
        UmbrellaSampling(phi, centers, 100.0, 300.0).run_exchange(
            system, lambda positions, box: positions.sum(), integrator, **options)
