"""NeighborList: the listed pairs equal a brute-force search; rebuilds only when needed; linear memory.

The cell search runs both compiled (mindsponge._kernels) and in pure torch (``compiled=False``). In
periodic boxes the reference is a brute-force search over the periodic images in float64, so boxes so
small that the list cutoff exceeds half a box width (two images of a partner within it) are covered too.
"""

import functools
import itertools
import math
import os
import warnings

import pytest
import torch

from mindsponge import _kernels, space
from mindsponge.neighbors import NeighborList, NeighborListOverflowError, all_pairs, pair_keys


def brute_force(positions, box, cutoff, exclusions=None):
    """Set of pair keys with some periodic image of the partner closer than ``cutoff`` (float64).

    Fractional displacements are wrapped into [-1/2, 1/2]; an image within ``cutoff`` has fractional
    components below ``cutoff / width`` < 1 along each box vector, so it is one of the 27 shifts by -1, 0, 1
    of the wrapped one, all of which are tried. Without a box, plain distances.
    """
    n_atoms = len(positions)
    first, second = torch.triu_indices(n_atoms, n_atoms, offset=1)
    positions = positions.double()
    if box is None:
        displacement = positions[second] - positions[first]
        squared = (displacement * displacement).sum(-1)
    else:
        box = box.double()
        widths = torch.linalg.det(box) / torch.linalg.vector_norm(
            torch.linalg.cross(box[[1, 2, 0]], box[[2, 0, 1]]), dim=1)
        assert cutoff < float(widths.min())
        fractional = space.fractional(positions, box)
        wrapped = fractional[second] - fractional[first]
        wrapped = (wrapped - torch.round(wrapped)) @ box
        base = (wrapped * wrapped).sum(-1)
        squared = torch.full((len(first),), math.inf, dtype=torch.float64)
        for image in itertools.product((-1, 0, 1), repeat=3):  # |w + t|^2 = |w|^2 + 2 w.t + |t|^2
            shift = torch.tensor(image, dtype=torch.float64) @ box
            squared = torch.minimum(squared, base + 2.0 * (wrapped @ shift) + shift @ shift)
    keep = squared < cutoff**2
    keys = set(pair_keys(torch.stack([first[keep], second[keep]], 1), n_atoms).tolist())
    if exclusions is not None:
        keys -= set(pair_keys(exclusions, n_atoms).tolist())
    return keys


def random_system(n_atoms, box, seed=0):
    generator = torch.Generator().manual_seed(seed)
    fractional = torch.rand(n_atoms, 3, dtype=torch.float64, generator=generator) * 3.0 - 1.0  # also outside
    return fractional @ box


def dodecahedron(length):
    """OpenMM's reduced box vectors of a rhombic dodecahedron (xy-square), nm."""
    return torch.tensor([[length, 0, 0], [0, length, 0], [length / 2, length / 2, length * math.sqrt(0.5)]],
                        dtype=torch.float64)


def truncated_octahedron(length):
    """OpenMM's reduced box vectors of a truncated octahedron, nm."""
    root2, root6 = math.sqrt(2.0), math.sqrt(6.0)
    return torch.tensor([[length, 0, 0], [length / 3, 2 * root2 * length / 3, 0],
                         [-length / 3, root2 * length / 3, root6 * length / 3]], dtype=torch.float64)


# box, cutoff (nm): the small boxes allow just this cutoff (max_cutoff >= cutoff), so with any skin the list
# cutoff exceeds half a box width
CASES = {
    "orthorhombic": (space.box_from_lengths_and_angles(4.0, 4.5, 5.0, dtype=torch.float64), 0.8),
    "triclinic": (space.box_from_lengths_and_angles(4.6, 4.6, 4.6, 60.0, 60.0, 90.0, dtype=torch.float64),
                  0.8),
    "small-skewed-triclinic": (space.box_from_lengths_and_angles(2.4, 2.5, 2.6, 80.0, 100.0, 70.0,
                                                                 dtype=torch.float64), 0.8),
    "small-dodecahedron": (dodecahedron(3.0), 1.0),
    "large-dodecahedron": (dodecahedron(7.0), 1.0),
    "small-octahedron": (truncated_octahedron(2.6), 1.0),
    "large-octahedron": (truncated_octahedron(6.5), 1.0),
    "cube-just-above-twice-the-cutoff": (torch.eye(3, dtype=torch.float64) * 2.02, 1.0),
}


def test_cases_are_valid_boxes_for_their_cutoff():
    for box, cutoff in CASES.values():
        space.check_box(box)
        assert cutoff <= space.max_cutoff(box)


def assert_pairs_equal_brute_force(neighbors, positions, box, exclusions=None):
    n_atoms = len(positions)
    pairs = neighbors.update(positions, box)
    assert bool((pairs[:, 0] < pairs[:, 1]).all())
    keys = pair_keys(pairs, n_atoms).tolist()
    assert len(keys) == len(set(keys))  # each pair once
    assert set(keys) == brute_force(positions, box, neighbors.list_cutoff, exclusions)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("n_atoms", [2, 10, 300])
@pytest.mark.parametrize("skin", [0.0, 0.1, 0.4])
def test_pairs_equal_brute_force_periodic(name, n_atoms, skin, compiled):
    box, cutoff = CASES[name]
    positions = random_system(n_atoms, box, seed=n_atoms)
    exclusions = torch.stack([torch.arange(0, n_atoms - 1, 2), torch.arange(1, n_atoms, 2)], 1)
    neighbors = NeighborList(cutoff=cutoff, skin=skin, exclusions=exclusions, compiled=compiled)
    assert_pairs_equal_brute_force(neighbors, positions, box, exclusions)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
@pytest.mark.parametrize("name", ["small-dodecahedron", "small-octahedron",
                                  "cube-just-above-twice-the-cutoff"])
def test_pairs_equal_brute_force_2000_atoms_small_box(name, compiled):
    box, cutoff = CASES[name]
    positions = random_system(2000, box, seed=5)
    neighbors = NeighborList(cutoff=cutoff, skin=0.1, compiled=compiled)
    pairs = neighbors.update(positions, box)
    keys = pair_keys(pairs, 2000).tolist()
    assert len(keys) == len(set(keys)) > 100_000 and bool((pairs[:, 0] < pairs[:, 1]).all())
    assert set(keys) == brute_force_2000_atoms(name)


@functools.cache
def brute_force_2000_atoms(name):
    """:func:`brute_force` of the 2,000-atom systems (shared by the compiled and the torch search)."""
    box, cutoff = CASES[name]
    return brute_force(random_system(2000, box, seed=5), box, cutoff + 0.1)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_skin_longer_than_the_cutoff_in_a_small_box(compiled):
    """A list cutoff longer than a box vector: atoms see their own images, partners several of theirs;
    each pair is still listed once and no atom with itself."""
    box = torch.eye(3, dtype=torch.float64) * 2.0
    positions = random_system(50, box, seed=8)
    neighbors = NeighborList(cutoff=0.5, skin=1.6, compiled=compiled)
    pairs = neighbors.update(positions, box)
    # the nearest image of any partner is within half the box diagonal (1.73 nm) < 2.1 nm: every pair, once
    assert sorted(map(tuple, pairs.tolist())) == sorted(map(tuple, all_pairs(50).tolist()))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
@pytest.mark.parametrize("name", ["small-dodecahedron", "small-octahedron"])
def test_small_box_after_moves_and_box_change(name, compiled):
    """The kept list holds every pair within the cutoff while atoms move less than half the skin; after
    larger moves and after the box changed it is rebuilt and equals the brute force again."""
    box, cutoff = CASES[name]
    positions = random_system(600, box, seed=9)
    neighbors = NeighborList(cutoff=cutoff, skin=0.1, compiled=compiled)
    assert_pairs_equal_brute_force(neighbors, positions, box)
    generator = torch.Generator().manual_seed(10)
    moved = positions + (torch.rand(600, 3, dtype=torch.float64, generator=generator) - 0.5) * 0.05
    listed = set(pair_keys(neighbors.update(moved, box), 600).tolist())
    assert neighbors.n_builds == 1
    assert brute_force(moved, box, cutoff) <= listed
    moved = moved + (torch.rand(600, 3, dtype=torch.float64, generator=generator) - 0.5) * 0.3
    assert_pairs_equal_brute_force(neighbors, moved, box)
    assert neighbors.n_builds == 2
    assert_pairs_equal_brute_force(neighbors, moved * 1.02, box * 1.02)
    assert neighbors.n_builds == 3


def test_all_pairs_below_is_deprecated():
    with pytest.warns(DeprecationWarning, match="all_pairs_below"):
        neighbors = NeighborList(cutoff=0.8, all_pairs_below=1000)
    box, _ = CASES["orthorhombic"]
    positions = random_system(30, box)
    assert_pairs_equal_brute_force(neighbors, positions, box)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        NeighborList(cutoff=0.8)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_pairs_equal_brute_force_without_box(compiled):
    positions = torch.rand(3000, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 6.0
    exclusions = torch.tensor([[5, 4], [10, 11], [0, 2999]])
    neighbors = NeighborList(cutoff=0.6, skin=0.1, exclusions=exclusions, compiled=compiled)
    pairs = neighbors.update(positions, None)
    assert set(pair_keys(pairs, 3000).tolist()) == brute_force(positions, None, 0.7, exclusions)
    assert len(pairs) == len(set(pair_keys(pairs, 3000).tolist()))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
@pytest.mark.parametrize("n_atoms", [1, 2, 10])
def test_few_atoms_without_box(n_atoms, compiled):
    positions = torch.rand(n_atoms, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 1.2
    neighbors = NeighborList(cutoff=0.6, skin=0.1, compiled=compiled)
    pairs = neighbors.update(positions, None)
    assert set(pair_keys(pairs, n_atoms).tolist()) == brute_force(positions, None, 0.7)
    assert len(pairs) == len(set(pair_keys(pairs, n_atoms).tolist()))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_sparse_systems_use_few_cells(compiled):
    """Atoms far apart (without a box) and a few atoms in a large box: wider cells, the same pairs."""
    generator = torch.Generator().manual_seed(6)
    clusters = torch.rand(40, 3, dtype=torch.float64, generator=generator) * 1.5
    positions = torch.cat([clusters, clusters + 1000.0, clusters - torch.tensor([0.0, 0.0, 1000.0])])
    neighbors = NeighborList(cutoff=0.6, skin=0.1, compiled=compiled)
    assert math.prod(neighbors._cell_grid(positions, None, 3)[1]) <= 4 * len(positions) + 64
    pairs = neighbors.update(positions, None)
    assert set(pair_keys(pairs, 120).tolist()) == brute_force(positions, None, 0.7)
    box = torch.eye(3, dtype=torch.float64) * 200.0
    positions = random_system(50, box, seed=7) / 100.0 + 199.5  # across a corner of the box
    assert_pairs_equal_brute_force(neighbors, positions, box)


@pytest.mark.skipif(os.environ.get("MINDSCIENCE_NO_EXTENSIONS") == "1", reason="extensions disabled")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_search_equals_torch_search(dtype):
    """Same pairs from the compiled and the pure torch cell search (triclinic, float32 and float64),
    and the compiled search really ran (the torch search is not called): the kernels must build."""
    assert _kernels.nonbonded() is not None, "the compiled kernels failed to build (see the warning)"
    box = CASES["triclinic"][0].to(dtype)
    positions = random_system(4000, CASES["triclinic"][0], seed=4).to(dtype)
    exclusions = torch.stack([torch.arange(0, 3999, 3), torch.arange(1, 4000, 3)], 1)
    compiled = NeighborList(cutoff=0.7, skin=0.15, exclusions=exclusions)
    compiled._search_cells = None  # would raise if the pure torch search were used
    pure = NeighborList(cutoff=0.7, skin=0.15, exclusions=exclusions, compiled=False)
    keys = torch.sort(pair_keys(compiled.update(positions, box), 4000)).values
    assert torch.equal(keys, torch.sort(pair_keys(pure.update(positions, box), 4000)).values)
    assert len(keys) > 100_000


def test_rebuild_only_after_half_skin():
    box = CASES["triclinic"][0]
    positions = random_system(1500, box, seed=2)
    neighbors = NeighborList(cutoff=0.8, skin=0.2)
    neighbors.update(positions, box)
    assert neighbors.n_builds == 1
    moved = positions.clone()
    moved[:, 0] += 0.09  # less than half the skin (every atom)
    neighbors.update(moved, box)
    assert neighbors.n_builds == 1
    # the kept list still holds every pair within the cutoff
    within = brute_force(moved, box, 0.8)
    assert within <= set(pair_keys(neighbors.pairs, len(moved)).tolist())
    neighbors.update(space.wrap(moved, box), box)  # wrapping moves atoms by lattice vectors only
    assert neighbors.n_builds == 1
    moved[7, 2] += 0.12  # one atom beyond half the skin
    neighbors.update(moved, box)
    assert neighbors.n_builds == 2
    neighbors.update(moved, box * 1.01)  # the box changed
    assert neighbors.n_builds == 3


def test_overflow_is_an_error():
    box = CASES["orthorhombic"][0]
    positions = random_system(500, box)
    with pytest.raises(NeighborListOverflowError, match="max_pairs=10"):
        NeighborList(cutoff=1.0, max_pairs=10).update(positions, box)


def test_bad_input():
    with pytest.raises(ValueError, match="cutoff"):
        NeighborList(cutoff=-1.0)
    with pytest.raises(ValueError, match="exclusions"):
        NeighborList(cutoff=1.0, exclusions=torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="longer than half the box"):
        NeighborList(cutoff=1.5).update(torch.zeros(4, 3), torch.eye(3) * 2.0)
    with pytest.raises(ValueError, match="positions"):
        NeighborList(cutoff=1.0).update(torch.zeros(4, 2), None)


def test_all_pairs_helper():
    pairs = all_pairs(5, exclusions=torch.tensor([[1, 0], [3, 4]]))
    expected = [(0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4), (2, 3), (2, 4)]
    assert sorted(map(tuple, pairs.tolist())) == expected


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_memory_is_linear_for_24000_atoms(compiled):
    """A 24,000-atom box at water density: no allocation anywhere near N^2; pairs ~ N * density.

    A short cutoff keeps the test fast; the cell search does not depend on it. (The profiler sees
    torch allocations only: the compiled search's own buffers grow with the pairs found.)
    """
    n_atoms = 24_000
    length = (n_atoms / 100.0) ** (1 / 3)  # ~100 atoms/nm^3, as water
    box = torch.eye(3, dtype=torch.float32) * length
    positions = torch.rand(n_atoms, 3, generator=torch.Generator().manual_seed(3)) * length
    neighbors = NeighborList(cutoff=0.4, skin=0.1, compiled=compiled)
    with torch.profiler.profile(profile_memory=True) as profiler:
        pairs = neighbors.update(positions, box)
    largest = max(event.cpu_memory_usage for event in profiler.events())
    assert 0 < largest < 0.01 * n_atoms * n_atoms * 4  # an (N, N) float32 matrix would be 2.3 GB
    expected = n_atoms * 100.0 * (4 / 3) * torch.pi * 0.5**3 / 2  # pairs within 0.5 nm
    assert abs(len(pairs) - expected) < 0.05 * expected


# --- the cluster-pair list of the compiled pair kernel ---------------------------------------------------


def listed_images(clusters, positions, box):
    """``{(i, j, image): count}`` of the atom pairs ``i < j`` the cluster list holds, ``image`` the lattice
    vector (integers along the box vectors) from ``i``'s position to ``j``'s listed image; with the
    displacements, nm."""
    slot_atoms = clusters.slot_atoms.long()
    n_pairs = len(clusters.pair_clusters)
    first_cluster = torch.repeat_interleave(torch.arange(len(clusters.pair_starts) - 1),
                                            torch.diff(clusters.pair_starts))
    bits = (clusters.pair_masks[:, None] >> torch.arange(64)) & 1
    pair, bit = torch.nonzero(bits, as_tuple=True)
    slot_i = 8 * first_cluster[pair] + bit // 8
    slot_j = 8 * clusters.pair_clusters.long()[pair] + bit % 8
    i, j = slot_atoms[slot_i], slot_atoms[slot_j]
    assert bool((i >= 0).all() and (j >= 0).all()) and n_pairs == len(clusters.pair_masks)
    lattice = clusters.slot_shifts[slot_j] + clusters.pair_shifts[pair] - clusters.slot_shifts[slot_i]
    displacement = positions[j] + lattice - positions[i]
    image = torch.zeros_like(lattice) if box is None else torch.round(space.fractional(lattice, box))
    swap = i > j
    image[swap] = -image[swap]
    first, second = torch.minimum(i, j), torch.maximum(i, j)
    counts = {}
    for key in zip(first.tolist(), second.tolist(), map(tuple, image.long().tolist()), strict=True):
        counts[key] = counts.get(key, 0) + 1
    return counts, displacement


def brute_force_images(positions, box, cutoff, exclusions=None):
    """``{(i, j, image): 1}`` for every image of ``j`` within ``cutoff`` of ``i`` (float64; the 27
    translates of the wrapped fractional displacement, as in :func:`brute_force`)."""
    n_atoms = len(positions)
    excluded = set() if exclusions is None else set(pair_keys(exclusions, n_atoms).tolist())
    first, second = torch.triu_indices(n_atoms, n_atoms, offset=1)
    keys = (first * n_atoms + second).tolist()
    keep = torch.tensor([key not in excluded for key in keys], dtype=torch.bool)
    first, second = first[keep], second[keep]
    if box is None:
        near = (positions[second] - positions[first]).norm(dim=1) < cutoff
        pairs = zip(first[near].tolist(), second[near].tolist(), strict=True)
        return {(i, j, (0, 0, 0)): 1 for i, j in pairs}
    fractional = space.fractional(positions, box)
    delta = fractional[second] - fractional[first]
    rounded = torch.round(delta)
    found = {}
    for shift in itertools.product((-1, 0, 1), repeat=3):
        image = -rounded + torch.tensor(shift, dtype=torch.float64)
        near = ((delta + image) @ box).norm(dim=1) < cutoff
        images = image[near].long().tolist()
        for i, j, n in zip(first[near].tolist(), second[near].tolist(), images, strict=True):
            found[(i, j, tuple(n))] = 1
    return found


@pytest.mark.skipif(_kernels.nonbonded() is None, reason="compiled kernels unavailable")
@pytest.mark.parametrize("name", sorted(CASES) + ["no box"])
@pytest.mark.parametrize("n_atoms", [2, 10, 300])
@pytest.mark.parametrize("skin", [0.1, 0.4])
def test_clusters_list_each_image_within_the_list_cutoff_once(name, n_atoms, skin):
    """Every image of every non-excluded pair within the list cutoff is in the cluster list exactly once
    (in a small box, two images of one partner can both be), and nothing else: no atom with itself, no
    excluded pair, no empty slot."""
    box, cutoff = CASES.get(name, (None, 0.8))
    positions = random_system(n_atoms, box, seed=n_atoms) if box is not None else \
        torch.rand(n_atoms, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(n_atoms)) * 3.0
    exclusions = torch.stack([torch.arange(0, n_atoms - 1, 2), torch.arange(1, n_atoms, 2)], 1)
    neighbors = NeighborList(cutoff=cutoff, skin=skin, exclusions=exclusions)
    clusters = neighbors.update_clusters(positions, box)
    counts, displacement = listed_images(clusters, positions, box)
    assert all(count == 1 for count in counts.values())
    assert bool((displacement.norm(dim=1) < neighbors.list_cutoff).all())
    assert counts == brute_force_images(positions, box, neighbors.list_cutoff, exclusions)
    assert clusters.slot_atoms.sort().values[-n_atoms:].tolist() == list(range(n_atoms))  # each atom once
