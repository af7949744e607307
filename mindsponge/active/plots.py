"""Plots of an active-learning run: the committee's uncertainty along each round's exploration."""

from __future__ import annotations

import numpy as np

__all__ = ["plot_rounds"]


def plot_rounds(records, disagreements, threshold: float, path=None):
    """Two panels: the largest and mean force disagreement per round (with the threshold), and the
    distribution of the disagreement along every round's exploration.

    Args:
        records: the round records of :meth:`ActiveLearning.run`.
        disagreements: ``{round: (F,) disagreement}`` kJ/mol/nm of the explored rounds.
        threshold: kJ/mol/nm.
        path: optional image file to save.

    Returns:
        the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    explored = [record for record in records if record["explored_frames"]]
    rounds = [record["round"] for record in explored]
    left.semilogy(rounds, [record["max_disagreement"] for record in explored], "o-", label="largest")
    left.semilogy(rounds, [record["mean_disagreement"] for record in explored], "s-", label="mean")
    left.axhline(threshold, color="k", linestyle="--", label="threshold")
    left.set_xlabel("round")
    left.set_ylabel("force disagreement (kJ/mol/nm)")
    left.legend()
    for index, values in sorted(disagreements.items()):
        values = np.asarray(values)
        bins = np.geomspace(max(values.min(), 1e-3), max(values.max(), 2e-3), 30)
        right.hist(values, bins=bins, histtype="step", label=f"round {index}")
    right.axvline(threshold, color="k", linestyle="--")
    right.set_xscale("log")
    right.set_xlabel("force disagreement along the exploration (kJ/mol/nm)")
    right.set_ylabel("frames")
    if disagreements:
        right.legend()
    figure.tight_layout()
    if path is not None:
        figure.savefig(path, dpi=80)
    return figure
