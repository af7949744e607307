"""Run control: the band the fields carry, and stopping a run once its fields have decayed.

``Simulation.run(until=..., until_decayed=...)`` runs until the fields have decayed (:class:`Decay`)
or until the maximum time (``until``) or step count (``steps``), whichever comes first. The measure is
either the electromagnetic energy on the grid with vacuum weights, ``sum (eps0 E^2 + mu0 H^2)`` over
the Yee nodes (read every ``check_every`` steps: a pass over the fields, about the cost of one step in
3D), or ``|F|^2`` summed over the components of a named :class:`~mindelec.fdtd.FieldProbe` (read every
step). Every ``check_every`` steps after the sources have turned off (the last step at which a source's
current is above ``1e-6`` of its peak: a continuous wave never turns off, so the run goes to the
maximum), the run stops if the largest value measured since the previous check is below
``threshold`` times the largest value measured in the whole run. A lossless resonator never decays:
its run reaches the maximum. ``result.steps`` and ``result.times`` show where the run stopped and
``result.metadata["decayed"]`` whether it stopped on the criterion.
"""

import torch

from common import checks
from common.errors import ConfigurationError
from common.units import VACUUM_PERMEABILITY, VACUUM_PERMITTIVITY

from .monitors import FieldProbe

#: level (of its peak) below which a source counts as off
SOURCE_OFF_LEVEL = 1e-6
#: level of a source's amplitude spectrum (-80 dB) that bounds the band the fields carry
BAND_LEVEL = 1e-4


def field_band(sources):
    """The highest frequency (Hz) the sources put into the fields (to ``BAND_LEVEL``), or ``None`` when a
    source's waveform does not state its spectrum (``spectrum_limit``)."""
    band = 0.0
    for source in sources:
        limit = getattr(source.waveform, "spectrum_limit", None)
        if limit is None:
            return None
        band = max(band, float(limit(BAND_LEVEL)))
    return band


class Decay:
    """When ``Simulation.run(until_decayed=...)`` stops (module docstring).

    Args:
        threshold: the decay, relative to the run's peak (0 < threshold < 1), e.g. ``1e-5`` (-50 dB).
        probe: the name of a :class:`~mindelec.fdtd.FieldProbe` of the simulation whose ``|F|^2`` is watched;
            ``None`` (default) watches the field energy.
        check_every: steps between checks (>= 1).
    """

    def __init__(self, threshold=1e-5, probe=None, check_every=50):
        threshold = checks.positive(threshold, "Decay: threshold")
        if not 0 < threshold < 1:
            raise ConfigurationError(f"Decay: threshold must lie in (0, 1), got {threshold}")
        if not (isinstance(check_every, int) and check_every >= 1):
            raise ConfigurationError(
                f"Decay: check_every must be a positive number of steps, got {check_every!r}"
            )
        if probe is not None and not isinstance(probe, str):
            raise ConfigurationError(f"Decay: probe must be a FieldProbe's name, got {probe!r}")
        self.threshold, self.probe, self.check_every = threshold, probe, check_every

    @classmethod
    def of(cls, value):
        """``value`` as a :class:`Decay`: a Decay, or a number (the threshold)."""
        return value if isinstance(value, Decay) else cls(threshold=value)

    def __repr__(self):
        return f"Decay(threshold={self.threshold:g}, probe={self.probe!r}, check_every={self.check_every})"


def sources_off_step(stepper):
    """The number of steps after which every source of ``stepper`` stays below ``SOURCE_OFF_LEVEL``."""
    last = 0
    series = [values for _, _, values in stepper.sources] + [line.drive for line in stepper.plane_waves]
    series += [box.drive for box in stepper.tfsf]
    for values in series:
        values = torch.tensor(values, dtype=torch.float64).abs()
        peak = float(values.max()) if len(values) else 0.0
        above = torch.nonzero(values > SOURCE_OFF_LEVEL * peak)
        if peak > 0 and len(above):
            last = max(last, int(above[-1, 0]) + 1)
    return last


class DecayWatcher:
    """Watches one run for :class:`Decay`: ``stop(fields, step)`` after each step says whether to stop.

    Args:
        decay: the :class:`Decay`.
        off_step: from :func:`sources_off_step`.
        probe_nodes: ``{component: node index}`` of the watched probe, or ``None`` for the field energy.
    """

    def __init__(self, decay, off_step, probe_nodes=None):
        self.decay, self.off_step, self.probe_nodes = decay, off_step, probe_nodes
        self.peak = 0.0
        self.window = 0.0
        self.decayed = False

    def _measure(self, fields):
        if self.probe_nodes is not None:
            return sum(float(fields[c][index]) ** 2 for c, index in self.probe_nodes.items())
        total = 0.0
        for component, field in fields.items():
            weight = VACUUM_PERMITTIVITY if component[0] == "E" else VACUUM_PERMEABILITY
            total += weight * float(torch.linalg.vector_norm(field, dtype=torch.float64) ** 2)
        return total

    def stop(self, fields, step):
        """After ``step`` (0-based): measure if it is time to, and say whether the run should stop."""
        done = step + 1
        checking = done % self.decay.check_every == 0
        if self.probe_nodes is None and not checking:
            return False
        value = self._measure(fields)
        self.peak = max(self.peak, value)
        self.window = max(self.window, value)
        if not checking:
            return False
        window, self.window = self.window, 0.0
        if done <= self.off_step or self.peak == 0:
            return False
        self.decayed = window <= self.decay.threshold * self.peak
        return self.decayed


def probe_nodes(decay, monitors, recorders):
    """The watched probe's ``{component: node}`` from the run's recorders, or ``None`` (field energy).

    Raises:
        ConfigurationError: the simulation has no FieldProbe of that name.
    """
    if decay.probe is None:
        return None
    for monitor, recorder in zip(monitors, recorders):
        if monitor.name == decay.probe and isinstance(monitor, FieldProbe):
            return recorder.indices
    raise ConfigurationError(f"{decay!r}: the simulation has no FieldProbe named {decay.probe!r}")


def decay_watcher(until_decayed, differentiable, stepper, monitors, recorders):
    """The run's :class:`DecayWatcher` for ``run(until_decayed=...)``, or ``None`` when not asked for.

    Raises:
        ConfigurationError: for a differentiable run, or a probe name that is not a FieldProbe's.
    """
    if until_decayed is None:
        return None
    if differentiable:
        raise ConfigurationError("Simulation.run: until_decayed is not available for differentiable runs")
    decay = Decay.of(until_decayed)
    return DecayWatcher(decay, sources_off_step(stepper), probe_nodes(decay, monitors, recorders))
