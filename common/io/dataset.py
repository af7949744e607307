"""A ``torch.utils.data.Dataset`` over the records of H5Writer tables (imports torch, so
:mod:`common.io` loads it only when ``common.io.H5Dataset`` is first used)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Iterable
from typing import Any

import h5py
import numpy as np
import torch.utils.data

from common.errors import ArgumentTypeError, ConfigurationError, OutOfRangeError
from common.io import recovery
from common.io.reading import open_for_reading, read_column, read_consistently, table_columns
from common.io.tables import group_name

__all__ = ["H5Dataset"]


class H5Dataset(torch.utils.data.Dataset):
    """A ``torch.utils.data.Dataset`` over the records of H5Writer tables in one or more files.

    Item ``i`` is a dict mapping each column to a tensor (strings stay ``str``), after
    ``transform`` if one is given. Files are opened lazily, once per process, so the dataset
    can be used with ``DataLoader(num_workers > 0)``. The length is the number of complete
    records when the dataset was made (files may still grow). The files are checked as
    :func:`~common.io.read_table` checks them; a damaged chunk raises a
    :class:`~common.errors.DataError` naming the file and key when the item is read.

    Args:
        paths: one file or a sequence of files (concatenated in that order).
        keys: the columns to load (default all; every file must have them).
        transform: optional function applied to each item dict.
        group: the table in each file (``"/"`` for the root).
    """

    def __init__(
        self,
        paths: str | os.PathLike | Iterable[str | os.PathLike],
        keys: Iterable[str] | None = None,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        group: str = "/",
    ):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.paths = [pathlib.Path(path) for path in paths]
        if not self.paths:
            raise ConfigurationError("H5Dataset: paths is empty; give at least one HDF5 file")
        self.keys = None if keys is None else list(keys)
        self.transform = transform
        self.group = group
        self.counts = [
            read_consistently(path, lambda file, path=path: table_columns(file, path, group, self.keys)[0])
            for path in self.paths
        ]
        self.offsets = np.cumsum([0, *self.counts])
        self._handles: dict[int, tuple[h5py.File, dict[str, h5py.Dataset], dict[str, Any]]] = {}
        self._pid = os.getpid()

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, index: int) -> Any:
        if not isinstance(index, (int, np.integer)):
            raise ArgumentTypeError(f"H5Dataset index must be an int, got {type(index).__name__}")
        length = len(self)
        if not -length <= index < length:
            raise OutOfRangeError(f"H5Dataset index {index} out of range for {length} records")
        index = int(index) % length
        file_index = int(np.searchsorted(self.offsets, index, side="right")) - 1
        columns, tails = self._columns(file_index)
        row = index - int(self.offsets[file_index])
        where = f"{self.paths[file_index]}, group {group_name(self.group)!r}"
        item = {}
        for key, dataset in columns.items():
            tail = tails[key]
            if tail is not None and row >= tail[0]:  # the committed rows of a chunk a kill tore
                value = tail[1][row - tail[0]]
            else:
                value = read_column(dataset, row, f"{where}, key {key!r}")
            item[key] = value.tolist() if value.dtype == object else torch.from_numpy(np.array(value))
        return self.transform(item) if self.transform is not None else item

    def _columns(self, file_index: int) -> tuple[dict[str, h5py.Dataset], dict[str, Any]]:
        """The columns of a file, and for each the committed rows of a torn last chunk (or None)."""
        if self._pid != os.getpid():  # a forked DataLoader worker: never share HDF5 handles
            self._handles, self._pid = {}, os.getpid()
        if file_index not in self._handles:
            path = self.paths[file_index]
            file = open_for_reading(path)
            columns = table_columns(file, path, self.group, self.keys)[1]
            count = self.counts[file_index]
            tails = {key: recovery.torn_tail(dataset, count) for key, dataset in columns.items()}
            self._handles[file_index] = (file, columns, tails)
        return self._handles[file_index][1:]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_handles"] = {}
        return state

    def close(self) -> None:
        """Close the files this process opened (they reopen on the next access)."""
        for file, *_ in self._handles.values():
            file.close()
        self._handles = {}
