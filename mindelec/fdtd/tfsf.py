"""Total-field/scattered-field (TF/SF) box: a plane wave of any direction and polarisation (2D and 3D).

Inside a :class:`TFSFBox` the fields are total fields (incident plus scattered), outside it scattered fields
only, so a structure inside the box scatters a plane wave, and what leaves the box is what it scattered.
The standard consistency conditions (Taflove and Hagness, *Computational Electrodynamics*, ch. 5) add, to
each update whose curl reaches across the box's surface, the incident field its neighbour on the other side
lacks (total-field nodes) or has too much of (scattered-field nodes). The total-field region holds the E
and H nodes on or inside the closed box spanned by the integer nodes ``lo_a .. hi_a`` along each axis, so
an E component tangential to a face on that face is a total field.

The incident field is the grid's own discrete plane wave, not the continuum one: for each frequency of the
incident pulse the wavenumber ``k`` along the direction ``u`` solves Yee's dispersion relation
``sum_a (sin(k u_a dx_a / 2) / dx_a)^2 = (sin(omega dt / 2) / (v dt))^2``, and the fields satisfy the
discrete Maxwell relations ``H = kappa x E / eta`` with ``kappa`` the unit vector of
``(2 / dx_a) sin(k u_a dx_a / 2)`` and E perpendicular to it (the polarisation is projected, frequency by
frequency, on the plane normal to ``kappa``; it differs from the one asked for by ``O((k dx)^2)`` off the
axes). Such a field satisfies the update equations exactly, so a box with nothing in it leaks only
round-off and the interpolation error below (an analytic field propagator, as Tan and Potter's, IEEE TAP
2010, with the dispersion relation solved in the frequency domain): every field depends on the position
only through ``d = u . r``, so a table of each incident component at every step on ``d`` sampled four
times per cell (one inverse FFT per sample of ``d``) is read at each face node by cubic Lagrange
interpolation. On an axis the nodes fall on the table's samples and the interpolation is exact.

The per-step cost is a few gathers and one ``index_add_`` per (updated component, incident component)
pair over the nodes next to the box's faces, after the compiled kernel's or torch's bulk update. The
table holds ``steps x samples`` values per field component (e.g. 6 x 4000 x 400 floats, 38 MB in 3D
float32), counted by :func:`mindelec.fdtd.limits.memory_estimate`.
"""

import math

import numpy as np
import torch

from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT, VACUUM_IMPEDANCE

from .boundaries import PML
from .flux_box import _box_nodes
from .grid import ACTIVE_COMPONENTS, AXES
from .updates import curl_terms

#: samples of the incident table per cell along the propagation direction (cubic interpolation)
TABLE_SAMPLES_PER_CELL = 4
#: a monitored frequency whose incident amplitude is below this fraction of the spectrum's peak is refused
SPECTRUM_FLOOR = 1e-3

__all__ = ["TFSFBox", "direction_from_angles"]


def direction_from_angles(theta, phi):
    """The unit vector ``(sin theta cos phi, sin theta sin phi, cos theta)``: ``theta`` (rad) from +z,
    ``phi`` (rad) from +x in the xy plane (2D runs take ``theta = pi/2``)."""
    theta, phi = float(theta), float(phi)
    return (math.sin(theta) * math.cos(phi), math.sin(theta) * math.sin(phi), math.cos(theta))


def _unit_vector(value, owner, what):
    """``value`` (2 or 3 finite numbers, not all zero) normalised to a float64 3-vector; ConfigurationError
    naming ``owner`` otherwise."""
    vector = np.zeros(3)
    try:
        values = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        values = np.array([np.nan])
    if values.size not in (2, 3) or not np.all(np.isfinite(values)):
        raise ConfigurationError(f"{owner}: {what} must be 2 or 3 finite numbers, got {value!r}")
    vector[: values.size] = values
    length = float(np.linalg.norm(vector))
    if length < 1e-12 * max(1.0, float(np.abs(values).max())) or length == 0:
        raise ConfigurationError(f"{owner}: {what} must be a non-zero vector, got {value!r}")
    return vector / length


class TFSFBox:
    """A plane wave injected through the faces of a box (TF/SF, module docstring), 2D (TM or TE) and 3D.

    The incident electric field is ``amplitude * waveform(t) * polarization`` (V/m) on the plane normal to
    ``direction`` two cells upstream of the box's first corner, and travels along ``direction`` with the
    grid's own dispersion. The box must lie in the default medium (non-dispersive and lossless), outside
    the PML, and every structure must lie wholly inside it (or wholly outside), a cell clear of its faces.
    Measure what the structures scatter and absorb with :class:`~mindelec.fdtd.CrossSectionMonitor`.

    Args:
        center: (m), one coordinate per dimension.
        size: (m), one positive extent per dimension; the faces sit on the nearest integer nodes.
        direction: vector of propagation (normalised here), 3 numbers or 2 (then z = 0; a 2D run needs
            z = 0), e.g. ``direction_from_angles(theta, phi)``.
        polarization: vector of the incident E (normalised here), perpendicular to ``direction``. Default:
            2D TM ``z``; 2D TE ``z x direction`` (so that H is along +z); 3D ``z`` made perpendicular to the
            direction (``x`` for propagation along z).
        waveform: a callable of times (s), e.g. :class:`GaussianPulse`.
        amplitude: incident field (V/m) at the reference plane.

    Raises:
        ConfigurationError: naming the box, for a direction or polarisation that is zero, not finite or not
            2 or 3 numbers, or a polarisation not perpendicular to the direction (here); for a box that does
            not fit the grid, in the PML, in a dispersive or lossy medium, crossed by a structure, or a 1D run
            (when bound).
    """

    def __init__(self, center, size, direction, polarization=None, waveform=None, amplitude=1.0):
        self.center = tuple(float(value) for value in center)
        self.size = tuple(float(value) for value in size)
        if not callable(waveform):
            raise ConfigurationError(
                f"{self!r}: waveform must be callable on a tensor of times, got {waveform!r}"
            )
        self.waveform = waveform
        self.direction = tuple(float(v) for v in _unit_vector(direction, repr(self), "direction"))
        self.polarization = None
        if polarization is not None:
            vector = _unit_vector(polarization, repr(self), "polarization")
            if abs(float(vector @ np.array(self.direction))) > 1e-6:
                raise ConfigurationError(
                    f"{self!r}: polarization {tuple(vector)} is not perpendicular to direction "
                    f"{self.direction} (dot product {float(vector @ np.array(self.direction)):.3g})"
                )
            self.polarization = tuple(float(v) for v in vector)
        self.amplitude = float(amplitude)

    def __repr__(self):
        direction = getattr(self, "direction", None)
        return f"TFSFBox(center={self.center}, size={self.size}, direction={direction})"

    def _resolved_polarization(self, ndim, polarization):
        """The E unit vector for this run (the default of the docstring), checked against the 2D mode."""
        direction = np.array(self.direction)
        vector = None if self.polarization is None else np.array(self.polarization)
        if ndim == 2 and polarization == "TM":
            vector = np.array([0.0, 0.0, 1.0]) if vector is None else vector
            if abs(abs(vector[2]) - 1) > 1e-6:
                raise ConfigurationError(
                    f"{self!r}: a 2D TM run carries Ez only; the polarization must be ±z"
                )
        elif ndim == 2:
            vector = np.cross([0.0, 0.0, 1.0], direction) if vector is None else vector
            if abs(vector[2]) > 1e-6:
                raise ConfigurationError(f"{self!r}: a 2D TE run carries Ex, Ey only; the polarization must "
                                         "lie in the xy plane")
        elif vector is None:
            axis = np.array([0.0, 0.0, 1.0]) if abs(direction[2]) < 0.99 else np.array([1.0, 0.0, 0.0])
            vector = axis - (axis @ direction) * direction
            vector /= np.linalg.norm(vector)
        return vector

    def bind(self, grid, polarization, boundaries, medium, structures):
        """Check this box against a simulation's set-up; returns its :class:`BoundTFSF`."""
        owner = repr(self)
        if grid.ndim < 2:
            raise ConfigurationError(f"{owner}: a TF/SF box needs a 2D or 3D simulation; use PlaneWave in 1D")
        if grid.ndim == 2 and abs(self.direction[2]) > 1e-9:
            raise ConfigurationError(f"{owner}: in 2D the direction must lie in the xy plane (z = 0)")
        nodes = _box_nodes(grid, self.center, self.size, owner)
        for axis, (low, high) in enumerate(nodes):
            cells = boundaries[axis].thickness if isinstance(boundaries[axis], PML) else 0
            if cells and (low - 1 < cells or high > grid.shape[axis] - cells - 1):
                raise ConfigurationError(
                    f"{owner} reaches into the PML along {AXES[axis]}: faces lie on nodes {low} and {high}, "
                    f"the corrections half a cell outside them, the PML covers cells 0..{cells - 1} and "
                    f"{grid.shape[axis] - cells}..{grid.shape[axis] - 1}; shrink it or make the domain larger"
                )
        values = [getattr(medium, name) for name in ("permittivity", "conductivity", "permeability")]
        if medium._pole() is not None or not all(isinstance(v, float) for v in values) or values[1] != 0:
            raise ConfigurationError(f"{owner}: the default medium must be lossless and non-dispersive with "
                                     f"float parameters, got {medium!r}")
        _check_structures(
            owner, grid, nodes, structures, "the TF/SF box (which must lie in the default medium)"
        )
        vector = self._resolved_polarization(grid.ndim, polarization)
        return BoundTFSF(self, grid, polarization, nodes, vector, values[0], values[2], tuple(structures))


def _check_structures(owner, grid, nodes, structures, what="the box"):
    """Refuse a structure whose bounding box comes within a cell of the faces of ``what`` (integer ``nodes``
    per axis) from either side: it must lie wholly inside or wholly outside."""
    for index, structure in enumerate(structures):
        try:
            lower, upper = structure.geometry.bounds_float64
        except (AttributeError, NotImplementedError):
            continue
        inside, outside = True, False
        for axis, (low, high) in enumerate(nodes):
            spacing, origin = grid.spacing[axis], -grid.size[axis] / 2
            near = spacing * (1 - 1e-6)  # a cell, less round-off
            box_low, box_high = origin + low * spacing, origin + high * spacing
            inside &= float(lower[axis]) >= box_low + near and float(upper[axis]) <= box_high - near
            outside |= float(upper[axis]) <= box_low - near or float(lower[axis]) >= box_high + near
        if not (inside or outside):
            raise ConfigurationError(
                f"{owner}: structure {index} ({structure.geometry!r}) crosses or comes within a cell of the "
                f"faces of {what}; it must lie wholly inside or wholly outside, a cell clear of them"
            )


def _wavenumbers(omega, direction, spacing, dt, speed):
    """Yee's numerical wavenumber (rad/m) along ``direction`` per angular frequency (NaN where none is
    real)."""
    axes = [a for a in range(len(spacing)) if abs(direction[a]) > 1e-12]
    target = (np.sin(omega * dt / 2) / (speed * dt)) ** 2

    def lattice(k):
        return sum((np.sin(k * direction[a] * spacing[a] / 2) / spacing[a]) ** 2 for a in axes)

    high = min(math.pi / (abs(direction[a]) * spacing[a]) for a in axes)
    low = np.zeros_like(omega)
    upper = np.full_like(omega, high)
    for _ in range(80):  # bisection: lattice(k) increases on [0, high]
        middle = 0.5 * (low + upper)
        below = lattice(middle) < target
        low, upper = np.where(below, middle, low), np.where(below, upper, middle)
    k = 0.5 * (low + upper)
    return np.where(target <= lattice(high) * (1 + 1e-12), k, np.nan)


class BoundTFSF:
    """A :class:`TFSFBox` checked against one simulation (made by :meth:`TFSFBox.bind`).

    Attributes:
        source: the :class:`TFSFBox`.
        nodes: per axis of the simulation, the integer nodes ``(lo, hi)`` of the faces.
        polarization: the E unit vector (3,) of the run.
        impedance: of the default medium (ohm).
        speed: of light in the default medium (m/s).
        direction, waveform: the source's.
        structures: the simulation's (for the cross-section monitors' checks).
    """

    def __init__(self, source, grid, polarization, nodes, vector, permittivity, permeability, structures):
        self.source, self.grid, self.nodes, self.polarization = source, grid, nodes, vector
        self.structures = structures
        self.active = ACTIVE_COMPONENTS[(grid.ndim, polarization)]
        self.impedance = VACUUM_IMPEDANCE * math.sqrt(permeability / permittivity)
        self.speed = SPEED_OF_LIGHT / math.sqrt(permittivity * permeability)
        self.waveform = source.waveform
        self.direction = source.direction

    def incident_spectrum(self, frequencies, times, weight):
        """The incident E's running DFT ``sum_n amplitude w(t_n) exp(-2 pi i f t_n) weight`` (F,) complex128
        over sample ``times`` (s), as the DFT monitors take them."""
        times = torch.as_tensor(times, dtype=torch.float64)
        values = self.source.amplitude * self.waveform(times)
        phases = torch.exp(-2j * math.pi * frequencies.to(torch.float64)[:, None] * times[None, :])
        return (phases * values.to(torch.complex128)[None, :]).sum(1) * weight

    def check_frequencies(self, frequencies, dt, owner):
        """Refuse frequencies (Hz) where the incident spectrum is below :data:`SPECTRUM_FLOOR` of its peak
        (a cross-section there would divide by about zero); the waveform must end (``duration``)."""
        duration = getattr(self.waveform, "duration", math.inf)
        if not math.isfinite(duration):
            raise ConfigurationError(f"{owner}: normalising by the incident spectrum needs a pulse that ends "
                                     f"(a finite waveform.duration), got {self.waveform!r}")
        times = torch.arange(0, math.ceil(duration / dt) + 1, dtype=torch.float64) * dt
        spectrum = self.incident_spectrum(frequencies, times, dt).abs()
        reach = getattr(self.waveform, "spectrum_limit", None)
        band = torch.linspace(0, reach(1e-6) if reach else 0.5 / dt, 257, dtype=torch.float64)
        peak = float(self.incident_spectrum(band, times, dt).abs().max())
        low = spectrum < SPECTRUM_FLOOR * peak
        if bool(low.any()):
            index = int(torch.nonzero(low)[0, 0])
            raise ConfigurationError(
                f"{owner}: frequency {float(frequencies[index]):.6g} Hz lies outside the incident spectrum "
                f"({float(spectrum[index]) / peak:.2g} of its peak, below {SPECTRUM_FLOOR:g}): the incident "
                "intensity there is about zero; choose frequencies inside the pulse's band"
            )

    def _entries(self):
        """Per (updated, incident) component pair: target nodes, their incident nodes' coordinates along
        the direction, and the factor ``+-sign / dx`` of each correction (module docstring)."""
        grid, direction = self.grid, np.array(self.direction)
        entries = {}
        for component in self.active:
            for source, axis, sign in curl_terms(component, self.active, grid.ndim):
                for side, factor in ((0, -1.0), (1, 1.0)):
                    face = self.nodes[axis][side]
                    # H (half node along the axis) outside the face at lo, E (integer) inside it at lo
                    shift = -1 if side == 0 else 0
                    target_index = face + (shift if component[0] == "H" else 0)
                    source_index = face + (0 if component[0] == "H" else shift)
                    ranges = []
                    for a in range(3):
                        if a >= grid.ndim:
                            ranges.append(np.zeros(1, dtype=np.int64))
                        elif a == axis:
                            ranges.append(np.array([target_index]))
                        else:
                            low, high = self.nodes[a]
                            ranges.append(np.arange(low, high + (grid.offsets(component)[a] == 0)))
                    index = np.stack([g.reshape(-1) for g in np.meshgrid(*ranges, indexing="ij")], 1)
                    targets = (index[:, 0] * grid.shape[1] + index[:, 1]) * grid.shape[2] + index[:, 2]
                    along = np.zeros(len(index))
                    for a in range(grid.ndim):
                        node = index[:, a] + (source_index - target_index if a == axis else 0)
                        along += direction[a] * (node + grid.offsets(source)[a]) * grid.spacing[a]
                    entry = entries.setdefault((component, source), ([], [], []))
                    entry[0].append(targets)
                    entry[1].append(along)
                    entry[2].append(np.full(len(index), factor * sign / grid.spacing[axis]))
        return {key: tuple(np.concatenate(parts) for parts in value) for key, value in entries.items()}

    def _table_axis(self):
        """``(origin, step)`` (m) of the table's samples of ``d = u . r`` (r from the domain's corner)."""
        grid, direction = self.grid, self.direction
        used = [a for a in range(grid.ndim) if abs(direction[a]) > 1e-12]
        step = min(grid.spacing[a] for a in used) / TABLE_SAMPLES_PER_CELL
        corner = sum(min(direction[a] * n * grid.spacing[a] for n in self.nodes[a]) for a in range(grid.ndim))
        return step * math.floor((corner - 2 * max(grid.spacing[: grid.ndim])) / step), step

    def memory(self, steps):
        """Bytes of the incident table of a run of ``steps`` steps (float32)."""
        grid = self.grid
        extent = sum(abs(self.direction[a]) * (hi - lo + 4) * grid.spacing[a]
                     for a, (lo, hi) in enumerate(self.nodes))
        return len(self.active) * steps * (math.ceil(extent / self._table_axis()[1]) + 8) * 4

    def corrections(self, dt, steps, dtype, device):
        """The :class:`TFSFCorrections` of a run of ``steps`` steps of ``dt`` (s)."""
        entries = self._entries()
        origin, step = self._table_axis()
        positions = {key: (value[1] - origin) / step for key, value in entries.items()}
        samples = int(max(float(p.max()) for p in positions.values())) + 4
        tables = self._tables(dt, steps, origin, step, samples)
        # incident components that are exactly zero (off an axis's plane wave) need no correction
        carried = [component for component, table in tables.items() if np.any(table != 0)]
        groups = {}
        for (component, source), (targets, _, factors) in entries.items():
            if source not in carried:
                continue
            position = positions[(component, source)]
            start = np.floor(position + 1e-9).astype(np.int64)
            fraction = np.clip(position - start, 0.0, None)
            fraction[fraction < 1e-9] = 0.0  # on a sample (an axis): the weights are exactly (0, 1, 0, 0)
            nodes = np.arange(-1, 3)
            weights = np.ones((len(start), 4))
            for j in range(4):  # cubic Lagrange weights on the samples start - 1 .. start + 2
                for m in range(4):
                    if m != j:
                        weights[:, j] *= (fraction - nodes[m]) / (nodes[j] - nodes[m])
            flat = carried.index(source) * samples + start[:, None] + nodes[None, :]
            group = groups.setdefault(component, ([], [], []))
            group[0].append(targets)
            group[1].append(flat.reshape(-1))
            group[2].append(weights * factors[:, None])
        groups = {
            component: (
                torch.as_tensor(np.concatenate(targets), device=device),
                torch.as_tensor(np.concatenate(flat), device=device),
                torch.as_tensor(np.concatenate(weights), dtype=dtype, device=device),
            )
            for component, (targets, flat, weights) in groups.items()
        }
        table = np.stack([tables[component] for component in carried], 1).reshape(steps, -1)
        drive = self.source.amplitude * self.waveform(torch.arange(steps, dtype=torch.float64) * dt)
        return TFSFCorrections(torch.as_tensor(table, dtype=dtype, device=device), groups, drive.tolist())

    def _tables(self, dt, steps, origin, step, samples):
        """``{component: (steps, samples) float64 array}``: the incident field at ``d = origin + j step``
        and E times ``n dt`` (H times ``(n + 1/2) dt``), by inverse FFTs of the discrete plane wave's
        spectrum."""
        grid = self.grid
        # steps to cross the table, at the speed of light
        delay = math.ceil((samples * step) / (self.speed * dt))
        taper = 64
        length = _fast_length(steps + taper + 3 * delay + 256)
        times = torch.arange(steps + taper, dtype=torch.float64) * dt
        signal = torch.zeros(length, dtype=torch.float64)
        signal[: steps + taper] = self.source.amplitude * self.waveform(times)
        ramp = 0.5 * (1 + torch.cos(math.pi * torch.arange(1, taper + 1, dtype=torch.float64) / taper))
        signal[steps : steps + taper] *= ramp  # ends smoothly after the run: no jump to alias
        spectrum = np.fft.rfft(signal.numpy())
        omega = 2 * math.pi * np.fft.rfftfreq(length, dt)
        spacing = [grid.spacing[a] if a < grid.ndim else 1.0 for a in range(3)]
        k = _wavenumbers(omega, self.direction, spacing, dt, self.speed)
        spectrum = np.where(np.isnan(k), 0.0, spectrum)
        k = np.nan_to_num(k)
        kappa = np.stack(
            [2 / spacing[a] * np.sin(k * self.direction[a] * spacing[a] / 2) for a in range(3)], 1
        )
        norm = np.linalg.norm(kappa, axis=1, keepdims=True)
        kappa = np.where(norm > 0, kappa / np.where(norm > 0, norm, 1), np.array(self.direction))
        electric = self.polarization - (kappa @ self.polarization)[:, None] * kappa
        electric /= np.linalg.norm(electric, axis=1, keepdims=True)
        vectors = {"E": electric, "H": np.cross(kappa, electric) / self.impedance}
        shift = {"E": 1.0, "H": np.exp(0.5j * omega * dt)}  # H at (n + 1/2) dt
        distances = origin + np.arange(samples) * step
        tables = {}
        for component in self.active:
            weights = spectrum * vectors[component[0]][:, AXES.index(component[1])] * shift[component[0]]
            table = np.empty((steps, samples))
            for first in range(0, samples, 64):  # bounded memory: (64, length) at a time
                chunk = distances[first : first + 64] - origin
                phased = weights[None, :] * np.exp(-1j * k[None, :] * chunk[:, None])
                table[:, first : first + 64] = np.fft.irfft(phased, n=length, axis=1)[:, :steps].T
            tables[component] = table
        return tables


def _fast_length(count):
    """The smallest ``2^a 3^b 5^c`` at least ``count`` (an FFT length numpy handles fast)."""
    best = 1 << math.ceil(math.log2(count))
    for threes in (1, 3, 9, 27):
        for fives in (1, 5, 25):
            base = threes * fives
            length = base << max(0, math.ceil(math.log2(count / base)))
            if length >= count:
                best = min(best, length)
    return best


class TFSFCorrections:
    """A TF/SF box as the time step sees it: the incident table and where it enters the updates.

    Attributes:
        table: ``(steps, K * samples)``: at each step, the K incident components that are not identically
            zero, each on the table's samples of ``d``, one after the other.
        groups: ``{updated component: (targets (M,), samples (4 M,), weights (M, 4))}``: flat indices of the
            nodes corrected, the four entries of a table row each one reads and their interpolation weights
            times ``+-sign / dx``.
        drive: the incident E (V/m) at the reference plane at each step (for the decay watcher).
    """

    def __init__(self, table, groups, drive):
        self.table, self.groups, self.drive = table, groups, drive

    def apply(self, field, component, coefficient, step):
        """Add ``coefficient *`` the correction of ``component``'s update at ``step`` to ``field`` (in place;
        ``field`` is a contiguous tensor of the grid's shape, new or updated in place by the caller)."""
        group = self.groups.get(component)
        if group is None:
            return
        targets, samples, weights = group
        values = self.table[step].index_select(0, samples).view(weights.shape).mul_(weights).sum(1)
        flat = field.view(-1)
        if isinstance(coefficient, torch.Tensor):
            flat.index_add_(0, targets, values * coefficient.expand(field.shape).reshape(-1)[targets])
        else:
            flat.index_add_(0, targets, values, alpha=coefficient)
