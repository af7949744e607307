"""Trajectory analysis: RDF vs MDAnalysis on a TIP3P run, MSD/diffusion, block averages and
free-energy profiles against analytic results, corrupt files."""

import math

import numpy as np
import pytest
import torch

import mindsponge as ms
from common.units import BOLTZMANN_MD
from mindsponge import analysis

openmm = pytest.importorskip("openmm")


@pytest.fixture(scope="module")
def water_run(tmp_path_factory):
    """A short TIP3P NVT run (125 rigid waters, reaction field) written to H5MD every 5 steps."""
    from openmm import app, unit

    system = ms.build.water_box(125, model="tip3p", seed=1)
    openmm_system = app.ForceField("tip3p.xml").createSystem(
        system.topology.to_openmm(box=system.box),
        nonbondedMethod=app.CutoffPeriodic,
        nonbondedCutoff=0.7 * unit.nanometer,
        rigidWater=False,
    )
    forcefield = ms.interop.openmm.from_openmm(openmm_system, system.topology)
    path = tmp_path_factory.mktemp("analysis") / "water.h5md"
    integrator = ms.integrators.LangevinMiddle(dt=0.002, temperature=300.0, friction=1.0)
    simulation = ms.Simulation(
        system,
        forcefield,
        integrator,
        constraints="water",
        reporters=[ms.reporters.H5MDReporter(str(path), every=5)],
        progress=False,
    )
    simulation.minimize(max_iterations=20)
    simulation.set_velocities(300.0, seed=1)
    simulation.run(30)
    simulation.close()
    return path, system


def test_rdf_matches_mdanalysis(water_run):
    mda = pytest.importorskip("MDAnalysis")
    from MDAnalysis.analysis.rdf import InterRDF

    path, system = water_run
    trajectory = analysis.read_h5md(path)
    assert trajectory.n_frames == 6 and trajectory.n_atoms == system.n_atoms
    oxygens = torch.arange(0, system.n_atoms, 3)
    hydrogens = torch.cat([oxygens + 1, oxygens + 2]).sort().values
    universe = mda.Universe.empty(system.n_atoms, trajectory=True)
    universe.load_new(str(path), format="H5MD")
    for group_b, exclusion in ((oxygens, (1, 1)), (hydrogens, None)):
        r, g = analysis.rdf(trajectory.positions, trajectory.boxes, oxygens, group_b, r_max=0.75, bins=50)
        reference = InterRDF(
            universe.atoms[oxygens.numpy()],
            universe.atoms[group_b.numpy()],
            nbins=50,
            range=(0.0, 7.5),
            exclusion_block=exclusion,
        ).run()
        assert np.allclose(r.numpy() * 10, reference.results.bins, atol=1e-9)
        # MDAnalysis reads float32 positions (as written) and computes distances in float32
        assert np.allclose(g.numpy(), reference.results.rdf, atol=2e-3), np.abs(
            g.numpy() - reference.results.rdf
        ).max()
        assert float(g[-10:].mean()) == pytest.approx(1.0, abs=0.15)  # g -> 1 at long range


def test_trajectory_contents_and_box_statistics(water_run):
    path, system = water_run
    trajectory = analysis.read_h5md(path)
    assert trajectory.steps.tolist() == [5, 10, 15, 20, 25, 30]
    assert torch.allclose(trajectory.times, trajectory.steps.double() * 0.002)
    edge = float(system.box[0, 0])
    statistics = analysis.box_statistics(trajectory.boxes, system.masses)
    assert statistics["volume_mean"] == pytest.approx(edge**3, rel=1e-12)
    assert statistics["volume_std"] == 0.0  # NVT
    assert statistics["density_mean"] == pytest.approx(0.997, rel=0.01)  # water_box's target density
    assert set(trajectory.observables) >= {"potential_energy", "kinetic_energy", "temperature"}


def test_corrupt_and_invalid_trajectories_raise(tmp_path, water_run):
    path, _ = water_run
    garbage = tmp_path / "garbage.h5md"
    garbage.write_bytes(b"this is not an HDF5 file" * 100)
    with pytest.raises(analysis.TrajectoryError, match="garbage.h5md.*not a readable HDF5"):
        analysis.read_h5md(garbage)
    truncated = tmp_path / "truncated.h5md"
    data = path.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(analysis.TrajectoryError, match="truncated.h5md"):
        analysis.read_h5md(truncated)
    import h5py

    empty = tmp_path / "empty.h5md"
    with h5py.File(empty, "w") as handle:
        handle.create_group("h5md")
    with pytest.raises(analysis.TrajectoryError, match="empty.h5md.*no /particles group"):
        analysis.read_h5md(empty)
    with pytest.raises(FileNotFoundError, match="missing.h5md"):
        analysis.read_h5md(tmp_path / "missing.h5md")


def test_msd_and_diffusion_of_brownian_walkers():
    """Random walks with D = 0.05 nm^2/ps: MSD = 6 D t; wrapping and unwrapping is lossless."""
    generator = torch.Generator().manual_seed(0)
    diffusion, dt = 0.05, 0.1
    steps = torch.randn(400, 300, 3, generator=generator, dtype=torch.float64) * math.sqrt(2 * diffusion * dt)
    positions = torch.cumsum(steps, 0) + 1.0
    box = torch.eye(3, dtype=torch.float64) * 2.0
    boxes = box.expand(400, 3, 3)
    unwrapped = analysis.unwrap(ms.space.wrap(positions, box), boxes)
    assert torch.allclose(unwrapped - unwrapped[0], positions - positions[0], atol=1e-10)
    lags, values = analysis.msd(positions, max_lag=100)
    assert lags[0] == 0 and float(values[0]) == 0.0
    estimate, error = analysis.diffusion_coefficient(lags * dt, values)
    assert estimate == pytest.approx(diffusion, rel=0.05)
    assert 0 < error < 0.01 * diffusion


def test_block_average_of_correlated_series():
    """AR(1) with phi = 0.9: the standard error of the mean is sqrt(var * (1 + phi) / (1 - phi) / n)."""
    rng = np.random.default_rng(1)
    phi, n = 0.9, 2**16
    noise = rng.standard_normal(n)
    series = np.empty(n)
    series[0] = noise[0] / math.sqrt(1 - phi**2)
    for index in range(1, n):
        series[index] = phi * series[index - 1] + noise[index]
    expected = math.sqrt(1 / (1 - phi**2) * (1 + phi) / (1 - phi) / n)
    mean, error = analysis.block_average(torch.from_numpy(series))
    assert error == pytest.approx(expected, rel=0.25)
    assert abs(mean) < 4 * expected
    naive = series.std() / math.sqrt(n)
    assert error > 3 * naive  # correlation is accounted for
    _, fixed = analysis.block_average(torch.from_numpy(series), n_blocks=16)
    assert fixed == pytest.approx(expected, rel=0.5)


def test_energy_drift_of_a_linear_trend():
    times = torch.linspace(0.0, 10.0, 501, dtype=torch.float64)
    noise = torch.randn(501, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 0.5
    drift = analysis.energy_drift(times, -1000.0 + 0.02 * times + noise, n_atoms=10)
    assert drift["drift"] == pytest.approx(20.0, abs=4 * drift["drift_error"])  # kJ/mol/ns
    assert drift["drift_per_atom"] == pytest.approx(drift["drift"] / 10)
    assert drift["fluctuation"] == pytest.approx(0.5, rel=0.1)


def test_free_energy_profile_and_reweighting():
    """Uniform samples reweighted by exp(-U/kT) (as metadynamics weights with V = -U, c = 0) give F = U."""
    temperature = 300.0
    kt = BOLTZMANN_MD * temperature
    generator = torch.Generator().manual_seed(3)
    samples = torch.rand(200_000, generator=generator, dtype=torch.float64)
    potential = 8.0 * (samples - 0.3) ** 2 * 10  # kJ/mol, up to 39 kJ/mol
    weights = analysis.metadynamics_weights(-potential, torch.zeros_like(potential), temperature)
    assert float(weights.sum()) == pytest.approx(1.0)
    (centers,), free_energy = analysis.free_energy_profile(samples, 20, [(0.0, 1.0)], temperature, weights)
    exact = -kt * torch.log(
        torch.tensor(
            [
                np.mean(np.exp(-80.0 * (np.linspace(a, a + 0.05, 200) - 0.3) ** 2 / kt))
                for a in np.arange(20) * 0.05
            ]
        )
    )
    exact = exact - exact.min()
    low = exact < 12.0
    assert torch.allclose(free_energy[low], exact[low], atol=0.3)
    gaussian = torch.randn(100_000, 2, generator=generator, dtype=torch.float64) * 0.5
    axes, surface = analysis.free_energy_profile(gaussian, 21, [(-2.0, 2.0), (-2.0, 2.0)], temperature)
    assert surface.shape == (21, 21) and float(surface[10, 10]) < 0.2
    # F(x, y) = kT (x^2 + y^2) / (2 sigma^2) at a bin centre one sigma away
    index = int(torch.argmin((axes[0] - 0.5).abs()))
    assert float(surface[index, 10] - surface[10, 10]) == pytest.approx(
        kt * float(axes[0][index]) ** 2 / 0.5, abs=0.25
    )


def test_plots_return_axes():
    import matplotlib

    matplotlib.use("Agg")
    r = torch.linspace(0.01, 1.0, 50)
    assert analysis.plot_rdf(r, torch.ones(50)).get_xlabel() == "r (nm)"
    axes = [torch.linspace(-3, 3, 10), torch.linspace(-3, 3, 12)]
    surface = torch.rand(10, 12) * 10
    surface[0, 0] = float("inf")
    ax = analysis.plot_free_energy(axes, surface, labels=("phi (rad)", "psi (rad)"))
    assert ax.get_ylabel() == "psi (rad)"
    assert analysis.plot_free_energy(axes[:1], surface[:, 0]).get_ylabel() == "free energy (kJ/mol)"


def test_bad_analysis_inputs():
    positions = torch.zeros(3, 4, 3, dtype=torch.float64)
    with pytest.raises(IndexError, match="group_b has atom indices outside 0..3"):
        analysis.rdf(positions, torch.eye(3).expand(3, 3, 3), [0], [7], r_max=0.4)
    with pytest.raises(ValueError, match="needs the periodic boxes"):
        analysis.rdf(positions, None, [0], [1], r_max=0.4)
    with pytest.raises(ValueError, match=r"\(T, N, 3\)"):
        analysis.msd(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="max_lag must be between 1 and 2"):
        analysis.msd(positions, max_lag=5)
    with pytest.raises(ValueError, match="at least 4 values"):
        analysis.block_average(torch.ones(3))
