"""Scattering, absorption and extinction cross-sections from one run with a :class:`~mindelec.fdtd.TFSFBox`.

Outside a TF/SF box only the scattered field exists, so the outward flux through a closed box there is the
scattered power ``P_s``; inside, the fields are total, and the net flux into a closed box around the
structures is the power they absorb ``P_a`` (the incident wave alone carries none into a closed surface).
Both fluxes are those of :class:`~mindelec.fdtd.FluxBox` (the same face tiling and colocation,
:mod:`~mindelec.fdtd.flux_box`), read from one running DFT. Dividing by the incident intensity
``I(f) = |E_inc(f)|^2 / eta`` gives the cross-sections ``sigma_s = P_s / I``, ``sigma_a = P_a / I`` and
``sigma_e = sigma_s + sigma_a`` (m^2; per unit length, m, in 2D). ``E_inc(f)`` is the running DFT of the
incident field ``amplitude * waveform(t)`` at the sample times and with the sample weight of the monitor's
own DFT (every ``stride``-th step, E at ``(n + 1) dt``), so the pulse's spectrum, its truncation by the run
and the DFT's conventions cancel in the ratio; the fluxes are spectral densities without the 1/2 of time
averages, and so is ``I``.

The scattered-power box encloses the TF/SF box with at least one cell between their faces (two by
default) and must lie outside the PML; the absorbed-power box lies inside the TF/SF box, at least one cell
in from its faces (two by default), and every structure lies wholly inside it or wholly outside it.
Frequencies where the incident spectrum is below :data:`~mindelec.fdtd.tfsf.SPECTRUM_FLOOR` of its peak
are refused rather than divided by about zero. Run until the fields have decayed (``until_decayed``): what
is still in the domain when the run stops is missing from the spectra.
"""

import torch

from common.errors import ConfigurationError

from .flux_box import BoxSurface, _box_nodes, colocated_faces, surface_flux
from .grid import AXES
from .monitors import DFTMonitor, _DFTRecorder
from .tfsf import TFSFBox, _check_structures

__all__ = ["CrossSectionMonitor"]

#: cells between the TF/SF box's faces and the default scattered-power and absorbed-power boxes
DEFAULT_GAP = 2


class CrossSectionMonitor(DFTMonitor):
    """Scattering, absorption and extinction cross-sections of what a :class:`TFSFBox` illuminates.

    ``result[name]`` is a dict of (F,) float64 tensors: ``"scattering"``, ``"absorption"``, ``"extinction"``
    (m^2 in 3D; m, per unit length, in 2D), ``"scattered_power"`` and ``"absorbed_power"`` (the fluxes, W/Hz^2
    for a pulse, per unit length in 2D; :class:`FluxMonitor`'s convention), ``"incident_intensity"``
    (W/m^2/Hz^2) and ``"frequencies"`` (Hz). Module docstring for the method.

    Args:
        name: key of the result.
        frequencies: (Hz), inside the incident pulse's band.
        source: the :class:`TFSFBox` (one of the simulation's sources).
        scattering_size: (m) of the scattered-power box, centred on the TF/SF box; default two cells
            outside its faces.
        absorption_size: (m) of the absorbed-power box, centred on the TF/SF box; default two cells inside
            its faces.

    Raises:
        ConfigurationError: naming the monitor, for a source that is not a TFSFBox or not in the simulation,
            boxes that do not nest as above or touch the PML, a structure crossing the absorbed-power box,
            or a frequency outside the incident spectrum.
    """

    def __init__(self, name, frequencies, source, scattering_size=None, absorption_size=None):
        if not isinstance(source, TFSFBox):
            raise ConfigurationError(
                f"CrossSectionMonitor({name!r}): source must be a TFSFBox, got {source!r}"
            )
        super().__init__(name, frequencies, components=(), center=source.center, size=scattering_size)
        self._set(source=source, absorption_size=absorption_size)

    def __repr__(self):
        return f"CrossSectionMonitor({self.name!r}, source={self.source!r})"

    def _surface(self, grid, polarization, nodes, size, gap, what):
        """The :class:`BoxSurface` of ``size`` (m; default ``gap`` cells out from the TF/SF faces) about the
        TF/SF box's centre."""
        center = tuple(
            -grid.size[a] / 2 + (low + high) / 2 * grid.spacing[a] for a, (low, high) in enumerate(nodes)
        )
        if size is None:
            size = tuple((high - low + 2 * gap) * grid.spacing[a] for a, (low, high) in enumerate(nodes))
        return BoxSurface(grid, polarization, center, size, f"{self!r} ({what} box)")

    def recorder(self, grid, polarization, dt, dtype, device):
        if grid.ndim < 2:
            raise ConfigurationError(f"{self!r}: cross-sections need a 2D or 3D simulation")
        nodes = _box_nodes(grid, self.source.center, self.source.size, repr(self.source))
        surfaces = {
            "scattered": self._surface(grid, polarization, nodes, self.size, DEFAULT_GAP, "scattered-power"),
            "absorbed": self._surface(grid, polarization, nodes, self.absorption_size, -DEFAULT_GAP,
                                      "absorbed-power"),
        }
        for axis, (low, high) in enumerate(nodes):
            s_low, s_high = surfaces["scattered"].nodes[axis]
            a_low, a_high = surfaces["absorbed"].nodes[axis]
            if not (s_low <= low - 1 and s_high >= high + 1):
                raise ConfigurationError(
                    f"{self!r}: along {AXES[axis]} the scattered-power box's faces (nodes {s_low}, {s_high}) "
                    "must "
                    f"enclose the TF/SF box's (nodes {low}, {high}) with at least one cell between them"
                )
            if not (a_low >= low + 1 and a_high <= high - 1):
                raise ConfigurationError(
                    f"{self!r}: along {AXES[axis]} the absorbed-power box's faces (nodes {a_low}, {a_high}) "
                    "must "
                    f"lie inside the TF/SF box's (nodes {low}, {high}), at least one cell in"
                )
        return _CrossSectionRecorder(self, surfaces, grid, dt, dtype, device)


class _CrossSectionRecorder(_DFTRecorder):
    """One running DFT over the tangential fields of both boxes; cross-sections at :meth:`finish`."""

    WEIGHS_EDGES = True

    def __init__(self, monitor, surfaces, grid, dt, dtype, device):
        slices, components = {}, {}
        for kind, surface in surfaces.items():
            for (label, component), (box, _) in surface.entries.items():
                slices[(kind, label, component)] = box
                components[(kind, label, component)] = component
        super().__init__(monitor.name, monitor.frequencies, slices, grid, dt, dtype, device, components)
        self.monitor, self.surfaces, self.incident = monitor, surfaces, None

    def set_incident(self, boxes):
        owner = repr(self.monitor)
        bound = next((box for box in boxes if box.source is self.monitor.source), None)
        if bound is None:
            raise ConfigurationError(f"{owner}: its TFSFBox is not one of the simulation's sources")
        bound.check_frequencies(self.frequencies, self.dt, owner)
        _check_structures(owner, self.grid, self.surfaces["absorbed"].nodes, bound.structures,
                          "the absorbed-power box")
        self.incident = bound

    def finish(self, samples):
        transforms = self.transforms()
        powers = {}
        for kind, surface in self.surfaces.items():
            own = {
                (label, component): value for (k, label, component), value in transforms.items() if k == kind
            }
            powers[kind] = surface_flux(surface, colocated_faces(surface, own))
        # the incident E at the E samples the DFT took: every stride-th step n, at (n + 1) dt
        times = (torch.arange(self.sampled, dtype=torch.float64) * self.stride + 1) * self.dt
        spectrum = self.incident.incident_spectrum(self.frequencies, times, self.weight)
        device = powers["scattered"].device
        intensity = (spectrum.abs() ** 2 / self.incident.impedance).to(device)
        scattering = powers["scattered"] / intensity
        absorption = -powers["absorbed"] / intensity
        return {
            "scattering": scattering,
            "absorption": absorption,
            "extinction": scattering + absorption,
            "scattered_power": powers["scattered"],
            "absorbed_power": -powers["absorbed"],
            "incident_intensity": intensity,
            "frequencies": self.frequencies.to(device),
        }
