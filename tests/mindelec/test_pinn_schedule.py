"""The one-command training schedule (:mod:`mindelec.pinn.schedule`): phases, learning rate, Adam state
carried over the phases, frozen layers when fine-tuning."""

import math

import pytest
import torch

import mindelec as me

pinn = me.pinn
SETUP = pinn.PointSourceSetup(upper=(0.4, 0.4), source_position=(0.2, 0.2), duration=1e-9)
OPTIONS = dict(n_domain=16, n_source=8, n_boundary=8, formulation="potential", absorbing_order=2)


def small_model(setup=SETUP):
    problem, _ = pinn.point_source_problem(setup, **OPTIONS)
    torch.manual_seed(0)
    return pinn.default_model(problem, scales=(2.0,), hidden_features=8, hidden_layers=2)


def test_phases_grow_to_the_whole_interval_and_share_the_steps():
    schedule = pinn.Schedule(steps=1000, windows=5, whole_fraction=0.4)
    phases = schedule.phases()
    assert [fraction for fraction, _ in phases] == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert [steps for _, steps in phases] == [150, 150, 150, 150, 400]
    assert pinn.Schedule(steps=7, windows=1, whole_fraction=1.0).phases() == [(1.0, 7)]


def test_learning_rate_warms_up_then_follows_one_cosine_over_the_run():
    schedule = pinn.Schedule(steps=1100, learning_rate=1e-3, windows=3, final_factor=0.1, warmup=100)
    assert schedule.factor(0) == pytest.approx(0.01) and schedule.factor(99) == pytest.approx(1.0)
    assert schedule.factor(100) == pytest.approx(1.0)
    assert schedule.factor(600) == pytest.approx(0.55)  # half-way down the cosine: (1 + 0.1) / 2
    assert schedule.factor(1100) == pytest.approx(0.1)
    assert schedule.factor(350) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))


@pytest.mark.parametrize(
    "arguments",
    [
        dict(steps=0),
        dict(windows=0),
        dict(whole_fraction=0.0),
        dict(windows=1, whole_fraction=0.5),
        dict(final_factor=0.0),
        dict(learning_rate=-1.0),
        dict(steps=10, warmup=10),
    ],
)
def test_bad_schedules_are_refused(arguments):
    with pytest.raises(ValueError, match="Schedule"):
        pinn.Schedule(**arguments)


def test_one_adam_runs_through_all_phases_at_the_scheduled_rate():
    model = small_model()
    schedule = pinn.Schedule(steps=12, learning_rate=1e-3, windows=3, whole_fraction=0.5, final_factor=0.2)
    result = pinn.train_schedule(
        SETUP, model, schedule, OPTIONS, monitor=lambda m: {"x": 1.0}, progress=False
    )
    optimizer = result["trainer"].optimizer
    assert all(float(state["step"]) == 12 for state in optimizer.state_dict()["state"].values())
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * schedule.factor(12))
    assert result["evaluations"] == 12 * 32
    assert result["history"]["monitor_step"][-1] == 12  # steps counted over the run, ending on a monitor


def test_fine_tune_trains_only_the_unfrozen_layers_and_thaws_them():
    model = small_model()
    first = model.network.subnetworks[0].hidden[0].weight.detach().clone()
    second = model.network.subnetworks[0].hidden[1].weight.detach().clone()
    schedule = pinn.Schedule(steps=3, learning_rate=1e-2, windows=1, whole_fraction=1.0, warmup=1)
    pinn.fine_tune(model, SETUP, schedule, freeze=1, problem_options=OPTIONS, progress=False)
    assert torch.equal(model.network.subnetworks[0].hidden[0].weight, first)
    assert not torch.equal(model.network.subnetworks[0].hidden[1].weight, second)
    assert all(parameter.requires_grad for parameter in model.parameters())
    with pytest.raises(ValueError, match="freeze_early_layers"):
        pinn.freeze_early_layers(model, 3)
