"""One training loop for every trainer: checkpoints and resume, stored splits, one history.

:class:`TrainingLoop` runs the units of training a trainer supplies (an optimiser step, or an
epoch); :class:`History` is the record it keeps, with the same keys everywhere (``step``,
``epoch``, ``loss``, ``loss/<term>``, ``learning_rate``, ``validation_loss``), written as CSV next
to the checkpoint and optionally to a CSV log or TensorBoard. ``common.pde.Trainer``,
``mindsponge.train.Trainer`` and ``mindelec.surrogate.fit`` are built on it.
"""

from common.training.history import RENAMED_KEYS, History
from common.training.logs import CsvLog, TensorBoardLog
from common.training.loop import CHECKPOINT_FORMAT, TrainingLoop, history_path

__all__ = ["TrainingLoop", "History", "RENAMED_KEYS", "CsvLog", "TensorBoardLog", "CHECKPOINT_FORMAT",
           "history_path"]
