"""NeighborList: the listed pairs equal a brute-force search; rebuilds only when needed; linear memory.

The cell search runs both compiled (mindsponge._kernels) and in pure torch (``compiled=False``).
"""

import os

import pytest
import torch

from mindsponge import _kernels, space
from mindsponge.neighbors import NeighborList, NeighborListOverflowError, all_pairs, pair_keys


def brute_force(positions, box, cutoff, exclusions=None):
    """Set of pair keys within ``cutoff`` (minimum image), all N^2 pairs at once (small N only)."""
    n_atoms = len(positions)
    first, second = torch.triu_indices(n_atoms, n_atoms, offset=1)
    displacement = space.minimum_image(positions[second] - positions[first], box)
    keep = (displacement * displacement).sum(-1) < cutoff**2
    keys = set(pair_keys(torch.stack([first[keep], second[keep]], 1), n_atoms).tolist())
    if exclusions is not None:
        keys -= set(pair_keys(exclusions, n_atoms).tolist())
    return keys


def random_system(n_atoms, box, seed=0):
    generator = torch.Generator().manual_seed(seed)
    fractional = torch.rand(n_atoms, 3, dtype=torch.float64, generator=generator) * 3.0 - 1.0  # also outside
    return fractional @ box


CASES = {
    "orthorhombic": space.box_from_lengths_and_angles(4.0, 4.5, 5.0, dtype=torch.float64),
    "triclinic": space.box_from_lengths_and_angles(4.6, 4.6, 4.6, 60.0, 60.0, 90.0, dtype=torch.float64),
    "small-triclinic": space.box_from_lengths_and_angles(2.4, 2.5, 2.6, 80.0, 100.0, 70.0,
                                                         dtype=torch.float64),
}


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("n_atoms, all_pairs_below", [(300, 1000), (2500, 1000)])
def test_pairs_equal_brute_force_periodic(name, n_atoms, all_pairs_below, compiled):
    box = CASES[name]
    positions = random_system(n_atoms, box)
    exclusions = torch.stack([torch.arange(0, n_atoms - 1, 2), torch.arange(1, n_atoms, 2)], 1)
    neighbors = NeighborList(cutoff=0.8, skin=0.2, exclusions=exclusions, all_pairs_below=all_pairs_below,
                             compiled=compiled)
    pairs = neighbors.update(positions, box)
    assert bool((pairs[:, 0] < pairs[:, 1]).all())
    keys = pair_keys(pairs, n_atoms).tolist()
    assert len(keys) == len(set(keys))  # no duplicates
    assert set(keys) == brute_force(positions, box, 1.0, exclusions)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_pairs_equal_brute_force_without_box(compiled):
    positions = torch.rand(3000, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 6.0
    exclusions = torch.tensor([[5, 4], [10, 11], [0, 2999]])
    neighbors = NeighborList(cutoff=0.6, skin=0.1, exclusions=exclusions, compiled=compiled)
    pairs = neighbors.update(positions, None)
    assert set(pair_keys(pairs, 3000).tolist()) == brute_force(positions, None, 0.7, exclusions)
    assert len(pairs) == len(set(pair_keys(pairs, 3000).tolist()))


@pytest.mark.skipif(os.environ.get("MINDSCIENCE_NO_EXTENSIONS") == "1", reason="extensions disabled")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_search_equals_torch_search(dtype):
    """Same pairs from the compiled and the pure torch cell search (triclinic, float32 and float64),
    and the compiled search really ran (the torch search is not called): the kernels must build."""
    assert _kernels.nonbonded() is not None, "the compiled kernels failed to build (see the warning)"
    box = CASES["triclinic"].to(dtype)
    positions = random_system(4000, CASES["triclinic"], seed=4).to(dtype)
    exclusions = torch.stack([torch.arange(0, 3999, 3), torch.arange(1, 4000, 3)], 1)
    compiled = NeighborList(cutoff=0.7, skin=0.15, exclusions=exclusions)
    compiled._search_cells = None  # would raise if the pure torch search were used
    pure = NeighborList(cutoff=0.7, skin=0.15, exclusions=exclusions, compiled=False)
    keys = torch.sort(pair_keys(compiled.update(positions, box), 4000)).values
    assert torch.equal(keys, torch.sort(pair_keys(pure.update(positions, box), 4000)).values)
    assert len(keys) > 100_000


def test_rebuild_only_after_half_skin():
    box = CASES["triclinic"]
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
    box = CASES["orthorhombic"]
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
