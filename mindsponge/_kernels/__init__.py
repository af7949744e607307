"""Compiled CPU kernels of mindsponge, one module built on first use by :mod:`common.extensions` (or ahead of
time by ``python -m common.extensions build``, which ``make install`` runs).

The module (``kernels.h`` lists its parts) holds the non-bonded kernels (``pair_forces``, ``cluster_forces``,
``cluster_pairs``, ``cell_neighbors``, ``rows_to_pairs``, ``prepare_pairs``, ``pme_spread``, ``pme_gather``),
the bonded ones (``bond_forces``, ``angle_forces``, ``torsion_forces``, ``improper_forces``), the constraints
(``settle_positions``, ``settle_velocities``, ``shake_positions``, ``rattle_velocities``) and the step loop of
:mod:`mindsponge.step_loop` (``Dynamics``, ``ForceProgram`` and the force terms). :func:`nonbonded`,
:func:`bonded`, :func:`constraints` and :func:`dynamics` return it, or ``None`` when it cannot be built or
``MINDSCIENCE_NO_EXTENSIONS=1``. Callers use it only for CPU tensors in forward-only computations (or the
forward of a custom autograd Function with an analytic backward) and keep a complete pure torch path for
everything else. No result of the kernels depends on the number of threads.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

from common import extensions

__all__ = ["NAME", "bonded", "constraints", "dynamics", "load", "nonbonded", "usable"]

_SOURCES = [Path(__file__).with_name(name) for name in
            ("module.cpp", "dynamics.cpp", "nonbonded_term.cpp", "expression_term.cpp", "nonbonded.cpp",
             "cell_search.cpp", "cluster_search.cpp", "cluster_forces.cpp", "pme.cpp", "bonded.cpp",
             "constraints.cpp")]
# no errno and no floating-point traps: lets the pair loop (sqrt, selects) vectorise; results are unchanged.
_CFLAGS = ("-fno-math-errno", "-fno-trapping-math")
NAME = "mindsponge_kernels"


def load() -> ModuleType | None:
    """The compiled module, or ``None`` (the pure torch path is used)."""
    return extensions.load(NAME, _SOURCES, extra_cflags=_CFLAGS)


def nonbonded() -> ModuleType | None:
    """The compiled kernels (for the non-bonded forces), or ``None``."""
    return load()


def dynamics() -> ModuleType | None:
    """The compiled kernels (for the step loop), or ``None``."""
    return load()


def bonded(*tensors: Tensor) -> ModuleType | None:
    """The compiled kernels if every tensor is a float32/float64 CPU tensor, else ``None``."""
    if not _plain_cpu(*tensors):
        return None
    return load()


def constraints(*tensors: Tensor) -> ModuleType | None:
    """The compiled kernels if every tensor is a float32/float64 CPU tensor that does not require grad,
    else ``None``."""
    if any(t.requires_grad for t in tensors) or not _plain_cpu(*tensors):
        return None
    return load()


def _plain_cpu(*tensors: Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) for t in tensors)


def usable(*tensors: Tensor) -> ModuleType | None:
    """The kernels if every tensor is a float32/float64 CPU tensor, else ``None``."""
    if not _plain_cpu(*tensors):
        return None
    return load()
