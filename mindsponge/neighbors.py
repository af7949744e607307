"""Neighbour lists: which atom pairs are closer than a cutoff.

A pair term (Lennard-Jones, real-space Coulomb) only needs the pairs within its cutoff
``r_c``. :class:`NeighborList` finds the pairs within ``r_c + skin`` and keeps them across
steps: as long as no atom has moved more than half the skin since the list was built,
every pair now closer than ``r_c`` is still in the list (two atoms approach each other by
at most one skin). The list is rebuilt only when some atom has moved further, or when
the box changed. Pair terms then mask the listed pairs with ``r < r_c`` themselves.

Building uses a cell list for every system, whatever its size and box: space (the periodic
box, or the bounding box of the atoms without periodicity) is cut into ``n_d`` cells along
each box vector ``d``, about ``(r_c + skin) / 3`` wide in the perpendicular direction
(``/ 2`` in the torch search; wider where there would be more than ``4 N + 64`` cells, in a
sparse system), atoms are sorted by cell, and only the "forward" half of the neighbouring
cells within ``reach_d = ceil((r_c + skin) n_d / w_d)`` cells (``w_d`` the perpendicular
width of the box) plus the cell itself are searched (a half shell, so each pair is seen
once). A neighbouring
cell across the box boundary is searched as the periodic image shifted by the box vectors;
in a small box, where ``2 reach_d + 1 > n_d``, the half shell reaches the same cell through
several images, so a partner is found through each of its images within ``r_c + skin``.
Memory is linear in the number of atoms: candidates are generated one neighbour offset at a
time.

On CPU the cell search runs as a compiled kernel (:mod:`mindsponge._kernels`, built once
per machine; ``compiled=False`` or ``MINDSCIENCE_NO_EXTENSIONS=1`` selects the pure torch
search, which finds the same pairs): a counting sort of the atoms by cell, then one pass
over the cells and their half shell with the exclusions checked as pairs are found (with AVX-512,
16 candidate distances at a time, those within the list cutoff compacted in a register).
Measured on the 2-core test machine (TIP3P, 1.0 nm list cutoff, one thread, idle, 2026-11-27): 3,000
atoms (625k pairs) 5.0 ms compiled (6.9 ms before the AVX-512 compaction), 24,000 atoms (5M pairs)
34 ms (46 ms); the torch search took 130-260 ms for 3,400 atoms and about 2 s for 24,000 (2 threads,
shared machine, half-cutoff cells).

The compiled pair kernel takes the same pairs as clusters (:meth:`NeighborList.clusters`, a
:class:`ClusterPairs`; searched by the compiled kernels when first asked for after a build, as the
pairs and rows are): atoms in clusters of 8 (columns along the first two box vectors, about one
cluster wide, sorted along the third and cut every 8 atoms), and for each cluster the clusters with
an atom pair within ``r_c + skin``, each through its own periodic shift, with a 64-bit mask of the
pairs (within the list cutoff at the build, not excluded, each once). In a small box a partner can be
listed through two shifts, but only one image can come within ``r_c``. The same 3,000 and 24,000
atoms: 2.4 and 21 ms a build.

Periodic boxes follow :mod:`mindsponge.space` (OpenMM's reduced form, orthorhombic and
triclinic); the cutoff ``r_c`` must be at most :func:`mindsponge.space.max_cutoff` (half the
smallest of ``a_x, b_y, c_z``, OpenMM's rule), any box shape and size that satisfies it
works. A pair is listed exactly when the distance to the nearest periodic image of the
partner is below ``r_c + skin``. When some lattice vector is shorter than
``2 (r_c + skin)`` (a small box: ``r_c + skin`` can exceed ``max_cutoff``), two images of
one partner can both be that close (and an atom can even see its own image): the search
then drops self pairs and keeps each pair once. The energy terms take
the minimum image of each listed pair themselves (exact below ``max_cutoff``, so below
``r_c``).

Example::

    neighbors = NeighborList(cutoff=0.9, skin=0.1, exclusions=bonded_pairs)
    for step in range(n_steps):
        pairs = neighbors.update(positions, box)     # (P, 2) long, i < j
        ...
    neighbors.n_builds                               # how many times it was rebuilt
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import NamedTuple

import torch
from torch import Tensor

from common.errors import ConfigurationError, SimulationError
from mindsponge import _kernels, space

__all__ = ["ClusterPairs", "NeighborList", "NeighborListOverflowError", "all_pairs", "pair_keys"]


# cells per list cutoff along each axis, by search. The compiled search: cells about a third of the list
# cutoff wide, partners within about three cells (fewer candidates than with half-cutoff cells; the build
# took 0.5-0.8x the time, one thread, in a 3 nm dodecahedron and 3,300 and 24,000 atoms at water density).
# The torch search, whose cost grows with the number of neighbour offsets: half-cutoff cells (3x faster).
_CELLS_PER_CUTOFF = {"compiled": 3, "torch": 2}
# at most this many cells per atom (plus 64): sparse systems get wider cells
_CELLS_PER_ATOM = 4


def _half_shell(reach: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """The cell itself, then the lexicographically positive offsets with ``|offset_d| <= reach_d``."""
    ranges = [range(-r, r + 1) for r in reach]
    return [(0, 0, 0)] + [(dx, dy, dz) for dx in ranges[0] for dy in ranges[1] for dz in ranges[2]
                          if (dx, dy, dz) > (0, 0, 0)]


class ClusterPairs(NamedTuple):
    """A neighbour list as clusters of 8 close atoms and the pairs of clusters within the list cutoff
    (GROMACS' and OpenMM's layout for SIMD pair kernels; built by the compiled kernels, see
    :meth:`NeighborList.clusters`). ``C`` clusters, ``P`` cluster pairs.

    Attributes:
        slot_atoms: ``(8 C,)`` int32, the atom in each slot of each cluster (``-1``: an empty slot).
        slot_shifts: ``(8 C, 3)``, nm: the lattice vector that wrapped each slot's atom into the box
            at the build.
        pair_starts: ``(C + 1,)`` int64: the partners of cluster ``c`` are entries
            ``pair_starts[c]:pair_starts[c + 1]`` of the next three.
        pair_clusters: ``(P,)`` int32, the partner cluster.
        pair_shifts: ``(P, 3)``, nm: the lattice vector the partner is seen through.
        pair_masks: ``(P,)`` int64: bit ``8 a + b`` set when slot ``a`` of the cluster and slot ``b``
            of the partner are a pair within the list cutoff at the build, not excluded, listed once.
    """

    slot_atoms: Tensor
    slot_shifts: Tensor
    pair_starts: Tensor
    pair_clusters: Tensor
    pair_shifts: Tensor
    pair_masks: Tensor


class NeighborListOverflowError(SimulationError):
    """More pairs were found than the fixed capacity ``max_pairs`` of a :class:`NeighborList`."""


def pair_keys(pairs: Tensor, n_atoms: int) -> Tensor:
    """Unique integer key ``min(i, j) * n_atoms + max(i, j)`` of each unordered pair.

    Args:
        pairs: ``(P, 2)`` long tensor of atom indices.
        n_atoms: number of atoms N.

    Returns:
        ``(P,)`` long tensor.
    """
    first = torch.minimum(pairs[:, 0], pairs[:, 1])
    second = torch.maximum(pairs[:, 0], pairs[:, 1])
    return first * n_atoms + second


def all_pairs(n_atoms: int, exclusions: Tensor | None = None, device=None) -> Tensor:
    """Every pair ``i < j`` of ``n_atoms`` atoms, without the excluded ones.

    This is ``n_atoms * (n_atoms - 1) / 2`` pairs: meant for small systems without a cutoff.

    Args:
        n_atoms: number of atoms N.
        exclusions: ``(E, 2)`` long tensor of pairs to leave out (either order), or ``None``.
        device: device of the result.

    Returns:
        ``(P, 2)`` long tensor with ``i < j``.
    """
    pairs = torch.triu_indices(n_atoms, n_atoms, offset=1, device=device).T
    if exclusions is not None and len(exclusions) > 0:
        excluded = torch.isin(pair_keys(pairs, n_atoms), pair_keys(exclusions.to(pairs.device), n_atoms))
        pairs = pairs[~excluded]
    return pairs.contiguous()


def _check_exclusions(exclusions) -> Tensor | None:
    if exclusions is None:
        return None
    exclusions = torch.as_tensor(exclusions)
    if exclusions.numel() == 0:
        return None
    if exclusions.ndim != 2 or exclusions.shape[1] != 2 or exclusions.is_floating_point():
        raise ConfigurationError(
            f"exclusions must be an (E, 2) integer tensor of atom index pairs, got "
            f"{tuple(exclusions.shape)} {exclusions.dtype}"
        )
    if bool((exclusions[:, 0] == exclusions[:, 1]).any()):
        raise ConfigurationError("exclusions must pair two different atoms; found a pair (i, i)")
    return exclusions.long()


class NeighborList:
    """Verlet list of the atom pairs within ``cutoff + skin``, built with a cell list.

    Args:
        cutoff: interaction cutoff ``r_c``, nm.
        skin: extra distance kept in the list, nm. The list is rebuilt when some atom has moved
            more than ``skin / 2`` since the last build (minimum-image displacement, so wrapping
            atoms into the box does not trigger a rebuild) or when the box changed.
        exclusions: ``(E, 2)`` long tensor of atom pairs never listed (bonded pairs, 1-4 pairs
            handled separately...), either order; or ``None``.
        max_pairs: optional fixed capacity. When more pairs are found,
            :class:`NeighborListOverflowError` is raised (pairs are never silently dropped).
            ``None`` lets the list grow as needed.
        all_pairs_below: deprecated and ignored (every system now uses the cell search; passing it
            warns with a :class:`DeprecationWarning`).
        compiled: use the compiled cell search (:mod:`mindsponge._kernels`) for CPU positions when
            it is available; ``False`` always uses the pure torch search (same pairs).

    Attributes:
        n_builds: how many times the list has been built.
        pairs: the current ``(P, 2)`` long tensor (``i < j``), or ``None`` before the first update.
    """

    def __init__(self, cutoff: float, skin: float = 0.1, exclusions: Tensor | None = None,
                 max_pairs: int | None = None, all_pairs_below: int | None = None, compiled: bool = True):
        if not (isinstance(cutoff, int | float) and math.isfinite(cutoff) and cutoff > 0):
            raise ConfigurationError(f"cutoff must be a positive finite number of nm, got {cutoff!r}")
        if not (isinstance(skin, int | float) and skin >= 0):
            raise ConfigurationError(f"skin must be a non-negative number of nm, got {skin!r}")
        if max_pairs is not None and (not isinstance(max_pairs, int) or max_pairs < 0):
            raise ConfigurationError(f"max_pairs must be a non-negative int or None, got {max_pairs!r}")
        self.cutoff = float(cutoff)
        self.skin = float(skin)
        self.exclusions = _check_exclusions(exclusions)
        if all_pairs_below is not None:
            warnings.warn("NeighborList(all_pairs_below=...) is deprecated and ignored: the cell search "
                          "handles every system size and box", DeprecationWarning, stacklevel=2)
        self.max_pairs = max_pairs
        self.compiled = bool(compiled)
        self.n_builds = 0
        self._pairs: Tensor | None = None
        self._rows: tuple[Tensor, Tensor] | None = None
        self._clusters: ClusterPairs | None = None
        self._kernels = None  # the compiled kernels of the last build, which search its pairs when asked
        self._reference_positions: Tensor | None = None
        self._reference_box: Tensor | None = None
        self._excluded_keys: Tensor | None = None
        self._exclusion_table: tuple[Tensor, Tensor] | None = None

    @property
    def pairs(self) -> Tensor | None:
        """The current ``(P, 2)`` long tensor of pairs ``i < j`` sorted by ``i``, or ``None`` before the
        first update."""
        if self._pairs is None and self.rows() is not None:  # rows come from the compiled search
            self._pairs = self._kernels.rows_to_pairs(*self._rows)
        return self._pairs

    def rows(self) -> tuple[Tensor, Tensor] | None:
        """The current pairs as compressed rows ``(starts (N + 1,) long, partners (P,) int32)``: the
        partners of atom ``i`` are ``partners[starts[i]:starts[i + 1]]``, each pair listed once, in the
        row of one of its atoms (``None`` before the first update)."""
        if self._rows is None and self._pairs is None and self._kernels is not None:
            self._rows = self._search_rows(self._reference_positions, self._reference_box)
            self._check_capacity(len(self._rows[1]))
        if self._rows is None and self._pairs is not None:
            pairs = self._pairs.cpu()
            if len(pairs) > 1 and not bool((pairs[1:, 0] >= pairs[:-1, 0]).all()):
                pairs = pairs[torch.argsort(pairs[:, 0], stable=True)]
            n_atoms = len(self._reference_positions)
            starts = torch.zeros(n_atoms + 1, dtype=torch.long)
            starts[1:] = torch.bincount(pairs[:, 0], minlength=n_atoms).cumsum(0)
            self._rows = (starts, pairs[:, 1].to(torch.int32).contiguous())
        return self._rows

    def clusters(self) -> ClusterPairs | None:
        """The current list as clusters of 8 atoms and their cluster pairs (:class:`ClusterPairs`, CPU
        tensors), for the compiled SIMD pair kernel; ``None`` before the first update or without the
        compiled kernels. The same atom pairs as :attr:`pairs` (those within ``cutoff + skin`` at the
        build, exclusions removed), searched when first asked for after each build."""
        if self._clusters is None and self._reference_positions is not None:
            reference = self._reference_positions.cpu()
            kernels = _kernels.usable(reference)
            if kernels is None:
                return None
            starts, partners = self.exclusion_table(len(reference))
            box = reference.new_zeros(0) if self._reference_box is None else self._reference_box.cpu()
            found = kernels.cluster_pairs(reference, box, self.list_cutoff, starts, partners)
            self._clusters = ClusterPairs(*found)
        return self._clusters

    def update_clusters(self, positions: Tensor, box: Tensor | None = None) -> ClusterPairs | None:
        """:meth:`update` returning the list as :meth:`clusters`."""
        if self.needs_rebuild(positions, box):
            self.build(positions, box)
        return self.clusters()

    @property
    def reference_positions(self) -> Tensor | None:
        """``(N, 3)`` positions (detached) at the last build, nm; ``None`` before the first."""
        return self._reference_positions

    def state_dict(self) -> dict:
        """What fixes the list (and so the force field's summation order): the positions and box of
        the last build, nm (``None`` before the first). :meth:`load_state_dict` rebuilds from it."""
        return {"positions": self._reference_positions, "box": self._reference_box}

    def load_state_dict(self, state: dict) -> None:
        """Rebuild the list at the positions and box of :meth:`state_dict` (nothing if never built)."""
        if state["positions"] is not None:
            self.build(state["positions"], state["box"])

    @property
    def list_cutoff(self) -> float:
        """``cutoff + skin``, nm: the distance up to which pairs are listed."""
        return self.cutoff + self.skin

    def needs_rebuild(self, positions: Tensor, box: Tensor | None = None) -> bool:
        """Whether :meth:`update` would rebuild the list for these positions and box."""
        reference = self._reference_positions
        if reference is None or reference.shape != positions.shape or reference.device != positions.device:
            return True
        if (box is None) != (self._reference_box is None):
            return True
        if box is not None and not torch.equal(box.detach(), self._reference_box):
            return True
        box = box.detach() if box is not None else None  # a box requiring grad (stress) needs no graph here
        displacement = space.minimum_image(positions.detach() - reference.to(positions.dtype), box)
        max_squared = float((displacement * displacement).sum(-1).max()) if len(positions) else 0.0
        return max_squared > (0.5 * self.skin) ** 2

    def update(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """The pairs to consider for these positions, rebuilding the list if needed.

        Args:
            positions: ``(N, 3)`` tensor, nm.
            box: ``(3, 3)`` tensor of box vectors (rows, OpenMM's reduced form), nm, or ``None``.

        Returns:
            ``(P, 2)`` long tensor of pairs ``i < j`` (excluded pairs removed), containing every
            non-excluded pair closer than ``cutoff`` (and some up to ``cutoff + skin``), each once;
            sorted by ``i`` from the compiled search.

        Raises:
            NeighborListOverflowError: more pairs than ``max_pairs``.
            ValueError: the cutoff is longer than half the box allows (see
                :func:`mindsponge.space.max_cutoff`).
        """
        if not isinstance(positions, Tensor) or positions.ndim != 2 or positions.shape[1] != 3:
            shape = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
            raise ConfigurationError(f"positions must be an (N, 3) tensor in nm, got {shape}")
        if self.needs_rebuild(positions, box):
            self.build(positions, box)
        return self.pairs

    def build(self, positions: Tensor, box: Tensor | None = None) -> None:
        """Build the list now (see :meth:`update`, which calls this only when needed; the result is in
        :attr:`pairs`, :meth:`rows` and :meth:`clusters`; with the compiled kernels each is searched when
        first asked for)."""
        positions = positions.detach()
        if box is not None:
            box = box.detach().to(positions)
            if self.cutoff > space.max_cutoff(box) + 1e-12:
                raise space.BoxTooSmallError(
                    f"NeighborList cutoff {self.cutoff} nm is longer than half the box "
                    f"({space.max_cutoff(box)} nm); use a larger box or a shorter cutoff", box)
        n_atoms = len(positions)
        if n_atoms == 0:
            self._store(positions, box, torch.zeros((0, 2), dtype=torch.long, device=positions.device), None)
            return
        kernels = _kernels.usable(positions) if self.compiled else None
        if kernels is not None:  # the pairs are searched when asked for: as rows, pairs or clusters
            self._store(positions, box, None, None)
            self._kernels = kernels
            if self.max_pairs is not None:
                self.rows()  # checks the capacity now
            return
        cells_per_cutoff = _CELLS_PER_CUTOFF["torch"]
        cell_xyz, n_cells, reach, widths, wrapped = self._cell_grid(positions, box, cells_per_cutoff)
        several_images = box is not None and _images_may_repeat(box, widths, self.list_cutoff)
        pairs = self._search_cells(positions, box, cell_xyz, n_cells, reach, wrapped)
        if several_images and len(pairs) > 0:
            pairs = pairs[pairs[:, 0] != pairs[:, 1]]  # an atom's own image
            keys = torch.unique(pair_keys(pairs, n_atoms))  # a partner found through two images
            pairs = torch.stack([keys // n_atoms, keys % n_atoms], dim=1)
        if self.exclusions is not None and len(pairs) > 0:
            if self._excluded_keys is None or self._excluded_keys.device != pairs.device:
                self._excluded_keys = torch.unique(pair_keys(self.exclusions.to(pairs.device), n_atoms))
            pairs = pairs[~torch.isin(pair_keys(pairs, n_atoms), self._excluded_keys)]
        self._store(positions, box, pairs.contiguous(), None)

    def _store(self, positions: Tensor, box: Tensor | None, pairs: Tensor | None,
               rows: tuple[Tensor, Tensor] | None) -> None:
        if pairs is not None:
            self._check_capacity(len(pairs))
        self._pairs, self._rows, self._clusters, self._kernels = pairs, rows, None, None
        self._reference_positions = positions.clone()
        self._reference_box = None if box is None else box.clone()
        self.n_builds += 1

    def _check_capacity(self, count: int) -> None:
        if self.max_pairs is not None and count > self.max_pairs:
            raise NeighborListOverflowError(
                f"NeighborList found {count} pairs within {self.list_cutoff} nm, more than its "
                f"capacity max_pairs={self.max_pairs}; raise max_pairs (or pass None to grow as needed)"
            )

    def _search_rows(self, positions: Tensor, box: Tensor | None) -> tuple[Tensor, Tensor]:
        """The compiled cell search: the pairs as compressed rows, excluded pairs left out."""
        cells_per_cutoff = _CELLS_PER_CUTOFF["compiled"]
        cell_xyz, n_cells, reach, widths, wrapped = self._cell_grid(positions, box, cells_per_cutoff)
        several_images = box is not None and _images_may_repeat(box, widths, self.list_cutoff)
        starts, partners = self.exclusion_table(len(positions))
        box_or_empty = positions.new_zeros(0) if box is None else box
        return tuple(self._kernels.cell_neighbors(wrapped, box_or_empty, cell_xyz, n_cells, reach,
                                                  self.list_cutoff, starts, partners, several_images))

    def exclusion_table(self, n_atoms: int) -> tuple[Tensor, Tensor]:
        """Excluded partners ``j > i`` of each atom ``i``: ``partners[starts[i]:starts[i + 1]]``, as
        ``(starts (N + 1,) long, partners (E,) long)`` CPU tensors (what the compiled searches take)."""
        if self._exclusion_table is None or len(self._exclusion_table[0]) != n_atoms + 1:
            if self.exclusions is None:
                keys = torch.zeros(0, dtype=torch.long)
            else:
                keys = torch.unique(pair_keys(self.exclusions.cpu(), n_atoms))
            counts = torch.bincount(keys // n_atoms, minlength=n_atoms)
            starts = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
            self._exclusion_table = (starts, keys % n_atoms)
        return self._exclusion_table

    def _cell_grid(self, positions: Tensor, box: Tensor | None, cells_per_cutoff: int):
        """Cell coordinates ``(N, 3)`` of every atom, the number of cells and the reach (in cells, see the
        module docstring) along each axis, the widths of the box (or of the bounding box) perpendicular to
        each axis, nm, and the positions wrapped into the box (as given without one).

        Cells are about ``(cutoff + skin) / cells_per_cutoff`` wide (at least one cell per axis, however
        small the box).
        """
        if box is None:
            lower = positions.min(0).values
            extent = (positions.max(0).values - lower).clamp_min(self.list_cutoff)
            widths = extent.tolist()
            scaled, wrapped = (positions - lower) / extent, positions
        else:
            volume = torch.linalg.det(box).abs()
            # perpendicular width along each box vector: volume over the area of the opposite face
            faces = torch.stack([torch.linalg.cross(box[1], box[2]), torch.linalg.cross(box[2], box[0]),
                                 torch.linalg.cross(box[0], box[1])])
            widths = (volume / torch.linalg.vector_norm(faces, dim=1)).tolist()
            scaled = space.fractional(positions, box)
            scaled = scaled - torch.floor(scaled)
            wrapped = scaled @ box
        n_cells = [max(1, math.floor(cells_per_cutoff * width / self.list_cutoff)) for width in widths]
        # a sparse system (a large box or far-apart atoms): fewer, wider cells, memory linear in the atoms
        excess = math.prod(n_cells) / (_CELLS_PER_ATOM * len(positions) + 64)
        if excess > 1:
            n_cells = [max(1, math.floor(n / excess ** (1 / 3))) for n in n_cells]
        # a displacement shorter than the list cutoff spans at most list_cutoff / width of the box along
        # an axis, so at most ceil(list_cutoff n / width) cells
        reach = [max(1, math.ceil(self.list_cutoff * n / width))
                 for n, width in zip(n_cells, widths, strict=True)]
        cell_xyz = _cell_coordinates(scaled, torch.tensor(n_cells, device=positions.device))
        return cell_xyz, n_cells, reach, widths, wrapped

    def _search_cells(self, positions: Tensor, box: Tensor | None, cell_xyz: Tensor, n_cells_list: list[int],
                      reach: list[int], wrapped: Tensor) -> Tensor:
        """Half-shell cell search; ``wrapped`` are the positions inside the box (or as given without).

        Pairs ``(min, max)`` of the original indices, exclusions not removed; in a small box (see the
        module docstring) a partner may come once per image within the list cutoff, and self pairs too.
        """
        device = positions.device
        n_atoms = len(positions)
        n_cells = torch.tensor(n_cells_list, device=device)
        total_cells = math.prod(n_cells_list)
        strides = torch.tensor([n_cells_list[1] * n_cells_list[2], n_cells_list[2], 1], device=device)
        cell_of_atom = (cell_xyz * strides).sum(1)
        order = torch.argsort(cell_of_atom, stable=True)
        sorted_cell = cell_of_atom[order]
        sorted_positions = wrapped[order]
        counts = torch.bincount(cell_of_atom, minlength=total_cells)
        starts = torch.cumsum(counts, 0) - counts
        grid = torch.stack(torch.meshgrid(*(torch.arange(n, device=device) for n in n_cells_list),
                                          indexing="ij"), dim=-1).reshape(-1, 3)
        sorted_index = torch.arange(n_atoms, device=device)
        found = []
        for offset in _half_shell(tuple(reach)):
            first_positions = sorted_positions
            if offset == (0, 0, 0):
                # same cell: partners are the atoms after this one in sorted order
                partner_start = sorted_index + 1
                n_partners = starts[sorted_cell] + counts[sorted_cell] - partner_start
            else:
                neighbour = grid + torch.tensor(offset, device=device)
                if box is not None:
                    # a neighbour across the box boundary is the periodic image shifted by the box
                    image = torch.div(neighbour, n_cells, rounding_mode="floor")
                    neighbour = neighbour - image * n_cells
                    valid = torch.ones(total_cells, dtype=torch.bool, device=device)
                    image_shift = image.to(positions.dtype) @ box
                    first_positions = sorted_positions - image_shift[sorted_cell]
                else:
                    valid = ((neighbour >= 0) & (neighbour < n_cells)).all(1)
                    neighbour = neighbour.clamp(min=torch.zeros_like(n_cells), max=n_cells - 1)
                neighbour_cell = (neighbour * strides).sum(1)
                neighbour_count = torch.where(valid, counts[neighbour_cell], 0)
                partner_start = starts[neighbour_cell][sorted_cell]
                n_partners = neighbour_count[sorted_cell]
            n_candidates = int(n_partners.sum())
            if n_candidates == 0:
                continue
            first = torch.repeat_interleave(sorted_index, n_partners, output_size=n_candidates)
            second = torch.arange(n_candidates, device=device) + torch.repeat_interleave(
                partner_start - (torch.cumsum(n_partners, 0) - n_partners), n_partners,
                output_size=n_candidates)
            displacement = sorted_positions.index_select(0, second) - torch.repeat_interleave(
                first_positions, n_partners, dim=0, output_size=n_candidates)
            keep = torch.nonzero((displacement * displacement).sum(1) < self.list_cutoff**2).squeeze(1)
            first = order.index_select(0, first.index_select(0, keep))
            second = order.index_select(0, second.index_select(0, keep))
            found.append(torch.stack([torch.minimum(first, second), torch.maximum(first, second)], dim=1))
        if not found:
            return torch.zeros((0, 2), dtype=torch.long, device=device)
        return torch.cat(found)


def _images_may_repeat(box: Tensor, widths: list[float], list_cutoff: float) -> bool:
    """Whether two periodic images of one atom can both be within ``list_cutoff`` of another atom (or an
    atom within it of its own image): whether some lattice vector is shorter than ``2 list_cutoff``.

    A lattice vector ``n @ box`` of length ``l`` has ``|n_d| <= l / widths[d]``, so the integer vectors
    with ``|n_d| <= 2 list_cutoff / widths[d]`` are all the candidates. (``list_cutoff <=``
    :func:`mindsponge.space.max_cutoff` is a sufficient condition for ``False``, not a necessary one: a
    3 nm rhombic dodecahedron has ``max_cutoff`` 1.06 nm but no lattice vector shorter than 3 nm.)
    """
    ranges = [range(-math.floor(2 * list_cutoff / width), math.floor(2 * list_cutoff / width) + 1)
              for width in widths]
    images = torch.tensor([n for n in itertools.product(*ranges) if n != (0, 0, 0)],
                          dtype=box.dtype).reshape(-1, 3)
    lengths = torch.linalg.vector_norm(images @ box.cpu(), dim=1)
    return bool((lengths < 2 * list_cutoff).any())


def _cell_coordinates(scaled: Tensor, n_cells: Tensor) -> Tensor:
    """Integer cell coordinates ``(N, 3)`` of points with coordinates ``scaled`` in ``[0, 1]``."""
    cells = torch.floor(scaled * n_cells.to(scaled.dtype)).long()
    return torch.minimum(cells.clamp_min(0), n_cells - 1)
