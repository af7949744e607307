"""Biases on collective variables: restraints, walls, well-tempered metadynamics (umbrella sampling with
the restraints: :mod:`mindsponge.umbrella`, also ``mindsponge.bias.UmbrellaSampling``).

A bias is an :class:`~mindsponge.forcefield.EnergyTerm` (a :class:`torch.nn.Module` called as
``bias(positions, box) -> energy`` in kJ/mol) that depends on the positions only through
collective variables (:mod:`mindsponge.colvar`). It is added to a potential the way every
energy term is, with :meth:`ForceField.add <mindsponge.forcefield.ForceField.add>`, so forces,
:meth:`~mindsponge.forcefield.ForceField.energy_terms`, constraints and the
:class:`~mindsponge.simulation.Simulation` need nothing special::

    phi, psi = ms.colvar.Torsion([4, 6, 8, 14]), ms.colvar.Torsion([6, 8, 14, 16])
    metad = ms.bias.Metadynamics([phi, psi], height=1.2, widths=[0.35, 0.35], every=500,
                                 temperature=300.0, bias_factor=6.0)
    ff.add(metad)                               # ff is the ForceField; the bias is a term of it
    sim = ms.Simulation(system, ff, integrator=...)
    sim.run(100_000)                            # deposits a Gaussian every 500 steps
    angles, free_energy = metad.free_energy()   # grid axes and F (kJ/mol), minimum 0

Biases that change along the trajectory (metadynamics) define
``after_step(positions, box, step) -> bool``: the :class:`~mindsponge.simulation.Simulation`
calls it after every step and recomputes the forces when it returns ``True``; their state (the
bias grid) is module buffers, which the simulation writes into its checkpoints and restores.

The energy of a custom potential (a 1D double well, a Mueller-Brown surface) is written as an
:class:`~mindsponge.forcefield.EnergyTerm` and combined with biases in a
:class:`~mindsponge.forcefield.ForceField`.
"""

import math

import numpy as np
import torch

from common import checks
from common.deprecation import renamed_arguments, warn_deprecated
from common.errors import ArgumentTypeError, ConfigurationError
from common.units import BOLTZMANN_MD
from mindsponge.colvar import Colvar, Torsion
from mindsponge.forcefield.base import EnergyTerm
from mindsponge.reporters import Reporter

__all__ = [
    "Bias",
    "ColvarReporter",
    "HarmonicRestraint",
    "LowerWall",
    "Metadynamics",
    "UpperWall",
]


def _per_colvar(values, count, name, owner, positive=False):
    """One float per CV from a number or a sequence (checked for length and sign)."""
    if isinstance(values, int | float) and not isinstance(values, bool):
        values = [values] * count
    values = [float(value) for value in values]
    if len(values) != count:
        raise ConfigurationError(
            f"{owner}: {name} needs one value per collective variable ({count}), got {len(values)}"
        )
    if positive and not all(value > 0 and math.isfinite(value) for value in values):
        raise ConfigurationError(f"{owner}: {name} must be positive and finite, got {values}")
    return values


class Bias(EnergyTerm):
    """Base class: an energy term that is a function of collective variables.

    Args:
        colvars: a :class:`~mindsponge.colvar.Colvar` or a sequence of them.
        name: the name under which a force field reports the term (default: the class name).

    Subclasses implement :meth:`energy_of_values`.
    """

    def __init__(self, colvars, name=None):
        super().__init__(name)
        colvars = list(colvars) if isinstance(colvars, list | tuple | torch.nn.ModuleList) else [colvars]
        if not colvars:
            raise ConfigurationError(f"{type(self).__name__}: needs at least one collective variable")
        for index, colvar in enumerate(colvars):
            if not isinstance(colvar, Colvar):
                raise ArgumentTypeError(
                    f"{type(self).__name__}: colvars[{index}] is not a Colvar, got {colvar!r}")
        self.colvars = torch.nn.ModuleList(colvars)

    def colvar_values(self, positions, box=None):
        """The CVs stacked: ``(..., D)`` for positions ``(..., N, 3)`` nm."""
        return torch.stack([colvar(positions, box) for colvar in self.colvars], dim=-1)

    def energy_of_values(self, values):
        """Bias energy (kJ/mol, shape ``(...)``) at CV values ``(..., D)``."""
        raise NotImplementedError

    def forward(self, positions, box=None):
        """Bias energy, kJ/mol: ``()`` for positions ``(N, 3)`` (``(...)`` for batches), nm."""
        return self.energy_of_values(self.colvar_values(positions, box))

    def _differences(self, values, centers):
        return torch.stack(
            [colvar.difference(values[..., d], centers[d]) for d, colvar in enumerate(self.colvars)], dim=-1
        )


class HarmonicRestraint(Bias):
    """Harmonic restraint (an umbrella window): ``sum_d k_d / 2 (s_d - center_d)^2``.

    Differences of periodic CVs are taken modulo their period.

    Args:
        colvars: one CV or a sequence.
        centers: one number per CV (the CV's units).
        force_constants: ``k`` per CV (or one for all), kJ/mol per CV unit squared.
        name: the term's name.
    """

    def __init__(self, colvars, centers, force_constants, name=None):
        super().__init__(colvars, name)
        count = len(self.colvars)
        centers = _per_colvar(centers, count, "centers", self.name)
        self.register_buffer("centers", torch.tensor(centers, dtype=torch.float64))
        constants = _per_colvar(force_constants, count, "force_constants", self.name, positive=True)
        self.register_buffer("force_constants", torch.tensor(constants, dtype=torch.float64))

    def energy_of_values(self, values):
        differences = self._differences(values, self.centers.to(values.dtype))
        return (0.5 * self.force_constants.to(values.dtype) * differences**2).sum(-1)

    def compiled_terms(self, kernels, box=None):
        """A restraint on torsions as force terms of the compiled step loop (:mod:`mindsponge.step_loop`):
        ``k/2 (phi - phi0)^2`` on the circle is a harmonic improper of constant ``k/2`` with period ``2 pi``
        (``kernels.BondedTerm``). ``None`` (the restraint is called back) for other collective variables,
        with a box (a torsion colvar takes minimum images, the kernel does not), or when a buffer requires
        grad."""
        if box is not None or not all(type(colvar) is Torsion for colvar in self.colvars):
            return None
        if self.centers.requires_grad or self.force_constants.requires_grad:
            return None
        atoms = torch.stack([colvar.atoms.cpu() for colvar in self.colvars])
        return [kernels.BondedTerm(3, atoms, [self.centers.detach(), 0.5 * self.force_constants.detach()],
                                   2.0 * math.pi)]


class _Wall(Bias):
    """``k (s - at)^exponent`` beyond ``at`` on one side (sign +1 upper, -1 lower), zero inside."""

    side = 1.0

    def __init__(self, colvar, at, force_constant, exponent=2, name=None):
        super().__init__(colvar, name)
        if len(self.colvars) != 1:
            raise ConfigurationError(
                f"{self.name}: a wall acts on one collective variable, got {len(self.colvars)}")
        if not force_constant > 0 or not exponent >= 1:
            raise ConfigurationError(
                f"{self.name}: force_constant must be > 0 and exponent >= 1, got {force_constant}, {exponent}"
            )
        self.at, self.force_constant, self.exponent = float(at), float(force_constant), float(exponent)

    def energy_of_values(self, values):
        beyond = (self.side * self.colvars[0].difference(values[..., 0], self.at)).clamp(min=0.0)
        return self.force_constant * beyond**self.exponent


class UpperWall(_Wall):
    """Wall pushing a CV below ``at``: ``k (s - at)^exponent`` for ``s > at``, else 0.

    Args:
        colvar: the CV.
        at: position of the wall (the CV's units).
        force_constant: ``k``, kJ/mol per CV unit to the ``exponent``.
        exponent: power of the wall (2: harmonic).
        name: the term's name.
    """


class LowerWall(_Wall):
    """Wall pushing a CV above ``at``: ``k (at - s)^exponent`` for ``s < at``, else 0.

    Arguments as :class:`UpperWall`.
    """

    side = -1.0


def _catmull_rom_weights(fraction):
    """Weights ``(..., 4)`` of the points ``i-1, i, i+1, i+2`` at ``fraction`` in ``[0, 1)``."""
    t, t2, t3 = fraction, fraction**2, fraction**3
    return torch.stack(
        [(-t3 + 2 * t2 - t) / 2, (3 * t3 - 5 * t2 + 2) / 2, (-3 * t3 + 4 * t2 + t) / 2, (t3 - t2) / 2], dim=-1
    )


class Metadynamics(Bias):
    """(Well-tempered) metadynamics with Gaussians deposited on a grid.

    Every ``every`` steps a Gaussian ``w exp(-sum_d (s_d - s_d(t))^2 / (2 sigma_d^2))`` is added
    to the bias at the current CV values ``s(t)``. With a ``bias_factor`` gamma the height is
    tempered, ``w = height * exp(-V(s(t)) / (k_B (gamma - 1) T))`` (Barducci, Bussi & Parrinello
    2008), and the bias converges to ``V(s) = -(1 - 1/gamma) F(s)`` plus a constant; without one
    (standard metadynamics) to ``-F(s)``.

    The bias lives on a grid (a buffer, so it is saved in checkpoints) and is evaluated by
    Catmull-Rom cubic interpolation (continuous forces). Periodic CVs span their period (the
    grid wraps around); a non-periodic CV needs ``grid_min`` and ``grid_max``. Outside the grid
    the bias stays at its edge value (no force; keep the CV inside with a wall) and no
    Gaussians are deposited.

    Args:
        colvars: one CV or a sequence (1D and 2D are usual; any dimension works).
        height: initial Gaussian height, kJ/mol.
        widths: Gaussian widths sigma per CV (or one for all), CV units.
        every: steps between depositions (``pace=``: deprecated name).
        temperature: simulation temperature, K.
        bias_factor: gamma > 1 for well-tempered metadynamics, ``None`` for standard.
        grid_min, grid_max: per CV, the grid range (``None`` entries for periodic CVs use the
            period); required for non-periodic CVs.
        grid_bins: points per CV; default ``ceil(range / (sigma / 5))`` (PLUMED's spacing).
        name: the term's name.

    Raises:
        ValueError: a non-periodic CV without a grid range (the message names it), or an
            invalid height, width, ``every``, temperature or bias factor.
    """

    @renamed_arguments(pace="every")
    def __init__(
        self,
        colvars,
        height,
        widths,
        every,
        temperature,
        bias_factor=None,
        grid_min=None,
        grid_max=None,
        grid_bins=None,
        name=None,
    ):
        super().__init__(colvars, name)
        count = len(self.colvars)
        if not height > 0 or not temperature > 0:
            raise ConfigurationError(
                f"{self.name}: height and temperature must be positive, got {height}, {temperature}"
            )
        checks.positive_int(every, f"{self.name}: every (steps)")
        if bias_factor is not None and not bias_factor > 1:
            raise ConfigurationError(
                f"{self.name}: bias_factor must be > 1 (or None for standard), got {bias_factor}"
            )
        self.height, self.every, self.temperature = float(height), every, float(temperature)
        self.bias_factor = None if bias_factor is None else float(bias_factor)
        self.widths = _per_colvar(widths, count, "widths", self.name, positive=True)
        grid_min = [None] * count if grid_min is None else list(grid_min)
        grid_max = [None] * count if grid_max is None else list(grid_max)
        grid_bins = [None] * count if grid_bins is None else list(grid_bins)
        if not len(grid_min) == len(grid_max) == len(grid_bins) == count:
            raise ConfigurationError(
                f"{self.name}: grid_min, grid_max and grid_bins need one entry per CV ({count})")
        self.lows, self.spacings, self.shape, self.periodic = [], [], [], []
        for d, colvar in enumerate(self.colvars):
            periodic = colvar.period is not None
            low, high = colvar.period if periodic else (grid_min[d], grid_max[d])
            if low is None or high is None:
                raise ConfigurationError(
                    f"{self.name}: collective variable {d} ({type(colvar).__name__}) is not periodic, so it "
                    "needs a grid range: give grid_min and grid_max"
                )
            low, high = float(low), float(high)
            if not high > low:
                raise ConfigurationError(
                    f"{self.name}: grid_max must exceed grid_min for CV {d}, got {low}, {high}")
            bins = grid_bins[d] or math.ceil((high - low) / (self.widths[d] / 5))
            points = bins if periodic else bins + 1
            self.lows.append(low)
            self.spacings.append((high - low) / bins)
            self.shape.append(points)
            self.periodic.append(periodic)
        self.register_buffer("grid", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("n_deposited", torch.zeros((), dtype=torch.long))

    @property
    def thermal_energy(self):
        """``k_B T``, kJ/mol."""
        return BOLTZMANN_MD * self.temperature

    def axes(self):
        """Grid points of every CV: a list of ``(n_d,)`` float64 tensors (CV units)."""
        return [
            low + spacing * torch.arange(points, dtype=torch.float64, device=self.grid.device)
            for low, spacing, points in zip(self.lows, self.spacings, self.shape, strict=True)
        ]

    def energy_of_values(self, values):
        grid = self.grid.to(values.dtype).reshape(-1)
        flat_index, weight = None, None
        for d, points in enumerate(self.shape):
            position = (values[..., d] - self.lows[d]) / self.spacings[d]
            if self.periodic[d]:
                position = torch.remainder(position, points)
            else:
                position = position.clamp(0.0, points - 1.0)
            base = torch.floor(position).detach()
            indices = base.long().unsqueeze(-1) + torch.arange(-1, 3, device=values.device)  # (..., 4)
            indices = torch.remainder(indices, points) if self.periodic[d] else indices.clamp(0, points - 1)
            weights = _catmull_rom_weights(position - base)
            if flat_index is None:
                flat_index, weight = indices, weights
            else:  # row-major index over the 4^d points so far times the 4 points of this CV
                flat_index = (flat_index.unsqueeze(-1) * points + indices.unsqueeze(-2)).flatten(-2)
                weight = (weight.unsqueeze(-1) * weights.unsqueeze(-2)).flatten(-2)
        return (grid[flat_index] * weight).sum(-1)

    def _inside(self, values):
        return all(
            self.periodic[d]
            or self.lows[d] <= float(values[d]) <= self.lows[d] + self.spacings[d] * (points - 1)
            for d, points in enumerate(self.shape)
        )

    def deposit(self, values):
        """Add Gaussians at CV values ``(D,)``, or ``(W, D)`` for W walkers sharing the bias.

        Each Gaussian is tempered by the bias at its centre (well-tempered), walkers one after
        the other (multiple-walker metadynamics, Raiteri et al. 2006). Points outside the grid
        are skipped.

        Returns:
            The total height deposited, kJ/mol.
        """
        total = 0.0
        for point in values.detach().to(torch.float64).reshape(-1, len(self.shape)):
            if self._inside(point):
                total += self._deposit_one(point)
        return total

    def _deposit_one(self, values):
        height = self.height
        if self.bias_factor is not None:
            current = float(self.energy_of_values(values))
            height *= math.exp(-current / (self.thermal_energy * (self.bias_factor - 1.0)))
        exponent = 0.0
        for d, axis in enumerate(self.axes()):
            difference = self.colvars[d].difference(axis, values[d])
            shape = [1] * len(self.shape)
            shape[d] = -1
            exponent = exponent + (difference / self.widths[d]).reshape(shape) ** 2
        with torch.no_grad():
            self.grid += height * torch.exp(-0.5 * exponent)
            self.n_deposited += 1
        return height

    @property
    def pace(self):
        """Deprecated: use ``every``."""
        warn_deprecated(f"{type(self).__name__}.pace", f"{type(self).__name__}.every")
        return self.every

    def after_step(self, positions, box, step):
        """Deposit a Gaussian if ``step`` is a multiple of ``every``; returns whether the bias changed."""
        if step % self.every != 0:
            return False
        with torch.no_grad():
            values = self.colvar_values(positions, box)
        return self.deposit(values) > 0

    def free_energy(self):
        """Free-energy surface estimated from the bias.

        Returns:
            ``(axes, free_energy)``: the grid points of every CV (list of ``(n_d,)`` tensors) and
            ``F`` on the grid, kJ/mol, float64, shifted so that its minimum is 0:
            ``-gamma / (gamma - 1) V`` (well-tempered) or ``-V`` (standard).
        """
        scale = 1.0 if self.bias_factor is None else self.bias_factor / (self.bias_factor - 1.0)
        free_energy = -scale * self.grid
        return self.axes(), free_energy - free_energy.min()

    def reweighting_offset(self):
        """``c(t)`` of Tiwary & Parrinello (2015), kJ/mol, for reweighting with ``exp((V - c) / k_B T)``.

        ``c = k_B T ln( int exp(gamma V / ((gamma - 1) k_B T)) ds / int exp(V / ((gamma - 1) k_B T)) ds )``
        on the grid (standard metadynamics: ``k_B T ln(<exp(V / k_B T)>_grid)``).
        """
        beta_bias = self.grid / self.thermal_energy
        if self.bias_factor is None:
            numerator, denominator = beta_bias, torch.zeros_like(beta_bias)
        else:
            numerator = beta_bias * self.bias_factor / (self.bias_factor - 1.0)
            denominator = beta_bias / (self.bias_factor - 1.0)
        log_ratio = torch.logsumexp(numerator.reshape(-1), 0) - torch.logsumexp(denominator.reshape(-1), 0)
        return float(self.thermal_energy * log_ratio)


def _parameter_dtype(modules, default):
    """The floating dtype of the first floating parameter or buffer of ``modules``, else ``default``."""
    for module in modules:
        if isinstance(module, torch.nn.Module):
            for tensor in (*module.parameters(), *module.buffers()):
                if tensor.is_floating_point():
                    return tensor.dtype
    return default


class ColvarReporter(Reporter):
    """Record CV values and bias energies along a run (PLUMED's COLVAR file).

    In memory (``steps``, ``times``, ``values`` (T, D), ``bias_energies`` (T, B) and, for
    metadynamics biases, ``reweighting_offsets`` (T, B) with ``c(t)``), and optionally as CSV.

    Args:
        colvars: the CVs to record.
        every: steps between records.
        biases: biases whose energies (kJ/mol) are recorded.
        path: optional CSV file (overwritten), columns ``step, time, cv0.., bias0.., offset0..``.
    """

    def __init__(self, colvars, every=100, biases=(), path=None):
        super().__init__(every)
        self.colvars = [colvars] if isinstance(colvars, Colvar) else list(colvars)
        self.biases = list(biases)
        self.path = path
        self.steps, self.times, self._values, self._bias_energies, self._offsets = [], [], [], [], []
        self._handle = None

    def report(self, state, observables):
        """Evaluate the CVs and biases at ``state`` (in the dtype of their parameters, if they have any)."""
        dtype = _parameter_dtype([*self.colvars, *self.biases], state.positions.dtype)
        positions = state.positions.to(dtype)
        box = None if state.box is None else state.box.to(dtype)
        with torch.no_grad():
            values = [float(colvar(positions, box)) for colvar in self.colvars]
            energies = [float(bias(positions, box)) for bias in self.biases]
        offsets = [
            bias.reweighting_offset() if isinstance(bias, Metadynamics) else 0.0 for bias in self.biases
        ]
        self.steps.append(state.step)
        self.times.append(state.time)
        self._values.append(values)
        self._bias_energies.append(energies)
        self._offsets.append(offsets)
        if self.path is not None:
            if self._handle is None:
                self._handle = open(self.path, "w")  # noqa: SIM115
                header = ["step", "time"] + [f"cv{i}" for i in range(len(values))]
                header += [f"bias{i}" for i in range(len(energies))] + [
                    f"offset{i}" for i in range(len(offsets))
                ]
                self._handle.write(",".join(header) + "\n")
            row = [str(state.step), f"{state.time:.6f}"] + [
                f"{value:.8g}" for value in values + energies + offsets
            ]
            self._handle.write(",".join(row) + "\n")
            self._handle.flush()

    @property
    def values(self):
        """``(T, D)`` float64 array of the recorded CV values."""
        return np.asarray(self._values, dtype=np.float64).reshape(-1, len(self.colvars))

    @property
    def bias_energies(self):
        """``(T, B)`` float64 array of the recorded bias energies, kJ/mol."""
        return np.asarray(self._bias_energies, dtype=np.float64).reshape(-1, len(self.biases))

    @property
    def reweighting_offsets(self):
        """``(T, B)`` float64 array of ``c(t)`` of metadynamics biases (0 for others), kJ/mol."""
        return np.asarray(self._offsets, dtype=np.float64).reshape(-1, len(self.biases))

    def close(self):
        """Close the CSV file."""
        if self._handle is not None:
            self._handle.close()
        self._handle = None


def __getattr__(name):
    """``UmbrellaSampling`` lives in :mod:`mindsponge.umbrella` (it samples with this module's restraints and
    reporter); it is also reachable here, where it has always been."""
    if name == "UmbrellaSampling":
        from mindsponge.umbrella import UmbrellaSampling

        return UmbrellaSampling
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

