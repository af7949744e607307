"""Readers of H5Writer tables that never lie and never hang.

:func:`read_table` returns the complete records of a table, or raises a
:class:`~common.errors.DataError` naming the file and what is wrong with it. Before and
while reading it checks, in this order:

1. the superblock: HDF5 signature, checksum, and the file's length against the end-of-file
   address the superblock records (a file cut short is refused before HDF5 sees it);
2. HDF5's own checksums of every piece of metadata, read in SWMR mode (so that a live or
   killed writer does not matter) with the number of read attempts bounded
   (:data:`SWMR_READ_ATTEMPTS`): HDF5 retries a metadata checksum failure with a delay
   that doubles each time, which by default keeps a reader of a damaged file busy for hours;
3. the table's counter against each column's length, and that every chunk holding a
   counted row exists and lies inside the file (a chunk past the end of a truncated file
   would otherwise read as zeros);
4. each chunk's ``fletcher32`` checksum, which HDF5 verifies as it reads the data (the last
   chunk of a column, if a kill tore its rewrite, is recognised as such and its committed
   rows are read from its bytes: :func:`~common.io.recovery.torn_tail`);
5. for a string column, the global heap holding its strings, which carries no checksum and
   on which HDF5 hangs for ever if it is truncated or zeroed: walked and checked against the
   file's length before HDF5 reads it (:mod:`common.io.heaps`).

A read that fails while a live :class:`~common.io.H5Writer` holds the file (which may be
creating a table at that moment) is retried for up to :data:`LIVE_WRITER_RETRY_SECONDS`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import pathlib
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import h5py
import numpy as np

from common.errors import ConfigurationError, DataError, MissingFileError
from common.io import recovery
from common.io.locking import writer_is_live
from common.io.tables import COMMITTED, column_datasets, decode, group_name, table_groups

__all__ = ["read_table", "open_for_reading", "table_columns", "read_counter", "SWMR_READ_ATTEMPTS"]

SWMR_READ_ATTEMPTS = 28
"""HDF5 metadata read attempts in SWMR mode: the back-off doubles from 1 ns, so 28 attempts wait
at most about 0.3 s in all (HDF5's default, 100, waits for hours on a damaged file)."""

LIVE_WRITER_RETRY_SECONDS = 5.0
"""How long a reader retries a failed read while a live writer holds the file."""

_Result = TypeVar("_Result")


@functools.cache
def _metadata_read_attempts_setter() -> Callable[[int, int], int] | None:
    """``H5Pset_metadata_read_attempts`` of the HDF5 library h5py runs on, or ``None`` if not found.

    h5py does not wrap it; the library is found next to h5py (wheels) or on the system path
    (conda, distributions) and accepted only if it reports h5py's HDF5 version.
    """
    package = pathlib.Path(h5py.__file__).parent
    candidates = [
        path
        for folder in (package, package.parent / "h5py.libs", package / ".dylibs")
        for pattern in ("libhdf5*.so*", "libhdf5*.dylib", "hdf5*.dll")
        for path in sorted(glob.glob(str(folder / pattern)))
        if "_hl" not in pathlib.Path(path).name
    ]
    system = ctypes.util.find_library("hdf5")
    for candidate in [*candidates, *([system] if system else [])]:
        try:
            library = ctypes.CDLL(candidate)
            major, minor, release = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
            library.H5get_libversion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(release))
            setter = library.H5Pset_metadata_read_attempts
        except (OSError, AttributeError):
            continue
        if (major.value, minor.value, release.value) == h5py.version.hdf5_version_tuple[:3]:
            setter.argtypes, setter.restype = [ctypes.c_int64, ctypes.c_uint], ctypes.c_int
            return setter
    return None


def _source(path: pathlib.Path) -> pathlib.Path:
    """The bytes to read for ``path``: its undo copy while a table creation is under way or was cut short.

    The undo copy is the file as it was before the change, with every record appended
    until then (see :mod:`common.io.recovery`).
    """
    status = path.stat()
    undo = recovery.undo_path(path, (status.st_dev, status.st_ino))
    return undo if undo.exists() else path


def open_for_reading(path: str | os.PathLike, check_length: bool = True) -> h5py.File:
    """Open an H5Writer file read-only in SWMR mode, after checking its superblock and length.

    While a writer changes the file's structure (or if one was killed doing so), the
    undo copy of the file is opened instead: it holds every record appended before the change.

    Args:
        path: the HDF5 file.
        check_length: refuse a file shorter than the end-of-file address in its superblock
            (only :mod:`common.io.check` turns this off, to salvage what a truncated file holds).

    Raises:
        FileNotFoundError: no such file.
        DataError: not HDF5, a damaged superblock, a truncated file, or HDF5 cannot open it.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise MissingFileError(f"HDF5 file {str(path)!r} does not exist")
    source = _source(path) if check_length else path
    try:
        superblock = recovery.read_superblock(source)
        size = source.stat().st_size
    except FileNotFoundError:
        if source == path:
            raise
        return open_for_reading(path)  # the undo copy was removed since: the change is complete
    if check_length and superblock.end_of_file is not None and size < superblock.end_of_file:
        raise DataError(
            f"{path}: truncated: the file has {size} bytes but its superblock says HDF5 wrote "
            f"{superblock.end_of_file}"
        )
    access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    access.set_file_locking(False, True)  # readers neither take nor test HDF5's lock
    flags = h5py.h5f.ACC_RDONLY
    setter = _metadata_read_attempts_setter()
    if setter is not None and setter(access.id, SWMR_READ_ATTEMPTS) >= 0:
        flags |= h5py.h5f.ACC_SWMR_READ
    elif superblock.flags:  # a live or killed writer: SWMR is the only way in, with HDF5's retries
        flags |= h5py.h5f.ACC_SWMR_READ
    try:
        return h5py.File(h5py.h5f.open(os.fsencode(source), flags, fapl=access))
    except FileNotFoundError:
        if source == path:
            raise
        return open_for_reading(path)
    except (OSError, RuntimeError) as error:
        raise DataError(f"{path}: HDF5 cannot open it ({error})") from error


def table_columns(
    file: h5py.File, path: str | os.PathLike, group: str, keys: Iterable[str] | None
) -> tuple[int, dict[str, h5py.Dataset]]:
    """The number of complete records of the table ``group`` and its columns, after checking them.

    Raises:
        ValueError: no table at ``group``, or unknown ``keys`` (the caller's mistake).
        DataError: a column shorter than the counter, or a counted chunk missing or beyond the
            end of the file.
    """
    name = group_name(group)
    target = file if name == "/" else file.get(name)
    if not isinstance(target, h5py.Group) or COMMITTED not in target:
        raise ConfigurationError(
            f"{path}: no H5Writer table at group {name!r} "
            f"(tables: {[table for table, _ in table_groups(file)]})"
        )
    count, size = read_counter(target[COMMITTED], f"{path}, group {name!r}")
    columns = column_datasets(target)
    if keys is not None:
        keys = list(keys)
        unknown = [key for key in keys if key not in columns]
        if unknown:
            raise ConfigurationError(
                f"{path}, group {name!r}: unknown keys {unknown}; the table has {sorted(columns)}"
            )
        columns = {key: columns[key] for key in keys}
    for key, dataset in columns.items():
        if file.swmr_mode:
            dataset.refresh()
        where = f"{path}, group {name!r}, key {key!r}"
        if dataset.shape[0] < count:
            raise DataError(
                f"{where}: the table's counter says {count} records were written but the column has "
                f"{dataset.shape[0]} rows (damaged)"
            )
        _check_chunks(dataset, count, size, where)
    return count, columns


def read_counter(counter: h5py.Dataset, where: str) -> tuple[int, int]:
    """The number of complete records a table's counter holds, and the file's length then.

    The length is taken after the counter is read: the rows it counts reached the file first.

    Raises:
        DataError: naming ``where`` (the file and group): the counter lies beyond the file's
            end (truncated: HDF5 would read it as 0) or holds a negative number (damaged).
    """
    if counter.file.swmr_mode:
        counter.refresh()
    count = int(counter[0])
    size = os.stat(counter.file.filename).st_size
    offset = counter.id.get_offset()
    if offset is not None and offset + counter.id.get_storage_size() > size:
        raise DataError(f"{where}: truncated: the record counter lies beyond the file's end ({size} bytes)")
    if count < 0:
        raise DataError(f"{where}: the record counter holds {count}, not a number of records (damaged)")
    return count, size


def _check_chunks(dataset: h5py.Dataset, count: int, size: int, where: str) -> None:
    """Every chunk holding one of the first ``count`` rows exists and ends inside the file."""
    if dataset.chunks is None or count == 0:
        return
    rows = dataset.chunks[0]
    found: set[int] = set()
    beyond = []

    def visit(chunk: Any) -> None:
        if chunk.chunk_offset[0] < count:
            found.add(chunk.chunk_offset[0] // rows)
            if chunk.byte_offset + chunk.size > size:
                beyond.append(chunk.chunk_offset[0])

    dataset.id.chunk_iter(visit)
    if beyond:
        raise DataError(
            f"{where}: truncated: the chunk holding rows {beyond[0]}.. lies beyond the file's end "
            f"({size} bytes)"
        )
    missing = sorted(set(range(-(-count // rows))) - found)
    if missing:
        raise DataError(
            f"{where}: the chunk holding rows {missing[0] * rows}.. of the {count} written records is "
            "missing (damaged chunk index)"
        )


def read_consistently(path: str | os.PathLike, read: Callable[[h5py.File], _Result]) -> _Result:
    """``read(file)`` on the file opened by :func:`open_for_reading`, HDF5 errors raised as DataError.

    A failure while a live writer holds the file is retried for up to
    :data:`LIVE_WRITER_RETRY_SECONDS` (the writer may be creating a table).
    """
    deadline = time.monotonic() + LIVE_WRITER_RETRY_SECONDS
    while True:
        try:
            with open_for_reading(path) as file:
                try:
                    return read(file)
                except (OSError, RuntimeError, KeyError) as error:
                    raise DataError(f"{path}: cannot be read, the file is damaged ({error})") from error
        except DataError:
            if time.monotonic() >= deadline or not writer_is_live(path):
                raise
            time.sleep(0.05)


def read_column(dataset: h5py.Dataset, selection: Any, where: str) -> Any:
    """Rows ``selection`` of a column (see :func:`~common.io.tables.decode`); damage raises DataError.

    A chunk whose ``fletcher32`` checksum fails, or a string whose heap is truncated or
    damaged, raises a DataError naming ``where`` (the file, group and key) and, for a
    string, the row.
    """
    try:
        return decode(dataset, selection, where)
    except (OSError, RuntimeError) as error:
        raise DataError(f"{where}: cannot be read, the data is damaged ({error})") from error


def read_rows(dataset: h5py.Dataset, count: int, where: str) -> np.ndarray:
    """The first ``count`` rows of a column, checked; a last chunk torn by a kill gives its committed rows.

    See :func:`~common.io.recovery.torn_tail`: the committed rows of a chunk whose rewrite a
    kill interrupted are intact, and are taken from the chunk's bytes.
    """
    tail = recovery.torn_tail(dataset, count)
    if tail is None:
        return read_column(dataset, slice(0, count), where)
    first_row, rows = tail
    return np.concatenate([read_column(dataset, slice(0, first_row), where), rows])


def read_table(
    path: str | os.PathLike, group: str = "/", keys: Iterable[str] | None = None
) -> dict[str, Any]:
    """Read the complete records of an H5Writer table.

    Works while a writer is appending and after a writer was killed; only records whose
    append finished are returned. Never hangs: a damaged file raises within seconds.

    Args:
        path: the HDF5 file.
        group: the table, ``"/"`` for the root.
        keys: the columns to read (default all).

    Returns:
        column name -> numpy array of shape ``(n_records, *record_shape)``; string columns
        are object arrays of ``str``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: no table at ``group`` or unknown ``keys``.
        DataError: the file is damaged (truncated, a checksum fails, a chunk is missing);
            the message names the file, and the group and key when known.
    """

    def read(file: h5py.File) -> dict[str, Any]:
        count, columns = table_columns(file, path, group, keys)
        return {
            key: read_rows(dataset, count, f"{path}, group {group_name(group)!r}, key {key!r}")
            for key, dataset in columns.items()
        }

    return read_consistently(path, read)
