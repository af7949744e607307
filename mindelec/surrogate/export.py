"""Predicted and simulated S-parameters as Touchstone files and as a comparison plot."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mindelec.surrogate.training import db

__all__ = ["export_touchstone", "plot_comparison"]


def export_touchstone(path, frequencies, s11, s21=None, z0: float = 50.0):
    """Write a one-port (``.s1p``, S11 only) or symmetric reciprocal two-port (``.s2p``) Touchstone file.

    The two-port matrix is ``[[S11, S21], [S21, S11]]`` (a mirror-symmetric, reciprocal device such as the
    waveguide block of :mod:`mindelec.sweeps`).

    Args:
        path: the file (suffix ``.s1p`` or ``.s2p``).
        frequencies: ``(F,)`` Hz.
        s11, s21: ``(F,)`` complex (tensors or arrays).
        z0: reference impedance (ohm).

    Returns:
        The path written (via :func:`mindelec.ports.write_touchstone`, scikit-rf).
    """
    from mindelec import ports

    s11 = torch.as_tensor(np.asarray(s11 if not isinstance(s11, torch.Tensor) else s11.detach().cpu()))
    if s21 is None:
        return ports.write_touchstone(path, frequencies, s11, z0=z0)
    s21 = torch.as_tensor(np.asarray(s21 if not isinstance(s21, torch.Tensor) else s21.detach().cpu()))
    matrix = torch.stack([torch.stack([s11, s21], -1), torch.stack([s21, s11], -1)], -2)
    return ports.write_touchstone(path, frequencies, matrix, z0=z0)


def plot_comparison(
    frequencies,
    simulated,
    predicted,
    labels: Sequence[str] = ("S11", "S21"),
    axes=None,
    title: str | None = None,
):
    """Plot simulated (lines) and predicted (dashed) ``|S|`` in dB over frequency (GHz).

    Args:
        frequencies: ``(F,)`` Hz.
        simulated, predicted: ``(F, K)`` complex.
        labels: names of the K columns.
        axes: a matplotlib Axes (default: a new figure).

    Returns:
        The matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(figsize=(6, 3.5))
    gigahertz = np.asarray(torch.as_tensor(frequencies).cpu()) / 1e9
    simulated, predicted = torch.as_tensor(simulated), torch.as_tensor(predicted)
    for k, label in enumerate(labels):
        line = axes.plot(gigahertz, db(simulated[:, k]).numpy(), label=f"{label} FDTD")[0]
        axes.plot(
            gigahertz,
            db(predicted[:, k]).detach().numpy(),
            "--",
            color=line.get_color(),
            label=f"{label} surrogate",
        )
    axes.set_xlabel("frequency (GHz)")
    axes.set_ylabel("|S| (dB)")
    if title:
        axes.set_title(title)
    axes.legend(fontsize="small")
    return axes
