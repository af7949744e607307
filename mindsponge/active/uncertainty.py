"""The committee's uncertainty along any run: a reporter that records it, warns when the run leaves
the training data, and keeps those frames for labelling.

A learned potential is only as good as its data: where MD takes a molecule that the data did not
cover (a rotamer never sampled, a bond breaking), the forces are extrapolated and the trajectory
can be wrong without any sign in the energies. A :class:`~mindsponge.active.Committee` shows it: its
models disagree there. :class:`UncertaintyReporter` evaluates that disagreement every ``every``
steps of a :class:`~mindsponge.simulation.Simulation`, writes it to a CSV file, warns
(:class:`OutOfDistributionWarning`, naming the step) each time it rises above ``threshold``, and
keeps the flagged frames, which :meth:`UncertaintyReporter.write_flagged` saves for
:func:`mindsponge.active.label_frames` (labelling and retraining is what
:class:`mindsponge.active.ActiveLearning` does in rounds).

Example::

    monitor = UncertaintyReporter(committee, numbers, every=50, threshold=40.0, path="uncertainty.csv")
    simulation = Simulation(system, committee.bind(numbers), integrator, reporters=[monitor])
    simulation.run(100_000)                    # OutOfDistributionWarning: step 31250: ...
    monitor.write_flagged("flagged.npz")       # frames to label with GFN2-xTB
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import torch

from common import checks
from common.errors import ConfigurationError
from mindsponge.reporters import Reporter

__all__ = ["UncertaintyReporter", "OutOfDistributionWarning", "KEEP"]

#: which frames an :class:`UncertaintyReporter` keeps in memory
KEEP = ("flagged", "all", "none")


class OutOfDistributionWarning(UserWarning):
    """A run reached configurations where the committee disagrees more than its threshold: the
    learned forces there are extrapolated (the message names the step and the disagreement)."""


class _Runaway(Exception):
    """Raised by :class:`UncertaintyReporter` to stop a run above ``stop_above``."""


class UncertaintyReporter(Reporter):
    """Records the committee's force disagreement (kJ/mol/nm) every ``every`` steps.

    Args:
        committee: a :class:`~mindsponge.active.Committee`.
        atomic_numbers: ``(N,)`` of the simulated molecule.
        every: steps between records.
        stop_above: stop the run (an exception :func:`~mindsponge.active.explore` catches) above this
            disagreement, kJ/mol/nm.
        threshold: warn (:class:`OutOfDistributionWarning`, once per excursion) and flag frames above
            this disagreement, kJ/mol/nm (the ``[selection] threshold`` of active learning).
        path: a CSV file of ``step,disagreement`` rows (kJ/mol/nm), or ``None``.
        keep: frames kept in memory: ``"flagged"`` (above ``threshold``), ``"all"`` or ``"none"``.
        frames_path: an ``.npz`` file the flagged frames are written to (atomically) each time one is flagged,
            so that a run killed on the way loses none: positions ``(F, N, 3)`` nm, ``atomic_numbers``,
            ``steps`` ``(F,)`` and ``disagreement`` ``(F,)`` kJ/mol/nm (readable by
            :func:`~mindsponge.active.label_frames`); needs ``threshold``.
        append: continue an existing ``path`` and ``frames_path`` (a resumed run, then :meth:`truncate`):
            their records and frames are read back.

    The records are in ``steps`` (a list of the steps recorded) and ``disagreement`` (the values there,
    kJ/mol/nm); the kept frames in ``positions`` (a list of ``(N, 3)`` arrays, nm), taken at the steps
    in ``kept_steps``.
    """

    def __init__(self, committee, atomic_numbers, every: int, stop_above: float | None = None, *,
                 threshold: float | None = None, path: str | os.PathLike | None = None,
                 keep: str = "flagged", frames_path: str | os.PathLike | None = None, append: bool = False):
        super().__init__(every)
        for name, value in (("stop_above", stop_above), ("threshold", threshold)):
            if value is not None:
                checks.positive(value, f"UncertaintyReporter: {name} (kJ/mol/nm)")
        if keep not in KEEP:
            raise ConfigurationError(f"UncertaintyReporter: keep must be one of {KEEP}, got {keep!r}")
        if frames_path is not None and (threshold is None or keep != "flagged"):
            raise ConfigurationError("UncertaintyReporter: frames_path saves the flagged frames: it needs a "
                                     "threshold and keep=\"flagged\"")
        self.committee, self.atomic_numbers = committee, torch.as_tensor(atomic_numbers)
        self.stop_above, self.threshold, self.keep = stop_above, threshold, keep
        self.path, self.frames_path, self._handle = path, frames_path, None
        self._append = bool(append) and path is not None and os.path.isfile(path)
        self.steps: list[int] = []
        self.disagreement: list[float] = []
        self.positions: list[np.ndarray] = []
        self.kept_steps: list[int] = []
        self._outside = False  # the previous record was above the threshold
        if append:
            self._read_back()

    def report(self, state, observables) -> None:
        """Record the frame's disagreement; warn, flag or stop as configured."""
        positions = state.positions.detach().cpu().double()
        box = None if state.box is None else state.box.detach().cpu().double()
        value = float(self.committee.force_disagreement(positions[None], self.atomic_numbers, box=box)[0])
        step = int(state.step)
        self.steps.append(step)
        self.disagreement.append(value)
        above = self.threshold is not None and value > self.threshold
        if self.keep == "all" or (self.keep == "flagged" and above):
            self.positions.append(positions.numpy())
            self.kept_steps.append(step)
        self._write(f"{step},{value:.6g}")
        if above and self.frames_path is not None:
            self._write_frames()
        if above and not self._outside:
            warnings.warn(OutOfDistributionWarning(
                f"step {step}: the committee's force disagreement is {value:.3g} kJ/mol/nm, above the "
                f"threshold {self.threshold:g}: the run has left the training data and its learned forces "
                f"are extrapolated ({self.flagged_count} frame(s) flagged so far; write_flagged() saves "
                f"them for labelling)"), stacklevel=2)
        self._outside = above
        if self.stop_above is not None and value > self.stop_above:
            raise _Runaway

    @property
    def flagged_count(self) -> int:
        """Records above ``threshold`` so far."""
        if self.threshold is None:
            return 0
        return sum(value > self.threshold for value in self.disagreement)

    def flagged_frames(self) -> tuple[np.ndarray, np.ndarray]:
        """``(positions (F, N, 3) nm, steps (F,))`` of the kept frames above ``threshold``."""
        if self.threshold is None:
            raise ConfigurationError("UncertaintyReporter: no threshold was given, so no frame is flagged")
        disagreement = dict(zip(self.steps, self.disagreement, strict=True))
        chosen = [index for index, step in enumerate(self.kept_steps) if disagreement[step] > self.threshold]
        atoms = len(self.atomic_numbers)
        positions = np.stack([self.positions[i] for i in chosen]) if chosen else np.zeros((0, atoms, 3))
        return positions, np.asarray([self.kept_steps[i] for i in chosen], dtype=np.int64)

    def write_flagged(self, path) -> os.PathLike:
        """Save the flagged frames for :func:`mindsponge.active.label_frames` (.npz: positions, atomic
        numbers); returns the path."""
        from mindsponge.active.labelling import write_frames

        positions, _ = self.flagged_frames()
        return write_frames(path, positions, self.atomic_numbers.numpy())

    def _write_frames(self) -> None:
        from mindsponge.active.labelling import write_frames

        positions, steps = self.flagged_frames()
        disagreement = dict(zip(self.steps, self.disagreement, strict=True))
        write_frames(self.frames_path, positions, self.atomic_numbers.numpy(), steps=steps,
                     disagreement=np.array([disagreement[int(step)] for step in steps]))

    def _read_back(self) -> None:
        """The records of ``path`` and the frames of ``frames_path`` written before (a resumed run)."""
        if self._append:
            with open(self.path) as file:
                rows = [line.split(",") for line in file.read().splitlines()[1:] if line]
            self.steps = [int(row[0]) for row in rows]
            self.disagreement = [float(row[1]) for row in rows]
        if self.frames_path is not None and os.path.isfile(self.frames_path):
            with np.load(self.frames_path) as content:
                self.positions = list(content["positions"])
                self.kept_steps = [int(step) for step in content["steps"]]
                values = content["disagreement"]
            recorded = set(self.steps)  # frames whose record the CSV lost (no path): their records back
            for step, value in zip(self.kept_steps, values, strict=True):
                if step not in recorded:
                    self.steps.append(step)
                    self.disagreement.append(float(value))

    def _write(self, line: str) -> None:
        if self.path is None:
            return
        if self._handle is None:
            self._handle = open(self.path, "a" if self._append else "w")  # noqa: SIM115
            if not self._append:
                self._handle.write("step,disagreement\n")
        self._handle.write(line + "\n")
        self._handle.flush()

    def truncate(self, step) -> None:
        """Forget the records after ``step`` (in memory and in ``path``), before a resumed run."""
        kept = [index for index, recorded in enumerate(self.steps) if recorded <= step]
        self.steps = [self.steps[i] for i in kept]
        self.disagreement = [self.disagreement[i] for i in kept]
        frames = [index for index, recorded in enumerate(self.kept_steps) if recorded <= step]
        self.positions = [self.positions[i] for i in frames]
        self.kept_steps = [self.kept_steps[i] for i in frames]
        if self.frames_path is not None and os.path.isfile(self.frames_path):
            self._write_frames()
        if self.path is not None and os.path.isfile(self.path):
            self.close()
            with open(self.path) as file:
                lines = file.read().splitlines()
            rows = [line for line in lines[1:] if line and line.split(",")[0].isdigit()
                    and int(line.split(",")[0]) <= step]
            with open(self.path, "w") as file:
                file.write("\n".join([lines[0] if lines else "step,disagreement", *rows]) + "\n")
            self._append = True

    def close(self) -> None:
        """Close the CSV file (the records stay available)."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
