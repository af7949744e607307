"""Bridges to other packages: ``openmm`` (System -> ForceField) and ``ase`` (Calculator).

``load_amber``, ``load_gromacs`` and ``load_charmm`` (systems prepared for Amber, GROMACS and
CHARMM, read through OpenMM) are :mod:`mindsponge.interop.openmm`'s, importable from here too.
"""

import importlib

_FROM_OPENMM = {"load_amber", "load_gromacs", "load_charmm"}

__all__ = ["openmm", "ase", *sorted(_FROM_OPENMM)]


def __getattr__(name):
    if name in {"openmm", "ase"}:
        return importlib.import_module(f"mindsponge.interop.{name}")
    if name in _FROM_OPENMM:  # imported on first use: importing mindsponge stays cheap
        return getattr(importlib.import_module("mindsponge.interop.openmm"), name)
    raise AttributeError(f"module 'mindsponge.interop' has no attribute {name!r}")
