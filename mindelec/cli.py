"""The ``mindelec`` command line: ``mindelec run config.toml [--output DIR] [--quiet]``.

``run`` loads a TOML configuration (schema :class:`RunConfig`, validated by ``common.config``: an
unknown key or a bad value is reported with its file, line and key), runs the FDTD simulation it
describes, and writes into the output folder (printed at the end):

* ``result.h5`` - every monitor's tensors (``Result.save``) and the resolved configuration;
* ``field.png`` - the field snapshot half-way through the run and the magnitude of the DFT field at the
  first source's centre frequency (3D: the z = 0 plane), with the structures outlined;
* ``spectrum.png`` - the amplitude spectrum at each probe, normalised by the source spectrum.

The output folder follows the rules of ``mindsponge run`` (:mod:`common.output_paths`): ``[output]
directory`` is relative to the configuration file's folder and must stay inside it; ``--output DIR``
(relative to the working directory) replaces it and may be anywhere; the output files must lie inside
the output folder, symbolic links resolved. Without either, the folder is ``<config name>_output``:
for this release still in the working directory, with a ``FutureWarning`` when that is not the
configuration's folder; from the next release next to the configuration.

See ``mindelec/examples/dipole2d.toml`` for a complete configuration.
"""

import argparse
import json
import math
import pathlib
import sys
import warnings
from dataclasses import dataclass, field
from typing import Literal

from common import checks
from common import config as configuration
from common.deprecation import warn_deprecated
from common.errors import ConfigurationError
from common.output_paths import OutputFolder, output_folder

#: the files ``run`` writes into the output folder
OUTPUT_FILES = ("result.h5", "field.png", "spectrum.png")


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
                raise ConfigurationError("give cell_size only, not also the deprecated resolution")
            warn_deprecated("the [grid] key resolution", "cell_size", stacklevel=2)
            self.cell_size, self.resolution = self.resolution, None
        if self.cell_size is None:
            raise ConfigurationError("missing required key cell_size (the cell size, m)")
        checks.positive(self.cell_size, "cell_size (m)")
        if not 1 <= len(self.size) <= 3 or not all(0 < length < math.inf for length in self.size):
            raise ConfigurationError(f"size must be 1, 2 or 3 positive lengths (m), got {self.size}")
        checks.non_negative_int(self.pml_thickness, "pml_thickness (cells)")
        if not 0 < self.courant <= 1:
            raise ConfigurationError(f"courant must lie in (0, 1] (a fraction of the stability limit), "
                             f"got {self.courant}")


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

    def __post_init__(self):
        checks.positive(self.frequency, "frequency (Hz)")
        checks.positive(self.fwidth, "fwidth (Hz)")


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

    def __post_init__(self):
        if self.shape in ("rectangle", "box", "interval"):
            if not self.lower or len(self.lower) != len(self.upper):
                raise ConfigurationError(f"a {self.shape} needs 'lower' and 'upper' corners of equal length")
        elif not self.center:
            raise ConfigurationError(f"a {self.shape} needs its center")
        elif not self.radius > 0:
            raise ConfigurationError(f"a {self.shape} needs a positive radius (m), got {self.radius}")


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
    """``[output]``: where the results go, and what to record and plot.

    Attributes:
        directory: the output folder, relative to the configuration file and inside its folder
            (``--output`` replaces it); not set: ``<config name>_output`` (see :func:`run_command`).
        component: the field component of the snapshots and of ``field.png``.
        snapshot_every: steps between snapshots.
        spectrum_min, spectrum_max: the band of ``spectrum.png`` (Hz); 0 picks the first source's band
            (``frequency`` -/+ ``fwidth``, at least a tenth of ``frequency``).
        spectrum_points: number of frequencies in the band.
    """

    directory: pathlib.Path | None = None
    component: str = "Ez"
    snapshot_every: int = 100
    spectrum_min: float = 0.0
    spectrum_max: float = 0.0
    spectrum_points: int = 200

    def __post_init__(self):
        checks.positive_int(self.snapshot_every, "snapshot_every (steps)")
        checks.positive_int(self.spectrum_points, "spectrum_points")
        for key in ("spectrum_min", "spectrum_max"):
            if not 0 <= getattr(self, key) < math.inf:
                raise ConfigurationError(f"{key} must be 0 (the source's band) or a frequency in Hz, "
                                 f"got {getattr(self, key)}")
        if 0 < self.spectrum_max <= self.spectrum_min:
            raise ConfigurationError(
                f"spectrum_max must be above the band's lower end ({self.spectrum_min} Hz), "
                             f"got {self.spectrum_max}")


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

    def __post_init__(self):
        checks.positive(self.until, "until (the simulated time, s)")
        if not self.sources:
            raise ConfigurationError("sources must hold at least one [[sources]] table")


def _waveform(source, fdtd):
    if source.waveform == "gaussian":
        return fdtd.GaussianPulse(source.frequency, source.fwidth)
    if source.waveform == "ricker":
        return fdtd.Ricker(source.frequency)
    return fdtd.ContinuousWave(source.frequency)


def _shape(structure):
    """The geometry of a ``[[structures]]`` entry (its corners or centre were checked on loading)."""
    from common import geometry

    if structure.shape in ("rectangle", "box", "interval"):
        if structure.shape == "interval":
            return geometry.Interval(structure.lower[0], structure.upper[0])
        kind = geometry.Rectangle if structure.shape == "rectangle" else geometry.Box
        return kind(tuple(structure.lower), tuple(structure.upper))
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
        fdtd.Structure(_shape(s), fdtd.Medium(s.permittivity, s.conductivity, s.permeability))
        for s in run.structures
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


def _plot(run, sim, result, files):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    figure = field_figure(run, sim, result)
    figure.savefig(files["field.png"], dpi=110)
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
    figure.savefig(files["spectrum.png"], dpi=110)
    plt.close(figure)


def _output_folder(path, directory, output):
    """The run's output folder: ``output`` (``--output``), else ``directory`` (``[output] directory``),
    else the default ``<config name>_output`` (see :func:`run_command`)."""
    if output is None and directory is None:
        name = pathlib.Path(path).stem + "_output"
        here, config_folder = pathlib.Path.cwd().resolve(), pathlib.Path(path).resolve().parent
        if here != config_folder:
            warnings.warn(
                f"{path}: mindelec run writes into {here / name} (in the working directory) because neither "
                f"[output] directory nor --output is given; from the next release this default is "
                f"{config_folder / name}, next to the configuration, as for mindsponge run. Set [output] "
                f"directory or pass --output to choose the folder and silence this warning",
                FutureWarning, stacklevel=3)
            return OutputFolder((here / name).resolve(), path, chosen_by="the default output folder")
        directory = name
    return output_folder(path, directory, command_line=output)


def run_command(path, output=None, progress=True):
    """Load ``path``, run it, save ``result.h5``, ``field.png`` and ``spectrum.png``; returns the folder.

    The folder is ``output`` (relative to the working directory; it may be anywhere), else ``[output]
    directory`` (relative to the configuration file's folder, and inside it), else
    ``<config name>_output``: in the working directory for this release (a ``FutureWarning`` says so
    when that is not the configuration's folder), next to the configuration from the next release.
    Output files that resolve outside the folder (symbolic links) are refused before the run.

    Raises:
        common.config.ConfigError: for a bad configuration, or an output folder or file outside where
            the run may write (names the file, line and key).
        ValueError: for a set-up the simulation refuses (names the object).
    """
    import h5py

    run = configuration.load(path, RunConfig)
    folder = _output_folder(path, run.output.directory, output)
    files = {name: folder.file(name) for name in OUTPUT_FILES}
    sim = build_simulation(run)
    result = sim.run(until=run.until, progress=progress)
    folder.path.mkdir(parents=True, exist_ok=True)
    result.save(files["result.h5"])
    with h5py.File(files["result.h5"], "a") as file:
        file.attrs["config"] = json.dumps(configuration.to_dict(run))
    _plot(run, sim, result, files)
    return folder.path


def main(argv=None):
    """Entry point of ``mindelec`` and ``python -m mindelec``."""
    parser = argparse.ArgumentParser(prog="mindelec", description="mindelec electromagnetic simulations")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run an FDTD simulation from a TOML configuration")
    run.add_argument("config", help="path of the TOML configuration (see mindelec/examples/dipole2d.toml)")
    run.add_argument("--output", help="output folder, replaces [output] directory "
                                      "(default: <config name>_output)")
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
