"""mindelec.pinn: residuals vanish (float64 round-off) for analytic Maxwell solutions through autodiff."""

import math

import pytest
import scipy.constants as const
import torch

import mindelec as me
from common import autodiff as ad
from common import pde

pinn = me.pinn
torch_f64 = dict(dtype=torch.float64)
PAIRS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))  # POTENTIAL_JET's second derivatives


def random_points(n, d, seed=0, low=0.0, high=1.0):
    generator = torch.Generator().manual_seed(seed)
    return (low + (high - low) * torch.rand(n, d, generator=generator, **torch_f64)).requires_grad_()


@pytest.mark.parametrize("eps, mu", [(1.0, 1.0), (2.5, 1.5)])
def test_te_cavity_mode_has_zero_residual(eps, mu):
    kx, ky = 2 * math.pi, 3 * math.pi  # TE_23 of the unit square with PEC walls
    omega = math.hypot(kx, ky) / math.sqrt(eps * mu)
    p = random_points(500, 3)
    x, y, t = p.unbind(1)
    hz = torch.cos(kx * x) * torch.cos(ky * y) * torch.cos(omega * t)
    ex = -ky / (eps * omega) * torch.cos(kx * x) * torch.sin(ky * y) * torch.sin(omega * t)
    ey = kx / (eps * omega) * torch.sin(kx * x) * torch.cos(ky * y) * torch.sin(omega * t)
    residuals = pinn.maxwell_te_residual(p, torch.stack([ex, ey, hz], 1), eps, mu)
    scale = max(kx, ky)  # size of the individual derivative terms
    for residual in residuals:
        assert residual.abs().max() < 1e-13 * scale
    # a wrong permittivity leaves a residual of the size of the terms
    wrong = pinn.maxwell_te_residual(p, torch.stack([ex, ey, hz], 1), 2 * eps, mu)
    assert wrong[0].abs().max() > 0.1


@pytest.mark.parametrize("eps, mu", [(1.0, 1.0), (4.0, 2.0)])
def test_tm_cavity_mode_has_zero_residual(eps, mu):
    kx, ky = math.pi, 2 * math.pi
    omega = math.hypot(kx, ky) / math.sqrt(eps * mu)
    p = random_points(500, 3, seed=1)
    x, y, t = p.unbind(1)
    ez = torch.sin(kx * x) * torch.sin(ky * y) * torch.cos(omega * t)
    hx = -ky / (mu * omega) * torch.sin(kx * x) * torch.cos(ky * y) * torch.sin(omega * t)
    hy = kx / (mu * omega) * torch.cos(kx * x) * torch.sin(ky * y) * torch.sin(omega * t)
    permittivity = torch.full((500,), eps, **torch_f64)  # a (B,) material column works as a scalar
    for residual in pinn.maxwell_tm_residual(p, torch.stack([ez, hx, hy], 1), permittivity, mu):
        assert residual.abs().max() < 1e-13 * ky


def test_3d_plane_wave_has_zero_residual():
    eps, mu = 2.0, 1.3
    direction = torch.tensor([1.0, 2.0, 2.0], **torch_f64) / 3
    e0 = torch.tensor([2.0, -1.0, 0.0], **torch_f64) / math.sqrt(5)
    h0 = math.sqrt(eps / mu) * torch.linalg.cross(direction, e0)
    speed = 1 / math.sqrt(eps * mu)
    p = random_points(400, 4, seed=2)
    phase = p[:, :3] @ direction - speed * p[:, 3]
    pulse = torch.exp(-8 * (phase - 0.5) ** 2)[:, None]  # any profile f(k.x - v t) travels unchanged
    fields = torch.cat([pulse * e0, pulse * h0], 1)
    for residual in pinn.maxwell_3d_residual(p, fields, eps, mu):
        assert residual.abs().max() < 1e-14 * 8
    # a wave with the wrong impedance is not a solution
    wrong = torch.cat([pulse * e0, 2 * pulse * h0], 1)
    assert max(r.abs().max() for r in pinn.maxwell_3d_residual(p, wrong, eps, mu)) > 0.1


def test_si_plane_wave_through_the_scales_has_zero_residual():
    """An SI TE plane wave (scipy's c and mu_0) is a solution of the dimensionless equations."""
    scales = pinn.Scales(length=0.7, electric_field=3.0, origin=(0.2, -0.1))
    wavelength, e_peak = 0.3, 5.0  # m, V/m
    eta0 = const.mu_0 * const.c

    def fields_si(points_si):  # Ey = eta0 Hz travelling along +x in vacuum
        x, t = points_si[:, 0], points_si[:, 2]
        ey = e_peak * torch.cos(2 * math.pi / wavelength * (x - const.c * t))
        return torch.stack([torch.zeros_like(ey), ey, ey / eta0], 1)

    p = random_points(300, 3, seed=3)
    origin = torch.tensor(scales.origin, **torch_f64)
    points_si = torch.cat([p[:, :2] * 0.7 + origin, p[:, 2:] * 0.7 / const.c], 1)
    torch.testing.assert_close(scales.points(points_si), p)
    units = torch.tensor([scales.electric_field, scales.electric_field, scales.magnetic_field], **torch_f64)
    fields = fields_si(points_si) / units
    for residual in pinn.maxwell_te_residual(p, fields):
        assert residual.abs().max() < 1e-13 * 2 * math.pi / wavelength * 0.7 * e_peak / 3.0


def test_mur_condition_absorbs_an_outgoing_wave_and_not_an_incoming_one():
    p = random_points(200, 3, seed=4)
    speed = 0.6
    normals = torch.tensor([[1.0, 0.0]], **torch_f64).expand(200, 2)  # right side, outward +x

    def wave(direction):
        return torch.sin(5 * (direction * p[:, 0] - speed * p[:, 2]))[:, None] * torch.ones(1, 3, **torch_f64)

    outgoing = pinn.mur_residual(p, wave(1.0), normals, speed)
    assert outgoing.shape == (200, 3) and outgoing.abs().max() < 1e-13
    incoming = pinn.mur_residual(p, wave(-1.0), normals, speed)
    assert incoming.abs().max() > 1.0


def test_helmholtz_and_sommerfeld_vanish_for_an_outgoing_plane_wave():
    k, eps = 7.0, 2.0
    p = random_points(300, 2, seed=5)
    phase = k * math.sqrt(eps) * p[:, 1]  # exp(i k_medium y), outgoing through the top side
    fields = torch.stack([torch.cos(phase), torch.sin(phase)], 1)
    for residual in pinn.helmholtz_residual(p, fields, k, eps):
        assert residual.abs().max() < 1e-12 * k**2 * eps
    normals = torch.tensor([[0.0, 1.0]], **torch_f64).expand(300, 2)
    for residual in pinn.sommerfeld_residual(p, fields, normals, k * math.sqrt(eps)):
        assert residual.abs().max() < 1e-13 * k
    bottom = pinn.sommerfeld_residual(p, fields, -normals, k * math.sqrt(eps))  # incoming there
    assert bottom[0].abs().max() > k


def test_point_source_integrates_to_its_moment_in_dimensionless_units():
    setup = pinn.PointSourceSetup(source_radius=0.02, amplitude=3e-3)
    scales, source = setup.scales(), setup.source()
    axis = torch.linspace(0.3, 0.7, 801, **torch_f64)
    xx, yy = torch.meshgrid(axis, axis, indexing="ij")
    times = torch.tensor([0.7e-9, 1.27e-9], **torch_f64)
    for time in times:
        points_si = torch.stack([xx.flatten(), yy.flatten(), torch.full_like(xx.flatten(), time)], 1)
        density = source.dimensionless(scales.points(points_si), scales, magnetic=True)
        cell = (axis[1] - axis[0]) ** 2 / scales.length**2
        integral = density.sum() * cell
        expected = source.waveform(time) * math.copysign(1.0, setup.amplitude)
        torch.testing.assert_close(integral, expected, rtol=1e-9, atol=1e-12)


def test_point_source_problem_parametric_inputs_and_zero_initial_fields():
    setup = pinn.PointSourceSetup(permittivity=(1.0, 4.0))
    problem, scales = pinn.point_source_problem(setup, n_domain=64, n_source=32, n_boundary=32)
    assert problem.inputs == ("x", "y", "t", "permittivity") and problem.outputs == ("Ex", "Ey", "Hz")
    model = pinn.default_model(problem, hidden_features=16, hidden_layers=2)
    points = torch.rand(10, 4)
    points[:, 2] = 0.0
    assert model(points).abs().max() == 0.0
    trainer = pde.Trainer(problem, model, steps=3, progress=False)
    trainer.fit()
    assert trainer.evaluations == 3 * (64 + 32 + 32)
    assert set(trainer.history) >= {"loss/maxwell", "loss/source", "loss/mur"}


def test_bad_inputs():
    p = random_points(5, 3)
    with pytest.raises(ValueError, match="maxwell_te_residual: fields must be \\(B, 3\\)"):
        pinn.maxwell_te_residual(p, p[:, :2] * 1.0)
    with pytest.raises(ValueError, match="radius must be a positive length"):
        pinn.PointSource((0, 0), 0.0, math.sin)
    with pytest.raises(ValueError, match="polarization must be 'TE' or 'TM'"):
        pinn.point_source_problem(pinn.PointSourceSetup(polarization="TEM"))
    with pytest.raises(ValueError, match="current must be \\(5, 3\\)"):
        pinn.maxwell_tm_residual(p, p * 1.0, current=torch.zeros(5, 2))
    problem, _ = pinn.point_source_problem(pinn.PointSourceSetup(), 8, 8, 8)
    from common import nn as cnn

    with pytest.raises(ValueError, match="model takes 4 inputs but the problem has 3"):
        pde.Trainer(problem, cnn.MLP(4, 3))
    three_inputs = cnn.MultiScaleMLP(3, 1, (1,), 8, 1, "sin")
    with pytest.raises(ValueError, match="inputs \\(x, y, t \\[, parameters\\], s\\) and 1 output"):
        pinn.PotentialTE(three_inputs, radial_center=(0.5, 0.5))


def test_fdtd_reference_satisfies_the_dimensionless_te_equations_with_the_same_source():
    """The FDTD fields, in the PINN's units, obey mu_r dHz/dt + dEy/dx - dEx/dy + Mz = 0 (Yee differences).

    This pins down what the benchmark compares: sign conventions, the field and time units of
    :class:`Scales`, the source density of :class:`PointSource`, and the Yee positions and times
    (H half a step behind E) that ``fdtd_reference`` attaches to each sample.
    """
    setup = pinn.PointSourceSetup(
        lower=(0.0, 0.0),
        upper=(0.3, 0.3),
        duration=0.5e-9,
        source_position=(0.15, 0.15),
        source_radius=0.012,
        delay=0.3e-9,
        permeability=2.0,
        amplitude=2.0,
    )
    reference = pinn.fdtd_reference(setup, cell_size=6e-3, frames=10**6, stride=1, pml_cells=8)
    scales = setup.scales()

    def frames(name):
        points = reference.points[name]
        xs, ys, ts = (torch.unique(points[:, axis]) for axis in (0, 1, 2))
        units = scales.electric_field if name.startswith("E") else scales.magnetic_field
        return reference.values[name].reshape(len(ts), len(xs), len(ys)) / units, xs, ys, ts

    hz, hx_axis, hy_axis, h_times = frames("Hz")
    ex, ex_x, ex_y, e_times = frames("Ex")
    ey, ey_x, ey_y, _ = frames("Ey")
    assert torch.allclose(ex_x, hx_axis) and torch.allclose(ey_y, hy_axis)  # Ex, Ey share Hz's x, y
    dt = float(e_times[1] - e_times[0]) / scales.time
    dx = float(ey_x[1] - ey_x[0]) / scales.length
    torch.testing.assert_close(h_times[1:] - 0.5 * dt * scales.time, e_times[:-1])  # H half a step behind E
    # Hz node (i, j) sits between Ey nodes i and i + 1 (x) and Ex nodes j and j + 1 (y)
    d_hz_dt = (hz[1:] - hz[:-1]) / dt  # centred on E times e_times[:-1]
    d_ey_dx = (ey[:-1, 1:, :] - ey[:-1, :-1, :]) / dx
    d_ex_dy = (ex[:-1, :, 1:] - ex[:-1, :, :-1]) / dx
    tt, xx, yy = torch.meshgrid(e_times[:-1], hx_axis, hy_axis, indexing="ij")
    points = scales.points(torch.stack([xx, yy, tt], -1).reshape(-1, 3))
    source = setup.source().dimensionless(points, scales, magnetic=True).reshape(tt.shape)
    # the FDTD carries the source on the nodes within 4 radii (the tail beyond is < 4e-4 of the peak)
    inside = torch.hypot(xx - 0.15, yy - 0.15) <= 4 * setup.source_radius
    assert source[~inside].abs().max() < 4e-4 * source.abs().max()
    source = torch.where(inside, source, 0.0)
    residual = 2.0 * d_hz_dt + d_ey_dx - d_ex_dy + source
    assert source.abs().max() > 10  # the source is on and large during these steps
    assert residual.abs().max() < 1e-9 * d_hz_dt.abs().max()
    flipped = 2.0 * d_hz_dt + d_ey_dx - d_ex_dy - source  # the opposite sign convention fails
    assert flipped.abs().max() > 0.5 * source.abs().max()


def _small_potential(particular=None, permittivity=1.0, radial_center=None):
    from common import nn as cnn

    torch.manual_seed(0)
    radial = radial_center is not None
    center, scale = (0.5, 0.5, 0.3) + (0.4,) * radial, (2, 2, 3) + (2.5,) * radial
    network = cnn.MultiScaleMLP(3 + radial, 1, (1, 3), 16, 2, "sin", input_center=center, input_scale=scale)
    return pinn.PotentialTE(
        network,
        tau=0.1,
        amplitude=0.5,
        permittivity=permittivity,
        particular=particular,
        radial_center=radial_center,
        radial_softening=0.03,
    ).double()


@pytest.mark.parametrize("radial_center", [None, (0.45, 0.55)])
def test_potential_jet_equals_autograd_derivatives_of_the_potential(radial_center):
    """The forward-mode (Taylor) value, gradient and Hessian equal reverse-mode autodiff of psi, also with
    the softened distance to a centre as an extra network input."""
    model = _small_potential(radial_center=radial_center)
    p = random_points(64, 3, seed=6)
    if radial_center is not None:  # points close to the centre, where s curves most
        p = torch.cat([p[:32], p[32:] * torch.tensor([0.04, 0.04, 1.0]) + torch.tensor([0.43, 0.53, 0.0])])
    jet = model(p)
    ramp = -torch.expm1(-p[:, 2] / 0.1)
    inputs = p
    if radial_center is not None:
        distance = ((p[:, :2] - torch.tensor(radial_center, **torch_f64)).pow(2).sum(1) + 0.03**2).sqrt()
        inputs = torch.cat([p, distance[:, None]], 1)
    psi = 0.5 * ramp**2 * model.network(inputs)[:, 0]
    hessian = ad.hessian(psi, p)
    expected = torch.cat(
        [psi[:, None], ad.grad(psi, p), torch.stack([hessian[:, a, b] for a, b in PAIRS], 1)], 1
    )
    assert jet.shape == (64, len(pinn.POTENTIAL_JET))
    torch.testing.assert_close(jet, expected, rtol=1e-12, atol=1e-12 * float(expected.detach().abs().max()))
    start = torch.rand(20, 3, **torch_f64) * torch.tensor([1.0, 1.0, 0.0], **torch_f64)
    assert model.fields(start).abs().max() == 0.0  # hard zero initial fields
    assert model(start)[:, [0, 3]].abs().max() == 0.0  # psi and psi_t vanish at t = 0


@pytest.mark.parametrize("eps, mu", [(1.0, 1.0), (2.5, 1.5)])
def test_potential_fields_satisfy_both_e_equations_and_leave_the_wave_equation(eps, mu):
    """Fields of a potential, through autodiff and maxwell_te_residual: the E rows vanish identically,
    the Hz row is the wave residual of the forward-mode jet."""
    model = _small_potential(permittivity=eps)
    p = random_points(64, 3, seed=7)
    jet = model(p)
    source = torch.sin(7 * p[:, 0]) * p[:, 2]
    current = torch.stack([torch.zeros_like(source), torch.zeros_like(source), source], 1)
    ex_row, ey_row, hz_row = pinn.maxwell_te_residual(p, pinn.potential_fields(jet, eps), eps, mu, current)
    scale = float(jet[:, 4:].detach().abs().max())
    assert ex_row.abs().max() < 1e-12 * scale and ey_row.abs().max() < 1e-12 * scale
    torch.testing.assert_close(
        hz_row, pinn.wave_potential_residual(jet, eps, mu, source), rtol=1e-11, atol=1e-11 * scale
    )
    assert hz_row.abs().max() > 1e-3 * scale  # a random network is not a solution


def test_wave_and_mur_potential_residuals_vanish_for_an_outgoing_plane_wave():
    eps, mu, k = 2.0, 1.5, 6.0
    speed = 1 / math.sqrt(eps * mu)
    p = random_points(100, 3, seed=8)
    psi = torch.sin(k * (p[:, 0] - speed * p[:, 2]))  # travels along +x
    hessian = ad.hessian(psi, p)
    jet = torch.cat([psi[:, None], ad.grad(psi, p), torch.stack([hessian[:, a, b] for a, b in PAIRS], 1)], 1)
    assert pinn.wave_potential_residual(jet, eps, mu).abs().max() < 1e-12 * k**2
    right = torch.tensor([[1.0, 0.0]], **torch_f64).expand(100, 2)
    assert pinn.mur_potential_residual(jet, right, eps, speed).abs().max() < 1e-12 * k**2
    assert pinn.mur_potential_residual(jet, -right, eps, speed).abs().max() > 1.0  # incoming on the left side


def test_engquist_majda_condition_matches_its_plane_wave_reflection_law():
    """For a plane wave leaving through x = 1 at angle theta, the first-order (Mur) residual on Hz is
    eps k^2 v^2 sin(phase) (cos theta - 1), the second-order one eps k^2 v^2 sin(phase)
    (cos theta - 1 + sin^2 theta / 2): zero at normal incidence, O(theta^4) instead of O(theta^2)."""
    eps, mu, k = 2.0, 1.5, 6.0
    speed = 1 / math.sqrt(eps * mu)
    p = random_points(100, 3, seed=11)
    right = torch.tensor([[1.0, 0.0]], **torch_f64).expand(100, 2)
    for theta in (0.0, 0.3, 0.7):
        phase = k * (math.cos(theta) * p[:, 0] + math.sin(theta) * p[:, 1] - speed * p[:, 2])
        psi = torch.sin(phase)
        hessian = ad.hessian(psi, p)
        jet = torch.cat(
            [psi[:, None], ad.grad(psi, p), torch.stack([hessian[:, a, b] for a, b in PAIRS], 1)], 1
        )
        scale = eps * k**2 * speed**2 * torch.sin(phase)
        first = pinn.mur_potential_residual(jet, right, eps, speed)[:, 2]
        second = pinn.engquist_majda_potential_residual(jet, right, eps, speed)
        assert second.shape == (100, 1)
        torch.testing.assert_close(first, scale * (math.cos(theta) - 1), rtol=0, atol=1e-11 * k**2)
        expected = scale * (math.cos(theta) - 1 + math.sin(theta) ** 2 / 2)
        torch.testing.assert_close(second[:, 0], expected, rtol=0, atol=1e-11 * k**2)
    # an incoming wave (through the left side's normal) is not absorbed
    left = -right
    assert pinn.engquist_majda_potential_residual(jet, left, eps, speed).abs().max() > 1.0
    setup = pinn.PointSourceSetup(duration=1e-9)
    with pytest.raises(ValueError, match="absorbing_order must be 1, or 2 with formulation='potential'"):
        pinn.point_source_problem(setup, absorbing_order=2)


def test_point_source_potential_carries_the_source_laplacian():
    """laplace psi_s = Mz (the PointSource density) without cutoff; its jet is consistent with autodiff."""
    setup = pinn.PointSourceSetup(duration=2e-9, amplitude=2.0)
    scales, source = setup.scales(), setup.source()
    sharp = pinn.PointSourcePotential(source, scales, cutoff=None)
    generator = torch.Generator().manual_seed(9)
    p = torch.rand(200, 3, generator=generator, **torch_f64) * torch.tensor([1.0, 1.0, 0.6], **torch_f64)
    p[:100, :2] = torch.tensor(sharp.center, **torch_f64) + 0.03 * torch.randn(
        100, 2, generator=generator, **torch_f64
    )
    p[0, :2] = torch.tensor(sharp.center, **torch_f64)  # the centre itself
    p.requires_grad_()
    jet = sharp(p)
    density = source.dimensionless(p, scales, magnetic=True)
    assert density.abs().max() > 100
    torch.testing.assert_close(
        jet[:, 4] + jet[:, 7], density, rtol=0, atol=1e-12 * float(density.detach().abs().max())
    )
    # spatial derivatives against reverse-mode autodiff of the value column (away from the centre)
    gradient = ad.grad(jet[:, 0], p)
    torch.testing.assert_close(jet[1:, 1:3], gradient[1:, :2], rtol=1e-8, atol=1e-8)
    # the cutoff confines it: no field far from the source
    confined = pinn.PointSourcePotential(source, scales, cutoff=0.05)
    far = torch.tensor([[0.95, 0.95, 0.4], [0.05, 0.5, 0.4]], **torch_f64)
    assert confined(far)[:, 1:3].abs().max() < 1e-8 * sharp(far)[:, 1:3].abs().max()


def test_potential_problem_trains_with_the_default_potential_model():
    setup = pinn.PointSourceSetup(duration=1e-9)
    problem, scales = pinn.point_source_problem(setup, 64, 32, 32, formulation="potential")
    assert problem.outputs == pinn.POTENTIAL_JET
    model = pinn.default_model(problem, scales=(1, 2), hidden_features=16, hidden_layers=2)
    trainer = pde.Trainer(problem, model, steps=3, progress=False)
    trainer.fit()
    assert set(trainer.history) >= {"loss/maxwell", "loss/source", "loss/mur"}
    assert model.field_model()(torch.rand(5, 3)).shape == (5, 3)
    radial = pinn.default_model(
        problem, scales=(1,), hidden_features=16, hidden_layers=2, radial_softening=0.05
    )
    assert radial.in_features == 3 and radial.network.in_features == 4  # (x, y, t) and s
    assert radial.radial_center == pytest.approx(setup.source_position)  # L = 1 m: the same numbers
    pde.Trainer(problem, radial, steps=2, progress=False).fit()
    with pytest.raises(ValueError, match="potential formulation needs polarization .TE."):
        pinn.point_source_problem(pinn.PointSourceSetup(polarization="TM"), formulation="potential")
    with pytest.raises(ValueError, match="formulation must be 'fields' or 'potential'"):
        pinn.point_source_problem(setup, formulation="vector")


def test_parametric_potential_model_takes_the_permittivity_column():
    setup = pinn.PointSourceSetup(duration=1e-9, permittivity=(1.0, 4.0))
    problem, _ = pinn.point_source_problem(setup, 32, 16, 16, formulation="potential")
    assert problem.inputs == ("x", "y", "t", "permittivity")
    model = pinn.default_model(problem, scales=(1, 2), hidden_features=16, hidden_layers=2).double()
    p = random_points(40, 4, seed=10, low=0.1, high=1.0)
    jet = model(p)
    # spatial derivatives only see x and y (the source potential's q(t) is a constant to autograd)
    gradient = ad.grad(jet[:, 0], p)
    torch.testing.assert_close(jet[:, 1:3], gradient[:, :2], rtol=1e-9, atol=1e-12)
    fields = model.fields(p)
    torch.testing.assert_close(fields[:, 2], p[:, 3] * jet[:, 3])  # Hz = eps_r psi_t with the column's eps_r
    trainer = pde.Trainer(problem, model, steps=2, progress=False)
    trainer.fit()
    assert trainer.evaluations == 2 * 64


@pytest.mark.parametrize("permittivity", [(1.0, 4.0), 2.5])
def test_retarded_time_input_is_t_minus_slowness_times_distance_and_its_jet_is_exact(permittivity):
    """With ``retarded_time`` the network's last input is ``t - sqrt(eps_r) s`` (the permittivity column's,
    or the fixed one), and the forward-mode jet of psi still equals reverse-mode autodiff in (x, y, t)."""
    setup = pinn.PointSourceSetup(duration=1e-9, permittivity=permittivity)
    problem, _ = pinn.point_source_problem(setup, 32, 16, 16, formulation="potential")
    model = pinn.default_model(
        problem,
        scales=(1, 3),
        hidden_features=16,
        hidden_layers=2,
        radial_softening=0.03,
        retarded_time=True,
        source_cutoff=0,
    ).double()
    parametric = isinstance(permittivity, tuple)
    assert model.network.in_features == model.in_features + 2 == 3 + parametric + 2
    p = random_points(48, 3 + parametric, seed=11)
    if parametric:
        with torch.no_grad():
            p[:, 3] = 1.0 + 3.0 * p[:, 3]
    eps = p[:, 3].detach() if parametric else torch.full((48,), 2.5, **torch_f64)
    jet = model(p)
    distance = ((p[:, :2] - torch.tensor(model.radial_center, **torch_f64)).pow(2).sum(1) + 0.03**2).sqrt()
    inputs = torch.cat([p, distance[:, None], (p[:, 2] - eps.sqrt() * distance)[:, None]], 1)
    ramp = -torch.expm1(-p[:, 2] / model.tau)
    torch.testing.assert_close(jet[:, 0], model.amplitude * ramp**2 * model.network(inputs)[:, 0])
    psi = jet[:, 0]
    gradient = ad.grad(psi, p)
    hessian = torch.stack([ad.grad(gradient[:, a], p) for a in range(3)], 1)
    expected = torch.cat([gradient[:, :3], torch.stack([hessian[:, a, b] for a, b in PAIRS], 1)], 1)
    scale = float(expected.detach().abs().max())
    torch.testing.assert_close(jet[:, 1:], expected, rtol=1e-10, atol=1e-10 * scale)
    with pytest.raises(ValueError, match="retarded_time needs radial_softening"):
        pinn.default_model(problem, retarded_time=True)


def test_fdtd_reference_old_resolution_keyword_warns_and_is_passed_on():
    # a permittivity range is refused before any FDTD work: the warning comes first, then the refusal
    with pytest.warns(DeprecationWarning, match=r"resolution=.*cell_size="), pytest.raises(
        ValueError, match="one permittivity"
    ):
        pinn.fdtd_reference(pinn.PointSourceSetup(permittivity=(1.0, 4.0)), resolution=5e-3)
