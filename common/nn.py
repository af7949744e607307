"""Networks for fields and potentials: MLPs, Fourier features, multi-scale MLPs.

All networks are pointwise (each input row is mapped independently), so
:mod:`common.autodiff` differentiates them exactly with batched reverse passes.
Inputs are ``(..., in_features)`` tensors, outputs ``(..., out_features)``;
dtype and device follow ``module.to(...)`` as for any ``torch.nn.Module``.

Activations are chosen by name (``"tanh"``, ``"sin"``, ``"silu"``) or passed
as a module (e.g. ``Sine(w0=30.0)`` for SIREN). Initialisers:
:func:`xavier_init_` (Glorot normal weights, zero biases; the default, suited
to tanh and SiLU) and :func:`siren_init_` (Sitzmann et al. 2020; the default
when the activation is a sine).

Example:
    >>> from common.nn import MLP, FourierFeatures, MultiScaleMLP
    >>> field = MLP(3, 1, hidden_features=64, hidden_layers=4, activation="tanh")
    >>> encoded = torch.nn.Sequential(FourierFeatures(2, 32, scale=10.0), MLP(64, 1))
    >>> multiscale = MultiScaleMLP(2, 1, scales=(1, 2, 4, 8), input_center=(0.5, 0.5))
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError

__all__ = [
    "MLP",
    "ACTIVATIONS",
    "FourierFeatures",
    "MultiScaleMLP",
    "Sine",
    "make_activation",
    "siren_init_",
    "xavier_init_",
]


class Sine(nn.Module):
    """Sine activation ``sin(w0 * x)`` (SIREN).

    Args:
        w0: angular frequency factor (dimensionless); SIREN uses 30.
    """

    def __init__(self, w0: float = 1.0):
        super().__init__()
        self.w0 = checks.positive(w0, "Sine: w0")

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.w0 * inputs)

    def extra_repr(self) -> str:
        return f"w0={self.w0}"


ACTIVATIONS = {"tanh": nn.Tanh, "sin": Sine, "silu": nn.SiLU}
"""Activation names accepted by :func:`make_activation` and the networks."""


def make_activation(activation: str | nn.Module) -> nn.Module:
    """An activation module from its name (``"tanh"``, ``"sin"``, ``"silu"``) or a module, returned as is.

    Raises:
        ValueError: unknown name. TypeError: neither a string nor a module.
    """
    if isinstance(activation, nn.Module):
        return activation
    if not isinstance(activation, str):
        raise ArgumentTypeError(f"activation must be a name or an nn.Module, got {type(activation).__name__}")
    if activation.lower() not in ACTIVATIONS:
        raise ConfigurationError(
            f"unknown activation {activation!r}; expected one of {sorted(ACTIVATIONS)} or an nn.Module"
        )
    return ACTIVATIONS[activation.lower()]()


def xavier_init_(linear: nn.Linear) -> nn.Linear:
    """Glorot/Xavier normal weights (std = sqrt(2 / (fan_in + fan_out))) and zero biases, in place."""
    nn.init.xavier_normal_(linear.weight)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)
    return linear


def siren_init_(linear: nn.Linear, w0: float = 30.0, first: bool = False) -> nn.Linear:
    """SIREN initialisation, in place: weights uniform in +-1/fan_in for the first layer,
    +-sqrt(6/fan_in)/w0 for the others (Sitzmann et al. 2020); biases keep torch's default.

    Args:
        linear: the layer followed by ``Sine(w0)``.
        w0: the frequency factor of the sine that follows.
        first: whether the layer is the network's first (it sees the raw input).
    """
    fan_in = linear.in_features
    bound = 1.0 / fan_in if first else math.sqrt(6.0 / fan_in) / w0
    nn.init.uniform_(linear.weight, -bound, bound)
    return linear


def _positive_int(value, name: str, owner: str) -> int:
    return checks.positive_int(value, f"{owner}: {name}")


class MLP(nn.Module):
    """Fully connected network: ``hidden_layers`` layers of ``hidden_features`` units, then a linear readout.

    Args:
        in_features: input dimension d (e.g. 3 for (x, y, t)).
        out_features: output dimension k.
        hidden_features: width of every hidden layer.
        hidden_layers: number of hidden layers (each a Linear followed by the activation).
        activation: ``"tanh"``, ``"sin"``, ``"silu"`` or a module (e.g. ``Sine(30.0)``);
            one instance is shared by all layers (activations hold no parameters here).
        init: ``"xavier"`` or ``"siren"``; default ``"siren"`` for a sine activation,
            ``"xavier"`` otherwise.

    Shapes:
        input (..., in_features) -> output (..., out_features).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        hidden_features: int = 64,
        hidden_layers: int = 4,
        activation: str | nn.Module = "tanh",
        init: str | None = None,
    ):
        super().__init__()
        for name, value in (
            ("in_features", in_features),
            ("out_features", out_features),
            ("hidden_features", hidden_features),
            ("hidden_layers", hidden_layers),
        ):
            _positive_int(value, name, "MLP")
        self.in_features, self.out_features = in_features, out_features
        self.activation = make_activation(activation)
        if init is None:
            init = "siren" if isinstance(self.activation, Sine) else "xavier"
        if init not in ("xavier", "siren"):
            raise ConfigurationError(f"MLP: unknown init {init!r}; expected 'xavier' or 'siren'")
        widths = [in_features] + [hidden_features] * hidden_layers
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.readout = nn.Linear(hidden_features, out_features)
        w0 = self.activation.w0 if isinstance(self.activation, Sine) else 1.0
        for index, layer in enumerate([*self.hidden, self.readout]):
            if init == "siren":
                siren_init_(layer, w0=w0, first=index == 0)
            else:
                xavier_init_(layer)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.shape[-1] != self.in_features:
            raise ConfigurationError(
                f"MLP expects inputs (..., {self.in_features}), got shape {tuple(inputs.shape)}")
        hidden = inputs
        for layer in self.hidden:
            hidden = self.activation(layer(hidden))
        return self.readout(hidden)


class FourierFeatures(nn.Module):
    """Random Fourier features ``[sin(2 pi x B), cos(2 pi x B)]`` (Tancik et al. 2020).

    ``B`` is an (in_features, num_frequencies) matrix drawn from N(0, scale^2)
    with torch's global generator (or ``generator``); it is a buffer, or a
    parameter when ``trainable``.

    Args:
        in_features: input dimension d.
        num_frequencies: number of random frequencies m; the output has 2 m features.
        scale: standard deviation of the frequencies, in cycles per unit of input.
        trainable: learn ``B`` with the rest of the network.
        generator: optional ``torch.Generator`` for reproducible frequencies.

    Shapes:
        input (..., in_features) -> output (..., 2 * num_frequencies): sines first, then cosines.
    """

    def __init__(
        self,
        in_features: int,
        num_frequencies: int,
        scale: float = 1.0,
        trainable: bool = False,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        _positive_int(in_features, "in_features", "FourierFeatures")
        _positive_int(num_frequencies, "num_frequencies", "FourierFeatures")
        if not scale > 0:
            raise ConfigurationError(f"FourierFeatures: scale must be positive, got {scale!r}")
        self.in_features = in_features
        self.out_features = 2 * num_frequencies
        frequencies = scale * torch.randn(in_features, num_frequencies, generator=generator)
        if trainable:
            self.frequencies = nn.Parameter(frequencies)
        else:
            self.register_buffer("frequencies", frequencies)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.shape[-1] != self.in_features:
            raise ConfigurationError(
                f"FourierFeatures expects inputs (..., {self.in_features}), got shape {tuple(inputs.shape)}"
            )
        phases = 2 * math.pi * inputs @ self.frequencies
        return torch.cat((torch.sin(phases), torch.cos(phases)), dim=-1)


class MultiScaleMLP(nn.Module):
    """Sum of MLPs, each seeing the input multiplied by its own scale (MindElec's MultiScaleFCCell).

    ``output = sum_i subnetworks[i](scales[i] * (x - input_center) * input_scale)``.
    High scales let a sub-network resolve fine structure, low scales the coarse
    trend, in one differentiable model.

    Args:
        in_features, out_features: as :class:`MLP`.
        scales: one multiplier per sub-network (MindElec: ``amp_factor * scale_factor**i``).
        hidden_features, hidden_layers, activation, init: passed to each :class:`MLP`.
        input_center: optional (in_features,) point subtracted from the input first
            (centre of the domain), in input units.
        input_scale: optional (in_features,) factors applied after centring
            (e.g. 1 / half-width of the domain), to bring inputs to about [-1, 1].

    Shapes:
        input (..., in_features) -> output (..., out_features).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        scales: Sequence[float] = (1, 2, 4, 8),
        hidden_features: int = 64,
        hidden_layers: int = 4,
        activation: str | nn.Module = "tanh",
        init: str | None = None,
        input_center: Sequence[float] | torch.Tensor | None = None,
        input_scale: Sequence[float] | torch.Tensor | None = None,
    ):
        super().__init__()
        if len(scales) == 0 or not all(float(scale) > 0 for scale in scales):
            raise ConfigurationError(
                f"MultiScaleMLP: scales must be a non-empty sequence of positive numbers, got {scales!r}"
            )
        self.in_features, self.out_features = in_features, out_features
        self.scales = tuple(float(scale) for scale in scales)
        self.subnetworks = nn.ModuleList(
            MLP(in_features, out_features, hidden_features, hidden_layers, activation, init)
            for _ in self.scales
        )
        for name, value, default in (("input_center", input_center, 0.0), ("input_scale", input_scale, 1.0)):
            tensor = (
                torch.full((in_features,), default)
                if value is None
                else torch.as_tensor(value, dtype=torch.get_default_dtype())
            )
            if tensor.shape != (in_features,):
                raise ConfigurationError(
                    f"MultiScaleMLP: {name} must have {in_features} entries (one per input), "
                    f"got {tuple(tensor.shape)}"
                )
            self.register_buffer(name, tensor)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        normalised = (inputs - self.input_center) * self.input_scale
        return sum(network(scale * normalised) for scale, network in zip(self.scales, self.subnetworks))
