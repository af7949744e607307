"""Every exception class the suite defines hangs under the one root in ``common.errors``."""

import importlib
import inspect
import pkgutil

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
