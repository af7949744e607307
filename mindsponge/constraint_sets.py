"""Which constraints a system has: built from its topology or its OpenMM System, and checked.

- :func:`from_system`: rigid water (:class:`~mindsponge.constraints.Settle`) and/or bonds to
  hydrogen (:class:`~mindsponge.constraints.Rattle`) from a :class:`~mindsponge.system.System`'s
  topology, ``kind="water"``, ``"hbonds"`` or ``"water+hbonds"``, with lengths from the force
  field's bond terms (or the System's constraint distances) where it has them;
- :func:`from_pairs`: from explicit pairs and distances (an OpenMM System's constraints, with
  SETTLE for its rigid waters);
- :func:`check_against_system`: refuses constraints that contradict a System's, naming the bond.

Units: nm, rad, amu.
"""

import math

import torch

from common.errors import ConfigurationError
from mindsponge.constraints import Constraints, Rattle, Settle

__all__ = ["KINDS", "check_against_system", "from_pairs", "from_system"]

KINDS = ("water", "hbonds", "water+hbonds")


def _forcefield_geometry(forcefield):
    """Bond lengths {(i, j): r0} and angles {(i, j, k): theta0} from harmonic terms of a force field.

    Distances the force field's :class:`~mindsponge.forcefield.SystemConstraints` fix (an OpenMM
    System's constraints) are returned as lengths too, and take precedence over bond terms.
    """
    lengths, angles = {}, {}
    if forcefield is None:
        return lengths, angles
    system_constraints = getattr(forcefield, "constraints", None)
    for term in forcefield:
        kind = type(term).__name__
        if kind == "HarmonicBond":
            for (i, j), length in zip(term.atoms.tolist(), term.length.tolist(), strict=True):
                lengths[(min(i, j), max(i, j))] = length
        elif kind == "HarmonicAngle":
            for (i, j, k), angle in zip(term.atoms.tolist(), term.angle.tolist(), strict=True):
                angles[(min(i, k), j, max(i, k))] = angle
    if system_constraints is not None:
        for (i, j), distance in zip(
            system_constraints.pairs.tolist(), system_constraints.distances.tolist(), strict=True
        ):
            lengths[(min(i, j), max(i, j))] = distance
    return lengths, angles


def _distance(positions, i, j):
    return float(torch.linalg.vector_norm(positions[j] - positions[i]))


def from_system(system, kind, forcefield=None, tolerance=1e-5):
    """Constraints of a system: rigid water and/or bonds to hydrogen.

    Distances come from the force field's own constraints when it has them (an OpenMM System's,
    see :func:`mindsponge.interop.openmm.from_openmm`), else from the equilibrium values of its
    ``HarmonicBond`` and ``HarmonicAngle`` terms (an OpenMM System created with
    ``rigidWater=False``), else from the system's current geometry (exact for water boxes from
    :func:`mindsponge.build.water_box` or OpenMM's ``Modeller.addSolvent``).

    Args:
        system: :class:`~mindsponge.system.System` with a topology (residues, elements, bonds).
        kind: ``"water"`` (SETTLE on residues of one O and two H), ``"hbonds"`` (RATTLE on
            bonds with a hydrogen, except in rigid water) or ``"water+hbonds"``; ``None`` gives
            ``None``.
        forcefield: optional :class:`~mindsponge.forcefield.ForceField` with the equilibrium values.
        tolerance: relative tolerance of RATTLE.

    Returns:
        :class:`Constraints`, or ``None`` for ``kind=None``.

    Raises:
        ValueError: an unknown ``kind`` or a system without topology.
    """
    if kind is None:
        return None
    if kind not in KINDS:
        raise ConfigurationError(f"constraints must be one of {KINDS} or None, got {kind!r}")
    topology = system.topology
    if topology is None:
        raise ConfigurationError(f"constraints={kind!r} needs a System with a topology (elements and bonds)")
    lengths, angles = _forcefield_geometry(forcefield)
    positions = system.positions.detach().to(torch.float64)
    parts = []
    in_water = set()
    if "water" in kind:
        waters = _waters(topology, system.masses)
        if waters:
            parts.append(_settle_waters(waters, lengths, angles, positions))
            in_water = {index for water in waters for index in water}
    if "hbonds" in kind:
        pairs = _hydrogen_bonds(topology, in_water)
        if pairs:
            distances = [lengths.get((min(i, j), max(i, j)), _distance(positions, i, j)) for i, j in pairs]
            parts.append(Rattle(pairs, distances, tolerance=tolerance))
    return Constraints(parts)


def _waters(topology, masses):
    """``(oxygen, hydrogen, hydrogen)`` of every residue whose massive atoms are one O and two H."""
    by_residue = {}
    for index, atom in enumerate(topology.atoms):
        if float(masses[index]) > 0:
            by_residue.setdefault(atom.residue_index, []).append(index)
    waters = []
    for members in by_residue.values():
        elements = sorted(topology.atoms[index].element for index in members)
        if len(members) == 3 and elements == ["H", "H", "O"]:
            oxygen = next(index for index in members if topology.atoms[index].element == "O")
            hydrogens = [index for index in members if index != oxygen]
            waters.append((oxygen, *hydrogens))
    return waters


def _water_geometry(water, lengths, angles, positions):
    """O-H and H-H distances (nm) of one water: the force field's lengths, or its O-H length and
    H-O-H angle, else the current geometry."""
    oxygen, h1, h2 = water
    d_oh = lengths.get((min(oxygen, h1), max(oxygen, h1)))
    d_hh = lengths.get((min(h1, h2), max(h1, h2)))
    angle = angles.get((min(h1, h2), oxygen, max(h1, h2)))
    if d_oh is not None and d_hh is not None:
        return d_oh, d_hh
    if d_oh is not None and angle is not None:
        return d_oh, 2 * d_oh * math.sin(angle / 2)
    d_oh = 0.5 * (_distance(positions, oxygen, h1) + _distance(positions, oxygen, h2))
    return d_oh, _distance(positions, h1, h2)


def _settle_waters(waters, lengths, angles, positions):
    """:class:`Settle` of the waters at the distances of :func:`_water_geometry`."""
    oh, hh = zip(*(_water_geometry(water, lengths, angles, positions) for water in waters), strict=True)
    atoms = torch.tensor(waters, dtype=torch.long)
    arms = (torch.tensor(oh, dtype=torch.float64), torch.tensor(hh, dtype=torch.float64))
    return Settle(atoms[:, 0], atoms[:, 1], atoms[:, 2], *arms)


def _hydrogen_bonds(topology, in_water):
    """Bonds ``(i, j)`` with a hydrogen, except those of atoms in ``in_water``, in topology order."""
    return [
        (i, j)
        for i, j in topology.bonds
        if i not in in_water and j not in in_water
        and "H" in (topology.atoms[i].element, topology.atoms[j].element)
    ]


def from_pairs(pairs, distances, masses, tolerance=1e-5):
    """Constraints of explicit atom pairs and distances (an OpenMM System's constraints).

    Every isolated triangle of three constraints whose apex has two equal distances and whose
    other two atoms have equal masses (a rigid three-site water, as OpenMM constrains it) is
    solved analytically by :class:`Settle`; every other pair goes to :class:`Rattle`.

    Args:
        pairs: (C, 2) long tensor of atom pairs.
        distances: (C,) tensor, nm.
        masses: (N,) tensor, amu.
        tolerance: relative tolerance of RATTLE.

    Returns:
        :class:`Constraints` (empty for ``C = 0``).
    """
    pairs = torch.as_tensor(pairs, dtype=torch.long).reshape(-1, 2)
    distances = torch.as_tensor(distances, dtype=torch.float64).reshape(-1)
    partners = {}
    for index, (i, j) in enumerate(pairs.tolist()):
        partners.setdefault(i, {})[j] = index
        partners.setdefault(j, {})[i] = index
    mass = masses.detach().to(torch.float64).cpu().tolist()
    waters, settled = [], set()
    for apex, around in partners.items():
        if len(around) != 2:
            continue
        first, second = around
        if set(partners[first]) != {apex, second} or set(partners[second]) != {apex, first}:
            continue
        arm1, arm2 = distances[around[first]].item(), distances[around[second]].item()
        base = distances[partners[first][second]].item()
        if abs(arm1 - arm2) > 1e-12 * arm1 or abs(base - arm1) <= 1e-12 * arm1 or mass[first] != mass[second]:
            continue
        waters.append((apex, first, second, arm1, base))
        settled.update((around[first], around[second], partners[first][second]))
    parts = []
    if waters:
        atoms = torch.tensor([water[:3] for water in waters], dtype=torch.long)
        parts.append(
            Settle(
                atoms[:, 0],
                atoms[:, 1],
                atoms[:, 2],
                torch.tensor([water[3] for water in waters], dtype=torch.float64),
                torch.tensor([water[4] for water in waters], dtype=torch.float64),
            )
        )
    rest = torch.tensor([index for index in range(len(pairs)) if index not in settled], dtype=torch.long)
    if len(rest):
        parts.append(Rattle(pairs[rest], distances[rest], tolerance=tolerance))
    return Constraints(parts)


def check_against_system(constraints, system_constraints, topology=None, choice="the constraints"):
    """Refuse constraints that contradict the ones a force field was parameterised with.

    Args:
        constraints: :class:`Constraints` or ``None`` (no constraints).
        system_constraints: :class:`~mindsponge.forcefield.SystemConstraints` (an OpenMM
            System's), or ``None`` (nothing to check).
        topology: optional :class:`~mindsponge.system.Topology`, to name the atoms.
        choice: how the caller chose ``constraints``, for the message (e.g. ``"constraints='none'"``).

    Raises:
        common.errors.ConfigurationError: a pair both constrain is held at another distance, or a
            pair the System constrains and no energy term holds (OpenMM removed its bond term) is
            left free. The message names the atoms (index, name, residue) and the distances, and
            counts the other contradictions.
    """
    from common.errors import ConfigurationError

    if system_constraints is None or len(system_constraints) == 0:
        return
    chosen = {}
    if constraints is not None:
        pairs, distances = constraints.pairs().tolist(), constraints.distances().tolist()
        for (i, j), distance in zip(pairs, distances, strict=True):
            chosen[(min(i, j), max(i, j))] = distance

    def atom(index):
        return f"atom {index}" if topology is None else topology.describe_atom(index)

    problems = []
    for (i, j), distance, required in zip(
        system_constraints.pairs.tolist(),
        system_constraints.distances.tolist(),
        system_constraints.required.tolist(),
        strict=True,
    ):
        mine = chosen.get((min(i, j), max(i, j)))
        if mine is not None and abs(mine - distance) > 1e-6 * distance:
            problems.append(
                f"{choice} hold(s) the bond between {atom(i)} and {atom(j)} at {mine:.6f} nm, but the "
                f"OpenMM System constrains it to {distance:.6f} nm"
            )
        elif mine is None and required:
            problems.append(
                f"{choice} leave(s) the bond between {atom(i)} and {atom(j)} free, but the OpenMM System "
                f"constrains it to {distance:.6f} nm and has no energy term for it (OpenMM removed the "
                "term because the bond is constrained), so nothing would hold it"
            )
    if problems:
        more = f" ({len(problems) - 1} more such bonds)" if len(problems) > 1 else ""
        raise ConfigurationError(
            f"{problems[0]}{more}. Leave constraints unset (constraints=None) to use the System's own "
            "constraints, or rebuild the System with the constraints you want"
        )
