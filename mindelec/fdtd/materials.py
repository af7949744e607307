"""Materials and structures: what fills each cell of the grid.

* :class:`Medium` - permittivity (relative), conductivity (S/m), permeability (relative).
* :class:`Drude` and :class:`Lorentz` - dispersive media, one pole each, integrated by an
  auxiliary differential equation for the polarisation ``P`` (central differences).
* :class:`PEC` - a perfect electric conductor (as a structure's medium or as a boundary).
* :class:`Structure` - a ``common.geometry`` shape filled with a medium; later structures override
  earlier ones.
* :class:`AxialConductivity` - a conductivity acting on one E component only and added to the media
  already there: the resistive part of a lumped element (:mod:`mindelec.fdtd.lumped`).
* :func:`pec_sheet` - a zero-thickness PEC plate (or a one-cell wire) on the grid's node planes
  (:class:`PECSheet`: no sub-cell fill).
* :class:`DesignRegion` - an axis-aligned box whose cells take their permittivity from a tensor
  (one value per cell), typically one that requires grad for inverse design.

Frequency-domain conventions (used by :meth:`Medium.relative_permittivity`): fields vary as
``exp(+i omega t)`` (the convention of the monitors' DFT, ``F(omega) = sum f(t) exp(-i omega t) dt``), so
losses make the imaginary part of the permittivity negative.

Sub-cell averaging: each E component's permittivity and conductivity (and each H component's
permeability) is the fill-fraction-weighted arithmetic mean of the media covering its Yee cell,
the fill fractions coming from ``common.geometry.rasterize`` at that component's nodes; with
``Simulation(subpixel=True)`` the permittivity and the conductivity are smoothed instead
(:mod:`mindelec.fdtd.smoothing`).
"""

import math

import torch

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError
from common.units import VACUUM_PERMITTIVITY


def _parameter(value, name, owner, positive=True, allow_zero=False):
    """A float or a tensor (kept as is, so that it may require grad), checked for finiteness and sign."""
    if isinstance(value, torch.Tensor):
        if not value.is_floating_point():
            raise ArgumentTypeError(f"{owner}: {name} must be a floating-point tensor, got {value.dtype}")
        check = value.detach()
    else:
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ArgumentTypeError(
                f"{owner}: {name} must be a number or a tensor, got {type(value).__name__}"
            ) from None
        check = torch.tensor(value)
    checks.finite_cells(value, f"{owner}: {name}")
    if positive and bool((check < 0).any() if allow_zero else (check <= 0).any()):
        bound = "non-negative" if allow_zero else "positive"
        raise ConfigurationError(f"{owner}: {name} must be {bound}, got {value}")
    return value


class Medium:
    """A linear, isotropic, non-dispersive medium.

    Args:
        permittivity: relative permittivity (> 0; a negative value needs a dispersive medium,
            see :class:`Drude`). A float or a tensor (may require grad).
        conductivity: electric conductivity (S/m, >= 0).
        permeability: relative permeability (> 0).

    Raises:
        ValueError: for a non-positive permittivity or permeability or a negative conductivity.
        DataError: for a NaN or infinite value (naming the parameter and, for a tensor, the cell).
    """

    def __init__(self, permittivity=1.0, conductivity=0.0, permeability=1.0):
        owner = type(self).__name__
        self.permittivity = _parameter(permittivity, "permittivity", f"{owner}(permittivity={permittivity})")
        self.conductivity = _parameter(conductivity, "conductivity", owner, allow_zero=True)
        self.permeability = _parameter(permeability, "permeability", owner)

    def check_values(self, where=None):
        """Check the parameters again (a tensor may have been changed in place since construction).

        Args:
            where: how the caller names this medium, e.g. ``"structure 2 (Structure(...))"``.

        Raises:
            DataError: for a NaN or infinite value, naming ``where``, the parameter and the cell.
            ValueError: for a value of the wrong sign.
        """
        owner = type(self).__name__ if where is None else f"{where}: {type(self).__name__}"
        _parameter(self.permittivity, "permittivity", owner)
        _parameter(self.conductivity, "conductivity", owner, allow_zero=True)
        _parameter(self.permeability, "permeability", owner)

    def relative_permittivity(self, frequencies, dt=None):
        """Complex relative permittivity ``eps(f)`` at ``frequencies`` (Hz, tensor), ``exp(+i omega t)``.

        Args:
            frequencies: (Hz), a float or a tensor of any shape.
            dt: (s) or None. Given, the permittivity the FDTD update realises with this time step: its
                semi-implicit conductivity term, ``eps0 (E^{n+1} - E^n) / dt + sigma (E^{n+1} + E^n) / 2``,
                is ``(i omega~ eps0 + sigma cos(omega dt / 2)) E`` with ``omega~ = 2 sin(omega dt / 2) / dt``
                the Yee scheme's own frequency, so the conductivity counts as
                ``sigma (omega dt / 2) cot(omega dt / 2)`` (lower by ``(omega dt)^2 / 12``). Only for
                non-dispersive media.

        Returns:
            a complex128 tensor shaped like ``frequencies``.

        Raises:
            ConfigurationError: ``dt`` given for a dispersive medium, or not positive.
        """
        omega = 2 * math.pi * torch.as_tensor(frequencies, dtype=torch.float64)
        conductivity = self.conductivity / (omega * VACUUM_PERMITTIVITY)
        if dt is not None:
            if self._pole() is not None:
                raise ConfigurationError(
                    f"{self!r}: relative_permittivity(dt=...) is for non-dispersive media only"
                )
            if not dt > 0:
                raise ConfigurationError(f"{self!r}: relative_permittivity dt must be positive (s), got {dt}")
            half = omega * dt / 2
            conductivity = conductivity * half / torch.tan(half)
        return self.permittivity - 1j * conductivity + self._susceptibility(omega)

    def _susceptibility(self, omega):
        return torch.zeros_like(omega, dtype=torch.complex128)

    def _pole(self):
        """``(numerator, omega0^2, gamma)`` of ``chi = numerator / (omega0^2 - omega^2 + i gamma omega)``."""
        return None

    def __repr__(self):
        return (
            f"{type(self).__name__}(permittivity={self.permittivity}, conductivity={self.conductivity}, "
            f"permeability={self.permeability})"
        )


class Drude(Medium):
    """A Drude metal or plasma: ``eps(omega) = eps_inf - omega_p^2 / (omega^2 - i gamma omega)``.

    Args:
        plasma_frequency: ``omega_p / 2 pi`` (Hz).
        collision_frequency: ``gamma / 2 pi`` (Hz, >= 0).
        permittivity: ``eps_inf`` (> 0).
        conductivity, permeability: as :class:`Medium`.
    """

    def __init__(
        self, plasma_frequency, collision_frequency=0.0, permittivity=1.0, conductivity=0.0, permeability=1.0
    ):
        super().__init__(permittivity, conductivity, permeability)
        self.plasma_frequency = float(_parameter(plasma_frequency, "plasma_frequency", "Drude"))
        self.collision_frequency = float(
            _parameter(collision_frequency, "collision_frequency", "Drude", allow_zero=True)
        )

    def _pole(self):
        return ((2 * math.pi * self.plasma_frequency) ** 2, 0.0, 2 * math.pi * self.collision_frequency)

    def _susceptibility(self, omega):
        numerator, _, gamma = self._pole()
        return -numerator / (omega**2 - 1j * gamma * omega)

    def __repr__(self):
        return (
            f"Drude(plasma_frequency={self.plasma_frequency:g}, collision_frequency="
            f"{self.collision_frequency:g}, permittivity={self.permittivity})"
        )


class Lorentz(Medium):
    """A Lorentz oscillator medium.

    ``eps(omega) = eps_inf + d_eps omega_0^2 / (omega_0^2 - omega^2 + i gamma omega)``.

    Args:
        delta_permittivity: oscillator strength ``d_eps`` (> 0).
        resonance_frequency: ``omega_0 / 2 pi`` (Hz).
        damping_frequency: ``gamma / 2 pi`` (Hz, >= 0).
        permittivity: ``eps_inf`` (> 0).
        conductivity, permeability: as :class:`Medium`.
    """

    def __init__(
        self,
        delta_permittivity,
        resonance_frequency,
        damping_frequency=0.0,
        permittivity=1.0,
        conductivity=0.0,
        permeability=1.0,
    ):
        super().__init__(permittivity, conductivity, permeability)
        self.delta_permittivity = float(_parameter(delta_permittivity, "delta_permittivity", "Lorentz"))
        self.resonance_frequency = float(_parameter(resonance_frequency, "resonance_frequency", "Lorentz"))
        self.damping_frequency = float(
            _parameter(damping_frequency, "damping_frequency", "Lorentz", allow_zero=True)
        )

    def _pole(self):
        omega0 = 2 * math.pi * self.resonance_frequency
        return (self.delta_permittivity * omega0**2, omega0**2, 2 * math.pi * self.damping_frequency)

    def _susceptibility(self, omega):
        numerator, omega0_squared, gamma = self._pole()
        return numerator / (omega0_squared - omega**2 + 1j * gamma * omega)

    def __repr__(self):
        return (
            f"Lorentz(delta_permittivity={self.delta_permittivity:g}, resonance_frequency="
            f"{self.resonance_frequency:g}, damping_frequency={self.damping_frequency:g}, "
            f"permittivity={self.permittivity})"
        )


class PEC:
    """A perfect electric conductor: tangential E is zero on it.

    Used as a structure's medium (cells half covered or more have E = 0: a face on a node plane is drawn
    where it lies) or as a boundary
    (``boundary=PEC()``: the walls at ``+-size/2`` are perfect conductors).
    """

    def __repr__(self):
        return "PEC()"


class PECSheet(PEC):
    """The PEC of :func:`pec_sheet`: a node is covered when its own position lies in the shape.

    No sub-cell fill: the normal E nodes half a cell off a sheet stay untouched however many sheets meet
    near them (partly covered cells of several sheets would otherwise add up to a short). A conformal run
    (:mod:`mindelec.fdtd.conformal`) covers the edges and faces on the sheet by their exact overlap with
    it instead, from the zero-thickness rectangle ``center +- size / 2`` (m; one or two extents zero) that
    :func:`pec_sheet` records; without one (``None``) it keeps the nodes' containment.
    """

    def __init__(self, center=None, size=None):
        self.center = None if center is None else tuple(float(value) for value in center)
        self.size = None if size is None else tuple(float(value) for value in size)

    def check_plane(self, grid, name):
        """Refuse a sheet whose zero extents do not lie on the grid's integer node planes (where its
        tangential E nodes are), or a sheet in a 1D or 2D simulation; ``name`` names it in the error.

        Raises:
            ValueError: naming the sheet, the axis and the nearest node planes.
        """
        if self.center is None:
            return
        if grid.ndim != 3:
            raise ConfigurationError(f"{name}: a pec_sheet lies in a 3D simulation; this one is {grid.ndim}D")
        for axis in range(grid.ndim):
            if self.size[axis] != 0:
                continue
            spacing = grid.spacing[axis]
            offset = (self.center[axis] + grid.size[axis] / 2) / spacing
            if abs(offset - round(offset)) > 1e-6:
                below = -grid.size[axis] / 2 + math.floor(offset) * spacing
                raise ConfigurationError(
                    f"{name}: the sheet lies at {'xyz'[axis]} = {self.center[axis]:g} m, "
                    f"{offset - math.floor(offset):.3f} cells past the node plane {below:g} m; a zero extent "
                    f"must lie on a node plane (here {below:g} or {below + spacing:g} m)"
                )

    def __repr__(self):
        if self.center is None:
            return "PECSheet()"
        return f"PECSheet(center={self.center}, size={self.size})"


class AxialConductivity:
    """A conductivity along one axis only, added to whatever medium fills the cells.

    As a :class:`Structure`'s medium it adds ``fill * conductivity`` to the conductivity of the E
    component along ``axis`` (``fill`` the structure's fill fraction at that component's nodes) and
    leaves the other components, the permittivity and the permeability as the structures below made
    them. A box of length ``L`` along ``axis`` and cross-section ``A`` whose faces lie on the Yee cells of
    its edges is then a resistor of ``L / (conductivity A)`` ohm (:func:`mindelec.fdtd.lumped_resistor`).

    Args:
        axis: ``"x"``, ``"y"`` or ``"z"``.
        conductivity: (S/m, >= 0, finite).
    """

    def __init__(self, axis, conductivity):
        if axis not in ("x", "y", "z"):
            raise ConfigurationError(f"AxialConductivity: axis must be 'x', 'y' or 'z', got {axis!r}")
        self.axis = axis
        conductivity = _parameter(conductivity, "conductivity", "AxialConductivity", allow_zero=True)
        self.conductivity = float(conductivity)

    def __repr__(self):
        return f"AxialConductivity(axis={self.axis!r}, conductivity={self.conductivity:g})"


#: a thin axis of a PEC sheet becomes this many cells thick: the tangential E nodes on the sheet's node
#: plane lie inside, the normal E nodes half a cell away outside
SHEET_THICKNESS = 0.8
#: a sheet's in-plane edges move out by this many cells, so that the tangential E nodes on its rim (on
#: the boundary node lines) lie inside, and the nodes half a cell outside do not
SHEET_MARGIN = 0.25


def pec_sheet(center, size, cell_size):
    """A zero-thickness PEC plate (one zero extent) or a one-cell wire (two zero extents) as a structure.

    The plate lies on the integer-node plane through ``center`` (put it on one: ``-size_a/2 + i dx_a``),
    its rim on integer-node lines. It zeroes the tangential E components on its node plane, rim included,
    and leaves the normal component alone, as the classic FDTD models of microstrip do (Sheen et al.,
    IEEE MTT 38, 849, 1990). A wire (zero extent along two axes) zeroes the E edges along it. The shape is
    a box :data:`SHEET_THICKNESS` cells thick along the zero axes and :data:`SHEET_MARGIN` cells wider
    on each side along the others, filled with :class:`PECSheet` (a node is in or out by its position).
    With ``Simulation(subpixel=True)`` a rim between node lines is conformal instead: the edges and faces
    it crosses count the part off the sheet, and those across a free rim carry the edge singularity's
    factors (:mod:`mindelec.fdtd.sheet_rims`). A zero extent off the node planes, or a sheet in a 2D run,
    is refused when the simulation is built (:meth:`PECSheet.check_plane`).

    Args:
        center: (m), 3 coordinates.
        size: (m), 3 extents, one or two of them 0.
        cell_size: the simulation's cell size (m), one length or ``(dx, dy, dz)``.

    Returns:
        a :class:`Structure` of a ``common.geometry.Box`` filled with :class:`PECSheet`.

    Raises:
        ValueError: for a size without a zero extent or with three, or extents of the wrong length.
    """
    from common.geometry import Box

    center = tuple(float(value) for value in center)
    size = tuple(float(value) for value in size)
    cells = tuple(cell_size) if isinstance(cell_size, (tuple, list)) else (cell_size,) * 3
    if not len(center) == len(size) == len(cells) == 3:
        raise ConfigurationError(
            f"pec_sheet: center, size and cell_size need 3 values each, got {center}, {size}, {cells}"
        )
    zero_axes = sum(1 for extent in size if extent == 0)
    if zero_axes not in (1, 2) or any(extent < 0 for extent in size):
        raise ConfigurationError(
            f"pec_sheet: size {size} must have one zero extent (a plate) or two (a wire), the others positive"
        )
    half = [
        SHEET_THICKNESS * float(edge) / 2 if extent == 0 else extent / 2 + SHEET_MARGIN * float(edge)
        for extent, edge in zip(size, cells)
    ]
    lo = [c - h for c, h in zip(center, half)]
    hi = [c + h for c, h in zip(center, half)]
    return Structure(Box(lo, hi), PECSheet(center, size))


class Structure:
    """A shape filled with a medium.

    Args:
        geometry: a ``common.geometry`` shape (``Interval``, ``Rectangle``, ``Disk``, ``Box``, ``Sphere``,
            ``Cylinder``, ``Polygon`` or a CSG combination) of the simulation's dimension, in m.
        medium: a :class:`Medium` (or :class:`Drude`, :class:`Lorentz`), :class:`PEC` or
            :class:`AxialConductivity`.
        name: optional; how pictures (``Simulation.plot``) and ``repr`` name it, e.g. a CAD body's name
            (:mod:`mindelec.cad_assembly`).
    """

    def __init__(self, geometry, medium, name: str | None = None):
        if not hasattr(geometry, "contains"):
            raise ArgumentTypeError(
                f"Structure: geometry must be a common.geometry shape, got {type(geometry).__name__}"
            )
        if not isinstance(medium, (Medium, PEC, AxialConductivity)):
            raise ArgumentTypeError(
                "Structure: medium must be a Medium, Drude, Lorentz, PEC or AxialConductivity, "
                f"got {medium!r}"
            )
        self.geometry = geometry
        self.medium = medium
        self.name = None if name is None else str(name)

    def check(self, grid, name):
        """Refuse what the medium cannot be on ``grid``: NaN, infinite or wrongly signed values (a
        :class:`Medium`), a zero extent off the node planes (a :class:`PECSheet`); ``name`` names the
        structure in the error (DataError or ValueError)."""
        if isinstance(self.medium, Medium):
            self.medium.check_values(name)
        elif isinstance(self.medium, PECSheet):
            self.medium.check_plane(grid, name)

    def __repr__(self):
        named = "" if self.name is None else f", name={self.name!r}"
        return f"Structure({self.geometry!r}, {self.medium!r}{named})"


class DesignRegion:
    """An axis-aligned box of cells whose relative permittivity is given cell by cell.

    The design cells are the grid cells whose integer node (see :mod:`mindelec.fdtd.grid`) lies in
    ``center +- size/2``; every E component with that cell index takes the cell's value (exact for
    Ez in 1D and 2D TM; a half-cell shift for the in-plane components). The region overrides the
    permittivity of the structures below it; conductivity and permeability stay.

    Args:
        center: box centre (m), one value per dimension.
        size: box extent (m), one value per dimension.
        permittivity: tensor of shape ``(n_x[, n_y[, n_z]])`` (the number of design cells per axis,
            see :meth:`mindelec.fdtd.Grid.cell_counts`), relative permittivity (> 0); may
            require grad. Its values are checked here and again when a run starts (an optimiser may
            have changed them in place).

    Raises:
        TypeError: if the permittivity is not a floating-point tensor.
        DataError: for a NaN or infinite value (naming the region and the cell).
        ValueError: for a non-positive value.
    """

    def __init__(self, center, size, permittivity):
        if not isinstance(permittivity, torch.Tensor) or not permittivity.is_floating_point():
            raise ArgumentTypeError(
                "DesignRegion: permittivity must be a floating-point tensor (one value per cell)")
        self.center = tuple(float(value) for value in center)
        self.size = tuple(float(value) for value in size)
        self.permittivity = permittivity
        self.check_values()

    def check_values(self):
        """Refuse NaN, infinite or non-positive permittivities, naming the region and the first bad cell.

        Raises:
            DataError: a NaN or infinite value.
            ValueError: a value <= 0.
        """
        checks.finite_cells(self.permittivity, f"permittivity of {self!r}")
        bad = self.permittivity.detach() <= 0
        if bool(bad.any()):
            cell = tuple(int(index) for index in torch.nonzero(bad)[0])
            raise ConfigurationError(
                f"{self!r}: permittivity must be positive in every cell, got "
                f"{float(self.permittivity.detach()[cell])} at cell {cell}; a negative "
                "permittivity needs a dispersive medium (Drude, Lorentz)"
            )

    def __repr__(self):
        shape = tuple(self.permittivity.shape)
        return f"DesignRegion(center={self.center}, size={self.size}, permittivity=<tensor {shape}>)"
