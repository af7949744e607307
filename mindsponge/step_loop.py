"""The compiled step loop: many MD steps per call without going back to Python.

A step in Python costs tens of torch operations (a kick, two drifts, the noise, the constraints,
the force field's terms and autograd, the centre-of-mass motion, the stability check): for a small
molecule that fixed cost, not the arithmetic, sets the speed. :class:`StepLoop` hands a
:class:`~mindsponge.simulation.Simulation`'s whole step to the compiled kernels
(:mod:`mindsponge._kernels`, ``dynamics.cpp``), which run it as the Python code does, operation by
operation, for as many steps as the simulation asks (up to its next report, checkpoint or barostat
move; :meth:`Simulation.run <mindsponge.simulation.Simulation.run>` decides).

The force field becomes a *force program*: the terms that have a compiled form
(``term.compiled_terms(kernels)``: bonds, angles, torsions, impropers, non-bonded forces, custom bonds
and custom non-bonded forces whose expressions lower to the expression kernel) run in C++; every other
term (learned potentials, other custom expressions, biases without a compiled form) is one Python call
per step, made from C++ with the positions in the
compute dtype, and returns its energy and forces (:func:`~mindsponge.forcefield.base.energy_and_forces`).
Virtual sites are placed, and their forces carried to their parents, in C++.

What the loop runs: :class:`~mindsponge.integrators.LangevinMiddle`, and
:class:`~mindsponge.integrators.VelocityVerlet` alone or with a :class:`~mindsponge.thermostats.Bussi`,
:class:`~mindsponge.thermostats.BerendsenThermostat` or :class:`~mindsponge.thermostats.NoseHooverChain`
thermostat; SETTLE and SHAKE/RATTLE constraints; CPU tensors in float32 or float64. Anything else
(CUDA, :class:`~mindsponge.integrators.MultipleTimeStep`, a thermostat of your own, ``compiled=False``
constraints, ``MINDSCIENCE_NO_EXTENSIONS=1``) makes :func:`build` return ``None``, and the simulation
steps in Python (the same steps, the same results to round-off).

Example (what :class:`~mindsponge.simulation.Simulation` does)::

    loop = step_loop.build(forcefield, precision, masses, integrator, constraints, remove_com, dof, generator)
    state, taken, failure = loop.run(state, steps=1000, max_energy_jump=2200.0)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from common.errors import DataError
from mindsponge import _kernels, space
from mindsponge.constraints import ConstraintError
from mindsponge.forcefield.base import ForceField, energy_and_forces
from mindsponge.state import State

__all__ = ["StepFailure", "StepLoop", "advance", "build", "force_program", "instability"]


@dataclass(frozen=True)
class StepFailure:
    """Why stepping stopped before the steps asked: ``kind`` ``"unstable"`` (a non-finite energy or
    position, or an energy jump), ``"constraint"`` (a constraint failed) or ``"refused"`` (a term refused
    the positions, or a constraint raised in Python), and the message naming the cause."""

    kind: str
    message: str


class _CompiledNeighbors:
    """The neighbour list of a compiled term, as checkpoints see a NeighborList (``state_dict``)."""

    def __init__(self, term):
        self._term = term

    def state_dict(self) -> dict:
        """The positions and box (nm) of the last build, ``None`` before the first."""
        reference = self._term.reference()
        return {
            "positions": reference[0] if reference else None,
            "box": reference[1] if len(reference) > 1 else None,
        }

    def load_state_dict(self, state: dict) -> None:
        """Rebuild the list at the saved positions and box (nothing if it was never built)."""
        if state["positions"] is not None:
            self._term.set_reference(state["positions"], state["box"])


class CallbackClock:
    """Wall seconds spent in the terms called back from the compiled loop (the potential's own work, in
    Python: a learned potential's network and autograd), and the calls made: the rest of a step is the
    loop's overhead."""

    def __init__(self):
        self.seconds, self.calls = 0.0, 0


def _callback(potential, clock: CallbackClock):
    """``potential`` as a callback of the force program: ``(positions, box) -> (energy, forces)``."""

    def evaluate(positions: Tensor, box: Tensor | None):
        start = time.perf_counter()
        energy, forces = energy_and_forces(potential, positions, box)
        result = energy.detach(), forces.detach()
        clock.seconds += time.perf_counter() - start
        clock.calls += 1
        return result

    return evaluate


def force_program(forcefield, kernels, compute: torch.dtype, box: Tensor | None = None,
                  clock: CallbackClock | None = None):
    """The compiled force program of ``forcefield`` (a ``kernels.ForceProgram``).

    Args:
        forcefield: a :class:`~mindsponge.forcefield.ForceField` (each term compiled where it can be, the
            others called back together, the virtual sites placed in C++) or any callable
            ``(positions, box) -> energy`` (called back as a whole).
        kernels: the compiled module (:func:`mindsponge._kernels.dynamics`).
        compute: the dtype the terms compute in.
        box: ``(3, 3)`` nm, the box the run starts in (fixes a PME grid not given), or ``None``.
        clock: a :class:`CallbackClock` the called-back terms add their time to (default: a new one).

    Returns:
        ``(program, compiled_names, neighbors)``: the program, the names of the terms that run compiled,
        and ``(NeighborList, compiled term)`` pairs: the compiled terms that keep a neighbour list of their
        own in place of the Python term's.
    """
    clock = CallbackClock() if clock is None else clock
    terms, compiled_names, rest, neighbors = [], [], [], []
    sites = None
    if isinstance(forcefield, ForceField):
        sites = forcefield.virtual_sites
        for term in forcefield.terms:
            if getattr(term, "is_empty", False):
                continue
            compiled = getattr(term, "compiled_terms", lambda kernels, box: None)(kernels, box)
            if compiled is None:
                rest.append(term)
                continue
            terms.extend(compiled)
            compiled_names.append(term.name)
            owned = [part for part in compiled if isinstance(part, kernels.NeighborNonbondedTerm)]
            if owned and getattr(term, "neighbors", None) is not None:
                neighbors.append((term.neighbors, owned[0]))
        if rest:
            terms.append(kernels.CallbackTerm(_callback(ForceField(rest), clock)))
    else:
        terms.append(kernels.CallbackTerm(_callback(forcefield, clock)))
    if sites is None or len(sites) == 0:
        empty = torch.zeros(0, dtype=torch.long)
        site_tensors = (
            empty,
            empty.reshape(0, 3),
            torch.zeros(0, 3, dtype=torch.float64),
            torch.zeros(0, dtype=torch.float64),
        )
    else:
        site_tensors = (
            sites.sites.cpu(),
            sites.parents.cpu(),
            sites.weights.cpu(),
            sites.cross_weights.cpu(),
        )
    return kernels.ForceProgram(terms, compute, *site_tensors), compiled_names, neighbors


def _integrator_spec(kernels, integrator, dtype):
    """The ``kernels.IntegratorSpec`` of ``integrator``, or ``None`` if the loop cannot run it."""
    from mindsponge import integrators, thermostats

    spec = kernels.IntegratorSpec()
    spec.dt = integrator.dt
    if type(integrator) is integrators.LangevinMiddle:
        spec.kind = 1
        decay, thermal = integrator._ornstein_uhlenbeck(integrator.dt)
        spec.decay = decay
        if isinstance(thermal, Tensor):  # a temperature per atom (replicas as copies)
            spec.thermal_per_atom = thermal.to(dtype).cpu()
        else:
            spec.thermal = thermal
        return spec
    if type(integrator) is not integrators.VelocityVerlet:
        return None
    thermostat = integrator.thermostat
    kinds = {type(None): 0, thermostats.Bussi: 1, thermostats.BerendsenThermostat: 2,
             thermostats.NoseHooverChain: 3}
    if type(thermostat) not in kinds:
        return None
    spec.kind = 0
    spec.thermostat = kinds[type(thermostat)]
    if thermostat is not None:
        spec.temperature = thermostat.temperature
        spec.time_constant = thermostat.time_constant
        spec.chain_length = getattr(thermostat, "chain_length", 0)
    return spec


def _constraint_spec(kernels, constraints):
    """The ``kernels.ConstraintSpec`` of ``constraints``, or ``None`` if the loop cannot apply them."""
    from mindsponge.constraints import Rattle, Settle

    spec = kernels.ConstraintSpec()
    if constraints is None:
        return spec
    settles = [part for part in constraints.parts if isinstance(part, Settle)]
    rattles = [part for part in constraints.parts if isinstance(part, Rattle)]
    if len(settles) + len(rattles) != len(constraints.parts) or len(settles) > 1 or len(rattles) > 1:
        return None
    if any(not part.compiled for part in constraints.parts):
        return None
    if constraints.parts and isinstance(constraints.parts[0], Rattle) and settles:
        return None  # the loop applies SETTLE first
    if settles and len(settles[0].atoms):
        spec.settle_atoms = settles[0].atoms
        spec.settle_oh = settles[0].oh_distance
        spec.settle_hh = settles[0].hh_distance
    if rattles and len(rattles[0].pairs):
        spec.pairs = rattles[0].pairs
        spec.distances = rattles[0].distances
        spec.tolerance = rattles[0].tolerance
        spec.max_iterations = rattles[0].max_iterations
    return spec


def build(
    forcefield,
    precision,
    masses: Tensor,
    integrator,
    constraints,
    remove_center_of_mass_motion: bool,
    degrees_of_freedom: int,
    generator: torch.Generator,
    box: Tensor | None = None,
) -> StepLoop | None:
    """The compiled step loop of a simulation, or ``None`` when it cannot run it (see the module docstring).

    Args:
        forcefield: the simulation's force field.
        precision: its :class:`common.precision.Precision`.
        masses: ``(N,)`` tensor, amu, in the accumulate dtype.
        integrator: its integrator (a thermostat inside it).
        constraints: its :class:`~mindsponge.constraints.Constraints` or ``None``.
        remove_center_of_mass_motion: zero the centre-of-mass velocity after every step.
        degrees_of_freedom: for the thermostats.
        generator: the CPU ``torch.Generator`` of the stochastic parts.
        box: ``(3, 3)`` nm, the box the run starts in, or ``None``.
    """
    kernels = _kernels.dynamics()
    if kernels is None or masses.device.type != "cpu" or generator.device.type != "cpu":
        return None
    if precision.accumulate not in (torch.float32, torch.float64):
        return None
    spec = _integrator_spec(kernels, integrator, precision.accumulate)
    constraint_spec = _constraint_spec(kernels, constraints)
    if spec is None or constraint_spec is None:
        return None
    clock = CallbackClock()
    start_box = None if box is None else box.to(precision.compute).cpu()
    program, compiled_names, neighbors = force_program(forcefield, kernels, precision.compute, start_box,
                                                       clock)
    dynamics = kernels.Dynamics(
        program,
        masses.to(precision.accumulate),
        spec,
        constraint_spec,
        bool(remove_center_of_mass_motion),
        int(degrees_of_freedom),
        generator,
    )
    thermostat = getattr(integrator, "thermostat", None)
    return StepLoop(program, dynamics, precision, compiled_names, neighbors, thermostat, clock)


class StepLoop:
    """A simulation's compiled steps (made by :func:`build`).

    Attributes:
        compiled_names: names of the force field's terms that run compiled (the others are called back).
        clock: the :class:`CallbackClock` of the called-back terms (where a learned potential's time goes).
    """

    def __init__(self, program, dynamics, precision, compiled_names, neighbors, thermostat, clock):
        self._program, self._dynamics, self.precision = program, dynamics, precision
        self.clock = clock
        self.compiled_names = list(compiled_names)
        self._neighbors = list(neighbors)
        self._chain = thermostat is not None and hasattr(thermostat, "chain_length")

    def neighbor_states(self, lists: list) -> list:
        """``lists`` (the force field's :class:`~mindsponge.neighbors.NeighborList` objects) with those whose
        term runs compiled replaced by the compiled term's list, as objects with ``state_dict()`` and
        ``load_state_dict(state)`` (what checkpoints save and restore)."""
        owners = {id(python_list): compiled for python_list, compiled in self._neighbors}
        return [_CompiledNeighbors(owners[id(item)]) if id(item) in owners else item for item in lists]

    def energy_and_forces(self, positions: Tensor, box: Tensor | None) -> tuple[Tensor, Tensor]:
        """``(energy, forces)`` at ``positions`` (N, 3) nm and ``box``: () kJ/mol and (N, 3) kJ/mol/nm,
        in the dtype of ``positions`` (the force field computes in the compute dtype).

        Raises:
            mindsponge.space.BoxTooSmallError: a box in which a compiled term's cutoff is longer than half
                the box's smallest width.
        """
        if box is not None:
            for _, term in self._neighbors:
                if term.cutoff() > space.max_cutoff(box) + 1e-12:
                    raise space.BoxTooSmallError(
                        f"the non-bonded cutoff {term.cutoff()} nm is longer than half the box "
                        f"({space.max_cutoff(box)} nm)",
                        box,
                    )
        energy, forces = self._program.evaluate(
            positions.detach().contiguous(), None if box is None else box.detach()
        )
        return positions.new_tensor(energy), forces

    def run(
        self, state: State, steps: int, max_energy_jump: float, seconds: float = 0.0
    ) -> tuple[State, int, StepFailure | None]:
        """Integrate up to ``steps`` steps from ``state``.

        Args:
            state: where to start (its forces and potential energy computed).
            steps: steps to take.
            max_energy_jump: largest allowed change of the potential energy in one step, kJ/mol.
            seconds: return early after this much wall time (0: never), so that a caller can show
                progress.

        Returns:
            ``(state, taken, failure)``: the last good state, the steps taken, and ``None`` or the
            :class:`StepFailure` that stopped the loop (the state is then the one before the failed step).

        Raises:
            Whatever a called-back term raises; the loop's state is then the last good one, which
            :meth:`last_state` returns.
        """
        chain = ()
        if self._chain and "nhc_positions" in state.extras:
            chain = (state.extras["nhc_positions"], state.extras["nhc_velocities"])
        self._start = state
        self._dynamics.set_state(
            state.positions.contiguous(),
            state.velocities.contiguous(),
            state.box,
            state.forces,
            float(state.potential_energy),
            int(state.step),
            float(state.time),
            state.rng_state,
            list(chain),
        )
        taken, status, message = self._dynamics.run(int(steps), float(max_energy_jump), float(seconds))
        failure = None if status == 0 else StepFailure("unstable" if status == 1 else "constraint", message)
        return self.last_state(), taken, failure

    def last_state(self) -> State:
        """The loop's current state (the last good one after a failure or an exception)."""
        dynamics, start = self._dynamics, self._start
        if dynamics.step() == start.step:
            return start
        extras = dict(start.extras)
        chain = dynamics.chain()
        if chain:
            extras["nhc_positions"], extras["nhc_velocities"] = chain
        rng_state = dynamics.rng_state()
        return start.replace(
            positions=dynamics.positions(),
            velocities=dynamics.velocities(),
            forces=dynamics.forces(),
            potential_energy=torch.tensor(dynamics.energy(), dtype=start.positions.dtype),
            step=dynamics.step(),
            time=dynamics.time(),
            rng_state=start.rng_state if rng_state is None else rng_state,
            extras=extras,
        )


def instability(previous: State, state: State, max_energy_jump: float) -> str | None:
    """Why ``state`` cannot follow ``previous`` (the check the compiled loop makes at every step): a
    potential energy or a position that is not finite, or an energy jump above ``max_energy_jump``
    (kJ/mol); ``None`` when the step is good."""
    energy = float(state.potential_energy)
    # the sum is finite when every position is (a non-finite one makes it inf or nan); only a sum that
    # overflows needs the elementwise check, which costs ten times more
    finite = math.isfinite(energy) and (
        math.isfinite(float(state.positions.sum())) or bool(torch.isfinite(state.positions).all())
    )
    if not finite:
        return "the potential energy or a position is not finite"
    jump = abs(energy - float(previous.potential_energy))
    if jump > max_energy_jump:
        return f"the potential energy jumped by {jump:.4g} kJ/mol (max_energy_jump {max_energy_jump:.4g})"
    return None


def advance(
    state: State, steps: int, loop: StepLoop | None, python_step, max_energy_jump: float, threads=None
):
    """Step ``state`` forward ``steps`` steps: in blocks of the compiled ``loop`` (at most half a second each,
    so that a caller shows progress and Ctrl-C is seen), or one ``python_step(state) -> state`` at a time
    without one.

    Yields ``(state, failure)`` after each block or step: the last good state, and ``None`` or the
    :class:`StepFailure` that ends the stepping (an unstable step, a constraint that failed, positions a term
    refused). Any other exception is raised after the last good state is yielded. ``threads`` (a
    :class:`common.threads.LoadFollower`) is updated before each block.
    """
    target = state.step + steps
    while state.step < target:
        if threads is not None:
            threads.update()
        if loop is None:
            previous = state
            try:
                state = python_step(previous)
            except (ConstraintError, DataError) as error:
                yield previous, StepFailure("refused", str(error))
                return
            reason = instability(previous, state, max_energy_jump)
            if reason is not None:
                yield previous, StepFailure("unstable", reason)
                return
            yield state, None
            continue
        try:
            state, _, failure = loop.run(state, target - state.step, max_energy_jump, seconds=0.5)
        except (ConstraintError, DataError) as error:
            yield loop.last_state(), StepFailure("refused", str(error))
            return
        except BaseException:
            yield loop.last_state(), None
            raise
        yield state, failure
        if failure is not None:
            return
