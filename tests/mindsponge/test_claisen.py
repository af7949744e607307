"""mindsponge.active.claisen: the atoms of the reaction coordinate, the profile analysis, and the
pulled GFN2-xTB samples of the initial-data recipe (against tblite called directly)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("tblite")
pytest.importorskip("rdkit")

from common import datasets, units  # noqa: E402
from mindsponge.active import claisen  # noqa: E402


def test_reaction_coordinate_names_the_breaking_and_forming_pairs():
    system = claisen.reactant()
    numbers = system.atomic_numbers.tolist()
    assert [numbers[i] for i in (0, 1, 2, 3, 4, 5)] == [6, 6, 8, 6, 6, 6]  # C0=C1-O2-C3-C4=C5
    positions = system.positions.numpy()
    distance = lambda i, j: float(np.linalg.norm(positions[i] - positions[j]))  # noqa: E731
    assert distance(*claisen.BREAKING) < 0.16  # the O-C bond that breaks exists in the reactant
    assert distance(*claisen.FORMING) > 0.25  # the C-C bond that forms does not
    expected = distance(*claisen.BREAKING) - distance(*claisen.FORMING)
    assert float(claisen.reaction_coordinate()(system.positions, None)) == pytest.approx(expected, rel=1e-12)


def test_barrier_and_reaction_of_an_analytic_profile():
    s = np.linspace(-0.3, 0.2, 501)
    # minima at -0.2 (0) and +0.15 (-30 kJ/mol), maximum at 0 (+100 kJ/mol): a piecewise cosine profile
    profile = np.where(
        s < 0.0,
        50.0 * (1 - np.cos(np.pi * (s + 0.2) / 0.2)),
        -30.0 + 130.0 / 2 * (1 + np.cos(np.pi * s / 0.15)),
    )
    profile = np.where(s < -0.2, 0.0, np.where(s > 0.15, -30.0, profile))
    profile[::7] = np.nan  # empty bins are skipped
    barrier, reaction, s_reactant, s_transition, s_product = claisen.barrier_and_reaction(s, profile)
    assert barrier == pytest.approx(100.0, abs=0.01)
    assert reaction == pytest.approx(-30.0, abs=1e-9)
    assert s_transition == pytest.approx(0.0, abs=0.002)
    assert s_reactant <= -0.2 + 1e-9 and s_product >= 0.15 - 1e-9
    with pytest.raises(ValueError, match="reactant or product"):
        claisen.barrier_and_reaction(s[s < 0], profile[s < 0])


def test_pulled_sample_labels_are_tblite_gfn2_of_its_frame():
    from tblite.interface import Calculator

    sample = claisen.pulled_sample({"center": 0.0}, seed=3, pull_steps=40, md_steps=4)
    positions = sample["positions"]
    reference = Calculator("GFN2-xTB", sample["atomic_numbers"], positions / units.BOHR_TO_NM)
    reference.set("verbosity", 0)
    result = reference.singlepoint()
    energy = float(result.get("energy")) * units.HARTREE_TO_KJ_PER_MOL
    forces = -result.get("gradient") * units.HARTREE_PER_BOHR_TO_KJ_PER_MOL_NM
    assert float(sample["energy"]) == pytest.approx(energy, abs=1e-4)
    # the MD restarts each SCF from the previous wavefunction: converged to tblite's tolerance, not bits
    np.testing.assert_allclose(sample["forces"], forces, atol=1e-4 * np.abs(forces).max())
    s = float(claisen.reaction_coordinate()(torch.as_tensor(positions), None))
    assert float(sample["reaction_coordinate"]) == pytest.approx(s, abs=1e-12)
    start = float(claisen.reaction_coordinate()(claisen.reactant().positions, None))
    assert s > start + 0.05  # the restraint pulled the reactant towards s = 0


@pytest.mark.parametrize("starts", ["sequential", "pulled"])
def test_umbrella_reference_labels_its_frames_without_the_restraints(starts):
    """The frames a GFN2-xTB umbrella run records carry tblite's own energies and forces, the
    windows' restraints (several kJ/mol here) taken out."""
    from tblite.interface import Calculator

    from mindsponge.labels import XTB, TrajectoryLabels

    system, centers, force_constant = claisen.reactant(), np.array([-0.27, -0.25]), 20000.0
    labels = TrajectoryLabels(every=3)
    claisen.umbrella_profile(XTB(system.atomic_numbers), centers, force_constant, 300.0, steps=6,
                             equilibration=2, every=2, pull_steps=30, progress=False, starts=starts,
                             labels=labels)
    recorded = labels.labels()
    assert recorded["positions"].shape == (4, 14, 3)  # two frames per window
    s = claisen.reaction_coordinate()(torch.as_tensor(recorded["positions"]), None).numpy()
    restraint_energies = 0.5 * force_constant * (s - np.repeat(centers, 2)) ** 2
    assert restraint_energies.max() > 1.0  # kJ/mol: leaving it in would fail the comparison below
    numbers = system.atomic_numbers.numpy()
    for positions, energy, forces in zip(recorded["positions"], recorded["energy"], recorded["forces"]):
        reference = Calculator("GFN2-xTB", numbers, positions / units.BOHR_TO_NM)
        reference.set("verbosity", 0)
        result = reference.singlepoint()
        # the MD restarts each SCF from the previous wavefunction: equal to its tolerance (1e-6 Eh)
        assert energy == pytest.approx(float(result.get("energy")) * units.HARTREE_TO_KJ_PER_MOL, abs=1e-2)
        expected = -result.get("gradient") * units.HARTREE_PER_BOHR_TO_KJ_PER_MOL_NM
        np.testing.assert_allclose(forces, expected, atol=1e-3 * np.abs(expected).max())
    with pytest.raises(ValueError, match="labels record a reference run"):
        claisen.umbrella_profile(None, [0.0], 1.0, 300.0, 1, 1, replicas=True, labels=labels)


def test_umbrella_windows_start_from_given_configurations():
    """``starts`` as configurations: window k starts from the k-th (here the reactant, and the
    reactant moved 1 nm along x), so after three 0.5 fs steps each window is still there."""
    from mindsponge.labels import XTB

    system = claisen.reactant()
    starts = np.stack([system.positions.numpy(), system.positions.numpy() + np.array([1.0, 0.0, 0.0])])
    _, frames, _ = claisen.umbrella_profile(XTB(system.atomic_numbers), [-0.3, -0.29], 20000.0, 300.0,
                                            steps=2, equilibration=1, every=1, progress=False, starts=starts)
    assert np.abs(frames - starts).max() < 0.01  # nm
    with pytest.raises(ValueError, match=r"starts must be finite configurations \(2, 14, 3\)"):
        claisen.umbrella_profile(None, [-0.3, -0.29], 1.0, 300.0, 1, 1, starts=starts[:1])
    starts[1, 3, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        claisen.umbrella_profile(None, [-0.3, -0.29], 1.0, 300.0, 1, 1, starts=starts)


def test_claisen_recipes_are_valid():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "datasets"
    for name in ("claisen_xtb_small.toml", "claisen_xtb.toml"):
        recipe = datasets.load_recipe(folder / name)
        assert recipe.generator.function == "mindsponge.active.claisen:pulled_sample"
    from mindsponge.active import load_config

    for name in ("claisen_active_small.toml", "claisen_active.toml"):
        config, _ = load_config(folder / "active" / name)
        assert config.exploration.umbrella.distances == [claisen.BREAKING, claisen.FORMING]


def _ring_frame(heights, radius=0.145):
    """The reactant's atoms with the six ring atoms on a hexagon of ``radius`` nm, raised by ``heights``."""
    positions = claisen.reactant().positions.clone().double()
    angles = torch.arange(6, dtype=torch.float64) * (np.pi / 3)
    ring = torch.stack([radius * torch.cos(angles), radius * torch.sin(angles), torch.as_tensor(heights)], 1)
    positions[list(claisen.RING)] = ring
    return positions


def test_ring_conformation_tells_chair_from_boat_and_open_chains():
    """Chair: ring heights alternating (+h, -h, ...), the ring torsions alternate in sign; boat (bow and
    stern up) and twist-boat do not; a rotation, a mirror image or a batch changes nothing; with the
    forming bond 0.4 nm long there is no ring; with the fragments 1 nm apart the molecule is "apart"."""
    theta = np.arange(6) * np.pi / 3
    h = 0.025
    shapes = (np.cos(3 * theta), np.cos(2 * theta), np.sin(2 * theta))
    chair, boat, twist = (_ring_frame(h * shape) for shape in shapes)
    assert claisen.ring_conformation(chair) == ["chair"]
    assert claisen.ring_conformation(torch.stack([boat, twist, chair])) == ["boat", "boat", "chair"]
    generator = torch.Generator().manual_seed(0)
    rotation = torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64, generator=generator))[0]
    mirror = torch.diag(torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64))
    moved = torch.stack([chair @ rotation.T, chair @ mirror, twist @ rotation.T])
    assert claisen.ring_conformation(moved) == ["chair", "chair", "boat"]
    opened = chair.clone()
    opened[claisen.FORMING[1]] = opened[claisen.FORMING[0]] + torch.tensor([0.4, 0.0, 0.0]).double()
    assert claisen.ring_conformation(opened.numpy()) == ["open"]
    apart = chair.clone()  # C3, C4, C5 1 nm away: O2-C3 and C0-C5 both broken
    apart[[3, 4, 5]] += torch.tensor([1.0, 0.0, 0.0]).double()
    assert claisen.ring_conformation(apart) == ["apart"]
    assert claisen.ring_conformation(chair.requires_grad_()) == ["chair"]
    with pytest.raises(ValueError, match=r"got shape \(14, 2\)"):
        claisen.ring_conformation(chair.detach()[:, :2])


def test_solvated_reactant_is_the_molecule_in_whole_separate_waters():
    """30 waters around the reactant: the molecule's atoms first, then O-H-H triples with TIP3P's geometry
    (0.09572 nm, 104.52 degrees), none closer than the clearance to the molecule, no two oxygens closer than
    the box builder's 0.27 nm, all within 1 nm of the molecule's centre."""
    system = claisen.solvated_reactant(waters=30)
    molecule = claisen.reactant()
    assert system.n_atoms == molecule.n_atoms + 90
    numbers = system.atomic_numbers.numpy()
    np.testing.assert_array_equal(numbers[:14], molecule.atomic_numbers.numpy())
    np.testing.assert_array_equal(numbers[14:].reshape(30, 3), np.tile([8, 1, 1], (30, 1)))
    np.testing.assert_allclose(system.positions[:14].numpy(), molecule.positions.numpy())
    waters = system.positions[14:].numpy().reshape(30, 3, 3)
    bonds = np.linalg.norm(waters[:, 1:] - waters[:, :1], axis=-1)
    np.testing.assert_allclose(bonds, 0.09572, atol=1e-6)
    first, second = waters[:, 1] - waters[:, 0], waters[:, 2] - waters[:, 0]
    cosine = (first * second).sum(-1) / (np.linalg.norm(first, axis=-1) * np.linalg.norm(second, axis=-1))
    np.testing.assert_allclose(np.degrees(np.arccos(cosine)), 104.52, atol=1e-3)
    gaps = np.linalg.norm(waters.reshape(-1, 1, 3) - molecule.positions.numpy()[None], axis=-1)
    assert gaps.min() > 0.25
    oxygens = waters[:, 0]
    separations = np.linalg.norm(oxygens[:, None] - oxygens[None], axis=-1) + np.eye(30)
    assert separations.min() > 0.27
    radius = np.linalg.norm(oxygens - molecule.positions.numpy().mean(0), axis=-1).max()
    assert radius < 1.0  # a droplet, not a scattered gas: 30 waters and the molecule fit in about 0.8 nm
