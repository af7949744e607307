"""Networks for the PINN problems: the default multi-scale sine network and the hard initial condition.

:func:`default_model` builds MindElec's default (a :class:`common.nn.MultiScaleMLP` with sine
activations, inputs normalised to about [-1, 1], optional Fourier features) for a problem from
:mod:`mindelec.pinn.problems`, wrapped in :class:`ZeroInitialFields`; for the potential formulation it
builds a :class:`mindelec.pinn.PotentialTE` with the source's :class:`mindelec.pinn.PointSourcePotential`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from common import nn as cnn
from common import pde
from common.errors import ConfigurationError
from mindelec.pinn.potential import POTENTIAL_JET, PointSourcePotential, PotentialTE

__all__ = ["ZeroInitialFields", "default_model"]


class ZeroInitialFields(nn.Module):
    """Wrap a network so that its fields vanish at ``t = 0`` exactly: ``out = (1 - exp(-t / tau)) net(x)``.

    A hard initial condition (no initial-condition loss needed) for sources that start at rest.

    Args:
        network: the field network on dimensionless points.
        time_column: index of t in the input.
        tau: ramp time (dimensionless); small against the time scale of the source.
    """

    def __init__(self, network: nn.Module, time_column: int, tau: float = 0.05):
        super().__init__()
        self.network, self.time_column, self.tau = network, time_column, float(tau)
        self.in_features = getattr(network, "in_features", None)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        ramp = -torch.expm1(-inputs[:, self.time_column : self.time_column + 1] / self.tau)
        return ramp * self.network(inputs)


def default_model(
    problem: pde.Problem,
    scales: float | Sequence[float] = (1, 2, 4, 8),
    hidden_features: int = 64,
    hidden_layers: int = 4,
    fourier_features: int = 0,
    fourier_scale: float = 1.0,
    zero_initial: bool = True,
    tau: float = 0.05,
    readout_gain: float = 0.1,
    source_cutoff: float | None = 0.1,
    radial_softening: float | None = None,
    retarded_time: bool = False,
) -> nn.Module:
    """MultiScaleMLP with sine activations (MindElec's default) on the problem's inputs, optionally on
    Fourier features, wrapped in :class:`ZeroInitialFields` for time-domain problems.

    Inputs are centred and scaled to about [-1, 1] from the problem's domain box (and parameter ranges).

    Args:
        problem: a problem from :func:`point_source_problem` (or any with a ``domain`` attribute).
        scales: multipliers of the sub-networks.
        hidden_features, hidden_layers: size of each sub-network.
        fourier_features: number of random Fourier frequencies in front of the network (0: none).
        fourier_scale: their standard deviation (cycles per unit of normalised input).
        zero_initial: wrap in :class:`ZeroInitialFields` (needs time as the last variable).
        tau: ramp time of the hard initial condition (dimensionless).
        readout_gain: factor on the initial readout weights, so that the fields start near zero (as they
            are everywhere before the pulse arrives) rather than as O(1) noise.
        source_cutoff: for a potential-formulation problem (``formulation="potential"`` of
            :func:`point_source_problem`): the model is a :class:`PotentialTE` (``readout_gain`` becomes its
            ``amplitude``) plus the source's :class:`PointSourcePotential` with this cutoff radius
            (dimensionless; ``None``: no cutoff; ``0``: no source potential). Fourier features are not used.
        radial_softening: for a potential-formulation problem: give the network the softened distance to
            the source as an extra input (see :class:`PotentialTE`) with this softening (dimensionless;
            ``None``: no radial input).
        retarded_time: with ``radial_softening``: give the network the retarded time
            ``t - sqrt(eps_r mu_r) s`` as a further input (:class:`PotentialTE`), for a model over a
            permittivity range.

    Returns:
        A module ``(B, len(problem.inputs)) -> (B, len(problem.outputs))`` in float32.
    """
    if tuple(problem.outputs) == POTENTIAL_JET:
        return _potential_model(
            problem,
            scales,
            hidden_features,
            hidden_layers,
            tau,
            readout_gain,
            source_cutoff,
            radial_softening,
            retarded_time,
        )
    if retarded_time:
        raise ConfigurationError(
            "default_model: retarded_time needs the potential formulation and radial_softening")
    center, scale = _input_normalisation(problem)
    n_inputs, n_outputs = len(problem.inputs), len(problem.outputs)
    if fourier_features:
        features = cnn.FourierFeatures(n_inputs, fourier_features, fourier_scale)
        body = cnn.MultiScaleMLP(
            features.out_features, n_outputs, scales, hidden_features, hidden_layers, "sin"
        )
        network = _Normalised(nn.Sequential(features, body), center, scale)
    else:
        network = _sine_network(problem, n_outputs, scales, hidden_features, hidden_layers)
    body = network if isinstance(network, cnn.MultiScaleMLP) else network.network[1]
    with torch.no_grad():
        for subnetwork in body.subnetworks:
            subnetwork.readout.weight.mul_(readout_gain)
            subnetwork.readout.bias.mul_(readout_gain)
    if zero_initial:
        network = ZeroInitialFields(network, len(problem.variables) - 1, tau)
    network.in_features = n_inputs
    return network


def _potential_model(
    problem, scales, hidden_features, hidden_layers, tau, amplitude, source_cutoff, softening, retarded_time
):
    """:class:`PotentialTE` on a sine MultiScaleMLP, plus the source's quasi-static potential."""
    center, scale = _input_normalisation(problem)
    radial = {}
    if retarded_time and softening is None:
        raise ConfigurationError(
            "default_model: retarded_time needs radial_softening (the distance it is over)")
    if retarded_time and problem.permeability is None:
        raise ConfigurationError(
            "default_model: retarded_time needs a fixed permeability, got a permeability range")
    if softening is not None:
        source = problem.point_source
        radial_center = [
            (p - o) / problem.scales.length for p, o in zip(source.position, problem.scales.origin)
        ]
        lo, hi = problem.domain.bounds_float64
        corners = torch.cartesian_prod(*[torch.stack([lo[a], hi[a]]) for a in range(2)])
        farthest = float((corners - torch.tensor(radial_center, dtype=corners.dtype)).norm(dim=1).max())
        longest = math.hypot(farthest, softening)
        center, scale = center + [(softening + longest) / 2], scale + [2 / (longest - softening)]
        radial = {"radial_center": radial_center, "radial_softening": softening}
    column = problem.inputs.index("permittivity") if "permittivity" in problem.parameters else None
    if retarded_time:  # t - n s over the box's times, distances and slownesses n
        low, high = problem.parameters.get("permittivity", (problem.permittivity,) * 2)
        slowest, fastest = (math.sqrt(value * problem.permeability) for value in (high, low))
        times = float(lo[2]), float(hi[2])
        earliest, latest = times[0] - slowest * longest, times[1] - fastest * softening
        center, scale = center + [(earliest + latest) / 2], scale + [2 / (latest - earliest)]
        radial.update(retarded_time=True, permeability=problem.permeability)
    network = cnn.MultiScaleMLP(
        len(center), 1, scales, hidden_features, hidden_layers, "sin", input_center=center, input_scale=scale
    )
    particular = None
    if source_cutoff != 0:
        particular = PointSourcePotential(problem.point_source, problem.scales, source_cutoff)
    permittivity = 1.0 if column is not None else problem.permittivity
    return PotentialTE(network, tau, amplitude, permittivity, particular, column, **radial)


def _sine_network(problem, n_outputs, scales, hidden_features, hidden_layers):
    """A sine :class:`common.nn.MultiScaleMLP` on the problem's inputs, normalised to [-1, 1]."""
    center, scale = _input_normalisation(problem)
    return cnn.MultiScaleMLP(
        len(problem.inputs),
        n_outputs,
        scales,
        hidden_features,
        hidden_layers,
        "sin",
        input_center=center,
        input_scale=scale,
    )


def _input_normalisation(problem):
    """Centre and scale (lists, one per input) mapping the domain box and parameter ranges to [-1, 1]."""
    lo, hi = problem.domain.bounds_float64
    lows = lo.tolist() + [low for low, _ in problem.parameters.values()]
    highs = hi.tolist() + [high for _, high in problem.parameters.values()]
    center = [(a + b) / 2 for a, b in zip(lows, highs)]
    scale = [2 / (b - a) if b > a else 1.0 for a, b in zip(lows, highs)]
    return center, scale


class _Normalised(nn.Module):
    def __init__(self, network, center, scale):
        super().__init__()
        self.network = network
        self.register_buffer("center", torch.tensor(center, dtype=torch.get_default_dtype()))
        self.register_buffer("scale", torch.tensor(scale, dtype=torch.get_default_dtype()))

    def forward(self, inputs):
        return self.network((inputs - self.center) * self.scale)
