"""Instantaneous thermodynamic observables: kinetic energy, temperature, pressure, density.

Temperature counts degrees of freedom as OpenMM does: three per massive particle, minus one
per constraint, minus three when the centre-of-mass motion is removed. Pressure is the
molecular virial estimator

    P = (2 K_mol - dU/d(eps)) / (3 V),

where ``K_mol`` is the kinetic energy of the molecules' centres of mass and ``dU/d(eps)`` the
derivative of the potential energy when the box and the molecules' centres of mass are scaled
by ``1 + eps`` (molecules move rigidly). This is the pressure the Monte Carlo barostat
samples; it needs no constraint forces, since constraints act inside molecules, and it is
exact for any potential, including PME (the derivative is taken numerically by a central
difference in ``eps``).

Units: kJ/mol, K, bar, nm^3, g/cm^3.
"""

import math

import torch

from common import units
from common.errors import ConfigurationError

__all__ = [
    "maxwell_boltzmann",
    "observables",
    "center_of_mass_velocity",
    "degrees_of_freedom",
    "density",
    "kinetic_energy",
    "molecule_groups",
    "pressure",
    "remove_center_of_mass_motion",
    "temperature",
]


def kinetic_energy(velocities, masses):
    """Kinetic energy ``sum 1/2 m v^2``.

    Args:
        velocities: (N, 3) tensor, nm/ps.
        masses: (N,) tensor, amu.

    Returns:
        () tensor, kJ/mol, in the dtype of ``velocities``.
    """
    return 0.5 * (masses.to(velocities.dtype) * (velocities * velocities).sum(-1)).sum()


def degrees_of_freedom(masses, n_constraints=0, remove_center_of_mass=True):
    """Number of degrees of freedom, as OpenMM counts them.

    Args:
        masses: (N,) tensor, amu; massless particles (virtual sites) carry none.
        n_constraints: number of distance constraints.
        remove_center_of_mass: whether the centre-of-mass motion is removed (3 fewer).

    Returns:
        int.

    Raises:
        ValueError: if no degree of freedom is left.
    """
    dof = 3 * int((masses > 0).sum()) - int(n_constraints) - (3 if remove_center_of_mass else 0)
    if dof <= 0:
        raise ConfigurationError(
            f"no degrees of freedom left: {int((masses > 0).sum())} massive particles, "
            f"{n_constraints} constraints, remove_center_of_mass={remove_center_of_mass}"
        )
    return dof


def temperature(kinetic, dof):
    """Instantaneous temperature ``2 K / (dof k_B)``, K.

    Args:
        kinetic: kinetic energy, kJ/mol (tensor or float).
        dof: degrees of freedom (see :func:`degrees_of_freedom`).
    """
    return 2.0 * kinetic / (dof * units.BOLTZMANN_MD)


def center_of_mass_velocity(velocities, masses):
    """(3,) centre-of-mass velocity, nm/ps."""
    masses = masses.to(velocities.dtype)
    # a matrix-vector product: a column sum of the (N, 3) products is ten times slower on a CPU
    return (masses @ velocities) / masses.sum()


def remove_center_of_mass_motion(velocities, masses):
    """Velocities (N, 3) with the centre-of-mass velocity subtracted from every massive particle."""
    shift = center_of_mass_velocity(velocities, masses)
    if bool((masses > 0).all()):
        return velocities - shift
    return velocities - (masses > 0).to(velocities.dtype)[:, None] * shift


def molecule_groups(n_atoms, bonds=(), device=None):
    """Molecule index of every atom: connected components of the bond graph.

    Args:
        n_atoms: number of atoms.
        bonds: (B, 2) integer pairs (sequence or tensor); without bonds every atom is its own molecule.
        device: of the result.

    Returns:
        (N,) long tensor of molecule indices ``0 .. M-1``, numbered by first atom.
    """
    import numpy as np
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    bonds = np.asarray(torch.as_tensor(bonds, dtype=torch.long).reshape(-1, 2).cpu())
    graph = coo_matrix((np.ones(len(bonds)), (bonds[:, 0], bonds[:, 1])), shape=(n_atoms, n_atoms))
    _, labels = connected_components(graph, directed=False)
    _, first_seen = np.unique(labels, return_index=True)
    order = np.argsort(np.argsort(first_seen))  # renumber components by their first atom
    return torch.as_tensor(order[labels], dtype=torch.long, device=device)


def _group_sums(values, groups, n_groups):
    return values.new_zeros((n_groups, *values.shape[1:])).index_add(0, groups, values)


def pressure(potential, positions, velocities, masses, box, groups):
    """Instantaneous molecular-virial pressure, bar (see the module docstring).

    Args:
        potential: callable ``(positions, box) -> () energy`` in kJ/mol (a force field).
        positions: (N, 3) tensor, nm (molecules whole, not wrapped atom by atom).
        velocities: (N, 3) tensor, nm/ps.
        masses: (N,) tensor, amu.
        box: (3, 3) tensor, nm.
        groups: (N,) long tensor of molecule indices (:func:`molecule_groups`).

    Returns:
        () tensor, bar.
    """
    if box is None:
        raise ConfigurationError("pressure needs a periodic box; box is None")
    dtype = positions.dtype
    masses = masses.to(dtype)
    n_groups = int(groups.max()) + 1
    group_masses = _group_sums(masses, groups, n_groups)
    safe_masses = torch.where(group_masses > 0, group_masses, torch.ones_like(group_masses))
    centers = _group_sums(masses[:, None] * positions, groups, n_groups) / safe_masses[:, None]
    momenta = _group_sums(masses[:, None] * velocities, groups, n_groups)
    kinetic = 0.5 * ((momenta * momenta).sum(-1) / safe_masses).sum()
    # central difference in the scaling eps, step ~ eps_machine^(1/3) of the potential's dtype
    step = float(torch.finfo(dtype).eps) ** (1.0 / 3.0)
    with torch.no_grad():
        energies = []
        for eps in (step, -step):
            scaled = positions + eps * centers[groups]
            energies.append(potential(scaled, box * (1.0 + eps)).to(dtype))
    derivative = (energies[0] - energies[1]) / (2.0 * step)
    volume = torch.linalg.det(box.to(dtype)).abs()
    return (2.0 * kinetic - derivative) / (3.0 * volume) * units.KJ_PER_MOL_NM3_TO_BAR


def density(masses, box):
    """Mass density, g/cm^3: total mass over box volume."""
    return masses.sum() / torch.linalg.det(box).abs() * units.AMU_PER_NM3_TO_G_PER_CM3


def observables(state, masses, degrees_of_freedom, molecules, potential=None):
    """The thermodynamic observables of a state, as floats (what reporters read).

    Args:
        state: a :class:`~mindsponge.state.State` with its potential energy.
        masses: (N,) tensor, amu.
        degrees_of_freedom: for the temperature.
        molecules: (N,) long tensor of molecule indices (for the pressure).
        potential: callable ``(positions, box) -> energy`` (kJ/mol) for the virial pressure (two extra
            evaluations), or ``None``: no pressure (``nan``).

    Returns:
        dict: ``potential``, ``kinetic``, ``total`` (kJ/mol), ``temperature`` (K), ``pressure`` (bar),
        ``volume`` (nm^3), ``density`` (g/cm^3); the last three are ``nan`` without a periodic box.
    """
    kinetic = float(kinetic_energy(state.velocities, masses))
    energy = float(state.potential_energy)
    values = {"potential": energy, "kinetic": kinetic, "total": energy + kinetic,
              "temperature": float(temperature(kinetic, degrees_of_freedom)),
              "pressure": math.nan, "volume": math.nan, "density": math.nan}
    if state.box is not None:
        values["volume"] = float(torch.linalg.det(state.box).abs())
        values["density"] = float(density(masses, state.box))
        if potential is not None:
            values["pressure"] = float(
                pressure(potential, state.positions, state.velocities, masses, state.box, molecules))
    return values


def maxwell_boltzmann(masses, target, degrees_of_freedom, generator, like, constrain=None):
    """Maxwell-Boltzmann velocities at exactly ``target`` K.

    Massless particles get zero velocity; ``constrain(velocities)`` (the centre-of-mass removal, the
    constraints) is applied, then the velocities are scaled so that the instantaneous temperature with
    ``degrees_of_freedom`` is ``target``.

    Args:
        masses: (N,) tensor, amu.
        target: K.
        degrees_of_freedom: int.
        generator: the ``torch.Generator`` drawn from.
        like: (N, 3) tensor whose dtype and device the velocities take.
        constrain: optional callable ``(N, 3) -> (N, 3)``.

    Returns:
        (N, 3) tensor, nm/ps.
    """
    massive = masses > 0
    noise = torch.randn(like.shape, generator=generator, dtype=like.dtype, device=like.device)
    velocities = noise * torch.where(massive, torch.rsqrt(torch.where(massive, masses, 1.0)), 0.0)[:, None]
    if constrain is not None:
        velocities = constrain(velocities)
    current = temperature(kinetic_energy(velocities, masses), degrees_of_freedom)
    return velocities * torch.sqrt(target / current)

