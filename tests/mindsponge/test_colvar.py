"""Collective variables: values against MDAnalysis/scipy/numpy, gradients against finite differences."""

import math

import numpy as np
import pytest
import torch

from mindsponge import colvar

BOX = torch.diag(torch.tensor([1.5, 1.7, 1.6], dtype=torch.float64))


def _positions(n_atoms=8, seed=0, scale=0.6):
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(n_atoms, 3, generator=generator, dtype=torch.float64) * scale + 0.1


def _colvars():
    masses = torch.linspace(1.0, 16.0, 8, dtype=torch.float64)
    reference = _positions(seed=5)
    return {
        "distance": colvar.Distance([0, 3]),
        "angle": colvar.Angle([0, 1, 2]),
        "torsion": colvar.Torsion([0, 1, 2, 3]),
        "com_distance": colvar.CenterOfMassDistance([0, 1, 2], [4, 5, 6, 7], masses=masses),
        "coordination": colvar.CoordinationNumber([0, 1, 2], [3, 4, 5, 6, 7], r0=0.3),
        "rmsd": colvar.RMSD(reference, atoms=[0, 1, 2, 3, 4, 5], masses=masses),
        "linear": colvar.LinearCombination([colvar.Distance([0, 1]), colvar.Angle([1, 2, 3])], [2.0, -0.5]),
        "function": colvar.FunctionColvar(lambda positions, box: (positions[..., :, 0] ** 2).sum(-1)),
    }


@pytest.mark.parametrize("name", list(_colvars()))
@pytest.mark.parametrize("periodic", [False, True])
def test_gradient_matches_finite_differences(name, periodic):
    cv = _colvars()[name]
    box = BOX if periodic else None
    positions = _positions(seed=1, scale=1.4 if periodic else 0.6).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: cv(x, box), (positions,), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_values_match_mdanalysis():
    distances = pytest.importorskip("MDAnalysis.lib.distances")
    positions = _positions(seed=2, scale=1.4)
    angstrom = (positions * 10).numpy().astype(np.float64)
    dims = np.array([15.0, 17.0, 16.0, 90.0, 90.0, 90.0])
    value = colvar.Distance([0, 3])(positions, BOX)
    reference = distances.calc_bonds(angstrom[0], angstrom[3], box=dims) / 10
    assert float(value) == pytest.approx(float(reference), abs=2e-6)  # MDAnalysis works in float32
    value = colvar.Angle([0, 1, 2])(positions, BOX)
    reference = distances.calc_angles(angstrom[0], angstrom[1], angstrom[2], box=dims)
    assert float(value) == pytest.approx(float(reference), abs=2e-6)  # MDAnalysis works in float32
    value = colvar.Torsion([0, 1, 2, 3])(positions, BOX)
    reference = distances.calc_dihedrals(angstrom[0], angstrom[1], angstrom[2], angstrom[3], box=dims)
    assert float(value) == pytest.approx(float(reference), abs=2e-6)  # MDAnalysis works in float32


def test_torsion_continuous_across_pi():
    """Rotate the last atom about the j-k axis through +-pi: value = set angle, gradient continuous."""
    cv = colvar.Torsion([0, 1, 2, 3])
    angles = math.pi - 0.045 + 0.01 * torch.arange(10, dtype=torch.float64)  # pi lies between two
    values, gradients = [], []
    for angle in angles:
        positions = torch.tensor(
            [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [math.cos(angle), math.sin(angle), 1.0]],
            dtype=torch.float64,
            requires_grad=True,
        )
        value = cv(positions)
        values.append(float(value.detach()))
        gradients.append(torch.autograd.grad(value, positions)[0])
    expected = (angles + math.pi) % (2 * math.pi) - math.pi
    assert np.allclose(values, expected.numpy(), atol=1e-12)
    assert values[4] > 3.0 and values[5] < -3.0  # the value crosses the branch cut ...
    values = torch.tensor(values, dtype=torch.float64)
    steps = cv.difference(values[1:], values[:-1])
    assert torch.allclose(steps, torch.full_like(steps, 0.01), atol=1e-12)  # ... the difference does not
    jumps = [float((after - before).abs().max()) for before, after in zip(gradients[:-1], gradients[1:])]
    assert max(jumps) < 0.02  # the gradient changes smoothly (O(step) per step of 0.01 rad)


def test_rmsd_matches_scipy_and_mdanalysis():
    from scipy.spatial.transform import Rotation

    rms = pytest.importorskip("MDAnalysis.analysis.rms")
    reference = _positions(n_atoms=12, seed=3)
    rotation = Rotation.from_euler("xyz", [0.4, -1.1, 2.0])
    noise = torch.randn(12, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64) * 0.03
    positions = torch.from_numpy(rotation.apply(reference.numpy())) + 0.7 + noise
    value = float(colvar.RMSD(reference)(positions))
    centred = positions.numpy() - positions.numpy().mean(0)
    centred_reference = reference.numpy() - reference.numpy().mean(0)
    best, _ = Rotation.align_vectors(centred, centred_reference)
    expected = np.sqrt(((centred - best.apply(centred_reference)) ** 2).sum(1).mean())
    assert value == pytest.approx(expected, rel=1e-9)
    expected = rms.rmsd(positions.numpy(), reference.numpy(), center=True, superposition=True)
    assert value == pytest.approx(expected, rel=1e-9)
    masses = np.linspace(1.0, 3.0, 12)
    weighted = float(colvar.RMSD(reference, masses=masses)(positions))
    expected = rms.rmsd(positions.numpy(), reference.numpy(), weights=masses, center=True, superposition=True)
    assert weighted == pytest.approx(expected, rel=1e-9)
    batch = colvar.RMSD(reference)(torch.stack([positions, reference]))
    assert batch.shape == (2,) and float(batch[0]) == pytest.approx(value) and float(batch[1]) < 1e-7


def test_center_of_mass_distance_whole_across_boundary():
    positions = torch.tensor(
        [[0.05, 0.8, 0.8], [-0.05, 0.8, 0.8], [0.9, 0.8, 0.8], [1.1, 0.85, 0.8]], dtype=torch.float64
    )
    masses = torch.tensor([1.0, 3.0, 2.0, 2.0], dtype=torch.float64)
    cv = colvar.CenterOfMassDistance([0, 1], [2, 3], masses=masses)
    center_a = (masses[:2, None] * positions[:2]).sum(0) / 4
    center_b = positions[2:].mean(0)
    expected = float(torch.linalg.vector_norm(center_b - center_a))
    assert float(cv(positions)) == pytest.approx(expected, abs=1e-12)
    box = torch.diag(torch.tensor([3.0, 3.0, 3.0], dtype=torch.float64))
    wrapped = torch.remainder(positions, 3.0)  # atom 1 jumps to x = 2.95
    assert float(cv(wrapped, box)) == pytest.approx(expected, abs=1e-12)


def test_coordination_number_value_and_switch_point():
    positions = _positions(seed=6)
    cv = colvar.CoordinationNumber([0, 1], [1, 2, 3], r0=0.25)
    total = 0.0
    for a in (0, 1):
        for b in (1, 2, 3):
            if a != b:
                x = float(torch.linalg.vector_norm(positions[a] - positions[b])) / 0.25
                total += (1 - x**6) / (1 - x**12)
    assert float(cv(positions)) == pytest.approx(total, rel=1e-12)
    pair = colvar.CoordinationNumber([0], [1], r0=0.25)
    for distance in (0.25, 0.25 + 1e-5, 0.25 - 2e-5):
        at = torch.tensor([[0.0, 0.0, 0.0], [distance, 0.0, 0.0]], dtype=torch.float64)
        x = distance / 0.25
        exact = 0.5 if x == 1 else (1 - x**6) / (1 - x**12)
        assert float(pair(at)) == pytest.approx(exact, abs=1e-11)


def test_float32_and_batches():
    positions = _positions(seed=7)
    for name, cv in _colvars().items():
        batch = torch.stack([positions, positions * 1.1])
        values = cv(batch)
        assert values.shape == (2,), name
        assert float(values[0]) == pytest.approx(float(cv(positions)), rel=1e-12), name
        single = cv.to(torch.float32)(positions.float())
        assert single.dtype == torch.float32
        assert float(single) == pytest.approx(float(cv(positions)), rel=1e-4, abs=1e-5), name


def test_bad_inputs():
    with pytest.raises(IndexError, match="atom index 9 in atoms is out of range for 8 atoms"):
        colvar.Distance([0, 9])(_positions())
    with pytest.raises(IndexError, match="negative atom index -1"):
        colvar.Torsion([0, 1, 2, -1])
    with pytest.raises(ValueError, match=r"must hold \(3,\) atom indices"):
        colvar.Angle([0, 1])
    with pytest.raises(TypeError, match="integer atom indices"):
        colvar.Distance([0.0, 1.5])
    with pytest.raises(IndexError, match="atom index 20 in group_b"):
        colvar.CoordinationNumber([0], [1, 20], r0=0.3)(_positions())
    with pytest.raises(ValueError, match=r"\(\.\.\., N, 3\)"):
        colvar.Distance([0, 1])(torch.zeros(3))
    with pytest.raises(ValueError, match="r0 must be a positive"):
        colvar.CoordinationNumber([0], [1], r0=0.0)
