"""OpenMM's long-range correction of a ``CustomNonbondedForce`` (``C / V``, kJ/mol).

As ``CustomNonbondedForceImpl::calcLongRangeCorrection``: particles are grouped into classes of
equal parameters, and for each pair of classes the energy is integrated from the cutoff to
infinity (substituting ``x = r_c / r``) and, with switching, weighted by ``1 - S`` over the
switching interval, by the same iterated midpoint rule (tripling the points until the relative
change is below 1e-5), weighted by the number of interacting pairs of those classes.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mindsponge.forcefield.expressions import ExpressionError


def _class_pair_counts(groups, classes: np.ndarray, n_classes: int) -> np.ndarray:
    """Number of interacting pairs for each pair of classes ``(C, C)`` (upper triangle used)."""
    if groups is None:
        counts = np.bincount(classes, minlength=n_classes).astype(np.float64)
        pairs = np.outer(counts, counts)
        pairs[np.diag_indices(n_classes)] = counts * (counts + 1) / 2
        return pairs
    pairs = np.zeros((n_classes, n_classes))
    for in_first, in_second in groups.numpy():
        first = np.bincount(classes[in_first], minlength=n_classes).astype(np.float64)
        second = np.bincount(classes[in_second], minlength=n_classes).astype(np.float64)
        both = np.bincount(classes[in_first & in_second], minlength=n_classes).astype(np.float64)
        ordered = np.outer(first, second)
        group = ordered + ordered.T - np.outer(both, both)
        group[np.diag_indices(n_classes)] = np.diag(ordered) - both * (both + 1) / 2
        pairs += group
    return pairs

def coefficient(term) -> float:
    """The coefficient ``C`` (kJ/mol nm^3) of a :class:`~.nonbonded.CustomNonbonded` ``term``
    at its current parameters (see the module docstring)."""
    classes_table, classes = term._particle_classes()
    n_classes = len(classes_table)
    counts = _class_pair_counts(term.groups, classes.numpy(), n_classes)
    first, second = np.triu_indices(n_classes)
    weights = counts[first, second]
    values = term._particle_values(torch.float64, classes_table)
    base = term._global_values(torch.float64)
    for value_name, per_class in values.items():
        base[f"{value_name}1"] = per_class[torch.as_tensor(first)].unsqueeze(1)
        base[f"{value_name}2"] = per_class[torch.as_tensor(second)].unsqueeze(1)

    def energy(r: np.ndarray) -> np.ndarray:
        variables = dict(base)
        variables["r"] = torch.as_tensor(r, dtype=torch.float64).unsqueeze(0)
        with torch.no_grad():
            result = term.expression(variables)
        return torch.broadcast_to(result, (len(first), len(r))).numpy()

    cutoff = term.cutoff
    tail = _iterated_midpoint(
        lambda x: energy(cutoff / x) * (cutoff / x) ** 4,
        len(first),
        "does the energy go to 0 faster than 1/r^2?",
    )
    integrals = tail / cutoff
    if term.switch_distance is not None:
        start, width = term.switch_distance, cutoff - term.switch_distance
        switched = _iterated_midpoint(
            lambda x: (
                x
                * x
                * x
                * (10 + x * (-15 + x * 6))
                * energy(start + x * width)
                * (start + x * width) ** 2
            ),
            len(first),
            "is the energy finite everywhere in the switching interval?",
        )
        integrals = integrals + switched * width
    n = float(term.n_atoms)
    total = float((weights * integrals).sum()) / (n * (n + 1) / 2)
    return 2 * math.pi * n * n * total


def _iterated_midpoint(function, count: int, hint: str) -> np.ndarray:
    """Integrals over ``[0, 1]`` of ``count`` functions (``function(x) -> (count, len(x))``) by
    OpenMM's rule: midpoints of 1, 3, 9... intervals, reusing the previous points, until each
    relative change is below 1e-5 (after at least four rounds)."""
    sums = np.zeros(count)
    done = np.zeros(count, dtype=bool)
    n_points = 1
    for iteration in range(11):
        index = np.arange(n_points)
        index = index[index % 3 != 1]
        x = (index + 0.5) / n_points
        new = function(x).sum(1)
        updated = new / n_points + sums / 3
        with np.errstate(divide="ignore", invalid="ignore"):
            change = np.abs((updated - sums) / updated)
        sums = np.where(done, sums, updated)
        converged = (iteration > 2) & ((change < 1e-5) | (updated == 0))
        failing = (iteration == 10) | ((iteration > 7) & (change > 1e-3))
        if np.any(failing & ~done & ~converged):
            raise ExpressionError(f"CustomNonbonded: the long-range correction did not converge; {hint}")
        done |= converged
        if done.all():
            return sums
        n_points *= 3
    raise ExpressionError(f"CustomNonbonded: the long-range correction did not converge; {hint}")
