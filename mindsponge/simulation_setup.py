"""The arguments of a :class:`~mindsponge.simulation.Simulation`, checked and resolved once.

Each function turns one argument (or a group of them) into what the simulation keeps: the
precision (:func:`resolve_precision`), the system in the integration dtype with the force
field's masses (:func:`integration_system`), the constraints checked against the force field's
(:func:`resolve_constraints`). The rules are documented on
:class:`~mindsponge.simulation.Simulation`.
"""

import torch

from common.errors import ArgumentTypeError, ConfigurationError
from common.precision import Precision
from mindsponge import constraint_sets
from mindsponge import constraints as constraints_module

__all__ = [
    "check_parts",
    "count_constraints",
    "integration_system",
    "molecule_bonds",
    "resolve_constraints",
    "resolve_precision",
    "with_thermostat",
]


def check_parts(system, forcefield, integrator, barostat):
    """Refuse arguments of :class:`Simulation` of the wrong kind (TypeError, ValueError)."""
    from mindsponge.system import System

    if not isinstance(system, System):
        raise ArgumentTypeError(f"system must be a mindsponge System, got {type(system).__name__}")
    if not callable(forcefield):
        raise ArgumentTypeError(
            f"forcefield must be callable as forcefield(positions, box), got {forcefield!r}")
    if not hasattr(integrator, "step") or not hasattr(integrator, "dt"):
        raise ArgumentTypeError(f"integrator must be a mindsponge integrator, got {integrator!r}")
    if barostat is not None and system.box is None:
        raise ConfigurationError("a barostat needs a periodic system; this System's box is None")


def with_thermostat(integrator, thermostat):
    """``integrator`` with ``thermostat`` split around its step (``thermostat=None``: unchanged).

    Raises:
        common.errors.ConfigurationError: an integrator that is a thermostat itself (Langevin dynamics),
            one that already has a thermostat, or one that takes none.
    """
    if thermostat is None:
        return integrator
    if getattr(integrator, "thermostat", None) is not None:
        raise ConfigurationError(
            f"the integrator already has the thermostat {integrator.thermostat!r}; pass only one of "
            f"thermostat={thermostat!r} and the integrator's")
    if getattr(integrator, "stochastic", False) and not hasattr(integrator, "with_thermostat"):
        raise ConfigurationError(
            f"{type(integrator).__name__} is a thermostat itself (Langevin dynamics at "
            f"{getattr(integrator, 'temperature', '?')} K): drop thermostat={thermostat!r}, or use "
            "ms.integrators.VelocityVerlet(dt) with it")
    if not hasattr(integrator, "with_thermostat"):
        raise ConfigurationError(
            f"{type(integrator).__name__} takes no thermostat; use ms.integrators.LangevinMiddle, or "
            f"VelocityVerlet(dt, thermostat={thermostat!r})")
    return integrator.with_thermostat(thermostat)


def integration_system(system, forcefield, precision):
    """``system`` in the accumulate dtype, with the force field's masses when it carries them."""
    system = system.to(dtype=precision.accumulate)
    forcefield_masses = getattr(forcefield, "masses", None)
    if forcefield_masses is None:
        return system
    if len(forcefield_masses) != system.n_atoms:
        raise ConfigurationError(
            f"the force field was parameterised with {len(forcefield_masses)} masses but the "
            f"system has {system.n_atoms} atoms"
        )
    return system.replace(masses=forcefield_masses.to(system.positions))


def molecule_bonds(system, forcefield, constraints):
    """``(B, 2)`` long tensor of the pairs that make atoms one molecule, as OpenMM's ``Context.getMolecules``
    finds them: the topology's bonds, the constrained pairs, every virtual site with its parents, and the
    consecutive atoms of every bonded energy term of the force field (bonds, angles, torsions, custom bonded
    terms). A TIP4P water is then one molecule of four particles, not a water and a massless site."""
    rows = []
    if system.topology is not None and system.topology.bonds:
        rows.append(torch.as_tensor(system.topology.bonds, dtype=torch.long).reshape(-1, 2))
    if constraints is not None:
        rows.append(constraints.pairs().long().cpu())
    sites = getattr(forcefield, "virtual_sites", None)
    if sites is not None and len(sites):
        linked = sites.weights.cpu() != 0
        linked[:, 1:] |= sites.cross_weights.cpu()[:, None] != 0  # the cross product uses parents 1 and 2
        site_index = sites.sites.cpu()[:, None].expand(-1, 3)
        rows.append(torch.stack([site_index[linked], sites.parents.cpu()[linked]], 1))
    terms = forcefield.terms if hasattr(forcefield, "terms") else ()
    for term in terms:
        atoms = getattr(term, "atoms", None)
        indices = isinstance(atoms, torch.Tensor) and not atoms.is_floating_point()
        if indices and atoms.ndim == 2 and atoms.shape[1] >= 2:
            atoms = atoms.cpu().long()
            rows.append(torch.stack([atoms[:, :-1].reshape(-1), atoms[:, 1:].reshape(-1)], 1))
    return torch.cat(rows) if rows else torch.zeros((0, 2), dtype=torch.long)


def count_constraints(constraints):
    """Number of constrained distances (0 without constraints)."""
    return 0 if constraints is None else constraints.n_constraints


def resolve_precision(precision, forcefield):
    """The :class:`Precision` of a simulation (see :class:`Simulation`'s ``precision``)."""
    requested = getattr(forcefield, "requested_dtype", None)
    if precision is None:
        return Precision.double() if requested == torch.float64 else Precision.mixed()
    if isinstance(precision, str):
        precision = Precision.from_name(precision)
    if not isinstance(precision, Precision):
        raise ArgumentTypeError(
            f"precision must be None, a name or a common.precision.Precision, got {precision!r}")
    if requested is not None and requested != precision.compute:
        raise ConfigurationError(
            f"the force field was converted with forcefield.to({requested}) but this precision computes "
            f"forces in {precision.compute}: pass a precision whose compute dtype is {requested} (e.g. "
            f"precision={'double' if requested == torch.float64 else 'mixed'!r}) or convert the force field "
            f"to {precision.compute}"
        )
    if precision.compute == torch.float64 and isinstance(forcefield, torch.nn.Module):
        floating = [
            tensor.dtype
            for tensor in (*forcefield.parameters(), *forcefield.buffers())
            if tensor.dtype.is_floating_point
        ]
        if floating and all(dtype == torch.float32 for dtype in floating):
            raise ConfigurationError(
                "double precision needs float64 force-field parameters, but this force field's are "
                "float32: convert it (forcefield.to(torch.float64)) or use precision='mixed'"
            )
    return precision


def resolve_constraints(constraints, forcefield, system, masses, tolerance):
    """The constraints a simulation applies, checked against the force field's.

    Args:
        constraints: the ``constraints`` argument of :class:`~mindsponge.simulation.Simulation`
            (``None``, a name, a ``Settle``/``Rattle`` or a ``Constraints``).
        forcefield: the force field; its ``constraints`` (an OpenMM System's) are the default
            and the reference.
        system: the :class:`~mindsponge.system.System` (topology, device).
        masses: (N,) tensor, amu, the masses integrated with.
        tolerance: relative tolerance of RATTLE.

    Returns:
        :class:`~mindsponge.constraints.Constraints` or ``None``.

    Raises:
        TypeError: a ``constraints`` argument of another kind.
        common.errors.ConfigurationError: constraints that contradict the force field's.
    """
    system_constraints = getattr(forcefield, "constraints", None)
    if isinstance(constraints, constraints_module.Settle | constraints_module.Rattle):
        constraints = constraints_module.Constraints([constraints])
    if constraints is None:
        if system_constraints is None:
            return None
        return constraint_sets.from_pairs(
            system_constraints.pairs.to(system.device),
            system_constraints.distances,
            masses,
            tolerance=tolerance,
        )
    if isinstance(constraints, str):
        choice = f"constraints={constraints!r}"
        if constraints == "none":
            constraints = None
        else:
            constraints = constraint_sets.from_system(
                system,
                constraints,
                forcefield if hasattr(forcefield, "terms") else None,
                tolerance=tolerance,
            )
    elif isinstance(constraints, constraints_module.Constraints):
        choice = "the constraints argument"
    else:
        raise ArgumentTypeError(
            f"constraints must be None, 'none', one of {constraint_sets.KINDS} or a Constraints, "
            f"got {constraints!r}"
        )
    constraint_sets.check_against_system(constraints, system_constraints, system.topology, choice)
    return constraints
