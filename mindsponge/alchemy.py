"""Alchemical free-energy states: decouple or annihilate a region (a ligand) from its surroundings.

The alchemical Hamiltonian is openmmtools' (``openmmtools.alchemy.AbsoluteAlchemicalFactory``), the
reference implementation of the field, used as it is: :func:`alchemical_system` builds the alchemical
OpenMM ``System`` and :func:`alchemical_force_field` imports it with
:func:`mindsponge.interop.openmm.from_openmm`, so mindsponge's energies are openmmtools' at every
state (the tests compare them to 1e-6 relative in float64, energies and forces). What the factory
does:

- Lennard-Jones of the region with its surroundings becomes Beutler's soft core, scaled by
  ``lambda_sterics``::

      U = lambda^a 4 eps x (x - 1),  x = (sigma / r_eff)^6,
      r_eff = sigma (alpha (1 - lambda)^b + (r / sigma)^c)^(1/c)

  with openmmtools' defaults ``alpha = 0.5``, ``a = b = 1``, ``c = 6`` (global parameters
  ``softcore_alpha``, ``softcore_a``...), the long-range dispersion correction following lambda;
- Coulomb is scaled separately by ``lambda_electrostatics``. With PME (the default "exact"
  treatment) the region's charges become ``lambda q_i`` in the ``NonbondedForce`` through parameter
  offsets, so the direct, exception, exclusion and reciprocal-space parts are all exact at every
  lambda; the region's internal electrostatics then scale with it (annihilation; decoupled
  electrostatics are refused under exact PME, as openmmtools does). With reaction field
  (``CutoffPeriodic``, ``CutoffNonPeriodic``) or without cutoff (``NoCutoff``), Coulomb of the region
  is a Custom force scaled by lambda (openmmtools' "switched" reaction field: ``c_rf = 0`` and a
  switching function over the last ``switch_width``);
- ``annihilate_sterics`` / ``annihilate_electrostatics``: whether interactions *within* the region
  are scaled too (annihilation) or kept at full strength (decoupling).

States are global parameters of the force field: :class:`AlchemicalState` (``lambda_sterics``,
``lambda_electrostatics`` in ``[0, 1]``) applied with :meth:`AlchemicalState.apply_to`, or
``force_field.set_global_parameters(lambda_sterics=...)`` directly. :func:`lambda_schedule` gives
the usual path (electrostatics off first, then sterics). :func:`reduced_potentials` evaluates a
batch of configurations in every state, the ``(K, N)`` matrix ``u_kn`` that MBAR needs, and
:func:`mbar` runs pymbar on it (free energies, uncertainties, overlap matrix).

Example::

    ff = ms.alchemy.alchemical_force_field(openmm_system, ligand_atoms)
    states = ms.alchemy.lambda_schedule(electrostatics=5, sterics=9)
    u_kn = ms.alchemy.reduced_potentials(ff, states, samples, boxes, temperature=300.0)   # (K, N)
    result = ms.alchemy.mbar(u_kn, samples_per_state)          # result.delta_f[0, -1] kT

openmmtools (and pymbar for :func:`mbar`) are imported only when these functions run: the ``fe``
extra of the package installs them. Units: nm, kJ/mol, K, bar; reduced potentials in kT.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from common.errors import ArgumentTypeError, ConfigurationError, UnknownNameError
from common.units import BAR_NM3_TO_KJ_PER_MOL, BOLTZMANN_MD
from mindsponge.forcefield.base import ForceField, check_inputs
from mindsponge.free_energy_analysis import refuse_nan

__all__ = [
    "AlchemicalRegion",
    "AlchemicalState",
    "MBARResult",
    "StateSamples",
    "alchemical_force_field",
    "alchemical_system",
    "lambda_schedule",
    "mbar",
    "reduced_potentials",
    "sample_states",
    "force_fields_at",
]

PME_TREATMENTS = ("exact", "direct-space", "coulomb")
REACTION_FIELD_TREATMENTS = ("switched", "shifted")


@dataclass(frozen=True)
class AlchemicalRegion:
    """The atoms to decouple or annihilate and how (openmmtools' ``AlchemicalRegion``).

    Attributes:
        atoms: indices of the region's atoms (particles of the OpenMM System), not empty, distinct.
        annihilate_electrostatics: scale the Coulomb interactions within the region too (``True``) or
            keep them (decouple, ``False``; not possible under exact PME).
        annihilate_sterics: scale the Lennard-Jones interactions within the region too (``True``) or
            keep them (decouple, ``False``, the default).
        softcore_alpha: ``alpha`` of the soft core (dimensionless; openmmtools' default 0.5).
        softcore_a, softcore_b, softcore_c: exponents of the soft core (1, 1, 6: Beutler et al. 1994).
    """

    atoms: tuple
    annihilate_electrostatics: bool = True
    annihilate_sterics: bool = False
    softcore_alpha: float = 0.5
    softcore_a: float = 1.0
    softcore_b: float = 1.0
    softcore_c: float = 6.0

    def __post_init__(self):
        atoms = self.atoms
        if isinstance(atoms, Tensor | np.ndarray):
            atoms = atoms.tolist()
        if isinstance(atoms, numbers.Integral) or not isinstance(atoms, Sequence | range | set | frozenset):
            raise ArgumentTypeError(
                "AlchemicalRegion: atoms must be a sequence of atom indices, got "
                f"{type(self.atoms).__name__}")
        atoms = list(atoms)
        if not atoms:
            raise ConfigurationError(
                "AlchemicalRegion: atoms is empty; give the indices of the region's atoms")
        bad = [atom for atom in atoms if isinstance(atom, bool) or not isinstance(atom, numbers.Integral)]
        if bad:
            raise ArgumentTypeError(f"AlchemicalRegion: atoms must be integers, got {bad[:5]}")
        if len(set(atoms)) != len(atoms):
            repeated = sorted({atom for atom in atoms if atoms.count(atom) > 1})
            raise ConfigurationError(f"AlchemicalRegion: atoms {repeated[:5]} are listed more than once")
        if min(atoms) < 0:
            raise ConfigurationError(f"AlchemicalRegion: atom index {min(atoms)} is negative")
        if not (isinstance(self.softcore_alpha, numbers.Real) and self.softcore_alpha >= 0):
            raise ConfigurationError(
                "AlchemicalRegion: softcore_alpha must be a non-negative number, got "
                f"{self.softcore_alpha!r}")
        object.__setattr__(self, "atoms", tuple(int(atom) for atom in sorted(atoms)))

    def check(self, n_particles: int) -> None:
        """Refuse atoms outside ``[0, n_particles)`` (ConfigurationError naming the first)."""
        outside = [atom for atom in self.atoms if atom >= n_particles]
        if outside:
            raise ConfigurationError(
                f"AlchemicalRegion: atom {outside[0]} is outside the System's {n_particles} particles "
                f"(indices 0..{n_particles - 1})")


def _region(atoms, **options) -> AlchemicalRegion:
    if isinstance(atoms, AlchemicalRegion):
        if options:
            raise ConfigurationError(
                f"alchemical_force_field: give options {sorted(options)} in the AlchemicalRegion, not both")
        return atoms
    return AlchemicalRegion(atoms, **options)


@contextlib.contextmanager
def _quiet_import():
    """Import openmmtools and pymbar without their notices on stdout (pymbar's missing JAX)."""
    pymbar_log = logging.getLogger("pymbar")
    level = pymbar_log.level
    pymbar_log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        pymbar_log.setLevel(level)


def _openmmtools_alchemy():
    with _quiet_import():
        try:
            from openmmtools import alchemy
        except ImportError as error:  # pragma: no cover - depends on the installation
            raise ImportError(
                "mindsponge.alchemy needs openmmtools: pip install 'mindscience-torch[fe]'") from error
    return alchemy


def alchemical_system(openmm_system, region: AlchemicalRegion, *, pme_treatment: str = "exact",
                      reaction_field_treatment: str = "switched", switch_width: float = 0.1,
                      alchemical_dispersion_correction: bool = True):
    """The alchemical OpenMM ``System`` of ``region``, built by openmmtools' ``AbsoluteAlchemicalFactory``.

    Args:
        openmm_system: an ``openmm.System`` (not modified).
        region: :class:`AlchemicalRegion`.
        pme_treatment: openmmtools' ``alchemical_pme_treatment``: ``"exact"`` (charges scaled in the
            PME sum, the default), ``"direct-space"`` or ``"coulomb"`` (approximations).
        reaction_field_treatment: ``"switched"`` (``c_rf = 0`` with a switching function, the default) or
            ``"shifted"``.
        switch_width: nm, the width of the electrostatics switching function.
        alchemical_dispersion_correction: let the long-range dispersion correction follow lambda.

    Returns:
        an ``openmm.System`` with the global parameters ``lambda_sterics``, ``lambda_electrostatics``
        and ``softcore_*``.

    Raises:
        ConfigurationError: atoms out of range or virtual sites, an unknown treatment, decoupled
            electrostatics under exact PME.
    """
    import openmm
    from openmm import unit

    if not isinstance(region, AlchemicalRegion):
        raise ArgumentTypeError(
            f"alchemical_system: region must be an AlchemicalRegion, got {type(region).__name__}")
    region.check(openmm_system.getNumParticles())
    sites = [atom for atom in region.atoms if openmm_system.isVirtualSite(atom)]
    if sites:
        raise ConfigurationError(f"AlchemicalRegion: atom {sites[0]} is a virtual site; alchemical virtual "
                                 "sites are not supported (leave them out of the region)")
    if pme_treatment not in PME_TREATMENTS:
        raise ConfigurationError(f"alchemical_system: pme_treatment must be one of {PME_TREATMENTS}, "
                                 f"got {pme_treatment!r}")
    if reaction_field_treatment not in REACTION_FIELD_TREATMENTS:
        raise ConfigurationError(f"alchemical_system: reaction_field_treatment must be one of "
                                 f"{REACTION_FIELD_TREATMENTS}, got {reaction_field_treatment!r}")
    pme = any(isinstance(force, openmm.NonbondedForce)
              and force.getNonbondedMethod() in (openmm.NonbondedForce.PME, openmm.NonbondedForce.Ewald)
              for force in openmm_system.getForces())
    if pme and pme_treatment == "exact" and not region.annihilate_electrostatics:
        raise ConfigurationError(
            "alchemical_system: decoupled electrostatics (annihilate_electrostatics=False) is not possible "
            "with the exact PME treatment, which scales the region's charges; annihilate them, or choose "
            "pme_treatment='direct-space' (an approximation)")
    alchemy = _openmmtools_alchemy()
    openmmtools_region = alchemy.AlchemicalRegion(
        alchemical_atoms=list(region.atoms),
        annihilate_electrostatics=region.annihilate_electrostatics,
        annihilate_sterics=region.annihilate_sterics,
        softcore_alpha=region.softcore_alpha, softcore_a=region.softcore_a, softcore_b=region.softcore_b,
        softcore_c=region.softcore_c)
    factory = alchemy.AbsoluteAlchemicalFactory(
        alchemical_pme_treatment=pme_treatment, alchemical_rf_treatment=reaction_field_treatment,
        switch_width=switch_width * unit.nanometer,
        disable_alchemical_dispersion_correction=not alchemical_dispersion_correction)
    return factory.create_alchemical_system(openmm_system, openmmtools_region)


def alchemical_force_field(openmm_system, atoms, *, topology=None, dtype: torch.dtype = torch.float64,
                           pme_treatment: str = "exact", reaction_field_treatment: str = "switched",
                           switch_width: float = 0.1, alchemical_dispersion_correction: bool = True,
                           **region_options) -> ForceField:
    """A :class:`~mindsponge.forcefield.ForceField` of ``openmm_system`` with an alchemical region.

    Args:
        openmm_system: an ``openmm.System``.
        atoms: an :class:`AlchemicalRegion`, or the region's atom indices (then ``region_options``:
            ``annihilate_electrostatics=True``, ``annihilate_sterics=False``, ``softcore_alpha=0.5``...).
        topology, dtype: as :func:`mindsponge.interop.openmm.from_openmm`.
        pme_treatment, reaction_field_treatment, switch_width, alchemical_dispersion_correction: as
            :func:`alchemical_system`.

    Returns:
        the force field at ``lambda_sterics = lambda_electrostatics = 1`` (fully interacting); set states
        with :class:`AlchemicalState` or ``set_global_parameters``.
    """
    from mindsponge.interop.openmm import from_openmm

    region = _region(atoms, **region_options)
    system = alchemical_system(openmm_system, region, pme_treatment=pme_treatment,
                               reaction_field_treatment=reaction_field_treatment, switch_width=switch_width,
                               alchemical_dispersion_correction=alchemical_dispersion_correction)
    return from_openmm(system, topology=topology, dtype=dtype)


def _check_lambda(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) <= 1.0:
        raise ConfigurationError(f"AlchemicalState: {name} must be a number in [0, 1], got {value!r}")
    return float(value)


@dataclass(frozen=True)
class AlchemicalState:
    """One alchemical state: how strongly the region interacts with its surroundings.

    Attributes:
        lambda_sterics: Lennard-Jones (soft core) scaling in ``[0, 1]``; 1 fully interacting.
        lambda_electrostatics: Coulomb scaling in ``[0, 1]``; 1 fully interacting.
    """

    lambda_sterics: float = 1.0
    lambda_electrostatics: float = 1.0

    def __post_init__(self):
        for name in ("lambda_sterics", "lambda_electrostatics"):
            object.__setattr__(self, name, _check_lambda(name, getattr(self, name)))

    @property
    def parameters(self) -> dict[str, float]:
        """The state as global parameters of the force field."""
        return {"lambda_sterics": self.lambda_sterics, "lambda_electrostatics": self.lambda_electrostatics}

    def apply_to(self, force_field: ForceField) -> ForceField:
        """Set this state's lambdas in ``force_field`` (in place); returns it.

        Raises:
            UnknownNameError: the force field has no such parameters (not built by
                :func:`alchemical_force_field`).
        """
        known = force_field.global_parameters
        missing = sorted(set(self.parameters) - set(known))
        if missing:
            raise UnknownNameError(
                f"AlchemicalState: the force field has no global parameter {missing}; build it with "
                f"mindsponge.alchemy.alchemical_force_field (its global parameters: {sorted(known)})")
        return force_field.set_global_parameters(self.parameters)


def lambda_schedule(electrostatics: int = 5, sterics: int = 9) -> list[AlchemicalState]:
    """The usual path from the fully interacting state to the non-interacting one: Coulomb switched
    off first at full Lennard-Jones (``electrostatics`` equally spaced states from 1 to 0), then
    Lennard-Jones at zero charge (``sterics`` states from 1 to 0, the first shared).

    Returns:
        ``electrostatics + sterics - 1`` states, fully interacting first.
    """
    for count, name in ((electrostatics, "electrostatics"), (sterics, "sterics")):
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 2:
            raise ConfigurationError(f"lambda_schedule: {name} must be an integer >= 2, got {count!r}")
    states = [AlchemicalState(1.0, float(value)) for value in np.linspace(1.0, 0.0, electrostatics)]
    states += [AlchemicalState(float(value), 0.0) for value in np.linspace(1.0, 0.0, sterics)[1:]]
    return states


def _state_parameters(states, known: Mapping[str, float]) -> list[dict[str, float]]:
    parameters = []
    for number, state in enumerate(states):
        if isinstance(state, AlchemicalState):
            values = state.parameters
        elif isinstance(state, Mapping):
            values = {str(name): value for name, value in state.items()}
        else:
            raise ArgumentTypeError(f"reduced_potentials: state {number} must be an AlchemicalState or a "
                                    f"mapping of global parameters, got {type(state).__name__}")
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UnknownNameError(f"reduced_potentials: state {number} sets {unknown}, which the force "
                                   f"field does not have (its global parameters: {sorted(known)})")
        parameters.append(values)
    if not parameters:
        raise ConfigurationError("reduced_potentials: states is empty")
    return parameters


def _samples(force_field: ForceField, positions, box) -> tuple[Tensor, Tensor | None]:
    """Positions ``(S, N, 3)`` and boxes ``(S, 3, 3)`` or ``None``, in the force field's dtype."""
    if not isinstance(positions, Tensor):
        positions = torch.as_tensor(np.asarray(positions))
    dtype = next((buffer.dtype for buffer in force_field.buffers() if buffer.is_floating_point()),
                 positions.dtype if positions.is_floating_point() else torch.float64)
    positions = positions.to(dtype)
    if positions.ndim == 2:
        positions = positions.unsqueeze(0)
    if positions.ndim != 3 or positions.shape[-1] != 3:
        raise ConfigurationError(
            f"reduced_potentials: positions must be (S, N, 3) or (N, 3) nm, got {tuple(positions.shape)}")
    if box is not None:
        box = torch.as_tensor(box).to(dtype)
        if box.shape == (3, 3):
            box = box.expand(len(positions), 3, 3)
        if box.shape != (len(positions), 3, 3):
            raise ConfigurationError(
                f"reduced_potentials: box must be (3, 3) or ({len(positions)}, 3, 3) nm, got "
                f"{tuple(box.shape)}")
    return positions, box


def reduced_potentials(force_field: ForceField, states, positions, box=None, *, temperature: float,
                       pressure: float | None = None) -> Tensor:
    """Reduced potentials of configurations in every state: ``u[k, n] = (U_k(x_n) + p V_n) / (k_B T)``.

    Terms whose global parameters no state sets are evaluated once per configuration; the others once
    per state and configuration (states in the outer loop, so each term keeps its caches while the
    configurations go by). The force field's parameters are left as they were.

    Args:
        force_field: a :class:`~mindsponge.forcefield.ForceField` with global parameters.
        states: sequence of :class:`AlchemicalState` or mappings of global parameter values (any of the
            force field's: ``{"k": 500.0}`` for a restraint's force constant).
        positions: ``(S, N, 3)`` (or ``(N, 3)``) nm.
        box: ``(S, 3, 3)``, ``(3, 3)`` nm, or ``None``.
        temperature: K.
        pressure: bar, adds ``p V`` (constant-pressure states), or ``None``.

    Returns:
        ``(K, S)`` float64 tensor, kT.

    Raises:
        UnknownNameError: a state sets a parameter the force field does not have.
        ConfigurationError: bad shapes, a non-positive temperature, no states.
    """
    if not isinstance(force_field, ForceField):
        raise ArgumentTypeError(f"reduced_potentials: force_field must be a ForceField, got "
                                f"{type(force_field).__name__}")
    if not (isinstance(temperature, numbers.Real) and math.isfinite(temperature) and temperature > 0):
        raise ConfigurationError(
            f"reduced_potentials: temperature must be a positive number of K, got {temperature!r}")
    original = force_field.global_parameters
    parameters = _state_parameters(states, original)
    positions, boxes = _samples(force_field, positions, box)
    varied = set().union(*parameters)
    dependent = [term for term in force_field.terms if set(term.global_parameters) & varied]
    fixed = [term for term in force_field.terms if term not in dependent and not term.is_empty]
    beta = 1.0 / (BOLTZMANN_MD * float(temperature))
    prepared = []
    for index, at in enumerate(positions):
        frame_box = None if boxes is None else boxes[index]
        check_inputs(at, frame_box)
        prepared.append(at if force_field.virtual_sites is None else force_field.virtual_sites(at))
    base = torch.zeros(len(positions), dtype=torch.float64)
    with torch.no_grad():
        for index, at in enumerate(prepared):
            frame_box = None if boxes is None else boxes[index]
            base[index] = sum(float(term(at, frame_box)) for term in fixed)
            if pressure is not None and frame_box is not None:
                volume = float(torch.linalg.det(frame_box).abs())
                base[index] += float(pressure) * BAR_NM3_TO_KJ_PER_MOL * volume
        reduced = torch.empty((len(parameters), len(positions)), dtype=torch.float64)
        try:
            for state, values in enumerate(parameters):
                force_field.set_global_parameters(values)
                for index, at in enumerate(prepared):
                    frame_box = None if boxes is None else boxes[index]
                    reduced[state, index] = sum(float(term(at, frame_box)) for term in dependent)
        finally:
            force_field.set_global_parameters(original)
    return beta * (reduced + base)


@dataclass(frozen=True)
class MBARResult:
    """Free energies of a family of states from MBAR (pymbar).

    Attributes:
        delta_f: ``(K, K)`` ``f_j - f_i`` in kT.
        d_delta_f: ``(K, K)`` its statistical uncertainty (one standard deviation), kT.
        overlap: ``(K, K)`` MBAR's overlap matrix (rows sum to 1; a neighbour overlap well below 0.03
            means states too far apart).
    """

    delta_f: np.ndarray
    d_delta_f: np.ndarray
    overlap: np.ndarray

    def difference(self, first: int = 0, last: int = -1) -> tuple[float, float]:
        """``(f_last - f_first, its uncertainty)`` in kT."""
        return float(self.delta_f[first, last]), float(self.d_delta_f[first, last])


def mbar(u_kn, samples_per_state) -> MBARResult:
    """Free energies of all states by MBAR (pymbar 4) from a reduced-potential matrix.

    Args:
        u_kn: ``(K, N)`` reduced potentials (kT) of all ``N`` samples in every state
            (:func:`reduced_potentials`), the samples ordered by the state they were drawn from.
        samples_per_state: ``(K,)`` how many samples came from each state (zeros allowed).

    Returns:
        :class:`MBARResult`; a NaN in ``u_kn`` raises :class:`common.errors.DataError` naming its state and
        sample (``+inf`` is allowed).
    """
    u_kn = np.asarray(u_kn.detach().cpu() if isinstance(u_kn, Tensor) else u_kn, dtype=np.float64)
    counts = np.asarray(samples_per_state, dtype=np.int64).reshape(-1)
    if u_kn.ndim != 2 or len(counts) != len(u_kn) or counts.sum() != u_kn.shape[1] or (counts < 0).any():
        raise ConfigurationError(
            f"mbar: u_kn must be (K, N) with samples_per_state (K,) summing to N, got u_kn {u_kn.shape} and "
            f"samples_per_state {counts.tolist()}")
    refuse_nan(u_kn, np.repeat(np.arange(len(counts)), counts), "mbar")
    with _quiet_import():
        import pymbar

        estimator = pymbar.MBAR(u_kn, counts)
        result = estimator.compute_free_energy_differences()
        overlap = estimator.compute_overlap()["matrix"]
    return MBARResult(np.asarray(result["Delta_f"]), np.asarray(result["dDelta_f"]), np.asarray(overlap))


def force_fields_at(force_field: ForceField, states) -> list[ForceField]:
    """One copy of ``force_field`` per state, each set to it: the potentials of
    :class:`~mindsponge.replica_exchange.ThermodynamicState` for Hamiltonian replica exchange over
    alchemical states (``ThermodynamicState(temperature, potential=copy)``).

    States that give a term the same values of its global parameters share one copy of it (the same
    object): the terms without lambdas (bonds, restraints) are copied once for all states, the
    electrostatics terms once per value of ``lambda_electrostatics``, and so on. The replica
    exchange's energy matrix evaluates each distinct term once per configuration, so that the PME
    sum of a 14-state schedule with 5 electrostatics values runs 5 times per sample, not 14.
    ``force_field`` itself shares nothing with the copies; change a copy's parameters through
    another call of this function, not in place (its shared terms would change in the other states).
    """
    import copy

    parameters = _state_parameters(states, force_field.global_parameters)
    term_copies: dict[tuple, object] = {}  # (term index, its parameter values) -> the copy at them
    copies = []
    for values in parameters:
        memo = {}
        for index, term in enumerate(force_field.terms):
            own = tuple(sorted((name, float(value)) for name, value in values.items()
                               if name in term.global_parameters))
            if (index, own) not in term_copies:
                term_copy = copy.deepcopy(term)
                for name, value in own:
                    term_copy.set_global_parameter(name, value)
                term_copies[(index, own)] = term_copy
            memo[id(term)] = term_copies[(index, own)]
        copies.append(copy.deepcopy(force_field, memo).set_global_parameters(values))
    return copies


@dataclass(frozen=True)
class StateSamples:
    """Reduced potentials of samples drawn in a family of states, saved so a run can be re-analysed.

    Attributes:
        u_kn: ``(K, N)`` kT, every sample in every state; samples ordered by the state they came from.
        samples_per_state: ``(K,)`` int.
        states: the states as global-parameter dicts.
        temperature: K.
    """

    u_kn: np.ndarray
    samples_per_state: np.ndarray
    states: tuple
    temperature: float

    def mbar(self) -> MBARResult:
        """:func:`mbar` of these samples."""
        return mbar(self.u_kn, self.samples_per_state)

    def save(self, path) -> None:
        """Write an ``.npz`` file (``u_kn``, ``samples_per_state``, ``state_names``, ``state_values``,
        ``temperature``) atomically."""
        import os

        names = sorted(set().union(*self.states))
        values = np.array([[state.get(name, np.nan) for name in names] for state in self.states])
        temporary = f"{path}.partial.npz"
        np.savez(temporary, u_kn=self.u_kn, samples_per_state=self.samples_per_state,
                 state_names=np.array(names), state_values=values, temperature=self.temperature)
        os.replace(temporary, path)

    @classmethod
    def load(cls, path) -> StateSamples:
        """Read a file written by :meth:`save`."""
        with np.load(path) as data:
            names = [str(name) for name in data["state_names"]]
            states = tuple({name: float(value) for name, value in zip(names, row) if not np.isnan(value)}
                           for row in data["state_values"])
            return cls(data["u_kn"], data["samples_per_state"], states, float(data["temperature"]))


def sample_states(system, force_field: ForceField, states, integrator, *, steps: int, every: int,
                  equilibration: int = 0, path=None, **simulation_options) -> StateSamples:
    """Independent windows: sample every state by MD, then every sample in every state (``u_kn``).

    Each state runs its own :class:`~mindsponge.simulation.Simulation` (a copy of the force field set
    to the state, a copy of the integrator; constant volume) from ``system``: ``equilibration`` steps,
    then ``steps`` steps with a sample every ``every`` steps. For exchanges between the states, run
    :class:`~mindsponge.replica_exchange.ReplicaExchange` over :func:`force_fields_at` instead.

    Args:
        system: :class:`~mindsponge.system.System`, the starting configuration.
        force_field: :class:`~mindsponge.forcefield.ForceField` with the states' global parameters.
        states: :class:`AlchemicalState` objects or global-parameter mappings.
        integrator: a thermostatted integrator with ``temperature`` (K), e.g. ``LangevinMiddle``.
        steps, every, equilibration: numbers of steps.
        path: optional ``.npz`` file to save the result in (:meth:`StateSamples.save`).
        simulation_options: passed to each Simulation (``constraints=``, ``precision=``, ``seed=``...).

    Returns:
        :class:`StateSamples`.
    """
    import copy

    from common import checks
    from mindsponge.simulation import Simulation

    checks.positive_int(steps, "sample_states: steps")
    checks.positive_int(every, "sample_states: every")
    temperature = getattr(integrator, "temperature", None)
    if temperature is None:
        raise ConfigurationError("sample_states: the integrator must be thermostatted (have a temperature)")
    simulation_options = {"progress": False, "barostat": None, **simulation_options}
    parameters = _state_parameters(states, force_field.global_parameters)
    positions, boxes, counts = [], [], []
    for values in parameters:
        state_field = copy.deepcopy(force_field).set_global_parameters(values)
        simulation = Simulation(system, state_field, copy.deepcopy(integrator), **simulation_options)
        simulation.set_velocities(temperature=float(temperature), seed=simulation_options.get("seed", 0))
        if equilibration:
            simulation.run(equilibration)
        for _ in range(steps // every):
            simulation.run(every)
            positions.append(simulation.state.positions.detach().clone())
            boxes.append(None if simulation.state.box is None else simulation.state.box.detach().clone())
        counts.append(steps // every)
    box = None if boxes[0] is None else torch.stack(boxes)
    u_kn = reduced_potentials(force_field, parameters, torch.stack(positions), box, temperature=temperature)
    result = StateSamples(u_kn.numpy(), np.asarray(counts, dtype=np.int64), tuple(parameters),
                          float(temperature))
    if path is not None:
        result.save(path)
    return result
