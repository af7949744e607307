"""Active learning of learned potentials: committee uncertainty, exploration MD, GFN-xTB labels.

- :class:`Committee`: ``k`` models; the mean is the potential, the largest per-atom RMS force
  deviation the uncertainty (:mod:`~mindsponge.active.committee`);
- :class:`UncertaintyReporter`: the committee's uncertainty along any run, a warning
  (:class:`OutOfDistributionWarning`) when it leaves the training data, the flagged frames saved for
  labelling (:mod:`~mindsponge.active.uncertainty`);
- :func:`explore`: MD with the committee mean (optionally in umbrella windows) recording the
  uncertainty (:mod:`~mindsponge.active.exploration`);
- :func:`label_frames`: GFN-xTB labels of flagged frames through a resumable
  ``common.datasets`` recipe (:mod:`~mindsponge.active.labelling`);
- :class:`ActiveLearning`: the loop, resumable, with a per-round CSV log
  (:mod:`~mindsponge.active.loop`); :func:`plot_rounds` plots it.

Command line: ``python -m mindsponge.active CONFIG.toml [--max-rounds N] [--plot FILE]``.

Example::

    config, base = load_config("datasets/active/claisen_active_small.toml")
    run = ActiveLearning(config, base)
    records = run.run()              # one dict per round; also <directory>/rounds.csv
    run.committee.bind(numbers)      # the final committee as a (positions, box) -> energy potential
"""

from mindsponge.active.committee import Committee, CommitteePotential
from mindsponge.active.exploration import Exploration, Umbrella, distance_combination, explore
from mindsponge.active.labelling import frames_recipe, label_frames, write_frames, xtb_frame
from mindsponge.active.loop import (
    LOG_COLUMNS,
    ActiveLearning,
    ActiveLearningConfig,
    CommitteeSettings,
    Labels,
    Selection,
    load_config,
    select_frames,
)
from mindsponge.active.plots import plot_rounds
from mindsponge.active.uncertainty import OutOfDistributionWarning, UncertaintyReporter

__all__ = [
    "Committee",
    "CommitteePotential",
    "Exploration",
    "Umbrella",
    "UncertaintyReporter",
    "OutOfDistributionWarning",
    "explore",
    "distance_combination",
    "write_frames",
    "xtb_frame",
    "frames_recipe",
    "label_frames",
    "ActiveLearning",
    "ActiveLearningConfig",
    "CommitteeSettings",
    "Selection",
    "Labels",
    "LOG_COLUMNS",
    "load_config",
    "select_frames",
    "plot_rounds",
]
