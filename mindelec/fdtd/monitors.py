"""Monitors: read-only observers of the fields during a run.

Every monitor has a ``name``; after ``result = sim.run(...)``, ``result[name]`` is a dict of tensors:

* :class:`FieldProbe` - ``{"Ez": (steps,) tensor, ...}``: the component at its Yee node nearest to
  ``position``, after every step. E values are at ``result.times`` (``(n + 1) dt``), H values half a
  step earlier (``result.times - dt/2``).
* :class:`DFTMonitor` - ``{"Ez": (F, n1[, n2[, n3]]) complex tensor, ..., "frequencies": (F,),
  "coordinates": {"Ez": {"x": (n1,), "y": (n2,)}, ...}}``: the running DFT
  ``F(r, f) = sum_n field(r, t_n) exp(-2 pi i f t_n) dt`` of each component on its own Yee nodes inside the
  box (with each component's own sample times, so E and H share one time origin).
* :class:`FluxMonitor` - ``{"flux": (F,), "frequencies": (F,)}``: ``Re integral (E(f) x conj(H(f))) . n dA``
  over a line (2D; per unit length along z) or plane (3D) or at a point (1D; per unit area),
  normal ``n`` along the axis where ``size`` is 0, with E and H averaged to common nodes. For a pulse the
  energy crossing the surface is ``2 * integral_0^inf flux df`` (J); ratios of fluxes give
  transmission and reflection spectra.
* :class:`Snapshots` - ``{"Ez": (K, n1[, n2[, n3]]), ..., "times": (K,)}``: whole-grid copies every
  ``every`` steps.
"""

import math

import torch

from common.errors import ConfigurationError

from .grid import ACTIVE_COMPONENTS, AXES, E_COMPONENTS, H_COMPONENTS


def _check_components(components, grid, polarization, owner):
    active = ACTIVE_COMPONENTS[(grid.ndim, polarization)]
    components = (components,) if isinstance(components, str) else tuple(components)
    for component in components:
        if component not in active:
            raise ValueError(
                f"{owner}: component {component!r} is not simulated; this {grid.ndim}D "
                f"simulation has {', '.join(active)}"
            )
    return components


def _squeeze(tensor, ndim, leading=0):
    """Drop the internal length-1 axes beyond the simulation's dimension."""
    return tensor.reshape(tensor.shape[: leading + ndim])


class Monitor:
    """Base class: ``name`` plus the hooks the time loop calls (internal)."""

    def __init__(self, name):
        if not isinstance(name, str) or not name:
            raise ValueError(f"{type(self).__name__}: name must be a non-empty string, got {name!r}")
        self.name = name

    def _initial_state(self, steps):
        return {}

    def _record_count(self, step):
        return 0

    def _record(self, fields, state, step, inplace):
        """Returns ``(state, records)``: the updated accumulators and this step's recorded tensors."""
        return state, []


class FieldProbe(Monitor):
    """Time series of field components at a point.

    Args:
        name: key of the result.
        position: (m), one coordinate per dimension; the nearest Yee node of each component is used.
        components: e.g. ``("Ez",)``.
    """

    def __init__(self, name, position, components=("Ez",)):
        super().__init__(name)
        self.position = tuple(float(value) for value in position)
        self.components = (components,) if isinstance(components, str) else tuple(components)

    def _bind(self, grid, polarization, dt, dtype, device):
        self.components = _check_components(self.components, grid, polarization, repr(self))
        position = grid.check_inside(self.position, repr(self))
        self._indices = {component: grid.nearest_index(component, position) for component in self.components}

    def _record_count(self, step):
        return len(self.components)

    def _record(self, fields, state, step, inplace):
        return state, [fields[component][self._indices[component]].clone() for component in self.components]

    def _finish(self, state, records, grid):
        return {
            component: torch.stack([step_records[i] for step_records in records])
            for i, component in enumerate(self.components)
        }

    def __repr__(self):
        return f"FieldProbe({self.name!r}, position={self.position}, components={self.components})"


class DFTMonitor(Monitor):
    """Frequency-domain fields on a box by a running DFT.

    Args:
        name: key of the result.
        frequencies: sequence or 1D tensor of frequencies (Hz), finite and >= 0; a :class:`Simulation`
            refuses those above its ``max_frequency``.
        components: e.g. ``("Ez", "Hx", "Hy")``.
        center, size: the box (m), one value per dimension; default the whole domain.
    """

    def __init__(self, name, frequencies, components=("Ez",), center=None, size=None):
        super().__init__(name)
        self.frequencies = torch.as_tensor(frequencies, dtype=torch.float64).reshape(-1)
        if self.frequencies.numel() == 0:
            raise ConfigurationError(f"{type(self).__name__}({name!r}): frequencies must not be empty")
        bad = ~torch.isfinite(self.frequencies) | (self.frequencies < 0)
        if bool(bad.any()):
            index = int(torch.nonzero(bad)[0, 0])
            raise ConfigurationError(
                f"{type(self).__name__}({name!r}): frequency {index} is {float(self.frequencies[index])} Hz; "
                "frequencies must be finite and >= 0 (the DFT of a real field at -f is the conjugate of f)"
            )
        self.components = (components,) if isinstance(components, str) else tuple(components)
        self.center = center
        self.size = size

    def _regions(self, grid):
        center = (0.0,) * grid.ndim if self.center is None else self.center
        size = grid.size[: grid.ndim] if self.size is None else self.size
        return {
            component: grid.index_range(center, size, component, repr(self)) for component in self.components
        }

    def _bind(self, grid, polarization, dt, dtype, device):
        self.components = _check_components(self.components, grid, polarization, repr(self))
        self._slices = self._regions(grid)
        self._dt = dt
        self._dtype, self._device = dtype, device

    def _initial_state(self, steps):
        complex_dtype = torch.complex128 if self._dtype == torch.float64 else torch.complex64
        # exp(-i omega t) dt at every step's E and H sample times, computed in float64: (steps, F, 1, 1, 1)
        omega = 2 * math.pi * self.frequencies.to(self._device)
        self._phases = {}
        for kind, shift in (("E", 1.0), ("H", 0.5)):
            times = (torch.arange(steps, dtype=torch.float64, device=self._device) + shift) * self._dt
            phases = torch.polar(torch.full_like(omega, self._dt).expand(steps, -1), -times[:, None] * omega)
            self._phases[kind] = phases.to(complex_dtype).reshape(steps, -1, 1, 1, 1)
        state = {}
        for component, slices in self._slices.items():
            shape = (len(self.frequencies),) + tuple(s.stop - s.start for s in slices)
            state[f"{self.name}/{component}"] = torch.zeros(shape, dtype=complex_dtype, device=self._device)
        return state

    def _record(self, fields, state, step, inplace):
        for component, slices in self._slices.items():
            key = f"{self.name}/{component}"
            increment = fields[component][slices].unsqueeze(0) * self._phases[component[0]][step]
            state[key] = state[key].add_(increment) if inplace else state[key] + increment
        return state, []

    def _finish(self, state, records, grid):
        output = {"frequencies": self.frequencies.to(self._device), "coordinates": {}}
        for component, slices in self._slices.items():
            output[component] = _squeeze(state[f"{self.name}/{component}"], grid.ndim, leading=1)
            output["coordinates"][component] = {
                AXES[a]: grid.coordinates(component, a, self._dtype, self._device)[slices[a]]
                for a in range(grid.ndim)
            }
        return output

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r}, center={self.center}, size={self.size})"


class FluxMonitor(DFTMonitor):
    """Poynting flux per frequency through a point (1D), line (2D) or plane (3D).

    Args:
        name: key of the result.
        frequencies: (Hz).
        center: (m), one coordinate per dimension.
        size: (m) per dimension, exactly one of them 0: the normal axis (the flux is positive along
            +axis). In 1D pass ``size=(0,)`` or omit it.
    """

    def __init__(self, name, frequencies, center, size=None):
        super().__init__(name, frequencies, components=(), center=center, size=size)

    def _bind(self, grid, polarization, dt, dtype, device):
        size = (0.0,) * grid.ndim if self.size is None else tuple(float(value) for value in self.size)
        zeros = [a for a in range(len(size)) if size[a] == 0]
        if len(size) != grid.ndim or len(zeros) != 1:
            raise ValueError(
                f"{self!r}: size must have {grid.ndim} entries with exactly one 0 (the normal axis)"
            )
        self._normal = zeros[0]
        position = grid.check_inside(self.center, repr(self))
        normal = self._normal
        tangential = [(normal + 1) % 3, (normal + 2) % 3]
        active = ACTIVE_COMPONENTS[(grid.ndim, polarization)]
        self.components = tuple(
            c for c in E_COMPONENTS + H_COMPONENTS if c in active and AXES.index(c[1]) in tangential
        )
        # the plane sits on the integer node along the normal; E_t lives there, H_t half a cell either side
        plane = grid.nearest_index("E" + AXES[tangential[0]], position)[normal]
        if not 1 <= plane <= grid.shape[normal] - 1:
            raise ValueError(f"{self!r}: the plane must lie at least one cell inside the domain")
        self._box = []  # per axis: the index range [low, high) of the averaged nodes
        for a in range(3):
            if a == normal or a >= grid.ndim:
                self._box.append((plane, plane + 1) if a == normal else (0, 1))
                continue
            low = position[a] - size[a] / 2
            high = position[a] + size[a] / 2
            start = max(1, math.ceil((low + grid.size[a] / 2) / grid.spacing[a] - 1e-9))
            stop = min(grid.shape[a], math.floor((high + grid.size[a] / 2) / grid.spacing[a] + 1e-9) + 1)
            if stop <= start:
                raise ValueError(f"{self!r}: the surface covers no grid node along {AXES[a]}")
            self._box.append((start, stop))
        super()._bind(grid, polarization, dt, dtype, device)

    def _regions(self, grid):
        # every component on the box's nodes and the nodes one below along axes where it is at a half node
        regions = {}
        for component in self.components:
            offsets = grid.offsets(component)
            regions[component] = tuple(
                slice(low - (1 if offsets[a] else 0), high) for a, (low, high) in enumerate(self._box)
            )
        return regions

    def _colocated(self, state, component, grid):
        """The component's DFT averaged onto the box's integer nodes: (F, box shape)."""
        value = state[f"{self.name}/{component}"]
        for a, offset in enumerate(grid.offsets(component)):
            if offset:
                length = value.shape[1 + a]
                value = 0.5 * (value.narrow(1 + a, 0, length - 1) + value.narrow(1 + a, 1, length - 1))
        return value

    def _finish(self, state, records, grid):
        normal = self._normal
        first, second = (normal + 1) % 3, (normal + 2) % 3
        zero = None
        colocated = {}
        for axis in (first, second):
            for kind in "EH":
                component = kind + AXES[axis]
                if component in self.components:
                    colocated[component] = self._colocated(state, component, grid)
                    zero = torch.zeros_like(colocated[component])
        get = colocated.get
        poynting = (
            get("E" + AXES[first], zero) * get("H" + AXES[second], zero).conj()
            - get("E" + AXES[second], zero) * get("H" + AXES[first], zero).conj()
        ).real
        area = math.prod(grid.spacing[a] for a in range(grid.ndim) if a != normal)
        return {"flux": poynting.sum(dim=(1, 2, 3)) * area, "frequencies": self.frequencies.to(self._device)}


class Snapshots(Monitor):
    """Whole-grid copies of field components every ``every`` steps.

    Args:
        name: key of the result.
        every: interval in steps; snapshots are taken after steps ``every - 1, 2 every - 1, ...``
            (E at ``result.times`` of those steps).
        components: e.g. ``("Ez",)``.
    """

    def __init__(self, name, every, components=("Ez",)):
        super().__init__(name)
        if not (isinstance(every, int) and every >= 1):
            raise ValueError(f"Snapshots({name!r}): every must be a positive number of steps, got {every!r}")
        self.every = every
        self.components = (components,) if isinstance(components, str) else tuple(components)

    def _bind(self, grid, polarization, dt, dtype, device):
        self.components = _check_components(self.components, grid, polarization, repr(self))
        self._dt = dt

    def _record_count(self, step):
        return len(self.components) if (step + 1) % self.every == 0 else 0

    def _record(self, fields, state, step, inplace):
        if (step + 1) % self.every:
            return state, []
        return state, [fields[component].clone() for component in self.components]

    def _finish(self, state, records, grid):
        taken = [step_records for step_records in records if step_records]
        output = {}
        for i, component in enumerate(self.components):
            frames = [_squeeze(step_records[i], grid.ndim) for step_records in taken]
            output[component] = torch.stack(frames) if frames else torch.empty(0)
        steps = torch.tensor(
            [step for step, step_records in enumerate(records) if step_records], dtype=torch.float64
        )
        output["times"] = (steps + 1) * self._dt
        return output

    def __repr__(self):
        return f"Snapshots({self.name!r}, every={self.every}, components={self.components})"
