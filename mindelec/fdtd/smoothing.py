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
convergence of resonant frequencies, transmission phases and effective indices at interfaces along the
grid axes, and cuts the error at tilted and curved ones (below).

What this module does (``Simulation(subpixel=True)``), once at set-up:

* each E component ``E_c`` gets the diagonal element of that tensor at its Yee node,
  ``1 / eps_c = n_c^2 <eps^-1> + (1 - n_c^2) / <eps>``; the off-diagonal elements, which couple ``E_c`` to
  the other components at tilted and curved interfaces, are added by :mod:`mindelec.fdtd.offdiagonal`
  (``subpixel=True``) or left out (``subpixel="diagonal"``). For interfaces along the grid axes they vanish
  (second order, tested). For curved ones, measured on the lowest TE resonance of a dielectric disk (eps 6,
  radius 0.3 of a square PEC cavity) against a particular-solutions reference at 12-64 cells per side: the
  arithmetic mean converges at order 1.3 (errors 4.4e-2 .. 8.9e-3 at 12-40 cells), the diagonal at order
  1.0 (8.8e-3 .. 1.8e-3), the full tensor at order 1.25 with errors 3.6-13x smaller than the diagonal's
  (2.4e-3 .. 2.2e-4). Second order is not reached on the Yee grid: the off-diagonal terms need the other
  components averaged across the interface, where they jump, which keeps a first-order error (Werner and
  Cary, J. Comput. Phys. 226, 1085 (2007), find first-order errors at sharp interfaces for their scheme too).
  Up to 128 cells the error times N is 0.11 for the diagonal and fluctuates around 0.013 (0.0004-0.03) for
  the full tensor: about 90 % of the first-order error removed. On Meep's own convergence test (air holes
  in eps 12, MPB's frequency) the full tensor passes Meep's bound ``|f - f_MPB| a^2 < 0.4`` and the
  diagonal does not (``tests/mindelec/test_smoothing.py``);
* the means run over the component's own Yee cell; the normal is the outward normal of the last
  structure that only partly covers the cell (``_normal`` of its ``common.geometry`` shape at the node:
  the nearest face, edge or arc). Each structure's fill fraction of a cut cell is the exact volume of
  the cell on the inner side of the plane through the boundary with that normal, at the shape's signed
  distance (``_margin``) from the node (a closed form, inclusion-exclusion over the cell's corners).
  Point sampling (``rasterize``'s 4 sub-points per axis) would quantise the fractions to 1/4 and leave
  an error of first order; the planar cut is exact for flat interfaces and second-order for curved
  ones, and costs one distance and one normal per node. Shapes must give their normals and signed
  distances (all analytic shapes, CSG combinations and :class:`mindelec.cad.MeshGeometry` do);
* components along an axis the simulation does not have (``Ez`` in 1D and 2D TM) are tangential to
  every interface and keep the arithmetic mean: smoothing acts in 2D TE and 3D;
* only the (instantaneous) permittivity ``eps`` (``eps_inf`` of dispersive media) is smoothed:
  conductivity, dispersive poles and permeability keep the arithmetic fill-fraction mean; design regions
  (applied afterwards) and PEC (cells more than half covered have ``E = 0``, a staircase: no conformal
  PEC treatment here) are unchanged. PEC parts count with the default medium's permittivity, as in the
  arithmetic mean.
"""

import math
from itertools import product

import torch

from common.errors import ConfigurationError

from .grid import component_axis
from .materials import Medium

#: normal components (in cell units) are floored at this fraction of the largest one, so that the
#: closed-form cut volume never divides by zero (the plane tilts by at most this, in radians)
_TILT_FLOOR = 1e-4
#: nodes whose distances are evaluated at once (bounds the memory, as ``rasterize`` does)
_CHUNK = 2**18


def smoothed_permittivity(mixer, weights, component):
    """The relative permittivity ``1 / (n_c^2 <1/eps> + (1 - n_c^2) / <eps>)`` at ``component``'s nodes.

    Args:
        mixer: the coefficient builder's media mixer (``grid``, ``media``, ``default_medium``,
            ``structures``, ``mix``, ``dtype``, ``device``), see :mod:`mindelec.fdtd.coefficients`.
        weights: the rasterised weight of each medium at the nodes (default medium first), used as they
            are for a component tangential to every interface.
        component: the E component, ``"Ex"``, ``"Ey"`` or ``"Ez"``.

    Returns:
        a float (uniform medium) or a tensor of the grid shape ``(nx, ny, nz)``.

    Raises:
        ConfigurationError: naming the structure if its shape gives no boundary normals.
    """
    axis = component_axis(component)
    if axis >= mixer.grid.ndim or not mixer.structures:
        return mixer.mix(weights, "permittivity")
    mean, inverse_mean, normals = cell_means(mixer, component)
    normal_squared = normals[..., axis] ** 2
    return 1 / (normal_squared * inverse_mean + (1 - normal_squared) / mean)


def cell_means(mixer, component):
    """``(<eps>, <1/eps>, n)`` over the cells centred on ``component``'s nodes (``None``: the integer nodes).

    The means are tensors of the grid shape ``(nx, ny, nz)`` (float when uniform), from the planar-cut
    fill fractions; ``n`` ``(nx, ny, nz, d)`` is the unit normal of the last structure that only partly
    covers the cell, zero where none does. At least one structure is expected (``mixer.structures``).
    """
    grid = mixer.grid
    points = node_points(grid, component)
    spacing = torch.tensor(grid.spacing[: grid.ndim], dtype=torch.float64)
    planar = [1.0]
    normals = torch.zeros_like(points)
    for index, structure in enumerate(mixer.structures):
        fill, cut, cut_normals = _planar_fill(structure, index, points, spacing)
        planar = [w * (1 - fill) for w in planar] + [fill]
        normals[cut] = cut_normals  # later structures override
    planar = [w.reshape(grid.shape).to(dtype=mixer.dtype, device=mixer.device) for w in planar]
    inverse_mean = 0.0
    for weight, medium in zip(planar, mixer.media):
        medium = medium if isinstance(medium, Medium) else mixer.default_medium
        inverse_mean = inverse_mean + weight / medium.permittivity
    normals = normals.reshape(*grid.shape, grid.ndim).to(dtype=mixer.dtype, device=mixer.device)
    return mixer.mix(planar, "permittivity"), inverse_mean, normals


def node_points(grid, component):
    """The positions (m) of ``component``'s nodes (``None``: the integer nodes), ``(n_nodes, d)`` float64."""
    coordinates = [grid.coordinates(component, a, torch.float64) for a in range(grid.ndim)]
    return torch.stack(torch.meshgrid(*coordinates, indexing="ij"), dim=-1).reshape(-1, grid.ndim)


def _planar_fill(structure, index, points, spacing):
    """Fill fraction of the cells centred on ``points`` ``(B, d)`` (m) by ``structure``'s shape.

    Returns ``(fill (B,), cut (B,) bool, normals (C, d))``: cells the boundary may cross (``cut``, within
    half a cell diagonal) get the planar-cut volume; the others 1 inside, 0 outside.
    """
    geometry = structure.geometry
    margin = torch.cat([geometry._margin(chunk) for chunk in points.split(_CHUNK)])
    fill = (margin > 0).to(torch.float64)
    cut = margin.abs() < 0.5 * float(spacing.norm())
    if not bool(cut.any()):
        return fill, cut, points[:0]
    try:
        normals = torch.cat([geometry._normal(chunk) for chunk in points[cut].split(_CHUNK)])
    except NotImplementedError:
        raise ConfigurationError(
            f"structure {index} ({structure!r}): subpixel smoothing needs the boundary normals of its "
            "shape, which it does not give; use subpixel=False"
        ) from None
    normals = normals.to(torch.float64)
    normals = normals / normals.norm(dim=1, keepdim=True).clamp_min(1e-300)
    fill[cut] = _cut_volume(normals * spacing, margin[cut])
    partial = (fill[cut] > 0) & (fill[cut] < 1)
    cut[cut.clone()] = partial
    return fill, cut, normals[partial]


def _cut_volume(scaled_normals, distances):
    """Volume fraction of the cell ``[-1/2, 1/2]^d`` (cell units) where ``m . u < distance``.

    ``scaled_normals``: ``(C, d)`` normals times the spacing (m), ``distances``: ``(C,)`` (m). Closed form:
    ``sum_v (-1)^|v| max(0, T - a.v)^d / (d! prod a)`` over the corners ``v`` of the unit cube, with
    ``a = |m|`` and ``T = distance + sum(a) / 2``.
    """
    dim = scaled_normals.shape[1]
    a = scaled_normals.abs()
    a = torch.maximum(a, _TILT_FLOOR * a.max(dim=1, keepdim=True).values)
    threshold = distances + a.sum(dim=1) / 2
    volume = torch.zeros_like(distances)
    for corner in product((0.0, 1.0), repeat=dim):
        corner = torch.tensor(corner, dtype=a.dtype)
        sign = (-1.0) ** int(corner.sum())
        volume = volume + sign * torch.relu(threshold - a @ corner) ** dim
    return (volume / (math.factorial(dim) * a.prod(dim=1))).clamp(0.0, 1.0)
