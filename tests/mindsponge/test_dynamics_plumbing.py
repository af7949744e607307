"""The plumbing of the MD engine: thermostats and barostats see a DynamicsContext (never the
Simulation), the neighbour lists' state goes into checkpoints through their public
``state_dict``, a run continued from a checkpoint is bit-identical with a thermostat, a barostat
and a neighbour list, and the old names (``Simulation.force``, ``frequency=``, ``pace=``,
``mindsponge.__main__.run``) still work with a DeprecationWarning."""

import dataclasses
import subprocess
import sys

import pytest
import torch

import mindsponge as ms
from mindsponge import barostats, checkpoint, thermostats
from mindsponge.context import DynamicsContext
from mindsponge.forcefield.nonbonded import Nonbonded
from mindsponge.neighbors import NeighborList

N_ATOMS = 64
TEMPERATURE = 300.0


def _argon(seed=0):
    """64 Lennard-Jones atoms (argon-like) on a jittered cubic lattice in a 2 nm box."""
    generator = torch.Generator().manual_seed(seed)
    axis = torch.arange(4, dtype=torch.float64) * 0.5 + 0.25
    lattice = torch.cartesian_prod(axis, axis, axis)
    positions = lattice + 0.02 * torch.randn(lattice.shape, generator=generator, dtype=torch.float64)
    system = ms.System(positions, torch.full((N_ATOMS,), 39.9, dtype=torch.float64),
                       box=torch.eye(3, dtype=torch.float64) * 2.0)
    term = Nonbonded(torch.zeros(N_ATOMS), torch.full((N_ATOMS,), 0.34), torch.full((N_ATOMS,), 0.99),
                     method="cutoff", cutoff=0.8, dispersion_correction=False)
    return system, ms.ForceField([term]).double()


def _simulation(**keywords):
    system, forcefield = _argon()
    simulation = ms.Simulation(system, forcefield, ms.integrators.VelocityVerlet(0.002), progress=False,
                               precision="double", **keywords)
    simulation.set_velocities(TEMPERATURE, seed=1)
    return simulation


class _Spy:
    """A thermostat and barostat recording what it is given."""

    every = 2

    def __init__(self):
        self.seen = []

    def apply(self, state, context):
        self.seen.append(context)
        return state


def test_thermostat_and_barostat_get_the_context_not_the_simulation():
    thermostat, barostat = _Spy(), _Spy()
    simulation = _simulation(thermostat=thermostat, barostat=barostat)
    assert simulation.step_loop is None  # a thermostat of its own: the steps run in Python
    simulation.run(4)
    # the thermostat is split around each step (two half steps), the barostat moves every 2 steps
    assert len(thermostat.seen) == 8 and len(barostat.seen) == 2
    context = simulation.context
    assert all(seen is context for seen in barostat.seen)
    shared = [field.name for field in dataclasses.fields(DynamicsContext) if field.name != "dt"]
    for seen in thermostat.seen:  # the run's context with half its time step
        assert seen.dt == 0.5 * context.dt
        assert all(getattr(seen, name) is getattr(context, name) for name in shared)
    assert isinstance(context, DynamicsContext) and not isinstance(context, ms.Simulation)
    assert context.dt == 0.002 and context.generator is simulation.generator
    assert context.degrees_of_freedom == simulation.degrees_of_freedom
    assert torch.equal(context.masses, simulation.masses)
    assert torch.equal(context.molecules, simulation.molecules)
    state = simulation.state
    energy, forces = context.energy_and_forces(state.positions, state.box)
    assert torch.equal(energy, state.potential_energy) and torch.equal(forces, state.forces)
    simulation.integrator = ms.integrators.VelocityVerlet(0.001)  # a new integrator: the context follows
    assert simulation.context.dt == 0.001


def test_neighbor_list_state_dict_round_trip():
    system, forcefield = _argon()
    (found,) = checkpoint.neighbor_lists(forcefield)
    assert isinstance(found, NeighborList)
    assert found.state_dict() == {"positions": None, "box": None}
    forcefield(system.positions, system.box)
    saved = found.state_dict()
    assert torch.equal(saved["positions"], system.positions) and torch.equal(saved["box"], system.box)
    fresh = NeighborList(found.cutoff, found.skin)
    fresh.load_state_dict(saved)
    assert torch.equal(fresh.pairs, found.pairs) and torch.equal(fresh.reference_positions, system.positions)
    assert checkpoint.neighbor_lists(lambda positions, box: positions.sum()) == []


@pytest.mark.parametrize(
    ("thermostat", "barostat"),
    [
        (thermostats.Bussi(TEMPERATURE, 0.1), barostats.MonteCarloBarostat(1.0, TEMPERATURE, every=2)),
        (thermostats.NoseHooverChain(TEMPERATURE, 0.1), barostats.CRescale(1.0, TEMPERATURE, every=2)),
    ],
    ids=["bussi-monte-carlo", "nose-hoover-c-rescale"],
)
def test_checkpoint_continues_bit_identically(tmp_path, thermostat, barostat):
    path = tmp_path / "run.chk"
    simulation = _simulation(thermostat=thermostat, barostat=barostat)
    simulation.run(6)
    simulation.save_checkpoint(path)
    simulation.run(6)
    restored = _simulation(thermostat=thermostat, barostat=barostat, seed=5)
    restored.load_checkpoint(path)
    assert restored.state.step == 6
    restored.run(6)
    for name in ("positions", "velocities", "box", "forces", "potential_energy", "rng_state"):
        assert torch.equal(getattr(restored.state, name), getattr(simulation.state, name)), name
    for key, value in simulation.state.extras.items():
        assert torch.equal(restored.state.extras[key], value), key


def test_force_is_the_deprecated_name_of_energy_and_forces():
    simulation = _simulation()
    state = simulation.state
    with pytest.warns(DeprecationWarning, match=r"Simulation.force is deprecated.*\.energy_and_forces"):
        energy, forces = simulation.force(state.positions, state.box)
    assert torch.equal(energy, state.potential_energy) and torch.equal(forces, state.forces)
    energy, forces = ms.energy_and_forces(simulation.forcefield, state.positions, state.box)
    assert torch.equal(forces, ms.forces(simulation.forcefield, state.positions, state.box))


def test_old_command_line_module_names_warn():
    import mindsponge.__main__ as old
    from mindsponge import cli

    assert old.main is cli.main
    with pytest.warns(DeprecationWarning, match=r"mindsponge.__main__.run is deprecated.*mindsponge.cli.run"):
        assert old.run is cli.run
    with pytest.warns(DeprecationWarning, match=r"\[barostat\] frequency is deprecated.*\[barostat\] every"):
        config = cli.BarostatConfig(frequency=5)
    assert config.every == 5 and config.frequency is None
    assert cli.BarostatConfig().every == 25
    with pytest.raises(ValueError, match="give every only"):
        cli.BarostatConfig(frequency=5, every=5)


def test_pdb_no_longer_imports_system():
    """Topology lives in mindsponge.topology: pdb reads topologies without importing mindsponge.system."""
    code = "import sys, mindsponge.pdb; print('mindsponge.system' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
    from mindsponge import system, topology

    assert ms.Topology is topology.Topology and system.Topology is topology.Topology
