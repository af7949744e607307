"""A conductivity on the grid: what the update realises, and its subpixel average at an interface.

* The semi-implicit update ``eps0 eps (E^{n+1} - E^n) / dt + sigma (E^{n+1} + E^n) / 2 = curl H`` realises,
  relative to the Yee scheme's own frequency ``omega~ = 2 sin(omega dt / 2) / dt``, the permittivity
  ``eps - j sigma (omega dt / 2) cot(omega dt / 2) / (omega eps0)`` that
  ``Medium.relative_permittivity(f, dt=)`` returns. Checked against the z-transform of the update with the
  coefficients the simulation builds.
* With ``subpixel=True`` a cell cut by an interface holds the complex permittivity ``eps - j sigma /
  (omega eps0)`` averaged as the permittivity is: harmonic across the interface, arithmetic along it. The
  reference is that exact complex mean at a small loss tangent (1e-3), where the frequency-independent
  first-order form the update uses must agree with it to about the loss tangent; the arithmetic mean of the
  conductivity, used before for the normal component, is 3.6 times too large here.
"""

import math

import numpy as np
import pytest
import torch

from common import geometry
from common.errors import ConfigurationError
from common.units import VACUUM_PERMITTIVITY
from mindelec import fdtd

CELL = 1e-3
FREQUENCY = 10e9
PERMITTIVITY = 4.0
CONDUCTIVITY = 1e-3 * 2 * math.pi * FREQUENCY * VACUUM_PERMITTIVITY * PERMITTIVITY  # loss tangent 1e-3


def _medium_on_nodes(sim, component):
    """``(eps, sigma (S/m))`` at ``component``'s nodes, from the update's ``ca``, ``cb``."""
    ca, cb, _ = sim._coefficients()[0][component]
    ca, cb = (torch.as_tensor(c, dtype=torch.float64).expand(sim.grid.shape) for c in (ca, cb))
    loss = (1 - ca) / (1 + ca)  # sigma dt / (2 eps0 eps)
    permittivity = sim.dt / (VACUUM_PERMITTIVITY * cb * (1 + loss))
    return permittivity, loss * 2 * VACUUM_PERMITTIVITY * permittivity / sim.dt


def test_relative_permittivity_with_dt_is_what_the_update_realises():
    medium = fdtd.Medium(PERMITTIVITY, CONDUCTIVITY * 300)  # eps'' = 1.2 at 10 GHz
    sim = fdtd.Simulation(size=(10 * CELL, 10 * CELL), cell_size=CELL, default_medium=medium)
    ca, cb, _ = sim._coefficients()[0]["Ez"]
    dt = sim.dt
    frequencies = torch.tensor([1e9, 5e9, 10e9, 14e9], dtype=torch.float64)
    omega = 2 * math.pi * frequencies.numpy()
    # E^n = E exp(j omega n dt): E (exp(j h) - ca exp(-j h)) = cb curl H, and j omega~ eps0 eps E = curl H
    half = omega * dt / 2
    yee_omega = 2 * np.sin(half) / dt
    realised = (np.exp(1j * half) - ca * np.exp(-1j * half)) / (cb * 1j * yee_omega * VACUUM_PERMITTIVITY)
    assert np.allclose(medium.relative_permittivity(frequencies, dt=dt).numpy(), realised, rtol=1e-12)
    continuous = medium.relative_permittivity(frequencies).numpy()
    assert np.allclose(medium.relative_permittivity(frequencies, dt=1e-18).numpy(), continuous, rtol=1e-9)
    with pytest.raises(ConfigurationError, match="Drude.*non-dispersive"):
        fdtd.Drude(plasma_frequency=1e15, collision_frequency=1e13).relative_permittivity(frequencies, dt=dt)
    with pytest.raises(ConfigurationError, match="dt must be positive"):
        medium.relative_permittivity(frequencies, dt=0.0)


def test_conductivity_is_smoothed_with_the_permittivity_at_an_interface():
    """A lossy half-space (eps 4, loss tangent 1e-3 at 10 GHz) from x = 0.3 mm in 2D TE, 1 mm cells: the
    Ex edge [0, 1] mm is 70 % in it (across the interface), the Ey face [-0.5, 0.5] mm 20 % (along it)."""
    half_space = fdtd.Structure(geometry.Box((0.3 * CELL, -1.0), (1.0, 1.0)),
                                fdtd.Medium(PERMITTIVITY, CONDUCTIVITY))
    sim = fdtd.Simulation(size=(10 * CELL, 10 * CELL), cell_size=CELL, polarization="TE", subpixel=True,
                          structures=[half_space])
    omega = 2 * math.pi * FREQUENCY
    lossy = PERMITTIVITY - 1j * CONDUCTIVITY / (omega * VACUUM_PERMITTIVITY)
    for component, position, exact, arithmetic in (
        ("Ex", 0.5 * CELL, 1 / (0.7 / lossy + 0.3), 0.7 * CONDUCTIVITY),
        ("Ey", 0.0, 0.2 * lossy + 0.8, 0.2 * CONDUCTIVITY),
    ):
        node = int(np.argmin(abs(sim.grid.coordinates(component, 0, torch.float64).numpy() - position)))
        permittivity, conductivity = (v[node, 5].item() for v in _medium_on_nodes(sim, component))
        exact_conductivity = -exact.imag * omega * VACUUM_PERMITTIVITY
        assert permittivity == pytest.approx(exact.real, rel=1e-5), component
        assert conductivity == pytest.approx(exact_conductivity, rel=3e-3), component
        if component == "Ex":  # the arithmetic mean, used before, was far off across the interface
            assert arithmetic / exact_conductivity > 3.5
