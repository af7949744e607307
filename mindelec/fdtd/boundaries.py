"""Boundary conditions: :class:`PML` (convolutional PML), :class:`Periodic`, and ``PEC`` walls.

``Simulation(boundary=...)`` takes one boundary for every axis or a tuple with one per axis.
Behind a PML (and on a ``PEC`` axis) the domain ends in perfect-conductor walls at ``+-size/2``.

The CPML (Roden & Gedney 2000) stretches the coordinate along the axis with
``s = kappa + sigma / (alpha + i omega eps0)``, graded over ``thickness`` cells inside the domain with
depth ``rho`` (0 at the inner face, 1 at the wall):

    sigma = sigma_max rho^m,  kappa = 1 + (kappa_max - 1) rho^m,  alpha = alpha_max (1 - rho),
    sigma_max = sigma_factor * 0.8 (m + 1) / (eta0 dx).
"""

import math

import torch

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError
from common.units import VACUUM_IMPEDANCE, VACUUM_PERMITTIVITY


class PML:
    """A convolutional perfectly matched layer on both ends of an axis.

    Args:
        thickness: number of cells (>= 1) inside the domain at each end.
        grading_order: polynomial order ``m`` of the sigma and kappa grading.
        sigma_factor: ``sigma_max`` relative to the optimum ``0.8 (m + 1) / (eta0 dx)``.
        kappa_max: maximum coordinate stretch (>= 1), helps absorb evanescent waves.
        alpha_frequency: ``alpha_max = 2 pi eps0 alpha_frequency`` (Hz); the CPML absorbs
            propagating waves well above this frequency. Default: ``c / (1000 dx)``.
    """

    def __init__(
        self, thickness=20, grading_order=3.0, sigma_factor=1.0, kappa_max=2.0, alpha_frequency=None
    ):
        self.thickness = checks.positive_int(thickness, "PML: thickness (cells)")
        self.grading_order = checks.non_negative(grading_order, "PML: grading_order")
        self.sigma_factor = checks.positive(sigma_factor, "PML: sigma_factor")
        self.kappa_max = checks.positive(kappa_max, "PML: kappa_max")
        if self.kappa_max < 1:
            raise ConfigurationError(f"PML: kappa_max must be >= 1, got {kappa_max}")
        self.alpha_frequency = alpha_frequency

    def profiles(self, length: int, spacing: float, dt: float, half: bool, dtype, device):
        """CPML coefficients on the two slabs of an axis with ``length`` cells.

        Returns:
            ``(b, a, kappa_inverse_minus_one)``: each a tensor of shape ``(2 * thickness,)`` holding the
            left slab (indices ``0 .. T-1``) then the right slab (``length-T .. length-1``) for integer
            nodes (``half=False``) or half nodes. The auxiliary field obeys
            ``psi = b psi + a dF/dx`` and the update adds ``(1/kappa - 1) dF/dx + psi``.
        """
        from common.units import SPEED_OF_LIGHT

        thickness = self.thickness
        order = self.grading_order
        sigma_max = self.sigma_factor * 0.8 * (order + 1) / (VACUUM_IMPEDANCE * spacing)
        alpha_frequency = (
            SPEED_OF_LIGHT / (1000 * spacing) if self.alpha_frequency is None else self.alpha_frequency
        )
        alpha_max = 2 * math.pi * VACUUM_PERMITTIVITY * alpha_frequency
        index = torch.cat([torch.arange(thickness), torch.arange(length - thickness, length)]).to(
            torch.float64
        )
        position = (index + (0.5 if half else 0.0)) * spacing  # from the left wall
        extent = length * spacing
        depth = torch.clamp(
            torch.maximum(thickness * spacing - position, position - (extent - thickness * spacing)), min=0.0
        )
        rho = depth / (thickness * spacing)
        sigma = sigma_max * rho**order
        kappa = 1 + (self.kappa_max - 1) * rho**order
        alpha = alpha_max * (1 - rho)
        b = torch.exp(-(sigma / kappa + alpha) * dt / VACUUM_PERMITTIVITY)
        denominator = sigma * kappa + kappa**2 * alpha
        a = torch.where(
            denominator > 0, sigma / torch.where(denominator > 0, denominator, 1.0) * (b - 1), 0.0
        )
        return tuple(value.to(dtype=dtype, device=device) for value in (b, a, 1 / kappa - 1))

    def __repr__(self):
        return (
            f"PML(thickness={self.thickness}, kappa_max={self.kappa_max}, sigma_factor={self.sigma_factor})"
        )


class Periodic:
    """Periodic boundary: the field leaving at ``+size/2`` enters at ``-size/2`` (period = size)."""

    def __repr__(self):
        return "Periodic()"


def per_axis_boundaries(boundary, grid):
    """One boundary per axis of ``grid`` (and PEC walls along the axes it does not have), checked.

    Args:
        boundary: ``None`` (PEC walls), one of :class:`PML`, :class:`Periodic`, ``PEC`` for every axis, or a
            tuple with one per axis.
        grid: the :class:`~mindelec.fdtd.grid.Grid`.

    Raises:
        ValueError: a wrong count, or a PML whose two layers do not fit (naming the axis).
        TypeError: something that is not a boundary.
    """
    from .grid import AXES
    from .materials import PEC

    boundary = PEC() if boundary is None else boundary
    per_axis = tuple(boundary) if isinstance(boundary, (tuple, list)) else (boundary,) * grid.ndim
    if len(per_axis) != grid.ndim:
        raise ConfigurationError(
            f"Simulation boundary: expected one boundary or {grid.ndim} (one per axis), got {len(per_axis)}")
    for axis, item in enumerate(per_axis):
        if not isinstance(item, (PML, Periodic, PEC)):
            raise ArgumentTypeError(
                f"Simulation boundary along {AXES[axis]}: expected PML, Periodic or PEC, got {item!r}")
        if isinstance(item, PML) and 2 * item.thickness + 1 > grid.shape[axis]:
            raise ConfigurationError(
                f"{item!r} along {AXES[axis]}: two layers of {item.thickness} cells do not fit in "
                f"the domain's {grid.shape[axis]} cells; make the PML thinner or the domain larger")
    return per_axis + (PEC(),) * (3 - grid.ndim)
