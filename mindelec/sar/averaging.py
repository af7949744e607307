"""Local SAR and its average over cubes of a given mass (1 g, 10 g), as IEEE Std 1528 and IEC/IEEE 62209-1528
define the peak spatial-average SAR.

* :func:`local_sar` - ``SAR = sigma |E|^2 / (2 rho)`` (W/kg) from peak phasors ``E`` (V/m).
* :func:`mass_averaged_sar` - the peak spatial-average SAR: the largest mean of the local SAR over a cube of
  tissue of the given mass (side ``L = (m / rho)^(1/3)``: 10 mm for 1 g and 21.54 mm for 10 g at
  1000 kg/m^3), over all the cube positions on the voxel grid.

The voxels are the cells of a regular grid, each with one SAR value (its mean) and the fraction of it that is
tissue. A cube's side is rarely a whole number of cells, ``L = (n + f) h``: along each axis the cube covers
``n`` whole cells and the fraction ``f`` of one more, at either end. The cube positions are all those whose
faces lie on cell faces at one end of each axis (the low or the high one; 8 families), the fractional cell's
voxel weighted by ``f``. Along an axis the window sums are differences of cumulative sums, so the whole search
is a few tensor operations, no loop over cells.

Surface: a cube counts only when it lies wholly inside the tissue (its tissue volume is ``L^3``, no air in
it), as the standards require. Since every position with a face on a cell face is searched, a cube with a
face on a grid-aligned tissue surface (the liquid surface of a flat phantom, where the peak cube sits) is
among them: this is the standard's measurement case, where the SAR is extrapolated to the surface and the
cube's face touches it. Tissue regions too small to hold one cube are refused (the computational standard's
cube extension for curved surfaces, IEC/IEEE 62704-1, is not done here).
"""

import dataclasses
import math

import torch

from common.errors import ConfigurationError, DataError

from .tissue import TISSUE_DENSITY

#: a cube is wholly in the tissue when its tissue volume reaches ``(1 - FULL_TOLERANCE) L^3`` (round-off)
FULL_TOLERANCE = 1e-6


def _positive(value, name, owner):
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{owner}: {name} must be a positive finite number, got {value}")
    return value


def local_sar(field, conductivity, density=TISSUE_DENSITY):
    """Local SAR ``sigma |E|^2 / (2 rho)`` (W/kg) of peak phasors.

    Args:
        field: ``(3, *shape)`` complex (or real) tensor, the E field's peak phasor (V/m), components first.
        conductivity: (S/m, >= 0), a number or a tensor broadcastable to ``shape``.
        density: (kg/m^3, > 0), a number.

    Returns:
        ``shape`` float64 tensor (W/kg).

    Raises:
        DataError: for a NaN or infinite field or conductivity.
        ConfigurationError: for a field without 3 components, a negative conductivity, a density not positive.
    """
    owner = "local_sar"
    field = torch.as_tensor(field)
    if field.ndim < 1 or field.shape[0] != 3:
        raise ConfigurationError(
            f"{owner}: field must have shape (3, ...): Ex, Ey, Ez first; got {tuple(field.shape)}"
        )
    if not bool(torch.isfinite(field).all()):
        raise DataError(f"{owner}: field holds NaN or infinite values")
    conductivity = torch.as_tensor(conductivity, dtype=torch.float64)
    if not bool(torch.isfinite(conductivity).all()):
        raise DataError(f"{owner}: conductivity holds NaN or infinite values")
    if bool((conductivity < 0).any()):
        raise ConfigurationError(f"{owner}: conductivity must be >= 0 (S/m)")
    density = _positive(density, "density (kg/m^3)", owner)
    intensity = (field.abs().to(torch.float64) ** 2).sum(0)
    return conductivity * intensity / (2 * density)


@dataclasses.dataclass(frozen=True)
class CubeAverage:
    """The peak spatial-average SAR found by :func:`mass_averaged_sar`.

    Attributes:
        value: the largest cube mean of the local SAR (W/kg).
        center: the centre of that cube (m), 3 coordinates in the frame of the voxels' ``origin``.
        mass: the cube's mass (kg); ``side``: its edge (m).
        positions: how many cube positions lay wholly inside the tissue.
    """

    value: float
    center: tuple
    mass: float
    side: float
    positions: int


def _windows(values, axis, whole, fraction):
    """Window sums of ``values`` along ``axis`` over ``whole`` cells plus ``fraction`` of one more, each with
    the coordinate (in cells) of its low face: a list of ``(sums, low faces)``, one per anchoring."""
    count = values.shape[axis]
    shape = list(values.shape)
    shape[axis] = 1
    cumulative = torch.cat([values.new_zeros(shape), values.cumsum(axis)], axis)
    full = cumulative.narrow(axis, whole, count + 1 - whole) - cumulative.narrow(axis, 0, count + 1 - whole)
    starts = torch.arange(count + 1 - whole, dtype=torch.float64)
    if fraction == 0.0:
        return [(full, starts)]
    span = count - whole  # positions with the extra cell inside the grid
    low = full.narrow(axis, 0, span) + fraction * values.narrow(axis, whole, span)
    high = full.narrow(axis, 1, span) + fraction * values.narrow(axis, 0, span)
    return [(low, starts[:span]), (high, starts[1 : span + 1] - fraction)]


def _voxels(sar, spacing, tissue, owner):
    """``(sar, spacing, tissue fraction)`` checked: a finite 3D float64 tensor, 3 positive lengths (m) and a
    tissue tensor of the same shape (all tissue by default)."""
    sar = torch.as_tensor(sar, dtype=torch.float64)
    if sar.ndim != 3:
        raise ConfigurationError(f"{owner}: sar must be a 3D tensor (nx, ny, nz), not {tuple(sar.shape)}")
    if not bool(torch.isfinite(sar).all()):
        raise DataError(f"{owner}: sar holds NaN or infinite values")
    spacing = (spacing,) * 3 if isinstance(spacing, (int, float)) else tuple(spacing)
    if len(spacing) != 3:
        raise ConfigurationError(f"{owner}: spacing needs 1 or 3 lengths (m), got {spacing}")
    spacing = tuple(_positive(h, "spacing (m)", owner) for h in spacing)
    tissue = torch.ones_like(sar) if tissue is None else torch.as_tensor(tissue).to(torch.float64)
    if tissue.shape != sar.shape:
        raise ConfigurationError(
            f"{owner}: tissue has shape {tuple(tissue.shape)}, sar {tuple(sar.shape)}: they must match"
        )
    return sar, spacing, tissue


def _split(extent):
    """``(whole cells, fraction)`` of a cube side of ``extent`` cells (a fraction within round-off snaps)."""
    whole = math.floor(extent + 1e-9)
    fraction = extent - whole
    return whole, 0.0 if abs(fraction) < 1e-9 else fraction


def mass_averaged_sar(sar, spacing, mass, density=TISSUE_DENSITY, tissue=None, origin=(0.0, 0.0, 0.0)):
    """The peak spatial-average SAR over cubes of ``mass`` wholly inside the tissue (module docstring).

    Args:
        sar: ``(nx, ny, nz)`` tensor, the local SAR of each voxel (W/kg), e.g. from :func:`local_sar`.
        spacing: the voxels' edges ``(dx, dy, dz)`` (m), or one length.
        mass: the averaging mass (kg): ``1e-3`` for 1 g, ``1e-2`` for 10 g.
        density: the tissue's mass density (kg/m^3), uniform.
        tissue: ``(nx, ny, nz)`` tensor, the tissue fraction of each voxel (0-1, or bool); default all tissue.
        origin: the low corner of voxel ``(0, 0, 0)`` (m), for the reported centre.

    Returns:
        :class:`CubeAverage`.

    Raises:
        ConfigurationError: for a mass or density not positive, bad spacing or shapes, or a tissue region
            that holds no cube of that mass.
        DataError: for NaN or infinite SAR values.
    """
    owner = "mass_averaged_sar"
    mass = _positive(mass, "mass (kg)", owner)
    density = _positive(density, "density (kg/m^3)", owner)
    sar, spacing, tissue = _voxels(sar, spacing, tissue, owner)
    side = (mass / density) ** (1 / 3)
    cells = [side / h for h in spacing]
    too_long = [a for a in range(3) if cells[a] > sar.shape[a] + 1e-9]
    if too_long:
        a = too_long[0]
        raise ConfigurationError(
            f"{owner}: a cube of {mass * 1e3:g} g (side {side * 1e3:.4g} mm) is longer than the voxel grid "
            f"along axis {a} ({sar.shape[a]} voxels of {spacing[a] * 1e3:.4g} mm)"
        )
    families = [(torch.stack([sar * tissue, tissue]), ())]  # (SAR x tissue, tissue) window sums
    for a, extent in enumerate(cells):
        families = [
            (sums, starts + (faces,))
            for values, starts in families
            for sums, faces in _windows(values, a + 1, *_split(extent))
        ]
    volume = math.prod(cells)  # the cube's volume in voxels
    best, found = (-math.inf, None), 0
    for sums, starts in families:
        valid = sums[1] >= (1 - FULL_TOLERANCE) * volume
        found += int(valid.sum())
        means = torch.where(valid, sums[0] / volume, torch.tensor(-math.inf, dtype=torch.float64))
        index = int(means.argmax())
        if bool(valid.any()) and float(means.reshape(-1)[index]) > best[0]:
            position = torch.unravel_index(torch.tensor(index), means.shape)
            low = [float(starts[a][int(position[a])]) for a in range(3)]
            center = tuple(float(o) + (c + e / 2) * h for o, c, e, h in zip(origin, low, cells, spacing))
            best = (float(means.reshape(-1)[index]), center)
    if best[1] is None:
        raise ConfigurationError(
            f"{owner}: no cube of {mass * 1e3:g} g (side {side * 1e3:.4g} mm) fits wholly inside the tissue"
        )
    return CubeAverage(value=best[0], center=best[1], mass=mass, side=side, positions=found)


__all__ = ["local_sar", "mass_averaged_sar", "CubeAverage", "FULL_TOLERANCE"]
