"""Pictures of an FDTD set-up: :func:`plot_simulation` (``Simulation.plot``) and :func:`outline_structures`.

``plot_simulation`` draws a cross-section of the relative permittivity (the fill-fraction mean of the
media over each cell, as the run sees it, ``eps_inf`` for dispersive media; PEC in a metal colour;
each structure's boundary outlined) with, on top:

* sources: point sources as stars, extended sources as outlines (a line or a box), plane waves as a
  dashed line at their TF/SF plane;
* monitors: probes as dots, DFT and flux monitors as outlines of their line, plane or box (a monitor
  over the whole domain is not drawn); waveguide ports (monitors named ``"port:<name>"``, see
  :class:`mindelec.ports.WaveguidePort`) in their own colour;
* PML slabs as translucent bands; design regions as hatched boxes.

Every artist carries a label naming its object (``"source 0: PointDipole"``, ``"monitor probe"``,
``"PML x-"``...; a named structure, e.g. a CAD body, ``"structure 3: battery"``, with its name written
on the picture), so a legend or a test can find it. In 3D the section is the plane ``normal = position``;
in 2D the whole domain; in 1D a line plot of the permittivity along x with the objects as vertical lines.
Lengths are shown in the largest of m, mm, um, nm that keeps the domain at least one unit wide.
"""

import torch

from common.errors import ConfigurationError

from .grid import AXES

_UNITS = ((1.0, "m"), (1e-3, "mm"), (1e-6, "um"), (1e-9, "nm"))
_SOURCE_COLOUR, _MONITOR_COLOUR, _PORT_COLOUR = "tab:red", "tab:blue", "tab:green"


def length_unit(size) -> tuple[float, str]:
    """``(metres per unit, unit name)``: the largest unit in which the widest extent (m) is at least 1."""
    widest = max(size)
    for scale, name in _UNITS:
        if widest >= scale:
            return scale, name
    return _UNITS[-1]


class _Section:
    """The plotted plane: which grid axes are drawn and where the plane cuts the normal axis (3D)."""

    def __init__(self, grid, normal, position):
        self.grid = grid
        self.scale, self.unit = length_unit(grid.size[: grid.ndim])
        if grid.ndim < 3:
            self.axes, self.normal, self.position = tuple(range(grid.ndim)), None, None
            return
        if normal not in AXES:
            raise ConfigurationError(f"Simulation.plot: normal must be 'x', 'y' or 'z' in 3D, got {normal!r}")
        self.normal = AXES.index(normal)
        half = grid.size[self.normal] / 2
        self.position = float(position)
        if not -half <= self.position <= half:
            raise ConfigurationError(
                f"Simulation.plot: the plane {normal} = {self.position:g} m lies outside the domain "
                f"[-{half:g}, {half:g}] m along {normal}"
            )
        self.axes = tuple(a for a in range(3) if a != self.normal)

    def centers(self):
        """Cell-centre coordinates (m) per simulated axis: the integer nodes, one node on the plane."""
        grid = self.grid
        centers = [grid.coordinates(None, a, torch.float64) for a in range(grid.ndim)]
        if self.normal is not None:
            centers[self.normal] = torch.tensor([self.position], dtype=torch.float64)
        return centers

    def extent(self):
        """``[left, right, bottom, top]`` of the drawn plane, in the display unit."""
        return [
            bound / self.scale for a in self.axes for bound in (-self.grid.size[a] / 2, self.grid.size[a] / 2)
        ]

    def cuts(self, center, size):
        """Whether a box ``center +- size/2`` (3 coordinates each, m) meets the plane (within half a cell)."""
        if self.normal is None:
            return True
        return abs(self.position - center[self.normal]) <= size[self.normal] / 2 + self.grid.spacing[
            self.normal
        ] / 2 * (1 + 1e-9)


def structure_fills(sim, section):
    """Per structure, its fill fraction on the section's cells: tensors of the section's shape."""
    from common.geometry import rasterize

    centers = section.centers()
    spacing = list(sim.grid.spacing[: sim.grid.ndim])
    shape = [len(centers[a]) for a in section.axes]
    return [
        torch.as_tensor(rasterize(s.geometry, centers, spacing, supersample=4)).reshape(shape)
        for s in sim.structures
    ]


def permittivity_section(sim, section, fills):
    """``(relative permittivity, PEC fill)`` on the section's cells (structures mixed as the run does: an
    ``AxialConductivity``, a lumped resistor's medium, leaves the permittivity beneath it)."""
    from .materials import PEC, AxialConductivity

    def value(medium):
        return float(torch.as_tensor(medium.permittivity).detach().mean())

    permittivity = torch.full(
        fills[0].shape if fills else (1,), value(sim.default_medium), dtype=torch.float64
    )
    conductor = torch.zeros_like(permittivity)
    for structure, fill in zip(sim.structures, fills):
        if isinstance(structure.medium, AxialConductivity):
            continue
        medium = sim.default_medium if isinstance(structure.medium, PEC) else structure.medium
        permittivity = permittivity * (1 - fill) + fill * value(medium)
        conductor = conductor * (1 - fill) + fill * float(isinstance(structure.medium, PEC))
    return permittivity, conductor


def outline_structures(sim, ax, fills=None, section=None, colors="white"):
    """Draw each structure's boundary (the 0.5 contour of its fill fraction) on a 2D picture ``ax``.

    Args:
        sim: the :class:`~mindelec.fdtd.Simulation`.
        ax: a matplotlib Axes showing the domain (3D: the ``z = 0`` plane unless ``section`` says
            otherwise) in the unit of :func:`length_unit`.
        fills, section: precomputed by :func:`plot_simulation` (default: computed here).
        colors: the contour colour.

    Returns:
        the list of contour sets drawn (one per structure that crosses the plane).
    """
    section = section or _Section(sim.grid, "z", 0.0)
    fills = structure_fills(sim, section) if fills is None else fills
    if sim.grid.ndim == 1:
        return []
    coordinates = [sim.grid.coordinates(None, a, torch.float64) / section.scale for a in section.axes]
    drawn = []
    for index, fill in enumerate(fills):
        if float(fill.min()) >= 0.5 or float(fill.max()) <= 0.5:
            continue
        contour = ax.contour(
            coordinates[0].numpy(),
            coordinates[1].numpy(),
            fill.T.numpy(),
            levels=[0.5],
            colors=colors,
            linewidths=1.0,
        )
        name = getattr(sim.structures[index], "name", None)
        contour.set_label(f"structure {index}" if name is None else f"structure {index}: {name}")
        drawn.append(contour)
        if name is not None:  # a named structure (a CAD body) is labelled where it is drawn
            cells = (fill >= 0.5).nonzero().double()
            inside = cells[(cells - cells.mean(0)).square().sum(1).argmin()].long()  # nearest the middle
            ax.annotate(name, (float(coordinates[0][inside[0]]), float(coordinates[1][inside[1]])),
                        color=colors, fontsize=7, ha="center", va="center")
    return drawn


def _padded(values, ndim):
    return tuple(float(v) for v in values) + (0.0,) * (3 - ndim)


def _footprint(obj, grid):
    """``(center, size)`` (3 coordinates each, m) of a source or monitor, or ``None`` if it has no place."""
    if getattr(obj, "position", None) is not None:
        return _padded(obj.position, grid.ndim), (0.0, 0.0, 0.0)
    center = getattr(obj, "center", None)
    if center is None:
        return None  # whole-domain DFT monitors, snapshots
    size = getattr(obj, "size", None)
    return _padded(center, grid.ndim), _padded(size or (0.0,) * grid.ndim, grid.ndim)


def _draw_box(ax, section, center, size, colour, label, hatch=None):
    """A point, line or rectangle (the in-plane projection of the box), labelled."""
    from matplotlib.patches import Rectangle

    (u, v) = section.axes
    low = [(center[a] - size[a] / 2) / section.scale for a in (u, v)]
    width, height = size[u] / section.scale, size[v] / section.scale
    if width == 0 and height == 0:
        (artist,) = ax.plot([low[0]], [low[1]], "*", color=colour, markersize=11, label=label)
        return artist
    artist = Rectangle(
        low, width, height, fill=False, edgecolor=colour, linewidth=2, hatch=hatch, label=label
    )
    ax.add_patch(artist)
    return artist


def _draw_object(ax, section, obj, colour, label):
    from .sources import PlaneWave

    grid = section.grid
    if isinstance(obj, PlaneWave):
        if grid.ndim == 1 or section.axes[0] == 0:
            return ax.axvline(obj.x0 / section.scale, color=colour, linestyle="--", label=label)
        return None  # a section normal to x: the TF/SF plane is parallel to it
    footprint = _footprint(obj, grid)
    if footprint is None or not section.cuts(*footprint):
        return None
    center, size = footprint
    if grid.ndim == 1:
        return ax.axvline(center[0] / section.scale, color=colour, label=label)
    if size == (0.0, 0.0, 0.0) and colour != _SOURCE_COLOUR:  # probes: dots, not stars
        (a, b) = section.axes
        (artist,) = ax.plot(
            [center[a] / section.scale], [center[b] / section.scale], "o", color=colour, label=label
        )
        return artist
    return _draw_box(ax, section, center, size, colour, label)


def _draw_pml(ax, section, sim):
    from .boundaries import PML

    drawn = []
    for slot, a in enumerate(section.axes):
        boundary = sim.boundaries[a]
        if not isinstance(boundary, PML):
            continue
        depth = boundary.thickness * sim.grid.spacing[a] / section.scale
        half = sim.grid.size[a] / 2 / section.scale
        for side, start in (("-", -half), ("+", half - depth)):
            label = f"PML {AXES[a]}{side}"
            span = ax.axvspan if slot == 0 else ax.axhspan
            drawn.append(span(start, start + depth, color="tab:gray", alpha=0.3, label=label))
    return drawn


def _draw_medium(ax, sim, section, fills):
    import numpy as np

    permittivity, conductor = permittivity_section(sim, section, fills)
    if sim.grid.ndim == 1:
        x = sim.grid.coordinates(None, 0, torch.float64) / section.scale
        ax.plot(x.numpy(), permittivity.numpy(), color="black", label="permittivity")
        ax.set_ylabel("relative permittivity")
        return
    low, high = float(permittivity.min()), float(permittivity.max())
    image = ax.imshow(
        permittivity.T.numpy(),
        origin="lower",
        extent=section.extent(),
        cmap="Greys",
        vmin=low,
        vmax=high if high > low else low + 1,
        interpolation="nearest",
    )
    ax.figure.colorbar(image, ax=ax, label="relative permittivity")
    if float(conductor.max()) > 0.5:
        mask = np.ma.masked_where(conductor.T.numpy() <= 0.5, np.ones(conductor.T.shape))
        ax.imshow(mask, origin="lower", extent=section.extent(), cmap="copper", vmin=0, vmax=1, label="PEC")
    outline_structures(sim, ax, fills, section, colors="tab:orange")


def plot_simulation(sim, normal="z", position=0.0, ax=None):
    """Draw ``sim``'s set-up; see the module docstring. Returns the matplotlib Axes.

    Args:
        sim: the :class:`~mindelec.fdtd.Simulation`.
        normal: 3D only: the axis normal to the drawn plane, ``"x"``, ``"y"`` or ``"z"``.
        position: 3D only: where the plane cuts that axis (m), inside the domain.
        ax: an Axes to draw into (default: a new figure's).

    Raises:
        ValueError: for a plane outside the domain or an unknown normal (3D).
    """
    import matplotlib.pyplot as plt

    section = _Section(sim.grid, normal, position)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 5) if sim.grid.ndim > 1 else (6, 3.5))
    fills = structure_fills(sim, section)
    _draw_medium(ax, sim, section, fills)
    _draw_pml(ax, section, sim)
    for index, region in enumerate(sim.design_regions):
        center, size = _padded(region.center, sim.grid.ndim), _padded(region.size, sim.grid.ndim)
        if sim.grid.ndim > 1 and section.cuts(center, size):
            _draw_box(ax, section, center, size, "tab:purple", f"design region {index}", hatch="//")
    for index, source in enumerate(sim.sources):
        _draw_object(ax, section, source, _SOURCE_COLOUR, f"source {index}: {type(source).__name__}")
    for monitor in sim.monitors:
        port = monitor.name.startswith("port:")
        label = f"port {monitor.name[5:]}" if port else f"monitor {monitor.name}"
        _draw_object(ax, section, monitor, _PORT_COLOUR if port else _MONITOR_COLOUR, label)
    names = [AXES[a] for a in section.axes]
    ax.set_xlabel(f"{names[0]} ({section.unit})")
    if sim.grid.ndim > 1:
        ax.set_ylabel(f"{names[1]} ({section.unit})")
        ax.set_aspect("equal")
    if section.normal is not None:
        ax.set_title(f"{AXES[section.normal]} = {section.position / section.scale:g} {section.unit}")
    return ax
