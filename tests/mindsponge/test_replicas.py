"""Copies of one molecule run as one system (mindsponge.replicas): the same energies, forces and
trajectories as the copies one by one, for single models (fixed and filtered pairs) and committees."""

import numpy as np
import pytest
import torch
from learned_networks import energy_and_forces, model

import mindsponge as ms
from mindsponge.active import Committee, claisen
from mindsponge.bias import HarmonicRestraint
from mindsponge.colvar import Distance
from mindsponge.potentials import MolCT, PaiNN, SchNet, SumPotential
from mindsponge.replicas import ReplicaColvarReporter, WindowRestraints, replicate, split


def butane():
    """n-butane as a System (ase's G2 geometry, float64)."""
    import ase.build

    return ms.System.from_ase(ase.build.molecule("trans-butane"))


def configurations(system, count, seed=0):
    """``(count, N, 3)`` nm: the molecule with a different random displacement for each copy."""
    generator = torch.Generator().manual_seed(seed)
    noise = 0.01 * torch.randn((count, system.n_atoms, 3), generator=generator, dtype=torch.float64)
    return system.positions + noise


@pytest.mark.parametrize(
    "make", [lambda: model(SchNet), lambda: model(MolCT, heads=4)], ids=["fixed", "filtered"]
)
def test_replicated_potential_is_the_sum_of_the_copies(make):
    """Fixed all-pairs graphs (SchNet) and cutoff-filtered ones (MolCT): energy = sum over copies, forces
    on each copy = that copy's forces alone."""
    network, system = make(), butane()
    numbers = system.atomic_numbers
    starts = configurations(system, 3)
    alone = [energy_and_forces(network.bind(numbers), start) for start in starts]
    together = replicate(system, 3, positions=starts)
    energy, forces = energy_and_forces(network.bind(numbers, replicas=3), together.positions)
    torch.testing.assert_close(energy, sum(result[0] for result in alone), rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(
        forces.reshape(3, -1, 3), torch.stack([r[1] for r in alone]), rtol=1e-10, atol=1e-10
    )
    torch.testing.assert_close(split(together.positions, 3), starts, rtol=0, atol=1e-14)
    assert float(alone[0][1].abs().max()) > 1e-3 and abs(float(alone[0][0] - alone[1][0])) > 1e-6


@pytest.mark.parametrize("classes", [(PaiNN, PaiNN, PaiNN), (SchNet, PaiNN)], ids=["vectorised", "mixed"])
def test_replicated_committee_is_the_sum_of_the_copies(classes):
    system = butane()
    numbers = system.atomic_numbers
    committee = Committee([model(cls, seed) for seed, cls in enumerate(classes)])
    starts = configurations(system, 4, seed=2)
    bound = committee.bind(numbers)
    alone = [energy_and_forces(bound, start) for start in starts]
    replicated = bound.replicated(4)
    assert replicated.vectorised == bound.vectorised
    energy, forces = energy_and_forces(replicated, replicate(system, 4, positions=starts).positions)
    torch.testing.assert_close(energy, sum(result[0] for result in alone), rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(
        forces.reshape(4, -1, 3), torch.stack([r[1] for r in alone]), rtol=1e-10, atol=1e-10
    )


def test_window_restraints_are_one_harmonic_restraint_per_copy():
    system = butane()
    colvar = Distance([0, 3])
    centers = [0.30, 0.35, 0.40]
    starts = configurations(system, 3, seed=4)
    expected = [
        energy_and_forces(HarmonicRestraint(colvar, center, 5000.0), start)
        for center, start in zip(centers, starts)
    ]
    windows = WindowRestraints(colvar, centers, 5000.0)
    energy, forces = energy_and_forces(windows, replicate(system, 3, positions=starts).positions)
    torch.testing.assert_close(energy, sum(e for e, _ in expected), rtol=1e-12, atol=0)
    torch.testing.assert_close(
        forces.reshape(3, -1, 3), torch.stack([f for _, f in expected]), rtol=1e-12, atol=0
    )
    torch.testing.assert_close(
        windows.values(replicate(system, 3, positions=starts).positions),
        torch.stack([colvar(start) for start in starts]),
    )


def test_replicated_dynamics_are_the_copies_run_one_by_one():
    """Velocity Verlet in double precision without centre-of-mass removal: each copy's trajectory is the
    one it has alone."""
    system, network = butane(), model(PaiNN)
    numbers = system.atomic_numbers
    starts = configurations(system, 3, seed=5)
    generator = torch.Generator().manual_seed(6)
    velocities = 0.5 * torch.randn(starts.shape, generator=generator, dtype=torch.float64)

    def simulation(system, potential):
        return ms.Simulation(
            system,
            potential,
            ms.integrators.VelocityVerlet(0.0005),
            progress=False,
            remove_center_of_mass_motion=False,
            precision="double",
            overlap_distance=None,
        )

    finals = []
    for start, velocity in zip(starts, velocities):
        alone = simulation(system.replace(positions=start, velocities=velocity), network.bind(numbers))
        finals.append(alone.run(40).positions)
    together = replicate(system.replace(velocities=None), 3, positions=starts)
    together = simulation(
        together.replace(velocities=velocities.reshape(-1, 3)), network.bind(numbers, replicas=3)
    )
    reporter = ReplicaColvarReporter(Distance([0, 3]), 3, every=10)
    together.reporters.append(reporter)
    final = split(together.run(40).positions, 3)
    torch.testing.assert_close(final, torch.stack(finals), rtol=0, atol=1e-10)
    assert float((final - starts).abs().max()) > 1e-3  # they moved
    assert reporter.values.shape == (4, 3)
    torch.testing.assert_close(torch.as_tensor(reporter.values[-1]), Distance([0, 3])(torch.stack(finals)))


def test_replica_errors_name_what_is_wrong():
    system = butane()
    network = model(SchNet)
    with pytest.raises(ValueError, match=r"positions must be \(2, 14, 3\) nm"):
        replicate(system, 2, positions=torch.zeros(3, 14, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="this System has a box"):
        replicate(system.replace(box=torch.eye(3, dtype=torch.float64) * 3.0), 2)
    with pytest.raises(ValueError, match="number of replicas must be a positive int"):
        replicate(system, 0)
    with pytest.raises(ValueError, match="replicas must be a positive int"):
        network.bind(system.atomic_numbers, replicas=0)
    bound = network.bind(system.atomic_numbers, replicas=2)
    with pytest.raises(ValueError, match=r"\(28, 3\) nm for the bound atoms"):
        bound(system.positions)
    with pytest.raises(ValueError, match="replicas=2: copies of one molecule without a box"):
        bound(replicate(system, 2).positions, torch.eye(3, dtype=torch.float64) * 5.0)
    with pytest.raises(ValueError, match="force_constant must be positive"):
        WindowRestraints(Distance([0, 1]), [0.1], -1.0)


def test_umbrella_windows_run_together_stay_at_their_centres():
    """claisen.umbrella_profile(replicas=True) on a tiny SchNet: every window samples its own centre (the
    restraint, 20000 kJ/mol/nm^2, dominates the random network), and a potential that cannot be
    replicated is refused."""
    system = claisen.reactant()
    torch.manual_seed(0)
    network = SchNet(cutoff=0.5, features=8, interactions=1)
    centers = [-0.30, -0.20, -0.10]
    umbrella, frames, seconds = claisen.umbrella_profile(
        network.bind(system.atomic_numbers),
        centers,
        20000.0,
        300.0,
        steps=40,
        equilibration=20,
        every=4,
        pull_steps=100,
        progress=False,
        replicas=True,
    )
    assert frames.shape == (3, system.n_atoms, 3) and seconds > 0
    for center, samples in zip(centers, umbrella.samples):
        assert len(samples) == 10
        assert abs(float(np.mean(samples)) - center) < 0.05
    colvar = claisen.reaction_coordinate()
    values = colvar(torch.as_tensor(frames))
    assert float((values - torch.tensor(centers, dtype=values.dtype)).abs().max()) < 0.06
    with pytest.raises(TypeError, match="replicated"):
        claisen.umbrella_profile(
            SumPotential(network.bind(system.atomic_numbers)),
            centers,
            20000.0,
            300.0,
            steps=4,
            equilibration=0,
            replicas=True,
            progress=False,
        )


def test_umbrella_run_replicas_pulls_every_window_to_its_centre_round_a_torsion():
    """UmbrellaSampling.run_replicas on a tiny SchNet: every copy starts from the same geometry and its
    window's centre is pulled the short way round the periodic torsion (across +-180 degrees for two of
    them) to windows 120 degrees apart; each then samples its own centre. Bad starts are refused."""
    from mindsponge.colvar import Torsion
    from mindsponge.umbrella import UmbrellaSampling

    system = claisen.reactant()
    torch.manual_seed(0)
    bound = SchNet(cutoff=0.5, features=8, interactions=1).bind(system.atomic_numbers)
    torsion = Torsion([0, 1, 2, 3])
    start = float(torsion(system.positions, None))
    centers = [start + np.radians(120.0) * index for index in range(3)]
    umbrella = UmbrellaSampling(torsion, centers, 2000.0, 300.0)
    integrator = ms.integrators.LangevinMiddle(0.0005, 300.0, 5.0)
    frames, seconds = umbrella.run_replicas(system, bound, integrator, steps=40, equilibration=20, every=4,
                                            pull_steps=400, seed=2)
    assert frames.shape == (3, system.n_atoms, 3) and seconds > 0
    for center, samples in zip(centers, umbrella.samples):
        assert len(samples) == 10
        offsets = torsion.difference(torch.as_tensor(samples), center)
        assert float(offsets.abs().max()) < np.radians(20.0), (center, samples)
    with pytest.raises(ValueError, match=r"starts must be finite \(3, 14, 3\) nm"):
        umbrella.run_replicas(system, bound, integrator, steps=1, starts=np.zeros((2, 14, 3)))
    with pytest.raises(TypeError, match="replicated"):
        umbrella.run_replicas(system, SumPotential(bound), integrator, steps=1)


def test_pulled_starts_are_the_same_with_and_without_replicas():
    """starts="pulled" runs the replicas' protocol one window at a time: after one step from the pulled
    configurations the two runs' CV agree (to the step's motion) while the windows lie 0.1 nm apart; a
    sequential start with replicas, or an unknown protocol, is refused."""
    system = claisen.reactant()
    torch.manual_seed(0)
    bound = SchNet(cutoff=0.5, features=8, interactions=1).bind(system.atomic_numbers)
    centers = [-0.30, -0.20, -0.10]
    options = dict(steps=1, equilibration=0, every=1, pull_steps=200, progress=False, seed=3)
    together, _, _ = claisen.umbrella_profile(bound, centers, 1e5, 300.0, replicas=True, **options)
    alone, frames, _ = claisen.umbrella_profile(bound, centers, 1e5, 300.0, starts="pulled", **options)
    first = np.array([samples[0] for samples in together.samples])
    assert frames.shape == (3, system.n_atoms, 3)
    assert np.abs(first - np.array([samples[0] for samples in alone.samples])).max() < 2e-3
    assert np.abs(first - np.array(centers)).max() < 0.05
    with pytest.raises(ValueError, match="'pulled' with replicas=True"):
        claisen.umbrella_profile(
            bound, centers, 20000.0, 300.0, replicas=True, starts="sequential", **options
        )
    with pytest.raises(ValueError, match="starts must be"):
        claisen.umbrella_profile(bound, centers, 20000.0, 300.0, starts="random", **options)
