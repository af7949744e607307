"""Checkpoints and neighbour-list state of a :class:`~mindsponge.simulation.Simulation`.

What a step depends on besides the :class:`~mindsponge.state.State` (the reference positions of the
neighbour lists, which fix the summation order of the pair terms; the adaptive biases' buffers; the
integrator's variables) is written and read here, through :mod:`mindsponge.checkpoint`, so that a run
continued from a checkpoint is bit-identical to one that never stopped.
"""

import torch

from mindsponge import checkpoint as checkpoint_module


class SimulationCheckpoints:
    """The checkpoint and neighbour-list methods of :class:`~mindsponge.simulation.Simulation` (a base class:
    it uses the simulation's ``state``, ``forcefield``, ``precision``, ``step_loop``, ``neighbor_lists``,
    ``adaptive_modules`` and ``_integrator``)."""

    def reset_neighbor_lists(self):
        """Rebuild the force field's neighbour lists at the current positions and box.

        What follows then no longer depends on when the lists were last built (the summation order of the
        pair terms does): replica exchange calls it when a replica's round starts, so that a round is the
        same wherever, and after whatever, it runs.
        """
        compute = self.precision.compute
        positions = self.state.positions.to(compute)
        virtual_sites = getattr(self.forcefield, "virtual_sites", None)
        if virtual_sites is not None:
            with torch.no_grad():
                positions = virtual_sites(positions)
        box = None if self.state.box is None else self.state.box.to(compute)
        for neighbors in self._neighbor_states():
            neighbors.load_state_dict({"positions": positions, "box": box})

    def _neighbor_states(self):
        """The neighbour lists whose state fixes the summation order (the compiled loop's where it runs)."""
        loop = self.step_loop
        return self.neighbor_lists if loop is None else loop.neighbor_states(self.neighbor_lists)

    def _save(self, path, state):
        checkpoint_module.write_checkpoint(path, state, self._neighbor_states(), self.adaptive_modules,
                                           self._integrator)

    def save_checkpoint(self, path):
        """Write the current state atomically to ``path`` (see :func:`common.io.save_checkpoint`)."""
        self._save(path, self.state)

    def load_checkpoint(self, path):
        """Continue from a checkpoint written by :meth:`save_checkpoint` (bit-identically).

        Raises:
            FileNotFoundError: no such file.
            ValueError: not a mindsponge checkpoint, or for a different number of atoms.
            common.errors.DataError: a damaged checkpoint, one of another kind, or non-finite
                positions, velocities, forces or box in it (see :func:`common.io.load_checkpoint`).
        """
        self.state = checkpoint_module.read_checkpoint(path, self.state, self._neighbor_states(),
                                                       self.adaptive_modules)
        self.check_overlaps()
