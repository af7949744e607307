"""Where things sit in an FDTD set-up: refusals and warnings instead of silently wrong numbers.

A PML absorbs what enters it, so anything measured in it is measured wrong: a flux box that reached into a
PML read 44 % and then 99 % low, silently. :func:`check_monitor_placement` refuses a monitor (a probe, a
flux plane or box, a near-to-far surface, a DFT box, a mode monitor) that lies in or touches a PML, naming
the monitor, the axis and how many cells it must move in; along an axis it spans whole (a field map of
the domain, a cross-section such as a mode port) the PML is crossed on purpose and left alone.
:func:`check_source_placement` warns about a current source inside a PML (part of what it radiates is
absorbed as it is emitted), and :func:`check_structure_placement` about a structure wholly outside the
domain (it changes nothing). The grid itself warns when the domain is not a whole number of cells
(:class:`~mindelec.fdtd.grid.Grid`). :func:`check_line_return` refuses a mode port on a transmission line
(metal on its plane) whose only return conductor would be walls the simulation does not have.
"""

from __future__ import annotations

import warnings

from common.errors import ConfigurationError

from .boundaries import PML
from .grid import AXES

__all__ = ["PlacementWarning", "check_monitor_placement", "check_source_placement",
           "check_structure_placement", "check_line_return"]


class PlacementWarning(UserWarning):
    """Something sits where it will not do what it looks like (a source in a PML, a structure outside)."""


def _pml_cells(boundaries, axis):
    boundary = boundaries[axis] if axis < len(boundaries) else None
    return boundary.thickness if isinstance(boundary, PML) else 0


def _spans_axis(index_slice, cells):
    """Whether a slice covers a whole axis: a cross-section across the domain (a mode port, a plane of
    infinite extent) crosses the PML on purpose, its mode or field decaying there."""
    return index_slice.start <= 1 and index_slice.stop >= cells  # node 0 is the wall, read or not


def check_monitor_placement(monitor, recorder, grid, boundaries):
    """Refuse a monitor whose index boxes touch a PML along an axis they do not span whole:
    ConfigurationError naming the monitor, the axis, the PML's cells and the cells to move it in."""
    for box in recorder.index_boxes():
        for axis in range(grid.ndim):
            cells = _pml_cells(boundaries, axis)
            if not cells:
                continue
            low, high = box[axis].start, box[axis].stop - 1
            last = grid.shape[axis] - cells
            if (low >= cells and high < last) or _spans_axis(box[axis], grid.shape[axis]):
                continue
            inward = max(cells - low, high - last + 1)
            raise ConfigurationError(
                f"{monitor!r} reaches into the PML along {AXES[axis]} (its cells {low}..{high}, the PML "
                f"cells 0..{cells - 1} and {last}..{grid.shape[axis] - 1}): what it measures there is "
                f"absorbed; move it {inward} cell(s) inward, or make the domain larger")


def check_source_placement(source, slices, grid, boundaries):
    """Warn about a current source whose cells lie in a PML."""
    for axis in range(grid.ndim):
        cells = _pml_cells(boundaries, axis)
        if _spans_axis(slices[axis], grid.shape[axis]):
            continue
        if cells and (slices[axis].start < cells or slices[axis].stop > grid.shape[axis] - cells):
            warnings.warn(f"{source!r} lies in the PML along {AXES[axis]} ({cells} cells at each end): part "
                          "of what it radiates is absorbed as it is emitted", PlacementWarning, stacklevel=5)
            return


def check_structure_placement(structure, grid):
    """Warn about a structure whose bounding box lies wholly outside the domain."""
    try:
        lower, upper = structure.geometry.bounds_float64
    except (AttributeError, NotImplementedError):
        return
    for axis in range(grid.ndim):
        half = grid.size[axis] / 2
        if float(upper[axis]) < -half or float(lower[axis]) > half:
            warnings.warn(f"{structure!r} lies wholly outside the domain along {AXES[axis]} (the domain "
                          f"spans {-half:g} to {half:g} m): it changes nothing",
                          PlacementWarning, stacklevel=5)
            return


def check_line_return(monitor, boundaries):
    """Refuse a mode monitor whose plane cuts metal (a transmission line) when the line's only return
    conductor is the mode solver's PEC walls and the simulation has no PEC wall along y or z.

    The port's mode solver (:class:`~mindelec.fdtd.CrossSection`) closes the plane with PEC walls, the ground
    of its line; in the FDTD a PML or periodic boundary is not metal, so a line whose ground is those walls
    alone (a strip with no ground plane or shield) has no return conductor there and its port's mode is not
    the FDTD's. ConfigurationError naming the monitor and the boundaries.
    """
    from .materials import PEC

    section = getattr(monitor, "cross_section", None)
    if section is None or getattr(section, "conductor", None) is None or len(boundaries) < 3:
        return
    if any(isinstance(boundaries[axis], PEC) for axis in (1, 2)) or section.has_return_conductor:
        return
    raise ConfigurationError(
        f"{monitor!r}: the line on its plane has no return conductor: no metal on the plane is joined to "
        f"the walls, and the boundaries along y and z ({boundaries[1]!r}, {boundaries[2]!r}) are not metal; "
        "add a ground plane or shield (a PEC structure or pec_sheet reaching the walls) or make the boundary "
        "along y or z PEC()"
    )
