"""Simulation: restart bit-identity, energies and pressure against OpenMM, blow-up detection,
the CSV log, checkpoints and argument errors."""

import csv
import io
import os

import numpy as np
import pytest
import torch

import mindsponge as ms
from common import threads as threads_module
from mindsponge.build import water_box
from mindsponge.simulation import SimulationBlowUpError

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402


def _water(n_molecules=64, cutoff=0.6, seed=2, **options):
    system = water_box(n_molecules, seed=seed)
    openmm_system = app.ForceField("tip3p.xml").createSystem(
        system.topology.to_openmm(system.box),
        nonbondedMethod=app.CutoffPeriodic,
        nonbondedCutoff=cutoff * unit.nanometer,
        rigidWater=True,
        **options,
    )
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
    return system.replace(masses=torch.tensor(masses, dtype=torch.float64)), openmm_system


@pytest.fixture(scope="module")
def relaxed_water():
    """64 rigid TIP3P waters (reaction field), minimised by mindsponge, with 300 K velocities."""
    system, openmm_system = _water()
    simulation = ms.Simulation(
        system,
        ms.interop.openmm.from_openmm(openmm_system),
        ms.integrators.VelocityVerlet(0.001),
        constraints="water",
        progress=False,
    )
    simulation.minimize(tolerance=50.0, max_iterations=300)
    simulation.set_velocities(temperature=300.0, seed=1)
    state = simulation.state
    return system.replace(positions=state.positions, velocities=state.velocities), openmm_system


def _simulation(system, openmm_system, **options):
    options.setdefault("integrator", ms.integrators.LangevinMiddle(dt=0.002, temperature=300.0, friction=1.0))
    return ms.Simulation(
        system,
        ms.interop.openmm.from_openmm(openmm_system),
        constraints="water",
        progress=False,
        seed=5,
        **options,
    )


def test_restart_is_bit_identical(relaxed_water, tmp_path):
    system, openmm_system = relaxed_water
    straight = _simulation(system, openmm_system)
    straight.run(400)
    first = _simulation(system, openmm_system)
    first.run(200)
    first.save_checkpoint(tmp_path / "run.chk")
    first.observables()  # reporting in between (with pressure) does not disturb the continuation
    second = _simulation(system, openmm_system)
    second.load_checkpoint(tmp_path / "run.chk")
    second.run(200)
    for name in ("positions", "velocities", "forces", "potential_energy", "rng_state"):
        assert torch.equal(getattr(second.state, name), getattr(straight.state, name)), name
    assert second.state.step == straight.state.step == 400
    assert second.state.time == straight.state.time


def test_energies_and_pressure_match_openmm(relaxed_water):
    # a switched Lennard-Jones potential makes the energy continuous in the box scaling (the
    # pressure of a truncated one depends on the finite-difference step)
    _, openmm_system = _water(switchDistance=0.5 * unit.nanometer)
    system = relaxed_water[0]
    simulation = _simulation(system, openmm_system, precision="double")  # compared to 1e-4 kJ/mol
    values = simulation.observables()
    barostat = openmm.MonteCarloBarostat(1.0, 300.0)
    with_barostat = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(openmm_system))
    with_barostat.addForce(barostat)
    context = openmm.Context(
        with_barostat, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    context.setPositions(simulation.state.positions.numpy())
    context.setVelocities(simulation.state.velocities.numpy())
    state = context.getState(getEnergy=True)
    assert values["potential"] == pytest.approx(
        state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole), abs=1e-4
    )
    # (OpenMM's Verlet kinetic energy is shifted by half a step, so compare with 1/2 m v^2 directly)
    velocities = simulation.state.velocities.numpy()
    kinetic = 0.5 * (system.masses.numpy()[:, None] * velocities**2).sum()
    assert values["kinetic"] == pytest.approx(kinetic, rel=1e-12)
    dof = 6 * 64 - 3
    assert simulation.degrees_of_freedom == dof
    assert values["temperature"] == pytest.approx(
        2 * values["kinetic"] / (dof * 0.00831446261815324), rel=1e-9
    )
    pressure = (
        context.getSystem().getForce(context.getSystem().getNumForces() - 1).computeCurrentPressure(context)
    )
    # the same molecular-virial estimator on OpenMM's energies: molecules' centres and the box scaled by
    # 1 +- eps (eps = float64 eps^(1/3), as mindsponge.thermo.pressure)
    positions, box = simulation.state.positions.numpy(), simulation.state.box.numpy()
    masses = system.masses.numpy().reshape(-1, 3)
    centers = (masses[:, :, None] * positions.reshape(-1, 3, 3)).sum(1) / masses.sum(1)[:, None]
    step = np.finfo(np.float64).eps ** (1 / 3)
    energies = []
    for eps in (step, -step):
        context.setPeriodicBoxVectors(*(box * (1 + eps)))
        context.setPositions(positions + eps * np.repeat(centers, 3, axis=0))
        energies.append(context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole))
    volume = abs(np.linalg.det(box))
    momenta = (masses[:, :, None] * velocities.reshape(-1, 3, 3)).sum(1)
    molecular_kinetic = 0.5 * ((momenta**2).sum(-1) / masses.sum(1)).sum()
    derivative = (energies[0] - energies[1]) / (2 * step)
    expected = (2 * molecular_kinetic - derivative) / (3 * volume) * 16.6053907  # kJ/mol/nm^3 -> bar
    assert values["pressure"] == pytest.approx(expected, abs=0.05)
    # OpenMM's own instantaneous pressure uses another finite-difference step: the derivative of the
    # cut-off energy then differs by up to ~1 % depending on the configuration
    assert values["pressure"] == pytest.approx(pressure.value_in_unit(unit.bar), rel=0.01, abs=2.0)
    volume = float(torch.linalg.det(system.box))
    assert values["volume"] == pytest.approx(volume, rel=1e-12)
    assert values["density"] == pytest.approx(
        float(system.masses.sum()) / volume * 1.66053906892e-3, rel=1e-6
    )


def test_log_reporter_csv(relaxed_water, tmp_path):
    system, openmm_system = relaxed_water
    path = tmp_path / "log.csv"
    simulation = _simulation(system, openmm_system, reporters=[ms.reporters.LogReporter(path, every=5)])
    simulation.run(10)
    simulation.close()
    with open(path) as handle:
        rows = list(csv.DictReader(handle))
    header = "step,time,potential_energy,kinetic_energy,total_energy,temperature,pressure,volume,density"
    assert path.read_text().splitlines()[0].startswith(header)
    assert [int(row["step"]) for row in rows] == [5, 10]
    assert float(rows[1]["time"]) == pytest.approx(0.02)
    last = simulation.observables()
    for column, key in (
        ("potential_energy", "potential"),
        ("kinetic_energy", "kinetic"),
        ("temperature", "temperature"),
    ):
        assert float(rows[1][column]) == pytest.approx(last[key], abs=1e-5)
    assert float(rows[1]["total_energy"]) == pytest.approx(last["potential"] + last["kinetic"], abs=1e-5)
    assert np.isfinite(float(rows[1]["speed"])) and float(rows[1]["speed"]) > 0


def test_blow_up_names_step_and_leaves_checkpoint(relaxed_water, tmp_path):
    system, openmm_system = relaxed_water
    path = tmp_path / "last_good.chk"
    simulation = _simulation(system, openmm_system, checkpoint=path, checkpoint_every=1000)
    simulation.run(10)
    good = simulation.state
    # then 20 fs steps at 3000 K with rigid water: the first one already breaks SETTLE or the energy
    simulation.integrator = ms.integrators.VelocityVerlet(0.02)
    simulation.set_velocities(temperature=3000.0, seed=2)
    good_velocities = simulation.state.velocities
    with pytest.raises(SimulationBlowUpError, match=r"blew up at step (\d+)") as error:
        simulation.run(200)
    step = error.value.step
    assert step == 11 and "step 11 " in str(error.value) and str(path) in str(error.value)
    restored = _simulation(system, openmm_system)
    restored.load_checkpoint(path)
    assert restored.state.step == 10
    assert torch.equal(restored.state.positions, good.positions)
    assert torch.equal(restored.state.velocities, good_velocities)


def test_bad_arguments(relaxed_water):
    system, openmm_system = relaxed_water
    with pytest.raises(ValueError, match="dt"):
        ms.integrators.VelocityVerlet(-0.001)
    with pytest.raises(ValueError, match="barostat needs a periodic"):
        _simulation(system.replace(box=None), openmm_system, barostat=object())
    simulation = _simulation(system, openmm_system)
    with pytest.raises(ValueError, match="steps"):
        simulation.run(-1)
    with pytest.raises(FileNotFoundError):
        simulation.load_checkpoint("/nonexistent/run.chk")


def test_threads_are_set_at_creation_only_when_asked(relaxed_water):
    system, openmm_system = relaxed_water
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        simulation = _simulation(system, openmm_system)
        assert torch.get_num_threads() == 2  # the default leaves torch's setting alone
        simulation.run(2)  # and follows the load during a run only
        assert torch.get_num_threads() == 2
        simulation = _simulation(system, openmm_system, threads=1)
        assert torch.get_num_threads() == 1
        simulation.run(2)
        assert torch.get_num_threads() == 1
        _simulation(system, openmm_system, threads="free")
        assert 1 <= torch.get_num_threads() <= len(os.sched_getaffinity(0))
        for bad in (0, -1, 1.5, "many"):
            with pytest.raises(ValueError, match="threads"):
                _simulation(system, openmm_system, threads=bad)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("runnable, expected", [(1, 4), (3, 2), (4, 1), (12, 1)])
def test_free_cores_from_runnable_processes(monkeypatch, runnable, expected):
    """Cores of the affinity minus the runnable entities of /proc/loadavg other than the reader."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    loadavg = f"9.1 8.2 7.3 {runnable}/321 4567\n"
    monkeypatch.setattr(threads_module, "open", lambda path: io.StringIO(loadavg), raising=False)
    assert threads_module.free_cores(samples=3, interval=0.0) == expected


@pytest.mark.slow
def test_monte_carlo_barostat_ideal_gas_volume_distribution():
    """Ideal gas of N particles at pressure P: V is Gamma(N + 1, kT / P) distributed.

    (N is large enough that the adapted volume step stays well below OpenMM's cap of 30% of the
    volume, which would bias a small gas.)"""
    from scipy import stats

    n_atoms, pressure, temperature = 500, 100.0, 300.0
    generator = torch.Generator().manual_seed(0)
    system = ms.System(
        torch.rand(n_atoms, 3, generator=generator, dtype=torch.float64) * 5.9,
        torch.full((n_atoms,), 10.0, dtype=torch.float64),
        box=torch.eye(3, dtype=torch.float64) * 5.9,
    )
    simulation = ms.Simulation(
        system,
        ms.ForceField(),
        ms.integrators.VelocityVerlet(0.001),
        barostat=ms.barostats.MonteCarloBarostat(pressure, temperature, every=1),
        remove_center_of_mass_motion=False,
        progress=False,
        seed=3,
    )
    volumes = []
    for _ in range(6000):
        simulation.run(1)
        volumes.append(float(torch.linalg.det(simulation.state.box)))
    volumes = np.array(volumes[1000:])
    scale = 0.00831446261815324 * temperature / (pressure * 0.0602214076)  # kT / P in nm^3
    assert volumes.mean() == pytest.approx((n_atoms + 1) * scale, rel=0.01)
    thinned = volumes[::25]
    assert stats.kstest(thinned, stats.gamma(n_atoms + 1, scale=scale).cdf).pvalue > 1e-3


def test_h5md_reporter_read_by_mdanalysis(relaxed_water, tmp_path):
    mda = pytest.importorskip("MDAnalysis")
    system, openmm_system = relaxed_water
    trajectory = tmp_path / "traj.h5md"
    simulation = _simulation(
        system, openmm_system, reporters=[ms.reporters.H5MDReporter(trajectory, every=5)]
    )
    frames = []
    for _ in range(2):
        simulation.run(5)
        frames.append(simulation.state.positions.clone())
    simulation.close()
    topology = tmp_path / "top.pdb"
    system.to_pdb(topology)
    universe = mda.Universe(str(topology), str(trajectory))
    assert universe.trajectory.n_frames == 2
    for timestep, expected in zip(universe.trajectory, frames, strict=True):
        np.testing.assert_allclose(timestep.positions, expected.numpy() * 10.0, atol=1e-4)  # Angstrom
        np.testing.assert_allclose(timestep.dimensions[:3], np.diag(system.box.numpy()) * 10.0, rtol=1e-6)
    assert universe.trajectory[1].time == pytest.approx(0.02)  # ps
    # a blown-up run leaves a readable trajectory with every frame before the failure
    blown = tmp_path / "blown.h5md"
    simulation = _simulation(system, openmm_system, reporters=[ms.reporters.H5MDReporter(blown, every=1)])
    simulation.run(5)
    simulation.integrator = ms.integrators.VelocityVerlet(0.02)  # then 20 fs steps at 3000 K
    simulation.set_velocities(temperature=3000.0, seed=2)
    with pytest.raises(SimulationBlowUpError) as error:
        simulation.run(200)
    universe = mda.Universe(str(topology), str(blown))
    assert error.value.step == 6
    assert universe.trajectory.n_frames == 5


CONFIG = """
steps = 10
constraints = "water"
minimize_tolerance = 50.0

[system.water_box]
n_molecules = 64

[forcefield]
files = ["tip3p.xml"]
nonbonded_method = "CutoffPeriodic"
cutoff = 0.6

[integrator]
dt = 0.002

[barostat]
type = "c_rescale"
compressibility = 4.5e-5
every = 5

[output]
directory = "{directory}"
report_every = 5
trajectory_every = 5
checkpoint_every = 5
"""


def test_command_line_run_resume_and_errors(tmp_path, capsys):
    from mindsponge.cli import main

    directory = tmp_path / "out"
    path = tmp_path / "run.toml"
    path.write_text(CONFIG.format(directory=directory))
    assert main(["run", str(path), "--quiet"]) == 0
    path.write_text(CONFIG.format(directory=directory).replace("steps = 10", "steps = 15"))
    assert main(["run", str(path), "--resume", "--quiet"]) == 0
    with open(directory / "log.csv") as handle:
        assert [int(row["step"]) for row in csv.DictReader(handle)] == [5, 10, 15]
    capsys.readouterr()
    bad_inputs = {
        "typo": (CONFIG.replace("cutoff = 0.6", "cutof = 0.6"), "run.toml:12: [forcefield] key 'cutof'"),
        "negative dt": (CONFIG.replace("dt = 0.002", "dt = -0.002"), "run.toml:15: [integrator] key 'dt'"),
        # relative to the configuration file's folder
        "missing pdb": (
            'steps = 1\n[system]\npdb = "missing.pdb"\n',
            f"PDB file not found: '{tmp_path / 'missing.pdb'}'",
        ),
    }
    for name, (text, expected) in bad_inputs.items():
        path.write_text(text.format(directory=directory))
        assert main(["run", str(path), "--quiet"]) == 2, name
        message = capsys.readouterr().err
        assert message.count("\n") == 1 and message.startswith("error: ") and expected in message, (
            name,
            message,
        )


@pytest.mark.slow
def test_c_rescale_ideal_gas_volume_distribution():
    """C-rescale with Langevin dynamics on an ideal gas samples V ~ Gamma(N + 1, kT / P)."""
    n_atoms, pressure, temperature = 500, 100.0, 300.0
    generator = torch.Generator().manual_seed(1)
    system = ms.System(
        torch.rand(n_atoms, 3, generator=generator, dtype=torch.float64) * 5.9,
        torch.full((n_atoms,), 10.0, dtype=torch.float64),
        box=torch.eye(3, dtype=torch.float64) * 5.9,
    )
    simulation = ms.Simulation(
        system,
        ms.ForceField(),
        ms.integrators.LangevinMiddle(0.002, temperature, 10.0),
        barostat=ms.barostats.CRescale(
            pressure, temperature, compressibility=1.0 / pressure, time_constant=0.1, every=1
        ),
        remove_center_of_mass_motion=False,
        progress=False,
        seed=4,
    )
    simulation.set_velocities(temperature, seed=2)
    volumes = []
    for _ in range(5000):
        simulation.run(1)
        volumes.append(float(torch.linalg.det(simulation.state.box)))
    volumes = np.array(volumes[500:])
    scale = 0.00831446261815324 * temperature / (pressure * 0.0602214076)  # kT / P in nm^3
    assert volumes.mean() == pytest.approx((n_atoms + 1) * scale, rel=0.015)
    assert volumes.std() == pytest.approx(np.sqrt(n_atoms + 1) * scale, rel=0.25)


def test_checkpoint_of_another_kind_or_with_nan_positions_is_refused(relaxed_water, tmp_path):
    from common import io
    from common.errors import DataError

    system, openmm_system = relaxed_water
    simulation = _simulation(system, openmm_system)
    path = tmp_path / "run.chk"
    simulation.save_checkpoint(path)
    simulation.load_checkpoint(path)
    io.save_checkpoint(tmp_path / "train.chk", {"format": "mindsponge.train/1"}, kind="mindsponge.train")
    with pytest.raises(DataError, match="of kind 'mindsponge.train'; expected 'mindsponge.Simulation'"):
        simulation.load_checkpoint(tmp_path / "train.chk")
    saved = io.load_checkpoint(path)
    saved["state"]["positions"][5, 0] = float("nan")  # as a damaged or hand-edited file would hold
    torch.save(saved, path)  # without checksum: the finite check on load is the last line
    with pytest.warns(UserWarning), pytest.raises(DataError, match=r"\['positions'\] of row 5"):
        simulation.load_checkpoint(path)
