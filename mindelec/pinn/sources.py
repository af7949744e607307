"""The SI side of a point-source PINN problem: its dimensionless units, its smoothed source, its set-up.

:class:`Scales` maps SI points and fields to the dimensionless ones a network sees (lengths in ``L``,
times in ``L / c``, fields in ``E0`` and ``E0 / eta_0``); :class:`PointSource` is a Gaussian-smoothed
delta in space times a waveform; :class:`PointSourceSetup` is MindElec's 2D time-domain benchmark
(domain, pulse, source, polarization, materials) in SI units.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from common.errors import ArgumentTypeError, ConfigurationError
from common.units import SPEED_OF_LIGHT, VACUUM_IMPEDANCE

__all__ = ["FIELDS", "PointSource", "PointSourceSetup", "Scales"]

FIELDS = {"TE": ("Ex", "Ey", "Hz"), "TM": ("Ez", "Hx", "Hy"), "3D": ("Ex", "Ey", "Ez", "Hx", "Hy", "Hz")}


@dataclasses.dataclass(frozen=True)
class Scales:
    """Units of the dimensionless problem: length ``length`` (m), time ``length / c`` (s), fields.

    Args:
        length: L (m).
        electric_field: E0 (V/m); magnetic fields are in ``E0 / eta_0`` (A/m).
        origin: (d,) point (m) mapped to the dimensionless origin.
    """

    length: float
    electric_field: float = 1.0
    origin: tuple[float, ...] = (0.0, 0.0)

    @property
    def time(self) -> float:
        """T = L / c (s)."""
        return self.length / SPEED_OF_LIGHT

    @property
    def magnetic_field(self) -> float:
        """H0 = E0 / eta_0 (A/m)."""
        return self.electric_field / VACUUM_IMPEDANCE

    def points(self, points_si: torch.Tensor) -> torch.Tensor:
        """SI points ``(B, d + 1 [+ p])`` (m, ..., s, then dimensionless parameters) to dimensionless ones."""
        origin = torch.as_tensor(self.origin, dtype=points_si.dtype, device=points_si.device)
        d = len(self.origin)
        space = (points_si[:, :d] - origin) / self.length
        return torch.cat([space, points_si[:, d : d + 1] / self.time, points_si[:, d + 1 :]], dim=1)

    def fields_si(self, model: nn.Module, points_si: torch.Tensor, components: Sequence[str]) -> torch.Tensor:
        """Evaluate ``model`` at SI points and return SI fields (V/m for E, A/m for H): ``(B, k)``.

        Args:
            model: network on dimensionless points.
            points_si: ``(B, d + 1 [+ p])`` SI points.
            components: names of the model outputs, e.g. ``("Ex", "Ey", "Hz")`` (sets E vs H units).
        """
        factors = torch.tensor(
            [self.electric_field if name.startswith("E") else self.magnetic_field for name in components],
            dtype=points_si.dtype,
            device=points_si.device,
        )
        return model(self.points(points_si)) * factors


class PointSource:
    """A smoothed point source: ``amplitude * g(x - position) * waveform(t)``.

    ``g`` is a normalised Gaussian of standard deviation ``radius`` (integral 1 over space), the
    usual PINN stand-in for a delta: it equals the FDTD point source of the same ``amplitude``
    distributed over cells.

    Args:
        position: (d,) centre (m).
        radius: standard deviation of the Gaussian (m).
        waveform: callable of SI times (s), e.g. ``mindelec.fdtd.GaussianPulse(1e9, 1e9)``.
        amplitude: current moment as in :class:`mindelec.fdtd.CurrentSource` (2D: A for an electric
            line current, V for a magnetic one).
    """

    def __init__(self, position: Sequence[float], radius: float, waveform: Callable, amplitude: float = 1.0):
        self.position = tuple(float(value) for value in position)
        self.radius = float(radius)
        if not self.radius > 0:
            raise ConfigurationError(f"PointSource: radius must be a positive length (m), got {radius!r}")
        if not callable(waveform):
            raise ArgumentTypeError(f"PointSource: waveform must be callable on times (s), got {waveform!r}")
        self.waveform, self.amplitude = waveform, float(amplitude)

    def profile(self, space: torch.Tensor) -> torch.Tensor:
        """``g`` at SI points ``(B, d)`` (1/m^d)."""
        center = torch.as_tensor(self.position, dtype=space.dtype, device=space.device)
        d = space.shape[1]
        squared = (space - center).pow(2).sum(-1)
        return torch.exp(-0.5 * squared / self.radius**2) / (2 * math.pi * self.radius**2) ** (d / 2)

    def density(self, points_si: torch.Tensor) -> torch.Tensor:
        """Current density (A/m^d or V/m^d) at SI points ``(B, d + 1)``, time last: ``(B,)``."""
        d = points_si.shape[1] - 1
        return self.amplitude * self.profile(points_si[:, :d]) * self.waveform(points_si[:, d])

    def dimensionless(self, points: torch.Tensor, scales: Scales, magnetic: bool) -> torch.Tensor:
        """The source term in the units of :class:`Scales` at dimensionless points ``(B, d + 1 [+ p])``."""
        d = len(scales.origin)
        origin = torch.as_tensor(scales.origin, dtype=points.dtype, device=points.device)
        points_si = torch.cat([points[:, :d] * scales.length + origin, points[:, d : d + 1] * scales.time], 1)
        factor = scales.length / scales.electric_field * (1.0 if magnetic else VACUUM_IMPEDANCE)
        return factor * self.density(points_si)

    def __repr__(self) -> str:
        return f"PointSource(position={self.position}, radius={self.radius}, waveform={self.waveform!r})"


@dataclasses.dataclass
class PointSourceSetup:
    """A 2D time-domain point-source problem in SI units (defaults: MindElec's TE benchmark).

    Attributes:
        lower, upper: corners of the rectangular domain (m).
        duration: simulated time [0, duration] (s).
        source_position: (m).
        source_radius: standard deviation of the smoothed delta (m).
        frequency, bandwidth: centre frequency and spectral width of the Gaussian-modulated pulse (Hz),
            see :class:`mindelec.fdtd.GaussianPulse`.
        delay: pulse peak time (s); default ``4 / (pi * bandwidth)`` (the pulse starts at ~3e-4 of its peak).
        amplitude: current moment (V for TE's magnetic line current Mz, A for TM's Jz).
        polarization: ``"TE"`` (Ex, Ey, Hz; source on Hz) or ``"TM"`` (Ez, Hx, Hy; source on Ez).
        permittivity, permeability: relative values, or ``(low, high)`` ranges for a parametric problem.
    """

    lower: tuple[float, float] = (0.0, 0.0)
    upper: tuple[float, float] = (1.0, 1.0)
    duration: float = 4e-9
    source_position: tuple[float, float] = (0.4975, 0.4975)
    source_radius: float = 0.02
    frequency: float = 1e9
    bandwidth: float = 1e9
    delay: float | None = None
    amplitude: float = 1.0
    polarization: str = "TE"
    permittivity: float | tuple[float, float] = 1.0
    permeability: float | tuple[float, float] = 1.0

    def waveform(self):
        """The source pulse, a :class:`mindelec.fdtd.GaussianPulse`."""
        from mindelec.fdtd import GaussianPulse

        delay = 4.0 / (math.pi * self.bandwidth) if self.delay is None else self.delay
        return GaussianPulse(self.frequency, self.bandwidth, delay=delay)

    def source(self) -> PointSource:
        """The smoothed point source."""
        return PointSource(self.source_position, self.source_radius, self.waveform(), self.amplitude)

    @property
    def components(self) -> tuple[str, ...]:
        """Field names in output order."""
        return FIELDS[self.polarization]

    def scales(self) -> Scales:
        """Units: L = the domain's larger side, E0 so that the dimensionless source has unit moment."""
        length = max(u - lo for lo, u in zip(self.lower, self.upper))
        impedance = 1.0 if self.polarization == "TE" else VACUUM_IMPEDANCE
        return Scales(length, abs(self.amplitude) * impedance / length, tuple(self.lower))
