"""The moment-method reference for thin-wire dipoles (and, by image theory, monopoles over a ground plane).

A centre-fed dipole of length ``L`` and radius ``a`` with a delta-gap source, solved by the method of
moments: the electric-field integral equation in mixed-potential form, reduced kernel
``exp(-jkR) / (4 pi R)`` with ``R = sqrt((z - z')^2 + a^2)``, piecewise-linear current, Galerkin testing; the
``1/R`` part of the inner integrals analytic, the rest by Gauss-Legendre quadrature. Its convergence and its
approach to King's thin-wire value are documented and tested in ``tests/mindelec/test_thin_wire.py``; the
monopole of ``tests/mindelec/test_monopole.py`` compares with half of it.
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


def moment_method_impedance(length, radius, wavelength, segments=100):
    """Input impedance (ohm, ``exp(+j omega t)``) of a centre-fed dipole with a delta gap (see the module
    docstring): ``length`` and ``radius`` in the unit of ``wavelength``; ``segments`` even."""
    k = 2 * math.pi / wavelength
    delta = length / segments
    starts = -length / 2 + delta * np.arange(segments)
    gauss, weights = np.polynomial.legendre.leggauss(8)
    points = (starts[:, None] + delta * (1 + gauss[None, :]) / 2).reshape(-1)
    point_weights = np.tile(weights * delta / 2, segments)
    rising_shape = np.tile((1 + gauss) / 2, segments)
    segment = np.repeat(np.arange(segments), len(gauss))
    flat, rising = _segment_integrals(points, starts, delta, radius, k)
    nodes = np.arange(1, segments)  # the triangles, node n spanning segments n - 1 and n
    inner = rising[:, nodes - 1] + (flat - rising)[:, nodes]
    inner_slope = (flat[:, nodes - 1] - flat[:, nodes]) / delta
    on_rise = segment[:, None] == nodes[None, :] - 1
    on_fall = segment[:, None] == nodes[None, :]
    test = np.where(on_rise, rising_shape[:, None], 0.0) + np.where(on_fall, 1 - rising_shape[:, None], 0.0)
    test_slope = (on_rise.astype(float) - on_fall) / delta
    vector = (test * point_weights[:, None]).T @ inner
    scalar = (test_slope * point_weights[:, None]).T @ inner_slope
    matrix = 1j * FREE_SPACE_IMPEDANCE * (k * vector - scalar / k) / (4 * math.pi)
    drive = np.zeros(segments - 1, dtype=complex)
    drive[segments // 2 - 1] = 1.0  # 1 V across the gap at the centre node
    return 1.0 / np.linalg.solve(matrix, drive)[segments // 2 - 1]
