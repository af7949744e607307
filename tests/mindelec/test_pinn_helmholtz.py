"""The frequency-domain PINN problem against an independent solver: :mod:`mindelec.fdfd` and the Hankel field.

:func:`mindelec.pinn.fdfd_reference` (the open-domain FDFD field in the problem's units and
``exp(-i omega t)`` convention) must be the outgoing field of the smoothed line current,
``u = -(k L / 4) H0^(1)(k r) exp(-k^2 sigma^2 / 2)`` outside the source (the Gaussian's Fourier transform at
``k`` times the line current's field); and :func:`mindelec.pinn.helmholtz_problem`'s source term must be what
FDFD's discrete equation puts there: ``s = -(laplace_h u + k^2 u)`` of the FDFD field at the nodes where the
source is strong (the discrete Laplacian is the one FDFD solves, so the two agree to round-off).
"""

import math

import pytest
import scipy.special
import torch

import mindelec as me
from common.units import SPEED_OF_LIGHT
from mindelec.fdtd import GaussianPulse

pinn = me.pinn
LOWER, UPPER, FREQUENCY, RADIUS, CELL = (0.0, 0.0), (0.6, 0.6), 1e9, 0.03, 5e-3


@pytest.fixture(scope="module")
def case():
    source = pinn.PointSource((0.3, 0.3), RADIUS, GaussianPulse(FREQUENCY, FREQUENCY), amplitude=2.0)
    reference = pinn.fdfd_reference(LOWER, UPPER, FREQUENCY, source, cell_size=CELL, stride=1)
    problem, scales = pinn.helmholtz_problem(LOWER, UPPER, FREQUENCY, source, n_domain=64, n_boundary=16)
    return source, reference, problem, scales


def test_fdfd_reference_is_the_outgoing_hankel_field_of_the_smoothed_source(case):
    source, reference, _, scales = case
    k = 2 * math.pi * FREQUENCY / SPEED_OF_LIGHT
    r = (reference.points - torch.tensor(source.position, dtype=torch.float64)).norm(dim=1)
    far = r > 5 * RADIUS
    hankel = torch.from_numpy(scipy.special.hankel1(0, (k * r[far]).numpy()))
    expected = -(k * scales.length / 4) * hankel * math.exp(-((k * RADIUS) ** 2) / 2)
    error = (reference.values[far] - expected).norm() / expected.norm()
    assert error < 0.01  # 5 mm cells: ~60 per wavelength
    assert (reference.values[far] + expected).norm() / expected.norm() > 1.9  # the sign matters


def test_helmholtz_problem_source_is_the_fdfd_right_hand_side(case):
    source, reference, problem, scales = case
    n = round((UPPER[0] - LOWER[0]) / CELL) + 1
    u = reference.values.reshape(n, n)
    h = CELL / scales.length
    laplacian = (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]) / h**2
    operator = laplacian + problem.wavenumber**2 * u[1:-1, 1:-1]
    points = ((reference.points.reshape(n, n, 2)[1:-1, 1:-1] - torch.tensor(LOWER)) / scales.length).reshape(
        -1, 2
    )
    near = (points * scales.length - torch.tensor(source.position)).norm(dim=1) < 2 * RADIUS
    points = points[near].clone().requires_grad_()
    zero_field = 0.0 * points  # (B, 2): the residual of a zero field is the source term alone
    real, imaginary = problem.constraints["helmholtz"].residual(points, zero_field, {})
    expected = -operator.reshape(-1)[near]
    assert float(expected.imag.abs().max()) > 10  # a strong source there
    torch.testing.assert_close(
        imaginary.detach(), expected.imag, rtol=1e-3, atol=1e-3 * float(expected.abs().max())
    )
    torch.testing.assert_close(
        real.detach(), expected.real, rtol=1e-3, atol=1e-3 * float(expected.abs().max())
    )
