"""The global heap behind a variable-length string column, checked before HDF5 decodes it.

HDF5 keeps the characters of variable-length strings in *global heap collections*; a string
column's chunks hold only references to them (length, collection address, object index).
Unlike every other piece of metadata of the latest file format, a collection carries no
checksum. HDF5 reads a collection by walking its objects by the sizes stored in it, and
trusts those sizes:

* a collection cut by a truncation (when :mod:`common.io.check` opens a truncated file, HDF5
  reads the missing bytes as zeros) or overwritten with zeros holds a free-space object of
  size 0: the walk (``H5HG__cache_heap_deserialize``) never advances, and the read hangs for
  ever inside HDF5, out of reach of any Python timeout;
* a damaged size makes HDF5 allocate, read and copy as many bytes as it says.

So :func:`check_strings` (called by :func:`~common.io.tables.decode` before every string read)
reads the references of the rows to decode from the column's raw bytes, then walks each
collection they point to in Python, every size checked against the collection and the
collection against the file's actual length, and checks that each referenced object exists
and has the reference's length. :func:`first_damaged_string` says which row fails, and why.
"""

from __future__ import annotations

import os
import struct
from typing import Any, BinaryIO

import h5py
import numpy as np

from common.errors import DataError

__all__ = ["check_strings", "first_damaged_string"]

_SIGNATURE = b"GCOL"
_VERSION = 1
_UNSIGNED = {2: "H", 4: "I", 8: "Q"}  # struct codes of HDF5's "length" sizes


def check_strings(dataset: h5py.Dataset, selection: Any, where: str) -> None:
    """Raise a DataError if HDF5 cannot safely decode the strings of rows ``selection`` of ``dataset``.

    Args:
        dataset: a variable-length string column.
        selection: an int or a slice of rows (first axis).
        where: the file, group and key, for the message.

    Raises:
        DataError: naming ``where`` and the first damaged row: its references lie beyond the
            file's end, or its heap collection is truncated, damaged or lacks the string.
    """
    rows = range(dataset.shape[0])[selection]
    rows = range(rows, rows + 1) if isinstance(rows, int) else rows
    damage = first_damaged_string(dataset, rows, os.stat(dataset.file.filename).st_size)
    if damage is not None:
        row, reason = damage
        raise DataError(f"{where}: row {row}: {reason}")


def first_damaged_string(dataset: h5py.Dataset, rows: range, file_size: int) -> tuple[int, str] | None:
    """The first of ``rows`` whose strings HDF5 cannot safely decode, and why; ``None`` if all can.

    Args:
        dataset: a variable-length string column.
        rows: the rows to check, in increasing order.
        file_size: the file's actual length in bytes (what HDF5 reads past it is zeros).
    """
    if not len(rows):
        return None
    offset_size, length_size = dataset.file.id.get_create_plist().get_sizes()
    reference = np.dtype([("length", "<u4"), ("address", f"<u{offset_size}"), ("index", "<u4")])
    per_row = int(np.prod(dataset.shape[1:], dtype=np.int64))
    rows_per_block = dataset.chunks[0] if dataset.chunks is not None else dataset.shape[0]
    collections: dict[int, np.ndarray | str] = {}
    selected = np.asarray(rows, dtype=np.int64)
    with open(dataset.file.filename, "rb") as handle:
        for block in np.unique(selected // rows_per_block).tolist():
            first = block * rows_per_block
            in_block = selected[(selected >= first) & (selected < first + rows_per_block)]
            stored = _block_references(dataset, handle, first, rows_per_block * per_row, reference)
            if isinstance(stored, str):
                return int(in_block[0]), stored
            references = stored.reshape(rows_per_block, per_row)[in_block - first].ravel()
            damage = _first_bad_reference(references, collections, handle, file_size, length_size)
            if damage is not None:
                position, reason = damage
                return int(in_block[position // per_row]), reason
    return None


def _first_bad_reference(
    references: np.ndarray,
    collections: dict[int, np.ndarray | str],
    handle: BinaryIO,
    file_size: int,
    length_size: int,
) -> tuple[int, str] | None:
    """The position of the first of ``references`` whose string cannot be read, and why; ``None`` if all can.

    ``collections`` caches :func:`_collection_objects` by address.
    """
    first: tuple[int, str] | None = None
    for address in np.unique(references["address"]).tolist():
        if address == 0:
            continue  # null strings: HDF5 reads no heap
        if address not in collections:
            collections[address] = _collection_objects(handle, address, file_size, length_size)
        sizes = collections[address]
        positions = np.flatnonzero(references["address"] == address)
        if isinstance(sizes, str):
            bad, reason = int(positions[0]), sizes
        else:
            index = references["index"][positions].astype(np.int64)
            stored = np.where(index < len(sizes), sizes[np.minimum(index, len(sizes) - 1)], -1)
            wrong = np.flatnonzero(stored != references["length"][positions])
            if not len(wrong):
                continue
            bad = int(positions[wrong[0]])
            reason = _reference_problem(
                sizes, address, int(references["index"][bad]), int(references["length"][bad])
            )
        if first is None or bad < first[0]:
            first = bad, reason
    return first


def _block_references(
    dataset: h5py.Dataset, handle: BinaryIO, first_row: int, count: int, reference: np.dtype
) -> np.ndarray | str:
    """The ``count`` heap references stored from row ``first_row`` on (the chunk holding it, or the
    whole contiguous dataset), all null if that storage was never written; or why they cannot be read.

    String columns carry no filter (HDF5 allows none on variable-length data), so the stored
    bytes are the references themselves.
    """
    if dataset.chunks is not None:
        offsets = (first_row,) + (0,) * (dataset.ndim - 1)
        info = dataset.id.get_chunk_info_by_coord(offsets)
        address, size = info.byte_offset, info.size
    else:
        address, size = dataset.id.get_offset(), dataset.id.get_storage_size()
    if address is None:
        return np.zeros(count, dtype=reference)
    if size != count * reference.itemsize:
        return (
            f"the chunk of rows {first_row}.. holds {size} bytes, not the {count * reference.itemsize} "
            "of its string references (damaged)"
        )
    handle.seek(address)
    data = handle.read(size)
    if len(data) < size:
        return (
            f"the string references of rows {first_row}.. end at byte {address + size}, beyond the file's "
            "end: truncated"
        )
    return np.frombuffer(data, dtype=reference)


def _collection_objects(handle: BinaryIO, address: int, file_size: int, length_size: int) -> np.ndarray | str:
    """The sizes of the objects of the global heap collection at ``address`` by object index (-1: no
    such object), or why it cannot be read.

    The objects are walked as HDF5 walks them, refusing a size that would not advance the
    walk or would leave the collection, and a collection that would leave the file.
    """
    where = f"its string lies in the global heap collection at byte {address}"
    header_size = object_header_size = 8 + length_size
    object_header = struct.Struct(f"<H6x{_UNSIGNED[length_size]}")  # index, references, reserved, size
    handle.seek(address)
    header = handle.read(header_size)
    if len(header) < header_size:
        return f"{where}, beyond the file's end ({file_size} bytes): truncated"
    if header[:4] != _SIGNATURE or header[4] != _VERSION:
        return f"{where}, which is not a global heap collection (no {_SIGNATURE.decode()} signature; damaged)"
    size = int.from_bytes(header[8:], "little")
    if size < header_size:
        return f"{where}, whose header says it has {size} bytes (damaged)"
    if address + size > file_size:
        return (
            f"{where}, of {size} bytes, which ends at byte {address + size}, beyond the file's end "
            f"({file_size} bytes): truncated, or a damaged size"
        )
    handle.seek(address)
    data = handle.read(size)
    objects: dict[int, int] = {}
    position = header_size
    while size - position >= object_header_size:  # less is free space, as HDF5 reads it
        index, length = object_header.unpack_from(data, position)
        step = length if index == 0 else object_header_size + -(-length // 8) * 8  # free space: length is all
        if step < object_header_size:  # a free space of size 0 would stall HDF5's walk for ever
            return (
                f"{where}, whose free space at byte {address + position} has an impossible size of {length} "
                "bytes (zeroed or damaged)"
            )
        if step > size - position:
            return (
                f"{where}, whose object at byte {address + position} has {length} bytes, more than the "
                f"collection's {size} hold (damaged)"
            )
        if index:
            objects[index] = length
        position += step
    sizes = np.full(max(objects, default=0) + 1, -1, dtype=np.int64)
    sizes[list(objects)] = list(objects.values())
    return sizes


def _reference_problem(sizes: np.ndarray, address: int, index: int, length: int) -> str:
    """Why the string of ``length`` bytes, object ``index`` of the collection at ``address`` whose
    object sizes are ``sizes`` (:func:`_collection_objects`), cannot be read."""
    collection = f"the global heap collection at byte {address}"
    if index >= len(sizes) or sizes[index] < 0:
        return f"its string is object {index} of {collection}, which has none (damaged)"
    return f"its string of {length} bytes is object {index} of {collection}, of {sizes[index]} (damaged)"
