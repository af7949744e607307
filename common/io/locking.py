"""One writer per file, decided by the file's identity, not by the name it was opened under.

A :class:`WriterLock` holds an exclusive operating-system lock on the file itself. The lock
belongs to the inode (device and inode number), so a symlink, a hard link or a relative path
to a file being written meets the same lock:

* Linux: an open-file-description record lock (``F_OFD_SETLK``) on one byte far beyond any
  data (:data:`LOCK_BYTE`). It belongs to the writer's descriptor, so HDF5 opening and
  closing its own descriptors of the file in the same process does not drop it (a classic
  POSIX ``lockf`` lock would be dropped), and it does not meet the ``flock`` that HDF5 takes
  when a plain ``h5py.File(path, "r", swmr=True)`` opens the file: other programs can still
  watch a file grow.
* Other POSIX systems (macOS, BSD): ``flock`` on the whole file, which also belongs to the
  open file description; a plain h5py reader there needs ``locking=False`` while a writer
  runs.
* Windows: ``msvcrt.locking`` on a lock file named after the file's identity (volume
  serial number and file index, which ``os.stat`` reports as ``st_dev`` and ``st_ino``) in
  the temporary directory. Windows byte-range locks are mandatory, so the HDF5 file itself
  cannot be locked without blocking HDF5's own reads; this excludes writers on one machine.

HDF5's own file locking is not used: it would make a writer fail whenever a reader in
another process has the file open (a notebook watching a dataset grow).
"""

from __future__ import annotations

import os
import pathlib
import struct
import tempfile
import time

from common.errors import BusyError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

__all__ = ["WriterLock", "writer_is_live"]

_PROBE_GRACE_SECONDS = 0.1

LOCK_BYTE = 1 << 62
"""Offset of the byte a Linux writer locks: beyond any data, so the lock never meets HDF5's I/O."""


def _windows_lock_path(descriptor: int) -> pathlib.Path:
    status = os.fstat(descriptor)
    folder = pathlib.Path(tempfile.gettempdir()) / "mindscience-h5-locks"
    folder.mkdir(exist_ok=True)
    return folder / f"{status.st_dev:x}-{status.st_ino:x}.lock"


def _try_lock(descriptor: int, exclusive: bool) -> int | None:
    """Lock the file open as ``descriptor`` without waiting; return the descriptor holding the lock.

    Returns ``None`` if another open description of the file holds a conflicting lock.
    """
    if hasattr(fcntl, "F_OFD_SETLK"):
        kind = fcntl.F_WRLCK if exclusive else fcntl.F_RDLCK
        request = struct.pack("@hhqqi4x", kind, os.SEEK_SET, LOCK_BYTE, 1, 0)  # struct flock, l_pid 0
        try:
            fcntl.fcntl(descriptor, fcntl.F_OFD_SETLK, request)
        except OSError:
            return None
        return descriptor
    if fcntl is not None:
        try:
            fcntl.flock(descriptor, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except OSError:
            return None
        return descriptor
    lock_descriptor = os.open(_windows_lock_path(descriptor), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        msvcrt.locking(lock_descriptor, msvcrt.LK_NBLCK, 1)
    except OSError:
        os.close(lock_descriptor)
        return None
    return lock_descriptor


class WriterLock:
    """An exclusive lock on the identity of the file at ``path``, created empty if missing.

    Args:
        path: the file (any name of it: symlinks are followed, hard links share the lock).

    Attributes:
        descriptor: a read-write descriptor of the locked file, open while the lock is held.
        identity: ``(st_dev, st_ino)`` of the locked file.

    Raises:
        RuntimeError: if another writer, in this or another process, holds the lock.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
        status = os.fstat(self.descriptor)
        self.identity = (status.st_dev, status.st_ino)
        # a reader's probe (writer_is_live) holds a shared lock for microseconds: wait that out
        deadline = time.monotonic() + _PROBE_GRACE_SECONDS
        self._lock_descriptor = _try_lock(self.descriptor, exclusive=True)
        while self._lock_descriptor is None and time.monotonic() < deadline:
            time.sleep(0.01)
            self._lock_descriptor = _try_lock(self.descriptor, exclusive=True)
        if self._lock_descriptor is None:
            os.close(self.descriptor)
            raise BusyError(
                f"H5Writer: {self.path} is already open in another H5Writer, in this or another process "
                f"(the file, device {status.st_dev} inode {status.st_ino}, is locked; links and other "
                "names of it share the lock)"
            )

    @property
    def size(self) -> int:
        """The locked file's size in bytes."""
        return os.fstat(self.descriptor).st_size

    def close(self) -> None:
        """Release the lock (idempotent)."""
        if self.descriptor is None:
            return
        if self._lock_descriptor != self.descriptor:  # Windows: the lock file
            os.close(self._lock_descriptor)
        os.close(self.descriptor)
        self.descriptor = self._lock_descriptor = None


def writer_is_live(path: str | os.PathLike) -> bool:
    """Whether a :class:`WriterLock` (a live H5Writer, in any process) holds the file at ``path``."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError:
        return False
    try:
        held = _try_lock(descriptor, exclusive=False)
        if held is not None and held != descriptor:
            os.close(held)
        return held is None
    finally:
        os.close(descriptor)
