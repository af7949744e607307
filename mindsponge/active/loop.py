"""The active-learning loop: train a committee, explore with it, label what it disagrees on, retrain.

Round 0 trains ``k`` models on the initial data (a ``common.datasets`` recipe, generated into the
run's directory, or an HDF5 file). Every later round runs the exploration MD of
:mod:`mindsponge.active.exploration` with the previous committee, flags the frames whose force
disagreement exceeds ``selection.threshold``, labels up to ``selection.max_frames`` of them with
GFN-xTB through a recipe (:mod:`mindsponge.active.labelling`), and retrains the models from their
previous weights (warm start) on all data. The loop stops when a round's exploration flags no
frame and no trajectory was stopped (converged), or after ``max_rounds`` rounds.

Everything a round makes is stored under ``directory/round_NNN/`` (exploration frames,
candidates, labels, models, ``record.json`` written last); a run started again skips the finished
rounds and steps, and the labelling resumes frame by frame, so no frame is labelled twice.
``directory/rounds.csv`` holds one row per round (see :data:`LOG_COLUMNS`).
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import json
import os
import pathlib
import warnings
from typing import Literal

import numpy as np
import torch

from common import checks, datasets
from common import config as config_module
from common.errors import ConfigurationError, SimulationError
from common.parallel import JobFailure, run_jobs
from mindsponge import potentials as potentials_module
from mindsponge.active.committee import Committee
from mindsponge.active.exploration import Exploration, explore
from mindsponge.active.labelling import label_frames, write_frames
from mindsponge.train import Trainer, TrainingData

__all__ = [
    "CommitteeSettings",
    "Selection",
    "Labels",
    "ActiveLearningConfig",
    "ActiveLearning",
    "LOG_COLUMNS",
    "select_frames",
    "load_config",
]

LOG_COLUMNS = (
    "round",
    "training_frames",
    "explored_frames",
    "flagged_frames",
    "added_frames",
    "failed_labels",
    "stopped_trajectories",
    "max_disagreement",
    "mean_disagreement",
    "validation_force_mae",
    "converged",
)
"""Columns of ``rounds.csv``: disagreements and MAE in kJ/mol/nm; round 0 has no exploration (NaN)."""


@dataclasses.dataclass
class CommitteeSettings:
    """``[committee]``: the models and their training (:class:`mindsponge.train.Trainer`).

    ``epochs`` for round 0, ``retrain_epochs`` for every warm-started retraining.
    ``weight_schedule`` maps a first epoch (a string in TOML: ``{ "0" = [1.0, 1.0], "80" =
    [1000.0, 1.0] }``) to the ``[energy_weight, force_weight]`` of the training loss from then on,
    in round 0 and, unless ``retrain_weight_schedule`` is given, in every retraining (whose epochs
    count from 0 again); ``energy_weight`` and ``force_weight`` weigh the validation loss.
    ``workers``: processes that train the members side by side, one thread each (0: one after the
    other in this process, with its threads).
    """

    model: Literal["SchNet", "PaiNN", "MolCT"] = "SchNet"
    size: int = 4
    features: int = 32
    interactions: int = 2
    cutoff: float = 0.5
    dtype: Literal["float32", "float64"] = "float32"
    epochs: int = 100
    retrain_epochs: int = 40
    batch_size: int = 16
    learning_rate: float = 1e-3
    patience: int = 30
    force_weight: float = 1.0
    energy_weight: float = 1.0
    ema_decay: float | None = None
    gradient_clip: float | None = None
    weight_schedule: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    retrain_weight_schedule: dict[str, tuple[float, float]] | None = None
    seed: int = 0
    workers: int = 0

    def __post_init__(self):
        checks.non_negative_int(self.workers, "workers (0 = the members one after the other here)")
        for name in ("weight_schedule", "retrain_weight_schedule"):
            schedule = getattr(self, name) or {}
            if not all(epoch.isdigit() for epoch in schedule):
                raise ConfigurationError(
                    f"{name}: keys must be first epochs (0-based) as strings such as \"80\", got "
                    f"{list(schedule)}"
                )
        if checks.positive_int(self.size, "size") < 2:
            raise ConfigurationError(f"size must be >= 2 (a committee), got {self.size}")
        for name in ("features", "interactions", "epochs", "retrain_epochs", "batch_size", "patience"):
            checks.positive_int(getattr(self, name), name)


@dataclasses.dataclass
class Selection:
    """``[selection]``: ``threshold`` (kJ/mol/nm) of the force disagreement; ``max_frames`` per round."""

    threshold: float
    max_frames: int = 20

    def __post_init__(self):
        if not self.threshold > 0:
            raise ConfigurationError(f"threshold must be positive (kJ/mol/nm), got {self.threshold}")
        if self.max_frames < 1:
            raise ConfigurationError(f"max_frames must be >= 1, got {self.max_frames}")


@dataclasses.dataclass
class Labels:
    """``[labels]``: the reference method, the total charge (e) and the labelling worker processes."""

    method: Literal["GFN2-xTB", "GFN1-xTB"] = "GFN2-xTB"
    charge: float = 0.0
    workers: int = 0


@dataclasses.dataclass
class ActiveLearningConfig:
    """An active-learning run (TOML; see ``datasets/active/claisen_active_small.toml``).

    Attributes:
        initial: a ``common.datasets`` recipe (``.toml``, relative to the configuration file) or an
            HDF5 file with ``positions``, ``atomic_numbers``, ``energy``, ``forces``.
        selection, committee, exploration, labels: the tables above.
        directory: where the run keeps its rounds (relative to the configuration file).
        max_rounds: exploration rounds at most.
    """

    initial: str
    selection: Selection
    committee: CommitteeSettings = dataclasses.field(default_factory=CommitteeSettings)
    exploration: Exploration = dataclasses.field(default_factory=Exploration)
    labels: Labels = dataclasses.field(default_factory=Labels)
    directory: str = "active_learning"
    max_rounds: int = 5


def load_config(path) -> tuple[ActiveLearningConfig, pathlib.Path]:
    """Read a configuration TOML file; returns it and the directory its relative paths start from."""
    path = pathlib.Path(path)
    return config_module.load(path, ActiveLearningConfig), path.resolve().parent


def select_frames(disagreement, threshold: float, max_frames: int) -> np.ndarray:
    """Indices of the frames to label: those above ``threshold``, at most ``max_frames`` of them,
    spread evenly over the flagged frames ranked by disagreement (so both the barely and the most
    uncertain are represented)."""
    disagreement = np.asarray(disagreement)
    flagged = np.flatnonzero(disagreement > threshold)
    if len(flagged) <= max_frames:
        return flagged
    ranked = flagged[np.argsort(disagreement[flagged])]
    return np.sort(ranked[np.unique(np.linspace(0, len(ranked) - 1, max_frames).round().astype(int))])


def _has_samples(path: pathlib.Path) -> bool:
    """Whether a labelling file holds any labelled frame (all of a round's frames may have failed)."""
    import h5py

    with h5py.File(path, "r", swmr=True) as handle:
        return "sample_id" in handle


def _save_npz(path: pathlib.Path, **arrays) -> None:
    temporary = path.with_name(path.name + ".tmp.npz")
    np.savez(temporary, **arrays)
    os.replace(temporary, path)


@dataclasses.dataclass
class _MemberJob:
    """One committee member's (re)training: fresh when ``previous`` is None, else warm-started from it."""

    settings: CommitteeSettings
    index: int
    member: int
    folder: pathlib.Path
    data: TrainingData
    previous: torch.nn.Module | None
    progress: bool


def _fresh_model(settings: CommitteeSettings, member: int):
    torch.manual_seed(settings.seed + member)
    model = potentials_module.MODELS[settings.model](
        cutoff=settings.cutoff, features=settings.features, interactions=settings.interactions
    )
    return model.to(getattr(torch, settings.dtype))


def _train_member(job: _MemberJob) -> float:
    """Train one member, save it as ``model_M.pt`` (kept if already saved); its validation force MAE."""
    settings, path = job.settings, job.folder / f"model_{job.member}.pt"
    saved = path.is_file()
    schedule = settings.weight_schedule
    if job.previous is not None and settings.retrain_weight_schedule is not None:
        schedule = settings.retrain_weight_schedule
    if saved:
        model = potentials_module.load(path)
    else:
        model = _fresh_model(settings, job.member) if job.previous is None else copy.deepcopy(job.previous)
    trainer = Trainer(
        model,
        job.data,
        energy_weight=settings.energy_weight,
        force_weight=settings.force_weight,
        learning_rate=settings.learning_rate,
        batch_size=settings.batch_size,
        patience=settings.patience,
        ema_decay=settings.ema_decay,
        gradient_clip=settings.gradient_clip,
        weight_schedule={int(epoch): weights for epoch, weights in schedule.items()},
        checkpoint=job.folder / f"model_{job.member}.chk",
        seed=settings.seed + 101 * job.member + job.index,
        progress=job.progress,
        fit_statistics=job.previous is None and not saved,
    )
    if not saved:
        trainer.fit(settings.epochs if job.previous is None else settings.retrain_epochs)
        potentials_module.save(trainer.model, path)
    return float(trainer.evaluate()["force_mae"])


class ActiveLearning:
    """Run (or resume) an active-learning loop (see the module docstring).

    Args:
        config: an :class:`ActiveLearningConfig`.
        base: the directory relative paths of the configuration start from.
        progress: progress bars (labelling, training, exploration).

    Attributes:
        directory: the run's directory.
        committee: the latest :class:`~mindsponge.active.Committee` (after :meth:`run`).
        records: one dict per finished round (:data:`LOG_COLUMNS`).
    """

    def __init__(self, config: ActiveLearningConfig, base=".", progress: bool = True):
        self.config, self.base, self.progress = config, pathlib.Path(base), progress
        self.directory = self.base / config.directory
        self.committee: Committee | None = None
        self.records: list[dict] = []
        self._initial: pathlib.Path | None = None

    # --- data ------------------------------------------------------------------------------------
    def initial_data_path(self) -> pathlib.Path:
        """The initial HDF5 dataset (generated from the recipe into the run's directory if needed)."""
        if self._initial is None:
            self._initial = self._initial_data()
        return self._initial

    def _initial_data(self) -> pathlib.Path:
        source = self.base / self.config.initial
        if source.suffix != ".toml":
            return source
        output = self.directory / "initial.h5"
        summary = datasets.generate(
            datasets.load_recipe(source),
            output=output,
            workers=self.config.labels.workers,
            progress=self.progress,
        )
        if summary.exit_status == 3:
            raise SimulationError(f"initial data {str(source)!r}: some samples could not run: {summary}")
        return output

    def round_directory(self, index: int) -> pathlib.Path:
        """``directory/round_NNN``."""
        return self.directory / f"round_{index:03d}"

    def training_data(self, rounds: int) -> TrainingData:
        """The initial data and the labels of rounds ``1..rounds``."""
        paths = [self.initial_data_path()]
        for index in range(1, rounds + 1):
            path = self.round_directory(index) / "labels.h5"
            if path.is_file() and _has_samples(path):
                paths.append(path)
            elif (record := self._finished(index)) is not None and record["added_frames"]:
                warnings.warn(
                    f"{path} is missing: the {record['added_frames']} frames round {index} labelled are "
                    "not in the training data",
                    stacklevel=2,
                )
        return TrainingData.from_hdf5(paths)

    # --- training --------------------------------------------------------------------------------
    def train(self, index: int, data: TrainingData, previous: Committee | None) -> tuple[Committee, float]:
        """Train (round 0) or retrain from ``previous`` (warm start) the committee of round ``index``.

        The members train one after the other, or side by side in ``[committee] workers`` processes.
        A member whose ``model_M.pt`` is already saved is not trained again; one that was interrupted
        resumes from its ``model_M.chk``.

        Returns:
            the committee and the mean validation force MAE of its models (kJ/mol/nm).
        """
        settings, folder = self.config.committee, self.round_directory(index)
        folder.mkdir(parents=True, exist_ok=True)
        jobs = [
            _MemberJob(
                settings,
                index,
                member,
                folder,
                data,
                None if previous is None else previous.models[member],
                self.progress and not settings.workers,
            )
            for member in range(settings.size)
        ]
        errors = {}
        threads = 1 if settings.workers else None
        for job, result in run_jobs(_train_member, jobs, workers=settings.workers, threads=threads):
            if isinstance(result, JobFailure):
                raise SimulationError(
                    f"round {index}: committee member {job.member} failed to train: {result}"
                )
            errors[job.member] = result
        committee = self.load_committee(index)
        return committee, float(np.mean([errors[member] for member in range(settings.size)]))

    def load_committee(self, index: int) -> Committee:
        """The saved committee of round ``index``."""
        folder = self.round_directory(index)
        return Committee(
            [
                potentials_module.load(folder / f"model_{member}.pt")
                for member in range(self.config.committee.size)
            ]
        )

    # --- one round -------------------------------------------------------------------------------
    def _explored(self, index: int, committee: Committee, data: TrainingData) -> dict[str, np.ndarray]:
        """The round's exploration (run once, then read from ``exploration.npz``)."""
        path = self.round_directory(index) / "exploration.npz"
        if path.is_file():
            with np.load(path) as content:
                return dict(content)
        numbers = data.atomic_numbers[: int(data.n_atoms[0])]
        positions = data.positions.reshape(len(data), -1, 3).numpy()
        result = explore(
            committee,
            numbers,
            positions,
            self.config.exploration,
            self.config.selection.threshold,
            seed=1000 * self.config.committee.seed + index,
            progress=self.progress,
        )
        result["atomic_numbers"] = numbers.numpy()
        path.parent.mkdir(parents=True, exist_ok=True)
        _save_npz(path, **result)
        return result

    def supply_exploration(self, index: int, positions, atomic_numbers) -> dict[str, np.ndarray]:
        """Frames from outside the loop (a production run, a probe built by hand) as round ``index``'s
        exploration, in place of the exploration MD: the next :meth:`run` that reaches the round
        labels those the committee of round ``index - 1`` disagrees on and retrains.

        Args:
            index: a round not yet explored (``1..``); the rounds before it must have finished.
            positions: ``(F, N, 3)`` nm.
            atomic_numbers: ``(N,)``.

        Returns:
            the stored exploration: ``positions``, ``disagreement`` (F,) kJ/mol/nm under the committee
            of round ``index - 1``, ``trajectory`` (F,) all -1 (supplied), ``stopped`` (0,).
        """
        path = self.round_directory(index) / "exploration.npz"
        if index < 1 or path.is_file() or self._finished(index) is not None:
            raise ConfigurationError(
                f"round {index} of {self.directory} is explored already or is not a round (1 or later)"
            )
        previous = [self._finished(before) for before in range(index)]
        if any(record is None or record["converged"] for record in previous):
            raise ConfigurationError(
                f"round {index}: the rounds before it in {self.directory} have not all finished unconverged"
            )
        positions = torch.as_tensor(np.asarray(positions, dtype=np.float64))
        if positions.ndim != 3 or positions.shape[1:] != (len(atomic_numbers), 3):
            raise ConfigurationError(
                f"supplied positions have shape {tuple(positions.shape)}; "
                f"expected (frames, {len(atomic_numbers)}, 3)"
            )
        checks.finite(positions, "supplied positions", "frame")
        committee = self.load_committee(index - 1)
        result = {
            "positions": positions.numpy(),
            "disagreement": committee.force_disagreement(positions, atomic_numbers).numpy(),
            "trajectory": np.full(len(positions), -1),
            "stopped": np.zeros(0, dtype=bool),
            "atomic_numbers": np.asarray(atomic_numbers),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        _save_npz(path, **result)
        return result

    def _record(self, index: int, data: TrainingData, **values) -> dict:
        record = {
            "round": index,
            "training_frames": len(data),
            "explored_frames": 0,
            "flagged_frames": 0,
            "added_frames": 0,
            "failed_labels": 0,
            "stopped_trajectories": 0,
            "max_disagreement": float("nan"),
            "mean_disagreement": float("nan"),
            "validation_force_mae": float("nan"),
            "converged": False,
            **values,
        }
        (self.round_directory(index) / "record.json").write_text(json.dumps(record, indent=1))
        return record

    def _round(self, index: int, previous: Committee) -> tuple[dict, Committee]:
        """Explore with ``previous``, label the flagged frames, retrain: the round's record and committee."""
        data = self.training_data(index - 1)
        explored = self._explored(index, previous, data)
        disagreement = explored["disagreement"]
        chosen = select_frames(
            disagreement, self.config.selection.threshold, self.config.selection.max_frames
        )
        summary = {
            "explored_frames": len(disagreement),
            "flagged_frames": int(np.sum(disagreement > self.config.selection.threshold)),
            "stopped_trajectories": int(np.sum(explored["stopped"])),
            "max_disagreement": float(disagreement.max()),
            "mean_disagreement": float(disagreement.mean()),
        }
        if len(chosen) == 0 and summary["stopped_trajectories"] == 0:
            return self._record(index, data, converged=True, **summary), previous
        folder = self.round_directory(index)
        candidates = folder / "candidates.npz"
        if not candidates.is_file():
            write_frames(candidates, explored["positions"][chosen], explored["atomic_numbers"])
        with np.load(candidates) as content:
            count = len(content["positions"])
        result = label_frames(
            candidates,
            count,
            folder / "labels.h5",
            self.config.labels.method,
            self.config.labels.charge,
            workers=self.config.labels.workers,
            progress=self.progress,
        )
        data = self.training_data(index)
        committee, error = self.train(index, data, previous)
        return self._record(
            index,
            data,
            added_frames=count - len(result.unresolved),
            failed_labels=len(result.unresolved),
            validation_force_mae=error,
            **summary,
        ), committee

    def _finished(self, index: int) -> dict | None:
        path = self.round_directory(index) / "record.json"
        return json.loads(path.read_text()) if path.is_file() else None

    # --- the loop --------------------------------------------------------------------------------
    def run(self, max_rounds: int | None = None) -> list[dict]:
        """Run (or resume) the loop; returns the records of all rounds (also in ``rounds.csv``).

        Resuming needs every finished round's ``record.json`` and ``labels.h5`` and the models of the
        last round that retrained (earlier rounds' models and explorations may be gone).
        """
        max_rounds = self.config.max_rounds if max_rounds is None else max_rounds
        self.directory.mkdir(parents=True, exist_ok=True)
        self.records = []
        committee, latest = None, 0  # the current committee (loaded when needed) and its round
        record = self._finished(0)
        if record is None:
            data = self.training_data(0)
            committee, error = self.train(0, data, None)
            record = self._record(0, data, validation_force_mae=error)
        self._append(record)
        for index in range(1, max_rounds + 1):
            record = self._finished(index)
            if record is None:
                if committee is None:
                    committee = self.load_committee(latest)
                record, committee = self._round(index, committee)
            elif not record["converged"]:
                committee = None
            if not record["converged"]:
                latest = index
            self._append(record)
            if record["converged"]:
                break
        self.committee = self.load_committee(latest) if committee is None else committee
        return self.records

    def _append(self, record: dict) -> None:
        self.records.append(record)
        with open(self.directory / "rounds.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=LOG_COLUMNS)
            writer.writeheader()
            writer.writerows(self.records)

    def exploration(self, index: int) -> dict[str, np.ndarray]:
        """The stored exploration of round ``index`` (``positions``, ``disagreement``, ``trajectory``...)."""
        with np.load(self.round_directory(index) / "exploration.npz") as content:
            return dict(content)
