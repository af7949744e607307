"""The FDTD driver: ``Simulation(...).run(until=...) -> Result``.

A :class:`Simulation` holds a set-up (grid, boundaries, materials, sources, monitors); ``run``
starts from zero fields, steps them, and returns the monitors' outputs. The set-up is not
changed by a run, so a simulation can be run again (e.g. after its design tensor changed).

Time step: ``dt = courant * dt_max`` with ``dt_max = 1 / (c_max sqrt(sum_a 1/dx_a^2))`` the Yee
stability limit (``c_max`` the fastest light speed among the media); ``courant`` defaults to 0.99.
A user ``dt`` above ``dt_max`` is refused.

Refusals (``common.errors``): a monitor frequency that is negative or above the highest frequency the
grid carries, and a source whose spectrum (to -40 dB, ``waveform.spectrum_limit()``) reaches beyond it,
raise :class:`~common.errors.ConfigurationError` giving the limit; a monitor frequency with fewer than
``CELLS_PER_WAVELENGTH`` cells per wavelength only warns. The limit (attribute ``max_frequency``) is the
lower of the time-step Nyquist frequency ``1 / (2 dt)`` and the spatial Nyquist frequency
``v / (2 dx_max)``, where ``dx_max`` is the coarsest spacing and ``v = c / sqrt(max eps_r * max mu_r)``
the phase velocity of the densest medium present (the ``permittivity`` of every medium, ``eps_inf`` for
Drude and Lorentz media, and of the design regions): above it the densest medium holds fewer than two
cells per wavelength, and fields there are aliased. NaN or infinite material values raise
:class:`~common.errors.DataError` naming the structure or region and the cell, when the simulation is
built and again when a run starts. A grid whose estimated memory (:meth:`Simulation.memory_estimate`)
exceeds the memory available is refused with the estimate before anything grid-sized is allocated.

Differentiable runs: when grad is enabled and any medium parameter or design permittivity
requires grad, ``run`` splits the steps into segments of ``ceil(sqrt(steps))`` steps, each one
autograd node (time-segment checkpointing): the forward pass runs them in place without a graph and
stores only each segment's starting state; the backward pass recomputes one segment at a time out of
place and back-propagates through it. Memory for the backward pass therefore grows like
``sqrt(steps)``, and the cost is about one extra forward pass. Otherwise the fields are updated in
place under ``torch.no_grad``.
"""

import math
import os
import warnings

import torch
from tqdm import tqdm

from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT, VACUUM_PERMEABILITY, VACUUM_PERMITTIVITY

from .boundaries import PML, Periodic
from .grid import ACTIVE_COMPONENTS, AXES, E_COMPONENTS, H_COMPONENTS, Grid
from .materials import PEC, DesignRegion, Medium, Structure
from .monitors import DFTMonitor, Monitor, Snapshots
from .result import Result
from .sources import CurrentSource, PlaneWave
from .updates import YeeStepper

#: below this many cells per wavelength (in the densest medium) a monitor frequency draws a warning: the
#: Yee scheme's phase error is then above about 1 %
CELLS_PER_WAVELENGTH = 10


def _maximum(value):
    return float(value.detach().max()) if isinstance(value, torch.Tensor) else float(value)


def _available_memory(device):
    """Bytes of memory free for new tensors on ``device``, or ``None`` when it cannot be told."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        import psutil

        return psutil.virtual_memory().available
    except ImportError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _is_tensor_requiring_grad(value):
    return isinstance(value, torch.Tensor) and value.requires_grad


def _minimum(value):
    return float(value.detach().min()) if isinstance(value, torch.Tensor) else float(value)


class Simulation:
    """A Yee-grid FDTD simulation in 1D, 2D (TM or TE) or 3D.

    Args:
        size: domain extent per axis (m); the domain is ``[-size/2, size/2]`` and ``len(size)`` its dimension.
        resolution: the cell size (m).
        boundary: one of :class:`PML`, :class:`Periodic`, :class:`PEC` for every axis, or a tuple with one per
            axis. A PML lies inside the domain. Default: PEC walls.
        sources: :class:`PointDipole`, :class:`CurrentSource` (line, area) and :class:`PlaneWave` (TF/SF).
        monitors: :class:`FieldProbe`, :class:`DFTMonitor`, :class:`FluxMonitor`, :class:`Snapshots` objects,
            with distinct names.
        structures: :class:`Structure` objects; later ones override earlier ones.
        design_regions: :class:`DesignRegion` objects (per-cell permittivity, applied after the structures).
        default_medium: the medium filling the rest of the domain (default vacuum).
        polarization: ``"TM"`` (Ez, Hx, Hy) or ``"TE"`` (Hz, Ex, Ey) in 2D; ignored in 1D and 3D.
        dt: time step (s); default ``courant`` times the stability limit.
        courant: fraction of the stability limit used when ``dt`` is not given (0 < courant <= 1).
        dtype: ``torch.float32`` (default) or ``torch.float64``.
        device: e.g. ``"cpu"`` or ``"cuda"``.
        compiled: on CPU, let a compiled C++ kernel (:mod:`mindelec._kernels`, built once per machine) do
            the bulk field updates of forward-only steps; ``False`` or ``MINDSCIENCE_NO_EXTENSIONS=1`` selects
            the pure torch path (the same results to round-off). Differentiable recomputation and CUDA
            always use torch.

    Attributes:
        grid: the :class:`Grid`.
        dt: the time step (s).
        dt_limit: the stability limit (s).
        max_frequency: the highest frequency (Hz) the grid and time step carry (module docstring).

    Raises:
        ValueError: naming the object at fault, for a source or monitor outside the domain, a PML
            thicker than half the domain, an unstable time step, a component the simulation does not carry.
        ConfigurationError: (a ValueError) naming the monitor or source and the limit, for a frequency the
            grid cannot carry; for a grid larger than the available memory, with the estimate.
        DataError: (a ValueError) for a NaN or infinite material value, naming the structure or design
            region and the cell.

    Example:
        >>> import mindelec as me
        >>> sim = me.fdtd.Simulation(size=(2e-3, 2e-3), resolution=20e-6, boundary=me.fdtd.PML(thickness=10),
        ...     sources=[me.fdtd.PointDipole((0, 0), "Ez", me.fdtd.GaussianPulse(f0=150e9, fwidth=100e9))],
        ...     monitors=[me.fdtd.FieldProbe("p", position=(2e-4, 0), components=("Ez",))])
        >>> result = sim.run(until=20e-12, progress=False)
        >>> result["p"]["Ez"].shape == result.times.shape
        True
    """

    def __init__(
        self,
        size,
        resolution,
        boundary=None,
        sources=(),
        monitors=(),
        structures=(),
        design_regions=(),
        default_medium=None,
        polarization="TM",
        dt=None,
        courant=0.99,
        dtype=torch.float32,
        device="cpu",
        compiled=True,
    ):
        self.grid = grid = Grid(size, resolution)
        self.compiled = bool(compiled)
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"Simulation dtype: expected torch.float32 or torch.float64, got {dtype}")
        self.dtype, self.device = dtype, torch.device(device)
        if grid.ndim == 2:
            if polarization not in ("TM", "TE"):
                raise ValueError(
                    f"Simulation polarization: expected 'TM' or 'TE' in 2D, got {polarization!r}"
                )
            self.polarization = polarization
        else:
            self.polarization = None
        self.active = ACTIVE_COMPONENTS[(grid.ndim, self.polarization)]
        self.boundaries = self._check_boundaries(boundary)
        self.default_medium = Medium() if default_medium is None else default_medium
        if not isinstance(self.default_medium, Medium):
            raise TypeError(f"Simulation default_medium: expected a Medium, got {self.default_medium!r}")
        self.structures = tuple(structures)
        for structure in self.structures:
            if not isinstance(structure, Structure):
                raise TypeError(f"Simulation structures: expected Structure objects, got {structure!r}")
        self.design_regions = tuple(design_regions)
        self._design_slices = [self._check_design_region(region) for region in self.design_regions]
        self._check_material_values()
        self.sources = tuple(sources)
        self._bound_sources, self._plane_waves = [], []
        pml_x = self.boundaries[0].thickness if isinstance(self.boundaries[0], PML) else 0
        for source in self.sources:
            if isinstance(source, PlaneWave):
                if not all(
                    isinstance(getattr(self.default_medium, name), float) and not self.default_medium._pole()
                    for name in ("permittivity", "permeability")
                ):
                    raise ValueError(
                        f"{source!r}: the default medium must be non-dispersive with float parameters"
                    )
                self._plane_waves.append((source,) + source.bind(grid, self.polarization, pml_x))
            elif isinstance(source, CurrentSource):
                self._bound_sources.append((source,) + source.bind(grid, self.polarization))
            else:
                raise TypeError(
                    f"Simulation sources: expected PointDipole, CurrentSource or PlaneWave, got {source!r}"
                )
        self.dt_limit = self._stability_limit()
        if dt is None:
            if not 0 < courant <= 1:
                raise ValueError(f"Simulation courant: expected 0 < courant <= 1, got {courant}")
            self.dt = courant * self.dt_limit
        else:
            self.dt = float(dt)
            if not 0 < self.dt <= self.dt_limit:
                raise ValueError(
                    f"Simulation dt = {self.dt:.6g} s is unstable: the Courant limit for this grid "
                    f"and these media is dt <= {self.dt_limit:.6g} s"
                )
        self.monitors = tuple(monitors)
        names = set()
        for monitor in self.monitors:
            if not isinstance(monitor, Monitor):
                raise TypeError(f"Simulation monitors: expected monitor objects, got {monitor!r}")
            if monitor.name in names:
                raise ValueError(f"Simulation monitors: two monitors are named {monitor.name!r}")
            names.add(monitor.name)
            monitor._bind(grid, self.polarization, self.dt, dtype, self.device)
        self._check_frequencies()
        self._check_memory()

    # ------------------------------------------------------------------ set-up checks

    def _check_boundaries(self, boundary):
        grid = self.grid
        boundary = PEC() if boundary is None else boundary
        per_axis = tuple(boundary) if isinstance(boundary, (tuple, list)) else (boundary,) * grid.ndim
        if len(per_axis) != grid.ndim:
            raise ValueError(
                f"Simulation boundary: expected one boundary or {grid.ndim} (one per axis), "
                f"got {len(per_axis)}"
            )
        for axis, item in enumerate(per_axis):
            if not isinstance(item, (PML, Periodic, PEC)):
                raise TypeError(
                    f"Simulation boundary along {AXES[axis]}: expected PML, Periodic or PEC, got {item!r}"
                )
            if isinstance(item, PML) and 2 * item.thickness + 1 > grid.shape[axis]:
                raise ValueError(
                    f"{item!r} along {AXES[axis]}: two layers of {item.thickness} cells do not fit in "
                    f"the domain's {grid.shape[axis]} cells; make the PML thinner or the domain larger"
                )
        return per_axis + (PEC(),) * (3 - grid.ndim)

    def _check_design_region(self, region):
        if not isinstance(region, DesignRegion):
            raise TypeError(f"Simulation design_regions: expected DesignRegion objects, got {region!r}")
        slices = self.grid.index_range(region.center, region.size, None, repr(region))
        expected = tuple(s.stop - s.start for s in slices[: self.grid.ndim])
        if tuple(region.permittivity.shape) != expected:
            raise ValueError(
                f"{region!r}: permittivity has shape {tuple(region.permittivity.shape)}; the region "
                f"covers {expected} cells"
            )
        return slices

    def _check_material_values(self):
        """Refuse NaN/inf (and wrongly signed) material values, naming the medium or region and the cell."""
        self.default_medium.check_values("default_medium")
        for index, structure in enumerate(self.structures):
            if isinstance(structure.medium, Medium):
                structure.medium.check_values(f"structure {index} ({structure.geometry!r})")
        for region in self.design_regions:
            region.check_values()

    @property
    def max_frequency(self) -> float:
        """The highest frequency (Hz) this grid and time step carry: ``min(1 / (2 dt), v / (2 dx_max))``.

        ``v`` is the phase velocity in the densest medium present (module docstring).
        """
        return min(0.5 / self.dt, self._spatial_limit(2))

    def _spatial_limit(self, cells_per_wavelength):
        """Frequency (Hz) at which the densest medium holds ``cells_per_wavelength`` cells per wavelength."""
        media = self._media()
        permittivity = max(_maximum(m.permittivity) for m in media)
        for region in self.design_regions:
            permittivity = max(permittivity, _maximum(region.permittivity))
        permeability = max(_maximum(m.permeability) for m in media)
        speed = SPEED_OF_LIGHT / math.sqrt(permittivity * permeability)
        return speed / (cells_per_wavelength * max(self.grid.spacing[: self.grid.ndim]))

    def _frequency_limit_text(self):
        return (
            f"this grid carries at most {self.max_frequency:.6g} Hz (time-step Nyquist 1/(2 dt) = "
            f"{0.5 / self.dt:.6g} Hz; two cells of {max(self.grid.spacing[: self.grid.ndim]):.6g} m per "
            f"wavelength in the densest medium: {self._spatial_limit(2):.6g} Hz); refine the resolution"
        )

    def _check_frequencies(self):
        limit = self.max_frequency
        accurate = self._spatial_limit(CELLS_PER_WAVELENGTH)
        coarse = []
        for monitor in self.monitors:
            if not isinstance(monitor, DFTMonitor):
                continue
            highest = float(monitor.frequencies.max())
            if highest > limit:
                raise ConfigurationError(
                    f"{monitor!r}: frequency {highest:.6g} Hz is beyond the grid's limit; "
                    + self._frequency_limit_text()
                )
            if highest > accurate * (1 + 1e-9):  # exactly 10 cells per wavelength is fine
                coarse.append(f"{monitor.name!r} ({highest:.6g} Hz)")
        if coarse:  # one warning per simulation, not one per monitor
            warnings.warn(
                f"Simulation: monitor frequencies above {accurate:.6g} Hz have fewer than "
                f"{CELLS_PER_WAVELENGTH} cells per wavelength in the densest medium: {', '.join(coarse)}; "
                "expect phase errors above about 1 %",
                stacklevel=3,
            )
        for source, *_ in self._bound_sources + self._plane_waves:
            spectrum_limit = getattr(source.waveform, "spectrum_limit", None)
            if spectrum_limit is None:
                continue
            reach = float(spectrum_limit())
            if reach > limit:
                raise ConfigurationError(
                    f"{source!r}: the source spectrum reaches {reach:.6g} Hz (-40 dB), beyond the grid's "
                    "limit; narrow or lower the pulse, or " + self._frequency_limit_text()
                )

    def memory_estimate(self, steps=None) -> int:
        """Estimated memory (bytes) of a run: grid-sized tensors plus monitor buffers.

        Counted per cell: the field components, one difference buffer, the update coefficients of
        every component when the materials are not uniform, three tensors per dispersive pole and E
        component; then each DFT or flux monitor's complex accumulators, and, when ``steps`` is given,
        the snapshots and (for a differentiable run) the ``2 sqrt(steps)`` stored and recomputed states.
        Rasterisation temporaries, CPML slabs and probes are small and not counted.

        Args:
            steps: the number of steps of the run, or ``None`` for what does not depend on it.
        """
        cells = math.prod(self.grid.shape)
        value = torch.finfo(self.dtype).bits // 8
        electric = sum(1 for c in self.active if c in E_COMPONENTS)
        per_cell = len(self.active) + 1  # the fields and one difference buffer
        uniform = not self.structures and not self.design_regions and not any(
            isinstance(getattr(self.default_medium, name), torch.Tensor)
            for name in ("permittivity", "conductivity", "permeability")
        )
        if not uniform:
            per_cell += 2 * electric + (len(self.active) - electric)
        poles = sum(1 for m in self._media() if m._pole() is not None)
        per_cell += 3 * poles * electric
        total = cells * per_cell * value
        for monitor in self.monitors:
            if isinstance(monitor, DFTMonitor):
                box = sum(math.prod(s.stop - s.start for s in slices) for slices in monitor._slices.values())
                total += len(monitor.frequencies) * box * 2 * value
            elif isinstance(monitor, Snapshots) and steps is not None:
                total += (steps // monitor.every) * len(monitor.components) * cells * value
        if steps is not None and self.differentiable:
            total += 2 * math.ceil(math.sqrt(steps)) * len(self.active) * cells * value
        return int(total)

    def _check_memory(self, steps=None):
        available = _available_memory(self.device)
        needed = self.memory_estimate(steps)
        if available is not None and needed > available:
            shape = " x ".join(str(n) for n in self.grid.shape[: self.grid.ndim])
            raise ConfigurationError(
                f"Simulation: a run on {shape} cells ({math.prod(self.grid.shape):.3g} cells of "
                f"{self.dtype}) needs about {needed / 2**30:.3g} GiB, more than the "
                f"{available / 2**30:.3g} GiB available on {self.device}; check that size and resolution "
                "are in metres, or coarsen the grid"
            )

    def _media(self):
        media = [self.default_medium] + [s.medium for s in self.structures]
        return [m for m in media if isinstance(m, Medium)]

    def _stability_limit(self):
        media = self._media()
        permittivity = min(_minimum(m.permittivity) for m in media)
        for region in self.design_regions:
            permittivity = min(permittivity, _minimum(region.permittivity))
        permeability = min(_minimum(m.permeability) for m in media)
        speed = (
            SPEED_OF_LIGHT / math.sqrt(min(permittivity, 1.0) * min(permeability, 1.0))
            if permittivity * permeability < 1
            else SPEED_OF_LIGHT / math.sqrt(permittivity * permeability)
        )
        inverse_squares = sum(1 / self.grid.spacing[a] ** 2 for a in range(self.grid.ndim))
        return 1.0 / (speed * math.sqrt(inverse_squares))

    @property
    def differentiable(self):
        """True if a medium parameter or design permittivity requires grad (and grad mode is on)."""
        values = [
            getattr(m, name)
            for m in self._media()
            for name in ("permittivity", "conductivity", "permeability")
        ]
        values += [region.permittivity for region in self.design_regions]
        return torch.is_grad_enabled() and any(_is_tensor_requiring_grad(v) for v in values)

    # ------------------------------------------------------------------ materials on the grid

    def _fill_fractions(self, component):
        """Per structure, its fill fraction (tensor of the grid shape) at ``component``'s nodes."""
        from common.geometry import rasterize

        grid = self.grid
        centers = [grid.coordinates(component, a, torch.float64) for a in range(grid.ndim)]
        spacing = list(grid.spacing[: grid.ndim])
        fractions = []
        for structure in self.structures:
            fill = torch.as_tensor(rasterize(structure.geometry, centers, spacing, supersample=4))
            fractions.append(fill.to(dtype=self.dtype, device=self.device).reshape(grid.shape))
        return fractions

    def _weights(self, component):
        """Effective weight of each medium (default, then structures) at ``component``'s nodes."""
        weights = [1.0]
        for fill in self._fill_fractions(component):
            weights = [w * (1 - fill) for w in weights] + [fill]
        return weights

    def _mix(self, weights, media, name):
        """``sum_k weight_k * medium_k.name``; a float when uniform, else a full tensor.

        PEC parts count with the default medium's value (their E is zeroed anyway; this keeps mu finite).
        """
        total = 0.0
        for weight, medium in zip(weights, media):
            medium = medium if isinstance(medium, Medium) else self.default_medium
            total = total + weight * getattr(medium, name)
        if isinstance(total, torch.Tensor):
            total = total.to(dtype=self.dtype, device=self.device)
            return torch.broadcast_to(total, self.grid.shape)
        return float(total)

    def _coefficients(self):
        """Update coefficients: ``electric[c] = (ca, cb, poles)`` and ``magnetic[c] = dt / mu``."""
        dt = self.dt
        media = [self.default_medium] + [s.medium for s in self.structures]
        electric, magnetic = {}, {}
        for component in self.active:
            weights = self._weights(component) if self.structures else [1.0]
            if component in H_COMPONENTS:
                magnetic[component] = dt / (VACUUM_PERMEABILITY * self._mix(weights, media, "permeability"))
                continue
            permittivity = self._mix(weights, media, "permittivity")
            for region, slices in zip(self.design_regions, self._design_slices):
                full = torch.empty(self.grid.shape, dtype=self.dtype, device=self.device)
                full.copy_(
                    permittivity if isinstance(permittivity, torch.Tensor) else torch.tensor(permittivity)
                )
                permittivity = full
                design = region.permittivity.to(dtype=self.dtype, device=self.device)
                permittivity = permittivity.index_put(
                    tuple(
                        torch.arange(s.start, s.stop, device=self.device).reshape(
                            [-1 if a == i else 1 for a in range(3)]
                        )
                        for i, s in enumerate(slices)
                    ),
                    design.reshape([s.stop - s.start for s in slices]),
                )
            conductivity = self._mix(weights, media, "conductivity")
            if isinstance(conductivity, float) and conductivity == 0.0:  # lossless: no E *= ca pass
                ca, cb = 1.0, dt / (VACUUM_PERMITTIVITY * permittivity)
            else:
                loss = conductivity * dt / (2 * VACUUM_PERMITTIVITY * permittivity)
                ca = (1 - loss) / (1 + loss)
                cb = dt / (VACUUM_PERMITTIVITY * permittivity) / (1 + loss)
            poles = []
            for weight, medium in zip(weights, media):
                pole = medium._pole() if isinstance(medium, Medium) else None
                if pole is None:
                    continue
                numerator, omega0_squared, gamma = pole
                denominator = 1 + gamma * dt / 2
                weight = torch.broadcast_to(
                    torch.as_tensor(weight, dtype=self.dtype, device=self.device), self.grid.shape
                )
                poles.append(
                    (
                        (2 - omega0_squared * dt**2) / denominator,
                        -(1 - gamma * dt / 2) / denominator,
                        weight * (VACUUM_PERMITTIVITY * numerator * dt**2 / denominator),
                    )
                )
            conductor = sum((w for w, m in zip(weights, media) if isinstance(m, PEC)), 0.0)
            if isinstance(conductor, torch.Tensor):
                inside = conductor > 0.5
                ca, cb = (
                    torch.where(inside, 0.0, torch.as_tensor(c, dtype=self.dtype, device=self.device))
                    for c in (ca, cb)
                )
            electric[component] = (ca, cb, poles)
        return electric, magnetic

    # ------------------------------------------------------------------ running

    def _steps(self, until, steps):
        if (until is None) == (steps is None):
            raise ValueError("Simulation.run: give exactly one of until (s) or steps")
        if steps is not None:
            if not (isinstance(steps, int) and steps >= 1):
                raise ValueError(f"Simulation.run: steps must be a positive int, got {steps!r}")
            return steps
        if not until > 0:
            raise ValueError(f"Simulation.run: until must be a positive time (s), got {until!r}")
        return max(1, math.ceil(until / self.dt - 1e-9))

    def _source_values(self, steps):
        values = []
        for source, slices, scale in self._bound_sources:
            # E sources act at (n + 1/2) dt, H sources at n dt (the midpoints of their updates)
            shift = 0.5 if source.component[0] == "E" else 0.0
            times = (torch.arange(steps, dtype=torch.float64) + shift) * self.dt
            values.append((source.component, slices, (scale * source.waveform(times)).tolist()))
        return values

    def _plane_wave_lines(self, steps):
        """Per plane wave, the auxiliary 1D line that carries its incident field (see ``YeeStepper``)."""
        lines = []
        spacing = self.grid.spacing[0]
        for source, electric, magnetic, index in self._plane_waves:
            # long enough that the echo from the line's far end never returns to the TF/SF plane
            travel = steps * SPEED_OF_LIGHT * self.dt / spacing
            length = self.grid.shape[0] + math.ceil(travel / 2) + 2
            times = (torch.arange(steps, dtype=torch.float64) + 1) * self.dt
            lines.append(
                {
                    "electric": electric,
                    "magnetic": magnetic,
                    "index": index,
                    "length": length,
                    # signs of the curl terms: H += sign_h ch dE/dx and E += sign_e cb dH/dx along x
                    "sign_h": 1.0 if electric == "Ez" else -1.0,
                    "sign_e": 1.0 if electric == "Ez" else -1.0,
                    "ce": self.dt / (VACUUM_PERMITTIVITY * self.default_medium.permittivity * spacing),
                    "ch": self.dt / (VACUUM_PERMEABILITY * self.default_medium.permeability * spacing),
                    "drive": (source.amplitude * source.waveform(times)).tolist(),
                }
            )
        return lines

    def run(self, until=None, steps=None, progress=True):
        """Run from zero fields for a duration or a number of steps.

        Args:
            until: simulated time (s); the number of steps is ``ceil(until / dt)``.
            steps: number of steps (instead of ``until``).
            progress: show a tqdm progress bar.

        Returns:
            :class:`Result`: ``result[name]`` holds each monitor's tensors; ``result.times``: E sample times.

        Raises:
            DataError: a material value became NaN or infinite (e.g. a design tensor changed in place).
            ConfigurationError: the run (with its snapshots) would not fit in memory.
            FloatingPointError: if the fields become non-finite (the message gives the step).
        """
        steps = self._steps(until, steps)
        self._check_material_values()
        self._check_memory(steps)
        electric, magnetic = self._coefficients()
        periodic = tuple(isinstance(b, Periodic) for b in self.boundaries)
        pml = tuple(b if isinstance(b, PML) else None for b in self.boundaries)
        stepper = YeeStepper(
            self.grid,
            self.active,
            periodic,
            pml,
            self.dt,
            electric,
            magnetic,
            self._source_values(steps),
            self._plane_wave_lines(steps),
            self.dtype,
            self.device,
            compiled=self.compiled,
        )
        state = stepper.initial_state()
        for monitor in self.monitors:
            state.update(monitor._initial_state(steps))
        bar = tqdm(total=steps, desc="FDTD", unit="step", disable=not progress, leave=False)
        threads = torch.get_num_threads()
        # below ~1M cells an operation is too short for several threads to pay off (and they spin-wait
        # on a busy machine): small grids run on one thread
        if math.prod(self.grid.shape) < 2**20 and self.device.type == "cpu":
            torch.set_num_threads(1)
        try:
            if self.differentiable:
                state, records = self._run_checkpointed(stepper, state, steps, bar)
            else:
                with torch.no_grad():
                    state, records = self._run_inplace(stepper, state, steps, bar)
        finally:
            torch.set_num_threads(threads)
            bar.close()
        outputs = {m.name: m._finish(state, records[m.name], self.grid) for m in self.monitors}
        times = (torch.arange(1, steps + 1, dtype=torch.float64, device=self.device)) * self.dt
        metadata = {
            "size": list(self.grid.size[: self.grid.ndim]),
            "spacing": list(self.grid.spacing[: self.grid.ndim]),
            "ndim": self.grid.ndim,
            "polarization": self.polarization or "",
            "steps": steps,
        }
        return Result(outputs, times.to(self.dtype), self.dt, metadata)

    def _check_finite(self, state, step):
        # the extremes propagate NaN and inf: one read pass, no field-sized temporaries
        if not all(bool(torch.isfinite(extreme)) for extreme in torch.aminmax(state[self.active[0]])):
            raise FloatingPointError(
                f"Simulation.run: the fields became non-finite by step {step}; check the "
                "media (negative or dispersive parameters) and the time step"
            )

    def _run_inplace(self, stepper, state, steps, bar):
        records = {m.name: [] for m in self.monitors}
        for step in range(steps):
            state = stepper.step(state, step, inplace=True)
            for monitor in self.monitors:
                state, recorded = monitor._record(state, state, step, inplace=True)
                records[monitor.name].append(recorded)
            if (step + 1) % 256 == 0 or step + 1 == steps:
                self._check_finite(state, step + 1)
                bar.update(bar.total - bar.n if step + 1 == steps else 256)
        return state, records

    def _run_checkpointed(self, stepper, state, steps, bar):
        keys = list(state)
        parameters = stepper.coefficient_tensors()
        segment_length = max(1, math.ceil(math.sqrt(steps)))
        monitors = self.monitors

        def make_segment(start, count):
            def run(tensors, inplace):
                current = dict(zip(keys, tensors[: len(keys)]))
                if inplace:
                    current = {key: value.clone() for key, value in current.items()}
                local = stepper.with_coefficients(parameters, tensors[len(keys) :])
                recorded = []
                for step in range(start, start + count):
                    current = local.step(current, step, inplace=inplace)
                    for monitor in monitors:
                        current, step_records = monitor._record(current, current, step, inplace=inplace)
                        recorded.extend(step_records)
                return tuple(current[key] for key in keys) + tuple(recorded)

            return run

        records = {m.name: [] for m in self.monitors}
        values = tuple(state[key] for key in keys)
        for start in range(0, steps, segment_length):
            count = min(segment_length, steps - start)
            outputs = _Segment.apply(make_segment(start, count), *values, *parameters)
            values, flat = outputs[: len(keys)], list(outputs[len(keys) :])
            for step in range(start, start + count):
                for monitor in self.monitors:
                    n = monitor._record_count(step)
                    records[monitor.name].append(flat[:n])
                    flat = flat[n:]
            self._check_finite(dict(zip(keys, values)), start + count)
            bar.update(count)
        return dict(zip(keys, values)), records


class _Segment(torch.autograd.Function):
    """A run of consecutive steps that stores only its inputs and recomputes itself in the backward pass.

    Forward: the steps run in place under ``no_grad`` (on copies of the input state). Backward: they run
    again out of place with grad enabled, and ``torch.autograd.grad`` carries the output gradients back to
    the input state and the coefficient tensors. One graph node per segment, so both the stored tensors and
    the autograd bookkeeping grow like the number of segments, ``sqrt(steps)``.
    """

    @staticmethod
    def forward(ctx, run, *tensors):
        ctx.run = run
        ctx.save_for_backward(*tensors)
        with torch.no_grad():
            return run(tensors, inplace=True)

    @staticmethod
    def backward(ctx, *output_gradients):
        needs = ctx.needs_input_grad[1:]
        inputs = [t.detach().requires_grad_(need) for t, need in zip(ctx.saved_tensors, needs)]
        with torch.enable_grad():
            outputs = ctx.run(inputs, inplace=False)
        pairs = [
            (output, gradient)
            for output, gradient in zip(outputs, output_gradients)
            if gradient is not None and output.requires_grad
        ]
        wanted = [t for t in inputs if t.requires_grad]
        gradients = iter(
            torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)
            if pairs and wanted
            else [None] * len(wanted)
        )
        return (None,) + tuple(next(gradients) if t.requires_grad else None for t in inputs)
