"""Reporters: read-only observers that a :class:`~mindsponge.simulation.Simulation` feeds every N steps.

A reporter says when it next wants a report and what it needs (OpenMM's ``describeNextReport``):
``describe_next_report(state) -> (steps, needs)``, the steps from ``state`` to its next report and
the names of the observables it will read (``"energies"``: potential, kinetic and total energy,
temperature, volume and density; ``"pressure"``: the pressure too, two extra energy evaluations).
The simulation runs straight to the first step a reporter (or a checkpoint, or the barostat) asks
for, computes the observables the due reporters need once, and calls ``report(state, observables)``
on each: the :class:`~mindsponge.state.State` of that step and a dict of floats (kJ/mol, K, bar,
nm^3, g/cm^3, keys as :meth:`Simulation.observables <mindsponge.simulation.Simulation.observables>`).
A reporter never sees the simulation and never changes the state (OpenMM's app-layer design). The
base class :class:`Reporter` asks for a report every ``every`` steps; ``truncate(step)`` and
``close()`` complete the interface. A reporter of an older release, ``report(simulation, state)``,
still works (with a ``DeprecationWarning``).

A run continued from a checkpoint of step n (``mindsponge run --resume``) opens its reporters
with ``append=True`` and calls ``truncate(n)`` first: the rows and frames written after step n
by the run that stopped are removed, so every reported step appears once, in order.

:class:`LogReporter` writes a CSV table (or prints it) with the columns of ``LogReporter.COLUMNS``:
step, time (ps), potential, kinetic and total energy (kJ/mol), temperature (K), pressure (bar),
volume (nm^3), density (g/cm^3) and the speed (ns/day). Pressure, volume and density are
``nan`` without a periodic box. The pressure is the molecular-virial pressure of
:func:`mindsponge.thermo.pressure` (exact with constraints and rigid water). Values are written
with 10 significant digits, time with 6 decimals.

The speed is the simulated time between this report and the previous one divided by the wall
time between them, in nanoseconds per day (``1e-3 * dt_ps / (dt_wall_s / 86400)``), as OpenMM's
``StateDataReporter`` measures it; it covers everything the run does between the two reports
(steps, barostat, other reporters) and is ``nan`` in the first row, which has no previous report.
Like ``StateDataReporter(sys.stdout, ...)``, ``LogReporter(None)`` prints the table, and
``LogReporter(path, stdout=True)`` writes the file and prints the same lines.
"""

import inspect
import math
import os
import sys
import time

from common import checks
from common.deprecation import warn_deprecated
from common.errors import ConfigurationError

__all__ = ["H5MDReporter", "LogReporter", "Reporter", "next_report", "report"]


class Reporter:
    """Base class of reporters: a report every ``every`` steps (steps that are multiples of ``every``).

    Subclasses set :attr:`needs` (or override :meth:`describe_next_report`) and implement :meth:`report`.

    Args:
        every: report every this many steps (positive int).

    Raises:
        ValueError: ``every`` is not a positive integer.
    """

    needs: tuple[str, ...] = ()  # observables the reports read: "energies", "pressure"

    def __init__(self, every):
        checks.positive_int(every, f"{type(self).__name__}: every (steps)")
        self.every = every

    def describe_next_report(self, state):
        """``(steps, needs)``: steps from ``state`` to the next multiple of ``every`` (at least 1) and the
        observables that report reads."""
        return self.every - state.step % self.every, tuple(self.needs)

    def report(self, state, observables):
        """Record ``state`` (a :class:`~mindsponge.state.State`) with ``observables`` (dict of floats)."""
        raise NotImplementedError

    def truncate(self, step):
        """Remove what was reported after ``step`` (before a run resumes from a checkpoint of ``step``).

        The base class writes nothing and removes nothing.
        """

    def close(self):
        """Flush and release resources (called by :meth:`Simulation.close`)."""


def next_report(reporter, state) -> tuple[int, set]:
    """``(steps, needs)``: the steps from ``state`` to ``reporter``'s next report and the observables it will
    read (``describe_next_report``; a reporter without it reports every ``every`` steps and reads the
    energies if it is of an older release, what its ``needs`` say otherwise).

    Raises:
        ValueError: a reporter that asks for a report in fewer than one step.
    """
    describe = getattr(reporter, "describe_next_report", None)
    if describe is not None:
        steps, needs = describe(state)
        steps, needs = int(steps), set(needs)
    else:
        steps, needs = reporter.every - state.step % reporter.every, set(getattr(reporter, "needs", ()))
    if _is_legacy(reporter):
        needs = {"energies"}
    if steps < 1:
        raise ConfigurationError(f"{type(reporter).__name__}.describe_next_report returned {steps} steps; "
                         "it must be >= 1")
    return steps, needs


def _is_legacy(reporter) -> bool:
    """A reporter of an older release: ``report(simulation, state)``."""
    try:
        parameters = list(inspect.signature(reporter.report).parameters)
    except (TypeError, ValueError):
        return False
    return bool(parameters) and parameters[0] == "simulation"


_warned_legacy: set[type] = set()


def report(reporter, simulation, state, observables) -> None:
    """``reporter.report(state, observables)``; an older ``report(simulation, state)`` gets the simulation
    (once per class with a ``DeprecationWarning``)."""
    if not _is_legacy(reporter):
        reporter.report(state, observables)
        return
    if type(reporter) not in _warned_legacy:
        _warned_legacy.add(type(reporter))
        warn_deprecated(f"{type(reporter).__name__}.report(simulation, state)",
                        f"{type(reporter).__name__}.report(state, observables)")
    reporter.report(simulation, state)


class LogReporter(Reporter):
    """Energies, temperature, pressure, volume, density and speed (ns/day) as CSV rows.

    The header is ``LogReporter.COLUMNS`` (see the module docstring for units and the speed).

    Example::

        LogReporter("log.csv", every=100, stdout=True)   # a file, echoed to the terminal

    Args:
        path: CSV file to write (overwritten), or ``None`` to print to standard output only.
        every: report every this many steps.
        pressure: compute the pressure (two extra energy evaluations per report).
        stdout: also print each row to standard output when writing a file.
        append: append to an existing file (a resumed run, after :meth:`truncate`) instead of
            overwriting it.
    """

    COLUMNS = (
        "step",
        "time",
        "potential_energy",
        "kinetic_energy",
        "total_energy",
        "temperature",
        "pressure",
        "volume",
        "density",
        "speed",
    )

    def __init__(self, path=None, every=100, pressure=True, stdout=False, append=False):
        super().__init__(every)
        self.append = bool(append) and path is not None and os.path.isfile(path)
        self.path = path
        self.pressure = bool(pressure)
        self.needs = ("energies", "pressure") if self.pressure else ("energies",)
        self.stdout = bool(stdout) and path is not None
        self._handle = None
        self._last = None  # (wall time, step, time) of the previous report
        if self.path is not None and not self.append:
            self._open()  # the file and its header exist from now on, even if the run dies before a report

    def _open(self):
        if self.path is None:
            self._handle = sys.stdout
        else:
            self._handle = open(self.path, "a" if self.append else "w")  # noqa: SIM115
        if not self.append:
            self._write_line(",".join(self.COLUMNS))
            self.append = self.path is not None  # reopened after close(): continue the file

    def _write(self, line):
        if self._handle is None:
            self._open()
        self._write_line(line)

    def _write_line(self, line):
        self._handle.write(line + "\n")
        self._handle.flush()
        if self.stdout:
            print(line)

    def report(self, state, observables):
        """Append one row for ``state`` (see the module docstring for the columns)."""
        values = observables
        now = time.perf_counter()
        speed = math.nan
        if self._last is not None and now > self._last[0] and state.time > self._last[2]:
            speed = (state.time - self._last[2]) * 1e-3 / ((now - self._last[0]) / 86400.0)
        self._last = (now, state.step, state.time)
        row = [
            str(state.step),
            f"{state.time:.6f}",
            *(
                f"{values[key]:.10g}"
                for key in ("potential", "kinetic", "total", "temperature", "pressure", "volume", "density")
            ),
            f"{speed:.6g}",
        ]
        self._write(",".join(row))

    def truncate(self, step):
        """Keep the header and the rows of steps <= ``step`` of an existing log, in order.

        Reading stops at the first row of a later step, or at a row that is not complete (a
        run killed while writing it); the file is replaced atomically. Later reports append.
        """
        if self.path is None or not os.path.isfile(self.path):
            return
        self.close()
        with open(self.path) as handle:
            lines = handle.read().split("\n")[:-1]  # the text after the last newline is incomplete
        if not lines or lines[0].split(",")[0] != self.COLUMNS[0]:
            self.append = False  # nothing but a partial header: start the file again
            return
        kept = lines[:1]
        for line in lines[1:]:
            fields = line.split(",")
            if len(fields) != len(self.COLUMNS) or not fields[0].isdigit() or int(fields[0]) > step:
                break
            kept.append(line)
        temporary = f"{self.path}.truncate"
        with open(temporary, "w") as handle:
            handle.write("\n".join(kept) + "\n")
        os.replace(temporary, self.path)
        self.append = True

    def close(self):
        """Close the file (standard output stays open)."""
        if self._handle is not None and self._handle is not sys.stdout:
            self._handle.close()
        self._handle = None


class H5MDReporter(Reporter):
    """Trajectory in the H5MD format (https://www.nongnu.org/h5md/), readable by MDAnalysis.

    Writes ``/particles/all/position`` (and ``velocity`` if asked) with ``value`` (T, N, 3) in nm,
    ``step`` and ``time`` (ps); the box as ``/particles/all/box/edges`` (T, 3, 3) nm (periodic
    systems); and ``/observables/{potential_energy,kinetic_energy,temperature}`` (T,). Every
    report is flushed, so a run that stops (blow-up) leaves a readable file. Every chunk (one frame of
    positions) carries a Fletcher-32 checksum (HDF5's ``fletcher32`` filter): HDF5 readers refuse a
    damaged frame instead of returning wrong numbers, and :func:`mindsponge.analysis.read_h5md` names it.

    Readers: MDAnalysis (``mda.Universe("top.pdb", "traj.h5md")``, its H5MD reader) and plain
    h5py. mdtraj does not read H5MD (its HDF5 format is a different layout): convert with
    MDAnalysis, or write a DCD/XTC from the frames, for mdtraj.

    Args:
        path: the ``.h5md`` file (overwritten: created when the reporter is, so that a path that cannot be
            written fails before the run starts; its datasets come with the first report).
        every: report every this many steps.
        velocities: also write velocities (nm/ps).
        append: append to an existing file written by this reporter (a resumed run, after
            :meth:`truncate`).

    Raises:
        ConfigurationError: the file cannot be created (naming it and why).
    """

    def __init__(self, path, every=100, velocities=False, append=False):
        super().__init__(every)
        self.path = path
        self.append = bool(append) and os.path.isfile(path)
        self.velocities = bool(velocities)
        self._file = None
        if not self.append:
            import h5py

            try:
                self._file = h5py.File(self.path, "w")
            except OSError as error:
                raise ConfigurationError(
                    f"H5MDReporter: cannot create the trajectory {str(self.path)!r}: {error}; give a path in "
                    "a folder that exists and can be written") from error

    def _dataset(self, group, shape, dtype, unit=None):
        for name, data_shape, data_dtype in (("value", shape, dtype), ("step", (), "i8"), ("time", (), "f8")):
            dataset = group.create_dataset(
                name,
                shape=(0, *data_shape),
                maxshape=(None, *data_shape),
                dtype=data_dtype,
                chunks=(1, *data_shape) if data_shape else (256,),
                fletcher32=True,  # a checksum per chunk: damaged bytes are refused on reading, never read
            )
            if name == "time":
                dataset.attrs["unit"] = "ps"
        if unit is not None:
            group["value"].attrs["unit"] = unit

    def _layout(self, state):
        """Create the file's groups and datasets for the system of ``state`` (the first report)."""
        from mindsponge import __version__

        handle = self._file
        h5md = handle.create_group("h5md")
        h5md.attrs["version"] = [1, 1]
        h5md.create_group("author").attrs["name"] = "mindsponge"
        creator = h5md.create_group("creator")
        creator.attrs["name"], creator.attrs["version"] = "mindsponge", __version__
        particles = handle.create_group("particles/all")
        n_atoms = state.positions.shape[0]
        box = particles.create_group("box")
        box.attrs["dimension"] = 3
        box.attrs["boundary"] = ["periodic" if state.box is not None else "none"] * 3
        if state.box is not None:
            self._dataset(box.create_group("edges"), (3, 3), "f8", "nm")
        self._dataset(particles.create_group("position"), (n_atoms, 3), "f4", "nm")
        if self.velocities:
            self._dataset(particles.create_group("velocity"), (n_atoms, 3), "f4", "nm ps-1")
        for name, unit in (
            ("potential_energy", "kJ mol-1"),
            ("kinetic_energy", "kJ mol-1"),
            ("temperature", "K"),
        ):
            self._dataset(handle.create_group(f"observables/{name}"), (), "f8", unit)
        self.append = True  # reopened after close(): continue the file

    @staticmethod
    def _append(group, value, state):
        for name, item in (("value", value), ("step", state.step), ("time", state.time)):
            dataset = group[name]
            dataset.resize(dataset.shape[0] + 1, axis=0)
            dataset[-1] = item

    needs = ("energies",)

    def report(self, state, observables):
        """Append the frame of ``state``."""
        if self._file is None:
            import h5py

            self._file = h5py.File(self.path, "a" if self.append else "w")
        if "particles" not in self._file:
            self._layout(state)
        handle = self._file

        def array(tensor):
            return tensor.detach().to("cpu").numpy()

        particles = handle["particles/all"]
        self._append(particles["position"], array(state.positions), state)
        if self.velocities:
            self._append(particles["velocity"], array(state.velocities), state)
        if state.box is not None:
            self._append(particles["box/edges"], array(state.box), state)
        values = observables
        for name, key in (
            ("potential_energy", "potential"),
            ("kinetic_energy", "kinetic"),
            ("temperature", "temperature"),
        ):
            self._append(handle[f"observables/{name}"], values[key], state)
        handle.flush()

    def truncate(self, step):
        """Keep the frames of steps <= ``step`` of an existing file, in every time series.

        Each time series (position, velocity, box, observables) is cut at its first frame of a
        later step and at the shortest of its ``value``, ``step`` and ``time`` datasets (a run
        killed in the middle of a report). Later reports append.

        Raises:
            common.errors.DataError: the file cannot be opened as HDF5 (naming it).
        """
        if not os.path.isfile(self.path):
            return
        import h5py
        import numpy as np

        from common.errors import DataError

        self.close()
        try:
            handle = h5py.File(self.path, "a")
        except OSError as error:
            raise DataError(
                f"cannot open the trajectory {str(self.path)!r} to cut it back to step {step}: {error}; "
                "move it away to start a new trajectory"
            ) from error
        names = ("value", "step", "time")
        series = []  # the groups holding a time series

        def collect(_, item):
            if isinstance(item, h5py.Group) and set(names) <= set(item):
                series.append(item)

        with handle:
            handle.visititems(collect)
            for group in series:
                later = np.nonzero(group["step"][:] > step)[0]
                keep = min(group[name].shape[0] for name in names)
                if later.size:
                    keep = min(keep, int(later[0]))
                for name in names:
                    group[name].resize(keep, axis=0)
        self.append = True

    def close(self):
        """Close the file."""
        if self._file is not None:
            self._file.close()
        self._file = None
