"""A parametric phone-like reference device written as a STEP assembly (the ``cad`` extra, gmsh's OCC).

:func:`write_phone_step` builds, with gmsh's OpenCASCADE API, a candy-bar phone of named solids and writes
it as STEP (:func:`mindelec.cad_assembly.write_step`); ``mindelec/examples/phone.step`` is the default
:class:`PhoneDesign`, made by ``python -m mindelec.cad_phone mindelec/examples/phone.step``, with the
media in ``mindelec/examples/phone_materials.toml``. The bodies (``z`` up, the display on top, the
antenna end at ``+y``, the origin of the file at the phone's centre):

* ``housing``: a plastic tray (back and side walls) - a solid with an open top;
* ``display_glass``: the cover glass on the tray;
* ``pcb``: the FR4 board; ``ground_plane``: its copper, which stops ``clearance`` short of the antenna
  end (the clearance area);
* ``battery``: a lossy block between the board and the display;
* ``frame_left_lower``, ``frame_left_upper``, ``frame_right_lower``, ``frame_right_upper``,
  ``frame_top``, ``frame_bottom``: an optional metal frame around the sides, 1 mm plates (each reaching
  the mid-plane of the plates it meets, so that they join as sheets on a grid) cut by two gaps of
  ``frame_gap`` level with the ground plane's edge, which leave a separate top piece;
* the inverted-F antenna over the clearance: ``ifa_arm`` (length ``antenna_length``, at
  ``antenna_height`` above the copper), ``ifa_short_stub`` and ``ifa_feed_stub`` (from the arm to the
  pins, ``feed_to_short`` apart), ``ifa_short_pin`` (down to the ground plane at its edge) and
  ``ifa_feed_pin`` (down to ``feed_gap`` above the copper: the place of the lumped port).

The metal of the antenna and the ground plane is thinner than a cell (copper 35 um, strips 0.1 mm), so
:meth:`mindelec.cad_assembly.Assembly.structures` makes them PEC sheets and wires. Lengths in the design
are in mm (as a mechanical drawing); the file holds metres-converted geometry (STEP declares mm).
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

from common.errors import ConfigurationError

from .cad_assembly import gmsh_session, write_step

__all__ = ["PhoneDesign", "build_phone", "write_phone_step", "EXAMPLE_STEP", "EXAMPLE_MATERIALS"]

EXAMPLES = pathlib.Path(__file__).parent / "examples"
EXAMPLE_STEP = EXAMPLES / "phone.step"
EXAMPLE_MATERIALS = EXAMPLES / "phone_materials.toml"


@dataclasses.dataclass(frozen=True)
class PhoneDesign:
    """The parameters of the reference phone (mm).

    Attributes:
        antenna_length: the IFA arm along x (about a quarter wavelength: 30 mm for ~2.4 GHz).
        antenna_height: the arm's height above the ground plane's copper.
        feed_to_short: distance between the shorting pin and the feed pin (centre to centre, along x).
        clearance: the length (along y) at the antenna end of the board without ground copper.
        frame: whether the metal frame is there.
        frame_gap: the width of the two gaps cut in the frame level with the ground plane's edge.
        feed_gap: the feed pin stops this far above the copper (the lumped port's gap).
        width, length, thickness: the phone's outer size.
    """

    antenna_length: float = 30.0
    antenna_height: float = 3.0
    feed_to_short: float = 6.0
    clearance: float = 10.0
    frame: bool = True
    frame_gap: float = 1.5
    feed_gap: float = 0.5
    width: float = 72.0
    length: float = 144.0
    thickness: float = 8.7

    def check(self) -> None:
        """Refuse designs whose parts would not fit or would overlap.

        Raises:
            ConfigurationError: naming the parameter and what it must be.
        """
        positive = [
            f.name for f in dataclasses.fields(self) if f.name != "frame" and getattr(self, f.name) <= 0
        ]
        if positive:
            raise ConfigurationError(f"PhoneDesign: {positive} must be positive lengths (mm)")
        board_width = self.board[0]
        if self.antenna_length + 2.0 > board_width:
            raise ConfigurationError(
                f"PhoneDesign: antenna_length {self.antenna_length} mm does not fit the board "
                f"({board_width} mm wide, less 2 mm)"
            )
        if not 1.0 < self.feed_to_short < self.antenna_length - 1.0:
            raise ConfigurationError(
                f"PhoneDesign: feed_to_short {self.feed_to_short} mm must lie between 1 mm and the antenna "
                f"length less 1 mm ({self.antenna_length - 1.0} mm)"
            )
        if not 2.0 <= self.clearance <= self.length / 3:
            raise ConfigurationError(
                f"PhoneDesign: clearance {self.clearance} mm must lie between 2 mm and a third of the length"
            )
        top_room = self.thickness - 0.7 - _COPPER_TOP
        if not self.feed_gap + 0.5 < self.antenna_height < top_room:
            raise ConfigurationError(
                f"PhoneDesign: antenna_height {self.antenna_height} mm must exceed feed_gap + 0.5 mm and "
                f"stay under the display glass ({top_room:.3g} mm above the copper)"
            )

    @property
    def board(self) -> tuple[float, float]:
        """The board's ``(width, length)`` (mm): the housing's inside less 1 mm of play on every side.
        It is centred on the phone, so its antenna end lies at ``y = length / 2``."""
        return self.width - 2 * _WALL - 2.0, self.length - 2 * _WALL - 2.0

    @property
    def feed_foot(self) -> tuple[float, float]:
        """``(x, y)`` (mm, from the phone's centre) of the feed pin's centre line at the ground plane's
        edge: where :func:`mindelec.phone.phone_simulation` puts the lumped port's foot."""
        board_width, board_length = self.board
        x_short = -board_width / 2 + 1.0 + STRIP_WIDTH / 2
        return x_short + self.feed_to_short, board_length / 2 - self.clearance


_WALL, _PCB_BOTTOM, _PCB_THICKNESS, _COPPER = 1.0, 2.0, 1.0, 0.035
_COPPER_TOP = _PCB_BOTTOM + _PCB_THICKNESS + _COPPER
#: width of the antenna's strips (mm): on cells this wide or wider the arm and its stubs are wires
STRIP_WIDTH = 1.0
_STRIP_THICKNESS, _PIN, _FRAME = 0.1, 0.3, 1.0


def build_phone(occ, design: PhoneDesign) -> dict[str, int]:
    """Add the phone's solids to the current gmsh OCC model (mm; centred in x and y, the back at z = 0).

    Returns:
        ``{body name: volume tag}``.
    """
    design.check()
    w, length, t = design.width, design.length, design.thickness
    glass = 0.7
    body = {}
    outer = occ.addBox(-w / 2, -length / 2, 0, w, length, t - glass)
    cavity = occ.addBox(-w / 2 + _WALL, -length / 2 + _WALL, _WALL, w - 2 * _WALL, length - 2 * _WALL, t)
    (tray,), _ = occ.cut([(3, outer)], [(3, cavity)])
    body["housing"] = tray[1]
    body["display_glass"] = occ.addBox(-w / 2, -length / 2, t - glass, w, length, glass)
    board_w, board_l = design.board
    y_bottom = -board_l / 2
    body["pcb"] = occ.addBox(-board_w / 2, y_bottom, _PCB_BOTTOM, board_w, board_l, _PCB_THICKNESS)
    x_feed, y_edge = design.feed_foot  # y_edge: the ground plane's edge
    body["ground_plane"] = occ.addBox(
        -board_w / 2, y_bottom, _PCB_BOTTOM + _PCB_THICKNESS, board_w, y_edge - y_bottom, _COPPER
    )
    battery_top = t - glass - 0.5
    body["battery"] = occ.addBox(
        -board_w / 2 + 4.0,
        y_bottom + 8.0,
        _COPPER_TOP + 0.5,
        board_w - 8.0,
        0.6 * board_l,
        battery_top - _COPPER_TOP - 0.5,
    )
    # the inverted F: arm over the clearance, stubs back to the ground edge, pins down
    z_arm = _COPPER_TOP + design.antenna_height
    x_short = x_feed - design.feed_to_short
    y_arm = y_edge + design.clearance / 2
    body["ifa_arm"] = occ.addBox(
        x_short - STRIP_WIDTH / 2, y_arm - STRIP_WIDTH / 2, z_arm, design.antenna_length, STRIP_WIDTH,
        _STRIP_THICKNESS,
    )
    y_pin = y_edge - _PIN  # the pins stand on the ground plane, just inside its edge
    for name, x in (("short", x_short), ("feed", x_feed)):  # stubs from over the pins to the arm
        body[f"ifa_{name}_stub"] = occ.addBox(
            x - STRIP_WIDTH / 2, y_pin, z_arm, STRIP_WIDTH, y_arm - STRIP_WIDTH / 2 - y_pin, _STRIP_THICKNESS
        )
    body["ifa_short_pin"] = occ.addBox(
        x_short - _PIN / 2, y_pin, _COPPER_TOP, _PIN, _PIN, z_arm - _COPPER_TOP
    )
    body["ifa_feed_pin"] = occ.addBox(
        x_feed - _PIN / 2,
        y_pin,
        _COPPER_TOP + design.feed_gap,
        _PIN,
        _PIN,
        z_arm - _COPPER_TOP - design.feed_gap,
    )
    if design.frame:  # plates _FRAME thick around the housing, the side plates cut by the gaps
        z0, height = 1.0, t - glass - 2.0
        y_gap_lo, y_gap_hi = y_edge - design.frame_gap / 2, y_edge + design.frame_gap / 2
        # each plate reaches the mid-plane of the plates it meets: as sheets on the grid they then join
        y_end, x_end = length / 2 + _FRAME / 2, w / 2 + _FRAME / 2
        for side, x in (("left", -w / 2 - _FRAME), ("right", w / 2)):
            body[f"frame_{side}_lower"] = occ.addBox(x, -y_end, z0, _FRAME, y_gap_lo + y_end, height)
            body[f"frame_{side}_upper"] = occ.addBox(x, y_gap_hi, z0, _FRAME, y_end - y_gap_hi, height)
        body["frame_top"] = occ.addBox(-x_end, length / 2, z0, 2 * x_end, _FRAME, height)
        body["frame_bottom"] = occ.addBox(-x_end, -length / 2 - _FRAME, z0, 2 * x_end, _FRAME, height)
    occ.synchronize()
    return body


def write_phone_step(path, design: PhoneDesign | None = None) -> pathlib.Path:
    """Write the phone of ``design`` (default :class:`PhoneDesign`) as a STEP assembly of named solids.

    Returns:
        the path.
    """
    design = design or PhoneDesign()
    with gmsh_session() as gmsh:
        named = build_phone(gmsh.model.occ, design)
        solids = gmsh.model.occ.getEntities(3)
        gmsh.model.occ.translate(solids, 0, 0, -design.thickness / 2)  # the origin at the centre
        gmsh.model.occ.dilate(solids, 0, 0, 0, 1e-3, 1e-3, 1e-3)  # mm -> m
        return write_step(path, named, model_name="phone")


def main(argv=None) -> None:
    """``python -m mindelec.cad_phone OUT.step [name=value ...]`` (PhoneDesign fields, mm)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit(
            __doc__.split("\n\n")[0] + "\nusage: python -m mindelec.cad_phone OUT.step [name=value ...]"
        )
    fields = {f.name: f.type for f in dataclasses.fields(PhoneDesign)}
    values = {}
    for item in argv[1:]:
        name, _, value = item.partition("=")
        if name not in fields:
            raise SystemExit(f"unknown PhoneDesign field {name!r}; expected one of {sorted(fields)}")
        values[name] = value.lower() in ("1", "true", "yes") if name == "frame" else float(value)
    print(write_phone_step(argv[0], PhoneDesign(**values)))


if __name__ == "__main__":
    main()
