"""What an FDTD set-up can carry: the highest frequency, the stable time step and the memory of a run.

:class:`~mindelec.fdtd.Simulation` asks these questions of its set-up before anything grid-sized is
allocated and refuses what it cannot stand behind (``common.errors``); where things sit is checked by
:mod:`~mindelec.fdtd.placement`.

- **Frequencies.** The highest frequency the grid carries (``Simulation.max_frequency``) is the lower of
  the time-step Nyquist frequency ``1 / (2 dt)`` and the spatial Nyquist frequency ``v / (2 dx_max)``,
  where ``dx_max`` is the coarsest spacing and ``v = c / sqrt(max eps_r * max mu_r)`` the phase velocity
  of the densest medium present (the ``permittivity`` of every medium, ``eps_inf`` for Drude and Lorentz
  media, and of the design regions): above it the densest medium holds fewer than two cells per
  wavelength, and fields there are aliased. A monitor frequency above the limit, and a source whose
  spectrum (to -40 dB, ``waveform.spectrum_limit()``) reaches beyond it, raise
  :class:`~common.errors.ConfigurationError` giving the limit; a monitor frequency with fewer than
  :data:`CELLS_PER_WAVELENGTH` cells per wavelength only warns.
- **Time step.** ``dt_max = 1 / (c_max sqrt(sum_a 1/dx_a^2))``, ``c_max`` the fastest light speed among
  the media (:func:`stability_limit`).
- **Memory.** A run whose estimated memory (:func:`memory_estimate`) exceeds the memory available is
  refused with the estimate (:func:`check_memory`).
"""

from __future__ import annotations

import math
import warnings

import torch

from common import threads as threads_module
from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT

from .grid import E_COMPONENTS
from .monitors import DFTMonitor

__all__ = ["CELLS_PER_WAVELENGTH", "check_frequencies", "check_memory", "max_frequency", "memory_estimate",
           "spatial_limit", "stability_limit"]

#: below this many cells per wavelength (in the densest medium) a monitor frequency draws a warning: the
#: Yee scheme's phase error is then above about 1 %
CELLS_PER_WAVELENGTH = 10


def _extreme(value, pick):
    """The largest (``pick=max``) or smallest value of a float or tensor, as a float."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().max() if pick is max else value.detach().min())
    return float(value)


def _material_extreme(media, design_regions, name, pick):
    values = [_extreme(getattr(medium, name), pick) for medium in media]
    if name == "permittivity":
        values += [_extreme(region.permittivity, pick) for region in design_regions]
    return pick(values)


def stability_limit(grid, media, design_regions) -> float:
    """The Yee stability limit of the time step (s): ``1 / (c_max sqrt(sum_a 1/dx_a^2))``.

    Args:
        grid: the :class:`~mindelec.fdtd.grid.Grid`.
        media: the :class:`~mindelec.fdtd.materials.Medium` objects present.
        design_regions: the design regions (their permittivity counts as a medium's).
    """
    permittivity = _material_extreme(media, design_regions, "permittivity", min)
    permeability = _material_extreme(media, design_regions, "permeability", min)
    speed = (
        SPEED_OF_LIGHT / math.sqrt(min(permittivity, 1.0) * min(permeability, 1.0))
        if permittivity * permeability < 1
        else SPEED_OF_LIGHT / math.sqrt(permittivity * permeability)
    )
    inverse_squares = sum(1 / grid.spacing[a] ** 2 for a in range(grid.ndim))
    return 1.0 / (speed * math.sqrt(inverse_squares))


def spatial_limit(simulation, cells_per_wavelength) -> float:
    """The frequency (Hz) at which the densest medium of ``simulation`` holds ``cells_per_wavelength``
    cells per wavelength of the coarsest spacing."""
    media, regions = simulation.media, simulation.design_regions
    permittivity = _material_extreme(media, regions, "permittivity", max)
    permeability = _material_extreme(media, regions, "permeability", max)
    speed = SPEED_OF_LIGHT / math.sqrt(permittivity * permeability)
    grid = simulation.grid
    return speed / (cells_per_wavelength * max(grid.spacing[: grid.ndim]))


def max_frequency(simulation) -> float:
    """The highest frequency (Hz) the grid and time step of ``simulation`` carry (module docstring)."""
    return min(0.5 / simulation.dt, spatial_limit(simulation, 2))


def _limit_text(simulation) -> str:
    grid = simulation.grid
    return (
        f"this grid carries at most {max_frequency(simulation):.6g} Hz (time-step Nyquist 1/(2 dt) = "
        f"{0.5 / simulation.dt:.6g} Hz; two cells of {max(grid.spacing[: grid.ndim]):.6g} m per "
        f"wavelength in the densest medium: {spatial_limit(simulation, 2):.6g} Hz); make the cells smaller"
    )


def check_frequencies(simulation) -> None:
    """Refuse monitor frequencies and source spectra beyond the grid's limit (ConfigurationError giving
    it); warn, once per simulation, about monitor frequencies with fewer than
    :data:`CELLS_PER_WAVELENGTH` cells per wavelength."""
    limit = max_frequency(simulation)
    accurate = spatial_limit(simulation, CELLS_PER_WAVELENGTH)
    coarse = []
    for monitor in simulation.monitors:
        if not isinstance(monitor, DFTMonitor):
            continue
        highest = float(monitor.frequencies.max())
        if highest > limit:
            raise ConfigurationError(
                f"{monitor!r}: frequency {highest:.6g} Hz is beyond the grid's limit; "
                + _limit_text(simulation)
            )
        if highest > accurate * (1 + 1e-9):  # exactly 10 cells per wavelength is fine
            coarse.append(f"{monitor.name!r} ({highest:.6g} Hz)")
    if coarse:
        warnings.warn(
            f"Simulation: monitor frequencies above {accurate:.6g} Hz have fewer than "
            f"{CELLS_PER_WAVELENGTH} cells per wavelength in the densest medium: {', '.join(coarse)}; "
            "expect phase errors above about 1 %",
            stacklevel=4,  # check_frequencies, Simulation.__init__, its renamed_arguments wrapper, the caller
        )
    for source in simulation._sources_with_waveforms:
        spectrum_limit = getattr(source.waveform, "spectrum_limit", None)
        if spectrum_limit is None:
            continue
        reach = float(spectrum_limit())
        if reach > limit:
            raise ConfigurationError(
                f"{source!r}: the source spectrum reaches {reach:.6g} Hz (-40 dB), beyond the grid's "
                "limit; narrow or lower the pulse, or " + _limit_text(simulation)
            )


def memory_estimate(simulation, steps=None) -> int:
    """Estimated memory (bytes) of a run: grid-sized tensors plus monitor buffers.

    Counted per cell: the field components, one difference buffer, the update coefficients of every
    component when the materials are not uniform, three tensors per dispersive pole and E component;
    then each DFT or flux monitor's complex accumulators, and, when ``steps`` is given, the snapshots and
    (for a differentiable run) the ``2 sqrt(steps)`` stored and recomputed states, and the TF/SF boxes'
    incident tables (:mod:`~mindelec.fdtd.tfsf`). Rasterisation
    temporaries, CPML slabs and probes are small and not counted.

    Args:
        simulation: the :class:`~mindelec.fdtd.Simulation`.
        steps: the number of steps of the run, or ``None`` for what does not depend on it.
    """
    cells = math.prod(simulation.grid.shape)
    value = torch.finfo(simulation.dtype).bits // 8
    active = simulation.active
    electric = sum(1 for component in active if component in E_COMPONENTS)
    per_cell = len(active) + 1  # the fields and one difference buffer
    uniform = not simulation.structures and not simulation.design_regions and not any(
        isinstance(getattr(simulation.default_medium, name), torch.Tensor)
        for name in ("permittivity", "conductivity", "permeability")
    )
    if not uniform:
        per_cell += 2 * electric + (len(active) - electric)
    poles = sum(1 for medium in simulation.media if medium._pole() is not None)
    per_cell += 3 * poles * electric
    total = cells * per_cell * value
    total += sum(recorder.memory(steps) for recorder in simulation._recorders())
    if steps is not None and simulation.differentiable:
        total += 2 * math.ceil(math.sqrt(steps)) * len(active) * cells * value
    if steps is not None:
        total += sum(box.memory(steps) for box in simulation._tfsf)
    return int(total)


def check_memory(simulation, steps=None) -> None:
    """Refuse a run whose :func:`memory_estimate` exceeds the memory available on its device
    (ConfigurationError with the estimate, the cells and the likely unit mistake)."""
    available = threads_module.available_memory(simulation.device)
    needed = memory_estimate(simulation, steps)
    if available is not None and needed > available:
        grid = simulation.grid
        shape = " x ".join(str(n) for n in grid.shape[: grid.ndim])
        raise ConfigurationError(
            f"Simulation: a run on {shape} cells ({math.prod(grid.shape):.3g} cells of "
            f"{simulation.dtype}) needs about {needed / 2**30:.3g} GiB, more than the "
            f"{available / 2**30:.3g} GiB available on {simulation.device}; check that size and cell_size "
            "are in metres, or coarsen the grid"
        )
