"""The PINN benchmark's wall floor: how far the exact solution with absorbing walls is from the open domain.

First-order (Mur) walls reflect a plane wave by ``(cos theta - 1) / (cos theta + 1)`` (17% at 45 degrees),
second-order (Engquist-Majda) walls by its square (3%); a cylindrical pulse meets the sides at all angles
up to 45 degrees, so the walled solution of the first order must be a few percent from the open domain,
the second order's several times closer.
"""

import sys
from pathlib import Path

import pytest

import mindelec as me

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import pinn as pinn_benchmark  # noqa: E402 - benchmarks/pinn.py


@pytest.fixture(scope="module")
def floors():
    setup = me.pinn.PointSourceSetup()
    return {order: pinn_benchmark.wall_floor(setup, order, cell_size=1e-2) for order in (1, 2)}


@pytest.mark.slow
def test_first_order_walls_are_a_few_percent_from_the_open_domain(floors):
    for name in ("Ex", "Ey", "Hz"):
        assert 0.01 < floors[1][name] < 0.1


def test_second_order_walls_reflect_several_times_less(floors):
    for name in ("Ex", "Ey", "Hz"):
        assert floors[2][name] < 0.35 * floors[1][name]
