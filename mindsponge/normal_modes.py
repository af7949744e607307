"""Normal modes of a potential at a minimum, and thermal samples displaced along them.

The Hessian is the central finite difference of the potential's analytic forces
(:func:`hessian`): this works for every potential, including :class:`~mindsponge.labels.XTB`,
whose tblite gradient is analytic but not differentiable again (autograd through it would be
wrong, not merely slow). With a step of 5e-4 nm the truncation error is below 1e-3 of a bond
stretch's curvature and tblite's gradient noise stays below 1% of the softest modes of small
molecules; the result is symmetrised.

The rigid-body motions (3 translations and 3 rotations, 2 for a linear molecule) are removed
exactly: the mass-weighted Hessian is projected onto the orthogonal complement of the
mass-weighted rigid-body vectors before it is diagonalised, so :class:`NormalModes` holds the
``3N - 6`` (``3N - 5``) vibrations only.

:meth:`NormalModes.sample` draws configurations from the classical harmonic Boltzmann
distribution at a temperature: each normal coordinate ``q_k`` (mass-weighted, ``sqrt(amu) nm``)
is Gaussian with variance ``k_B T / omega_k^2``, so each mode holds ``k_B T / 2`` of harmonic
potential energy on average (classical, not quantum: no zero-point motion). The harmonic picture
holds for stiff modes; a soft torsion (a methyl rotor, tens of cm^-1) gets amplitudes at high
temperature that the real, periodic potential would not allow, so molecules with free rotors are
better sampled by MD (``xtb_sample(sampling="md")``) or by both.

Example::

    modes = normal_modes(XTB(numbers), optimized_positions, masses)
    modes.wavenumbers                                        # (3N - 6,) cm^-1
    modes.sample(300.0, np.random.default_rng(0))            # (N, 3) nm
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from common import units
from common.deprecation import moved_attributes
from common.errors import DataError

__all__ = ["NormalModes", "finite_difference_hessian", "normal_modes", "optimize", "rigid_body_basis"]

_SPEED_OF_LIGHT_CM_PER_PS = units.SPEED_OF_LIGHT * 100.0 * 1e-12


def _forces(potential: nn.Module, positions: np.ndarray) -> np.ndarray:
    from mindsponge.forcefield.base import energy_and_forces

    _, forces = energy_and_forces(potential, torch.as_tensor(positions, dtype=torch.float64))
    return forces.detach().cpu().double().numpy()


def finite_difference_hessian(potential: nn.Module, positions, step: float = 5e-4) -> np.ndarray:
    """Cartesian Hessian by central differences of the forces.

    Args:
        potential: ``(positions (N, 3) nm, box) -> energy () kJ/mol`` (called with ``box=None``).
        positions: ``(N, 3)`` nm.
        step: displacement of one coordinate, nm.

    Returns:
        ``(3N, 3N)`` float64 symmetric array, kJ/mol/nm^2 (row/column ``3 * atom + axis``).
    """
    positions = np.asarray(positions, dtype=np.float64)
    size = positions.size
    result = np.empty((size, size))
    for index in range(size):
        shifted = positions.reshape(-1).copy()
        shifted[index] += step
        plus = _forces(potential, shifted.reshape(positions.shape))
        shifted[index] -= 2.0 * step
        minus = _forces(potential, shifted.reshape(positions.shape))
        result[index] = -(plus - minus).reshape(-1) / (2.0 * step)
    return 0.5 * (result + result.T)


def rigid_body_basis(positions: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """Orthonormal mass-weighted translations and rotations, ``(3N, 6)`` (``(3N, 5)`` if linear).

    Args:
        positions: ``(N, 3)`` nm.
        masses: ``(N,)`` amu.
    """
    root = np.sqrt(masses)[:, None]
    centred = positions - (masses[:, None] * positions).sum(0) / masses.sum()
    vectors = [(root * np.eye(3)[axis]).reshape(-1) for axis in range(3)]
    vectors += [(root * np.cross(np.eye(3)[axis], centred)).reshape(-1) for axis in range(3)]
    left, singular, _ = np.linalg.svd(np.stack(vectors, axis=1), full_matrices=False)
    return left[:, singular > 1e-6 * singular[0]]


@dataclass(frozen=True)
class NormalModes:
    """Harmonic vibrations at a minimum.

    Attributes:
        positions: ``(N, 3)`` nm, the minimum.
        masses: ``(N,)`` amu.
        eigenvalues: ``(M,)`` ``omega^2`` in 1/ps^2 (kJ/mol/nm^2/amu), ascending, ``M = 3N - 6``
            (``3N - 5`` for a linear molecule).
        vectors: ``(M, N, 3)`` orthonormal mass-weighted mode vectors (a Cartesian displacement
            along mode ``k`` is ``vectors[k] / sqrt(masses)[:, None] * q_k``).
    """

    positions: np.ndarray
    masses: np.ndarray
    eigenvalues: np.ndarray
    vectors: np.ndarray

    @property
    def wavenumbers(self) -> np.ndarray:
        """``(M,)`` harmonic wavenumbers, cm^-1."""
        return np.sqrt(self.eigenvalues) / (2.0 * np.pi * _SPEED_OF_LIGHT_CM_PER_PS)

    def sample(self, temperature: float, rng: np.random.Generator) -> np.ndarray:
        """A configuration ``(N, 3)`` nm from the classical harmonic distribution at ``temperature`` K."""
        spread = np.sqrt(units.BOLTZMANN_MD * temperature / self.eigenvalues)
        coordinates = spread * rng.standard_normal(len(spread))
        displacement = np.tensordot(coordinates, self.vectors, axes=1) / np.sqrt(self.masses)[:, None]
        return self.positions + displacement


def normal_modes(potential: nn.Module, positions, masses, step: float = 5e-4) -> NormalModes:
    """Normal modes of ``potential`` at ``positions`` (which should be a minimum, see :func:`optimize`).

    Args:
        potential: ``(positions, box) -> energy`` kJ/mol.
        positions: ``(N, 3)`` nm.
        masses: ``(N,)`` amu.
        step: finite-difference step of :func:`hessian`, nm.

    Raises:
        DataError: a vibration with non-positive curvature (the positions are not a minimum),
            naming the mode and its eigenvalue.
    """
    positions = np.asarray(positions, dtype=np.float64)
    masses = np.asarray(masses, dtype=np.float64)
    weights = np.repeat(1.0 / np.sqrt(masses), 3)
    weighted = finite_difference_hessian(potential, positions, step) * weights[:, None] * weights[None, :]
    rigid = rigid_body_basis(positions, masses)
    internal = np.linalg.svd(rigid, full_matrices=True)[0][:, rigid.shape[1]:]
    eigenvalues, vectors = np.linalg.eigh(internal.T @ weighted @ internal)
    if eigenvalues[0] <= 0.0:
        raise DataError(
            f"normal_modes: mode 0 has curvature {eigenvalues[0]:.4g} 1/ps^2 <= 0: the positions are "
            "not a minimum (optimise them first, with a tighter tolerance)")
    modes = (internal @ vectors).T.reshape(len(eigenvalues), len(masses), 3)
    return NormalModes(positions, masses, eigenvalues, modes)


def optimize(potential: nn.Module, positions, masses, tolerance: float = 0.5,
             max_iterations: int = 2000) -> np.ndarray:
    """Positions ``(N, 3)`` nm at a minimum of ``potential`` near ``positions`` (L-BFGS).

    Args:
        tolerance: largest atomic force norm at convergence, kJ/mol/nm.

    Raises:
        DataError: no convergence within ``max_iterations`` (gives the remaining force).
    """
    from mindsponge.forcefield.base import energy_and_forces
    from mindsponge.minimize import minimize

    result = minimize(lambda x, box: energy_and_forces(potential, x, box),
                      torch.as_tensor(np.asarray(positions), dtype=torch.float64),
                      torch.as_tensor(np.asarray(masses), dtype=torch.float64),
                      tolerance=tolerance, max_iterations=max_iterations, progress=False)
    if not result.converged:
        raise DataError(f"optimize: largest force {result.max_force:.3g} kJ/mol/nm after "
                        f"{result.iterations} iterations (tolerance {tolerance})")
    return result.positions.detach().cpu().numpy()


# ``hessian`` was also the name of common.autodiff's autograd Hessian of a tensor
__getattr__ = moved_attributes(__name__, {"hessian": "mindsponge.normal_modes:finite_difference_hessian"})
