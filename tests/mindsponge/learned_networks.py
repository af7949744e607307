"""Small float64 learned potentials and an energy+forces helper shared by the fast-path tests."""

import torch

CUTOFF = 0.3  # nm: butane and the other test molecules have pairs farther apart than this


def model(cls, seed=0, **options):
    """A ``cls`` network of 16 features and 2 interactions (float64) with distinct element shifts and
    energy scale, so that wrong pairs or species change the energy."""
    torch.manual_seed(seed)
    network = cls(cutoff=CUTOFF, features=16, interactions=2, **options).double()
    network.element_shift.copy_(torch.linspace(-3.0, 3.0, network.n_elements, dtype=torch.float64))
    network.energy_scale.fill_(5.0 + seed)
    return network


def energy_and_forces(potential, positions):
    """``(energy, forces)`` of ``potential(positions)`` by autograd, detached."""
    x = positions.clone().requires_grad_(True)
    energy = potential(x)
    (gradient,) = torch.autograd.grad(energy, x)
    return energy.detach(), -gradient
