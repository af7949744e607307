"""The append-only, kill-safe HDF5 table writer :class:`H5Writer`.

A table is an HDF5 group holding one resizable, chunked dataset per column (first axis
the record) and a counter dataset ``_committed``: the number of complete records.

How the writer stays consistent (this is what the kill and damage tests exercise):

1. The file uses the latest HDF5 format and is written in SWMR (single-writer /
   multiple-reader) mode. In that mode HDF5 orders its metadata writes so that the
   file on disk is consistent after every write: a reader opening it at any moment,
   including after the writer died, sees a valid file. All HDF5 metadata of this format
   carries a checksum, and every numeric column is written with HDF5's per-chunk checksum
   (``fletcher32``), so damaged bytes raise an error when read instead of being returned.
   (HDF5 allows no filter on variable-length strings: a string column's chunks hold heap
   references, and neither they nor the string bytes in HDF5's global heap carry a
   checksum; :func:`decode` checks the references and the heap's structure against the
   file before HDF5 reads them, see :mod:`common.io.heaps`.)
2. An append writes the record's rows, flushes the file, and only then increments and
   flushes the counter. Readers use only the first ``_committed`` rows, so a record cut
   in half by a kill is never reported.
3. One writer per file, decided by the file's identity (device and inode), not its name:
   :class:`~common.io.locking.WriterLock`. A symlink or hard link to a file being written
   is refused, and the "open for writing" flags are only cleared by the lock's holder.
4. Creating a table or column (which SWMR mode does not make safe) is done in place, in
   ordinary (non-SWMR) mode, after saving an undo copy of the file
   (:func:`~common.io.recovery.save_undo`); a writer killed during the change leaves the
   copy, which the next writer puts back. The file keeps its inode, so links survive.
   This happens once per table; in a file that already holds large tables it costs a
   file copy.
5. A killed writer leaves the superblock flagged "open for writing", which makes plain
   ``h5py.File(path)`` refuse the file (the readers of :mod:`common.io.reading` open it in
   SWMR mode and do not mind). Reopening the file with an :class:`H5Writer` clears that
   flag (as HDF5's ``h5clear`` tool does) and drops the rows of an unfinished record.

Only the writer's process can be killed this way without loss: a power failure can still
lose records the operating system had not yet written to the disk.
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

import h5py
import numpy as np

from common.errors import ArgumentTypeError, ConfigurationError, DataError
from common.io import heaps, recovery
from common.io.locking import WriterLock

__all__ = ["H5Writer", "COMMITTED"]

COMMITTED = "_committed"
"""Name of the per-table dataset holding the number of complete records."""

_CHUNK_BYTES = 1 << 18  # target chunk size; a chunk holds whole records
_MAX_CHUNK_ROWS = 4096
_STRING = h5py.string_dtype()


class H5Writer:
    """Append-only, columnar, kill-safe HDF5 writer.

    ``append(record)`` adds one record to a table: a dict mapping column names to
    values (scalars, strings, numpy arrays or tensors of any device). The first
    record of a table creates one resizable, chunked, checksummed dataset per key, of
    shape ``(n_records, *value.shape)``; later records must have the same keys, shapes
    and dtypes. After ``append`` returns the record is on its way to the disk and
    survives a kill of the process (see the module docstring for how).

    Tables are HDF5 groups: ``group="/"`` (the default) is the file's root,
    ``group="failed"`` a group ``failed``. Each holds a counter dataset
    ``_committed`` (shape ``(1,)``) with its number of complete records; other
    readers should trust it rather than the datasets' lengths.

    Args:
        path: the HDF5 file (any name of it: a symlink or hard link meets the same lock).
        mode: ``"a"`` appends to the file if it exists (recovering it if a writer was
            killed) and creates it otherwise; ``"w"`` empties it (in place: links to it
            stay links to it).
        attributes: attributes of the root group (for instance :func:`provenance`),
            written when the file is created; an existing file keeps its own.

    Raises:
        ValueError: on a bad ``mode``; :class:`~common.errors.DataError` (a ValueError) for
            a file that is not an H5Writer's or is damaged.
        RuntimeError: if another writer, in this or another process, holds the file.

    Example:
        >>> writer = H5Writer("run.h5")                               # doctest: +SKIP
        >>> writer.append({"step": 0, "positions": torch.zeros(10, 3)})  # doctest: +SKIP
        >>> writer.close()                                            # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike, mode: str = "a", attributes: Mapping[str, Any] | None = None):
        if mode not in ("a", "w"):
            raise ConfigurationError(f"H5Writer: mode must be 'a' (append) or 'w' (overwrite), got {mode!r}")
        self.path = pathlib.Path(path)
        self._file: h5py.File | None = None
        self._tables: dict[str, _Table] = {}
        self._lock = WriterLock(self.path)
        try:
            recovery.restore_undo(self.path, self._lock.identity)
            if mode == "w" or self._lock.size == 0:
                self._change_structure(lambda file: file.attrs.update(dict(attributes or {})), new_file=True)
            else:
                recovery.clear_interrupted_write(self.path)
            self._open()
        except BaseException:
            self._lock.close()
            raise

    # -- public API --

    def append(self, record: Mapping[str, Any], group: str = "/") -> int:
        """Append one record to the table ``group``; return its index in the table.

        Args:
            record: column name -> value. Values are Python scalars (bool, int,
                float, complex), strings, numpy arrays/scalars or tensors; a string
                becomes a variable-length UTF-8 string.
            group: the table (HDF5 group path); ``"/"`` is the root.

        Raises:
            ValueError: if the record's keys, a value's shape or dtype differ from
                the table's; the message names the key.
            TypeError: if a value cannot be stored (names the key).
        """
        if self._file is None:
            raise ConfigurationError(f"H5Writer({str(self.path)!r}) is closed")
        group = group_name(group)
        if not isinstance(record, Mapping) or not record:
            raise ArgumentTypeError(
                f"H5Writer.append: record must be a non-empty dict of column -> value, got {record!r}"
            )
        values = {key: _as_array(key, value) for key, value in record.items()}
        table = self._tables.get(group)
        if table is None:
            self._create_table(group, values)
            table = self._tables[group]
        values = table.check(values, self.path, group)
        index = table.count
        for key, dataset in table.columns.items():
            if dataset.shape[0] != index + 1:
                dataset.resize(index + 1, axis=0)
            dataset[index] = values[key]
        self._file.flush()  # the rows reach the file before the counter says they exist
        table.counter[0] = index + 1
        self._file.flush()
        table.count = index + 1
        return index

    def count(self, group: str = "/") -> int:
        """Number of complete records in the table ``group`` (0 if it does not exist yet)."""
        table = self._tables.get(group_name(group))
        return 0 if table is None else table.count

    def columns(self, group: str = "/") -> list[str]:
        """The column names of the table ``group``, sorted (empty if it does not exist yet)."""
        table = self._tables.get(group_name(group))
        return [] if table is None else sorted(table.columns)

    def read(self, group: str = "/", keys: list[str] | None = None) -> dict[str, np.ndarray]:
        """The complete records of the table ``group`` of this writer's file, read through the writer.

        Use this rather than :func:`~common.io.read_table` while the writer is open in the
        same process (HDF5 refuses a second, read-only opening of a file that this process
        writes). An absent table reads as no table: ``{}``.

        Args:
            group: the table, ``"/"`` for the root.
            keys: the columns to read (default all).

        Returns:
            column name -> array of shape ``(n_records, *record_shape)``; strings as object arrays.
        """
        if self._file is None:
            raise ConfigurationError(f"H5Writer({str(self.path)!r}) is closed")
        table = self._tables.get(group_name(group))
        if table is None:
            return {}
        keys = list(table.columns) if keys is None else list(keys)
        unknown = [key for key in keys if key not in table.columns]
        if unknown:
            raise ConfigurationError(
                f"{self.path}, group {group!r}: unknown keys {unknown}; the table has {sorted(table.columns)}"
            )
        where = f"{self.path}, group {group!r}"
        return {
            key: decode(table.columns[key], slice(0, table.count), f"{where}, key {key!r}") for key in keys
        }

    @property
    def attributes(self) -> dict[str, Any]:
        """The root group's attributes (for instance the :func:`provenance` written at creation)."""
        if self._file is None:
            raise ConfigurationError(f"H5Writer({str(self.path)!r}) is closed")
        return dict(self._file.attrs)

    @property
    def groups(self) -> list[str]:
        """The tables of the file (HDF5 group paths, ``"/"`` for the root)."""
        return sorted(self._tables)

    def close(self) -> None:
        """Close the file (idempotent). Records already appended are safe either way."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._lock.close()

    def __enter__(self) -> H5Writer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        counts = ", ".join(f"{name}: {table.count}" for name, table in sorted(self._tables.items()))
        return f"H5Writer({str(self.path)!r}, records={{{counts}}})"

    # -- internals --

    def _open(self) -> None:
        """Open the file in SWMR-write mode and read its tables, dropping unfinished rows."""
        access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        access.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
        access.set_file_locking(False, True)  # the WriterLock excludes writers (see common.io.locking)
        try:
            file_id = h5py.h5f.open(
                os.fsencode(self.path), h5py.h5f.ACC_RDWR | h5py.h5f.ACC_SWMR_WRITE, fapl=access
            )
        except OSError as error:
            if "truncated file" in str(error):  # HDF5's own words for a file shorter than its superblock says
                raise DataError(
                    f"H5Writer: {self.path} is truncated ({error}); `python -m common.io check {self.path}` "
                    "reports what of it is intact and recoverable"
                ) from error
            raise OSError(
                f"H5Writer: cannot open {self.path} for writing ({error}); if this process reads it "
                "(an H5Dataset, an open h5py.File), close that first"
            ) from error
        self._file = h5py.File(file_id)
        self._tables = {}
        for name, group in table_groups(self._file):
            table = _Table(group)
            for dataset in table.columns.values():
                if h5py.check_string_dtype(dataset.dtype) is not None:
                    _clear_unfinished_strings(dataset, table.count)
                recovery.repair_torn_tail(dataset, table.count)
                if dataset.shape[0] > table.count:
                    dataset.resize(table.count, axis=0)
            self._tables[name] = table
        self._file.flush()

    def _create_table(self, group: str, values: dict[str, np.ndarray]) -> None:
        for key in values:
            if "/" in key or key.startswith("_") or not key:
                raise ConfigurationError(
                    f"H5Writer.append: column name {key!r} must be non-empty, without '/', "
                    "and not start with '_' (reserved)"
                )

        def create(file: h5py.File) -> None:
            target = file.require_group(group)
            clashes = sorted(set(values) & set(target))
            if clashes:
                raise ConfigurationError(
                    f"H5Writer.append: {self.path}: group {group!r} already holds {clashes} "
                    f"but no {COMMITTED!r} counter; it was not written by H5Writer"
                )
            for key, value in values.items():
                dtype = _STRING if value.dtype.kind in "OU" else value.dtype
                rows = max(1, min(_MAX_CHUNK_ROWS, _CHUNK_BYTES // max(1, dtype.itemsize * value.size)))
                target.create_dataset(
                    key,
                    shape=(0, *value.shape),
                    maxshape=(None, *value.shape),
                    chunks=(rows, *value.shape),
                    dtype=dtype,
                    fletcher32=dtype is not _STRING,  # HDF5 refuses filters on variable-length data
                )
            target.create_dataset(COMMITTED, data=np.zeros(1, dtype=np.int64))

        self._file.close()
        self._file = None
        try:
            self._change_structure(create, new_file=False)
        finally:
            self._open()

    def _change_structure(self, modify: Callable[[h5py.File], None], new_file: bool) -> None:
        """Apply ``modify`` to the file in place, in ordinary mode, guarded by an undo copy.

        ``new_file`` empties the file first (its undo copy is then empty too). The file is
        changed through its name but keeps its inode: links to it stay links to it.
        """
        identity = self._lock.identity
        recovery.save_undo(self.path, identity, empty=new_file)
        try:
            with h5py.File(self.path, "w" if new_file else "r+", libver="latest", locking=False) as file:
                modify(file)
        except BaseException:
            recovery.restore_undo(self.path, identity)
            raise
        recovery.fsync_path(self.path)
        recovery.discard_undo(self.path, identity)


class _Table:
    """The columns and counter of one table (HDF5 group) of an open file."""

    def __init__(self, group: h5py.Group):
        self.counter = group[COMMITTED]
        self.count = int(self.counter[0])
        self.columns = column_datasets(group)

    def check(self, values: dict[str, np.ndarray], path: pathlib.Path, group: str) -> dict[str, Any]:
        """Check a record against the columns; return the values ready to write."""
        where = f"H5Writer.append: {path}, group {group!r}"
        missing, extra = sorted(set(self.columns) - set(values)), sorted(set(values) - set(self.columns))
        if missing or extra:
            raise ConfigurationError(
                f"{where}: the record's keys differ from the table's ({sorted(self.columns)}): "
                f"missing {missing}, unexpected {extra}"
            )
        ready = {}
        for key, dataset in self.columns.items():
            value, shape = values[key], dataset.shape[1:]
            if value.shape != shape:
                raise ConfigurationError(
                    f"{where}: key {key!r} has shape {value.shape}, the table's is {shape}")
            if h5py.check_string_dtype(dataset.dtype) is not None:
                if value.dtype.kind not in "OU":
                    raise ConfigurationError(
                        f"{where}: key {key!r} has dtype {value.dtype}, the table holds strings")
                ready[key] = value.astype(object)
            elif value.dtype != dataset.dtype:
                raise ConfigurationError(
                    f"{where}: key {key!r} has dtype {value.dtype}, the table's is {dataset.dtype}"
                )
            else:
                ready[key] = value
        return ready


def _clear_unfinished_strings(dataset: h5py.Dataset, count: int) -> None:
    """Zero the stored string references of rows ``count`` onwards in the chunk holding row ``count``.

    A writer killed while appending can leave, in the row after the last complete
    record, a reference to a string HDF5 never wrote to its heap. Writing that row
    again would make HDF5 free the old string first and fail ("bad heap index").
    All-zero bytes are HDF5's null string, so the chunk's raw bytes past the complete
    rows are zeroed with a direct chunk write (no conversion, no freeing). String
    columns carry no filter (HDF5 allows none on variable-length data), so the raw bytes
    are the rows themselves.
    """
    rows_per_chunk = dataset.chunks[0]
    first_row = count // rows_per_chunk * rows_per_chunk
    if dataset.shape[0] < first_row + rows_per_chunk:
        dataset.resize(first_row + rows_per_chunk, axis=0)  # the whole chunk must lie in the extent
    offsets = (first_row,) + (0,) * (dataset.ndim - 1)
    if dataset.id.get_chunk_info_by_coord(offsets).byte_offset is None:
        return  # the chunk was never written
    filter_mask, raw = dataset.id.read_direct_chunk(offsets)
    keep = (count - first_row) * (len(raw) // rows_per_chunk)
    if any(raw[keep:]):
        dataset.id.write_direct_chunk(offsets, raw[:keep] + bytes(len(raw) - keep), filter_mask)


def group_name(group: str) -> str:
    """The HDF5 path of a table, ``"/"`` for the root (leading and trailing slashes dropped)."""
    if not isinstance(group, str):
        raise ArgumentTypeError(f"group must be a str (an HDF5 group path), got {type(group).__name__}")
    name = group.strip("/")
    return name or "/"


def table_groups(file: h5py.File) -> list[tuple[str, h5py.Group]]:
    """All groups of ``file`` that are H5Writer tables, as (name, group)."""
    tables = [("/", file)] if COMMITTED in file else []

    def visit(name: str, item: Any) -> None:
        if isinstance(item, h5py.Group) and COMMITTED in item:
            tables.append((name, item))

    file.visititems(visit)
    return tables


def column_datasets(group: h5py.Group) -> dict[str, h5py.Dataset]:
    """The columns of a table: its datasets other than the counter.

    Each is opened by name (``group.items()`` would silently skip an object whose header is
    damaged); a damaged one raises the ``KeyError`` h5py gives for it.
    """
    items = {name: group[name] for name in group if name != COMMITTED}
    return {name: item for name, item in items.items() if isinstance(item, h5py.Dataset)}


def decode(dataset: h5py.Dataset, selection: Any, where: str) -> np.ndarray:
    """Rows ``selection`` (an int or a slice) of a column; strings as an object array of ``str``.

    A string column's heap is checked first (:func:`~common.io.heaps.check_strings`): HDF5
    would hang for ever on a truncated or zeroed one. ``where`` (the file, group and key)
    names the column in the DataError that damage raises.
    """
    if h5py.check_string_dtype(dataset.dtype) is not None:
        heaps.check_strings(dataset, selection, where)
        return np.asarray(dataset.asstr()[selection], dtype=object)
    return np.asarray(dataset[selection])


def _as_array(key: str, value: Any) -> np.ndarray:
    """A record value as a numpy array (strings as object arrays of str); raises naming ``key``."""
    torch = sys.modules.get("torch")  # if torch was never imported, value is no tensor
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype == torch.bfloat16:
            raise ArgumentTypeError(
                f"record key {key!r}: bfloat16 cannot be stored in HDF5; convert it to float32")
        return value.resolve_conj().cpu().numpy()
    if isinstance(value, str):
        return np.array(value, dtype=object)
    if isinstance(value, (bool, int, float, complex, np.generic, np.ndarray, list, tuple)):
        array = np.asarray(value)
        if array.dtype.kind == "U":
            return array.astype(object)
        if array.dtype.kind in "biufc":
            return array
    raise ArgumentTypeError(
        f"record key {key!r}: cannot store {type(value).__name__} {value!r:.80}; expected a "
        "number, string, numpy array or tensor"
    )
