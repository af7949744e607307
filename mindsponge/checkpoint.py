"""Checkpoints of a :class:`~mindsponge.simulation.Simulation`: what a run needs to continue bit for bit.

A checkpoint holds the :class:`~mindsponge.state.State` (positions, velocities, box, forces,
generator state, thermostat and barostat variables), the state of every neighbour list of the
force field (the positions and box of its last build, which fix the summation order of the
pair terms: a list rebuilt elsewhere would sum in another order and the run would drift apart in
the last bits) and the buffers of the adaptive biases (metadynamics hills). It is written
atomically by :func:`common.io.save_checkpoint` and is bit-identical on the same device and dtype.

Example::

    sim.save_checkpoint("run.chk")        # calls write_checkpoint
    sim2.load_checkpoint("run.chk")       # calls read_checkpoint; sim2 continues bit-identically
"""

import torch

from common import io
from common.errors import ConfigurationError
from mindsponge.neighbors import NeighborList
from mindsponge.state import State

__all__ = ["CHECKPOINT_FORMAT", "neighbor_lists", "read_checkpoint", "write_checkpoint"]

CHECKPOINT_FORMAT = "mindsponge.Simulation/1"


def neighbor_lists(forcefield):
    """The :class:`~mindsponge.neighbors.NeighborList` objects held by the modules of ``forcefield``.

    Args:
        forcefield: any callable; a ``torch.nn.Module`` (a ``ForceField``, a learned potential, a
            combination) is searched module by module, in ``modules()`` order, for attributes that
            are neighbour lists (whatever their name); anything else has none.

    Returns:
        list of NeighborList, each once.
    """
    if not isinstance(forcefield, torch.nn.Module):
        return []
    found = []
    for module in forcefield.modules():
        for value in vars(module).values():
            if isinstance(value, NeighborList) and not any(value is known for known in found):
                found.append(value)
    return found


def write_checkpoint(path, state, lists, adaptive_modules, integrator):
    """Write ``state`` and the state of the neighbour lists and adaptive modules to ``path``.

    Args:
        path: file, written atomically.
        state: the :class:`~mindsponge.state.State` to continue from.
        lists: the force field's neighbour lists (:func:`neighbor_lists`).
        adaptive_modules: modules with ``after_step`` (their ``state_dict()`` is saved).
        integrator: saved as its ``repr``, for the reader.
    """
    io.save_checkpoint(
        path,
        {
            "format": CHECKPOINT_FORMAT,
            "state": state.to_dict(),
            "neighbor_lists": [neighbors.state_dict() for neighbors in lists],
            "adaptive_modules": [module.state_dict() for module in adaptive_modules],
            "integrator": repr(integrator),
        },
        kind="mindsponge.Simulation",
    )


def read_checkpoint(path, like, lists, adaptive_modules):
    """The state saved in ``path``, after restoring the neighbour lists and adaptive modules.

    Args:
        path: a file written by :func:`write_checkpoint`.
        like: the current state (its positions give the number of atoms and the device).
        lists: the force field's neighbour lists, rebuilt as they were saved.
        adaptive_modules: modules with ``after_step``, given their saved ``state_dict``.

    Returns:
        :class:`~mindsponge.state.State`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a mindsponge checkpoint, or one for a different number of atoms,
            neighbour lists or adaptive biases.
        common.errors.DataError: a damaged checkpoint, one of another kind, or non-finite
            positions, velocities, forces or box in it (see :func:`common.io.load_checkpoint`).
    """
    data = io.load_checkpoint(path, map_location=like.positions.device, kind="mindsponge.Simulation")
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ConfigurationError(f"{str(path)!r} is not a mindsponge Simulation checkpoint")
    state = State.from_dict(data["state"])  # io.load_checkpoint refused non-finite tensors
    if state.positions.shape != like.positions.shape:
        raise ConfigurationError(
            f"checkpoint {str(path)!r} holds {state.positions.shape[0]} atoms, this simulation "
            f"{like.positions.shape[0]}"
        )
    if len(lists) != len(data["neighbor_lists"]):
        raise ConfigurationError(
            f"checkpoint {str(path)!r} was written for a force field with different neighbour lists"
        )
    saved_modules = data.get("adaptive_modules", [])
    if len(saved_modules) != len(adaptive_modules):
        raise ConfigurationError(
            f"checkpoint {str(path)!r} holds the state of {len(saved_modules)} adaptive biases, this "
            f"simulation's force field has {len(adaptive_modules)}"
        )
    for neighbors, saved in zip(lists, data["neighbor_lists"], strict=True):
        neighbors.load_state_dict(saved)
    for module, saved in zip(adaptive_modules, saved_modules, strict=True):
        module.load_state_dict(saved)
    return state
