"""Atomic, checksummed checkpoints of nested state (tensors, arrays, numbers, strings, RNG states).

A checkpoint file is a header line, a JSON line and a ``torch.save`` payload::

    MINDSCIENCE-CHECKPOINT 2
    {"bytes": 123456, "kind": "mindsponge.Simulation", "sha256": "9f86d0..."}
    <payload>

* :func:`save_checkpoint` writes it to a temporary file, flushes, fsyncs and renames it
  over the previous checkpoint, which therefore stays intact until the new one is
  complete. Round trips are bit-exact.
* :func:`load_checkpoint` verifies the payload's length and SHA-256, so a truncated file or
  a flipped byte raises :class:`~common.errors.DataError` naming the file instead of loading
  plausible state, and checks that the checkpoint is of the ``kind`` the caller expects.
* Both refuse a floating tensor or array holding NaN or inf, naming its key.

Checkpoints written before checksums existed (a bare ``torch.save`` file) still load, with a
warning that they are unverified; saving them again adds the checksum.
"""

from __future__ import annotations

import collections
import hashlib
import io as bytes_io
import json
import os
import pathlib
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from common.errors import ArgumentTypeError, ConfigurationError, DataError, MissingFileError
from common.io.recovery import fsync_path

if TYPE_CHECKING:
    import torch

__all__ = ["save_checkpoint", "load_checkpoint"]

_MAGIC = b"MINDSCIENCE-CHECKPOINT 2\n"
_MAX_HEADER_BYTES = 4096
_LEGACY_STARTS = (b"PK\x03\x04", b"\x80")  # torch.save's zip format, and its older pickle format
_NUMPY_MARK = "__numpy__"


def _encode(value: Any, where: str) -> Any:
    """Make ``value`` loadable by ``torch.load(weights_only=True)``: numpy data becomes bytes."""
    import torch

    plain_types = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)
    if isinstance(value, torch.Tensor) or type(value) in plain_types:
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind == "O" or value.dtype.fields is not None:
            raise ArgumentTypeError(
                f"save_checkpoint: {where} is a numpy array of dtype {value.dtype}; "
                "object and structured arrays are not supported"
            )
        array = np.asarray(value, order="C")
        return {_NUMPY_MARK: (array.tobytes(), array.dtype.str, array.shape, isinstance(value, np.generic))}
    if type(value) in (dict, collections.OrderedDict):
        if set(value) == {_NUMPY_MARK}:
            raise ConfigurationError(f"save_checkpoint: {where} uses the reserved key {_NUMPY_MARK!r}")
        encoded = {key: _encode(item, f"{where}[{key!r}]") for key, item in value.items()}
        return collections.OrderedDict(encoded) if isinstance(value, collections.OrderedDict) else encoded
    if type(value) in (list, tuple):
        return type(value)(_encode(item, f"{where}[{index}]") for index, item in enumerate(value))
    hint = "; store generator.get_state() instead" if isinstance(value, torch.Generator) else ""
    raise ArgumentTypeError(
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


def _check_finite(value: Any, where: str, path: pathlib.Path) -> None:
    """Refuse NaN or inf in any floating tensor or numpy array of ``value``, naming its key."""
    import torch

    from common import checks

    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "fc":
        value = torch.from_numpy(np.array(value, ndmin=1))
    if isinstance(value, torch.Tensor):
        checks.finite(value.detach().cpu(), f"checkpoint {str(path)!r}: {where}", item="row")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_finite(item, f"{where}[{key!r}]", path)
    elif type(value) in (list, tuple):
        for index, item in enumerate(value):
            _check_finite(item, f"{where}[{index}]", path)


def _kinds(kind: str | Sequence[str] | None) -> tuple[str, ...]:
    if kind is None:
        return ()
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    if not kinds or not all(isinstance(name, str) and name for name in kinds):
        raise ArgumentTypeError(
            f"checkpoint kind must be a non-empty str or a sequence of them, got {kind!r}")
    return kinds


def save_checkpoint(path: str | os.PathLike, state: Mapping[str, Any], kind: str | None = None) -> None:
    """Write ``state`` atomically, with its SHA-256: a temporary file, fsync, rename, fsync the folder.

    A kill (or crash) at any moment leaves either the previous checkpoint or the new
    one at ``path``, never a partial file. One process should write a given path.

    Args:
        path: the checkpoint file.
        state: a nested dict of tensors (any device), numpy arrays and scalars, Python
            numbers, strings and bytes, lists/tuples/dicts of those, and RNG states
            (``torch.get_rng_state()``, ``generator.get_state()``,
            ``numpy_generator.bit_generator.state``, ``random.getstate()``).
        kind: what the checkpoint holds (``"mindsponge.Simulation"``); :func:`load_checkpoint`
            checks it against the kind its caller expects.

    Raises:
        TypeError: if ``state`` holds something else (the message names where).
        DataError: if a floating tensor or array holds NaN or inf (names the key); nothing is written.
    """
    if not isinstance(state, Mapping):
        raise ArgumentTypeError(f"save_checkpoint: state must be a dict, got {type(state).__name__}")
    import torch

    path = pathlib.Path(path)
    (kind_name,) = _kinds(kind) or (None,)
    encoded = _encode(dict(state), "state")
    _check_finite(state, "state", path)
    buffer = bytes_io.BytesIO()
    torch.save(encoded, buffer)
    payload = buffer.getbuffer()
    header = {"bytes": len(payload), "kind": kind_name, "sha256": hashlib.sha256(payload).hexdigest()}
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(_MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n")
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    fsync_path(path.parent)


def _read_verified(path: pathlib.Path, kinds: tuple[str, ...]) -> bytes | None:
    """The verified payload of a checkpoint file, or ``None`` for a legacy (unchecksummed) one."""
    with open(path, "rb") as handle:
        start = handle.read(len(_MAGIC))
        if start != _MAGIC:
            if start.startswith(_LEGACY_STARTS):
                return None
            raise DataError(f"checkpoint {str(path)!r} is not a checkpoint (unknown header {start[:16]!r})")
        line = handle.readline(_MAX_HEADER_BYTES)
        try:
            header = json.loads(line)
            expected_bytes, expected_hash, found = header["bytes"], header["sha256"], header["kind"]
        except (ValueError, KeyError, TypeError) as error:
            raise DataError(f"checkpoint {str(path)!r}: its header is damaged ({line[:80]!r})") from error
        payload = handle.read()
    if kinds and found not in kinds:
        expected = repr(kinds[0]) if len(kinds) == 1 else f"one of {list(kinds)}"
        holds = f"of kind {found!r}" if found else "that names no kind"
        raise DataError(f"checkpoint {str(path)!r} is a checkpoint {holds}; expected {expected}")
    if len(payload) != expected_bytes:
        raise DataError(
            f"checkpoint {str(path)!r} is truncated or extended: {len(payload)} payload bytes, "
            f"its header says {expected_bytes}"
        )
    if hashlib.sha256(payload).hexdigest() != expected_hash:
        raise DataError(f"checkpoint {str(path)!r} is damaged: its SHA-256 does not match the one stored")
    return payload


def load_checkpoint(
    path: str | os.PathLike,
    map_location: str | torch.device | None = None,
    kind: str | Sequence[str] | None = None,
) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint`, bit-exactly, after verifying it.

    Loading never runs code from the file (``torch.load(weights_only=True)``).

    Args:
        path: the checkpoint file.
        map_location: where to put tensors (as ``torch.load``); default: where they were.
        kind: the kind (or kinds) of checkpoint expected; ``None`` accepts any.

    Returns:
        The state, with the same structure and types as saved.

    Raises:
        FileNotFoundError: no such file.
        DataError: a checksum or length mismatch (damaged or truncated file), a checkpoint of
            another kind (the message names both), a NaN or inf in a floating tensor or array
            (names the key), or a file that cannot be read.
    """
    import torch

    path = pathlib.Path(path)
    if not path.is_file():
        raise MissingFileError(f"checkpoint {str(path)!r} does not exist")
    payload = _read_verified(path, _kinds(kind))
    if payload is None:
        warnings.warn(
            f"checkpoint {str(path)!r} has no checksum (written before checkpoints carried one): "
            "loaded unverified; saving it again adds the checksum",
            UserWarning,
            stacklevel=2,
        )
    source = path if payload is None else bytes_io.BytesIO(payload)
    try:
        state = torch.load(source, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises several types for a damaged file
        raise DataError(f"checkpoint {str(path)!r} cannot be read: {error}") from error
    state = _decode_state(state)
    _check_finite(state, "state", path)
    return state
