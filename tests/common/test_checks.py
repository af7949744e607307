"""common.checks and common.errors: messages name the argument and the first bad item."""

import math

import pytest
import torch

from common import checks
from common.errors import ConfigurationError, DataError, MindScienceError, SimulationError


def test_error_branches_keep_builtin_bases():
    assert issubclass(ConfigurationError, ValueError) and issubclass(ConfigurationError, MindScienceError)
    assert issubclass(DataError, ValueError) and issubclass(DataError, MindScienceError)
    assert issubclass(SimulationError, RuntimeError) and issubclass(SimulationError, MindScienceError)
    assert SimulationError("blew up", step=12).step == 12


@pytest.mark.parametrize("value", [0, -3, 2.0, True, "4", None])
def test_positive_int_refuses(value):
    with pytest.raises(ConfigurationError, match="steps must be a positive int"):
        checks.positive_int(value, "steps")


def test_int_checks_accept():
    assert checks.positive_int(5, "n") == 5
    assert checks.non_negative_int(0, "n") == 0
    with pytest.raises(ConfigurationError, match="non-negative"):
        checks.non_negative_int(-1, "n")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_finite_names_first_bad_atom(bad):
    positions = torch.zeros(20, 3, dtype=torch.float64)
    positions[17, 1] = bad
    positions[19, 0] = bad
    with pytest.raises(DataError, match=r"positions of atom 17 are not finite: .*\(2 atoms in all\)"):
        checks.positions(positions)


def test_finite_names_a_row_that_is_the_thing_itself_alone():
    box = torch.eye(3, dtype=torch.float64)
    box[1, 1] = math.nan
    with pytest.raises(DataError, match=r"^box vector 1 is not finite: \(0, nan, 0\)$"):
        checks.finite(box, "box", item="box vector")


def test_finite_one_dimensional_and_scalar():
    with pytest.raises(DataError, match="permittivity of cell 2 is not finite"):
        checks.finite(torch.tensor([1.0, 2.0, math.nan]), "permittivity", item="cell")
    with pytest.raises(DataError, match="energy is not finite"):
        checks.finite(torch.tensor(math.inf), "energy")
    values = torch.tensor([1.0, 2.0])
    assert checks.finite(values, "x") is values
    assert checks.finite(torch.tensor([1, 2]), "ids") is not None


def test_positions_shape_and_type():
    with pytest.raises(ConfigurationError, match=r"shape \(N, 3\), got \(4, 2\)"):
        checks.positions(torch.zeros(4, 2))
    with pytest.raises(ConfigurationError, match="floating torch tensor"):
        checks.positions([[0.0, 0.0, 0.0]])


def test_finite_cells_names_the_full_grid_index():
    grid = torch.ones(4, 5, 6)
    grid[2, 3, 1] = math.inf
    grid[3, 0, 0] = math.nan
    message = r"permittivity is not finite at cell \(2, 3, 1\): inf \(2 cells in all\)"
    with pytest.raises(DataError, match=message):
        checks.finite_cells(grid, "permittivity")
    with pytest.raises(DataError, match="conductivity is not finite: nan"):
        checks.finite_cells(math.nan, "conductivity")
    assert checks.finite_cells(2.0, "x") == 2.0
