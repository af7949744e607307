"""Anisotropic subpixel smoothing of the permittivity at dielectric interfaces (Farjadpour et al. 2006).

Near an interface the field component normal to it is discontinuous (``eps E_n`` is continuous) while the
tangential ones are continuous. Averaging ``eps`` arithmetically over a cell cut by the interface (the
default sub-cell averaging of :mod:`mindelec.fdtd.coefficients`) is right for the tangential components but
not for the normal one, which leaves an error of first order in the cell size. Farjadpour, Roundy,
Rodriguez, Ibanescu, Bermel, Joannopoulos, Johnson and Burr, Opt. Lett. 31, 2972 (2006), and Meep by
default, use instead the effective inverse-permittivity tensor of each cell

    eps_eff^-1 = P <eps^-1> + (1 - P) <eps>^-1,      P = n n^T,

with ``n`` the unit normal of the interface in the cell and ``<.>`` the fill-fraction mean over the cell:
the harmonic mean across the interface, the arithmetic mean along it. This restores second-order
convergence of resonant frequencies, transmission phases and effective indices, at interfaces along the
grid axes and, with the means below and the off-diagonal terms, at curved ones.

What this module does (``Simulation(subpixel=True)``), once at set-up:

* each E component ``E_c`` gets the diagonal element of that tensor at its Yee node,
  ``1 / eps_c = n_c^2 <eps^-1> + (1 - n_c^2) / <eps>``; the off-diagonal elements, which couple ``E_c`` to
  the other components at tilted and curved interfaces, are added by :mod:`mindelec.fdtd.offdiagonal`
  (``subpixel=True``) or left out (``subpixel="diagonal"``). For interfaces along the grid axes they vanish
  (second order, tested);
* the means are those of the Yee grid read as a finite-integration scheme: ``E_c`` at a node is the mean
  of ``E_c`` along its edge (one cell along ``c``), ``D_c`` the mean of ``D_c`` over its dual face (the
  cell's cross-section across ``c``: a segment in 2D, a square in 3D). For a planar interface with
  uniform ``D_n`` and ``E_t`` on either side, ``E_c = n_c <1/eps>_edge D_n + t_c E_t`` and
  ``D_c = n_c D_n + t_c <eps>_face E_t`` hold exactly; eliminating ``E_t`` with the other components'
  ``D`` gives the tensor above with ``<eps^-1>`` the edge's mean and ``<eps>`` the face's
  (:func:`edge_face_means`). Means over the whole cell centred on the node (Farjadpour et al.'s definition)
  coincide with these at interfaces along the axes but not at tilted ones, where they leave an error of
  first order;
* measured on the lowest TE resonance of a dielectric disk (eps 6, radius 0.3 of a square PEC cavity)
  against a particular-solutions reference at 12-128 cells per side (``tests/mindelec/test_smoothing.py``):
  the full tensor converges at second order (the relative error times N^2 stays between 0.22 and 0.48;
  errors 1.9e-3 at 12 cells, 2.9e-5 at 128), the diagonal alone at first order (error times N 0.06-0.10;
  6.3e-4 at 128 cells), the arithmetic mean (``subpixel=False``) at order 1.3 (4.4e-2 .. 8.9e-3 at 12-40
  cells). With means over whole cells the full tensor stalled at order 1.25 (error times N about 0.013 up
  to 128 cells, 9.4e-5 at 128). On Meep's own convergence test (air holes in eps 12, MPB's frequency) the
  full tensor stays within Meep's bound ``|f - f_MPB| a^2 < 0.4`` (0.16 at most over 5-50 pixels per
  period) and the diagonal does not (0.70 at 30);
* the normal is the outward normal of the last structure that only partly covers the node's edge or
  face (``_normal`` of its ``common.geometry`` shape at the node: the nearest face, edge or arc). Each
  structure's fill fraction of a cut edge or face is the exact fraction of it on the inner side of the
  plane through the boundary with that normal, at the shape's signed distance (``_margin``) from the
  node (a closed form, inclusion-exclusion over the region's corners). Point sampling (``rasterize``'s 4
  sub-points per axis) would quantise the fractions to 1/4 and leave an error of first order; the planar
  cut is exact for flat interfaces and second-order for curved ones, and costs one distance and one
  normal per node. Shapes must give their normals and signed distances (all analytic shapes, CSG
  combinations and :class:`mindelec.cad.MeshGeometry` do). Later structures cover earlier ones; where
  two or more structures cut the same edge or face (structures that meet or overlap there), the planar
  fills cannot tell how they overlap, and the shares are counted on 16 points per axis instead;
* components along an axis the simulation does not have (``Ez`` in 1D and 2D TM) are tangential to
  every interface and keep the arithmetic mean: smoothing acts in 2D TE and 3D;
* the (instantaneous) permittivity ``eps`` (``eps_inf`` of dispersive media) is smoothed, and the
  conductivity with it, as the imaginary part of the complex permittivity to first order in the loss
  tangent (:func:`smoothed_media`); dispersive poles and permeability keep the arithmetic fill-fraction
  mean; design regions
  (applied afterwards) are unchanged. PEC parts count with the default medium's permittivity, as in the
  arithmetic mean; zero-thickness PEC sheets (:func:`~mindelec.fdtd.pec_sheet`) displace no dielectric
  and count as nothing (their 0.8-cell box had counted as the default medium: a patch on a three-cell
  substrate resonated 12 % high). PEC structures themselves are conformal in 2D and 3D runs
  (:mod:`mindelec.fdtd.conformal`) and staircased in 1D (E zero where a cell is half covered or more).
"""

import math
from itertools import product

import torch

from common.errors import ConfigurationError

from .grid import component_axis
from .materials import Medium, PECSheet

#: normal components (in cell units) are floored at this fraction of the largest one, so that the
#: closed-form cut volume never divides by zero (the plane tilts by at most this, in radians)
_TILT_FLOOR = 1e-4
#: a region whose normal components (times the spacing) are below this fraction of the cell's diagonal
#: is parallel to the plane: wholly on one side of it
_PARALLEL = 1e-9
#: sample points per axis of a region where two or more structures meet (:func:`_region_weights`)
_SAMPLES = 16
#: nodes whose distances are evaluated at once (bounds the memory, as ``rasterize`` does)
_CHUNK = 2**18


def smoothed_media(mixer, weights, component):
    """``(permittivity, conductivity)`` at ``component``'s nodes: the smoothed relative permittivity
    ``eps_c = 1 / (n_c^2 <1/eps> + (1 - n_c^2) / <eps>)`` and the conductivity (S/m) smoothed with it.

    The conductivity is averaged as the imaginary part of the complex permittivity
    ``eps + i sigma / (omega eps0)``, to first order in the loss tangent (so that it does not depend on
    the frequency): ``sigma_c = eps_c^2 (n_c^2 <sigma / eps^2> + (1 - n_c^2) <sigma> / <eps>^2)``, the
    harmonic mean across the interface and the arithmetic one along it, as the permittivity. (Averaged
    arithmetically while the permittivity was smoothed, the conductivity of the cut cells was too large
    across the interface: a sphere of eps 4 + i absorbed 2.5-3.7 % too much at 33-50 nm cells, converging
    at first order.)

    Args:
        mixer: the coefficient builder's media mixer (``grid``, ``media``, ``default_medium``,
            ``structures``, ``mix``, ``dtype``, ``device``), see :mod:`mindelec.fdtd.coefficients`.
        weights: the rasterised weight of each medium at the nodes (default medium first), used as they
            are for a component tangential to every interface.
        component: the E component, ``"Ex"``, ``"Ey"`` or ``"Ez"``.

    Returns:
        two floats (uniform media) or tensors of the grid shape ``(nx, ny, nz)``; where no medium
        conducts, the conductivity is the arithmetic mix of ``weights`` (zeros).

    Raises:
        ConfigurationError: naming the structure if its shape gives no boundary normals.
    """
    axis = component_axis(component)
    if axis >= mixer.grid.ndim or not mixer.structures:
        return mixer.mix(weights, "permittivity"), mixer.mix(weights, "conductivity")
    (edge, face), normals = _edge_face_weights(mixer, component)
    mean = mixer.mix(face, "permittivity")
    normal_squared = normals[..., axis] ** 2
    permittivity = 1 / (normal_squared * _mean(mixer, edge, lambda m: 1 / m.permittivity)
                        + (1 - normal_squared) / mean)
    if all(bool(torch.as_tensor(_medium(mixer, m).conductivity).eq(0).all()) for m in mixer.media):
        return permittivity, mixer.mix(weights, "conductivity")
    across = _mean(mixer, edge, lambda m: m.conductivity / m.permittivity**2)
    along = mixer.mix(face, "conductivity") / mean**2
    return permittivity, permittivity**2 * (normal_squared * across + (1 - normal_squared) * along)


def edge_face_means(mixer, component):
    """``(<eps>_face, <1/eps>_edge, n)`` at ``component``'s nodes: the means the Yee grid's finite-integration
    reading of the smoothed tensor needs.

    ``E_c`` at a node is the mean of ``E_c`` along its edge (the segment of one cell along ``c`` through the
    node), ``D_c`` the mean of ``D_c`` over its dual face (the cell's cross-section across ``c``: a segment in
    2D, a square in 3D). For a planar interface with uniform ``D_n`` and ``E_t`` on either side,
    ``E_c = n_c <1/eps>_edge D_n + t_c E_t`` and ``D_c = n_c D_n + t_c <eps>_face E_t`` exactly, which gives
    the tensor of the module docstring with these two means.

    The means are tensors of the grid shape ``(nx, ny, nz)`` (float when uniform), from the planar-cut
    fill fractions of the edge and of the face; ``n`` ``(nx, ny, nz, d)`` is the unit normal of the last
    structure that only partly covers the edge or the face, zero where none does. At least one structure
    is expected (``mixer.structures``); ``component`` must point along an axis the grid has.
    """
    (edge, face), normals = _edge_face_weights(mixer, component)
    return mixer.mix(face, "permittivity"), _mean(mixer, edge, lambda m: 1 / m.permittivity), normals


def _medium(mixer, medium):
    """``medium``, or the default medium for a PEC part (as :meth:`mix` counts it)."""
    return medium if isinstance(medium, Medium) else mixer.default_medium


def _mean(mixer, weights, value):
    """``sum_k weight_k value(medium_k)`` over the media (PEC parts as the default medium)."""
    return sum((w * value(_medium(mixer, m)) for w, m in zip(weights, mixer.media)), 0.0)


def _edge_face_weights(mixer, component):
    """``((edge weights, face weights), n)``: each medium's share of the node's edge and of its dual face
    (lists of grid-shaped tensors, default medium first) and the normals ``(nx, ny, nz, d)`` of
    :func:`edge_face_means`."""
    grid = mixer.grid
    axis = component_axis(component)
    points = node_points(grid, component)
    spacing = torch.tensor(grid.spacing[: grid.ndim], dtype=torch.float64)
    regions = ([axis], [a for a in range(grid.ndim) if a != axis])  # the edge, the face
    fills = []  # per structure, its planar fill of each region
    normals = torch.zeros_like(points)
    for index, structure in enumerate(mixer.structures):
        if isinstance(structure.medium, PECSheet):  # zero thickness: it displaces no dielectric
            fills.append([torch.zeros(points.shape[0], dtype=torch.float64)] * len(regions))
            continue
        structure_fills, cut, cut_normals = _planar_fill(structure, index, points, spacing, regions)
        fills.append(structure_fills)
        normals[cut] = cut_normals  # later structures override
    shares = tuple(
        [
            w.reshape(grid.shape).to(dtype=mixer.dtype, device=mixer.device)
            for w in _region_weights([f[r] for f in fills], mixer.structures, points, spacing, axes)
        ]
        for r, axes in enumerate(regions)
    )
    normals = normals.reshape(*grid.shape, grid.ndim).to(dtype=mixer.dtype, device=mixer.device)
    return shares, normals


def _region_weights(fills, structures, points, spacing, axes):
    """Each medium's share of the regions (default medium first), later structures over earlier ones.

    ``fills``: per structure its planar fill ``(B,)`` of the regions spanning ``axes`` around ``points``.
    Where at most one structure only partly covers a region, the others cover it wholly or not at all and
    ``fill_k prod_{j > k} (1 - fill_j)`` is exact. Where two or more do (structures that meet or overlap
    within the region), their planar fills say nothing of how they overlap: there the shares are counted
    on ``_SAMPLES`` points per axis of the region, each owned by the last structure containing it.
    """
    uncovered = torch.ones_like(fills[0])  # prod_{j > k} (1 - fill_j), from the last structure back
    weights = []
    for fill in reversed(fills):
        weights.append(fill * uncovered)
        uncovered = uncovered * (1 - fill)
    weights = [uncovered] + weights[::-1]
    shared = sum(((fill > 0) & (fill < 1)).to(torch.int64) for fill in fills) >= 2
    if bool(shared.any()):
        offsets = (torch.arange(_SAMPLES, dtype=torch.float64) + 0.5) / _SAMPLES - 0.5
        grids = torch.meshgrid(*[offsets * spacing[a] for a in axes], indexing="ij")
        displacement = torch.zeros(grids[0].numel(), points.shape[1], dtype=torch.float64)
        for a, values in zip(axes, grids):
            displacement[:, a] = values.reshape(-1)
        centres = points[shared]
        owner = torch.zeros(centres.shape[0], displacement.shape[0], dtype=torch.int64)
        for index, structure in enumerate(structures, start=1):
            if isinstance(structure.medium, PECSheet):  # zero thickness: owns no sample
                continue
            rows = _near_bounds(structure.geometry, centres, spacing / 2)  # the others' samples lie outside
            if rows.numel() == 0:
                continue
            samples = (centres[rows].unsqueeze(1) + displacement).reshape(-1, points.shape[1])
            inside = torch.cat([structure.geometry._margin(chunk) > 0 for chunk in samples.split(_CHUNK)])
            owner[rows] = torch.where(inside.reshape(len(rows), -1), index, owner[rows])
        for index, weight in enumerate(weights):
            weight[shared] = (owner == index).to(torch.float64).mean(dim=1)
    return weights


def _near_bounds(geometry, points, reach):
    """Indices of ``points`` ``(n, d)`` (m) within ``reach`` ``(d,)`` (m) of ``geometry``'s bounding box along
    every axis (all of them for a geometry without one)."""
    try:
        low, high = geometry.bounds_float64
    except NotImplementedError:
        return torch.arange(points.shape[0])
    tolerance = 1e-6 * reach
    near = ((points >= low - reach - tolerance) & (points <= high + reach + tolerance)).all(dim=1)
    return near.nonzero()[:, 0]


def node_points(grid, component):
    """The positions (m) of ``component``'s nodes (``None``: the integer nodes), ``(n_nodes, d)`` float64."""
    coordinates = [grid.coordinates(component, a, torch.float64) for a in range(grid.ndim)]
    return torch.stack(torch.meshgrid(*coordinates, indexing="ij"), dim=-1).reshape(-1, grid.ndim)


def _planar_fill(structure, index, points, spacing, regions, grow=0.0):
    """Fill fractions of the regions centred on ``points`` ``(B, d)`` (m) by ``structure``'s shape (grown by
    ``grow`` (m) along its normals).

    ``regions``: per region the axes it spans (one cell along each, e.g. ``[0]`` the segment along x).
    Returns ``(fills (one (B,) per region), cut (B,) bool, normals (C, d))``: nodes the boundary may reach
    (within half a cell diagonal) get the planar-cut fractions; the others 1 inside, 0 outside. ``cut``
    marks the nodes where some region is only partly covered; ``normals`` are theirs.
    """
    geometry = structure.geometry
    margin = torch.cat([geometry._margin(chunk) for chunk in points.split(_CHUNK)]) + grow
    inside = (margin > 0).to(torch.float64)
    near = margin.abs() < 0.5 * float(spacing.norm())
    if not bool(near.any()):
        return [inside] * len(regions), torch.zeros_like(near), points[:0]
    try:
        normals = torch.cat([geometry._normal(chunk) for chunk in points[near].split(_CHUNK)])
    except NotImplementedError:
        raise ConfigurationError(
            f"structure {index} ({structure!r}): subpixel smoothing needs the boundary normals of its "
            "shape, which it does not give; use subpixel=False"
        ) from None
    normals = normals.to(torch.float64)
    normals = normals / normals.norm(dim=1, keepdim=True).clamp_min(1e-300)
    fills, partial = [], torch.zeros(int(near.sum()), dtype=torch.bool)
    for axes in regions:
        fraction = _cut_volume((normals * spacing)[:, axes], margin[near], float(spacing.norm()))
        fill = inside.clone()
        fill[near] = fraction
        fills.append(fill)
        partial |= (fraction > 0) & (fraction < 1)
    cut = near.clone()
    cut[near] = partial
    return fills, cut, normals[partial]


def _cut_volume(scaled_normals, distances, extent):
    """Volume fraction of the cell ``[-1/2, 1/2]^k`` (cell units) where ``m . u < distance``.

    ``scaled_normals``: ``(C, k)`` normals times the spacing (m), ``distances``: ``(C,)`` (m), ``extent``: the
    cell's diagonal (m). Closed form:
    ``sum_v (-1)^|v| max(0, T - a.v)^k / (k! prod a)`` over the corners ``v`` of the unit cube, with
    ``a = |m|`` and ``T = distance + sum(a) / 2``. Where ``m`` is (nearly) zero, the plane is parallel to
    the region: 1 inside (``distance > 0``), 0 outside.
    """
    dim = scaled_normals.shape[1]
    a = scaled_normals.abs()
    largest = a.max(dim=1, keepdim=True).values
    parallel = largest[:, 0] <= _PARALLEL * extent
    a = torch.maximum(a, _TILT_FLOOR * largest).clamp_min(_PARALLEL * extent)
    threshold = distances + a.sum(dim=1) / 2
    volume = torch.zeros_like(distances)
    for corner in product((0.0, 1.0), repeat=dim):
        corner = torch.tensor(corner, dtype=a.dtype)
        sign = (-1.0) ** int(corner.sum())
        volume = volume + sign * torch.relu(threshold - a @ corner) ** dim
    volume = (volume / (math.factorial(dim) * a.prod(dim=1))).clamp(0.0, 1.0)
    # a plane that misses the region: 0 or 1 exactly (the sum above would cancel to round-off of T^d)
    volume = torch.where(threshold <= 0, 0.0, torch.where(threshold >= a.sum(dim=1), 1.0, volume))
    return torch.where(parallel, (distances > 0).to(volume.dtype), volume)
