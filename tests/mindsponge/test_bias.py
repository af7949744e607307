"""Biases: analytic energies, metadynamics and umbrella sampling on a double well vs quadrature."""

import math

import numpy as np
import pytest
import torch
from scipy import integrate

import mindsponge as ms
from common.units import BOLTZMANN_MD
from mindsponge import bias, colvar
from mindsponge.forcefield.base import EnergyTerm, ForceField, energy_and_forces
from mindsponge.state import State

TEMPERATURE = 300.0
KT = BOLTZMANN_MD * TEMPERATURE
BARRIER, TILT, HALF_WIDTH = 10.0, 2.0, 0.1  # kJ/mol, kJ/mol, nm


def double_well(x):
    """``U(x) = B ((x/a)^2 - 1)^2 + t x/a`` (kJ/mol) on the x coordinate (nm)."""
    return BARRIER * ((x / HALF_WIDTH) ** 2 - 1) ** 2 + TILT * x / HALF_WIDTH


class DoubleWell(EnergyTerm):
    """Double well along x of every particle, harmonic across (y, z)."""

    def forward(self, positions, box=None):
        lateral = 250.0 * (positions[..., 1:] ** 2).sum(-1)
        return (double_well(positions[..., 0]) + lateral).sum(-1)


def exact_free_energy_difference(low=-0.5, high=0.5):
    """F(x > 0) - F(x < 0) of the double well by quadrature, kJ/mol."""
    right = integrate.quad(lambda x: math.exp(-double_well(x) / KT), 0.0, high)[0]
    left = integrate.quad(lambda x: math.exp(-double_well(x) / KT), low, 0.0)[0]
    return -KT * math.log(right / left)


def x_of_particle_0():
    return colvar.FunctionColvar(lambda positions, box: positions[..., 0, 0], units="nm")


def run_walkers(energy, walkers, steps, seed, every, on_step=None):
    """Langevin (BAOAB) walkers, one particle each, started in the left well; x sampled every ``every``."""
    integrator = ms.integrators.LangevinMiddle(dt=0.005, temperature=TEMPERATURE, friction=5.0)
    generator = torch.Generator().manual_seed(seed)
    positions = torch.zeros(walkers, 3, dtype=torch.float64)
    positions[:, 0] = -HALF_WIDTH
    masses = torch.full((walkers,), 5.0, dtype=torch.float64)

    def force(positions, box):
        return energy_and_forces(lambda x, b: energy(x.unsqueeze(-2)).sum(), positions, box)

    energy_value, forces = force(positions, None)
    state = State(
        positions,
        torch.zeros_like(positions),
        forces=forces,
        potential_energy=energy_value,
        rng_state=generator.get_state(),
    )
    samples = []
    for step in range(1, steps + 1):
        state = integrator.step(state, force, masses, None, generator)
        if on_step is not None and on_step(state.positions, step):
            energy_value, forces = force(state.positions, None)
            state = state.replace(forces=forces, potential_energy=energy_value)
        if step % every == 0:
            samples.append(state.positions[:, 0].clone())
    return torch.stack(samples)


@pytest.mark.slow
def test_well_tempered_metadynamics_recovers_double_well_free_energy():
    """32 walkers sharing one well-tempered bias; Delta F from the bias and by reweighting."""
    cv = x_of_particle_0()
    metad = bias.Metadynamics(
        cv,
        height=0.5,
        widths=0.015,
        every=20,
        temperature=TEMPERATURE,
        bias_factor=6.0,
        grid_min=[-0.3],
        grid_max=[0.3],
    )
    well = DoubleWell()
    history = {"bias": [], "offset": []}

    def deposit(positions, step):
        if step % 10 == 0:
            with torch.no_grad():
                history["bias"].append(metad(positions.unsqueeze(-2)))
            history["offset"].append(metad.reweighting_offset())
        return metad.after_step(positions.unsqueeze(-2), None, step)

    samples = run_walkers(
        lambda x: well(x) + metad(x), walkers=48, steps=2500, seed=3, every=10, on_step=deposit
    ).numpy()
    exact = exact_free_energy_difference()
    (axis,), free_energy = metad.free_energy()
    weights = torch.exp(-free_energy / KT)
    from_bias = -KT * math.log(float(weights[axis > 0].sum() / weights[axis < 0].sum()))
    assert abs(from_bias - exact) < 1.0, (from_bias, exact)
    # Tiwary-Parrinello reweighting of the second half: weights exp((V(s, t) - c(t)) / kT)
    bias_energies = torch.stack(history["bias"]).numpy()
    offsets = np.asarray(history["offset"])[:, None]
    half = slice(len(samples) // 2, None)
    weights = np.exp((bias_energies - offsets) / KT)[half]
    reweighted = -KT * math.log(weights[samples[half] > 0].sum() / weights[samples[half] < 0].sum())
    assert abs(reweighted - exact) < 1.0, (reweighted, exact)
    assert int(metad.n_deposited) == 48 * 2500 // 20


def test_umbrella_sampling_mbar_and_wham_recover_double_well_free_energy():
    """21 windows (two walkers each) along x; MBAR (pymbar) and WHAM profiles vs quadrature."""
    centers = np.linspace(-0.15, 0.15, 21)
    umbrella = bias.UmbrellaSampling(
        x_of_particle_0(), centers, force_constant=8000.0, temperature=TEMPERATURE
    )
    window_centers = torch.tensor(np.repeat(centers, 2))
    well = DoubleWell()

    def energy(x):
        return well(x) + 0.5 * umbrella.force_constant * (x[..., 0, 0] - window_centers) ** 2

    samples = run_walkers(energy, walkers=len(window_centers), steps=1500, seed=4, every=5)[40:].numpy()
    for window in range(len(centers)):
        umbrella.add_samples(window, samples[:, 2 * window : 2 * window + 2])
    edges = np.linspace(-0.17, 0.17, 35)
    exact = exact_free_energy_difference(edges[0], edges[-1])
    exact_profile = np.array([double_well(x) for x in 0.5 * (edges[1:] + edges[:-1])])
    for method in ("mbar", "wham"):
        bin_centers, profile = umbrella.free_energy(edges, method=method)
        occupied = np.isfinite(profile)
        weights = np.exp(-profile[occupied] / KT)
        positive = bin_centers[occupied] > 0
        difference = -KT * math.log(weights[positive].sum() / weights[~positive].sum())
        assert abs(difference - exact) < 1.0, (method, difference, exact)
        # the profile itself, where it is well sampled (within 12 kJ/mol of the minimum)
        reference = exact_profile[occupied] - exact_profile[occupied].min()
        low = reference < 12.0
        assert np.sqrt(np.mean((profile[occupied][low] - reference[low]) ** 2)) < 1.0, method


def periodic_well(angle):
    """``U(phi) = 4 cos(3 phi) + 1.5 cos(phi)`` kJ/mol: three wells, the one at 180 degrees the deepest."""
    return 4.0 * np.cos(3.0 * angle) + 1.5 * np.cos(angle)


def test_umbrella_population_of_a_torsion_region_matches_quadrature():
    """Independent samples drawn exactly from 18 windows' biased distributions on a periodic potential (the
    windows wrap round at +-180 degrees): the MBAR population of |phi| < 120 degrees agrees with quadrature
    within four of its block errors, and the block error itself is near the spread of repeated runs."""
    grid = np.linspace(-np.pi, np.pi, 20001)
    exact_weights = np.exp(-periodic_well(grid) / KT)
    region = np.abs(grid) < np.radians(120.0)
    exact = integrate.trapezoid(exact_weights * region, grid) / integrate.trapezoid(exact_weights, grid)
    centers = np.linspace(-np.pi, np.pi, 18, endpoint=False)
    estimates, errors = [], []
    for seed in range(6):
        generator = np.random.default_rng(seed)
        umbrella = bias.UmbrellaSampling(colvar.Torsion([0, 1, 2, 3]), centers, 60.0, TEMPERATURE)
        for window, center in enumerate(centers):
            wrapped = (grid - center + np.pi) % (2 * np.pi) - np.pi
            density = np.exp(-(periodic_well(grid) + 30.0 * wrapped**2) / KT)
            cumulative = np.cumsum(density) / density.sum()
            umbrella.add_samples(window, np.interp(generator.random(400), cumulative, grid))
        probability, error = umbrella.population(lambda values: np.abs(values) < np.radians(120.0))
        assert abs(probability - exact) < 4 * error, (seed, probability, error, exact)
        estimates.append(probability)
        errors.append(error)
    assert 0.2 < exact < 0.8  # both regions matter
    assert 0.3 < np.mean(errors) / np.std(estimates, ddof=1) < 3.0, (errors, estimates)
    with pytest.raises(ValueError, match="blocks must be an int >= 2"):
        umbrella.population(lambda values: values > 0, blocks=1)
    with pytest.raises(ValueError, match="one bool per value"):
        umbrella.population(lambda values: values)
    half_done = bias.UmbrellaSampling(colvar.Torsion([0, 1, 2, 3]), [0.0, 1.0], 60.0, TEMPERATURE)
    half_done.add_samples(0, np.zeros(10))
    with pytest.raises(ValueError, match=r"windows \[1\] have no samples"):
        half_done.population(lambda values: values > 0)


def _one_particle_simulation(forcefield, seed=1):
    system = ms.System(
        positions=torch.tensor([[-0.1, 0.0, 0.0]], dtype=torch.float64),
        masses=torch.tensor([5.0], dtype=torch.float64),
    )
    integrator = ms.integrators.LangevinMiddle(dt=0.005, temperature=TEMPERATURE, friction=5.0)
    return ms.Simulation(  # double: forces compared to 1e-10
        system,
        forcefield,
        integrator,
        remove_center_of_mass_motion=False,
        progress=False,
        seed=seed,
        precision="double",
    )


def _metadynamics():
    return bias.Metadynamics(
        x_of_particle_0(),
        height=1.0,
        widths=0.02,
        every=5,
        temperature=TEMPERATURE,
        bias_factor=5.0,
        grid_min=[-0.3],
        grid_max=[0.3],
    )


def test_simulation_deposits_and_checkpoint_restores_bias(tmp_path):
    metad = _metadynamics()
    simulation = _one_particle_simulation(ForceField([DoubleWell(), metad]))
    simulation.run(40)
    assert int(metad.n_deposited) == 8
    # the bias is part of the force field: its energy and forces are in the state
    energies = simulation.forcefield.energy_terms(simulation.state.positions, None)
    assert float(energies["Metadynamics"]) > 0
    expected = ms.forces(simulation.forcefield, simulation.state.positions)
    assert torch.allclose(simulation.state.forces, expected, atol=1e-10)
    simulation.save_checkpoint(tmp_path / "run.chk")
    simulation.run(40)
    restored_bias = _metadynamics()
    restored = _one_particle_simulation(ForceField([DoubleWell(), restored_bias]), seed=7)
    restored.load_checkpoint(tmp_path / "run.chk")
    assert int(restored_bias.n_deposited) == 8
    restored.run(40)
    assert torch.equal(restored.state.positions, simulation.state.positions)
    assert torch.equal(restored_bias.grid, metad.grid) and int(restored_bias.n_deposited) == 16
    without_bias = _one_particle_simulation(ForceField([DoubleWell()]))
    with pytest.raises(ValueError, match="state of 1 adaptive biases"):
        without_bias.load_checkpoint(tmp_path / "run.chk")


def test_umbrella_driver_samples_restrained_windows():
    """A free particle in three windows: mean and variance of x are the restraint's (kT/k)."""
    umbrella = bias.UmbrellaSampling(
        x_of_particle_0(), [-0.1, 0.0, 0.1], force_constant=2000.0, temperature=TEMPERATURE
    )

    def simulate(restraint, window):
        simulation = _one_particle_simulation(ForceField([restraint]), seed=window)
        simulation.set_velocities(TEMPERATURE, seed=window)
        return simulation

    umbrella.run(simulate, steps=2000, every=5, equilibration=100, progress=False)
    sigma = math.sqrt(KT / 2000.0)
    for center, samples in zip(umbrella.centers, umbrella.samples, strict=True):
        assert len(samples) == 400
        assert abs(samples.mean() - center) < 0.5 * sigma  # ~5 standard errors of correlated samples
        assert 0.7 < samples.std() / sigma < 1.3


def test_restraint_and_wall_energies():
    torsion = colvar.Torsion([0, 1, 2, 3])
    angle = math.pi - 0.1
    positions = torch.tensor(
        [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [math.cos(angle), math.sin(angle), 1.0]],
        dtype=torch.float64,
    )
    restraint = bias.HarmonicRestraint(torsion, centers=-math.pi + 0.1, force_constants=100.0)
    assert float(restraint(positions)) == pytest.approx(0.5 * 100.0 * 0.2**2, rel=1e-10)  # across +-pi
    distance = colvar.Distance([0, 1])  # 1 nm
    assert float(bias.UpperWall(distance, at=0.8, force_constant=50.0)(positions)) == pytest.approx(50 * 0.04)
    assert float(bias.UpperWall(distance, at=1.2, force_constant=50.0)(positions)) == 0.0
    lower = bias.LowerWall(distance, at=1.5, force_constant=10.0, exponent=4)
    assert float(lower(positions)) == pytest.approx(10 * 0.5**4)
    for term in (restraint, lower):
        assert torch.autograd.gradcheck(lambda x, term=term: term(x), (positions.clone().requires_grad_(),))


def test_metadynamics_grid_gaussians_periodic_and_tempered():
    torsion = colvar.FunctionColvar(lambda positions, box: positions[..., 0, 0], period=(-math.pi, math.pi))
    metad = bias.Metadynamics(
        torsion, height=2.0, widths=0.2, every=1, temperature=TEMPERATURE, bias_factor=4.0
    )
    assert metad.grid.shape == (158,)  # ceil(2 pi / (0.2 / 5))
    assert (
        metad.deposit(torch.tensor([math.pi - 0.05], dtype=torch.float64)) == 2.0
    )  # an empty bias: the full height

    def at(value):
        return float(metad(torch.tensor([[value, 0.0, 0.0]], dtype=torch.float64)))

    # the Gaussian wraps around the period; cubic interpolation between grid points
    assert at(-math.pi + 0.05) == pytest.approx(2.0 * math.exp(-0.5 * (0.1 / 0.2) ** 2), rel=5e-4)
    assert at(math.pi - 0.05) == pytest.approx(2.0, rel=5e-4)
    before = at(math.pi - 0.05)
    second = metad.deposit(torch.tensor([math.pi - 0.05], dtype=torch.float64))  # tempered: bias factor 4
    assert second == pytest.approx(2.0 * math.exp(-before / (KT * 3.0)), rel=1e-10)
    positions = torch.tensor([[0.3 + math.pi - 0.2, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: metad(x), (positions,))
    (axis,), free_energy = metad.free_energy()
    assert float(free_energy.min()) == 0.0
    assert float(axis[int(free_energy.argmin())]) == pytest.approx(math.pi - 0.05, abs=0.04)


def test_two_dimensional_grid_interpolates_gaussian():
    first = colvar.FunctionColvar(lambda positions, box: positions[..., 0, 0])
    second = colvar.FunctionColvar(lambda positions, box: positions[..., 0, 1])
    metad = bias.Metadynamics(
        [first, second],
        height=1.0,
        widths=[0.1, 0.2],
        every=1,
        temperature=300.0,
        grid_min=[-1.0, -1.0],
        grid_max=[1.0, 1.0],
    )
    metad.deposit(torch.tensor([0.1, -0.2]))
    points = torch.tensor([[[0.17, 0.05, 0.0]], [[0.0, -0.3, 0.0]]], dtype=torch.float64)
    expected = torch.exp(-0.5 * (((points[:, 0, 0] - 0.1) / 0.1) ** 2 + ((points[:, 0, 1] + 0.2) / 0.2) ** 2))
    assert torch.allclose(metad(points), expected, atol=2e-4)
    assert torch.autograd.gradcheck(lambda x: metad(x), (points[:1].clone().requires_grad_(),))


def test_bad_inputs():
    distance = colvar.Distance([0, 1])
    with pytest.raises(
        ValueError, match=r"collective variable 0 \(Distance\) is not periodic, so it needs a grid"
    ):
        bias.Metadynamics(distance, height=1.0, widths=0.1, every=10, temperature=300.0)
    with pytest.raises(ValueError, match="bias_factor must be > 1"):
        bias.Metadynamics(
            distance,
            height=1.0,
            widths=0.1,
            every=10,
            temperature=300.0,
            bias_factor=1.0,
            grid_min=[0],
            grid_max=[1],
        )
    with pytest.raises(ValueError, match="widths needs one value per collective variable"):
        bias.Metadynamics(
            [distance, distance],
            height=1.0,
            widths=[0.1],
            every=10,
            temperature=300.0,
            grid_min=[0, 0],
            grid_max=[1, 1],
        )
    with pytest.raises(ValueError, match=r"every \(steps\) must be a positive int"):
        bias.Metadynamics(
            distance, height=1.0, widths=0.1, every=0, temperature=300.0, grid_min=[0], grid_max=[1]
        )
    with pytest.raises(TypeError, match=r"colvars\[0\] is not a Colvar"):
        bias.HarmonicRestraint(lambda x: x, 0.0, 1.0)
    umbrella = bias.UmbrellaSampling(distance, [0.1, 0.2], 100.0, 300.0)
    umbrella.add_samples(0, [0.1, 0.11])
    with pytest.raises(ValueError, match=r"windows \[1\] have no samples"):
        umbrella.free_energy(np.linspace(0, 1, 5))
    umbrella.add_samples(1, [0.2])
    with pytest.raises(ValueError, match="method must be 'mbar' or 'wham'"):
        umbrella.free_energy(np.linspace(0, 1, 5), method="tram")


def test_biases_in_float32_match_float64():
    torsion = colvar.Torsion([0, 1, 2, 3])
    metad = bias.Metadynamics(
        torsion, height=1.0, widths=0.3, every=1, temperature=TEMPERATURE, bias_factor=5.0
    )
    metad.deposit(torch.tensor([0.5], dtype=torch.float64))
    restraint = bias.HarmonicRestraint(torsion, centers=0.2, force_constants=10.0)
    wall = bias.UpperWall(colvar.Distance([0, 3]), at=0.5, force_constant=100.0)
    positions = torch.tensor(
        [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.8, 0.5, 1.1]], dtype=torch.float64
    )
    for term in (metad, restraint, wall):
        double = term(positions)
        single = term(positions.float())
        assert single.dtype == torch.float32
        assert float(double) > 0 and float(single) == pytest.approx(float(double), rel=1e-5)


def test_pace_is_the_deprecated_name_of_every():
    distance = colvar.Distance([0, 1])
    with pytest.warns(DeprecationWarning, match=r"pace=.*every="):
        metad = bias.Metadynamics(distance, height=1.0, widths=0.1, pace=10, temperature=300.0,
                                  grid_min=[0], grid_max=[1])
    assert metad.every == 10
    with pytest.warns(DeprecationWarning, match=r"Metadynamics.pace is deprecated.*Metadynamics.every"):
        assert metad.pace == 10
