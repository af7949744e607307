"""Restart files: a long run that dies continues where its last restart file left it.

``Simulation.run(..., restart_file=path, restart_every=600)`` writes the run's state to ``path`` every
``restart_every`` seconds of wall time (checked every 256 steps, after the fields were found finite),
through :func:`common.io.save_checkpoint`: atomically (a kill while writing leaves the previous file) and
with a checksum. A run started again with the same ``path`` and the same set-up loads it and continues
from its step; the result is the one the run gives without stopping (bit-identical on the same machine
and thread count). The file is deleted when the run completes; a run stopped by an error (or killed)
keeps it.

What is saved: the step; the fields, CPML auxiliary fields, incident lines and polarisations
(:class:`~mindelec.fdtd.state.YeeState`); each monitor's running sums and per-step samples
(:meth:`~mindelec.fdtd.monitors.Recorder.restart_state`); the decay watcher's peaks.

What identifies the set-up (a SHA-256 kept in the file, :func:`setup_digest`): the grid, time step,
dtype, run length and stop criterion; every update coefficient (so every material, design value and
conformal or off-diagonal correction) and thin-wire correction; the source, plane-wave and TF/SF time
series; and each monitor's kind, name, grid boxes, frequencies and buffer shapes. A file of another
set-up, or a damaged one, is refused (:class:`~common.errors.ConfigurationError`,
:class:`~common.errors.DataError`) rather than loaded or overwritten: delete it to start afresh.
"""

from __future__ import annotations

import hashlib
import math
import os
import pathlib
import time

import torch

from common.errors import ArgumentTypeError, ConfigurationError, DataError
from common.io import load_checkpoint, save_checkpoint

#: the ``kind`` of the checkpoint files written here
KIND = "mindelec.fdtd.Simulation.run"
#: steps between the checks of whether a restart file is due (the finiteness checks' period)
CHECK_EVERY = 256


def _feed(hasher, value, where):
    """Add ``value`` (tensors, numbers, strings, slices, dtypes and containers of them) to ``hasher``."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().contiguous()
        hasher.update(f"tensor {value.dtype} {tuple(value.shape)};".encode())
        hasher.update(value.reshape(-1).view(torch.uint8).numpy().data)
    elif value is None or isinstance(value, (bool, int, float, complex, str, slice, torch.dtype)):
        hasher.update(f"{type(value).__name__} {value!r};".encode())
    elif isinstance(value, dict):
        hasher.update(f"dict {len(value)};".encode())
        for key, item in value.items():
            _feed(hasher, key, where)
            _feed(hasher, item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        hasher.update(f"{type(value).__name__} {len(value)};".encode())
        for index, item in enumerate(value):
            _feed(hasher, item, f"{where}[{index}]")
    elif hasattr(value, "__dict__") and not callable(value):  # e.g. a mode source's profile and series
        hasher.update(f"{type(value).__qualname__};".encode())
        _feed(hasher, vars(value), f"{where}.")
    else:  # a new kind of set-up object: say where, rather than digest an address
        raise TypeError(f"restart file digest: {where} is a {type(value).__name__}")


def setup_digest(simulation, stepper, recorders, steps, until_decayed) -> str:
    """The SHA-256 (hex) of what a run's result depends on (module docstring).

    Args:
        simulation: the :class:`~mindelec.fdtd.Simulation`.
        stepper: the run's :class:`~mindelec.fdtd.updates.YeeStepper`.
        recorders: the run's recorders, started (:meth:`Recorder.start`).
        steps: the run's maximum number of steps.
        until_decayed: the run's stop criterion (as given to ``run``).
    """
    hasher = hashlib.sha256()
    grid = simulation.grid
    _feed(hasher, [tuple(grid.shape), tuple(grid.spacing), float(stepper.dt), stepper.dtype, steps,
                   repr(until_decayed)], "grid")
    _feed(hasher, [stepper.electric, stepper.magnetic], "coefficients")

    def feed_correction(tensor):
        _feed(hasher, tensor, "correction")
        return tensor

    for correction in (stepper.off_diagonal, stepper.conformal):
        if correction:
            correction.map_tensors(feed_correction)
    _feed(hasher, stepper.wires.entries if stepper.wires else None, "thin wires")
    _feed(hasher, [stepper.sources, [line.drive for line in stepper.plane_waves],
                   [box.drive for box in stepper.tfsf]], "sources")
    for recorder in recorders:
        frequencies = getattr(recorder, "frequencies", None)
        shapes = [tuple(tensor.shape) for tensor in recorder.accumulators]
        _feed(hasher, [type(recorder).__name__, recorder.name, recorder.index_boxes(), frequencies, shapes],
              f"monitor {recorder.name!r}")
    return hasher.hexdigest()


class RestartFile:
    """One run's restart file: :meth:`resume` at the start, :meth:`save` when :meth:`due`, :meth:`remove`
    at the end.

    Args:
        path: the file (its folder must exist).
        every: seconds of wall time between saves (>= 0; 0 saves at every check).
        digest: the run's :func:`setup_digest`.

    Raises:
        ConfigurationError: ``every`` is negative, NaN or infinite, or the folder does not exist.
    """

    def __init__(self, path, every, digest):
        if not isinstance(path, (str, os.PathLike)):
            raise ArgumentTypeError(f"Simulation.run: restart_file must be a path, got {path!r}")
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not math.isfinite(every) \
                or every < 0:
            raise ConfigurationError(
                f"Simulation.run: restart_every must be a finite number of seconds >= 0, got {every!r}"
            )
        self.path = pathlib.Path(path)
        if not self.path.parent.is_dir():
            raise ConfigurationError(
                f"Simulation.run: the folder of restart_file {str(self.path)!r} does not exist"
            )
        self.every, self.digest = float(every), digest
        self.last = time.monotonic()

    def resume(self, state, recorders, samples, watcher) -> int:
        """Load the file, if there is one, into the run's ``state``, ``recorders``, ``samples`` (one list per
        recorder) and ``watcher`` (in place); returns the number of steps done (0 without a file).

        Raises:
            ConfigurationError: the file was written by a run of another set-up.
            DataError: the file is damaged, of another kind, or does not fit the run.
        """
        if not self.path.exists():
            return 0
        device = state.fields[next(iter(state.fields))].device
        saved = load_checkpoint(self.path, map_location=device, kind=KIND)
        if saved.get("setup") != self.digest:
            raise ConfigurationError(
                f"restart file {str(self.path)!r} was written by a run of another set-up (grid, materials, "
                "sources, monitors or run length differ); delete it to start afresh, or pass another "
                "restart_file"
            )
        try:
            copy_into(state.tensors(), saved["state"], "state")
            for recorder, recorder_state in zip(recorders, saved["recorders"], strict=True):
                recorder.load_restart_state(recorder_state)
            for mine, theirs in zip(samples, saved["samples"], strict=True):
                mine[:] = _unpack(theirs)
            if watcher is not None:
                watcher.peak, watcher.window, watcher.decayed = saved["watcher"]
            return int(saved["step"])
        except (KeyError, ValueError, TypeError, RuntimeError) as error:
            raise DataError(f"restart file {str(self.path)!r} does not fit this run: {error}") from error

    def due(self) -> bool:
        """Whether ``every`` seconds have passed since the run started or last saved."""
        return time.monotonic() - self.last >= self.every

    def save(self, done, state, recorders, samples, watcher):
        """Write the run after ``done`` steps (atomically: a kill while writing keeps the previous file)."""
        save_checkpoint(self.path, {
            "setup": self.digest,
            "step": done,
            "state": state.tensors(),
            "recorders": [recorder.restart_state() for recorder in recorders],
            "samples": [_pack(recorded) for recorded in samples],
            "watcher": None if watcher is None else [watcher.peak, watcher.window, watcher.decayed],
        }, kind=KIND)
        self.last = time.monotonic()

    def remove(self):
        """Delete the file (the run completed)."""
        self.path.unlink(missing_ok=True)


def copy_into(targets, values, where):
    """Copy the saved tensors ``values`` into ``targets`` in place (the run's views of them stay valid).

    Raises:
        ValueError: another number of tensors, or another shape (``where`` names the part).
    """
    values = list(values)
    if len(values) != len(targets):
        raise ValueError(f"{where}: {len(values)} tensors saved, the run has {len(targets)}")
    for index, (target, value) in enumerate(zip(targets, values)):
        if target.shape != value.shape:
            raise ValueError(f"{where}[{index}]: shape {tuple(value.shape)} saved, the run has "
                             f"{tuple(target.shape)}")
        target.copy_(value)


def _pack(recorded):
    """One recorder's per-step samples (a list per step of tensors) as a few tensors: the count per step,
    and the samples stacked when they share a shape (a port's two numbers per step: one tensor)."""
    counts = torch.tensor([len(step) for step in recorded], dtype=torch.int64)
    flat = [tensor for step in recorded for tensor in step]
    if flat and all(tensor.shape == flat[0].shape and tensor.dtype == flat[0].dtype for tensor in flat):
        return {"counts": counts, "stacked": torch.stack(flat)}
    return {"counts": counts, "tensors": flat}


def _unpack(packed):
    """The per-step sample lists :func:`_pack` packed."""
    counts = packed["counts"].tolist()
    flat = list(packed["stacked"].unbind(0)) if "stacked" in packed else list(packed["tensors"])
    if sum(counts) != len(flat):
        raise ValueError(f"{len(flat)} samples saved for {sum(counts)} counted")
    samples = iter(flat)
    return [[next(samples) for _ in range(count)] for count in counts]
