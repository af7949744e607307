"""The Yee leapfrog step on 3D tensors (length-1 axes for 1D and 2D).

``YeeStepper.step(state, step, inplace)`` advances a :class:`~mindelec.fdtd.state.YeeState` (fields,
CPML auxiliary fields, incident lines of plane waves, dispersive polarisations) by one time step:

1. ``H^{n+1/2} = H^{n-1/2} - (dt / mu) (curl E^n + M)`` with forward differences;
2. dispersive polarisations ``P^{n+1}`` from ``P^n``, ``P^{n-1}``, ``E^n``;
3. ``E^{n+1} = ca E^n + cb (curl H^{n+1/2} - J - (P^{n+1} - P^n) / dt)`` with backward differences;
4. tangential E zeroed on the PEC walls of non-periodic axes.

Two modes share the code. ``inplace=True`` (forward-only runs under ``torch.no_grad``) updates
the tensors in place, with scalar coefficients where the medium is uniform. On CPU the bulk of
steps 1 and 3 (``F = ca F + cb curl`` for all H, then all E components) is then one pass of the
compiled kernel of :mod:`mindelec._kernels` (about 72 B moved per cell and step in 3D float32, the
memory-bandwidth limit), the CPML slabs' auxiliary fields and corrections fused into the same pass
(each slab's psi read and written once more); sources, polarisation currents, plane waves and PEC walls
follow in torch.
Without the kernel (``compiled=False``, CUDA, or a failed build) the torch path does one pass per curl
term (a difference into a buffer, then an add) and a few operations per CPML slab. ``inplace=False``
(differentiable runs) starts each field from a new tensor (``E * ca`` or a clone), so that the
autograd graph keeps every step's inputs intact.

CPML auxiliary fields live only on the two slabs of each PML axis (``2 * thickness`` cells along
that axis), one per (updated component, derivative axis) pair.

Measured (``benchmarks/fdtd.py``, float32, PEC walls, 2 threads on a heavily shared 2-core machine,
six runs): the compiled path reached 36-60 % (128^3) and 66-106 % (2048^2) of the triad roofline
measured in the same run (the triad moves 16 B per element with write-allocate but is counted as
12, so the roofline is conservative), 20-106x the ``fdtd`` package; the pure torch path 2-10 %
(128^3) and 25-47 % (2048^2). A profile of a
forward-only step with PEC walls puts 77-84 % of a run in the kernel; the rest is the run's set-up
(zeroing new fields) and, per step, microseconds of source injection and PEC-wall zeroing. With the
CPML slabs in torch (about 50 small operations per step in 3D), a CPML of 10 cells at 2048^2 added
about 15 %, and on the small 3D grid of the patch-antenna dataset (56x62x32 cells, CPML of 8 cells,
float32, 1 thread) the slabs took most of a 4-7 ms step; with the slabs in the kernel that step takes
1.4-2.6 ms, about half the pure torch path's (same loaded machine; ``benchmarks/fdtd.py``).
"""

import copy
import functools

import torch

from .. import _kernels
from .grid import AXES, E_COMPONENTS, H_COMPONENTS
from .state import CpmlKey, YeeState


def _accumulate(out, axis, start, length, term, scale, coefficient):
    """``out[start:start+length along axis] += scale * coefficient * term``."""
    target = out.narrow(axis, start, length)
    if isinstance(coefficient, torch.Tensor):
        target.addcmul_(coefficient.narrow(axis, start, length), term, value=scale)
    else:
        target.add_(term, alpha=scale * coefficient)


def _difference(source, axis, forward, periodic, buffer=None):
    """The forward (H update) or backward (E update) difference of ``source`` along ``axis``.

    Beyond the last node the source is taken from the other end (periodic) or as zero (a PEC wall
    at ``+size/2``). The backward difference at index 0 of a non-periodic axis holds ``source[0]``;
    it only reaches E nodes on the PEC wall at ``-size/2``, which are zeroed. With a ``buffer`` (a tensor
    of the field shape, forward-only runs) the result is written into it instead of a new tensor.
    """
    count = source.shape[axis]
    shift = 1 if forward else -1
    # the node beyond the grid's end is needed at the last (forward) or the first (backward) index
    edge_at = count - 1 if forward else 0
    inner_offset = 0 if forward else 1
    here = source.narrow(axis, inner_offset, count - 1)
    there = source.narrow(axis, inner_offset + shift, count - 1)
    node = source.narrow(axis, edge_at, 1)
    if periodic:
        beyond = source.narrow(axis, 0 if forward else count - 1, 1)
        edge = beyond - node if forward else node - beyond
    else:
        edge = -node if forward else node
    if buffer is None:
        inner = there - here if forward else here - there
        return torch.cat([inner, edge] if forward else [edge, inner], axis)
    target = buffer.narrow(axis, inner_offset, count - 1)
    if forward:
        torch.sub(there, here, out=target)
    else:
        torch.sub(here, there, out=target)
    buffer.narrow(axis, edge_at, 1).copy_(edge)
    return buffer


class CurlTerm:
    """One term ``sign * d(source)/d(axis)`` of a component's curl, with its CPML data if any."""

    def __init__(self, source, axis, sign, spacing):
        self.source = source
        self.axis = axis
        self.sign = sign
        self.spacing = spacing
        self.pml = None  # (thickness, b, a, kappa_inverse_minus_one) broadcast along axis


def curl_terms(component, active, ndim):
    """The curl terms of ``component``'s update: ``[(source, axis, sign)]`` (components/axes present only).

    ``dH_c/dt = -(1/mu) (dE_b/da - dE_a/db)`` and ``eps dE_c/dt = dH_b/da - dH_a/db`` with (c, a, b) cyclic.
    """
    c = AXES.index(component[1])
    a, b = (c + 1) % 3, (c + 2) % 3
    other = "E" if component[0] == "H" else "H"
    sign = -1.0 if component[0] == "H" else 1.0
    terms = [(other + AXES[b], a, sign), (other + AXES[a], b, -sign)]
    return [(source, axis, s) for source, axis, s in terms if source in active and axis < ndim]


class YeeStepper:
    """Advances the state of a simulation by one step (internal to :class:`Simulation`).

    Args:
        grid: the :class:`Grid`.
        active: the simulated components.
        periodic: per axis (3 bools).
        pml: per axis, a :class:`PML` or None.
        dt: time step (s).
        electric: per E component, ``(ca, cb, poles)``; ``ca``, ``cb`` floats or full-shape tensors;
            ``poles`` a list of ``(c1, c2, c3)`` with ``c3`` a full-shape tensor (fill weight included).
        magnetic: per H component, ``ch = dt / mu`` (float or tensor).
        sources: list of ``(component, slices, values)``; ``values[n]`` is the current density of step n.
        plane_waves: list of :class:`~mindelec.fdtd.sources.IncidentLine`, the TF/SF plane waves along +x.
        dtype, device: of the fields.
        compiled: in forward-only steps on CPU, let the compiled kernel (:mod:`mindelec._kernels`) do the bulk
            curl updates; False, or the kernel unavailable, selects the pure torch path.
        wires: the thin wires' H and E corrections (:class:`~mindelec.fdtd.thin_wire.WireCorrections`) or
            None.
        off_diagonal: the smoothed permittivity's off-diagonal E correction
            (:class:`~mindelec.fdtd.offdiagonal.OffDiagonalUpdate`) or None.
        conformal: the conformal PEC's H correction (:class:`~mindelec.fdtd.conformal.ConformalUpdate`),
            applied after the H updates, or None.
        tfsf: the TF/SF boxes' corrections (:class:`~mindelec.fdtd.tfsf.TFSFCorrections`), added to the H and
            E updates next to their faces.
    """

    def __init__(
        self, grid, active, periodic, pml, dt, electric, magnetic, sources, plane_waves, dtype, device,
        compiled=True, wires=None, off_diagonal=None, conformal=None, tfsf=(),
    ):
        self.grid = grid
        self.wires = wires
        self.active = active
        self.periodic = periodic
        self.dt = dt
        self.electric = electric
        self.magnetic = magnetic
        self.sources = sources
        self.plane_waves = plane_waves
        self.tfsf = tfsf
        self.off_diagonal = off_diagonal  # the smoothed tensor's off-diagonal terms (.offdiagonal)
        self.conformal = conformal  # the conformal PEC's H correction (.conformal)
        self.dtype, self.device = dtype, device
        self.terms = {}
        for component in active:
            half = component[0] == "H"  # H updates sit on half nodes along their derivative axes
            terms = []
            for source, axis, sign in curl_terms(component, active, grid.ndim):
                term = CurlTerm(source, axis, sign, grid.spacing[axis])
                if pml[axis] is not None:
                    shape = [1, 1, 1]
                    shape[axis] = -1
                    thickness = pml[axis].thickness
                    profiles = pml[axis].profiles(
                        grid.shape[axis], grid.spacing[axis], dt, half, dtype, device
                    )
                    b, a, kappa_term = (p.reshape(shape) for p in profiles)
                    # the differences are not divided by the spacing: fold 1/dx into a and (1/kappa - 1)
                    sides = {}
                    for side, start in (("left", 0), ("right", thickness)):
                        sides[side] = tuple(
                            p.narrow(axis, start, thickness)
                            for p in (b, a / grid.spacing[axis], kappa_term / grid.spacing[axis])
                        )
                    term.pml = (thickness, sides)
                terms.append(term)
            self.terms[component] = terms
        self.pec_axes = [a for a in range(grid.ndim) if not periodic[a]]
        self._buffer = None  # differences of the torch path in forward-only runs (a field-shaped tensor)
        self.compiled = compiled
        # the kernel sees (1, ..., n_x, ...) views: the simulation's axes last, so that rows are long
        missing = 3 - grid.ndim
        self._kernel_shape = (1,) * missing + tuple(grid.shape[: grid.ndim])
        self._kernel_periodic = [False] * missing + list(periodic[: grid.ndim])
        self._kernel_tensors = {}  # id(coefficient tensor) -> (the tensor, its contiguous kernel view)
        self._kernel_cpml = {}  # components of a kernel group -> their CPML slabs' kernel arguments
        self._kernel_calls = {}  # components of a kernel group -> (the tensors seen, the kernels' arguments)
        self._pec_walls = {}  # E component -> (its field tensor, views of its PEC wall layers)
        self._source_views = {}  # source index -> (field, coefficient, views of the source's cells in them)

    def _map_coefficients(self, function):
        """Apply ``function`` to every tensor coefficient; returns ``(electric, magnetic)`` dicts."""

        def apply(value):
            return function(value) if isinstance(value, torch.Tensor) else value

        electric = {
            component: (apply(ca), apply(cb), [(c1, c2, apply(c3)) for c1, c2, c3 in poles])
            for component, (ca, cb, poles) in self.electric.items()
        }
        return electric, {component: apply(value) for component, value in self.magnetic.items()}

    def coefficient_tensors(self):
        """The coefficient tensors that require grad (each once)."""
        found = {}

        def collect(value):
            if value.requires_grad:
                found.setdefault(id(value), value)
            return value

        self._map_coefficients(collect)
        for correction in (self.off_diagonal, self.conformal):
            if correction is not None:
                correction.map_tensors(collect)
        return list(found.values())

    def with_coefficients(self, originals, replacements):
        """A copy of this stepper with the coefficient tensors ``originals`` replaced by ``replacements``."""
        lookup = {id(original): new for original, new in zip(originals, replacements)}
        stepper = copy.copy(self)
        def replace(old):
            return lookup.get(id(old), old)

        stepper.electric, stepper.magnetic = self._map_coefficients(replace)
        if self.off_diagonal is not None:
            stepper.off_diagonal = self.off_diagonal.map_tensors(replace)
        if self.conformal is not None:
            stepper.conformal = self.conformal.map_tensors(replace)
        return stepper

    def initial_state(self):
        """Zero fields, CPML auxiliary fields, incident lines and polarisations: a :class:`YeeState`."""

        def zeros(shape):
            return torch.zeros(shape, dtype=self.dtype, device=self.device)

        shape = self.grid.shape
        psi = {}
        for component in self.active:
            for term in self.terms[component]:
                if term.pml is not None:
                    slab = list(shape)
                    slab[term.axis] = term.pml[0]
                    for side in ("left", "right"):
                        psi[CpmlKey(component, term.axis, side)] = zeros(slab)
        electric = [component for component in E_COMPONENTS if component in self.active]
        poles = {component: len(self.electric[component][2]) for component in electric}
        return YeeState(
            fields={component: zeros(shape) for component in self.active},
            psi=psi,
            incident_e=[zeros(line.length) for line in self.plane_waves],
            incident_h=[zeros(line.length) for line in self.plane_waves],
            polarization={component: [zeros(shape) for _ in range(n)] for component, n in poles.items()},
            previous_polarization={
                component: [zeros(shape) for _ in range(n)] for component, n in poles.items()
            },
        )

    def _apply_curl(self, state, component, field, coefficient, inplace):
        """Add ``coefficient * curl`` to ``field`` in torch: the bulk term and the CPML corrections on the PML
        slabs (forward-only runs with the compiled kernel do both in :meth:`_compiled_curls` instead)."""
        forward = component[0] == "H"
        for term in self.terms[component]:
            source, periodic = state.fields[term.source], self.periodic[term.axis]
            length = field.shape[term.axis]
            if inplace and self._buffer is None:
                self._buffer = torch.empty(self.grid.shape, dtype=self.dtype, device=self.device)
            buffer = self._buffer if inplace else None
            difference = _difference(source, term.axis, forward, periodic, buffer=buffer)
            _accumulate(field, term.axis, 0, length, difference, term.sign / term.spacing, coefficient)
            if term.pml is None:
                continue
            thickness = term.pml[0]
            for side, start in (("left", 0), ("right", length - thickness)):
                b, a, kappa_term = term.pml[1][side]
                key = CpmlKey(component, term.axis, side)
                part = difference.narrow(term.axis, start, thickness)
                if inplace:
                    psi = state.psi[key].mul_(b).addcmul_(a, part)
                else:
                    psi = torch.addcmul(b * state.psi[key], a, part)
                state.psi[key] = psi
                correction = torch.addcmul(psi, kappa_term, part)
                _accumulate(field, term.axis, start, thickness, correction, term.sign, coefficient)

    def _inject(self, field, component, coefficient, step):
        for index, (source_component, slices, values) in enumerate(self.sources):
            if source_component != component:
                continue
            cached = self._source_views.get(index)
            if cached is None or cached[0] is not field or cached[1] is not coefficient:
                scale = coefficient[slices] if isinstance(coefficient, torch.Tensor) else None
                cached = self._source_views[index] = (field, coefficient, field[slices], scale)
            _, _, target, scale = cached
            if scale is not None:
                target.sub_(scale * values[step])
            else:
                target.sub_(values[step] * coefficient)

    @functools.cached_property
    def _kernel(self):
        """The compiled Yee kernel for in-place steps (``compiled`` and on CPU), else None; looked up once."""
        return _kernels.yee() if self.compiled and self.device.type == "cpu" else None

    def _kernel_coefficient(self, value):
        """``(tensor or None, scalar)``: ``value`` as the kernel takes it (a tensor made contiguous once)."""
        if not isinstance(value, torch.Tensor):
            return None, float(value)
        if id(value) not in self._kernel_tensors:  # the entry keeps ``value`` alive, so its id stays unique
            prepared = value.detach().to(self.dtype).expand(self.grid.shape).contiguous()
            self._kernel_tensors[id(value)] = (value, prepared.view(self._kernel_shape))
        return self._kernel_tensors[id(value)][1], 0.0

    def _compiled_curls(self, kernel, state, coefficients):
        """``F = ca F + cb curl`` in place, in one pass of the compiled kernel, for every component in
        ``coefficients`` (``{component: (ca, cb)}``, all H or all E), the CPML auxiliary fields and
        corrections included. The kernel's arguments are built once per group and reused while the state
        holds the same tensors (in-place runs update them in place).
        """
        group = tuple(coefficients)
        values = (value for pair in coefficients.values() for value in pair)
        tensors = (*state.fields.values(), *state.psi.values(), *values)
        cached = self._kernel_calls.get(group)
        seen = () if cached is None else cached[0]
        if len(seen) != len(tensors) or any(a is not b for a, b in zip(seen, tensors)):
            cached = self._kernel_calls[group] = (tensors, self._kernel_arguments(state, coefficients))
        kernel.curl_update(*cached[1])

    def _kernel_arguments(self, state, coefficients):
        """The argument list of ``curl_update`` for one group of components."""
        fields = state.fields
        if self.grid.ndim < 3:  # (1, ..., n_x, ...) views; 3D fields are passed as they are
            fields = {component: field.view(self._kernel_shape) for component, field in fields.items()}
        arguments = {name: [] for name in ("fields", "ca", "ca_scalar", "cb", "cb_scalar", "sources")}
        for component, (ca, cb) in coefficients.items():
            arguments["fields"].append(fields[component])
            for name, value in (("ca", ca), ("cb", cb)):
                tensor, scalar = self._kernel_coefficient(value)
                arguments[name].append(tensor)
                arguments[name + "_scalar"].append(scalar)
            arguments["sources"].append([fields[term.source] for term in self.terms[component]])
        components = list(coefficients)
        forward = components[0][0] == "H"
        slabs = self._kernel_slabs(coefficients)
        psi = [state.psi[key].view(shape) for key, shape in slabs["psi"]]
        return (
            *arguments.values(),
            [[term.axis + 3 - self.grid.ndim for term in self.terms[c]] for c in components],
            [[term.sign / term.spacing for term in self.terms[c]] for c in components],
            self._kernel_periodic,
            forward,
            slabs["fields"],
            slabs["terms"],
            psi,
            *(slabs[name] for name in ("b", "a", "kappa", "starts", "signs")),
        )

    def _kernel_slabs(self, coefficients):
        """The CPML slabs of ``coefficients``' components, as :meth:`_compiled_curls` passes them to the
        kernel: a dict of lists, one entry per (component, term, side): the component's and the term's
        index in the group, the psi key and the shape of its kernel view, the profiles, the first layer
        and the term's sign (built once per group of components).
        """
        group = tuple(coefficients)
        if group in self._kernel_cpml:
            return self._kernel_cpml[group]
        missing = 3 - self.grid.ndim
        slabs = {name: [] for name in ("fields", "terms", "psi", "b", "a", "kappa", "starts", "signs")}
        for index, component in enumerate(coefficients):
            for term_index, term in enumerate(self.terms[component]):
                if term.pml is None:
                    continue
                thickness, sides = term.pml
                shape = list(self.grid.shape[: self.grid.ndim])
                shape[term.axis] = thickness
                for side, start in (("left", 0), ("right", self.grid.shape[term.axis] - thickness)):
                    slabs["fields"].append(index)
                    slabs["terms"].append(term_index)
                    slabs["psi"].append((CpmlKey(component, term.axis, side), (1,) * missing + tuple(shape)))
                    for name, profile in zip(("b", "a", "kappa"), sides[side]):
                        slabs[name].append(profile.reshape(-1).contiguous())
                    slabs["starts"].append(start)
                    slabs["signs"].append(term.sign)
        self._kernel_cpml[group] = slabs
        return slabs

    def _polarization_currents(self, state, component):
        """Advance the polarisations of ``component`` to ``P^{n+1}``; returns the list of ``P^{n+1} - P^n``.
        """
        old = state.fields[component]
        currents = []
        polarizations, previous = state.polarization[component], state.previous_polarization[component]
        for k, (c1, c2, c3) in enumerate(self.electric[component][2]):
            new = c1 * polarizations[k] + c2 * previous[k] + c3 * old
            currents.append(new - polarizations[k])
            polarizations[k], previous[k] = new, polarizations[k]
        return currents

    def step(self, state, step, inplace):
        """Advance ``state`` (a :class:`YeeState`) from E at ``step * dt`` to ``(step + 1) * dt``.

        Returns the updated state: ``state`` itself, its tensors updated, when ``inplace``; else a new
        state (new containers and tensors; ``state`` is left as it was, as autograd needs).
        """
        if not inplace:
            state = state.copy()
        kernel = self._kernel if inplace else None
        magnetic = [component for component in H_COMPONENTS if component in self.active]
        electric = [component for component in E_COMPONENTS if component in self.active]
        if kernel is not None:
            coefficients = {component: (1.0, self.magnetic[component]) for component in magnetic}
            self._compiled_curls(kernel, state, coefficients)
        for component in magnetic:
            self._update_magnetic(state, component, step, inplace, bulk=kernel is None)
        if self.conformal is not None:  # Yee's curl replaced by the conformal one on the cut faces
            self.conformal.apply(state.fields, inplace)
        self._advance_incident_h(state)
        before = self.off_diagonal.gather(state.fields) if self.off_diagonal is not None else None
        # the polarisations read E^n: all of them first, then the E updates
        currents = {component: self._polarization_currents(state, component) for component in electric}
        if kernel is not None:
            coefficients = {component: self.electric[component][:2] for component in electric}
            self._compiled_curls(kernel, state, coefficients)
        for component in electric:
            self._update_electric(state, component, currents[component], step, inplace, bulk=kernel is None)
        if before is not None:  # the off-diagonal terms, from the increments of the diagonal update
            self.off_diagonal.apply(state.fields, before, inplace)
        self._advance_incident_e(state, step)
        return state

    def _update_magnetic(self, state, component, step, inplace, bulk):
        """H^{n+1/2} of one component (after the compiled kernel's curl and CPML update unless ``bulk``)."""
        field = state.fields[component] if inplace else state.fields[component].clone()
        coefficient = self.magnetic[component]
        if bulk:
            self._apply_curl(state, component, field, coefficient, inplace)
        if self.wires:
            self.wires.apply(field, component, coefficient, state.fields)
        self._inject(field, component, coefficient, step)
        for line, incident_e in zip(self.plane_waves, state.incident_e):
            if line.magnetic == component:  # H at i0 - 1 is scattered: remove the incident E it sees
                incident = incident_e.narrow(0, line.index, 1).reshape(1, 1, 1)
                scale = -line.sign / self.grid.spacing[0]
                _accumulate(field, 0, line.index - 1, 1, incident, scale, coefficient)
        for box in self.tfsf:
            box.apply(field, component, coefficient, step)
        state.fields[component] = field

    def _update_electric(self, state, component, currents, step, inplace, bulk):
        """E^{n+1} of one component (after the compiled kernel's curl and CPML update unless ``bulk``), PEC
        walls."""
        ca, cb, _ = self.electric[component]
        field = state.fields[component]
        if bulk:
            unit = isinstance(ca, float) and ca == 1.0
            if inplace:
                field = field if unit else field.mul_(ca)
            else:
                field = field.clone() if unit else field * ca
            self._apply_curl(state, component, field, cb, inplace)
        if self.wires:
            self.wires.apply(field, component, cb, state.fields)
        for current in currents:
            _accumulate(field, 0, 0, field.shape[0], current, -1.0 / self.dt, cb)
        self._inject(field, component, cb, step)
        for line, incident_h in zip(self.plane_waves, state.incident_h):
            if line.electric == component:  # E at i0 is total: add the incident H its curl misses
                incident = incident_h.narrow(0, line.index - 1, 1).reshape(1, 1, 1)
                _accumulate(field, 0, line.index, 1, incident, -line.sign / self.grid.spacing[0], cb)
        for box in self.tfsf:
            box.apply(field, component, cb, step)
        cached = self._pec_walls.get(component)
        if cached is None or cached[0] is not field:  # views made once while the field is updated in place
            along = AXES.index(component[1])
            cached = self._pec_walls[component] = (
                field, [field.narrow(axis, 0, 1) for axis in self.pec_axes if axis != along]
            )
        for wall in cached[1]:
            wall.zero_()
        state.fields[component] = field

    def _advance_incident_h(self, state):
        """The incident lines' H^{n+1/2}."""
        for k, line in enumerate(self.plane_waves):
            incident_e = state.incident_e[k]
            difference = torch.cat([incident_e[1:] - incident_e[:-1], -incident_e[-1:]])
            state.incident_h[k] = state.incident_h[k] + line.sign * line.ch * difference

    def _advance_incident_e(self, state, step):
        """The incident lines' E^{n+1}, driven at their start."""
        for k, line in enumerate(self.plane_waves):
            incident_h = state.incident_h[k]
            difference = torch.cat([incident_h[:1], incident_h[1:] - incident_h[:-1]])
            updated = state.incident_e[k] + line.sign * line.ce * difference
            drive = torch.tensor([line.drive[step]], dtype=self.dtype, device=self.device)
            state.incident_e[k] = torch.cat([drive, updated[1:]])
