"""The forward-mode jet of :class:`mindelec.pinn.PotentialTE` against DeepXDE's reverse-mode autograd.

The same sine network and weights on both sides (``benchmarks/pinn_deepxde.py`` copies ours into a
DeepXDE ``FNN`` with the same input normalisation and initial ramp); DeepXDE's ``dde.grad.hessian``
residuals of the potential formulation must equal our :func:`mindelec.pinn.wave_potential_residual`,
:func:`mindelec.pinn.mur_potential_residual` and fields to float64 round-off.
"""

import dataclasses
import os
import sys
from pathlib import Path

import pytest
import torch

import mindelec as me

os.environ["DDE_BACKEND"] = "pytorch"
import deepxde as dde  # noqa: E402 - a test dependency (dev extra): a missing install fails, not skips

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import pinn_deepxde  # noqa: E402 - benchmarks/pinn_deepxde.py

pinn = me.pinn


@pytest.fixture(scope="module", params=[(None, 1.0), (0.05, 4.0)], ids=["plain", "radial-input-times-4"])
def potential(request):
    """(problem, our float64 model, DeepXDE copy, points (B, 3), outward normals (B, 2)); the network with
    unit inputs, and the benchmark's (radial input softened by 5 cm, inputs times 4: DeepXDE's feature
    transform)."""
    setup = dataclasses.replace(pinn.PointSourceSetup(), duration=2e-9)
    problem, _ = pinn_deepxde.pinn_benchmark.build(setup, 64, "potential")
    torch.manual_seed(3)
    model = pinn_deepxde.pinn_benchmark.plain_model(problem, "potential", *request.param).double()
    with torch.no_grad():  # larger, non-zero biases everywhere, so every term of the jet matters
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    net = pinn_deepxde.deepxde_network(model)
    duration = setup.duration / problem.scales.time
    generator = torch.Generator().manual_seed(4)
    uniform = torch.rand(200, 3, generator=generator, dtype=torch.float64)
    near = torch.tensor(problem.point_source.position, dtype=torch.float64) + 0.05 * (uniform[:100, :2] - 0.5)
    points = uniform.clone()
    points[:100, :2] = near  # half of them within the source disk, where the source potential is steep
    points[:, 2] *= duration
    normals = torch.nn.functional.normalize(
        torch.randn(200, 2, generator=generator, dtype=torch.float64), dim=1
    )
    return problem, model, net, points, normals


def test_deepxde_autograd_residuals_equal_forward_mode_jet(potential):
    problem, model, net, points, normals = potential
    formulation = pinn_deepxde.DeepXDEPotential(problem, model.particular)
    inputs = points.clone().requires_grad_()
    dde.grad.clear()
    outputs = net(inputs)
    wave = formulation.wave(inputs, outputs).detach()
    mur = formulation.mur(inputs, outputs, normals).detach()
    dde.grad.clear()

    jet = model(points)
    current = problem.point_source.dimensionless(points, problem.scales, magnetic=True)
    our_wave = pinn.wave_potential_residual(jet, 1.0, 1.0, current)
    our_mur = pinn.mur_potential_residual(jet, normals, 1.0, 1.0)
    assert our_wave.abs().max() > 1.0 and our_mur.abs().max() > 0.1  # not trivially zero
    torch.testing.assert_close(wave, our_wave, rtol=1e-10, atol=1e-10 * our_wave.abs().max().item())
    torch.testing.assert_close(mur, our_mur, rtol=1e-10, atol=1e-10 * our_mur.abs().max().item())


def test_deepxde_fields_equal_potential_fields(potential):
    problem, model, net, points, _ = potential
    fields = pinn_deepxde.DeepXDEFields(net, pinn_deepxde.DeepXDEPotential(problem, model.particular))
    with torch.no_grad():
        ours, theirs = model.field_model()(points), fields(points)
    torch.testing.assert_close(theirs, ours, rtol=1e-10, atol=1e-10 * ours.abs().max().item())
