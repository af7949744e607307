"""Mie series of a sphere and of an infinite circular cylinder at normal incidence: exact references for
the cross-sections of :class:`~mindelec.fdtd.CrossSectionMonitor` in 3D and 2D.

Sphere (Bohren and Huffman, *Absorption and Scattering of Light by Small Particles*, section 4.4): with the
Riccati-Bessel functions ``psi_n(z) = z j_n(z)`` and ``xi_n(z) = z h_n^(1)(z)``, the coefficients

* ``a_n = (m psi_n(mx) psi_n'(x) - psi_n(x) psi_n'(mx)) / (m psi_n(mx) xi_n'(x) - xi_n(x) psi_n'(mx))``,
* ``b_n = (psi_n(mx) psi_n'(x) - m psi_n(x) psi_n'(mx)) / (psi_n(mx) xi_n'(x) - m xi_n(x) psi_n'(mx))``,

for a perfect conductor (``m -> infinity``) ``a_n = psi_n'(x) / xi_n'(x)``, ``b_n = psi_n(x) / xi_n(x)``,
give ``Q_ext = (2 / x^2) sum (2n + 1) Re(a_n + b_n)`` and
``Q_sca = (2 / x^2) sum (2n + 1) (|a_n|^2 + |b_n|^2)``
(n = 1, 2, ...); the cross-sections are ``Q`` times ``pi a^2`` (m^2). Spherical Bessel functions of complex
argument are scipy's (AMOS), so no recurrence of ours loses digits for an absorbing sphere.

Cylinder (2D):

For a cylinder of radius ``a`` in a medium of wavenumber ``k`` (size parameter ``x = k a``) and relative
refractive index ``m`` (the ratio to the medium's; ``m = n + i kappa`` with ``kappa >= 0`` for an absorbing
cylinder, the ``exp(-i omega t)`` convention of Bohren and Huffman, *Absorption and Scattering of Light by
Small Particles*, section 8.4), the scattered field is a series of outgoing Hankel waves
``H_n^(1)(k r) exp(i n phi)`` with coefficients (``J``, ``H`` Bessel and Hankel functions of the first
kind, primes derivatives)

* TM (E along the axis; B&H's case I): ``b_n = (J_n(mx) J_n'(x) - m J_n'(mx) J_n(x)) /
  (J_n(mx) H_n'(x) - m J_n'(mx) H_n(x))``, for a perfect conductor ``J_n(x) / H_n(x)``;
* TE (H along the axis; case II): ``a_n = (m J_n(mx) J_n'(x) - J_n'(mx) J_n(x)) /
  (m J_n(mx) H_n'(x) - J_n'(mx) H_n(x))``, for a perfect conductor ``J_n'(x) / H_n'(x)``;

and, with ``c_n`` either of them (``c_-n = c_n``), the efficiencies per unit length
``Q_sca = (2 / x) sum_n |c_n|^2`` and ``Q_ext = (2 / x) Re sum_n c_n`` over all integers ``n``. The
cross-sections per unit length are ``Q`` times the diameter ``2 a`` (m). The series is summed to
``n = x + 4 x^(1/3) + 10`` (Wiscombe's bound) in double precision.

The tests check both series against values published by Bohren and Huffman and against the small-particle
(Rayleigh) limits, and compare the FDTD's :class:`~mindelec.fdtd.CrossSectionMonitor` with them.
"""

import math

import numpy as np
from scipy import special

from common.errors import ConfigurationError

__all__ = [
    "sphere_coefficients",
    "sphere_efficiencies",
    "sphere_cross_sections",
    "cylinder_coefficients",
    "cylinder_efficiencies",
    "cylinder_cross_sections",
]


def _index(m, x, owner):
    """``(m, x)`` as arrays checked: ``x > 0`` finite; ``m`` finite with ``Im m >= 0``, or ``None`` (PEC)."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x) & (x > 0)):
        raise ConfigurationError(f"{owner}: size parameters must be positive and finite, got {x}")
    if m is None:
        return None, x
    m = np.asarray(m, dtype=np.complex128)
    if not np.all(np.isfinite(m)) or np.any(m.imag < 0):
        raise ConfigurationError(
            f"{owner}: m must be finite with Im m >= 0 (exp(-i omega t), absorbing), got {m}"
        )
    return m, x


def cylinder_coefficients(m, x, polarization):
    """The scattering coefficients ``c_n`` (n = 0, 1, ..., N) of a cylinder (module docstring).

    Args:
        m: relative refractive index (complex, ``Im m >= 0``), or ``None`` for a perfect conductor.
        x: size parameter ``k a`` (a positive float).
        polarization: ``"TM"`` (E along the axis) or ``"TE"`` (H along the axis).

    Returns:
        (N + 1,) complex128 array.
    """
    if polarization not in ("TM", "TE"):
        raise ConfigurationError(
            f"cylinder_coefficients: polarization must be 'TM' or 'TE', got {polarization!r}"
        )
    m, x = _index(m, x, "cylinder_coefficients")
    x = float(x)
    n = np.arange(0, _terms(x) + 1)
    jx, djx = special.jv(n, x), special.jvp(n, x)
    hx, dhx = special.hankel1(n, x), special.h1vp(n, x)
    if m is None:
        return jx / hx if polarization == "TM" else djx / dhx
    m = complex(m)
    jm, djm = special.jv(n, m * x), special.jvp(n, m * x)
    if polarization == "TM":
        return (jm * djx - m * djm * jx) / (jm * dhx - m * djm * hx)
    return (m * jm * djx - djm * jx) / (m * jm * dhx - djm * hx)


def cylinder_efficiencies(m, x, polarization):
    """``(Q_ext, Q_sca, Q_abs)`` of a cylinder per unit length (efficiencies: cross-section / diameter).

    Args: as :func:`cylinder_coefficients`; ``x`` may be an array, then each efficiency has its shape.
    """
    m, x = _index(m, x, "cylinder_efficiencies")
    values = []
    for size in np.atleast_1d(x):
        c = cylinder_coefficients(m, size, polarization)
        weights = np.where(np.arange(len(c)) == 0, 1.0, 2.0)
        values.append(
            (2 / size * float(np.sum(weights * c.real)), 2 / size * float(np.sum(weights * abs(c) ** 2)))
        )
    values = np.array(values).reshape(np.shape(x) + (2,))
    extinction, scattering = values[..., 0], values[..., 1]
    return extinction, scattering, extinction - scattering


def cylinder_cross_sections(permittivity, radius, wavelength, polarization, background=1.0):
    """Cross-sections per unit length (m) of a cylinder of ``radius`` (m): ``(ext, sca, abs)``, each shaped
    like ``wavelength``.

    Args:
        permittivity: relative permittivity of the cylinder (complex, ``Im >= 0`` for losses in the
            ``exp(-i omega t)`` convention: ``eps + i sigma / (omega eps0)``), a scalar or one per wavelength,
            or ``None`` for a perfect conductor.
        radius: (m).
        wavelength: vacuum wavelength(s) (m), a float or an array.
        polarization: ``"TM"`` (E along the axis) or ``"TE"`` (H along the axis).
        background: relative permittivity of the (lossless) surrounding medium.
    """
    def efficiencies(m, x):
        return cylinder_efficiencies(m, x, polarization)

    return _cross_sections(permittivity, radius, wavelength, background, efficiencies, 2 * radius,
                           "cylinder_cross_sections")

def _terms(x):
    """Orders summed for size parameter ``x`` (Wiscombe's bound ``x + 4 x^(1/3) + 2``, plus margin)."""
    return int(x + 4 * x ** (1 / 3) + 10)


def sphere_coefficients(m, x):
    """The Mie coefficients ``(a_n, b_n)`` (n = 1 .. N) of a sphere (module docstring).

    Args:
        m: relative refractive index (complex, ``Im m >= 0``), or ``None`` for a perfect conductor.
        x: size parameter ``k a`` (a positive float).

    Returns:
        two (N,) complex128 arrays.
    """
    m, x = _index(m, x, "sphere_coefficients")
    x = float(x)
    n = np.arange(1, _terms(x) + 1)
    jx, djx = special.spherical_jn(n, x), special.spherical_jn(n, x, derivative=True)
    yx, dyx = special.spherical_yn(n, x), special.spherical_yn(n, x, derivative=True)
    psi, dpsi = x * jx, jx + x * djx
    xi, dxi = x * (jx + 1j * yx), (jx + 1j * yx) + x * (djx + 1j * dyx)
    if m is None:
        return dpsi / dxi, psi / xi
    m = complex(m)
    z = m * x
    jz, djz = special.spherical_jn(n, z), special.spherical_jn(n, z, derivative=True)
    psi_m, dpsi_m = z * jz, jz + z * djz
    a = (m * psi_m * dpsi - psi * dpsi_m) / (m * psi_m * dxi - xi * dpsi_m)
    b = (psi_m * dpsi - m * psi * dpsi_m) / (psi_m * dxi - m * xi * dpsi_m)
    return a, b


def sphere_efficiencies(m, x):
    """``(Q_ext, Q_sca, Q_abs)`` of a sphere (efficiencies: cross-section / (pi a^2)).

    Args: as :func:`sphere_coefficients`; ``x`` may be an array, then each efficiency has its shape.
    """
    m, x = _index(m, x, "sphere_efficiencies")
    values = []
    for size in np.atleast_1d(x).reshape(-1):
        a, b = sphere_coefficients(m, size)
        weights = 2 * np.arange(1, len(a) + 1) + 1
        values.append((
            2 / size**2 * float(np.sum(weights * (a + b).real)),
            2 / size**2 * float(np.sum(weights * (abs(a) ** 2 + abs(b) ** 2))),
        ))
    values = np.array(values).reshape(np.shape(x) + (2,))
    extinction, scattering = values[..., 0], values[..., 1]
    return extinction, scattering, extinction - scattering


def sphere_cross_sections(permittivity, radius, wavelength, background=1.0):
    """Cross-sections (m^2) of a sphere of ``radius`` (m): ``(ext, sca, abs)``, each shaped like
    ``wavelength``.

    Args:
        permittivity: relative permittivity of the sphere (complex, ``Im >= 0`` for losses in the
            ``exp(-i omega t)`` convention: ``eps + i sigma / (omega eps0)``), a scalar or one per wavelength,
            or ``None`` for a perfect conductor.
        radius: (m).
        wavelength: vacuum wavelength(s) (m), a float or an array.
        background: relative permittivity of the (lossless) surrounding medium.
    """
    return _cross_sections(permittivity, radius, wavelength, background, sphere_efficiencies,
                           math.pi * radius**2, "sphere_cross_sections")


def _cross_sections(permittivity, radius, wavelength, background, efficiencies, area, owner):
    """``area * (Q_ext, Q_sca, Q_abs)`` from ``efficiencies(m, x)``, per wavelength."""
    wavelength = np.asarray(wavelength, dtype=np.float64)
    x = 2 * math.pi * math.sqrt(background) * radius / wavelength
    if permittivity is None:
        return tuple(area * q for q in efficiencies(None, x))
    m = np.broadcast_to(np.sqrt(np.asarray(permittivity, dtype=np.complex128) / background), np.shape(x))
    if np.ndim(np.asarray(permittivity)) and np.shape(permittivity) != np.shape(x):
        raise ConfigurationError(f"{owner}: permittivity must be a scalar or one per wavelength")
    results = np.array([efficiencies(mi, xi) for mi, xi in zip(m.reshape(-1), x.reshape(-1))])
    return tuple(area * results[:, i].reshape(np.shape(x)) for i in range(3))
