"""Hybrid potentials: sums of potentials, and ML/MM with mechanical embedding, each one ``nn.Module``.

Both take and give the force-field signature ``(positions (N, 3) nm, box) -> energy () kJ/mol``;
bind a learned model's atomic numbers first (``model.bind(atomic_numbers)``).

- :class:`SumPotential`: ``E = sum_k E_k(x)``, e.g. a learned potential plus a dispersion or
  bias term;
- :class:`MechanicalEmbedding`: a learned potential on a selection of atoms (the ML region)
  and a classical force field for everything else, in the subtractive form::

      E = E_MM(all atoms) - E_MM(ML region alone) + E_ML(ML region)

  so the ML region's internal energy is the learned one, while the interactions between the
  region and its surroundings (Lennard-Jones, Coulomb with fixed MM charges) stay classical.
  ``region_forcefield`` is the classical force field of the region's atoms alone (e.g. built
  by OpenMM for the isolated fragment); pass ``None`` when ``forcefield`` already leaves out
  every interaction within the region. Covalent bonds cut by the region boundary (link atoms)
  are not handled: choose whole molecules.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from common.errors import ArgumentTypeError, ConfigurationError

__all__ = ["SumPotential", "MechanicalEmbedding"]


def _check_potential(potential, name: str) -> nn.Module:
    if not isinstance(potential, nn.Module):
        raise ArgumentTypeError(
            f"{name} must be an nn.Module called as (positions, box) -> energy (a ForceField, a bound "
            f"learned potential from model.bind(atomic_numbers), ...), got {type(potential).__name__}"
        )
    return potential


def _terms(potential: nn.Module, positions: Tensor, box: Tensor | None, fallback: str) -> dict[str, Tensor]:
    if hasattr(potential, "energy_terms"):
        return potential.energy_terms(positions, box)
    return {fallback: potential(positions, box)}


class SumPotential(nn.Module):
    """The sum of several potentials of the same atoms.

    Args:
        *potentials: modules called as ``(positions, box) -> energy`` (kJ/mol).
    """

    def __init__(self, *potentials: nn.Module):
        super().__init__()
        if not potentials:
            raise ConfigurationError("SumPotential needs at least one potential")
        self.potentials = nn.ModuleList(
            _check_potential(potential, f"potential {index}") for index, potential in enumerate(potentials))

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Total energy ``()`` kJ/mol of positions ``(N, 3)`` nm, box ``(3, 3)`` nm or ``None``."""
        return sum(potential(positions, box) for potential in self.potentials)

    def energy_terms(self, positions: Tensor, box: Tensor | None = None) -> dict[str, Tensor]:
        """Energy of every part by name (kJ/mol); repeated names get the index appended."""
        merged: dict[str, Tensor] = {}
        for index, potential in enumerate(self.potentials):
            for name, energy in _terms(potential, positions, box, f"potential{index}").items():
                merged[name if name not in merged else f"{name}{index}"] = energy
        return merged


class MechanicalEmbedding(nn.Module):
    """ML/MM with mechanical embedding (see the module docstring).

    Args:
        learned: potential of the ML region's atoms, called with their positions ``(n, 3)``
            (e.g. ``model.bind(atomic_numbers[atoms])``).
        atoms: ``(n,)`` integer indices of the ML region in the full system.
        forcefield: classical potential of all ``N`` atoms.
        region_forcefield: classical potential of the region alone (called with ``(n, 3)``
            positions), subtracted; ``None`` when ``forcefield`` holds no interactions within
            the region.
    """

    def __init__(self, learned: nn.Module, atoms, forcefield: nn.Module,
                 region_forcefield: nn.Module | None = None):
        super().__init__()
        self.learned = _check_potential(learned, "learned")
        self.forcefield = _check_potential(forcefield, "forcefield")
        self.region_forcefield = None if region_forcefield is None else _check_potential(
            region_forcefield, "region_forcefield")
        atoms = torch.as_tensor(atoms)
        if atoms.ndim != 1 or atoms.is_floating_point() or len(atoms) == 0:
            raise ConfigurationError(
                f"atoms must be a non-empty (n,) integer tensor of atom indices, got {atoms!r}")
        if len(torch.unique(atoms)) != len(atoms):
            raise ConfigurationError("atoms lists an atom more than once")
        self.register_buffer("atoms", atoms.long(), persistent=False)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Total energy ``()`` kJ/mol of positions ``(N, 3)`` nm, box ``(3, 3)`` nm or ``None``."""
        return sum(self.energy_terms(positions, box).values())

    def energy_terms(self, positions: Tensor, box: Tensor | None = None) -> dict[str, Tensor]:
        """``{"ml": E_ML(region), "mm": E_MM(all), "mm_region": -E_MM(region)}`` in kJ/mol."""
        if int(self.atoms.max()) >= len(positions):
            raise ConfigurationError(
                f"MechanicalEmbedding: region atom {int(self.atoms.max())} is out of range for "
                f"{len(positions)} positions"
            )
        region = positions[self.atoms]
        terms = {"ml": self.learned(region, box), "mm": self.forcefield(positions, box)}
        if self.region_forcefield is not None:
            terms["mm_region"] = -self.region_forcefield(region, box)
        return terms
