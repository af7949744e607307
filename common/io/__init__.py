"""HDF5 and checkpoint I/O that survives a kill at any moment, and never returns damaged data.

Four rooms:

* :mod:`common.io.tables`: :class:`H5Writer` appends records to columnar HDF5 tables: one
  resizable, chunked, checksummed dataset per key, first axis the record. Every record
  whose :meth:`H5Writer.append` returned stays readable after the writing process is
  killed (SIGKILL, OOM killer, a cluster's time limit), and the file still opens. One
  writer per file, by the file's identity (:mod:`common.io.locking`).
  :mod:`common.io.reading`: :func:`read_table` and :class:`H5Dataset` (a
  ``torch.utils.data.Dataset``) read them, returning only records that were really written
  or raising :class:`~common.errors.DataError` naming the file; they never hang
  (:mod:`common.io.heaps` checks a string column's heap, on which HDF5 itself can loop).
* :mod:`common.io.recovery`: the superblock (checksum, end-of-file address, the flags a
  killed writer leaves) and the undo copy that makes table creation kill-safe;
  :mod:`common.io.check` (``python -m common.io check FILE``) reports, table by table and
  in bounded time, what of a file is intact and what is recoverable.
* :mod:`common.io.checkpoint`: :func:`save_checkpoint` / :func:`load_checkpoint`, a nested
  state (tensors, arrays, numbers, strings, RNG states) written atomically with its SHA-256
  and its kind, verified and checked for NaN on load.
* :mod:`common.io.provenance`: :func:`provenance` / :func:`write_provenance`: versions,
  time, host, git commit, parameters and seed, stored as HDF5 attributes.

Example:
    >>> import numpy as np, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "samples.h5"
    >>> with H5Writer(path, attributes={"seed": 1}) as writer:
    ...     for index in range(3):
    ...         writer.append({"sample_id": index, "energy": np.full(2, float(index))})
    ...     writer.append({"sample_id": 7, "message": "diverged"}, group="failed")
    >>> read_table(path)["energy"].tolist()
    [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    >>> read_table(path, group="failed")["message"].tolist()
    ['diverged']
"""

from typing import Any

from common.io.check import CheckReport, check
from common.io.checkpoint import load_checkpoint, save_checkpoint
from common.io.provenance import provenance, write_provenance
from common.io.reading import read_table
from common.io.tables import COMMITTED, H5Writer

__all__ = [
    "H5Writer",
    "H5Dataset",  # noqa: F822  (imported on first access by __getattr__, so the import stays torch-free)
    "read_table",
    "save_checkpoint",
    "load_checkpoint",
    "provenance",
    "write_provenance",
    "check",
    "CheckReport",
    "COMMITTED",
]


def __getattr__(name: str) -> Any:
    if name == "H5Dataset":
        from common.io.dataset import H5Dataset

        globals()["H5Dataset"] = H5Dataset
        return H5Dataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
