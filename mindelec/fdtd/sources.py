"""Soft current sources.

A source adds a current density ``J`` (for an E component) or a magnetic current density
``M`` (for an H component) to the update of one field component on a set of Yee nodes:
``eps dE/dt = curl H - J``, ``mu dH/dt = -curl E - M``. The current waveform is evaluated at the
midpoint of each update (``(n + 1/2) dt`` for E, ``n dt`` for H).
"""

import math
from dataclasses import dataclass

import torch

from common.errors import ArgumentTypeError, ConfigurationError
from common.units import SPEED_OF_LIGHT, VACUUM_PERMEABILITY, VACUUM_PERMITTIVITY

from .grid import ACTIVE_COMPONENTS


class CurrentSource:
    """A uniform current on a point, line, area or volume.

    The current density on the covered nodes is ``amplitude * waveform(t) / prod(dx)`` where the
    product runs over the axes along which the source has zero size, so ``amplitude`` is a current
    moment: A m in 3D for a point (a dipole ``I l``), A for a point in 2D (a line current along z),
    A/m for a point in 1D (a current sheet), and per unit length/area accordingly for extended sources.

    Args:
        component: ``"Ex"`` .. ``"Hz"``, one the simulation carries.
        waveform: a callable of a tensor of times (s), e.g. :class:`GaussianPulse`.
        center: centre (m), one coordinate per dimension.
        size: extent (m) per dimension; zeros make a point source.
        amplitude: current moment (see above); magnetic sources in V m^(d-2).
    """

    def __init__(self, component, waveform, center, size=None, amplitude=1.0):
        if not callable(waveform):
            raise ArgumentTypeError(
                f"{type(self).__name__}: waveform must be callable on a tensor of times, got {waveform!r}"
            )
        self.component = component
        self.waveform = waveform
        self.center = tuple(float(value) for value in center)
        self.size = tuple(0.0 for _ in self.center) if size is None else tuple(float(value) for value in size)
        self.amplitude = float(amplitude)

    def bind(self, grid, polarization):
        """Grid index slices and current-density scale ``(slices, scale)`` for this source.

        Raises:
            ValueError: naming the source if its component is not simulated or it lies outside the domain.
        """
        active = ACTIVE_COMPONENTS[(grid.ndim, polarization)]
        if self.component not in active:
            raise ConfigurationError(
                f"{self!r}: component {self.component!r} is not simulated; "
                f"this {grid.ndim}D simulation has {', '.join(active)}"
            )
        slices = grid.index_range(self.center, self.size, self.component, repr(self))
        zero_axes = [a for a in range(grid.ndim) if self.size[a] == 0]
        scale = self.amplitude / math.prod(grid.spacing[a] for a in zero_axes)
        return slices, scale

    def __repr__(self):
        return (
            f"{type(self).__name__}(component={self.component!r}, center={self.center}, size={self.size}, "
            f"waveform={self.waveform!r})"
        )


class PointDipole(CurrentSource):
    """A point current source (a dipole in 3D, a line current in 2D, a current sheet in 1D).

    Args:
        position: (m), one coordinate per dimension.
        component: the field component driven, e.g. ``"Ez"``.
        waveform: e.g. ``GaussianPulse(f0, fwidth)``.
        amplitude: current moment (A m^(d-2)), see :class:`CurrentSource`.
    """

    def __init__(self, position, component, waveform, amplitude=1.0):
        super().__init__(component, waveform, center=position, size=None, amplitude=amplitude)

    def __repr__(self):
        return (
            f"PointDipole(position={self.center}, component={self.component!r}, waveform={self.waveform!r})"
        )


class PlaneWave:
    """A plane wave travelling along +x, injected through a total-field/scattered-field (TF/SF) plane.

    The domain is split at ``x = x0``: for ``x >= x0`` the fields are total fields (incident plus
    scattered), for ``x < x0`` scattered fields only, so a probe there sees only what the structures
    reflect. The incident field comes from an auxiliary 1D Yee line with the same ``dt`` and ``dx``
    (so it has exactly the main grid's dispersion along x), driven at ``x = -size/2`` by
    ``E_inc = amplitude * waveform(t)`` (V/m) and long enough that its far end never echoes back.
    Use periodic or PML boundaries along y (and z); the default medium must be non-dispersive with
    float parameters, and the TF/SF plane must not lie in a PML.

    Args:
        waveform: a callable of times (s), e.g. :class:`GaussianPulse`.
        x0: position (m) of the TF/SF plane (snapped to the nearest integer node along x).
        component: the incident E component: ``"Ez"`` (1D, 2D TM, 3D; H along -y) or ``"Ey"``
            (2D TE, 3D; H along +z).
        amplitude: incident electric field (V/m) at ``x = -size/2``.
    """

    def __init__(self, waveform, x0, component="Ez", amplitude=1.0):
        if not callable(waveform):
            raise ArgumentTypeError(
                f"PlaneWave: waveform must be callable on a tensor of times, got {waveform!r}")
        if component not in ("Ez", "Ey"):
            raise ConfigurationError(
                f"PlaneWave: component must be 'Ez' or 'Ey' (propagation along +x), got {component!r}"
            )
        self.waveform = waveform
        self.x0 = float(x0)
        self.component = component
        self.amplitude = float(amplitude)

    def bind(self, grid, polarization, pml_thickness):
        """``(e_component, h_component, plane_index)`` on this grid; raises ValueError naming the source."""
        active = ACTIVE_COMPONENTS[(grid.ndim, polarization)]
        magnetic = "Hy" if self.component == "Ez" else "Hz"
        if self.component not in active or magnetic not in active:
            raise ConfigurationError(
                f"{self!r}: needs {self.component} and {magnetic}; this {grid.ndim}D simulation "
                f"has {', '.join(active)}"
            )
        grid.check_inside((self.x0,) + (0.0,) * (grid.ndim - 1), repr(self))
        index = grid.nearest_index(self.component, (self.x0, 0.0, 0.0))[0]
        if not pml_thickness + 1 <= index <= grid.shape[0] - pml_thickness - 1:
            raise ConfigurationError(
                f"{self!r}: the TF/SF plane must lie inside the domain, outside the PML along x")
        return self.component, magnetic, index

    def incident_line(self, grid, polarization, pml_thickness, dt, medium, steps):
        """The :class:`IncidentLine` that carries this wave through a run of ``steps`` steps of ``dt`` (s).

        ``medium`` is the simulation's (non-dispersive) default medium; the line has its ``dt`` and the
        grid's spacing along x.
        """
        electric, magnetic, index = self.bind(grid, polarization, pml_thickness)
        spacing = grid.spacing[0]
        # long enough that the echo from the line's far end never returns to the TF/SF plane
        travel = steps * SPEED_OF_LIGHT * dt / spacing
        times = (torch.arange(steps, dtype=torch.float64) + 1) * dt
        return IncidentLine(
            electric=electric,
            magnetic=magnetic,
            index=index,
            length=grid.shape[0] + math.ceil(travel / 2) + 2,
            sign=1.0 if electric == "Ez" else -1.0,
            ce=dt / (VACUUM_PERMITTIVITY * medium.permittivity * spacing),
            ch=dt / (VACUUM_PERMEABILITY * medium.permeability * spacing),
            drive=(self.amplitude * self.waveform(times)).tolist(),
        )

    def __repr__(self):
        return f"PlaneWave(x0={self.x0}, component={self.component!r}, waveform={self.waveform!r})"


@dataclass(frozen=True)
class IncidentLine:
    """A TF/SF plane wave as the time step sees it: an auxiliary 1D Yee line along +x.

    At the plane, the H node at ``index - 1`` (scattered field) and the E node at ``index`` (total
    field) get the incident field that their curl misses.

    Attributes:
        electric, magnetic: the incident E and H components (``"Ez"``/``"Hy"`` or ``"Ey"``/``"Hz"``).
        index: the TF/SF plane's integer node along x.
        length: nodes of the line.
        sign: sign of the curl terms along x: ``H += sign ch dE/dx``, ``E += sign ce dH/dx``.
        ce, ch: the line's update coefficients ``dt / (eps dx)`` and ``dt / (mu dx)`` (1/dx included).
        drive: ``drive[n]``, the incident E (V/m) at the line's start after step ``n``.
    """

    electric: str
    magnetic: str
    index: int
    length: int
    sign: float
    ce: float
    ch: float
    drive: list
