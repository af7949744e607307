"""A committee of learned potentials: the mean as the potential, the spread of forces as uncertainty.

The models of a committee are trained on the same data from different random initialisations and
train/validation splits. Where the data constrain them, they agree; away from it, their forces
disagree. The uncertainty of a configuration is the largest per-atom force deviation (as in
DP-GEN)::

    sigma = max_i sqrt( mean_k |F_ik - <F_i>|^2 )        kJ/mol/nm

with ``F_ik`` the force on atom ``i`` under model ``k`` and ``<F_i>`` the committee mean.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mindsponge import potentials as potentials_module

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
            raise ValueError(f"Committee needs at least 2 models, got {len(models)}")
        for index, model in enumerate(models):
            if not isinstance(model, potentials_module.LearnedPotential):
                raise TypeError(
                    f"Committee: model {index} is a {type(model).__name__}, not a LearnedPotential"
                )
        self.models = nn.ModuleList(models)

    def __len__(self) -> int:
        return len(self.models)

    def forward(self, positions: Tensor, atomic_numbers: Tensor, box: Tensor | None = None) -> Tensor:
        """Committee-mean energy ``()`` kJ/mol."""
        return torch.stack([model(positions, atomic_numbers, box) for model in self.models]).mean(0)

    def bind(self, atomic_numbers) -> CommitteePotential:
        """The committee mean as a potential ``(positions, box) -> energy`` for a Simulation."""
        return CommitteePotential(self, atomic_numbers)

    def predict(self, positions, atomic_numbers) -> tuple[Tensor, Tensor]:
        """Energies and forces of every model on frames.

        Args:
            positions: ``(F, N, 3)`` nm (array or tensor).
            atomic_numbers: ``(N,)`` integers.

        Returns:
            ``energies`` ``(K, F)`` kJ/mol and ``forces`` ``(K, F, N, 3)`` kJ/mol/nm (detached, in the
            dtype of the models).
        """
        dtype = self.models[0].energy_scale.dtype
        frames = torch.as_tensor(positions).to(dtype)
        if frames.ndim != 3 or frames.shape[-1] != 3:
            raise ValueError(f"Committee.predict: positions must be (F, N, 3) nm, got {tuple(frames.shape)}")
        count, atoms = frames.shape[:2]
        numbers = torch.as_tensor(atomic_numbers).long().repeat(count)
        batch = torch.repeat_interleave(torch.arange(count), atoms)
        flat = frames.reshape(-1, 3).detach().requires_grad_(True)
        energies, forces = [], []
        with torch.enable_grad():
            for model in self.models:
                energy = model(flat, numbers, batch=batch)
                (gradient,) = torch.autograd.grad(energy.sum(), flat)
                energies.append(energy.detach())
                forces.append(-gradient.reshape(count, atoms, 3))
        return torch.stack(energies), torch.stack(forces)

    def force_disagreement(self, positions, atomic_numbers, batch_size: int = 64) -> Tensor:
        """Uncertainty ``(F,)`` kJ/mol/nm of frames ``(F, N, 3)`` nm: the largest per-atom RMS
        deviation of the models' forces from their mean (see the module docstring)."""
        frames = torch.as_tensor(positions)
        values = []
        for start in range(0, len(frames), batch_size):
            _, forces = self.predict(frames[start : start + batch_size], atomic_numbers)
            deviation = forces - forces.mean(0, keepdim=True)
            values.append((deviation * deviation).sum(-1).mean(0).sqrt().amax(-1))
        return torch.cat(values) if values else torch.zeros(0)


class CommitteePotential(nn.Module):
    """A :class:`Committee` with bound atomic numbers: ``forward(positions, box) -> mean energy``."""

    def __init__(self, committee: Committee, atomic_numbers):
        super().__init__()
        atomic_numbers = torch.as_tensor(atomic_numbers).long()
        for model in committee.models:
            model.species(atomic_numbers)  # raises now for an element a model does not accept
        self.committee = committee
        self.register_buffer("atomic_numbers", atomic_numbers, persistent=False)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Committee-mean energy ``()`` kJ/mol of positions ``(N, 3)`` nm."""
        return self.committee(positions, self.atomic_numbers, box)
