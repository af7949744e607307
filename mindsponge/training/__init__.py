"""Training of learned potentials on reference energies and forces.

- :mod:`~mindsponge.training.data`: :class:`TrainingData` (HDF5 datasets, groups), the
  train/validation/test splits (:func:`make_split`, :func:`store_split`, :func:`read_split`);
- :mod:`~mindsponge.training.trainer`: :class:`Trainer` (energy + force loss, per-element
  references, loss-weight schedule, moving average of the weights, gradient clipping,
  reduce-on-plateau schedule, float64, resumable checkpoints, data parallel under ``torchrun``);
- :mod:`~mindsponge.training.cli`: ``python -m mindsponge.train DATA.h5 ...``.

``mindsponge.train`` (the module this package grew from) re-exports the same names.
"""

from mindsponge.training.cli import main
from mindsponge.training.data import (
    SPLIT_NAMES,
    DatasetError,
    TrainingData,
    make_split,
    read_split,
    store_split,
)
from mindsponge.training.trainer import Trainer

__all__ = ["TrainingData", "Trainer", "DatasetError", "main", "make_split", "store_split", "read_split",
           "SPLIT_NAMES"]
