"""The ``mindelec`` command line: ``mindelec run config.toml [--output DIR]``.

``run`` loads a TOML configuration (schema :class:`RunConfig`, validated by ``common.config``), runs the
FDTD simulation it describes, and writes into the output folder (printed at the end):

* ``result.h5`` - every monitor's tensors (``Result.save``) and the resolved configuration;
* ``field.png`` - the field snapshot half-way through the run and the magnitude of the DFT field at the
  first source's centre frequency (3D: the z = 0 plane), with the structures outlined;
* ``spectrum.png`` - the amplitude spectrum at each probe, normalised by the source spectrum.

See ``mindelec/examples/dipole2d.toml`` for a complete configuration.
"""

import argparse
import json
import math
import pathlib
import sys
from dataclasses import dataclass, field
from typing import Literal

from common import config as configuration
from common.deprecation import warn_deprecated


@dataclass
class GridConfig:
    """``[grid]``: the domain and its discretisation.

    Attributes:
        size: domain extent per axis (m); 1, 2 or 3 values give a 1D, 2D or 3D simulation.
        cell_size: the edge of a Yee cell (m).
        pml_thickness: PML thickness on every side (cells).
        polarization: ``"TM"`` (Ez, Hx, Hy) or ``"TE"`` (Hz, Ex, Ey), in 2D.
        dtype: the floating-point precision of the fields.
        courant: the time step as a fraction of the stability limit (0 < courant <= 1).
        subpixel: anisotropic smoothing at dielectric interfaces (``Simulation(subpixel=True)``).
        resolution: the old name of ``cell_size``, still read for one release with a ``DeprecationWarning``.
    """

    size: list[float]
    cell_size: float | None = None
    pml_thickness: int = 20
    polarization: Literal["TM", "TE"] = "TM"
    dtype: Literal["float32", "float64"] = "float32"
    courant: float = 0.99
    resolution: float | None = None
    subpixel: bool = False

    def __post_init__(self):
        if self.resolution is not None:
            if self.cell_size is not None:
                raise ValueError("give cell_size only, not also the deprecated resolution")
            warn_deprecated("the [grid] key resolution", "cell_size", stacklevel=2)
            self.cell_size, self.resolution = self.resolution, None
        if self.cell_size is None:
            raise ValueError("missing required key cell_size (the cell size, m)")


@dataclass
class SourceConfig:
    """``[[sources]]``: a point dipole.

    Attributes:
        position: where it sits (m), one value per axis.
        component: the current's field component (``"Ez"``, ``"Hz"``, ``"Ex"``...).
        waveform: a Gaussian pulse, a Ricker wavelet or a continuous wave (with a smooth start).
        frequency: the centre frequency (Hz).
        fwidth: the pulse's frequency width (Hz), for ``gaussian``.
        amplitude: the current moment: A m in 3D, A in 2D, A/m in 1D (:class:`mindelec.fdtd.CurrentSource`).
    """

    position: list[float]
    component: str = "Ez"
    waveform: Literal["gaussian", "ricker", "continuous"] = "gaussian"
    frequency: float = 1e11
    fwidth: float = 5e10
    amplitude: float = 1.0


@dataclass
class StructureConfig:
    """``[[structures]]``: a shape and its medium (later structures override earlier ones).

    Attributes:
        shape: the shape's kind.
        lower, upper: opposite corners (m) of a ``rectangle``, ``box`` or ``interval``.
        center: the centre (m) of a ``disk`` or ``sphere``.
        radius: the radius (m) of a ``disk`` or ``sphere``.
        permittivity: relative permittivity.
        conductivity: electric conductivity (S/m).
        permeability: relative permeability.
    """

    shape: Literal["rectangle", "box", "disk", "sphere", "interval"]
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    center: list[float] = field(default_factory=list)
    radius: float = 0.0
    permittivity: float = 1.0
    conductivity: float = 0.0
    permeability: float = 1.0


@dataclass
class ProbeConfig:
    """``[[probes]]``: a field probe, recorded at every step.

    Attributes:
        name: the probe's name in ``result.h5`` and on the spectrum plot.
        position: where it sits (m), one value per axis.
        components: the field components it records.
    """

    name: str
    position: list[float]
    components: list[str] = field(default_factory=lambda: ["Ez"])


@dataclass
class OutputConfig:
    """``[output]``: what to record and plot.

    Attributes:
        component: the field component of the snapshots and of ``field.png``.
        snapshot_every: steps between snapshots.
        spectrum_min, spectrum_max: the band of ``spectrum.png`` (Hz); 0 picks the first source's band
            (``frequency`` -/+ ``fwidth``, at least a tenth of ``frequency``).
        spectrum_points: number of frequencies in the band.
    """

    component: str = "Ez"
    snapshot_every: int = 100
    spectrum_min: float = 0.0
    spectrum_max: float = 0.0
    spectrum_points: int = 200


@dataclass
class RunConfig:
    """A complete FDTD run (the top level of the file).

    Attributes:
        grid: the ``[grid]`` table.
        until: the simulated time (s).
        sources: the ``[[sources]]`` array (at least one).
        structures: the ``[[structures]]`` array.
        probes: the ``[[probes]]`` array.
        output: the ``[output]`` table.
    """

    grid: GridConfig
    until: float
    sources: list[SourceConfig]
    structures: list[StructureConfig] = field(default_factory=list)
    probes: list[ProbeConfig] = field(default_factory=list)
    output: OutputConfig = field(default_factory=OutputConfig)


def _waveform(source, fdtd):
    if source.waveform == "gaussian":
        return fdtd.GaussianPulse(source.frequency, source.fwidth)
    if source.waveform == "ricker":
        return fdtd.Ricker(source.frequency)
    return fdtd.ContinuousWave(source.frequency)


def _shape(structure, index):
    from common import geometry

    where = f"structures[{index}]"
    if structure.shape in ("rectangle", "box", "interval"):
        if not structure.lower or len(structure.lower) != len(structure.upper):
            raise ValueError(
                f"{where}: a {structure.shape} needs 'lower' and 'upper' corners of equal length"
            )
        if structure.shape == "interval":
            return geometry.Interval(structure.lower[0], structure.upper[0])
        kind = geometry.Rectangle if structure.shape == "rectangle" else geometry.Box
        return kind(tuple(structure.lower), tuple(structure.upper))
    if not structure.center or structure.radius <= 0:
        raise ValueError(f"{where}: a {structure.shape} needs 'center' and a positive 'radius'")
    kind = geometry.Disk if structure.shape == "disk" else geometry.Sphere
    return kind(tuple(structure.center), structure.radius)


def build_simulation(run):
    """The :class:`mindelec.fdtd.Simulation` of a :class:`RunConfig`, with snapshot and DFT monitors."""
    import torch

    from mindelec import fdtd

    grid = run.grid
    sources = [
        fdtd.PointDipole(tuple(s.position), s.component, _waveform(s, fdtd), amplitude=s.amplitude)
        for s in run.sources
    ]
    structures = [
        fdtd.Structure(_shape(s, i), fdtd.Medium(s.permittivity, s.conductivity, s.permeability))
        for i, s in enumerate(run.structures)
    ]
    monitors = [fdtd.FieldProbe(p.name, tuple(p.position), tuple(p.components)) for p in run.probes]
    monitors.append(fdtd.Snapshots("snapshots", run.output.snapshot_every, (run.output.component,)))
    monitors.append(fdtd.DFTMonitor("dft", [run.sources[0].frequency], (run.output.component,)))
    return fdtd.Simulation(
        size=tuple(grid.size),
        cell_size=grid.cell_size,
        boundary=fdtd.PML(grid.pml_thickness),
        sources=sources,
        structures=structures,
        monitors=monitors,
        polarization=grid.polarization,
        courant=grid.courant,
        subpixel=grid.subpixel,
        dtype=torch.float32 if grid.dtype == "float32" else torch.float64,
    )


def field_figure(run, sim, result):
    """The figure of ``field.png``: the mid-run snapshot and the DFT magnitude, structures outlined.

    Returns:
        the matplotlib Figure (two Axes; 2D and 3D fields carry one contour set per structure cut by
        the picture's plane).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    from mindelec.fdtd.plotting import length_unit, outline_structures

    component = run.output.component
    scale, unit = length_unit(sim.grid.size[: sim.grid.ndim])
    half = [s / 2 / scale for s in sim.grid.size[:2]]
    extent = [-half[0], half[0], -half[1], half[1]]
    snapshots = result["snapshots"][component]
    dft = result["dft"][component][0].abs()
    figure, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for axis, image, title in [
        (
            axes[0],
            snapshots[len(snapshots) // 2] if len(snapshots) else None,
            f"{component} at t = {float(result['snapshots']['times'][len(snapshots) // 2]) * 1e12:.1f} ps"
            if len(snapshots)
            else "no snapshot",
        ),
        (axes[1], dft, f"|DFT {component}| at {run.sources[0].frequency / 1e9:.0f} GHz"),
    ]:
        if image is None:
            continue
        data = image.detach().cpu().numpy()
        if data.ndim == 1:
            axis.plot(np.linspace(-half[0], half[0], len(data)), data)
            axis.set_xlabel(f"x ({unit})")
        else:
            if data.ndim == 3:
                data = data[:, :, data.shape[2] // 2]
            limit = float(np.abs(data).max()) or 1.0
            cmap, low, edges = ("RdBu_r", -limit, "black") if image is not dft else ("magma", 0.0, "white")
            shown = axis.imshow(data.T, origin="lower", extent=extent, cmap=cmap, vmin=low, vmax=limit)
            figure.colorbar(shown, ax=axis)
            outline_structures(sim, axis, colors=edges)
            axis.set_xlabel(f"x ({unit})")
            axis.set_ylabel(f"y ({unit})")
        axis.set_title(title)
    figure.tight_layout()
    return figure


def _plot(run, sim, result, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    figure = field_figure(run, sim, result)
    figure.savefig(folder / "field.png", dpi=110)
    plt.close(figure)

    low = run.output.spectrum_min or max(
        0.1 * run.sources[0].frequency, run.sources[0].frequency - run.sources[0].fwidth
    )
    high = run.output.spectrum_max or run.sources[0].frequency + run.sources[0].fwidth
    frequencies = torch.linspace(low, high, run.output.spectrum_points, dtype=torch.float64)
    times = result.times.to(torch.float64)
    kernel = torch.exp(-2j * math.pi * frequencies[:, None] * times[None, :]) * sim.dt
    source_times = times - sim.dt / 2
    source = (kernel * sim.sources[0].waveform(source_times)[None, :]).sum(dim=1).abs()
    figure, axis = plt.subplots(figsize=(6, 4))
    for probe in run.probes:
        for name in probe.components:
            series = result[probe.name][name].to(torch.float64)
            spectrum = (kernel * series[None, :]).sum(dim=1).abs() / source.clamp_min(1e-30)
            axis.semilogy(frequencies.numpy() / 1e9, spectrum.numpy(), label=f"{probe.name}: {name}")
    axis.set_xlabel("frequency (GHz)")
    axis.set_ylabel("|probe spectrum| / |source spectrum|")
    if run.probes:
        axis.legend()
    figure.tight_layout()
    figure.savefig(folder / "spectrum.png", dpi=110)
    plt.close(figure)


def run_command(path, output=None, progress=True):
    """Load ``path``, run it, save ``result.h5``, ``field.png`` and ``spectrum.png``; returns the folder.

    Raises:
        common.config.ConfigError: for a bad configuration (names the file, line and key).
        ValueError: for a set-up the simulation refuses (names the object).
    """
    import h5py

    run = configuration.load(path, RunConfig)
    sim = build_simulation(run)
    result = sim.run(until=run.until, progress=progress)
    folder = pathlib.Path(output) if output else pathlib.Path(path).with_suffix("").name + "_output"
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    result.save(folder / "result.h5")
    with h5py.File(folder / "result.h5", "a") as file:
        file.attrs["config"] = json.dumps(configuration.to_dict(run))
    _plot(run, sim, result, folder)
    return folder


def main(argv=None):
    """Entry point of ``mindelec`` and ``python -m mindelec``."""
    parser = argparse.ArgumentParser(prog="mindelec", description="mindelec electromagnetic simulations")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run an FDTD simulation from a TOML configuration")
    run.add_argument("config", help="path of the TOML configuration (see mindelec/examples/dipole2d.toml)")
    run.add_argument("--output", help="output folder (default: <config name>_output)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    from mindelec.surrogate.cli import add_surrogate_commands, surrogate_command

    add_surrogate_commands(commands)
    arguments = parser.parse_args(argv)
    if arguments.command == "surrogate":
        return surrogate_command(arguments)
    try:
        folder = run_command(arguments.config, arguments.output, progress=not arguments.quiet)
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"mindelec run: error: {error}", file=sys.stderr)
        return 2
    print(f"results written to {folder.resolve()}")
    return 0
