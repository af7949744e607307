"""Quasi-TEM transmission lines: the electrostatic capacitance of a cross-section with conductors.

A line whose conductors are surrounded by a (possibly layered) dielectric carries, at low frequency,
a quasi-TEM mode: its transverse field is that of the electrostatic potential ``phi`` between the
conductors, with ``div(eps grad phi) = 0`` in the dielectric, ``phi = 1 V`` on the signal conductor
and 0 on the ground (the PEC walls of the domain and the metal joined to them) and on any other
conductor. With the capacitance per length ``C`` (F/m) of that problem and ``C0`` of the same
conductors in vacuum (Wheeler; Pozar, Microwave Engineering, 4th ed., sec. 3.8 and 3.12)::

    eps_eff = C / C0,   Z0 = 1 / (c sqrt(C C0)),   n_eff = sqrt(eps_eff)

exact for a homogeneous dielectric (a true TEM line: coax, stripline) and the zero-frequency limit of a
layered one (microstrip, coplanar waveguide; :mod:`mindelec.lines` has the dispersion of microstrip).

Discretisation: the grid of :mod:`mindelec.modes` (``phi`` on the integer nodes, where E_x lives; the
field ``-grad phi`` on the E_y and E_z edges, each with its own permittivity), metal as in
:mod:`mindelec.conductors` (PEC only: a finite conductivity is ignored here). ``C`` is the field energy
``eps0 sum eps |grad phi|^2 dA`` of the finite-difference solution (scipy.sparse), which converges from
above at second order away from sharp metal edges and at first order near them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sparse
import scipy.sparse.linalg
import torch

from common.units import SPEED_OF_LIGHT, VACUUM_PERMITTIVITY

from . import conductors as metal
from .modes import _cell_sizes, _component_permittivities, _permittivity_array

__all__ = ["QuasiTEM", "quasi_tem_line"]


@dataclass(frozen=True)
class QuasiTEM:
    """The electrostatic solution of a line's cross-section (module docstring).

    Attributes:
        capacitance: ``C``, F/m, with the dielectric.
        vacuum_capacitance: ``C0``, F/m, the same conductors in vacuum.
        potential: (n1, n2) float64 tensor, ``phi`` (V) on the integer nodes with the signal at 1 V.
        cell_size: ``(d1, d2)`` in m.
        signal: the signal conductor's label (:func:`mindelec.conductors.conductor_labels`).
    """

    capacitance: float
    vacuum_capacitance: float
    potential: torch.Tensor
    cell_size: tuple
    signal: int

    @property
    def effective_permittivity(self) -> float:
        """``eps_eff = C / C0``."""
        return self.capacitance / self.vacuum_capacitance

    @property
    def effective_index(self) -> float:
        """``n_eff = sqrt(eps_eff)``."""
        return math.sqrt(self.effective_permittivity)

    @property
    def impedance(self) -> float:
        """``Z0 = 1 / (c sqrt(C C0))``, ohm."""
        return 1.0 / (SPEED_OF_LIGHT * math.sqrt(self.capacitance * self.vacuum_capacitance))


def _laplacian(eps_1, eps_2, cell_sizes):
    """``L`` with ``phi^T L phi = sum eps |grad phi|^2 dA`` over the (n1 + 1, n2 + 1) nodes (walls
    included), from the permittivities (n1, n2) of the E edges along axis 1 and axis 2."""
    n1, n2 = eps_1.shape
    d1, d2 = cell_sizes

    def difference(count):
        return sparse.diags([-np.ones(count - 1), np.ones(count - 1)], [0, 1], shape=(count - 1, count))

    along_1 = sparse.kron(difference(n1 + 1), sparse.identity(n2 + 1))
    along_2 = sparse.kron(sparse.identity(n1 + 1), difference(n2 + 1))
    # edges on the far walls join two grounded nodes: their weight does not matter
    weights_1 = np.pad(eps_1, ((0, 0), (0, 1)), mode="edge").reshape(-1) * (d2 / d1)
    weights_2 = np.pad(eps_2, ((0, 1), (0, 0)), mode="edge").reshape(-1) * (d1 / d2)
    laplacian = along_1.T @ sparse.diags(weights_1) @ along_1 + along_2.T @ sparse.diags(weights_2) @ along_2
    return laplacian.tocsr()


def _potential(laplacian, labels, signal):
    """``phi`` on the nodes: 1 V on the signal conductor, 0 on the other metal, solved elsewhere."""
    fixed = labels.reshape(-1) >= 0
    phi = (labels.reshape(-1) == signal).astype(np.float64)
    free = np.flatnonzero(~fixed)
    rhs = -laplacian[free][:, np.flatnonzero(fixed)] @ phi[fixed]
    phi[free] = scipy.sparse.linalg.spsolve(laplacian[free][:, free].tocsc(), rhs)
    return phi


def quasi_tem_line(permittivity, conductor, cell_size, signal=None) -> QuasiTEM:
    """Capacitance, ``eps_eff`` and ``Z0`` of a line's cross-section (module docstring).

    Args:
        permittivity: relative permittivity, (n1, n2) per cell or (3, n1, n2) per E node, as for
            :func:`mindelec.modes.cross_section_modes`; its real part is used (a quasi-TEM solve has no
            loss).
        conductor: the metal, as for :func:`mindelec.modes.cross_section_modes` (only its PEC counts);
            per E node its components are (along the line, along axis 1, along axis 2), the (E_x, E_y, E_z)
            of a line along x, and so are a per-component permittivity's.
        cell_size: one length or ``(d1, d2)``, m.
        signal: an integer node ``(i, j)`` on the signal conductor; needed only when several
            conductors are separate from the ground (the others are then held at 0 V).

    Returns:
        :class:`QuasiTEM`.

    Raises:
        ConfigurationError: bad shapes or sizes; no signal conductor (all metal touches the ground),
            several without ``signal``, or a ``signal`` node off metal or on the ground.
        DataError: a non-finite permittivity or one with a non-positive real part, a negative
            conductivity.
    """
    values = _permittivity_array(permittivity, ndim=2)
    cell_sizes = _cell_sizes(cell_size, 2)
    nodes = metal.conductor_nodes(conductor, values.shape[-2:])
    labels = metal.conductor_labels(metal.pec_mask(nodes))
    signal = metal.signal_conductor(labels, signal, "quasi_tem_line")
    _, eps_1, eps_2 = _component_permittivities(values.real)
    energies = []
    for edges in ((eps_1, eps_2), (np.ones_like(eps_1), np.ones_like(eps_2))):
        laplacian = _laplacian(*edges, cell_sizes)
        phi = _potential(laplacian, labels, signal)
        energies.append((phi, float(phi @ (laplacian @ phi))))
    (phi, energy), (_, vacuum_energy) = energies
    shape = labels.shape
    return QuasiTEM(
        capacitance=VACUUM_PERMITTIVITY * energy,
        vacuum_capacitance=VACUUM_PERMITTIVITY * vacuum_energy,
        potential=torch.from_numpy(phi.reshape(shape)[:-1, :-1].copy()),
        cell_size=cell_sizes,
        signal=signal,
    )
