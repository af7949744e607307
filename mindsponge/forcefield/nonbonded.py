"""Non-bonded interactions: Lennard-Jones and Coulomb, with the semantics of OpenMM's ``NonbondedForce``.

Every pair of atoms ``i < j`` that is neither excluded nor an exception interacts through::

    E_LJ(r)   = 4 eps_ij ((sigma_ij / r)^12 - (sigma_ij / r)^6) * S(r)
    sigma_ij  = (sigma_i + sigma_j) / 2,  eps_ij = sqrt(eps_i eps_j)     (Lorentz-Berthelot)
    S(r)      = 1 - 10 x^3 + 15 x^4 - 6 x^5,  x = (r - r_s) / (r_c - r_s)  for r_s < r < r_c
                (only with ``switch_distance`` r_s; otherwise S = 1)

and a Coulomb term ``f q_i q_j g(r)`` (``f`` = 1/(4 pi eps0) =
:data:`common.units.COULOMB_MD` = 138.93545764438198 kJ/mol nm/e^2, OpenMM 8.6's value) that
depends on ``method``:

========================  =====================================  ====================================
``method``                ``g(r)`` for ``r < r_c`` (0 beyond)    OpenMM equivalent
========================  =====================================  ====================================
``"nocutoff"``            ``1/r`` for all pairs, no box          ``NoCutoff``
``"reaction_field"``      ``1/r + k_rf r^2 - c_rf``              ``CutoffNonPeriodic`` (box ``None``) or
                                                                 ``CutoffPeriodic`` (with a box)
``"cutoff"``              ``1/r - 1/r_c``                        the same with reaction-field
                                                                 dielectric 1 (``k_rf = 0``)
``"ewald"``, ``"pme"``    ``erfc(alpha r)/r`` + reciprocal sum   ``Ewald``, ``PME``
========================  =====================================  ====================================

with ``k_rf = (eps_rf - 1) / ((2 eps_rf + 1) r_c^3)`` and ``c_rf = 3 eps_rf / ((2 eps_rf + 1) r_c)``.
Lennard-Jones is truncated at ``r_c`` (not shifted) for every method except ``"nocutoff"``.
Ewald and PME add the reciprocal-space sum (:mod:`mindsponge.forcefield.ewald`), the self
energy ``-f alpha/sqrt(pi) sum_i q_i^2`` and, for every excluded pair and every exception
pair, ``-f q_i q_j erf(alpha r)/r`` (minimum image), which removes what the reciprocal sum
counted for them. As in OpenMM, excluded pairs get no reaction-field term.

**Exceptions** (OpenMM ``NonbondedForce`` exceptions with non-zero parameters, e.g. scaled 1-4
pairs) replace the normal interaction of their pair (they are excluded from it) by::

    f qq_ij / r + 4 eps_ij ((sigma_ij / r)^12 - (sigma_ij / r)^6)

with their own ``qq_ij``, ``sigma_ij``, ``eps_ij``, without cutoff, switching or reaction field,
and without periodic images (OpenMM's default; ``exceptions_periodic=True`` matches
``setExceptionsUsePeriodicBoundaryConditions(True)``). Exceptions with all-zero parameters are
plain ``exclusions``.

**Long-range dispersion correction** (with a box, any method but ``"nocutoff"``): ``C / V``
with OpenMM's coefficient (``NonbondedForceImpl::calcDispersionCorrection``, including the
switching-function integral), computed once from the particle parameters; it ignores
exclusions and exceptions, as OpenMM does, and is a constant with respect to the parameters.

**Named components** (:meth:`Nonbonded.energy_terms`), each ``()`` kJ/mol:

- ``"lennard_jones"``: LJ of all listed pairs within the cutoff, plus the LJ part of exceptions.
- ``"coulomb_direct"``: the direct-space Coulomb of pairs within the cutoff (``g(r)`` above), plus
  the Coulomb part of exceptions.
- ``"coulomb_reciprocal"`` (Ewald/PME): the reciprocal-space sum plus the self energy
  ``-f alpha/sqrt(pi) sum_i q_i^2`` plus, for a system with net charge ``Q``, the energy of
  its neutralising background ``-f pi Q^2 / (2 V alpha^2)``. This is exactly what OpenMM
  reports for the force group given to ``NonbondedForce.setReciprocalSpaceForceGroup``
  (OpenMM puts the self and background energies there).
- ``"coulomb_exclusions"`` (Ewald/PME, when there are excluded or exception pairs): the
  ``-f q_i q_j erf(alpha r)/r`` corrections of all excluded and exception pairs.
- ``"dispersion_correction"`` (periodic, when enabled): ``C / V``.

OpenMM's direct-space part of the ``NonbondedForce`` (its own force group) equals
``lennard_jones + coulomb_direct + coulomb_exclusions + dispersion_correction``.

**Forces.** By default energies and forces come from one pass: pair terms keep the per-pair
force factors and scatter them only when a gradient is asked for (a custom
:class:`torch.autograd.Function`), and PME interpolates its forces from the grid, so
``torch.autograd.grad(E, positions)`` costs little more than the energy. These analytic
gradients are first derivatives with respect to positions only. When the forces themselves
must be differentiable (``create_graph=True``: force matching, Hessians), the backward pass
recomputes the energy from differentiable operations and differentiates that (slower, same
values). With ``analytic_forces=False``, or automatically when a parameter or the box requires
grad, the energy is always built from differentiable operations (parameter gradients).

**Backends.** The pair sums run through one of three backends with a common interface
(:mod:`mindsponge.forcefield.nonbonded_backends`): differentiable torch operations (parameter
gradients, ``create_graph``), torch with analytic forces (CUDA, ``compiled=False``), and, for CPU
tensors with analytic forces, the C++ kernels of :mod:`mindsponge._kernels` (compiled on first use
by :mod:`common.extensions`, about a minute once per machine): the direct-space sum over the
neighbour list in compressed rows, the exclusion and exception corrections, the cell-list search,
and PME charge spreading and force gathering. The compiled real-space Ewald ``erfc`` is a
float32 Chebyshev fit (relative error below 1.2e-7) or libm in float64; energies are accumulated
in float64. The backends are built once per term; each call only picks the analytic or the
differentiable one and whether the kernels apply (``compiled=False``,
``MINDSCIENCE_NO_EXTENSIONS=1``, no compiler, CUDA select torch). All give the same values to
round-off; the tests compare them with each other and with OpenMM's Reference platform.
Measured speeds: ``benchmarks/md_energy.py``, ``benchmarks/md_dynamics.py`` and the docs' benchmark page.

The net PME force is not exactly zero (B-spline interpolation is not translation invariant
on the grid); OpenMM has the same small net force.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from common.errors import ConfigurationError, UnknownNameError
from common.units import COULOMB_MD
from mindsponge import _kernels, space
from mindsponge.forcefield.base import EnergyTerm
from mindsponge.forcefield.ewald import (
    PMEReciprocal,
    ewald_alpha,
    ewald_kmax,
    ewald_reciprocal,
    pme_grid_size,
)
from mindsponge.forcefield.nonbonded_backends import CompiledBackend, TorchBackend, compiled_terms
from mindsponge.forcefield.pair_kernels import AnalyticEnergies, CoulombKind, PairSet, lj_first
from mindsponge.forcefield.parameter_offsets import ParameterOffsets
from mindsponge.neighbors import NeighborList, pair_keys

__all__ = ["Nonbonded", "NonbondedMethodError", "dispersion_coefficient"]

METHODS = ("nocutoff", "cutoff", "reaction_field", "ewald", "pme")


class NonbondedMethodError(ConfigurationError):
    """An option that the chosen non-bonded method does not support (e.g. PME without a box)."""



def dispersion_coefficient(sigma: Tensor, epsilon: Tensor, cutoff: float,
                           switch_distance: float | None = None) -> float:
    """OpenMM's long-range dispersion coefficient ``C`` (kJ/mol nm^3); the correction is ``C / V``.

    Atoms are grouped in classes of equal ``(sigma, epsilon)``; with the Lorentz-Berthelot
    combination of each pair of classes, ``C = 8 pi N^2 (<eps sigma^12>/(9 r_c^9) -
    <eps sigma^6>/(3 r_c^3) + <switch integral>)``, averages over the ``N (N + 1) / 2`` pairs
    (``NonbondedForceImpl::calcDispersionCorrection``).

    Args:
        sigma: ``(N,)`` nm. epsilon: ``(N,)`` kJ/mol. cutoff: nm.
        switch_distance: nm, or ``None`` without switching.
    """
    pairs = np.stack([sigma.detach().cpu().double().numpy(), epsilon.detach().cpu().double().numpy()], 1)
    classes, counts = np.unique(pairs, axis=0, return_counts=True)
    counts = counts.astype(np.float64)
    class_sigma = 0.5 * (classes[:, None, 0] + classes[None, :, 0])
    class_epsilon = np.sqrt(classes[:, None, 1] * classes[None, :, 1])
    weight = np.outer(counts, counts)
    np.fill_diagonal(weight, 0.0)
    weight = 0.5 * weight + np.diag(counts * (counts + 1) / 2)
    sigma6 = class_sigma**6
    total12 = (weight * class_epsilon * sigma6 * sigma6).sum()
    total6 = (weight * class_epsilon * sigma6).sum()
    total_switch = 0.0
    if switch_distance is not None:
        integral = (_switch_integral(cutoff, switch_distance, cutoff, class_sigma)
                    - _switch_integral(switch_distance, switch_distance, cutoff, class_sigma))
        total_switch = (weight * class_epsilon * integral).sum()
    n_atoms = float(len(sigma))
    n_interactions = n_atoms * (n_atoms + 1) / 2
    return float(8 * n_atoms * n_atoms * math.pi * (total12 / n_interactions / (9 * cutoff**9)
                                                   - total6 / n_interactions / (3 * cutoff**3)
                                                   + total_switch / n_interactions))


def _switch_integral(r, rs, rc, sigma):
    """Indefinite integral of the switched LJ tail (OpenMM's ``NonbondedForceImpl::evalIntegral``)."""
    a = 1.0 / (rc - rs)
    a2, a3 = a * a, a * a * a
    sig6 = sigma**6
    rs2, rs3 = rs * rs, rs**3
    r2, r3, r4, r5, r6, r9 = r**2, r**3, r**4, r**5, r**6, r**9
    return sig6 * a3 * ((
        sig6 * (
            + rs3 * 28 * (6 * rs2 * a2 + 15 * rs * a + 10)
            - r * rs2 * 945 * (rs2 * a2 + 2 * rs * a + 1)
            + r2 * rs * 1080 * (2 * rs2 * a2 + 3 * rs * a + 1)
            - r3 * 420 * (6 * rs2 * a2 + 6 * rs * a + 1)
            + r4 * 756 * (2 * rs * a2 + a)
            - r5 * 378 * a2)
        - r6 * (
            + rs3 * 84 * (6 * rs2 * a2 + 15 * rs * a + 10)
            - r * rs2 * 3780 * (rs2 * a2 + 2 * rs * a + 1)
            + r2 * rs * 7560 * (2 * rs2 * a2 + 3 * rs * a + 1))
    ) / (252 * r9)
        - math.log(r) * 10 * (6 * rs2 * a2 + 6 * rs * a + 1)
        + r * 15 * (2 * rs * a2 + a)
        - r2 * 3 * a2)


def _vector(values, name: str, n: int | None) -> Tensor:
    tensor = torch.as_tensor(values)
    if not tensor.is_floating_point():
        tensor = tensor.to(torch.get_default_dtype())
    if tensor.ndim != 1 or (n is not None and len(tensor) != n):
        expected = f"({n},)" if n is not None else "(X,)"
        raise ConfigurationError(f"{name} must be a {expected} tensor, got shape {tuple(tensor.shape)}")
    if not bool(torch.isfinite(tensor).all()):
        raise ConfigurationError(f"{name} contains NaN or infinite values")
    return tensor


def _check_cutoff(cutoff, switch_distance) -> None:
    if not (isinstance(cutoff, int | float) and cutoff > 0 and math.isfinite(cutoff)):
        raise ConfigurationError(f"cutoff must be a positive number of nm, got {cutoff!r}")
    if switch_distance is not None and not 0.0 <= switch_distance < cutoff:
        raise ConfigurationError(
            f"switch_distance must lie in [0, cutoff={cutoff}) nm, got {switch_distance!r}")


def _index_pairs(values, name: str, n_atoms: int) -> Tensor:
    if values is None:
        return torch.zeros((0, 2), dtype=torch.long)
    pairs = torch.as_tensor(values)
    if pairs.numel() == 0:
        return torch.zeros((0, 2), dtype=torch.long)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.is_floating_point():
        raise ConfigurationError(f"{name} must be an (E, 2) integer tensor of atom index pairs, got "
                         f"{tuple(pairs.shape)} {pairs.dtype}")
    if bool((pairs < 0).any()) or bool((pairs >= n_atoms).any()):
        raise ConfigurationError(f"{name} holds atom indices outside [0, {n_atoms})")
    if bool((pairs[:, 0] == pairs[:, 1]).any()):
        raise ConfigurationError(f"{name} pairs an atom with itself")
    return pairs.long()


class Nonbonded(EnergyTerm):
    """Lennard-Jones and Coulomb interactions, identical to OpenMM's ``NonbondedForce``.

    See the module docstring for the energy expressions and the named components.

    Args:
        charges: ``(N,)`` tensor, e.
        sigma: ``(N,)`` tensor, nm.
        epsilon: ``(N,)`` tensor, kJ/mol.
        method: ``"pme"``, ``"ewald"``, ``"reaction_field"``, ``"cutoff"`` or ``"nocutoff"``.
        cutoff: r_c, nm (ignored by ``"nocutoff"``).
        switch_distance: r_s in ``[0, r_c)``, nm, to switch LJ off smoothly; ``None`` for a plain
            truncation (OpenMM's ``setUseSwitchingFunction``). Ignored by ``"nocutoff"``, as OpenMM.
        dispersion_correction: add the long-range LJ correction (periodic methods only).
        ewald_tolerance: OpenMM's ``ewaldErrorTolerance``; gives ``alpha``, the PME grid and the
            Ewald ``kmax`` when those are not given.
        alpha: Ewald splitting parameter, 1/nm, or ``None`` (from the tolerance).
        pme_grid: ``(n_x, n_y, n_z)``, or ``None`` (from the tolerance and the box of each call,
            like OpenMM's ``calcPMEParameters``, fixed at the first call).
        pme_order: B-spline order of PME.
        ewald_kmax: ``(kx, ky, kz)`` for ``"ewald"``, or ``None`` (from the tolerance, like
            OpenMM's ``calcEwaldParameters``, fixed at the first call).
        reaction_field_dielectric: eps_rf of ``"reaction_field"``.
        exclusions: ``(E, 2)`` long tensor of pairs with no LJ and no Coulomb interaction.
        exceptions: ``(X, 2)`` long tensor of exception pairs (they are excluded from the
            normal interaction and computed with their own parameters, see module docstring).
        exception_charge_products: ``(X,)`` tensor, e^2.
        exception_sigma: ``(X,)`` tensor, nm.
        exception_epsilon: ``(X,)`` tensor, kJ/mol.
        exceptions_periodic: apply the minimum image to exception pairs.
        global_parameters: name to default value of the global parameters that scale parameter
            offsets (OpenMM's ``NonbondedForce.addGlobalParameter``); see
            :mod:`~mindsponge.forcefield.parameter_offsets` and :meth:`set_global_parameter`.
        particle_offsets: rows ``(parameter name, particle, charge scale, sigma scale, epsilon scale)``.
        exception_offsets: rows ``(parameter name, exception index into exceptions, charge-product
            scale, sigma scale, epsilon scale)``. With offsets, ``charges``... are the base values
            and the buffers ``charges``, ``sigma``... hold the effective ones.
        skin: Verlet skin of the neighbour list, nm.
        analytic_forces: compute forces analytically with the energy (see module docstring).
        compiled: with analytic forces on CPU, use the compiled kernels (:mod:`mindsponge._kernels`:
            pair forces, cell-list build, PME spreading and gathering) when they are available;
            ``False`` always uses the pure torch code (same results to round-off).
        name: name of the term (its components have the fixed names listed above).

    Raises:
        ValueError: inconsistent shapes, unknown method, bad cutoff or switching distance.
        NonbondedMethodError: a periodic method (``"ewald"``, ``"pme"``) called without a box.
    """

    def __init__(self, charges, sigma, epsilon, *, method: str = "pme", cutoff: float = 1.0,
                 switch_distance: float | None = None, dispersion_correction: bool = True,
                 ewald_tolerance: float = 5e-4, alpha: float | None = None,
                 pme_grid: tuple[int, int, int] | None = None, pme_order: int = 5,
                 ewald_kmax: tuple[int, int, int] | None = None,
                 reaction_field_dielectric: float = 78.3, exclusions=None, exceptions=None,
                 exception_charge_products=None, exception_sigma=None, exception_epsilon=None,
                 exceptions_periodic: bool = False, global_parameters=None, particle_offsets=(),
                 exception_offsets=(), skin: float = 0.1, analytic_forces: bool = True,
                 compiled: bool = True, name: str | None = None):
        super().__init__(name)
        if method not in METHODS:
            raise ConfigurationError(f"method must be one of {METHODS}, got {method!r}")
        charges = _vector(charges, "charges", None)
        n_atoms = len(charges)
        sigma = _vector(sigma, "sigma", n_atoms).to(charges.dtype)
        epsilon = _vector(epsilon, "epsilon", n_atoms).to(charges.dtype)
        if bool((epsilon < 0).any()) or bool((sigma < 0).any()):
            raise ConfigurationError("sigma and epsilon must be non-negative")
        if method == "nocutoff":
            switch_distance = None
        _check_cutoff(cutoff, switch_distance)
        self.method = method
        self.cutoff = float(cutoff)
        self.switch_distance = None if switch_distance is None else float(switch_distance)
        self.use_dispersion_correction = bool(dispersion_correction) and method != "nocutoff"
        self.ewald_tolerance = float(ewald_tolerance)
        self.pme_order = int(pme_order)
        self.exceptions_periodic = bool(exceptions_periodic)
        self.analytic_forces = bool(analytic_forces)
        self._compiled = bool(compiled)
        self.register_buffer("charges", charges)
        self.register_buffer("sigma", sigma)
        self.register_buffer("epsilon", epsilon)
        self._register_exceptions(exclusions, exceptions, exception_charge_products, exception_sigma,
                                  exception_epsilon)
        self.offsets = None
        if global_parameters or len(particle_offsets) or len(exception_offsets):
            self.offsets = ParameterOffsets(
                global_parameters or {}, torch.stack([charges, sigma, epsilon], 1),
                torch.stack([self.exception_charge_products, self.exception_sigma,
                             self.exception_epsilon], 1),
                particle_offsets, exception_offsets, context=f"Nonbonded {self.name!r}")
            self._apply_offsets()
        self._set_coulomb_constants(alpha, reaction_field_dielectric)
        self.pme_grid = None if pme_grid is None else tuple(int(n) for n in pme_grid)
        self.ewald_kmax = None if ewald_kmax is None else tuple(int(k) for k in ewald_kmax)
        self._pme: PMEReciprocal | None = None
        self.dispersion_coefficient = 0.0
        if self.use_dispersion_correction:
            self.dispersion_coefficient = dispersion_coefficient(sigma, epsilon, self.cutoff,
                                                                 self.switch_distance)
        self.neighbors = (None if method == "nocutoff" else
                          NeighborList(self.cutoff, skin=skin, exclusions=self.excluded_pairs,
                                       compiled=self._compiled))
        # the backends (nonbonded_backends), built once; the compiled one when its kernels first load
        self._autograd_backend = TorchBackend(keeps_factors=False)
        self._torch_backend = TorchBackend(keeps_factors=True)
        self._compiled_backend: CompiledBackend | None = None
        self._pair_sets: dict[str, tuple] = {}  # see _cached_pair_set

    def _register_exceptions(self, exclusions, exceptions, charge_products, sigma, epsilon) -> None:
        """Buffers of the exceptions, their parameters, and of every excluded pair (exclusions and
        exceptions, each once, ``(E, 2)`` with ``i < j``)."""
        n_atoms, dtype = len(self.charges), self.charges.dtype
        exceptions = _index_pairs(exceptions, "exceptions", n_atoms)
        n_exceptions = len(exceptions)
        self.register_buffer("exceptions", exceptions)
        for values, label in ((charge_products, "exception_charge_products"),
                              (sigma, "exception_sigma"), (epsilon, "exception_epsilon")):
            if values is None:
                if n_exceptions:
                    raise ConfigurationError(f"{label} is required with {n_exceptions} exceptions")
                values = torch.zeros(0)
            self.register_buffer(label, _vector(values, label, n_exceptions).to(dtype))
        exclusions = _index_pairs(exclusions, "exclusions", n_atoms)
        excluded = torch.cat([exclusions, exceptions])
        keys = torch.unique(pair_keys(excluded, n_atoms))
        self.register_buffer("excluded_pairs", torch.stack([keys // n_atoms, keys % n_atoms], 1))

    @property
    def global_parameters(self) -> dict[str, float]:
        """Current values of the global parameters (those of parameter offsets), by name."""
        return {} if self.offsets is None else self.offsets.global_parameters

    def set_global_parameter(self, name: str, value: float) -> None:
        """Set a global parameter and the effective parameters it scales (in place, as OpenMM's
        ``Context.setParameter``); the dispersion correction follows when offsets change LJ parameters.

        Raises:
            UnknownNameError: not a global parameter of this term.
        """
        if self.offsets is None:
            raise UnknownNameError(f"Nonbonded {self.name!r}: no global parameter {name!r}; it has none")
        self.offsets.set(name, value)
        self._apply_offsets()

    def _apply_offsets(self) -> None:
        self.offsets.write_to(self)
        if getattr(self, "use_dispersion_correction", False) and self.offsets.changes_lennard_jones:
            self.dispersion_coefficient = dispersion_coefficient(self.sigma, self.epsilon, self.cutoff,
                                                                 self.switch_distance)

    def _set_coulomb_constants(self, alpha: float | None, reaction_field_dielectric: float) -> None:
        """``alpha`` (1/nm) of Ewald and PME, ``krf`` (1/nm^3) and ``crf`` (1/nm) of the cutoff methods."""
        self.alpha = None
        if self.method in ("ewald", "pme"):
            self.alpha = float(alpha) if alpha is not None else ewald_alpha(self.cutoff, self.ewald_tolerance)
        elif self.method == "reaction_field":
            dielectric = float(reaction_field_dielectric)
            self.krf = (dielectric - 1.0) / ((2.0 * dielectric + 1.0) * self.cutoff**3)
            self.crf = 3.0 * dielectric / ((2.0 * dielectric + 1.0) * self.cutoff)
        elif self.method == "cutoff":
            self.krf, self.crf = 0.0, 1.0 / self.cutoff

    @property
    def compiled(self) -> bool:
        """Whether CPU analytic forces use the compiled kernels; settable (also sets the
        neighbour list's and PME's choice)."""
        return self._compiled

    @compiled.setter
    def compiled(self, value: bool) -> None:
        self._compiled = bool(value)
        if self.neighbors is not None:
            self.neighbors.compiled = self._compiled
        if self._pme is not None:
            self._pme.compiled = self._compiled

    def extra_repr(self) -> str:
        return (f"name={self.name!r}, n_atoms={len(self.charges)}, method={self.method!r}, "
                f"cutoff={self.cutoff}, switch_distance={self.switch_distance}, alpha={self.alpha}, "
                f"pme_grid={self.pme_grid}")

    # --- pair sets -------------------------------------------------------------------------

    def _cached_pair_set(self, kind: str, make, tensors: tuple) -> PairSet:
        """``make()``, kept from call to call while ``tensors`` (the buffers it is made of) are the same
        tensors, unchanged in place, and no graph is being built through them (parameter gradients)."""
        if torch.is_grad_enabled() and any(tensor.requires_grad for tensor in tensors):
            return make()
        versions = tuple(tensor._version for tensor in tensors)
        cached = self._pair_sets.get(kind)
        if (cached is None or cached[1] != versions
                or any(old is not new for old, new in zip(cached[0], tensors, strict=True))):
            cached = self._pair_sets[kind] = (tensors, versions, make())
        return cached[2]

    def _exception_pairs(self) -> PairSet:
        def make():
            first, second = self.exceptions[:, 0], self.exceptions[:, 1]
            return lj_first(first, second, COULOMB_MD * self.exception_charge_products,
                             self.exception_sigma, self.exception_epsilon)

        return self._cached_pair_set("exceptions", make, (self.exceptions, self.exception_charge_products,
                                                          self.exception_sigma, self.exception_epsilon))

    def _exclusion_pairs(self) -> PairSet:
        def make():
            first, second = self.excluded_pairs[:, 0], self.excluded_pairs[:, 1]
            charge_products = COULOMB_MD * self.charges[first] * self.charges[second]
            empty = charge_products.new_zeros(0)
            return PairSet(first, second, charge_products, empty, empty)

        return self._cached_pair_set("exclusions", make, (self.excluded_pairs, self.charges))

    def _reciprocal(self, positions: Tensor, box: Tensor, compute_forces: bool):
        if self.method == "pme":
            if self._pme is None:
                grid = self.pme_grid or pme_grid_size(self.alpha, box, self.ewald_tolerance)
                self.pme_grid = grid
                self._pme = PMEReciprocal(self.alpha, grid, self.pme_order, compiled=self.compiled)
            return self._pme(positions, self.charges, box, compute_forces)
        if self.ewald_kmax is None:
            self.ewald_kmax = ewald_kmax(self.alpha, box, self.ewald_tolerance)
        return ewald_reciprocal(positions, self.charges, box, self.alpha, self.ewald_kmax, compute_forces)

    # --- the compiled step loop ---------------------------------------------------------------

    def compiled_terms(self, kernels, box: Tensor | None = None):
        """This term as force terms of the compiled step loop (:mod:`mindsponge.step_loop`), or ``None``
        where it is called back from the loop instead: see
        :func:`mindsponge.forcefield.nonbonded_backends.compiled_terms`.

        Args:
            kernels: the compiled module.
            box: ``(3, 3)`` nm, the box the run starts in, or ``None``.
        """
        return compiled_terms(self, kernels, box)

    # --- energies --------------------------------------------------------------------------

    def _check(self, positions: Tensor, box: Tensor | None) -> Tensor | None:
        n_atoms = len(self.charges)
        if not isinstance(positions, Tensor) or positions.ndim != 2 or positions.shape != (n_atoms, 3):
            shape = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
            raise ConfigurationError(
                f"{self.name}: positions must be a ({n_atoms}, 3) tensor in nm, got {shape}")
        if self.method == "nocutoff":
            return None
        if box is None and self.method in ("ewald", "pme"):
            raise NonbondedMethodError(
                f"{self.name}: method {self.method!r} needs a periodic box, got box=None")
        if box is not None:
            space.check_box(box)
        return box

    def energy_terms(self, positions: Tensor, box: Tensor | None = None) -> dict[str, Tensor]:
        """Named energy components (see the module docstring), each ``()`` kJ/mol.

        Args:
            positions: ``(N, 3)`` tensor, nm.
            box: ``(3, 3)`` tensor, nm (rows are box vectors, reduced form), or ``None``.

        Returns:
            dict with ``"lennard_jones"``, ``"coulomb_direct"``, and depending on the method
            ``"coulomb_reciprocal"``, ``"coulomb_exclusions"``, ``"dispersion_correction"``.
        """
        box = self._check(positions, box)
        parameters_need_grad = any(t.requires_grad for t in (self.charges, self.sigma, self.epsilon,
                                                             self.exception_charge_products,
                                                             self.exception_sigma, self.exception_epsilon))
        box_needs_grad = box is not None and box.requires_grad
        analytic = self.analytic_forces and not parameters_need_grad and not box_needs_grad
        if analytic:
            terms = self._analytic_terms(positions, box)
        else:
            terms = self._autograd_terms(positions, box)
        if self.use_dispersion_correction and box is not None:
            terms["dispersion_correction"] = self.dispersion_coefficient / space.volume(box)
        return terms

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Total non-bonded energy, ``()`` kJ/mol (sum of :meth:`energy_terms`)."""
        return sum(self.energy_terms(positions, box).values())

    @property
    def direct_cutoff(self) -> float | None:
        """The cutoff of the direct-space sum, nm, or ``None`` (``"nocutoff"``)."""
        return None if self.method == "nocutoff" else self.cutoff

    def direct_coulomb(self) -> CoulombKind:
        """How the Coulomb part of the direct-space sum is evaluated."""
        if self.method in ("ewald", "pme"):
            return CoulombKind("ewald", alpha=self.alpha)
        if self.method in ("cutoff", "reaction_field"):
            return CoulombKind("reaction_field", krf=self.krf, crf=self.crf)
        return CoulombKind("plain")

    def _backend(self, positions: Tensor, keep_factors: bool):
        """The differentiable torch backend, or the analytic one for these positions (compiled when the
        kernels apply to them)."""
        if not keep_factors:
            return self._autograd_backend
        kernels = _kernels.usable(positions) if self.compiled else None
        if kernels is None:
            return self._torch_backend
        if self._compiled_backend is None or self._compiled_backend.kernels is not kernels:
            self._compiled_backend = CompiledBackend(kernels)
        return self._compiled_backend

    def _evaluate(self, positions: Tensor, box: Tensor | None, keep_factors: bool):
        """All parts: pair sums (direct, exceptions, exclusion corrections) and reciprocal."""
        backend = self._backend(positions, keep_factors)
        parts = {"direct": backend.direct(self, positions, box)}
        if len(self.exceptions):
            parts["exceptions"] = backend.pairs(positions, box if self.exceptions_periodic else None,
                                                self._exception_pairs(), CoulombKind("plain"), None, None)
        if self.method in ("ewald", "pme"):
            if len(self.excluded_pairs):
                parts["exclusions"] = backend.pairs(positions, box, self._exclusion_pairs(),
                                                    CoulombKind("erf", alpha=self.alpha), None, None)
            parts["reciprocal"] = self._reciprocal_part(positions, box, keep_factors)
        return parts

    def _reciprocal_part(self, positions: Tensor, box: Tensor, keep_factors: bool):
        """(reciprocal + self + background energy, its forces or ``None``)."""
        reciprocal, forces = self._reciprocal(positions, box, keep_factors)
        self_energy = -COULOMB_MD * self.alpha / math.sqrt(math.pi) * (self.charges * self.charges).sum()
        # a net charge interacts with its neutralising background (as OpenMM)
        background = (-COULOMB_MD * math.pi * self.charges.sum() ** 2
                      / (2 * self.alpha**2 * space.volume(box)))
        constant = (self_energy + background).to(reciprocal.dtype)
        return reciprocal + constant, forces

    def _autograd_terms(self, positions: Tensor, box: Tensor | None) -> dict[str, Tensor]:
        parts = self._evaluate(positions, box, keep_factors=False)
        energies = {name: (part[0],) if name == "reciprocal" else part for name, part in parts.items()}
        return self._assemble(energies)

    def _analytic_terms(self, positions: Tensor, box: Tensor | None) -> dict[str, Tensor]:
        with torch.no_grad():
            parts = self._evaluate(positions.detach(), None if box is None else box.detach(),
                                   keep_factors=True)
        names = [name for name in ("direct", "exceptions", "exclusions", "reciprocal") if name in parts]
        wrapped = [("forces" if name == "reciprocal" else "pair", parts[name]) for name in names]

        def recompute(differentiable_positions):
            again = self._evaluate(differentiable_positions, box, keep_factors=False)
            return tuple(energy for name in names for energy in again[name] if energy is not None)

        outputs = AnalyticEnergies.apply(positions, wrapped, recompute)
        energies = {}
        index = 0
        for name, (kind, _) in zip(names, wrapped):
            count = 1 if kind == "forces" else 2
            energies[name] = outputs[index:index + count]
            index += count
        return self._assemble(energies)

    @staticmethod
    def _assemble(energies: dict) -> dict[str, Tensor]:
        """Named components from the energies of each part (pair parts give (LJ, Coulomb))."""
        e_lj, e_coulomb = energies["direct"]
        if "exceptions" in energies:
            e_lj = e_lj + energies["exceptions"][0]
            e_coulomb = e_coulomb + energies["exceptions"][1]
        terms = {"lennard_jones": e_lj, "coulomb_direct": e_coulomb}
        if "reciprocal" in energies:
            terms["coulomb_reciprocal"] = energies["reciprocal"][0]
        if "exclusions" in energies:
            terms["coulomb_exclusions"] = energies["exclusions"][1]
        return terms
