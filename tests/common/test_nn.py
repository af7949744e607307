"""common.nn: shapes, formulas, initialiser bounds, dtypes and errors."""

import math

import pytest
import torch
from torch import nn

from common import autodiff as ad
from common.nn import MLP, FourierFeatures, MultiScaleMLP, Sine, make_activation, siren_init_, xavier_init_


def test_mlp_shapes_and_structure():
    model = MLP(3, 2, hidden_features=16, hidden_layers=4)
    assert model(torch.rand(7, 3)).shape == (7, 2)
    assert model(torch.rand(5, 7, 3)).shape == (5, 7, 2)
    assert len(model.hidden) == 4 and model.hidden[0].in_features == 3 and model.readout.out_features == 2
    # 4x64 tanh default: parameter count of 3 -> 64 -> 64 -> 64 -> 64 -> 1
    default = MLP(3, 1)
    assert sum(p.numel() for p in default.parameters()) == (3 * 64 + 64) + 3 * (64 * 64 + 64) + (64 + 1)


def test_mlp_computes_the_layer_formula():
    model = MLP(2, 1, hidden_features=4, hidden_layers=1, activation="silu")
    inputs = torch.rand(5, 2)
    first, readout = model.hidden[0], model.readout
    hidden = inputs @ first.weight.T + first.bias
    expected = (hidden * torch.sigmoid(hidden)) @ readout.weight.T + readout.bias
    torch.testing.assert_close(model(inputs), expected)


@pytest.mark.parametrize(
    "name, function", [("tanh", torch.tanh), ("sin", torch.sin), ("silu", nn.functional.silu)]
)
def test_activations_by_name(name, function):
    values = torch.linspace(-3, 3, 11)
    torch.testing.assert_close(make_activation(name)(values), function(values))
    torch.testing.assert_close(Sine(30.0)(values), torch.sin(30.0 * values))


def test_xavier_init_statistics():
    torch.manual_seed(0)
    layer = xavier_init_(nn.Linear(400, 300))
    assert torch.all(layer.bias == 0)
    expected_std = math.sqrt(2.0 / (400 + 300))
    assert abs(layer.weight.std().item() / expected_std - 1) < 0.02


def test_siren_init_bounds():
    torch.manual_seed(0)
    model = MLP(2, 1, hidden_features=256, hidden_layers=3, activation=Sine(30.0))
    first_bound = 1.0 / 2
    hidden_bound = math.sqrt(6.0 / 256) / 30.0
    first = model.hidden[0].weight
    assert first.abs().max() <= first_bound and first.abs().max() > 0.95 * first_bound
    for layer in [*model.hidden[1:], model.readout]:
        assert layer.weight.abs().max() <= hidden_bound and layer.weight.abs().max() > 0.95 * hidden_bound
    # uniform: variance bound^2 / 3
    assert abs(model.hidden[1].weight.var().item() / (hidden_bound**2 / 3) - 1) < 0.05
    layer = siren_init_(nn.Linear(10, 10), w0=1.0, first=False)
    assert layer.weight.abs().max() <= math.sqrt(0.6)


def test_fourier_features_formula():
    generator = torch.Generator().manual_seed(0)
    features = FourierFeatures(2, 8, scale=3.0, generator=generator)
    inputs = torch.rand(6, 2)
    output = features(inputs)
    assert output.shape == (6, 16) and features.out_features == 16
    frequencies = features.frequencies
    for row in range(6):
        for column in range(8):
            phase = (
                2
                * math.pi
                * (inputs[row, 0] * frequencies[0, column] + inputs[row, 1] * frequencies[1, column])
            )
            assert abs(output[row, column] - torch.sin(phase)) < 1e-5
            assert abs(output[row, 8 + column] - torch.cos(phase)) < 1e-5
    assert list(features.parameters()) == [] and "frequencies" in dict(features.named_buffers())
    trainable = FourierFeatures(2, 8, scale=3.0, trainable=True)
    assert [name for name, _ in trainable.named_parameters()] == ["frequencies"]
    # frequencies drawn from N(0, scale^2)
    many = FourierFeatures(1, 20000, scale=3.0, generator=generator).frequencies
    assert abs(many.std().item() / 3.0 - 1) < 0.03


def test_multiscale_mlp_is_the_sum_of_scaled_subnetworks():
    torch.manual_seed(0)
    center, factor = torch.tensor([0.5, -1.0]), torch.tensor([2.0, 0.5])
    model = MultiScaleMLP(
        2, 3, scales=(1, 2, 4, 8), hidden_features=8, hidden_layers=2, input_center=center, input_scale=factor
    )
    inputs = torch.rand(10, 2)
    normalised = (inputs - center) * factor
    expected = sum(network(scale * normalised) for scale, network in zip((1, 2, 4, 8), model.subnetworks))
    torch.testing.assert_close(model(inputs), expected)
    assert len(model.subnetworks) == 4 and model(inputs).shape == (10, 3)
    # the sub-networks differ (independent initialisation)
    assert not torch.equal(model.subnetworks[0].hidden[0].weight, model.subnetworks[1].hidden[0].weight)


def test_float64_and_autodiff_through_networks():
    torch.manual_seed(0)
    for model in (
        MLP(2, 1, hidden_features=8, hidden_layers=2),
        nn.Sequential(FourierFeatures(2, 4, scale=1.0), MLP(8, 1, hidden_features=8, hidden_layers=1)),
        MultiScaleMLP(2, 1, scales=(1, 3), hidden_features=8, hidden_layers=1, input_center=(0.5, 0.5)),
    ):
        model = model.to(torch.float64)
        points = torch.rand(4, 2, dtype=torch.float64, requires_grad=True)
        output = model(points)
        assert output.dtype == torch.float64
        assert all(p.dtype == torch.float64 for p in [*model.parameters(), *model.buffers()])
        assert torch.autograd.gradcheck(lambda x, m=model: ad.laplacian(m(x), x), (points,))


def test_bad_names_and_sizes_raise():
    with pytest.raises(ValueError, match="unknown activation 'relu6'"):
        MLP(2, 1, activation="relu6")
    with pytest.raises(TypeError, match="activation must be a name or an nn.Module"):
        make_activation(3)
    with pytest.raises(ValueError, match="unknown init 'he'"):
        MLP(2, 1, init="he")
    with pytest.raises(ValueError, match="hidden_layers must be a positive int"):
        MLP(2, 1, hidden_layers=0)
    with pytest.raises(ValueError, match="in_features must be a positive int"):
        MLP(2.5, 1)
    with pytest.raises(ValueError, match=r"MLP expects inputs \(\.\.\., 2\)"):
        MLP(2, 1)(torch.rand(4, 3))
    with pytest.raises(ValueError, match="num_frequencies must be a positive int"):
        FourierFeatures(2, 0, scale=1.0)
    with pytest.raises(ValueError, match="scale must be positive"):
        FourierFeatures(2, 4, scale=-1.0)
    with pytest.raises(ValueError, match="FourierFeatures expects inputs"):
        FourierFeatures(2, 4)(torch.rand(3, 1))
    with pytest.raises(ValueError, match="scales must be a non-empty sequence"):
        MultiScaleMLP(2, 1, scales=())
    with pytest.raises(ValueError, match="input_center must have 2 entries"):
        MultiScaleMLP(2, 1, input_center=(0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="w0 must be a positive"):
        Sine(0.0)
