"""Fit a learned potential to reference energies and forces from HDF5 datasets.

The code lives in :mod:`mindsponge.training` (data and splits, the trainer, the command line);
this module keeps its names and the command ``python -m mindsponge.train DATA.h5 ...``
(also under ``torchrun``).
"""

import sys

from mindsponge.training import DatasetError, Trainer, TrainingData, main, make_split, store_split

__all__ = ["TrainingData", "Trainer", "DatasetError", "main", "make_split", "store_split"]

if __name__ == "__main__":
    sys.exit(main())
