"""Free-energy legs: sample a family of alchemical (or any global-parameter) states, resumably, and estimate.

A *leg* is one system taken through a schedule of states: a solvated ligand decoupled from its water (the
solvent leg of a hydration free energy), the same ligand in vacuum, the ligand in its receptor. Every state
is a copy of the force field with its global parameters set (:func:`mindsponge.alchemy.force_fields_at`);
one replica per state runs ``steps_per_iteration`` MD steps per iteration, after which the configuration
of every replica is evaluated in every state. With ``hrex=True`` neighbouring states then exchange
configurations (Hamiltonian replica exchange, Metropolis); with ``hrex=False`` every state keeps its own
walker (independent windows). Both run on :class:`mindsponge.replica_exchange.ReplicaExchange`, so the
replicas run in this process, on a local pool (``workers=``) or on Dask (``scheduler=``), and the run is
the same bit for bit wherever they run.

Resuming: with ``directory=`` everything the run needs is written after every iteration, atomically
(:func:`common.io.save_checkpoint`: positions, velocities, box, random streams, which replica is in which
state, the reduced potentials so far); :func:`run_leg` called again with the same arguments continues
after the last completed iteration, and the samples, hence the analysis, are those of an uninterrupted
run. ``stop_after=`` stops after that many iterations in all (a run split in parts). A leg's settings are
kept in ``leg.json`` (the states, temperature, integrator, precision, constraints, how the start was made
and a digest of the force field's parameters); a directory holding a run of other states or settings is
refused, naming the settings that differ, and so is a checkpoint without its ``leg.json`` or a damaged
``leg.json`` or ``start.npz`` (:class:`common.errors.DataError`, naming the file).

Constant pressure: with ``pressure=`` the starting structure is first equilibrated at that pressure
(Monte Carlo barostat, fully interacting state, ``npt_steps``), and then every replica samples its state
at that pressure (a Monte Carlo barostat each; the reduced potentials carry ``beta p V``, as openmmtools'
do). Without it the replicas run at constant volume.

Results: :class:`LegResult` holds the samples (:class:`~mindsponge.free_energy_analysis.FreeEnergySamples`,
the first ``equilibration`` iterations discarded and the rest decorrelated), the MBAR/BAR estimate and
the forward/reverse convergence. :func:`combine` makes a hydration or binding free energy of legs:

- hydration: ``dG_hyd = dG_vacuum - dG_solvent``, each ``dG_leg = f(decoupled) - f(coupled)``, the free
  energy of switching the solute off in that leg (so a well-solvated molecule has ``dG_solvent > dG_vacuum``
  and a negative ``dG_hyd``);
- binding: ``dG_bind = dG_solvent - dG_complex`` (plus a restraint's standard-state correction, when the
  complex leg holds one);
- sum: ``sum_leg sign_leg dG_leg``.

Example::

    ff = ms.alchemy.alchemical_force_field(openmm_system, ligand_atoms)
    states = ms.alchemy.lambda_schedule(electrostatics=5, sterics=9)
    leg = ms.free_energy.run_leg(system, ff, states, temperature=300.0, steps_per_iteration=500,
                                 iterations=200, equilibration=20, directory="solvent")
    leg.estimate.mbar_difference()        # (dG, its uncertainty) kT
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import pathlib
import zipfile
from dataclasses import dataclass

import numpy as np
import torch

from common import checks
from common.errors import ConfigurationError, DataError
from common.units import BOLTZMANN_MD
from mindsponge.free_energy_analysis import (
    KCAL_PER_KJ,
    ConvergenceResult,
    FreeEnergyEstimate,
    FreeEnergySamples,
    convergence,
    decorrelate,
    discard_equilibration,
    estimate,
    finite_or_none,
    statistical_inefficiencies,
)

__all__ = ["LegResult", "analyze", "combination_signs", "combine", "run_leg", "COMBINATIONS"]

#: how legs combine: kind -> {leg name: sign}
COMBINATIONS = {"hydration": {"vacuum": 1.0, "solvent": -1.0}, "binding": {"solvent": 1.0, "complex": -1.0}}
CHECKPOINT = "replicas.chk"
SETTINGS = "leg.json"
START = "start.npz"
SAMPLES = "u_kn.npz"
#: the layout of leg.json; a record without ``format`` was written before it kept the integrator, precision,
#: constraints, minimisation and force field, and holds only :data:`_FIRST_KEYS`
SETTINGS_FORMAT = 2
_FIRST_KEYS = ("states", "temperature", "steps_per_iteration", "hrex", "seed", "n_atoms", "pressure")


@dataclass(frozen=True)
class LegResult:
    """A leg's samples and estimates.

    Attributes:
        samples: every sample (kT), equilibration included (:meth:`FreeEnergySamples.discard` drops it).
        used: the samples the estimate used (equilibration discarded, decorrelated).
        estimate: MBAR, BAR and the overlap (:class:`~mindsponge.free_energy_analysis.FreeEnergyEstimate`).
        convergence: forward and reverse estimates, or ``None`` (too few samples).
        acceptance: ``(K - 1,)`` the fraction of accepted swaps between neighbouring states (HREX), else
            ``None``.
        iterations: the iterations run.
        equilibration: the iterations left out (found by the analysis when it was asked for ``"auto"``).
    """

    samples: FreeEnergySamples
    used: FreeEnergySamples
    estimate: FreeEnergyEstimate
    convergence: ConvergenceResult | None
    acceptance: np.ndarray | None
    iterations: int
    equilibration: int = 0

    def summary(self) -> dict:
        """:meth:`FreeEnergyEstimate.summary` with the iterations and the exchange acceptance."""
        result = self.estimate.summary()
        result["iterations"] = self.iterations
        result["equilibration_iterations"] = self.equilibration
        result["samples_per_state_total"] = [int(count) for count in self.samples.samples_per_state]
        if self.acceptance is not None:
            result["exchange_acceptance"] = [finite_or_none(value) for value in self.acceptance]
        return result


def _independent_windows():
    from mindsponge.replica_exchange import ReplicaExchange

    class IndependentWindows(ReplicaExchange):
        """The replica-exchange machinery without exchanges: every state keeps its walker."""

        def _exchange(self, reduced):
            return None

    return IndependentWindows


def _settings_record(states, force_field, system, *, temperature, steps_per_iteration, hrex, seed, pressure,
                     npt_steps, dt, friction, minimize, constraints, precision) -> dict:
    """What ``leg.json`` keeps of a leg: everything that decides its samples, so that a run continued with
    other settings is refused (:func:`_check_directory`).

    The states, temperature (K), ``steps_per_iteration``, ``hrex``, ``seed``, the atom count, ``dt`` (ps),
    ``friction`` (1/ps), ``minimize``, the ``constraints`` (their name, or a description), the
    ``precision`` (its name), ``pressure`` (bar) and ``npt_steps`` (at constant pressure only), and
    ``force_field``: :func:`_force_field_digest`, which changes with any parameter, the alchemical region
    or its options. ``minimize``, ``npt_steps`` and ``seed`` shape the start (``start.npz``) and the random
    streams, which a resumed run reads back; they are kept so that the folder's run is the one its
    configuration describes.
    """
    if constraints is not None and not isinstance(constraints, str):
        constraints = f"{type(constraints).__name__} of {constraints.n_constraints} distances"
    if precision is not None and not isinstance(precision, str):
        precision = precision.name or repr(precision)
    record = {"format": SETTINGS_FORMAT, "states": [dict(state) for state in states],
              "temperature": float(temperature), "steps_per_iteration": int(steps_per_iteration),
              "hrex": bool(hrex), "seed": int(seed), "n_atoms": int(system.n_atoms), "dt": float(dt),
              "friction": float(friction), "minimize": bool(minimize), "constraints": constraints,
              "precision": precision, "force_field": _force_field_digest(force_field)}
    if pressure is not None:  # sampled at constant pressure (a leg at constant volume has no such keys)
        record["pressure"] = float(pressure)
        record["npt_steps"] = int(npt_steps)
    return record


def _force_field_digest(force_field) -> str:
    """SHA-256 of a force field's terms (kind and name), their tensors (parameters, atom indices, the
    values of the global parameters), masses and constraints: the same for a force field built again from
    the same files and settings, different when a parameter, the alchemical region or its options
    change. Settings a term keeps outside tensors (a cutoff, the nonbonded method) are not in it."""
    digest = hashlib.sha256(" ".join(f"{type(term).__name__}:{term.name}" for term in force_field).encode())
    tensors = dict(force_field.state_dict())
    if force_field.masses is not None:
        tensors["masses"] = force_field.masses
    if force_field.constraints is not None:
        tensors["constraint_pairs"] = force_field.constraints.pairs
        tensors["constraint_distances"] = force_field.constraints.distances
    for name, tensor in tensors.items():
        array = np.ascontiguousarray(tensor.detach().cpu().numpy())
        digest.update(f"{name} {array.dtype} {array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _read_record(path: pathlib.Path) -> dict:
    """``leg.json``, or :class:`DataError` naming it when it is not a JSON object."""
    try:
        record = json.loads(path.read_text())
    except (ValueError, OSError) as error:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DataError(f"{path}: damaged leg settings ({type(error).__name__}: {error}); remove the leg's "
                        "folder to start it again") from error
    if not isinstance(record, dict):
        raise DataError(f"{path}: damaged leg settings (a JSON {type(record).__name__}, not an object); "
                        "remove the leg's folder to start it again")
    return record


def _check_directory(directory: pathlib.Path, record: dict) -> bool:
    """Write ``leg.json`` or compare with it; True when the directory holds a run to continue.

    A ``leg.json`` of the first layout (no ``format``: it kept :data:`_FIRST_KEYS` only) cannot show that
    the integrator, precision, constraints, minimisation and force field are unchanged, so it is refused
    (rather than trusted): the message gives the keys to add to it when the run did use these settings.

    Raises:
        ConfigurationError: a run of other settings (the keys that differ named), or a ``leg.json`` of the
            first layout.
        DataError: a checkpoint without ``leg.json``, or a damaged ``leg.json``.
    """
    path = directory / SETTINGS
    if path.exists():
        previous = _read_record(path)
        first_layout = "format" not in previous
        changed = sorted(key for key in record.keys() | previous.keys()
                         if previous.get(key) != record.get(key) and (key in _FIRST_KEYS or not first_layout))
        if changed:
            raise ConfigurationError(
                f"{path}: this folder holds a leg run with other settings (changed: {', '.join(changed)}); "
                "use another output folder, or remove it to start again")
        if first_layout:
            unrecorded = {key: record[key] for key in record if key not in previous}
            raise ConfigurationError(
                f"{path}: this leg was started by an earlier mindsponge, which did not record "
                f"{', '.join(key for key in unrecorded if key != 'format')}, so the run cannot be checked "
                "against these settings. If it ran with them, add these keys to the file to continue it: "
                f"{json.dumps(unrecorded)}; else use another output folder, or remove it to start again")
        return (directory / CHECKPOINT).exists()
    if (directory / CHECKPOINT).exists():
        raise DataError(f"{directory / CHECKPOINT} has no {SETTINGS} beside it: the settings of the run it "
                        "continues are unknown; remove the checkpoint (or the folder) to start the leg again")
    directory.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".partial")
    temporary.write_text(json.dumps(record, indent=1))
    os.replace(temporary, path)
    return False


def _start(system, force_field, integrator, *, directory, resume, minimize, pressure, npt_steps, constraints,
           precision, seed, progress):
    """The replicas' common starting system: minimised, NPT-equilibrated when ``pressure`` is given; kept in
    ``start.npz`` so that a resumed run builds its replicas from the same one."""
    path = None if directory is None else directory / START
    if resume and path is not None and path.exists():
        try:
            with np.load(path) as data:
                positions, box = data["positions"], data["box"]
        except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
            raise DataError(f"{path}: cannot read the leg's starting structure ({type(error).__name__}: "
                            f"{error}); remove it to have it made again") from error
        box = None if box.size == 0 else torch.as_tensor(box).to(system.positions)
        return system.replace(positions=torch.as_tensor(positions).to(system.positions), box=box)
    if minimize or pressure is not None:
        from mindsponge import barostats
        from mindsponge.simulation import Simulation

        barostat = None
        if pressure is not None:
            barostat = barostats.MonteCarloBarostat(pressure, integrator.temperature)
        simulation = Simulation(system, force_field, copy.copy(integrator), barostat=barostat,
                                constraints=constraints, precision=precision, progress=progress, seed=seed)
        if minimize:
            simulation.minimize()
        if pressure is not None and npt_steps:
            simulation.set_velocities(temperature=integrator.temperature, seed=seed)
            simulation.run(npt_steps)
        state = simulation.state
        system = system.replace(positions=state.positions.detach().to(system.positions),
                                box=None if state.box is None else state.box.detach().to(system.positions))
    if path is not None:
        temporary = f"{path}.partial.npz"
        np.savez(temporary, positions=system.positions.detach().cpu().numpy(),
                 box=np.zeros(0) if system.box is None else system.box.detach().cpu().numpy())
        os.replace(temporary, path)
    return system


def run_leg(system, force_field, states, *, temperature: float, steps_per_iteration: int, iterations: int,
            equilibration: int | str = 0, hrex: bool = True, dt: float = 0.002, friction: float = 1.0,
            pressure: float | None = None, npt_steps: int = 0, minimize: bool = True, constraints=None,
            precision=None, seed: int = 0, directory=None, stop_after: int | None = None, workers: int = 0,
            scheduler=None, bootstrap: int = 0, progress: bool = True) -> LegResult | None:
    """Sample the states of one leg and estimate its free energies (see the module docstring).

    Args:
        system: :class:`~mindsponge.system.System`, the starting structure (positions ``(N, 3)`` nm).
        force_field: :class:`~mindsponge.forcefield.ForceField` with the states' global parameters
            (:func:`mindsponge.alchemy.alchemical_force_field`, or any force field with global parameters).
        states: ``K >= 2`` :class:`~mindsponge.alchemy.AlchemicalState` objects or global-parameter dicts,
            ordered along the path (neighbours exchange).
        temperature: K. dt: ps. friction: 1/ps (Langevin, BAOAB).
        steps_per_iteration: MD steps between evaluations (and exchanges).
        iterations: iterations in all (a resumed run continues up to this number).
        equilibration: the first iterations, whose samples are left out of the estimate, or ``"auto"``:
            those before the run equilibrated (:func:`analyze`).
        hrex: Hamiltonian replica exchange between neighbouring states (``False``: independent windows).
        pressure: bar: equilibrate the starting box at this pressure for ``npt_steps`` first, then sample
            every state at this pressure (``None``: constant volume).
        minimize: minimise the starting structure (fully interacting state) first.
        constraints, precision: as :class:`~mindsponge.simulation.Simulation` (default: the System's).
        seed: seeds velocities, random streams and exchanges.
        directory: where the checkpoint (``replicas.chk``), ``leg.json``, ``start.npz`` and the samples
            (``u_kn.npz``) go; ``None``: nothing is written and the run cannot be resumed.
        stop_after: stop once this many iterations are done in all (then ``None`` is returned unless
            ``iterations`` are done).
        workers, scheduler: where replicas run (:func:`common.parallel.run_jobs`).
        bootstrap: bootstrap resamplings for MBAR's bootstrap uncertainty (0: analytic only).
        progress: a progress bar over iterations.

    Returns:
        :class:`LegResult`, or ``None`` when ``stop_after`` stopped the run before ``iterations``.

    Raises:
        ConfigurationError: fewer than two states, bad counts, ``pressure`` for a system without a box, a
            directory of another run (:func:`_check_directory`).
        DataError: a damaged ``leg.json`` or ``start.npz``, or a checkpoint without ``leg.json``.
    """
    from mindsponge import alchemy, barostats, integrators
    from mindsponge import replica_exchange as rex

    checks.positive(temperature, "run_leg: temperature (K)")
    checks.positive_int(steps_per_iteration, "run_leg: steps_per_iteration")
    checks.positive_int(iterations, "run_leg: iterations")
    if equilibration != "auto" and checks.non_negative_int(
            equilibration, "run_leg: equilibration (or 'auto')") >= iterations:
        raise ConfigurationError(f"run_leg: equilibration ({equilibration}) must be fewer than the "
                                 f"iterations ({iterations})")
    parameters = alchemy._state_parameters(states, force_field.global_parameters)
    if len(parameters) < 2:
        raise ConfigurationError(f"run_leg: give two or more states, got {len(parameters)}")
    if pressure is not None and system.box is None:
        raise ConfigurationError("run_leg: pressure needs a periodic system, but this system has no box")
    directory = None if directory is None else pathlib.Path(directory)
    resume = False
    if directory is not None:
        record = _settings_record(parameters, force_field, system, temperature=temperature,
                                  steps_per_iteration=steps_per_iteration, hrex=hrex, seed=seed,
                                  pressure=pressure, npt_steps=npt_steps, dt=dt, friction=friction,
                                  minimize=minimize, constraints=constraints, precision=precision)
        resume = _check_directory(directory, record)
    integrator = integrators.LangevinMiddle(dt, float(temperature), friction)
    force_field.barostat = None  # the sampler's own barostat, or constant volume (see the module docstring)
    # the states' copies first: a force field that has run in a Simulation holds compiled kernels, which
    # neither copy nor pickle (workers get the states' force fields pickled)
    state_fields = alchemy.force_fields_at(force_field, parameters)
    start = _start(system, copy.deepcopy(force_field), integrator, directory=directory, resume=resume,
                   minimize=minimize, pressure=pressure, npt_steps=npt_steps, constraints=constraints,
                   precision=precision,
                   seed=seed, progress=progress)
    thermodynamic = [rex.ThermodynamicState(float(temperature), potential=state_field)
                     for state_field in state_fields]
    sampler_class = rex.ReplicaExchange if hrex else _independent_windows()
    checkpoint = None if directory is None else directory / CHECKPOINT
    barostat = None if pressure is None else barostats.MonteCarloBarostat(pressure, float(temperature))
    sampler = sampler_class(start, force_field, thermodynamic, integrator, steps_per_iteration,
                            constraints=constraints, precision=precision, seed=seed, checkpoint=checkpoint,
                            workers=workers, scheduler=scheduler, progress=progress, barostat=barostat)
    if resume:
        sampler.load_checkpoint(checkpoint)
        logging.getLogger(__name__).info("resumed from the checkpoint of iteration %d of %d (%s)",
                                         sampler.rounds_done, iterations, checkpoint)
    target = iterations if stop_after is None else min(iterations, stop_after)
    sampler.run(max(target - sampler.rounds_done, 0))
    samples = _samples_of(sampler.record, parameters, temperature, steps_per_iteration * dt)
    if directory is not None:
        samples.save(directory / SAMPLES)
    if sampler.rounds_done < iterations:
        return None
    acceptance = None
    if hrex:
        matrix = sampler.record.acceptance()
        acceptance = np.array([matrix[k, k + 1] for k in range(len(parameters) - 1)])
    return analyze(samples, equilibration=equilibration, bootstrap=bootstrap, acceptance=acceptance,
                   iterations=sampler.rounds_done)


def _samples_of(record, parameters, temperature, time_per_iteration) -> FreeEnergySamples:
    """The record's reduced potentials as samples: sample ``(k, t)`` is the configuration in state ``k``
    after iteration ``t``'s exchanges (swaps keep the joint distribution, so it samples state ``k``)."""
    u_kn, counts = record.u_kn()
    count, rounds = len(counts), int(counts[0]) if len(counts) else 0
    iteration = np.tile(np.arange(rounds), count)
    return FreeEnergySamples(u_kn, np.repeat(np.arange(count), rounds), iteration,
                             (iteration + 1) * time_per_iteration, tuple(parameters), temperature)


def analyze(samples: FreeEnergySamples, *, equilibration: int | str = 0, decorrelated: bool = True,
            bootstrap: int = 0, seed: int = 0, acceptance=None, iterations: int | None = None) -> LegResult:
    """Estimate a leg from its samples (:meth:`FreeEnergySamples.load` re-analyses a saved run).

    Args:
        samples: every sample of the leg.
        equilibration: iterations whose samples are left out, or ``"auto"``: those before the run
            equilibrated (:func:`~mindsponge.free_energy_analysis.discard_equilibration`).
        decorrelated: subsample each state by its statistical inefficiency first.
        bootstrap, seed: MBAR's bootstrap uncertainty (0: none).
        acceptance: optional exchange acceptances to keep in the result.
        iterations: the iterations run (default: the largest iteration + 1).

    Returns:
        :class:`LegResult`.
    """
    if equilibration == "auto":
        production, equilibration = discard_equilibration(samples)
    else:
        production = samples.discard(checks.non_negative_int(equilibration, "analyze: equilibration"))
    inefficiencies = statistical_inefficiencies(production)
    used = decorrelate(production, inefficiencies) if decorrelated else production
    result = estimate(used, bootstrap=bootstrap, seed=seed, inefficiencies=inefficiencies)
    enough = bool((used.samples_per_state >= 2).all())
    trend = convergence(used) if enough else None
    if iterations is None:
        iterations = int(samples.iteration.max()) + 1 if len(samples.iteration) else 0
    return LegResult(samples, used, result, trend, acceptance, iterations, equilibration)


def combination_signs(kind: str, names, signs: dict | None = None) -> dict:
    """The sign of every leg in a ``kind`` combination (see :func:`combine`) of the legs ``names``.

    Raises:
        ConfigurationError: an unknown ``kind``, or a leg it needs missing from ``names``.
    """
    if kind == "sum":
        signs = {name: 1.0 for name in names} if signs is None else dict(signs)
    elif kind in COMBINATIONS:
        signs = dict(COMBINATIONS[kind])
    else:
        raise ConfigurationError(f"combine: kind must be one of {[*COMBINATIONS, 'sum']}, got {kind!r}")
    missing = sorted(set(signs) - set(names))
    if missing:
        raise ConfigurationError(f"a {kind} free energy needs the legs {sorted(signs)}; missing {missing} "
                                 f"(the legs: {sorted(names)})")
    return signs


def combine(legs: dict, kind: str = "hydration", signs: dict | None = None, temperature: float | None = None,
            correction_kT: float = 0.0) -> dict:  # noqa: N803 - kT is the unit
    """Combine the legs' first-to-last MBAR differences into one free energy.

    Args:
        legs: leg name -> :class:`LegResult`.
        kind: ``"hydration"`` (legs ``vacuum`` and ``solvent``: ``dG_vacuum - dG_solvent``), ``"binding"``
            (``solvent`` and ``complex``: ``dG_solvent - dG_complex``) or ``"sum"`` (``signs``).
        signs: leg name -> sign (``"sum"`` only; default +1 each).
        temperature: K (default: the legs').
        correction_kT: added to the result (a restraint's standard-state correction), kT.

    Returns:
        dict: ``kT``, ``kJ/mol``, ``kcal/mol``, each ``{"value", "error", "bootstrap_error"}`` (errors of
        the legs in quadrature; ``bootstrap_error`` ``None`` unless every leg has one; a number that is not
        finite is ``None``), and ``signs``.

    Raises:
        ConfigurationError: see :func:`combination_signs`.
    """
    signs = combination_signs(kind, legs, signs)
    value, variance, bootstrap = float(correction_kT), 0.0, 0.0
    for name, sign in signs.items():
        difference, error = legs[name].estimate.mbar_difference()
        value += sign * difference
        variance += error**2
        boot = legs[name].estimate.d_delta_f_bootstrap
        bootstrap = None if boot is None or bootstrap is None else bootstrap + float(boot[0, -1]) ** 2
    if temperature is None:
        temperature = next(iter(legs.values())).estimate.temperature
    kT = BOLTZMANN_MD * temperature  # noqa: N806
    result = {"kind": kind, "signs": signs, "correction_kT": float(correction_kT)}
    for unit, scale in (("kT", 1.0), ("kJ/mol", kT), ("kcal/mol", kT * KCAL_PER_KJ)):
        result[unit] = {"value": finite_or_none(value * scale),
                        "error": finite_or_none(math.sqrt(variance) * scale),
                        "bootstrap_error": None if bootstrap is None else finite_or_none(
                            math.sqrt(bootstrap) * scale)}
    return result
