"""The ``mindsponge`` command line: ``mindsponge run config.toml [--resume] [--quiet] [--output DIR]``, and
``mindsponge fe config.toml`` (same options) for alchemical free energies (:mod:`mindsponge.cli_free_energy`).

Also ``python -m mindsponge run`` (:mod:`mindsponge.__main__` calls :func:`main`).

A run configuration (TOML, validated by :mod:`common.config`: an unknown key or a bad value is
reported with its file, line and key) describes a complete simulation::

    steps = 5000
    constraints = "water+hbonds"     # "none" | "water" | "hbonds" | "water+hbonds"
    precision = "mixed"              # "single" | "mixed" (default) | "double"

    [system.water_box]               # or: [system] pdb = "protein.pdb"
    n_molecules = 216                #     [system] pdb = "x.pdb", openmm_xml = "system.xml"
                                     #     [system] prmtop = "x.prmtop", inpcrd = "x.inpcrd" (Amber)
                                     #     [system] top = "x.top", gro = "x.gro" (GROMACS)
                                     #     [system] psf, crd, params = [...], box (CHARMM)
                                     #   (mindsponge.cli_system)

    [forcefield]                     # OpenMM force-field files (not used with openmm_xml,
                                     #   refused with Amber, GROMACS and CHARMM files)
    files = ["amber14-all.xml", "amber14/tip3pfb.xml"]
    nonbonded_method = "PME"
    cutoff = 0.9
    hydrogen_mass = 3.0              # optional, amu: hydrogen mass repartitioning (createSystem's
                                     #   hydrogenMass), e.g. with constraints = "water+hbonds", dt = 0.004

    [integrator]
    type = "langevin"                # or "verlet" (NVE, or NVT with [thermostat])
    dt = 0.002
    temperature = 300.0
    friction = 1.0

    [barostat]                       # optional: "monte_carlo", "monte_carlo_anisotropic",
    type = "monte_carlo"             #   "c_rescale" or "berendsen" (equilibration only)
    pressure = 1.0                   # anisotropic: also [P_x, P_y, P_z] and scale_x/y/z = false
    temperature = 300.0
    every = 25                       # steps between barostat moves ("frequency": deprecated name)

    [output]
    directory = "run"
    report_every = 100

    [potential]                      # with [system] molecule: a learned potential or a committee, its
    models = ["model_0.pt", "model_1.pt"]  # uncertainty along the run; --active labels the flagged
    threshold = 40.0                 #   frames and retrains ([active] table; mindsponge.cli_learned)

    [replicas]                       # optional: replica exchange instead of one run (constant pressure
                                     #   with [barostat]: monte_carlo or c_rescale);
    temperatures = [300.0, 330.0, 363.0]   # or low, high, count: geometric temperatures
    steps_per_round = 500            # steps = the steps of every replica
    exchange = "neighbors"           # or "all"

Relative paths (``pdb``, ``openmm_xml``, the Amber, GROMACS and CHARMM files, ``[output] directory``,
and force-field files found next to the configuration, which take precedence over OpenMM's bundled
files of the same name)
are relative to the configuration file's folder, not to the working directory. Where the run
writes follows :mod:`common.output_paths` (as ``mindelec run``): ``[output] directory`` must lie
inside the configuration file's folder, and the output files (``log``, ``trajectory``,
``checkpoint``, ``final_structure``; with ``[replicas]`` the files of :mod:`mindsponge.cli_replicas`)
inside the output folder, with ``..`` and symbolic links resolved; anything else is refused with
the file, line and key before anything is written. At the end of the run the final positions and
box are written as PDB (``final_structure``, default ``final.pdb``).

``--active`` (with ``[potential]`` and ``[active]``) labels the frames the committee flagged and retrains
it after the run (:mod:`mindsponge.cli_learned`).

``--resume`` continues from the checkpoint in the output directory up to ``steps``; the CSV log
and the H5MD trajectory are first cut back to the checkpoint's step, so that every reported step
appears once, in order, even after the run was killed between two checkpoints. A resume whose
settings (time step, integrator, thermostat, barostat, constraints, precision, system, force field)
differ from the run's is refused, listing the changes, unless ``--allow-changed-config`` is given
(:mod:`mindsponge.cli_settings`; ``steps`` and ``[output]`` may change). The progress
bars (standard error) are redrawn at most once a minute when standard error is not a terminal;
``--quiet`` turns them off. ``--output DIR`` replaces ``[output] directory`` (relative to the
working directory, as any command-line path, and allowed anywhere). Errors are printed as one
line (``error: ...``) with exit status 2 for a bad configuration or input, 3 for a simulation
that blew up (the last good state is in the checkpoint).
"""

import argparse
import pathlib
import sys
from dataclasses import dataclass, field
from typing import Literal

from common import checks
from common import config as config_module
from common.deprecation import warn_deprecated
from common.errors import ConfigurationError, SimulationError
from common.output_paths import output_folder
from mindsponge import cli_learned, cli_replicas, cli_system
from mindsponge.cli_learned import ActiveConfig, PotentialConfig
from mindsponge.cli_replicas import ReplicasConfig
from mindsponge.cli_settings import SETTINGS_FILE, check_resumed_settings
from mindsponge.cli_system import SystemConfig, WaterBoxConfig  # noqa: F401  (their home was here)

__all__ = ["RunConfig", "main", "run"]


@dataclass
class ForceFieldConfig:
    """``[forcefield]``: OpenMM force-field files and non-bonded settings.

    Attributes:
        files: force-field XML files, found next to the configuration first, then among OpenMM's own;
            not set: ``["amber14-all.xml", "amber14/tip3pfb.xml"]``. Refused with Amber, GROMACS and
            CHARMM files, which carry their parameters.
        nonbonded_method: OpenMM's non-bonded method; not set: PME for a PDB or a water box, and for
            Amber, GROMACS and CHARMM files PME when the coordinates carry a box, NoCutoff otherwise.
        cutoff: non-bonded cutoff (nm).
        switch_distance: where the Lennard-Jones switching function starts (nm); not set: no switch.
        ewald_tolerance: OpenMM's ``ewaldErrorTolerance`` (sets the PME grid and splitting).
        hydrogen_mass: hydrogen mass repartitioning (amu), OpenMM's ``hydrogenMass``; not set: none.
        implicit_solvent: OpenMM's implicit solvent model for Amber and CHARMM files (``"OBC2"``...);
            not set: none.
    """

    files: list[str] | None = None
    nonbonded_method: Literal["PME", "Ewald", "CutoffPeriodic", "CutoffNonPeriodic", "NoCutoff"] | None = None
    cutoff: float = 0.9
    switch_distance: float | None = None
    ewald_tolerance: float = 5e-4
    hydrogen_mass: float | None = None
    implicit_solvent: Literal["HCT", "OBC1", "OBC2", "GBn", "GBn2"] | None = None

    def __post_init__(self):
        checks.positive(self.cutoff, "cutoff (nm)")
        checks.positive(self.ewald_tolerance, "ewald_tolerance")
        if self.hydrogen_mass is not None:
            checks.positive(self.hydrogen_mass, "hydrogen_mass (amu)")
        if self.switch_distance is not None and not 0 < self.switch_distance < self.cutoff:
            raise ConfigurationError(f"switch_distance must lie between 0 and the non-bonded cut-off "
                             f"({self.cutoff} nm), got {self.switch_distance}")


@dataclass
class IntegratorConfig:
    """``[integrator]``: Langevin (BAOAB, OpenMM's LangevinMiddle) or velocity Verlet.

    Attributes:
        type: ``"langevin"`` (NVT) or ``"verlet"`` (NVE, or NVT with a ``[thermostat]``).
        dt: time step (ps).
        temperature: Langevin bath temperature (K); also the initial velocities' temperature.
        friction: Langevin friction coefficient (1/ps).
    """

    type: Literal["langevin", "verlet"] = "langevin"
    dt: float = 0.002
    temperature: float = 300.0
    friction: float = 1.0

    def __post_init__(self):
        checks.positive(self.dt, "dt (the time step, ps)")
        checks.positive(self.temperature, "temperature (K)")
        checks.positive(self.friction, "friction (1/ps)")


@dataclass
class ThermostatConfig:
    """``[thermostat]``: a thermostat for the Verlet integrator.

    Attributes:
        type: Bussi's stochastic velocity rescaling, Berendsen (equilibration only) or Nose-Hoover chains.
        temperature: target temperature (K).
        time_constant: coupling time (ps).
    """

    type: Literal["bussi", "berendsen", "nose_hoover"] = "bussi"
    temperature: float = 300.0
    time_constant: float = 0.1

    def __post_init__(self):
        checks.positive(self.temperature, "temperature (K)")
        checks.positive(self.time_constant, "time_constant (ps)")


@dataclass
class BarostatConfig:
    """Barostat (:mod:`mindsponge.barostats`): pressure in bar (three per-axis values only for
    ``monte_carlo_anisotropic``), temperature in K (not used by ``berendsen``), ``every`` in
    steps (``frequency``: its deprecated name); C-rescale and Berendsen also take the
    compressibility (1/bar) and time constant (ps); the anisotropic Monte Carlo barostat the
    axes it may scale.

    Attributes:
        type: the barostat (``berendsen`` for equilibration only: it does not sample the NPT ensemble).
        pressure: target pressure (bar); ``[P_x, P_y, P_z]`` for ``monte_carlo_anisotropic``.
        temperature: the temperature the Monte Carlo acceptance and C-rescale noise use (K).
        every: steps between barostat moves (default 25).
        frequency: deprecated name of ``every`` (warns).
        compressibility: isothermal compressibility (1/bar), for ``c_rescale`` and ``berendsen``.
        time_constant: pressure coupling time (ps), for ``c_rescale`` and ``berendsen``.
        scale_x, scale_y, scale_z: the axes ``monte_carlo_anisotropic`` may scale.
    """

    type: Literal["monte_carlo", "monte_carlo_anisotropic", "c_rescale", "berendsen"] = "monte_carlo"
    pressure: float | tuple[float, float, float] = 1.0
    temperature: float = 300.0
    every: int | None = None
    frequency: int | None = None
    compressibility: float = 4.5e-5
    time_constant: float = 1.0
    scale_x: bool = True
    scale_y: bool = True
    scale_z: bool = True

    def __post_init__(self):
        if isinstance(self.pressure, tuple) and self.type != "monte_carlo_anisotropic":
            raise ConfigurationError(
                f"a per-axis pressure needs type = \"monte_carlo_anisotropic\", not {self.type!r}"
            )
        if self.frequency is not None:
            if self.every is not None:
                raise ConfigurationError("frequency is the deprecated name of every: give every only")
            warn_deprecated("[barostat] frequency", "[barostat] every")
            self.every, self.frequency = self.frequency, None
        if self.every is None:
            self.every = 25
        checks.positive_int(self.every, "every (steps between barostat moves)")
        for key in ("temperature", "compressibility", "time_constant"):
            checks.positive(getattr(self, key), key)


# [barostat] type -> (class in mindsponge.barostats, the keys passed to it as keyword arguments)
_BAROSTATS = {
    "monte_carlo": ("MonteCarloBarostat", ("pressure", "temperature", "every")),
    "monte_carlo_anisotropic": (
        "MonteCarloAnisotropicBarostat",
        ("pressure", "temperature", "every", "scale_x", "scale_y", "scale_z"),
    ),
    "c_rescale": ("CRescale", ("pressure", "temperature", "compressibility", "time_constant", "every")),
    "berendsen": ("BerendsenBarostat", ("pressure", "compressibility", "time_constant", "every")),
}


@dataclass
class OutputConfig:
    """Output files, relative to ``directory`` and inside it (``trajectory`` and
    ``final_structure`` may be ``""``: not written).

    Attributes:
        directory: the output folder (relative to the configuration file; ``--output`` replaces it).
        log: CSV log of step, time, energies, temperature, volume and density.
        trajectory: H5MD trajectory (``""``: none).
        checkpoint: the checkpoint ``--resume`` continues from.
        final_structure: PDB of the final positions and box (``""``: none).
        report_every: steps between log rows.
        trajectory_every: steps between trajectory frames.
        checkpoint_every: steps between checkpoints.
    """

    directory: pathlib.Path = pathlib.Path(".")
    log: str = "log.csv"
    trajectory: str = "trajectory.h5md"
    checkpoint: str = "run.chk"
    final_structure: str = "final.pdb"
    report_every: int = 100
    trajectory_every: int = 1000
    checkpoint_every: int = 1000

    def __post_init__(self):
        # the messages name the key and no other key, so that the loader reports its line; the files
        # are kept inside the output folder by common.output_paths when the run starts
        for key in ("log", "checkpoint"):
            if not getattr(self, key):
                raise ConfigurationError(f"{key} must name a file, got an empty string")
        for key in ("report_every", "trajectory_every", "checkpoint_every"):
            checks.positive_int(getattr(self, key), f"{key} (steps)")


@dataclass
class RunConfig:
    """A complete simulation (the top level of the file).

    Attributes:
        system: the ``[system]`` table.
        steps: number of MD steps (a resumed run continues up to this step).
        constraints: which bonds are rigid: water (SETTLE), bonds to hydrogen (SHAKE/RATTLE), both, or none.
        precision: ``"mixed"`` (float32 forces, float64 positions and sums), ``"single"`` or ``"double"``.
        minimize: minimise the energy before the dynamics.
        minimize_tolerance: the minimiser stops when the largest force is below this (kJ/mol/nm).
        seed: seed of the initial velocities and the integrator's random numbers.
        forcefield: the ``[forcefield]`` table.
        integrator: the ``[integrator]`` table.
        thermostat: an optional ``[thermostat]`` table (with ``type = "verlet"``).
        barostat: an optional ``[barostat]`` table (NPT).
        output: the ``[output]`` table.
        replicas: an optional ``[replicas]`` table: temperature replica exchange instead of one run
            (:mod:`mindsponge.cli_replicas`).
        potential: a ``[potential]`` table: the learned potential of ``[system] molecule``
            (:mod:`mindsponge.cli_learned`).
        active: an ``[active]`` table: what ``--active`` does after the run.
    """

    system: SystemConfig
    steps: int = 10_000
    constraints: Literal["none", "water", "hbonds", "water+hbonds"] = "water+hbonds"
    precision: Literal["single", "mixed", "double"] = "mixed"
    minimize: bool = True
    minimize_tolerance: float = 10.0
    seed: int = 0
    forcefield: ForceFieldConfig = field(default_factory=ForceFieldConfig)
    integrator: IntegratorConfig = field(default_factory=IntegratorConfig)
    thermostat: ThermostatConfig | None = None
    barostat: BarostatConfig | None = None
    output: OutputConfig = field(default_factory=OutputConfig)
    replicas: ReplicasConfig | None = None
    potential: PotentialConfig | None = None
    active: ActiveConfig | None = None

    def __post_init__(self):
        checks.non_negative_int(self.steps, "steps")
        checks.positive(self.minimize_tolerance, "minimize_tolerance (kJ/mol/nm)")
        if self.replicas is not None:
            self.replicas.rounds(self.steps)  # whole rounds of exchanges, at least one (names 'steps')
        if self.replicas is not None and self.barostat is not None and self.barostat.type == "berendsen":
            # names the barostat key only, so that the loader reports the [barostat] line
            raise ConfigurationError(
                "a replica exchange samples the isothermal-isobaric ensemble, which the Berendsen barostat "
                "does not: use type = \"monte_carlo\" or \"c_rescale\" in the [barostat] table")


def _output_files(config, folder):
    """The output files of the run (by ``[output]`` key, or by name for ``[replicas]``), resolved and
    inside ``folder``; nothing is written."""
    if config.replicas is not None:
        return {name: folder.file(name) for name in cli_replicas.OUTPUT_FILES}
    output = config.output
    keys = ("log", "trajectory", "checkpoint", "final_structure")
    files = {key: folder.file(getattr(output, key), key=key) for key in keys if getattr(output, key)}
    if config.potential is not None:
        files.update({name: folder.file(name) for name in cli_learned.OUTPUT_FILES})
    return files


def run(config_path, resume=False, progress=True, output_directory=None, active=False,
        allow_changed_config=False):
    """Run the simulation a configuration file describes (see the module docstring).

    Args:
        config_path: the TOML configuration; relative paths in it are relative to its folder.
        output_directory: optional folder that replaces ``[output] directory`` (a path given on
            the command line, so relative to the working directory; it may be anywhere).
        resume: continue from the checkpoint in the output directory, cutting the log and the
            trajectory back to its step first.
        progress: show progress bars (rate-limited when standard error is not a terminal).
        active: after the run, label the frames the committee flagged and retrain it (``[active]``;
            :func:`mindsponge.cli_learned.retrain`).
        allow_changed_config: resume although the settings differ from the run's
            (:mod:`mindsponge.cli_settings`; otherwise refused).

    Returns:
        the :class:`~mindsponge.simulation.Simulation` after the run (with ``[replicas]``: the
        :class:`~mindsponge.replica_exchange.ReplicaExchange`).

    Raises:
        common.config.ConfigError: the file does not match the schema, a value is out of range,
            settings contradict each other (a barostat without a periodic box), or the output folder
            or an output file lies outside where the run may write (:mod:`common.output_paths`); the
            message names the file, line and key. Nothing is written then.
        FileNotFoundError: a missing file (named).
    """
    import mindsponge as ms
    from common.precision import Precision
    from mindsponge import pdb

    config = config_module.load(config_path, RunConfig)
    cli_system.resolve_paths(config, pathlib.Path(config_path).resolve().parent)
    cli_learned.resolve_paths(config, pathlib.Path(config_path).resolve().parent)
    cli_system.refuse_combinations(config, config_path)
    cli_learned.refuse_combinations(config, config_path, active)
    folder = output_folder(config_path, config.output.directory, command_line=output_directory)
    config.output.directory = folder.path
    files = _output_files(config, folder)
    precision = Precision.from_name(config.precision)
    system, forcefield = cli_system.build(config, precision.compute)
    if config.barostat is not None and system.box is None:
        raise config_module.key_error(config_path, ("barostat",), "needs a periodic system, but the "
                                      "system has no box: remove the table or give the system a box")
    integrator = _integrator(config.integrator)
    thermostat = _thermostat(config.thermostat)
    barostat = _barostat(config.barostat)
    output = config.output
    check_resumed_settings(folder.file(SETTINGS_FILE), config, resume, allow_changed_config)
    if config.replicas is not None:
        return cli_replicas.run(config, files, system, forcefield, integrator, thermostat, barostat,
                                precision, resume, progress)
    checkpoint = files["checkpoint"]
    reporters = _reporters(output, files, resume)
    if config.potential is not None:
        forcefield, monitors = cli_learned.potential(config, system, files, resume)
        reporters += monitors
    simulation = ms.Simulation(
        system,
        forcefield,
        integrator,
        thermostat=thermostat,
        barostat=barostat,
        constraints=config.constraints,
        reporters=reporters,
        precision=precision,
        checkpoint=checkpoint,
        checkpoint_every=output.checkpoint_every,
        seed=config.seed,
        progress=progress,
    )
    if resume:
        simulation.load_checkpoint(checkpoint)
        for reporter in reporters:  # what the stopped run reported after its last checkpoint
            reporter.truncate(simulation.state.step)
    else:
        if config.minimize:
            simulation.minimize(tolerance=config.minimize_tolerance)
        temperature = thermostat.temperature if thermostat is not None else config.integrator.temperature
        simulation.set_velocities(temperature=temperature, seed=config.seed)
    try:
        simulation.run(max(config.steps - simulation.state.step, 0))
        simulation.save_checkpoint(checkpoint)
    finally:
        simulation.close()
    if output.final_structure:
        state = simulation.state
        pdb.write_pdb(files["final_structure"], system.topology, state.positions, state.box)
    if active:
        cli_learned.retrain(config, files, folder.path, progress)
    return simulation


def _integrator(settings):
    """The integrator of ``[integrator]``."""
    from mindsponge import integrators

    if settings.type == "langevin":
        return integrators.LangevinMiddle(settings.dt, settings.temperature, settings.friction)
    return integrators.VelocityVerlet(settings.dt)


def _thermostat(settings):
    """The thermostat of ``[thermostat]``, or ``None``."""
    from mindsponge import thermostats

    if settings is None:
        return None
    kinds = {"bussi": "Bussi", "berendsen": "BerendsenThermostat", "nose_hoover": "NoseHooverChain"}
    kind = kinds[settings.type]
    return getattr(thermostats, kind)(settings.temperature, settings.time_constant)


def _barostat(settings):
    """The barostat of ``[barostat]``, or ``None``."""
    from mindsponge import barostats

    if settings is None:
        return None
    kind, keys = _BAROSTATS[settings.type]
    return getattr(barostats, kind)(**{key: getattr(settings, key) for key in keys})


def _reporters(output, files, resume):
    """The CSV log and (unless ``trajectory = ""``) the H5MD trajectory of ``[output]``; the folders of
    ``files`` (the resolved output files by key) are created."""
    from mindsponge import reporters

    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    made = [reporters.LogReporter(files["log"], every=output.report_every, append=resume)]
    if output.trajectory:
        made.append(reporters.H5MDReporter(files["trajectory"], every=output.trajectory_every, append=resume))
    return made


def main(argv=None):
    """Entry point of ``mindsponge`` / ``python -m mindsponge``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="mindsponge", description="mindsponge molecular dynamics")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run a simulation from a TOML configuration")
    run_parser.add_argument("config", type=pathlib.Path, help="the TOML run configuration")
    run_parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    run_parser.add_argument("--allow-changed-config", action="store_true",
                            help="resume although the settings (dt, integrator...) differ from the run's")
    run_parser.add_argument("--quiet", action="store_true", help="no progress bar")
    run_parser.add_argument("--active", action="store_true",
                            help="after the run, label the frames the committee flagged and retrain it")
    run_parser.add_argument(
        "--output", type=pathlib.Path, default=None, help="output folder (replaces [output] directory)"
    )
    fe_parser = commands.add_parser("fe", help="an alchemical free energy (mindsponge.cli_free_energy)")
    fe_parser.add_argument("config", type=pathlib.Path, help="the TOML free-energy configuration")
    fe_parser.add_argument("--resume", action="store_true", help="continue every leg from its checkpoint")
    fe_parser.add_argument("--quiet", action="store_true", help="no progress bar")
    fe_parser.add_argument("--output", type=pathlib.Path, default=None, help="output folder")
    arguments = parser.parse_args(argv)
    options = {}
    if arguments.command == "fe":
        from mindsponge import cli_free_energy

        command = cli_free_energy.run
    else:
        command, options = run, {"active": arguments.active,
                                 "allow_changed_config": arguments.allow_changed_config}
    try:
        command(
            arguments.config,
            resume=arguments.resume,
            progress=not arguments.quiet,
            output_directory=arguments.output,
            **options,
        )
    except (ValueError, FileNotFoundError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except SimulationError as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    return 0

