"""HDF5 and checkpoint I/O that survives a kill at any moment.

Three tools:

* :class:`H5Writer` appends records to columnar HDF5 tables: one resizable, chunked
  dataset per key, first axis the record. Every record whose :meth:`H5Writer.append`
  returned stays readable after the writing process is killed (SIGKILL, OOM killer,
  a cluster's time limit), and the file still opens.
  :func:`read_table` and :class:`H5Dataset` (a ``torch.utils.data.Dataset``) read them.
* :func:`save_checkpoint` / :func:`load_checkpoint`: a nested state (tensors, arrays,
  numbers, strings, RNG states) written to a temporary file, flushed, fsynced and
  renamed over the previous checkpoint, which therefore stays intact until the new
  one is complete. Round trips are bit-exact.
* :func:`provenance` / :func:`write_provenance`: versions, time, host, git commit,
  parameters and seed, stored as HDF5 attributes.

How the writer stays consistent (this is what the kill tests exercise):

1. The file uses the latest HDF5 format and is written in SWMR (single-writer /
   multiple-reader) mode. In that mode HDF5 orders its metadata writes so that the
   file on disk is consistent after every write: a reader opening it at any moment,
   including after the writer died, sees a valid file.
2. Each table (an HDF5 group) holds a counter dataset ``_committed``. An append
   writes the record's rows, flushes the file, and only then increments and flushes
   the counter. Readers use only the first ``_committed`` rows, so a record cut in
   half by a kill is never reported.
3. Creating a table or column (which SWMR mode does not make safe) is done on a
   copy of the file that is renamed over the original once complete. This happens
   once per table; in a file that already holds large tables it costs a file copy.
4. A killed writer leaves the superblock flagged "open for writing", which makes
   plain ``h5py.File(path)`` refuse the file (readers here open it in SWMR mode and
   do not mind). Reopening the file with an :class:`H5Writer` clears that flag (as
   HDF5's ``h5clear`` tool does) and drops the rows of an unfinished record.

Only the writer's process can be killed this way without loss: a power failure
can still lose records the operating system had not yet written to the disk.

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

import collections
import datetime
import json
import os
import pathlib
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = [
    "H5Writer",
    "H5Dataset",  # noqa: F822  (defined on first access by __getattr__, so the import stays torch-free)
    "read_table",
    "save_checkpoint",
    "load_checkpoint",
    "provenance",
    "write_provenance",
]

COMMITTED = "_committed"
"""Name of the per-table dataset holding the number of complete records."""

_CHUNK_BYTES = 1 << 18  # target chunk size; a chunk holds whole records
_MAX_CHUNK_ROWS = 4096
_STRING = h5py.string_dtype()


# ---------------------------------------------------------------------------------------------
# the append-only writer


class H5Writer:
    """Append-only, columnar, kill-safe HDF5 writer.

    ``append(record)`` adds one record to a table: a dict mapping column names to
    values (scalars, strings, numpy arrays or tensors of any device). The first
    record of a table creates one resizable, chunked dataset per key, of shape
    ``(n_records, *value.shape)``; later records must have the same keys, shapes and
    dtypes. After ``append`` returns the record is on its way to the disk and
    survives a kill of the process (see the module docstring for how).

    Tables are HDF5 groups: ``group="/"`` (the default) is the file's root,
    ``group="failed"`` a group ``failed``. Each holds a counter dataset
    ``_committed`` (shape ``(1,)``) with its number of complete records; other
    readers should trust it rather than the datasets' lengths.

    Args:
        path: the HDF5 file.
        mode: ``"a"`` appends to the file if it exists (recovering it if a writer was
            killed) and creates it otherwise; ``"w"`` replaces it with an empty file.
        attributes: attributes of the root group (for instance :func:`provenance`),
            written when the file is created; an existing file keeps its own.

    Raises:
        ValueError: on a bad ``mode``, or a file that is not an H5Writer's.
        RuntimeError: if another process is writing the file.

    Example:
        >>> writer = H5Writer("run.h5")                               # doctest: +SKIP
        >>> writer.append({"step": 0, "positions": torch.zeros(10, 3)})  # doctest: +SKIP
        >>> writer.close()                                            # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike, mode: str = "a", attributes: Mapping[str, Any] | None = None):
        if mode not in ("a", "w"):
            raise ValueError(f"H5Writer: mode must be 'a' (append) or 'w' (overwrite), got {mode!r}")
        self.path = pathlib.Path(path)
        self._file: h5py.File | None = None
        self._tables: dict[str, _Table] = {}
        self._lock = _acquire_lock(self.path)
        try:
            if mode == "w" or not self.path.exists():
                self._rewrite(lambda file: file.attrs.update(dict(attributes or {})), copy=False)
            else:
                _clear_interrupted_write(self.path)
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
            raise ValueError(f"H5Writer({str(self.path)!r}) is closed")
        group = _group_name(group)
        if not isinstance(record, Mapping) or not record:
            raise TypeError(
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
        table = self._tables.get(_group_name(group))
        return 0 if table is None else table.count

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

    def __enter__(self) -> "H5Writer":
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
        # One writer per file is enforced by the .lock file (_acquire_lock). HDF5's own lock would
        # make the writer fail whenever a reader in another process has the file open (a notebook
        # watching a dataset grow), including at the reopen after each table creation.
        access.set_file_locking(False, True)
        try:
            file_id = h5py.h5f.open(
                os.fsencode(self.path), h5py.h5f.ACC_RDWR | h5py.h5f.ACC_SWMR_WRITE, fapl=access
            )
        except OSError as error:
            raise OSError(
                f"H5Writer: cannot open {self.path} for writing ({error}); if this process reads it "
                "(an H5Dataset, an open h5py.File), close that first"
            ) from error
        self._file = h5py.File(file_id)
        self._tables = {}
        for name, group in _table_groups(self._file):
            table = _Table(group)
            for dataset in table.columns.values():
                if h5py.check_string_dtype(dataset.dtype) is not None:
                    _clear_unfinished_strings(dataset, table.count)
                if dataset.shape[0] > table.count:
                    dataset.resize(table.count, axis=0)
            self._tables[name] = table
        self._file.flush()

    def _create_table(self, group: str, values: dict[str, np.ndarray]) -> None:
        for key in values:
            if "/" in key or key.startswith("_") or not key:
                raise ValueError(
                    f"H5Writer.append: column name {key!r} must be non-empty, without '/', "
                    "and not start with '_' (reserved)"
                )

        def create(file: h5py.File) -> None:
            target = file.require_group(group)
            clashes = sorted(set(values) & set(target))
            if clashes:
                raise ValueError(
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
                )
            target.create_dataset(COMMITTED, data=np.zeros(1, dtype=np.int64))

        self._file.close()
        self._file = None
        try:
            self._rewrite(create, copy=True)
        finally:
            self._open()

    def _rewrite(self, modify: Callable[[h5py.File], None], copy: bool) -> None:
        """Apply ``modify`` to a copy of the file (or a new file) and rename it over the original."""
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        if copy:
            shutil.copyfile(self.path, temporary)
        with h5py.File(temporary, "a" if copy else "w", libver="latest") as file:
            modify(file)
        _fsync_path(temporary)
        os.replace(temporary, self.path)
        _fsync_path(self.path.parent)


class _Table:
    """The columns and counter of one table (HDF5 group) of an open file."""

    def __init__(self, group: h5py.Group):
        self.counter = group[COMMITTED]
        self.count = int(self.counter[0])
        self.columns = {
            name: item for name, item in group.items() if isinstance(item, h5py.Dataset) and name != COMMITTED
        }

    def check(self, values: dict[str, np.ndarray], path: pathlib.Path, group: str) -> dict[str, Any]:
        """Check a record against the columns; return the values ready to write."""
        where = f"H5Writer.append: {path}, group {group!r}"
        missing, extra = sorted(set(self.columns) - set(values)), sorted(set(values) - set(self.columns))
        if missing or extra:
            raise ValueError(
                f"{where}: the record's keys differ from the table's ({sorted(self.columns)}): "
                f"missing {missing}, unexpected {extra}"
            )
        ready = {}
        for key, dataset in self.columns.items():
            value, shape = values[key], dataset.shape[1:]
            if value.shape != shape:
                raise ValueError(f"{where}: key {key!r} has shape {value.shape}, the table's is {shape}")
            if h5py.check_string_dtype(dataset.dtype) is not None:
                if value.dtype.kind not in "OU":
                    raise ValueError(f"{where}: key {key!r} has dtype {value.dtype}, the table holds strings")
                ready[key] = value.astype(object)
            elif value.dtype != dataset.dtype:
                raise ValueError(
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
    rows are zeroed with a direct chunk write (no conversion, no freeing).
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


def _group_name(group: str) -> str:
    if not isinstance(group, str):
        raise TypeError(f"group must be a str (an HDF5 group path), got {type(group).__name__}")
    name = group.strip("/")
    return name or "/"


def _table_groups(file: h5py.File) -> list[tuple[str, h5py.Group]]:
    """All groups of ``file`` that are H5Writer tables, as (name, group)."""
    tables = [("/", file)] if COMMITTED in file else []

    def visit(name: str, item: Any) -> None:
        if isinstance(item, h5py.Group) and COMMITTED in item:
            tables.append((name, item))

    file.visititems(visit)
    return tables


def _as_array(key: str, value: Any) -> np.ndarray:
    """A record value as a numpy array (strings as object arrays of str); raises naming ``key``."""
    torch = sys.modules.get("torch")  # if torch was never imported, value is no tensor
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype == torch.bfloat16:
            raise TypeError(f"record key {key!r}: bfloat16 cannot be stored in HDF5; convert it to float32")
        return value.resolve_conj().cpu().numpy()
    if isinstance(value, str):
        return np.array(value, dtype=object)
    if isinstance(value, (bool, int, float, complex, np.generic, np.ndarray, list, tuple)):
        array = np.asarray(value)
        if array.dtype.kind == "U":
            return array.astype(object)
        if array.dtype.kind in "biufc":
            return array
    raise TypeError(
        f"record key {key!r}: cannot store {type(value).__name__} {value!r:.80}; expected a "
        "number, string, numpy array or tensor"
    )


# ---------------------------------------------------------------------------------------------
# recovery after a killed writer

_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _lookup3(data: bytes) -> int:
    """Bob Jenkins' lookup3 ``hashlittle`` with initial value 0: HDF5's metadata checksum."""
    mask = 0xFFFFFFFF

    def rotate(x: int, k: int) -> int:
        return ((x << k) | (x >> (32 - k))) & mask

    a = b = c = (0xDEADBEEF + len(data)) & mask
    offset = 0
    while len(data) - offset > 12:
        a = (a + int.from_bytes(data[offset : offset + 4], "little")) & mask
        b = (b + int.from_bytes(data[offset + 4 : offset + 8], "little")) & mask
        c = (c + int.from_bytes(data[offset + 8 : offset + 12], "little")) & mask
        for shift_a, shift_b, shift_c in ((4, 6, 8), (16, 19, 4)):  # the "mix" step
            a = ((a - c) & mask) ^ rotate(c, shift_a)
            c = (c + b) & mask
            b = ((b - a) & mask) ^ rotate(a, shift_b)
            a = (a + c) & mask
            c = ((c - b) & mask) ^ rotate(b, shift_c)
            b = (b + a) & mask
        offset += 12
    tail = data[offset:]
    if not tail:
        return c
    tail += bytes(12 - len(tail))
    a = (a + int.from_bytes(tail[0:4], "little")) & mask
    b = (b + int.from_bytes(tail[4:8], "little")) & mask
    c = (c + int.from_bytes(tail[8:12], "little")) & mask
    for x, y, shift in (
        ("c", "b", 14),
        ("a", "c", 11),
        ("b", "a", 25),
        ("c", "b", 16),
        ("a", "c", 4),
        ("b", "a", 14),
        ("c", "b", 24),
    ):  # the "final" step
        state = {"a": a, "b": b, "c": c}
        state[x] = ((state[x] ^ state[y]) - rotate(state[y], shift)) & mask
        a, b, c = state["a"], state["b"], state["c"]
    return c


def _clear_interrupted_write(path: pathlib.Path) -> bool:
    """Clear the "open for writing" flags a killed writer left in the superblock (as ``h5clear``).

    The end-of-allocation address is raised to the file size, since a SWMR writer
    does not keep it current. The superblock's checksum is recomputed; the file is
    only touched if the stored checksum is first reproduced, proving the layout is
    the one expected (version 2 or 3 superblock at offset 0). Returns whether the
    file was changed.
    """
    with open(path, "r+b") as handle:
        head = handle.read(64)
        if not head.startswith(_SIGNATURE):
            raise ValueError(f"{path}: not an HDF5 file written by H5Writer (no HDF5 signature at offset 0)")
        version, offset_size = head[8], head[9]
        if version < 2:
            raise ValueError(
                f"{path}: superblock version {version}; H5Writer files use version 3 (libver latest)"
            )
        end = 12 + 4 * offset_size
        if head[11] == 0:
            return False
        if _lookup3(head[:end]) != int.from_bytes(head[end : end + 4], "little"):
            raise ValueError(
                f"{path}: superblock checksum mismatch; cannot clear the interrupted-write flags"
            )
        superblock = bytearray(head[: end + 4])
        superblock[11] = 0
        eof_field = slice(12 + 2 * offset_size, 12 + 3 * offset_size)
        end_of_allocation = int.from_bytes(superblock[eof_field], "little")
        size = os.fstat(handle.fileno()).st_size
        superblock[eof_field] = max(end_of_allocation, size).to_bytes(offset_size, "little")
        superblock[end : end + 4] = _lookup3(bytes(superblock[:end])).to_bytes(4, "little")
        handle.seek(0)
        handle.write(superblock)
        handle.flush()
        os.fsync(handle.fileno())
    return True


def _acquire_lock(path: pathlib.Path):
    """Hold an exclusive lock on ``.<name>.lock`` next to ``path``: one writer per file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(path.with_name(f".{path.name}.lock"), "a")  # held until close()
    try:
        import fcntl
    except ImportError:  # no fcntl (Windows): rely on HDF5's own file locking
        return lock
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        lock.close()
        raise RuntimeError(
            f"H5Writer: {path} is already open in another H5Writer, in this or another process "
            f"(lock {lock.name} is held)"
        ) from error
    return lock


def _fsync_path(path: pathlib.Path) -> None:
    """fsync a file or a directory (directories cannot be fsynced on some platforms)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


# ---------------------------------------------------------------------------------------------
# readers


def _open_for_reading(path: str | os.PathLike) -> h5py.File:
    """Open an H5Writer file read-only, in SWMR mode so that a live or killed writer does not matter."""
    if not pathlib.Path(path).is_file():
        raise FileNotFoundError(f"HDF5 file {str(path)!r} does not exist")
    return h5py.File(path, "r", swmr=True)


def _reader_table(
    file: h5py.File, group: str, keys: Iterable[str] | None
) -> tuple[int, dict[str, h5py.Dataset]]:
    name = _group_name(group)
    target = file if name == "/" else file.get(name)
    if not isinstance(target, h5py.Group) or COMMITTED not in target:
        raise ValueError(
            f"{file.filename}: no H5Writer table at group {name!r} "
            f"(tables: {[table for table, _ in _table_groups(file)]})"
        )
    target[COMMITTED].refresh()
    count = int(target[COMMITTED][0])
    columns = {
        key: item for key, item in target.items() if isinstance(item, h5py.Dataset) and key != COMMITTED
    }
    if keys is not None:
        keys = list(keys)
        unknown = [key for key in keys if key not in columns]
        if unknown:
            raise ValueError(
                f"{file.filename}, group {name!r}: unknown keys {unknown}; the table has {sorted(columns)}"
            )
        columns = {key: columns[key] for key in keys}
    return count, columns


def _decode(dataset: h5py.Dataset, selection: Any) -> np.ndarray:
    if h5py.check_string_dtype(dataset.dtype) is not None:
        return np.asarray(dataset.asstr()[selection], dtype=object)
    return np.asarray(dataset[selection])


def read_table(
    path: str | os.PathLike, group: str = "/", keys: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Read the complete records of an H5Writer table.

    Works while a writer is appending and after a writer was killed; only complete
    records are returned.

    Args:
        path: the HDF5 file.
        group: the table, ``"/"`` for the root.
        keys: the columns to read (default all).

    Returns:
        column name -> array of shape ``(n_records, *record_shape)``; string columns
        are object arrays of ``str``.
    """
    with _open_for_reading(path) as file:
        count, columns = _reader_table(file, group, keys)
        return {key: _decode(dataset, slice(0, count)) for key, dataset in columns.items()}


def _define_h5dataset() -> type:
    """Define :class:`H5Dataset` on first use, so that ``import common.io`` does not import torch."""
    import torch.utils.data

    class H5Dataset(torch.utils.data.Dataset):
        """A ``torch.utils.data.Dataset`` over the records of H5Writer tables in one or more files.

        Item ``i`` is a dict mapping each column to a tensor (strings stay ``str``),
        after ``transform`` if one is given. Files are opened lazily, once per process,
        so the dataset can be used with ``DataLoader(num_workers > 0)``. The length is
        the number of complete records when the dataset was made (files may still grow).

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
                raise ValueError("H5Dataset: paths is empty; give at least one HDF5 file")
            self.keys = None if keys is None else list(keys)
            self.transform = transform
            self.group = group
            counts = []
            for path in self.paths:
                with _open_for_reading(path) as file:
                    counts.append(_reader_table(file, group, self.keys)[0])
            self.counts = counts
            self.offsets = np.cumsum([0, *counts])
            self._handles: dict[int, tuple[h5py.File, dict[str, h5py.Dataset]]] = {}
            self._pid = os.getpid()

        def __len__(self) -> int:
            return int(self.offsets[-1])

        def __getitem__(self, index: int) -> Any:
            if not isinstance(index, (int, np.integer)):
                raise TypeError(f"H5Dataset index must be an int, got {type(index).__name__}")
            length = len(self)
            if not -length <= index < length:
                raise IndexError(f"H5Dataset index {index} out of range for {length} records")
            index = int(index) % length
            file_index = int(np.searchsorted(self.offsets, index, side="right")) - 1
            columns = self._columns(file_index)
            row = index - int(self.offsets[file_index])
            item = {}
            for key, dataset in columns.items():
                value = _decode(dataset, row)
                item[key] = value.tolist() if value.dtype == object else torch.from_numpy(np.array(value))
            return self.transform(item) if self.transform is not None else item

        def _columns(self, file_index: int) -> dict[str, h5py.Dataset]:
            if self._pid != os.getpid():  # a forked DataLoader worker: never share HDF5 handles
                self._handles, self._pid = {}, os.getpid()
            if file_index not in self._handles:
                file = _open_for_reading(self.paths[file_index])
                self._handles[file_index] = (file, _reader_table(file, self.group, self.keys)[1])
            return self._handles[file_index][1]

        def __getstate__(self) -> dict[str, Any]:
            state = self.__dict__.copy()
            state["_handles"] = {}
            return state

        def close(self) -> None:
            """Close the files this process opened (they reopen on the next access)."""
            for file, _ in self._handles.values():
                file.close()
            self._handles = {}

    H5Dataset.__qualname__ = "H5Dataset"  # picklable as common.io.H5Dataset (DataLoader workers)
    return H5Dataset


def __getattr__(name: str) -> Any:
    if name == "H5Dataset":
        globals()["H5Dataset"] = _define_h5dataset()
        return globals()["H5Dataset"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------
# checkpoints

_NUMPY_MARK = "__numpy__"


def _encode(value: Any, where: str) -> Any:
    """Make ``value`` loadable by ``torch.load(weights_only=True)``: numpy data becomes bytes."""
    import torch

    plain_types = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)
    if isinstance(value, torch.Tensor) or type(value) in plain_types:
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind == "O" or value.dtype.fields is not None:
            raise TypeError(
                f"save_checkpoint: {where} is a numpy array of dtype {value.dtype}; "
                "object and structured arrays are not supported"
            )
        array = np.asarray(value, order="C")
        return {_NUMPY_MARK: (array.tobytes(), array.dtype.str, array.shape, isinstance(value, np.generic))}
    if type(value) in (dict, collections.OrderedDict):
        if set(value) == {_NUMPY_MARK}:
            raise ValueError(f"save_checkpoint: {where} uses the reserved key {_NUMPY_MARK!r}")
        encoded = {key: _encode(item, f"{where}[{key!r}]") for key, item in value.items()}
        return collections.OrderedDict(encoded) if isinstance(value, collections.OrderedDict) else encoded
    if type(value) in (list, tuple):
        return type(value)(_encode(item, f"{where}[{index}]") for index, item in enumerate(value))
    hint = "; store generator.get_state() instead" if isinstance(value, torch.Generator) else ""
    raise TypeError(
        f"save_checkpoint: {where} is a {type(value).__name__}, which a checkpoint cannot hold "
        f"(use tensors, numpy arrays, numbers, strings, lists, tuples and dicts){hint}"
    )


def _decode_state(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_NUMPY_MARK}:
            data, dtype, shape, is_scalar = value[_NUMPY_MARK]
            array = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).copy()
            return array[()] if is_scalar else array
        decoded = {key: _decode_state(item) for key, item in value.items()}
        return collections.OrderedDict(decoded) if isinstance(value, collections.OrderedDict) else decoded
    if type(value) in (list, tuple):
        return type(value)(_decode_state(item) for item in value)
    return value


def save_checkpoint(path: str | os.PathLike, state: Mapping[str, Any]) -> None:
    """Write ``state`` atomically: a temporary file next to ``path``, fsync, rename, fsync the folder.

    A kill (or crash) at any moment leaves either the previous checkpoint or the new
    one at ``path``, never a partial file. One process should write a given path.

    Args:
        path: the checkpoint file.
        state: a nested dict of tensors (any device), numpy arrays and scalars, Python
            numbers, strings and bytes, lists/tuples/dicts of those, and RNG states
            (``torch.get_rng_state()``, ``generator.get_state()``,
            ``numpy_generator.bit_generator.state``, ``random.getstate()``).

    Raises:
        TypeError: if ``state`` holds something else (the message names where).
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"save_checkpoint: state must be a dict, got {type(state).__name__}")
    import torch

    encoded = _encode(dict(state), "state")
    path = pathlib.Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        torch.save(encoded, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_path(path.parent)


def load_checkpoint(
    path: str | os.PathLike, map_location: "str | torch.device | None" = None
) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint`, bit-exactly.

    Loading never runs code from the file (``torch.load(weights_only=True)``).

    Args:
        path: the checkpoint file.
        map_location: where to put tensors (as ``torch.load``); default: where they were.

    Returns:
        The state, with the same structure and types as saved.
    """
    import torch

    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises several types for a damaged file
        raise ValueError(f"checkpoint {str(path)!r} cannot be read: {error}") from error
    return _decode_state(state)


# ---------------------------------------------------------------------------------------------
# provenance


def _json_default(value: Any) -> Any:
    import torch

    from common import config

    if isinstance(value, (np.ndarray, np.generic, torch.Tensor)):
        return value.tolist()
    if isinstance(value, (pathlib.PurePath, torch.dtype, torch.device)):
        return str(value)
    if hasattr(value, "__dataclass_fields__") and not isinstance(value, type):
        return config.to_dict(value)
    raise TypeError(
        f"provenance: parameters hold {type(value).__name__} {value!r:.80}, not JSON-serialisable"
    )


def _git_commit() -> tuple[str | None, bool | None]:
    """The commit of the checkout this package lives in, and whether it has local changes."""
    root = pathlib.Path(__file__).resolve().parent.parent
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
            raise TypeError(f"provenance: seed must be an int, got {type(seed).__name__} {seed!r}")
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
        raise TypeError(
            f"write_provenance: h5_object must be an h5py File, Group or Dataset, "
            f"got {type(h5_object).__name__}"
        )
    record = provenance(parameters, seed)
    h5_object.attrs.update(record)
    return record
