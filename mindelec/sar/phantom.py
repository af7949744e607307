"""A flat phantom for FDTD and the SAR and absorbed power read from a run.

:class:`FlatPhantom` is the standards' flat phantom for system validation: a box of head tissue-simulating
liquid (:mod:`~mindelec.sar.tissue`) of finite lateral size whose bottom (the face towards the source, at
``z = surface``) and sides sit in a low-loss shell 2 mm thick (IEEE Std 1528-2013 and IEC/IEEE 62209-1528:
shell 2.0 +- 0.2 mm, relative permittivity below 5, loss tangent below 0.05; the top is the open liquid
surface). Its :meth:`~FlatPhantom.structures` go into a :class:`~mindelec.fdtd.Simulation`, its
:meth:`~FlatPhantom.monitor` records the E field over it, and after the run:

* :meth:`~FlatPhantom.local_sar` - the SAR of each grid cell of the liquid (W/kg per watt accepted), the
  cells being the voxels of :func:`~mindelec.sar.mass_averaged_sar`: each E component's ``|E|^2`` is the mean
  over the four Yee edges around the cell's centre (the edges on the liquid's faces included), times the
  liquid's conductivity.
* :meth:`~FlatPhantom.absorbed_power` - ``sum sigma |E|^2 / 2 dV`` over every Yee edge of the phantom, each
  with the conductivity the run gave it (liquid, shell, or their sub-cell mix), per watt accepted.

Normalisation: the monitor's DFT ``E(f)`` of a pulsed run and the port's accepted power density
``P(f) = Re(V conj(I))`` (:class:`~mindelec.fdtd.LumpedPort`) come from the same drive, so the peak phasor
of a continuous wave that delivers 1 W is ``E(f) sqrt(2 W / P(f))``.
"""

import dataclasses
import math

import torch

from common.errors import ConfigurationError
from common.units import VACUUM_PERMITTIVITY

from .averaging import local_sar, mass_averaged_sar
from .tissue import TISSUE_DENSITY, head_tissue

#: the shell's relative permittivity: the standards bound it (below 5) rather than fix it; 3.7 is a
#: typical value of the glass-fibre and PMMA shells in use
SHELL_PERMITTIVITY = 3.7
#: the shell's thickness (m), IEEE Std 1528 / IEC 62209: 2.0 mm
SHELL_THICKNESS = 2e-3
#: how far (in cells) a liquid face may sit from a grid node plane (the coordinates may be float32)
ALIGNMENT_TOLERANCE = 1e-3
E_FIELD = ("Ex", "Ey", "Ez")
#: an E component whose nodes are the grid's integer nodes along each axis
INTEGER_NODES = {"x": "Ey", "y": "Ez", "z": "Ex"}


@dataclasses.dataclass(frozen=True)
class FlatPhantom:
    """A flat phantom: head liquid in a 2 mm shell, its bottom (liquid) surface at ``z = surface``.

    Attributes:
        frequency: (Hz), selects the liquid's properties (:func:`~mindelec.sar.head_tissue`).
        surface: the z of the liquid's bottom surface (m); the shell lies below it, the source further below.
        size: the liquid's extent ``(length x, width y, depth z)`` (m).
        center: the liquid's lateral centre ``(x, y)`` (m).
        shell_thickness: (m), default :data:`SHELL_THICKNESS`.
        shell_permittivity: relative, default :data:`SHELL_PERMITTIVITY`.
        shell_loss_tangent: ``sigma / (omega eps)`` of the shell (default 0; the standards allow up to 0.05).
        density: the liquid's density (kg/m^3).
    """

    frequency: float
    surface: float
    size: tuple
    center: tuple = (0.0, 0.0)
    shell_thickness: float = SHELL_THICKNESS
    shell_permittivity: float = SHELL_PERMITTIVITY
    shell_loss_tangent: float = 0.0
    density: float = TISSUE_DENSITY

    def __post_init__(self):
        owner = f"FlatPhantom(surface={self.surface}, size={self.size})"
        if len(tuple(self.size)) != 3 or not all(math.isfinite(s) and s > 0 for s in self.size):
            raise ConfigurationError(f"{owner}: size needs 3 positive extents (m): length, width, depth")
        if len(tuple(self.center)) != 2:
            raise ConfigurationError(f"{owner}: center is the lateral centre (x, y) (m)")
        for name in ("shell_thickness", "shell_permittivity", "density"):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{owner}: {name} must be positive, got {value}")
        if not 0 <= float(self.shell_loss_tangent) < 1:
            raise ConfigurationError(f"{owner}: shell_loss_tangent must lie in [0, 1)")
        head_tissue(self.frequency)  # refuses frequencies outside the liquid's table

    @property
    def liquid(self):
        """The liquid's :class:`~mindelec.fdtd.Medium`."""
        return head_tissue(self.frequency)

    def liquid_box(self):
        """``(low corner, high corner)`` of the liquid (m), 3 coordinates each."""
        (x, y), (lx, ly, depth) = self.center, self.size
        return (x - lx / 2, y - ly / 2, self.surface), (x + lx / 2, y + ly / 2, self.surface + depth)

    def outer_box(self):
        """``(low corner, high corner)`` of the shell's outside (m): the liquid grown by the shell but at the
        open top."""
        (lo, hi), t = self.liquid_box(), self.shell_thickness
        return (lo[0] - t, lo[1] - t, lo[2] - t), (hi[0] + t, hi[1] + t, hi[2])

    def structures(self):
        """``[shell, liquid]``: :class:`~mindelec.fdtd.Structure` objects, the liquid after the shell."""
        from common.geometry import Box
        from mindelec.fdtd import Medium, Structure

        omega = 2 * math.pi * self.frequency
        shell_conductivity = omega * VACUUM_PERMITTIVITY * self.shell_permittivity * self.shell_loss_tangent
        shell = Medium(permittivity=self.shell_permittivity, conductivity=shell_conductivity)
        return [Structure(Box(*self.outer_box()), shell, name="phantom shell"),
                Structure(Box(*self.liquid_box()), self.liquid, name="phantom liquid")]

    def monitor(self, name, cell_size):
        """A :class:`~mindelec.fdtd.DFTMonitor` of Ex, Ey, Ez at ``frequency`` over the phantom grown by one
        cell (``cell_size``, m, one or 3 lengths) on each side: it holds every edge the shell touches."""
        from mindelec.fdtd import DFTMonitor

        cells = (cell_size,) * 3 if isinstance(cell_size, (int, float)) else tuple(cell_size)
        lo, hi = self.outer_box()
        lo, hi = [a - c for a, c in zip(lo, cells)], [b + c for b, c in zip(hi, cells)]
        center = tuple((a + b) / 2 for a, b in zip(lo, hi))
        size = tuple(b - a for a, b in zip(lo, hi))
        return DFTMonitor(name, [self.frequency], E_FIELD, center=center, size=size)

    def _fields_per_watt(self, result, name, accepted_power):
        """The monitor's E DFTs scaled to the peak phasors of a 1 W continuous drive; their coordinates."""
        accepted = float(torch.as_tensor(accepted_power).reshape(-1)[0])
        if not (math.isfinite(accepted) and accepted > 0):
            raise ConfigurationError(
                f"{self!r}: accepted_power must be positive (the port's accepted power), got {accepted}"
            )
        output = result[name]
        scale = math.sqrt(2.0 / accepted)
        return {c: output[c][0] * scale for c in E_FIELD}, output["coordinates"]

    def _check_grid(self, spacing, coordinates):
        """Refuse a liquid whose faces are not on the grid's node planes (the voxels are the grid's cells)."""
        lo, hi = self.liquid_box()
        for a, axis in enumerate("xyz"):
            nodes = coordinates[INTEGER_NODES[axis]][axis]
            for face in (lo[a], hi[a]):
                offset = (face - float(nodes[0])) / spacing[a]
                if abs(offset - round(offset)) > ALIGNMENT_TOLERANCE:
                    raise ConfigurationError(
                        f"{self!r}: its liquid face at {axis} = {face:.6g} m is not on a node plane of the "
                        f"grid (spacing {spacing[a]:.6g} m): the SAR voxels are the grid's cells"
                    )

    def local_sar(self, result, name, accepted_power, spacing):
        """The SAR of each cell of the liquid per watt accepted (module docstring).

        Args:
            result: the run's :class:`~mindelec.fdtd.Result`; ``name``: the key of :meth:`monitor`'s output.
            accepted_power: the port's ``"accepted_power"`` at the frequency (a number or a 1-element tensor).
            spacing: the grid's cell ``(dx, dy, dz)`` (m), e.g. ``sim.grid.spacing``.

        Returns:
            ``(sar, origin)``: ``(nx, ny, nz)`` float64 tensor (W/kg per W), and the low corner of its voxel
            ``(0, 0, 0)`` (m), for :func:`~mindelec.sar.mass_averaged_sar`.
        """
        fields, coordinates = self._fields_per_watt(result, name, accepted_power)
        spacing = tuple(float(h) for h in spacing)
        self._check_grid(spacing, coordinates)
        lo, hi = self.liquid_box()
        magnitudes = []  # per component, the root of the cell mean of |E|^2
        for a, component in enumerate(E_FIELD):
            index = []
            for b, axis in enumerate("xyz"):
                positions = coordinates[component][axis].double()
                tolerance = ALIGNMENT_TOLERANCE * spacing[b]
                inside = (positions >= lo[b] - tolerance) & (positions <= hi[b] + tolerance)
                index.append(torch.nonzero(inside).reshape(-1))
            values = fields[component][torch.meshgrid(*index, indexing="ij")].abs() ** 2
            for b in range(3):  # the mean of the two edges either side of the cell centre across the edge
                if b != a:
                    count = values.shape[b] - 1
                    values = (values.narrow(b, 0, count) + values.narrow(b, 1, count)) / 2
            magnitudes.append(values.sqrt())
        return local_sar(torch.stack(magnitudes), self.liquid.conductivity, self.density), lo

    def peak_average_sar(self, sar, origin, spacing, grams=(1, 10)):
        """The peak spatial-average SAR of a :meth:`local_sar` map over cubes of each mass in ``grams``.

        Args:
            sar, origin: :meth:`local_sar`'s map ``(nx, ny, nz)`` (W/kg per W) and its low corner (m).
            spacing: the grid's cell ``(dx, dy, dz)`` (m). grams: the cube masses (g; the standards' 1, 10).

        Returns:
            ``{grams: CubeAverage}`` (:func:`~mindelec.sar.mass_averaged_sar` at the liquid's density).
        """
        return {mass: mass_averaged_sar(sar, spacing, mass * 1e-3, self.density, origin=origin)
                for mass in grams}

    def absorbed_power(self, sim, result, name, accepted_power):
        """The power absorbed in the phantom per watt accepted: ``sum sigma |E|^2 / 2 dV`` over the Yee edges
        in :meth:`monitor`'s box (W/W), with each edge's conductivity as ``sim`` mixed it."""
        from mindelec.fdtd.coefficients import media_mixer

        fields, _ = self._fields_per_watt(result, name, accepted_power)
        monitor = next(m for m in sim.monitors if m.name == name)
        mixer = media_mixer(sim.grid, sim.default_medium, self.structures(), torch.float64, "cpu")
        volume = math.prod(sim.grid.spacing)
        total = 0.0
        for component in E_FIELD:
            conductivity = mixer.mix(mixer.weights(component), "conductivity")
            slices = sim.grid.index_range(monitor.center, monitor.size, component, repr(monitor))
            sigma = torch.as_tensor(conductivity, dtype=torch.float64).broadcast_to(sim.grid.shape)[slices]
            total = total + float((sigma * fields[component].abs() ** 2).sum()) * volume / 2
        return total

    def __repr__(self):
        return f"FlatPhantom(frequency={self.frequency:g}, surface={self.surface:g}, size={self.size})"
