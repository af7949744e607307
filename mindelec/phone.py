"""The reference phone (:mod:`mindelec.cad_phone`) as an FDTD simulation, its figures of merit, and a
``common.datasets`` generator over its design space.

* :func:`phone_simulation` - a :class:`~mindelec.cad_phone.PhoneDesign` (or the stored
  ``mindelec/examples/phone.step``) loaded through its STEP file (:func:`mindelec.cad_assembly.load_step`)
  with the media of ``phone_materials.toml`` (:func:`phone_materials`), moved by less than ``align`` so
  that the feed pin's foot (on the ground copper, at the ground plane's edge) lies on a node, and fed by a
  50 ohm ``LumpedPort`` across one cell between the copper and the feed pin (the CAD's feed gap becomes
  one cell, or ``port_gap`` in whole cells: the port needs whole Yee edges); the pin a PEC wire from there
  to the arm's node plane; a near-to-far box monitor (``"far"``) 2 cells inside the PML. The bodies are
  rasterised as boxes and box CSG (:func:`box_geometries`): the phone's parts are boxes, and a triangle-mesh
  parity test per sample point takes minutes on a million-cell grid.
* :func:`figures_of_merit` - from a run: S11, accepted and incident power at the port, the radiated power
  (the box's flux), radiation and total efficiency on the far monitor's frequencies.
* :func:`resonances` - the ``|S11|`` minima below -6 dB, refined by a parabola.
* :class:`PhantomPlacement` and :func:`phone_sar` - the phone under a flat phantom of head liquid
  (:class:`mindelec.sar.FlatPhantom`), its display towards it at a given spacing: the 1 g and 10 g SAR per
  watt accepted and per watt incident, and where the accepted power goes (radiated, absorbed in the
  phantom, lost in the phone).
* :func:`phone_sample` - the dataset generator (``common.datasets`` contract): complex S11 and total
  efficiency of one design over a band, with the design as the grid draws it (``*_used``: the arm height
  and the feed-to-short distance snap to whole cells; where the arm is a wire, its length too, and its
  line to a node; staircased rims to node lines); with ``on_grid`` each design first goes through
  :func:`design_on_grid`, which moves its feed-to-short distance and clearance by under half a cell so
  that the phone need not move and every design's housing, board and frame lie on the same cells.

The grid's nodes lie on multiples of the cell from the domain's centre; the phone's origin is its centre
(:func:`mindelec.cad_phone.write_phone_step`). Lengths in m, frequencies in Hz; ``PhoneDesign`` is in mm.
"""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile
import time

import numpy as np
import torch

from common import checks
from common.errors import ConfigurationError, NonFiniteResultError

from . import cad, cad_assembly, cad_grid, cad_phone, sar
from .fdtd.materials import PECSheet

__all__ = [
    "PhoneModel",
    "PhantomPlacement",
    "phone_sar",
    "phone_materials",
    "box_geometries",
    "phone_simulation",
    "figures_of_merit",
    "resonances",
    "phone_sample",
    "design_on_grid",
    "DESIGN_PARAMETERS",
]

HOUSING_WALL = 1e-3  # the tray's wall of mindelec.cad_phone.build_phone (m)
DESIGN_PARAMETERS = ("antenna_length", "antenna_height", "feed_to_short", "clearance", "frame_gap")


def phone_materials(lossless: bool = False) -> dict:
    """The phone's materials table (``phone_materials.toml`` as a dict), every conductivity removed when
    ``lossless`` (for the power-balance check: then all accepted power is radiated)."""
    import tomllib

    table = tomllib.loads(cad_phone.EXAMPLE_MATERIALS.read_text())["materials"]
    if lossless:
        table = {
            name: {k: v for k, v in spec.items() if k != "conductivity"} if isinstance(spec, dict) else spec
            for name, spec in table.items()
        }
    return table


def box_geometries(assembly, structures) -> list:
    """The structures with their CAD meshes replaced by the same shapes as boxes and box CSG.

    The phone's bodies are boxes (volume equal to their bounding box's; the frame is six plates) and the
    housing a tray (its bounding box less a cavity open at the top, ``HOUSING_WALL`` thick). Sheets and
    wires stay as they are.

    Raises:
        ConfigurationError: naming a body that is none of these and not a box.
    """
    from common.geometry import Box

    from . import fdtd

    replaced = []
    for structure in structures:
        if not isinstance(structure.geometry, cad.MeshGeometry):
            replaced.append(structure)
            continue
        body = assembly.body(structure.name)
        lo, hi = body.bounds
        if structure.name == "housing":
            wall = HOUSING_WALL
            cavity = Box(lo + [wall, wall, wall], hi + [-wall, -wall, 1.0])
            geometry = Box(lo, hi) - cavity
        else:
            if abs(body.volume - np.prod(hi - lo)) > 1e-6 * np.prod(hi - lo):
                raise ConfigurationError(
                    f"box_geometries: body {body.name!r} is not a box; it needs its own replacement here")
            geometry = Box(lo, hi)
        replaced.append(fdtd.Structure(geometry, structure.medium, name=structure.name))
    return replaced


@dataclasses.dataclass(frozen=True)
class PhoneModel:
    """A phone set up for the FDTD (:func:`phone_simulation`).

    Attributes:
        simulation: the ``mindelec.fdtd.Simulation`` (monitors ``"feed"``, the port, and ``"far"``).
        port: the ``LumpedPort`` (50 ohm).
        assembly: the loaded, moved :class:`~mindelec.cad_assembly.Assembly`.
        drawn: the design as the grid draws it (mm): ``antenna_height`` (the arm's node plane above the
            copper's), ``feed_to_short`` (between the two pins' node lines), ``antenna_length`` (the
            arm's ends: a wire's on node lines), ``clearance`` (from the ground plane's edge to the
            board's end; the arm's line, on a node where it is a wire, follows from it), ``frame_gap``
            (between the left frame plates' rims, where the frame is sheets) and ``port_gap`` (one
            cell); with a phantom, ``phantom_spacing`` (from the display glass to the shell). Rims of
            sheets are where the CAD puts them with conformal cells, else on the node lines the
            staircase reaches (:func:`mindelec.cad_grid.drawn_bounds`).
        phantom: the :class:`~mindelec.sar.FlatPhantom` (monitor ``"phantom"``), or ``None``.
    """

    simulation: object
    port: object
    assembly: object
    drawn: dict
    phantom: object = None


@dataclasses.dataclass(frozen=True)
class PhantomPlacement:
    """Where :func:`phone_simulation` puts a flat phantom (:class:`mindelec.sar.FlatPhantom`): above the
    phone's display (``+z``), the liquid reaching ``margin`` beyond the phone's outline on every side.

    The liquid's faces go to the grid's node planes (the SAR voxels are the cells): its bottom surface to
    the first node plane at least ``spacing`` plus the 2 mm shell above the display glass, so the spacing
    drawn (``PhoneModel.drawn["phantom_spacing"]``) is up to a cell larger than asked.

    Attributes:
        frequency: the liquid's properties' and the SAR's frequency (Hz, 300 MHz - 6 GHz).
        spacing: from the display glass to the shell's outer face (m); IEC/IEEE 62209-1528 tests
            body-worn positions at 0-25 mm.
        margin: liquid beyond the phone's outline (m), default 30 mm.
        depth: the liquid's depth (m), default 60 mm (several skin depths above 300 MHz).
    """

    frequency: float
    spacing: float = 5e-3
    margin: float = 30e-3
    depth: float = 60e-3

    def __post_init__(self):
        owner = f"PhantomPlacement(frequency={self.frequency!r})"
        checks.non_negative(self.spacing, f"{owner}: spacing (m)")
        checks.positive(self.margin, f"{owner}: margin (m)")
        checks.positive(self.depth, f"{owner}: depth (m)")
        try:
            sar.head_tissue(self.frequency)
        except ConfigurationError as error:
            raise ConfigurationError(f"{owner}: {error}") from None

    def phantom(self, phone_low, phone_high, cell):
        """The :class:`~mindelec.sar.FlatPhantom` over a phone spanning ``phone_low``-``phone_high`` (m, 3
        each) on a grid whose nodes lie on multiples of ``cell`` (m)."""
        low = np.floor((np.asarray(phone_low[:2]) - self.margin) / cell) * cell
        high = np.ceil((np.asarray(phone_high[:2]) + self.margin) / cell) * cell
        surface = np.ceil((phone_high[2] + self.spacing + sar.phantom.SHELL_THICKNESS) / cell - 1e-9) * cell
        depth = max(1, round(self.depth / cell)) * cell
        return sar.FlatPhantom(self.frequency, surface=float(surface),
                               size=(*(float(v) for v in high - low), float(depth)),
                               center=tuple(float(v) for v in (low + high) / 2))


def _load(design, lossless):
    """The assembly of ``design`` (``None``: the stored example STEP file), with the phone's media."""
    materials = phone_materials(lossless)
    if design is None:
        return cad_assembly.load_step(cad_phone.EXAMPLE_STEP, tolerance=1e-4, materials=materials)
    with tempfile.TemporaryDirectory() as folder:
        path = cad_phone.write_phone_step(pathlib.Path(folder) / "phone.step", design)
        return cad_assembly.load_step(path, tolerance=1e-4, materials=materials)


def phone_simulation(
    design: cad_phone.PhoneDesign | None = None,
    cell: float = 1.5e-3,
    lossless: bool = False,
    align: float | None = None,
    frequencies=None,
    far_frequencies=None,
    band: tuple[float, float] = (0.5e9, 3.5e9),
    air: float = 15e-3,
    pml: int = 10,
    threads: int = 1,
    phantom: PhantomPlacement | None = None,
    subpixel: bool | str = False,
    wires: str = "bare",
    port_gap: float | None = None,
) -> PhoneModel:
    """The phone of ``design`` on a uniform grid of ``cell`` (m), fed at its feed pin (see the module).

    Args:
        design: a :class:`~mindelec.cad_phone.PhoneDesign` (mm), written to STEP and read back; ``None``:
            ``mindelec/examples/phone.step`` (the default design).
        cell: the cell edge (m).
        lossless: drop every conductivity (the power-balance check).
        align: the feed's foot goes to the nearest multiple of this (m; a multiple of ``cell``; default
            ``cell``): with 3 mm, grids of 1.5, 1.0 and 0.75 mm see the phone at the same place.
        frequencies: ``(F,)`` the port's frequencies (Hz); default 151 over ``band``.
        far_frequencies: ``(G,)`` the near-to-far box's (Hz); default every 0.1 GHz inside ``band``.
        band: the Gaussian pulse's band (Hz).
        air: air between the phone (and the phantom) and the PML (m); pml: PML cells.
        phantom: a :class:`PhantomPlacement`: a flat phantom over the display, its E-field monitor
            (``"phantom"``), and its frequency added to the port's and the far box's (:func:`phone_sar`).
        subpixel: ``True``: conformal metal and smoothed dielectric interfaces (``Simulation(subpixel=)``).
        wires: the pins (and, on cells of 1 mm or more, the arm and its stubs), thinner than a cell:
            ``"bare"`` lines of zeroed edges, which act as wires of 0.2 cells' radius, so their inductance
            changes with the cells; ``"thin"``: :class:`~mindelec.fdtd.ThinWire` of the CAD
            cross-section's equivalent radius, joined to the metal they meet
            (:func:`mindelec.cad_grid.assembly_structures`), the feed pin's with the port's gap.
        port_gap: the port's gap above the copper (m): whole cells, the pin from its top to the arm;
            default one cell. A convergence study that keeps it (1.5 mm on 1.5, 0.75 and 0.5 mm cells)
            refines one model; the default's gap shrinks with the cells.

    Returns:
        :class:`PhoneModel`.

    Raises:
        ConfigurationError: for a cell or ``align`` that is not a positive length, ``air`` not a
            non-negative one, ``pml`` or ``threads`` not a positive int, an ``align`` that is not a
            multiple of the cell, a ``port_gap`` that is not a whole number of cells, or a design whose
            arm does not lie at least a cell above the port's gap; the design's own checks
            (:meth:`~mindelec.cad_phone.PhoneDesign.check`).
    """
    from . import fdtd

    cell = checks.positive(cell, "phone_simulation: cell (m)")
    align = cell if align is None else checks.positive(align, "phone_simulation: align (m)")
    air = checks.non_negative(air, "phone_simulation: air (m)")
    pml = checks.positive_int(pml, "phone_simulation: pml (cells)")
    threads = checks.positive_int(threads, "phone_simulation: threads")
    if phantom is not None and not isinstance(phantom, PhantomPlacement):
        raise ConfigurationError(f"phone_simulation: phantom must be a PhantomPlacement, got {phantom!r}")
    if abs(align / cell - round(align / cell)) > 1e-9:
        raise ConfigurationError(
            f"phone_simulation: cell {cell} m must be positive and align {align} m a multiple of it")
    gap_cells = _whole_cells(port_gap, cell)
    frequencies = np.linspace(*band, 151) if frequencies is None else np.asarray(frequencies, dtype=float)
    if far_frequencies is None:
        far_frequencies = np.arange(np.ceil(band[0] / 1e8) * 1e8, band[1] + 1.0, 1e8)
    if phantom is not None:
        frequencies = np.union1d(frequencies, [phantom.frequency])
        far_frequencies = np.union1d(far_frequencies, [phantom.frequency])
    frequencies = torch.as_tensor(frequencies, dtype=torch.float64)
    assembly = _load(design, lossless)
    pin, ground = assembly.body("ifa_feed_pin"), assembly.body("ground_plane")
    # the feed: under the pin's centre line, at the ground plane's edge (y) and on its copper (z)
    feed = np.array([pin.bounds.mean(0)[0], ground.bounds[1][1], ground.bounds.mean(0)[2]])
    foot = np.round(feed / align) * align
    lo = np.min([body.bounds[0] for body in assembly.bodies], axis=0) + foot - feed
    hi = np.max([body.bounds[1] for body in assembly.bodies], axis=0) + foot - feed
    flat = None
    if phantom is not None:  # phone and phantom centred together (the domain is centred on the origin)
        outer = phantom.phantom(lo, hi, cell).outer_box()
        shift = -np.round((np.minimum(lo, outer[0]) + np.maximum(hi, outer[1])) / 2 / align) * align
        foot, lo, hi = foot + shift, lo + shift, hi + shift
        flat = phantom.phantom(lo, hi, cell)
    assembly = assembly.translated(foot - feed)
    display = float(hi[2])  # the display glass's top face
    if flat is not None:
        lo, hi = np.minimum(lo, flat.outer_box()[0]), np.maximum(hi, flat.outer_box()[1])
    half = np.maximum(np.abs(lo), np.abs(hi)) + air
    half = np.ceil(half / align) * align + pml * cell  # nodes on multiples of align from the centre
    size = tuple(float(v) for v in 2 * half)
    grid = fdtd.Grid(size, cell)
    top = round(assembly.body("ifa_arm").bounds.mean(0)[2] / cell) * cell  # the arm's node plane
    gap = cell * gap_cells
    if top - foot[2] < gap + cell - 1e-9:
        raise ConfigurationError(
            f"phone_simulation: the arm lies {1e3 * (top - foot[2]):.3g} mm above the copper on "
            f"{1e3 * cell:g} mm cells; the port's gap ({1e3 * gap:g} mm) and a cell of feed pin do not fit "
            "under it: raise antenna_height, shorten port_gap or refine the cells")
    short = assembly.body("ifa_short_pin").bounds.mean(0)[0]
    drawn = {
        "antenna_height": float(1e3 * (top - foot[2])),
        "feed_to_short": float(1e3 * cell * abs(round(foot[0] / cell) - round(short / cell))),
        "port_gap": 1e3 * gap,
    }
    waveform = fdtd.GaussianPulse(f0=sum(band) / 2, fwidth=band[1] - band[0])
    port, feed_pin = _feed(foot, top, cell, gap_cells, waveform, frequencies,
                           cad_grid.wire_radius(*pin.extents[:2], cell) if wires == "thin" else None)
    if flat is not None:
        drawn["phantom_spacing"] = float(1e3 * (flat.surface - flat.shell_thickness - display))
    meshed = [s for s in assembly.structures(grid, wires=wires, conformal=subpixel is not False)
              if s.name != "ifa_feed_pin"]
    drawn.update(_drawn_metal(meshed, grid, subpixel is not False, assembly.body("pcb").bounds[1][1]))
    box = [float(2 * (h - (pml + 2) * cell)) for h in half]
    far = fdtd.NearToFarMonitor(
        "far", torch.as_tensor(far_frequencies, dtype=torch.float64), center=(0, 0, 0), size=box)
    extra = [] if flat is None else flat.structures()
    monitors = [port, far] + ([] if flat is None else [flat.monitor("phantom", cell)])
    simulation = fdtd.Simulation(
        size=size, cell_size=cell, boundary=fdtd.PML(thickness=pml),
        structures=[*box_geometries(assembly, meshed), feed_pin, port.resistor, *extra],
        sources=[port.source], monitors=monitors, threads=threads, subpixel=subpixel,
    )
    return PhoneModel(simulation, port, assembly, drawn, flat)


def _whole_cells(port_gap, cell) -> int:
    """The port's gap (m; ``None``: one cell) in cells; refused unless whole."""
    if port_gap is None:
        return 1
    cells = checks.positive(port_gap, "phone_simulation: port_gap (m)") / cell
    if abs(cells - round(cells)) > 1e-6:
        raise ConfigurationError(
            f"phone_simulation: port_gap {port_gap} m must be a whole number of {cell} m cells")
    return round(cells)


def _feed(foot, top, cell, gap_cells, waveform, frequencies, radius):
    """``(port, feed pin)``: the port's gap of ``gap_cells`` above ``foot`` (m) and the pin from the copper
    to the arm's node plane ``top`` (m): a thin wire of ``radius`` (m) with the gap's edges open, or
    (``radius=None``) a bare line from the gap's top."""
    from . import fdtd

    gap = gap_cells * cell
    port = fdtd.LumpedPort(
        "feed", center=(foot[0], foot[1], foot[2] + gap / 2), size=(cell, cell, gap), waveform=waveform,
        frequencies=frequencies,
    )
    if radius is not None:
        gaps = [(foot[0], foot[1], foot[2] + (k + 0.5) * cell) for k in range(gap_cells)]
        return port, fdtd.ThinWire((foot[0], foot[1], foot[2]), (foot[0], foot[1], top), radius, cell,
                                   gaps=gaps, joined=(True, True))
    return port, fdtd.pec_sheet(
        center=(foot[0], foot[1], (foot[2] + gap + top) / 2), size=(0, 0, top - foot[2] - gap),
        cell_size=cell)


def _drawn_metal(structures, grid, conformal, board_end) -> dict[str, float]:
    """The arm's length, the clearance (from the ground plane's edge to the board's end, ``board_end``
    in m) and, with a frame of sheets, its gap, as the grid draws them (mm;
    :func:`mindelec.cad_grid.drawn_bounds`)."""
    bounds = {structure.name: cad_grid.drawn_bounds(structure, grid, conformal)
              for structure in structures if isinstance(structure.medium, PECSheet)}
    arm, ground = bounds["ifa_arm"], bounds["ground_plane"]
    drawn = {"antenna_length": 1e3 * float(arm[1][0] - arm[0][0]),
             "clearance": 1e3 * float(board_end - ground[1][1])}
    if "frame_left_lower" in bounds and "frame_left_upper" in bounds:
        drawn["frame_gap"] = 1e3 * float(bounds["frame_left_upper"][0][1] - bounds["frame_left_lower"][1][1])
    return drawn


def figures_of_merit(result) -> dict[str, np.ndarray]:
    """The port's and the far box's figures from a run of :func:`phone_simulation`'s simulation.

    Returns:
        ``frequencies`` (F,) Hz, ``s11`` (F,) complex, ``impedance`` (F,) ohm, ``accepted`` and ``incident``
        (F,) W (``Re(V conj(I))`` and the available power of the port's source), on the port's axis;
        ``far_frequencies`` (G,) Hz, ``flux`` (G,) W (the radiated power: the box's flux),
        ``radiation_efficiency`` (``P_rad / P_acc``) and ``total_efficiency`` (``P_rad / P_inc``) (G,),
        on the far box's axis (the port's figures interpolated to it).
    """
    feed, far = result["feed"], result["far"]
    frequencies = feed["frequencies"].double().numpy()
    figures = {
        "s11": feed["s11"].to(torch.complex128).numpy(), "impedance": feed["impedance"].numpy(),
        "accepted": feed["accepted_power"].double().numpy(),
        "incident": feed["incident_power"].double().numpy(),
        "far_frequencies": far["frequencies"].double().numpy(), "flux": far["flux"].double().numpy(),
    }
    figures["frequencies"] = frequencies
    on_far = {key: np.interp(figures["far_frequencies"], frequencies, figures[key])
              for key in ("accepted", "incident")}
    figures["radiation_efficiency"] = figures["flux"] / on_far["accepted"]
    figures["total_efficiency"] = figures["flux"] / on_far["incident"]
    if not all(np.isfinite(v).all() for v in figures.values()):
        raise NonFiniteResultError("figures_of_merit: the run gave non-finite port or flux spectra")
    return figures


def phone_sar(model: PhoneModel, result) -> dict:
    """The SAR in the phantom of a :func:`phone_simulation` run with a :class:`PhantomPlacement`.

    Args:
        model: the :class:`PhoneModel` (its ``phantom`` set); result: its simulation's run.

    Returns:
        dict at the phantom's frequency: ``sar_1g``, ``sar_10g`` (W/kg per W accepted at the feed) and
        ``sar_1g_incident``, ``sar_10g_incident`` (per W incident: the conducted power of a 50 ohm
        transmitter, ``(1 - |S11|^2)`` times the former); ``s11`` (complex); per W accepted: ``radiated``
        (the far box's flux), ``absorbed_phantom`` (``sigma |E|^2 / 2`` over the phantom) and
        ``absorbed_phone`` (the rest: the phone's lossy media; with lossless ones it measures the
        imbalance); ``centre_1g`` and ``centre_10g`` (m, the cubes' centres); ``frequency`` (Hz);
        ``local_sar`` ``(nx, ny, nz)`` (W/kg per W accepted, the liquid's cells) and ``origin`` (m, its
        low corner), for maps.

    Raises:
        ConfigurationError: a model built without a phantom.
        NonFiniteResultError: non-finite port or field spectra.
    """
    flat = model.phantom
    if flat is None:
        raise ConfigurationError("phone_sar: the model has no phantom (phone_simulation(phantom=...))")
    figures = figures_of_merit(result)
    port = int(np.argmin(np.abs(figures["frequencies"] - flat.frequency)))
    far = int(np.argmin(np.abs(figures["far_frequencies"] - flat.frequency)))
    accepted = float(figures["accepted"][port])
    if not accepted > 0:
        raise NonFiniteResultError(f"phone_sar: the port accepts {accepted} at {flat.frequency:g} Hz")
    spacing = model.simulation.grid.spacing
    local, origin = flat.local_sar(result, "phantom", accepted, spacing)
    averages = flat.peak_average_sar(local, origin, spacing)
    mismatch = 1 - abs(figures["s11"][port]) ** 2
    radiated = float(figures["flux"][far]) / accepted
    absorbed = flat.absorbed_power(model.simulation, result, "phantom", accepted)
    values = {
        "frequency": float(flat.frequency), "s11": complex(figures["s11"][port]),
        "sar_1g": averages[1].value, "sar_10g": averages[10].value,
        "sar_1g_incident": averages[1].value * mismatch, "sar_10g_incident": averages[10].value * mismatch,
        "radiated": radiated, "absorbed_phantom": absorbed, "absorbed_phone": 1 - radiated - absorbed,
        "centre_1g": averages[1].center, "centre_10g": averages[10].center,
    }
    if not (all(np.isfinite(v).all() for v in values.values()) and bool(torch.isfinite(local).all())):
        raise NonFiniteResultError(f"phone_sar: non-finite figures {values}")
    return dict(values, local_sar=local, origin=tuple(float(v) for v in origin))


def resonances(frequencies, s11) -> list[tuple[float, float]]:
    """Frequencies (Hz) and ``|S11|`` (dB) of the local minima of ``|S11|`` below -6 dB, refined by a
    parabola through the three samples around each; ``frequencies`` (F,) increasing, ``s11`` (F,) complex."""
    decibels = 20 * np.log10(np.abs(s11))
    frequencies = np.asarray(frequencies, dtype=float)
    found = []
    for k in range(1, len(frequencies) - 1):
        if decibels[k] < min(decibels[k - 1], decibels[k + 1]) and decibels[k] < -6:
            offsets = frequencies[k - 1 : k + 2] - frequencies[k]
            curvature, slope, value = np.polyfit(offsets, decibels[k - 1 : k + 2], 2)
            shift = -slope / (2 * curvature)
            found.append((frequencies[k] + shift, value - slope**2 / (4 * curvature)))
    return found


def design_on_grid(design: cad_phone.PhoneDesign, cell: float) -> cad_phone.PhoneDesign:
    """``design`` with its feed-to-short distance and clearance moved by at most half a cell each so that
    the feed pin's foot (:attr:`~mindelec.cad_phone.PhoneDesign.feed_foot`) lies on a node of ``cell`` (m).

    :func:`phone_simulation` moves the phone by less than a cell to put that foot on a node; the move
    depends on those two parameters, and the housing, the board's far end and the frame's plates snap to
    other cells with it (on 1.5 mm cells the arm's distance from the frame's side plate changed by a cell
    between designs drawn alike). Designs on the grid are not moved: their phone lies on the same cells,
    and what the grid draws depends on the moved design only. On ``cell`` its clearance
    (:attr:`PhoneModel.drawn`) is the board's end less a node: 5.5, 7.0, 8.5 ... mm on 1.5 mm cells.

    Raises:
        ConfigurationError: for a cell that is not a positive length; the moved design's own checks.
    """
    cell_mm = 1e3 * checks.positive(cell, "design_on_grid: cell (m)")
    x, y = design.feed_foot
    moved = dataclasses.replace(
        design,
        feed_to_short=design.feed_to_short + round(x / cell_mm) * cell_mm - x,
        clearance=design.clearance - (round(y / cell_mm) * cell_mm - y),
    )
    moved.check()
    return moved


def phone_sample(
    params: dict,
    seed: int,
    cell: float = 1.5e-3,
    band: tuple[float, float] = (0.5e9, 3.5e9),
    n_frequencies: int = 61,
    duration: float = 20e-9,
    decay: float = 1e-4,
    frame: bool = True,
    air: float = 15e-3,
    pml: int = 10,
    threads: int | None = 1,
    subpixel: bool | str = False,
    on_grid: bool = False,
) -> dict[str, np.ndarray]:
    """Dataset generator (``common.datasets`` contract): S11 and total efficiency of one phone design.

    The labels are those of ``cell``: on coarse cells (the 1.5 mm default) they are the data of a
    surrogate of that model, not necessarily the phone's figures (``benchmarks/phone_antenna.py``
    compares three cell sizes).

    Args:
        params: :class:`~mindelec.cad_phone.PhoneDesign` fields (mm), e.g. those of
            :data:`DESIGN_PARAMETERS`; the others keep their defaults.
        seed: unused (the FDTD is deterministic); part of the generator contract.
        cell: the cell edge (m).
        band: (Hz); n_frequencies: points of the S11 and efficiency axis over it (both on one axis).
        duration: the longest run (s); it stops earlier once the fields decay by ``decay``.
        frame: whether the phone has its metal frame.
        air, pml: air around the phone (m) and PML cells (:func:`phone_simulation`).
        threads: CPU threads of the run.
        subpixel: ``True`` cuts the metal conformally where the CAD puts it and smooths the dielectric
            interfaces (:func:`phone_simulation`); then the sheets' rims (the ground plane's, the frame
            gap's above a cell and a half) change the labels continuously instead of in whole cells. The
            arm's height and the feed-to-short distance stay on cells (the port and the feed pin sit on
            grid edges), and so do the arm's ends and line where it is a wire (cells of 1 mm or more).
        on_grid: move the design onto the grid first (:func:`design_on_grid`: the feed-to-short distance
            and the clearance by under half a cell), so that every design's phone lies on the same cells.

    Returns:
        ``frequencies`` (F,) Hz, ``s11_real``, ``s11_imag``, ``s11_db`` (F,), ``total_efficiency`` (F,)
        (``P_rad / P_inc``: mismatch and the media's losses), ``radiation_efficiency`` (F,),
        ``resonance`` (Hz, the lowest ``|S11|``, refined by a parabola), ``antenna_length_used``,
        ``antenna_height_used``, ``feed_to_short_used``, ``clearance_used`` and ``frame_gap_used`` (mm, as
        drawn: :attr:`PhoneModel.drawn`; the frame gap as asked where the frame is not sheets), ``steps``
        and ``fdtd_seconds`` (CPU seconds of the run).

    Raises:
        ConfigurationError: for parameters that are not ``PhoneDesign`` fields or a design it refuses.
    """
    from .antennas import resonance_frequency

    del seed
    fields = {f.name for f in dataclasses.fields(cad_phone.PhoneDesign)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ConfigurationError(f"phone_sample: {unknown} are not PhoneDesign fields; expected some of "
                                 f"{sorted(fields)}")
    design = cad_phone.PhoneDesign(**{k: float(v) for k, v in params.items()}, frame=frame)
    if on_grid:
        design = design_on_grid(design, cell)
    frequencies = np.linspace(*band, n_frequencies)
    model = phone_simulation(design, cell, frequencies=frequencies, far_frequencies=frequencies, band=band,
                             air=air, pml=pml, threads=threads or 1, subpixel=subpixel)
    started = time.process_time()
    result = model.simulation.run(until=duration, until_decayed=decay, progress=False)
    seconds = time.process_time() - started
    figures = figures_of_merit(result)
    s11 = figures["s11"]
    s11_db = 20 * np.log10(np.maximum(np.abs(s11), 1e-12))
    resonance = resonance_frequency(torch.as_tensor(frequencies), torch.as_tensor(s11_db)[None])[0]
    return {
        "frequencies": frequencies,
        "s11_real": s11.real.copy(),
        "s11_imag": s11.imag.copy(),
        "s11_db": s11_db,
        "total_efficiency": figures["total_efficiency"],
        "radiation_efficiency": figures["radiation_efficiency"],
        "resonance": np.float64(resonance),
        "antenna_length_used": np.float64(model.drawn["antenna_length"]),
        "antenna_height_used": np.float64(model.drawn["antenna_height"]),
        "feed_to_short_used": np.float64(model.drawn["feed_to_short"]),
        "clearance_used": np.float64(model.drawn["clearance"]),
        "frame_gap_used": np.float64(model.drawn.get("frame_gap", design.frame_gap)),
        "steps": np.int64(result.steps),
        "fdtd_seconds": np.float64(seconds),
    }
