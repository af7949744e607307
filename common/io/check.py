"""``python -m common.io check FILE``: what of an H5Writer file is intact and what is recoverable.

:func:`check` inspects the superblock (signature, checksum, consistency flags, length
against the recorded end of file), whether a live writer holds the file, whether a table
creation was interrupted, and then every table chunk by chunk: a chunk missing, beyond the
end of the file or failing its checksum ends what can be recovered of that table. A
truncated file is opened anyway (in SWMR mode, which skips HDF5's length check) to count
the records that survive.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

import h5py

from common.errors import DataError
from common.io import recovery
from common.io.locking import writer_is_live
from common.io.reading import open_for_reading, read_column
from common.io.tables import COMMITTED, column_datasets, table_groups

__all__ = ["CheckReport", "check"]


@dataclasses.dataclass
class CheckReport:
    """The outcome of :func:`check`.

    Attributes:
        path: the file checked.
        intact: whether nothing is wrong (every written record readable, file complete).
        lines: the human-readable report, one finding per line.
        records: table -> (records the counter says were written, records recoverable).
    """

    path: pathlib.Path
    intact: bool = True
    lines: list[str] = dataclasses.field(default_factory=list)
    records: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)

    def damaged(self, line: str) -> None:
        """Record a damaged part (one line of the report) and mark the file as not intact."""
        self.intact = False
        self.lines.append(f"DAMAGED: {line}")

    def __str__(self) -> str:
        verdict = "intact" if self.intact else "DAMAGED"
        return "\n".join([f"{self.path}: {verdict}", *(f"  {line}" for line in self.lines)])


def check(path: str | os.PathLike) -> CheckReport:
    """Inspect the H5Writer file ``path``: what is intact and what is recoverable.

    Raises:
        FileNotFoundError: no such file.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"HDF5 file {str(path)!r} does not exist")
    report = CheckReport(path)
    try:
        superblock = recovery.read_superblock(path)
    except DataError as error:
        report.damaged(f"{error}; nothing can be recovered with this tool")
        return report
    live = writer_is_live(path)
    size = _check_superblock(report, superblock, live)
    try:
        file = open_for_reading(path, check_length=False)
    except DataError as error:
        report.damaged(f"{error}; nothing can be recovered with this tool")
        return report
    with file:
        try:
            tables = table_groups(file)
        except (OSError, RuntimeError, KeyError) as error:
            report.damaged(f"the tables cannot be listed ({error})")
            return report
        for name, group in tables:
            _check_table(report, name, group, size)
    return report


def _check_superblock(report: CheckReport, superblock, live: bool) -> int:
    """Report the superblock's state, the file's length against it, and interrupted table creations;
    the file's length in bytes."""
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
    return size


def _check_table(report: CheckReport, name: str, group: h5py.Group, size: int) -> None:
    try:
        count = int(group[COMMITTED][0])
        columns = column_datasets(group)
    except (OSError, RuntimeError, KeyError) as error:
        report.damaged(f"table {name!r}: its counter or columns cannot be read ({error})")
        report.records[name] = (0, 0)
        return
    recoverable, problems = count, []
    for key, dataset in columns.items():
        good, problem = _readable_rows(dataset, count, size, f"{report.path}, group {name!r}, key {key!r}")
        recoverable = min(recoverable, good)
        if problem:
            problems.append(f"key {key!r}: {problem}")
    report.records[name] = (count, recoverable)
    if problems:
        report.damaged(f"table {name!r}: {count} records written, the first {recoverable} recoverable")
        report.lines.extend(f"    {problem}" for problem in problems)
    else:
        report.lines.append(f"table {name!r}: {count} records, all intact")


def _readable_rows(dataset: h5py.Dataset, count: int, size: int, where: str) -> tuple[int, str | None]:
    """How many of the first ``count`` rows of a column read back, and what stops the rest."""
    if dataset.chunks is None:
        return 0, "not a chunked column"
    if dataset.shape[0] < count:
        return 0, f"{dataset.shape[0]} rows, fewer than the {count} records written"
    rows = dataset.chunks[0]
    try:
        torn = recovery.torn_tail(dataset, count)  # a last chunk a kill tore: its committed rows are intact
    except (OSError, RuntimeError):
        torn = None
    for start in range(0, count, rows):
        if torn is not None and start == torn[0]:
            continue
        info = dataset.id.get_chunk_info_by_coord((start,) + (0,) * (dataset.ndim - 1))
        if info.byte_offset is None:
            return start, f"the chunk of rows {start}.. is missing"
        if info.byte_offset + info.size > size:
            return start, f"the chunk of rows {start}.. lies beyond the file's end"
        try:
            read_column(dataset, slice(start, min(start + rows, count)), where)
        except DataError as error:
            return start, f"the chunk of rows {start}.. cannot be read ({error.__cause__})"
    return count, None
