"""mindsponge.space against brute force over periodic images, ASE and OpenMM's box conventions."""

import itertools
import math

import numpy as np
import pytest
import torch
from ase.cell import Cell
from ase.geometry import find_mic

from mindsponge import space

DTYPES = [torch.float64, torch.float32]


def random_boxes(count, seed=0):
    """Reduced triclinic boxes from random lengths (nm) and angles (degrees), plus their parameters."""
    rng = np.random.default_rng(seed)
    boxes = []
    while len(boxes) < count:
        lengths = rng.uniform(2.0, 4.0, 3)
        angles = rng.uniform(60.0, 120.0, 3)
        try:
            boxes.append(
                (space.box_from_lengths_and_angles(*lengths, *angles, dtype=torch.float64), lengths, angles)
            )
        except space.BoxError:
            continue  # the angles do not close a cell
    return boxes


def brute_force_minimum_image(displacements, box, reach=2):
    """Shortest of the (2 reach + 1)^3 lattice translates of every displacement."""
    shifts = torch.tensor(list(itertools.product(range(-reach, reach + 1), repeat=3)), dtype=box.dtype)
    images = displacements[:, None, :] + (shifts @ box)[None]
    best = torch.linalg.norm(images, dim=-1).argmin(dim=1)
    return images[torch.arange(len(displacements)), best]


def random_pairs(box, count, seed):
    """Displacements between random points of the primary cell (fractional in [0, 1))."""
    generator = torch.Generator().manual_seed(seed)
    first = torch.rand(count, 3, generator=generator, dtype=box.dtype) @ box
    second = torch.rand(count, 3, generator=generator, dtype=box.dtype) @ box
    return second - first


def test_box_from_lengths_and_angles_matches_openmm():
    unitcell = pytest.importorskip("openmm.app.internal.unitcell")
    for box, lengths, angles in random_boxes(20):
        from openmm import unit

        reference = unitcell.computePeriodicBoxVectors(*lengths, *np.radians(angles))
        reference = np.array([vector.value_in_unit(unit.nanometer) for vector in reference])
        np.testing.assert_allclose(box.numpy(), reference, rtol=0, atol=1e-12)
        space.check_box(box)  # reduced form
        a, b, c, alpha, beta, gamma = space.box_lengths_and_angles(box)
        np.testing.assert_allclose(Cell(box.numpy()).cellpar(), [a, b, c, alpha, beta, gamma], atol=1e-9)


def test_reduce_box_matches_openmm_and_keeps_lattice():
    unitcell = pytest.importorskip("openmm.app.internal.unitcell")
    from openmm import Vec3, unit

    raw = torch.tensor([[3.0, 0.0, 0.0], [2.6, 2.5, 0.0], [-4.1, 3.9, 2.8]], dtype=torch.float64)
    reduced = space.reduce_box(raw)
    reference = unitcell.reducePeriodicBoxVectors([Vec3(*row) for row in raw.tolist()] * unit.nanometer)
    reference = np.array([vector.value_in_unit(unit.nanometer) for vector in reference])
    np.testing.assert_allclose(reduced.numpy(), reference, atol=1e-12)
    space.check_box(reduced)
    # same lattice: the change of basis is integer with determinant +-1
    basis_change = torch.linalg.solve(raw.T, reduced.T).T
    np.testing.assert_allclose(basis_change.numpy(), np.round(basis_change.numpy()), atol=1e-12)
    assert abs(abs(float(torch.linalg.det(basis_change))) - 1) < 1e-12


@pytest.mark.parametrize("dtype", DTYPES)
def test_minimum_image_triclinic_matches_brute_force_and_ase(dtype):
    tolerance = 1e-10 if dtype == torch.float64 else 2e-5
    for index, (box, _, _) in enumerate(random_boxes(10, seed=1)):
        box = box.to(dtype)
        displacements = random_pairs(box, 2000, seed=index)
        ours = space.minimum_image(displacements, box)
        reference = brute_force_minimum_image(displacements.double(), box.double())
        # always a lattice translate of the input
        shift = space.fractional(ours.double() - displacements.double(), box.double())
        np.testing.assert_allclose(shift.numpy(), np.round(shift.numpy()), atol=tolerance)
        # exact minimum image wherever it is shorter than half the smallest box width
        inside = torch.linalg.norm(reference, dim=1) < space.max_cutoff(box)
        assert inside.sum() > 100
        torch.testing.assert_close(ours.double()[inside], reference[inside], rtol=0, atol=tolerance)
        ase_vectors, _ = find_mic(displacements.double().numpy(), box.double().numpy(), pbc=True)
        np.testing.assert_allclose(ours.double()[inside].numpy(), ase_vectors[inside.numpy()], atol=tolerance)
        # never shorter than the true minimum
        assert (
            torch.linalg.norm(ours.double(), dim=1) >= torch.linalg.norm(reference, dim=1) - tolerance
        ).all()


def test_nearest_image_is_exact_beyond_max_cutoff():
    """nearest_image equals the brute-force shortest translate (and ASE's) for every displacement whose
    shortest translate is below the smallest perpendicular box width, where minimum_image may not."""
    beyond = 0
    for index, (box, _, _) in enumerate(random_boxes(10, seed=1)):
        displacements = random_pairs(box, 2000, seed=index)
        ours = space.nearest_image(displacements, box)
        reference = brute_force_minimum_image(displacements, box)
        widths = torch.linalg.det(box) / torch.linalg.vector_norm(
            torch.linalg.cross(box[[1, 2, 0]], box[[2, 0, 1]]), dim=1)
        inside = torch.linalg.norm(reference, dim=1) < widths.min()
        torch.testing.assert_close(ours[inside], reference[inside], rtol=0, atol=1e-10)
        ase_vectors, _ = find_mic(displacements.numpy(), box.numpy(), pbc=True)
        np.testing.assert_allclose(ours[inside].numpy(), ase_vectors[inside.numpy()], atol=1e-10)
        beyond += int((inside & (torch.linalg.norm(reference, dim=1) > space.max_cutoff(box))).sum())
    assert beyond > 100


@pytest.mark.parametrize("dtype", DTYPES)
def test_minimum_image_orthorhombic_is_exact(dtype):
    box = torch.diag(torch.tensor([2.0, 3.0, 2.5], dtype=dtype))
    assert space.is_orthorhombic(box)
    displacements = random_pairs(box, 3000, seed=7) * 3  # up to three box lengths apart
    ours = space.minimum_image(displacements, box)
    reference = brute_force_minimum_image(displacements.double(), box.double(), reach=4)
    atol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(ours.double(), reference, rtol=0, atol=atol)
    ase_vectors, _ = find_mic(displacements.double().numpy(), box.double().numpy(), pbc=True)
    np.testing.assert_allclose(ours.double().numpy(), ase_vectors, atol=atol)


def test_minimum_image_without_box_and_batched_shapes():
    displacements = torch.randn(4, 5, 3, dtype=torch.float64) * 10
    assert space.minimum_image(displacements, None) is displacements
    box = random_boxes(1, seed=3)[0][0]
    batched = space.minimum_image(displacements, box)
    flat = space.minimum_image(displacements.reshape(-1, 3), box)
    assert batched.shape == (4, 5, 3)
    torch.testing.assert_close(batched.reshape(-1, 3), flat)


def test_minimum_image_is_differentiable():
    box = random_boxes(1, seed=4)[0][0]
    displacements = random_pairs(box, 50, seed=5).requires_grad_()
    lengths = torch.linalg.norm(space.minimum_image(displacements, box), dim=1)
    (gradient,) = torch.autograd.grad(lengths.sum(), displacements)
    images = space.minimum_image(displacements.detach(), box)
    torch.testing.assert_close(gradient, images / torch.linalg.norm(images, dim=1, keepdim=True))


@pytest.mark.parametrize("dtype", DTYPES)
def test_wrap_puts_fractional_coordinates_in_unit_cell_and_keeps_distances(dtype):
    for index, (box, _, _) in enumerate(random_boxes(5, seed=2)):
        box = box.to(dtype)
        generator = torch.Generator().manual_seed(index)
        positions = (
            torch.rand(200, 3, generator=generator, dtype=dtype) * 4 - 1.5
        ) @ box  # -1.5 .. 2.5 cells
        wrapped = space.wrap(positions, box)
        fractional = space.fractional(wrapped, box)
        assert (fractional >= 0).all() and (fractional < 1).all()
        # each atom moved by a lattice vector
        shift = space.fractional(wrapped.double() - positions.double(), box.double())
        atol = 1e-9 if dtype == torch.float64 else 1e-4
        np.testing.assert_allclose(shift.numpy(), np.round(shift.numpy()), atol=atol)
        # minimum-image distances (ASE's exact search) unchanged
        pairs = torch.randint(0, 200, (500, 2), generator=generator)
        before, _ = find_mic(
            (positions[pairs[:, 1]] - positions[pairs[:, 0]]).double().numpy(), box.double().numpy()
        )
        after, _ = find_mic(
            (wrapped[pairs[:, 1]] - wrapped[pairs[:, 0]]).double().numpy(), box.double().numpy()
        )
        np.testing.assert_allclose(np.linalg.norm(after, axis=1), np.linalg.norm(before, axis=1), atol=atol)
    inside = torch.tensor([[0.1, 0.2, 0.3]], dtype=dtype)
    assert torch.equal(space.wrap(inside, torch.eye(3, dtype=dtype)), inside)
    assert space.wrap(inside, None) is inside


def test_volume_matches_ase():
    for box, lengths, angles in random_boxes(10, seed=6):
        assert math.isclose(
            float(space.volume(box)), Cell.fromcellpar([*lengths, *angles]).volume, rel_tol=1e-12
        )
    box = torch.diag(torch.tensor([2.0, 3.0, 4.0], dtype=torch.float64, requires_grad=True))
    volume = space.volume(box)
    assert volume.item() == 24.0
    (gradient,) = torch.autograd.grad(volume, box)
    torch.testing.assert_close(torch.diagonal(gradient), torch.tensor([12.0, 8.0, 6.0], dtype=torch.float64))


@pytest.mark.parametrize(
    "box, message",
    [
        (torch.zeros(3, 3), "singular"),
        (torch.tensor([[2.0, 0.5, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]]), "lower triangular"),
        (torch.tensor([[2.0, 0.0, 0.0], [1.5, 2.0, 0.0], [0.0, 0.0, 2.0]]), "reduced form"),
        (torch.tensor([[2.0, 0.0, 0.0], [0.0, float("nan"), 0.0], [0.0, 0.0, 2.0]]), "NaN"),
        (torch.eye(2), "shape"),
        (torch.eye(3, dtype=torch.long), "floating"),
    ],
)
def test_check_box_rejects_bad_boxes(box, message):
    with pytest.raises(space.BoxError, match=message):
        space.check_box(box)


def test_box_from_lengths_and_angles_rejects_impossible_cells():
    with pytest.raises(space.BoxError, match="angles"):
        space.box_from_lengths_and_angles(2.0, 2.0, 2.0, 150.0, 150.0, 150.0)
    with pytest.raises(space.BoxError, match="positive"):
        space.box_from_lengths_and_angles(0.0, 2.0, 2.0)


def test_max_cutoff_is_half_the_smallest_diagonal():
    box = space.box_from_lengths_and_angles(3.0, 3.0, 3.0, 60.0, 60.0, 90.0)  # rhombic dodecahedron
    assert math.isclose(
        space.max_cutoff(box), 0.5 * min(float(box[0, 0]), float(box[1, 1]), float(box[2, 2]))
    )
    assert math.isclose(space.max_cutoff(box), 0.5 * 3.0 / math.sqrt(2), rel_tol=1e-6)
