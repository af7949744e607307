"""Labelling flagged frames with GFN-xTB through a ``common.datasets`` recipe (resumable).

The frames of a round are written once to an ``.npz`` file (:func:`write_frames`). A recipe
with one grid parameter ``frame`` (``0 .. F-1``) and the generator :func:`xtb_frame` labels
them: ``common.datasets.generate`` appends every finished frame to an HDF5 file, so a killed
labelling, started again, only labels the frames not yet in the file.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib

import numpy as np
import torch

from common import datasets
from common.errors import ConfigurationError, DataError, SimulationError

__all__ = ["write_frames", "xtb_frame", "frames_recipe", "label_frames"]


def write_frames(path, positions, atomic_numbers, **columns) -> pathlib.Path:
    """Write frames ``(F, N, 3)`` nm and atomic numbers ``(N,)`` to ``path`` (.npz) atomically, with any
    per-frame ``columns`` (arrays ``(F, ...)``, e.g. ``steps``)."""
    path = pathlib.Path(path)
    temporary = path.with_name(path.name + ".tmp.npz")
    np.savez(
        temporary,
        positions=np.asarray(positions, dtype=np.float64),
        atomic_numbers=np.asarray(atomic_numbers, dtype=np.int64),
        **{name: np.asarray(values) for name, values in columns.items()},
    )
    os.replace(temporary, path)
    return path


@functools.lru_cache(maxsize=4)
def _frames(path: str, stamp: float) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as content:
        return content["positions"], content["atomic_numbers"]


def xtb_frame(
    params: dict, seed: int, frames: str = "", method: str = "GFN2-xTB", charge: float = 0.0
) -> dict[str, np.ndarray]:
    """Generator: the GFN-xTB energy and forces of frame ``params["frame"]`` of the ``frames`` file.

    Args:
        params: ``{"frame": index}``.
        seed: unused (labels are deterministic).
        frames: the ``.npz`` file of :func:`write_frames`.
        method: ``"GFN2-xTB"`` or ``"GFN1-xTB"``.
        charge: total charge, e.

    Returns:
        ``positions`` (N, 3) nm, ``atomic_numbers`` (N,), ``energy`` () kJ/mol, ``forces`` (N, 3)
        kJ/mol/nm.

    Raises:
        DataError: a missing frames file or a frame index outside it.
    """
    from mindsponge.labels import XTB, label

    path = pathlib.Path(frames)
    if not path.is_file():
        raise DataError(f"xtb_frame: frames file {frames!r} does not exist")
    positions, numbers = _frames(str(path.resolve()), path.stat().st_mtime)
    index = int(params["frame"])
    if not 0 <= index < len(positions):
        raise DataError(f"xtb_frame: frame {index} is outside {frames!r} ({len(positions)} frames)")
    result = label(
        XTB(torch.as_tensor(numbers), method=method, charge=charge), torch.as_tensor(positions[index])
    )
    return {
        "positions": positions[index],
        "atomic_numbers": numbers,
        "energy": np.asarray(result["energy"]),
        "forces": result["forces"],
    }


def frames_recipe(
    frames,
    count: int,
    output,
    method: str = "GFN2-xTB",
    charge: float = 0.0,
    name: str = "active_learning_labels",
) -> datasets.Recipe:
    """The recipe labelling ``count`` frames of the ``frames`` file into the HDF5 file ``output``."""
    if count < 1:
        raise ConfigurationError(f"frames_recipe: needs at least one frame, got {count}")
    options = {"frames": str(pathlib.Path(frames).resolve()), "method": method, "charge": float(charge)}
    text = "\n".join(
        [
            f"name = {json.dumps(name)}",
            'description = "frames flagged by the committee, labelled with GFN-xTB energies and forces"',
            "[generator]",
            'function = "mindsponge.active.labelling:xtb_frame"',
            "options = { "
            + ", ".join(f"{key} = {json.dumps(value)}" for key, value in options.items())
            + " }",
            'labels = ["positions", "atomic_numbers", "energy", "forces"]',
            "[parameters]",
            f"frame = {{ values = {json.dumps(list(range(count)))} }}",
            "[sampling]",
            'method = "grid"',
            "[output]",
            f"path = {json.dumps(str(output))}",
        ]
    )
    return datasets.loads_recipe(text + "\n", filename=f"<{name}>")


def label_frames(
    frames,
    count: int,
    output,
    method: str = "GFN2-xTB",
    charge: float = 0.0,
    workers: int = 0,
    progress: bool = True,
) -> datasets.GenerationSummary:
    """Label (or finish labelling) ``count`` frames of ``frames`` into ``output`` (see the module docstring).

    Frames whose SCF fails are recorded in the file's ``failed`` table (``summary.unresolved``)
    and left out of the training data.

    Raises:
        RuntimeError: some frames could not run because of their worker (rerun to label them).
    """
    recipe = frames_recipe(frames, count, output, method, charge)
    summary = datasets.generate(recipe, workers=workers, progress=progress)
    if summary.exit_status == 3:
        raise SimulationError(
            f"labelling the frames of {str(frames)!r} into {str(output)!r} did not finish: {summary}"
        )
    return summary
