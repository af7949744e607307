"""Tests of common.precision: float64 accumulation of float32 work is closer to exact sums."""

import math
from fractions import Fraction

import pytest
import torch

from common.precision import Precision


def test_presets_and_names():
    assert Precision.single() == Precision(torch.float32, torch.float32)
    assert Precision.mixed() == Precision() == Precision.from_name("mixed")
    assert Precision.double() == Precision(torch.float64, torch.float64)
    assert [Precision.from_name(name).name for name in ("single", "mixed", "double")] == [
        "single",
        "mixed",
        "double",
    ]
    assert Precision(torch.bfloat16, torch.float32).name is None


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match=r"unknown precision 'quad'; expected one of single, mixed, double"):
        Precision.from_name("quad")
    with pytest.raises(TypeError, match="compute must be a floating torch dtype"):
        Precision(torch.int32, torch.float64)
    with pytest.raises(TypeError, match="accumulate must be a floating torch dtype"):
        Precision(torch.float32, "float64")
    with pytest.raises(ValueError, match="accumulate dtype torch.float32 is less precise than compute dtype"):
        Precision(torch.float64, torch.float32)


def test_float64_accumulation_of_float32_terms_is_closer_to_the_exact_sum():
    generator = torch.Generator().manual_seed(0)
    terms = torch.rand(1_000_000, generator=generator, dtype=torch.float32) * 2 - 0.7
    exact = math.fsum(terms.double().tolist())  # correctly rounded sum of the float32 values
    mixed = Precision.mixed().sum(terms)
    single = Precision.single().sum(terms)
    assert mixed.dtype == torch.float64 and single.dtype == torch.float32
    error_mixed = abs(mixed.item() - exact)
    error_single = abs(single.item() - exact)
    assert error_mixed <= 1e-12 * abs(exact)
    assert error_single > 100 * error_mixed


def test_cancellation_is_exact_in_float64_accumulation():
    # 1e8 + 1 is not representable in float32 (its spacing there is 8), but is in float64
    terms = torch.tensor([1e8, 1.0, -1e8] * 1000, dtype=torch.float32)
    exact = sum(Fraction(value) for value in terms.tolist())
    assert exact == 1000
    assert Precision.mixed().sum(terms).item() == 1000.0
    assert Precision.double().sum(terms.double()).item() == 1000.0


def test_sum_over_dimensions_and_gradients():
    values = torch.arange(12.0).reshape(3, 4).requires_grad_()
    precision = Precision.mixed()
    rows = precision.sum(values, dim=1)
    assert rows.dtype == torch.float64 and rows.tolist() == [6.0, 22.0, 38.0]
    assert precision.sum(values, dim=(0, 1), keepdim=True).shape == (1, 1)
    rows.sum().backward()
    assert values.grad.dtype == torch.float32 and torch.equal(values.grad, torch.ones(3, 4))


def test_state_integrated_in_accumulate_dtype_follows_the_analytic_trajectory():
    """Free flight x(t) = x0 + v t with a step too small for float32 to register."""
    velocity, dt, steps = 1e-3, 1e-5, 2000  # increment 1e-8 is below half the float32 spacing at 1.0
    for precision, expect_motion in ((Precision.single(), False), (Precision.mixed(), True)):
        position = precision.to_accumulate(torch.tensor(1.0))
        step_velocity = precision.to_compute(torch.tensor(velocity))
        for _ in range(steps):
            position = position + precision.to_accumulate(step_velocity * dt)
        analytic = 1.0 + velocity * dt * steps
        if expect_motion:
            assert position.item() == pytest.approx(analytic, rel=1e-12)
        else:
            assert position.item() == 1.0  # float32 state stalls: why state is kept in the accumulate dtype


def test_index_add_accumulates_pair_forces_in_float64():
    generator = torch.Generator().manual_seed(1)
    pairs, atoms = 200_000, 4
    index = torch.randint(0, atoms, (pairs,), generator=generator)
    forces = torch.randn(pairs, 3, generator=generator, dtype=torch.float32) * 100
    summed = Precision.mixed().index_add(atoms, index, forces)
    assert summed.shape == (atoms, 3) and summed.dtype == torch.float64
    single = Precision.single().index_add(atoms, index, forces)
    for atom in range(atoms):
        for axis in range(3):
            exact = math.fsum(forces[index == atom, axis].double().tolist())
            assert summed[atom, axis].item() == pytest.approx(exact, rel=1e-13, abs=1e-9)
    exact_all = torch.tensor(
        [[math.fsum(forces[index == a, k].double().tolist()) for k in range(3)] for a in range(atoms)]
    )
    assert (summed - exact_all).abs().max() < (single.double() - exact_all).abs().max()


def test_casts_keep_device_and_leave_integers_alone():
    precision = Precision.mixed()
    values = torch.ones(3, dtype=torch.float64)
    assert precision.to_compute(values).dtype == torch.float32
    assert precision.to_accumulate(precision.to_compute(values)).dtype == torch.float64
    assert precision.to_compute(values).device == values.device
    indices = torch.arange(3)
    assert precision.to_compute(indices) is indices and precision.to_accumulate(indices) is indices
