"""Barostats on an ideal gas, where the isothermal-isobaric ensemble is analytic.

For N non-interacting molecules at pressure P and temperature T the volume is distributed as
``V^N exp(-P V / kT)``, a Gamma(N + 1, kT / P) distribution. This holds for the anisotropic
Monte Carlo barostat too (for one scaled axis the measure ``dL_x`` is ``dV`` at fixed ``L_y L_z``;
for several, the box shape drifts freely but the volume marginal is the same). The ensemble
check of the ``physical-validation`` package (GROMACS's: the ratio of the volume distributions
of two runs at different pressures must be ``exp(-(P1 - P2) V / kT)``) is run on the Monte Carlo
and C-rescale barostats. The Berendsen barostat relaxes the instantaneous molecular-virial
pressure ``2 K / (3 V)`` to the target, so ``V`` goes to ``N kT / P`` as ``V/V* - 1 ~ exp(-t / tau)``
when the compressibility is the ideal gas's ``1/P``; its volume fluctuations are too small.
"""

import math

import numpy as np
import pytest
import torch

import mindsponge as ms
from mindsponge import barostats

physical_validation = pytest.importorskip("physical_validation")

KT_PER_BAR_NM3 = 0.00831446261815324 / 0.0602214076  # k_B T / (P V) per K, with P in bar, V in nm^3
TEMPERATURE = 300.0
N_ATOMS = 500


def _ideal_gas(edge, seed, n_atoms=N_ATOMS):
    """``n_atoms`` non-interacting 10 amu particles uniformly in a cubic box of ``edge`` nm."""
    generator = torch.Generator().manual_seed(seed)
    return ms.System(
        torch.rand(n_atoms, 3, generator=generator, dtype=torch.float64) * edge,
        torch.full((n_atoms,), 10.0, dtype=torch.float64),
        box=torch.eye(3, dtype=torch.float64) * edge,
    )


class _BoxRecorder(ms.reporters.Reporter):
    """Keeps the box (3, 3) of every step."""

    def __init__(self):
        super().__init__(every=1)
        self.boxes = []

    def report(self, state, observables):
        self.boxes.append(state.box)


def _run(barostat, steps, seed, edge=5.9):
    """Boxes (steps, 3, 3) nm of an ideal gas under ``barostat`` with Langevin dynamics, one per step.

    The strong friction (50/ps) decorrelates the kinetic energy, hence the virial pressure that
    C-rescale and Berendsen couple to, within a few steps.
    """
    recorder = _BoxRecorder()
    simulation = ms.Simulation(
        _ideal_gas(edge, seed),
        ms.ForceField(),
        ms.integrators.LangevinMiddle(0.002, TEMPERATURE, 50.0),
        barostat=barostat,
        reporters=[recorder],
        remove_center_of_mass_motion=False,
        progress=False,
        seed=seed,
    )
    simulation.set_velocities(TEMPERATURE, seed=seed)
    simulation.run(steps)
    return torch.stack(recorder.boxes).numpy()


def _volumes(boxes):
    return np.linalg.det(boxes)


def _npt_ensemble_quantiles(volumes_by_pressure):
    """physical_validation.ensemble.check on two volume series {pressure (bar): (T,) nm^3}."""
    datasets = [
        physical_validation.data.SimulationData(
            units=physical_validation.data.UnitData.units("GROMACS"),
            ensemble=physical_validation.data.EnsembleData(
                "NPT", natoms=N_ATOMS, pressure=pressure, temperature=TEMPERATURE
            ),
            observables=physical_validation.data.ObservableData(volume=volumes),
        )
        for pressure, volumes in volumes_by_pressure.items()
    ]
    return physical_validation.ensemble.check(*datasets, verbosity=0, bootstrap_seed=1)


# C-rescale's tau_p = 0.02 ps (10 steps) makes the volume decorrelate fast enough for a short run.
# two pressures 10% apart: a volume shift of about the width of the distribution
# (physical-validation's rule of thumb dP = 2 kT / (sigma_V) for good overlap)
PRESSURES = (100.0, 110.0)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda pressure: barostats.MonteCarloBarostat(pressure, TEMPERATURE, 1), id="monte_carlo"
        ),
        pytest.param(
            lambda pressure: barostats.CRescale(pressure, TEMPERATURE, 1.0 / pressure, 0.02, 1),
            id="c_rescale",
        ),
    ],
)
@pytest.mark.slow
def test_npt_volume_ensemble_check(make):
    volumes = {
        pressure: _volumes(_run(make(pressure), 5000, seed))[500:] for seed, pressure in enumerate(PRESSURES)
    }
    for pressure, series in volumes.items():
        expected = (N_ATOMS + 1) * KT_PER_BAR_NM3 * TEMPERATURE / pressure
        assert series.mean() == pytest.approx(expected, rel=0.015)
    quantiles = _npt_ensemble_quantiles(volumes)
    assert all(abs(q) < 3 for q in quantiles), quantiles


@pytest.mark.slow
def test_anisotropic_monte_carlo_scales_only_enabled_axis_at_its_pressure():
    """Only z may change, at P_z; the huge P_x, P_y must play no role; x and y stay exactly as they were."""
    volumes = {}
    for seed, pressure in enumerate(PRESSURES):
        barostat = barostats.MonteCarloAnisotropicBarostat(
            (1e4, 1e4, pressure), TEMPERATURE, every=1, scale_x=False, scale_y=False
        )
        boxes = _run(barostat, 5000, seed + 10)
        assert np.all(boxes[:, :2, :] == np.eye(3)[:2] * 5.9)  # x and y box vectors untouched
        assert np.all(boxes[:, 2, :2] == 0) and np.ptp(boxes[:, 2, 2]) > 1.0
        volumes[pressure] = _volumes(boxes)[500:]
        expected = (N_ATOMS + 1) * KT_PER_BAR_NM3 * TEMPERATURE / pressure
        assert volumes[pressure].mean() == pytest.approx(expected, rel=0.015)
    quantiles = _npt_ensemble_quantiles(volumes)
    assert all(abs(q) < 3 for q in quantiles), quantiles


def test_anisotropic_monte_carlo_all_axes_volume_distribution():
    """All axes at one pressure: every edge moves, the volume is still Gamma(N + 1, kT / P)."""
    from scipy import stats

    pressure = 100.0
    boxes = _run(barostats.MonteCarloAnisotropicBarostat(pressure, TEMPERATURE, every=1), 5000, 21)
    edges = np.diagonal(boxes, axis1=1, axis2=2)
    assert np.all(np.ptp(edges, axis=0) > 0.2)
    assert np.all(boxes[:, ~np.eye(3, dtype=bool)] == 0)
    volumes = _volumes(boxes)[500:]
    scale = KT_PER_BAR_NM3 * TEMPERATURE / pressure
    assert volumes.mean() == pytest.approx((N_ATOMS + 1) * scale, rel=0.015)
    assert volumes.std() == pytest.approx(math.sqrt(N_ATOMS + 1) * scale, rel=0.25)
    assert stats.kstest(volumes[::50], stats.gamma(N_ATOMS + 1, scale=scale).cdf).pvalue > 1e-3


def test_berendsen_relaxes_ideal_gas_to_target_pressure():
    """From twice the equilibrium volume V* = N kT / P: V/V* - 1 = exp(-t / tau) with beta_T = 1/P."""
    pressure, time_constant, dt = 100.0, 0.5, 0.002
    equilibrium = N_ATOMS * KT_PER_BAR_NM3 * TEMPERATURE / pressure
    edge = (2 * equilibrium) ** (1 / 3)
    barostat = barostats.BerendsenBarostat(
        pressure, compressibility=1 / pressure, time_constant=time_constant, every=1
    )
    relative = _volumes(_run(barostat, 2500, 31, edge=edge)) / equilibrium - 1
    times = dt * np.arange(1, len(relative) + 1)
    for tau_multiple in (0.5, 1.0, 2.0):
        index = int(round(tau_multiple * time_constant / dt)) - 1
        assert relative[index] == pytest.approx(math.exp(-tau_multiple), abs=0.03), (
            tau_multiple,
            times[index],
        )
    settled = relative[times > 6 * time_constant]
    assert abs(settled.mean()) < 0.01
    # weak coupling suppresses the volume fluctuations: far below the NPT width 1/sqrt(N + 1)
    assert settled.std() < 0.5 / math.sqrt(N_ATOMS + 1)


@pytest.mark.parametrize(
    "barostat",
    [
        barostats.MonteCarloBarostat(1.0, 300.0),
        barostats.MonteCarloAnisotropicBarostat((1.0, 2.0, 3.0), 300.0),
        barostats.CRescale(1.0, 300.0),
        barostats.BerendsenBarostat(1.0),
    ],
    ids=repr,
)
def test_barostat_without_box_is_refused(barostat):
    system = _ideal_gas(3.0, 0, n_atoms=10).replace(box=None)
    with pytest.raises(ValueError, match="barostat needs a periodic system; this System's box is None"):
        ms.Simulation(system, ms.ForceField(), ms.integrators.VelocityVerlet(0.001), barostat=barostat)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: barostats.MonteCarloBarostat(math.nan, 300.0), "pressure must be a finite number"),
        (lambda: barostats.MonteCarloBarostat(1.0, -300.0), "temperature"),
        (lambda: barostats.MonteCarloBarostat(1.0, 300.0, every=0), "every"),
        (
            lambda: barostats.MonteCarloAnisotropicBarostat((1.0, 2.0), 300.0),
            r"three numbers \(P_x, P_y, P_z\)",
        ),
        (lambda: barostats.MonteCarloAnisotropicBarostat((1.0, 2.0, math.inf), 300.0), "pressure"),
        (
            lambda: barostats.MonteCarloAnisotropicBarostat(
                1.0, 300.0, scale_x=False, scale_y=False, scale_z=False
            ),
            "at least one of scale_x",
        ),
        (lambda: barostats.CRescale(1.0, 300.0, compressibility=0.0), "compressibility"),
        (lambda: barostats.BerendsenBarostat(1.0, time_constant=-1.0), "time_constant"),
        (lambda: barostats.BerendsenBarostat(1.0, every=2.5), "every"),
    ],
)
def test_bad_arguments_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    "make",
    [
        lambda **keywords: barostats.MonteCarloBarostat(1.0, 300.0, **keywords),
        lambda **keywords: barostats.MonteCarloAnisotropicBarostat(1.0, 300.0, **keywords),
        lambda **keywords: barostats.CRescale(1.0, 300.0, **keywords),
        lambda **keywords: barostats.BerendsenBarostat(1.0, **keywords),
    ],
)
def test_frequency_is_the_deprecated_name_of_every(make):
    with pytest.warns(DeprecationWarning, match=r"frequency=.*every="):
        barostat = make(frequency=7)
    assert barostat.every == 7 and "every=7" in repr(barostat)
    with pytest.warns(DeprecationWarning, match=r"\.frequency is deprecated.*\.every"):
        assert barostat.frequency == 7


def test_berendsen_refuses_a_runaway_scaling():
    """A target pressure absurdly far from the gas's (~20 bar) would more than halve the box in one step."""
    barostat = barostats.BerendsenBarostat(1e7, compressibility=1e-3, time_constant=0.1, every=1)
    simulation = ms.Simulation(
        _ideal_gas(5.9, 0),
        ms.ForceField(),
        ms.integrators.VelocityVerlet(0.002),
        barostat=barostat,
        progress=False,
    )
    simulation.set_velocities(TEMPERATURE, seed=0)
    with pytest.raises(FloatingPointError, match="Berendsen barostat: the pressure .* at step 1"):
        simulation.run(1)


def test_command_line_barostat_types(tmp_path, capsys):
    """``mindsponge run`` builds the anisotropic and Berendsen barostats from ``[barostat]``."""
    pytest.importorskip("openmm")
    from common import config as config_module
    from mindsponge import cli as command_line

    path = tmp_path / "run.toml"

    def write(barostat):
        """A 10-step run of 64 rigid TIP3P waters (reaction field) with ``barostat`` every step."""
        config_module.dump(
            command_line.RunConfig(
                system=command_line.SystemConfig(water_box=command_line.WaterBoxConfig(n_molecules=64)),
                steps=10,
                constraints="water",
                minimize_tolerance=50.0,
                forcefield=command_line.ForceFieldConfig(
                    files=["tip3p.xml"], nonbonded_method="CutoffPeriodic", cutoff=0.6
                ),
                barostat=barostat,
                output=command_line.OutputConfig(directory=tmp_path / "out", trajectory=""),
            ),
            path,
        )

    def simulate(barostat):
        write(barostat)
        simulation = command_line.run(path, progress=False)
        initial = simulation.system.box.diagonal()
        return simulation.barostat, (simulation.state.box.diagonal() / initial).tolist()

    anisotropic = command_line.BarostatConfig(
        type="monte_carlo_anisotropic", pressure=(1.0, 1.0, 500.0), every=1, scale_z=False
    )
    barostat, ratios = simulate(anisotropic)
    assert isinstance(barostat, barostats.MonteCarloAnisotropicBarostat) and barostat.pressure == (
        1.0,
        1.0,
        500.0,
    )
    assert ratios[2] == 1.0 and ratios[:2] != [1.0, 1.0]
    barostat, ratios = simulate(command_line.BarostatConfig(type="berendsen", time_constant=0.5, every=1))
    assert isinstance(barostat, barostats.BerendsenBarostat) and barostat.time_constant == 0.5
    assert ratios[0] != 1.0 and ratios == pytest.approx([ratios[0]] * 3, rel=1e-12)
    write(anisotropic)
    path.write_text(path.read_text().replace('"monte_carlo_anisotropic"', '"monte_carlo"'))
    assert command_line.main(["run", str(path), "--quiet"]) == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and 'per-axis pressure needs type = "monte_carlo_anisotropic"' in message
