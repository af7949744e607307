"""Any mindsponge potential as an ASE calculator (energy, forces, and stress where periodic).

ASE works in eV and Å; mindsponge in kJ/mol and nm. The calculator converts both ways with
:mod:`common.units`. A periodic cell that is not lower triangular (ASE allows any orientation)
is rotated to ASE's standard form and reduced (as :meth:`mindsponge.System.from_ase` does);
forces and stress are rotated back, so they refer to the caller's axes.

The stress is the derivative of the energy with respect to a homogeneous strain of positions
and cell together, ``sigma = (1 / V) dE/d(strain)``, by autograd (ASE's convention: positive
under tension, so ``-trace(sigma) / 3`` is the pressure without the kinetic part).

Example::

    from ase.build import molecule
    atoms = molecule("CH3CH2OH")
    atoms.calc = ms.interop.ase.Calculator(model)   # a learned potential, model.bind(z), a ForceField
    atoms.get_potential_energy(), atoms.get_forces() # eV, eV/Å
"""

from __future__ import annotations

import numpy as np
import torch
from ase.calculators.calculator import Calculator as _ASECalculator
from ase.calculators.calculator import all_changes

from common import units
from common.errors import ArgumentTypeError, ConfigurationError
from mindsponge import space

__all__ = ["Calculator"]

_KJ_PER_MOL_TO_EV = 1.0 / units.EV_TO_KJ_PER_MOL


class Calculator(_ASECalculator):
    """ASE calculator wrapping a mindsponge potential.

    Args:
        potential: a :class:`~mindsponge.potentials.LearnedPotential` (called with the atoms'
            atomic numbers), or any module called as ``potential(positions (N, 3) nm, box) -> energy``
            in kJ/mol (a :class:`~mindsponge.forcefield.ForceField`, ``model.bind(numbers)``, a
            hybrid potential).
        dtype: dtype of the positions handed to the potential.
        device: device of the positions.

    Implemented properties: ``energy``, ``free_energy`` (the same, eV), ``forces`` (eV/Å) and,
    for cells periodic in all three directions, ``stress`` (eV/Å^3, Voigt order xx, yy, zz, yz, xz, xy).

    Raises:
        ValueError: partly periodic cells (``pbc`` must be all True or all False).
    """

    implemented_properties = ["energy", "free_energy", "forces", "stress"]

    def __init__(self, potential: torch.nn.Module, dtype: torch.dtype = torch.float64, device=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(potential, torch.nn.Module):
            raise ArgumentTypeError(f"potential must be a torch.nn.Module, got {type(potential).__name__}")
        self.potential = potential
        self.dtype = dtype
        self.device = torch.device("cpu") if device is None else torch.device(device)

    def _energy(self, positions: torch.Tensor, box: torch.Tensor | None, numbers: np.ndarray) -> torch.Tensor:
        from mindsponge.potentials import LearnedPotential

        if isinstance(self.potential, LearnedPotential):
            return self.potential(positions, torch.as_tensor(numbers, device=self.device), box)
        return self.potential(positions, box)

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
        """Compute the requested properties of ``atoms`` (ASE's calculator protocol)."""
        super().calculate(atoms, properties, system_changes)
        atoms = self.atoms
        positions = np.asarray(atoms.get_positions(), dtype=np.float64)
        rotation = np.eye(3)
        box = None
        if atoms.pbc.any():
            if not atoms.pbc.all():
                raise ConfigurationError(f"Calculator needs pbc all True or all False, got pbc={atoms.pbc}")
            cell = np.asarray(atoms.cell[:], dtype=np.float64)
            if np.abs(np.triu(cell, 1)).max() > 1e-12 * np.abs(cell).max():
                standard, rotation = atoms.cell.standard_form()
                cell = np.asarray(standard[:], dtype=np.float64)
                positions = positions @ rotation.T
            box = space.reduce_box(torch.as_tensor(cell * units.ANGSTROM_TO_NM, dtype=self.dtype,
                                                   device=self.device))
        positions = torch.as_tensor(positions * units.ANGSTROM_TO_NM, dtype=self.dtype, device=self.device)
        want_stress = "stress" in properties and box is not None
        with torch.enable_grad():
            positions.requires_grad_(True)
            # a lower-triangular strain keeps the box lower triangular (see the module docstring)
            strain = torch.zeros(3, 3, dtype=self.dtype, device=self.device, requires_grad=want_stress)
            deformation = torch.eye(3, dtype=self.dtype, device=self.device) + torch.tril(strain)
            energy = self._energy(positions @ deformation, None if box is None else box @ deformation,
                                  atoms.numbers)
            inputs = (positions, strain) if want_stress else (positions,)
            gradients = torch.autograd.grad(energy, inputs)
        energy_ev = float(energy.detach()) * _KJ_PER_MOL_TO_EV
        forces = -gradients[0].detach().cpu().double().numpy() @ rotation  # back to the caller's axes
        self.results["energy"] = self.results["free_energy"] = energy_ev
        self.results["forces"] = forces * _KJ_PER_MOL_TO_EV * units.ANGSTROM_TO_NM
        if want_stress:
            lower = torch.tril(gradients[1]).detach().cpu().double().numpy()
            virial = lower + np.tril(lower, -1).T  # rotation invariance: the derivative is symmetric
            volume = float(space.volume(box))  # nm^3
            stress = rotation.T @ (virial / volume) @ rotation  # kJ/mol/nm^3, caller's axes
            stress = stress * _KJ_PER_MOL_TO_EV * units.ANGSTROM_TO_NM**3
            self.results["stress"] = stress.reshape(9)[[0, 4, 8, 5, 2, 1]]
