"""Lumped elements in 3D FDTD: resistors and lumped ports (a resistive voltage source across a gap).

A lumped element fills a box of Yee edges along one ``axis``: the box's faces lie on the Yee cells of
those edges (integer-node planes at its two ends along ``axis``, half-node planes across it), so its
length ``L`` along ``axis`` is a whole number of cells and its cross-section ``A`` is the area of the
cells around its edges. Along ``axis`` the edges are in series, across it in parallel.

* :func:`lumped_resistor` - the conductivity ``sigma = L / (R A)`` on the edges along ``axis`` only
  (:class:`~mindelec.fdtd.AxialConductivity`), a resistor of ``R`` ohm (Taflove and Hagness, ch. 15).
* :class:`LumpedPort` - that resistor with ``R = R0`` (the reference impedance) in parallel with a
  Norton current source ``V_s(t) / R0`` (a Thevenin source ``V_s`` behind ``R0``, as in openEMS and
  Tidy3D). The port measures the gap voltage ``V = -integral E . dl`` (the + terminal at the +axis end,
  at the E times ``(n + 1) dt``) and the current ``I`` into the + terminal, the loop integral of H
  around the gap (Ampere: the source, resistor and displacement currents of the gap; at the H times
  ``(n + 1/2) dt``), and DFTs them, each at its own sample times. Then ``Z_in = V / I`` is the
  impedance of everything outside the gap, ``S11 = (Z_in - R0) / (Z_in + R0)``.

Use: add ``port.resistor`` to the structures (after those it sits in), ``port.source`` to the sources
and ``port`` itself to the monitors; ``result[port.name]`` then holds the port's spectra.
"""

import math
import warnings

import torch

from common.errors import ArgumentTypeError, ConfigurationError

from .grid import AXES
from .materials import AxialConductivity, Structure
from .monitors import DFTMonitor, Recorder
from .sources import CurrentSource

#: how far (in cells) a port's faces may sit from the Yee planes they belong on
ALIGNMENT_TOLERANCE = 1e-6
#: a port warns when its gap voltage over the last :data:`TAIL_FRACTION` of the run still exceeds this
#: fraction of its peak: the spectra then carry the ringing of a truncated record
UNDECAYED_LEVEL = 1e-2
TAIL_FRACTION = 0.05


def _box(center, size, axis, owner):
    """``(center, size, axis index)`` checked: 3 coordinates, 3 positive extents, an axis name."""
    center = tuple(float(value) for value in center)
    size = tuple(float(value) for value in size)
    if len(center) != 3 or len(size) != 3:
        raise ConfigurationError(f"{owner}: center and size need 3 values each (a 3D box, m)")
    if not all(math.isfinite(value) and value > 0 for value in size):
        raise ConfigurationError(
            f"{owner}: size {size} must be 3 positive extents (m): the Yee cells of the element's edges"
        )
    if axis not in AXES:
        raise ConfigurationError(f"{owner}: axis must be 'x', 'y' or 'z', got {axis!r}")
    return center, size, AXES.index(axis)


def _conductivity(size, axis, resistance):
    """``L / (R A)`` (S/m): the conductivity that makes the box a resistor of ``resistance`` ohm."""
    across = [size[a] for a in range(3) if a != axis]
    return size[axis] / (resistance * across[0] * across[1])


def lumped_resistor(center, size, axis, resistance):
    """A resistor of ``resistance`` ohm along ``axis`` over the edges in a box (see the module docstring).

    Args:
        center, size: the box (m), 3 values each; its faces on the Yee cells of its edges.
        axis: ``"x"``, ``"y"`` or ``"z"``, the direction of the edges.
        resistance: (ohm, > 0).

    Returns:
        a :class:`~mindelec.fdtd.Structure` of an :class:`~mindelec.fdtd.AxialConductivity` box.
    """
    from common.geometry import Box

    owner = f"lumped_resistor(center={center}, size={size})"
    center, size, index = _box(center, size, axis, owner)
    resistance = float(resistance)
    if not (math.isfinite(resistance) and resistance > 0):
        raise ConfigurationError(f"{owner}: resistance must be positive (ohm), got {resistance}")
    lo = [c - s / 2 for c, s in zip(center, size)]
    hi = [c + s / 2 for c, s in zip(center, size)]
    return Structure(Box(lo, hi), AxialConductivity(axis, _conductivity(size, index, resistance)))


def _edge_slices(grid, center, size, axis, owner):
    """Index slices of the E component along ``axis`` in the box, after checking the box is on the grid.

    Raises:
        ConfigurationError: naming ``owner``, for a 1D/2D grid or faces off their Yee planes.
    """
    if grid.ndim != 3:
        raise ConfigurationError(f"{owner}: lumped elements need a 3D simulation, this one is {grid.ndim}D")
    for a in range(3):
        # along the axis the faces are integer-node planes, across it half-node planes
        offset = 0.0 if a == axis else 0.5
        for face in (center[a] - size[a] / 2, center[a] + size[a] / 2):
            cells = (face + grid.size[a] / 2) / grid.spacing[a] + offset
            if abs(cells - round(cells)) > ALIGNMENT_TOLERANCE:
                raise ConfigurationError(
                    f"{owner}: its face at {AXES[a]} = {face:.6g} m is not on a "
                    f"{'node' if a == axis else 'half-node'} plane of the grid (spacing "
                    f"{grid.spacing[a]:.6g} m along {AXES[a]}); the box must cover whole Yee cells of its "
                    "edges"
                )
    slices = grid.index_range(center, size, "E" + AXES[axis], owner)
    if any(s.start == 0 for a, s in enumerate(slices) if a != axis):
        raise ConfigurationError(f"{owner}: keep it at least one cell away from the domain's walls")
    return slices


class _PortSource(CurrentSource):
    """The Norton current ``V_s(t) / R0`` of a :class:`LumpedPort`, spread over the gap's cross-section."""

    def __init__(self, port):
        area = math.prod(port.size[a] for a in range(3) if a != port.axis_index)
        super().__init__(
            "E" + port.axis, port.waveform, port.center, port.size, amplitude=1.0 / (port.impedance * area)
        )
        self.port = port

    def bind(self, grid, polarization):
        """As :meth:`CurrentSource.bind`, after checking that the gap lies on whole Yee cells."""
        port = self.port
        _edge_slices(grid, port.center, port.size, port.axis_index, repr(port))
        return super().bind(grid, polarization)

    def __repr__(self):
        return f"{self.port!r}.source"


class LumpedPort(DFTMonitor):
    """A lumped port: a voltage source ``V_s(t)`` behind a resistance ``R0`` across a gap of Yee edges.

    The port is at once a monitor (pass it in ``monitors``), a source (``port.source``, in ``sources``)
    and a resistor (``port.resistor``, in ``structures``, after the structures it sits in); see the
    module docstring for the model. ``result[name]`` holds, per frequency (tensors of shape ``(F,)``):

    * ``"frequencies"`` (Hz);
    * ``"voltage"`` and ``"current"``: the DFTs ``sum x(t_n) exp(-2 pi i f t_n) dt`` of the gap voltage (V s)
      and of the current into the + terminal (A s);
    * ``"impedance"``: ``Z_in = V / I`` (ohm), the input impedance of what the port drives;
    * ``"s11"``: ``(Z_in - R0) / (Z_in + R0)``;
    * ``"incident_power"``: ``|V_s(f)|^2 / (4 R0)`` and ``"accepted_power"``: ``Re(V conj(I))``, spectral
      densities with the convention of :class:`~mindelec.fdtd.FluxMonitor` (for a pulse the energy is
      ``2 * integral_0^inf density df``, J); ``accepted = incident (1 - |S11|^2)``.

    Args:
        name: key of the result.
        center, size: the gap box (m), 3 values each: length ``L`` along ``axis`` (whole cells between two
            node planes) and the Yee cells of its edges across it (e.g. ``(dx, dy, dz)`` for one edge
            along z centred on an Ez node).
        waveform: the source voltage ``V_s(t)`` (V) as a callable of times (s), e.g. ``GaussianPulse``.
        frequencies: (Hz), the spectra's frequencies.
        axis: ``"x"``, ``"y"`` or ``"z"``: the + terminal is at the +axis end.
        impedance: the reference impedance ``R0`` (ohm, > 0), also the source's internal resistance.

    Raises:
        ConfigurationError: for a box off the grid's Yee cells, a non-3D simulation or bad values.
    """

    def __init__(self, name, center, size, waveform, frequencies, axis="z", impedance=50.0):
        super().__init__(name, frequencies, components=(), center=center, size=size)
        owner = f"LumpedPort({name!r})"
        center, size, index = _box(center, size, axis, owner)
        impedance = float(impedance)
        if not (math.isfinite(impedance) and impedance > 0):
            raise ConfigurationError(f"{owner}: impedance must be positive (ohm), got {impedance}")
        if not callable(waveform):
            raise ArgumentTypeError(
                f"{owner}: waveform must be callable on a tensor of times, got {waveform!r}")
        self._set(
            center=center, size=size, axis=axis, axis_index=index, impedance=impedance, waveform=waveform
        )
        self._set(resistor=lumped_resistor(center, size, axis, impedance), source=_PortSource(self))

    def recorder(self, grid, polarization, dt, dtype, device):
        slices = _edge_slices(grid, self.center, self.size, self.axis_index, repr(self))
        return _PortRecorder(self, slices, grid, dt)

    def check_gap(self, grid, electric):
        """Refuse a gap a PEC structure covers (its edges' ``cb`` zero): no current could cross it.

        Args:
            grid: the simulation's grid; electric: its E update coefficients ``{component: (ca, cb,
                poles)}`` (:func:`mindelec.fdtd.coefficients.update_coefficients`).
        """
        component = "E" + AXES[self.axis_index]
        slices = _edge_slices(grid, self.center, self.size, self.axis_index, repr(self))
        cb = torch.broadcast_to(torch.as_tensor(electric[component][1]), grid.shape)[slices]
        if bool((cb == 0).any()):
            raise ConfigurationError(
                f"{self!r}: {int((cb == 0).sum())} of its {cb.numel()} gap edges lie inside a PEC structure "
                "(a solid or sheet covers the gap), so no current can cross it; leave the gap free of metal "
                "between the two conductors it feeds")

    def network(self, result):
        """The port's S11 as a one-port ``skrf.Network`` (reference impedance ``R0``) from a run's result."""
        import skrf

        output = result[self.name]
        frequency = skrf.Frequency.from_f(output["frequencies"].double().cpu().numpy(), unit="Hz")
        s11 = output["s11"].detach().cpu().numpy().astype(complex).reshape(-1, 1, 1)
        return skrf.Network(frequency=frequency, s=s11, z0=self.impedance, name=self.name)

    def write_touchstone(self, result, path):
        """Write the port's S11 to the Touchstone file ``path`` (``.s1p`` added if missing); returns it."""
        path = str(path)
        stem = path[:-4] if path.lower().endswith(".s1p") else path
        self.network(result).write_touchstone(stem)
        return stem + ".s1p"

    def __repr__(self):
        return (
            f"LumpedPort({self.name!r}, center={self.center}, size={self.size}, axis={self.axis!r}, "
            f"impedance={self.impedance:g})"
        )


class _PortRecorder(Recorder):
    """Samples a port's gap voltage and current after every step; the spectra at the end."""

    def __init__(self, port, slices, grid, dt):
        super().__init__(port.name)
        self.port, self.slices, self.grid, self.dt = port, slices, grid, dt
        c = port.axis_index
        self.a, self.b = (c + 1) % 3, (c + 2) % 3
        self.levels = slices[c].stop - slices[c].start
        self._cached = None  # (the field tensors, views of them) of the last record

    def count(self, step):
        return 2

    def index_boxes(self):
        return [self.slices, self._behind(self.a), self._behind(self.b)]

    def _behind(self, along):
        """The slices one node back along axis ``along`` (the H nodes on the other side of the edges)."""
        slices = list(self.slices)
        slices[along] = slice(slices[along].start - 1, slices[along].stop - 1)
        return tuple(slices)

    def _views(self, fields):
        """The gap's edges and the H nodes around them, as views made once while the run updates the
        same field tensors in place."""
        tensors = (fields["E" + self.port.axis], fields["H" + AXES[self.b]], fields["H" + AXES[self.a]])
        if self._cached is None or any(x is not y for x, y in zip(self._cached[0], tensors)):
            edges, field_b, field_a = tensors
            views = (
                edges[self.slices],
                field_b[self.slices],
                field_b[self._behind(self.a)],
                field_a[self.slices],
                field_a[self._behind(self.b)],
            )
            self._cached = (tensors, views)
        return self._cached[1]

    def record(self, fields, step, inplace):
        spacing = self.grid.spacing
        edges, b_here, b_behind, a_here, a_behind = self._views(fields)
        # the line integral along the axis, averaged over the parallel lines of edges
        voltage = -edges.sum() * spacing[self.port.axis_index] * self.levels / edges.numel()
        # Ampere's loop around each edge: (H_b[i] - H_b[i - 1 along a]) d_b - (H_a[j] - H_a[j - 1 along b])
        # d_a, summed over the gap's cross-section and averaged over its levels
        loops = (b_here - b_behind).sum() * spacing[self.b] - (a_here - a_behind).sum() * spacing[self.a]
        return [voltage.clone(), loops / self.levels]

    def memory(self, steps=None):
        return 0 if steps is None else 2 * steps * 8

    def _transform(self, series, shift):
        """``sum_n x_n exp(-2 pi i f (n + shift) dt) dt`` at the port's frequencies, complex128."""
        steps = series.shape[0]
        times = (torch.arange(steps, dtype=torch.float64, device=series.device) + shift) * self.dt
        omega = 2 * math.pi * self.port.frequencies.to(series.device)
        weights = torch.full((steps, len(omega)), self.dt, dtype=torch.float64, device=series.device)
        kernel = torch.polar(weights, -times[:, None] * omega)
        return series.to(torch.float64).to(torch.complex128) @ kernel

    def _check_decay(self, magnitude):
        """Warn when the gap voltage has not decayed by the end of the run (see :data:`UNDECAYED_LEVEL`)."""
        tail = magnitude[-max(1, int(TAIL_FRACTION * len(magnitude))) :].max()
        peak = magnitude.max()
        if bool(tail > UNDECAYED_LEVEL * peak):
            warnings.warn(
                f"{self.port!r}: the gap voltage is still {float(tail / peak):.2g} of its peak at the end of "
                "the run; the spectra carry the ringing of a truncated record: run longer",
                stacklevel=2,
            )

    def finish(self, samples):
        port = self.port
        voltage_series = torch.stack([pair[0] for pair in samples])
        current_series = torch.stack([pair[1] for pair in samples])
        steps = voltage_series.shape[0]
        self._check_decay(voltage_series.detach().abs())
        voltage = self._transform(voltage_series, 1.0)  # E after step n: (n + 1) dt
        current = self._transform(current_series, 0.5)  # H after step n: (n + 1/2) dt
        # the source voltage as the run applied it: at the E updates' midpoints (n + 1/2) dt
        times = (torch.arange(steps, dtype=torch.float64) + 0.5) * self.dt
        drive = self._transform(port.waveform(times).to(voltage_series.device), 0.5)
        if bool((current.abs() == 0).any()):
            raise ConfigurationError(
                f"{port!r}: no current crossed the gap at some frequencies; the run is too short or the "
                "source's spectrum does not reach them"
            )
        impedance = voltage / current
        return {
            "frequencies": port.frequencies.to(voltage_series.device),
            "voltage": voltage,
            "current": current,
            "impedance": impedance,
            "s11": (impedance - port.impedance) / (impedance + port.impedance),
            "incident_power": drive.abs() ** 2 / (4 * port.impedance),
            "accepted_power": (voltage * current.conj()).real,
        }
