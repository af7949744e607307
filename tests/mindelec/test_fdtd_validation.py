"""Physics validations of mindelec.fdtd against analytic solutions.

Tolerances reached (stated in each test) at the resolution each test uses:

* 1D dielectric slab (n = 2, 40 cells per wavelength in the slab at the top of the band):
  |R - R_exact| and |T - T_exact| < 5e-3 over 0.2-0.4 PHz (transfer-matrix formula).
* 2D line source vs -(omega mu0 I / 4) H0^(2)(k r), 30 cells per wavelength, r = 0.5-2 wavelengths:
  amplitude within 1.5 %, phase within 0.03 rad (along an axis and the diagonal).
* CPML, 20 cells: reflection at normal incidence (1D) below -60 dB, and below -40 dB at a probe
  next to the PML of a 2D point source, both against a much larger reference domain.
* PEC rectangular cavity (2D TM, 20 x 14 cells): the 5 lowest resonances within 0.5 % of
  c/2 sqrt((m/a)^2 + (n/b)^2) (measured 0.3 %, the grid's dispersion) and within 1e-5 of the Yee
  grid's own discrete dispersion relation (measured 2e-7).
* Lossless closed PEC box (2D TM and TE, with a dielectric disk): the discrete Yee energy is constant
  to 1e-10 (relative, float64) after the source is off.
* Drude and Lorentz half-spaces (5 nm cells, 0.15-0.5 PHz across the plasma/resonance frequency):
  |r|^2 within 2e-3 (Drude; measured 6e-4) and 1e-2 (Lorentz; measured 5.5e-3) of |(1 - n)/(1 + n)|^2,
  n = sqrt(eps(omega)).
"""

import math

import numpy as np
import pytest
import torch
from scipy import special

import mindelec as me
from common.geometry import Disk, Interval
from common.units import SPEED_OF_LIGHT, VACUUM_PERMEABILITY

fdtd = me.fdtd


def test_dielectric_slab_reflection_transmission_matches_transfer_matrix():
    index, thickness, slab_center = 2.0, 0.5e-6, 2e-6
    frequencies = torch.linspace(2e14, 4e14, 11, dtype=torch.float64)

    def run(with_slab):
        structures = (
            [
                fdtd.Structure(
                    Interval(slab_center - thickness / 2, slab_center + thickness / 2),
                    fdtd.Medium(permittivity=index**2),
                )
            ]
            if with_slab
            else []
        )
        sim = fdtd.Simulation(
            size=(12e-6,),
            cell_size=10e-9,
            boundary=fdtd.PML(30),
            structures=structures,
            dtype=torch.float64,
            sources=[fdtd.PointDipole((-4e-6,), "Ez", fdtd.GaussianPulse(3e14, 2e14))],
            monitors=[
                fdtd.DFTMonitor("reflected", frequencies, ("Ez",), center=(-2e-6,), size=(0,)),
                fdtd.FluxMonitor("transmitted", frequencies, center=(4.5e-6,)),
            ],
        )
        return sim.run(until=120e-15, progress=False)

    empty, slab = run(False), run(True)
    incident = empty["reflected"]["Ez"].flatten()
    reflectance = ((slab["reflected"]["Ez"].flatten() - incident).abs() ** 2 / incident.abs() ** 2).numpy()
    transmittance = (slab["transmitted"]["flux"] / empty["transmitted"]["flux"]).numpy()

    k0 = 2 * np.pi * frequencies.numpy() / SPEED_OF_LIGHT
    phase = np.exp(-2j * index * k0 * thickness)
    r12 = (1 - index) / (1 + index)
    r_exact = r12 * (1 - phase) / (1 - r12**2 * phase)
    t_exact = (1 - r12**2) * np.sqrt(phase) / (1 - r12**2 * phase)
    assert np.abs(reflectance - np.abs(r_exact) ** 2).max() < 5e-3
    assert np.abs(transmittance - np.abs(t_exact) ** 2).max() < 5e-3
    assert reflectance.max() > 0.3  # the band crosses a reflection maximum, so the check has teeth


def test_line_source_matches_hankel_green_function():
    wavelength = 1e-3
    frequency = SPEED_OF_LIGHT / wavelength
    spacing = wavelength / 30
    waveform = fdtd.GaussianPulse(frequency, 0.6 * frequency)
    cells = [15, 30, 45, 60]  # distances in cells: 0.5 to 2 wavelengths
    monitors = [
        fdtd.DFTMonitor(f"axis{n}", [frequency], ("Ez",), center=(n * spacing, 0), size=(0, 0)) for n in cells
    ]
    diagonal = [11, 21, 32, 42]  # cells along each axis: 0.52 to 1.98 wavelengths
    monitors += [
        fdtd.DFTMonitor(f"diagonal{n}", [frequency], ("Ez",), center=(n * spacing,) * 2, size=(0, 0))
        for n in diagonal
    ]
    sim = fdtd.Simulation(
        size=(5.4 * wavelength,) * 2,
        cell_size=spacing,
        boundary=fdtd.PML(20),
        dtype=torch.float64,
        sources=[fdtd.PointDipole((0, 0), "Ez", waveform)],
        monitors=monitors,
    )
    result = sim.run(until=waveform.duration + 8 * wavelength / SPEED_OF_LIGHT, progress=False)
    # the source current's own DFT (it acts at (n + 1/2) dt)
    times = (torch.arange(result.steps, dtype=torch.float64) + 0.5) * sim.dt
    omega = 2 * math.pi * frequency
    current = complex((waveform(times) * torch.exp(-1j * omega * times)).sum() * sim.dt)
    for name, distance in [(f"axis{n}", n * spacing) for n in cells] + [
        (f"diagonal{n}", math.sqrt(2) * n * spacing) for n in diagonal
    ]:
        field = complex(result[name]["Ez"].flatten()[0])
        exact = (
            -omega * VACUUM_PERMEABILITY * current / 4 * special.hankel2(0, omega / SPEED_OF_LIGHT * distance)
        )
        assert abs(abs(field) / abs(exact) - 1) < 0.015, name
        assert abs(np.angle(field / exact)) < 0.03, name


def _probe_series(size, cell_size, boundary, source, probe, until, polarization="TM"):
    sim = fdtd.Simulation(
        size=size,
        cell_size=cell_size,
        boundary=boundary,
        dtype=torch.float64,
        polarization=polarization,
        sources=[source],
        monitors=[fdtd.FieldProbe("p", probe, ("Ez",))],
    )
    return sim.run(until=until, progress=False)["p"]["Ez"]


def test_cpml_reflection_normal_incidence_1d():
    spacing = 10e-9
    waveform = fdtd.GaussianPulse(3e14, 2e14)
    source = fdtd.PointDipole((0.0,), "Ez", waveform)
    until = waveform.duration + 4e-6 / SPEED_OF_LIGHT  # the pulse has reached the PML and come back
    small = _probe_series((3e-6,), spacing, fdtd.PML(20), source, (1.2e-6,), until)
    reference = _probe_series((30e-6,), spacing, fdtd.PML(20), source, (1.2e-6,), until)
    reflection = (small - reference).abs().max() / reference.abs().max()
    assert 20 * math.log10(float(reflection)) < -60


def test_cpml_reflection_2d_point_source():
    spacing = 1e-5
    waveform = fdtd.GaussianPulse(1.5e12, 1e12)  # 20 to 40 cells per wavelength over the band
    source = fdtd.PointDipole((0.0, 0.0), "Ez", waveform)
    until = waveform.duration + 1.2e-3 / SPEED_OF_LIGHT
    small = _probe_series((1e-3, 1e-3), spacing, fdtd.PML(20), source, (0.28e-3, 0.0), until)
    reference = _probe_series((3.6e-3, 3.6e-3), spacing, fdtd.PML(20), source, (0.28e-3, 0.0), until)
    reflection = (small - reference).abs().max() / reference.abs().max()
    assert 20 * math.log10(float(reflection)) < -40


def _peak_frequencies(series, dt, count, low, high):
    """Frequencies of the ``count`` highest local maxima of a Hann-windowed spectrum in [low, high]."""
    signal = series.numpy() * np.hanning(len(series))
    padded = 16 * len(signal)
    spectrum = np.abs(np.fft.rfft(signal, padded))
    frequencies = np.fft.rfftfreq(padded, dt)
    inside = (frequencies > low) & (frequencies < high)
    index = np.nonzero(inside)[0]
    peaks = [i for i in index[1:-1] if spectrum[i] > spectrum[i - 1] and spectrum[i] > spectrum[i + 1]]
    peaks = sorted(sorted(peaks, key=lambda i: -spectrum[i])[:count])
    refined = []
    for i in peaks:  # parabolic interpolation of the log spectrum
        a, b, c = np.log(spectrum[i - 1 : i + 2])
        refined.append(frequencies[i] + 0.5 * (a - c) / (a - 2 * b + c) * (frequencies[1] - frequencies[0]))
    return np.array(refined)


def test_pec_cavity_resonances():
    width, height, spacing = 20e-3, 14e-3, 1e-3
    modes = [(1, 1), (2, 1), (1, 2), (3, 1), (2, 2)]
    exact = np.array([SPEED_OF_LIGHT / 2 * math.hypot(m / width, n / height) for m, n in modes])
    waveform = fdtd.GaussianPulse(exact.mean(), 2 * exact.max())
    sim = fdtd.Simulation(
        size=(width, height),
        cell_size=spacing,
        boundary=fdtd.PEC(),
        dtype=torch.float64,
        sources=[fdtd.PointDipole((-6.3e-3, -3.1e-3), "Ez", waveform)],
        monitors=[fdtd.FieldProbe("p", (4.2e-3, 2.2e-3), ("Ez",))],
    )
    result = sim.run(steps=8000, progress=False)
    found = _peak_frequencies(result["p"]["Ez"], sim.dt, len(modes), 0.5 * exact.min(), 1.1 * exact.max())
    assert np.abs(found / exact - 1).max() < 5e-3
    # the Yee grid's own modes: sin(omega dt / 2) / (c dt) = sqrt(sum (sin(k dx / 2) / dx)^2)
    discrete = np.array(
        [
            2
            / sim.dt
            * np.arcsin(
                SPEED_OF_LIGHT
                * sim.dt
                * math.hypot(
                    math.sin(m * math.pi / width * spacing / 2) / spacing,
                    math.sin(n * math.pi / height * spacing / 2) / spacing,
                )
            )
            / (2 * math.pi)
            for m, n in modes
        ]
    )
    assert np.abs(found / discrete - 1).max() < 1e-5


@pytest.mark.parametrize("polarization", ["TM", "TE"])
def test_energy_conserved_in_closed_pec_box(polarization):
    size, spacing = (2e-3, 1.6e-3), 4e-5
    component = "Ez" if polarization == "TM" else "Hz"
    pulse = fdtd.GaussianPulse(2e11, 2e11)

    def waveform(times):  # the pulse, switched off exactly after its duration
        return pulse(times) * (times < pulse.duration)

    permittivity = 3.0
    sim = fdtd.Simulation(
        size=size,
        cell_size=spacing,
        boundary=fdtd.PEC(),
        polarization=polarization,
        dtype=torch.float64,
        structures=[fdtd.Structure(Disk((2e-4, 1e-4), 4e-4), fdtd.Medium(permittivity=permittivity))],
        sources=[fdtd.PointDipole((-3e-4, -2e-4), component, waveform)],
        monitors=[
            fdtd.Snapshots("all", 1, ("Ez", "Hx", "Hy") if polarization == "TM" else ("Ex", "Ey", "Hz"))
        ],
    )
    source_off = math.ceil(pulse.duration / sim.dt) + 2
    result = sim.run(steps=source_off + 400, progress=False)
    frames = result["all"]
    # permittivity at each E node, as the simulation rasterised it
    electric = [c for c in frames if c.startswith("E")]
    magnetic = [c for c in frames if c.startswith("H")]
    eps = {c: sim._coefficients()[0][c][1] for c in electric}  # cb = dt / (eps0 eps_r)
    electric_energy = sum(
        0.5
        * (sim.dt / eps[c] if isinstance(eps[c], float) else sim.dt / eps[c].squeeze(-1))
        * frames[c][:-1] ** 2
        for c in electric
    )
    magnetic_energy = sum(0.5 * VACUUM_PERMEABILITY * frames[c][:-1] * frames[c][1:] for c in magnetic)
    energy = (electric_energy.sum(dim=(1, 2)) + magnetic_energy.sum(dim=(1, 2)))[source_off:]
    assert energy.min() > 0
    assert float((energy.max() - energy.min()) / energy.mean()) < 1e-10


@pytest.mark.parametrize(
    "medium, tolerance",
    [
        (fdtd.Drude(plasma_frequency=3e14, collision_frequency=3e13), 2e-3),
        (
            fdtd.Lorentz(
                delta_permittivity=2.0, resonance_frequency=3e14, damping_frequency=2e13, permittivity=1.5
            ),
            1e-2,
        ),
    ],
    ids=["drude", "lorentz"],
)
def test_dispersive_half_space_reflection(medium, tolerance):
    frequencies = torch.linspace(1.5e14, 5e14, 15, dtype=torch.float64)
    waveform = fdtd.GaussianPulse(3.2e14, 4e14)

    def run(structures):
        sim = fdtd.Simulation(
            size=(8e-6,),
            cell_size=5e-9,
            boundary=fdtd.PML(40),
            structures=structures,
            dtype=torch.float64,
            sources=[fdtd.PointDipole((-2.5e-6,), "Ez", waveform)],
            monitors=[fdtd.DFTMonitor("r", frequencies, ("Ez",), center=(-1.5e-6,), size=(0,))],
        )
        return sim.run(until=waveform.duration + 12e-6 / SPEED_OF_LIGHT, progress=False)["r"]["Ez"].flatten()

    incident = run([])
    reflected = run([fdtd.Structure(Interval(0.0, 4e-6), medium)]) - incident
    reflectance = (reflected.abs() ** 2 / incident.abs() ** 2).numpy()
    index = np.sqrt(medium.relative_permittivity(frequencies).numpy())
    exact = np.abs((1 - index) / (1 + index)) ** 2
    assert np.abs(reflectance - exact).max() < tolerance
    assert exact.max() - exact.min() > 0.3  # the band spans strong and weak reflection


def test_pec_structure_reflects_totally():
    """A PEC half-space (a structure, not a wall): |r| = 1 and the field behind it stays zero."""
    frequencies = torch.linspace(2e14, 4e14, 5, dtype=torch.float64)

    def run(structures):
        sim = fdtd.Simulation(
            size=(6e-6,),
            cell_size=10e-9,
            boundary=fdtd.PML(30),
            structures=structures,
            dtype=torch.float64,
            sources=[fdtd.PointDipole((-2e-6,), "Ez", fdtd.GaussianPulse(3e14, 2e14))],
            monitors=[
                fdtd.DFTMonitor("r", frequencies, ("Ez",), center=(-1e-6,), size=(0,)),
                fdtd.FieldProbe("behind", (1.5e-6,), ("Ez",)),
            ],
        )
        return sim.run(until=80e-15, progress=False)

    incident = run([])["r"]["Ez"].flatten()
    conductor = run([fdtd.Structure(Interval(0.5e-6, 2.5e-6), fdtd.PEC())])
    reflection = (conductor["r"]["Ez"].flatten() - incident).abs() / incident.abs()
    assert (reflection - 1).abs().max() < 1e-3
    assert conductor["behind"]["Ez"].abs().max() == 0


@pytest.mark.parametrize("polarization, component", [("TM", "Ez"), ("TE", "Ey")])
def test_plane_wave_tfsf_slab_reflection(polarization, component):
    """A TF/SF plane wave on a 2D slab (periodic in y): the scattered-field region sees no incident wave
    (leakage below 1e-5 of the incident peak) and exactly the slab's reflection: |R - R_exact| < 2e-2 at
    20 nm cells (19 cells per wavelength in the slab at the top of the band)."""
    from common.geometry import Rectangle

    index, thickness = 2.0, 0.5e-6
    frequencies = torch.linspace(2e14, 4e14, 11, dtype=torch.float64)
    waveform = fdtd.GaussianPulse(3e14, 2e14)

    def run(structures):
        sim = fdtd.Simulation(
            size=(8e-6, 0.4e-6),
            cell_size=20e-9,
            boundary=(fdtd.PML(30), fdtd.Periodic()),
            dtype=torch.float64,
            polarization=polarization,
            structures=structures,
            sources=[fdtd.PlaneWave(waveform, x0=-2e-6, component=component)],
            monitors=[
                fdtd.DFTMonitor("scattered", frequencies, (component,), center=(-3e-6, 0.0), size=(0, 0)),
                fdtd.FieldProbe("scattered_probe", (-3e-6, 0.0), (component,)),
                fdtd.FieldProbe("total_probe", (0.0, 0.0), (component,)),
                fdtd.DFTMonitor("incident", frequencies, (component,), center=(3e-6, 0.0), size=(0, 0)),
            ],
        )
        return sim.run(until=120e-15, progress=False)

    empty = run([])
    leakage = empty["scattered_probe"][component].abs().max() / empty["total_probe"][component].abs().max()
    assert leakage < 1e-5
    slab = run(
        [
            fdtd.Structure(
                Rectangle((2e-6 - thickness / 2, -1e-6), (2e-6 + thickness / 2, 1e-6)),
                fdtd.Medium(permittivity=index**2),
            )
        ]
    )
    reflectance = (
        slab["scattered"][component].flatten().abs() ** 2 / empty["incident"][component].flatten().abs() ** 2
    ).numpy()
    k0 = 2 * np.pi * frequencies.numpy() / SPEED_OF_LIGHT
    phase = np.exp(-2j * index * k0 * thickness)
    r12 = (1 - index) / (1 + index)
    exact = np.abs(r12 * (1 - phase) / (1 - r12**2 * phase)) ** 2
    assert np.abs(reflectance - exact).max() < 2e-2
    assert reflectance.max() > 0.3
