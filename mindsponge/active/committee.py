"""A committee of learned potentials: the mean as the potential, the spread of forces as uncertainty.

The models of a committee are trained on the same data from different random initialisations and
train/validation splits. Where the data constrain them, they agree; away from it, their forces
disagree. The uncertainty of a configuration is the largest per-atom force deviation (as in
DP-GEN)::

    sigma = max_i sqrt( mean_k |F_ik - <F_i>|^2 )        kJ/mol/nm

with ``F_ik`` the force on atom ``i`` under model ``k`` and ``<F_i>`` the committee mean.

Bound to atomic numbers (:meth:`Committee.bind`, what MD runs), a committee of models of one class
and the same hyperparameters is evaluated as one vectorised model (``torch.func.vmap`` over the
models' stacked weights) on one shared graph (pairs and displacement vectors found once): the
same operations as one model, each on ``k`` models' worth of numbers, instead of ``k`` times as
many small operations. That pays off on small graphs only: beyond the models'
``vectorise_max_pairs`` the models run one after the other on the shared graph (four PaiNN, one
thread of a loaded 2-core machine, vmap's time over the loop's: 0.95 at 182 pairs, 1.2 at 364, 1.5-1.8
at 3,822, 21 copies of a 14-atom molecule; four SchNet: 0.75 at 182, 1.0 at 728, 1.3-1.5 at 3,822).
The stacked weights are copies, remade when a model's weights change (in place or replaced);
gradients flow to the positions, not to the weights, so train the models themselves (or
:class:`Committee` unbound). Committees of mixed models run model by model.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError
from mindsponge import potentials as potentials_module
from mindsponge import space

__all__ = ["Committee", "CommitteePotential"]


class Committee(nn.Module):
    """``k >= 2`` learned potentials evaluated together.

    Args:
        models: a list of :class:`~mindsponge.potentials.LearnedPotential` (the same elements).

    Forward: positions ``(N, 3)`` nm, atomic numbers ``(N,)``, box ``(3, 3)`` nm or ``None`` ->
    the committee-mean energy ``()`` kJ/mol.
    """

    def __init__(self, models):
        super().__init__()
        models = list(models)
        if len(models) < 2:
            raise ConfigurationError(f"Committee needs at least 2 models, got {len(models)}")
        for index, model in enumerate(models):
            if not isinstance(model, potentials_module.LearnedPotential):
                raise ArgumentTypeError(
                    f"Committee: model {index} is a {type(model).__name__}, not a LearnedPotential"
                )
        self.models = nn.ModuleList(models)

    def __len__(self) -> int:
        return len(self.models)

    def forward(self, positions: Tensor, atomic_numbers: Tensor, box: Tensor | None = None) -> Tensor:
        """Committee-mean energy ``()`` kJ/mol."""
        return torch.stack([model(positions, atomic_numbers, box) for model in self.models]).mean(0)

    def bind(self, atomic_numbers, replicas: int = 1) -> CommitteePotential:
        """The committee mean as a potential ``(positions, box) -> energy`` for a Simulation
        (``replicas`` copies of the molecule, as :meth:`LearnedPotential.bind
        <mindsponge.potentials.LearnedPotential.bind>`)."""
        return CommitteePotential(self, atomic_numbers, replicas)

    def predict(self, positions, atomic_numbers, box=None) -> tuple[Tensor, Tensor]:
        """Energies and forces of every model on frames.

        Args:
            positions: ``(F, N, 3)`` nm (array or tensor).
            atomic_numbers: ``(N,)`` integers.
            box: ``(3, 3)`` nm, the periodic box of every frame, or ``None`` (molecules in vacuum).

        Returns:
            ``energies`` ``(K, F)`` kJ/mol and ``forces`` ``(K, F, N, 3)`` kJ/mol/nm (detached, in the
            dtype of the models).
        """
        dtype = self.models[0].energy_scale.dtype
        frames = torch.as_tensor(positions).to(dtype)
        if frames.ndim != 3 or frames.shape[-1] != 3:
            raise ConfigurationError(
                f"Committee.predict: positions must be (F, N, 3) nm, got {tuple(frames.shape)}")
        count, atoms = frames.shape[:2]
        if box is not None:  # the models batch molecules without a box: one frame at a time
            results = [self._predict_batch(frame, atomic_numbers, torch.as_tensor(box).to(dtype), None)
                       for frame in frames]
            return torch.stack([energy[:, 0] for energy, _ in results], 1), \
                torch.stack([force for _, force in results], 1)
        batch = torch.repeat_interleave(torch.arange(count), atoms)
        energies, forces = self._predict_batch(frames.reshape(-1, 3), atomic_numbers, None, batch)
        return energies, forces.reshape(len(self.models), count, atoms, 3)

    def _predict_batch(self, positions: Tensor, atomic_numbers, box: Tensor | None,
                       batch: Tensor | None) -> tuple[Tensor, Tensor]:
        """Energies ``(K, F)`` (``(K, 1)`` without a batch) and forces ``(K, N F, 3)`` of every model."""
        copies = 1 if batch is None else int(batch[-1]) + 1
        numbers = torch.as_tensor(atomic_numbers).long().repeat(copies)
        flat = positions.detach().requires_grad_(True)
        energies, forces = [], []
        with torch.enable_grad():
            for model in self.models:
                energy = model(flat, numbers, box=box, batch=batch).reshape(-1)
                (gradient,) = torch.autograd.grad(energy.sum(), flat)
                energies.append(energy.detach())
                forces.append(-gradient)
        return torch.stack(energies), torch.stack(forces)

    def force_disagreement(self, positions, atomic_numbers, batch_size: int = 64, box=None) -> Tensor:
        """Uncertainty ``(F,)`` kJ/mol/nm of frames ``(F, N, 3)`` nm (in a periodic ``box`` ``(3, 3)``
        nm, or ``None``): the largest per-atom RMS deviation of the models' forces from their mean
        (see the module docstring)."""
        frames = torch.as_tensor(positions)
        values = []
        for start in range(0, len(frames), batch_size):
            _, forces = self.predict(frames[start : start + batch_size], atomic_numbers, box)
            deviation = forces - forces.mean(0, keepdim=True)
            values.append((deviation * deviation).sum(-1).mean(0).sqrt().amax(-1))
        return torch.cat(values) if values else torch.zeros(0)


class _PairEnergy(nn.Module):
    """A learned potential's energy ``()`` kJ/mol from element indices and a graph (what
    :func:`torch.func.functional_call` calls with one model's weights)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, species: Tensor, pairs: Tensor, vectors: Tensor) -> Tensor:
        return self.model.pair_energy(species, pairs, vectors)


def _vectorisable(models) -> bool:
    """Models of one class with the same hyperparameters (and so the same pairs and weight shapes)."""
    first = models[0]
    return (
        first.hyperparameters is not None
        and first.vectorisable
        and all(
            type(model) is type(first) and model.hyperparameters == first.hyperparameters for model in models
        )
    )


class CommitteePotential(nn.Module):
    """A :class:`Committee` with bound atomic numbers: ``forward(positions, box) -> mean energy``.

    Models of one class and hyperparameters are evaluated together (see the module docstring);
    ``vectorised`` says whether they are.

    Forward: positions ``(N, 3)`` nm, box ``(3, 3)`` nm or ``None`` -> the committee-mean energy
    ``()`` kJ/mol, in the dtype of the positions. With ``replicas``, positions ``(replicas N, 3)``
    hold independent copies of the molecule (no box) and the energy is their sum.
    """

    def __init__(self, committee: Committee, atomic_numbers, replicas: int = 1):
        super().__init__()
        checks.positive_int(replicas, "replicas")
        atomic_numbers = torch.as_tensor(atomic_numbers).long()
        species = [model.species(atomic_numbers) for model in committee.models]  # raises now if unknown
        self.committee = committee
        self.replicas = replicas
        self.register_buffer("atomic_numbers", atomic_numbers.repeat(replicas), persistent=False)
        self.register_buffer("species", species[0].repeat(replicas), persistent=False)
        self.vectorised = _vectorisable(list(committee.models))
        self._stack = None  # (the weights' identities and versions, stacked parameters, stacked buffers)

    def _stacked(self) -> tuple[dict, dict]:
        """The models' weights stacked along a first axis ``(K, ...)``, remade when any changed."""
        tensors = [
            tensor for model in self.committee.models for tensor in (*model.parameters(), *model.buffers())
        ]
        key = [(id(tensor), tensor._version) for tensor in tensors]
        if self._stack is None or self._stack[0] != key:
            parameters, buffers = stack_module_state(list(self.committee.models))
            parameters = {f"model.{name}": value.detach() for name, value in parameters.items()}
            buffers = {f"model.{name}": value for name, value in buffers.items()}
            self._stack = (key, parameters, buffers)
        return self._stack[1], self._stack[2]

    def replicated(self, count: int) -> CommitteePotential:
        """The committee bound to ``count`` copies of this potential's molecule."""
        molecule = self.atomic_numbers[: len(self.atomic_numbers) // self.replicas]
        return CommitteePotential(self.committee, molecule, count)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Committee-mean energy ``()`` kJ/mol of positions ``(N, 3)`` nm."""
        if not self.vectorised:
            if self.replicas == 1:
                return self.committee(positions, self.atomic_numbers, box)
            energies = [
                model.species_energy(positions, model.species(self.atomic_numbers), box, None, self.replicas)
                for model in self.committee.models
            ]
            return torch.stack(energies).mean(0)
        first = self.committee.models[0]
        if box is not None:
            space.check_box(box)
        dtype = first.energy_scale.dtype
        pairs, vectors = first.graph(
            positions.to(dtype), None if box is None else box.to(dtype), replicas=self.replicas
        )
        if len(pairs) > first.vectorise_max_pairs:
            energies = [model.pair_energy(self.species, pairs, vectors) for model in self.committee.models]
            return torch.stack(energies).mean(0).to(positions.dtype)
        parameters, buffers = self._stacked()
        module = _PairEnergy(first)

        def energy(parameters, buffers):
            return functional_call(module, (parameters, buffers), (self.species, pairs, vectors))

        return vmap(energy)(parameters, buffers).mean(0).to(positions.dtype)
