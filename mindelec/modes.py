"""Waveguide eigenmodes: full-vector modes of 2D cross-sections and modes of 1D lines.

A waveguide mode is a field ``E(y, z) exp(j (omega t - beta x))`` (mindelec's engineering
convention, as in :mod:`mindelec.fdfd`) travelling along ``x`` unchanged in shape. Its effective
index is ``n_eff = beta / k0`` with ``k0 = omega / c``; a lossless guided mode has a real
``n_eff`` between the cladding's and the core's refractive index, an evanescent (cut-off) mode
a negative imaginary one, and a mode losing power (to a lossy material or a PML) a negative
imaginary part.

* :func:`cross_section_modes` - the full-vector modes of a 2D cross-section ``(ny, nz)``, for 3D
  waveguides: dielectric strips and fibres, metallic (hollow or filled) waveguides, and transmission
  lines with metal inside (microstrip, coplanar waveguide, stripline, coax: its ``conductor`` argument,
  :mod:`mindelec.conductors`). Its ``axis`` argument turns the frame for guides along ``y``
  (cross-section ``(x, z)``) or ``z`` (``(x, y)``).
* :func:`line_modes` - the modes of a 1D line ``(n,)`` of a 2D simulation (slab waveguides), for
  one of mindelec's 2D polarizations, travelling along ``x`` (a line along ``y``) or ``y``.

Method: the finite-difference frequency-domain formulation on the Yee grid of Zhu & Brown,
"Full-vectorial finite-difference analysis of microstructured optical fibers", Opt. Express 10,
853 (2002), the same scheme as Fallahkhair, Li & Murphy, J. Lightwave Technol. 26, 1423 (2008)
and Tidy3D's local mode solver. Eliminating ``E_x`` and ``H_x`` from Maxwell's equations with
``d/dx -> -j beta`` gives two real sparse operators with ``beta E_t = P H_t`` and
``beta H_t = Q E_t`` (``E_t = (E_y, E_z)``, ``H_t = Z0 (H_y, H_z)``), so
``beta^2 E_t = P Q E_t``; ``scipy.sparse.linalg.eigs`` finds the eigenvalues nearest
``(k0 n_max)^2`` by shift-invert (a dense solve for small grids).

Grid (the same staggering as :mod:`mindelec.fdtd.grid`, in the ``(y, z)`` plane): the cross-section
has ``ny x nz`` cells of size ``dy x dz``; integer node ``i`` sits at ``i * dy`` and half node ``i``
at ``(i + 1/2) * dy`` from the low wall. ``E_y`` and ``H_z`` live on (half, integer) nodes,
``E_z`` and ``H_y`` on (integer, half) nodes, ``E_x`` on (integer, integer) and ``H_x`` on
(half, half) nodes; every returned field has shape ``(ny, nz)`` indexed by those nodes. The
permittivity of a component is the arithmetic mean of the cells touching its node (as the FDTD's
sub-cell averaging for E), unless given per component. The domain walls (integer nodes 0 and
``ny``, ``nz``) are perfect electric conductors, optionally lined inside with a PML. Metal inside the
domain pins the E nodes it covers to zero as the walls do (the FDTD's staircase of PEC on the Yee
grid, so the modes can feed its ports), and the normal H on those nodes (``H_z`` beside a pinned
``E_y``, ``H_y`` beside ``E_z``) is zero; a finite conductivity adds ``-j sigma / (omega eps0)`` to the
permittivity, for complex ``n_eff`` on lossy lines.

Units: metres, hertz; E in V/m and H in A/m, each mode normalised to carry 1 W (cross-sections)
or 1 W/m (lines) along ``+x``, with its largest transverse E component real and positive at its
peak. Tensors are float64/complex128 on the CPU. The solve runs in numpy/scipy: no gradient flows
back to the permittivity.

Example::

    from common.units import SPEED_OF_LIGHT
    from mindelec import modes
    permittivity = torch.full((100, 100), 1.444**2)
    permittivity[39:61, 25:75] = 3.48**2          # 220 x 500 nm silicon, 10 nm cells
    result = modes.cross_section_modes(permittivity, cell_size=10e-9, frequency=SPEED_OF_LIGHT / 1.55e-6)
    result.effective_index[0]                     # about 2.44 (TE0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sparse
import scipy.sparse.linalg
import torch

from common import checks
from common.errors import ConfigurationError, DataError, SimulationError
from common.units import SPEED_OF_LIGHT, VACUUM_IMPEDANCE

from . import conductors as metal

__all__ = [
    "Modes",
    "cross_section_modes",
    "line_modes",
    "MIN_CELLS_PER_WAVELENGTH",
    "MAX_CELLS_PER_WAVELENGTH",
]

#: the solvers refuse a frequency whose shortest wavelength in the material spans fewer cells
MIN_CELLS_PER_WAVELENGTH = 10

#: and one whose vacuum wavelength spans more of the smallest cells: the operator ``P Q`` holds curl-curl
#: terms of order ``1 / h^4`` that cancel on the modes (``beta^2 ~ k0^2``), so round-off costs about
#: ``1e-16 / (k0 h)^4`` of ``n_eff^2`` (1e-4 at this limit; 3e-2 for a microstrip at 50 MHz in 0.2 mm
#: cells). Quasi-TEM lines at lower frequencies: :func:`mindelec.quasi_tem.quasi_tem_line`.
MAX_CELLS_PER_WAVELENGTH = 6000

#: problems with at most this many unknowns are solved densely (every eigenpair, exactly)
_DENSE_LIMIT = 200

#: the PML's design reflection for a wave crossing it and back at normal incidence in vacuum
_PML_REFLECTION = 1e-3


@dataclass(frozen=True)
class Modes:
    """The modes one solve found, nearest ``n_eff^2 = max(Re permittivity)`` first: for lossless modes,
    by decreasing effective index (guided modes first, then evanescent ones). With a PML the solve
    also finds PML (Berenger) modes, with a large negative ``Im(n_eff)``; they sort after the guided
    modes but may come before weakly guided or radiation modes.

    Attributes:
        effective_index: (M,) complex128 tensor, ``beta / k0``.
        electric: (M, 3, ny, nz) complex128 tensor, (E_x, E_y, E_z) in V/m on their Yee nodes
            (module docstring); ``x`` is the propagation axis. For a line, (M, 3, n).
        magnetic: (M, 3, ny, nz) complex128 tensor, (H_x, H_y, H_z) in A/m on their Yee nodes;
            for a line, (M, 3, n).
        frequency: Hz.
        cell_size: ``(dy, dz)`` in m (``dz = inf`` for a line).
        conductor: (3, ny, nz) bool tensor, the E nodes (E_x, E_y, E_z) that metal inside the domain pins
            to zero (the walls not included), or None without metal.
    """

    effective_index: torch.Tensor
    electric: torch.Tensor
    magnetic: torch.Tensor
    frequency: float
    cell_size: tuple
    conductor: torch.Tensor | None = None

    @property
    def propagation_constant(self) -> torch.Tensor:
        """(M,) complex128 tensor, ``beta = n_eff omega / c`` (rad/m)."""
        return self.effective_index * (2.0 * math.pi * self.frequency / SPEED_OF_LIGHT)

    def __len__(self) -> int:
        return int(self.effective_index.shape[0])


# ----------------------------------------------------------------------------- input checks


def _permittivity_array(permittivity, ndim: int) -> np.ndarray:
    """``permittivity`` as a complex numpy array of shape (3, n1, n2) per E component or (n1, n2)."""
    expected = "(ny, nz) or (3, ny, nz)" if ndim == 2 else "(n,) or (3, n)"
    if isinstance(permittivity, np.ndarray):
        permittivity = torch.from_numpy(permittivity)
    if not isinstance(permittivity, torch.Tensor):
        raise ConfigurationError(
            f"permittivity must be a tensor or numpy array of shape {expected}, "
            f"got {type(permittivity).__name__}"
        )
    if permittivity.dim() not in (ndim, ndim + 1):
        raise ConfigurationError(f"permittivity must have shape {expected}, got {tuple(permittivity.shape)}")
    if permittivity.dim() == ndim + 1 and permittivity.shape[0] != 3:
        raise ConfigurationError(
            f"permittivity per component must have shape {expected.split(' or ')[1]}, "
            f"got {tuple(permittivity.shape)}"
        )
    if min(permittivity.shape[-ndim:]) < 3:
        raise ConfigurationError(
            f"permittivity needs at least 3 cells per axis, got {tuple(permittivity.shape)}"
        )
    if not (torch.is_floating_point(permittivity) or torch.is_complex(permittivity)):
        permittivity = permittivity.double()
    checks.finite_cells(permittivity, "permittivity")
    values = permittivity.detach().cpu().to(torch.complex128).numpy()
    if np.any(values.real <= 0):
        cell = tuple(int(index) for index in np.argwhere(values.real <= 0)[0])
        raise DataError(
            f"permittivity must have a positive real part (a dielectric; model metal walls as the PEC "
            f"boundary), got {values[cell]} at cell {cell}"
        )
    return values


def _positive(value, name: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} must be a positive number, got {value!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{name} must be a positive finite number, got {value!r}")
    return value


def _cell_sizes(cell_size, count: int) -> tuple:
    """``cell_size`` (a length or one per axis, m) as a tuple of ``count`` floats."""
    sizes = tuple(cell_size) if isinstance(cell_size, (tuple, list)) else (cell_size,) * count
    if len(sizes) != count:
        raise ConfigurationError(f"cell_size must be one length or {count} lengths (m), got {cell_size!r}")
    return tuple(_positive(size, "cell_size") for size in sizes)


def _pml_cells(pml_cells, shape) -> tuple:
    """``pml_cells`` (an int or one per axis) as a tuple, checked to leave an interior."""
    counts = tuple(pml_cells) if isinstance(pml_cells, (tuple, list)) else (pml_cells,) * len(shape)
    if len(counts) != len(shape):
        raise ConfigurationError(f"pml_cells must be one int or {len(shape)} ints, got {pml_cells!r}")
    counts = tuple(checks.non_negative_int(count, "pml_cells") for count in counts)
    for count, cells in zip(counts, shape):
        if 2 * count >= cells - 2:
            raise ConfigurationError(f"pml_cells={pml_cells!r} leaves no interior in a grid of {shape} cells")
    return counts


def _check_resolution(frequency: float, cell_sizes, largest_permittivity: float) -> None:
    """Refuse a frequency whose shortest wavelength in the material the grid does not resolve, or whose
    vacuum wavelength spans more than :data:`MAX_CELLS_PER_WAVELENGTH` cells (round-off)."""
    finest = SPEED_OF_LIGHT / frequency / min(cell_sizes)
    if finest > MAX_CELLS_PER_WAVELENGTH:
        raise ConfigurationError(
            f"frequency={frequency:.6g} Hz is too low for cell_size={min(cell_sizes):.6g} m: the vacuum "
            f"wavelength spans {finest:.4g} cells, more than {MAX_CELLS_PER_WAVELENGTH}, and the eigen-solve "
            "would lose about 1e-16 / (k0 h)^4 of n_eff^2 to round-off; use larger cells or a higher "
            "frequency (for a quasi-TEM line, mindelec.quasi_tem.quasi_tem_line gives the static limit)"
        )
    wavelength = SPEED_OF_LIGHT / (frequency * math.sqrt(largest_permittivity))
    cells = wavelength / max(cell_sizes)
    if cells < MIN_CELLS_PER_WAVELENGTH:
        raise ConfigurationError(
            f"frequency={frequency:.6g} Hz is too high for cell_size={max(cell_sizes):.6g} m: the wavelength "
            f"in the densest material ({wavelength:.6g} m) spans {cells:.3g} cells, fewer than "
            f"{MIN_CELLS_PER_WAVELENGTH}; use smaller cells or a lower frequency"
        )


# ----------------------------------------------------------------------------- operators


def _stretch(count: int, pml: int, half: bool, step: float, k0: float) -> np.ndarray:
    """The PML's complex stretching ``s = 1 - j sigma (depth / thickness)^3`` at the integer (or half)
    nodes of an axis, ``sigma`` giving :data:`_PML_REFLECTION` (round trip, vacuum, normal incidence)."""
    if pml == 0:
        return np.ones(count, dtype=complex)
    positions = np.arange(count) + (0.5 if half else 0.0)
    depth = np.clip(np.maximum(pml - positions, positions - (count - pml)) / pml, 0.0, None)
    sigma = -4.0 * math.log(_PML_REFLECTION) / (2.0 * k0 * pml * step)
    return 1.0 - 1j * sigma * depth**3


def _differences(count: int, step: float, periodic: bool, pml: int, k0: float):
    """Forward (integer -> half node) and backward (half -> integer) differences along one axis,
    each divided by the PML stretching at the nodes it lands on.

    With PEC walls the field beyond the last integer node is zero (the far wall), and the backward
    difference's first row (the near wall's node, where tangential E is zero) only feeds values the
    solver discards. A periodic axis wraps around.
    """
    forward = sparse.diags([-np.ones(count), np.ones(count - 1)], [0, 1], shape=(count, count), format="lil")
    if periodic:
        forward[count - 1, 0] += 1.0  # one cell: the difference vanishes
    forward = forward.tocsr() / step
    backward = -forward.T
    stretch_half, stretch_integer = (
        _stretch(count, pml, True, step, k0),
        _stretch(count, pml, False, step, k0),
    )
    return sparse.diags(1.0 / stretch_half) @ forward, sparse.diags(1.0 / stretch_integer) @ backward


def _component_permittivities(values: np.ndarray):
    """``(eps_x, eps_y, eps_z)`` at the E nodes: arithmetic means of the cells touching each node.

    Cell ``(i, j)`` spans integer nodes ``i..i+1`` and ``j..j+1``; outside the grid the nearest cell
    continues (the PEC walls make those values irrelevant; along an invariant axis it is the cell).
    """
    if values.ndim == 3:
        return values[0], values[1], values[2]
    below_y = np.concatenate([values[:1], values[:-1]], axis=0)
    below_z = np.concatenate([values[:, :1], values[:, :-1]], axis=1)
    below_both = np.concatenate([below_z[:1], below_z[:-1]], axis=0)
    eps_y = 0.5 * (values + below_z)  # (half y, integer z)
    eps_z = 0.5 * (values + below_y)  # (integer y, half z)
    eps_x = 0.25 * (values + below_y + below_z + below_both)  # (integer y, integer z)
    return eps_x, eps_y, eps_z


def _with_conductor(eps, conductor, k0):
    """``(eps_x, eps_y, eps_z)`` with the conductivity's ``-j sigma / (omega eps0)`` and the (3, ny, nz) PEC
    node mask (all False without a conductor)."""
    shape = eps[0].shape
    if conductor is None:
        return eps, np.zeros((3, *shape), dtype=bool)
    sigma = _component_permittivities(conductor.conductivity)  # the same means, per node
    eps = tuple(e - 1j * s * VACUUM_IMPEDANCE / k0 for e, s in zip(eps, sigma))  # sigma / (omega eps0)
    return eps, metal.pec_mask(conductor)


@dataclass
class _Operators:
    """The sparse pieces of ``beta E_t = P H_t``, ``beta H_t = Q E_t`` (``H_t`` scaled by Z0)."""

    forward_y: sparse.csr_matrix
    forward_z: sparse.csr_matrix
    backward_y: sparse.csr_matrix
    backward_z: sparse.csr_matrix
    inverse_eps_x: sparse.dia_matrix
    p: sparse.csr_matrix
    q: sparse.csr_matrix
    free: np.ndarray  # indices of the E_t unknowns not pinned to zero by a PEC wall or metal
    pec: np.ndarray  # (3, ny, nz) bool, the E nodes pinned to zero (walls and metal)


def _build_operators(values, cell_sizes, k0, pml, conductor=None) -> _Operators:
    """The operators in the frame ``(w, u, v) = (x, y, z)``; an axis of one cell is invariant (a line)."""
    ny, nz = values.shape[-2:]
    dy, dz = cell_sizes
    (eps_x, eps_y, eps_z), pec = _with_conductor(_component_permittivities(values), conductor, k0)
    fy, by = _differences(ny, dy, ny == 1, pml[0], k0)
    fz, bz = _differences(nz, dz, nz == 1, pml[1], k0)
    eye_y, eye_z = sparse.identity(ny), sparse.identity(nz)
    forward_y, backward_y = sparse.kron(fy, eye_z).tocsr(), sparse.kron(by, eye_z).tocsr()
    forward_z, backward_z = sparse.kron(eye_y, fz).tocsr(), sparse.kron(eye_y, bz).tocsr()
    # E_x sits on integer nodes: zero on the PEC walls y = 0 and z = 0 (an invariant axis has none)
    wall_y, wall_z = np.zeros((ny, nz), dtype=bool), np.zeros((ny, nz), dtype=bool)
    wall_y[0, :] = ny > 1
    wall_z[:, 0] = nz > 1
    # E_y is tangential to the walls z = 0 (its integer z node 0), E_z to the walls y = 0
    pec = pec | np.stack([wall_y | wall_z, wall_z, wall_y])
    inverse_x = np.where(pec[0], 0.0, 1.0 / eps_x).reshape(-1)
    inverse_eps_x = sparse.diags(inverse_x)
    identity = sparse.identity(ny * nz)
    # d/dy and d/dz of E_x, which curl H gives in terms of H_t
    y_of_ex, z_of_ex = forward_y @ inverse_eps_x, forward_z @ inverse_eps_x
    p = sparse.bmat(
        [
            [-y_of_ex @ backward_z, k0**2 * identity + y_of_ex @ backward_y],
            [-(k0**2) * identity - z_of_ex @ backward_z, z_of_ex @ backward_y],
        ]
    )
    eps_y, eps_z = sparse.diags(eps_y.reshape(-1)), sparse.diags(eps_z.reshape(-1))
    q = sparse.bmat(
        [
            [backward_y @ forward_z, -(k0**2) * eps_z - backward_y @ forward_y],
            [k0**2 * eps_y + backward_z @ forward_z, -backward_z @ forward_y],
        ]
    )
    # H_t on a pinned E_t node is normal to the metal: zero (Ampere's law, the rows of Q, does not hold there)
    h_free = sparse.diags(np.where(np.concatenate([pec[2], pec[1]]).reshape(-1), 0.0, 1.0))  # (H_y, H_z)
    free = np.flatnonzero(~pec[1:].reshape(-1))
    return _Operators(
        forward_y,
        forward_z,
        backward_y,
        backward_z,
        inverse_eps_x,
        p.tocsr() / k0,
        (h_free @ q).tocsr() / k0,
        free,
        pec,
    )


# ----------------------------------------------------------------------------- eigen-solve


def _eigenpairs(matrix, count: int, shift: float):
    """The ``count`` eigenpairs of ``matrix`` nearest ``shift``, nearest first."""
    size = matrix.shape[0]
    if size <= _DENSE_LIMIT:
        values, vectors = scipy.linalg.eig(matrix.toarray())
    else:
        start = np.ones(size)  # a fixed start vector: the same input gives the same modes
        try:
            values, vectors = scipy.sparse.linalg.eigs(
                matrix.tocsc(), k=count, sigma=shift, which="LM", v0=start
            )
        except scipy.sparse.linalg.ArpackNoConvergence as error:
            raise SimulationError(
                f"the eigen-solve did not converge for {count} modes ({error}); ask for fewer modes"
            ) from error
    order = np.argsort(np.abs(values - shift), kind="stable")[:count]
    return values[order], vectors[:, order]


def _check_mode_count(num_modes, unknowns: int) -> int:
    """``num_modes`` once the grid holds that many eigenmodes (``eigs`` needs two spare)."""
    num_modes = checks.positive_int(num_modes, "num_modes")
    available = unknowns if unknowns <= _DENSE_LIMIT else unknowns - 2
    if num_modes > available:
        raise ConfigurationError(f"num_modes={num_modes} exceeds the {available} eigenmodes this grid holds")
    return num_modes


def _propagation_constant(beta_squared: np.ndarray) -> np.ndarray:
    """``beta`` from ``beta^2``: ``Re beta >= 0`` for a propagating mode, ``Im beta < 0`` (decay along
    ``+x``) for an evanescent one (``Re beta^2 < 0``)."""
    beta = np.sqrt(beta_squared.astype(complex))
    return np.where((beta_squared.real < 0) & (beta.imag > 0), -beta, beta)


def _fields(ops: _Operators, shape, k0, beta, transverse):
    """(E, Z0 H), each (3, ny, nz) complex, from one mode's ``E_t`` (2 ny nz) and ``beta``."""
    size = shape[0] * shape[1]
    h_t = ops.q @ transverse / beta
    e_y, e_z = transverse[:size], transverse[size:]
    h_y, h_z = h_t[:size], h_t[size:]
    e_x = -1j * (ops.inverse_eps_x @ (ops.backward_y @ h_z - ops.backward_z @ h_y)) / k0
    h_x = 1j * (ops.forward_y @ e_z - ops.forward_z @ e_y) / k0
    electric = np.stack([e_x, e_y, e_z]).reshape(3, *shape)
    magnetic = np.stack([h_x, h_y, h_z]).reshape(3, *shape)
    return electric, magnetic


def _normalise(electric, magnetic, cell_area: float):
    """Scale to 1 W (``|1/2 sum (E_y H_z* - E_z H_y*) dA|``), largest transverse E real positive.

    ``E_y`` shares its node with ``H_z`` and ``E_z`` with ``H_y``, so the flux is a plain sum.
    """
    flux = 0.5 * np.sum(electric[1] * magnetic[2].conj() - electric[2] * magnetic[1].conj()) * cell_area
    transverse = electric[1:].reshape(-1)
    peak = transverse[np.argmax(np.abs(transverse))]
    scale = (abs(peak) / peak) / math.sqrt(abs(flux)) if abs(flux) > 0 else abs(peak) / peak
    return electric * scale, magnetic * scale


def _solve(values, cell_sizes, frequency, pml, num_modes, block=None, conductor=None) -> Modes:
    """Assemble, solve and package the modes (``block``: 0 = E_y only, 1 = E_z only, None = both;
    ``conductor``: a :class:`~mindelec.conductors.ConductorNodes` in the frame, or None)."""
    shape = values.shape[-2:]
    size = shape[0] * shape[1]
    k0 = 2.0 * math.pi * frequency / SPEED_OF_LIGHT
    ops = _build_operators(values, cell_sizes, k0, pml, conductor)
    free = ops.free if block is None else ops.free[(ops.free >= size) == bool(block)]
    num_modes = _check_mode_count(num_modes, free.size)
    matrix = (ops.p @ ops.q).tocsr()[free][:, free]
    shift = k0**2 * float(np.max(values.real))
    beta_squared, vectors = _eigenpairs(matrix, num_modes, shift)
    beta = _propagation_constant(beta_squared)
    electric, magnetic = [], []
    for index in range(num_modes):
        transverse = np.zeros(2 * size, dtype=complex)
        transverse[free] = vectors[:, index]
        e, h = _fields(ops, shape, k0, beta[index], transverse)
        e, h = _normalise(e, h / VACUUM_IMPEDANCE, cell_sizes[0] * cell_sizes[1])
        electric.append(e)
        magnetic.append(h)
    return Modes(
        effective_index=torch.from_numpy(beta / k0),
        electric=torch.from_numpy(np.stack(electric)),
        magnetic=torch.from_numpy(np.stack(magnetic)),
        frequency=frequency,
        cell_size=tuple(cell_sizes),
        conductor=None if conductor is None else torch.from_numpy(metal.pec_mask(conductor)),
    )


# ----------------------------------------------------------------------------- public solvers


#: per propagation axis, the solver frame's (w, u, v) axes: (u, v, w) is a cyclic permutation of
#: (x, y, z), so the frame's equations are those written for w = x
_FRAMES = {"x": (0, 1, 2), "y": (1, 2, 0), "z": (2, 0, 1)}


def _array_to_frame(values: np.ndarray, axis: str) -> np.ndarray:
    """A per-cell (n1, n2) or per-component (3, n1, n2) array from the caller's axis order (transverse
    axes increasing) to the frame's (u, v); only ``axis="y"`` swaps them, its frame being (z, x)."""
    if values.ndim == 3:
        values = values[list(_FRAMES[axis])]  # (eps_w, eps_u, eps_v)
    return np.swapaxes(values, -1, -2) if axis == "y" else values


def _to_frame(values: np.ndarray, cell_sizes, pml, axis: str):
    """Permittivity, cell sizes and PML in the frame (:func:`_array_to_frame`)."""
    if axis != "y":
        return _array_to_frame(values, axis), cell_sizes, pml
    return _array_to_frame(values, axis), cell_sizes[::-1], pml[::-1]


def _from_frame(modes: Modes, axis: str) -> Modes:
    """The frame's (E_w, E_u, E_v) fields back to (E_x, E_y, E_z) in the caller's axis order."""
    order = np.argsort(_FRAMES[axis])  # physical component c is frame component order[c]
    electric, magnetic = modes.electric[:, order], modes.magnetic[:, order]
    conductor = None if modes.conductor is None else modes.conductor[order]
    cell_size = modes.cell_size
    if axis == "y":
        electric, magnetic, cell_size = (
            electric.transpose(-1, -2),
            magnetic.transpose(-1, -2),
            cell_size[::-1],
        )
        conductor = None if conductor is None else conductor.transpose(-1, -2)
    return Modes(
        modes.effective_index,
        electric.contiguous(),
        magnetic.contiguous(),
        modes.frequency,
        cell_size,
        None if conductor is None else conductor.contiguous(),
    )


def cross_section_modes(
    permittivity, cell_size, frequency, num_modes=1, pml_cells=0, axis="x", conductor=None
) -> Modes:
    """Full-vector eigenmodes of a waveguide cross-section, travelling along ``axis``.

    The module docstring writes the default ``axis="x"`` (cross-section ``(y, z)``); for ``"y"`` the
    cross-section is ``(x, z)`` and for ``"z"`` it is ``(x, y)``, the transverse axes always in
    increasing order, each component on its FDTD Yee node in that plane.

    Args:
        permittivity: relative permittivity, a tensor or numpy array of shape (n1, n2) over the
            two transverse axes, one value per cell (averaged onto each E component's node), or
            (3, n1, n2) already at the (E_x, E_y, E_z) nodes. Real or complex (``Im < 0`` is loss,
            as in :mod:`mindelec.fdtd.materials`), with a positive real part; finite.
        cell_size: the cell size (m), one length or one per transverse axis, e.g. ``(dy, dz)``.
        frequency: Hz. The shortest wavelength in the material must span at least
            :data:`MIN_CELLS_PER_WAVELENGTH` cells, the vacuum wavelength at most
            :data:`MAX_CELLS_PER_WAVELENGTH` of the smallest cells.
        num_modes: how many modes to return (those of ``n_eff^2`` nearest the largest permittivity).
        pml_cells: cells of PML lining the PEC walls, one int or one per transverse axis; 0 (the
            default) leaves bare metal walls, right for metallic waveguides and for dielectric
            guides whose fields have decayed at the walls.
        axis: the propagation axis, ``"x"``, ``"y"`` or ``"z"``.
        conductor: metal inside the domain (:mod:`mindelec.conductors`): a boolean PEC mask or
            conductivities (S/m, ``inf`` = PEC), per cell (n1, n2) or per E node (3, n1, n2), a tensor
            or numpy array. The permittivity under PEC is not used. Lines with metal are the
            transmission lines of :mod:`mindelec.line_impedance` (their characteristic impedance) and
            :mod:`mindelec.quasi_tem`; their fundamental (quasi-)TEM mode has ``n_eff`` near
            ``sqrt(eps_eff)``, below the largest permittivity, and comes first when no hollow-guide
            mode of the enclosure propagates.

    Returns:
        :class:`Modes` with ``electric`` and ``magnetic`` of shape (num_modes, 3, n1, n2), components
        (x, y, z); ``cell_size`` in the permittivity's axis order; ``conductor`` the PEC node mask.

    Raises:
        ConfigurationError: a wrong shape, cell size, axis, frequency (including one the grid cannot
            resolve or one too low for its cells), ``num_modes`` above the grid's number of modes,
            ``pml_cells`` too thick, or a ``conductor`` of the wrong shape.
        DataError: a non-finite permittivity or one with a non-positive real part, a negative
            conductivity.
        SimulationError: the sparse eigen-solve did not converge.
    """
    if axis not in _FRAMES:
        raise ConfigurationError(f"axis must be 'x', 'y' or 'z', got {axis!r}")
    values = _permittivity_array(permittivity, ndim=2)
    cell_sizes = _cell_sizes(cell_size, 2)
    frequency = _positive(frequency, "frequency")
    pml = _pml_cells(pml_cells, values.shape[-2:])
    _check_resolution(frequency, cell_sizes, float(np.max(values.real)))
    if conductor is not None:
        nodes = metal.conductor_nodes(conductor, values.shape[-2:])
        conductor = metal.ConductorNodes(*(_array_to_frame(a, axis) for a in (nodes.pec, nodes.conductivity)))
    values, cell_sizes, pml = _to_frame(values, cell_sizes, pml, axis)
    return _from_frame(_solve(values, cell_sizes, frequency, pml, num_modes, conductor=conductor), axis)


#: per propagation axis of a 2D simulation and polarization (:data:`mindelec.fdtd.grid.ACTIVE_COMPONENTS`),
#: the frame's E_t block that carries it (0: E_u, 1: E_v): along x, E_z is E_v; along y (frame
#: (w, u, v) = (y, z, x)), E_z is E_u
_LINE_BLOCKS = {("x", "TM"): 1, ("x", "TE"): 0, ("y", "TM"): 0, ("y", "TE"): 1}


def line_modes(
    permittivity, cell_size, frequency, polarization="TM", num_modes=1, pml_cells=0, axis="x"
) -> Modes:
    """Eigenmodes of a line of a 2D ``(x, y)`` simulation: a line along ``y`` for modes travelling
    along ``axis="x"``, a line along ``x`` for ``axis="y"``.

    The structure is invariant along ``z`` (a slab waveguide). ``polarization`` is the 2D
    simulation's: ``"TM"`` carries ``(E_z, H_x, H_y)``, the modes that slab-waveguide texts call
    TE (E parallel to the layers); ``"TE"`` carries ``(E_x, E_y, H_z)``, their TM modes.

    Args:
        permittivity: relative permittivity per cell, shape (n,), or (3, n) already at the
            (E_x, E_y, E_z) nodes, a tensor or numpy array (see :func:`cross_section_modes`).
        cell_size: the cell size along the line (m).
        frequency: Hz (at least :data:`MIN_CELLS_PER_WAVELENGTH` cells per wavelength in the material).
        polarization: ``"TM"`` or ``"TE"``.
        num_modes: how many modes to return (those of ``n_eff^2`` nearest the largest permittivity).
        pml_cells: cells of PML lining the PEC walls at both ends of the line.
        axis: the propagation axis, ``"x"`` or ``"y"``.

    Returns:
        :class:`Modes` with ``electric`` and ``magnetic`` of shape (num_modes, 3, n), components
        (x, y, z) on their Yee nodes along the line; normalised to 1 W per metre along ``z``; the
        components the polarization does not carry are zero.

    Raises:
        ConfigurationError, DataError: as :func:`cross_section_modes`; an unknown polarization or axis.
    """
    if (axis, polarization) not in _LINE_BLOCKS:
        raise ConfigurationError(
            f"polarization must be 'TM' or 'TE' and axis 'x' or 'y', got {polarization!r} and {axis!r}"
        )
    values = _permittivity_array(permittivity, ndim=1)[..., None]  # (along the line, along z)
    step = _cell_sizes(cell_size, 1)[0]
    frequency = _positive(frequency, "frequency")
    pml = (_pml_cells(pml_cells, values.shape[:1])[0], 0)
    _check_resolution(frequency, (step,), float(np.max(values.real)))
    values, cell_sizes, pml = _to_frame(values, (step, 1.0), pml, axis)
    modes = _from_frame(
        _solve(values, cell_sizes, frequency, pml, num_modes, _LINE_BLOCKS[axis, polarization]), axis
    )
    return Modes(
        modes.effective_index, modes.electric[..., 0], modes.magnetic[..., 0], frequency, (step, math.inf)
    )
