"""Conductors on a waveguide cross-section: the metal of transmission lines (strips, grounds, coax).

The mode solvers of :mod:`mindelec.modes` and :mod:`mindelec.quasi_tem` and the line impedance of
:mod:`mindelec.line_impedance` take the metal as a ``conductor`` array beside the permittivity, on the
same grid (the Yee nodes of the cross-section, :mod:`mindelec.modes`):

* per cell, shape ``(n1, n2)``: a boolean mask (True = perfect electric conductor) or conductivities
  (S/m, ``inf`` = PEC, 0 = none). A PEC cell zeroes the tangential E on all four of its edges and its
  four corners (the E_x nodes), so its surface lies on the cell's faces;
* per E node, shape ``(3, n1, n2)``: the same values at the (E_x, E_y, E_z) nodes, for metal that cells
  cannot describe: zero-thickness strips (the E nodes on a node line) or the FDTD's own staircase of PEC
  (:class:`mindelec.fdtd.CrossSection`), where the FDTD zeroes each E node more than half inside metal.

A finite conductivity is a lossy medium, ``eps - j sigma / (omega eps0)`` (mindelec's ``exp(j omega t)``
convention): accurate when the cells resolve the skin depth ``sqrt(2 / (omega mu0 sigma))``, which good
metals at microwave frequencies do not (model those as PEC). The domain walls are PEC and ground.

Conductors are found by connectivity: PEC nodes joined by PEC edges form one conductor
(:func:`conductor_labels`, :func:`scipy.ndimage.label` on the grid of nodes and edges); every conductor
joined to the walls is the ground (label 0), the others are numbered from 1.
"""

from __future__ import annotations

import numpy as np
import scipy.ndimage
import torch

from common.errors import ConfigurationError, DataError

__all__ = ["ConductorNodes", "conductor_nodes", "pec_mask", "conductor_labels", "signal_conductor"]


class ConductorNodes:
    """A conductor array split into its PEC nodes and the conductivity of the rest.

    Attributes:
        pec: (3, n1, n2) bool numpy array, True at the (E_x, E_y, E_z) nodes (E_x being the component
            along the propagation axis) pinned to zero, or a (n1, n2) per-cell mask to be spread onto the
            nodes (:func:`pec_nodes`).
        conductivity: float numpy array of the input's shape (S/m), zero where PEC.
    """

    def __init__(self, pec: np.ndarray, conductivity: np.ndarray):
        self.pec, self.conductivity = pec, conductivity

    @property
    def per_cell(self) -> bool:
        """Whether the PEC mask is per cell ``(n1, n2)`` rather than per E node ``(3, n1, n2)``."""
        return self.pec.ndim == 2


def pec_mask(nodes: ConductorNodes) -> np.ndarray:
    """(3, n1, n2) bool: the E nodes ``nodes`` pins, a per-cell mask spread by :func:`pec_nodes`."""
    return pec_nodes(nodes.pec) if nodes.per_cell else nodes.pec


def conductor_nodes(conductor, shape) -> ConductorNodes:
    """Check ``conductor`` (module docstring) against the cross-section's ``shape`` ``(n1, n2)``.

    Raises:
        ConfigurationError: not an array, or a shape other than ``shape`` or ``(3, *shape)``.
        DataError: a negative or NaN conductivity.
    """
    expected = f"{tuple(shape)} per cell or {(3, *shape)} per E node"
    if isinstance(conductor, torch.Tensor):
        conductor = conductor.detach().cpu().numpy()
    if not isinstance(conductor, np.ndarray):
        raise ConfigurationError(
            f"conductor must be a boolean mask or conductivities (S/m), a tensor or numpy array of shape "
            f"{expected}, got {type(conductor).__name__}"
        )
    if conductor.shape not in (tuple(shape), (3, *shape)):
        raise ConfigurationError(f"conductor must have shape {expected}, got {conductor.shape}")
    values = conductor.astype(np.float64) if conductor.dtype != bool else np.where(conductor, np.inf, 0.0)
    if np.isnan(values).any() or (values < 0).any():
        cell = tuple(int(i) for i in np.argwhere(np.isnan(values) | (values < 0))[0])
        raise DataError(
            f"conductor must hold conductivities >= 0 (S/m) or inf (PEC), got {values[cell]} at {cell}"
        )
    pec = np.isinf(values)
    return ConductorNodes(pec, np.where(pec, 0.0, values))


def pec_nodes(cells: np.ndarray) -> np.ndarray:
    """(3, n1, n2) bool: the E nodes a per-cell PEC mask ``(n1, n2)`` pins to zero, every edge and corner
    of a PEC cell (cell ``(i, j)`` spans integer nodes ``i..i+1`` and ``j..j+1``; nodes past the grid's
    last one are the far walls)."""
    below_1 = np.concatenate([np.zeros_like(cells[:1]), cells[:-1]], axis=0)
    below_2 = np.concatenate([np.zeros_like(cells[:, :1]), cells[:, :-1]], axis=1)
    below_both = np.concatenate([np.zeros_like(below_2[:1]), below_2[:-1]], axis=0)
    return np.stack([cells | below_1 | below_2 | below_both, cells | below_2, cells | below_1])


def node_mask(pec: np.ndarray) -> np.ndarray:
    """(n1 + 1, n2 + 1) bool: the integer nodes on metal, the walls (first and last rows and columns)
    included; a node is on metal when its E_x is pinned or one of its E edges is (the ends of a PEC edge
    are metal)."""
    nodes = np.ones((pec.shape[1] + 1, pec.shape[2] + 1), dtype=bool)
    inner = pec[0].copy()
    inner |= pec[1]  # an edge (i + 1/2, j) ends on nodes i and i + 1
    inner[1:] |= pec[1][:-1]
    inner |= pec[2]
    inner[:, 1:] |= pec[2][:, :-1]
    nodes[1:-1, 1:-1] = inner[1:, 1:]
    return nodes


def conductor_labels(pec: np.ndarray) -> np.ndarray:
    """(n1 + 1, n2 + 1) int array: per integer node (walls included), -1 off metal, 0 on the ground (every
    conductor joined to the walls), ``k >= 1`` on the k-th other conductor (in the order of
    :func:`scipy.ndimage.label`, i.e. of their first node in row-major order).

    Two metal nodes belong to one conductor when a chain of PEC edges joins them: nodes one cell apart
    across a gap stay separate. ``pec`` is the (3, n1, n2) node mask.
    """
    nodes = node_mask(pec)
    n1, n2 = nodes.shape
    fine = np.zeros((2 * n1 - 1, 2 * n2 - 1), dtype=bool)  # even, even: nodes; odd rows/columns: edges
    fine[::2, ::2] = nodes
    edges_1 = np.ones((n1 - 1, n2), dtype=bool)  # edge (i + 1/2, j), walls' edges on metal
    edges_1[:, 1:-1] = pec[1][:, 1:]
    edges_2 = np.ones((n1, n2 - 1), dtype=bool)
    edges_2[1:-1, :] = pec[2][1:, :]
    fine[1::2, ::2] = edges_1 & nodes[:-1] & nodes[1:]
    fine[::2, 1::2] = edges_2 & nodes[:, :-1] & nodes[:, 1:]
    labels, _ = scipy.ndimage.label(fine)
    labels = labels[::2, ::2]
    wall = labels[0, 0]
    ordered = np.full(labels.shape, -1)
    ordered[labels == wall] = 0
    others = [label for label in dict.fromkeys(labels.reshape(-1).tolist()) if label not in (0, wall)]
    for number, label in enumerate(others, start=1):
        ordered[labels == label] = number
    return ordered


def signal_conductor(labels: np.ndarray, signal=None, owner="line") -> int:
    """The label of the signal conductor: the only one not joined to the ground, or the one holding
    the integer node ``signal = (i, j)``.

    Raises:
        ConfigurationError: naming ``owner``: no conductor apart from the ground (the signal conductor
            touches the ground or there is none), several with no ``signal`` given, or a ``signal`` node
            off metal or on the ground.
    """
    count = int(labels.max())
    if signal is None:
        if count == 0:
            raise ConfigurationError(
                f"{owner}: no signal conductor: every conductor touches the ground (the PEC walls and the "
                "metal joined to them); a signal conductor must be separated from the ground by dielectric"
            )
        if count > 1:
            raise ConfigurationError(
                f"{owner}: {count} conductors are separate from the ground; pick the signal conductor with "
                "signal=(i, j), an integer node on it (the others are held at ground potential)"
            )
        return 1
    try:
        i, j = (int(value) for value in signal)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{owner}: signal must be an integer node (i, j), got {signal!r}") from None
    if not (0 <= i < labels.shape[0] and 0 <= j < labels.shape[1]):
        raise ConfigurationError(f"{owner}: signal node {(i, j)} lies outside the {labels.shape} nodes")
    if labels[i, j] < 0:
        raise ConfigurationError(f"{owner}: signal node {(i, j)} is not on a conductor")
    if labels[i, j] == 0:
        raise ConfigurationError(
            f"{owner}: the signal conductor at node {(i, j)} touches the ground (it is joined to the PEC "
            "walls); separate it from the ground by dielectric"
        )
    return int(labels[i, j])
