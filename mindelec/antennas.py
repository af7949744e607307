"""A parametric microstrip patch antenna with an inset (or offset) microstrip feed, simulated by 3D FDTD.

The family: a PEC ground plane under a substrate of relative ``permittivity`` and thickness
``height``, a rectangular PEC patch ``length`` (along y, the resonant dimension, the direction of the
feed) by ``width`` (along x) on top, fed by a microstrip line running along y into the patch: its
centre ``feed_offset * width`` off the patch's centre line (the Sheen et al. 1990 patch is offset-fed)
and its end ``inset * length`` inside the patch, in a notch with a slot of ``gap_cells`` on each side
(the inset moves the feed point towards the patch's centre, where the input resistance of the
fundamental mode is lower: the classic way to match a patch to 50 ohm). A 50 ohm
:class:`mindelec.fdtd.LumpedPort` between ground and line at the line's start gives the complex S11
over a wide band.

Every design is drawn on the same number of cells: the cell edges are ``(width / n_width,
length / n_length, height / n_height)``, so the patch's length, width and the substrate's height are
exact for every value (S11 moves smoothly with them, not in steps of a fixed grid) while the feed
offset and the inset take whole cells (``round(feed_offset * n_width)``, ``round(inset * n_length)``;
the sample records the values used). The feed line is ``strip_cells`` cells wide (a fixed fraction of
the width), the margins, air and PML a fixed number of cells. The time step follows the smallest cell
edge (``dz``).

* :func:`patch_antenna_simulation` - the :class:`mindelec.fdtd.Simulation` and its port for one design;
* :func:`patch_antenna_sample` - the ``common.datasets`` generator
  (``"mindelec.antennas:patch_antenna_sample"``): one FDTD run -> ``frequencies``, ``s11_real``,
  ``s11_imag``, ``s11_db``, ``resonance``, ``feed_offset_used``, ``inset_used``;
* :func:`patch_voxels` - the design as voxels on a fixed reference Yee grid, for geometry encoders;
* :func:`cavity_resonance` - the design's resonance by the transmission-line model (Balanis), the
  physical frequency scale a surrogate can condition on; :func:`cavity_modes` - the first modes of the
  same cavity (``CAVITY_MODES``), the scales of its higher resonances.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from common import checks
from common.deprecation import moved_attributes
from common.errors import ConfigurationError, NonFiniteResultError
from common.units import SPEED_OF_LIGHT

__all__ = [
    "PARAMETERS",
    "SAMPLE_KEYS",
    "CAVITY_MODES",
    "PatchSetup",
    "cavity_modes",
    "cavity_resonance",
    "patch_antenna_simulation",
    "patch_antenna_sample",
    "patch_voxels",
]

#: the design parameters (SI units; ``feed_offset`` is a fraction of the width)
PARAMETERS = ("length", "width", "feed_offset", "inset", "permittivity", "height")
#: the keys of every :func:`patch_antenna_sample` result
SAMPLE_KEYS = ("frequencies", "s11_real", "s11_imag", "s11_db", "resonance", "feed_offset_used", "inset_used")


@dataclass(frozen=True)
class PatchSetup:
    """The fixed part of the family: cell counts, band, excitation and run length.

    Args:
        n_length, n_width, n_height: cells along the patch's length, width and the substrate's height
            (``n_width`` and ``strip_cells`` even, so that the feed line sits on whole cells).
        strip_cells: width of the feed line (cells along x).
        gap_cells: width of the inset notch's slots on either side of the line (cells along x).
        line_cells: length of the feed line from the port to the patch (cells along y).
        margin: cells of substrate and ground around the patch (x and beyond its far edge).
        air_cells: cells of air above the substrate.
        pml: PML thickness (cells).
        f_min, f_max, n_frequencies: the linear frequency axis (Hz).
        duration: simulated time (s).
    """

    n_length: int = 12
    n_width: int = 12
    n_height: int = 2
    strip_cells: int = 2
    gap_cells: int = 1
    line_cells: int = 6
    margin: int = 4
    air_cells: int = 8
    pml: int = 6
    f_min: float = 3e9
    f_max: float = 12e9
    n_frequencies: int = 91
    duration: float = 3e-9

    def __post_init__(self):
        counts = {
            k: v
            for k, v in asdict(self).items()
            if k.startswith(("n_", "strip", "gap", "line", "margin", "air", "pml"))
        }
        for key, value in counts.items():
            checks.positive_int(value, f"PatchSetup: {key}")
        for key in ("f_min", "f_max", "duration"):
            checks.positive(getattr(self, key), f"PatchSetup: {key}")
        if self.n_width % 2 or self.strip_cells % 2:
            raise ConfigurationError(
                f"PatchSetup: n_width ({self.n_width}) and strip_cells ({self.strip_cells}) must be even"
            )
        if not 0 < self.f_min < self.f_max or self.n_frequencies < 2 or self.duration <= 0:
            raise ConfigurationError(
                f"PatchSetup: need 0 < f_min < f_max (Hz), n_frequencies >= 2 and duration > 0 (s), got "
                f"{self.f_min}, {self.f_max}, {self.n_frequencies}, {self.duration}"
            )

    @property
    def frequencies(self) -> torch.Tensor:
        """``(n_frequencies,)`` float64, Hz."""
        return torch.linspace(self.f_min, self.f_max, self.n_frequencies, dtype=torch.float64)


#: parameters a design may leave out (default 0: a feed on the centre line, no inset)
OPTIONAL_PARAMETERS = ("feed_offset", "inset")


def _design(params) -> dict[str, float]:
    missing = [name for name in PARAMETERS if name not in params and name not in OPTIONAL_PARAMETERS]
    if missing:
        raise ConfigurationError(f"patch antenna: parameters {missing} missing (needs {list(PARAMETERS)})")
    values = {name: float(params.get(name, 0.0)) for name in PARAMETERS}
    for name in ("length", "width", "height"):
        if not (math.isfinite(values[name]) and 0 < values[name] < 1.0):
            raise ConfigurationError(
                f"patch antenna: {name} must be a length in (0, 1) m, got {values[name]}"
            )
    if not (math.isfinite(values["permittivity"]) and values["permittivity"] >= 1):
        raise ConfigurationError(f"patch antenna: permittivity must be >= 1, got {values['permittivity']}")
    return values


def _feed_cells(values, setup: PatchSetup) -> tuple[int, int]:
    """The feed line's offset (cells along x) and the inset's depth (cells along y) on the grid."""
    offset, inset = values["feed_offset"], values["inset"]
    cells = round(offset * setup.n_width) if math.isfinite(offset) else setup.n_width
    depth = round(inset * setup.n_length) if math.isfinite(inset) else setup.n_length
    notch = setup.strip_cells // 2 + (setup.gap_cells if depth else 0)
    if abs(cells) + notch > setup.n_width // 2 - (1 if depth else 0):
        raise ConfigurationError(
            f"patch antenna: feed_offset {offset} (fraction of the width) puts the feed line "
            f"({setup.strip_cells} of {setup.n_width} cells"
            + (f", its inset notch {setup.gap_cells} more on each side" if depth else "")
            + ") off the patch; keep |feed_offset| <= "
            f"{(setup.n_width - 2 * notch - (2 if depth else 0)) / (2 * setup.n_width):.3f}"
        )
    if not 0 <= depth <= setup.n_length // 2:
        raise ConfigurationError(
            f"patch antenna: inset {inset} (fraction of the length) must lie in [0, 0.5]"
        )
    return cells, depth


def _layout(values, setup: PatchSetup) -> dict:
    """Node indices of every part and the domain (cells, m)."""
    cell = (
        values["width"] / setup.n_width,
        values["length"] / setup.n_length,
        values["height"] / setup.n_height,
    )
    counts = (
        2 * (setup.pml + setup.margin) + setup.n_width,
        2 * setup.pml + 2 + setup.line_cells + setup.n_length + setup.margin,
        2 * setup.pml + 1 + setup.n_height + setup.air_cells,
    )
    i_patch = setup.pml + setup.margin
    offset, depth = _feed_cells(values, setup)
    i_line = i_patch + setup.n_width // 2 + offset - setup.strip_cells // 2
    j_port = setup.pml + 2
    k_ground = setup.pml + 1
    return {
        "cell": cell,
        "counts": counts,
        "size": tuple(n * d for n, d in zip(counts, cell)),
        "i_patch": i_patch,
        "i_line": i_line,
        "j_port": j_port,
        "j_patch": j_port + setup.line_cells,
        "k_ground": k_ground,
        "k_top": k_ground + setup.n_height,
        "inset": depth,
    }


def _node(layout, axis, index) -> float:
    return -layout["size"][axis] / 2 + index * layout["cell"][axis]


def _metal(layout, setup: PatchSetup, fdtd):
    """Ground, patch and feed line as zero-thickness PEC sheets."""

    def sheet(i0, i1, j0, j1, k):
        center = (
            (_node(layout, 0, i0) + _node(layout, 0, i1)) / 2,
            (_node(layout, 1, j0) + _node(layout, 1, j1)) / 2,
            _node(layout, 2, k),
        )
        size = ((i1 - i0) * layout["cell"][0], (j1 - j0) * layout["cell"][1], 0.0)
        return fdtd.pec_sheet(center, size, cell_size=layout["cell"])

    size = layout["size"]
    ground = fdtd.pec_sheet(
        (0, 0, _node(layout, 2, layout["k_ground"])), (size[0], size[1], 0), layout["cell"]
    )
    i, j, k, depth = layout["i_patch"], layout["j_patch"], layout["k_top"], layout["inset"]
    i_line, gap = layout["i_line"], setup.gap_cells
    patch = [sheet(i, i + setup.n_width, j + depth, j + setup.n_length, k)]
    if depth:  # the patch on both sides of the notch the line runs into
        patch += [
            sheet(i, i_line - gap, j, j + depth, k),
            sheet(i_line + setup.strip_cells + gap, i + setup.n_width, j, j + depth, k),
        ]
    line = sheet(i_line, i_line + setup.strip_cells, layout["j_port"], j + depth, k)
    return [ground, *patch, line]


def patch_antenna_simulation(params: dict, setup: PatchSetup | None = None, threads: int | None = 1):
    """The FDTD model of one design.

    Args:
        params: ``length``, ``width``, ``height`` (m), ``permittivity``, and optionally ``feed_offset``
            (fraction of the width) and ``inset`` (fraction of the length; default 0 both).
        setup: the fixed part (default :class:`PatchSetup()`).
        threads: CPU threads of the run.

    Returns:
        ``(simulation, port)``: a 3D :class:`mindelec.fdtd.Simulation` and its
        :class:`~mindelec.fdtd.LumpedPort` named ``"feed"``
        (``simulation.run(until=setup.duration)["feed"]["s11"]`` is the complex S11).

    Raises:
        ConfigurationError: for a missing or non-physical parameter, or a feed line off the patch.
    """
    from common.geometry import Box
    from mindelec import fdtd

    setup = setup or PatchSetup()
    values = _design(params)
    layout = _layout(values, setup)
    size, (dx, dy, dz) = layout["size"], layout["cell"]
    substrate = fdtd.Structure(
        Box(
            (-size[0], -size[1], _node(layout, 2, layout["k_ground"])),
            (size[0], size[1], _node(layout, 2, layout["k_top"])),
        ),
        fdtd.Medium(permittivity=values["permittivity"]),
    )
    i_line = layout["i_line"]
    port = fdtd.LumpedPort(
        "feed",
        center=(
            (_node(layout, 0, i_line) + _node(layout, 0, i_line + setup.strip_cells)) / 2,
            _node(layout, 1, layout["j_port"]),
            (_node(layout, 2, layout["k_ground"]) + _node(layout, 2, layout["k_top"])) / 2,
        ),
        size=((setup.strip_cells + 1) * dx, dy, setup.n_height * dz),
        waveform=fdtd.GaussianPulse(f0=(setup.f_min + setup.f_max) / 2, fwidth=setup.f_max - setup.f_min),
        frequencies=setup.frequencies,
        impedance=50.0,
    )
    simulation = fdtd.Simulation(
        size=size,
        cell_size=layout["cell"],
        boundary=fdtd.PML(thickness=setup.pml),
        structures=[substrate, *_metal(layout, setup, fdtd), port.resistor],
        sources=[port.source],
        monitors=[port],
        threads=threads,
    )
    return simulation, port


def patch_antenna_sample(
    params: dict, seed: int, threads: int | None = 1, **options
) -> dict[str, np.ndarray]:
    """Dataset generator: S11 of one patch antenna design by 3D FDTD (``common.datasets`` contract).

    Args:
        params: the design (see :func:`patch_antenna_simulation`).
        seed: unused (the FDTD is deterministic); part of the generator contract.
        threads: CPU threads of the run.
        **options: :class:`PatchSetup` fields (``n_length``, ``duration``, ``f_min``...).

    Returns:
        ``frequencies`` (F,) Hz, ``s11_real``, ``s11_imag``, ``s11_db`` (F,), ``resonance`` (Hz, the
        frequency of the lowest ``|S11|``, refined by a parabola through the three lowest points) and
        ``feed_offset_used``, ``inset_used`` (the feed offset and the inset depth on the grid, fractions
        of the width and of the length).
    """
    del seed
    setup = PatchSetup(**options)
    simulation, _ = patch_antenna_simulation(params, setup, threads=threads)
    result = simulation.run(until=setup.duration, progress=False)
    s11 = result["feed"]["s11"].to(torch.complex128)
    if not bool(torch.isfinite(torch.view_as_real(s11)).all()):
        raise NonFiniteResultError(f"patch_antenna_sample: the FDTD run of {params} gave a non-finite S11")
    frequencies = setup.frequencies
    offset, depth = _feed_cells(_design(params), setup)
    s11_db = 20 * torch.log10(s11.abs().clamp(min=1e-12))
    return {
        "frequencies": frequencies.numpy(),
        "s11_real": s11.real.numpy(),
        "s11_imag": s11.imag.numpy(),
        "s11_db": s11_db.numpy(),
        "resonance": np.float64(resonance_frequency(frequencies, s11_db[None])[0]),
        "feed_offset_used": np.float64(offset / setup.n_width),
        "inset_used": np.float64(depth / setup.n_length),
    }


def resonance_frequency(frequencies: torch.Tensor, s11_db: torch.Tensor) -> torch.Tensor:
    """Frequency (Hz) of the lowest ``|S11|`` per design: the grid minimum refined by a parabola.

    Args:
        frequencies: ``(F,)`` uniform axis (Hz).
        s11_db: ``(B, F)`` ``|S11|`` in dB.

    Returns:
        ``(B,)`` float64, Hz.
    """
    frequencies = torch.as_tensor(frequencies, dtype=torch.float64)
    s11_db = torch.as_tensor(s11_db, dtype=torch.float64)
    index = s11_db.argmin(-1).clamp(1, s11_db.shape[-1] - 2)
    return _refined_minima(frequencies, s11_db, torch.arange(len(s11_db)), index)


def dip_frequencies(
    frequencies: torch.Tensor, s11_db: torch.Tensor, below: float = -10.0
) -> list[torch.Tensor]:
    """Frequencies (Hz) of every dip of ``|S11|`` deeper than ``below`` dB, per design.

    A dip is an interior local minimum of the sampled curve (lower than its left neighbour, not higher
    than its right one), refined by a parabola as in :func:`resonance_frequency`. The band edges are not
    dips. A multi-resonant antenna has several; ``below=float("inf")`` keeps every local minimum.

    Args:
        frequencies: ``(F,)`` uniform axis (Hz).
        s11_db: ``(B, F)`` ``|S11|`` in dB.
        below: level (dB) a dip must go under.

    Returns:
        a list of ``B`` float64 tensors ``(D_b,)`` (Hz, ascending; empty when a design has no such dip).
    """
    frequencies = torch.as_tensor(frequencies, dtype=torch.float64)
    s11_db = torch.as_tensor(s11_db, dtype=torch.float64)
    middle = s11_db[:, 1:-1]
    dips = (middle < s11_db[:, :-2]) & (middle <= s11_db[:, 2:]) & (middle < below)
    rows, index = torch.nonzero(dips, as_tuple=True)
    refined = _refined_minima(frequencies, s11_db, rows, index + 1)
    return [refined[rows == row] for row in range(len(s11_db))]


def _refined_minima(frequencies, s11_db, rows, index):
    """``frequencies[index]`` moved to the vertex of the parabola through the three samples around it."""
    left, middle, right = s11_db[rows, index - 1], s11_db[rows, index], s11_db[rows, index + 1]
    curvature = left - 2 * middle + right
    shift = torch.where(
        curvature > 0, 0.5 * (left - right) / curvature.clamp(min=1e-30), torch.zeros_like(left)
    )
    step = frequencies[1] - frequencies[0]
    return frequencies[index] + shift.clamp(-1, 1) * step


def _cavity(length, width, permittivity, height):
    """The checked inputs as float64 tensors (naming a bad value)."""
    length, width, permittivity, height = (
        torch.as_tensor(value, dtype=torch.float64) for value in (length, width, permittivity, height)
    )
    for name, value in (("length", length), ("width", width), ("height", height)):
        if not bool((value > 0).all()):
            raise ConfigurationError(f"patch cavity: {name} must be positive (m), got {value}")
    if not bool((permittivity >= 1).all()):
        raise ConfigurationError(f"patch cavity: permittivity must be >= 1, got {permittivity}")
    return length, width, permittivity, height


def _effective_length(length, width, permittivity, height):
    """``(length + 2 dL, eps_eff)`` of a patch edge of ``length`` radiating across ``width``."""
    aspect = width / height
    effective = (permittivity + 1) / 2 + (permittivity - 1) / 2 / torch.sqrt(1 + 12 / aspect)
    extension = 0.412 * height * (effective + 0.3) * (aspect + 0.264) / ((effective - 0.258) * (aspect + 0.8))
    return length + 2 * extension, effective


def cavity_resonance(length, width, permittivity, height) -> torch.Tensor:
    """Resonance (Hz) of a rectangular patch by the transmission-line model (Balanis, *Antenna Theory*, 14.2).

    ``f = c / (2 (length + 2 dL) sqrt(eps_eff))`` with Hammerstad's effective permittivity
    ``eps_eff = (er + 1) / 2 + (er - 1) / 2 (1 + 12 h / W)^(-1/2)`` and the fringing extension
    ``dL = 0.412 h (eps_eff + 0.3) (W / h + 0.264) / ((eps_eff - 0.258) (W / h + 0.8))``. It ignores the
    feed and the finite ground plane, so a simulated patch resonates a few per cent away; as a frequency
    scale it moves with the design the way the true resonance does.

    Args:
        length, width, height: patch length (resonant dimension), width and substrate thickness (m);
            tensors of one shape ``(B,)`` (or scalars).
        permittivity: substrate relative permittivity, same shape.

    Returns:
        float64 tensor of the broadcast shape, Hz.

    Raises:
        ValueError: for non-positive lengths or a permittivity below 1 (naming the value).
    """
    length, width, permittivity, height = _cavity(length, width, permittivity, height)
    effective_length, effective = _effective_length(length, width, permittivity, height)
    return SPEED_OF_LIGHT / (2 * effective_length * torch.sqrt(effective))


#: the ``(m, n)`` of the TM_mn cavity modes :func:`cavity_modes` returns, in its column order (``m``
#: half-waves along the length, ``n`` along the width). A feed centred in the width does not excite the
#: modes odd in ``n``; an offset feed does.
CAVITY_MODES = ((1, 0), (2, 0), (0, 2), (1, 2), (0, 1), (1, 1))


def cavity_modes(length, width, permittivity, height) -> torch.Tensor:
    """Resonances (Hz) of the first TM_mn modes of a rectangular patch's cavity (``CAVITY_MODES``).

    The cavity model (Balanis, *Antenna Theory*, 14.2.2) with each side lengthened by its fringing field
    and its own effective permittivity, as in :func:`cavity_resonance`:
    ``f_mn = c / 2 sqrt((m / (L_e sqrt(eps_L)))^2 + (n / (W_e sqrt(eps_W)))^2)``, where ``L_e, eps_L``
    are :func:`cavity_resonance`'s and ``W_e, eps_W`` the same with length and width swapped. The
    ``(1, 0)`` column is :func:`cavity_resonance`; on a vanishingly thin substrate the columns tend to
    the ideal cavity's ``c / (2 sqrt(er)) sqrt((m / L)^2 + (n / W)^2)``. Frequency scales for the higher
    resonances of a surrogate's band (a few per cent from a simulated patch's).

    Args:
        length, width, height: patch length, width and substrate thickness (m); tensors of one shape
            ``(B,)`` (or scalars).
        permittivity: substrate relative permittivity, same shape.

    Returns:
        float64 tensor ``(B, len(CAVITY_MODES))`` (``(len(CAVITY_MODES),)`` for scalars), Hz.

    Raises:
        ValueError: for non-positive lengths or a permittivity below 1 (naming the value).
    """
    length, width, permittivity, height = _cavity(length, width, permittivity, height)
    along_length = _effective_length(length, width, permittivity, height)
    along_width = _effective_length(width, length, permittivity, height)
    modes = torch.as_tensor(CAVITY_MODES, dtype=torch.float64)
    wavenumbers = [
        (modes[:, column] / (side * torch.sqrt(effective))[..., None]) ** 2
        for column, (side, effective) in enumerate((along_length, along_width))
    ]
    return SPEED_OF_LIGHT / 2 * torch.sqrt(wavenumbers[0] + wavenumbers[1])


def patch_voxels(params, cell: float = 0.5e-3, shape=(64, 64, 8)) -> torch.Tensor:
    """The design on a fixed reference Yee grid: substrate permittivity and metal, ``(2, nx, ny, nz)``.

    The reference grid has cubic cells of ``cell`` (m) over ``shape`` cells, the ground plane on its
    bottom node plane and the patch centred in x, its feed line starting at y's first node. Channel 0 is
    the relative permittivity on the Ez nodes (sub-cell averaged, :func:`mindelec.voxels.permittivity_grid`;
    the substrate's height shows as a fractional top layer), channel 1 the metal fill fraction of the
    top sheets on the Ex nodes (:func:`mindelec.voxels.fill_fractions` of the patch, less its inset notch,
    and of the line, one cell thick).

    Raises:
        ConfigurationError: if the design does not fit the reference grid.
    """
    from common.geometry import Box
    from mindelec import fdtd
    from mindelec.voxels import fill_fractions, permittivity_grid

    values = _design(params)
    grid = fdtd.Grid(tuple(n * cell for n in shape), cell)
    size = grid.size
    x0, y0, z0 = (-s / 2 for s in size)
    top = z0 + values["height"]
    line_length = 6 * cell
    if (
        values["width"] > size[0]
        or line_length + values["length"] > size[1]
        or values["height"] + cell > size[2]
    ):
        raise ConfigurationError(
            f"patch_voxels: design {values} does not fit the {shape} grid of {cell} m cells"
        )
    substrate = fdtd.Structure(
        Box((x0 - 1, y0 - 1, z0 - 1), (-x0 + 1, -y0 + 1, top)),
        fdtd.Medium(permittivity=values["permittivity"]),
    )
    permittivity = permittivity_grid([substrate], grid, "Ez")
    setup = PatchSetup()
    strip = setup.strip_cells * values["width"] / setup.n_width
    gap = setup.gap_cells * values["width"] / setup.n_width
    center = values["feed_offset"] * values["width"]
    start = y0 + line_length
    depth = values["inset"] * values["length"]
    half = values["width"] / 2
    patch = Box((-half, start, top), (half, start + values["length"], top + cell))
    notch = Box((center - strip / 2 - gap, start, top), (center + strip / 2 + gap, start + depth, top + cell))
    line = Box((center - strip / 2, y0, top), (center + strip / 2, start + depth, top + cell))
    fill = fill_fractions(patch, grid, "Ex")
    if depth > 0:
        fill = (fill - fill_fractions(notch, grid, "Ex")).clamp(min=0)
    metal = torch.maximum(fill, fill_fractions(line, grid, "Ex"))
    return torch.stack([permittivity, metal])


# ``patch_antenna`` was also the name of mindelec.devices' meshes of the antenna's parts
__getattr__ = moved_attributes(__name__, {"patch_antenna": "mindelec.antennas:patch_antenna_simulation"})
