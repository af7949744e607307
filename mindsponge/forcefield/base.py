"""Energy terms, the force field that sums them, and forces by automatic differentiation.

A classical force field is a sum of energy terms: bonds, angles, torsions, Lennard-Jones,
Coulomb... Each term is a :class:`EnergyTerm`, a :class:`torch.nn.Module` whose ``forward``
maps positions ``(N, 3)`` in nm and a box ``(3, 3)`` in nm (rows are the box vectors, or
``None`` without periodic boundaries) to an energy ``()`` in kJ/mol. Parameters of a term
are buffers or :class:`torch.nn.Parameter` objects, so ``.to(dtype)``/``.to(device)`` move
them and gradients with respect to them (parameter fitting) work.

:class:`ForceField` holds a list of terms, sums them, and reports them by name with
:meth:`ForceField.energy_terms`. Forces are minus the gradient of the energy,
computed by :func:`forces` (terms may supply analytic gradients through a custom
:class:`torch.autograd.Function`; :func:`forces` does not need to know).

Example::

    ff = ForceField([HarmonicBond(bonds, lengths, k)])
    ff.energy_terms(positions, box)      # {"HarmonicBond": tensor(...)}
    energy = ff(positions, box)          # () kJ/mol, differentiable
    f = forces(ff, positions, box)       # (N, 3) kJ/mol/nm

Positions or a box holding NaN or infinite values are refused where they come in (calling a
:class:`ForceField`, :meth:`ForceField.energy_terms`, :func:`energy_and_forces`,
:func:`forces`) with a :class:`common.errors.DataError` naming the first bad atom, instead of
returning a NaN energy (one ``isfinite`` reduction per call).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError, UnknownNameError

__all__ = [
    "EnergyTerm",
    "ForceField",
    "SystemConstraints",
    "VirtualSites",
    "DuplicateTermError",
    "check_inputs",
    "forces",
    "energy_and_forces",
]


class DuplicateTermError(ConfigurationError):
    """Two energy terms of a :class:`ForceField` report the same name."""


class EnergyTerm(nn.Module):
    """One additive contribution to the potential energy.

    Subclasses implement :meth:`forward`; they may override :meth:`energy_terms` to report
    several named parts (for example the direct and reciprocal parts of PME).

    Args:
        name: the name under which :meth:`energy_terms` reports this term. Defaults to the
            class name.
    """

    name: str

    def __init__(self, name: str | None = None):
        super().__init__()
        if name is not None and (not isinstance(name, str) or not name):
            raise ArgumentTypeError(f"EnergyTerm name must be a non-empty string, got {name!r}")
        self.name = name if name is not None else type(self).__name__

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Energy of this term.

        Args:
            positions: ``(N, 3)`` tensor, nm.
            box: ``(3, 3)`` tensor, nm, rows are the box vectors; ``None`` without
                periodic boundaries.

        Returns:
            ``()`` tensor, kJ/mol.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement forward")

    @property
    def is_empty(self) -> bool:
        """Whether the term has no interactions, so that its energy is exactly zero (a
        :class:`ForceField` then skips it); ``False`` unless a subclass knows better."""
        return False

    def energy_terms(self, positions: Tensor, box: Tensor | None = None) -> dict[str, Tensor]:
        """Energies of this term by name: ``{self.name: self(positions, box)}`` by default.

        Args:
            positions: ``(N, 3)`` tensor, nm.
            box: ``(3, 3)`` tensor, nm, or ``None``.

        Returns:
            dict mapping names to ``()`` tensors, kJ/mol.
        """
        return {self.name: self(positions, box)}

    @property
    def global_parameters(self) -> dict[str, float]:
        """Current values of the term's global parameters (OpenMM's context parameters), by name;
        ``{}`` for a term without any. Custom terms hold theirs in their expressions."""
        values: dict[str, float] = {}
        for holder in self._global_parameter_holders():
            values.update(holder.global_parameters)
        return values

    def set_global_parameter(self, name: str, value: float) -> None:
        """Set one global parameter (as OpenMM's ``Context.setParameter``), in place.

        Raises:
            UnknownNameError: the term has no global parameter ``name``.
        """
        holders = [holder for holder in self._global_parameter_holders() if name in holder.global_parameters]
        if not holders:
            raise UnknownNameError(
                f"{type(self).__name__} {self.name!r}: no global parameter {name!r}; it has "
                f"{sorted(self.global_parameters)}")
        for holder in holders:
            holder.set_global_parameter(name, value)

    def _global_parameter_holders(self) -> list:
        """The sub-modules that hold global parameters (expressions with ``global_names``)."""
        return [module for module in self.modules() if getattr(module, "global_names", None)]

    def extra_repr(self) -> str:
        return f"name={self.name!r}"


class VirtualSites(nn.Module):
    """Massless interaction sites placed from other atoms (TIP4P/TIP5P water, lone pairs).

    Each site ``s`` sits at a fixed combination of three parent atoms ``p0, p1, p2``::

        x_s = w0 x_p0 + w1 x_p1 + w2 x_p2 + w_cross (x_p1 - x_p0) x (x_p2 - x_p0)

    which covers OpenMM's ``TwoParticleAverageSite`` (``w2 = 0``), ``ThreeParticleAverageSite``
    and ``OutOfPlaneSite`` (``w0 = 1 - w12 - w13``, ``w1 = w12``, ``w2 = w13``). Calling the
    module returns positions with every site recomputed; used inside a :class:`ForceField`,
    autograd then carries the forces on the sites over to their parents, as OpenMM does.

    Args:
        sites: ``(S,)`` integer tensor, indices of the virtual sites.
        parents: ``(S, 3)`` integer tensor, parent atoms (pad unused ones with any parent and
            a zero weight).
        weights: ``(S, 3)`` tensor, dimensionless.
        cross_weights: ``(S,)`` tensor, 1/nm; zeros if omitted.
    """

    def __init__(self, sites, parents, weights, cross_weights=None):
        super().__init__()
        sites = torch.as_tensor(sites, dtype=torch.long).reshape(-1)
        parents = torch.as_tensor(parents, dtype=torch.long).reshape(-1, 3)
        weights = torch.as_tensor(weights, dtype=torch.float64).reshape(-1, 3)
        cross = torch.zeros(len(sites), dtype=torch.float64) if cross_weights is None else cross_weights
        cross = torch.as_tensor(cross, dtype=torch.float64).reshape(-1)
        if not len(parents) == len(weights) == len(cross) == len(sites):
            raise ConfigurationError(
                f"VirtualSites: sites ({len(sites)}), parents ({len(parents)}), weights ({len(weights)}) and "
                f"cross_weights ({len(cross)}) must have one row per site"
            )
        if bool(torch.isin(parents, sites).any()):
            raise ConfigurationError("VirtualSites: a virtual site cannot be the parent of another site")
        self.register_buffer("sites", sites)
        self.register_buffer("parents", parents)
        self.register_buffer("weights", weights)
        self.register_buffer("cross_weights", cross)

    def __len__(self) -> int:
        return len(self.sites)

    def forward(self, positions: Tensor) -> Tensor:
        """Positions ``(N, 3)`` (nm) with the virtual sites placed from their parents."""
        parent_positions = positions[self.parents]  # (S, 3, 3)
        placed = (self.weights.to(positions.dtype).unsqueeze(-1) * parent_positions).sum(1)
        cross = torch.cross(
            parent_positions[:, 1] - parent_positions[:, 0],
            parent_positions[:, 2] - parent_positions[:, 0],
            dim=-1,
        )
        placed = placed + self.cross_weights.to(positions.dtype).unsqueeze(-1) * cross
        return positions.index_copy(0, self.sites, placed)


@dataclass(frozen=True)
class SystemConstraints:
    """The distance constraints a force field was parameterised with (an OpenMM System's).

    Attributes:
        pairs: ``(C, 2)`` long tensor of constrained atom pairs.
        distances: ``(C,)`` float64 tensor, nm: the constrained distances.
        required: ``(C,)`` bool tensor: no energy term holds this distance (OpenMM dropped the
            bond or angle term because the distance is constrained), so a run without this
            constraint would let the two atoms drift apart freely.
    """

    pairs: Tensor
    distances: Tensor
    required: Tensor

    def __post_init__(self):
        if not (self.pairs.ndim == 2 and self.pairs.shape[1] == 2):
            raise ConfigurationError(
                f"SystemConstraints: pairs must be (C, 2), got {tuple(self.pairs.shape)}")
        if not len(self.pairs) == len(self.distances) == len(self.required):
            raise ConfigurationError(
                f"SystemConstraints: {len(self.pairs)} pairs, {len(self.distances)} distances and "
                f"{len(self.required)} required flags must match"
            )

    def __len__(self) -> int:
        return len(self.pairs)


class ForceField(nn.Module):
    """A sum of energy terms.

    Args:
        terms: the :class:`EnergyTerm` objects; their names must be distinct.
        virtual_sites: optional :class:`VirtualSites`; the positions of the sites are
            recomputed from their parents before the terms see them (the input positions of the
            sites are ignored, and forces on them are carried over to their parents).
        masses: optional ``(N,)`` tensor, amu: the masses the force field was parameterised
            with (an OpenMM System's, hydrogen mass repartitioning included). A
            :class:`~mindsponge.simulation.Simulation` integrates with these masses.
        constraints: optional :class:`SystemConstraints` the force field was parameterised with;
            a :class:`~mindsponge.simulation.Simulation` applies them by default and refuses
            ``constraints=`` choices that contradict them.

    Calling the force field returns the total energy ``()`` in kJ/mol;
    :meth:`energy_terms` returns the energy of every term by name. Iterating yields
    the terms; ``ff["HarmonicBond"]`` returns a term by name.

    ``requested_dtype`` is the dtype of the last explicit ``ff.to(dtype)``, ``ff.float()`` or
    ``ff.double()`` (``None`` if there was none): a Simulation either computes in it or refuses
    a precision that contradicts it. ``barostat`` (a :mod:`mindsponge.barostats` barostat) and
    ``remove_center_of_mass_motion`` (a bool) are the run settings of an OpenMM System the force
    field was read from (``None`` otherwise); a Simulation uses them unless given others.
    """

    def __init__(
        self,
        terms: Iterable[EnergyTerm] = (),
        virtual_sites: VirtualSites | None = None,
        masses: Tensor | None = None,
        constraints: SystemConstraints | None = None,
    ):
        super().__init__()
        if virtual_sites is not None and not isinstance(virtual_sites, VirtualSites):
            raise ArgumentTypeError(
                f"virtual_sites must be a VirtualSites module, got {type(virtual_sites).__name__}"
            )
        if constraints is not None and not isinstance(constraints, SystemConstraints):
            raise ArgumentTypeError(
                f"constraints must be SystemConstraints, got {type(constraints).__name__}")
        self.virtual_sites = virtual_sites
        self.masses = None if masses is None else torch.as_tensor(masses, dtype=torch.float64).reshape(-1)
        self.constraints = constraints
        self.barostat = None  # an OpenMM System's barostat (mindsponge.interop.openmm), used by Simulation
        self.remove_center_of_mass_motion: bool | None = None  # whether the System removes it
        self.requested_dtype: torch.dtype | None = None
        self.parameters_version = 0  # counts changes of the global parameters (a Simulation follows it)
        self.terms = nn.ModuleList()
        for term in terms:
            self.add(term)

    def to(self, *args, **kwargs):
        """:meth:`torch.nn.Module.to`, recording an explicit dtype in ``requested_dtype``."""
        dtype = torch._C._nn._parse_to(*args, **kwargs)[1]
        module = super().to(*args, **kwargs)
        if dtype is not None:
            self.requested_dtype = dtype
        return module

    def float(self):
        """:meth:`torch.nn.Module.float`, recording ``requested_dtype = torch.float32``."""
        return self.to(torch.float32)

    def double(self):
        """:meth:`torch.nn.Module.double`, recording ``requested_dtype = torch.float64``."""
        return self.to(torch.float64)

    def add(self, term: EnergyTerm) -> ForceField:
        """Append an energy term (its name must not be taken). Returns ``self``."""
        if not isinstance(term, EnergyTerm):
            raise ArgumentTypeError(f"ForceField terms must be EnergyTerm modules, got {type(term).__name__}")
        if term.name in self.names:
            raise DuplicateTermError(
                f"ForceField already has a term named {term.name!r}; give the new "
                f"{type(term).__name__} a distinct name (EnergyTerm(name=...))"
            )
        self.terms.append(term)
        return self

    @property
    def names(self) -> list[str]:
        """Names of the terms, in order."""
        return [term.name for term in self.terms]

    def __iter__(self) -> Iterator[EnergyTerm]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    def __getitem__(self, name: str) -> EnergyTerm:
        for term in self.terms:
            if term.name == name:
                return term
        raise UnknownNameError(f"ForceField has no term named {name!r}; it has {self.names}")

    @property
    def global_parameters(self) -> dict[str, float]:
        """The global parameters of all terms (OpenMM's context parameters: ``lambda_sterics``,
        ``softcore_alpha``...) and their current values, by name."""
        values: dict[str, float] = {}
        for term in self.terms:
            values.update(term.global_parameters)
        return values

    def set_global_parameters(self, values: dict[str, float] | None = None, /, **named: float) -> ForceField:
        """Set global parameters in every term that has them (OpenMM's ``Context.setParameter``), in place.

        Takes a mapping or keywords: ``ff.set_global_parameters(lambda_sterics=0.5)``. A
        :class:`~mindsponge.simulation.Simulation` of this force field follows the change at its next
        ``run``, ``minimize`` or energy evaluation (its compiled loop is rebuilt and its forces
        recomputed, as OpenMM's ``Context.setParameter``). Returns ``self``.

        Raises:
            UnknownNameError: a name that no term has (nothing is changed).
            ConfigurationError: a value that is not a finite number.
        """
        values = {**(values or {}), **named}
        known = self.global_parameters
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UnknownNameError(
                f"ForceField: no global parameter named {unknown}; its terms have {sorted(known)}")
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ConfigurationError(
                    f"ForceField: global parameter {name!r} must be a finite number, got {value!r}")
        for term in self.terms:
            own = term.global_parameters
            for name, value in values.items():
                if name in own and own[name] != float(value):
                    term.set_global_parameter(name, float(value))
                    self.parameters_version += 1
        return self

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Total potential energy.

        Args:
            positions: ``(N, 3)`` tensor, nm.
            box: ``(3, 3)`` tensor, nm, or ``None`` without periodic boundaries.

        Returns:
            ``()`` tensor, kJ/mol.

        Raises:
            ValueError: ``positions`` or ``box`` of the wrong shape.
            common.errors.DataError: a NaN or infinite coordinate (naming the atom) or box entry.
        """
        positions = self._prepare(positions, box)
        # terms without interactions (e.g. the bonds of rigid water) contribute exactly zero: skipped
        active = [term for term in self.terms if not getattr(term, "is_empty", False)]
        if len(active) == 0:
            return positions.new_zeros(()) + 0.0 * positions.sum()
        total = None
        for term in active:
            energy = term(positions, box)
            total = energy if total is None else total + energy
        return total

    def energy_terms(self, positions: Tensor, box: Tensor | None = None) -> dict[str, Tensor]:
        """Energy of every term by name.

        Args:
            positions: ``(N, 3)`` tensor, nm.
            box: ``(3, 3)`` tensor, nm, or ``None``.

        Returns:
            dict mapping term names to ``()`` tensors, kJ/mol. A term that reports several
            parts (e.g. PME direct and reciprocal) contributes all of them.

        Raises:
            DuplicateTermError: two terms report the same name.
            ValueError: ``positions`` or ``box`` of the wrong shape.
            common.errors.DataError: a NaN or infinite coordinate (naming the atom) or box entry.
        """
        positions = self._prepare(positions, box)
        merged: dict[str, Tensor] = {}
        for term in self.terms:
            for name, energy in term.energy_terms(positions, box).items():
                if name in merged:
                    raise DuplicateTermError(
                        f"energy term name {name!r} is reported by more than one term "
                        f"(the second is {type(term).__name__} {term.name!r})"
                    )
                merged[name] = energy
        return merged

    def _prepare(self, positions: Tensor, box: Tensor | None) -> Tensor:
        check_inputs(positions, box)
        return positions if self.virtual_sites is None else self.virtual_sites(positions)


def check_inputs(positions: Tensor, box: Tensor | None) -> None:
    """Refuse positions that are not ``(N, 3)`` or a box that is not ``(3, 3)`` (ValueError), and NaN or
    infinite values in either (:class:`common.errors.DataError` naming the atom or box vector)."""
    if not isinstance(positions, Tensor) or positions.ndim != 2 or positions.shape[-1] != 3:
        shape = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
        raise ConfigurationError(f"positions must be an (N, 3) tensor in nm, got {shape}")
    if box is not None and (not isinstance(box, Tensor) or tuple(box.shape) != (3, 3)):
        shape = tuple(box.shape) if isinstance(box, Tensor) else type(box).__name__
        raise ConfigurationError(
            f"box must be a (3, 3) tensor of box vectors in nm (rows) or None, got {shape}")
    _check_finite(positions, box)


def _check_finite(positions: Tensor, box: Tensor | None) -> None:
    """Refuse NaN or infinite positions (naming the atom) or box vectors: common.errors.DataError."""
    checks.finite(positions, "positions", item="atom")
    if isinstance(box, Tensor):
        checks.finite(box, "box", item="box vector")


def energy_and_forces(
    potential: nn.Module, positions: Tensor, box: Tensor | None = None, create_graph: bool = False
) -> tuple[Tensor, Tensor]:
    """Energy and forces ``-dE/dx`` of a potential in one evaluation.

    Args:
        potential: any module called as ``potential(positions, box) -> () energy``, usually a
            :class:`ForceField`.
        positions: ``(N, 3)`` tensor, nm. It may or may not require grad already.
        box: ``(3, 3)`` tensor, nm, or ``None``.
        create_graph: keep the graph of the forces so that they can be differentiated again
            (force matching, Hessians). Without it the returned forces are detached.

    Returns:
        ``(energy, forces)``: ``()`` tensor in kJ/mol and ``(N, 3)`` tensor in kJ/mol/nm.

    Raises:
        common.errors.DataError: a NaN or infinite coordinate (naming the atom) or box entry.
    """
    if not isinstance(potential, ForceField):  # a ForceField checks its own inputs
        _check_finite(positions, box)
    with torch.enable_grad():
        if not positions.requires_grad:
            positions = positions.detach().requires_grad_(True)
        energy = potential(positions, box)
        (gradient,) = torch.autograd.grad(energy, positions, create_graph=create_graph)
    if not create_graph:
        energy = energy.detach()
    return energy, -gradient


def forces(
    potential: nn.Module, positions: Tensor, box: Tensor | None = None, create_graph: bool = False
) -> Tensor:
    """Forces ``-dE/dx`` of a potential by automatic differentiation.

    Args:
        potential: any module called as ``potential(positions, box) -> () energy``, usually a
            :class:`ForceField`.
        positions: ``(N, 3)`` tensor, nm. It may or may not require grad already.
        box: ``(3, 3)`` tensor, nm, or ``None``.
        create_graph: keep the graph so that the forces can be differentiated again.

    Returns:
        ``(N, 3)`` tensor, kJ/mol/nm.

    Raises:
        common.errors.DataError: a NaN or infinite coordinate (naming the atom) or box entry.
    """
    return energy_and_forces(potential, positions, box, create_graph=create_graph)[1]
