"""Compiled CPU kernel of the forward-only Yee update, built on first use by :mod:`common.extensions`.

:func:`yee` returns the module compiled from ``yee.cpp`` (``curl_update``: the curl update of all H or
all E components in one pass over the grid, the CPML auxiliary fields and corrections of their slabs
included), or ``None`` when it cannot be built or
``MINDSCIENCE_NO_EXTENSIONS=1``. :class:`~mindelec.fdtd.updates.YeeStepper` uses it only for CPU
float32/float64 fields updated in place without a graph, and keeps the pure torch path for everything
else (differentiable recomputation, CUDA).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from common import extensions

__all__ = ["yee"]

_SOURCE = Path(__file__).with_name("yee.cpp")


def yee() -> ModuleType | None:
    """The compiled Yee update kernel, or ``None`` (the pure torch path is used)."""
    return extensions.load("mindelec_yee", [_SOURCE])
