"""Source time functions: ``waveform(times) -> values``, dimensionless, vectorised over times (s).

Each waveform also states how far its spectrum reaches: ``spectrum_limit(level)`` is the highest
frequency (Hz) at which the amplitude spectrum is still ``level`` times its peak (default 0.01,
-40 dB). :class:`~mindelec.fdtd.Simulation` refuses a source whose ``spectrum_limit()`` lies beyond
the frequencies its grid and time step can carry. A custom callable without this method is not
checked.
"""

import math

import torch

from common.errors import ConfigurationError

#: default relative amplitude (-40 dB) at which a source spectrum counts as ended
SPECTRUM_LEVEL = 0.01


def _check_positive(value, name, what):
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{what}: {name} must be a positive frequency (Hz), got {value}")
    return value


def _check_level(level):
    level = float(level)
    if not 0 < level < 1:
        raise ConfigurationError(f"spectrum_limit: level must lie in (0, 1), got {level}")
    return level


class GaussianPulse:
    """A sine carrier under a Gaussian envelope (zero mean, so it leaves no static charge).

    ``w(t) = sin(2 pi f0 (t - delay)) exp(-(t - delay)^2 / (2 sigma_t^2))`` with
    ``sigma_t = 1 / (pi * fwidth)``: the amplitude spectrum is a Gaussian around ``f0``
    that falls to ``exp(-1/2)`` of its peak at ``f0 +- fwidth / 2``.

    Args:
        f0: centre frequency (Hz).
        fwidth: spectral width (Hz), see above.
        delay: time of the envelope peak (s); default ``5 sigma_t`` (the pulse starts at ~4e-6 of its peak).
    """

    def __init__(self, f0, fwidth, delay=None):
        self.f0 = float(f0)
        if not (math.isfinite(self.f0) and self.f0 >= 0):
            raise ConfigurationError(f"GaussianPulse: f0 must be a non-negative frequency (Hz), got {f0}")
        self.fwidth = _check_positive(fwidth, "fwidth", "GaussianPulse")
        self.sigma_t = 1.0 / (math.pi * self.fwidth)
        self.delay = 5.0 * self.sigma_t if delay is None else float(delay)

    @property
    def duration(self) -> float:
        """Time (s) after which the pulse is below ~4e-6 of its peak."""
        return self.delay + 5.0 * self.sigma_t

    def spectrum_limit(self, level: float = SPECTRUM_LEVEL) -> float:
        """Highest frequency (Hz) where the amplitude spectrum is ``level`` of its peak.

        The spectrum is ``exp(-(f - f0)^2 / (2 sigma_f^2))`` with ``sigma_f = fwidth / 2``, so this is
        ``f0 + sigma_f sqrt(2 ln(1 / level))`` (``f0 + 1.52 fwidth`` at -40 dB).
        """
        return self.f0 + 0.5 * self.fwidth * math.sqrt(2 * math.log(1 / _check_level(level)))

    def __call__(self, times: torch.Tensor) -> torch.Tensor:
        shifted = times - self.delay
        return torch.sin(2 * math.pi * self.f0 * shifted) * torch.exp(-0.5 * (shifted / self.sigma_t) ** 2)

    def __repr__(self):
        return f"GaussianPulse(f0={self.f0:g}, fwidth={self.fwidth:g}, delay={self.delay:g})"


class Ricker:
    """The Ricker wavelet (second derivative of a Gaussian), peak frequency ``f0``.

    ``w(t) = (1 - 2 (pi f0 s)^2) exp(-(pi f0 s)^2)`` with ``s = t - delay``.

    Args:
        f0: peak frequency of the amplitude spectrum (Hz).
        delay: time of the peak (s); default ``1.5 / f0``.
    """

    def __init__(self, f0, delay=None):
        self.f0 = _check_positive(f0, "f0", "Ricker")
        self.delay = 1.5 / self.f0 if delay is None else float(delay)

    @property
    def duration(self) -> float:
        """Time (s) after which the wavelet is negligible."""
        return self.delay + 1.5 / self.f0

    def spectrum_limit(self, level: float = SPECTRUM_LEVEL) -> float:
        """Highest frequency (Hz) where the amplitude spectrum is ``level`` of its peak.

        The amplitude spectrum relative to its peak at ``f0`` is ``u exp(1 - u)`` with ``u = (f / f0)^2``;
        above the peak it equals ``level`` at ``u = -W_{-1}(-level / e)`` (the lower Lambert W branch),
        ``f = 2.76 f0`` at -40 dB.
        """
        from scipy.special import lambertw

        u = -float(lambertw(-_check_level(level) / math.e, -1).real)
        return self.f0 * math.sqrt(u)

    def __call__(self, times: torch.Tensor) -> torch.Tensor:
        argument = (math.pi * self.f0 * (times - self.delay)) ** 2
        return (1 - 2 * argument) * torch.exp(-argument)

    def __repr__(self):
        return f"Ricker(f0={self.f0:g}, delay={self.delay:g})"


class ContinuousWave:
    """A sine at ``frequency`` switched on smoothly over ``ramp`` seconds.

    ``w(t) = r(t) sin(2 pi f t)`` with ``r = (1 - cos(pi t / ramp)) / 2`` for ``t < ramp`` and 1 after.

    Args:
        frequency: (Hz).
        ramp: switch-on time (s); default 5 periods.
    """

    def __init__(self, frequency, ramp=None):
        self.frequency = _check_positive(frequency, "frequency", "ContinuousWave")
        self.ramp = 5.0 / self.frequency if ramp is None else float(ramp)
        if self.ramp < 0:
            raise ConfigurationError(f"ContinuousWave: ramp must be a non-negative time (s), got {ramp}")

    @property
    def duration(self) -> float:
        """Infinite: a continuous wave never ends."""
        return math.inf

    def spectrum_limit(self, level: float = SPECTRUM_LEVEL) -> float:
        """The carrier ``frequency`` (Hz): the switch-on ramp's spectral spread (about ``1 / ramp``) is not
        counted, so a carrier that fits is accepted whatever ``level``."""
        _check_level(level)
        return self.frequency

    def __call__(self, times: torch.Tensor) -> torch.Tensor:
        envelope = (
            torch.ones_like(times)
            if self.ramp == 0
            else 0.5 * (1 - torch.cos(math.pi * torch.clamp(times / self.ramp, 0.0, 1.0)))
        )
        return envelope * torch.sin(2 * math.pi * self.frequency * times)

    def __repr__(self):
        return f"ContinuousWave(frequency={self.frequency:g}, ramp={self.ramp:g})"
