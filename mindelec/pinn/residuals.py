"""Residuals of Maxwell's equations and their boundary conditions on network fields, through autodiff.

Dimensionless units (see :class:`mindelec.pinn.Scales`), points ``(B, d)`` (space columns, then time,
then any parameter columns) with ``requires_grad``, fields ``(B, k)`` from a network; derivatives by
:mod:`common.autodiff`. Time domain: :func:`maxwell_te_residual`, :func:`maxwell_tm_residual`,
:func:`maxwell_3d_residual`, with the first-order absorbing condition :func:`mur_residual`; frequency
domain: :func:`helmholtz_residual` with :func:`sommerfeld_residual`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from common import autodiff as ad
from common.errors import ConfigurationError

__all__ = [
    "helmholtz_residual",
    "maxwell_3d_residual",
    "maxwell_te_residual",
    "maxwell_tm_residual",
    "mur_residual",
    "sommerfeld_residual",
]


def _columns(fields: torch.Tensor, points: torch.Tensor, count: int, name: str) -> torch.Tensor:
    """Jacobian (B, count, d) of the first ``count`` field columns, validated."""
    if fields.dim() != 2 or fields.shape[1] < count:
        raise ConfigurationError(
            f"{name}: fields must be (B, {count}) network outputs, got shape {tuple(fields.shape)}"
        )
    return ad.jacobian(fields[:, :count], points)


def _material(value, points: torch.Tensor) -> torch.Tensor:
    """A relative material parameter as a (B,) tensor or a scalar tensor."""
    return torch.as_tensor(value, dtype=points.dtype, device=points.device)


def _terms(points, fields, permittivity, permeability, current, count: int, name: str):
    """Jacobian (B, count, d) of the fields, materials, and the ``count`` source columns (or zeros)."""
    if current is None:
        sources = [0.0] * count
    elif current.shape != (len(points), count):
        raise ConfigurationError(
            f"{name}: current must be ({len(points)}, {count}), got {tuple(current.shape)}")
    else:
        sources = [current[:, i] for i in range(count)]
    jac = _columns(fields, points, count, name)
    return jac, _material(permittivity, points), _material(permeability, points), sources


def maxwell_te_residual(points, fields, permittivity=1.0, permeability=1.0, current=None):
    """2D TE Maxwell residuals (dimensionless, see :class:`Scales`) on points (x, y, t, ...).

    ``eps_r dEx/dt - dHz/dy + Jx``, ``eps_r dEy/dt + dHz/dx + Jy``, ``mu_r dHz/dt + dEy/dx - dEx/dy + Mz``.

    Args:
        points: (B, 3 [+ p]) with ``requires_grad``: x, y, t, then any parameter columns.
        fields: (B, 3) Ex, Ey, Hz evaluated at ``points``.
        permittivity, permeability: relative values, scalars or (B,) tensors (e.g. a parameter column).
        current: optional (B, 3) source densities (Jx, Jy, Mz), dimensionless.

    Returns:
        Tuple of three (B,) residuals.
    """
    jac, eps, mu, (jx, jy, mz) = _terms(
        points, fields, permittivity, permeability, current, 3, "maxwell_te_residual"
    )
    # jac[:, component, coordinate]: components Ex, Ey, Hz; coordinates x, y, t
    return (
        eps * jac[:, 0, 2] - jac[:, 2, 1] + jx,
        eps * jac[:, 1, 2] + jac[:, 2, 0] + jy,
        mu * jac[:, 2, 2] + jac[:, 1, 0] - jac[:, 0, 1] + mz,
    )


def maxwell_tm_residual(points, fields, permittivity=1.0, permeability=1.0, current=None):
    """2D TM Maxwell residuals (dimensionless) on points (x, y, t, ...).

    ``eps_r dEz/dt - dHy/dx + dHx/dy + Jz``, ``mu_r dHx/dt + dEz/dy + Mx``, ``mu_r dHy/dt - dEz/dx + My``.

    Args:
        points: (B, 3 [+ p]) with ``requires_grad``: x, y, t, ...
        fields: (B, 3) Ez, Hx, Hy.
        permittivity, permeability: relative, scalars or (B,).
        current: optional (B, 3) (Jz, Mx, My), dimensionless.

    Returns:
        Tuple of three (B,) residuals.
    """
    jac, eps, mu, (jz, mx, my) = _terms(
        points, fields, permittivity, permeability, current, 3, "maxwell_tm_residual"
    )
    return (
        eps * jac[:, 0, 2] - jac[:, 2, 0] + jac[:, 1, 1] + jz,
        mu * jac[:, 1, 2] + jac[:, 0, 1] + mx,
        mu * jac[:, 2, 2] - jac[:, 0, 0] + my,
    )


def maxwell_3d_residual(points, fields, permittivity=1.0, permeability=1.0, current=None):
    """3D time-domain Maxwell residuals (dimensionless) on points (x, y, z, t, ...).

    ``eps_r dE/dt - curl H + J`` (3 rows) and ``mu_r dH/dt + curl E + M`` (3 rows).

    Args:
        points: (B, 4 [+ p]) with ``requires_grad``.
        fields: (B, 6) Ex, Ey, Ez, Hx, Hy, Hz.
        permittivity, permeability: relative, scalars or (B,).
        current: optional (B, 6) (Jx, Jy, Jz, Mx, My, Mz), dimensionless.

    Returns:
        Tuple of six (B,) residuals.
    """
    jac, eps, mu, sources = _terms(
        points, fields, permittivity, permeability, current, 6, "maxwell_3d_residual"
    )

    def curl(offset):  # curl of the field components offset .. offset + 2
        return (
            jac[:, offset + 2, 1] - jac[:, offset + 1, 2],
            jac[:, offset + 0, 2] - jac[:, offset + 2, 0],
            jac[:, offset + 1, 0] - jac[:, offset + 0, 1],
        )

    curl_e, curl_h = curl(0), curl(3)
    electric = tuple(eps * jac[:, i, 3] - curl_h[i] + sources[i] for i in range(3))
    magnetic = tuple(mu * jac[:, 3 + i, 3] + curl_e[i] + sources[3 + i] for i in range(3))
    return electric + magnetic


def mur_residual(points, fields, normals, speed=1.0, components: Sequence[int] | None = None):
    """First-order Mur / Engquist-Majda absorbing condition ``du/dt + v n.grad(u) = 0`` per component.

    Exact for a plane wave leaving the domain along the outward normal ``n``; reflects
    ``(1 - cos a) / (1 + cos a)`` of a wave incident at angle ``a``.

    Args:
        points: (B, d + 1 [+ p]) with ``requires_grad``: d space columns, then time, then parameters.
        fields: (B, k).
        normals: (B, d) outward spatial normals.
        speed: wave speed (dimensionless: ``1 / sqrt(eps_r mu_r)``), scalar or (B,).
        components: field columns to constrain (default: all).

    Returns:
        (B, len(components)) residuals.
    """
    components = list(range(fields.shape[1])) if components is None else list(components)
    space = normals.shape[1]
    if points.shape[1] <= space:
        raise ConfigurationError(
            f"mur_residual: points need {space} space columns and a time column, "
            f"got shape {tuple(points.shape)}"
        )
    jac = ad.jacobian(fields[:, components], points)
    normal_derivative = (jac[:, :, :space] * normals[:, None, :]).sum(-1)
    speed = _material(speed, points)
    speed = speed[:, None] if speed.dim() == 1 else speed
    return jac[:, :, space] + speed * normal_derivative


def helmholtz_residual(points, fields, wavenumber, permittivity=1.0, source=None):
    """Frequency-domain scalar Helmholtz residual ``laplace u + k^2 eps_r u + s`` for complex ``u``.

    For 2D TM (``E = Ez(x, y) exp(-i omega t)``, so ``laplace Ez + k^2 eps_r Ez = -i omega mu J``)
    ``u = Ez`` and ``s = i omega mu J``; the residual is split into real and imaginary parts.

    Args:
        points: (B, d) spatial points with ``requires_grad`` (dimensionless).
        fields: (B, 2) real and imaginary parts of ``u``.
        wavenumber: free-space ``k = omega L / c`` (dimensionless).
        permittivity: relative, scalar or (B,).
        source: optional (B, 2) real and imaginary parts of ``s``.

    Returns:
        Tuple of two (B,) residuals (real, imaginary).
    """
    if fields.dim() != 2 or fields.shape[1] != 2:
        raise ConfigurationError(
            f"helmholtz_residual: fields must be (B, 2) (real, imaginary), got {tuple(fields.shape)}"
        )
    k2 = wavenumber**2 * _material(permittivity, points)
    real = ad.laplacian(fields[:, 0], points) + k2 * fields[:, 0]
    imag = ad.laplacian(fields[:, 1], points) + k2 * fields[:, 1]
    if source is not None:
        real, imag = real + source[:, 0], imag + source[:, 1]
    return real, imag


def sommerfeld_residual(points, fields, normals, wavenumber):
    """First-order absorbing condition ``du/dn - i k u = 0`` for outgoing ``exp(i (k r - omega t))`` waves.

    Args:
        points: (B, d) with ``requires_grad``; fields: (B, 2) real and imaginary parts;
        normals: (B, d) outward normals; wavenumber: ``k`` in the medium (dimensionless).

    Returns:
        Tuple of two (B,) residuals (real, imaginary).
    """
    jac = ad.jacobian(fields, points)
    normal_derivative = (jac * normals[:, None, :]).sum(-1)
    return (
        normal_derivative[:, 0] + wavenumber * fields[:, 1],
        normal_derivative[:, 1] - wavenumber * fields[:, 0],
    )
