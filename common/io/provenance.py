"""Where a result came from: versions, time, host, git commit, parameters and seed.

:func:`provenance` gathers them as a flat dict of HDF5-attribute-friendly values;
:func:`write_provenance` stores that dict as attributes of an open HDF5 object.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import platform
import socket
import subprocess
import sys
from typing import Any

import h5py
import numpy as np

from common.errors import ArgumentTypeError

__all__ = ["provenance", "write_provenance"]

def _json_default(value: Any) -> Any:
    import torch

    from common import config

    if isinstance(value, (np.ndarray, np.generic, torch.Tensor)):
        return value.tolist()
    if isinstance(value, (pathlib.PurePath, torch.dtype, torch.device)):
        return str(value)
    if hasattr(value, "__dataclass_fields__") and not isinstance(value, type):
        return config.to_dict(value)
    raise ArgumentTypeError(
        f"provenance: parameters hold {type(value).__name__} {value!r:.80}, not JSON-serialisable"
    )


def _git_commit() -> tuple[str | None, bool | None]:
    """The commit of the checkout this package lives in, and whether it has local changes."""
    root = pathlib.Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None, None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def provenance(parameters: Any = None, seed: int | None = None) -> dict[str, Any]:
    """Where a result came from: versions, time, host, code commit, parameters and seed.

    Args:
        parameters: the run's parameters (a dict or a configuration dataclass); stored
            as a JSON string under ``"parameters"``.
        seed: the random seed, if any.

    Returns:
        A flat dict of strings, numbers and booleans (HDF5-attribute friendly):
        ``package``, ``version``, ``python``, ``torch``, ``numpy``, ``h5py``,
        ``platform``, ``host``, ``time_utc`` (ISO 8601), ``command``, and when known
        ``git_commit``, ``git_dirty``, ``parameters``, ``seed``.
    """
    import torch

    import common

    record: dict[str, Any] = {
        "package": "mindscience-torch",
        "version": common.__version__,
        "python": platform.python_version(),
        "torch": str(torch.__version__),  # a str subclass h5py cannot store
        "numpy": np.__version__,
        "h5py": h5py.__version__,
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }
    commit, dirty = _git_commit()
    if commit is not None:
        record["git_commit"], record["git_dirty"] = commit, dirty
    if parameters is not None:
        record["parameters"] = json.dumps(parameters, default=_json_default, sort_keys=True)
    if seed is not None:
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise ArgumentTypeError(f"provenance: seed must be an int, got {type(seed).__name__} {seed!r}")
        record["seed"] = int(seed)
    return record


def write_provenance(
    h5_object: h5py.Group | h5py.Dataset, parameters: Any = None, seed: int | None = None
) -> dict[str, Any]:
    """Store :func:`provenance` as attributes of an open, writable HDF5 group, file or dataset.

    Returns:
        The dict that was written.
    """
    if not isinstance(h5_object, (h5py.Group, h5py.Dataset)):
        raise ArgumentTypeError(
            f"write_provenance: h5_object must be an h5py File, Group or Dataset, "
            f"got {type(h5_object).__name__}"
        )
    record = provenance(parameters, seed)
    h5_object.attrs.update(record)
    return record
