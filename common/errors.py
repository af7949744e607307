"""The suite's exception hierarchy: one root, three branches.

Every error the suite raises on purpose derives from :class:`MindScienceError`, so a batch
script can catch the suite's refusals in one ``except`` and let real bugs through. The
branches say whose fault it is:

- :class:`ConfigurationError`: the caller asked for something contradictory or impossible
  (a bad argument, a bad recipe or TOML key, a frequency the grid cannot carry). Also a
  ``ValueError``, so code that caught ``ValueError`` keeps working.
- :class:`DataError`: a file or tensor handed in is damaged or holds values that cannot be
  used (a truncated HDF5 file, a checkpoint whose checksum fails, NaN positions). Also a
  ``ValueError``.
- :class:`SimulationError`: a run went wrong while it was running (an MD or FDTD blow-up, a
  constraint that does not converge). Also a ``RuntimeError``.

Specific kinds keep the builtin exception they replaced as a second base (:class:`ArgumentTypeError`
is a ``TypeError``, :class:`UnknownNameError` a ``KeyError``, :class:`MissingFileError` a
``FileNotFoundError``...). Python's own protocols stay as they are: a module's missing attribute is an
``AttributeError``, an abstract method a ``NotImplementedError``.

Example::

    from common.errors import MindScienceError
    try:
        sim.run(100_000)
    except MindScienceError as error:
        print("refused or failed:", error)
"""

from __future__ import annotations

__all__ = [
    "MindScienceError", "ConfigurationError", "DataError", "SimulationError", "ArgumentTypeError",
    "UnknownNameError", "OutOfRangeError", "MissingFileError", "OutputExistsError", "BusyError",
    "NonFiniteResultError",
]


class MindScienceError(Exception):
    """Root of every exception the suite raises on purpose."""


class ConfigurationError(MindScienceError, ValueError):
    """A request that is contradictory, out of range or impossible for the chosen set-up."""


class DataError(MindScienceError, ValueError):
    """Input data (a file, a tensor) is damaged or holds values that cannot be used."""


class SimulationError(MindScienceError, RuntimeError):
    """A simulation failed while running (blow-up, non-convergence).

    Attributes:
        step: the step at which the failure was detected, or ``None`` when not known.
    """

    def __init__(self, message: str, step: int | None = None):
        super().__init__(message)
        self.step = step


# The branches' specific kinds: each keeps the builtin exception it replaced as a base, so that code
# which caught ``TypeError``, ``KeyError``, ``FileNotFoundError``... keeps working.


class ArgumentTypeError(ConfigurationError, TypeError):
    """An argument of the wrong type (a string where a tensor belongs); also a ``TypeError``."""


class UnknownNameError(ConfigurationError, KeyError):
    """A name that is not there: a term, a column, a parameter, a key; also a ``KeyError``."""

    def __str__(self):  # the message as written, not KeyError's quoted repr of it
        return str(self.args[0]) if self.args else ""


class OutOfRangeError(ConfigurationError, IndexError):
    """An index outside what it indexes (an atom, a window, a record); also an ``IndexError``."""


class MissingFileError(ConfigurationError, FileNotFoundError):
    """A file or folder named in the input does not exist; also a ``FileNotFoundError``."""


class OutputExistsError(ConfigurationError, FileExistsError):
    """An output would replace an existing file without leave to; also a ``FileExistsError``."""


class BusyError(MindScienceError, RuntimeError):
    """A resource another process holds (a file being written); also a ``RuntimeError``."""


class NonFiniteResultError(SimulationError, FloatingPointError):
    """A computation gave NaN or infinite values (a training loss, an S-parameter); also a
    ``FloatingPointError``."""
