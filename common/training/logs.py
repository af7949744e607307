"""Where a training run's records go besides its :class:`~common.training.History`: a CSV log
appended as training runs, and a TensorBoard event file (when ``tensorboard`` is installed)."""

from __future__ import annotations

import numbers
import os
import pathlib

from common.errors import ConfigurationError
from common.training.history import write_rows

__all__ = ["CsvLog", "TensorBoardLog", "open_logs"]


class CsvLog:
    """Append every record to a CSV file as it is taken (readable while training runs).

    The header holds the keys seen so far; a record with a new key rewrites the file once with the
    wider header (rare: the first monitor record, say). A resumed run rewrites the file from the
    history it resumed, so the log never holds the epochs a killed run had done after its last
    checkpoint.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)
        self.columns: list[str] = []
        self.rows: list[dict] = []

    def start(self, rows: list[dict]) -> None:
        """Begin the file with the rows already in the history (none for a new run)."""
        self.rows = [dict(row) for row in rows]
        self.columns = list({key: None for row in self.rows for key in row})
        self._rewrite()

    def write(self, record: dict) -> None:
        """Append one record (column name -> value); new keys become new columns of the whole file."""
        self.rows.append(dict(record))
        if any(key not in self.columns for key in record):
            self.columns += [key for key in record if key not in self.columns]
            self._rewrite()
            return
        with open(self.path, "a", newline="") as handle:
            write_rows(handle, self.columns, [record], header=False)

    def _rewrite(self) -> None:
        with open(self.path, "w", newline="") as handle:
            write_rows(handle, self.columns, self.rows, header=bool(self.columns))

    def close(self) -> None:
        """Nothing to release (every write opens and closes the file)."""


class TensorBoardLog:
    """Write the numeric values of every record as TensorBoard scalars, at the record's ``step``.

    Raises:
        ConfigurationError: if the ``tensorboard`` package is not installed.
    """

    def __init__(self, directory: str | os.PathLike):
        try:
            import tensorboard  # noqa: F401 - torch's SummaryWriter needs it
        except ImportError as error:
            raise ConfigurationError(
                f"tensorboard={os.fspath(directory)!r} needs the tensorboard package, which is not "
                "installed (pip install tensorboard); or log to CSV with log=..."
            ) from error
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=os.fspath(directory))

    def start(self, rows: list[dict]) -> None:
        """A resumed run's earlier records are already in the event files: nothing to do."""

    def write(self, record: dict) -> None:
        """Write each real-valued entry of the record as a scalar at the record's ``step``."""
        step = record.get("step")
        for key, value in record.items():
            if key != "step" and isinstance(value, numbers.Real) and not isinstance(value, bool):
                self.writer.add_scalar(key, float(value), global_step=step)

    def close(self) -> None:
        """Flush and close the TensorBoard event file."""
        self.writer.close()


def open_logs(log, tensorboard) -> list:
    """The logs asked for: a :class:`CsvLog` at ``log`` and a :class:`TensorBoardLog` in ``tensorboard``."""
    logs = []
    if log is not None:
        logs.append(CsvLog(log))
    if tensorboard is not None:
        logs.append(TensorBoardLog(tensorboard))
    return logs
