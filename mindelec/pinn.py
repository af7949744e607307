"""Physics-informed networks for Maxwell's equations, built on :mod:`common.pde`.

Equations (SI, linear isotropic medium with relative permittivity ``eps_r`` and permeability ``mu_r``,
electric current density ``J`` and magnetic current density ``M``, as :mod:`mindelec.fdtd`)::

    eps_r eps_0 dE/dt =  curl H - J
    mu_r  mu_0  dH/dt = -curl E - M

Non-dimensionalisation (:class:`Scales`): lengths in units of ``L``, times in ``T = L / c``, electric
fields in ``E0``, magnetic fields in ``H0 = E0 / eta_0``. In these units ``eps_0 = mu_0 = c = 1``::

    eps_r dE'/dt' =  curl' H' - J'       J' = J L eta_0 / E0
    mu_r  dH'/dt' = -curl' E' - M'       M' = M L / E0

so a network sees coordinates and fields of order one whatever the SI magnitudes (metres and
nanoseconds, 1e-9 s against 1 m). All residual functions here work in these dimensionless units on
points ``(B, d)`` (space columns, then time) and fields ``(B, k)`` from a network, through
:mod:`common.autodiff`.

Contents:

- residuals: :func:`maxwell_te_residual` (Ex, Ey, Hz), :func:`maxwell_tm_residual` (Ez, Hx, Hy),
  :func:`maxwell_3d_residual` (Ex, Ey, Ez, Hx, Hy, Hz), :func:`helmholtz_residual` (frequency
  domain, real and imaginary parts);
- boundaries: :func:`mur_residual` (first-order Mur / Engquist-Majda absorbing condition
  ``du/dt + v du/dn = 0``), :func:`sommerfeld_residual` (its frequency-domain form
  ``du/dn - i k u = 0``);
- sources: :class:`PointSource` (a Gaussian-smoothed delta in space times a waveform such as
  :class:`mindelec.fdtd.GaussianPulse` or :class:`~mindelec.fdtd.Ricker`);
- problems: :func:`point_source_problem` (2D TE/TM time domain, parametric in ``eps_r``/``mu_r`` if
  ranges are given, for pre-training and incremental fine-tuning), :func:`helmholtz_problem`;
- models: :func:`default_model` (multi-scale sine network, :class:`common.nn.MultiScaleMLP`, on
  optional Fourier features), :class:`ZeroInitialFields` (zero fields at ``t = 0`` by construction);
- 2D TE potential formulation (``formulation="potential"``): :class:`PotentialTE` (``Ex = psi_y``,
  ``Ey = -psi_x``, ``Hz = eps_r psi_t``: two of the three equations hold exactly, derivatives in one
  forward-mode pass), :class:`PointSourcePotential` (the source's quasi-static near field, added to the
  network's potential), :func:`wave_potential_residual`, :func:`mur_potential_residual`.

Example::

    import mindelec as me
    from common import pde
    setup = me.pinn.PointSourceSetup()            # MindElec's 2D TE benchmark: [0, 1]^2 m, 1 GHz, 4 ns
    problem, scales = me.pinn.point_source_problem(setup)
    model = me.pinn.default_model(problem, scales)
    pde.Trainer(problem, model, steps=20000, resample_every=10).train()
    fields = scales.fields_si(model, points_si)   # (B, 3) Ex, Ey (V/m), Hz (A/m)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from common import autodiff as ad
from common import geometry as geo
from common import nn as cnn
from common import pde
from common.units import SPEED_OF_LIGHT, VACUUM_IMPEDANCE

__all__ = [
    "POTENTIAL_JET",
    "PointSource",
    "PointSourcePotential",
    "PointSourceSetup",
    "PotentialTE",
    "Scales",
    "ZeroInitialFields",
    "FDTDReference",
    "default_model",
    "fdtd_reference",
    "helmholtz_problem",
    "helmholtz_residual",
    "maxwell_3d_residual",
    "maxwell_te_residual",
    "maxwell_tm_residual",
    "engquist_majda_potential_residual",
    "mur_potential_residual",
    "mur_residual",
    "point_source_problem",
    "potential_fields",
    "sommerfeld_residual",
    "wave_potential_residual",
]

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


def _columns(fields: torch.Tensor, points: torch.Tensor, count: int, name: str) -> torch.Tensor:
    """Jacobian (B, count, d) of the first ``count`` field columns, validated."""
    if fields.dim() != 2 or fields.shape[1] < count:
        raise ValueError(
            f"{name}: fields must be (B, {count}) network outputs, got shape {tuple(fields.shape)}"
        )
    return ad.jacobian(fields[:, :count], points)


def _material(value, points: torch.Tensor) -> torch.Tensor:
    """A relative material parameter as a (B,) tensor or a scalar tensor."""
    return torch.as_tensor(value, dtype=points.dtype, device=points.device)


def _terms(points, fields, permittivity, permeability, current, count: int, name: str):
    """Jacobian (B, count, d) of the fields, materials, and the ``count`` source columns (or zeros)."""
    if current is None:
        sources = [0.0] * count
    elif current.shape != (len(points), count):
        raise ValueError(f"{name}: current must be ({len(points)}, {count}), got {tuple(current.shape)}")
    else:
        sources = [current[:, i] for i in range(count)]
    jac = _columns(fields, points, count, name)
    return jac, _material(permittivity, points), _material(permeability, points), sources


def maxwell_te_residual(points, fields, permittivity=1.0, permeability=1.0, current=None):
    """2D TE Maxwell residuals (dimensionless, see :class:`Scales`) on points (x, y, t, ...).

    ``eps_r dEx/dt - dHz/dy + Jx``, ``eps_r dEy/dt + dHz/dx + Jy``, ``mu_r dHz/dt + dEy/dx - dEx/dy + Mz``.

    Args:
        points: (B, 3 [+ p]) with ``requires_grad``: x, y, t, then any parameter columns.
        fields: (B, 3) Ex, Ey, Hz evaluated at ``points``.
        permittivity, permeability: relative values, scalars or (B,) tensors (e.g. a parameter column).
        current: optional (B, 3) source densities (Jx, Jy, Mz), dimensionless.

    Returns:
        Tuple of three (B,) residuals.
    """
    jac, eps, mu, (jx, jy, mz) = _terms(
        points, fields, permittivity, permeability, current, 3, "maxwell_te_residual"
    )
    # jac[:, component, coordinate]: components Ex, Ey, Hz; coordinates x, y, t
    return (
        eps * jac[:, 0, 2] - jac[:, 2, 1] + jx,
        eps * jac[:, 1, 2] + jac[:, 2, 0] + jy,
        mu * jac[:, 2, 2] + jac[:, 1, 0] - jac[:, 0, 1] + mz,
    )


def maxwell_tm_residual(points, fields, permittivity=1.0, permeability=1.0, current=None):
    """2D TM Maxwell residuals (dimensionless) on points (x, y, t, ...).

    ``eps_r dEz/dt - dHy/dx + dHx/dy + Jz``, ``mu_r dHx/dt + dEz/dy + Mx``, ``mu_r dHy/dt - dEz/dx + My``.

    Args:
        points: (B, 3 [+ p]) with ``requires_grad``: x, y, t, ...
        fields: (B, 3) Ez, Hx, Hy.
        permittivity, permeability: relative, scalars or (B,).
        current: optional (B, 3) (Jz, Mx, My), dimensionless.

    Returns:
        Tuple of three (B,) residuals.
    """
    jac, eps, mu, (jz, mx, my) = _terms(
        points, fields, permittivity, permeability, current, 3, "maxwell_tm_residual"
    )
    return (
        eps * jac[:, 0, 2] - jac[:, 2, 0] + jac[:, 1, 1] + jz,
        mu * jac[:, 1, 2] + jac[:, 0, 1] + mx,
        mu * jac[:, 2, 2] - jac[:, 0, 0] + my,
    )


def maxwell_3d_residual(points, fields, permittivity=1.0, permeability=1.0, current=None):
    """3D time-domain Maxwell residuals (dimensionless) on points (x, y, z, t, ...).

    ``eps_r dE/dt - curl H + J`` (3 rows) and ``mu_r dH/dt + curl E + M`` (3 rows).

    Args:
        points: (B, 4 [+ p]) with ``requires_grad``.
        fields: (B, 6) Ex, Ey, Ez, Hx, Hy, Hz.
        permittivity, permeability: relative, scalars or (B,).
        current: optional (B, 6) (Jx, Jy, Jz, Mx, My, Mz), dimensionless.

    Returns:
        Tuple of six (B,) residuals.
    """
    jac, eps, mu, sources = _terms(
        points, fields, permittivity, permeability, current, 6, "maxwell_3d_residual"
    )

    def curl(offset):  # curl of the field components offset .. offset + 2
        return (
            jac[:, offset + 2, 1] - jac[:, offset + 1, 2],
            jac[:, offset + 0, 2] - jac[:, offset + 2, 0],
            jac[:, offset + 1, 0] - jac[:, offset + 0, 1],
        )

    curl_e, curl_h = curl(0), curl(3)
    electric = tuple(eps * jac[:, i, 3] - curl_h[i] + sources[i] for i in range(3))
    magnetic = tuple(mu * jac[:, 3 + i, 3] + curl_e[i] + sources[3 + i] for i in range(3))
    return electric + magnetic


def mur_residual(points, fields, normals, speed=1.0, components: Sequence[int] | None = None):
    """First-order Mur / Engquist-Majda absorbing condition ``du/dt + v n.grad(u) = 0`` per component.

    Exact for a plane wave leaving the domain along the outward normal ``n``; reflects
    ``(1 - cos a) / (1 + cos a)`` of a wave incident at angle ``a``.

    Args:
        points: (B, d + 1 [+ p]) with ``requires_grad``: d space columns, then time, then parameters.
        fields: (B, k).
        normals: (B, d) outward spatial normals.
        speed: wave speed (dimensionless: ``1 / sqrt(eps_r mu_r)``), scalar or (B,).
        components: field columns to constrain (default: all).

    Returns:
        (B, len(components)) residuals.
    """
    components = list(range(fields.shape[1])) if components is None else list(components)
    space = normals.shape[1]
    if points.shape[1] <= space:
        raise ValueError(
            f"mur_residual: points need {space} space columns and a time column, "
            f"got shape {tuple(points.shape)}"
        )
    jac = ad.jacobian(fields[:, components], points)
    normal_derivative = (jac[:, :, :space] * normals[:, None, :]).sum(-1)
    speed = _material(speed, points)
    speed = speed[:, None] if speed.dim() == 1 else speed
    return jac[:, :, space] + speed * normal_derivative


def helmholtz_residual(points, fields, wavenumber, permittivity=1.0, source=None):
    """Frequency-domain scalar Helmholtz residual ``laplace u + k^2 eps_r u + s`` for complex ``u``.

    For 2D TM (``E = Ez(x, y) exp(-i omega t)``) ``u = Ez`` and ``s = -i omega mu J``; the residual
    is split into real and imaginary parts.

    Args:
        points: (B, d) spatial points with ``requires_grad`` (dimensionless).
        fields: (B, 2) real and imaginary parts of ``u``.
        wavenumber: free-space ``k = omega L / c`` (dimensionless).
        permittivity: relative, scalar or (B,).
        source: optional (B, 2) real and imaginary parts of ``s``.

    Returns:
        Tuple of two (B,) residuals (real, imaginary).
    """
    if fields.dim() != 2 or fields.shape[1] != 2:
        raise ValueError(
            f"helmholtz_residual: fields must be (B, 2) (real, imaginary), got {tuple(fields.shape)}"
        )
    k2 = wavenumber**2 * _material(permittivity, points)
    real = ad.laplacian(fields[:, 0], points) + k2 * fields[:, 0]
    imag = ad.laplacian(fields[:, 1], points) + k2 * fields[:, 1]
    if source is not None:
        real, imag = real + source[:, 0], imag + source[:, 1]
    return real, imag


def sommerfeld_residual(points, fields, normals, wavenumber):
    """First-order absorbing condition ``du/dn - i k u = 0`` for outgoing ``exp(i (k r - omega t))`` waves.

    Args:
        points: (B, d) with ``requires_grad``; fields: (B, 2) real and imaginary parts;
        normals: (B, d) outward normals; wavenumber: ``k`` in the medium (dimensionless).

    Returns:
        Tuple of two (B,) residuals (real, imaginary).
    """
    jac = ad.jacobian(fields, points)
    normal_derivative = (jac * normals[:, None, :]).sum(-1)
    return (
        normal_derivative[:, 0] + wavenumber * fields[:, 1],
        normal_derivative[:, 1] - wavenumber * fields[:, 0],
    )


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
            raise ValueError(f"PointSource: radius must be a positive length (m), got {radius!r}")
        if not callable(waveform):
            raise TypeError(f"PointSource: waveform must be callable on times (s), got {waveform!r}")
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


class ZeroInitialFields(nn.Module):
    """Wrap a network so that its fields vanish at ``t = 0`` exactly: ``out = (1 - exp(-t / tau)) net(x)``.

    A hard initial condition (no initial-condition loss needed) for sources that start at rest.

    Args:
        network: the field network on dimensionless points.
        time_column: index of t in the input.
        tau: ramp time (dimensionless); small against the time scale of the source.
    """

    def __init__(self, network: nn.Module, time_column: int, tau: float = 0.05):
        super().__init__()
        self.network, self.time_column, self.tau = network, time_column, float(tau)
        self.in_features = getattr(network, "in_features", None)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        ramp = -torch.expm1(-inputs[:, self.time_column : self.time_column + 1] / self.tau)
        return ramp * self.network(inputs)


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


def _parameter(value, name: str, parameters: dict, columns: list):
    """Record a parametric material (range) as an input column; return a column index or the value."""
    if isinstance(value, (tuple, list)):
        low, high = (float(v) for v in value)
        columns.append(name)
        parameters[name] = (low, high)
        return None
    if not float(value) > 0:
        raise ValueError(f"PointSourceSetup: {name} must be positive, got {value!r}")
    return float(value)


def point_source_problem(
    setup: PointSourceSetup,
    n_domain: int = 8192,
    n_source: int = 2048,
    n_boundary: int = 2048,
    source_weight: float = 1.0,
    boundary_weight: float = 1.0,
    sampler: str = "sobol",
    causal_bins: int = 0,
    causal_epsilon: float = 1.0,
    formulation: str = "fields",
    absorbing_order: int = 1,
) -> tuple[pde.Problem, Scales]:
    """The dimensionless :class:`common.pde.Problem` of a 2D time-domain point source with Mur boundaries.

    Constraints: ``"maxwell"`` (residual over the whole domain x [0, T]), ``"source"`` (the same residual
    on a disk of 4 source radii around the source, where the smoothed delta is steep: MindElec's
    extra source-region sampling), ``"mur"`` (first-order absorbing condition on the four sides).
    Zero initial fields are built into the model (:class:`ZeroInitialFields` in :func:`default_model`).
    Materials given as ranges become input columns (``"permittivity"``, ``"permeability"``) after
    x, y, t.

    Args:
        setup: the SI problem.
        n_domain, n_source, n_boundary: points per resampling of each constraint.
        source_weight, boundary_weight: fixed loss weights (the domain residual has weight 1).
        sampler: ``"uniform"``, ``"sobol"`` or ``"lhs"``.
        causal_bins, causal_epsilon: causal weighting of the two residual constraints in time
            (see :class:`common.pde.Residual`; 0 bins: off).
        formulation: ``"fields"`` (outputs ``setup.components``, residuals of Maxwell's equations) or
            ``"potential"`` (TE only: outputs :data:`POTENTIAL_JET` of a
            :class:`PotentialTE` model, residuals :func:`wave_potential_residual` and
            :func:`mur_potential_residual`; the two E equations hold by construction).
        absorbing_order: 1 (first-order Mur condition on every field component) or 2 (second-order
            Engquist-Majda condition on Hz, :func:`engquist_majda_potential_residual`; potential
            formulation only). Over MindElec's 4 ns, the exact solution with first-order walls differs from
            the open-domain one by about 4% (relative L2, mostly from waves meeting the walls obliquely),
            with second-order walls by about 1%.

    Returns:
        ``(problem, scales)``.
    """
    if setup.polarization not in ("TE", "TM"):
        raise ValueError(f"PointSourceSetup: polarization must be 'TE' or 'TM', got {setup.polarization!r}")
    scales = setup.scales()
    source = setup.source()
    lower = [(v - o) / scales.length for v, o in zip(setup.lower, scales.origin)]
    upper = [(v - o) / scales.length for v, o in zip(setup.upper, scales.origin)]
    duration = setup.duration / scales.time
    space_time = geo.Rectangle(lower, upper) * geo.TimeDomain(0.0, duration)
    center = [(p - o) / scales.length for p, o in zip(setup.source_position, scales.origin)]
    near = geo.Disk(center, 4 * setup.source_radius / scales.length) & geo.Rectangle(lower, upper)
    near_source = near * geo.TimeDomain(0.0, duration)
    parameters, columns = {}, []
    permittivity = _parameter(setup.permittivity, "permittivity", parameters, columns)
    permeability = _parameter(setup.permeability, "permeability", parameters, columns)
    if formulation not in ("fields", "potential"):
        raise ValueError(
            f"point_source_problem: formulation must be 'fields' or 'potential', got {formulation!r}"
        )
    potential = formulation == "potential"
    if absorbing_order not in (1, 2) or (absorbing_order == 2 and not potential):
        raise ValueError(
            "point_source_problem: absorbing_order must be 1, or 2 with formulation='potential', got "
            f"{absorbing_order!r} with formulation={formulation!r}"
        )
    if potential and setup.polarization != "TE":
        raise ValueError(
            "point_source_problem: the potential formulation needs polarization 'TE', "
            f"got {setup.polarization!r}"
        )
    residual_function = maxwell_te_residual if setup.polarization == "TE" else maxwell_tm_residual
    driven = 2 if setup.polarization == "TE" else 0
    magnetic = setup.polarization == "TE"

    def materials(points):
        eps = permittivity if permittivity is not None else points[:, 3 + columns.index("permittivity")]
        mu = permeability if permeability is not None else points[:, 3 + columns.index("permeability")]
        return eps, mu

    def wave(points, jet):
        density = source.dimensionless(points, scales, magnetic)
        return wave_potential_residual(jet, *materials(points), density)

    def mur_potential(points, jet, normals):
        eps, mu = materials(points)
        speed = 1.0 / torch.sqrt(_material(eps, points) * _material(mu, points))
        condition = mur_potential_residual if absorbing_order == 1 else engquist_majda_potential_residual
        return condition(jet, normals[:, :2], eps, speed)

    def maxwell(points, fields):
        density = source.dimensionless(points, scales, magnetic)
        current = torch.zeros(len(points), 3, dtype=points.dtype, device=points.device)
        current[:, driven] = density
        eps, mu = materials(points)
        return residual_function(points, fields, eps, mu, current)

    def mur(points, fields, normals):
        eps, mu = materials(points)
        speed = 1.0 / torch.sqrt(_material(eps, points) * _material(mu, points))
        return mur_residual(points, fields, normals[:, :2], speed)

    if potential:
        maxwell, mur = wave, mur_potential
    constraints = [
        pde.Residual(
            "maxwell",
            space_time,
            maxwell,
            n_domain,
            sampler=sampler,
            causal_bins=causal_bins,
            causal_epsilon=causal_epsilon,
        ),
        pde.Residual(
            "source",
            near_source,
            maxwell,
            n_source,
            weight=source_weight,
            sampler=sampler,
            causal_bins=causal_bins,
            causal_epsilon=causal_epsilon,
        ),
        pde.Boundary("mur", space_time, mur, n_boundary, weight=boundary_weight, sampler=sampler),
    ]
    outputs = POTENTIAL_JET if potential else setup.components
    problem = pde.Problem(("x", "y", "t"), outputs, constraints, parameters=parameters)
    problem.domain, problem.point_source, problem.scales = space_time, source, scales
    problem.permittivity = permittivity  # None when it is an input column
    return problem, scales


def helmholtz_problem(
    lower: Sequence[float],
    upper: Sequence[float],
    frequency: float,
    source: PointSource,
    permittivity: float = 1.0,
    n_domain: int = 4096,
    n_boundary: int = 1024,
    boundary_weight: float = 1.0,
    sampler: str = "sobol",
) -> tuple[pde.Problem, Scales]:
    """2D TM frequency-domain problem ``laplace Ez + k^2 eps_r Ez = -i omega mu_0 Jz`` with absorbing sides.

    Time convention ``exp(-i omega t)``; outputs are ``Re Ez`` and ``Im Ez`` (dimensionless, field
    unit ``eta_0 * amplitude / L``); ``source.waveform`` is ignored (a unit phasor).

    Args:
        lower, upper: corners of the rectangle (m).
        frequency: (Hz).
        source: smoothed point current ``Jz`` (its ``amplitude`` in A).
        permittivity: relative permittivity of the medium.
        n_domain, n_boundary, boundary_weight, sampler: as :func:`point_source_problem`.

    Returns:
        ``(problem, scales)``; the problem's variables are ``("x", "y")``.
    """
    length = max(u - lo for lo, u in zip(lower, upper))
    scales = Scales(length, abs(source.amplitude) * VACUUM_IMPEDANCE / length, tuple(lower))
    wavenumber = 2 * math.pi * frequency * length / SPEED_OF_LIGHT
    rectangle = geo.Rectangle([0.0, 0.0], [(u - lo) / length for lo, u in zip(lower, upper)])

    def helmholtz(points, fields):
        origin = torch.as_tensor(scales.origin, dtype=points.dtype, device=points.device)
        density = source.amplitude * source.profile(points * length + origin) * length**2
        # s = -i omega mu_0 J in field units: k (J L^2 / amplitude) in the imaginary part
        zeros = torch.zeros_like(density)
        return helmholtz_residual(
            points,
            fields,
            wavenumber,
            permittivity,
            torch.stack([zeros, -wavenumber * density / abs(source.amplitude)], 1),
        )

    def absorbing(points, fields, normals):
        return sommerfeld_residual(points, fields, normals, wavenumber * math.sqrt(permittivity))

    problem = pde.Problem(
        ("x", "y"),
        ("ReEz", "ImEz"),
        [
            pde.Residual("helmholtz", rectangle, helmholtz, n_domain, sampler=sampler),
            pde.Boundary(
                "absorbing", rectangle, absorbing, n_boundary, weight=boundary_weight, sampler=sampler
            ),
        ],
    )
    return problem, scales


def default_model(
    problem: pde.Problem,
    scales: float | Sequence[float] = (1, 2, 4, 8),
    hidden_features: int = 64,
    hidden_layers: int = 4,
    fourier_features: int = 0,
    fourier_scale: float = 1.0,
    zero_initial: bool = True,
    tau: float = 0.05,
    readout_gain: float = 0.1,
    source_cutoff: float | None = 0.1,
    radial_softening: float | None = None,
) -> nn.Module:
    """MultiScaleMLP with sine activations (MindElec's default) on the problem's inputs, optionally on
    Fourier features, wrapped in :class:`ZeroInitialFields` for time-domain problems.

    Inputs are centred and scaled to about [-1, 1] from the problem's domain box (and parameter ranges).

    Args:
        problem: a problem from :func:`point_source_problem` (or any with a ``domain`` attribute).
        scales: multipliers of the sub-networks.
        hidden_features, hidden_layers: size of each sub-network.
        fourier_features: number of random Fourier frequencies in front of the network (0: none).
        fourier_scale: their standard deviation (cycles per unit of normalised input).
        zero_initial: wrap in :class:`ZeroInitialFields` (needs time as the last variable).
        tau: ramp time of the hard initial condition (dimensionless).
        readout_gain: factor on the initial readout weights, so that the fields start near zero (as they
            are everywhere before the pulse arrives) rather than as O(1) noise.
        source_cutoff: for a potential-formulation problem (``formulation="potential"`` of
            :func:`point_source_problem`): the model is a :class:`PotentialTE` (``readout_gain`` becomes its
            ``amplitude``) plus the source's :class:`PointSourcePotential` with this cutoff radius
            (dimensionless; ``None``: no cutoff; ``0``: no source potential). Fourier features are not used.
        radial_softening: for a potential-formulation problem: give the network the softened distance to
            the source as an extra input (see :class:`PotentialTE`) with this softening (dimensionless;
            ``None``: no radial input).

    Returns:
        A module ``(B, len(problem.inputs)) -> (B, len(problem.outputs))`` in float32.
    """
    if tuple(problem.outputs) == POTENTIAL_JET:
        return _potential_model(
            problem,
            scales,
            hidden_features,
            hidden_layers,
            tau,
            readout_gain,
            source_cutoff,
            radial_softening,
        )
    center, scale = _input_normalisation(problem)
    n_inputs, n_outputs = len(problem.inputs), len(problem.outputs)
    if fourier_features:
        features = cnn.FourierFeatures(n_inputs, fourier_features, fourier_scale)
        body = cnn.MultiScaleMLP(
            features.out_features, n_outputs, scales, hidden_features, hidden_layers, "sin"
        )
        network = _Normalised(nn.Sequential(features, body), center, scale)
    else:
        network = _sine_network(problem, n_outputs, scales, hidden_features, hidden_layers)
    body = network if isinstance(network, cnn.MultiScaleMLP) else network.network[1]
    with torch.no_grad():
        for subnetwork in body.subnetworks:
            subnetwork.readout.weight.mul_(readout_gain)
            subnetwork.readout.bias.mul_(readout_gain)
    if zero_initial:
        network = ZeroInitialFields(network, len(problem.variables) - 1, tau)
    network.in_features = n_inputs
    return network


def _potential_model(
    problem, scales, hidden_features, hidden_layers, tau, amplitude, source_cutoff, softening
):
    """:class:`PotentialTE` on a sine MultiScaleMLP, plus the source's quasi-static potential."""
    center, scale = _input_normalisation(problem)
    radial = {}
    if softening is not None:
        source = problem.point_source
        radial_center = [
            (p - o) / problem.scales.length for p, o in zip(source.position, problem.scales.origin)
        ]
        lo, hi = problem.domain.bounds_float64
        corners = torch.cartesian_prod(*[torch.stack([lo[a], hi[a]]) for a in range(2)])
        farthest = float((corners - torch.tensor(radial_center, dtype=corners.dtype)).norm(dim=1).max())
        longest = math.hypot(farthest, softening)
        center, scale = center + [(softening + longest) / 2], scale + [2 / (longest - softening)]
        radial = {"radial_center": radial_center, "radial_softening": softening}
    network = cnn.MultiScaleMLP(
        len(center), 1, scales, hidden_features, hidden_layers, "sin", input_center=center, input_scale=scale
    )
    particular = None
    if source_cutoff != 0:
        particular = PointSourcePotential(problem.point_source, problem.scales, source_cutoff)
    column = problem.inputs.index("permittivity") if "permittivity" in problem.parameters else None
    permittivity = 1.0 if column is not None else problem.permittivity
    return PotentialTE(network, tau, amplitude, permittivity, particular, column, **radial)


def _sine_network(problem, n_outputs, scales, hidden_features, hidden_layers):
    """A sine :class:`common.nn.MultiScaleMLP` on the problem's inputs, normalised to [-1, 1]."""
    center, scale = _input_normalisation(problem)
    return cnn.MultiScaleMLP(
        len(problem.inputs),
        n_outputs,
        scales,
        hidden_features,
        hidden_layers,
        "sin",
        input_center=center,
        input_scale=scale,
    )


def _input_normalisation(problem):
    """Centre and scale (lists, one per input) mapping the domain box and parameter ranges to [-1, 1]."""
    lo, hi = problem.domain.bounds_float64
    lows = lo.tolist() + [low for low, _ in problem.parameters.values()]
    highs = hi.tolist() + [high for _, high in problem.parameters.values()]
    center = [(a + b) / 2 for a, b in zip(lows, highs)]
    scale = [2 / (b - a) if b > a else 1.0 for a, b in zip(lows, highs)]
    return center, scale


class _Normalised(nn.Module):
    def __init__(self, network, center, scale):
        super().__init__()
        self.network = network
        self.register_buffer("center", torch.tensor(center, dtype=torch.get_default_dtype()))
        self.register_buffer("scale", torch.tensor(scale, dtype=torch.get_default_dtype()))

    def forward(self, inputs):
        return self.network((inputs - self.center) * self.scale)


# --------------------------------------------------------------------------- potential formulation (2D TE)

POTENTIAL_JET = ("psi", "psi_x", "psi_y", "psi_t", "psi_xx", "psi_xy", "psi_xt", "psi_yy", "psi_yt", "psi_tt")
"""Output columns of :class:`PotentialTE`: the potential, its gradient and its Hessian in (x, y, t)."""

_PAIRS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))


def _pair(a: int, b: int) -> int:
    """Column (4 + index) of the second derivative d2/dxa dxb in :data:`POTENTIAL_JET`."""
    return 4 + _PAIRS.index((min(a, b), max(a, b)))


_FIRST, _SECOND = (0, 0, 0, 1, 1, 2), (0, 1, 2, 1, 2, 2)  # the pairs' first and second index


def _sine_jet(mlp: cnn.MLP, value: torch.Tensor, first: torch.Tensor, second: torch.Tensor | None):
    """Value, gradient and Hessian of a sine MLP in three variables, forward mode (Taylor to second order).

    Args:
        mlp: a :class:`common.nn.MLP` with a :class:`common.nn.Sine` activation.
        value: (B, in_features) the MLP input.
        first: (3, B, in_features) its derivatives with respect to (x, y, t).
        second: (6, B, in_features) its second derivatives (order of ``_PAIRS``), or None (not propagated).

    Returns:
        ``(value, first, second)`` of the MLP output: (B, out), (3, B, out), (6, B, out) or None.
    """
    w0 = mlp.activation.w0
    for layer in [*mlp.hidden, mlp.readout]:
        value, first = nn.functional.linear(value, layer.weight, layer.bias), first @ layer.weight.T
        second = None if second is None else second @ layer.weight.T
        if layer is mlp.readout:
            break
        if w0 != 1.0:
            value, first = w0 * value, w0 * first
            second = None if second is None else w0 * second
        sine, cosine = torch.sin(value), torch.cos(value)
        if second is not None:  # (sin u)_ab = cos(u) u_ab - sin(u) u_a u_b
            second = cosine * second - sine * (first[_FIRST,] * first[_SECOND,])
        value, first = sine, cosine * first
    return value, first, second


def _input_jet(inputs: torch.Tensor, second: bool, radial_center, softening: float) -> torch.Tensor:
    """(10 or 4, B, n) jet of the network inputs: the points' columns (x, y, t are the variables, parameter
    columns constants) and, with ``radial_center``, a last column ``s = sqrt(|(x, y) - center|^2 + a^2)``."""
    count, columns = len(inputs), inputs.shape[1]
    rows = 10 if second else 4
    jet = inputs.new_zeros(rows, count, columns + (radial_center is not None))
    jet[0, :, :columns] = inputs
    for a in range(3):
        jet[1 + a, :, a] = 1.0
    if radial_center is not None:
        offset = inputs[:, :2] - inputs.new_tensor(radial_center)
        radius = torch.sqrt(offset.pow(2).sum(1) + softening**2)
        unit = offset / radius[:, None]
        jet[0, :, -1] = radius
        jet[1:3, :, -1] = unit.T
        for a, b in _PAIRS if second else ():
            if b < 2:  # d2 s / dxa dxb = (delta_ab - n_a n_b) / s
                jet[_pair(a, b), :, -1] = (float(a == b) - unit[:, a] * unit[:, b]) / radius
    return jet


class PotentialTE(nn.Module):
    """A 2D TE field network through a potential: ``Ex = dpsi/dy``, ``Ey = -dpsi/dx``, ``Hz = eps_r dpsi/dt``.

    With a magnetic source only (``J = 0``), the two E equations of :func:`maxwell_te_residual` then hold
    identically and the third becomes the scalar wave equation :func:`wave_potential_residual`
    ``eps_r mu_r psi_tt - psi_xx - psi_yy + Mz = 0``. The potential is
    ``psi = (1 - exp(-t / tau))^2 net(x, y, t)``, so ``psi`` and ``psi_t`` (hence all fields) vanish at
    ``t = 0`` exactly. ``net`` is a :class:`common.nn.MultiScaleMLP` with sine activations; its value,
    gradient and Hessian come in one forward-mode (second-order Taylor) pass, so a training step needs a
    single reverse pass for the parameters and no nested autograd.

    Args:
        network: a sine :class:`common.nn.MultiScaleMLP` with 3 inputs (x, y, t) and 1 output.
        tau: ramp time of the hard initial condition (dimensionless).
        amplitude: fixed factor on the potential (dimensionless field units times length).
        permittivity: relative permittivity used by :meth:`fields` (``Hz = eps_r psi_t``).
        permittivity_column: for parametric problems, the input column holding the permittivity
            (overrides ``permittivity``); parameter columns get no derivatives.
        particular: optional known potential added to the network's (e.g. :class:`PointSourcePotential`),
            a module ``(B, 3) -> (B, 10)`` :data:`POTENTIAL_JET` columns.
        radial_center: optional (x, y) (dimensionless, e.g. the source position): the network then takes
            one more input after the points' columns, the softened distance
            ``s = sqrt((x - x0)^2 + (y - y0)^2 + radial_softening^2)``, so that a cylindrical wave from
            there is a function of two inputs (s, t) instead of three.
        radial_softening: ``a`` in ``s`` (dimensionless), keeping its derivatives bounded (``1 / a``).

    Shapes:
        ``forward``: (B, 3) dimensionless (x, y, t) -> (B, 10) columns :data:`POTENTIAL_JET`.
        ``fields``: (B, 3) -> (B, 3) Ex, Ey, Hz.
    """

    def __init__(
        self,
        network: cnn.MultiScaleMLP,
        tau: float = 0.1,
        amplitude: float = 1.0,
        permittivity: float = 1.0,
        particular: nn.Module | None = None,
        permittivity_column: int | None = None,
        radial_center: Sequence[float] | None = None,
        radial_softening: float = 0.05,
    ):
        super().__init__()
        extra = radial_center is not None
        if (
            not isinstance(network, cnn.MultiScaleMLP)
            or network.in_features < 3 + extra
            or network.out_features != 1
        ):
            radial = ", s" if extra else ""
            raise ValueError(
                f"PotentialTE: network must be a MultiScaleMLP with inputs (x, y, t [, parameters]{radial}) "
                f"and 1 output, got {network!r}"
            )
        if extra and (len(radial_center) != 2 or not radial_softening > 0):
            raise ValueError(
                "PotentialTE: radial_center must be (x, y) and radial_softening positive, got "
                f"{radial_center!r} and {radial_softening!r}"
            )
        if permittivity_column is not None and not 3 <= permittivity_column < network.in_features:
            raise ValueError(
                f"PotentialTE: permittivity_column must index a parameter input (3 .. "
                f"{network.in_features - 1}), got {permittivity_column!r}"
            )
        if not all(isinstance(sub.activation, cnn.Sine) for sub in network.subnetworks):
            raise ValueError(
                "PotentialTE: the network's activation must be a sine (forward-mode derivatives)"
            )
        self.network, self.tau, self.amplitude = network, float(tau), float(amplitude)
        self.permittivity, self.particular = float(permittivity), particular
        self.permittivity_column = permittivity_column
        self.radial_center = None if radial_center is None else tuple(float(v) for v in radial_center)
        self.radial_softening = float(radial_softening)
        self.in_features = network.in_features - extra

    def forward(self, inputs: torch.Tensor, second: bool = True) -> torch.Tensor:
        """Columns :data:`POTENTIAL_JET` ``(B, 10)``; without ``second`` the first four (value, gradient)."""
        if inputs.dim() != 2 or inputs.shape[1] != self.in_features:
            raise ValueError(
                f"PotentialTE expects (B, {self.in_features}) points (x, y, t [, parameters]), got shape "
                f"{tuple(inputs.shape)}"
            )
        net = self.network
        normalised = _input_jet(inputs, second, self.radial_center, self.radial_softening) * net.input_scale
        normalised[0] = normalised[0] - net.input_center * net.input_scale
        jet = 0.0
        for scale, sub in zip(net.scales, net.subnetworks):
            value, first, curvature = _sine_jet(
                sub,
                scale * normalised[0],
                scale * normalised[1:4],
                scale * normalised[4:] if second else None,
            )
            parts = [value[None], first] + ([curvature] if second else [])
            jet = jet + torch.cat(parts)[..., 0]  # (10 or 4, B)
        # product with the ramp r(t) = (1 - exp(-t / tau))^2, which depends on t only
        decay = torch.exp(-inputs[:, 2] / self.tau)
        ramp = (1 - decay) ** 2
        ramp_t = 2 * (1 - decay) * decay / self.tau
        ramp_tt = 2 * decay * (2 * decay - 1) / self.tau**2
        rows = [ramp * jet[0], ramp * jet[1], ramp * jet[2], ramp * jet[3] + ramp_t * jet[0]]
        for a, b in _PAIRS if second else ():
            row = ramp * jet[_pair(a, b)]
            if a == 2:
                row = row + ramp_t * jet[1 + b]
            if b == 2:
                row = row + ramp_t * jet[1 + a]
            if a == b == 2:
                row = row + ramp_tt * jet[0]
            rows.append(row)
        jet = self.amplitude * torch.stack(rows, 1)
        return jet if self.particular is None else jet + self.particular(inputs)[:, : len(rows)]

    def fields(self, inputs: torch.Tensor) -> torch.Tensor:
        """Ex, Ey, Hz ``(B, 3)`` at dimensionless points ``(B, in_features)``."""
        column = self.permittivity_column
        jet = self(inputs, second=False)
        return potential_fields(jet, self.permittivity if column is None else inputs[:, column])

    def field_model(self) -> nn.Module:
        """Module ``(B, 3) -> (B, 3)`` (Ex, Ey, Hz) sharing this network, e.g. for :class:`FDTDReference`."""
        return _PotentialFields(self)


class _PotentialFields(nn.Module):
    def __init__(self, potential: PotentialTE):
        super().__init__()
        self.potential, self.in_features = potential, potential.in_features

    def forward(self, inputs):
        return self.potential.fields(inputs)


class PointSourcePotential(nn.Module):
    """Quasi-static potential of a smoothed point source, the sharp part of a :class:`PotentialTE`.

    ``psi_s = q(t) phi(r) chi(r)``: ``phi`` solves ``laplace phi = g`` for the source's normalised Gaussian
    ``g`` of radius ``sigma`` (``phi'(r) = (1 - exp(-r^2 / 2 sigma^2)) / (2 pi r)``, ``phi(0) = 0``),
    ``q(t)`` is the dimensionless source moment, so ``laplace psi_s = Mz`` near the source, and
    ``chi = exp(-r^2 / 2 R^2)`` confines it to ``r < ~R`` (``cutoff`` ``R``; ``None``: no cutoff).
    Added to a network's potential, it carries the steep near field (``|E| ~ 1 / (2 pi r)``) that a
    smooth network cannot resolve on the scale of ``sigma``, and leaves the network a residual without the
    steep source term. No trainable parameters.

    Args:
        source: the :class:`PointSource` (magnetic line current of a TE problem).
        scales: the problem's :class:`Scales`.
        cutoff: ``R`` (dimensionless) or ``None``.

    Shapes:
        (B, 3) dimensionless (x, y, t) -> (B, 10) columns :data:`POTENTIAL_JET`.
    """

    def __init__(self, source: PointSource, scales: Scales, cutoff: float | None = 0.1):
        super().__init__()
        if cutoff is not None and not cutoff > 0:
            raise ValueError(f"PointSourcePotential: cutoff must be positive or None, got {cutoff!r}")
        self.source, self.scales, self.cutoff = source, scales, cutoff
        self.center = tuple((p - o) / scales.length for p, o in zip(source.position, scales.origin))
        self.sigma = source.radius / scales.length

    def moment(self, times: torch.Tensor) -> torch.Tensor:
        """``q(t)`` and its first two time derivatives at dimensionless times ``(B,)``: ``(3, B)``."""
        with torch.enable_grad():
            t = times.detach().double().requires_grad_()
            center = torch.tensor(self.center, dtype=t.dtype).expand(len(t), 2)
            peak = 1.0 / (2 * math.pi * self.sigma**2)  # g(0) in dimensionless units
            q = self.source.dimensionless(torch.cat([center, t[:, None]], 1), self.scales, True) / peak
            (q_t,) = torch.autograd.grad(q.sum(), t, create_graph=True)
            (q_tt,) = torch.autograd.grad(q_t.sum(), t)
        return torch.stack([q.detach(), q_t.detach(), q_tt]).to(times.dtype)

    def radial(self, squared: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``f = phi chi``, ``f' / r`` and ``f''`` at squared radii ``(B,)`` (float64)."""
        sigma2 = self.sigma**2
        u = squared / (2 * sigma2)
        # Ein(u) = sum_k (-1)^(k+1) u^k / (k k!) for small u; ln u + gamma + E1(u) (asymptotic) for large u
        small = u.clamp(max=12.0)
        term, series = torch.ones_like(u), torch.zeros_like(u)
        for k in range(1, 60):
            term = -term * small / k
            series = series - term / k
        large = u.clamp(min=12.0)
        asymptotic = (
            torch.log(large) + 0.5772156649015329 + torch.exp(-large) / large * (1 - 1 / large + 2 / large**2)
        )
        phi = torch.where(u < 12.0, series, asymptotic) / (4 * math.pi)
        gaussian = torch.exp(-u) / (2 * math.pi * sigma2)
        # phi' / r = (1 - exp(-u)) / (2 pi r^2), -> 1 / (4 pi sigma^2) at r = 0
        slope = torch.where(
            u > 1e-8,
            -torch.expm1(-u) / (2 * math.pi * squared.clamp(min=1e-300)),
            torch.full_like(u, 1 / (4 * math.pi * sigma2)),
        )
        curvature = gaussian - slope  # phi'' = g - phi' / r
        if self.cutoff is None:
            return phi, slope, curvature
        inverse = 1.0 / self.cutoff**2
        chi = torch.exp(-0.5 * squared * inverse)
        chi_slope = -inverse * chi  # chi' / r
        chi_curvature = (squared * inverse**2 - inverse) * chi
        return (
            phi * chi,
            slope * chi + phi * chi_slope,
            curvature * chi + 2 * squared * slope * chi_slope + phi * chi_curvature,
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        offset = inputs[:, :2].double() - torch.tensor(self.center, dtype=torch.float64)
        squared = offset.pow(2).sum(1)
        f, slope, curvature = self.radial(squared)
        q, q_t, q_tt = self.moment(inputs[:, 2]).double()
        # Hessian of a radial function: f'' n n^T + (f' / r) (I - n n^T) = slope I + (f'' - slope) n n^T / r^2
        excess = torch.where(
            squared > 0, (curvature - slope) / squared.clamp(min=1e-300), torch.zeros_like(f)
        )
        dx, dy = offset[:, 0], offset[:, 1]
        columns = [
            q * f,
            q * slope * dx,
            q * slope * dy,
            q_t * f,
            q * (slope + excess * dx * dx),
            q * excess * dx * dy,
            q_t * slope * dx,
            q * (slope + excess * dy * dy),
            q_t * slope * dy,
            q_tt * f,
        ]
        return torch.stack(columns, 1).to(inputs.dtype)


def potential_fields(jet: torch.Tensor, permittivity=1.0) -> torch.Tensor:
    """Ex, Ey, Hz ``(B, 3)`` from :data:`POTENTIAL_JET` columns ``(B, 10)``: psi_y, -psi_x, eps_r psi_t."""
    return torch.stack([jet[:, 2], -jet[:, 1], permittivity * jet[:, 3]], 1)


def wave_potential_residual(
    jet: torch.Tensor, permittivity=1.0, permeability=1.0, source=None
) -> torch.Tensor:
    """The TE equation left by the potential: ``eps_r mu_r psi_tt - psi_xx - psi_yy + Mz`` ``(B,)``.

    Args:
        jet: (B, 10) columns :data:`POTENTIAL_JET` (dimensionless).
        permittivity, permeability: relative, scalars or (B,).
        source: optional (B,) magnetic current density Mz (dimensionless, as in :func:`maxwell_te_residual`).
    """
    if jet.dim() != 2 or jet.shape[1] != len(POTENTIAL_JET):
        raise ValueError(
            f"wave_potential_residual: jet must be (B, {len(POTENTIAL_JET)}), got {tuple(jet.shape)}"
        )
    residual = permittivity * permeability * jet[:, _pair(2, 2)] - jet[:, _pair(0, 0)] - jet[:, _pair(1, 1)]
    return residual if source is None else residual + source


def mur_potential_residual(
    jet: torch.Tensor, normals: torch.Tensor, permittivity=1.0, speed=1.0
) -> torch.Tensor:
    """First-order Mur condition ``du/dt + v n.grad(u)`` on Ex, Ey, Hz of a potential: ``(B, 3)``.

    Args:
        jet: (B, 10) columns :data:`POTENTIAL_JET`; normals: (B, 2) outward normals;
        permittivity: relative (``Hz = eps_r psi_t``); speed: ``1 / sqrt(eps_r mu_r)``.
    """
    nx, ny = normals[:, 0], normals[:, 1]

    def mur(a):  # of the derivative d psi / d x_a
        return jet[:, _pair(a, 2)] + speed * (nx * jet[:, _pair(a, 0)] + ny * jet[:, _pair(a, 1)])

    return torch.stack([mur(1), -mur(0), permittivity * mur(2)], 1)


def engquist_majda_potential_residual(
    jet: torch.Tensor, normals: torch.Tensor, permittivity=1.0, speed=1.0
) -> torch.Tensor:
    """Second-order Engquist-Majda absorbing condition on Hz of a potential: ``(B, 1)``.

    ``eps_r (psi_tt + v n.grad(psi_t) - v^2 / 2 psi_tau,tau)`` with ``tau`` the boundary tangent: the
    one-way wave equation to second order in the angle of incidence, so a plane wave leaving at angle
    ``theta`` is reflected by ``((cos theta - 1) / (cos theta + 1))^2`` instead of the first order's
    ``(cos theta - 1) / (cos theta + 1)`` (3% instead of 17% at 45 degrees). It needs only the second
    derivatives of the potential, which the jet has.

    Args:
        jet: (B, 10) columns :data:`POTENTIAL_JET`; normals: (B, 2) outward unit normals;
        permittivity: relative (``Hz = eps_r psi_t``); speed: ``1 / sqrt(eps_r mu_r)``.
    """
    nx, ny = normals[:, 0], normals[:, 1]
    tangential = (
        ny * ny * jet[:, _pair(0, 0)] - 2 * nx * ny * jet[:, _pair(0, 1)] + nx * nx * jet[:, _pair(1, 1)]
    )
    outward = nx * jet[:, _pair(0, 2)] + ny * jet[:, _pair(1, 2)]
    residual = jet[:, _pair(2, 2)] + speed * outward - 0.5 * speed**2 * tangential
    return (permittivity * residual)[:, None]


@dataclasses.dataclass
class FDTDReference:
    """Field samples of an FDTD run: per component, SI points ``(N, 3)`` (x, y, t) and values ``(N,)``.

    Each component is sampled at its own Yee nodes and times (E at ``n dt``, H at ``(n - 1/2) dt``).
    """

    points: dict[str, torch.Tensor]
    values: dict[str, torch.Tensor]

    def relative_errors(
        self,
        model: nn.Module,
        scales: Scales,
        components: Sequence[str],
        parameters: Sequence[float] = (),
        chunk: int = 65536,
    ) -> dict[str, float]:
        """Relative L2 error of each component of ``model`` (dimensionless network) against the samples.

        Args:
            model: network on dimensionless points; components: its output names.
            scales: the problem's :class:`Scales`.
            parameters: values of the parameter columns (parametric problems), dimensionless.
            chunk: points per forward pass.
        """
        errors = {}
        dtype = next(model.parameters()).dtype
        for name, points in self.points.items():
            column = components.index(name)
            extra = torch.tensor(list(parameters), dtype=torch.float64).expand(len(points), len(parameters))
            points = torch.cat([points, extra], 1)
            with torch.no_grad():
                predicted = torch.cat(
                    [
                        scales.fields_si(model, part.to(dtype), components)[:, column].double()
                        for part in points.split(chunk)
                    ]
                )
            errors[name] = float(pde.relative_l2(predicted, self.values[name]))
        return errors


def fdtd_reference(
    setup: PointSourceSetup,
    resolution: float = 2.5e-3,
    frames: int = 20,
    stride: int = 2,
    pml_cells: int = 20,
    dtype: torch.dtype = torch.float64,
) -> FDTDReference:
    """Solve ``setup`` with :mod:`mindelec.fdtd`, the same smoothed source as a distributed current.

    The PINN's domain is surrounded by a CPML (``pml_cells`` thick) so the reference is the open-domain
    solution; the source is one point current per Yee node within 4 radii of the centre, each
    carrying ``amplitude * g(node) * dx * dy``, i.e. the current density ``amplitude * g * waveform``.

    Args:
        setup: a non-parametric :class:`PointSourceSetup`.
        resolution: FDTD cell size (m); 2.5 mm resolves the shortest wavelength of the default pulse
            (~0.12 m) with ~50 cells.
        frames: number of snapshots over ``[0, duration]``.
        stride: keep every ``stride``-th node along x and y.
        pml_cells: CPML thickness in cells, outside the PINN domain.
        dtype: FDTD precision.

    Returns:
        :class:`FDTDReference` with points in the setup's SI coordinates.
    """
    from mindelec import fdtd

    if isinstance(setup.permittivity, (tuple, list)) or isinstance(setup.permeability, (tuple, list)):
        raise ValueError("fdtd_reference: give one permittivity and permeability value, not a range")
    extent = [u - lo for lo, u in zip(setup.lower, setup.upper)]
    cells = [round(e / resolution) for e in extent]
    spacing = [e / n for e, n in zip(extent, cells)]
    size = [e + 2 * pml_cells * h for e, h in zip(extent, spacing)]
    center = [(lo + u) / 2 for lo, u in zip(setup.lower, setup.upper)]  # SI position of the FDTD origin
    source = setup.source()
    driven = "Hz" if setup.polarization == "TE" else "Ez"
    grid = fdtd.Grid(size, resolution)
    node_axes = [grid.coordinates(driven, a) + center[a] for a in range(2)]
    xx, yy = torch.meshgrid(*node_axes, indexing="ij")
    nodes = torch.stack([xx.flatten(), yy.flatten()], 1)
    near = (nodes - torch.tensor(source.position, dtype=nodes.dtype)).norm(dim=1) <= 4 * source.radius
    weights = source.amplitude * source.profile(nodes[near]) * grid.cell_volume
    sources = [
        fdtd.PointDipole(
            tuple((node - torch.tensor(center, dtype=node.dtype)).tolist()),
            driven,
            source.waveform,
            amplitude=float(weight),
        )
        for node, weight in zip(nodes[near], weights)
    ]
    simulation = fdtd.Simulation(
        size,
        resolution,
        boundary=fdtd.PML(thickness=pml_cells),
        sources=sources,
        default_medium=fdtd.Medium(permittivity=setup.permittivity, permeability=setup.permeability),
        polarization=setup.polarization,
        dtype=dtype,
        monitors=[fdtd.Snapshots("frames", every=1, components=setup.components)],
    )
    steps = math.ceil(setup.duration / simulation.dt - 1e-9)
    simulation.monitors[0].every = max(1, steps // frames)
    result = simulation.run(until=setup.duration)["frames"]
    points, values = {}, {}
    for name in setup.components:
        axes = [grid.coordinates(name, a) + center[a] for a in range(2)]
        keep = [
            ((axis >= lo - 1e-12) & (axis <= u + 1e-12)).nonzero()[:, 0][::stride]
            for axis, lo, u in zip(axes, setup.lower, setup.upper)
        ]
        times = result["times"] - (0.5 * simulation.dt if name.startswith("H") else 0.0)
        frames_kept = result[name][:, keep[0]][:, :, keep[1]].double()
        tt, xx, yy = torch.meshgrid(times.double(), axes[0][keep[0]], axes[1][keep[1]], indexing="ij")
        points[name] = torch.stack([xx.flatten(), yy.flatten(), tt.flatten()], 1)
        values[name] = frames_kept.flatten()
    return FDTDReference(points, values)
