"""The FDTD driver: ``Simulation(...).run(until=...) -> Result``.

A :class:`Simulation` holds a set-up (grid, boundaries, materials, sources, monitors); ``run``
starts from zero fields, steps them, and returns the monitors' outputs. The set-up is not
changed by a run (monitors are specifications; each run gets new recorders from them), so a
simulation can be run again (e.g. after its design tensor changed) and a monitor can serve several
simulations. Thread settings are made once, by the ``threads`` argument, never by ``run``. Fields
that become non-finite stop the run with :class:`FieldBlowUpError` naming the step.

Time step: ``dt = courant * dt_max`` with ``dt_max = 1 / (c_max sqrt(sum_a 1/dx_a^2))`` the Yee
stability limit (``c_max`` the fastest light speed among the media); ``courant`` defaults to 0.99.
A user ``dt`` above ``dt_max`` is refused.

Refusals (``common.errors``): what the grid cannot carry (frequencies beyond its limit, attribute
``max_frequency``; source spectra beyond it; more memory than there is) is refused by
:mod:`~mindelec.fdtd.limits`, monitors in a PML by :mod:`~mindelec.fdtd.placement`. NaN or infinite
material values raise :class:`~common.errors.DataError` naming the structure or region and the cell,
when the simulation is built and again when a run starts.

Differentiable runs: when grad is enabled and any medium parameter or design permittivity
requires grad, ``run`` splits the steps into segments of ``ceil(sqrt(steps))`` steps, each one
autograd node (time-segment checkpointing, :mod:`mindelec.fdtd.checkpointing`): the forward
pass runs them in place without a graph and stores only each segment's starting state; the
backward pass recomputes one segment at a time out of place and back-propagates through it.
Memory for the backward pass therefore grows like ``sqrt(steps)``, and the cost is about one
extra forward pass. Otherwise the fields are updated in place under ``torch.no_grad``.
"""

import math
import time

import torch
from tqdm import tqdm

from common import threads as threads_module
from common.deprecation import renamed_arguments
from common.errors import ArgumentTypeError, ConfigurationError, SimulationError

from . import limits, thin_wire
from .boundaries import PML, Periodic, per_axis_boundaries
from .checkpointing import run_checkpointed
from .coefficients import update_coefficients
from .conformal import conformal_geometry, conformal_update, time_step_factor
from .grid import ACTIVE_COMPONENTS, Grid
from .lumped import LumpedPort
from .materials import DesignRegion, Medium, Structure
from .monitors import Monitor
from .near_to_far import NearToFarMonitor
from .offdiagonal import check_subpixel, off_diagonal_update
from .placement import (
    check_line_return,
    check_monitor_placement,
    check_source_placement,
    check_structure_placement,
)
from .restart import CHECK_EVERY, RestartFile, setup_digest
from .result import Result
from .run_control import decay_watcher, field_band
from .sources import CurrentSource, PlaneWave
from .tfsf import TFSFBox
from .thin_wire import WireCorrections
from .updates import YeeStepper


class FieldBlowUpError(SimulationError, FloatingPointError):
    """The fields of an FDTD run became non-finite; ``step`` is the step by which it was seen.

    A :class:`~common.errors.SimulationError` (as MD blow-ups are) and, for callers that caught it
    before, a ``FloatingPointError``.
    """


def _is_tensor_requiring_grad(value):
    return isinstance(value, torch.Tensor) and value.requires_grad


class Simulation:
    """A Yee-grid FDTD simulation in 1D, 2D (TM or TE) or 3D.

    Args:
        size: domain extent per axis (m); the domain is ``[-size/2, size/2]`` and ``len(size)`` its dimension.
        cell_size: the edge of a grid cell (m), one length or one per axis (``(dx, dy, dz)``); each axis
            gets ``round(size / cell_size)`` cells (see
            :class:`Grid`). (Meep's ``resolution`` is the inverse, cells per unit length.) The old keyword
            ``resolution=`` still works for one release, with a ``DeprecationWarning``.
        boundary: one of :class:`PML`, :class:`Periodic`, :class:`PEC` for every axis, or a tuple with one per
            axis. A PML lies inside the domain. Default: PEC walls.
        sources: :class:`PointDipole`, :class:`CurrentSource` (line, area), :class:`PlaneWave` (a TF/SF plane
            along x) and :class:`TFSFBox` (a plane wave of any direction through the faces of a box).
        monitors: :class:`FieldProbe`, :class:`DFTMonitor`, :class:`FluxMonitor`, :class:`FluxBox`,
            :class:`NearToFarMonitor`, :class:`Snapshots` objects, with distinct names.
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
        threads: torch's intra-op thread count and the OpenMP/BLAS pools (:mod:`common.threads`), set
            here once, as in :class:`mindsponge.Simulation`: the setting is process-wide and stays after
            the simulation; :meth:`run` never changes it. ``None`` (default) leaves it alone, a positive
            int sets it, ``"free"`` sets it to the cores not busy with other processes now. Grids below
            about a million cells gain little from several threads, and on a busy machine threads that
            spin-wait for each other can make them slower: ``threads=1`` suits them.
        subpixel: ``True``: anisotropic subpixel smoothing of the permittivity at dielectric interfaces
            (:mod:`~mindelec.fdtd.smoothing`, Farjadpour et al. 2006, with the off-diagonal terms of
            :mod:`~mindelec.fdtd.offdiagonal`): second-order interfaces instead of first-order ones;
            ``"diagonal"``: its diagonal only. Either makes PEC structures conformal too, in 2D TM and 3D
            at a shorter step (:mod:`~mindelec.fdtd.conformal`). Default ``False`` (staircased PEC).

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
        >>> sim = me.fdtd.Simulation(size=(2e-3, 2e-3), cell_size=20e-6, boundary=me.fdtd.PML(thickness=10),
        ...     sources=[me.fdtd.PointDipole((0, 0), "Ez", me.fdtd.GaussianPulse(f0=150e9, fwidth=100e9))],
        ...     monitors=[me.fdtd.FieldProbe("p", position=(2e-4, 0), components=("Ez",))])
        >>> result = sim.run(until=20e-12, progress=False)
        >>> result["p"]["Ez"].shape == result.times.shape
        True
    """

    @renamed_arguments(resolution="cell_size")
    def __init__(
        self,
        size,
        cell_size,
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
        threads=None,
        subpixel=False,
    ):
        self.grid = Grid(size, cell_size)
        self.subpixel = check_subpixel(subpixel)
        self.compiled = bool(compiled)
        if dtype not in (torch.float32, torch.float64):
            raise ArgumentTypeError(f"Simulation dtype: expected torch.float32 or torch.float64, got {dtype}")
        self.dtype, self.device = dtype, torch.device(device)
        self.polarization = self._check_polarization(polarization)
        self.active = ACTIVE_COMPONENTS[(self.grid.ndim, self.polarization)]
        self.boundaries = per_axis_boundaries(boundary, self.grid)
        self._set_materials(default_medium, structures, design_regions)
        self.sources = tuple(sources)
        self._bound_sources, self._plane_waves, self._tfsf = self._bind_sources(self.sources)
        self._conformal = conformal_geometry(self)
        self.dt_limit = (self._stability_limit() * time_step_factor(self, self._conformal)
                         * thin_wire.time_step_factor(self.structures))
        self.dt = self._time_step(dt, courant)
        self.monitors, recorders = self._check_monitors(monitors)
        limits.check_frequencies(self)
        for recorder in recorders:  # after the grid's limits: a cross-section monitor checks its spectrum
            recorder.set_incident(self._tfsf)
        limits.check_memory(self)
        threads_module.set_threads(threads, "Simulation threads")

    # ------------------------------------------------------------------ set-up checks

    def _check_polarization(self, polarization):
        if self.grid.ndim != 2:
            return None
        if polarization not in ("TM", "TE"):
            raise ConfigurationError(
                f"Simulation polarization: expected 'TM' or 'TE' in 2D, got {polarization!r}")
        return polarization

    def _set_materials(self, default_medium, structures, design_regions):
        self.default_medium = Medium() if default_medium is None else default_medium
        if not isinstance(self.default_medium, Medium):
            raise ArgumentTypeError(
                f"Simulation default_medium: expected a Medium, got {self.default_medium!r}")
        self.structures = tuple(structures)
        for structure in self.structures:
            if not isinstance(structure, Structure):
                raise ArgumentTypeError(
                    f"Simulation structures: expected Structure objects, got {structure!r}")
            check_structure_placement(structure, self.grid)
        self.design_regions = tuple(design_regions)
        self._design_slices = [self._check_design_region(region) for region in self.design_regions]
        self._wires = WireCorrections(self.grid, self.structures)
        self._check_material_values()

    @property
    def _pml_x(self):
        """PML cells along x (0 without a PML there): a TF/SF plane must lie outside them."""
        return self.boundaries[0].thickness if isinstance(self.boundaries[0], PML) else 0

    def _bind_sources(self, sources):
        """``(current sources as (source, slices, scale), plane waves, bound TF/SF boxes)``, each checked
        against the grid."""
        bound, plane_waves, boxes = [], [], []
        for source in sources:
            if isinstance(source, TFSFBox):
                boxes.append(source.bind(self.grid, self.polarization, self.boundaries, self.default_medium,
                                         self.structures))
            elif isinstance(source, PlaneWave):
                medium = self.default_medium
                if not all(
                    isinstance(getattr(medium, name), float) and not medium._pole()
                    for name in ("permittivity", "permeability")
                ):
                    raise ConfigurationError(
                        f"{source!r}: the default medium must be non-dispersive with float parameters"
                    )
                source.bind(self.grid, self.polarization, self._pml_x)
                plane_waves.append(source)
            elif isinstance(source, CurrentSource):
                bound.append((source,) + source.bind(self.grid, self.polarization))
                check_source_placement(source, bound[-1][1], self.grid, self.boundaries)
            else:
                raise ArgumentTypeError(
                    "Simulation sources: expected PointDipole, CurrentSource, PlaneWave or TFSFBox, "
                    f"got {source!r}"
                )
        return bound, plane_waves, boxes

    def _time_step(self, dt, courant):
        if dt is None:
            if not 0 < courant <= 1:
                raise ConfigurationError(f"Simulation courant: expected 0 < courant <= 1, got {courant}")
            return courant * self.dt_limit
        dt = float(dt)
        if not 0 < dt <= self.dt_limit:
            raise ConfigurationError(
                f"Simulation dt = {dt:.6g} s is unstable: the Courant limit for this grid "
                f"and these media is dt <= {self.dt_limit:.6g} s"
            )
        return dt

    def _check_monitors(self, monitors):
        """``(monitors, one recorder per monitor)``, each checked against the grid and the PML."""
        monitors = tuple(monitors)
        names, recorders = set(), []
        for monitor in monitors:
            if not isinstance(monitor, Monitor):
                raise ArgumentTypeError(f"Simulation monitors: expected monitor objects, got {monitor!r}")
            if monitor.name in names:
                raise ConfigurationError(f"Simulation monitors: two monitors are named {monitor.name!r}")
            names.add(monitor.name)
            recorder = monitor.recorder(self.grid, self.polarization, self.dt, self.dtype, self.device)
            check_monitor_placement(monitor, recorder, self.grid, self.boundaries)
            check_line_return(monitor, self.boundaries)
            if isinstance(monitor, NearToFarMonitor):
                monitor.check_medium(self.default_medium)
            recorders.append(recorder)
        return monitors, recorders

    def _recorders(self):
        """A new :class:`~mindelec.fdtd.monitors.Recorder` per monitor (one set per run), told the band."""
        band = field_band(self._sources_with_waveforms)
        recorders = [
            monitor.recorder(self.grid, self.polarization, self.dt, self.dtype, self.device)
            for monitor in self.monitors
        ]
        weights = self._edge_weights()
        for recorder in recorders:
            recorder.set_band(band)
            recorder.set_incident(self._tfsf)
            if weights:
                recorder.set_edge_weights(weights)
        return recorders

    def _edge_weights(self):
        """``{E component: grid-shape tensor}``: each E edge's weight in the conformal H update (its fraction
        outside the conductors; 1 outside the conformal region), or ``{}`` in a staircased run."""
        geometry = self._conformal
        if not geometry:
            return {}
        return {component: torch.where(geometry.edge_region, fraction, 1.0)
                for component, fraction in geometry.fractions.items() if component.startswith("E")}

    @property
    def _sources_with_waveforms(self):
        """Every source of the set-up (its ``waveform`` the source's time function)."""
        bound = [entry[0] for entry in self._bound_sources]
        return bound + self._plane_waves + [box.source for box in self._tfsf]

    def _check_design_region(self, region):
        if not isinstance(region, DesignRegion):
            raise ArgumentTypeError(
                f"Simulation design_regions: expected DesignRegion objects, got {region!r}")
        slices = self.grid.index_range(region.center, region.size, None, repr(region))
        expected = tuple(s.stop - s.start for s in slices[: self.grid.ndim])
        if tuple(region.permittivity.shape) != expected:
            raise ConfigurationError(
                f"{region!r}: permittivity has shape {tuple(region.permittivity.shape)}; the region "
                f"covers {expected} cells"
            )
        return slices

    def _check_material_values(self):
        """Refuse NaN/inf (and wrongly signed) material values, naming the medium or region and the cell."""
        self.default_medium.check_values("default_medium")
        for index, structure in enumerate(self.structures):
            structure.check(self.grid, f"structure {index} ({structure.geometry!r})")
        for region in self.design_regions:
            region.check_values()

    @property
    def max_frequency(self) -> float:
        """The highest frequency (Hz) this grid and time step carry: ``min(1 / (2 dt), v / (2 dx_max))``,
        ``v`` the phase velocity in the densest medium present (:mod:`~mindelec.fdtd.limits`)."""
        return limits.max_frequency(self)

    def memory_estimate(self, steps=None) -> int:
        """Estimated memory (bytes) of a run of ``steps`` steps (``None``: what does not depend on the
        run length): :func:`mindelec.fdtd.limits.memory_estimate`."""
        return limits.memory_estimate(self, steps)

    def _stability_limit(self):
        """The Yee stability limit of the time step (s) for these media and cells."""
        return limits.stability_limit(self.grid, self.media, self.design_regions)

    @property
    def media(self):
        """The :class:`Medium` objects of the set-up: the default medium and the structures' (not PEC)."""
        media = [self.default_medium] + [s.medium for s in self.structures]
        return [m for m in media if isinstance(m, Medium)]

    @property
    def differentiable(self):
        """True if a medium parameter or design permittivity requires grad (and grad mode is on)."""
        values = [
            getattr(m, name)
            for m in self.media
            for name in ("permittivity", "conductivity", "permeability")
        ]
        values += [region.permittivity for region in self.design_regions]
        return torch.is_grad_enabled() and any(_is_tensor_requiring_grad(v) for v in values)

    def _coefficients(self, geometry=None):
        """``electric[c] = (ca, cb, poles)``, ``magnetic[c] = dt / mu`` (``geometry``: the conformal PEC)."""
        design = list(zip(self.design_regions, self._design_slices))
        return update_coefficients(
            self.grid, self.active, self.dt, self.default_medium, self.structures, design,
            self.dtype, self.device, subpixel=self.subpixel, conformal=geometry,
        )

    def plot(self, normal="z", position=0.0, ax=None):
        """Draw the set-up (permittivity, sources, monitors, ports, PML); see :mod:`mindelec.fdtd.plotting`.

        Args:
            normal, position: 3D only: the section ``normal = position`` (m); 2D draws the domain, 1D a line.
            ax: a matplotlib Axes (default: a new figure's).

        Returns:
            the matplotlib Axes.
        """
        from .plotting import plot_simulation

        return plot_simulation(self, normal, position, ax)

    # ------------------------------------------------------------------ running

    def _steps(self, until, steps):
        if (until is None) == (steps is None):
            raise ConfigurationError("Simulation.run: give exactly one of until (s) or steps")
        if steps is not None:
            if not (isinstance(steps, int) and steps >= 1):
                raise ConfigurationError(f"Simulation.run: steps must be a positive int, got {steps!r}")
            return steps
        if not until > 0:
            raise ConfigurationError(f"Simulation.run: until must be a positive time (s), got {until!r}")
        return max(1, math.ceil(until / self.dt - 1e-9))

    def _source_values(self, steps):
        values = []
        for source, slices, scale in self._bound_sources:
            # E sources act at (n + 1/2) dt, H sources at n dt (the midpoints of their updates)
            shift = 0.5 if source.component[0] == "E" else 0.0
            times = (torch.arange(steps, dtype=torch.float64) + shift) * self.dt
            values.append((source.component, slices, (scale * source.waveform(times)).tolist()))
        return values

    def _stepper(self, steps):
        """The :class:`YeeStepper` of a run of ``steps`` steps (coefficients, sources, plane-wave lines)."""
        electric, magnetic = self._coefficients(self._conformal)
        for monitor in self.monitors:
            if isinstance(monitor, LumpedPort):
                monitor.check_gap(self.grid, electric)
        lines = [
            wave.incident_line(self.grid, self.polarization, self._pml_x, self.dt, self.default_medium, steps)
            for wave in self._plane_waves
        ]
        tfsf = [box.corrections(self.dt, steps, self.dtype, self.device) for box in self._tfsf]
        return YeeStepper(
            self.grid,
            self.active,
            tuple(isinstance(b, Periodic) for b in self.boundaries),
            tuple(b if isinstance(b, PML) else None for b in self.boundaries),
            self.dt,
            electric,
            magnetic,
            self._source_values(steps),
            lines,
            self.dtype,
            self.device,
            compiled=self.compiled, wires=self._wires,
            off_diagonal=off_diagonal_update(self, electric),
            conformal=self._conformal and conformal_update(self, self._conformal, electric, magnetic),
            tfsf=tfsf,
        )

    def run(self, until=None, steps=None, progress=True, until_decayed=None, restart_file=None,
            restart_every=600.0):
        """Run from zero fields for a duration or a number of steps.

        Every call starts afresh: zero fields at ``t = 0``, the sources from their waveforms' start,
        new monitor buffers; nothing of an earlier run is kept, so two calls with the same set-up give
        the same result (and a changed design tensor is picked up). This differs from
        :meth:`mindsponge.Simulation.run`, which continues from the simulation's current state. To
        observe a longer time, run again with a larger ``until``.

        Args:
            until: simulated time (s); the number of steps is ``ceil(until / dt)``.
            steps: number of steps (instead of ``until``).
            progress: show a tqdm progress bar.
            until_decayed: a :class:`Decay` or a number (its threshold, relative to the peak): stop once
                the field energy (or a named probe's ``|F|^2``) has decayed below it, checked every
                ``check_every`` steps after the sources have turned off (:mod:`~mindelec.fdtd.run_control`);
                ``until``/``steps`` is then the maximum. ``result.steps`` tells where the run stopped,
                ``result.metadata["decayed"]`` whether it decayed. Not for differentiable runs.
            restart_file: a path: write the run's state there every ``restart_every`` seconds, and continue
                from it when it exists (a run that died resumes; :mod:`~mindelec.fdtd.restart`). The result
                is the one an uninterrupted run gives; the file is deleted when the run completes. A file
                of another set-up is refused. Not for differentiable runs.
            restart_every: seconds of wall time between restart files (>= 0).

        Returns:
            :class:`Result`: ``result[name]`` holds each monitor's tensors; ``result.times``: E sample times;
            ``result.cost``: the CPU seconds of the set-up and of the steps, and the step resumed from.

        Raises:
            DataError: a material value became NaN or infinite (e.g. a design tensor changed in place), or
                the restart file is damaged.
            ConfigurationError: the run (with its snapshots) would not fit in memory; a restart file of
                another set-up, or a differentiable run with a restart file.
            FieldBlowUpError: (a :class:`~common.errors.SimulationError` and a ``FloatingPointError``) if the
                fields become non-finite; its ``step`` and message give the step.
        """
        started = time.process_time()
        steps = self._steps(until, steps)
        self._check_material_values()
        limits.check_memory(self, steps)
        stepper = self._stepper(steps)
        state = stepper.initial_state()
        recorders = self._recorders()
        watcher = decay_watcher(until_decayed, self.differentiable, stepper, self.monitors, recorders)
        for recorder in recorders:
            recorder.start(steps)
        samples = [[] for _ in recorders]
        restart, done = None, 0
        if restart_file is not None:
            if self.differentiable:
                raise ConfigurationError(
                    "Simulation.run: restart_file is not available for differentiable runs"
                )
            digest = setup_digest(self, stepper, recorders, steps, until_decayed)
            restart = RestartFile(restart_file, restart_every, digest)
            done = restart.resume(state, recorders, samples, watcher)
        bar = tqdm(total=steps, initial=done, desc="FDTD", unit="step", disable=not progress, leave=False)
        stepping = time.process_time()

        def after_segment(state, done, count):
            self._check_finite(state, done)
            bar.update(count)

        try:
            if self.differentiable:
                _, samples = run_checkpointed(stepper, state, recorders, steps, after_segment)
            else:
                with torch.no_grad():
                    steps = self._run_inplace(stepper, state, recorders, samples, range(done, steps), bar,
                                              watcher, restart)
        finally:
            bar.close()
        cost = {"setup_seconds": stepping - started, "stepping_seconds": time.process_time() - stepping,
                "resumed_from": done}
        if restart is not None:
            restart.remove()
        outputs = {recorder.name: recorder.finish(s) for recorder, s in zip(recorders, samples)}
        times = (torch.arange(1, steps + 1, dtype=torch.float64, device=self.device)) * self.dt
        metadata = {
            "size": list(self.grid.size[: self.grid.ndim]),
            "spacing": list(self.grid.spacing[: self.grid.ndim]),
            "ndim": self.grid.ndim,
            "polarization": self.polarization or "",
            "steps": steps,
            "decayed": bool(watcher is not None and watcher.decayed),
        }
        return Result(outputs, times.to(self.dtype), self.dt, metadata, cost)

    def _check_finite(self, state, step):
        # the extremes propagate NaN and inf: one read pass, no field-sized temporaries
        if not all(bool(torch.isfinite(extreme)) for extreme in torch.aminmax(state.fields[self.active[0]])):
            raise FieldBlowUpError(
                f"Simulation.run: the fields became non-finite by step {step}; check the "
                "media (negative or dispersive parameters) and the time step",
                step=step,
            )

    def _run_inplace(self, stepper, state, recorders, samples, steps, bar, watcher, restart):
        """Run the steps of the range ``steps`` in place, appending to ``samples``; returns the number of
        steps done (fewer than ``steps.stop`` when the fields decayed)."""
        for step in steps:
            state = stepper.step(state, step, inplace=True)
            for recorder, recorded in zip(recorders, samples):
                recorded.append(recorder.record(state.fields, step, inplace=True))
            stop = watcher is not None and watcher.stop(state.fields, step)
            if (step + 1) % CHECK_EVERY == 0 or step + 1 == steps.stop or stop:
                self._check_finite(state, step + 1)
                bar.update(step + 1 - bar.n)
                if stop:
                    return step + 1
                if restart is not None and step + 1 < steps.stop and restart.due():
                    restart.save(step + 1, state, recorders, samples, watcher)
        return steps.stop
