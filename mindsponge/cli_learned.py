"""Learned potentials in ``mindsponge run`` (:mod:`mindsponge.cli`): production MD with a model or a
committee, the committee's uncertainty along the run, and ``--active``: label what the run flagged and
retrain.

A molecule (``[system] molecule``) runs on a learned potential (``[potential]``) instead of a force
field::

    [system]
    molecule = "smiles:OCCF"            # or a structure file (.xyz, .pdb, .extxyz, ...)

    [potential]
    models = ["model_0.pt", "model_1.pt", "model_2.pt"]   # saved by ms.potentials.save / the train
                                        #   command; two or more: a committee (its mean is the potential)
    threshold = 40.0                    # kJ/mol/nm: the committee's force disagreement above which the
                                        #   run warns (naming the step) and keeps the frame
    uncertainty_every = 10              # steps between uncertainty records

    [active]                            # what --active does after the run
    data = "labels.h5"                  # the committee's training data (any file TrainingData reads)
    method = "GFN2-xTB"                 # the reference that labels the flagged frames
    max_frames = 20                     # frames labelled at most (spread over the flagged ones)
    epochs = 40                         # retraining epochs of each model, from its weights

With a committee the run writes ``uncertainty.csv`` (step, disagreement in kJ/mol/nm) and, with a
``threshold``, ``flagged.npz`` (the frames above it, written as they are flagged, so a killed run keeps
them; ``--resume`` reads both back). ``mindsponge run CONFIG --active`` then labels up to ``max_frames``
of the flagged frames with GFN-xTB (``active/labels.h5``, resumable: a killed labelling, restarted, labels
only the frames not yet done), retrains every model on ``data`` plus the new labels, saves the new
committee as ``active/model_<i>.pt`` and writes ``active/summary.json``: the committee's disagreement on
the labelled frames before and after, and its force error against the new labels. Point ``models`` at the
new files to run the next round.
"""

from __future__ import annotations

import copy
import json
import pathlib
from dataclasses import dataclass
from typing import Literal

import numpy as np

from common import checks
from common import config as config_module
from common.errors import ConfigurationError

__all__ = ["PotentialConfig", "ActiveConfig", "OUTPUT_FILES", "potential", "refuse_combinations", "retrain"]

#: the files a run with a committee writes in its output folder (``active/`` with ``--active``)
OUTPUT_FILES = ("uncertainty.csv", "flagged.npz")


@dataclass
class PotentialConfig:
    """``[potential]``: a learned potential for ``[system] molecule`` (see the module docstring).

    Attributes:
        models: the model files (relative to the configuration file); two or more make a committee.
        threshold: force disagreement (kJ/mol/nm) above which the run warns and keeps the frame; needs a
            committee.
        uncertainty_every: steps between the committee's uncertainty records.
    """

    models: list[pathlib.Path]
    threshold: float | None = None
    uncertainty_every: int = 10

    def __post_init__(self):
        if not self.models:
            raise ConfigurationError("models must name at least one model file")
        checks.positive_int(self.uncertainty_every, "uncertainty_every (steps)")
        if self.threshold is not None:
            checks.positive(self.threshold, "threshold (kJ/mol/nm)")
            if len(self.models) < 2:
                raise ConfigurationError("threshold needs a committee: give two or more models")


@dataclass
class ActiveConfig:
    """``[active]``: labelling the flagged frames and retraining, with ``--active``.

    Attributes:
        data: the committee's training data (relative to the configuration file): HDF5, extxyz, an ASE
            database or npz (:meth:`~mindsponge.training.TrainingData.from_file`).
        method: ``"GFN2-xTB"`` or ``"GFN1-xTB"``.
        charge: the molecule's total charge (e).
        max_frames: frames labelled at most, spread over the flagged ones by disagreement.
        epochs: retraining epochs of each model (warm start from its weights).
        batch_size: training batch size.
        learning_rate: Adam's learning rate.
        workers: labelling worker processes (``0``: this process).
    """

    data: pathlib.Path
    method: Literal["GFN2-xTB", "GFN1-xTB"] = "GFN2-xTB"
    charge: float = 0.0
    max_frames: int = 20
    epochs: int = 40
    batch_size: int = 16
    learning_rate: float = 1e-3
    workers: int = 0

    def __post_init__(self):
        for key in ("max_frames", "epochs", "batch_size"):
            checks.positive_int(getattr(self, key), key)
        checks.positive(self.learning_rate, "learning_rate")
        checks.non_negative_int(self.workers, "workers")


def resolve_paths(config, folder: pathlib.Path) -> None:
    """The model and data paths of ``config`` relative to the configuration's ``folder``."""
    if config.potential is not None:
        config.potential.models = [folder / path for path in config.potential.models]  # absolute paths stay
    if config.active is not None and not config.active.data.is_absolute():
        config.active.data = folder / config.active.data


def refuse_combinations(config, config_path, active: bool) -> None:
    """``[system] molecule``, ``[potential]``, ``[active]`` and ``--active`` settings that do not go together,
    named with the file, line and key."""
    molecule = config.system.molecule is not None
    if molecule and config.potential is None:
        raise config_module.key_error(config_path, ("system", "molecule"), (
            "runs on a learned potential: add a [potential] table with the model files"))
    if config.potential is not None and not molecule:
        raise config_module.key_error(config_path, ("potential",), (
            "a learned potential needs [system] molecule (a SMILES or a structure file); force fields take "
            "the other sources"))
    if config.potential is not None and config.replicas is not None:
        raise config_module.key_error(config_path, ("replicas",), (
            "replica exchange runs on force fields: remove the table to run the learned potential"))
    if config.potential is not None and config.constraints != "none":
        raise config_module.key_error(config_path, ("constraints",), (
            "a learned potential runs without constraints (the models were trained on flexible molecules): "
            "set constraints = \"none\" and a time step of about 0.5 fs"))
    if active and config.active is None:
        raise ConfigurationError(f"{config_path}: --active needs an [active] table (the training data and "
                                 "how to label and retrain)")
    if config.active is not None and (config.potential is None or config.potential.threshold is None):
        raise config_module.key_error(config_path, ("active",), (
            "labels the frames a committee flags: [potential] needs two or more models and a threshold"))


def load_committee(paths):
    """The models of ``paths`` (:func:`mindsponge.potentials.load`): one model, or a
    :class:`~mindsponge.active.Committee` of several."""
    from mindsponge import potentials
    from mindsponge.active import Committee

    models = [potentials.load(path) for path in paths]
    return models[0] if len(models) == 1 else Committee(models)


def potential(config, system, files, resume: bool):
    """``(potential, reporters)`` of ``[potential]`` for ``system``: the bound model or committee mean, and
    with a committee the :class:`~mindsponge.active.UncertaintyReporter` writing ``files``."""
    from mindsponge.active import Committee, UncertaintyReporter

    settings = config.potential
    model = load_committee(settings.models)
    numbers = system.atomic_numbers
    if not isinstance(model, Committee):
        return model.bind(numbers), []
    flagged = files["flagged.npz"] if settings.threshold is not None else None
    monitor = UncertaintyReporter(model, numbers, settings.uncertainty_every, threshold=settings.threshold,
                                  path=files["uncertainty.csv"], frames_path=flagged, append=resume)
    return model.bind(numbers), [monitor]


def retrain(config, files, output: pathlib.Path, progress: bool = True) -> dict:
    """``--active``: label the flagged frames, retrain every model, save the new committee (see the module
    docstring). Returns the summary also written to ``active/summary.json``.

    Raises:
        common.errors.DataError: no flagged frames file (the run flagged nothing) or unreadable data.
    """
    import torch

    from mindsponge import potentials
    from mindsponge.active import Committee, label_frames, select_frames, write_frames
    from mindsponge.training import Trainer, TrainingData

    settings, potential_settings = config.active, config.potential
    folder = output / "active"
    folder.mkdir(parents=True, exist_ok=True)
    flagged_path = files["flagged.npz"]
    if not flagged_path.is_file():
        summary = {"flagged_frames": 0, "labelled_frames": 0, "models": []}
        print(f"--active: the run flagged no frame above {potential_settings.threshold:g} kJ/mol/nm: nothing "
              "to label")
        (folder / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary
    with np.load(flagged_path) as content:
        positions, numbers = content["positions"], content["atomic_numbers"]
        disagreement = content["disagreement"]
    chosen = select_frames(disagreement, potential_settings.threshold, settings.max_frames)
    frames = write_frames(folder / "frames.npz", positions[chosen], numbers)
    label_frames(frames, len(chosen), folder / "labels.h5", method=settings.method, charge=settings.charge,
                 workers=settings.workers, progress=progress)
    labels = TrainingData.from_hdf5([folder / "labels.h5"])
    data = TrainingData.concatenate([TrainingData.from_file([settings.data]), labels])
    committee = load_committee(potential_settings.models)
    label_positions = labels.positions.reshape(len(labels), -1, 3)
    before = committee.force_disagreement(label_positions, torch.as_tensor(numbers))
    error_before = _force_error(committee, labels, numbers)
    models = []
    for member, model in enumerate(committee.models):
        trainer = Trainer(copy.deepcopy(model), data, learning_rate=settings.learning_rate,
                          batch_size=settings.batch_size, seed=member, progress=progress,
                          fit_statistics=False, checkpoint=folder / f"model_{member}.chk")
        trainer.fit(settings.epochs)
        path = folder / f"model_{member}.pt"
        potentials.save(trainer.model, path)
        models.append(trainer.model)
    retrained = Committee(models)
    after = retrained.force_disagreement(label_positions, torch.as_tensor(numbers))
    summary = {
        "flagged_frames": len(positions),
        "labelled_frames": len(labels),
        "disagreement_before": float(before.mean()),
        "disagreement_after": float(after.mean()),
        "force_error_before": error_before,
        "force_error_after": _force_error(retrained, labels, numbers),
        "models": [str(folder / f"model_{member}.pt") for member in range(len(models))],
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=1))
    print("--active: {labelled_frames} of {flagged_frames} flagged frames labelled with {method}; on "
          "them the committee's disagreement went from {disagreement_before:.3g} to {disagreement_after:.3g} "
          "kJ/mol/nm and its force error (MAE) from {force_error_before:.3g} to {force_error_after:.3g}; the "
          "new models are in {folder}".format(**summary, method=settings.method, folder=folder))
    return summary


def _force_error(committee, labels, numbers) -> float:
    """The committee mean's force MAE (kJ/mol/nm) on labelled frames of one molecule."""
    import torch

    _, forces = committee.predict(labels.positions.reshape(len(labels), -1, 3), torch.as_tensor(numbers))
    return float((forces.mean(0).reshape(-1, 3) - labels.forces.to(forces.dtype)).abs().mean())
