"""Reading and repairing what HDF5 keeps in the superblock, and undoing an interrupted table creation.

* :func:`read_superblock` parses the version 2/3 superblock at offset 0 (the one H5Writer
  files have, written with ``libver="latest"``) and verifies its checksum, which HDF5
  computes with Bob Jenkins' lookup3 hash (:func:`lookup3`).
* :func:`clear_interrupted_write` clears the "open for writing" flags a killed writer left
  (as HDF5's ``h5clear`` tool does), so that plain ``h5py.File(path)`` opens the file again.
  Only an :class:`~common.io.H5Writer` holding the file's lock calls it, so the flags of a
  live writer are never cleared.
* Table creation changes an HDF5 file's structure, which SWMR mode does not make safe, so
  it is done in place with an undo copy (:func:`save_undo`): the original bytes are copied
  next to the file before the change and removed after it. A writer that finds an undo copy
  (the previous writer was killed during the change) restores it (:func:`restore_undo`).
  The file keeps its identity (inode), so links to it stay links to it.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil

import h5py
import numpy as np

from common.errors import DataError

__all__ = [
    "Superblock",
    "read_superblock",
    "lookup3",
    "clear_interrupted_write",
    "undo_path",
    "save_undo",
    "restore_undo",
    "discard_undo",
    "fsync_path",
    "fletcher32",
    "torn_tail",
    "repair_torn_tail",
]

SIGNATURE = b"\x89HDF\r\n\x1a\n"


@dataclasses.dataclass(frozen=True)
class Superblock:
    """The fields of an HDF5 superblock that the readers and the writer check.

    Attributes:
        version: superblock version (H5Writer files: 3).
        offset_size: bytes per file address.
        flags: file consistency flags; non-zero while a writer has the file open (or was killed).
        end_of_file: the end-of-file address HDF5 recorded (bytes), ``None`` for versions 0 and 1.
        header: the superblock's bytes up to its checksum (versions 2 and 3).
    """

    version: int
    offset_size: int
    flags: int
    end_of_file: int | None
    header: bytes

    @property
    def eof_field(self) -> slice:
        """Where the end-of-file address lies in :attr:`header`."""
        return slice(12 + 2 * self.offset_size, 12 + 3 * self.offset_size)


def read_superblock(path: str | os.PathLike) -> Superblock:
    """Parse and verify the superblock at offset 0 of the HDF5 file ``path``.

    Raises:
        DataError: no HDF5 signature at offset 0, a superblock cut short, or a checksum mismatch
            (the message names the file).
    """
    with open(path, "rb") as handle:
        head = handle.read(64)
    if not head.startswith(SIGNATURE):
        raise DataError(f"{path}: not an HDF5 file (no HDF5 signature at offset 0; {len(head)} bytes read)")
    version = head[8]
    if version < 2:
        return Superblock(version, head[13] if len(head) > 13 else 8, 0, None, head)
    offset_size = head[9]
    end = 12 + 4 * offset_size
    if offset_size not in (2, 4, 8) or len(head) < end + 4:
        raise DataError(f"{path}: the HDF5 superblock is damaged or cut short ({len(head)} bytes)")
    stored = int.from_bytes(head[end : end + 4], "little")
    if lookup3(head[:end]) != stored:
        raise DataError(f"{path}: the HDF5 superblock's checksum does not match its bytes (damaged)")
    eof_field = slice(12 + 2 * offset_size, 12 + 3 * offset_size)
    return Superblock(version, offset_size, head[11], int.from_bytes(head[eof_field], "little"), head[:end])


def lookup3(data: bytes) -> int:
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


def clear_interrupted_write(path: str | os.PathLike) -> bool:
    """Clear the "open for writing" flags a killed writer left in the superblock (as ``h5clear``).

    Call it only while holding the file's :class:`~common.io.locking.WriterLock`: a live
    writer's flags must stay. The end-of-file address is raised to the file size, since a
    SWMR writer does not keep it current, and the superblock's checksum recomputed.

    Returns:
        Whether the file was changed.

    Raises:
        DataError: not an H5Writer file (superblock version below 2), or a damaged superblock.
    """
    superblock = read_superblock(path)
    if superblock.version < 2:
        raise DataError(
            f"{path}: superblock version {superblock.version}; H5Writer files use version 3 (libver latest)"
        )
    if superblock.flags == 0:
        return False
    header = bytearray(superblock.header)
    header[11] = 0
    size = os.stat(path).st_size
    end_of_file = max(superblock.end_of_file, size)
    header[superblock.eof_field] = end_of_file.to_bytes(superblock.offset_size, "little")
    with open(path, "r+b") as handle:
        handle.write(bytes(header) + lookup3(bytes(header)).to_bytes(4, "little"))
        handle.flush()
        os.fsync(handle.fileno())
    return True


def undo_path(path: str | os.PathLike, identity: tuple[int, int]) -> pathlib.Path:
    """Where the undo copy of the file ``path`` (device and inode ``identity``) is kept.

    Next to the file's real path (symlinks resolved), named after its name and identity.
    """
    real = pathlib.Path(os.path.realpath(path))
    device, inode = identity
    return real.with_name(f".{real.name}.{device:x}-{inode:x}.undo")


def save_undo(path: str | os.PathLike, identity: tuple[int, int], empty: bool = False) -> pathlib.Path:
    """Copy the file's bytes (nothing if ``empty``) to its undo path, durably; return that path.

    The copy is written under a temporary name and renamed, so an undo path that exists
    always holds a complete copy.
    """
    target = undo_path(path, identity)
    partial = target.with_name(target.name + ".partial")
    if empty:
        partial.write_bytes(b"")
    else:
        shutil.copyfile(path, partial)
    fsync_path(partial)
    os.replace(partial, target)
    fsync_path(target.parent)
    return target


def restore_undo(path: str | os.PathLike, identity: tuple[int, int]) -> bool:
    """Put back the bytes of an undo copy left by a writer killed while changing the file's structure.

    The bytes are written into the file itself (same inode), which is then cut to the
    copy's length. Returns whether an undo copy was found.
    """
    source = undo_path(path, identity)
    source.with_name(source.name + ".partial").unlink(missing_ok=True)
    if not source.exists():
        return False
    with open(source, "rb") as original, open(path, "r+b") as target:
        shutil.copyfileobj(original, target, 1 << 20)
        target.truncate()
        target.flush()
        os.fsync(target.fileno())
    discard_undo(path, identity)
    return True


def discard_undo(path: str | os.PathLike, identity: tuple[int, int]) -> None:
    """Remove the undo copy once the change it guarded is on disk."""
    target = undo_path(path, identity)
    target.unlink(missing_ok=True)
    fsync_path(target.parent)


def fsync_path(path: str | os.PathLike) -> None:
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


def fletcher32(data: bytes) -> int:
    """HDF5's Fletcher-32 checksum (``H5_checksum_fletcher32``), as its ``fletcher32`` filter stores it.

    Big-endian 16-bit words summed in blocks of 360 (the most that cannot overflow 32 bits),
    each block's sums folded to 17 bits; an odd last byte is the high byte of a last word.
    """
    words = np.frombuffer(data[: len(data) // 2 * 2], dtype=">u2").astype(np.int64)
    sum1 = sum2 = 0
    for start in range(0, len(words), 360):
        block = words[start : start + 360]
        weights = np.arange(len(block), 0, -1, dtype=np.int64)
        sum2 += len(block) * sum1 + int(block @ weights)
        sum1 += int(block.sum())
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    if len(data) % 2:
        sum1 += data[-1] << 8
        sum2 += sum1
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
    sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    return (sum2 << 16) | sum1


def torn_tail(dataset: h5py.Dataset, count: int) -> tuple[int, np.ndarray] | None:
    """The committed rows of a column's last chunk, if a kill tore that chunk's last rewrite.

    Appending rewrites the chunk holding the new record in place, and a kill can interrupt
    that write (Linux lets a fatal signal cut a ``write`` short), leaving the chunk's first
    pages new and the rest, with the ``fletcher32`` checksum at its end, old. The old and new
    versions agree on the committed rows (below ``count``); the old one held zeros (HDF5's
    fill value) from row ``count`` on. So a chunk whose stored checksum fails, but matches its
    bytes with the rows from ``count`` on zeroed, was torn by a kill and its committed rows
    are intact; any other mismatch is damage, which HDF5 reports when the chunk is read.

    Returns:
        ``(first_row, rows)``: the chunk's first row and its committed rows
        ``(count - first_row, *record_shape)``, or ``None`` if the chunk is not torn (or holds
        no committed row, or has no checksum).
    """
    if not dataset.fletcher32 or count <= 0 or dataset.chunks is None:
        return None
    rows_per_chunk = dataset.chunks[0]
    first_row = count // rows_per_chunk * rows_per_chunk
    offsets = (first_row,) + (0,) * (dataset.ndim - 1)
    if first_row == count or dataset.id.get_chunk_info_by_coord(offsets).byte_offset is None:
        return None
    filter_mask, raw = dataset.id.read_direct_chunk(offsets)
    if filter_mask & 1 or len(raw) < 4:
        return None
    data, stored = raw[:-4], int.from_bytes(raw[-4:], "little")
    if fletcher32(data) == stored:
        return None
    keep = (count - first_row) * (len(data) // rows_per_chunk)
    zeroed = data[:keep] + bytes(len(data) - keep)
    if fletcher32(zeroed) != stored:
        return None
    chunk = np.frombuffer(zeroed, dtype=dataset.dtype).reshape((rows_per_chunk, *dataset.shape[1:]))
    return first_row, chunk[: count - first_row].copy()


def repair_torn_tail(dataset: h5py.Dataset, count: int) -> bool:
    """Rewrite a column's last chunk if a kill tore it (see :func:`torn_tail`); return whether it did.

    The chunk gets its committed rows, zeros after them and a checksum that matches, so
    that HDF5 can read and extend it again. Call it only as the file's writer.
    """
    tail = torn_tail(dataset, count)
    if tail is None:
        return False
    first_row, rows = tail
    chunk = np.zeros((dataset.chunks[0], *dataset.shape[1:]), dtype=dataset.dtype)
    chunk[: len(rows)] = rows
    payload = chunk.tobytes()
    offsets = (first_row,) + (0,) * (dataset.ndim - 1)
    dataset.id.write_direct_chunk(offsets, payload + fletcher32(payload).to_bytes(4, "little"), 0)
    return True
