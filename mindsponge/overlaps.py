"""Overlapping atoms: pairs closer than any physical structure allows.

Two atoms closer than :data:`OVERLAP_DISTANCE` (0.05 nm; bonds to hydrogen are about 0.1 nm)
repel each other more strongly than a time step can integrate: dynamics started there blows up.
:func:`find_overlaps` finds such pairs with a cell search (memory and time linear in N);
a :class:`~mindsponge.simulation.Simulation` runs it when it is created and refuses dynamics
(:class:`OverlapError`) until minimisation has moved the atoms apart.

Example::

    from mindsponge.overlaps import find_overlaps
    find_overlaps(system.positions, system.box)   # [(i, j, distance_nm), ...], closest first
"""

import torch

from common.errors import DataError
from mindsponge import space

__all__ = ["OVERLAP_DISTANCE", "OverlapError", "OverlapWarning", "describe_overlaps", "find_overlaps",
           "overlaps_of_state"]

# atoms closer than this (nm) overlap: no two atoms of a physical structure come this close
# (bonds to hydrogen are about 0.1 nm), while their repulsion is then beyond what a time step
# can integrate
OVERLAP_DISTANCE = 0.05


class OverlapWarning(UserWarning):
    """A Simulation was created on a structure with overlapping atoms (see :func:`find_overlaps`)."""


class OverlapError(DataError):
    """Dynamics refused on a structure with overlapping atoms.

    Attributes:
        overlaps: list of ``(i, j, distance)``, closest first (atom indices, nm).
    """

    def __init__(self, message, overlaps):
        super().__init__(message)
        self.overlaps = overlaps


def find_overlaps(positions, box=None, distance=OVERLAP_DISTANCE, ignore=None):
    """Atom pairs closer than ``distance``, by a cell search (memory and time linear in N).

    Args:
        positions: (N, 3) tensor, nm.
        box: (3, 3) tensor in reduced form, nm (minimum-image distances), or ``None``.
        distance: the overlap distance, nm.
        ignore: optional (K,) long tensor of atoms left out (virtual sites, which sit on purpose
            close to their parents).

    Returns:
        list of ``(i, j, d)`` with ``i < j`` and the distance ``d`` in nm, closest pair first.
    """
    positions = positions.detach().to(torch.float64)
    n_atoms = len(positions)
    atoms = torch.arange(n_atoms, device=positions.device)
    if ignore is not None and len(ignore):
        keep = torch.ones(n_atoms, dtype=torch.bool, device=positions.device)
        keep[torch.as_tensor(ignore, dtype=torch.long, device=positions.device)] = False
        atoms = atoms[keep]
    if len(atoms) < 2:
        return []
    points = positions[atoms]
    if box is None:
        lower = points.min(0).values
        cells = torch.floor((points - lower) / distance).long() + 1  # an empty margin cell on each side
        n_cells = cells.max(0).values + 2
        periodic = False
    else:
        box = box.detach().to(torch.float64)
        volume = torch.linalg.det(box).abs()
        faces = torch.linalg.cross(box[[1, 2, 0]], box[[2, 0, 1]])  # normals of the faces b-c, c-a, a-b
        widths = volume / torch.linalg.vector_norm(faces, dim=-1)  # distances between opposite faces
        n_cells = torch.clamp(torch.floor(widths / distance).long(), min=1)
        scaled = space.fractional(points, box)
        cells = torch.floor((scaled - torch.floor(scaled)) * n_cells).long() % n_cells
        periodic = True
    strides = torch.stack([n_cells[1] * n_cells[2], n_cells[2], torch.ones_like(n_cells[0])])
    keys = (cells * strides).sum(1)
    order = torch.argsort(keys)
    sorted_keys = keys[order]
    occupancy = int(torch.unique_consecutive(sorted_keys, return_counts=True)[1].max())
    found_i, found_j = [], []
    span = torch.tensor([-1, 0, 1], device=positions.device)
    offsets = torch.cartesian_prod(span, span, span)
    for offset in offsets:
        neighbor = cells + offset
        if periodic:
            neighbor = neighbor % n_cells
        wanted = (neighbor * strides).sum(1)
        start = torch.searchsorted(sorted_keys, wanted)
        for slot in range(occupancy):
            index = start + slot
            valid = index < len(sorted_keys)
            index = torch.where(valid, index, 0)
            valid &= sorted_keys[index] == wanted
            partner = order[index]
            valid &= partner > torch.arange(len(points), device=positions.device)
            found_i.append(torch.arange(len(points), device=positions.device)[valid])
            found_j.append(partner[valid])
    first, second = torch.cat(found_i), torch.cat(found_j)
    if len(first) == 0:
        return []
    pair_keys = torch.unique(first * len(points) + second)
    first, second = pair_keys // len(points), pair_keys % len(points)
    separation = torch.linalg.vector_norm(space.minimum_image(points[second] - points[first], box), dim=-1)
    close = separation < distance
    first, second, separation = atoms[first[close]], atoms[second[close]], separation[close]
    order = torch.argsort(separation)
    rows = zip(first[order].tolist(), second[order].tolist(), separation[order].tolist(), strict=True)
    return [(min(i, j), max(i, j), d) for i, j, d in rows]


def overlaps_of_state(state, forcefield, distance=OVERLAP_DISTANCE):
    """:func:`find_overlaps` of a simulation's state, leaving out the virtual sites of ``forcefield`` (they
    sit close to their parents on purpose) and the atoms on which it exerts no force at all (an ideal gas).

    Args:
        state: a :class:`~mindsponge.state.State` (its forces, if computed, tell the ignored atoms).
        forcefield: the potential (its ``virtual_sites``, if any).
        distance: nm.
    """
    forces = state.forces
    if forces is None:
        ignored = torch.zeros(len(state.positions), dtype=torch.bool, device=state.positions.device)
    else:
        ignored = (forces == 0).all(-1)  # atoms the force field does not act on
    virtual_sites = getattr(forcefield, "virtual_sites", None)
    if virtual_sites is not None:
        ignored[virtual_sites.sites] = True
    return find_overlaps(state.positions, state.box, distance, ignore=torch.nonzero(ignored)[:, 0])


def describe_overlaps(overlaps, topology=None, distance=OVERLAP_DISTANCE):
    """One line naming the closest overlapping pair (atoms, residues, distance) and how many more.

    Args:
        overlaps: non-empty list of ``(i, j, distance)`` from :func:`find_overlaps`.
        topology: optional :class:`~mindsponge.topology.Topology`, to name the atoms.
        distance: the overlap distance the pairs were found with, nm.
    """
    i, j, separation = overlaps[0]

    def atom(index):
        return f"atom {index}" if topology is None else topology.describe_atom(index)

    more = f" ({len(overlaps) - 1} more pairs overlap)" if len(overlaps) > 1 else ""
    return (
        f"overlapping atoms: {atom(i)} and {atom(j)} are {separation:.4f} nm apart, closer than "
        f"{distance} nm{more}"
    )
