"""Compiled CPU kernels of the non-bonded and bonded forces and of the constraints, built on first use by
:mod:`common.extensions`.

:func:`nonbonded` returns the module compiled from ``nonbonded.cpp``, ``cell_search.cpp``,
``cluster_search.cpp``, ``cluster_forces.cpp`` and ``pme.cpp`` (``pair_forces``, ``cluster_forces``,
``cluster_pairs``, ``cell_neighbors``, ``rows_to_pairs``, ``prepare_pairs``, ``pme_spread``,
``pme_gather``), :func:`bonded` the one from ``bonded.cpp`` (``bond_forces``, ``angle_forces``,
``torsion_forces``, ``improper_forces``) and :func:`constraints` the one from ``constraints.cpp``
(``settle_positions``, ``settle_velocities``, ``shake_positions``, ``rattle_velocities``), or ``None``
when they cannot be built or ``MINDSCIENCE_NO_EXTENSIONS=1``. Callers use it only for CPU tensors in
forward-only computations (or the forward of a custom autograd Function with an analytic backward) and
keep a complete pure torch path for everything else.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

from common import extensions

__all__ = ["bonded", "constraints", "nonbonded", "usable"]

# one module from five translation units: the pair kernels (and the bindings), the searches, PME
_SOURCES = [Path(__file__).with_name(name) for name in
            ("nonbonded.cpp", "cell_search.cpp", "cluster_search.cpp", "cluster_forces.cpp", "pme.cpp")]
_CONSTRAINTS_SOURCE = Path(__file__).with_name("constraints.cpp")
_BONDED_SOURCE = Path(__file__).with_name("bonded.cpp")
# no errno and no floating-point traps: lets the pair loop (sqrt, selects) vectorise; results are unchanged
_CFLAGS = ("-fno-math-errno", "-fno-trapping-math")


def nonbonded() -> ModuleType | None:
    """The compiled non-bonded kernels, or ``None`` (the pure torch path is used)."""
    return extensions.load("mindsponge_nonbonded", _SOURCES, extra_cflags=_CFLAGS)


def bonded(*tensors: Tensor) -> ModuleType | None:
    """The compiled bonded-force kernels if every tensor is a float32/float64 CPU tensor, else ``None``."""
    if not _plain_cpu(*tensors):
        return None
    return extensions.load("mindsponge_bonded", [_BONDED_SOURCE], extra_cflags=_CFLAGS)


def constraints(*tensors: Tensor) -> ModuleType | None:
    """The compiled constraint kernels (SETTLE, SHAKE, RATTLE) if every tensor is a float32/float64 CPU
    tensor that does not require grad, else ``None``."""
    if any(t.requires_grad for t in tensors) or not _plain_cpu(*tensors):
        return None
    return extensions.load("mindsponge_constraints", [_CONSTRAINTS_SOURCE], extra_cflags=_CFLAGS)


def _plain_cpu(*tensors: Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) for t in tensors)


def usable(*tensors: Tensor) -> ModuleType | None:
    """The kernels if every tensor is a float32/float64 CPU tensor, else ``None``."""
    if not _plain_cpu(*tensors):
        return None
    return nonbonded()
