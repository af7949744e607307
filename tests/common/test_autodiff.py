"""common.autodiff against analytic derivatives of closed-form functions.

The reference derivatives are exact symbolic derivatives (sympy, installed with
torch) of polynomials and sin/exp products in 1, 2 and 3 inputs, evaluated in
float64; every partial up to 4th order is compared to 1e-10.
"""

import itertools
import math

import pytest
import sympy
import torch
from torch import nn

from common import autodiff as ad
from common.nn import MLP, FourierFeatures, MultiScaleMLP, Sine

TOLERANCE = {"rtol": 1e-10, "atol": 1e-10}

SYMBOLS = sympy.symbols("x0 x1 x2")
x0, x1, x2 = SYMBOLS
# (name, dimension, expression): polynomials and sin/exp products with non-trivial mixed partials.
FIELDS = [
    ("poly1d", 1, x0**5 - 3 * x0**3 + 2 * x0 - 1),
    ("sinexp1d", 1, sympy.sin(2 * x0) * sympy.exp(-x0 / 2)),
    ("poly2d", 2, x0**3 * x1**2 + x0 * x1**4 - 2 * x0**2 + x1),
    ("sinexp2d", 2, sympy.sin(x0 + 2 * x1) * sympy.exp(x0 * x1)),
    ("poly3d", 3, x0**2 * x1 * x2**3 + x0**4 - x1**2 * x2 + 3),
    ("sinexp3d", 3, sympy.sin(x0) * sympy.exp(0.5 * x1) * sympy.cos(x2 - x0 * x1)),
]


def torch_function(expression, dimension):
    """Evaluate a sympy expression of x0..x{d-1} on a (B, d) tensor, as a differentiable torch graph."""
    function = sympy.lambdify(SYMBOLS[:dimension], expression, modules=torch)
    return lambda points: function(*points.unbind(dim=1)) + 0 * points[:, 0]


def reference(expression, dimension, points):
    """Exact value of a sympy expression at (B, d) points, as float64 tensor (B,)."""
    function = sympy.lambdify(SYMBOLS[:dimension], expression, modules="math")
    return torch.tensor([float(function(*row)) for row in points.tolist()], dtype=torch.float64)


def sample_points(dimension, count=12, seed=0):
    generator = torch.Generator().manual_seed(seed)
    points = 2 * torch.rand(count, dimension, generator=generator, dtype=torch.float64) - 1
    return points.requires_grad_()


def multi_indices(dimension, max_order=4):
    for order in range(max_order + 1):
        yield from itertools.combinations_with_replacement(range(dimension), order)


@pytest.mark.parametrize("name, dimension, expression", FIELDS, ids=[field[0] for field in FIELDS])
def test_every_partial_up_to_fourth_order(name, dimension, expression):
    points = sample_points(dimension)
    field = torch_function(expression, dimension)(points)
    derivatives = ad.Derivatives(field.unsqueeze(1), points)  # (B, 1) input
    for wrt in multi_indices(dimension):
        partial = sympy.diff(expression, *[SYMBOLS[i] for i in wrt]) if wrt else expression
        expected = reference(partial, dimension, points.detach())
        torch.testing.assert_close(derivatives.of(wrt), expected, **TOLERANCE, msg=f"{name} wrt={wrt}")
        # Mixed partials in another order, through the one-shot function on a fresh graph.
        fresh = ad.derivative(torch_function(expression, dimension)(points), points, tuple(reversed(wrt)))
        torch.testing.assert_close(fresh, expected, **TOLERANCE, msg=f"{name} wrt={wrt[::-1]}")


@pytest.mark.parametrize("name, dimension, expression", FIELDS, ids=[field[0] for field in FIELDS])
def test_grad_hessian_laplacian_hvp(name, dimension, expression):
    points = sample_points(dimension, seed=1)
    field = torch_function(expression, dimension)(points)
    values = points.detach()
    gradient = torch.stack(
        [reference(sympy.diff(expression, s), dimension, values) for s in SYMBOLS[:dimension]], 1
    )
    hessian = torch.stack(
        [
            torch.stack(
                [reference(sympy.diff(expression, a, b), dimension, values) for b in SYMBOLS[:dimension]], 1
            )
            for a in SYMBOLS[:dimension]
        ],
        1,
    )
    torch.testing.assert_close(ad.grad(field, points), gradient, **TOLERANCE)
    torch.testing.assert_close(ad.hessian(field, points), hessian, **TOLERANCE)
    torch.testing.assert_close(
        ad.laplacian(field, points), hessian.diagonal(dim1=1, dim2=2).sum(1), **TOLERANCE
    )
    vectors = torch.linspace(-1, 2, points.numel(), dtype=torch.float64).reshape(points.shape)
    torch.testing.assert_close(
        ad.hvp(field, points, vectors), (hessian @ vectors.unsqueeze(2))[..., 0], **TOLERANCE
    )
    torch.testing.assert_close(ad.hvp(field, points, vectors[0]), hessian @ vectors[0], **TOLERANCE)


def test_partial_laplacian_over_selected_dims():
    expression = sympy.sin(x0) * x1**3 * sympy.exp(x2)
    points = sample_points(3)
    field = torch_function(expression, 3)(points)
    expected = reference(sympy.diff(expression, x0, 2) + sympy.diff(expression, x1, 2), 3, points.detach())
    torch.testing.assert_close(ad.laplacian(field, points, dims=(0, 1)), expected, **TOLERANCE)


def test_outputs_keep_the_graph_for_higher_derivatives():
    """d/dx1 of the Laplacian (a third derivative taken through the returned tensor)."""
    expression = sympy.sin(x0 + 2 * x1) * sympy.exp(x0 * x1)
    points = sample_points(2)
    lap = ad.laplacian(torch_function(expression, 2)(points), points)
    expected = reference(
        sympy.diff(sympy.diff(expression, x0, 2) + sympy.diff(expression, x1, 2), x1), 2, points.detach()
    )
    torch.testing.assert_close(ad.grad(lap, points)[:, 1], expected, **TOLERANCE)


# vector fields: v = (x1 x2, x0^2 sin x2, exp(x0 x1))
VECTOR = (x1 * x2, x0**2 * sympy.sin(x2), sympy.exp(x0 * x1))


def vector_field(points):
    return torch.stack([torch_function(component, 3)(points) for component in VECTOR], dim=1)


def test_jacobian_divergence_curl():
    points = sample_points(3)
    values = points.detach()
    jacobian = torch.stack(
        [torch.stack([reference(sympy.diff(c, s), 3, values) for s in SYMBOLS], 1) for c in VECTOR], 1
    )
    divergence = sum(sympy.diff(VECTOR[i], SYMBOLS[i]) for i in range(3))
    curl = (
        sympy.diff(VECTOR[2], x1) - sympy.diff(VECTOR[1], x2),
        sympy.diff(VECTOR[0], x2) - sympy.diff(VECTOR[2], x0),
        sympy.diff(VECTOR[1], x0) - sympy.diff(VECTOR[0], x1),
    )
    v = vector_field(points)
    torch.testing.assert_close(ad.jacobian(v, points), jacobian, **TOLERANCE)
    torch.testing.assert_close(ad.divergence(v, points), reference(divergence, 3, values), **TOLERANCE)
    torch.testing.assert_close(
        ad.curl(v, points), torch.stack([reference(c, 3, values) for c in curl], 1), **TOLERANCE
    )
    # identities, through the kept graph: div(curl v) = 0 and curl(grad u) = 0
    torch.testing.assert_close(
        ad.divergence(ad.curl(v, points), points), torch.zeros(len(values), dtype=torch.float64), **TOLERANCE
    )
    u = torch_function(FIELDS[-1][2], 3)(points)
    torch.testing.assert_close(ad.curl(ad.grad(u, points), points), torch.zeros_like(values), **TOLERANCE)


def test_linear_and_constant_orders_give_zeros():
    points = sample_points(2)
    u = 3 * points[:, 0] - points[:, 1]  # second derivatives do not depend on x at all
    torch.testing.assert_close(ad.hessian(u, points), torch.zeros(len(points), 2, 2, dtype=torch.float64))
    torch.testing.assert_close(
        ad.derivative(u, points, (0, 1, 1, 0)), torch.zeros(len(points), dtype=torch.float64)
    )
    torch.testing.assert_close(ad.derivative(u, points, ()), u)
    torch.testing.assert_close(
        ad.hvp(u, points, torch.ones(2, dtype=torch.float64)), torch.zeros_like(points)
    )


def test_lower_orders_are_reused(monkeypatch):
    """A Laplacian in 3D costs 1 + 3 reverse passes, a Hessian afterwards costs none."""
    calls = []
    original = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: calls.append(1) or original(*a, **k))
    points = sample_points(3)
    derivatives = ad.Derivatives(torch_function(FIELDS[-1][2], 3)(points), points)
    derivatives.laplacian()
    assert len(calls) == 4
    derivatives.hessian()
    derivatives.of((2, 0))
    assert len(calls) == 4
    derivatives.of((0, 1, 2))  # one more pass from an existing second-order parent
    assert len(calls) == 5


def small_mlp(weight1, bias1, weight2, points):
    return torch.tanh(points @ weight1 + bias1) @ weight2


def test_gradcheck_through_laplacian_of_mlp():
    generator = torch.Generator().manual_seed(3)
    weight1 = torch.randn(2, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    bias1 = torch.randn(5, generator=generator, dtype=torch.float64, requires_grad=True)
    weight2 = torch.randn(5, 1, generator=generator, dtype=torch.float64, requires_grad=True)
    points = sample_points(2, count=4)

    def laplacian_of_mlp(weight1, bias1, weight2, points):
        return ad.laplacian(small_mlp(weight1, bias1, weight2, points), points)

    def fourth_derivative_of_mlp(weight1, bias1, weight2, points):
        return ad.derivative(small_mlp(weight1, bias1, weight2, points), points, (0, 0, 1, 1))

    inputs = (weight1, bias1, weight2, points)
    assert torch.autograd.gradcheck(laplacian_of_mlp, inputs)
    assert torch.autograd.gradgradcheck(laplacian_of_mlp, inputs)
    assert torch.autograd.gradcheck(fourth_derivative_of_mlp, inputs)
    assert torch.autograd.gradcheck(
        lambda *args: ad.curl(torch.cat([small_mlp(*args)] * 3, 1) * args[3], args[3]),
        (weight1.new_ones(3, 5).requires_grad_(), bias1, weight2, sample_points(3, 4)),
    )


def test_laplacian_loss_gradient_matches_finite_differences():
    """A Poisson residual loss differentiated with respect to one network weight."""
    torch.manual_seed(0)
    model = MLP(2, 1, hidden_features=16, hidden_layers=2).to(torch.float64)
    points = sample_points(2, count=32)
    source = torch.sin(points.detach()[:, 0])

    def loss():
        return (ad.laplacian(model(points), points) - source).pow(2).mean()

    model.zero_grad()
    loss().backward()
    weight = next(model.parameters())
    analytic = weight.grad[3, 1].item()
    step = 1e-6
    original = weight.detach().clone()
    losses = []
    for shift in (step, -step):
        with torch.no_grad():
            weight.copy_(original)
            weight[3, 1] += shift
        losses.append(loss().item())
    with torch.no_grad():
        weight.copy_(original)
    plus, minus = losses
    assert analytic != 0
    assert abs(analytic - (plus - minus) / (2 * step)) < 1e-8 * max(1.0, abs(analytic))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_follows_inputs(dtype):
    points = torch.rand(5, 2, dtype=dtype, requires_grad=True)
    u = (points**3).sum(1)
    assert ad.laplacian(u, points).dtype == dtype
    torch.testing.assert_close(ad.laplacian(u, points), 6 * points.detach().sum(1))


def test_bad_input_raises_naming_the_problem():
    points = sample_points(3)
    u = torch_function(FIELDS[-1][2], 3)(points)
    with pytest.raises(ValueError, match="x does not require grad"):
        ad.grad(u, points.detach())
    with pytest.raises(ValueError, match="u does not depend on x"):
        ad.laplacian(torch.sin(sample_points(3, seed=5)[:, 0]), points)
    with pytest.raises(ValueError, match="u does not depend on x"):
        ad.grad(u.detach(), points)
    with pytest.raises(ValueError, match="batch size of x"):
        ad.grad(u[:5], points)
    with pytest.raises(ValueError, match=r"u must be a scalar field"):
        ad.hessian(torch.stack([u, u], 1), points)
    with pytest.raises(ValueError, match=r"x must have shape \(B, d\)"):
        ad.grad(u, points[:, 0])
    with pytest.raises(ValueError, match="wrt index 3 .* d=3"):
        ad.derivative(u, points, (0, 3))
    with pytest.raises(ValueError, match="wrt index -1"):
        ad.derivative(u, points, (-1,))
    with pytest.raises(TypeError, match="wrt must be a tuple"):
        ad.derivative(u, points, 1)
    with pytest.raises(ValueError, match="curl needs a 3D field"):
        ad.curl(points[:, :2] * 2, points)
    with pytest.raises(ValueError, match="divergence needs v with as many components"):
        ad.divergence(points[:, :2] * 2, points)
    with pytest.raises(ValueError, match="v does not depend on x"):
        ad.jacobian(sample_points(3, seed=4) * 2, points)
    with pytest.raises(ValueError, match="vector must have shape"):
        ad.hvp(u, points, torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="dims must name distinct"):
        ad.laplacian(u, points, dims=(0, 0))


# --- forward (model-aware) fast paths: forward_laplacian, forward_derivative and forward_hessian ---

SYMPY_ACTIVATIONS = {
    "tanh": (nn.Tanh(), sympy.tanh),
    "sine": (Sine(1.5), lambda h: sympy.sin(1.5 * h)),
    "silu": (nn.SiLU(), lambda h: h / (1 + sympy.exp(-h))),
}


def tiny_network(dimension, activation, seed):
    """Linear(d, 3) -> activation -> Linear(3, 1) in float64, and its exact partials.

    u = sum_j c_j s(w_j . x + b_j) + c0, so
    d^alpha u = sum_j c_j s^(|alpha|)(w_j . x + b_j) prod_i w_ji^alpha_i,
    with the derivatives s^(k) of the activation taken symbolically.
    """
    torch.manual_seed(seed)
    module, symbolic = SYMPY_ACTIVATIONS[activation]
    model = nn.Sequential(nn.Linear(dimension, 3), module, nn.Linear(3, 1)).to(torch.float64)
    hidden = sympy.Symbol("h")
    activation_derivatives = [
        sympy.lambdify(hidden, sympy.diff(symbolic(hidden), hidden, k), modules="math") for k in range(5)
    ]
    weights, biases = model[0].weight.detach().tolist(), model[0].bias.detach().tolist()
    readout, offset = model[2].weight.detach()[0].tolist(), model[2].bias.item()

    def partial(points, wrt):
        values = []
        for point in points.tolist():
            total = offset if not wrt else 0.0
            for w, b, c in zip(weights, biases, readout):
                chain = math.prod(w[i] for i in wrt)
                total += (
                    c * chain * activation_derivatives[len(wrt)](sum(wi * xi for wi, xi in zip(w, point)) + b)
                )
            values.append(total)
        return torch.tensor(values, dtype=torch.float64)

    return model, partial


@pytest.mark.parametrize("activation", sorted(SYMPY_ACTIVATIONS))
@pytest.mark.parametrize("dimension", [1, 2, 3])
def test_forward_paths_against_analytic_network(activation, dimension):
    model, partial = tiny_network(dimension, activation, seed=dimension)
    points = sample_points(dimension, count=6).detach()
    for wrt in multi_indices(dimension):
        result = ad.forward_derivative(model, points, wrt)
        assert result.shape == (len(points), 1)
        torch.testing.assert_close(
            result[:, 0], partial(points, wrt), **TOLERANCE, msg=f"{activation} wrt={wrt}"
        )
    jet = ad.forward_laplacian(model, points)
    gradient = torch.stack([partial(points, (i,)) for i in range(dimension)], 1)
    laplacian = sum(partial(points, (i, i)) for i in range(dimension))
    torch.testing.assert_close(jet.value[:, 0], partial(points, ()), **TOLERANCE)
    torch.testing.assert_close(jet.jacobian[:, 0], gradient, **TOLERANCE)
    torch.testing.assert_close(jet.laplacian[:, 0], laplacian, **TOLERANCE)
    hessian_jet = ad.forward_hessian(model, points)
    torch.testing.assert_close(hessian_jet.value[:, 0], partial(points, ()), **TOLERANCE)
    torch.testing.assert_close(hessian_jet.first[:, :, 0].T, gradient, **TOLERANCE)
    for row, pair in enumerate(ad.HessianJet.pairs(dimension)):
        torch.testing.assert_close(hessian_jet.second[row, :, 0], partial(points, pair), **TOLERANCE)


def common_networks():
    torch.manual_seed(0)
    return {
        "mlp_tanh": MLP(3, 2, hidden_features=8, hidden_layers=3),
        "fourier_mlp": nn.Sequential(
            FourierFeatures(3, 4, scale=0.5), MLP(8, 1, hidden_features=8, hidden_layers=2)
        ),
        "multiscale_sine": MultiScaleMLP(
            3,
            2,
            scales=(1, 3),
            hidden_features=8,
            hidden_layers=2,
            activation=Sine(2.0),
            input_center=(0.1, 0, 0.3),
        ),
    }


@pytest.mark.parametrize("name", sorted(common_networks()))
def test_forward_paths_match_graph_functions_on_common_networks(name):
    model = common_networks()[name].to(torch.float64)
    points = sample_points(3, count=8)
    outputs = model(points)
    jet = ad.forward_laplacian(model, points)
    torch.testing.assert_close(jet.value, outputs, **TOLERANCE)
    torch.testing.assert_close(jet.jacobian, ad.jacobian(outputs, points), **TOLERANCE)
    for component in range(outputs.shape[1]):
        derivatives = ad.Derivatives(outputs[:, component], points)
        torch.testing.assert_close(jet.laplacian[:, component], derivatives.laplacian(), **TOLERANCE)
        torch.testing.assert_close(
            ad.forward_laplacian(model, points, dims=(2, 0)).laplacian[:, component],
            derivatives.of((0, 0)) + derivatives.of((2, 2)),
            **TOLERANCE,
        )
        for wrt in [(0, 0, 0, 0), (0, 1, 1, 2), (2, 2, 1), (1,)]:
            torch.testing.assert_close(
                ad.forward_derivative(model, points, wrt)[:, component], derivatives.of(wrt), **TOLERANCE
            )
        hessian_jet = ad.forward_hessian(model, points, dims=(2, 0))  # rows: inputs 0 and 2
        for row, dim in enumerate((0, 2)):
            torch.testing.assert_close(
                hessian_jet.first[row, :, component], derivatives.of((dim,)), **TOLERANCE
            )
        for row, (a, b) in enumerate(ad.HessianJet.pairs(2)):
            expected = derivatives.of(((0, 2)[a], (0, 2)[b]))
            torch.testing.assert_close(hessian_jet.second[row, :, component], expected, **TOLERANCE)
    # first order only: a jet without second derivatives stays without them
    first_order = ad.propagate(
        model, ad.HessianJet(points, torch.eye(3, dtype=points.dtype)[:, None, :].expand(3, len(points), 3))
    )
    assert first_order.second is None
    torch.testing.assert_close(first_order.first.permute(1, 2, 0), ad.jacobian(outputs, points), **TOLERANCE)


def test_forward_laplacian_loss_has_the_graph_laplacian_parameter_gradient():
    model = common_networks()["mlp_tanh"].to(torch.float64)
    points = sample_points(3, count=16)
    parameters = list(model.parameters())
    gradients = [
        torch.autograd.grad(
            laplacian_of().square().mean(), parameters, allow_unused=True, materialize_grads=True
        )
        for laplacian_of in (
            lambda: ad.forward_laplacian(model, points).laplacian[:, 0],
            lambda: ad.laplacian(model(points)[:, 0], points),
        )
    ]
    for forward_gradient, graph_gradient in zip(*gradients):
        torch.testing.assert_close(forward_gradient, graph_gradient, **TOLERANCE)
    assert torch.autograd.gradcheck(lambda x: ad.forward_derivative(model, x, (0, 1, 1)), (points[:3],))


def test_forward_paths_reject_unknown_modules_and_bad_points():
    model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
    with pytest.raises(TypeError, match="no forward derivative rule for module ReLU"):
        ad.forward_laplacian(model, torch.rand(3, 2))

    class ShiftedMLP(MLP):
        def forward(self, inputs):
            return super().forward(inputs + 1)

    with pytest.raises(TypeError, match="no forward derivative rule for module ShiftedMLP"):
        ad.forward_derivative(ShiftedMLP(2, 1), torch.rand(3, 2), (0,))
    with pytest.raises(ValueError, match=r"x must be a tensor of shape \(B, d\)"):
        ad.forward_derivative(MLP(2, 1), torch.rand(3), (0,))
    with pytest.raises(ValueError, match="dims must name distinct"):
        ad.forward_laplacian(MLP(2, 1), torch.rand(3, 2), dims=(1, 1))
    with pytest.raises(ValueError, match="wrt index 2"):
        ad.forward_derivative(MLP(2, 1), torch.rand(3, 2), (0, 2))
