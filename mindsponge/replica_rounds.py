"""One replica's round of replica exchange, wherever it runs: the job of :func:`common.parallel.run_jobs` that
:class:`mindsponge.replica_exchange.ReplicaExchange` submits for every replica (in its own process, on a local
pool, on a Dask worker).

A process that runs rounds builds the :class:`~mindsponge.simulation.Simulation` of each thermodynamic state
once (:func:`simulation_of`, cached by the run's key) and then, for each job, loads the replica's state into
the simulation of its thermodynamic state, rebuilds the neighbour lists there (so that a round never depends
on what the process ran before), runs the steps, and computes the replica's energy in every state.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from common.errors import ConfigurationError
from mindsponge.state import State

__all__ = ["RoundSpec", "run_round", "simulation_of"]


@dataclass(frozen=True)
class RoundSpec:
    """What every replica's round needs (picklable; a worker builds its simulations from it once)."""

    key: str
    system: object
    forcefield: object
    states: tuple
    integrator: object
    constraints: object
    precision: object
    colvars: tuple
    sample_every: int | None
    remove_center_of_mass_motion: bool | None
    barostat: object = None


_WORKER_SIMULATIONS: dict = {}  # (spec key, state) -> Simulation, in each process that runs rounds
_WORKER_TERM_PROGRAMS: dict = {}  # (spec key, id(term), its global parameters) -> compiled program or None


def _integrator_at(template, temperature):
    """A copy of ``template`` at ``temperature`` (its own, or its thermostat's)."""
    integrator = copy.copy(template)
    if hasattr(integrator, "temperature"):
        integrator.temperature = float(temperature)
    thermostat = getattr(integrator, "thermostat", None)
    if thermostat is not None:
        thermostat = copy.copy(thermostat)
        thermostat.temperature = float(temperature)
        integrator = integrator.with_thermostat(thermostat)
    elif not hasattr(integrator, "temperature"):
        raise ConfigurationError(
            f"ReplicaExchange: the integrator {template!r} has no temperature: use LangevinMiddle, or "
            "VelocityVerlet with a thermostat"
        )
    return integrator


class _Sampler:
    """A reporter recording collective variables every ``every`` steps (in the state it runs in)."""

    needs = ()

    def __init__(self, colvars, every):
        self.colvars, self.every = colvars, every
        self.values: list = []

    def report(self, state, observables):
        box = state.box
        with torch.no_grad():
            self.values.append([float(colvar(state.positions, box)) for colvar in self.colvars])


def _barostat_at(template, temperature):
    """A copy of the barostat ``template`` at ``temperature`` (``None``: none)."""
    if template is None:
        return None
    barostat = copy.copy(template)
    barostat.temperature = float(temperature)
    return barostat


def simulation_of(spec: RoundSpec, index: int):
    """The simulation of state ``index`` of ``spec`` in this process (built once)."""
    import mindsponge as ms

    key = (spec.key, index)
    if key not in _WORKER_SIMULATIONS:
        state = spec.states[index]
        potential = spec.forcefield if state.potential is None else state.potential
        if spec.barostat is None and getattr(potential, "barostat", None) is not None:
            raise ConfigurationError(
                f"ReplicaExchange: the potential of state {index} carries a barostat but the sampler runs at "
                "constant volume: pass barostat= to ReplicaExchange, or set the potential's barostat to None")
        reporters = [_Sampler(spec.colvars, spec.sample_every)] if spec.colvars and spec.sample_every else []
        _WORKER_SIMULATIONS[key] = ms.Simulation(
            spec.system,
            potential,
            _integrator_at(spec.integrator, state.temperature),
            constraints=spec.constraints,
            precision=spec.precision,
            progress=False,
            overlap_distance=None,
            reporters=reporters,
            barostat=_barostat_at(spec.barostat, state.temperature),
            remove_center_of_mass_motion=spec.remove_center_of_mass_motion,
        )
    return _WORKER_SIMULATIONS[key]


def _state_energies(spec: RoundSpec, simulation, state) -> list[float]:
    """The potential energy (kJ/mol) of ``state`` in every state of ``spec``.

    When every state's potential is a :class:`~mindsponge.forcefield.ForceField` with the same virtual sites
    (umbrella windows: the base terms and a restraint each; alchemical states from
    :func:`mindsponge.alchemy.force_fields_at`, which share the terms they set alike), every distinct term is
    evaluated once (no gradient, in the compute dtype, through its compiled form where it has one: see
    :func:`_term_energy`) and each state's energy is the sum of its terms; otherwise each state's potential
    is evaluated whole.
    """
    from mindsponge.forcefield.base import ForceField

    potentials = [spec.forcefield if item.potential is None else item.potential for item in spec.states]
    sites = {id(getattr(potential, "virtual_sites", None)) for potential in potentials}
    if not all(isinstance(potential, ForceField) for potential in potentials) or len(sites) > 1:
        return [
            float(simulation_of(spec, index).potential(state.positions, state.box))
            for index in range(len(potentials))
        ]
    compute = simulation.precision.compute
    positions = state.positions.to(compute).contiguous()
    box = None if state.box is None else state.box.to(compute).contiguous()
    virtual_sites = potentials[0].virtual_sites
    energies_of_terms: dict[int, float] = {}
    with torch.no_grad():
        if virtual_sites is not None:
            positions = virtual_sites(positions)
        result = []
        for potential in potentials:
            total = 0.0
            for term in potential.terms:
                if id(term) not in energies_of_terms:
                    energies_of_terms[id(term)] = (
                        0.0 if getattr(term, "is_empty", False) else _term_energy(spec, term, positions, box)
                    )
                total += energies_of_terms[id(term)]
            result.append(total)
    return result


def _term_energy(spec: RoundSpec, term, positions, box) -> float:
    """The energy of one term (kJ/mol) at positions in the compute dtype: through its compiled form (one call
    of the kernels, built once per process) when it has one and the volume is constant, else the term."""
    from mindsponge import _kernels, step_loop
    from mindsponge.forcefield.base import ForceField

    key = (spec.key, id(term), tuple(sorted(term.global_parameters.items())))
    if key not in _WORKER_TERM_PROGRAMS:
        program = None
        kernels = _kernels.usable(positions) if spec.barostat is None else None
        if kernels is not None:
            program, compiled_names, _ = step_loop.force_program(ForceField([term]), kernels, positions.dtype,
                                                                 box)
            program = program if compiled_names else None
        _WORKER_TERM_PROGRAMS[key] = program
    program = _WORKER_TERM_PROGRAMS[key]
    if program is None:
        return float(term(positions, box))
    return float(program.evaluate(positions, box)[0])


def run_round(job: dict) -> dict:
    """One replica's round (a job of :func:`common.parallel.run_jobs`): ``steps`` steps in state ``state``
    from the replica's ``start`` (a :meth:`State.to_dict`), then its potential energy in every state.

    Returns:
        dict: ``state`` (the replica's new state as a dict), ``energies`` ``(K,)`` kJ/mol, ``samples`` (the
        collective-variable values recorded on the way, ``(n, D)``), ``colvars`` ``(D,)`` at the end.
    """
    spec, index = job["spec"], job["state"]
    simulation = simulation_of(spec, index)
    state = State.from_dict(job["start"])
    if job["recompute"]:  # a state with another Hamiltonian: forces of this one
        state = simulation._with_forces(state)
    simulation.state = state
    simulation.reset_neighbor_lists()
    samplers = [reporter for reporter in simulation.reporters if isinstance(reporter, _Sampler)]
    for sampler in samplers:
        sampler.values = []
    simulation.run(job["steps"])
    final = simulation.state
    if all(state.potential is None for state in spec.states):  # one Hamiltonian: the energy of the run
        energies = [float(final.potential_energy)] * len(spec.states)
    else:
        energies = _state_energies(spec, simulation, final)
    with torch.no_grad():
        colvars = [float(colvar(final.positions, final.box)) for colvar in spec.colvars]
    samples = samplers[0].values if samplers else []
    return {"state": final.to_dict(), "energies": energies, "samples": samples, "colvars": colvars}
