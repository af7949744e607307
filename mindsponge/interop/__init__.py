"""Bridges to other packages: ``openmm`` (System -> ForceField) and ``ase`` (Calculator)."""

import importlib


def __getattr__(name):
    if name in {"openmm", "ase"}:
        return importlib.import_module(f"mindsponge.interop.{name}")
    raise AttributeError(f"module 'mindsponge.interop' has no attribute {name!r}")
