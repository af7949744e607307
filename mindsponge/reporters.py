"""Reporters: read-only observers that a :class:`~mindsponge.simulation.Simulation` calls every N steps.

A reporter has an ``every`` attribute (steps between reports), ``report(simulation, state)``
and ``close()``. The simulation calls ``report`` after each step whose number is a multiple of
``every``; reporters never change the state (OpenMM's app-layer design).

:class:`LogReporter` writes a CSV table (or prints it) with the columns of ``LogReporter.COLUMNS``:
step, time (ps), potential, kinetic and total energy (kJ/mol), temperature (K), pressure (bar),
volume (nm^3), density (g/cm^3) and the speed since the previous report (ns/day). Pressure,
volume and density are ``nan`` without a periodic box.
"""

import math
import sys
import time

__all__ = ["LogReporter", "Reporter"]


class Reporter:
    """Base class of reporters.

    Args:
        every: report every this many steps (positive int).

    Raises:
        ValueError: ``every`` is not a positive integer.
    """

    def __init__(self, every):
        if isinstance(every, bool) or not isinstance(every, int) or every <= 0:
            raise ValueError(f"{type(self).__name__}: every must be a positive int (steps), got {every!r}")
        self.every = every

    def report(self, simulation, state):
        """Record ``state`` of ``simulation``."""
        raise NotImplementedError

    def close(self):
        """Flush and release resources (called by :meth:`Simulation.close`)."""


class LogReporter(Reporter):
    """Energies, temperature, pressure, volume, density and speed as CSV rows.

    Args:
        path: CSV file to write (overwritten), or ``None`` to print to standard output.
        every: report every this many steps.
        pressure: compute the pressure (two extra energy evaluations per report).
        stdout: also print each row to standard output when writing a file.
    """

    COLUMNS = (
        "step", "time", "potential_energy", "kinetic_energy", "total_energy", "temperature",
        "pressure", "volume", "density", "speed",
    )

    def __init__(self, path=None, every=100, pressure=True, stdout=False):
        super().__init__(every)
        self.path = path
        self.pressure = bool(pressure)
        self.stdout = bool(stdout) and path is not None
        self._handle = None
        self._last = None  # (wall time, step, time) of the previous report

    def _write(self, line):
        if self._handle is None:
            self._handle = sys.stdout if self.path is None else open(self.path, "w")  # noqa: SIM115
            self._write_line(",".join(self.COLUMNS))
        self._write_line(line)

    def _write_line(self, line):
        self._handle.write(line + "\n")
        self._handle.flush()
        if self.stdout:
            print(line)

    def report(self, simulation, state):
        """Append one row for ``state`` (see the module docstring for the columns)."""
        values = simulation.energies(state, pressure=self.pressure)
        now = time.perf_counter()
        speed = math.nan
        if self._last is not None and now > self._last[0] and state.time > self._last[2]:
            speed = (state.time - self._last[2]) * 1e-3 / ((now - self._last[0]) / 86400.0)
        self._last = (now, state.step, state.time)
        row = [
            str(state.step),
            f"{state.time:.6f}",
            *(
                f"{values[key]:.6f}"
                for key in ("potential", "kinetic", "total", "temperature", "pressure", "volume", "density")
            ),
            f"{speed:.4f}",
        ]
        self._write(",".join(row))

    def close(self):
        """Close the file (standard output stays open)."""
        if self._handle is not None and self._handle is not sys.stdout:
            self._handle.close()
        self._handle = None
