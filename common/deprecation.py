"""Old names kept working for one release, with a ``DeprecationWarning`` that names the new one.

Three shapes of rename, one helper each:

- a keyword argument: :func:`renamed_arguments` (``frequency=`` -> ``every=``);
- a method: :func:`deprecated_method` (``Simulation.force`` -> ``Simulation.energy_and_forces``);
- a module attribute that moved or was renamed: :func:`moved_attributes`, used as a module's
  ``__getattr__`` (``mindelec.data.load_mesh`` -> ``mindelec.cad.load_mesh``).

Example::

    class MonteCarloBarostat:
        @renamed_arguments(frequency="every")
        def __init__(self, pressure, temperature, every=25): ...

    class Simulation:
        force = deprecated_method("energy_and_forces")

    # in the old module mindelec/data.py
    __getattr__ = moved_attributes(__name__, {"load_mesh": "mindelec.cad:load_mesh"})
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable

from common.errors import ConfigurationError

__all__ = ["warn_deprecated", "renamed_arguments", "deprecated_method", "moved_attributes"]


def warn_deprecated(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (both as the user would write them)."""
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}",
                  DeprecationWarning, stacklevel=stacklevel)


def renamed_arguments(**renames: str) -> Callable:
    """Decorator accepting old keyword names: ``renamed_arguments(old="new", ...)``.

    A call with the old keyword warns and is passed on under the new one; a call that gives
    both raises :class:`~common.errors.ConfigurationError` (the two could disagree).
    """

    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise ConfigurationError(
                        f"{function.__qualname__}: give {new}= only, not also the deprecated {old}=")
                warn_deprecated(f"{function.__qualname__}({old}=...)",
                                f"{function.__qualname__}({new}=...)")
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper

    return decorate


def deprecated_method(new_name: str) -> Callable:
    """A method that warns and calls ``self.<new_name>`` with the same arguments."""

    def method(self, *args, **kwargs):
        warn_deprecated(f"{type(self).__name__}.{method.__name__}", f"{type(self).__name__}.{new_name}")
        return getattr(self, new_name)(*args, **kwargs)

    method.__doc__ = f"Deprecated: use :meth:`{new_name}`."

    class _Named:  # gives the method its attribute name when the class is created
        def __set_name__(self, owner, name):
            method.__name__ = name
            method.__qualname__ = f"{owner.__name__}.{name}"
            setattr(owner, name, method)

    return _Named()


def moved_attributes(module_name: str, moves: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for attributes that moved: ``{"old": "new.module:new_name"}``.

    Looking up an old name warns, imports the new module and returns the object; any other
    missing name raises ``AttributeError`` as usual.
    """

    def __getattr__(name: str):
        if name not in moves:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        target_module, _, target_name = moves[name].partition(":")
        warn_deprecated(f"{module_name}.{name}", f"{target_module}.{target_name}")
        return getattr(importlib.import_module(target_module), target_name)

    return __getattr__
