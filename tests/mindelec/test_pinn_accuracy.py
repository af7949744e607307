"""Trained accuracy of the time-domain PINN against the FDTD reference, on a reduced problem (CI-sized).

The benchmark's method at a reduced size: a 0.6 m square with the smoothed 1 GHz point source at its centre
over 2.5 ns (the pulse peaks at 1.27 ns and has travelled ~0.35 m by the end, past the sides), the potential
formulation with second-order absorbing sides, a 64 x 3 sine network with the radial input, 256 points per
step, :func:`mindelec.pinn.train_schedule` with :data:`STEPS` Adam steps (cosine decay). The largest relative
L2 error of Ex, Ey, Hz over 10 frames against :func:`mindelec.pinn.fdtd_reference` (1 cm cells) must be
below :data:`STATED`: a regression of the residuals, the jets, the model or the schedule breaks that.

Measured (one core of a loaded machine; the run is deterministic): untrained 1.40, after the 2000 steps
0.653 (at 200-step intervals 1.06, 0.99, 0.91, 0.81, 0.74, 0.71, 0.67, 0.66, 0.66, 0.65); the stated bound
0.75 leaves 15% for floating-point differences between machines. The reduced problem is far from converged
at this budget (the full benchmark needs ~36000 steps of 1024 points for 0.02); the test guards the
training, it does not claim the benchmark's accuracy. 0.145 s of CPU per step was measured under load (a
few minutes on an idle core).
"""

import pytest
import torch

import mindelec as me

pinn = me.pinn
STEPS = 2000
STATED = 0.75  # largest relative L2 error of Ex, Ey, Hz after STEPS (measured 0.653)


@pytest.mark.slow
def test_reduced_point_source_pinn_reaches_its_stated_accuracy():
    setup = pinn.PointSourceSetup(upper=(0.6, 0.6), source_position=(0.3, 0.3), duration=2.5e-9)
    reference = pinn.fdtd_reference(setup, cell_size=1e-2, frames=10, stride=4)
    options = dict(n_domain=128, n_source=64, n_boundary=64, formulation="potential", absorbing_order=2)
    problem, scales = pinn.point_source_problem(setup, **options)
    torch.manual_seed(0)
    model = pinn.default_model(
        problem, scales=(4.0,), hidden_features=64, hidden_layers=3, radial_softening=0.05 / scales.length
    )
    monitor = pinn.reference_monitor(reference, scales)
    untrained = monitor(model)["max"]
    schedule = pinn.Schedule(steps=STEPS, learning_rate=2e-3, windows=1, whole_fraction=1.0)
    result = pinn.train_schedule(setup, model, schedule, options, monitor=monitor, monitors=1, progress=False)
    assert untrained > 1.2  # measured 1.40: the source's quasi-static potential alone
    assert result["errors"]["max"] < STATED
