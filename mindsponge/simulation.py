"""The simulation driver: state, step loop, minimisation, checkpoints, reporters.

Example::

    import mindsponge as ms
    sim = ms.Simulation(system, ff,
                        integrator=ms.integrators.LangevinMiddle(dt=0.002, temperature=300.0, friction=1.0),
                        constraints="water+hbonds",
                        reporters=[ms.reporters.LogReporter("log.csv", every=100)])
    sim.minimize()
    sim.set_velocities(temperature=300.0, seed=1)
    sim.run(10_000)
    sim.save_checkpoint("run.chk")
    sim.energies()   # potential, kinetic, total, temperature, pressure, volume, density

A :class:`Simulation` holds an immutable :class:`~mindsponge.state.State`. :meth:`Simulation.run`
steps to the next step on which something is due, in compiled blocks where it can
(:mod:`mindsponge.step_loop`), then does what is due there: the barostat's move, the update of adaptive
biases (modules with ``after_step(positions, box, step) -> bool``, such as metadynamics: the forces are
recomputed when one returns ``True``), the reports, the checkpoint. Everything a step depends on
(positions, velocities, box, forces, the generator state, thermostat variables, the biases' buffers,
and the reference positions of the neighbour lists, which fix the summation order) goes into a
checkpoint (:mod:`mindsponge.checkpoint`): a run continued from one is bit-identical to one that never
stopped (same device and dtype). Integrators, thermostats and barostats get the run's fixed data as a
:class:`~mindsponge.context.DynamicsContext` (``sim.context``), never the simulation. A step whose
energy or positions are not finite, whose energy jumps by more than ``max_energy_jump``, or whose
constraints fail stops the run with :class:`SimulationBlowUpError` naming the step; with a
``checkpoint`` path the last good state is written there first.
"""

import contextlib
import dataclasses
import math
import warnings

import torch

from common import checks, progress
from common import threads as threads_module
from common.deprecation import deprecated_method
from common.errors import ConfigurationError, SimulationError
from mindsponge import checkpoint as checkpoint_module
from mindsponge import reporters as report_schedule
from mindsponge import simulation_setup as setup
from mindsponge import space, step_loop, thermo
from mindsponge.context import DynamicsContext
from mindsponge.forcefield.base import check_inputs, energy_and_forces
from mindsponge.overlaps import (
    OVERLAP_DISTANCE,
    OverlapError,
    OverlapWarning,
    describe_overlaps,
    overlaps_of_state,
)
from mindsponge.simulation_checkpoints import SimulationCheckpoints
from mindsponge.space import BoxTooSmallError
from mindsponge.state import State

__all__ = ["Simulation", "SimulationBlowUpError"]

class SimulationBlowUpError(SimulationError):
    """The simulation became unstable (non-finite or exploding energy).

    A :class:`common.errors.SimulationError` (hence a ``RuntimeError``), raised as
    ``SimulationBlowUpError(message, step)``.

    Attributes:
        step: the step at which the instability was detected.
    """


class Simulation(SimulationCheckpoints):
    """Molecular dynamics of a system under a force field.

    Args:
        system: :class:`~mindsponge.system.System` (positions, masses, box, topology, velocities).
        forcefield: callable ``(positions, box) -> energy`` (kJ/mol), usually a
            :class:`~mindsponge.forcefield.ForceField`, in the compute dtype of ``precision``.
        integrator: an integrator from :mod:`mindsponge.integrators`.
        thermostat: optional thermostat from :mod:`mindsponge.thermostats`, called as
            ``apply(state, sim.context) -> state`` after each step (use with
            :class:`~mindsponge.integrators.VelocityVerlet`).
        barostat: optional barostat from :mod:`mindsponge.barostats`, called as
            ``apply(state, sim.context) -> state`` every ``barostat.every`` steps. ``None`` (the
            default): the force field's ``barostat`` (an OpenMM System's ``MonteCarloBarostat``), or
            none. A box the barostat shrinks below twice a cutoff stops the run as a blow-up.
        constraints: ``None`` (the default: the force field's own constraints, see below, or none),
            ``"none"`` (no constraints), ``"water"``, ``"hbonds"``, ``"water+hbonds"`` (see
            :func:`mindsponge.constraint_sets.from_system`) or a
            :class:`~mindsponge.constraints.Constraints`.
        constraint_tolerance: relative tolerance of RATTLE (OpenMM's default 1e-5).
        reporters: reporters from :mod:`mindsponge.reporters`.
        precision: ``"mixed"`` (float32 forces, float64 state and integration, as OpenMM's CPU
            platform: the fast one), ``"double"``, ``"single"`` or a
            :class:`common.precision.Precision`: forces in the compute dtype, state and
            integration in the accumulate dtype. ``None`` (the default) is ``"mixed"``, unless the
            force field was explicitly converted (``forcefield.to(torch.float64)`` or
            ``.double()`` gives ``"double"``, ``.to(torch.float32)`` ``"mixed"``). An explicit
            precision whose compute dtype contradicts such a conversion, or double precision
            with float32 parameters, is refused (never silently overridden). The force field's
            parameters are not converted: terms compute in the dtype of the positions they get.
        overlap_distance: atoms closer than this (nm, default 0.05) overlap; ``None`` turns the
            check off. See "Overlaps" below.
        remove_center_of_mass_motion: zero the centre-of-mass velocity after every step (as
            OpenMM's ``CMMotionRemover``); 3 degrees of freedom fewer. ``None`` (the default): as
            the force field's OpenMM System says (whether it holds a ``CMMotionRemover``), else
            ``True``.
        checkpoint: optional path written every ``checkpoint_every`` steps and on a blow-up.
        checkpoint_every: steps between checkpoints.
        max_energy_jump: largest allowed change of the potential energy in one step, kJ/mol;
            default 100 kJ/mol per atom.
        seed: seed of the generator of stochastic integrators and thermostats.
        progress: show a tqdm progress bar in :meth:`run` (and :meth:`minimize`); when standard
            error is not a terminal it is redrawn at most once a minute (:mod:`common.progress`).
        threads: how many threads the steps use. ``"auto"`` (the default): :meth:`run` follows the
            load (:class:`common.threads.LoadFollower`): at most torch's thread count when the run
            starts (``OMP_NUM_THREADS``, ``torch.set_num_threads``), less the cores other processes
            keep busy, re-read every half second, and torch's count is given back when the run ends.
            On a machine shared with busy processes, torch's OpenMP threads wait for each other at
            every parallel region while another process holds one of their cores: with one busy-loop
            process on 2 cores, a step of 3,000 TIP3P atoms took about 5 times longer with 2 threads
            than with 1. The compiled kernels give the same numbers whatever the thread count, so
            following the load changes the speed only. A positive int, or ``"free"`` (the cores not
            busy now, :func:`common.threads.free_cores`), sets torch's thread count once, here, for
            the process (it stays after the simulation), and :meth:`run` keeps it; ``None`` leaves
            it alone and keeps it too.

    The force field is the truth: when it carries the masses and constraints it was
    parameterised with (a force field from :func:`mindsponge.interop.openmm.from_openmm`,
    :func:`~mindsponge.interop.openmm.load` or the command line holds the OpenMM System's), the
    simulation integrates with those masses (hydrogen mass repartitioning included, even when
    the ``system`` came from :meth:`System.from_pdb <mindsponge.system.System.from_pdb>` with
    element masses; ``sim.masses`` holds them) and, with no ``constraints`` argument, applies
    those constraints at the System's distances (SETTLE for rigid three-site waters, RATTLE for
    the others). A ``constraints`` argument is checked against them: a pair held at another
    distance, or a bond whose energy term OpenMM removed because it was constrained left free
    (e.g. ``constraints="none"``), raises :class:`common.errors.ConfigurationError` naming the
    atoms and the distance. Virtual sites of the force field are placed after every step.
    Force fields without such data (mindsponge's own terms, water boxes from
    :mod:`mindsponge.build` with a force field built separately) keep the ``system``'s masses
    and get no constraints unless asked.

    Overlaps: when the simulation is created, atom pairs closer than ``overlap_distance`` (not
    counting virtual sites, which sit close to their parents on purpose, nor atoms on which the
    force field exerts no force at all, such as an ideal gas) are found with a cell search (at
    the start of :meth:`run` too when the positions were set from outside) and listed in ``sim.overlaps``
    (``(i, j, distance)``, closest first); an :class:`OverlapWarning` names the closest pair
    (atom indices, names, residues) and the distance. :meth:`run` refuses to start dynamics on
    such a structure (:class:`OverlapError`) until :meth:`minimize` has moved the atoms apart
    (the minimiser recovers from overlaps, see :mod:`mindsponge.minimize`).

    Raises:
        ValueError: an invalid argument (named in the message).
        TypeError: an argument of the wrong type.
        common.errors.ConfigurationError: constraints or a precision that contradict the force
            field (see above), or force-field masses for another number of atoms.
    """

    def __init__(
        self,
        system,
        forcefield,
        integrator,
        *,
        thermostat=None,
        barostat=None,
        constraints=None,
        constraint_tolerance=1e-5,
        reporters=(),
        precision=None,
        remove_center_of_mass_motion=None,
        checkpoint=None,
        checkpoint_every=1000,
        max_energy_jump=None,
        seed=0,
        progress=True,
        threads="auto",
        overlap_distance=OVERLAP_DISTANCE,
    ):
        if barostat is None:
            barostat = getattr(forcefield, "barostat", None)
        if remove_center_of_mass_motion is None:
            system_choice = getattr(forcefield, "remove_center_of_mass_motion", None)
            remove_center_of_mass_motion = True if system_choice is None else system_choice
        setup.check_parts(system, forcefield, integrator, barostat)
        integrator = setup.with_thermostat(integrator, thermostat)
        # "auto": a LoadFollower keeps the thread count at the cores the load leaves free while this
        # simulation computes (run, energy_and_forces)
        self._threads = threads_module.LoadFollower() if threads == "auto" else None
        threads_module.set_threads(None if threads == "auto" else threads)
        precision = setup.resolve_precision(precision, forcefield)
        self.checkpoint_every = checks.positive_int(checkpoint_every, "checkpoint_every (steps)")
        self.system = setup.integration_system(system, forcefield, precision)
        self.forcefield = forcefield
        self.barostat = barostat
        self.precision = precision
        self.reporters = list(reporters)
        self.remove_center_of_mass_motion = bool(remove_center_of_mass_motion)
        self.checkpoint = checkpoint
        self.progress = progress
        self.masses = self.system.masses
        self.constraints = setup.resolve_constraints(
            constraints, forcefield, self.system, self.masses, constraint_tolerance
        )
        self.degrees_of_freedom = thermo.degrees_of_freedom(
            self.masses, setup.count_constraints(self.constraints), self.remove_center_of_mass_motion
        )
        self.max_energy_jump = 100.0 * system.n_atoms if max_energy_jump is None else float(max_energy_jump)
        bonds = setup.molecule_bonds(self.system, forcefield, self.constraints)
        self.molecules = thermo.molecule_groups(system.n_atoms, bonds, device=system.device)
        self.generator = torch.Generator(device=system.device)
        self.generator.manual_seed(int(seed))
        self.adaptive_modules = [
            module
            for module in (forcefield.modules() if isinstance(forcefield, torch.nn.Module) else ())
            if callable(getattr(module, "after_step", None))
        ]
        self.neighbor_lists = checkpoint_module.neighbor_lists(forcefield)
        self._integrator = integrator
        self._loop = None  # the compiled step loop (mindsponge.step_loop), built when first needed
        self._loop_built = False
        self._loop_parameters = self._forces_parameters = getattr(forcefield, "parameters_version", 0)
        self.context = DynamicsContext(
            masses=self.masses,
            degrees_of_freedom=self.degrees_of_freedom,
            dt=integrator.dt,
            generator=self.generator,
            molecules=self.molecules,
            energy_and_forces=self.energy_and_forces,
            potential=self.potential,
            constraints=self.constraints,
        )
        self.state = self._with_forces(self._initial_state())
        self.overlap_distance = None if overlap_distance is None else float(overlap_distance)
        self.overlaps = self.check_overlaps()
        if self.overlaps:
            message = f"{self._describe_overlaps()}; minimise (sim.minimize()) before running"
            warnings.warn(message, OverlapWarning, stacklevel=2)

    @property
    def integrator(self):
        """The integrator; assigning another one also gives its ``dt`` to :attr:`context`."""
        return self._integrator

    @integrator.setter
    def integrator(self, integrator):
        self._integrator = integrator
        self.context = dataclasses.replace(self.context, dt=integrator.dt)
        self._loop, self._loop_built = None, False

    @property
    def thermostat(self):
        """The integrator's thermostat (``None`` for Langevin dynamics or NVE)."""
        return getattr(self._integrator, "thermostat", None)

    @property
    def step_loop(self):
        """The compiled step loop (:class:`mindsponge.step_loop.StepLoop`) that runs this simulation's
        steps, or ``None`` when they run in Python (see :mod:`mindsponge.step_loop`)."""
        version = getattr(self.forcefield, "parameters_version", 0)  # ForceField.set_global_parameters
        if not self._loop_built or self._loop_parameters != version:
            self._loop_parameters = version
            self._loop = step_loop.build(self.forcefield, self.precision, self.masses, self._integrator,
                                         self.constraints, self.remove_center_of_mass_motion,
                                         self.degrees_of_freedom, self.generator, self.system.box)
            self._loop_built = True
        return self._loop

    def _follow_parameters(self) -> None:
        """Recompute the state's forces if the force field's global parameters changed since then."""
        version = getattr(self.forcefield, "parameters_version", 0)
        if self._forces_parameters != version:
            self._forces_parameters, self.state = version, self._with_forces(self.state)

    def _initial_state(self):
        """The system's positions (each molecule moved into the periodic box, constrained) and velocities
        (zero if none), without forces."""
        positions = self.system.positions
        if self.system.box is not None:  # positions may lie anywhere, as OpenMM writes them
            positions = space.wrap_molecules(positions, self.system.box, self.molecules, self.masses)
        if self.constraints is not None:
            positions = self.constraints.positions(positions, positions, self.masses)
        velocities = self.system.velocities
        if velocities is None:
            velocities = torch.zeros_like(positions)
        return State(positions, velocities, self.system.box, rng_state=self.generator.get_state())

    # --- overlaps -------------------------------------------------------------------------
    def check_overlaps(self):
        """Recompute ``sim.overlaps`` for the current positions (see :func:`find_overlaps`).

        Returns:
            list of ``(i, j, distance)`` (atom indices, nm), closest first; empty when the check
            is off (``overlap_distance=None``).
        """
        self._checked_positions = self.state.positions
        self.overlaps = ([] if self.overlap_distance is None else
                         overlaps_of_state(self.state, self.forcefield, self.overlap_distance))
        return self.overlaps

    def _describe_overlaps(self):
        return describe_overlaps(self.overlaps, self.system.topology, self.overlap_distance)

    # --- forces and energies -------------------------------------------------------------
    def potential(self, positions, box):
        """Potential energy (kJ/mol, accumulate dtype) of the force field at ``positions`` and ``box``."""
        loop = self.step_loop
        if loop is not None:
            return self.energy_and_forces(positions, box)[0]
        compute = self.precision.compute
        energy = self.forcefield(positions.to(compute), None if box is None else box.to(compute))
        return energy.detach().to(self.precision.accumulate)

    def energy_and_forces(self, positions, box):
        """``(energy, forces)`` at ``positions`` (N, 3) nm and ``box``: kJ/mol and kJ/mol/nm.

        The force field computes in the compute dtype of :attr:`precision`; both come back in
        the accumulate (integration) dtype. Where the compiled step loop runs the simulation, it
        evaluates them too (the same terms; energies summed in float64).

        Raises:
            common.errors.DataError: a NaN or infinite coordinate (naming the atom) or box entry.
        """
        compute, accumulate = self.precision.compute, self.precision.accumulate
        loop = self.step_loop
        with self._threads.following() if self._threads is not None else contextlib.nullcontext():
            if loop is not None:
                check_inputs(positions, box)
                box = None if box is None else box.to(accumulate)
                return loop.energy_and_forces(positions.to(accumulate), box)
            energy, forces = energy_and_forces(self.forcefield, positions.to(compute),
                                               None if box is None else box.to(compute))
        return energy.to(accumulate), forces.to(accumulate)

    force = deprecated_method("energy_and_forces")
    energies = deprecated_method("observables")  # it returned pressure, volume and density too

    def _with_forces(self, state):
        energy, forces = self.energy_and_forces(state.positions, state.box)
        return state.replace(forces=forces, potential_energy=energy)

    def observables(self, state=None, pressure=True):
        """Thermodynamic observables of a state (default: the current one): energies, temperature,
        pressure, volume and density.

        Args:
            state: a :class:`~mindsponge.state.State` or ``None``.
            pressure: compute the pressure (two extra energy evaluations); else ``nan``.

        Returns:
            dict of floats: ``potential``, ``kinetic``, ``total`` (kJ/mol), ``temperature`` (K),
            ``pressure`` (bar), ``volume`` (nm^3), ``density`` (g/cm^3); the last three are
            ``nan`` without a periodic box.
        """
        state = self.state if state is None else state
        if state.potential_energy is None:
            state = self._with_forces(state)
        return thermo.observables(state, self.masses, self.degrees_of_freedom, self.molecules,
                                  self.potential if pressure else None)

    # --- set-up ---------------------------------------------------------------------------
    def set_velocities(self, temperature, seed=None):
        """Draw Maxwell-Boltzmann velocities at ``temperature`` (K).

        Massless particles get zero velocity; the centre-of-mass motion is removed (if the
        simulation removes it), the velocities are constrained, and they are then scaled so
        that the instantaneous temperature (with this simulation's degrees of freedom) is
        exactly ``temperature``. With a ``seed`` a fresh generator is used; without, the
        simulation's generator (and its state advances).
        """
        if not temperature >= 0:
            raise ConfigurationError(f"temperature must be >= 0 K, got {temperature!r}")
        positions = self.state.positions
        generator = torch.Generator(device=positions.device)
        if seed is None:
            generator.set_state(self.state.rng_state)
        else:
            generator.manual_seed(int(seed))

        def constrain(velocities):
            if self.remove_center_of_mass_motion:
                velocities = thermo.remove_center_of_mass_motion(velocities, self.masses)
            if self.constraints is not None:
                velocities = self.constraints.velocities(positions, velocities, self.masses)
            return velocities

        velocities = thermo.maxwell_boltzmann(self.masses, temperature, self.degrees_of_freedom, generator,
                                              positions, constrain)
        rng_state = generator.get_state() if seed is None else self.state.rng_state
        self.state = self.state.replace(velocities=velocities, rng_state=rng_state)

    def minimize(self, tolerance=10.0, max_iterations=1000, method="lbfgs"):
        """Minimise the potential energy (see :func:`mindsponge.minimize.minimize`).

        Args:
            tolerance: stop when the largest atomic force is below this, kJ/mol/nm.
            max_iterations: iteration limit.
            method: ``"lbfgs"`` or ``"fire"``.

        Returns:
            :class:`mindsponge.minimize.MinimizationResult`.
        """
        from mindsponge import minimize as minimize_module

        result = minimize_module.minimize(
            self.energy_and_forces,
            self.state.positions,
            self.masses,
            self.state.box,
            constraints=self.constraints,
            tolerance=tolerance,
            max_iterations=max_iterations,
            method=method,
            progress=self.progress,
            compute_dtype=self.precision.compute,
        )
        self.state = self._with_forces(self.state.replace(positions=result.positions))
        self.check_overlaps()
        return result

    # --- dynamics -------------------------------------------------------------------------
    def step_once(self, state):
        """The state one step after ``state``, stepped in Python: the integrator (its thermostat inside),
        the virtual sites put back at their places (so that reporters see them where the force field
        does) and the centre-of-mass motion removed. The barostat, the adaptive biases, reporters and
        checkpoints are :meth:`run`'s; :meth:`run` steps in compiled code where it can
        (:attr:`step_loop`), with the same operations."""
        state = self._integrator.step(state, self.context)
        virtual_sites = getattr(self.forcefield, "virtual_sites", None)
        if virtual_sites is not None:
            with torch.no_grad():
                state = state.replace(positions=virtual_sites(state.positions))
        if self.remove_center_of_mass_motion:
            velocities = thermo.remove_center_of_mass_motion(state.velocities, self.masses)
            state = state.replace(velocities=velocities)
        return state

    def run(self, steps):
        """Integrate ``steps`` steps, calling reporters and writing checkpoints on schedule.

        The steps run to the next step something is due at (a report, a checkpoint, a barostat move, an
        adaptive bias), in compiled blocks where they can (:attr:`step_loop`); then the barostat moves,
        the biases update, the observables the due reporters need are computed once (:meth:`observables`)
        for their ``report(state, observables)``, and the checkpoint is written, in that order.

        Raises:
            ValueError: ``steps`` is not a non-negative integer.
            SimulationBlowUpError: the energy became non-finite or jumped, a constraint failed, or the
                barostat shrank the box below what the cutoff allows (the message names the step; the
                last good state is written to the checkpoint path if any).
        """
        checks.non_negative_int(steps, "steps")
        self._follow_parameters()
        if self.state.positions is not self._checked_positions:  # positions set from outside
            self.check_overlaps()
        if self.overlaps:
            raise OverlapError(
                f"{self._describe_overlaps()}: dynamics would blow up; call sim.minimize() first",
                self.overlaps,
            )
        end = self.state.step + steps
        threads = self._threads
        with threads.following() if threads is not None else contextlib.nullcontext():
            with progress.bar(total=steps, enabled=self.progress, unit="step", desc="md") as bar:
                while self.state.step < end:
                    plans = [(reporter, *report_schedule.next_report(reporter, self.state))
                             for reporter in self.reporters]
                    steps = [self.state.step + steps for _, steps, _ in plans]
                    target = min([end, *steps, *self._scheduled_events()])
                    self._advance(target, bar, threads)
                    due = [(reporter, needs) for (reporter, _, needs), step in zip(plans, steps, strict=True)
                           if step == target]
                    self._events(due)
        self._checked_positions = self.state.positions  # made by stable dynamics from checked ones
        return self.state

    def _scheduled_events(self):
        """The next steps on which a checkpoint, a barostat move or an adaptive bias is due."""
        step = self.state.step
        events = []
        if self.checkpoint is not None:
            events.append((step // self.checkpoint_every + 1) * self.checkpoint_every)
        if self.barostat is not None:
            events.append((step // self.barostat.every + 1) * self.barostat.every)
        if self.adaptive_modules:
            events.append(step + 1)
        return events

    def _advance(self, target, bar, threads):
        """Step to ``target`` (:func:`mindsponge.step_loop.advance`); a failure stops with the last good
        state."""
        for state, failure in step_loop.advance(self.state, target - self.state.step, self.step_loop,
                                                 self.step_once, self.max_energy_jump, threads):
            bar.update(state.step - self.state.step)
            self.state = state
            if failure is not None:
                self._blow_up(state, failure.message)

    def _events(self, due_reporters):
        """What is due at the current step: barostat, adaptive biases, reports (``(reporter, needs)`` of the
        reporters due now), checkpoint."""
        state = self.state
        if self.barostat is not None and state.step % self.barostat.every == 0:
            state = self._barostat_move(state)
        if self.adaptive_modules:
            positions = state.positions.to(self.precision.compute)
            box = None if state.box is None else state.box.to(self.precision.compute)
            changed = [module.after_step(positions, box, state.step) for module in self.adaptive_modules]
            if any(changed):
                state = self._with_forces(state)
        self.state = state
        # reports before the checkpoint: a checkpoint at step n implies that the reports of steps <= n
        # are written, so a run resumed from it (after truncating the reporters' files to step n) repeats
        # and misses none
        if due_reporters:
            needs = set().union(*(needs for _, needs in due_reporters))
            observables = self.energies(state, pressure="pressure" in needs) if needs else {}
            for reporter, _ in due_reporters:
                report_schedule.report(reporter, self, state, observables)
        if self.checkpoint is not None and state.step % self.checkpoint_every == 0:
            self.save_checkpoint(self.checkpoint)

    def _barostat_move(self, state):
        """The barostat's move at ``state``; a box it shrinks below what the force field allows is a
        blow-up."""
        try:
            moved = self.barostat.apply(state, self.context)
        except BoxTooSmallError as error:
            self._blow_up(state, f"{type(self.barostat).__name__} shrank the box to "
                                 f"{[round(float(value), 6) for value in torch.diagonal(error.box)]} nm "
                                 f"(box vectors {error.box.tolist()}): {error}", step=state.step)
        if not math.isfinite(float(moved.potential_energy)):
            self._blow_up(state, f"the potential energy after the {type(self.barostat).__name__} move is not "
                                 "finite", step=state.step)
        return moved

    def _blow_up(self, previous, reason, step=None):
        """Write the last good state (if a checkpoint path is set) and raise SimulationBlowUpError (at
        ``step``, by default the step after ``previous``)."""
        step = previous.step + 1 if step is None else step
        where = ""
        if self.checkpoint is not None:
            self._save(self.checkpoint, previous)
            where = f"; the last good state (step {previous.step}) is in {str(self.checkpoint)!r}"
        for reporter in self.reporters:
            reporter.close()
        raise SimulationBlowUpError(
            f"simulation blew up at step {step} "
            f"(time {previous.time + (step - previous.step) * self.integrator.dt:.4f} ps): "
            f"{reason}{where}",
            step,
        )

    def close(self):
        """Close the reporters."""
        for reporter in self.reporters:
            reporter.close()
