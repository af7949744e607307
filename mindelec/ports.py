"""Ports, S-parameters from FDTD runs, and Touchstone export (scikit-rf).

A :class:`WaveguidePort` is a line (2D) or point (1D) across a waveguide (or free space)
where waves are measured: it supplies a :class:`mindelec.fdtd.DFTMonitor` of the tangential
field on its nodes, and reads from a run's result the complex wave amplitude per frequency,
the projection of that field on the port's mode profile.

S-parameters follow the normalisation-run method of Meep:

1. a *reference* run: the source in the straight, empty feed (no device), with the same ports;
   at the source port it sees only the incident wave ``a_s``;
2. a *device* run, same source, same ports, with the device.

At the source port the device run holds the incident plus the reflected wave, so the reflected
wave is the difference of the two runs; at the other ports it holds only the transmitted wave::

    S_ss = (A_s(device) - A_s(reference)) / A_s(reference)
    S_ps = A_p(device) / A_s(reference),   p != s

with ``A_p`` the port amplitudes. The port must lie between the source and the device, and the
reference planes of the S-parameters are the port lines (a wave ``exp(-j k x)`` travelling a
distance ``l`` contributes ``exp(-j k l)``: the FDTD's DFT uses ``exp(-i omega t)``, i.e. phasors
``exp(+j omega t)``). Amplitudes of ports on identical waveguides are directly comparable; a full
S-matrix takes one pair of runs per source port (``torch.stack(columns, dim=-1)``).

Touchstone files are written and read by scikit-rf (:func:`to_network`, :func:`write_touchstone`).

Example (1D, a slab between two ports)::

    port_list = [WaveguidePort("p1", (-1e-3,)), WaveguidePort("p2", (1e-3,))]
    monitors = [port.monitor(frequencies) for port in port_list]
    reference = fdtd.Simulation(..., monitors=monitors).run(until=...)
    device = fdtd.Simulation(..., structures=[slab], monitors=monitors).run(until=...)
    column = s_parameters(reference, device, port_list, source_port=0)   # (F, 2): S11, S21
    write_touchstone("slab.s2p", frequencies, torch.stack([column, column.flip(1)], dim=-1))  # symmetric

Validation (tests/mindelec/test_ports.py): a dielectric slab in 1D against the transfer-matrix
S11/S21 over a band (differences are the FDTD's numerical dispersion: 0.02-0.04 at 60 cells per
vacuum wavelength), ``|S11|^2 + |S21|^2 = 1`` to 1e-5; a gap in a 2D slab waveguide against the
FDFD with the same ports, to 2e-5.

Mode ports (:class:`ModePort`, 2D and 3D, cross-sections normal to x) need no reference run: a
:class:`~mindelec.fdtd.ModeMonitor` separates forward and backward waves of the mode, so one run per
excited port gives a column of the S-matrix (:func:`mode_s_matrix`), reference planes at the
monitors' half nodes (those of :meth:`mindelec.fdfd.Simulation.mode_amplitudes`). Validation
(tests/mindelec/test_mode_ports.py): a straight 3D metallic guide, ``|S21|`` >= 0.99 and ``|S11|`` <= 0.01;
a width step in a 2D slab guide against the FDFD, complex S11 and S21 to 0.01.

Mode ports on transmission lines (3D, the port plane cutting a microstrip's strip or any PEC conductors):
the mode S-parameters are those of power waves referenced to each port's characteristic impedance
(:meth:`ModePort.impedance`, :mod:`mindelec.line_impedance`); :func:`mode_network` hands them to scikit-rf
with those impedances, and ``network.renormalize(50)`` gives the S-parameters of a 50 ohm system.
Validation (tests/mindelec/test_mode_ports.py): a microstrip through-line, ``|S11|`` below -30 dB, ``|S21|``
1 with the phase of the mode's ``beta``, the FDTD's own ``V / I`` the port's impedance, and the 50 ohm
renormalisation that of a line section of that impedance.

A :class:`WaveguidePort` reads one field component only: directions are told apart by the
reference-run subtraction, so each run must carry one direction of travel at each non-source port
and only the incident wave at the source port in the reference run. Lumped (circuit) ports are
:class:`mindelec.fdtd.LumpedPort`; several of them make a network in :mod:`mindelec.multiport`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from common.errors import ArgumentTypeError, ConfigurationError, UnknownNameError

__all__ = [
    "WaveguidePort",
    "ModePort",
    "mode_network",
    "mode_s_matrix",
    "s_parameters",
    "scattering_column",
    "to_network",
    "write_touchstone",
]


class WaveguidePort:
    """A port: a point (1D) or a line across a waveguide (2D) where wave amplitudes are measured.

    Args:
        name: the port's name; its DFT monitor is called ``"port:<name>"``.
        position: (m), one coordinate per dimension: the point (1D) or the centre of the line (2D).
        axis: the port's normal, ``"x"`` or ``"y"`` (2D); ignored in 1D.
        span: (m) length of the line across the guide (2D; required there).
        profile: optional (M,) real tensor, the mode profile on the M nodes of the line, for
            example ``mindelec.fdfd.Simulation(...).mode(...).profile`` restricted to them (the FDFD
            uses the same nodes). Default: a uniform profile (a plane wave or TEM mode).
        component: the tangential field component read: ``"Ez"`` (1D, 2D TM) or ``"Hz"`` (2D TE).
    """

    def __init__(self, name, position, axis="x", span=None, profile=None, component="Ez"):
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"WaveguidePort: name must be a non-empty string, got {name!r}")
        if axis not in ("x", "y"):
            raise ConfigurationError(f"WaveguidePort({name!r}): axis must be 'x' or 'y', got {axis!r}")
        if profile is not None and (not isinstance(profile, torch.Tensor) or profile.dim() != 1):
            raise ArgumentTypeError(
                f"WaveguidePort({name!r}): profile must be a 1D tensor (one value per node)")
        self.name = name
        self.position = tuple(float(value) for value in position)
        self.axis = axis
        self.span = span
        self.profile = profile
        self.component = component

    @property
    def monitor_name(self) -> str:
        """Name of the port's DFT monitor in a run's result."""
        return f"port:{self.name}"

    def monitor(self, frequencies):
        """The :class:`mindelec.fdtd.DFTMonitor` to add to both runs' monitors.

        Args:
            frequencies: (F,) frequencies (Hz).
        """
        from mindelec import fdtd

        if len(self.position) == 1:
            return fdtd.DFTMonitor(self.monitor_name, frequencies, (self.component,), self.position, (0.0,))
        if len(self.position) != 2:
            raise ConfigurationError(
                f"{self!r}: ports exist in 1D and 2D; position has {len(self.position)} coordinates"
            )
        if self.span is None:
            raise ConfigurationError(f"{self!r}: a 2D port needs its span (m) across the guide")
        size = (0.0, float(self.span)) if self.axis == "x" else (float(self.span), 0.0)
        return fdtd.DFTMonitor(self.monitor_name, frequencies, (self.component,), self.position, size)

    def amplitude(self, result) -> torch.Tensor:
        """Complex wave amplitude per frequency, (F,), from a run's :class:`mindelec.fdtd.Result`.

        The projection ``sum(profile * field) / sum(profile^2)`` of the DFT field on the port
        nodes (the mean of the field for a uniform profile).

        Raises:
            KeyError: if the run did not carry this port's monitor.
            ValueError: if the profile does not have one value per port node.
        """
        if self.monitor_name not in result:
            raise UnknownNameError(
                f"{self!r}: the run has no monitor {self.monitor_name!r}; add port.monitor(...)")
        field = result[self.monitor_name][self.component]
        field = field.reshape(field.shape[0], -1)
        if self.profile is None:
            return field.mean(dim=1)
        if self.profile.numel() != field.shape[1]:
            raise ConfigurationError(
                f"{self!r}: profile has {self.profile.numel()} values; "
                f"the port line has {field.shape[1]} nodes"
            )
        profile = self.profile.to(device=field.device, dtype=field.real.dtype)
        return (field * profile).sum(dim=1) / (profile * profile).sum()

    def __repr__(self):
        return f"WaveguidePort({self.name!r}, position={self.position}, axis={self.axis!r})"


def scattering_column(reference_amplitudes, device_amplitudes, source_port: int) -> torch.Tensor:
    """One column of the S-matrix from port amplitudes of a reference and a device run.

    Args:
        reference_amplitudes: (P, F) complex, the amplitude at each port in the reference run.
        device_amplitudes: (P, F) complex, the same in the device run.
        source_port: index of the port the source feeds.

    Returns:
        (F, P) complex tensor: ``S[:, p] = S_{p, source}`` (see the module docstring).
    """
    reference = torch.as_tensor(reference_amplitudes)
    device = torch.as_tensor(device_amplitudes)
    if reference.shape != device.shape or reference.dim() != 2:
        raise ConfigurationError(
            f"scattering_column: amplitudes must both be (ports, frequencies); got {tuple(reference.shape)} "
            f"and {tuple(device.shape)}"
        )
    if not 0 <= source_port < reference.shape[0]:
        raise ConfigurationError(
            f"scattering_column: source_port {source_port} is not one of {reference.shape[0]} ports"
        )
    outgoing = device.clone()
    outgoing[source_port] = device[source_port] - reference[source_port]
    return (outgoing / reference[source_port]).T


def s_parameters(reference, device, ports, source_port=0) -> torch.Tensor:
    """S-parameters ``S_{p, source}`` over frequency from a reference and a device FDTD run.

    Args:
        reference: :class:`mindelec.fdtd.Result` of the run without the device.
        device: :class:`mindelec.fdtd.Result` of the run with it (same source and ports).
        ports: sequence of :class:`WaveguidePort`, both runs carrying their monitors.
        source_port: index in ``ports`` of the port the source feeds.

    Returns:
        (F, P) complex tensor; the frequencies are ``reference[ports[0].monitor_name]["frequencies"]``.
    """
    reference_amplitudes = torch.stack([port.amplitude(reference) for port in ports])
    device_amplitudes = torch.stack([port.amplitude(device) for port in ports])
    return scattering_column(reference_amplitudes, device_amplitudes, source_port)


def _as_numpy(value) -> np.ndarray:
    return value.detach().to("cpu").numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def to_network(frequencies, s_matrix, z0=50.0, name=None):
    """A scikit-rf ``Network`` from S-parameters.

    Args:
        frequencies: (F,) frequencies (Hz), increasing.
        s_matrix: (F, P, P) complex S-parameters (``s_matrix[f, p, q] = S_pq``); (F,) is taken as a 1-port.
        z0: reference impedance (ohm): one value, or one per port (P,) or per frequency and port (F, P).
        name: the network's name.

    Returns:
        ``skrf.Network``.

    Raises:
        ValueError: if the shapes do not match or the frequencies are not increasing.
    """
    import skrf

    frequencies = _as_numpy(frequencies).astype(np.float64).reshape(-1)
    s_matrix = _as_numpy(s_matrix).astype(np.complex128)
    if s_matrix.ndim == 1:
        s_matrix = s_matrix[:, None, None]
    if s_matrix.ndim != 3 or s_matrix.shape[0] != frequencies.size or s_matrix.shape[1] != s_matrix.shape[2]:
        raise ConfigurationError(
            f"to_network: s_matrix has shape {s_matrix.shape}; expected ({frequencies.size}, P, P) "
            f"for {frequencies.size} frequencies"
        )
    if frequencies.size > 1 and not np.all(np.diff(frequencies) > 0):
        raise ConfigurationError("to_network: frequencies must be strictly increasing (Hz)")
    return skrf.Network(frequency=skrf.Frequency.from_f(frequencies, unit="Hz"), s=s_matrix, z0=z0, name=name)


def write_touchstone(path, frequencies, s_matrix, z0=50.0) -> Path:
    """Write S-parameters to a Touchstone file (real/imaginary form) with scikit-rf.

    Args:
        path: the file; its suffix must be ``.sNp`` with N the number of ports (e.g. ``.s2p``).
        frequencies, s_matrix, z0: as :func:`to_network`.

    Returns:
        The path written.

    Raises:
        ValueError: if the suffix does not match the number of ports.
    """
    network = to_network(frequencies, s_matrix, z0=z0)
    path = Path(path)
    expected = f".s{network.nports}p"
    if path.suffix.lower() != expected:
        raise ConfigurationError(
            f"write_touchstone: {path} must end in {expected} for a {network.nports}-port network"
        )
    network.write_touchstone(filename=path.stem, dir=str(path.parent), form="ri")
    return path


class ModePort:
    """A waveguide port of a 2D or 3D FDTD simulation built on one mode of a cross-section normal to x.

    The port measures on ``cross_section`` (a :class:`~mindelec.fdtd.ModeMonitor`, reference plane
    half a cell after its node, as the FDFD's) and, when excited, launches the mode towards the device
    from ``source_offset`` cells behind that plane (a :class:`~mindelec.fdtd.ModeSource`), so the
    monitor sees the incident wave and what the device sends back, and nothing of the source's own
    small backward wave.

    Args:
        name: the port's name; its monitor is called ``"port:<name>"``.
        cross_section: a :class:`~mindelec.fdtd.CrossSection` of the simulation.
        direction: where the device lies: ``+1`` (towards +x: a port on the left end) or ``-1``.
        mode_index: 0 for the fundamental mode, ...
        source_offset: cells between the source plane and the monitor's node (>= 2).
    """

    def __init__(self, name, cross_section, direction=1, mode_index=0, source_offset=3):
        from mindelec.fdtd import CrossSection

        if not isinstance(cross_section, CrossSection):
            raise ConfigurationError(
                f"ModePort {name!r}: cross_section must be a CrossSection, got {cross_section!r}"
            )
        if direction not in (1, -1):
            raise ConfigurationError(f"ModePort {name!r}: direction must be +1 or -1, got {direction!r}")
        if int(source_offset) < 2:
            raise ConfigurationError(
                f"ModePort {name!r}: source_offset must be at least 2 cells, got {source_offset!r}"
            )
        self.name, self.cross_section = str(name), cross_section
        self.direction, self.mode_index, self.source_offset = direction, int(mode_index), int(source_offset)

    @property
    def monitor_name(self) -> str:
        """The name of the port's monitor in a run's result."""
        return f"port:{self.name}"

    def monitor(self, frequencies):
        """The port's :class:`~mindelec.fdtd.ModeMonitor` at ``frequencies`` (Hz)."""
        from mindelec.fdtd import ModeMonitor

        return ModeMonitor(self.monitor_name, self.cross_section, frequencies, self.mode_index)

    def source(self, waveform, frequency=None):
        """The :class:`~mindelec.fdtd.ModeSource` exciting this port (its ``currents`` are sources)."""
        from mindelec.fdtd import ModeSource

        section = self.cross_section.shifted(-self.direction * self.source_offset)
        return ModeSource(section, waveform, self.direction, self.mode_index, frequency)

    def impedance(self, frequencies, definition="power_current", **paths) -> torch.Tensor:
        """(F,) float64 tensor: the port's characteristic impedance (ohm) at ``frequencies`` (Hz), by
        ``definition`` ``"power_current"`` (``2 P / |I|^2``, the default, Jansen & Kirschning's for
        microstrip), ``"power_voltage"`` (``|V|^2 / (2 P)``) or ``"voltage_current"`` (``Re V / I``) of its
        mode (:meth:`~mindelec.fdtd.CrossSection.impedance`; ``paths``: ``signal``, ``voltage_path``,
        ``current_contour`` in the plane's integer (y, z) nodes, default automatic).

        Raises:
            ConfigurationError: naming the port: an unknown definition, no metal on the port's plane, no
                signal conductor apart from the ground, or (for ``"power_voltage"`` and
                ``"voltage_current"``) no voltage path from the signal to the ground.
        """
        if definition not in ("power_current", "power_voltage", "voltage_current"):
            raise ConfigurationError(
                f"ModePort {self.name!r}: definition must be 'power_current', 'power_voltage' or "
                f"'voltage_current', got {definition!r}"
            )
        frequencies = torch.as_tensor(frequencies, dtype=torch.float64).reshape(-1)
        owner = f"ModePort {self.name!r} at {self.cross_section!r}"
        values = []
        for frequency in frequencies.tolist():
            line = self.cross_section.impedance(frequency, self.mode_index, owner, **paths)
            values.append(complex(getattr(line, definition)).real)
        return torch.tensor(values, dtype=torch.float64)

    def waves(self, result):
        """``(incoming, outgoing)``: (F,) complex mode amplitudes at this port in a run's result."""
        amplitudes = result[self.monitor_name]
        forward, backward = amplitudes["forward"], amplitudes["backward"]
        return (forward, backward) if self.direction == 1 else (backward, forward)

    def __repr__(self):
        return f"ModePort({self.name!r}, {self.cross_section!r}, direction={self.direction:+d})"


def mode_s_matrix(results, port_list) -> torch.Tensor:
    """The S-matrix of a device from one run per excited port: ``S_pq = outgoing_p / incoming_q`` in
    the run exciting port ``q`` (reference planes at the ports' monitors).

    Args:
        results: one :class:`~mindelec.fdtd.Result` per port, ``results[q]`` from the run whose only
            source is ``port_list[q].source(...)``; every run carries all the ports' monitors.
        port_list: the :class:`ModePort` objects, in S-matrix order.

    Returns:
        (F, P, P) complex tensor, ``S[f, p, q] = S_pq``.

    Raises:
        ConfigurationError: a result count that does not match the ports.
    """
    port_list = list(port_list)
    if len(results) != len(port_list):
        raise ConfigurationError(
            f"mode_s_matrix: {len(results)} results for {len(port_list)} ports; run once per excited port"
        )
    columns = []
    for excited, result in zip(port_list, results):
        incoming = excited.waves(result)[0]
        columns.append(torch.stack([port.waves(result)[1] / incoming for port in port_list], dim=-1))
    return torch.stack(columns, dim=-1)


def mode_network(frequencies, s_matrix, port_list, definition="power_current", name=None):
    """A scikit-rf ``Network`` of mode S-parameters with each port's characteristic impedance as its
    reference (:meth:`ModePort.impedance`); ``network.renormalize(50)`` then gives 50 ohm S-parameters.

    Args:
        frequencies: (F,) Hz, increasing.
        s_matrix: (F, P, P) complex, e.g. :func:`mode_s_matrix`'s.
        port_list: the P :class:`ModePort` objects, on transmission lines (metal on their planes).
        definition: the impedance definition, as :meth:`ModePort.impedance`.
        name: the network's name.

    Raises:
        ConfigurationError: a port without metal on its plane, an unknown definition.
        ValueError: as :func:`to_network`.
    """
    impedances = torch.stack([port.impedance(frequencies, definition) for port in port_list], dim=-1)
    return to_network(frequencies, s_matrix, z0=_as_numpy(impedances), name=name)
