"""The Yee grid: cell counts, spacing, and where each field component lives.

The domain spans ``[-size/2, size/2]`` along each of its ``d`` axes (x, y, z in
order). Internally every field is a 3D tensor of shape ``(nx, ny, nz)`` with
length-1 axes for the dimensions a 1D or 2D simulation does not have, so one set
of update equations serves every dimension.

Staggering (standard Yee): along axis ``a`` the *integer* node ``i`` sits at
``-size_a/2 + i * dx_a`` (``i = 0 .. n_a - 1``; ``i = n_a`` would be the far wall at
``+size_a/2``) and the *half* node ``i`` at ``-size_a/2 + (i + 1/2) * dx_a``.
``E_c`` is at a half node along axis ``c`` and integer nodes along the others;
``H_c`` is at an integer node along ``c`` and half nodes along the others. Along an
axis the simulation does not have, every component sits at 0. In time, E is
sampled at ``n * dt`` and H at ``(n - 1/2) * dt``.
"""

import math
import warnings

import torch

from common.deprecation import renamed_arguments
from common.errors import ConfigurationError

AXES = "xyz"
E_COMPONENTS = ("Ex", "Ey", "Ez")
H_COMPONENTS = ("Hx", "Hy", "Hz")

#: the field components each kind of simulation carries
ACTIVE_COMPONENTS = {
    (1, None): ("Ez", "Hy"),
    (2, "TM"): ("Ez", "Hx", "Hy"),
    (2, "TE"): ("Ex", "Ey", "Hz"),
    (3, None): ("Ex", "Ey", "Ez", "Hx", "Hy", "Hz"),
}


def component_axis(component: str) -> int:
    """The axis index (0, 1, 2) a component such as ``"Ey"`` points along."""
    return AXES.index(component[1])


def flat_index(position, shape):
    """Row-major flat indices ``(M,)`` of integer node indices ``position`` ``(M, 3)`` in a grid of ``shape``
    (three sizes)."""
    return (position[:, 0] * shape[1] + position[:, 1]) * shape[2] + position[:, 2]


def _cell_sizes(cell_size, ndim) -> tuple[float, ...]:
    """``cell_size`` (one length, or one per axis; m) as ``ndim`` positive floats, else a ValueError."""
    if isinstance(cell_size, (tuple, list)):
        if len(cell_size) != ndim:
            raise ConfigurationError(
                f"Simulation cell_size: expected one length or {ndim} (one per axis, m), got {cell_size!r}"
            )
        cell_sizes = tuple(float(edge) for edge in cell_size)
    else:
        cell_sizes = (float(cell_size),) * ndim
    if not all(math.isfinite(edge) and edge > 0 for edge in cell_sizes):
        raise ConfigurationError(f"Simulation cell_size: expected positive cell sizes (m), got {cell_size!r}")
    return cell_sizes


class GridWarning(UserWarning):
    """The grid differs from what was asked (the domain is not a whole number of cells)."""


class Grid:
    """A Yee grid over ``[-size/2, size/2]``, uniform along each axis (the spacing may differ per axis).

    Args:
        size: domain extent per axis (m); ``len(size)`` (1, 2 or 3) is the dimension.
        cell_size: the edge of a cell (m): one length for cubic cells, or one per axis (e.g.
            ``(dx, dy, dz)``, as many as ``size`` has) for cells of different edges. The number of
            cells along an axis is ``round(size_a / cell_size_a)``; the actual spacing ``size_a / n_a``
            (attribute ``spacing``) differs from ``cell_size_a`` by less than half a cell over the
            whole domain. (``resolution=``, the old name, warns and still works for one release.)

    Attributes:
        ndim: 1, 2 or 3.
        shape: ``(nx, ny, nz)`` cell counts (1 along axes the simulation does not have).
        spacing: ``(dx, dy, dz)`` in m (``inf`` along missing axes).
        size: ``(Lx, Ly, Lz)`` in m (0 along missing axes).
    """

    @renamed_arguments(resolution="cell_size")
    def __init__(self, size, cell_size):
        size = tuple(float(value) for value in size)
        if not 1 <= len(size) <= 3:
            raise ConfigurationError(f"Simulation size: expected 1 to 3 extents (m), got {len(size)}: {size}")
        if not all(math.isfinite(value) and value > 0 for value in size):
            raise ConfigurationError(
                f"Simulation size: every extent must be a positive length (m), got {size}")
        cell_sizes = _cell_sizes(cell_size, len(size))
        counts = [max(1, round(length / edge)) for length, edge in zip(size, cell_sizes)]
        for axis, (length, edge, count) in enumerate(zip(size, cell_sizes, counts)):
            if count >= 2 and abs(length / count - edge) > 1e-9 * edge:  # not a whole number of cells
                warnings.warn(
                    f"Simulation size {length:g} m along {AXES[axis]} is {length / edge:.6g} cells of "
                    f"{edge:g} m: the cells are {length / count:.6g} m ({count} of them); give size "
                    f"{count * edge:g} m (or {(count + (1 if length / edge > count else -1)) * edge:g} m) "
                    f"to keep {edge:g} m cells",
                    GridWarning, stacklevel=4)
        if min(counts) < 2:
            raise ConfigurationError(
                f"Simulation cell_size {cell_size} m is coarser than the domain size {size}; "
                "expected at least 2 cells per axis"
            )
        self.ndim = len(size)
        self.shape = tuple(counts) + (1,) * (3 - self.ndim)
        self.size = size + (0.0,) * (3 - self.ndim)
        self.spacing = tuple(length / count for length, count in zip(size, counts)) + (math.inf,) * (
            3 - self.ndim
        )

    @property
    def cell_volume(self) -> float:
        """Product of the spacings along the simulation's axes (m^d)."""
        return math.prod(self.spacing[: self.ndim])

    def offsets(self, component: str | None) -> tuple[float, float, float]:
        """Offset in cells (0 or 1/2) of ``component``'s nodes along x, y, z (``None``: the integer nodes)."""
        if component is None:
            return (0.0, 0.0, 0.0)
        axis = component_axis(component)
        electric = component[0] == "E"
        return tuple(0.0 if a >= self.ndim else (0.5 if (a == axis) == electric else 0.0) for a in range(3))

    def coordinates(self, component: str, axis: int, dtype=torch.float64, device=None) -> torch.Tensor:
        """Node coordinates (m) of ``component`` along ``axis``: a 1D tensor of length ``shape[axis]``."""
        if axis >= self.ndim:
            return torch.zeros(1, dtype=dtype, device=device)
        index = torch.arange(self.shape[axis], dtype=dtype, device=device)
        return -self.size[axis] / 2 + (index + self.offsets(component)[axis]) * self.spacing[axis]

    def check_inside(self, position, what: str) -> tuple[float, ...]:
        """Validate a point (m) against the domain; returns it padded to 3 coordinates.

        Raises:
            ValueError: naming ``what`` if the point has the wrong length or lies outside.
        """
        position = tuple(float(value) for value in position)
        if len(position) != self.ndim:
            raise ConfigurationError(
                f"{what}: position {position} has {len(position)} coordinates; the simulation is {self.ndim}D"
            )
        for a, value in enumerate(position):
            half = self.size[a] / 2
            if not -half <= value <= half:
                raise ConfigurationError(
                    f"{what}: position {position} lies outside the domain "
                    f"[-{half:g}, {half:g}] m along {AXES[a]}"
                )
        return position + (0.0,) * (3 - self.ndim)

    def nearest_index(self, component: str | None, position) -> tuple[int, int, int]:
        """Index of ``component``'s node nearest to ``position`` (3 coordinates, m)."""
        index = []
        for a in range(3):
            if a >= self.ndim:
                index.append(0)
                continue
            fractional = (position[a] + self.size[a] / 2) / self.spacing[a] - self.offsets(component)[a]
            index.append(min(max(round(fractional), 0), self.shape[a] - 1))
        return tuple(index)

    def index_range(self, center, size, component: str | None, what: str) -> tuple[slice, slice, slice]:
        """Slices of ``component``'s nodes (``None``: integer nodes) in the box ``center +- size/2``.

        At least one node per axis is taken (the nearest one for a box thinner than a cell).

        ``center`` and ``size`` have ``ndim`` entries (m); the box must lie inside the domain.
        """
        center = self.check_inside(center, what)
        size = tuple(float(value) for value in size)
        if len(size) != self.ndim or any(value < 0 for value in size):
            raise ConfigurationError(f"{what}: size {size} must hold {self.ndim} non-negative extents (m)")
        size = size + (0.0,) * (3 - self.ndim)
        for a in range(self.ndim):
            for corner in (center[a] - size[a] / 2, center[a] + size[a] / 2):
                if abs(corner) > self.size[a] / 2 * (1 + 1e-9):
                    raise ConfigurationError(
                        f"{what}: the box center {center[: self.ndim]} size {size[: self.ndim]} "
                        f"extends outside the domain along {AXES[a]}"
                    )
        slices = []
        for a in range(3):
            if a >= self.ndim:
                slices.append(slice(0, 1))
                continue
            offset = self.offsets(component)[a]
            origin = -self.size[a] / 2 + offset * self.spacing[a]
            low = math.ceil((center[a] - size[a] / 2 - origin) / self.spacing[a] - 1e-9)
            high = math.floor((center[a] + size[a] / 2 - origin) / self.spacing[a] + 1e-9)
            low, high = max(low, 0), min(high, self.shape[a] - 1)
            if high < low:  # a box thinner than a cell: take the nearest node
                low = high = self.nearest_index(component, center)[a]
            slices.append(slice(low, high + 1))
        return tuple(slices)

    def cell_counts(self, center, size) -> tuple[int, ...]:
        """Number of cells (integer nodes) per axis in the box ``center +- size/2`` (m).

        This is the shape a :class:`~mindelec.fdtd.DesignRegion` permittivity tensor must have.
        """
        slices = self.index_range(center, size, None, "box")
        return tuple(s.stop - s.start for s in slices[: self.ndim])
