"""Structures that abut or overlap inside a cell share it as their geometry does.

On the Ez nodes of a 2D TM grid (integer nodes, 1 mm apart), a node on the plane where two boxes meet is
half in each: its permittivity is the mean of theirs. Before, the coverages were treated as independent
(each later structure taking its fill of what was left), which gave a quarter of such a node to the
background medium.
"""

import pytest
import torch

import mindelec as me
from common.geometry import Box

CELL = 1e-3
VACUUM_PERMITTIVITY = 8.8541878128e-12


def _permittivity_along_x(structures):
    sim = me.fdtd.Simulation(size=(10 * CELL, 10 * CELL), cell_size=CELL, structures=structures)
    electric, _ = sim._coefficients()
    cb = torch.as_tensor(electric["Ez"][1], dtype=torch.float64)
    return (sim.dt / (VACUUM_PERMITTIVITY * cb))[:, 5].flatten()  # nodes x = -5 .. 4 mm


def _box(lower, upper, permittivity):
    return me.fdtd.Structure(Box((lower, -1.0), (upper, 1.0)), me.fdtd.Medium(permittivity=permittivity))


@pytest.mark.parametrize("left, right", [(4.0, 2.0), (4.0, 4.0), (1.0, 9.0)])
def test_abutting_boxes_share_the_node_on_their_common_plane(left, right):
    permittivity = _permittivity_along_x([_box(-1.0, 0.0, left), _box(0.0, 1.0, right)])
    assert permittivity[5] == pytest.approx((left + right) / 2, rel=1e-5)  # the node at x = 0
    assert torch.allclose(permittivity[:5], torch.tensor(left, dtype=torch.float64), rtol=1e-5)
    assert torch.allclose(permittivity[6:], torch.tensor(right, dtype=torch.float64), rtol=1e-5)


def test_a_later_structure_overrides_what_it_covers():
    # a 4 mm wide box of 2 inside a box of 4: inside 2, outside 4, half and half on its faces
    permittivity = _permittivity_along_x([_box(-1.0, 1.0, 4.0), _box(-2 * CELL, 2 * CELL, 2.0)])
    expected = torch.tensor([4, 4, 4, 3, 2, 2, 2, 3, 4, 4], dtype=torch.float64)
    assert torch.allclose(permittivity, expected, rtol=1e-5)


def test_a_box_over_the_background_keeps_half_a_node_on_its_face():
    permittivity = _permittivity_along_x([_box(0.0, 1.0, 3.0)])
    assert permittivity[5] == pytest.approx(2.0, rel=1e-5) and permittivity[4] == pytest.approx(1.0)
