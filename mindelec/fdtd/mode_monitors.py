"""Mode monitors: DFT fields on a cross-section split into forward and backward mode amplitudes.

A :class:`ModeMonitor` records the running DFT of the transverse fields around a
:class:`~mindelec.fdtd.mode_sources.CrossSection` at integer node ``i`` along x: ``E_y, E_z`` on the
E planes ``i`` and ``i + 1``, ``H_y, H_z`` on the half plane ``i`` between them (2D: the components
the polarization carries). The **reference plane** is that half plane, ``x_i + dx/2``
(``reference_position``), where the H field lives; the E field there is the mean of its two planes
divided by ``cos(kappa dx / 2)``, exact for any sum of forward and backward waves of the mode. This is
the line :meth:`mindelec.fdfd.Simulation.mode_amplitudes` reads for the same position, so FDTD and
FDFD S-parameters share their reference planes (with E read on the integer plane the phase would be
off by ``kappa dx / 2`` per port). In 2D TE, whose FDFD main field ``H_z`` lives on the half nodes,
the roles swap: the reference is the E plane ``x_i`` and H is the mean of the half planes ``i - 1``
and ``i``.

Per frequency ``f`` the mode ``(E_m, H_m)`` (1 W, real transverse fields) is solved at the Yee
scheme's numerical frequency ``sin(pi f dt) / (pi dt)`` (the FDTD phasors obey Maxwell's equations at
that frequency), and with ``X = sum (E x H_m) . x dA`` and ``Y = sum (E_m x H) . x dA``::

    forward = (X + Y) / 4,   backward = (X - Y) / 4

so that ``|forward|^2`` is the power (W; W/m in 2D) the mode carries towards +x, per unit of the DFT
(``J s`` for a pulse). Amplitude ratios of one run (``backward / forward`` at the source port,
``forward`` at another port over the source port's) are S-parameters
(:func:`mindelec.ports.mode_s_matrix`).
"""

from __future__ import annotations

import math
import warnings

import torch

from common.errors import ConfigurationError

from .mode_sources import CrossSection, mode_amplitudes
from .monitors import DFTMonitor, _DFTRecorder
from .placement import PlacementWarning

__all__ = ["ModeMonitor"]

#: the transverse components a monitor reads (those the simulation carries)
_TRANSVERSE = ("Ey", "Ez", "Hy", "Hz")


class ModeMonitor(DFTMonitor):
    """Forward and backward amplitudes of one mode through a cross-section, per frequency.

    Args:
        name: key of the result.
        cross_section: a :class:`~mindelec.fdtd.mode_sources.CrossSection` of the simulation's grid.
        frequencies: (F,) Hz; the mode must be guided at each.
        mode_index: 0 for the fundamental mode, ...

    A backward amplitude is that of the mode ``(E_m, -H_m)``: ratios of backward to forward amplitudes
    are reflection coefficients of E (FDFD's TE amplitudes, of its main field ``H_z``, have the other sign).

    The result holds ``"frequencies"`` (F,), ``"forward"`` and ``"backward"`` ((F,) complex amplitudes,
    sqrt(W) s, or sqrt(W/m) s in 2D) and ``"reference_position"`` (m).

    Raises:
        ConfigurationError: not a :class:`CrossSection`, or the plane's last node is the domain's.
    """

    def __init__(self, name, cross_section, frequencies, mode_index=0):
        if not isinstance(cross_section, CrossSection):
            raise ConfigurationError(
                f"ModeMonitor({name!r}): cross_section must be a CrossSection, got {cross_section!r}"
            )
        components = tuple(c for c in _TRANSVERSE if c in cross_section.active)
        super().__init__(name, frequencies, components)
        # 2D TE: FDFD's main field is H_z (half nodes), so its reference line is the E plane itself
        averaged = "H" if cross_section.polarization == "TE" else "E"
        reference = cross_section.position + (0.0 if averaged == "H" else cross_section.spacing / 2)
        self._set(
            cross_section=cross_section,
            mode_index=int(mode_index),
            reference_position=reference,
            averaged=averaged,
        )

    def recorder(self, grid, polarization, dt, dtype, device):
        if (
            tuple(grid.shape) != tuple(self.cross_section.grid.shape)
            or grid.size != self.cross_section.grid.size
        ):
            raise ConfigurationError(f"{self!r}: its cross-section belongs to another grid")
        if polarization != self.cross_section.polarization:
            raise ConfigurationError(
                f"{self!r}: its cross-section is for polarization {self.cross_section.polarization!r}, "
                f"the simulation's is {polarization!r}"
            )
        index = self.cross_section.index
        slices = {
            component: (
                slice(index - 1, index + 1)
                if component[0] == self.averaged == "H"
                else slice(index, index + (2 if component[0] == self.averaged else 1)),
                slice(0, grid.shape[1]),
                slice(0, grid.shape[2]),
            )
            for component in self.components
        }
        return _ModeRecorder(self, slices, grid, dt, dtype, device)

    def __repr__(self):
        return f"ModeMonitor({self.name!r}, mode {self.mode_index} at x = {self.reference_position:g} m)"


class _ModeRecorder(_DFTRecorder):
    def __init__(self, monitor, slices, grid, dt, dtype, device):
        super().__init__(monitor.name, monitor.frequencies, slices, grid, dt, dtype, device)
        self.monitor = monitor

    def set_edge_weights(self, weights):
        """A conformal run: the mode amplitudes pair the raw node values with the mode solver's fields, so a
        plane that crosses partly covered E edges (the rims of conformal sheets and strips) is warned about:
        there the node holds the field on the edge's open part, which the overlap does not weigh."""
        for key, component in self.components.items():
            if component in weights:
                weight = weights[component][self.slices[key]]
                if bool(((weight > 0) & (weight < 1)).any()):
                    warnings.warn(PlacementWarning(
                        f"{self.monitor!r} crosses the rims of conformal metal (subpixel=True): its mode "
                        "amplitudes use the raw E values there, which the overlap does not weigh by the "
                        "edges' open fractions (a conformal microstrip's power through such a plane was 36 % "
                        "high before fluxes were weighted); for line ports through metal use subpixel=False, "
                        "or check against a FluxMonitor"), stacklevel=2)
                    return

    def _amplitudes(self, transforms, frequency_index):
        """``(forward, backward)`` at one frequency (module docstring)."""
        section = self.monitor.cross_section
        frequency = float(self.frequencies[frequency_index])
        numerical = math.sin(math.pi * frequency * self.dt) / (math.pi * self.dt)
        electric, magnetic, kappa = section.mode(numerical, self.monitor.mode_index)
        correction = 1.0 / math.cos(kappa * section.spacing / 2)
        area = math.prod(self.grid.spacing[1 : self.grid.ndim])
        fields = torch.zeros((2,) + tuple(electric.shape), dtype=torch.complex128)
        for name, value in transforms.items():
            value = value[frequency_index].to(torch.complex128)
            kind = 0 if name[0] == "E" else 1
            if name[0] == self.monitor.averaged:  # the mean of two planes, carried to the one between
                value = 0.5 * (value[0] + value[1]) * correction
            else:
                value = value[0]
            fields[kind, "xyz".index(name[1])] = value.reshape(fields.shape[2:])
        return mode_amplitudes(fields[0], fields[1], electric, magnetic, area)

    def finish(self, samples):
        transforms = self.transforms()
        pairs = [self._amplitudes(transforms, index) for index in range(len(self.frequencies))]
        forward, backward = (torch.stack([pair[k] for pair in pairs]) for k in (0, 1))
        return {
            "frequencies": self.frequencies,
            "forward": forward,
            "backward": backward,
            "reference_position": self.monitor.reference_position,
        }
