"""NaN and infinite inputs are refused where they enter molecular dynamics, naming the atom:
force-field calls, forces, systems, checkpoints, and a step that produces them (a blow-up)."""

import pytest
import torch

import mindsponge as ms
from common.errors import DataError, SimulationError
from mindsponge.forcefield.bonded import HarmonicBond
from mindsponge.simulation import SimulationBlowUpError


def _bonded():
    """Three atoms in a 2 nm box, bonds 0-1 and 1-2."""
    forcefield = ms.ForceField([HarmonicBond([[0, 1], [1, 2]], [0.1, 0.1], [1000.0, 1000.0])])
    positions = torch.tensor([[0.5, 0.5, 0.5], [0.6, 0.5, 0.5], [0.6, 0.6, 0.5]], dtype=torch.float64)
    return forcefield, positions, 2.0 * torch.eye(3, dtype=torch.float64)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_force_field_refuses_non_finite_positions_naming_the_atom(bad):
    forcefield, positions, box = _bonded()
    assert torch.isfinite(forcefield(positions, box))  # the same call with finite positions works
    positions[2, 1] = bad
    pattern = rf"positions of atom 2 are not finite: \(0.6, {bad}, 0.5\)"
    with pytest.raises(DataError, match=pattern):
        forcefield(positions, box)
    with pytest.raises(DataError, match=pattern):
        forcefield.energy_terms(positions, box)
    with pytest.raises(DataError, match=pattern):
        ms.forces(forcefield, positions, box)
    positions[0, 0] = bad
    with pytest.raises(DataError, match=r"positions of atom 0 .* \(2 atoms in all\)"):
        forcefield(positions)


def test_force_field_refuses_a_non_finite_box():
    forcefield, positions, box = _bonded()
    box[1, 1] = float("inf")
    with pytest.raises(DataError, match=r"box vector 1 is not finite: \(0, inf, 0\)"):
        forcefield(positions, box)


def test_forces_of_any_potential_refuse_non_finite_positions():
    class Harmonic(torch.nn.Module):  # not a ForceField
        def forward(self, positions, box=None):
            return (positions**2).sum()

    positions = torch.zeros(4, 3, dtype=torch.float32)
    torch.testing.assert_close(ms.forces(Harmonic(), positions + 1.0), -2.0 * torch.ones(4, 3))
    positions[3, 0] = float("nan")
    with pytest.raises(DataError, match="positions of atom 3 are not finite"):
        ms.forces(Harmonic(), positions)


def test_a_step_that_makes_positions_non_finite_is_a_blow_up_naming_step_and_atom():
    class Cusp(torch.nn.Module):
        """sqrt(|x|) of atom 1: its force at x = 0 is not finite."""

        def forward(self, positions, box=None):
            return torch.sqrt(positions[1, 0].abs())

    positions = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    system = ms.System(positions, torch.ones(2, dtype=torch.float64))
    simulation = ms.Simulation(
        system, Cusp(), ms.integrators.VelocityVerlet(0.001), remove_center_of_mass_motion=False,
        progress=False,
    )
    with pytest.raises(SimulationBlowUpError, match=r"step 1 .*positions of atom 1 are not finite") as error:
        simulation.run(5)
    assert isinstance(error.value, SimulationError) and isinstance(error.value, RuntimeError)
    assert error.value.step == 1
