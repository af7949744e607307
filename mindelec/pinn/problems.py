"""PINN problems (:class:`common.pde.Problem`) of Maxwell's equations built from SI set-ups.

:func:`point_source_problem`: 2D TE/TM time domain with a smoothed point source and absorbing sides,
parametric in ``eps_r``/``mu_r`` if ranges are given (pre-training and incremental fine-tuning), in the
field or the potential formulation; :func:`helmholtz_problem`: 2D TM frequency domain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from common import geometry as geo
from common import pde
from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT, VACUUM_IMPEDANCE
from mindelec.pinn.potential import (
    POTENTIAL_JET,
    engquist_majda_potential_residual,
    mur_potential_residual,
    wave_potential_residual,
)
from mindelec.pinn.residuals import (
    _material,
    helmholtz_residual,
    maxwell_te_residual,
    maxwell_tm_residual,
    mur_residual,
    sommerfeld_residual,
)
from mindelec.pinn.sources import PointSource, PointSourceSetup, Scales

__all__ = ["helmholtz_problem", "point_source_problem"]


def _parameter(value, name: str, parameters: dict, columns: list):
    """Record a parametric material (range) as an input column; return a column index or the value."""
    if isinstance(value, (tuple, list)):
        low, high = (float(v) for v in value)
        columns.append(name)
        parameters[name] = (low, high)
        return None
    if not float(value) > 0:
        raise ConfigurationError(f"PointSourceSetup: {name} must be positive, got {value!r}")
    return float(value)


def _domains(setup: PointSourceSetup, scales: Scales):
    """The dimensionless space-time box and the part of it within 4 source radii of the source."""
    lower = [(v - o) / scales.length for v, o in zip(setup.lower, scales.origin)]
    upper = [(v - o) / scales.length for v, o in zip(setup.upper, scales.origin)]
    duration = setup.duration / scales.time
    space_time = geo.Rectangle(lower, upper) * geo.TimeDomain(0.0, duration)
    center = [(p - o) / scales.length for p, o in zip(setup.source_position, scales.origin)]
    near = geo.Disk(center, 4 * setup.source_radius / scales.length) & geo.Rectangle(lower, upper)
    return space_time, near * geo.TimeDomain(0.0, duration)


def _check_formulation(setup: PointSourceSetup, formulation: str, absorbing_order: int) -> None:
    """Refuse a formulation or absorbing order that :func:`point_source_problem` does not offer."""
    if formulation not in ("fields", "potential"):
        raise ConfigurationError(
            f"point_source_problem: formulation must be 'fields' or 'potential', got {formulation!r}"
        )
    potential = formulation == "potential"
    if absorbing_order not in (1, 2) or (absorbing_order == 2 and not potential):
        raise ConfigurationError(
            "point_source_problem: absorbing_order must be 1, or 2 with formulation='potential', got "
            f"{absorbing_order!r} with formulation={formulation!r}"
        )
    if potential and setup.polarization != "TE":
        raise ConfigurationError(
            "point_source_problem: the potential formulation needs polarization 'TE', "
            f"got {setup.polarization!r}"
        )


class _PointSourceEquations:
    """The residual functions of :func:`point_source_problem` (dimensionless points ``(B, 3 [+ p])``).

    Materials are constants, or input columns after x, y, t where a value is ``None`` (a range).
    """

    def __init__(self, setup, scales, source, permittivity, permeability, columns, absorbing_order):
        self.scales, self.source, self.columns = scales, source, columns
        self.permittivity, self.permeability = permittivity, permeability
        self.magnetic = setup.polarization == "TE"
        self.residual = maxwell_te_residual if self.magnetic else maxwell_tm_residual
        self.driven = 2 if self.magnetic else 0
        self.potential_condition = (
            mur_potential_residual if absorbing_order == 1 else engquist_majda_potential_residual
        )

    def materials(self, points):
        """Relative permittivity and permeability: scalars or (B,) input columns."""
        eps = self.permittivity
        mu = self.permeability
        eps = eps if eps is not None else points[:, 3 + self.columns.index("permittivity")]
        mu = mu if mu is not None else points[:, 3 + self.columns.index("permeability")]
        return eps, mu

    def speed(self, points, eps, mu):
        """Wave speed ``1 / sqrt(eps_r mu_r)`` (dimensionless)."""
        return 1.0 / torch.sqrt(_material(eps, points) * _material(mu, points))

    def maxwell(self, points, fields):
        """The TE or TM residuals with the source current: three (B,) rows."""
        density = self.source.dimensionless(points, self.scales, self.magnetic)
        current = torch.zeros(len(points), 3, dtype=points.dtype, device=points.device)
        current[:, self.driven] = density
        eps, mu = self.materials(points)
        return self.residual(points, fields, eps, mu, current)

    def mur(self, points, fields, normals):
        """First-order Mur condition on every field component: (B, 3)."""
        eps, mu = self.materials(points)
        return mur_residual(points, fields, normals[:, :2], self.speed(points, eps, mu))

    def wave(self, points, jet):
        """The potential's wave equation with the source: (B,)."""
        density = self.source.dimensionless(points, self.scales, self.magnetic)
        return wave_potential_residual(jet, *self.materials(points), density)

    def mur_potential(self, points, jet, normals):
        """The absorbing condition on the potential (first- or second-order)."""
        eps, mu = self.materials(points)
        return self.potential_condition(jet, normals[:, :2], eps, self.speed(points, eps, mu))


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
        raise ConfigurationError(
            f"PointSourceSetup: polarization must be 'TE' or 'TM', got {setup.polarization!r}")
    scales = setup.scales()
    source = setup.source()
    space_time, near_source = _domains(setup, scales)
    parameters, columns = {}, []
    permittivity = _parameter(setup.permittivity, "permittivity", parameters, columns)
    permeability = _parameter(setup.permeability, "permeability", parameters, columns)
    _check_formulation(setup, formulation, absorbing_order)
    potential = formulation == "potential"
    equations = _PointSourceEquations(
        setup, scales, source, permittivity, permeability, columns, absorbing_order
    )
    maxwell, mur = (
        (equations.wave, equations.mur_potential) if potential else (equations.maxwell, equations.mur)
    )
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
    problem.permeability = permeability
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
        ``(problem, scales)``; the problem's variables are ``("x", "y")`` (dimensionless, ``(x - lower) / L``
        with ``L`` the longer side); ``problem.domain`` is that rectangle, ``problem.wavenumber`` ``k L``.
        :func:`~mindelec.pinn.fdfd_reference` is the open-domain solution to compare with.
    """
    length = max(u - lo for lo, u in zip(lower, upper))
    scales = Scales(length, abs(source.amplitude) * VACUUM_IMPEDANCE / length, tuple(lower))
    wavenumber = 2 * math.pi * frequency * length / SPEED_OF_LIGHT
    rectangle = geo.Rectangle([0.0, 0.0], [(u - lo) / length for lo, u in zip(lower, upper)])

    def helmholtz(points, fields):
        origin = torch.as_tensor(scales.origin, dtype=points.dtype, device=points.device)
        density = source.amplitude * source.profile(points * length + origin) * length**2
        # s = i omega mu_0 J in field units: k (J L^2 / amplitude) in the imaginary part (the sign checked
        # against the outgoing Hankel field of a line current, through mindelec.fdfd, in the tests)
        zeros = torch.zeros_like(density)
        return helmholtz_residual(
            points,
            fields,
            wavenumber,
            permittivity,
            torch.stack([zeros, wavenumber * density / abs(source.amplitude)], 1),
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
    problem.domain, problem.point_source, problem.scales = rectangle, source, scales
    problem.wavenumber = wavenumber
    return problem, scales
