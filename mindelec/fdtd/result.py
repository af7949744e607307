"""The outcome of a run: monitor outputs as tensors, savable to HDF5."""

import torch

from common.errors import UnknownNameError


def _write_group(group, data):
    for key, value in data.items():
        if isinstance(value, dict):
            _write_group(group.create_group(key), value)
        else:
            group.create_dataset(
                key, data=value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
            )


class Result:
    """Monitor outputs of one run.

    ``result[name]`` is the dict of tensors of the monitor ``name`` (see :mod:`mindelec.fdtd.monitors`).

    Attributes:
        times: (steps,) tensor, s: the time of the E fields after each step, ``(n + 1) dt``.
        dt: the time step (s).
        steps: number of steps run.
        metadata: dict of plain values describing the simulation (size, spacing, ndim, polarization, steps).
        cost: how this process spent the run (not saved; a resumed run differs here only):
            ``setup_seconds`` (CPU seconds, all threads, from the call to the first step: materials,
            conformal weights, the restart file read), ``stepping_seconds`` (CPU seconds of the steps this
            process ran), ``resumed_from`` (the step a restart file continued from, 0 for a fresh run).
            The CPU cost of the whole run uninterrupted is about
            ``setup_seconds + stepping_seconds * steps / (steps - resumed_from)``.
    """

    def __init__(self, monitors, times, dt, metadata, cost=None):
        self._monitors = monitors
        self.times = times
        self.dt = dt
        self.steps = len(times)
        self.metadata = metadata
        self.cost = cost or {}

    def __getitem__(self, name):
        if name not in self._monitors:
            raise UnknownNameError(
                f"no monitor named {name!r}; this result has {', '.join(self._monitors) or 'none'}"
            )
        return self._monitors[name]

    def __contains__(self, name):
        return name in self._monitors

    def keys(self):
        """The monitor names."""
        return self._monitors.keys()

    def save(self, path):
        """Write every monitor output to an HDF5 file: one group per monitor, plus ``times``.

        Complex tensors are stored as complex datasets; ``metadata`` and ``dt`` go to the root attributes.

        Args:
            path: the file (overwritten).
        """
        import h5py

        with h5py.File(path, "w") as file:
            file.create_dataset("times", data=self.times.detach().cpu().numpy())
            file.attrs["dt"] = self.dt
            for key, value in self.metadata.items():
                file.attrs[key] = value
            _write_group(file, self._monitors)

    def __repr__(self):
        return f"Result(steps={self.steps}, dt={self.dt:.4g}, monitors={list(self._monitors)})"
