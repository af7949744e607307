"""The training history: one mapping of ``key -> list`` shared by every trainer, written as CSV.

Every trainer records the same keys:

- ``step``: optimiser steps done when the record was taken;
- ``epoch``: epochs done (epoch-based trainers);
- ``loss``: the training loss (the weighted sum of the terms);
- ``loss/<term>``: each term of it (e.g. ``loss/pde``, ``loss/boundary``);
- ``learning_rate``: the learning rate of the first parameter group;
- ``validation_loss`` and ``validation_<metric>``: metrics on the held-out set.

A record is appended as a row (:meth:`History.append`); ``history[key]`` is the list of the
values of ``key`` over the rows that have it (so keys recorded less often, such as
``monitor/<name>``, have shorter lists). Entries that are not per-row (``best_epoch``,
``train_indices``) are plain items set with ``history[key] = value``.

Old spellings keep working for one release, with a ``DeprecationWarning``: ``history["lr"]``
(``common.pde``, ``mindelec.surrogate``) and ``history["train_loss"]`` (``mindsponge.train``,
``mindelec.surrogate``) read the new keys, and ``history[0]`` (``mindsponge.train``'s list of
dicts) returns the first row as a dict with the old keys too.
"""

from __future__ import annotations

import csv
import math
import os
import pathlib

from common.deprecation import warn_deprecated

__all__ = ["History", "RENAMED_KEYS"]

#: old history keys -> the keys that replaced them
RENAMED_KEYS = {"lr": "learning_rate", "train_loss": "loss"}


class History(dict):
    """A ``dict`` of ``key -> list`` of the values recorded, row by row (see the module docstring).

    Being a ``dict``, it passes to ``json.dumps``, ``pandas.DataFrame`` (per-row keys) and plots
    as before. :meth:`rows` gives the records one dict per row; :meth:`write_csv` writes them.
    """

    def __init__(self, rows=(), extras=None):
        super().__init__()
        self._rows: list[dict] = []
        for row in rows:
            self.append(row)
        self.update(extras or {})

    def append(self, record: dict) -> None:
        """Add one row: every ``key -> value`` of ``record`` is appended to ``self[key]``."""
        record = dict(record)
        self._rows.append(record)
        for key, value in record.items():
            dict.setdefault(self, key, []).append(value)

    def rows(self) -> list[dict]:
        """The records, one dict per row, in order."""
        return [dict(row) for row in self._rows]

    @property
    def columns(self) -> list[str]:
        """The per-row keys, in the order they first appeared."""
        seen = {}
        for row in self._rows:
            seen.update(dict.fromkeys(row))
        return list(seen)

    def extras(self) -> dict:
        """The entries that are not per-row (``best_epoch``, split indices, ...)."""
        columns = set(self.columns)
        return {key: value for key, value in self.items() if key not in columns}

    def state_dict(self) -> dict:
        """Plain lists and dicts (for :func:`common.io.save_checkpoint`): ``rows`` and ``extras``."""
        return {"rows": self.rows(), "extras": self.extras()}

    @classmethod
    def from_state_dict(cls, state: dict) -> History:
        """The history :meth:`state_dict` described."""
        return cls(state["rows"], state["extras"])

    def write_csv(self, path: str | os.PathLike) -> pathlib.Path:
        """Write the rows to ``path`` as CSV (header: :attr:`columns`; a key a row lacks is empty).

        The file is replaced atomically (a temporary file renamed over it).
        """
        path = pathlib.Path(path)
        temporary = path.with_name(f".{path.name}.tmp")
        with open(temporary, "w", newline="") as handle:
            write_rows(handle, self.columns, self._rows, header=True)
        os.replace(temporary, path)
        return path

    def __getitem__(self, key):
        if isinstance(key, int) and not isinstance(key, bool):
            warn_deprecated("history[index] (a list of per-epoch dicts)",
                            "history[key] (a list per key) or history.rows()[index]")
            row = dict(self._rows[key])
            row.update({old: row[new] for old, new in RENAMED_KEYS.items() if new in row})
            return row
        if key in RENAMED_KEYS and not dict.__contains__(self, key):
            warn_deprecated(f"history[{key!r}]", f"history[{RENAMED_KEYS[key]!r}]")
            key = RENAMED_KEYS[key]
        return dict.__getitem__(self, key)


def write_rows(handle, columns, rows, header: bool) -> None:
    """Write ``rows`` (dicts) under ``columns`` to an open text file as CSV (missing values empty)."""
    writer = csv.DictWriter(handle, fieldnames=columns, restval="", extrasaction="ignore")
    if header:
        writer.writeheader()
    for row in rows:
        writer.writerow({key: _cell(value) for key, value in row.items()})


def _cell(value):
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # nan, inf: read back by float()
    return value
