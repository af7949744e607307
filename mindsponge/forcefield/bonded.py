"""Bonded energy terms: bonds, angles, Urey-Bradley, periodic and improper torsions.

Every term is vectorised over all its interactions: it holds an integer index tensor of
the atoms involved (``(M, 2)`` for bonds, ``(M, 3)`` angles, ``(M, 4)`` torsions) and one
value per interaction for each parameter. The energy expressions are those of OpenMM:

- :class:`HarmonicBond`: ``E = 1/2 k (r - r0)^2``  (``k`` in kJ/mol/nm^2, ``r0`` in nm);
- :class:`UreyBradley`: a harmonic bond between the outer atoms of an angle (CHARMM);
- :class:`HarmonicAngle`: ``E = 1/2 k (theta - theta0)^2`` (``k`` in kJ/mol/rad^2, rad);
- :class:`PeriodicTorsion`: ``E = k (1 + cos(n phi - phase))`` (kJ/mol, rad);
- :class:`HarmonicImproper`: ``E = k (phi - phi0)^2`` (CHARMM; kJ/mol/rad^2, rad), with the
  angle difference optionally taken on the circle.

Angles use ``atan2(|u x v|, u . v)`` and dihedrals ``atan2(|b2| b1 . (b2 x b3), (b1 x b2) .
(b2 x b3))`` (IUPAC sign convention, ``phi`` in ``(-pi, pi]``), which stay accurate near 0
and 180 degrees where ``acos`` loses precision.

Periodic boundaries: OpenMM applies the minimum-image convention to a bonded force only
when the force says so (``setUsesPeriodicBoundaryConditions``); ``periodic=True`` mirrors
that flag. With ``periodic=False`` (the default, and OpenMM's) the box is ignored, so
molecules must be whole.

Parameters are buffers, or :class:`torch.nn.Parameter` objects with ``trainable=True``
(for force-field parameter fitting); given as tensors they keep their dtype, given as
Python numbers or integer tensors they are stored in float64. Energies are computed in the
dtype of the positions (call ``term.to(torch.float32)`` to store float32 parameters too).
Forces come from autograd.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mindsponge.forcefield.base import EnergyTerm

__all__ = ["HarmonicBond", "UreyBradley", "HarmonicAngle", "PeriodicTorsion", "HarmonicImproper"]


class _BondedTerm(EnergyTerm):
    """Shared machinery: atom indices, per-interaction parameters, periodic displacements."""

    atoms_per_term: int = 2

    def __init__(
        self, atoms, parameters: dict[str, object], periodic: bool, trainable: bool, name: str | None
    ):
        super().__init__(name)
        atoms = torch.as_tensor(atoms)
        if atoms.ndim == 1 and atoms.numel() == 0:
            atoms = atoms.reshape(0, self.atoms_per_term)
        if atoms.dtype.is_floating_point or atoms.dtype == torch.bool or atoms.dtype.is_complex:
            raise TypeError(f"{type(self).__name__}: atoms must be an integer tensor, got {atoms.dtype}")
        if atoms.ndim != 2 or atoms.shape[1] != self.atoms_per_term:
            raise ValueError(
                f"{type(self).__name__}: atoms must have shape (M, {self.atoms_per_term}), "
                f"got {tuple(atoms.shape)}"
            )
        if atoms.numel() and int(atoms.min()) < 0:
            raise ValueError(f"{type(self).__name__}: atom indices must be >= 0, got {int(atoms.min())}")
        self.register_buffer("atoms", atoms.long())
        count = atoms.shape[0]
        for key, value in parameters.items():
            value = (
                torch.as_tensor(value)
                if isinstance(value, Tensor)
                else torch.as_tensor(value, dtype=torch.float64)
            )
            if not value.dtype.is_floating_point:
                value = value.to(torch.float64)
            if value.ndim == 0:
                value = value.expand(count).clone()
            if tuple(value.shape) != (count,):
                raise ValueError(
                    f"{type(self).__name__}: parameter {key!r} must have one value per interaction "
                    f"({count}), got shape {tuple(value.shape)}"
                )
            if trainable:
                setattr(self, key, nn.Parameter(value))
            else:
                self.register_buffer(key, value)
        self.periodic = bool(periodic)

    def __len__(self) -> int:
        return self.atoms.shape[0]

    def extra_repr(self) -> str:
        return f"name={self.name!r}, count={len(self)}, periodic={self.periodic}"

    def _displacement(self, positions: Tensor, box: Tensor | None, start: int, end: int) -> Tensor:
        """``positions[atoms[:, end]] - positions[atoms[:, start]]``, minimum image if periodic, (M, 3)."""
        vectors = positions[self.atoms[:, end]] - positions[self.atoms[:, start]]
        if self.periodic:
            if box is None:
                raise ValueError(
                    f"{type(self).__name__} {self.name!r} uses periodic boundary conditions but box is None"
                )
            from mindsponge.space import minimum_image

            vectors = minimum_image(vectors, box.to(vectors))
        return vectors

    def _check_atoms(self, positions: Tensor) -> None:
        if self.atoms.numel() and int(self.atoms.max()) >= positions.shape[0]:
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: atom index {int(self.atoms.max())} out of range "
                f"for {positions.shape[0]} positions"
            )

    def _parameter(self, key: str, positions: Tensor) -> Tensor:
        return getattr(self, key).to(positions.dtype)


def _norm(vectors: Tensor) -> Tensor:
    """Euclidean norm over the last axis with a finite gradient at zero."""
    return torch.sqrt((vectors * vectors).sum(-1) + torch.finfo(vectors.dtype).tiny)


class HarmonicBond(_BondedTerm):
    """Harmonic bonds ``E = sum 1/2 k (r - r0)^2`` (OpenMM ``HarmonicBondForce``).

    Args:
        atoms: ``(M, 2)`` integer tensor of bonded atom indices.
        length: ``(M,)`` equilibrium lengths ``r0``, nm.
        k: ``(M,)`` force constants, kJ/mol/nm^2.
        periodic: apply the minimum image to the bond vectors (needs a box).
        trainable: make ``length`` and ``k`` :class:`torch.nn.Parameter` objects.
        name: term name (default ``"HarmonicBond"``).
    """

    atoms_per_term = 2

    def __init__(
        self, atoms, length, k, periodic: bool = False, trainable: bool = False, name: str | None = None
    ):
        super().__init__(atoms, {"length": length, "k": k}, periodic, trainable, name)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        self._check_atoms(positions)
        distance = _norm(self._displacement(positions, box, 0, 1))
        stretch = distance - self._parameter("length", positions)
        return 0.5 * (self._parameter("k", positions) * stretch * stretch).sum()


class UreyBradley(HarmonicBond):
    """Urey-Bradley 1-3 terms of CHARMM: harmonic bonds between the outer atoms of angles.

    Same arguments as :class:`HarmonicBond` (``atoms`` are the two outer atoms); the default
    name is ``"UreyBradley"``.
    """


class HarmonicAngle(_BondedTerm):
    """Harmonic angles ``E = sum 1/2 k (theta - theta0)^2`` (OpenMM ``HarmonicAngleForce``).

    Args:
        atoms: ``(M, 3)`` integer tensor; the angle is at the middle atom.
        angle: ``(M,)`` equilibrium angles ``theta0``, rad.
        k: ``(M,)`` force constants, kJ/mol/rad^2.
        periodic: apply the minimum image to the bond vectors (needs a box).
        trainable: make ``angle`` and ``k`` :class:`torch.nn.Parameter` objects.
        name: term name (default ``"HarmonicAngle"``).
    """

    atoms_per_term = 3

    def __init__(
        self, atoms, angle, k, periodic: bool = False, trainable: bool = False, name: str | None = None
    ):
        super().__init__(atoms, {"angle": angle, "k": k}, periodic, trainable, name)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        self._check_atoms(positions)
        first = self._displacement(positions, box, 1, 0)
        second = self._displacement(positions, box, 1, 2)
        theta = torch.atan2(_norm(torch.cross(first, second, dim=-1)), (first * second).sum(-1))
        deviation = theta - self._parameter("angle", positions)
        return 0.5 * (self._parameter("k", positions) * deviation * deviation).sum()


def _dihedral(b1: Tensor, b2: Tensor, b3: Tensor) -> Tensor:
    """Dihedral angles (rad, ``(-pi, pi]``, IUPAC sign) from the three bond vectors, each ``(M, 3)``."""
    normal1 = torch.cross(b1, b2, dim=-1)
    normal2 = torch.cross(b2, b3, dim=-1)
    y = _norm(b2) * (b1 * normal2).sum(-1)
    x = (normal1 * normal2).sum(-1)
    return torch.atan2(y, x)


class _TorsionTerm(_BondedTerm):
    atoms_per_term = 4

    def _dihedrals(self, positions: Tensor, box: Tensor | None) -> Tensor:
        self._check_atoms(positions)
        return _dihedral(*(self._displacement(positions, box, start, start + 1) for start in range(3)))


class PeriodicTorsion(_TorsionTerm):
    """Periodic torsions ``E = sum k (1 + cos(n phi - phase))`` (OpenMM ``PeriodicTorsionForce``).

    Proper torsions and Amber-style impropers alike.

    Args:
        atoms: ``(M, 4)`` integer tensor.
        periodicity: ``(M,)`` multiplicities ``n`` (integers, stored as floats).
        phase: ``(M,)`` phases, rad.
        k: ``(M,)`` barrier heights, kJ/mol.
        periodic: apply the minimum image to the bond vectors (needs a box).
        trainable: make ``phase`` and ``k`` :class:`torch.nn.Parameter` objects.
        name: term name (default ``"PeriodicTorsion"``).
    """

    def __init__(
        self,
        atoms,
        periodicity,
        phase,
        k,
        periodic: bool = False,
        trainable: bool = False,
        name: str | None = None,
    ):
        super().__init__(atoms, {"phase": phase, "k": k}, periodic, trainable, name)
        periodicity = torch.as_tensor(periodicity)
        if periodicity.ndim == 0:
            periodicity = periodicity.expand(len(self)).clone()
        if tuple(periodicity.shape) != (len(self),):
            raise ValueError(
                f"PeriodicTorsion: periodicity must have one value per torsion ({len(self)}), "
                f"got shape {tuple(periodicity.shape)}"
            )
        self.register_buffer("periodicity", periodicity.to(self.phase.dtype))

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        phi = self._dihedrals(positions, box)
        argument = self._parameter("periodicity", positions) * phi - self._parameter("phase", positions)
        return (self._parameter("k", positions) * (1.0 + torch.cos(argument))).sum()


class HarmonicImproper(_TorsionTerm):
    """Harmonic improper torsions ``E = sum k (phi - phi0)^2`` (CHARMM; no factor 1/2).

    Args:
        atoms: ``(M, 4)`` integer tensor.
        angle: ``(M,)`` equilibrium dihedrals ``phi0``, rad.
        k: ``(M,)`` force constants, kJ/mol/rad^2.
        period: when given (normally ``2 pi``), the deviation is taken on the circle,
            ``min(|phi - phi0|, period - |phi - phi0|)``, as in the expressions of OpenMM's
            ``CharmmPsfFile`` and Amber prmtop readers (which define ``pi`` to 6 decimals; pass
            their value to match them exactly). Without it the plain difference of angles in
            ``(-pi, pi]`` is used, as in OpenMM's ``charmm36.xml`` expression ``k*(theta-theta0)^2``.
        periodic: apply the minimum image to the bond vectors (needs a box).
        trainable: make ``angle`` and ``k`` :class:`torch.nn.Parameter` objects.
        name: term name (default ``"HarmonicImproper"``).
    """

    def __init__(
        self,
        atoms,
        angle,
        k,
        period: float | None = None,
        periodic: bool = False,
        trainable: bool = False,
        name: str | None = None,
    ):
        super().__init__(atoms, {"angle": angle, "k": k}, periodic, trainable, name)
        self.period = None if period is None else float(period)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        deviation = self._dihedrals(positions, box) - self._parameter("angle", positions)
        if self.period is not None:
            deviation = deviation.abs()
            deviation = torch.minimum(deviation, self.period - deviation)
        return (self._parameter("k", positions) * deviation * deviation).sum()
