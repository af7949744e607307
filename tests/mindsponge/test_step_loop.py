"""The compiled step loop (mindsponge.step_loop) against the steps in Python, and its edges.

In double precision the compiled loop repeats the Python code's operations: trajectories agree to
round-off (1e-12 nm after 20 steps) for every integrator and thermostat it runs, with bonded terms,
non-bonded forces without a cutoff, with a cluster-pair list and PME or a reaction field, virtual
sites, SETTLE and RATTLE, and terms called back from C++. Its sums do not depend on the thread
count (bit for bit), a blow-up stops at the right step with the last good state, and reporters get
exactly the steps they ask for.
"""

import math

import numpy as np
import pytest
import torch

import mindsponge as ms
from common.errors import DataError
from mindsponge import step_loop, thermostats
from mindsponge.forcefield.base import EnergyTerm
from mindsponge.reporters import Reporter
from mindsponge.simulation import SimulationBlowUpError

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402

DIPEPTIDE = "tests/mindsponge/data/alanine_dipeptide.pdb"


def _dipeptide(method=app.NoCutoff):
    pdb = app.PDBFile(DIPEPTIDE)
    openmm_system = app.ForceField("amber14-all.xml").createSystem(
        pdb.topology, nonbondedMethod=method, constraints=app.HBonds
    )
    return ms.System.from_pdb(DIPEPTIDE), ms.interop.openmm.from_openmm(openmm_system)


def _water(model="tip4pew", method=app.PME, n_molecules=60):
    system = ms.build.water_box(n_molecules=n_molecules, model=model, seed=3)
    files = {"tip4pew": "tip4pew.xml", "tip3p": "amber14/tip3p.xml"}[model]
    openmm_system = app.ForceField(files).createSystem(
        system.topology.to_openmm(system.box), nonbondedMethod=method, nonbondedCutoff=0.6 * unit.nanometer
    )
    return system, ms.interop.openmm.from_openmm(openmm_system)


def _pair(system, forcefield, integrator, **options):
    """The same simulation twice, the second stepping in Python."""
    simulations = []
    for compiled in (True, False):
        simulation = ms.Simulation(
            system, forcefield, integrator(), precision="double", progress=False, **options
        )
        simulation.minimize(max_iterations=50)
        simulation.set_velocities(300.0, seed=2)
        if not compiled:
            simulation._loop, simulation._loop_built = None, True
        simulations.append(simulation)
    assert simulations[0].step_loop is not None
    return simulations


INTEGRATORS = {
    "langevin": (lambda: ms.integrators.LangevinMiddle(0.001, 300.0, 5.0), {}),
    "verlet": (lambda: ms.integrators.VelocityVerlet(0.001), {}),
    "bussi": (lambda: ms.integrators.VelocityVerlet(0.001), {"thermostat": thermostats.Bussi(300.0, 0.05)}),
    "berendsen": (
        lambda: ms.integrators.VelocityVerlet(0.001),
        {"thermostat": thermostats.BerendsenThermostat(300.0, 0.05)},
    ),
    "nose_hoover": (
        lambda: ms.integrators.VelocityVerlet(0.001),
        {"thermostat": thermostats.NoseHooverChain(300.0, 0.05, chain_length=4)},
    ),
}


@pytest.mark.parametrize("name", list(INTEGRATORS))
def test_every_integrator_and_thermostat_agrees_with_the_python_steps(name):
    system, forcefield = _dipeptide()
    integrator, options = INTEGRATORS[name]
    compiled, python = _pair(system, forcefield, integrator, **options)
    assert set(compiled.step_loop.compiled_names) == {
        "HarmonicBond",
        "HarmonicAngle",
        "PeriodicTorsion",
        "Nonbonded",
    }
    compiled.run(20)
    python.run(20)
    assert compiled.state.step == python.state.step == 20
    assert math.isclose(compiled.state.time, python.state.time, rel_tol=1e-15)
    assert (compiled.state.positions - python.state.positions).abs().max() < 1e-12
    assert (compiled.state.velocities - python.state.velocities).abs().max() < 1e-9
    assert abs(float(compiled.state.potential_energy - python.state.potential_energy)) < 1e-8
    for key, value in python.state.extras.items():  # the Nose-Hoover chain
        assert torch.allclose(compiled.state.extras[key], value, rtol=1e-10, atol=1e-12), key
    if python.state.rng_state is not None:
        assert torch.equal(compiled.state.rng_state, python.state.rng_state)


@pytest.mark.parametrize(
    ("model", "method"),
    [("tip4pew", app.PME), ("tip3p", app.CutoffPeriodic), ("tip3p", app.CutoffNonPeriodic)],
)
def test_neighbour_lists_pme_and_virtual_sites_agree_with_the_python_steps(model, method):
    system, forcefield = _water(model, method)
    if method == app.CutoffNonPeriodic:
        system = system.replace(box=None)
    compiled, python = _pair(system, forcefield, lambda: ms.integrators.LangevinMiddle(0.002, 300.0, 1.0))
    assert compiled.step_loop.compiled_names == ["Nonbonded"]
    energy, forces = compiled.energy_and_forces(python.state.positions, python.state.box)
    reference_energy, reference_forces = python.energy_and_forces(python.state.positions, python.state.box)
    assert abs(float(energy - reference_energy)) < 1e-9 * abs(float(reference_energy))
    assert (forces - reference_forces).abs().max() < 1e-9
    compiled.run(20)
    python.run(20)
    assert (compiled.state.positions - python.state.positions).abs().max() < 1e-11
    sites = forcefield.virtual_sites
    if sites is not None:  # the sites sit where their parents place them
        placed = sites(compiled.state.positions)
        assert (placed - compiled.state.positions).abs().max() < 1e-12


class _Wall(EnergyTerm):
    """A term without a compiled form: a harmonic wall on the distance of atoms 0 and 5 (kJ/mol, nm)."""

    def forward(self, positions, box=None):
        distance = torch.linalg.vector_norm(positions[5] - positions[0])
        return 500.0 * torch.clamp(distance - 0.3, min=0.0) ** 2


def test_terms_without_a_compiled_form_are_called_back():
    system, forcefield = _dipeptide()
    forcefield = ms.ForceField(
        [*forcefield.terms, _Wall(name="wall")], masses=forcefield.masses, constraints=forcefield.constraints
    )
    compiled, python = _pair(system, forcefield, lambda: ms.integrators.LangevinMiddle(0.001, 300.0, 5.0))
    assert "wall" not in compiled.step_loop.compiled_names
    compiled.run(20)
    python.run(20)
    assert (compiled.state.positions - python.state.positions).abs().max() < 1e-12


def test_sums_do_not_depend_on_the_thread_count():
    """Bit for bit with 1 and 2 threads: mixed precision, a box whose direct sum and PME spread in groups.

    (From the same start: torch's own reductions, in set_velocities for example, may split by thread.)"""
    system, forcefield = _water("tip3p", app.PME, n_molecules=700)
    before = torch.get_num_threads()
    states = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            simulation = ms.Simulation(
                system,
                forcefield,
                ms.integrators.LangevinMiddle(0.002, 300.0, 1.0),
                progress=False,
                threads=threads,
            )
            if not states:
                simulation.set_velocities(300.0, seed=4)
                start = simulation.state
            simulation.state = start
            simulation.run(10)
            states.append(simulation.state)
    finally:
        torch.set_num_threads(before)
    for name in ("positions", "velocities", "forces", "potential_energy"):
        assert torch.equal(getattr(states[0], name), getattr(states[1], name)), name


def test_a_blow_up_stops_at_its_step_and_keeps_the_last_good_state(tmp_path):
    system, forcefield = _dipeptide()
    path = tmp_path / "run.chk"
    simulation = ms.Simulation(
        system,
        forcefield,
        ms.integrators.VelocityVerlet(0.001),
        progress=False,
        checkpoint=path,
        checkpoint_every=10_000,
    )
    simulation.run(3)
    good = simulation.state
    simulation.state = good.replace(velocities=good.velocities * 400.0)  # about 5e7 K: the bonds tear
    with pytest.raises(SimulationBlowUpError, match=r"blew up at step (\d+)") as error:
        simulation.run(100)
    assert simulation.step_loop is not None
    stopped = error.value.step
    assert stopped > 3 and simulation.state.step == stopped - 1
    saved = ms.Simulation(system, forcefield, ms.integrators.VelocityVerlet(0.001), progress=False)
    saved.load_checkpoint(path)
    assert saved.state.step == stopped - 1
    assert torch.equal(saved.state.positions, simulation.state.positions)


class _Refuses(EnergyTerm):
    """A called-back term that refuses positions after a number of calls (as a force field refuses NaN)."""

    def __init__(self, after):
        super().__init__("refuses")
        self.calls, self.after = 0, after

    def forward(self, positions, box=None):
        self.calls += 1
        if self.calls > self.after:
            raise DataError("positions of atom 3 are not finite")
        return 0.0 * positions.sum()


def test_an_error_in_a_called_back_term_keeps_the_last_good_state():
    system, forcefield = _dipeptide()
    refusing = _Refuses(after=8)
    forcefield = ms.ForceField(
        [*forcefield.terms, refusing], masses=forcefield.masses, constraints=forcefield.constraints
    )
    simulation = ms.Simulation(
        system, forcefield, ms.integrators.LangevinMiddle(0.001, 300.0, 1.0), progress=False
    )
    start = simulation.state.step
    with pytest.raises(SimulationBlowUpError, match="atom 3") as error:
        simulation.run(20)
    assert simulation.state.step == error.value.step - 1 > start
    assert math.isfinite(float(simulation.state.potential_energy))


def test_the_loop_returns_after_its_time_budget():
    system, forcefield = _dipeptide()
    simulation = ms.Simulation(
        system, forcefield, ms.integrators.LangevinMiddle(0.001, 300.0, 1.0), progress=False
    )
    state, taken, failure = simulation.step_loop.run(simulation.state, 10_000_000, 1e9, seconds=0.05)
    assert failure is None and 0 < taken < 10_000_000 and state.step == taken


class _Irregular(Reporter):
    """Reports at steps 3, 7 and 20 only, needing the pressure at 7."""

    def __init__(self):
        super().__init__(every=1)
        self.reports = []

    def describe_next_report(self, state):
        upcoming = [step for step in (3, 7, 20) if step > state.step]
        steps = upcoming[0] - state.step if upcoming else 10**9
        return steps, ("energies", "pressure") if upcoming and upcoming[0] == 7 else ("energies",)

    def report(self, state, observables):
        self.reports.append((state.step, observables["pressure"], observables["temperature"]))


class _Old:
    """A reporter of an older release."""

    every = 5

    def __init__(self):
        self.steps = []

    def report(self, simulation, state):
        self.steps.append((state.step, simulation.observables(state, pressure=False)["potential"]))


def test_reporters_get_the_steps_they_ask_for_and_the_observables_they_need():
    system, forcefield = _water("tip3p", app.PME)
    irregular, old = _Irregular(), _Old()
    simulation = ms.Simulation(
        system,
        forcefield,
        ms.integrators.LangevinMiddle(0.002, 300.0, 1.0),
        reporters=[irregular, old],
        progress=False,
    )
    simulation.set_velocities(300.0, seed=1)
    with pytest.warns(DeprecationWarning, match=r"_Old.report\(simulation, state\) is deprecated"):
        simulation.run(21)
    assert [step for step, *_ in irregular.reports] == [3, 7, 20]
    pressures = [pressure for _, pressure, _ in irregular.reports]
    assert math.isnan(pressures[0]) and math.isfinite(pressures[1]) and math.isnan(pressures[2])
    assert all(temperature > 0 for *_, temperature in irregular.reports)
    assert [step for step, _ in old.steps] == [5, 10, 15, 20]


def test_build_declines_what_it_cannot_run():
    system, forcefield = _dipeptide()
    simulation = ms.Simulation(
        system,
        forcefield,
        ms.integrators.MultipleTimeStep(0.002, 2, ms.ForceField([forcefield["HarmonicBond"]])),
        progress=False,
        precision="double",
    )
    assert simulation.step_loop is None  # multiple time stepping runs in Python
    assert (
        step_loop.build(
            forcefield,
            simulation.precision,
            simulation.masses,
            ms.integrators.VelocityVerlet(0.001, thermostat=_Spy()),
            None,
            True,
            10,
            torch.Generator(),
        )
        is None
    )


class _Spy:
    def apply(self, state, context):
        return state


def test_a_langevin_integrator_refuses_a_second_thermostat():
    system, forcefield = _dipeptide()
    with pytest.raises(ValueError, match="is a thermostat itself"):
        ms.Simulation(
            system,
            forcefield,
            ms.integrators.LangevinMiddle(0.002, 300.0, 1.0),
            thermostat=thermostats.Bussi(300.0, 0.1),
            progress=False,
        )


def test_the_old_step_signature_warns_and_gives_the_same_step():
    system, forcefield = _dipeptide()
    simulation = ms.Simulation(
        system, forcefield, ms.integrators.VelocityVerlet(0.001), precision="double", progress=False
    )
    state = simulation.state
    new = simulation.integrator.step(state, simulation.context)
    with pytest.warns(DeprecationWarning, match=r"VelocityVerlet.step\(state, force, masses"):
        old = simulation.integrator.step(
            state,
            simulation.energy_and_forces,
            simulation.masses,
            simulation.constraints,
            simulation.generator,
        )
    assert torch.equal(new.positions, old.positions) and np.isfinite(float(old.potential_energy))


def test_torsion_restraints_run_compiled_as_impropers():
    """An umbrella restraint on phi is a harmonic improper of half its constant: the same trajectory."""
    system, forcefield = _dipeptide()
    restraint = ms.bias.HarmonicRestraint(ms.colvar.Torsion((4, 6, 8, 14)), 2.5, 200.0, name="umbrella")
    restrained = ms.ForceField(
        [*forcefield.terms, restraint], masses=forcefield.masses, constraints=forcefield.constraints
    )
    compiled, python = _pair(system, restrained, lambda: ms.integrators.LangevinMiddle(0.001, 300.0, 5.0))
    assert "umbrella" in compiled.step_loop.compiled_names
    compiled.run(20)
    python.run(20)
    assert (compiled.state.positions - python.state.positions).abs().max() < 1e-12
