"""Classical force fields as sums of differentiable energy terms.

Every term is a :class:`torch.nn.Module` mapping positions ``(N, 3)`` (nm) and a box
``(3, 3)`` (nm, or ``None``) to an energy (kJ/mol); :class:`ForceField` sums them and
reports them by name; :func:`forces` returns ``-dE/dx`` (kJ/mol/nm).

- :mod:`~mindsponge.forcefield.base`: :class:`EnergyTerm`, :class:`ForceField`,
  :class:`VirtualSites`, :class:`SystemConstraints`, :func:`forces`.
- :mod:`~mindsponge.forcefield.bonded`: bonds, angles, Urey-Bradley, periodic and improper
  torsions, CMAP.
- :mod:`~mindsponge.forcefield.nonbonded`, :mod:`~mindsponge.forcefield.ewald`:
  Lennard-Jones and Coulomb (cutoff, reaction field, Ewald, PME), exclusions, 1-4 pairs.
- :mod:`~mindsponge.forcefield.custom`, :mod:`~mindsponge.forcefield.expressions`: terms given
  by OpenMM-style energy expressions (OpenMM's Custom*Forces) and tabulated functions.

Names of the bonded, non-bonded, custom and expression modules are re-exported here on first use.
"""

import importlib

from mindsponge.forcefield.base import (
    DuplicateTermError,
    EnergyTerm,
    ForceField,
    SystemConstraints,
    VirtualSites,
    energy_and_forces,
    forces,
)

__all__ = [
    "DuplicateTermError",
    "EnergyTerm",
    "ForceField",
    "SystemConstraints",
    "VirtualSites",
    "energy_and_forces",
    "forces",
]

_LAZY_MODULES = ("bonded", "nonbonded", "ewald", "custom", "expressions")


def __getattr__(name):
    if name in _LAZY_MODULES:
        return importlib.import_module(f"mindsponge.forcefield.{name}")
    for module_name in _LAZY_MODULES:
        try:
            module = importlib.import_module(f"mindsponge.forcefield.{module_name}")
        except ModuleNotFoundError as error:
            if error.name != f"mindsponge.forcefield.{module_name}":
                raise
            continue
        if name in getattr(module, "__all__", ()):
            return getattr(module, name)
    raise AttributeError(f"module 'mindsponge.forcefield' has no attribute {name!r}")
