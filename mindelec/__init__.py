"""mindelec: differentiable electromagnetic simulation (FDTD, FDFD, PINNs, surrogates).

Units are SI throughout: metres, seconds, F/m, H/m, S/m; frequencies in Hz.
Submodules load on first use: ``import mindelec as me; me.fdtd.Simulation(...)``.
"""

import importlib

__version__ = "0.1.0"

_SUBMODULES = {
    "fdtd",
    "fdfd",
    "ports",
    "multiport",
    "diversity",
    "dipole_pairs",
    "modes",
    "pinn",
    "cad",
    "cad_assembly",
    "cad_materials",
    "cad_phone",
    "gds",
    "voxels",
    "point_clouds",
    "devices",
    "data",
    "surrogate",
    "sweeps",
    "mie",
    "conductors",
    "lines",
    "line_impedance",
    "quasi_tem",
    "sar",
}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"mindelec.{name}")
    raise AttributeError(f"module 'mindelec' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES)
