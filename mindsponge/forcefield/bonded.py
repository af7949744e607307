"""Bonded energy terms: bonds, angles, Urey-Bradley, periodic and improper torsions.

Every term is vectorised over all its interactions: it holds an integer index tensor of
the atoms involved (``(M, 2)`` for bonds, ``(M, 3)`` angles, ``(M, 4)`` torsions) and one
value per interaction for each parameter. The energy expressions are those of OpenMM:

- :class:`HarmonicBond`: ``E = 1/2 k (r - r0)^2``  (``k`` in kJ/mol/nm^2, ``r0`` in nm);
- :class:`UreyBradley`: a harmonic bond between the outer atoms of an angle (CHARMM);
- :class:`HarmonicAngle`: ``E = 1/2 k (theta - theta0)^2`` (``k`` in kJ/mol/rad^2, rad);
- :class:`PeriodicTorsion`: ``E = k (1 + cos(n phi - phase))`` (kJ/mol, rad);
- :class:`HarmonicImproper`: ``E = k (phi - phi0)^2`` (CHARMM; kJ/mol/rad^2, rad), with the
  angle difference optionally taken on the circle;
- :class:`CMAPTorsion`: bicubic correction maps on dihedral pairs (CHARMM, Amber ff19SB).

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

Forces: on CPU, for terms that are not periodic and whose parameters need no gradient, the
compiled kernels of :mod:`mindsponge._kernels` (``bonded.cpp``) compute the energy and the
analytic forces in one pass (parameters read in float64, energy summed in float64), and a custom
autograd Function hands those forces to :func:`~mindsponge.forcefield.energy_and_forces`; the
torch code, differentiated by autograd, is used otherwise (CUDA, ``compiled=False``, trainable
parameters, periodic terms) and whenever the gradient itself must be differentiable
(``create_graph=True``). Both give the same energies and forces to round-off. :class:`CMAPTorsion`
always uses the torch code.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from common.errors import ArgumentTypeError, ConfigurationError
from mindsponge import _kernels
from mindsponge.forcefield.base import EnergyTerm
from mindsponge.forcefield.pair_kernels import AnalyticEnergies

__all__ = [
    "HarmonicBond",
    "UreyBradley",
    "HarmonicAngle",
    "PeriodicTorsion",
    "HarmonicImproper",
    "CMAPTorsion",
]


class _BondedTerm(EnergyTerm):
    """Shared machinery: atom indices, per-interaction parameters, periodic displacements."""

    atoms_per_term: int = 2

    def __init__(
        self,
        atoms,
        parameters: dict[str, object],
        periodic: bool,
        trainable: bool,
        name: str | None,
        compiled: bool = True,
    ):
        super().__init__(name)
        self.compiled = bool(compiled)
        atoms = torch.as_tensor(atoms)
        if atoms.ndim == 1 and atoms.numel() == 0:
            atoms = atoms.reshape(0, self.atoms_per_term)
        if atoms.dtype.is_floating_point or atoms.dtype == torch.bool or atoms.dtype.is_complex:
            raise ArgumentTypeError(
                f"{type(self).__name__}: atoms must be an integer tensor, got {atoms.dtype}")
        if atoms.ndim != 2 or atoms.shape[1] != self.atoms_per_term:
            raise ConfigurationError(
                f"{type(self).__name__}: atoms must have shape (M, {self.atoms_per_term}), "
                f"got {tuple(atoms.shape)}"
            )
        if atoms.numel() and int(atoms.min()) < 0:
            raise ConfigurationError(
                f"{type(self).__name__}: atom indices must be >= 0, got {int(atoms.min())}")
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
                raise ConfigurationError(
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

    @property
    def is_empty(self) -> bool:
        """No interactions listed (e.g. the bonds and angles of rigid water)."""
        return self.atoms.shape[0] == 0

    def extra_repr(self) -> str:
        return f"name={self.name!r}, count={len(self)}, periodic={self.periodic}"

    def _displacement(self, positions: Tensor, box: Tensor | None, start: int, end: int) -> Tensor:
        """``positions[atoms[:, end]] - positions[atoms[:, start]]``, minimum image if periodic, (M, 3)."""
        vectors = positions[self.atoms[:, end]] - positions[self.atoms[:, start]]
        if self.periodic:
            if box is None:
                raise ConfigurationError(
                    f"{type(self).__name__} {self.name!r} uses periodic boundary conditions but box is None"
                )
            from mindsponge.space import minimum_image

            vectors = minimum_image(vectors, box.to(vectors))
        return vectors

    def _check_atoms(self, positions: Tensor) -> None:
        if self.atoms.numel() and int(self.atoms.max()) >= positions.shape[0]:
            raise ConfigurationError(
                f"{type(self).__name__} {self.name!r}: atom index {int(self.atoms.max())} out of range "
                f"for {positions.shape[0]} positions"
            )

    def _parameter(self, key: str, positions: Tensor) -> Tensor:
        return getattr(self, key).to(positions.dtype)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Energy of all interactions, ``()`` kJ/mol, for ``(N, 3)`` positions in nm."""
        self._check_atoms(positions)
        kernels = self._kernels(positions)
        if kernels is None:
            return self._torch_energy(positions, box)
        energy, forces = self._compiled_energy(kernels, positions.detach())
        if not (torch.is_grad_enabled() and positions.requires_grad):
            return energy
        return AnalyticEnergies.apply(
            positions, [("forces", (energy, forces))], lambda again: (self._torch_energy(again, box),)
        )[0]

    def _kernels(self, positions: Tensor):
        """The compiled kernels when they apply to this term and these positions, else ``None``."""
        if self._kernel_kind is None or not self.compiled or self.periodic:
            return None
        if any(parameter.requires_grad for parameter in self.parameters()):
            return None
        return _kernels.bonded(positions)

    # the kind of the compiled kernels' BondedTerm (0 bond, 1 angle, 2 torsion, 3 improper) and the names of
    # its parameters, set by the terms that have a kernel
    _kernel_kind: int | None = None
    _kernel_parameters: tuple[str, ...] = ()

    def _kernel_period(self) -> float:
        return 0.0

    def compiled_terms(self, kernels, box: Tensor | None = None):
        """This term as force terms of the compiled step loop (:mod:`mindsponge.step_loop`): a list of one
        ``kernels.BondedTerm`` holding its parameters, or ``None`` where the torch code must be used
        (periodic terms, trainable parameters, ``compiled=False``, no kernel for this kind of term). The box
        (nm) is not used: bonded terms without periodic images need none."""
        if self._kernel_kind is None or not self.compiled or self.periodic:
            return None
        if any(parameter.requires_grad for parameter in self.parameters()):
            return None
        parameters = [getattr(self, name).detach() for name in self._kernel_parameters]
        return [kernels.BondedTerm(self._kernel_kind, self.atoms, parameters, self._kernel_period())]

    def _compiled_energy(self, kernels, positions: Tensor) -> tuple[Tensor, Tensor]:
        """``(energy, forces)`` from the compiled kernel, in the dtype of ``positions``."""
        positions = positions.contiguous()
        forces = torch.zeros_like(positions)
        energy = self.compiled_terms(kernels)[0].add_forces(positions, None, forces)
        return positions.new_tensor(energy), forces

    def _torch_energy(self, positions: Tensor, box: Tensor | None) -> Tensor:
        raise NotImplementedError


def _norm(vectors: Tensor) -> Tensor:
    """Euclidean norm over the last axis with a finite gradient at zero."""
    return torch.sqrt((vectors * vectors).sum(-1) + torch.finfo(vectors.dtype).tiny)


def _angle(first: Tensor, second: Tensor) -> Tensor:
    """Angle (rad, ``[0, pi]``) between vectors ``(..., 3)``, as ``atan2(|u x v|, u . v)``."""
    return torch.atan2(_norm(torch.cross(first, second, dim=-1)), (first * second).sum(-1))


class HarmonicBond(_BondedTerm):
    """Harmonic bonds ``E = sum 1/2 k (r - r0)^2`` (OpenMM ``HarmonicBondForce``).

    Args:
        atoms: ``(M, 2)`` integer tensor of bonded atom indices.
        length: ``(M,)`` equilibrium lengths ``r0``, nm.
        k: ``(M,)`` force constants, kJ/mol/nm^2.
        periodic: apply the minimum image to the bond vectors (needs a box).
        trainable: make ``length`` and ``k`` :class:`torch.nn.Parameter` objects.
        name: term name (default ``"HarmonicBond"``).
        compiled: use the compiled kernel on CPU when it applies (see the module docstring).
    """

    _kernel_kind, _kernel_parameters = 0, ("length", "k")

    atoms_per_term = 2

    def __init__(
        self,
        atoms,
        length,
        k,
        periodic: bool = False,
        trainable: bool = False,
        name: str | None = None,
        compiled: bool = True,
    ):
        super().__init__(atoms, {"length": length, "k": k}, periodic, trainable, name, compiled)

    def _torch_energy(self, positions: Tensor, box: Tensor | None) -> Tensor:
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
        compiled: use the compiled kernel on CPU when it applies (see the module docstring).
    """

    _kernel_kind, _kernel_parameters = 1, ("angle", "k")

    atoms_per_term = 3

    def __init__(
        self,
        atoms,
        angle,
        k,
        periodic: bool = False,
        trainable: bool = False,
        name: str | None = None,
        compiled: bool = True,
    ):
        super().__init__(atoms, {"angle": angle, "k": k}, periodic, trainable, name, compiled)

    def _torch_energy(self, positions: Tensor, box: Tensor | None) -> Tensor:
        first = self._displacement(positions, box, 1, 0)
        second = self._displacement(positions, box, 1, 2)
        theta = _angle(first, second)
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
        compiled: use the compiled kernel on CPU when it applies (see the module docstring).
    """

    _kernel_kind, _kernel_parameters = 2, ("periodicity", "phase", "k")

    def __init__(
        self,
        atoms,
        periodicity,
        phase,
        k,
        periodic: bool = False,
        trainable: bool = False,
        name: str | None = None,
        compiled: bool = True,
    ):
        super().__init__(atoms, {"phase": phase, "k": k}, periodic, trainable, name, compiled)
        periodicity = torch.as_tensor(periodicity)
        if periodicity.ndim == 0:
            periodicity = periodicity.expand(len(self)).clone()
        if tuple(periodicity.shape) != (len(self),):
            raise ConfigurationError(
                f"PeriodicTorsion: periodicity must have one value per torsion ({len(self)}), "
                f"got shape {tuple(periodicity.shape)}"
            )
        self.register_buffer("periodicity", periodicity.to(self.phase.dtype))

    def _torch_energy(self, positions: Tensor, box: Tensor | None) -> Tensor:
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
        compiled: use the compiled kernel on CPU when it applies (see the module docstring).
    """

    _kernel_kind, _kernel_parameters = 3, ("angle", "k")

    def __init__(
        self,
        atoms,
        angle,
        k,
        period: float | None = None,
        periodic: bool = False,
        trainable: bool = False,
        name: str | None = None,
        compiled: bool = True,
    ):
        super().__init__(atoms, {"angle": angle, "k": k}, periodic, trainable, name, compiled)
        if period is not None and not float(period) > 0:
            raise ConfigurationError(
                f"HarmonicImproper: period must be positive (normally 2 pi) or None, got {period!r}"
            )
        self.period = None if period is None else float(period)

    def _kernel_period(self) -> float:
        return 0.0 if self.period is None else self.period

    def _torch_energy(self, positions: Tensor, box: Tensor | None) -> Tensor:
        deviation = self._dihedrals(positions, box) - self._parameter("angle", positions)
        if self.period is not None:
            deviation = deviation.abs()
            deviation = torch.minimum(deviation, self.period - deviation)
        return (self._parameter("k", positions) * deviation * deviation).sum()


# Bicubic patch weights of OpenMM's CMAPTorsionForceImpl: coefficients = _BICUBIC_WEIGHTS.T @ rhs,
# where rhs holds energies, delta * d/dphi, delta * d/dpsi and delta^2 * d2/dphi dpsi at the
# four patch corners (i, j), (i+1, j), (i+1, j+1), (i, j+1).
_BICUBIC_WEIGHTS = (
    (1, 0, -3, 2, 0, 0, 0, 0, -3, 0, 9, -6, 2, 0, -6, 4),
    (0, 0, 0, 0, 0, 0, 0, 0, 3, 0, -9, 6, -2, 0, 6, -4),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, -6, 0, 0, -6, 4),
    (0, 0, 3, -2, 0, 0, 0, 0, 0, 0, -9, 6, 0, 0, 6, -4),
    (0, 0, 0, 0, 1, 0, -3, 2, -2, 0, 6, -4, 1, 0, -3, 2),
    (0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 3, -2, 1, 0, -3, 2),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -3, 2, 0, 0, 3, -2),
    (0, 0, 0, 0, 0, 0, 3, -2, 0, 0, -6, 4, 0, 0, 3, -2),
    (0, 1, -2, 1, 0, 0, 0, 0, 0, -3, 6, -3, 0, 2, -4, 2),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 3, -6, 3, 0, -2, 4, -2),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -3, 3, 0, 0, 2, -2),
    (0, 0, -1, 1, 0, 0, 0, 0, 0, 0, 3, -3, 0, 0, -2, 2),
    (0, 0, 0, 0, 0, 1, -2, 1, 0, -2, 4, -2, 0, 1, -2, 1),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 2, -1, 0, 1, -2, 1),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, -1, 0, 0, -1, 1),
    (0, 0, 0, 0, 0, 0, -1, 1, 0, 0, 2, -2, 0, 0, -1, 1),
)


def _cmap_patches(energy: np.ndarray) -> np.ndarray:
    """Bicubic coefficients of every patch of a periodic map, as OpenMM computes them.

    Args:
        energy: ``(size, size)`` array, kJ/mol; ``energy[i, j]`` at ``phi = i 2pi/size``,
            ``psi = j 2pi/size``.

    Returns:
        ``(size * size, 16)`` array; row ``s + size * t`` holds the coefficients ``c[4 a + b]``
        of ``da^a db^b`` on the patch whose lower corner is ``(s, t)``.
    """
    from scipy.interpolate import CubicSpline

    size = energy.shape[0]
    delta = 2.0 * np.pi / size
    knots = np.arange(size + 1) * delta

    def derivative(values: np.ndarray, axis: int) -> np.ndarray:
        closed = np.concatenate([values, np.take(values, [0], axis=axis)], axis=axis)
        return CubicSpline(knots, closed, axis=axis, bc_type="periodic")(knots[:-1], 1)

    d_phi = derivative(energy, 0)
    d_psi = derivative(energy, 1)
    d_phi_psi = derivative(d_psi, 0)
    index = np.arange(size)
    s, t = np.meshgrid(index, index, indexing="ij")  # s: phi patch, t: psi patch
    corners = [(s, t), ((s + 1) % size, t), ((s + 1) % size, (t + 1) % size), (s, (t + 1) % size)]
    rhs = np.stack(
        [energy[c] for c in corners]
        + [delta * d_phi[c] for c in corners]
        + [delta * d_psi[c] for c in corners]
        + [delta * delta * d_phi_psi[c] for c in corners],
        axis=-1,
    )  # (size, size, 16) indexed [s, t]
    coefficients = rhs @ np.asarray(_BICUBIC_WEIGHTS, dtype=np.float64)
    return coefficients.transpose(1, 0, 2).reshape(size * size, 16)


class CMAPTorsion(_BondedTerm):
    """CMAP correction maps on pairs of dihedrals (OpenMM ``CMAPTorsionForce``; CHARMM, ff19SB).

    The energy of each torsion pair is the periodic bicubic interpolation of a tabulated map
    at the two dihedrals (each taken in ``[0, 2 pi)``), with the grid derivatives from periodic
    cubic splines, exactly as OpenMM does it.

    Args:
        atoms: ``(M, 8)`` integer tensor: the four atoms of the first dihedral (phi), then the
            four of the second (psi).
        map_index: ``(M,)`` integer tensor, which map each torsion pair uses.
        maps: sequence of ``(size, size)`` arrays (kJ/mol; sizes may differ between maps);
            ``maps[k][i, j]`` is the energy at ``phi = i 2pi/size``, ``psi = j 2pi/size``.
        periodic: apply the minimum image to the bond vectors (needs a box).
        name: term name (default ``"CMAPTorsion"``).

    The bicubic coefficients are buffers (float64 unless moved with ``.to``); they are
    derived from the maps once, so gradients with respect to the map values are not provided.
    """

    atoms_per_term = 8

    def __init__(self, atoms, map_index, maps, periodic: bool = False, name: str | None = None):
        super().__init__(atoms, {}, periodic, False, name, compiled=False)
        map_index = torch.as_tensor(map_index, dtype=torch.long).reshape(-1)
        if tuple(map_index.shape) != (len(self),):
            raise ConfigurationError(
                f"CMAPTorsion: map_index must have one entry per torsion pair ({len(self)}), "
                f"got shape {tuple(map_index.shape)}"
            )
        tables, sizes, offsets = [], [], []
        for number, energy in enumerate(maps):
            energy = np.asarray(energy, dtype=np.float64)
            if energy.ndim != 2 or energy.shape[0] != energy.shape[1] or energy.shape[0] < 2:
                raise ConfigurationError(
                    f"CMAPTorsion: map {number} must be a square (size, size) array, got {energy.shape}"
                )
            offsets.append(sum(len(table) for table in tables))
            sizes.append(energy.shape[0])
            tables.append(_cmap_patches(energy))
        if len(self) and (int(map_index.min()) < 0 or int(map_index.max()) >= len(tables)):
            raise ConfigurationError(
                f"CMAPTorsion: map_index must lie in [0, {len(tables)}), the number of maps")
        coefficients = np.concatenate(tables) if tables else np.zeros((0, 16))
        self.register_buffer("coefficients", torch.as_tensor(coefficients))
        self.register_buffer("map_size", torch.as_tensor(sizes, dtype=torch.long)[map_index])
        self.register_buffer("map_offset", torch.as_tensor(offsets, dtype=torch.long)[map_index])

    def _torch_energy(self, positions: Tensor, box: Tensor | None) -> Tensor:
        two_pi = 2.0 * np.pi
        size = self.map_size.to(positions.dtype)
        delta = two_pi / size
        patch_coordinates = []
        for first in (0, 4):
            angle = _dihedral(
                *(self._displacement(positions, box, first + step, first + step + 1) for step in range(3))
            )
            scaled = torch.remainder(angle, two_pi) / delta
            cell = torch.clamp(torch.floor(scaled.detach()), max=size - 1)
            patch_coordinates.append((cell.long(), scaled - cell))
        (s, da), (t, db) = patch_coordinates
        patch = self.coefficients[self.map_offset + s + self.map_size * t].to(positions.dtype).view(-1, 4, 4)
        powers = torch.arange(4, device=positions.device, dtype=positions.dtype)
        return torch.einsum("mab,ma,mb->", patch, da.unsqueeze(-1) ** powers, db.unsqueeze(-1) ** powers)
