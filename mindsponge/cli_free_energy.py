"""``mindsponge fe CONFIG [--resume] [--quiet] [--output DIR]``: an alchemical free energy from a TOML file.

The file describes one or more *legs* (:mod:`mindsponge.free_energy`), each a system taken through a
schedule of states, and how they combine::

    constraints = "hbonds"              # as mindsponge run: "none" | "water" | "hbonds" | "water+hbonds"
    precision = "mixed"                 # "single" | "mixed" | "double"
    seed = 0
    minimize = true

    [integrator]
    dt = 0.002                          # ps (Langevin BAOAB at [free_energy] temperature)
    friction = 1.0                      # 1/ps

    [free_energy]
    combine = "hydration"               # dG_hyd = dG_vacuum - dG_solvent; "binding": dG_solvent - dG_complex;
                                        #   "sum": sum of sign * dG over the legs (signs = {name = -1.0})
    temperature = 298.15                # K
    steps_per_iteration = 500           # MD steps between evaluations/exchanges
    iterations = 200                    # in all, equilibration included
    equilibration = 20                  # iterations left out of the estimate ("auto": found from the run)
    hrex = true                         # Hamiltonian replica exchange (false: independent windows)
    bootstrap = 200                     # MBAR bootstrap resamplings (0: analytic uncertainty only)
    workers = 0                         # local processes for the replicas; or scheduler = "tcp://host:8786"

    [free_energy.region]                # the alchemical atoms: atoms = [0, 1, 2] or a residue name
    residue = "MOL"
    annihilate_electrostatics = true
    annihilate_sterics = false          # decouple Lennard-Jones (true: annihilate)

    [free_energy.schedule]              # counts (Coulomb off first, then Lennard-Jones) ...
    electrostatics = 5
    sterics = 9
    # ... or explicit lists of equal length:
    # lambda_electrostatics = [1.0, 0.5, 0.0, 0.0, 0.0]
    # lambda_sterics        = [1.0, 1.0, 1.0, 0.5, 0.0]
    # ... or any global parameters of the force field (no region needed): parameters = { k = [100, 200] }

    [free_energy.restraint]             # binding: restrain the ligand (the region) in one leg
    kind = "flat-bottom"                # "flat-bottom" | "harmonic" | "boresch"
    leg = "complex"                     # the restrained leg
    # receptor_atoms = [...]            # centroid group, or (P3, P2, P1) for boresch; default: chosen
    # ligand_atoms = [...]              # default: the region (boresch: (L1, L2, L3) chosen in it)
    # spring_constant = 418.4           # kJ/mol/nm^2 (centroid kinds); well_radius (nm, flat-bottom)
    # k_distance = 4184.0; k_angle = 41.84   # boresch: kJ/mol/nm^2 and kJ/mol/rad^2

    [[free_energy.leg]]
    name = "solvent"
    pressure = 1.0                      # optional, bar: NPT equilibration of the start (npt_steps), then
                                        #   every state sampled at this pressure
    [free_energy.leg.system]            # any source of mindsponge run's [system] (mindsponge.cli_system)
    prmtop = "solvent.prmtop"
    inpcrd = "solvent.inpcrd"
    [free_energy.leg.forcefield]
    nonbonded_method = "PME"
    cutoff = 0.9

    [[free_energy.leg]]
    name = "vacuum"
    [free_energy.leg.system]
    prmtop = "vacuum.prmtop"
    inpcrd = "vacuum.inpcrd"

    [output]
    directory = "hydration"
    plots = true

A leg may carry its own ``region`` and ``schedule`` tables (a vacuum leg needs fewer states).

Restraint (:mod:`mindsponge.restraints`): added to the named leg's OpenMM System before the alchemical
force field is made, on at every state (``lambda_restraints = 1``) unless the schedule gives
``lambda_restraints`` (one value per state: the openmmtools/YANK way of switching a Boresch restraint on
before decoupling). The receptor is every atom outside the region that is not water or a monatomic ion
(``receptor_residues`` names its residues instead). Atoms not given are chosen from the leg's starting
structure: a centroid restraint takes the receptor heavy atoms within ``radius`` (0.8 nm) of the ligand's
centroid (:func:`mindsponge.restraints.select_centroid_atoms`); ``well_radius`` defaults to the starting
centroid distance plus 0.3 nm; Boresch anchors follow :func:`mindsponge.restraints.select_boresch`. The
standard-state correction is reported separately (``restraint`` in ``results.json``) and enters the
combined result: ``dG_bind = dG_solvent - dG_complex - dG_restraint``. Signs: a
leg's ``dG`` is ``f(last state) - f(first)``, the free energy of switching the region off there
(:func:`mindsponge.free_energy.combine`).

The output folder holds ``results.json`` (every leg's dG in kT, kJ/mol and kcal/mol with MBAR's analytic
and bootstrap uncertainties and BAR's, the lowest neighbour overlap, the samples per state, statistical
inefficiencies, exchange acceptance; the combined result), ``free_energy.log``, and per leg a folder
``<name>/`` with ``u_kn.npz`` (:mod:`mindsponge.free_energy_analysis`), ``replicas.chk`` (checkpoint,
written after every iteration), ``leg.json``, ``start.npz`` and the plots ``overlap.png``,
``convergence.png`` and ``steps.png``. A run that is killed continues with ``--resume`` and loses no
sample; without it a new run starts (the legs' checkpoints are removed first). Bad settings are refused
with the file, line and key before anything runs (unknown keys, lambdas outside ``[0, 1]``, schedules of
fewer than two states, mismatched or of several kinds at once, parameters that are not finite numbers,
region atoms outside the system, a residue the topology does not have, a missing input file, ``pressure``
on a leg without a box, a ``combine`` whose legs are missing, a negative ``seed``). Numbers ``results.json``
cannot hold (an uncertainty across states without overlap) are ``null``; each leg lists its ``warnings``
(neighbouring states that overlap too little, :data:`mindsponge.free_energy_analysis.MIN_OVERLAP`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import pathlib
import re
import types
from dataclasses import dataclass, field
from typing import Literal

from common import checks
from common import config as config_module
from common.errors import ConfigurationError
from mindsponge.cli import ForceFieldConfig
from mindsponge.cli_restraint import RestraintConfig, build_restraint, restraint_summary
from mindsponge.cli_system import SystemConfig

__all__ = ["FreeEnergyRunConfig", "run", "states_of"]

LEG_FILES = ("replicas.chk", "leg.json", "start.npz", "u_kn.npz")
SIGN_CONVENTION = ("dG_leg = f(last state) - f(first state): switching the region off; hydration: "
                   "dG_vacuum - dG_solvent; binding: dG_solvent - dG_complex")


@dataclass
class RegionConfig:
    """``region``: the alchemical atoms (``atoms`` indices from 0, or every atom of residues named
    ``residue``) and how they are switched off (:class:`mindsponge.alchemy.AlchemicalRegion`)."""

    atoms: list[int] | None = None
    residue: str | None = None
    annihilate_electrostatics: bool = True
    annihilate_sterics: bool = False
    softcore_alpha: float = 0.5

    def __post_init__(self):
        if self.atoms is not None and self.residue is not None:
            raise ConfigurationError("residue cannot be combined with atoms: give one of them")
        if self.atoms is None and self.residue is None:
            raise ConfigurationError("give the region's atoms (indices) or residue (a residue name)")
        if self.atoms is not None:
            if not self.atoms:
                raise ConfigurationError("atoms is empty: give the indices of the region's atoms")
            if min(self.atoms) < 0:
                raise ConfigurationError(f"atoms must be indices from 0, got {min(self.atoms)}")
        checks.non_negative(self.softcore_alpha, "softcore_alpha")


#: the kinds of schedule, each by its keys: counts, lambda lists, global parameters (a schedule gives one)
_SCHEDULE_KINDS = (("electrostatics", "sterics"), ("lambda_electrostatics", "lambda_sterics"),
                   ("parameters",))


def _check_lambdas(key, values):
    if values is None:
        return
    if not values:
        raise ConfigurationError(f"{key} is empty: give the lambda of every state")
    if len(values) < 2:
        raise ConfigurationError(f"{key} has {len(values)} value: give the lambda of every state (two or "
                                 "more states)")
    outside = [value for value in values if not 0.0 <= value <= 1.0]
    if outside:
        raise ConfigurationError(f"{key} must lie in [0, 1], got {outside[0]}")


@dataclass
class ScheduleConfig:
    """``schedule``: counts (``electrostatics``, ``sterics``: :func:`mindsponge.alchemy.lambda_schedule`),
    explicit ``lambda_electrostatics`` and ``lambda_sterics`` lists, or ``parameters`` (global parameter
    name -> values; any force field): one of these kinds, two or more states; ``lambda_restraints``: one
    value per state (a restrained leg)."""

    electrostatics: int | None = None
    sterics: int | None = None
    lambda_electrostatics: list[float] | None = None
    lambda_sterics: list[float] | None = None
    lambda_restraints: list[float] | None = None
    parameters: dict[str, list[float]] | None = None

    def __post_init__(self):
        lists = (self.lambda_electrostatics, self.lambda_sterics)
        if (lists[0] is None) != (lists[1] is None):
            given = "lambda_electrostatics" if lists[0] is not None else "lambda_sterics"
            raise ConfigurationError(f"{given} needs its partner list (lambda_electrostatics and "
                                     "lambda_sterics, one value per state each)")
        if lists[0] is not None and len(lists[0]) != len(lists[1]):
            raise ConfigurationError(f"lambda_sterics has {len(lists[1])} values but the electrostatics list "
                                     f"{len(lists[0])}: give one of each per state")
        for key in ("lambda_electrostatics", "lambda_sterics", "lambda_restraints"):
            _check_lambdas(key, getattr(self, key))
        for key in ("electrostatics", "sterics"):
            if getattr(self, key) is not None and getattr(self, key) < 2:
                raise ConfigurationError(f"{key} must be 2 or more states, got {getattr(self, key)}")
        given = [key for keys in _SCHEDULE_KINDS for key in keys if getattr(self, key) is not None]
        if sum(any(key in given for key in keys) for keys in _SCHEDULE_KINDS) > 1:
            raise ConfigurationError(
                f"{', '.join(given)} are schedules of different kinds: give the counts (electrostatics, "
                "sterics), the lambda lists or parameters, not several")
        if self.parameters is not None:
            _check_parameter_values(self.parameters)


def _check_parameter_values(parameters: dict) -> None:
    """``schedule.parameters``: two or more finite values of every global parameter, as many of each."""
    lengths = {len(values) for values in parameters.values()}
    if not parameters or min(lengths) < 2 or len(lengths) > 1:
        raise ConfigurationError("parameters must give every global parameter the same number "
                                 "(two or more) of values")
    for name, values in parameters.items():
        if not all(math.isfinite(value) for value in values):
            raise ConfigurationError(f"parameters: {name} must be finite numbers, got {values}")


@dataclass
class LegConfig:
    """``[[free_energy.leg]]``: one system taken through the schedule.

    Attributes:
        name: the leg's name (a folder name; ``vacuum``/``solvent``/``complex`` for ``combine``).
        system, forcefield: as ``mindsponge run``'s ``[system]`` and ``[forcefield]``.
        region, schedule: this leg's own (default: ``[free_energy]``'s).
        pressure: bar: equilibrate the starting box at this pressure first (``npt_steps``), then sample every
            state at it (not set: constant volume).
        sign: this leg's sign with ``combine = "sum"``.
    """

    name: str
    system: SystemConfig
    forcefield: ForceFieldConfig = field(default_factory=ForceFieldConfig)
    region: RegionConfig | None = None
    schedule: ScheduleConfig | None = None
    pressure: float | None = None
    sign: float = 1.0

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name) or self.name in (".", ".."):
            raise ConfigurationError(
                f"name must be a plain folder name (letters, digits, _ . -), got {self.name!r}")
        if self.pressure is not None:
            checks.positive(self.pressure, "pressure (bar)")


@dataclass
class FreeEnergyConfig:
    """``[free_energy]``: the legs, the shared region and schedule, and how the states are sampled (see the
    module docstring for every key)."""

    leg: list[LegConfig]
    combine: Literal["hydration", "binding", "sum"] = "sum"
    temperature: float = 298.15
    steps_per_iteration: int = 500
    iterations: int = 100
    equilibration: int | Literal["auto"] = 10
    hrex: bool = True
    npt_steps: int = 5000
    bootstrap: int = 200
    workers: int = 0
    scheduler: str | None = None
    pme_treatment: Literal["exact", "direct-space", "coulomb"] = "exact"
    region: RegionConfig | None = None
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    restraint: RestraintConfig | None = None

    def __post_init__(self):
        checks.positive(self.temperature, "temperature (K)")
        checks.positive_int(self.steps_per_iteration, "steps_per_iteration")
        checks.positive_int(self.iterations, "iterations")
        if self.equilibration != "auto" and checks.non_negative_int(
                self.equilibration, "equilibration") >= self.iterations:
            raise ConfigurationError(f"equilibration ({self.equilibration}) leaves no sample: it must be "
                                     f"fewer than the run's length, {self.iterations}")
        for key in ("npt_steps", "bootstrap", "workers"):
            checks.non_negative_int(getattr(self, key), key)
        if not self.leg:
            raise ConfigurationError("leg is empty: give one [[free_energy.leg]] table per leg")
        names = [leg.name for leg in self.leg]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ConfigurationError(f"leg names must differ, {repeated[0]!r} is used twice")


@dataclass
class IntegratorSettings:
    """``[integrator]``: Langevin (BAOAB) time step (ps) and friction (1/ps)."""

    dt: float = 0.002
    friction: float = 1.0

    def __post_init__(self):
        checks.positive(self.dt, "dt (ps)")
        checks.positive(self.friction, "friction (1/ps)")


@dataclass
class OutputSettings:
    """``[output]``: the folder (relative to the configuration file) and whether to draw the plots."""

    directory: pathlib.Path = pathlib.Path("free_energy")
    plots: bool = True


@dataclass
class FreeEnergyRunConfig:
    """The whole ``mindsponge fe`` file."""

    free_energy: FreeEnergyConfig
    constraints: Literal["none", "water", "hbonds", "water+hbonds"] = "hbonds"
    precision: Literal["single", "mixed", "double"] = "mixed"
    seed: int = 0
    minimize: bool = True
    integrator: IntegratorSettings = field(default_factory=IntegratorSettings)
    output: OutputSettings = field(default_factory=OutputSettings)

    def __post_init__(self):
        checks.non_negative_int(self.seed, "seed")


def states_of(schedule: ScheduleConfig, alchemical: bool) -> list[dict]:
    """The states of a schedule, as global-parameter dicts (``alchemical``: counts default to 5 and 9)."""
    from mindsponge import alchemy

    if schedule.parameters is not None:
        names = sorted(schedule.parameters)
        count = len(schedule.parameters[names[0]])
        states = [{name: float(schedule.parameters[name][k]) for name in names} for k in range(count)]
    elif schedule.lambda_sterics is not None:
        states = [alchemy.AlchemicalState(sterics, electrostatics).parameters
                  for electrostatics, sterics in zip(schedule.lambda_electrostatics, schedule.lambda_sterics,
                                                     strict=True)]
    elif not alchemical:
        return []
    else:
        states = [state.parameters for state in alchemy.lambda_schedule(schedule.electrostatics or 5,
                                                                         schedule.sterics or 9)]
    if schedule.lambda_restraints is not None:
        if len(schedule.lambda_restraints) != len(states):
            raise ConfigurationError(f"lambda_restraints has {len(schedule.lambda_restraints)} values for "
                                     f"{len(states)} states: give one per state")
        states = [{**state, "lambda_restraints": float(value)}
                  for state, value in zip(states, schedule.lambda_restraints, strict=True)]
    return states


def _region_atoms(region: RegionConfig, system, config_path, where) -> list[int]:
    """The region's atom indices, checked against the system (errors name the file, line and key)."""
    if region.residue is not None:
        topology = system.topology
        residues = [] if topology is None else topology.residues
        atoms = [index for index, atom in enumerate(topology.atoms if topology else ())
                 if residues[atom.residue_index].name == region.residue]
        if not atoms:
            names = sorted({residue.name for residue in residues})
            raise config_module.key_error(config_path, (*where, "residue"), (
                f"no residue named {region.residue!r} in this leg's system (its residues: {names[:20]})"))
        return atoms
    outside = [atom for atom in region.atoms if atom >= system.n_atoms]
    if outside:
        raise config_module.key_error(config_path, (*where, "atoms"), (
            f"atom {outside[0]} is outside this leg's system of {system.n_atoms} atoms "
            f"(indices 0..{system.n_atoms - 1})"))
    return list(region.atoms)


def _build_leg(config, index, config_path, dtype):
    """``(system, force_field, states)`` of leg ``index``: the system of its ``[system]`` table, the
    alchemical force field of its region (or the plain force field with ``schedule.parameters``)."""
    from mindsponge import alchemy, cli_system

    settings, leg = config.free_energy, config.free_energy.leg[index]
    namespace = types.SimpleNamespace(system=leg.system, forcefield=leg.forcefield,
                                      constraints=config.constraints)
    cli_system.resolve_paths(namespace, pathlib.Path(config_path).resolve().parent)
    try:
        system, plain, openmm_system = cli_system.build(namespace, dtype, return_openmm_system=True)
    except FileNotFoundError as error:  # named with the [system] key whose file it is
        keys = [item.name for item in dataclasses.fields(leg.system)
                if any(str(path) in str(error) for path in _paths(getattr(leg.system, item.name)))]
        raise config_module.key_error(config_path, ("free_energy", "leg", index, "system", *keys[:1]),
                                      str(error)) from error
    region = leg.region if leg.region is not None else settings.region
    schedule = leg.schedule if leg.schedule is not None else settings.schedule
    where_schedule = ("free_energy", "leg", index, "schedule") if leg.schedule else ("free_energy",
                                                                                       "schedule")
    try:
        states = states_of(schedule, alchemical=region is not None)
    except ConfigurationError as error:
        where = (*where_schedule, "lambda_restraints")
        raise config_module.key_error(config_path, where, str(error)) from error
    if region is None:
        if not states:
            raise config_module.key_error(config_path, ("free_energy", "leg", index, "name"), (
                "has no alchemical region and no schedule parameters: give [free_energy.region] (atoms or "
                "residue), or schedule.parameters of the force field's global parameters"))
        _check_parameters(states, plain, schedule, config_path, where_schedule)
        return system, plain, states, None
    where = ("free_energy", "leg", index, "region") if leg.region else ("free_energy", "region")
    atoms = _region_atoms(region, system, config_path, where)
    restraint = None
    if settings.restraint is not None and settings.restraint.leg == leg.name:
        from mindsponge import restraints

        restraint = build_restraint(settings.restraint, system, atoms, config_path)
        try:
            restraints.add_restraint(openmm_system, restraint)
        except ConfigurationError as error:
            raise config_module.key_error(config_path, ("free_energy", "restraint"), str(error)) from error
    region_spec = alchemy.AlchemicalRegion(
        atoms, annihilate_electrostatics=region.annihilate_electrostatics,
        annihilate_sterics=region.annihilate_sterics, softcore_alpha=region.softcore_alpha)
    try:
        force_field = alchemy.alchemical_force_field(openmm_system, region_spec, dtype=dtype,
                                                     pme_treatment=settings.pme_treatment)
    except ConfigurationError as error:
        raise config_module.key_error(config_path, where, str(error)) from error
    _check_parameters(states, force_field, schedule, config_path, where_schedule)
    return system, force_field, states, restraint


def _paths(value) -> list:
    """The paths of a ``[system]`` value (one path, a list of them, or another value: none)."""
    values = value if isinstance(value, list) else [value]
    return [path for path in values if isinstance(path, pathlib.Path)]


def _check_parameters(states, force_field, schedule, config_path, where) -> None:
    """Refuse states that set global parameters the force field lacks, naming the schedule key that set
    them (``lambda_restraints`` without a restraint on this leg, a name in ``parameters``...)."""
    unknown = sorted(set().union(*states) - set(force_field.global_parameters))
    if unknown:
        name = unknown[0]
        if name == "lambda_restraints":
            key, hint = name, ": it switches a [free_energy.restraint] on this leg, and this leg has none"
        elif schedule.parameters is not None and name in schedule.parameters:
            key, hint = "parameters", ""
        else:  # an alchemical lambda, of the lists or of the counts
            key = name if getattr(schedule, name, None) is not None else name.removeprefix("lambda_")
            hint = ""
        raise config_module.key_error(config_path, (*where, key), (
            f"sets {unknown}, which the force field does not have (it has "
            f"{sorted(force_field.global_parameters)}){hint}"))


def _logger(path: pathlib.Path):
    logger = logging.getLogger("mindsponge.free_energy")
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path, mode="a")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    return logger, handler


def _plots(directory: pathlib.Path, result) -> None:
    from mindsponge import free_energy_plots as plots

    plots.overlap_matrix(result.estimate).figure.savefig(directory / "overlap.png", dpi=100)
    if result.convergence is not None:
        plots.convergence(result.convergence, result.estimate.temperature).figure.savefig(
            directory / "convergence.png", dpi=100)
    plots.lambda_steps(result.estimate, states=result.samples.states).figure.savefig(directory / "steps.png",
                                                                                     dpi=100)


def _check_leg_names(settings: FreeEnergyConfig, config_path) -> dict | None:
    """The restraint's leg exists and ``combine`` has the legs it needs (the file, line and key named).
    Returns the legs' signs for ``combine = "sum"`` (else ``None``)."""
    from mindsponge import free_energy

    names = [leg.name for leg in settings.leg]
    if settings.restraint is not None and settings.restraint.leg not in names:
        raise config_module.key_error(config_path, ("free_energy", "restraint", "leg"), (
            f"is {settings.restraint.leg!r}, which is not a leg (the legs: {names})"))
    signs = {leg.name: leg.sign for leg in settings.leg} if settings.combine == "sum" else None
    try:
        free_energy.combination_signs(settings.combine, names, signs)
    except ConfigurationError as error:
        raise config_module.key_error(config_path, ("free_energy", "combine"), str(error)) from error
    return signs


def _check_pressures(settings: FreeEnergyConfig, systems, config_path) -> None:
    """Every leg with ``pressure`` has a periodic system (checked before any leg runs; the file, line and
    key named)."""
    for index, (leg, system) in enumerate(zip(settings.leg, systems, strict=True)):
        if leg.pressure is not None and system.box is None:
            raise config_module.key_error(config_path, ("free_energy", "leg", index, "pressure"), (
                "needs a periodic system, but this leg's system has no box: remove the key (constant "
                "volume) or give the system a box"))


def _shown(value, spec: str = ".4f") -> str:
    """A number of the results for the log (``None``, a number JSON cannot hold: ``"unknown"``)."""
    return "unknown" if value is None else format(value, spec)


def run(config_path, resume: bool = False, progress: bool = True, output_directory=None,
        stop_after: int | None = None) -> dict:
    """Run the legs of a ``mindsponge fe`` configuration and combine them (see the module docstring).

    Args:
        config_path: the TOML file; relative paths in it are relative to its folder.
        resume: continue every leg from its checkpoint (a leg already finished is only re-analysed).
        progress: progress bars.
        output_directory: replaces ``[output] directory`` (relative to the working directory).
        stop_after: stop every leg after this many iterations in all (a run in parts; ``--resume``
            continues it).

    Returns:
        the results written to ``results.json`` (``legs``: name -> summary; ``combined``), or the legs
        finished so far when ``stop_after`` stopped them early.

    Raises:
        common.config.ConfigError: a bad file, value or region (file, line and key named), before any leg
            runs.
    """
    from common.output_paths import output_folder
    from common.precision import Precision
    from mindsponge import free_energy

    config = config_module.load(config_path, FreeEnergyRunConfig)
    folder = output_folder(config_path, config.output.directory, command_line=output_directory)
    precision = Precision.from_name(config.precision)
    settings = config.free_energy
    signs = _check_leg_names(settings, config_path)
    legs = [_build_leg(config, index, config_path, precision.compute) for index in range(len(settings.leg))]
    _check_pressures(settings, [system for system, *_ in legs], config_path)
    folder.path.mkdir(parents=True, exist_ok=True)
    logger, handler = _logger(folder.file("free_energy.log"))
    results, finished = {}, {}
    try:
        for leg, (system, force_field, states, _) in zip(settings.leg, legs, strict=True):
            directory = folder.file(leg.name)
            if not resume:
                for name in LEG_FILES:
                    (directory / name).unlink(missing_ok=True)
            logger.info("leg %s: %d atoms, %d states, %s", leg.name, system.n_atoms, len(states),
                        "HREX" if settings.hrex else "independent windows")
            result = free_energy.run_leg(
                system, force_field, states, temperature=settings.temperature,
                steps_per_iteration=settings.steps_per_iteration, iterations=settings.iterations,
                equilibration=settings.equilibration, hrex=settings.hrex, dt=config.integrator.dt,
                friction=config.integrator.friction, pressure=leg.pressure, npt_steps=settings.npt_steps,
                minimize=config.minimize, constraints=None, precision=precision, seed=config.seed,
                directory=directory, stop_after=stop_after, workers=settings.workers,
                scheduler=settings.scheduler, bootstrap=settings.bootstrap, progress=progress)
            if result is None:
                logger.info("leg %s: stopped after %d iterations (stop_after)", leg.name, stop_after)
                continue
            finished[leg.name] = result
            results[leg.name] = result.summary()
            value = results[leg.name]["kJ/mol"]
            logger.info("leg %s: dG = %s +- %s kJ/mol (MBAR), %s +- %s (BAR), overlap min %s", leg.name,
                        *(_shown(value[key]) for key in ("mbar", "mbar_error", "bar", "bar_error")),
                        _shown(results[leg.name]["overlap_min"], ".3g"))
            for message in results[leg.name]["warnings"]:
                logger.warning("leg %s: %s", leg.name, message)
            if config.output.plots:
                _plots(directory, result)
        output = {"legs": results, "sign_convention": SIGN_CONVENTION}
        correction = 0.0
        for leg, (system, _, _, restraint) in zip(settings.leg, legs, strict=True):
            if restraint is not None:
                output["restraint"] = restraint_summary(leg.name, restraint, system, settings.temperature)
                correction = output["restraint"]["standard_state_correction"]["kT"]
        if len(finished) == len(settings.leg):
            output["combined"] = free_energy.combine(finished, settings.combine, signs=signs,
                                                     temperature=settings.temperature,
                                                     correction_kT=-correction)
            combined = output["combined"]["kJ/mol"]
            logger.info("combined (%s): %s +- %s kJ/mol", settings.combine, _shown(combined["value"]),
                        _shown(combined["error"]))
            path = folder.file("results.json")
            temporary = path.with_suffix(".partial")
            temporary.write_text(json.dumps(output, indent=1, allow_nan=False))  # strict JSON: no NaN
            temporary.replace(path)
        return output
    finally:
        logger.removeHandler(handler)
        handler.close()
