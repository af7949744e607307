"""mindsponge: differentiable molecular dynamics on PyTorch.

Units are those of OpenMM: nm, ps, amu, kJ/mol, elementary charge, K, bar.

Submodules load on first use, so ``import mindsponge as ms`` is cheap and
``ms.interop.openmm``, ``ms.forcefield`` or ``ms.System`` work without further imports.
"""

import importlib

__version__ = "0.1.0"

_SUBMODULES = {
    "system", "topology", "space", "neighbors", "forcefield", "interop", "build", "potentials",
    "integrators", "constraints", "thermostats", "barostats", "minimize", "simulation", "context",
    "constraint_sets", "checkpoint", "overlaps", "reporters", "colvar", "bias", "train", "analysis", "labels",
    "molecules", "normal_modes", "label_io", "alchemy", "free_energy", "free_energy_analysis",
    "free_energy_plots",
}
# public names re-exported from submodules: name -> module
_EXPORTS = {
    "System": "mindsponge.system",
    "Topology": "mindsponge.topology",
    "ForceField": "mindsponge.forcefield",
    "forces": "mindsponge.forcefield",
    "energy_and_forces": "mindsponge.forcefield",
    "Simulation": "mindsponge.simulation",
}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"mindsponge.{name}")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'mindsponge' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES | set(_EXPORTS))
