"""Two centre-fed thin-wire dipoles with lumped ports: the set-up of the two-antenna (MIMO) validation.

:func:`dipole_pair` builds two dipoles of ``length`` cells (:class:`~mindelec.fdtd.ThinWire` of a given
slenderness ``L / a``, each fed by a one-cell :class:`~mindelec.fdtd.LumpedPort` in the gap at its centre)
in a CPML-bounded vacuum grid, either side by side and parallel (both along z, ``spacing`` cells apart along
x) or crossed (the second along x, ``spacing`` cells away along y, in the plane of the first one's feed), with
an optional :class:`~mindelec.fdtd.NearToFarMonitor` box around both. It returns the
:class:`~mindelec.multiport.LumpedMultiport` of the two ports, the ``build`` callable its ``run`` needs and a
run length; ``tests/mindelec/test_multiport.py`` compares its impedance matrix with the two-wire moment method
and ``benchmarks/mimo_dipoles.py`` sweeps the spacing.

Wire geometry as in :mod:`mindelec.fdtd.thin_wire`: a dipole of ``length`` cells has ``length - 2`` zeroed
edges and the gap, its ends half a cell beyond them (the end correction); ``length`` even.
"""

from dataclasses import dataclass

import torch

from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT

from . import fdtd
from .multiport import LumpedMultiport

#: cells of vacuum between the dipoles' extent and the PML, at least (a third of the length if more)
MARGIN = 8


@dataclass(frozen=True)
class DipolePair:
    """What :func:`dipole_pair` builds: ``multiport.run(build, until=until)`` measures the pair.

    Attributes:
        multiport: the :class:`~mindelec.multiport.LumpedMultiport` of the ports ``"p1"`` and ``"p2"``.
        build: ``build(driven_port) -> mindelec.fdtd.Simulation``.
        until: a run length (s) after which the ports' voltages have decayed (50 transits of a dipole).
        half_wave: the frequency (Hz) at which the dipoles are half a wavelength long.
        cells: the grid's cells per axis.
    """

    multiport: LumpedMultiport
    build: object
    until: float
    half_wave: float
    cells: tuple


def dipole_pair(
    spacing,
    frequencies,
    far_frequencies=(),
    length=22,
    slenderness=5000.0,
    crossed=False,
    cell_size=1e-3,
    pml=8,
    threads=1,
    dtype=torch.float32,
):
    """Two thin-wire dipoles with 50 ohm lumped ports (module docstring).

    Args:
        spacing: the distance between the dipoles' axes (parallel) or from the first's axis to the second
            (crossed), in cells (an integer >= 2).
        frequencies: (F,) the ports' frequencies (Hz).
        far_frequencies: the near-to-far box's frequencies (Hz); empty: no far field (monitor ``"far"``).
        length: each dipole's length ``L`` in cells (even, >= 4).
        slenderness: ``L / a`` with ``a`` the wire radius (the wire must stay thinner than half a cell).
        crossed: ``False`` parallel side by side, ``True`` crossed (see the module docstring).
        cell_size: (m).
        pml, threads, dtype: the CPML's cells, the simulation's threads and dtype.

    Returns:
        :class:`DipolePair`.

    Raises:
        ConfigurationError: for an odd or short length, or a spacing below two cells (the thin-wire model
            needs its wires two cells apart).
    """
    length, spacing = int(length), int(spacing)
    if length < 4 or length % 2:
        raise ConfigurationError(f"dipole_pair: length must be an even number of cells >= 4, got {length}")
    if spacing < 2:
        raise ConfigurationError(f"dipole_pair: spacing must be at least 2 cells, got {spacing}")
    span = length - 1  # the zeroed edges and the gap, half a cell inside each end
    margin = max(MARGIN, span // 3)
    lower, upper = span // 2, span - 1 - span // 2  # edges below and above the gap
    reach = max(lower, upper + 1)
    cell = float(cell_size)
    half_wave = SPEED_OF_LIGHT / (2 * length * cell)
    waveform = fdtd.GaussianPulse(f0=half_wave, fwidth=1.2 * half_wave)
    across = 2 * (margin + pml + 1)
    if crossed:
        centres, axes = [(0, 0, cell / 2), (cell / 2, spacing * cell, 0)], "zx"
        cells = (2 * (reach + margin + pml), across + 2 * spacing, 2 * (reach + margin + pml))
    else:
        left = -(spacing // 2) * cell
        centres, axes = [(left, 0, cell / 2), (left + spacing * cell, 0, cell / 2)], "zz"
        cells = (across + spacing + spacing % 2, across, 2 * (reach + margin + pml))
    ports, wires = [], []
    for number, (centre, axis) in enumerate(zip(centres, axes)):
        port = fdtd.LumpedPort(f"p{number + 1}", centre, (cell,) * 3, waveform, frequencies, axis=axis)
        index = "xyz".index(axis)
        start, end = list(centre), list(centre)
        start[index], end[index] = centre[index] - (lower + 1) * cell, centre[index] + (upper + 1) * cell
        radius = length * cell / slenderness
        wires.append(fdtd.ThinWire(tuple(start), tuple(end), radius, cell, gaps=[centre]))
        ports.append(port)
    monitors = list(ports)
    if len(far_frequencies):
        box = tuple((n - 2 * pml - 4) * cell for n in cells)
        monitors.append(fdtd.NearToFarMonitor("far", far_frequencies, center=(0, 0, 0), size=box))

    def build(driven):
        return fdtd.Simulation(
            size=tuple(n * cell for n in cells),
            cell_size=cell,
            boundary=fdtd.PML(thickness=pml),
            structures=[*wires, *(port.resistor for port in ports)],
            sources=[driven.source],
            monitors=monitors,
            threads=threads,
            dtype=dtype,
        )

    until = 50 * length * cell / SPEED_OF_LIGHT
    return DipolePair(LumpedMultiport(ports), build, until, half_wave, cells)
