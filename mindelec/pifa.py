"""A planar inverted-F antenna (PIFA) on a finite ground plane, simulated by 3D FDTD.

The antenna: a rectangular PEC top plate ``length`` (x, along the shorted edge) by ``width`` (y) held
``height`` above a finite rectangular PEC ground plane on air, joined to it by a vertical shorting plate
``short_width`` wide at one corner of the edge ``y = -width / 2`` (from ``x = -length / 2``), and fed by
a vertical pin on the short's centre line, ``feed_offset`` in from that edge. The top plate is centred
over the ground plane, or ``plate_shift`` off its centre along y. All metal is zero-thickness
(:func:`mindelec.fdtd.pec_sheet`: plates and a one-cell wire for the pin); the feed is a one-cell 50 ohm
:class:`mindelec.fdtd.LumpedPort` at the pin's foot, between the ground and the pin.

Uniform cubic cells: every plate edge, the short, the feed and the ground's edges must lie on grid nodes
(the builder refuses a design whose half-sizes, height, short width, half short width, feed offset or
plate shift are not whole numbers of cells), so the drawn antenna is the design itself, not a rounding.

* :class:`PIFADesign` - the dimensions (m);
* :func:`pifa_simulation` - the :class:`mindelec.fdtd.Simulation` and its port for one design and cell;
* :func:`quarter_wave_resonance` - the textbook quarter-wave estimates of the fundamental resonance;
* :func:`resonance` - the ``|S11|`` minimum of a run.

Checked against a measured PIFA and an openEMS model of it in ``tests/mindelec/test_pifa.py`` and
``benchmarks/pifa_published.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from common import checks
from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT

__all__ = ["PIFADesign", "PIFAModel", "pifa_simulation", "quarter_wave_resonance", "resonance"]


@dataclass(frozen=True)
class PIFADesign:
    """The dimensions of a PIFA (m; all positive but ``plate_shift``).

    Args:
        length: ``L1``, the top plate along the shorted edge (x).
        width: ``L2``, the top plate from the shorted edge to the open edge (y).
        height: ``H``, the top plate above the ground plane (z), also the short's and the pin's height.
        short_width: ``W``, the shorting plate along the shorted edge from the plate's corner (``<= length``).
        feed_offset: the feed pin from the shorted edge along y (``< width``), on the short's centre line.
        ground_length, ground_width: the ground plane along x and y.
        plate_shift: the top plate's centre from the ground plane's centre along y (m, either sign; 0: the
            plate centred over the ground).

    The defaults are the air PIFA of M.-C. Huynh's M.S. thesis (Virginia Tech, 2000; Table 5-1's 80 mm
    row), as transcribed in the public repository king-aj3/EMStudioFree: a 20 x 20 mm plate 10 mm over an
    80 x 80 mm ground, a 5 mm short at the plate's side edge; the table's probe position px = 2.1 mm, read
    as the distance from the shorted edge, is drawn at 2.5 mm so that it lies on the nodes of every grid of
    ``benchmarks/pifa_published.py``.
    """

    length: float = 20e-3
    width: float = 20e-3
    height: float = 10e-3
    short_width: float = 5e-3
    feed_offset: float = 2.5e-3
    ground_length: float = 80e-3
    ground_width: float = 80e-3
    plate_shift: float = 0.0

    def __post_init__(self):
        if not (isinstance(self.plate_shift, (int, float)) and math.isfinite(self.plate_shift)):
            raise ConfigurationError(
                f"PIFADesign: plate_shift must be a finite length (m), got {self.plate_shift!r}")
        for name, value in vars(self).items():
            if name == "plate_shift":
                continue
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value < 10):
                raise ConfigurationError(f"PIFADesign: {name} must be a length in (0, 10) m, got {value!r}")
        if self.short_width > self.length:
            raise ConfigurationError(
                f"PIFADesign: short_width {self.short_width} m is wider than the plate ({self.length} m)")
        if self.feed_offset >= self.width:
            raise ConfigurationError(
                f"PIFADesign: feed_offset {self.feed_offset} m puts the feed off the plate ({self.width} m)")
        if self.ground_length < self.length or self.ground_width < self.width + 2 * abs(self.plate_shift):
            raise ConfigurationError(
                f"PIFADesign: the ground plane ({self.ground_length} x {self.ground_width} m) must cover the "
                f"top plate ({self.length} x {self.width} m)")


@dataclass(frozen=True)
class PIFAModel:
    """What :func:`pifa_simulation` builds: the ``simulation``, its ``port`` (the 50 ohm
    :class:`~mindelec.fdtd.LumpedPort` named ``"feed"``) and the ``cell`` size (m)."""

    simulation: object
    port: object
    cell: float


def _cells(value, cell, name):
    """``value / cell`` as an integer, or an error naming the dimension."""
    count = value / cell
    if abs(count - round(count)) > 1e-6 * max(1.0, abs(count)):
        raise ConfigurationError(
            f"pifa_simulation: {name} = {value * 1e3:g} mm is not a whole number of {cell * 1e3:g} mm cells "
            f"({count:.4f}); pick a cell that divides it")
    return round(count)


def pifa_simulation(
    design: PIFADesign | None = None,
    cell: float = 1.25e-3,
    air: float = 20e-3,
    pml: int = 10,
    band: tuple[float, float] = (1.2e9, 2.8e9),
    n_frequencies: int = 161,
    threads: int | None = 1,
) -> PIFAModel:
    """The FDTD set-up of one PIFA: ground, top plate, short, feed pin, 50 ohm port, PML.

    Args:
        design: the dimensions (default :class:`PIFADesign`'s, Huynh's 80 mm-ground PIFA).
        cell: the cubic cell's edge (m). The ground plane's and the plate's half-sizes, the height, the
            short's width and the feed's offsets (``short_width / 2``, ``feed_offset``) must be whole
            numbers of cells.
        air: the free space between the metal and the PML on every side (m, rounded up to whole cells).
        pml: the PML's thickness (cells).
        band: the port's frequency band (Hz); the source's Gaussian spectrum spans it.
        n_frequencies: the number of port frequencies, evenly spaced over ``band``.
        threads: CPU threads of the run.

    Returns:
        :class:`PIFAModel`. Run ``model.simulation.run(...)``; ``result["feed"]`` holds the port's
        ``frequencies`` (Hz), ``s11`` and ``impedance`` (ohm) on ``n_frequencies`` points.

    Raises:
        ConfigurationError: a dimension that is not a whole number of cells (naming it), a height under
            two cells (the port and the pin need one each), or bad counts.
    """
    design = PIFADesign() if design is None else design
    if not isinstance(design, PIFADesign):
        raise ConfigurationError(f"pifa_simulation: design must be a PIFADesign, got {design!r}")
    cell = checks.positive(cell, "pifa_simulation: cell (m)")
    air = checks.non_negative(air, "pifa_simulation: air (m)")
    pml = checks.positive_int(pml, "pifa_simulation: pml (cells)")
    if checks.positive_int(n_frequencies, "pifa_simulation: n_frequencies") < 3:
        raise ConfigurationError(f"pifa_simulation: n_frequencies must be 3 or more, got {n_frequencies}")
    if threads is not None:
        threads = checks.positive_int(threads, "pifa_simulation: threads")
    if not isinstance(band, (tuple, list)) or len(band) != 2:
        raise ConfigurationError(f"pifa_simulation: band must be (low, high) Hz, got {band!r}")
    band = tuple(checks.positive(f, "pifa_simulation: band (Hz)") for f in band)
    if band[0] >= band[1]:
        raise ConfigurationError(f"pifa_simulation: band must be (low, high) Hz, 0 < low < high, got {band}")
    from mindelec import fdtd

    half_ground = (_cells(design.ground_length / 2, cell, "ground_length / 2"),
                   _cells(design.ground_width / 2, cell, "ground_width / 2"))
    half_plate = (_cells(design.length / 2, cell, "length / 2"), _cells(design.width / 2, cell, "width / 2"))
    shift = _cells(abs(design.plate_shift), cell, "plate_shift") * (1 if design.plate_shift >= 0 else -1)
    rise = _cells(design.height, cell, "height")
    short = _cells(design.short_width, cell, "short_width")
    feed_x = _cells(design.short_width / 2, cell, "short_width / 2")
    feed_y = _cells(design.feed_offset, cell, "feed_offset")
    if rise < 2 or feed_y < 1:
        raise ConfigurationError(
            f"pifa_simulation: on {cell * 1e3:g} mm cells the height is {rise} cells and the feed "
            f"{feed_y} cells from the short; the port and the pin need a cell each (height >= 2 cells) and "
            "the feed must stand off the short (>= 1 cell)")
    margin = math.ceil(air / cell - 1e-9) + pml
    # x and y: an even number of cells, the origin a node; z: the ground plane `margin` cells up
    counts = (2 * (half_ground[0] + margin), 2 * (half_ground[1] + margin), 2 * margin + rise)
    size = tuple(n * cell for n in counts)
    ground = -size[2] / 2 + margin * cell
    top = ground + rise * cell
    corner = (-half_plate[0] * cell, (shift - half_plate[1]) * cell)  # the shorted edge's corner
    feed = (corner[0] + feed_x * cell, corner[1] + feed_y * cell)
    frequencies = torch.linspace(band[0], band[1], n_frequencies, dtype=torch.float64)
    waveform = fdtd.GaussianPulse(f0=sum(band) / 2, fwidth=band[1] - band[0])
    port = fdtd.LumpedPort("feed", center=(*feed, ground + cell / 2), size=(cell,) * 3, waveform=waveform,
                           frequencies=frequencies)
    metal = [
        fdtd.pec_sheet((0, 0, ground), (design.ground_length, design.ground_width, 0), cell),
        fdtd.pec_sheet((0, shift * cell, top), (design.length, design.width, 0), cell),
        fdtd.pec_sheet((corner[0] + short * cell / 2, corner[1], (ground + top) / 2),
                       (short * cell, 0, rise * cell), cell),
        fdtd.pec_sheet((*feed, (ground + cell + top) / 2), (0, 0, (rise - 1) * cell), cell),
    ]
    simulation = fdtd.Simulation(
        size=size, cell_size=cell, boundary=fdtd.PML(thickness=pml), structures=[*metal, port.resistor],
        sources=[port.source], monitors=[port], threads=threads,
    )
    return PIFAModel(simulation, port, cell)


def quarter_wave_resonance(design: PIFADesign) -> dict[str, float]:
    """The quarter-wave estimates of the fundamental resonance (Hz) of an air PIFA; the ground plane,
    the feed and the short's position along the edge do not enter.

    * ``"short_plate"``: ``c / (4 (L2 + H))``, the full-width short (``W = L1``): a quarter-wave patch;
    * ``"short_pin"``: ``c / (4 (L1 + L2 + H - W))``, the current path round the plate from a narrow short;
    * ``"interpolated"``: Hirasawa and Haneishi's blend of the two (*Analysis, Design, and Measurement of
      Small and Low-Profile Antennas*, Artech House 1992, ch. 5), with ``r = W / L1``:
      ``r f_plate + (1 - r) f_pin`` for ``L1 <= L2``, ``r^k f_plate + (1 - r^k) f_pin`` with ``k = L1 / L2``
      otherwise.

    Args:
        design: the dimensions.

    Returns:
        a dict of the three frequencies (Hz).
    """
    plate = SPEED_OF_LIGHT / (4 * (design.width + design.height))
    pin = SPEED_OF_LIGHT / (4 * (design.length + design.width + design.height - design.short_width))
    ratio = design.short_width / design.length
    weight = ratio if design.length <= design.width else ratio ** (design.length / design.width)
    return {"short_plate": plate, "short_pin": pin, "interpolated": weight * plate + (1 - weight) * pin}


def resonance(result) -> tuple[float, float]:
    """``(frequency in Hz, |S11| in dB)`` at the deepest ``|S11|`` of a :func:`pifa_simulation` run (the grid
    minimum refined by a parabola in dB, :func:`mindelec.antennas.resonance_frequency`).

    Args:
        result: the run's :class:`~mindelec.fdtd.Result`.
    """
    from mindelec.antennas import resonance_frequency

    feed = result["feed"]
    frequencies = feed["frequencies"].double()
    s11_db = 20 * torch.log10(feed["s11"].abs().double().clamp(min=1e-12))
    frequency = float(resonance_frequency(frequencies, s11_db[None])[0])
    return frequency, float(np.interp(frequency, frequencies.numpy(), s11_db.numpy()))
