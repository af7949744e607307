"""Holonomic distance constraints: rigid water (SETTLE) and bonds to hydrogen (SHAKE/RATTLE).

Constraining the fastest motions (O-H and C-H stretches, water bending) lets MD take 2 fs
steps. Two algorithms, both vectorised over all constraints (no Python loop over atoms):

- :class:`Settle` (Miyamoto & Kollman, J. Comput. Chem. 13, 952 (1992)): the analytic
  solution for three-site rigid water, for positions; velocities are made rigid by solving the
  3x3 linear system of each molecule exactly (the RATTLE condition, zero relative velocity
  along each of the three distances).
- :class:`Rattle`: SHAKE (iterative, all constraints updated at once) for positions and its
  velocity counterpart RATTLE, for any set of isolated or loosely coupled distances such as
  bonds to hydrogen. Converged when every distance is within ``tolerance`` relative error
  (OpenMM's definition, default 1e-5).

:func:`from_system` builds them from a :class:`~mindsponge.system.System`'s topology with
``kind="water"``, ``"hbonds"`` or ``"water+hbonds"``; :func:`from_pairs` from explicit pairs and
distances (an OpenMM System's constraints, SETTLE for its rigid waters), and
:func:`check_against_system` refuses constraints that contradict a System's. Both classes share one interface:
``positions(reference, positions, masses)`` and ``velocities(positions, velocities, masses)``
return constrained copies, and ``n_constraints`` enters the degree-of-freedom count.

Units: nm, nm/ps, amu.
"""

import math

import torch

from common.errors import SimulationError
from mindsponge import _kernels

__all__ = [
    "Constraints",
    "ConstraintError",
    "Rattle",
    "Settle",
    "check_against_system",
    "from_pairs",
    "from_system",
]

KINDS = ("water", "hbonds", "water+hbonds")
WATER_RESIDUES = ("HOH", "WAT", "SOL", "TIP3", "SPC", "T3P", "TP3")


class ConstraintError(SimulationError):
    """Constraints could not be satisfied (SHAKE did not converge or SETTLE met an impossible geometry)."""


def _single(distance):
    """A float64 tensor of ``distance`` rounded to float32."""
    return torch.as_tensor(distance, dtype=torch.float64).to(torch.float32).to(torch.float64)


class Settle:
    """Analytic constraints of three-site rigid water molecules (SETTLE).

    Args:
        oxygens, hydrogens1, hydrogens2: (W,) long tensors of atom indices.
        oh_distance: O-H distance, nm (float or (W,) tensor); rounded to float32 as OpenMM does.
        hh_distance: H-H distance, nm (float or (W,) tensor); rounded to float32 as OpenMM does.
        compiled: on CPU without autograd, use the compiled kernels (:mod:`mindsponge._kernels`,
            the same operations per water) when available; ``False`` always uses the torch code.

    Raises:
        ValueError: shapes differ or distances are not a valid triangle.
    """

    def __init__(self, oxygens, hydrogens1, hydrogens2, oh_distance, hh_distance, compiled=True):
        self.atoms = torch.stack(
            [
                torch.as_tensor(index, dtype=torch.long).reshape(-1)
                for index in (oxygens, hydrogens1, hydrogens2)
            ],
            dim=1,
        )  # (W, 3)
        n_waters = len(self.atoms)
        # rounded to float32 as OpenMM stores SETTLE's distances: its Reference platform places the
        # waters at float32(0.09572) nm (0.0957200005650520), which SETTLE here reproduces to 1e-15 nm
        self.oh_distance = _single(oh_distance).expand(n_waters).clone()
        self.hh_distance = _single(hh_distance).expand(n_waters).clone()
        if bool((self.hh_distance >= 2 * self.oh_distance).any()) or bool((self.oh_distance <= 0).any()):
            raise ValueError("Settle: need 0 < hh_distance < 2 * oh_distance for every water")
        self.compiled = bool(compiled)
        self._kernels = None  # the compiled module once found (looking it up costs more than a small call)

    def _compiled_kernels(self, *tensors):
        """The compiled SETTLE kernels for these tensors (:func:`mindsponge._kernels.settle`) or ``None``."""
        if not self.compiled:
            return None
        plain = all(
            t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) and not t.requires_grad
            for t in tensors
        )
        if not plain:
            return None
        if self._kernels is None:
            self._kernels = _kernels.settle(*tensors)
        return self._kernels

    @property
    def n_constraints(self):
        """Three distances per water."""
        return 3 * len(self.atoms)

    def _masses(self, masses, dtype):
        masses = masses.to(dtype)[self.atoms]  # (W, 3)
        return masses[:, 0], masses[:, 1]

    def positions(self, reference, positions, masses):
        """Constrained positions.

        Args:
            reference: (N, 3) tensor, nm: positions before the update (satisfying the constraints).
            positions: (N, 3) tensor, nm: updated, unconstrained positions.
            masses: (N,) tensor, amu.

        Returns:
            (N, 3) tensor: ``positions`` with every water made rigid, moved as SETTLE prescribes
            (the solution of the constraint equations along the reference directions).
        """
        if len(self.atoms) == 0:
            return positions
        kernels = self._compiled_kernels(reference, positions, masses)
        if kernels is not None:
            placed, failed = kernels.settle_positions(reference, positions, self.atoms, masses,
                                                      self.oh_distance, self.hh_distance)
            if failed >= 0:
                raise self._failure(failed)
            return placed
        dtype = positions.dtype
        mass_o, mass_h = self._masses(masses, dtype)
        d_oh, d_hh = self.oh_distance.to(positions), self.hh_distance.to(positions)
        total_mass = mass_o + 2 * mass_h
        rc = 0.5 * d_hh
        height = torch.sqrt(d_oh * d_oh - rc * rc)
        ra = 2 * mass_h * height / total_mass
        rb = height - ra
        old = reference[self.atoms]  # (W, 3, 3)
        new = positions[self.atoms]
        center = mass_o[:, None] * new[:, 0] + mass_h[:, None] * (new[:, 1] + new[:, 2])
        center = center / total_mass[:, None]
        a1, b1, c1 = new[:, 0] - center, new[:, 1] - center, new[:, 2] - center
        b0, c0 = old[:, 1] - old[:, 0], old[:, 2] - old[:, 0]
        axis_z = torch.linalg.cross(b0, c0)
        axis_x = torch.linalg.cross(a1, axis_z)
        axis_y = torch.linalg.cross(axis_z, axis_x)
        axes = torch.stack([axis_x, axis_y, axis_z], dim=1)
        axes = axes / torch.linalg.vector_norm(axes, dim=-1, keepdim=True)  # (W, 3 axes, 3)

        def project(vector):  # (W, 3) -> coordinates in the (x, y, z) frame, (W, 3)
            # elementwise products and sums, not a batched matmul: for a few thousand waters these
            # stay on one thread, while bmm's thread pool costs more than it saves (and much more
            # on a loaded machine)
            return (axes * vector[:, None, :]).sum(-1)

        xb0, yb0, _ = project(b0).unbind(-1)
        xc0, yc0, _ = project(c0).unbind(-1)
        _, _, za1 = project(a1).unbind(-1)
        xb1, yb1, zb1 = project(b1).unbind(-1)
        xc1, yc1, zc1 = project(c1).unbind(-1)
        sin_phi = za1 / ra
        cos_phi = torch.sqrt(1 - sin_phi * sin_phi)
        sin_psi = (zb1 - zc1) / (2 * rc * cos_phi)
        cos_psi = torch.sqrt(1 - sin_psi * sin_psi)
        ya2 = ra * cos_phi
        xb2 = -rc * cos_psi
        t1 = -rb * cos_phi
        t2 = rc * sin_psi * sin_phi
        yb2, yc2 = t1 - t2, t1 + t2
        alpha = xb2 * (xb0 - xc0) + yb0 * yb2 + yc0 * yc2
        beta = xb2 * (yc0 - yb0) + xb0 * yb2 + xc0 * yc2
        gamma = xb0 * yb1 - xb1 * yb0 + xc0 * yc1 - xc1 * yc0
        alpha_beta = alpha * alpha + beta * beta
        sin_theta = (alpha * gamma - beta * torch.sqrt(alpha_beta - gamma * gamma)) / alpha_beta
        cos_theta = torch.sqrt(1 - sin_theta * sin_theta)
        a3 = torch.stack([-ya2 * sin_theta, ya2 * cos_theta, za1], dim=-1)
        b3 = torch.stack(
            [xb2 * cos_theta - yb2 * sin_theta, xb2 * sin_theta + yb2 * cos_theta, zb1], dim=-1
        )
        c3 = torch.stack(
            [-xb2 * cos_theta - yc2 * sin_theta, -xb2 * sin_theta + yc2 * cos_theta, zc1], dim=-1
        )
        local = torch.stack([a3, b3, c3], dim=1)  # (W, 3 atoms, 3 frame coordinates)
        placed = center[:, None, :] + (local[..., None] * axes[:, None, :, :]).sum(2)
        if not bool(torch.isfinite(placed).all()):
            raise self._failure(int(torch.nonzero(~torch.isfinite(placed).all(-1).all(-1))[0, 0]))
        return positions.index_put((self.atoms.reshape(-1),), placed.reshape(-1, 3))

    def _failure(self, water):
        return ConstraintError(
            f"SETTLE failed for the water with oxygen atom {int(self.atoms[water, 0])}: the molecule moved "
            "too far in one step (time step too long or forces too large)"
        )

    def velocities(self, positions, velocities, masses):
        """Velocities with no relative motion along the three distances of each water.

        Args:
            positions: (N, 3) tensor, nm, satisfying the constraints.
            velocities: (N, 3) tensor, nm/ps.
            masses: (N,) tensor, amu.

        Returns:
            (N, 3) tensor, nm/ps: the closest velocities (in the mass metric) that keep each
            water rigid; the momentum of each molecule is unchanged.
        """
        if len(self.atoms) == 0:
            return velocities
        kernels = self._compiled_kernels(positions, velocities, masses)
        if kernels is not None:
            return kernels.settle_velocities(positions, velocities, self.atoms, masses)
        dtype = velocities.dtype
        inverse_o, inverse_h = (1.0 / mass for mass in self._masses(masses, dtype))
        x, v = positions[self.atoms], velocities[self.atoms]  # (W, 3, 3)
        # constraints k: (O, H1), (O, H2), (H1, H2); r_k = x_j - x_i
        bonds = torch.stack([x[:, 1] - x[:, 0], x[:, 2] - x[:, 0], x[:, 2] - x[:, 1]], dim=1)
        relative = torch.stack([v[:, 1] - v[:, 0], v[:, 2] - v[:, 0], v[:, 2] - v[:, 1]], dim=1)
        coupling = torch.stack(
            [
                torch.stack([inverse_o + inverse_h, inverse_o, -inverse_h], -1),
                torch.stack([inverse_o, inverse_o + inverse_h, inverse_h], -1),
                torch.stack([-inverse_h, inverse_h, 2 * inverse_h], -1),
            ],
            dim=1,
        )  # (W, 3, 3)
        matrix = coupling * torch.einsum("wkd,wld->wkl", bonds, bonds)
        rhs = -(bonds * relative).sum(-1)
        multipliers = _solve3(matrix, rhs)  # (W, 3)
        impulses = multipliers[..., None] * bonds  # along r_k: -on i, +on j
        delta_o = -(impulses[:, 0] + impulses[:, 1]) * inverse_o[:, None]
        delta_h1 = (impulses[:, 0] - impulses[:, 2]) * inverse_h[:, None]
        delta_h2 = (impulses[:, 1] + impulses[:, 2]) * inverse_h[:, None]
        updated = v + torch.stack([delta_o, delta_h1, delta_h2], dim=1)
        return velocities.index_put((self.atoms.reshape(-1),), updated.reshape(-1, 3))


def _solve3(matrix, rhs):
    """Solution of the batched 3x3 systems ``matrix @ x = rhs`` ((W, 3, 3), (W, 3)) by Cramer's rule.

    Elementwise, so it stays on one thread for a few thousand systems, where the batched LU of
    ``torch.linalg.solve`` is several times slower; SETTLE's matrices are well conditioned.
    """
    first, second, third = matrix.unbind(-1)  # columns
    cofactors = torch.stack(
        [
            torch.linalg.cross(second, third),
            torch.linalg.cross(third, first),
            torch.linalg.cross(first, second),
        ],
        dim=1,
    )  # (W, 3, 3): row i is orthogonal to every column but i
    determinant = (first * cofactors[:, 0]).sum(-1, keepdim=True)
    return (cofactors * rhs[:, None, :]).sum(-1) / determinant


class Rattle:
    """Distance constraints by SHAKE (positions) and RATTLE (velocities), all updated at once.

    Args:
        pairs: (C, 2) long tensor of constrained atom pairs.
        distances: (C,) tensor of constrained distances, nm.
        tolerance: relative tolerance on each distance (OpenMM's default 1e-5); velocities are
            converged until ``|r . v_rel| / d^2 < tolerance`` (1/ps).
        max_iterations: iterations before :class:`ConstraintError`.
    """

    def __init__(self, pairs, distances, tolerance=1e-5, max_iterations=1000):
        self.pairs = torch.as_tensor(pairs, dtype=torch.long).reshape(-1, 2)
        self.distances = torch.as_tensor(distances, dtype=torch.float64).reshape(-1)
        if len(self.distances) != len(self.pairs):
            raise ValueError(f"Rattle: {len(self.pairs)} pairs but {len(self.distances)} distances")
        if not tolerance > 0:
            raise ValueError(f"Rattle: tolerance must be positive, got {tolerance!r}")
        self.tolerance = float(tolerance)
        self.max_iterations = int(max_iterations)

    @property
    def n_constraints(self):
        """One per pair."""
        return len(self.pairs)

    def _scatter(self, target, first, second, inverse_first, inverse_second, vectors, multipliers):
        step = multipliers[:, None] * vectors
        update = torch.zeros_like(target)
        update.index_add_(0, first, -step * inverse_first[:, None])
        update.index_add_(0, second, step * inverse_second[:, None])
        return target + update

    def positions(self, reference, positions, masses):
        """Constrained positions by SHAKE along the reference bond directions (see :class:`Settle`)."""
        if len(self.pairs) == 0:
            return positions
        first, second = self.pairs[:, 0], self.pairs[:, 1]
        inverse = 1.0 / masses.to(positions.dtype)
        inverse_first, inverse_second = inverse[first], inverse[second]
        squared = self.distances.to(positions) ** 2
        old = reference[second] - reference[first]
        for _ in range(self.max_iterations):
            bond = positions[second] - positions[first]
            deficit = squared - (bond * bond).sum(-1)
            if float((deficit.abs() / squared).max()) < 2 * self.tolerance:
                return positions
            multipliers = deficit / (2 * (old * bond).sum(-1) * (inverse_first + inverse_second))
            positions = self._scatter(
                positions, first, second, inverse_first, inverse_second, old, multipliers
            )
        raise ConstraintError(self._failure("SHAKE", positions))

    def velocities(self, positions, velocities, masses):
        """Velocities with no relative component along any constrained pair (RATTLE)."""
        if len(self.pairs) == 0:
            return velocities
        first, second = self.pairs[:, 0], self.pairs[:, 1]
        inverse = 1.0 / masses.to(velocities.dtype)
        inverse_first, inverse_second = inverse[first], inverse[second]
        bond = positions[second] - positions[first]
        squared = (bond * bond).sum(-1)
        for _ in range(self.max_iterations):
            along = (bond * (velocities[second] - velocities[first])).sum(-1)
            if float((along.abs() / squared).max()) < self.tolerance:
                return velocities
            multipliers = -along / (squared * (inverse_first + inverse_second))
            velocities = self._scatter(
                velocities, first, second, inverse_first, inverse_second, bond, multipliers
            )
        raise ConstraintError(self._failure("RATTLE", positions))

    def _failure(self, which, positions):
        bond = positions[self.pairs[:, 1]] - positions[self.pairs[:, 0]]
        error = (torch.linalg.vector_norm(bond, dim=-1) - self.distances.to(positions)).abs()
        worst = int(error.argmax())
        i, j = self.pairs[worst].tolist()
        return (
            f"{which} did not converge in {self.max_iterations} iterations; worst constraint is atoms "
            f"({i}, {j}), off by {float(error[worst]):.3g} nm (time step too long or forces too large)"
        )


class Constraints:
    """A set of constraint algorithms applied one after the other (they must not share atoms).

    Args:
        parts: :class:`Settle` and/or :class:`Rattle` objects.
    """

    def __init__(self, parts):
        self.parts = tuple(parts)

    @property
    def n_constraints(self):
        """Total number of distance constraints (for the degrees of freedom)."""
        return sum(part.n_constraints for part in self.parts)

    def positions(self, reference, positions, masses):
        """Constrained positions (N, 3), nm: see :meth:`Settle.positions`."""
        for part in self.parts:
            positions = part.positions(reference, positions, masses)
        return positions

    def velocities(self, positions, velocities, masses):
        """Constrained velocities (N, 3), nm/ps: see :meth:`Settle.velocities`."""
        for part in self.parts:
            velocities = part.velocities(positions, velocities, masses)
        return velocities

    def pairs(self):
        """(C, 2) long tensor of every constrained pair (water: O-H1, O-H2, H1-H2)."""
        rows = []
        for part in self.parts:
            if isinstance(part, Settle):
                rows.append(part.atoms[:, [0, 1, 0, 2, 1, 2]].reshape(-1, 2))
            else:
                rows.append(part.pairs)
        return torch.cat(rows) if rows else torch.zeros((0, 2), dtype=torch.long)

    def distances(self):
        """(C,) float64 tensor, nm: the constrained distance of every pair of :meth:`pairs`."""
        rows = []
        for part in self.parts:
            if isinstance(part, Settle):
                arms = (part.oh_distance, part.oh_distance, part.hh_distance)
                rows.append(torch.stack(arms, 1).reshape(-1))
            else:
                rows.append(part.distances)
        return torch.cat(rows) if rows else torch.zeros(0, dtype=torch.float64)


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
        raise ValueError(f"constraints must be one of {KINDS} or None, got {kind!r}")
    topology = system.topology
    if topology is None:
        raise ValueError(f"constraints={kind!r} needs a System with a topology (elements and bonds)")
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
