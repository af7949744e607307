"""Plots of a free-energy estimate (matplotlib): the overlap matrix, forward/reverse convergence, and the
free-energy change of every step along the schedule.

Each function draws into ``ax`` (a matplotlib ``Axes``) when given one, else into a new ``Figure``
(made without pyplot, so nothing is shown or kept open), and returns the ``Axes``. Energies are
shown in ``unit``: ``"kT"``, ``"kJ/mol"`` or ``"kcal/mol"``.

Example::

    from mindsponge import free_energy_plots as plots
    ax = plots.overlap_matrix(result)            # result: mindsponge.free_energy_analysis.FreeEnergyEstimate
    ax.figure.savefig("overlap.png")
"""

from __future__ import annotations

import numpy as np

from common.errors import ConfigurationError
from common.units import BOLTZMANN_MD

__all__ = ["convergence", "lambda_steps", "overlap_matrix"]

UNITS = {"kT": 1.0, "kJ/mol": None, "kcal/mol": None}


def _scale(unit: str, temperature: float) -> float:
    if unit not in UNITS:
        raise ConfigurationError(f"unit must be one of {list(UNITS)}, got {unit!r}")
    kT = BOLTZMANN_MD * temperature  # noqa: N806
    return {"kT": 1.0, "kJ/mol": kT, "kcal/mol": kT / 4.184}[unit]


def _axes(ax, size=(5.0, 4.0)):
    if ax is not None:
        return ax
    from matplotlib.figure import Figure

    return Figure(figsize=size, layout="constrained").add_subplot()


def overlap_matrix(result, ax=None, annotate: bool | None = None):
    """A heat map of MBAR's ``(K, K)`` overlap matrix (``result.overlap``), values written in the cells
    for up to 16 states (``annotate``)."""
    ax = _axes(ax)
    overlap = np.asarray(result.overlap)
    count = len(overlap)
    image = ax.imshow(overlap, cmap="Blues", vmin=0.0, vmax=max(float(overlap.max()), 1e-12))
    ax.figure.colorbar(image, ax=ax, label="overlap")
    if annotate if annotate is not None else count <= 16:
        for row in range(count):
            for column in range(count):
                value = overlap[row, column]
                if value >= 0.005:
                    ax.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if value > 0.5 * overlap.max() else "black")
    ax.set_xlabel("state")
    ax.set_ylabel("state")
    if count > 1:
        ax.set_title(f"overlap (lowest neighbour {result.neighbor_overlap().min():.3f})")
    return ax


def convergence(result, temperature: float, ax=None, unit: str = "kT", label: str = ""):
    """Forward and reverse estimates (:class:`~mindsponge.free_energy_analysis.ConvergenceResult`) against
    the fraction of the samples, with one-sigma bands; they should meet well before 100 %."""
    ax = _axes(ax)
    scale = _scale(unit, temperature)
    percent = 100.0 * np.asarray(result.fractions)
    for name, values, errors in (("forward", result.forward, result.forward_error),
                                 ("reverse", result.reverse, result.reverse_error)):
        values, errors = np.asarray(values) * scale, np.asarray(errors) * scale
        line, = ax.plot(percent, values, marker="o", label=f"{label} {name}".strip())
        ax.fill_between(percent, values - errors, values + errors, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("samples used (%)")
    ax.set_ylabel(f"free energy ({unit})")
    ax.legend()
    return ax


def lambda_steps(result, ax=None, unit: str = "kT", states=None):
    """The free-energy change of every step ``k -> k + 1`` (MBAR and BAR, with error bars); ``states``
    (the state dicts) label the steps."""
    ax = _axes(ax)
    scale = _scale(unit, result.temperature)
    count = len(result.delta_f)
    steps = np.arange(count - 1)
    mbar = np.array([result.delta_f[k, k + 1] for k in steps]) * scale
    mbar_error = np.array([result.d_delta_f[k, k + 1] for k in steps]) * scale
    ax.errorbar(steps - 0.1, mbar, yerr=mbar_error, fmt="o", label="MBAR")
    ax.errorbar(steps + 0.1, np.asarray(result.bar_steps) * scale,
                yerr=np.asarray(result.d_bar_steps) * scale, fmt="s", label="BAR")
    ax.axhline(0.0, color="grey", linewidth=0.5)
    if states is not None and len(states) == count:
        ax.set_xticks(steps, [_step_label(states[k], states[k + 1]) for k in steps], rotation=60, fontsize=7)
    ax.set_xlabel("step")
    ax.set_ylabel(f"free energy change ({unit})")
    ax.legend()
    return ax


def _step_label(first: dict, second: dict) -> str:
    changed = [name for name in sorted(second) if first.get(name) != second.get(name)]
    short = {"lambda_electrostatics": "elec", "lambda_sterics": "vdw"}
    return " ".join(f"{short.get(name, name)} {first.get(name, 0):.2g}>{second[name]:.2g}"
                    for name in changed)
