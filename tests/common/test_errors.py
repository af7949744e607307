"""Every exception class the suite defines hangs under the one root in ``common.errors``."""

import importlib
import inspect
import pkgutil

import pytest

import common
import mindelec
import mindsponge
from common.errors import ConfigurationError, DataError, MindScienceError, SimulationError


def _modules():
    for package in (common, mindelec, mindsponge):
        yield package
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            yield importlib.import_module(info.name)  # the test set-up installs every extra


def _exception_classes():
    found = {}
    for module in _modules():
        for value in vars(module).values():
            if (inspect.isclass(value) and issubclass(value, BaseException)
                    and not issubclass(value, Warning) and not value.__name__.startswith("_")
                    and value.__module__.split(".")[0] in ("common", "mindelec", "mindsponge")):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_suite_exception_derives_from_the_root():
    classes = _exception_classes()
    # The walk must have found the suite's own classes, or the check below proves nothing.
    assert len(classes) >= 12, sorted(classes)
    strays = sorted(name for name, cls in classes.items() if not issubclass(cls, MindScienceError))
    assert not strays, f"exception classes outside common.errors' tree: {strays}"


def test_branches_keep_the_builtin_bases_old_callers_catch():
    assert issubclass(ConfigurationError, ValueError)
    assert issubclass(DataError, ValueError)
    assert issubclass(SimulationError, RuntimeError)
    from mindsponge.constraints import ConstraintError
    from mindsponge.pdb import PDBError

    assert issubclass(ConstraintError, SimulationError) and issubclass(ConstraintError, RuntimeError)
    assert issubclass(PDBError, DataError) and issubclass(PDBError, ValueError)


# bad values tried for each parameter of a public callable that can be called with its defaults alone
_BAD_VALUES = {int: (-1, 0, 2.5, "bad"), float: (float("nan"), -1.0, "bad"), bool: ("bad",), str: ("",)}
_WALKED_PACKAGES = ("common", "mindelec", "mindsponge")


def _public_callables():
    for module in _modules():
        if module.__name__.split(".")[0] not in _WALKED_PACKAGES or "cli" in module.__name__:
            continue
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name, None)
            if callable(value) and not (inspect.isclass(value) and issubclass(value, BaseException)):
                yield f"{module.__name__}.{name}", value


def _called_with_defaults_alone(function):
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return False
    return all(parameter.default is not inspect.Parameter.empty or parameter.kind in
               (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) for parameter in parameters)


def test_the_public_api_refuses_bad_arguments_with_the_suites_errors():
    """Every public function and class of the walked packages that runs on its defaults is called with one
    bad argument at a time (negative, zero, fractional or text counts; NaN, negative or text numbers;
    empty strings). Whatever it raises must be one of the suite's errors (a bad count reaching
    ``torch.empty`` as a RuntimeError, a TypeError from comparing text with a number, are not)."""
    strays, refusals, seen = [], 0, set()
    for name, function in _public_callables():
        if id(function) in seen or not _called_with_defaults_alone(function):
            continue
        seen.add(id(function))
        for parameter in inspect.signature(function).parameters.values():
            for bad in _BAD_VALUES.get(type(parameter.default), ()):
                try:
                    function(**{parameter.name: bad})
                except MindScienceError:
                    refusals += 1
                except Exception as error:  # noqa: BLE001 (the point: anything else is a stray)
                    strays.append(f"{name}({parameter.name}={bad!r}): {type(error).__name__}: {error}")
    assert refusals >= 150, refusals  # the walk reached the validators, or it proves nothing
    assert not strays, "\n".join(strays)


def test_named_bad_inputs_raise_the_suites_errors():
    import torch

    import mindsponge as ms
    from common.errors import ArgumentTypeError

    with pytest.raises(ConfigurationError, match="chain_length"):
        ms.thermostats.NoseHooverChain(300.0, chain_length=0)
    with pytest.raises(MindScienceError, match="positions"):
        ms.System(torch.zeros(3, 2, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    with pytest.raises(ConfigurationError, match="dt"):
        ms.integrators.VelocityVerlet("0.001")
    with pytest.raises(ArgumentTypeError, match="callable") as error:
        ms.colvar.FunctionColvar("not a function")
    assert isinstance(error.value, TypeError)  # old `except TypeError` clauses still catch it
    from mindelec import fdtd

    with pytest.raises(ConfigurationError, match="FieldProbe: name must be a non-empty string"):
        fdtd.FieldProbe(name="", position=(0.0, 0.0))
    with pytest.raises(ConfigurationError, match="positive cell sizes"):
        fdtd.Grid(size=(1.0, 1.0), cell_size=-1)
    with pytest.raises(ConfigurationError, match="PML: thickness"):
        fdtd.PML(thickness=0)
