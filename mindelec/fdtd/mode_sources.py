"""Mode sources: one waveguide mode launched one way through a cross-section of an FDTD grid.

A :class:`CrossSection` is the plane ``x = const`` of a 3D simulation (or the line ``x = const``
of a 2D one) with the permittivity the FDTD uses on it, read from the simulation's own update
coefficients (so the mode solver of :mod:`mindelec.modes` sees exactly the FDTD's sub-cell
averages). :class:`ModeSource` injects one of its modes, travelling towards ``+x`` or ``-x``, by the
equivalence principle (as Meep's ``EigenModeSource`` and Tidy3D's ``ModeSource``): an electric
current sheet ``J = n x H`` on the E plane and a magnetic one ``M = -n x E`` on the neighbouring H
plane (a total-field/scattered-field boundary for the mode). With ``n`` the direction of travel
(plane at integer node ``i``; H sheet at half node ``i - 1`` for ``+x``, ``i`` for ``-x``)::

    J_y = -H_z(y, z) f(t + tau) / dx,   J_z = H_y f(t + tau) / dx,
    M_y = s E_z f(t) / dx,              M_z = -s E_y f(t) / dx,       s = +1 (+x) or -1 (-x)

with ``(E, H)`` the forward mode at the source's centre frequency (1 W) and ``tau = kappa dx / (2 omega)``
the half-cell delay of the H sheet (``kappa`` the Yee grid's wavenumber). The incident field on the E
plane is ``E_mode f(t)``: per frequency, the forward amplitude there is the DFT of the waveform
(:meth:`ModeSource.spectrum`), which :class:`~mindelec.fdtd.mode_monitors.ModeMonitor` amplitudes
are divided by (``normalize=``) to give the broadband response of one run. The profile is the
centre frequency's; the mode's change of shape over the band leaks a little power backwards and
into other modes, which mode monitors do not count.

Only cross-sections normal to ``x`` are supported; the FDTD's walls along ``y`` and ``z`` should
be PEC (the mode solver's boundary) or far enough from a dielectric guide that the mode has decayed.

In 3D the plane may cut through PEC (:class:`~mindelec.fdtd.PEC` structures, :func:`~mindelec.fdtd.pec_sheet`
strips): a transmission line's strips, grounds and coax conductors. The mode solver then pins the very E
nodes the FDTD zeroes on the plane (its staircase of the metal, :attr:`CrossSection.conductor`), so the
launched mode is the FDTD line's own, and :meth:`CrossSection.impedance` gives the line's characteristic
impedance (:mod:`mindelec.line_impedance`).
"""

from __future__ import annotations

import math

import torch

from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT, VACUUM_PERMITTIVITY

from .. import conductors, line_impedance
from .. import modes as mode_solvers
from .coefficients import update_coefficients
from .grid import ACTIVE_COMPONENTS, E_COMPONENTS, Grid
from .materials import PEC, AxialConductivity, Drude, Lorentz, Medium
from .sources import CurrentSource

__all__ = ["CrossSection", "ModeSource", "mode_amplitudes"]


class CrossSection:
    """The plane (3D) or line (2D) ``x = position`` of a simulation, with the FDTD's permittivity on it.

    Args:
        position: x (m); snapped to the nearest integer node ``index`` (attribute ``position``).
        size, cell_size, structures, default_medium, polarization: as for
            :class:`~mindelec.fdtd.Simulation` (the same values as the simulation the mode serves).

    Attributes:
        grid: the simulation's :class:`Grid`.
        index: the integer node along x of the plane (E_y, E_z live there).
        permittivity: (3, ny, nz) (3D) or (3, ny) (2D) float64 tensor, the relative permittivity at
            the E_x, E_y, E_z nodes of the plane (components a 2D polarization lacks copy one it has; 1
            on PEC nodes).
        conductor: (3, ny, nz) bool tensor, the E_x, E_y, E_z nodes of the plane that PEC zeroes in the
            FDTD, or None where no metal crosses the plane.
        polarization: ``None`` in 3D, ``"TM"`` or ``"TE"`` in 2D.

    Raises:
        ConfigurationError: a 1D simulation, a plane outside the domain or on its first/last node,
            lossy or dispersive media on the plane, or metal on a 2D simulation's line, naming the
            structures.
    """

    def __init__(self, position, size, cell_size, structures=(), default_medium=None, polarization="TM"):
        self._arguments = dict(
            size=size,
            cell_size=cell_size,
            structures=structures,
            default_medium=default_medium,
            polarization=polarization,
        )
        self.grid = Grid(size, cell_size)
        if self.grid.ndim == 1:
            raise ConfigurationError(
                "CrossSection: a mode needs a 2D or 3D simulation (a 1D one has no cross-section)"
            )
        self.polarization = None if self.grid.ndim == 3 else polarization
        self.position = float(position)
        half = self.grid.size[0] / 2
        index = round((self.position + half) / self.grid.spacing[0])
        if not 1 <= index <= self.grid.shape[0] - 2:
            raise ConfigurationError(
                f"CrossSection: x = {self.position:g} m must lie inside the domain [-{half:g}, {half:g}] m, "
                "at least one cell from its ends"
            )
        self.index = index
        self.position = -half + index * self.grid.spacing[0]  # snapped to the node
        self.active = ACTIVE_COMPONENTS[(self.grid.ndim, self.polarization)]
        medium = Medium() if default_medium is None else default_medium
        electric, _ = update_coefficients(
            self.grid, self.active, 1.0, medium, tuple(structures), [], torch.float64, "cpu"
        )
        self.permittivity, self.conductor = self._plane_media(electric)

    def _plane_media(self, electric):
        """``(permittivity, conductor)`` on the plane (the attributes), refusing what modes cannot take."""
        planes, metal = {}, {}
        for component in E_COMPONENTS:
            if component not in electric:
                continue
            ca, cb, poles = electric[component]
            ca, cb = (torch.as_tensor(value, dtype=torch.float64).expand(self.grid.shape)[self.index]
                      for value in (ca, cb))
            if any(bool((torch.as_tensor(pole[2]).expand(self.grid.shape)[self.index] != 0).any())
                   for pole in poles):
                self._refuse("dispersive", "its permittivity depends on frequency (Drude or Lorentz poles)")
            pec = cb <= 0
            if self.grid.ndim != 3 and bool(pec.any()):
                self._refuse("metal", "the 2D (line) mode solver takes no metal; model metal walls around a "
                             "port by the simulation's PEC boundary, or use a 3D simulation")
            if not bool((ca[~pec] == 1.0).all()):
                self._refuse("lossy", "a conductivity makes its modes lossy (complex n_eff)")
            planes[component] = torch.where(pec, 1.0, 1.0 / (VACUUM_PERMITTIVITY * cb.clamp_min(1e-300)))
            metal[component] = pec
        present = next(iter(planes.values()))
        stacked = torch.stack([planes.get(component, present) for component in E_COMPONENTS])
        if self.grid.ndim != 3:
            return stacked[..., 0], None
        conductor = torch.stack([metal[component] for component in E_COMPONENTS])
        return stacked, (conductor if bool(conductor.any()) else None)

    def _refuse(self, kind, why):
        """ConfigurationError naming what on the plane is ``kind`` ("metal", "lossy", "dispersive")."""
        def is_kind(medium):
            if kind == "metal":
                return isinstance(medium, PEC)
            if kind == "dispersive":
                return isinstance(medium, Drude | Lorentz)
            return isinstance(medium, AxialConductivity) or getattr(medium, "conductivity", 0.0) != 0.0

        culprits = [f"structure {number} ({structure.medium!r})"
                    for number, structure in enumerate(self._arguments["structures"])
                    if is_kind(structure.medium) and self._crosses(structure.geometry)]
        medium = self._arguments["default_medium"]
        if medium is not None and is_kind(medium):
            culprits.append(f"the default medium ({medium!r})")
        named = ", ".join(culprits) or f"a {kind} medium"
        raise ConfigurationError(
            f"CrossSection at x = {self.position:g} m: {named} crosses the plane and is {kind}: {why}. A "
            "mode source or monitor needs a lossless, non-dispersive cross-section (the port's modes are "
            "real), with metal only in 3D; move the port to where that holds")

    def _crosses(self, geometry):
        try:
            lower, upper = geometry.bounds_float64
        except (AttributeError, NotImplementedError):
            return True
        spacing = self.spacing
        return float(lower[0]) - spacing <= self.position <= float(upper[0]) + spacing

    def shifted(self, cells) -> CrossSection:
        """The cross-section ``cells`` (an int, either sign) nodes further along x, of the same simulation."""
        return CrossSection(self.position + int(cells) * self.spacing, **self._arguments)

    @property
    def spacing(self):
        """``dx`` (m), the spacing along the propagation axis."""
        return self.grid.spacing[0]

    def modes(self, frequency, num_modes=1) -> mode_solvers.Modes:
        """The modes of the plane at ``frequency`` (Hz): :func:`mindelec.modes.cross_section_modes` (3D)
        or :func:`mindelec.modes.line_modes` (2D) on the FDTD's permittivity."""
        if self.grid.ndim == 3:
            return mode_solvers.cross_section_modes(
                self.permittivity, self.grid.spacing[1:], frequency, num_modes, conductor=self.conductor
            )
        return mode_solvers.line_modes(
            self.permittivity, self.grid.spacing[1], frequency, self.polarization, num_modes=num_modes
        )

    def mode(self, frequency, mode_index=0):
        """``(E, H, kappa)``: mode ``mode_index``'s real (3, ...) fields (V/m, A/m) and its Yee wavenumber
        ``kappa`` (rad/m, from ``2 sin(kappa dx / 2) / dx = beta``) at ``frequency`` (Hz).

        Raises:
            ConfigurationError: the mode is not guided (complex ``n_eff``) or does not fit the grid.
        """
        solved = self.modes(frequency, mode_index + 1)
        index = complex(solved.effective_index[mode_index])
        beta = index.real * 2 * math.pi * frequency / SPEED_OF_LIGHT
        if abs(index.imag) > 1e-6 * abs(index) or index.real <= 0 or beta * self.spacing / 2 >= 1:
            raise ConfigurationError(
                f"CrossSection at x = {self.position:g} m: mode {mode_index} at {frequency:.6g} Hz has "
                f"n_eff = {index:.6g}; a mode source or monitor needs a guided (real n_eff) mode "
                "that the grid resolves"
            )
        kappa = 2.0 / self.spacing * math.asin(beta * self.spacing / 2)
        return solved.electric[mode_index].real, solved.magnetic[mode_index].real, kappa

    @property
    def has_return_conductor(self) -> bool:
        """Whether metal on the plane is joined to its walls (a ground plane, a shield), so the line has a
        return conductor of its own besides the mode solver's PEC walls (False without metal)."""
        if self.conductor is None:
            return False
        labels = conductors.conductor_labels(self.conductor.numpy())
        return bool((labels[1:-1, 1:-1] == 0).any())

    def impedance(self, frequency, mode_index=0, owner=None, **paths) -> line_impedance.LineImpedance:
        """Voltage, current, power and characteristic impedances of mode ``mode_index`` at ``frequency``
        (Hz): :func:`mindelec.line_impedance.mode_impedance` on the plane's metal (``paths``: ``signal``,
        ``voltage_path``, ``current_contour`` in the plane's integer (y, z) nodes; ``owner``: the name the
        errors give, default this cross-section).

        Raises:
            ConfigurationError: no metal crosses the plane (no line), or as ``mode_impedance`` (no signal
                conductor apart from the ground, several without ``signal``, a bad path).
        """
        owner = repr(self) if owner is None else owner
        if self.conductor is None:
            raise ConfigurationError(
                f"{owner}: no metal crosses the plane; a characteristic impedance (a voltage path, a current "
                "contour) needs a transmission line's conductors (PEC structures or pec_sheet strips through "
                "the port)"
            )
        modes = self.modes(frequency, mode_index + 1)
        return line_impedance.mode_impedance(modes, mode_index, owner=owner, **paths)

    def __repr__(self):
        return f"CrossSection(x={self.position:g} m, index={self.index}, grid={tuple(self.grid.shape)})"


def mode_amplitudes(electric, magnetic, mode_electric, mode_magnetic, area):
    """``(forward, backward)``: the amplitudes of a mode (1 W, real transverse fields) in a field on
    the same plane, ``(X + Y) / 4`` and ``(X - Y) / 4`` with ``X = sum (E x H_m) . x dA`` and
    ``Y = sum (E_m x H) . x dA``.

    Args:
        electric, magnetic: (3, ...) complex tensors, the field's (E_x, E_y, E_z) and (H_x, H_y, H_z)
            on the plane's nodes (V/m, A/m); the x components are not used.
        mode_electric, mode_magnetic: the mode's, of the same shape.
        area: the area (m^2; m in 2D) of one node of the plane.
    """
    overlap_x = (electric[1] * mode_magnetic[2] - electric[2] * mode_magnetic[1]).sum() * area
    overlap_y = (mode_electric[1] * magnetic[2] - mode_electric[2] * magnetic[1]).sum() * area
    return (overlap_x + overlap_y) / 4, (overlap_x - overlap_y) / 4


class _Shifted:
    """``waveform(t + delay)``, keeping the waveform's spectrum limit for the simulation's checks."""

    def __init__(self, waveform, delay):
        self.waveform, self.delay = waveform, float(delay)

    def __call__(self, times):
        return self.waveform(times + self.delay)

    def spectrum_limit(self, *args, **kwargs):
        return self.waveform.spectrum_limit(*args, **kwargs)

    def __repr__(self):
        return f"{self.waveform!r} advanced by {self.delay:.4g} s"


class _Profile:
    """A current-density profile (the slice's shape): ``profile * waveform(times)`` gives the per-step
    tensors the Yee stepper subtracts (its ``values[step]``)."""

    def __init__(self, profile):
        self.profile = profile

    def __mul__(self, series):
        return _ProfileSeries(self.profile, series)


class _ProfileSeries:
    def __init__(self, profile, series):
        self.profile, self.series = profile, [float(value) for value in series]

    def tolist(self):
        return self

    def __len__(self):
        return len(self.series)

    def __getitem__(self, step):
        return self.profile * self.series[step]


class _SheetCurrent(CurrentSource):
    """One component of a mode source: a current sheet with a profile on the plane ``x = index``."""

    def __init__(self, component, waveform, index, profile, owner):
        super().__init__(component, waveform, center=(0.0,) * (profile.dim() + 1))
        self.index, self.profile, self.owner = index, profile, owner

    def bind(self, grid, polarization):
        if self.component not in ACTIVE_COMPONENTS[(grid.ndim, polarization)]:
            raise ConfigurationError(f"{self.owner!r}: component {self.component} is not simulated")
        expected = tuple(grid.shape[1:3])
        profile = self.profile.reshape((1,) + expected) if grid.ndim == 3 else self.profile[None, :, None]
        if tuple(profile.shape[1:]) != expected:
            raise ConfigurationError(f"{self.owner!r}: its cross-section does not belong to this grid")
        slices = (slice(self.index, self.index + 1), slice(0, expected[0]), slice(0, expected[1]))
        return slices, _Profile(profile)

    def __repr__(self):
        return f"{self.component} sheet of {self.owner!r}"


class ModeSource:
    """Launches one mode of a :class:`CrossSection` towards ``+x`` or ``-x`` (module docstring).

    Pass its :attr:`currents` among a simulation's sources: ``Simulation(..., sources=[*source.currents])``.

    Args:
        cross_section: the :class:`CrossSection` (of the same grid and structures as the simulation).
        waveform: e.g. :class:`~mindelec.fdtd.GaussianPulse`; the incident mode's amplitude on the plane
            is ``waveform(t)`` (the mode carrying ``|waveform|^2`` W, or W/m in 2D).
        direction: ``+1`` (towards +x) or ``-1``.
        mode_index: 0 for the fundamental mode, 1 for the next, ...
        frequency: the frequency (Hz) of the mode profile; default the waveform's ``f0``.

    Raises:
        ConfigurationError: a bad direction, no frequency, a mode that is not guided.
    """

    def __init__(self, cross_section, waveform, direction=1, mode_index=0, frequency=None):
        if direction not in (1, -1):
            raise ConfigurationError(f"ModeSource: direction must be +1 or -1, got {direction!r}")
        frequency = getattr(waveform, "f0", None) if frequency is None else frequency
        if frequency is None:
            raise ConfigurationError("ModeSource: give frequency= (Hz); the waveform has no f0")
        self.cross_section, self.waveform = cross_section, waveform
        self.direction, self.mode_index, self.frequency = direction, int(mode_index), float(frequency)
        electric, magnetic, kappa = cross_section.mode(self.frequency, self.mode_index)
        self._electric, self._magnetic = electric, magnetic
        dx = cross_section.spacing
        delayed = _Shifted(waveform, kappa * dx / (2 * 2 * math.pi * self.frequency))
        e_plane = cross_section.index
        h_plane = e_plane - 1 if direction == 1 else e_plane
        sheets = {
            "Ey": (delayed, e_plane, -magnetic[2] / dx),
            "Ez": (delayed, e_plane, magnetic[1] / dx),
            "Hy": (waveform, h_plane, direction * electric[2] / dx),
            "Hz": (waveform, h_plane, -direction * electric[1] / dx),
        }
        self.currents = tuple(
            _SheetCurrent(component, *sheets[component], owner=self)
            for component in sheets
            if component in cross_section.active
        )

    def spectrum(self, frequencies, dt, steps):
        """(F,) complex128: the forward amplitude of the mode (as solved at each frequency) that the source
        launches on its plane, per frequency: the DFT ``sum_n f(t_n) exp(-i omega t_n) dt`` over the E
        sample times ``t_n = (n + 1) dt`` of a run of ``steps`` steps (as
        :class:`~mindelec.fdtd.DFTMonitor` transforms fields), times the forward overlap of the injected
        centre-frequency profile with the mode at that frequency (1 where the profile does not change).
        Divide a :class:`~mindelec.fdtd.ModeMonitor`'s amplitudes by it for the response to a unit
        incident mode."""
        times = (torch.arange(steps, dtype=torch.float64) + 1.0) * dt
        frequencies = torch.as_tensor(frequencies, dtype=torch.float64).reshape(-1)
        omega = 2 * math.pi * frequencies.reshape(-1, 1)
        values = self.waveform(times).to(torch.float64)
        transform = (values * torch.exp(-1j * omega * times)).sum(-1) * dt
        area = math.prod(self.cross_section.grid.spacing[1 : self.cross_section.grid.ndim])
        overlaps = []
        for frequency in frequencies.tolist():
            numerical = math.sin(math.pi * frequency * dt) / (math.pi * dt)
            mode_electric, mode_magnetic, _ = self.cross_section.mode(numerical, self.mode_index)
            overlaps.append(
                mode_amplitudes(self._electric, self._magnetic, mode_electric, mode_magnetic, area)[0]
            )
        return transform * torch.stack(overlaps)

    def __repr__(self):
        sign = "+" if self.direction == 1 else "-"
        return f"ModeSource(mode {self.mode_index} towards {sign}x at {self.cross_section!r})"
