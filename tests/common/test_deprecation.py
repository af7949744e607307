"""The three deprecation helpers warn, name the new spelling, and pass the call on unchanged."""

import sys
import types

import pytest

from common.deprecation import deprecated_method, moved_attributes, renamed_arguments
from common.errors import ConfigurationError


class _Barostat:
    @renamed_arguments(frequency="every")
    def __init__(self, pressure, every=25):
        self.pressure, self.every = pressure, every

    def energy_and_forces(self, scale):
        return ("energy", scale)

    force = deprecated_method("energy_and_forces")


def test_renamed_argument_warns_and_is_passed_on():
    with pytest.warns(DeprecationWarning, match=r"frequency=.*every="):
        barostat = _Barostat(1.0, frequency=7)
    assert barostat.every == 7


def test_new_argument_does_not_warn(recwarn):
    assert _Barostat(1.0, every=3).every == 3
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_both_spellings_are_refused():
    with pytest.raises(ConfigurationError, match="every= only"):
        _Barostat(1.0, every=3, frequency=4)


def test_deprecated_method_warns_with_its_own_name():
    with pytest.warns(DeprecationWarning, match=r"_Barostat\.force is deprecated.*energy_and_forces"):
        assert _Barostat(1.0).force(2) == ("energy", 2)
    assert _Barostat.force.__qualname__ == "_Barostat.force"


def test_moved_attribute_warns_and_returns_the_new_object(monkeypatch):
    old = types.ModuleType("old_place")
    old.__getattr__ = moved_attributes("old_place", {"load": "common.deprecation:renamed_arguments"})
    monkeypatch.setitem(sys.modules, "old_place", old)
    with pytest.warns(DeprecationWarning, match=r"old_place\.load is deprecated.*common\.deprecation"):
        assert old.load is renamed_arguments
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        old.missing  # noqa: B018


# the misleading twins and the training front doors renamed in this release (issue: one verb, one spelling)
RENAMED_OBJECTS = [
    ("mindsponge.thermostats", "Berendsen", "BerendsenThermostat"),
    ("mindsponge.barostats", "Berendsen", "BerendsenBarostat"),
    ("mindsponge.normal_modes", "hessian", "finite_difference_hessian"),
    ("mindelec.devices", "patch_antenna", "patch_antenna_meshes"),
    ("mindelec.antennas", "patch_antenna", "patch_antenna_simulation"),
]


@pytest.mark.parametrize(("module_name", "old", "new"), RENAMED_OBJECTS)
def test_renamed_twins_warn_and_give_the_new_object(module_name, old, new):
    import importlib

    module = importlib.import_module(module_name)
    with pytest.warns(DeprecationWarning, match=rf"{module_name}\.{old} is deprecated.*{module_name}\.{new}"):
        assert getattr(module, old) is getattr(module, new)
    assert old not in module.__all__ and new in module.__all__


def test_one_training_verb_and_spelling_with_the_old_ones_warning():
    import torch

    from common import geometry, pde
    from mindelec import surrogate
    from mindelec.pinn import Schedule

    line = geometry.Interval(0.0, 1.0)
    problem = pde.Problem(("x",), ("u",), [pde.Residual("pde", line, lambda x, u: u[:, 0] - x[:, 0], 8)])
    with pytest.warns(DeprecationWarning, match=r"lr=.*learning_rate="):
        old = pde.Trainer(problem, torch.nn.Linear(1, 1), steps=2, lr=0.01, progress=False)
    assert old.optimizer.param_groups[0]["lr"] == 0.01
    with pytest.warns(DeprecationWarning, match=r"Trainer\.train is deprecated.*Trainer\.fit"):
        history = old.train()
    assert old.step == 2 and history is old.history
    with pytest.warns(DeprecationWarning, match=r"Schedule.lr is deprecated"):
        assert Schedule(steps=4, learning_rate=0.5, windows=1, whole_fraction=1.0).lr == 0.5
    inputs = torch.linspace(0, 1, 8, dtype=torch.float64)[:, None]
    with pytest.warns(DeprecationWarning, match=r"fit\(lr=.*fit\(learning_rate="):
        surrogate.fit(torch.nn.Linear(1, 1).double(), inputs, 2 * inputs, epochs=1, lr=0.01, progress=False)


def test_simulation_energies_is_now_observables():
    """``energies()`` returned pressure, volume and density too: it is ``observables()`` now."""
    import torch

    import mindsponge as ms

    positions = torch.tensor([[0.0, 0.0, 0.0], [0.3, 0.0, 0.0]], dtype=torch.float64)
    system = ms.System(positions, torch.full((2,), 10.0, dtype=torch.float64),
                       box=torch.eye(3, dtype=torch.float64) * 2.0)
    simulation = ms.Simulation(system, ms.ForceField(), ms.integrators.VelocityVerlet(0.001),
                               remove_center_of_mass_motion=False, progress=False, seed=1)
    simulation.set_velocities(300.0, seed=2)
    renamed = r"Simulation\.energies is deprecated.*Simulation\.observables"
    with pytest.warns(DeprecationWarning, match=renamed):
        old = simulation.energies(pressure=False)
    new = simulation.observables(pressure=False)
    assert old == pytest.approx(new, nan_ok=True) and new["temperature"] == pytest.approx(300.0)
