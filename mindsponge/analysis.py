"""Trajectory analysis: H5MD reading, RDF, MSD and diffusion, box statistics, energy drift,
block averages, free-energy profiles (also reweighted from metadynamics), and plots.

Everything takes and returns torch tensors (float64 unless the input says otherwise); the
plot helpers draw with matplotlib on a given or new ``Axes`` and return it.

Example::

    import mindsponge as ms
    trajectory = ms.analysis.read_h5md("water.h5md")          # written by H5MDReporter
    oxygens = torch.arange(0, trajectory.n_atoms, 3)
    r, g = ms.analysis.rdf(trajectory.positions, trajectory.boxes, oxygens, oxygens, r_max=0.9)
    ms.analysis.plot_rdf(r, g)
    mean, error = ms.analysis.block_average(trajectory.observables["potential_energy"])
"""

import math
import os
import warnings
from dataclasses import dataclass, field

import torch

from common.errors import ConfigurationError, DataError, MissingFileError, OutOfRangeError
from common.units import AMU_PER_NM3_TO_G_PER_CM3, BOLTZMANN_MD
from mindsponge.neighbors import NeighborList
from mindsponge.space import minimum_image

__all__ = [
    "UnverifiedTrajectoryWarning",
    "Trajectory",
    "TrajectoryError",
    "block_average",
    "box_statistics",
    "diffusion_coefficient",
    "energy_drift",
    "free_energy_profile",
    "metadynamics_weights",
    "msd",
    "plot_free_energy",
    "plot_rdf",
    "plot_series",
    "rdf",
    "read_h5md",
    "unwrap",
]


class TrajectoryError(DataError):
    """A trajectory file that cannot be read (the message names the file and what is wrong: a damaged frame
    by dataset and frame)."""


class UnverifiedTrajectoryWarning(UserWarning):
    """A trajectory written without checksums: damaged bytes in it would be read as data."""


@dataclass
class Trajectory:
    """Frames read from an H5MD file.

    Attributes:
        path: the file.
        positions: ``(T, N, 3)`` tensor, nm.
        boxes: ``(T, 3, 3)`` tensor of box vectors (rows), nm, or ``None`` (not periodic).
        steps: ``(T,)`` long tensor of step numbers.
        times: ``(T,)`` tensor, ps.
        velocities: ``(T, N, 3)`` tensor, nm/ps, or ``None``.
        observables: dict name -> ``(T_obs,)`` tensor (e.g. ``potential_energy`` kJ/mol,
            ``temperature`` K), with their own ``observable_times`` (ps).
    """

    path: str
    positions: torch.Tensor
    boxes: torch.Tensor | None
    steps: torch.Tensor
    times: torch.Tensor
    velocities: torch.Tensor | None = None
    observables: dict = field(default_factory=dict)
    observable_times: dict = field(default_factory=dict)

    @property
    def n_frames(self):
        """Number of frames T."""
        return self.positions.shape[0]

    @property
    def n_atoms(self):
        """Number of atoms N."""
        return self.positions.shape[1]


def read_h5md(path, dtype=torch.float64):
    """Read an H5MD trajectory (as written by :class:`~mindsponge.reporters.H5MDReporter`).

    Reads the particle group ``/particles/<first group>`` (``position``, optional ``velocity``
    and ``box/edges``; edges given as a vector ``(T, 3)`` are made diagonal) and every
    ``/observables/<name>`` time series. Lengths are converted from Angstrom if the file says
    so (``unit`` attribute ``"Angstrom"``).

    Args:
        path: the ``.h5md`` file.
        dtype: of the returned tensors.

    Returns:
        :class:`Trajectory`.

    Raises:
        FileNotFoundError: no such file.
        TrajectoryError: not an HDF5 file, truncated or corrupt, or lacking H5MD groups (the
            message names the file and the missing or unreadable item).
    """
    import h5py

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MissingFileError(f"trajectory {path!r} does not exist")
    try:
        handle = h5py.File(path, "r")
    except OSError as error:
        raise TrajectoryError(f"trajectory {path!r} is not a readable HDF5/H5MD file ({error})") from error
    with handle:
        try:
            positions, steps, times, velocities, boxes = _read_particles(handle, path)
            observables, observable_times = _read_observables(handle, dtype)
        except (OSError, KeyError, RuntimeError) as error:
            raise TrajectoryError(f"trajectory {path!r} is corrupt or truncated ({error})") from error
    if positions.ndim != 3 or positions.shape[-1] != 3:
        raise TrajectoryError(
            f"trajectory {path!r}: positions have shape {positions.shape}, expected (T, N, 3)"
        )
    if len(times) != len(positions):
        raise TrajectoryError(f"trajectory {path!r}: {len(positions)} frames but {len(times)} times")
    return Trajectory(
        path=path,
        positions=torch.as_tensor(positions, dtype=dtype),
        boxes=None if boxes is None else torch.as_tensor(boxes, dtype=dtype),
        steps=torch.as_tensor(steps, dtype=torch.long),
        times=torch.as_tensor(times, dtype=dtype),
        velocities=None if velocities is None else torch.as_tensor(velocities, dtype=dtype),
        observables=observables,
        observable_times=observable_times,
    )


def _read_particles(handle, path):
    """Positions, steps, times, velocities (or ``None``) and boxes ``(T, 3, 3)`` (or ``None``) of
    the first particle group of an open H5MD file, as numpy arrays in nm and ps."""
    import numpy as np

    if "particles" not in handle or not len(handle["particles"]):
        raise TrajectoryError(f"trajectory {path!r} has no /particles group: not an H5MD trajectory")
    name = next(iter(handle["particles"]))
    group = handle["particles"][name]
    if "position" not in group:
        raise TrajectoryError(f"trajectory {path!r} lacks /particles/{name}/position")
    positions, steps, times = _read_element(group["position"], path, f"/particles/{name}/position")
    velocities = _read_element(group["velocity"], path, "velocity")[0] if "velocity" in group else None
    boxes = None
    if "box" in group and "edges" in group["box"]:
        edges = _read_element(group["box/edges"], path, "box/edges")[0]
        boxes = edges if edges.ndim == 3 else np.stack([np.diag(row) for row in edges])
    return positions, steps, times, velocities, boxes


_UNVERIFIED_NOTED: set[str] = set()  # files noted once as written without checksums


def _checked_read(dataset, path, what):
    """All of ``dataset``, its Fletcher-32 checksums verified by HDF5: a damaged chunk raises
    :class:`TrajectoryError` naming the file, the dataset and the first damaged frame. A dataset written
    without checksums (an older file, another program) is read as it is, with a note once per file."""
    if not dataset.fletcher32 and path not in _UNVERIFIED_NOTED:
        _UNVERIFIED_NOTED.add(path)
        warnings.warn(f"trajectory {path!r} was written without checksums ({what}): damaged bytes in it "
                      "cannot be told from data", UnverifiedTrajectoryWarning, stacklevel=4)
    try:
        return dataset[()]
    except OSError as error:
        frames = dataset.shape[0] if dataset.shape else 0
        for frame in range(frames):
            try:
                dataset[frame]
            except OSError:
                raise TrajectoryError(f"trajectory {path!r}: {dataset.name} frame {frame} is damaged "
                                      f"(its checksum does not match: {error})") from error
        raise TrajectoryError(f"trajectory {path!r}: {dataset.name} cannot be read ({error})") from error


def _read_element(item, path, what):
    """An H5MD time-dependent element: its values (Å converted to nm), steps and times."""
    import numpy as np

    value = np.asarray(_checked_read(item["value"], path, what), dtype=np.float64)
    scale = 0.1 if str(item["value"].attrs.get("unit", "nm")).lower() in ("angstrom", "a") else 1.0
    if "time" not in item:
        raise TrajectoryError(f"trajectory {path!r} lacks the time of {what}")
    steps = np.asarray(_checked_read(item["step"], path, what))
    return value * scale, steps, np.asarray(_checked_read(item["time"], path, what), np.float64)


def _read_observables(handle, dtype):
    """Every ``/observables/<name>`` time series: values and times by name, tensors of ``dtype``."""
    import h5py
    import numpy as np

    observables, observable_times = {}, {}
    for key, item in handle.get("observables", {}).items():
        if isinstance(item, h5py.Group) and "value" in item:
            values = _checked_read(item["value"], handle.filename, f"/observables/{key}")
            times = _checked_read(item["time"], handle.filename, f"/observables/{key}")
            observables[key] = torch.as_tensor(np.asarray(values, np.float64), dtype=dtype)
            observable_times[key] = torch.as_tensor(np.asarray(times, np.float64), dtype=dtype)
    return observables, observable_times


def _check_frames(positions, boxes):
    if not isinstance(positions, torch.Tensor) or positions.dim() != 3 or positions.shape[-1] != 3:
        shape = tuple(positions.shape) if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise ConfigurationError(f"positions must be a (T, N, 3) tensor in nm, got {shape}")
    if boxes is not None and tuple(boxes.shape) != (positions.shape[0], 3, 3):
        raise ConfigurationError(
            f"boxes must be a (T, 3, 3) tensor matching {positions.shape[0]} frames, got {tuple(boxes.shape)}"
        )


def rdf(positions, boxes, group_a, group_b, r_max, bins=75):
    """Radial distribution function g(r) between two groups of atoms, averaged over frames.

    Pairs within ``r_max`` come from a cell list (:class:`~mindsponge.neighbors.NeighborList`).
    Normalised as MDAnalysis' ``InterRDF``: the pair histogram divided by the number of
    frames, the shell volumes and the pair density ``N_pairs / <V>``, where pairs of an atom
    with itself are excluded (and removed from ``N_pairs``).

    Args:
        positions: ``(T, N, 3)`` tensor, nm.
        boxes: ``(T, 3, 3)`` tensor, nm (periodic; the minimum image needs ``r_max`` below half
            the smallest box height).
        group_a, group_b: atom indices.
        r_max: largest distance, nm.
        bins: number of bins on ``[0, r_max]``.

    Returns:
        ``(r, g)``: bin centres ``(bins,)`` nm and g(r) ``(bins,)``.
    """
    if boxes is None:
        raise ConfigurationError("rdf needs the periodic boxes (T, 3, 3) of the frames (the density is N/V)")
    _check_frames(positions, boxes)
    group_a = torch.as_tensor(group_a, dtype=torch.long, device=positions.device).reshape(-1)
    group_b = torch.as_tensor(group_b, dtype=torch.long, device=positions.device).reshape(-1)
    for name, group in (("group_a", group_a), ("group_b", group_b)):
        if len(group) == 0 or int(group.max()) >= positions.shape[1] or int(group.min()) < 0:
            raise OutOfRangeError(
                f"rdf: {name} has atom indices outside 0..{positions.shape[1] - 1} (or is empty)"
            )
    if not r_max > 0:
        raise ConfigurationError(f"rdf: r_max must be positive (nm), got {r_max}")
    edges = torch.linspace(0.0, float(r_max), bins + 1, dtype=torch.float64, device=positions.device)
    counts = torch.zeros(bins, dtype=torch.float64, device=positions.device)
    # pairs within r_max among the atoms of either group from a cell list; an unordered pair
    # counts once for each way it joins group A to group B (self pairs never appear)
    union = torch.unique(torch.cat([group_a, group_b]))
    in_a, in_b = torch.isin(union, group_a), torch.isin(union, group_b)
    neighbors = NeighborList(cutoff=float(r_max), skin=0.0)
    width = float(r_max) / bins
    volume = 0.0
    for frame, box in zip(positions.to(torch.float64), boxes.to(torch.float64), strict=True):
        selected = frame[union]
        neighbors.build(selected, box)
        first, second = neighbors.pairs.unbind(-1)
        multiplicity = (in_a[first] & in_b[second]).double() + (in_a[second] & in_b[first]).double()
        distances = torch.linalg.vector_norm(minimum_image(selected[second] - selected[first], box), dim=-1)
        inside = distances < float(r_max)
        index = (distances[inside] / width).long().clamp(max=bins - 1)
        counts += torch.bincount(index, weights=multiplicity[inside], minlength=bins)
        volume += float(torch.linalg.det(box).abs())
    n_frames = positions.shape[0]
    self_pairs = int((group_a[:, None] == group_b[None, :]).sum())
    density = (len(group_a) * len(group_b) - self_pairs) / (volume / n_frames)
    shells = 4.0 / 3.0 * math.pi * (edges[1:] ** 3 - edges[:-1] ** 3)
    return 0.5 * (edges[1:] + edges[:-1]), counts / (density * shells * n_frames)


def unwrap(positions, boxes):
    """Undo wrapping into the box: consecutive frames differ by the minimum-image displacement.

    Args:
        positions: ``(T, N, 3)`` tensor, nm; frames close enough that no atom moves half a box.
        boxes: ``(T, 3, 3)`` tensor, nm, or ``None`` (returned unchanged).

    Returns:
        ``(T, N, 3)`` tensor, nm, continuous in time.
    """
    _check_frames(positions, boxes)
    if boxes is None:
        return positions
    steps = [minimum_image(positions[t] - positions[t - 1], boxes[t]) for t in range(1, len(positions))]
    if not steps:
        return positions
    return torch.cat([positions[:1], positions[:1] + torch.cumsum(torch.stack(steps), 0)])


def msd(positions, max_lag=None, atoms=None):
    """Mean-squared displacement, averaged over atoms and time origins.

    Args:
        positions: ``(T, N, 3)`` unwrapped positions (see :func:`unwrap`), nm, equally spaced in time.
        max_lag: largest lag in frames (default ``T // 2``).
        atoms: optional atom indices to average over.

    Returns:
        ``(lags, msd)``: ``(L + 1,)`` long lags in frames (from 0) and MSD ``(L + 1,)`` nm^2.
    """
    _check_frames(positions, None)
    if atoms is not None:
        positions = positions[:, torch.as_tensor(atoms, dtype=torch.long)]
    n_frames = positions.shape[0]
    max_lag = n_frames // 2 if max_lag is None else int(max_lag)
    if not 0 < max_lag < n_frames:
        raise ConfigurationError(f"msd: max_lag must be between 1 and {n_frames - 1} frames, got {max_lag}")
    values = [positions.new_zeros(())]
    for lag in range(1, max_lag + 1):
        values.append(((positions[lag:] - positions[:-lag]) ** 2).sum(-1).mean())
    return torch.arange(max_lag + 1), torch.stack(values)


def diffusion_coefficient(lag_times, msd_values, fit_range=None, dimensions=3):
    """Self-diffusion coefficient from the Einstein relation ``MSD = 2 d D t``.

    Args:
        lag_times: ``(L,)`` tensor, ps.
        msd_values: ``(L,)`` tensor, nm^2.
        fit_range: ``(t_min, t_max)`` in ps for the linear fit (default: the second quarter to
            the end of the lags, skipping the ballistic start).
        dimensions: ``d``, 3 for bulk.

    Returns:
        ``(D, D_error)`` floats, nm^2/ps (1 nm^2/ps = 1e-6 m^2/s); the error is the standard
        error of the fitted slope divided by ``2 d``.
    """
    lag_times = torch.as_tensor(lag_times, dtype=torch.float64)
    msd_values = torch.as_tensor(msd_values, dtype=torch.float64)
    if fit_range is None:
        fit_range = (float(lag_times[-1]) / 4, float(lag_times[-1]))
    selected = (lag_times >= fit_range[0]) & (lag_times <= fit_range[1])
    if int(selected.sum()) < 3:
        raise ConfigurationError(f"diffusion_coefficient: fewer than 3 points in fit_range {fit_range} ps")
    slope, _, slope_error = _linear_fit(lag_times[selected], msd_values[selected])
    return slope / (2 * dimensions), slope_error / (2 * dimensions)


def _linear_fit(x, y):
    """Least-squares ``y = a x + b``: ``(a, b, standard error of a)``."""
    x_mean, y_mean = x.mean(), y.mean()
    sxx = ((x - x_mean) ** 2).sum()
    slope = ((x - x_mean) * (y - y_mean)).sum() / sxx
    intercept = y_mean - slope * x_mean
    residual = y - (slope * x + intercept)
    error = torch.sqrt((residual**2).sum() / max(len(x) - 2, 1) / sxx)
    return float(slope), float(intercept), float(error)


def box_statistics(boxes, masses=None):
    """Volume, box lengths and density over frames.

    Args:
        boxes: ``(T, 3, 3)`` tensor, nm.
        masses: optional ``(N,)`` masses, amu (for the density).

    Returns:
        dict of floats: ``volume_mean``, ``volume_std`` (nm^3), ``lengths_mean`` (3 floats, nm:
        the norms of the box vectors), and with masses ``density_mean``, ``density_std`` (g/cm^3).
    """
    boxes = torch.as_tensor(boxes, dtype=torch.float64)
    if boxes.dim() != 3 or boxes.shape[1:] != (3, 3):
        raise ConfigurationError(f"boxes must be a (T, 3, 3) tensor in nm, got {tuple(boxes.shape)}")
    volumes = torch.linalg.det(boxes).abs()
    result = {
        "volume_mean": float(volumes.mean()),
        "volume_std": float(volumes.std()) if len(volumes) > 1 else 0.0,
        "lengths_mean": [float(value) for value in torch.linalg.vector_norm(boxes, dim=-1).mean(0)],
    }
    if masses is not None:
        densities = (
            float(torch.as_tensor(masses, dtype=torch.float64).sum()) * AMU_PER_NM3_TO_G_PER_CM3 / volumes
        )
        result["density_mean"] = float(densities.mean())
        result["density_std"] = float(densities.std()) if len(densities) > 1 else 0.0
    return result


def energy_drift(times, total_energy, n_atoms=None):
    """Linear drift of the total energy (NVE quality check).

    Args:
        times: ``(T,)`` tensor, ps.
        total_energy: ``(T,)`` tensor, kJ/mol.
        n_atoms: optional, to report the drift per atom.

    Returns:
        dict of floats: ``drift`` (kJ/mol/ns), ``drift_error`` (its standard error), ``fluctuation``
        (standard deviation of the residual, kJ/mol) and, with ``n_atoms``, ``drift_per_atom``
        (kJ/mol/ns/atom).
    """
    times = torch.as_tensor(times, dtype=torch.float64)
    total_energy = torch.as_tensor(total_energy, dtype=torch.float64)
    if times.shape != total_energy.shape or len(times) < 3:
        raise ConfigurationError("energy_drift: times and total_energy must be (T,) tensors with T >= 3")
    slope, intercept, error = _linear_fit(times, total_energy)
    residual = total_energy - (slope * times + intercept)
    result = {"drift": slope * 1000.0, "drift_error": error * 1000.0, "fluctuation": float(residual.std())}
    if n_atoms is not None:
        result["drift_per_atom"] = result["drift"] / n_atoms
    return result


def block_average(values, n_blocks=None):
    """Mean and its standard error from block averages (Flyvbjerg & Petersen 1989).

    With ``n_blocks`` the series is cut into that many equal blocks and the error is the
    standard deviation of the block means over ``sqrt(n_blocks - 1)``. Without, blocks are
    doubled in size until fewer than 8 remain and the largest error of the sequence is used
    (the plateau of a correlated series).

    Args:
        values: ``(T,)`` tensor.
        n_blocks: number of blocks (>= 2), or ``None`` for the automatic analysis.

    Returns:
        ``(mean, standard_error)`` floats.
    """
    values = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if len(values) < 4:
        raise ConfigurationError(f"block_average: need at least 4 values, got {len(values)}")
    mean = float(values.mean())

    def error_with(blocks):
        size = len(values) // blocks
        means = values[: size * blocks].reshape(blocks, size).mean(1)
        return float(means.std(unbiased=True) / math.sqrt(blocks))

    if n_blocks is not None:
        if not 2 <= int(n_blocks) <= len(values):
            raise ConfigurationError(
                f"block_average: n_blocks must be between 2 and {len(values)}, got {n_blocks}")
        return mean, error_with(int(n_blocks))
    errors, blocks = [], len(values)
    while blocks >= 8:
        errors.append(error_with(blocks))
        blocks //= 2
    return mean, max(errors) if errors else error_with(2)


def metadynamics_weights(bias_energies, reweighting_offsets, temperature):
    """Normalised weights ``exp((V(s_t, t) - c(t)) / k_B T)`` of metadynamics frames.

    The reweighting of Tiwary & Parrinello (2015).

    Args:
        bias_energies: ``(T,)`` bias energy of each frame, kJ/mol (e.g.
            :attr:`mindsponge.bias.ColvarReporter.bias_energies`).
        reweighting_offsets: ``(T,)`` ``c(t)``, kJ/mol
            (:meth:`mindsponge.bias.Metadynamics.reweighting_offset` at the frame).
        temperature: K.

    Returns:
        ``(T,)`` tensor summing to 1.
    """
    bias_energies = torch.as_tensor(bias_energies, dtype=torch.float64).reshape(-1)
    offsets = torch.as_tensor(reweighting_offsets, dtype=torch.float64).reshape(-1)
    if bias_energies.shape != offsets.shape:
        raise ConfigurationError(
            "metadynamics_weights: bias_energies and reweighting_offsets must have the same length"
        )
    return torch.softmax((bias_energies - offsets) / (BOLTZMANN_MD * temperature), 0)


def free_energy_profile(values, bins, ranges, temperature, weights=None):
    """Free energy ``F = -k_B T ln p`` of one or two CVs from (weighted) samples.

    Args:
        values: ``(T,)`` or ``(T, D)`` samples, D = 1 or 2 (CV units).
        bins: bins per CV (int or one per CV).
        ranges: ``(low, high)`` per CV, e.g. ``[(-pi, pi), (-pi, pi)]``.
        temperature: K.
        weights: optional ``(T,)`` weights (e.g. :func:`metadynamics_weights`).

    Returns:
        ``(axes, free_energy)``: list of bin-centre tensors and F ``(bins_1[, bins_2])`` in
        kJ/mol with minimum 0, ``inf`` in empty bins.
    """
    values = torch.as_tensor(values, dtype=torch.float64)
    values = values[:, None] if values.dim() == 1 else values
    dimensions = values.shape[1]
    bins = [int(bins)] * dimensions if isinstance(bins, int) else [int(count) for count in bins]
    ranges = [tuple(map(float, pair)) for pair in ranges]
    if len(bins) != dimensions or len(ranges) != dimensions or dimensions > 2:
        raise ConfigurationError(
            f"free_energy_profile: need 1 or 2 CVs with one bins and range each, got {dimensions} CVs"
        )
    edges = [
        torch.linspace(low, high, count + 1, dtype=torch.float64)
        for (low, high), count in zip(ranges, bins, strict=True)
    ]
    histogram, _ = torch.histogramdd(
        values, bins=edges, weight=None if weights is None else torch.as_tensor(weights, dtype=torch.float64)
    )
    with torch.no_grad():
        free_energy = -BOLTZMANN_MD * temperature * torch.log(histogram / histogram.sum())
    free_energy = free_energy - free_energy[torch.isfinite(free_energy)].min()
    return [0.5 * (edge[1:] + edge[:-1]) for edge in edges], free_energy


def plot_rdf(r, g, ax=None, label=None):
    """Plot g(r) against r (nm); returns the matplotlib ``Axes``."""
    return plot_series(r, {label or "g(r)": g}, ax=ax, xlabel="r (nm)", ylabel="g(r)")


def plot_series(x, series, ax=None, xlabel="", ylabel=""):
    """Line plot of named series against ``x``.

    Args:
        x: ``(T,)`` tensor or array.
        series: dict label -> ``(T,)`` tensor or array.
        ax: matplotlib ``Axes`` (default: a new figure).
        xlabel, ylabel: axis labels (with units).

    Returns:
        The ``Axes``.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5))
    for label, values in series.items():
        ax.plot(np.asarray(x), np.asarray(values), label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend()
    return ax


def plot_free_energy(axes, free_energy, ax=None, labels=("CV 1", "CV 2"), levels=None, max_energy=None):
    """Plot a free-energy profile (1D line) or surface (2D filled contours), kJ/mol.

    Args:
        axes: list of bin-centre tensors (from :func:`free_energy_profile` or
            :meth:`mindsponge.bias.Metadynamics.free_energy`).
        free_energy: ``(n_1,)`` or ``(n_1, n_2)`` tensor, kJ/mol.
        ax: matplotlib ``Axes`` (default: a new figure).
        labels: axis labels.
        levels: contour levels (2D), default every 2 kJ/mol up to ``max_energy``.
        max_energy: clip above this, kJ/mol (default: the largest finite value).

    Returns:
        The ``Axes``.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    free_energy = np.asarray(free_energy, dtype=np.float64)
    finite = np.isfinite(free_energy)
    top = float(free_energy[finite].max()) if max_energy is None else float(max_energy)
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4) if free_energy.ndim == 2 else (5, 3.5))
    if free_energy.ndim == 1:
        ax.plot(np.asarray(axes[0]), np.where(finite, free_energy, np.nan))
        ax.set_xlabel(labels[0])
        ax.set_ylabel("free energy (kJ/mol)")
        return ax
    clipped = np.where(finite, np.minimum(free_energy, top), top)
    levels = np.arange(0.0, top + 2.0, 2.0) if levels is None else levels
    contour = ax.contourf(np.asarray(axes[0]), np.asarray(axes[1]), clipped.T, levels=levels, cmap="viridis")
    ax.figure.colorbar(contour, ax=ax, label="free energy (kJ/mol)")
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    return ax
