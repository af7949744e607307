"""Replicas: independent copies of one molecule run as one system (several trajectories for one call per
step), and replica exchange between thermodynamic states (:mod:`mindsponge.replica_exchange`, whose
``ReplicaExchange``, ``ThermodynamicState`` and ``geometric_temperatures`` are also here).

A learned potential of a small molecule costs little more for 20 copies than for one: the time of
an MD step goes to fixed overheads (Python, small tensor operations, the integrator), not to the
network's arithmetic. Umbrella windows, independent seeds or a temperature series of one molecule
in vacuum can therefore run together, as one :class:`~mindsponge.simulation.Simulation` of
``R N`` atoms in which the copies never interact:

- :func:`replicate` builds the :class:`~mindsponge.system.System` of the copies (copy ``r`` is
  atoms ``r N .. r N + N - 1``, shifted by ``r * spacing`` nm along x so that no two copies
  overlap; the shift changes nothing, since copies do not interact);
- the potential is the learned potential bound with ``replicas=R``
  (:meth:`LearnedPotential.bind <mindsponge.potentials.LearnedPotential.bind>`,
  :meth:`Committee.bind <mindsponge.active.Committee.bind>`, or ``bound.replicated(R)``): one
  network call on the graphs of all copies;
- :class:`WindowRestraints` restrains a collective variable of each copy to its own centre (one
  umbrella window per copy) and :class:`ReplicaColvarReporter` records the variable of every copy.

Example (20 umbrella windows of a learned potential at once)::

    from mindsponge.potentials import SumPotential
    from mindsponge.replicas import ReplicaColvarReporter, WindowRestraints, replicate

    system = replicate(molecule, len(centers), positions=starts)          # starts: (R, N, 3) nm
    potential = SumPotential(model.bind(molecule.atomic_numbers, replicas=len(centers)),
                             WindowRestraints(colvar, centers, force_constant))
    sim = ms.Simulation(system, potential, ms.integrators.LangevinMiddle(0.0005, 300.0, 5.0))
    recorder = ReplicaColvarReporter(colvar, len(centers), every=10)
    sim.reporters.append(recorder)
    sim.run(8000)
    recorder.values                                                       # (T, R)

The Langevin thermostat acts on every atom independently, so each copy samples its own canonical
ensemble; the centre-of-mass motion removed after each step is that of all copies together (it
does not touch internal coordinates).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError
from mindsponge.colvar import Colvar
from mindsponge.forcefield.base import EnergyTerm
from mindsponge.replica_exchange import ReplicaExchange, ThermodynamicState, geometric_temperatures
from mindsponge.reporters import Reporter

__all__ = [
    "ReplicaColvarReporter",
    "ReplicaExchange",
    "ThermodynamicState",
    "WindowRestraints",
    "geometric_temperatures",
    "replicate",
    "split",
]


def _count(count, owner: str) -> int:
    return checks.positive_int(count, f"{owner}: the number of replicas")


def replicate(system, count: int, positions=None, spacing: float = 2.0):
    """``count`` copies of a molecule in vacuum as one :class:`~mindsponge.system.System`.

    Args:
        system: the molecule (no box; it needs a topology).
        count: copies ``R``.
        positions: optional ``(R, N, 3)`` nm, the configuration of each copy (default: the
            system's, for every copy).
        spacing: nm between copies along x (they do not interact; the shift only keeps them apart).

    Returns:
        A System of ``R N`` atoms: masses, elements and velocities (if any) repeated, copy ``r``
        at atoms ``r N .. r N + N - 1``.

    Raises:
        ValueError: a periodic system, a bad count, or ``positions`` of the wrong shape.
    """
    from mindsponge.system import System

    count = _count(count, "replicate")
    if system.box is not None:
        raise ConfigurationError("replicate: copies of a molecule in vacuum only; this System has a box")
    n_atoms = system.n_atoms
    if positions is None:
        positions = system.positions.expand(count, n_atoms, 3)
    positions = torch.as_tensor(positions, dtype=system.positions.dtype, device=system.device)
    if tuple(positions.shape) != (count, n_atoms, 3):
        raise ConfigurationError(
            f"replicate: positions must be ({count}, {n_atoms}, 3) nm, got {tuple(positions.shape)}"
        )
    atoms = system.to_ase()
    combined = atoms.copy()
    for _ in range(count - 1):
        combined += atoms
    velocities = None if system.velocities is None else system.velocities.repeat(count, 1)
    shifted = (positions + _shifts(count, spacing, positions)).reshape(-1, 3)
    return System.from_ase(combined, dtype=system.dtype, device=system.device).replace(
        positions=shifted, masses=system.masses.repeat(count), velocities=velocities
    )


def _shifts(count: int, spacing: float, like: Tensor) -> Tensor:
    """``(R, 1, 3)``: copy ``r`` moved by ``r * spacing`` nm along x."""
    shift = torch.zeros(count, 1, 3, dtype=like.dtype, device=like.device)
    shift[:, 0, 0] = spacing * torch.arange(count, dtype=like.dtype, device=like.device)
    return shift


def split(positions: Tensor, count: int, spacing: float = 2.0) -> Tensor:
    """Positions ``(R N, 3)`` nm of ``count`` copies as ``(R, N, 3)``, with the shift of
    :func:`replicate` (the same ``spacing``) taken off again."""
    count = _count(count, "split")
    positions = torch.as_tensor(positions)
    return positions.reshape(count, -1, 3) - _shifts(count, spacing, positions)


class WindowRestraints(EnergyTerm):
    """One harmonic restraint per copy on the same collective variable (umbrella windows):
    ``E = sum_r k / 2 (s(x_r) - c_r)^2`` kJ/mol, differences modulo the CV's period.

    Args:
        colvar: the :class:`~mindsponge.colvar.Colvar` of one copy (atom indices of one molecule).
        centers: ``(R,)`` one centre per copy, in the CV's units.
        force_constant: ``k``, kJ/mol per CV unit squared (one for all copies).
        name: the term's name.

    Called on positions ``(R N, 3)`` nm (no box).
    """

    def __init__(self, colvar: Colvar, centers, force_constant: float, name: str | None = None):
        super().__init__(name)
        if not isinstance(colvar, Colvar):
            raise ArgumentTypeError(f"WindowRestraints: colvar must be a Colvar, got {colvar!r}")
        centers = torch.tensor(np.asarray(centers, dtype=np.float64)).reshape(-1)  # a copy: moved in place
        if len(centers) < 1 or not bool(torch.isfinite(centers).all()):
            raise ConfigurationError("WindowRestraints: centers must be one finite value per copy")
        if not (isinstance(force_constant, int | float) and 0 < force_constant < np.inf):
            raise ConfigurationError(
                f"WindowRestraints: force_constant must be positive, got {force_constant!r}")
        self.colvar = colvar
        self.register_buffer("centers", centers)
        self.force_constant = float(force_constant)

    def values(self, positions: Tensor) -> Tensor:
        """The CV of every copy, ``(R,)``."""
        return self.colvar(positions.reshape(len(self.centers), -1, 3), None)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        if box is not None:
            raise ConfigurationError("WindowRestraints: copies of a molecule in vacuum (box must be None)")
        values = self.values(positions)
        differences = self.colvar.difference(values, self.centers.to(values.dtype))
        return 0.5 * self.force_constant * (differences * differences).sum()


class ReplicaColvarReporter(Reporter):
    """Record one collective variable of every copy: ``values`` ``(T, R)``, ``steps`` and ``times``.

    Args:
        colvar: the CV of one copy.
        count: copies ``R``.
        every: steps between records.
    """

    def __init__(self, colvar: Colvar, count: int, every: int = 10):
        super().__init__(every)
        self.colvar = colvar
        self.count = _count(count, "ReplicaColvarReporter")
        self.steps, self.times, self._values = [], [], []

    def report(self, state, observables):
        """Evaluate the CV of every copy at ``state``."""
        with torch.no_grad():
            values = self.colvar(state.positions.reshape(self.count, -1, 3), None)
        self.steps.append(state.step)
        self.times.append(state.time)
        self._values.append(values.detach().cpu().double().numpy())

    @property
    def values(self) -> np.ndarray:
        """``(T, R)`` float64 array of the recorded values."""
        return np.asarray(self._values, dtype=np.float64).reshape(-1, self.count)
