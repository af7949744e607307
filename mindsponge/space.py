"""Periodic space: box vectors, minimum image and wrapping.

A periodic box is a (3, 3) tensor whose rows are the box vectors ``a``, ``b`` and ``c``
(nm). Like OpenMM, mindsponge keeps boxes in *reduced form*:

* ``a = (a_x, 0, 0)``, ``b = (b_x, b_y, 0)``, ``c = (c_x, c_y, c_z)`` (lower triangular),
  with positive diagonal ``a_x, b_y, c_z``;
* ``|b_x| <= a_x / 2``, ``|c_x| <= a_x / 2`` and ``|c_y| <= b_y / 2``.

An orthorhombic box is the diagonal case. Any lattice can be brought to this form by
rotating the coordinates (done by :meth:`mindsponge.System.from_ase`) and then by
:func:`reduce_box`, which changes the basis but not the lattice.

Minimum image in a triclinic box (as OpenMM does it): subtract ``c`` times the rounded
fractional ``z``, then ``b`` times the rounded fractional ``y``, then ``a`` times the rounded
fractional ``x``. The result differs from the input by a lattice vector and lies in the
sheared brick ``|d_x| <= a_x/2, |d_y| <= b_y/2, |d_z| <= c_z/2``. It *is* the minimum
image whenever the true minimum image has length below half the smallest of ``a_x``,
``b_y``, ``c_z`` (then it is the only lattice translate in that brick). So a pair search
with cutoff ``r_c <= min(a_x, b_y, c_z) / 2`` -- OpenMM's requirement on the cutoff,
checked by :func:`max_cutoff` -- classifies every pair correctly; longer displacements
still come back as a lattice translate, but not necessarily the shortest one.

Example:
    >>> import torch
    >>> from mindsponge import space
    >>> box = space.box_from_lengths_and_angles(3.0, 3.0, 3.0, 60.0, 60.0, 90.0)  # rhombic dodecahedron
    >>> d = space.minimum_image(torch.tensor([[2.9, 0.0, 0.1]], dtype=box.dtype), box)
"""

import math

import torch

from common.errors import DataError

__all__ = [
    "BoxTooSmallError",
    "BoxError",
    "box_from_lengths_and_angles",
    "box_lengths_and_angles",
    "check_box",
    "fractional",
    "is_orthorhombic",
    "max_cutoff",
    "minimum_image",
    "nearest_image",
    "reduce_box",
    "volume",
    "wrap_molecules",
    "wrap",
]

# tolerance of the reduced-form checks, relative to the box size (OpenMM accepts round-off too)
_REDUCED_FORM_TOLERANCE = 1e-6


class BoxError(DataError):
    """A box that is not a valid periodic box in reduced form."""


class BoxTooSmallError(BoxError):
    """A box too small for a cutoff: half its smallest width is shorter than the cutoff.

    Attributes:
        box: the (3, 3) box, nm.
    """

    def __init__(self, message: str, box):
        super().__init__(message)
        self.box = box


def check_box(box, name="box"):
    """Check that ``box`` is a valid periodic box in OpenMM's reduced form.

    Args:
        box: (3, 3) tensor, nm; rows are the box vectors a, b, c.
        name: how the error message names the argument.

    Raises:
        BoxError: if ``box`` is not a finite (3, 3) floating tensor, not lower triangular,
            singular (non-positive diagonal) or not reduced (see the module docstring).
    """
    if not isinstance(box, torch.Tensor):
        raise BoxError(f"{name} must be a torch.Tensor of shape (3, 3), got {type(box).__name__}")
    if tuple(box.shape) != (3, 3):
        raise BoxError(f"{name} must have shape (3, 3) (rows a, b, c in nm), got {tuple(box.shape)}")
    if not box.is_floating_point():
        raise BoxError(f"{name} must be a floating-point tensor, got {box.dtype}")
    rows = box.detach().tolist()  # one transfer; the checks below are plain Python (cheap per call)
    values = [value for row in rows for value in row]
    if not all(math.isfinite(value) for value in values):
        raise BoxError(f"{name} contains NaN or infinite entries: {rows}")
    (a_x, a_y, a_z), (b_x, b_y, b_z), (c_x, c_y, c_z) = rows
    if min(a_x, b_y, c_z) <= 0:
        raise BoxError(
            f"{name} is singular or not right-handed: its diagonal (a_x, b_y, c_z) = {[a_x, b_y, c_z]} "
            "must be positive"
        )
    tolerance = _REDUCED_FORM_TOLERANCE * max(a_x, b_y, c_z)
    if max(abs(a_y), abs(a_z), abs(b_z)) > tolerance:
        raise BoxError(
            f"{name} is not lower triangular: a must lie along x and b in the xy plane "
            f"(a_y, a_z, b_z = {a_y:.6g}, {a_z:.6g}, {b_z:.6g}); "
            "rotate the coordinates first (System.from_ase does this)"
        )
    if abs(b_x) > a_x / 2 + tolerance or abs(c_x) > a_x / 2 + tolerance or abs(c_y) > b_y / 2 + tolerance:
        raise BoxError(
            f"{name} is not in reduced form (need |b_x| <= a_x/2, |c_x| <= a_x/2, |c_y| <= b_y/2, got "
            f"a_x={a_x:.6g}, b_x={b_x:.6g}, b_y={b_y:.6g}, c_x={c_x:.6g}, c_y={c_y:.6g}); "
            "use mindsponge.space.reduce_box(box)"
        )


def is_orthorhombic(box):
    """Whether ``box`` (3, 3) is diagonal (``False`` for ``None``)."""
    if box is None:
        return False
    (_, _, _), (b_x, _, _), (c_x, c_y, _) = box.detach().tolist()
    return b_x == 0 and c_x == 0 and c_y == 0


def reduce_box(box):
    """Bring a lower-triangular box to OpenMM's reduced form (same lattice, new basis).

    Args:
        box: (3, 3) tensor, nm, lower triangular with positive diagonal.

    Returns:
        (3, 3) tensor: ``c -= round(c_y/b_y) b``, ``c -= round(c_x/a_x) a``,
        ``b -= round(b_x/a_x) a``, exactly as OpenMM's ``computePeriodicBoxVectors``.
    """
    if tuple(box.shape) != (3, 3):
        raise BoxError(f"box must have shape (3, 3), got {tuple(box.shape)}")
    a, b, c = box[0], box[1], box[2]
    c = c - b * torch.round(c[1] / b[1])
    c = c - a * torch.round(c[0] / a[0])
    b = b - a * torch.round(b[0] / a[0])
    return torch.stack([a, b, c])


def box_from_lengths_and_angles(a, b, c, alpha=90.0, beta=90.0, gamma=90.0, dtype=None, device=None):
    """Box vectors in reduced form from cell lengths and angles (PDB CRYST1 convention).

    Follows OpenMM's ``computePeriodicBoxVectors``: a along x, b in the xy plane, entries
    below 1e-6 nm set to zero, then reduced.

    Args:
        a, b, c: cell lengths, nm.
        alpha, beta, gamma: cell angles, degrees (alpha between b and c, beta between a and c,
            gamma between a and b).
        dtype, device: of the result (default: torch's default dtype, CPU).

    Returns:
        (3, 3) tensor, nm.
    """
    for label, length in (("a", a), ("b", b), ("c", c)):
        if not length > 0:
            raise BoxError(f"cell length {label} must be positive, got {length}")
    alpha, beta, gamma = (math.radians(angle) for angle in (alpha, beta, gamma))
    c_x = c * math.cos(beta)
    c_y = c * (math.cos(alpha) - math.cos(beta) * math.cos(gamma)) / math.sin(gamma)
    c_z_squared = c * c - c_x * c_x - c_y * c_y
    if not c_z_squared > 0:
        raise BoxError(
            f"cell angles alpha={math.degrees(alpha):.6g}, beta={math.degrees(beta):.6g}, "
            f"gamma={math.degrees(gamma):.6g} degrees do not describe a 3D cell"
        )
    rows = [
        [a, 0.0, 0.0],
        [b * math.cos(gamma), b * math.sin(gamma), 0.0],
        [c_x, c_y, math.sqrt(c_z_squared)],
    ]
    rows = [[0.0 if abs(value) < 1e-6 else value for value in row] for row in rows]
    box = torch.tensor(rows, dtype=torch.float64)
    return reduce_box(box).to(dtype=dtype or torch.get_default_dtype(), device=device)


def box_lengths_and_angles(box):
    """Cell lengths (nm) and angles (degrees) of a box, as floats ``(a, b, c, alpha, beta, gamma)``."""
    vectors = box.detach().double().cpu()
    lengths = torch.linalg.norm(vectors, dim=1)

    def angle(i, j):
        cosine = float(vectors[i] @ vectors[j] / (lengths[i] * lengths[j]))
        return math.degrees(math.acos(max(-1.0, min(1.0, cosine))))

    return (*(float(length) for length in lengths), angle(1, 2), angle(0, 2), angle(0, 1))


def volume(box):
    """Volume of the box, nm^3.

    Args:
        box: (..., 3, 3) tensor, nm.

    Returns:
        (...) tensor, ``|det(box)|``; differentiable.
    """
    return torch.linalg.det(box).abs()


def max_cutoff(box):
    """Largest cutoff (nm) for which :func:`minimum_image` is exact: ``min(a_x, b_y, c_z) / 2``.

    Args:
        box: (3, 3) tensor in reduced form, nm.

    Returns:
        float.
    """
    return float(torch.diagonal(box).min()) / 2


def fractional(positions, box):
    """Fractional coordinates ``s`` with ``positions = s @ box``.

    Args:
        positions: (..., 3) tensor, nm.
        box: (3, 3) lower-triangular tensor, nm.

    Returns:
        (..., 3) tensor, dimensionless.
    """
    s_z = positions[..., 2] / box[2, 2]
    s_y = (positions[..., 1] - s_z * box[2, 1]) / box[1, 1]
    s_x = (positions[..., 0] - s_y * box[1, 0] - s_z * box[2, 0]) / box[0, 0]
    return torch.stack([s_x, s_y, s_z], dim=-1)


def minimum_image(displacements, box):
    """Minimum-image convention for displacement vectors.

    Args:
        displacements: (..., 3) tensor, nm (for example ``positions[j] - positions[i]``).
        box: (3, 3) tensor in reduced form, nm, or ``None`` (no periodicity: returned unchanged).

    Returns:
        (..., 3) tensor: the displacements shifted by lattice vectors. Exact minimum image
        for displacements whose minimum image is shorter than :func:`max_cutoff` (see the
        module docstring); orthorhombic boxes take a one-step fast path. Differentiable
        (the shifts are piecewise constant).
    """
    if box is None:
        return displacements
    if is_orthorhombic(box):
        lengths = torch.diagonal(box)
        return displacements - lengths * torch.round(displacements / lengths)
    for axis in (2, 1, 0):
        shift = torch.round(displacements[..., axis] / box[axis, axis])
        displacements = displacements - shift.unsqueeze(-1) * box[axis]
    return displacements


def wrap_molecules(positions, box, molecules, masses=None):
    """Positions with every molecule moved by a lattice vector so that its centre lies in the primary cell.

    Molecules stay whole (each moves as one); energies do not change. Any position is accepted, as OpenMM
    accepts positions that runs wrote unwrapped.

    Args:
        positions: (N, 3) tensor, nm.
        box: (3, 3) tensor in reduced form, nm.
        molecules: (N,) long tensor, the molecule of every atom (:func:`mindsponge.thermo.molecule_groups`).
        masses: optional (N,) tensor, amu: centres of mass (massless particles do not count; a molecule
            without mass uses its geometric centre); ``None`` for geometric centres.

    Returns:
        (N, 3) tensor, nm.
    """
    n_molecules = int(molecules.max()) + 1 if len(molecules) else 0
    weights = torch.ones(len(positions), dtype=positions.dtype, device=positions.device)
    if masses is not None:
        weights = masses.to(positions)
    totals = weights.new_zeros(n_molecules).index_add(0, molecules, weights)
    massless = totals[molecules] <= 0
    weights = torch.where(massless, torch.ones_like(weights), weights)
    totals = weights.new_zeros(n_molecules).index_add(0, molecules, weights)
    centers = positions.new_zeros((n_molecules, 3)).index_add(0, molecules, weights[:, None] * positions)
    centers = centers / totals[:, None]
    cells = torch.floor(fractional(centers, box.to(positions)))
    return positions - (cells @ box.to(positions))[molecules]


def nearest_image(displacements, box):
    """The shortest lattice translate of each displacement, also beyond :func:`max_cutoff`.

    Exact for displacements whose shortest translate is shorter than the smallest width of the
    box perpendicular to a face (a neighbour list's cutoff plus skin can exceed
    :func:`max_cutoff` in a small box, where :func:`minimum_image` may return a longer
    translate): the fractional displacement is wrapped into ``[-1/2, 1/2]``, and the shortest
    translate then differs from it by -1, 0 or 1 along each box vector; all 27 are compared.

    Args:
        displacements: (..., 3) tensor, nm.
        box: (3, 3) tensor in reduced form, nm.

    Returns:
        (..., 3) tensor, nm (not differentiable through the choice of translate; use it for shifts).
    """
    scaled = fractional(displacements, box)
    wrapped = (scaled - torch.round(scaled)) @ box
    images = torch.tensor([[i, j, k] for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)],
                          dtype=box.dtype, device=box.device) @ box
    best, best_squared = wrapped, (wrapped * wrapped).sum(-1)
    for shift in images:
        candidate = wrapped + shift
        squared = (candidate * candidate).sum(-1)
        shorter = squared < best_squared
        best = torch.where(shorter.unsqueeze(-1), candidate, best)
        best_squared = torch.where(shorter, squared, best_squared)
    return best


def wrap(positions, box):
    """Wrap positions into the primary cell ``0 <= s < 1`` of every fractional coordinate.

    (An atom within rounding error of a face may land on ``s = 1`` instead of ``s = 0``.)

    Atoms already inside are returned bit-identical; the others are shifted by lattice
    vectors, so every minimum-image distance is unchanged.

    Args:
        positions: (..., 3) tensor, nm.
        box: (3, 3) lower-triangular tensor, nm, or ``None`` (returned unchanged).

    Returns:
        (..., 3) tensor, nm.
    """
    if box is None:
        return positions
    shifts = torch.floor(fractional(positions, box))
    return positions - shifts @ box
