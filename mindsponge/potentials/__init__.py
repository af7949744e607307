"""Learned potentials (SchNet, PaiNN, MolCT, ACENet; MACE from mace-torch) and hybrid potentials.

All learned potentials share one call::

    model = ms.potentials.SchNet(cutoff=0.5)                 # nm; PaiNN and MolCT likewise
    energy = model(positions, atomic_numbers, box=None)      # (N, 3) nm, (N,) int -> () kJ/mol
    energies = model(positions, atomic_numbers, batch=batch) # one energy per molecule, (M,)
    sim = ms.Simulation(system, model.bind(system.atomic_numbers), integrator)

- :mod:`~mindsponge.potentials.base`: :class:`LearnedPotential` (elements, pairs, energy
  statistics, batches), :class:`BoundPotential`;
- :mod:`~mindsponge.potentials.schnet`, :mod:`~mindsponge.potentials.painn`,
  :mod:`~mindsponge.potentials.molct`, :mod:`~mindsponge.potentials.ace` (equivariant,
  many-body, MACE-style): the networks; :mod:`~mindsponge.potentials.mace`: mace-torch's MACE;
- :mod:`~mindsponge.potentials.hybrid`: :class:`SumPotential`, :class:`MechanicalEmbedding`;
- :func:`save` / :func:`load`: a model with its hyperparameters and weights in one file.
"""

from __future__ import annotations

import os

from common import io
from common.errors import ArgumentTypeError, ConfigurationError
from mindsponge.potentials.ace import ACENet
from mindsponge.potentials.base import BoundPotential, LearnedPotential, UnknownElementError
from mindsponge.potentials.hybrid import MechanicalEmbedding, SumPotential
from mindsponge.potentials.mace import MACE
from mindsponge.potentials.molct import MolCT
from mindsponge.potentials.painn import PaiNN
from mindsponge.potentials.schnet import SchNet

__all__ = [
    "LearnedPotential", "BoundPotential", "UnknownElementError", "SchNet", "PaiNN", "MolCT", "ACENet", "MACE",
    "SumPotential", "MechanicalEmbedding", "MODELS", "save", "load", "model_state",
    "model_from_state",
]

MODELS = {"SchNet": SchNet, "PaiNN": PaiNN, "MolCT": MolCT, "ACENet": ACENet, "MACE": MACE}
_FORMAT = "mindsponge.potentials/1"


def model_state(model: LearnedPotential) -> dict:
    """The class name, hyperparameters and weights of a learned potential (a plain dict)."""
    if type(model).__name__ not in MODELS:
        raise ArgumentTypeError(f"model must be one of {sorted(MODELS)}, got {type(model).__name__}")
    if model.hyperparameters is None:
        raise ArgumentTypeError(f"this {type(model).__name__} wraps a given module, not one built from "
                        f"hyperparameters: save that module itself (torch.save(model.mace_model, path)) and "
                        f"load it with MACE.from_file(path, trust=True)")
    return {"format": _FORMAT, "class": type(model).__name__, "hyperparameters": dict(model.hyperparameters),
            "state_dict": model.state_dict()}


def model_from_state(state: dict) -> LearnedPotential:
    """Rebuild a learned potential from :func:`model_state`."""
    if not isinstance(state, dict) or state.get("format") != _FORMAT or state.get("class") not in MODELS:
        raise ConfigurationError(
            f"not a saved mindsponge learned potential (format {_FORMAT!r} with a class in "
                         f"{sorted(MODELS)})")
    hyperparameters = dict(state["hyperparameters"])
    hyperparameters["elements"] = tuple(hyperparameters["elements"])
    model = MODELS[state["class"]](**hyperparameters)
    model.to(state["state_dict"]["energy_scale"].dtype)  # before loading: load_state_dict keeps dtypes
    model.load_state_dict(state["state_dict"])
    return model


def save(model: LearnedPotential, path: str | os.PathLike) -> None:
    """Write a learned potential (class, hyperparameters, weights, energy statistics) atomically."""
    io.save_checkpoint(path, model_state(model), kind="mindsponge.potential")


def load(path: str | os.PathLike, map_location=None) -> LearnedPotential:
    """Read a learned potential written by :func:`save` (or a :mod:`mindsponge.train` checkpoint)."""
    kinds = ("mindsponge.potential", "mindsponge.train")
    state = io.load_checkpoint(path, map_location=map_location, kind=kinds)
    if isinstance(state, dict) and "model" in state:
        state = state["model"]
    try:
        return model_from_state(state)
    except ValueError as error:
        raise ConfigurationError(f"{str(path)!r}: {error}") from error
