"""``python -m common.io check FILE``: what of an H5Writer file is intact and what is recoverable.

:func:`check` inspects the superblock (signature, checksum, consistency flags, length
against the recorded end of file), whether a live writer holds the file, whether a table
creation was interrupted, and then every table chunk by chunk: a chunk missing, beyond the
end of the file, failing its checksum, or (string columns) whose strings' global heap is
truncated or damaged ends what can be recovered of that table. A truncated file is opened
anyway (in SWMR mode, which skips HDF5's length check) to count the records that survive.
Every table gets a verdict (:class:`TableVerdict`): intact, or damaged with the column,
rows and reason.

Every read is bounded: sizes read from the file are checked against its actual length
before HDF5 is given them (HDF5 loops for ever on a truncated string heap, see
:mod:`common.io.heaps`). :func:`check_bounded`, which the command line uses, also runs the
check in a child process stopped after a time limit, so that a loop or a crash inside HDF5
on damage this module does not foresee still ends in a verdict.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pathlib
from typing import Any

import h5py

from common.errors import DataError, MissingFileError
from common.io import heaps, recovery
from common.io.locking import writer_is_live
from common.io.reading import open_for_reading, read_column, read_counter
from common.io.tables import COMMITTED, column_datasets, table_groups

__all__ = ["CheckReport", "TableVerdict", "check", "check_bounded", "EXIT_STATUS"]

EXIT_STATUS = {"intact": 0, "damaged": 1, "not a file": 2, "undecided": 3}
"""The command line's exit status for each verdict (the worst file's)."""

TIMEOUT_SECONDS = 60.0
TIMEOUT_SECONDS_PER_GB = 60.0
""":func:`check_bounded`'s default time limit: this plus that per gigabyte of the file."""

_HDF5_ERRORS = (OSError, RuntimeError, KeyError, ValueError)  # what h5py raises for damaged structures


@dataclasses.dataclass
class TableVerdict:
    """The verdict on one table of a checked file.

    Attributes:
        name: the table (HDF5 group path, ``"/"`` for the root).
        written: the records its counter says were written (0 if the counter cannot be read).
        recoverable: how many of the first records read back intact.
        problems: what is damaged, one line each (``key 'x': ...`` for a column); empty if intact.
    """

    name: str
    written: int
    recoverable: int
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def intact(self) -> bool:
        """Whether every written record reads back."""
        return not self.problems


@dataclasses.dataclass
class CheckReport:
    """The outcome of :func:`check`.

    Attributes:
        path: the file checked.
        verdict: ``"intact"``, ``"damaged"``, or ``"undecided"`` (:func:`check_bounded` got no
            answer in time, or the check failed).
        lines: the human-readable report, one finding per line.
        tables: table name -> its :class:`TableVerdict`.
    """

    path: pathlib.Path
    verdict: str = "intact"
    lines: list[str] = dataclasses.field(default_factory=list)
    tables: dict[str, TableVerdict] = dataclasses.field(default_factory=dict)

    @property
    def intact(self) -> bool:
        """Whether nothing is wrong (every written record readable, file complete)."""
        return self.verdict == "intact"

    @property
    def records(self) -> dict[str, tuple[int, int]]:
        """Table -> (records the counter says were written, records recoverable)."""
        return {name: (table.written, table.recoverable) for name, table in self.tables.items()}

    @property
    def exit_status(self) -> int:
        """The command line's exit status for this file (:data:`EXIT_STATUS`)."""
        return EXIT_STATUS[self.verdict]

    def damaged(self, line: str) -> None:
        """Record a damaged part (one line of the report) and mark the file as damaged."""
        self.verdict = "damaged"
        self.lines.append(f"DAMAGED: {line}")

    def undecided(self, line: str) -> None:
        """Record why no verdict could be reached (one line of the report)."""
        self.verdict = "undecided"
        self.lines.append(f"UNDECIDED: {line}")

    def __str__(self) -> str:
        verdict = self.verdict if self.intact else self.verdict.upper()
        return "\n".join([f"{self.path}: {verdict}", *(f"  {line}" for line in self.lines)])


def check(path: str | os.PathLike) -> CheckReport:
    """Inspect the H5Writer file ``path``: what is intact and what is recoverable, table by table.

    Any damage (not HDF5 at all, empty, truncated anywhere, overwritten bytes) gives a
    report, in a time bounded by the file's size; nothing raises for it.

    Raises:
        FileNotFoundError: no such file.
        IsADirectoryError: ``path`` is a directory.
        OSError: the file cannot be read at all (permissions, an I/O error).
    """
    path = _existing_file(path)
    report = CheckReport(path)
    if path.stat().st_size == 0:
        report.damaged("the file is empty (0 bytes): nothing to recover")
        return report
    try:
        superblock = recovery.read_superblock(path)
    except DataError as error:
        report.damaged(f"{error}; nothing can be recovered with this tool")
        return report
    live = writer_is_live(path)
    _check_superblock(report, superblock, live)
    try:
        file = open_for_reading(path, check_length=False)
    except DataError as error:
        report.damaged(f"{error}; nothing can be recovered with this tool")
        return report
    with file:
        try:
            tables = table_groups(file)
        except _HDF5_ERRORS as error:
            report.damaged(f"the tables cannot be listed ({error})")
            return report
        if not tables:
            report.lines.append("no H5Writer tables")
        for name, group in tables:
            table = _check_table(report.path, name, group)
            report.tables[name] = table
            if table.intact:
                report.lines.append(f"table {name!r}: {table.written} records, all intact")
            else:
                written, recoverable = table.written, table.recoverable
                report.damaged(
                    f"table {name!r}: {written} records written, the first {recoverable} recoverable"
                )
                report.lines.extend(f"    {problem}" for problem in table.problems)
    return report


def check_bounded(path: str | os.PathLike, timeout: float | None = None) -> CheckReport:
    """:func:`check` run in a child process, which is stopped after ``timeout`` seconds.

    A loop or crash inside HDF5, on damage :func:`check` does not foresee, then still gives
    a verdict: ``"undecided"`` when the time is up, ``"damaged"`` when the child died (HDF5 crashed).

    Args:
        path: the file.
        timeout: the time limit in seconds; default :data:`TIMEOUT_SECONDS` plus
            :data:`TIMEOUT_SECONDS_PER_GB` per gigabyte of the file.

    Raises:
        FileNotFoundError, IsADirectoryError, OSError: as :func:`check`.
    """
    path = _existing_file(path)
    if timeout is None:
        timeout = TIMEOUT_SECONDS + TIMEOUT_SECONDS_PER_GB * path.stat().st_size / 1e9
    context = multiprocessing.get_context("forkserver")  # a clean process, not a fork of a threaded parent
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_check_into, args=(path, sender), daemon=True)
    process.start()
    sender.close()
    answered = receiver.poll(timeout)
    try:
        outcome = receiver.recv() if answered else None
    except EOFError:  # the child died without an answer
        outcome = None
    finally:
        process.join(timeout=1.0 if answered else 0.0)
        if process.is_alive():
            process.kill()  # before the pipe closes: the child must not write to a closed pipe
            process.join()
        receiver.close()
    if isinstance(outcome, CheckReport):
        return outcome
    if isinstance(outcome, OSError):
        raise outcome
    report = CheckReport(path)
    if not answered:
        report.undecided(
            f"no verdict within {timeout:.3g} s: reading the file does not end (HDF5 looping on damaged "
            "bytes, or a slow disk: give a longer --timeout)"
        )
    elif outcome is None:
        code = process.exitcode
        ending = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        report.damaged(
            f"the checking process {ending} without a verdict: HDF5 crashed on the file, or it was killed"
        )
    else:
        report.undecided(f"the check failed: {outcome}")
    return report


def _check_into(path: pathlib.Path, sender: Any) -> None:
    """The child process of :func:`check_bounded`: send the report, the OSError, or what else went wrong."""
    try:
        outcome: Any = check(path)
    except OSError as error:
        outcome = error
    except Exception as error:  # an unforeseen failure is reported as the file's "undecided" verdict
        outcome = f"{type(error).__name__}: {error}"
    sender.send(outcome)
    sender.close()


def _existing_file(path: str | os.PathLike) -> pathlib.Path:
    """``path`` as a Path, if it is a file; otherwise raise, naming it."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: a directory, not an HDF5 file")
    if not path.exists():
        raise MissingFileError(f"HDF5 file {str(path)!r} does not exist")
    return path


def _check_superblock(report: CheckReport, superblock: recovery.Superblock, live: bool) -> None:
    """Report the superblock's state, the file's length against it, and interrupted table creations."""
    path = report.path
    state = "left open by a killed writer" if superblock.flags else "clean"
    if live:
        state = "open by a live writer"
    report.lines.append(f"superblock: version {superblock.version}, checksum ok, {state}")
    size = path.stat().st_size
    if superblock.end_of_file is not None:
        if size < superblock.end_of_file:
            report.damaged(f"truncated: {size} bytes, the superblock says {superblock.end_of_file}")
        else:
            report.lines.append(f"length: {size} bytes, end of file recorded at {superblock.end_of_file}: ok")
    if not live:
        for undo in path.parent.glob(f".{path.name}.*.undo"):
            report.damaged(f"a table creation was interrupted; the next H5Writer restores {undo.name}")


def _check_table(path: pathlib.Path, name: str, group: h5py.Group) -> TableVerdict:
    """The verdict on the table ``name``: its counter, then each column chunk by chunk."""
    where = f"{path}, group {name!r}"
    try:
        count, size = read_counter(group[COMMITTED], where)
        columns = column_datasets(group)
    except DataError as error:
        return TableVerdict(name, 0, 0, [str(error).removeprefix(f"{where}: ")])
    except _HDF5_ERRORS as error:
        return TableVerdict(name, 0, 0, [f"its counter or columns cannot be read ({error})"])
    verdict = TableVerdict(name, count, count)
    for key, dataset in columns.items():
        good, problem = _readable_rows(dataset, count, size, f"{where}, key {key!r}")
        verdict.recoverable = min(verdict.recoverable, good)
        if problem:
            verdict.problems.append(f"key {key!r}: {problem}")
    return verdict


def _readable_rows(dataset: h5py.Dataset, count: int, size: int, where: str) -> tuple[int, str | None]:
    """How many of the first ``count`` rows of a column read back, and what stops the rest."""
    if dataset.chunks is None:
        return 0, "not a chunked column"
    if dataset.shape[0] < count:
        return 0, f"{dataset.shape[0]} rows, fewer than the {count} records written"
    rows = dataset.chunks[0]
    try:
        torn = recovery.torn_tail(dataset, count)  # a last chunk a kill tore: its committed rows are intact
    except _HDF5_ERRORS:
        torn = None
    for start in range(0, count, rows):
        if torn is None or start != torn[0]:
            damage = _chunk_damage(dataset, range(start, min(start + rows, count)), size, where)
            if damage is not None:
                return damage
    return count, None


def _chunk_damage(dataset: h5py.Dataset, rows: range, size: int, where: str) -> tuple[int, str] | None:
    """The first of ``rows`` (one chunk's) that does not read back, and why; ``None`` if all do."""
    start = rows.start
    try:
        info = dataset.id.get_chunk_info_by_coord((start,) + (0,) * (dataset.ndim - 1))
    except _HDF5_ERRORS as error:
        return start, f"the index of the chunk of rows {start}.. cannot be read ({error})"
    if info.byte_offset is None:
        return start, f"the chunk of rows {start}.. is missing"
    if info.byte_offset + info.size > size:
        return start, f"the chunk of rows {start}.. lies beyond the file's end (truncated)"
    if h5py.check_string_dtype(dataset.dtype) is not None:
        damage = heaps.first_damaged_string(dataset, rows, size)
        if damage is not None:
            row, reason = damage
            return row, f"row {row}: {reason}"
    try:
        read_column(dataset, slice(start, rows.stop), where)
    except DataError as error:
        return start, f"the chunk of rows {start}.. cannot be read ({error.__cause__ or error})"
    return None
