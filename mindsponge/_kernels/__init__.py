"""Compiled CPU kernels of the non-bonded forces, built on first use by :mod:`common.extensions`.

:func:`nonbonded` returns the module compiled from ``nonbonded.cpp`` (``pair_forces``,
``cell_pairs``, ``pme_spread``, ``pme_gather``), or ``None`` when it cannot be built or
``MINDSCIENCE_NO_EXTENSIONS=1``. Callers use it only for CPU tensors in forward-only
computations (or the forward of a custom autograd Function with an analytic backward) and
keep a complete pure torch path for everything else.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

from common import extensions

__all__ = ["nonbonded", "usable"]

_SOURCE = Path(__file__).with_name("nonbonded.cpp")


def nonbonded() -> ModuleType | None:
    """The compiled non-bonded kernels, or ``None`` (the pure torch path is used)."""
    return extensions.load("mindsponge_nonbonded", [_SOURCE])


def usable(*tensors: Tensor) -> ModuleType | None:
    """The kernels if every tensor is a float32/float64 CPU tensor, else ``None``."""
    if not all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) for t in tensors):
        return None
    return nonbonded()
