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

On CPU without autograd both use compiled kernels (:func:`mindsponge._kernels.constraints`) that
repeat the torch code's operations (same results to round-off); ``compiled=False`` always uses the
torch code, which also serves CUDA and differentiable updates.

:mod:`mindsponge.constraint_sets` builds them for a system (its topology, or an OpenMM System's
own constraints) and checks them against the System's. Both classes share one interface:
``positions(reference, positions, masses)`` and ``velocities(positions, velocities, masses)``
return constrained copies, and ``n_constraints`` enters the degree-of-freedom count.

Units: nm, nm/ps, amu.
"""


import torch

from common.deprecation import moved_attributes
from common.errors import ConfigurationError, SimulationError
from mindsponge import _kernels

__all__ = ["Constraints", "ConstraintError", "Rattle", "Settle"]

# the builders moved to mindsponge.constraint_sets; the old names warn for one release
__getattr__ = moved_attributes(__name__, {
    name: f"mindsponge.constraint_sets:{name}"
    for name in ("from_system", "from_pairs", "check_against_system", "KINDS")
})



class ConstraintError(SimulationError):
    """Constraints could not be satisfied (SHAKE did not converge or SETTLE met an impossible geometry)."""


def _single(distance):
    """A float64 tensor of ``distance`` rounded to float32."""
    return torch.as_tensor(distance, dtype=torch.float64).to(torch.float32).to(torch.float64)


class _CompiledKernels:
    """Finds the compiled constraint kernels once (looking them up costs more than a small call)."""

    compiled = True
    _kernels = None

    def _compiled_kernels(self, *tensors):
        """The compiled constraint kernels for these tensors (:func:`mindsponge._kernels.constraints`) or
        ``None`` (``compiled=False``, CUDA, other dtypes, tensors that require grad)."""
        if not self.compiled:
            return None
        plain = all(
            t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) and not t.requires_grad
            for t in tensors
        )
        if not plain:
            return None
        if self._kernels is None:
            self._kernels = _kernels.constraints(*tensors)
        return self._kernels


class Settle(_CompiledKernels):
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
            raise ConfigurationError("Settle: need 0 < hh_distance < 2 * oh_distance for every water")
        self.compiled = bool(compiled)

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


class Rattle(_CompiledKernels):
    """Distance constraints by SHAKE (positions) and RATTLE (velocities), all updated at once.

    Args:
        pairs: (C, 2) long tensor of constrained atom pairs.
        distances: (C,) tensor of constrained distances, nm.
        tolerance: relative tolerance on each distance (OpenMM's default 1e-5); velocities are
            converged until ``|r . v_rel| / d^2 < tolerance`` (1/ps).
        max_iterations: iterations before :class:`ConstraintError`.
        compiled: on CPU without autograd, use the compiled kernels (the same iterations) when
            available; ``False`` always uses the torch code.
    """

    def __init__(self, pairs, distances, tolerance=1e-5, max_iterations=1000, compiled=True):
        self.pairs = torch.as_tensor(pairs, dtype=torch.long).reshape(-1, 2)
        self.distances = torch.as_tensor(distances, dtype=torch.float64).reshape(-1)
        if len(self.distances) != len(self.pairs):
            raise ConfigurationError(f"Rattle: {len(self.pairs)} pairs but {len(self.distances)} distances")
        if not tolerance > 0:
            raise ConfigurationError(f"Rattle: tolerance must be positive, got {tolerance!r}")
        self.tolerance = float(tolerance)
        self.max_iterations = int(max_iterations)
        self.compiled = bool(compiled)
        self._local = None  # see _constrained_atoms

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

    def _constrained_atoms(self, device):
        """``(atoms, local)``: the constrained atoms (sorted, each once) and the pairs as indices into them.

        The iterations update only these atoms (a few per cent of a solvated protein), then write them back.
        """
        cached = self._local
        if cached is None or cached[0] is not self.pairs or cached[1].device != device:
            atoms, local = torch.unique(self.pairs, return_inverse=True)
            cached = self._local = (self.pairs, atoms.to(device), local.reshape(-1, 2).to(device))
        return cached[1], cached[2]

    def positions(self, reference, positions, masses):
        """Constrained positions by SHAKE along the reference bond directions (see :class:`Settle`)."""
        if len(self.pairs) == 0:
            return positions
        kernels = self._compiled_kernels(reference, positions, masses)
        if kernels is not None:
            constrained, used = kernels.shake_positions(
                reference, positions, self.pairs, self.distances, 1.0 / masses.to(positions.dtype),
                self.tolerance, self.max_iterations,
            )
            if used < 0:
                raise ConstraintError(self._failure("SHAKE", constrained))
            return positions if used == 0 else constrained
        atoms, local = self._constrained_atoms(positions.device)
        first, second = local[:, 0], local[:, 1]
        inverse = (1.0 / masses.to(positions.dtype))[atoms]
        inverse_first, inverse_second = inverse[first], inverse[second]
        squared = self.distances.to(positions) ** 2
        moved = positions[atoms]
        old = reference[atoms[second]] - reference[atoms[first]]
        for iteration in range(self.max_iterations):
            bond = moved[second] - moved[first]
            deficit = squared - (bond * bond).sum(-1)
            if float((deficit.abs() / squared).max()) < 2 * self.tolerance:
                return positions if iteration == 0 else positions.index_copy(0, atoms, moved)
            multipliers = deficit / (2 * (old * bond).sum(-1) * (inverse_first + inverse_second))
            moved = self._scatter(moved, first, second, inverse_first, inverse_second, old, multipliers)
        raise ConstraintError(self._failure("SHAKE", positions.index_copy(0, atoms, moved)))

    def velocities(self, positions, velocities, masses):
        """Velocities with no relative component along any constrained pair (RATTLE)."""
        if len(self.pairs) == 0:
            return velocities
        kernels = self._compiled_kernels(positions, velocities, masses)
        if kernels is not None:
            constrained, used = kernels.rattle_velocities(
                positions, velocities, self.pairs, 1.0 / masses.to(velocities.dtype),
                self.tolerance, self.max_iterations,
            )
            if used < 0:
                raise ConstraintError(self._failure("RATTLE", positions))
            return velocities if used == 0 else constrained
        atoms, local = self._constrained_atoms(velocities.device)
        first, second = local[:, 0], local[:, 1]
        inverse = (1.0 / masses.to(velocities.dtype))[atoms]
        inverse_first, inverse_second = inverse[first], inverse[second]
        bond = positions[atoms[second]] - positions[atoms[first]]
        squared = (bond * bond).sum(-1)
        moved = velocities[atoms]
        for iteration in range(self.max_iterations):
            along = (bond * (moved[second] - moved[first])).sum(-1)
            if float((along.abs() / squared).max()) < self.tolerance:
                return velocities if iteration == 0 else velocities.index_copy(0, atoms, moved)
            multipliers = -along / (squared * (inverse_first + inverse_second))
            moved = self._scatter(moved, first, second, inverse_first, inverse_second, bond, multipliers)
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
