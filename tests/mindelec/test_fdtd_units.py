"""Fluxes do not depend on the units: the same problem at nanometre, micrometre, millimetre and metre scales,
in float32 and in float64.

A plane wave of 1 V/m (a Gaussian pulse along +x; 20 cells per wavelength at the centre frequency; a CPML
of 6 cells) meets an absorbing cube (conductivity sigma = 0.5 eps0 omega, the same loss per period at
every scale); a FluxMonitor plane behind it, a closed FluxBox around it (the net flux: minus the absorbed
power) and the surface of a NearToFarMonitor measure it. The DFT sums are accumulated at the scale of the
fields and multiplied by the sample's duration (2e-16 s at the optical scale) in double precision: every
flux of the float32 run is within 0.1 % of the float64 run's at every scale. (When the weight was applied
in the run's dtype, the float32 fluxes at 100 nm cells came out near 1e-44 W/Hz^2, in steps of the smallest
denormal, 1.4e-45: this test fails there.)
"""

import math

import pytest
import torch

from common.geometry import Box
from mindelec import fdtd

SPEED_OF_LIGHT = 299_792_458.0
VACUUM_PERMITTIVITY = 8.8541878188e-12
CELLS = 30  # per side, the PML included


def _fluxes(wavelength, dtype):
    cell = wavelength / 20
    frequency = SPEED_OF_LIGHT / wavelength
    side = CELLS * cell
    frequencies = torch.tensor([0.8, 1.0, 1.2]) * frequency
    conductivity = 0.5 * VACUUM_PERMITTIVITY * 2 * math.pi * frequency
    cube = fdtd.Structure(Box((-2 * cell,) * 3, (2 * cell,) * 3), fdtd.Medium(conductivity=conductivity))
    sim = fdtd.Simulation(
        size=(side, side, side),
        cell_size=cell,
        boundary=fdtd.PML(thickness=6),
        dtype=dtype,
        structures=[cube],
        sources=[fdtd.PlaneWave(fdtd.GaussianPulse(f0=frequency, fwidth=0.6 * frequency), x0=-8 * cell)],
        monitors=[
            fdtd.FluxMonitor("plane", frequencies, center=(6 * cell, 0, 0), size=(0, 10 * cell, 10 * cell)),
            fdtd.FluxBox("box", frequencies, center=(0, 0, 0), size=(8 * cell, 8 * cell, 8 * cell)),
            fdtd.NearToFarMonitor(
                "far", frequencies, center=(0, 0, 0), size=(10 * cell, 10 * cell, 10 * cell)
            ),
        ],
    )
    result = sim.run(until=80 * cell / SPEED_OF_LIGHT, progress=False)
    return {name: result[name]["flux"] for name in ("plane", "box", "far")}


@pytest.mark.parametrize(
    "wavelength", [2e-6, 20e-6, 20e-3, 20.0], ids=["100nm-cells", "1um-cells", "1mm-cells", "1m-cells"]
)
def test_float32_fluxes_are_within_a_thousandth_of_float64_at_any_scale(wavelength):
    single, double = _fluxes(wavelength, torch.float32), _fluxes(wavelength, torch.float64)
    for name in single:
        assert bool((double[name].abs() > 0).all()), name
        relative = ((single[name] - double[name]) / double[name]).abs().max()
        assert float(relative) < 1e-3, (name, single[name], double[name])
        assert single[name].dtype == torch.float64  # whatever the dtype of the run
    assert bool((double["box"] < 0).all())  # the cube absorbs: more flows in than out
