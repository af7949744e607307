"""Collective variables: differentiable functions of the atomic positions.

A collective variable (CV) is a :class:`Colvar`, a :class:`torch.nn.Module` called as
``colvar(positions, box)`` with positions ``(..., N, 3)`` in nm (any leading batch
dimensions, e.g. the frames of a trajectory) and a box ``(3, 3)`` in nm or ``None``; it
returns a tensor of shape ``(...)`` (one value per configuration). Distances use the
minimum image when a box is given. Gradients come from autograd, so biases built on CVs
(:mod:`mindsponge.bias`) give forces without further work.

A CV with a periodic range (torsions) sets ``period = (low, high)``; biases then measure
differences with :meth:`Colvar.difference`, the shortest signed difference modulo the
period, so a bias is continuous across the branch cut at ``+-pi``.

Example::

    import mindsponge as ms
    phi = ms.colvar.Torsion([4, 6, 8, 14])                  # radians in (-pi, pi]
    psi = ms.colvar.Torsion([6, 8, 14, 16])
    end_to_end = ms.colvar.Distance([1, 18])               # nm
    rmsd = ms.colvar.RMSD(reference_positions, atoms=heavy_atoms)
    phi(positions)                                          # () tensor
    phi(trajectory_positions)                               # (T,) tensor for (T, N, 3)
"""

import math

import torch
from torch import nn

from common.errors import ArgumentTypeError, ConfigurationError, OutOfRangeError
from mindsponge.space import minimum_image

__all__ = [
    "Angle",
    "CenterOfMassDistance",
    "Colvar",
    "CoordinationNumber",
    "Distance",
    "FunctionColvar",
    "LinearCombination",
    "RMSD",
    "Torsion",
]


def _atom_indices(atoms, name, owner, shape=None):
    """Atom indices as a long tensor, checked to be non-negative integers (and of a given shape)."""
    tensor = torch.as_tensor(atoms)
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        raise ArgumentTypeError(f"{owner}: {name} must be integer atom indices, got {tensor.dtype}")
    tensor = tensor.to(torch.long)
    if shape is not None and tuple(tensor.shape) != shape:
        raise ConfigurationError(
            f"{owner}: {name} must hold {shape} atom indices, got shape {tuple(tensor.shape)}")
    if tensor.numel() == 0:
        raise ConfigurationError(f"{owner}: {name} is empty")
    if bool((tensor < 0).any()):
        raise OutOfRangeError(f"{owner}: {name} contains the negative atom index {int(tensor.min())}")
    return tensor


class Colvar(nn.Module):
    """Base class of collective variables.

    Subclasses implement :meth:`compute`; calling the module checks the input shape and the
    atom indices (an index beyond the number of atoms raises :class:`IndexError` naming it).

    Attributes:
        period: ``None`` for a non-periodic CV, or ``(low, high)`` (the CV's units) for one
            whose values wrap around (torsions: ``(-pi, pi)``).
        units: a string naming the CV's unit (``"nm"``, ``"rad"``, ``""``), for plots.
    """

    period = None
    units = ""

    def __init__(self):
        super().__init__()
        self._index_buffers = []

    def _register_atoms(self, name, atoms):
        """Register an index tensor as a buffer that :meth:`forward` checks against N."""
        self.register_buffer(name, atoms)
        self._index_buffers.append(name)

    def forward(self, positions, box=None):
        """Value of the CV.

        Args:
            positions: ``(..., N, 3)`` tensor, nm.
            box: ``(3, 3)`` tensor, nm, or ``None`` without periodic boundaries.

        Returns:
            ``(...)`` tensor, in :attr:`units`.

        Raises:
            ValueError: positions are not ``(..., N, 3)``.
            IndexError: an atom index of the CV is not below N (the message names it).
        """
        if not isinstance(positions, torch.Tensor) or positions.dim() < 2 or positions.shape[-1] != 3:
            shape = tuple(positions.shape) if isinstance(positions, torch.Tensor) else type(positions)
            raise ConfigurationError(
                f"{type(self).__name__}: positions must be an (..., N, 3) tensor in nm, got {shape}"
            )
        n_atoms = positions.shape[-2]
        for name in self._index_buffers:
            indices = getattr(self, name)
            largest = int(indices.max())
            if largest >= n_atoms:
                raise OutOfRangeError(
                    f"{type(self).__name__}: atom index {largest} in {name} is out of range for "
                    f"{n_atoms} atoms (valid indices are 0..{n_atoms - 1})"
                )
        return self.compute(positions, box)

    def compute(self, positions, box):
        """The CV of ``positions`` ``(..., N, 3)`` (nm) without the checks of :meth:`forward`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement compute")

    def difference(self, values, reference):
        """``values - reference`` (broadcast), wrapped into ``[-period/2, period/2)`` if periodic."""
        difference = values - reference
        if self.period is None:
            return difference
        length = self.period[1] - self.period[0]
        return difference - length * torch.floor(difference / length + 0.5)

    def wrap(self, values):
        """Values mapped into ``[low, high)`` of the period (unchanged if not periodic)."""
        if self.period is None:
            return values
        low, high = self.period
        return low + torch.remainder(values - low, high - low)


def _vector(positions, first, second, box):
    """Minimum-image vectors ``positions[..., second] - positions[..., first]``, nm."""
    return minimum_image(positions[..., second, :] - positions[..., first, :], box)


class Distance(Colvar):
    """Distance between two atoms (minimum image in a periodic box), nm.

    Args:
        atoms: two atom indices ``(i, j)``.
    """

    units = "nm"

    def __init__(self, atoms):
        super().__init__()
        self._register_atoms("atoms", _atom_indices(atoms, "atoms", "Distance", (2,)))

    def compute(self, positions, box):
        return torch.linalg.vector_norm(_vector(positions, self.atoms[0], self.atoms[1], box), dim=-1)


class Angle(Colvar):
    """Angle ``i-j-k`` at atom ``j``, radians in ``[0, pi]``.

    Computed as ``atan2(|u x v|, u . v)``, whose gradient is finite and accurate also near
    0 and pi (unlike ``acos``).

    Args:
        atoms: three atom indices ``(i, j, k)``.
    """

    units = "rad"

    def __init__(self, atoms):
        super().__init__()
        self._register_atoms("atoms", _atom_indices(atoms, "atoms", "Angle", (3,)))

    def compute(self, positions, box):
        first = _vector(positions, self.atoms[1], self.atoms[0], box)
        second = _vector(positions, self.atoms[1], self.atoms[2], box)
        sine = torch.linalg.vector_norm(torch.cross(first, second, dim=-1), dim=-1)
        return torch.atan2(sine, (first * second).sum(-1))


class Torsion(Colvar):
    """Dihedral angle ``i-j-k-l``, radians in ``(-pi, pi]`` (IUPAC sign convention, as OpenMM).

    Periodic with ``period = (-pi, pi)``: the value jumps by ``2 pi`` at the branch cut but
    its gradient is continuous, and biases use :meth:`Colvar.difference`.

    Args:
        atoms: four atom indices ``(i, j, k, l)``; the torsion is about the ``j-k`` bond.
    """

    period = (-math.pi, math.pi)
    units = "rad"

    def __init__(self, atoms):
        super().__init__()
        self._register_atoms("atoms", _atom_indices(atoms, "atoms", "Torsion", (4,)))

    def compute(self, positions, box):
        i, j, k, l = self.atoms  # noqa: E741 (the usual names of the four atoms)
        b1 = _vector(positions, i, j, box)
        b2 = _vector(positions, j, k, box)
        b3 = _vector(positions, k, l, box)
        n1 = torch.cross(b1, b2, dim=-1)
        n2 = torch.cross(b2, b3, dim=-1)
        b2_length = torch.linalg.vector_norm(b2, dim=-1, keepdim=True)
        sine = (torch.cross(n1, n2, dim=-1) * b2 / b2_length).sum(-1)
        cosine = (n1 * n2).sum(-1)
        return torch.atan2(sine, cosine)


def _group_center(positions, group, weights, box):
    """Weighted centre of a group, made whole across the periodic boundary from its first atom."""
    anchor = positions[..., group[:1], :]
    relative = minimum_image(positions[..., group, :] - anchor, box)
    return anchor[..., 0, :] + (weights[:, None] * relative).sum(-2)


class CenterOfMassDistance(Colvar):
    """Distance between the centres of mass of two groups of atoms (minimum image), nm.

    Each group is made whole across the periodic boundary relative to its first atom, so a
    group must be smaller than half the box.

    Args:
        group_a, group_b: atom indices of the two groups.
        masses: ``(N,)`` masses of all atoms (amu), or ``None`` for geometric centres.
    """

    units = "nm"

    def __init__(self, group_a, group_b, masses=None):
        super().__init__()
        for name, group in (("group_a", group_a), ("group_b", group_b)):
            indices = _atom_indices(group, name, "CenterOfMassDistance").reshape(-1)
            self._register_atoms(name, indices)
            if masses is None:
                weights = torch.full((len(indices),), 1.0 / len(indices), dtype=torch.float64)
            else:
                masses = torch.as_tensor(masses, dtype=torch.float64)
                if int(indices.max()) >= len(masses):
                    raise OutOfRangeError(
                        f"CenterOfMassDistance: atom index {int(indices.max())} in {name} is out of range "
                        f"for {len(masses)} masses"
                    )
                weights = masses[indices] / masses[indices].sum()
            self.register_buffer(f"{name}_weights", weights)

    def compute(self, positions, box):
        center_a = _group_center(positions, self.group_a, self.group_a_weights.to(positions.dtype), box)
        center_b = _group_center(positions, self.group_b, self.group_b_weights.to(positions.dtype), box)
        return torch.linalg.vector_norm(minimum_image(center_b - center_a, box), dim=-1)


class CoordinationNumber(Colvar):
    """Coordination number of group A by group B with a rational switching function.

    ``CN = sum_{a in A, b in B, a != b} s(r_ab)`` with
    ``s(r) = (1 - x^n) / (1 - x^m)``, ``x = (r - d0) / r0`` (PLUMED's RATIONAL switch;
    ``s = 1`` for ``r < d0``). Pairs of an atom with itself are skipped; a pair that is in
    both groups in both orders counts twice.

    Args:
        group_a, group_b: atom indices.
        r0: switching length, nm.
        n, m: exponents (``m > n``; PLUMED's defaults 6 and 12).
        d0: offset, nm.
    """

    def __init__(self, group_a, group_b, r0, n=6, m=12, d0=0.0):
        super().__init__()
        if not r0 > 0:
            raise ConfigurationError(f"CoordinationNumber: r0 must be a positive length in nm, got {r0!r}")
        if not (isinstance(n, int) and isinstance(m, int) and 0 < n < m):
            raise ConfigurationError(
                f"CoordinationNumber: exponents must be integers, 0 < n < m, got n={n}, m={m}")
        group_a = _atom_indices(group_a, "group_a", "CoordinationNumber").reshape(-1)
        group_b = _atom_indices(group_b, "group_b", "CoordinationNumber").reshape(-1)
        first, second = torch.meshgrid(group_a, group_b, indexing="ij")
        distinct = first != second
        self._register_atoms("group_a", group_a)
        self._register_atoms("group_b", group_b)
        self.register_buffer("first", first[distinct])
        self.register_buffer("second", second[distinct])
        self.r0, self.n, self.m, self.d0 = float(r0), n, m, float(d0)

    def compute(self, positions, box):
        distance = torch.linalg.vector_norm(_vector(positions, self.first, self.second, box), dim=-1)
        x = ((distance - self.d0) / self.r0).clamp(min=0.0)
        # (1 - x^n) / (1 - x^m) has a removable singularity at x = 1 (value n/m); near it use
        # its Taylor expansion to second order in (x - 1)
        near = (x - 1.0).abs() < 1e-4
        x_safe = torch.where(near, torch.zeros_like(x), x)
        rational = (1.0 - x_safe**self.n) / (1.0 - x_safe**self.m)
        n, m, delta = self.n, self.m, x - 1.0
        taylor = n / m + delta * n * (n - m) / (2 * m) + delta**2 * n * (n - m) * (2 * n - m - 3) / (12 * m)
        return torch.where(near, taylor, rational).sum(-1)


class RMSD(Colvar):
    """Root-mean-square deviation from a reference structure after optimal superposition, nm.

    Both structures are centred (mass-weighted if ``masses`` are given) and the reference is
    rotated onto the positions by the Kabsch algorithm (SVD of the covariance, with the sign
    correction that excludes reflections). The rotation is optimal, so the derivative of the
    RMSD with respect to it vanishes; the gradient therefore treats the rotation as a constant
    (exact first derivatives, no SVD back-propagation, which is unstable for symmetric
    structures). The periodic box is ignored: keep the selected atoms whole.

    Args:
        reference: ``(N_ref, 3)`` reference positions, nm (all atoms or only the selection).
        atoms: indices of the atoms compared, or ``None`` for all; ``reference`` either has one
            row per selected atom or one per atom of the system.
        masses: optional ``(N,)`` or per-selected-atom masses (amu) for mass weighting.
        align: centre and superpose before measuring; ``False`` gives the raw coordinate
            deviation (neither centred nor rotated).
    """

    units = "nm"

    def __init__(self, reference, atoms=None, masses=None, align=True):
        super().__init__()
        reference = torch.as_tensor(reference, dtype=torch.float64)
        if reference.dim() != 2 or reference.shape[1] != 3:
            raise ConfigurationError(
                f"RMSD: reference must be an (N, 3) tensor in nm, got {tuple(reference.shape)}")
        if atoms is None:
            atoms = torch.arange(len(reference))
        atoms = _atom_indices(atoms, "atoms", "RMSD").reshape(-1)
        if len(reference) != len(atoms):
            if int(atoms.max()) >= len(reference):
                raise OutOfRangeError(
                    f"RMSD: atom index {int(atoms.max())} is out of range for the reference of "
                    f"{len(reference)} atoms"
                )
            reference = reference[atoms]
        if masses is None:
            weights = torch.ones(len(atoms), dtype=torch.float64)
        else:
            masses = torch.as_tensor(masses, dtype=torch.float64).reshape(-1)
            weights = masses if len(masses) == len(atoms) else masses[atoms]
        weights = weights / weights.sum()
        self._register_atoms("atoms", atoms)
        self.register_buffer("weights", weights)
        self.align = bool(align)
        center = (weights[:, None] * reference).sum(0) if self.align else torch.zeros(3, dtype=torch.float64)
        self.register_buffer("reference", reference - center)

    def rotation(self, positions):
        """Optimal rotations ``(..., 3, 3)`` taking the centred reference onto centred ``positions``.

        ``reference_centred @ R.T`` is the superposed reference. ``positions`` are the selected
        and centred atoms ``(..., n, 3)``; the result is detached from the graph.
        """
        with torch.no_grad():
            weights = self.weights.to(positions.dtype)
            covariance = (weights[:, None] * positions).transpose(-1, -2) @ self.reference.to(positions.dtype)
            left, _, right_t = torch.linalg.svd(covariance)
            sign = torch.sign(torch.linalg.det(left @ right_t))
            sign = torch.where(sign == 0, torch.ones_like(sign), sign)
            correction = torch.ones(*sign.shape, 3, dtype=positions.dtype, device=positions.device)
            correction[..., 2] = sign
            return (left * correction[..., None, :]) @ right_t

    def compute(self, positions, box):
        selected = positions[..., self.atoms, :]
        weights = self.weights.to(positions.dtype)
        reference = self.reference.to(positions.dtype)
        if self.align:
            selected = selected - (weights[:, None] * selected).sum(-2, keepdim=True)
            reference = reference @ self.rotation(selected).transpose(-1, -2)
        squared = (weights * ((selected - reference) ** 2).sum(-1)).sum(-1)
        return torch.sqrt(squared)


class LinearCombination(Colvar):
    """``sum_i c_i * cv_i + offset`` of CVs (each difference taken with its own periodicity).

    Args:
        colvars: the CVs (each returning ``(...)``).
        coefficients: one number per CV.
        offset: constant added, in the CVs' units.
    """

    def __init__(self, colvars, coefficients, offset=0.0):
        super().__init__()
        colvars = list(colvars)
        coefficients = [float(value) for value in coefficients]
        if not colvars or len(colvars) != len(coefficients):
            raise ConfigurationError(
                f"LinearCombination: need one coefficient per CV, got {len(colvars)} CVs and "
                f"{len(coefficients)} coefficients"
            )
        for colvar in colvars:
            if not isinstance(colvar, Colvar):
                raise ArgumentTypeError(f"LinearCombination: {colvar!r} is not a Colvar")
        self.colvars = nn.ModuleList(colvars)
        self.coefficients = coefficients
        self.offset = float(offset)

    def compute(self, positions, box):
        total = self.offset
        for coefficient, colvar in zip(self.coefficients, self.colvars, strict=True):
            total = total + coefficient * colvar(positions, box)
        return total


class FunctionColvar(Colvar):
    """Any user function of the positions as a CV.

    Args:
        function: callable ``(positions (..., N, 3), box) -> (...)`` tensor, differentiable
            with torch operations.
        period: ``None`` or ``(low, high)`` if the values wrap around.
        units: name of the unit, for plots.
    """

    def __init__(self, function, period=None, units=""):
        super().__init__()
        if not callable(function):
            raise ArgumentTypeError(f"FunctionColvar: function must be callable, got {function!r}")
        if period is not None:
            low, high = (float(value) for value in period)
            if not high > low:
                raise ConfigurationError(
                    f"FunctionColvar: period must be (low, high), high > low, got {period!r}")
            period = (low, high)
        self.function = function
        self.period = period
        self.units = units

    def compute(self, positions, box):
        return self.function(positions, box)
