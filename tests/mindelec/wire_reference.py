"""The moment-method reference for thin-wire dipoles (and, by image theory, monopoles over a ground plane).

A centre-fed dipole of length ``L`` and radius ``a`` with a delta-gap source, solved by the method of
moments: the electric-field integral equation in mixed-potential form, reduced kernel
``exp(-jkR) / (4 pi R)`` with ``R = sqrt((z - z')^2 + a^2)``, piecewise-linear current, Galerkin testing; the
``1/R`` part of the inner integrals analytic, the rest by Gauss-Legendre quadrature. Two parallel dipoles
side by side (:func:`moment_method_pair`, the reference of ``tests/mindelec/test_multiport.py``) couple
through the kernel with ``R = sqrt((z - z')^2 + d^2)``; the induced-EMF mutual impedance of thin half-wave
dipoles (:func:`induced_emf_mutual_impedance`) is its limit for a vanishing radius. The single dipole's
convergence and its approach to King's thin-wire value are documented and tested in
``tests/mindelec/test_thin_wire.py``; the monopole of ``tests/mindelec/test_monopole.py`` compares with
half of it.
"""

import math

import numpy as np

FREE_SPACE_IMPEDANCE = 376.730313668


def _segment_integrals(points, starts, delta, radius, k):
    """``int_segment G`` and ``int_segment (z' - start) / delta G`` (times 4 pi), per point and segment."""
    gauss, weights = np.polynomial.legendre.leggauss(8)
    z = points[:, None]
    u0, u1 = starts[None, :] - z, starts[None, :] + delta - z
    logarithm = np.arcsinh(u1 / radius) - np.arcsinh(u0 / radius)  # int dz'/R, analytic
    root = np.sqrt(u1**2 + radius**2) - np.sqrt(u0**2 + radius**2)
    flat = logarithm.astype(complex)
    rising = (((z - starts[None, :]) * logarithm + root) / delta).astype(complex)
    for node, weight in zip(gauss, weights):  # the smooth rest (exp(-jkR) - 1) / R
        distance = np.sqrt((z - starts[None, :] - delta * (1 + node) / 2) ** 2 + radius**2)
        smooth = (np.exp(-1j * k * distance) - 1) / distance * weight * delta / 2
        flat += smooth
        rising += smooth * (1 + node) / 2
    return flat, rising


def _interaction_matrix(length, offset, wavelength, segments):
    """The Galerkin matrix (ohm, ``segments - 1`` square) of the triangle currents of one wire tested on a
    parallel wire of the same length and extent at a distance ``offset`` (the wire's own radius for its self
    terms: the reduced kernel), all lengths in the unit of ``wavelength``."""
    k = 2 * math.pi / wavelength
    delta = length / segments
    starts = -length / 2 + delta * np.arange(segments)
    gauss, weights = np.polynomial.legendre.leggauss(8)
    points = (starts[:, None] + delta * (1 + gauss[None, :]) / 2).reshape(-1)
    point_weights = np.tile(weights * delta / 2, segments)
    rising_shape = np.tile((1 + gauss) / 2, segments)
    segment = np.repeat(np.arange(segments), len(gauss))
    flat, rising = _segment_integrals(points, starts, delta, offset, k)
    nodes = np.arange(1, segments)  # the triangles, node n spanning segments n - 1 and n
    inner = rising[:, nodes - 1] + (flat - rising)[:, nodes]
    inner_slope = (flat[:, nodes - 1] - flat[:, nodes]) / delta
    on_rise = segment[:, None] == nodes[None, :] - 1
    on_fall = segment[:, None] == nodes[None, :]
    test = np.where(on_rise, rising_shape[:, None], 0.0) + np.where(on_fall, 1 - rising_shape[:, None], 0.0)
    test_slope = (on_rise.astype(float) - on_fall) / delta
    vector = (test * point_weights[:, None]).T @ inner
    scalar = (test_slope * point_weights[:, None]).T @ inner_slope
    return 1j * FREE_SPACE_IMPEDANCE * (k * vector - scalar / k) / (4 * math.pi)


def moment_method_impedance(length, radius, wavelength, segments=100):
    """Input impedance (ohm, ``exp(+j omega t)``) of a centre-fed dipole with a delta gap (see the module
    docstring): ``length`` and ``radius`` in the unit of ``wavelength``; ``segments`` even."""
    matrix = _interaction_matrix(length, radius, wavelength, segments)
    drive = np.zeros(segments - 1, dtype=complex)
    drive[segments // 2 - 1] = 1.0  # 1 V across the gap at the centre node
    return 1.0 / np.linalg.solve(matrix, drive)[segments // 2 - 1]


def moment_method_pair(length, radius, wavelength, spacing, segments=100):
    """The 2 x 2 impedance matrix (ohm, ``exp(+j omega t)``) of two parallel centre-fed dipoles side by side
    (same length and radius, axes ``spacing`` apart, feeds level), each with a delta gap: the moment method of
    :func:`moment_method_impedance` with the mutual kernel ``R = sqrt((z - z')^2 + spacing^2)`` between the
    wires (thin wires: ``spacing`` much larger than ``radius``). Driving each gap with 1 V, the other shorted,
    gives the admittance matrix; its inverse is returned. Lengths in the unit of ``wavelength``."""
    own = _interaction_matrix(length, radius, wavelength, segments)
    mutual = _interaction_matrix(length, spacing, wavelength, segments)
    unknowns = segments - 1
    feeds = [segments // 2 - 1, unknowns + segments // 2 - 1]
    drives = np.zeros((2 * unknowns, 2), dtype=complex)
    drives[feeds, [0, 1]] = 1.0
    currents = np.linalg.solve(np.block([[own, mutual], [mutual, own]]), drives)
    return np.linalg.inv(currents[feeds, :])


def induced_emf_mutual_impedance(spacing, wavelength=1.0):
    """Mutual impedance (ohm, ``exp(+j omega t)``) of two parallel side-by-side half-wave dipoles, infinitely
    thin, with sinusoidal currents, by the induced-EMF method (Carter 1932; Balanis, *Antenna Theory*,
    eq. 8-68): ``R21 = eta/(4 pi) (2 Ci(u0) - Ci(u1) - Ci(u2))``, ``X21 = -eta/(4 pi) (2 Si(u0) - Si(u1) -
    Si(u2))`` with ``u0 = k d``, ``u1,2 = k (sqrt(d^2 + L^2) +- L)``, ``L = lambda / 2``."""
    from scipy.special import sici

    k, half = 2 * math.pi / wavelength, wavelength / 2
    diagonal = math.hypot(spacing, half)
    (si0, ci0), (si1, ci1), (si2, ci2) = (sici(k * u) for u in (spacing, diagonal + half, diagonal - half))
    factor = FREE_SPACE_IMPEDANCE / (4 * math.pi)
    return factor * (2 * ci0 - ci1 - ci2) - 1j * factor * (2 * si0 - si1 - si2)
