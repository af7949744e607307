"""Cheap example generators for recipes, tests, benchmarks and tutorials.

:func:`damped_oscillator` follows the generator contract of :mod:`common.datasets`
(``fn(params, seed, **options) -> dict[str, array]``) with a result known in closed
form, so a generated dataset can be checked against the analytic solution.
"""

import time

import numpy as np

from common.errors import ConfigurationError, UnknownNameError

__all__ = ["damped_oscillator"]


def damped_oscillator(
    params: dict,
    seed: int,
    n_times: int = 64,
    duration: float = 10.0,
    noise: float = 0.0,
    integrate: bool = False,
    delay: float = 0.0,
) -> dict[str, np.ndarray]:
    """Free motion of an underdamped harmonic oscillator, optionally with seeded measurement noise.

    Solves ``x'' + 2 zeta omega x' + omega^2 x = 0`` with ``x(0) = 1``, ``x'(0) = 0``:
    ``x(t) = exp(-zeta omega t) (cos(omega_d t) + zeta omega / omega_d sin(omega_d t))``
    with ``omega_d = omega sqrt(1 - zeta^2)``.

    Args:
        params: ``{"frequency": omega (rad/s, > 0), "damping": zeta (dimensionless, 0 <= zeta < 1)}``.
        seed: seeds the noise (a ``numpy.random.default_rng(seed)``).
        n_times: number of time points ``T``.
        duration: the time span (s); times are ``linspace(0, duration, T)``.
        noise: standard deviation of Gaussian noise added to the displacement (same unit as x).
        integrate: integrate the equation numerically (``scipy.integrate.solve_ivp``, DOP853,
            rtol 1e-10) instead of evaluating the closed form: the cost of a small simulation.
        delay: seconds to sleep first, to imitate an expensive simulation in tests and demos.

    Returns:
        ``times`` (T,) s, ``displacement`` (T,), ``velocity`` (T,) per s, and ``energy`` ()
        the final mechanical energy per unit mass and unit initial amplitude,
        ``(v^2 + omega^2 x^2) / 2`` at ``t = duration`` (noise-free). float64 arrays.

    Raises:
        KeyError: if ``params`` lacks ``frequency`` or ``damping``.
        ValueError: if ``frequency <= 0`` or ``damping`` is outside ``[0, 1)`` (not underdamped).
    """
    missing = [name for name in ("frequency", "damping") if name not in params]
    if missing:
        raise UnknownNameError(
            f"damped_oscillator: params lacks {missing}; it needs 'frequency' and 'damping'")
    omega, zeta = float(params["frequency"]), float(params["damping"])
    if not omega > 0:
        raise ConfigurationError(f"damped_oscillator: frequency must be > 0 rad/s, got {omega}")
    if not 0 <= zeta < 1:
        raise ConfigurationError(f"damped_oscillator: damping must be in [0, 1) (underdamped), got {zeta}")
    if delay > 0:
        time.sleep(delay)
    times = np.linspace(0.0, float(duration), int(n_times))
    omega_d = omega * np.sqrt(1 - zeta**2)
    if integrate:
        from scipy.integrate import solve_ivp

        def rate(_, state):
            return [state[1], -2 * zeta * omega * state[1] - omega**2 * state[0]]

        solution = solve_ivp(
            rate, (0.0, float(duration)), [1.0, 0.0], method="DOP853", t_eval=times, rtol=1e-10, atol=1e-12
        )
        displacement, velocity = solution.y
    else:
        decay = np.exp(-zeta * omega * times)
        cosine, sine = np.cos(omega_d * times), np.sin(omega_d * times)
        displacement = decay * (cosine + zeta * omega / omega_d * sine)
        velocity = -decay * omega**2 / omega_d * sine
    energy = 0.5 * (velocity[-1] ** 2 + omega**2 * displacement[-1] ** 2)
    if noise > 0:
        displacement = displacement + np.random.default_rng(seed).normal(0.0, noise, size=times.shape)
    return {"times": times, "displacement": displacement, "velocity": velocity, "energy": np.float64(energy)}
