"""CAD assemblies: STEP files written with gmsh's OCC kernel read back as named, closed, accurate bodies
with media from a materials table; thin PEC parts become sheets; damaged input is refused by name."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("gmsh")  # the cad extra, part of all: installed by make install

from common.errors import ConfigurationError, DataError, MissingFileError, UnknownNameError  # noqa: E402
from mindelec import cad_assembly, cad_grid, fdtd, voxels  # noqa: E402
from mindelec.fdtd.materials import PECSheet  # noqa: E402

MM = 1e-3
TOLERANCE = 20e-6  # m
# (name, lower corner, size) of the boxes, (name, base centre, height, radius) of the cylinder, in mm
BOXES = (
    ("housing", (-8.25, -6.25, -3.25), (16.0, 12.0, 4.0)),
    ("battery_cell", (-4.0, -3.0, -2.5), (7.0, 5.0, 1.0)),
)
CYLINDER = ("feed_pin", (5.0, 3.0, -2.25), 3.0, 1.2)  # both inside the housing


def _write(path, build):
    """Build solids with gmsh's OCC API (``build(occ) -> {name: tag}``, mm) and write them as STEP in m."""
    with cad_assembly.gmsh_session() as gmsh:
        named = build(gmsh.model.occ)
        gmsh.model.occ.dilate(gmsh.model.occ.getEntities(3), 0, 0, 0, MM, MM, MM)
        cad_assembly.write_step(path, named)
    return path


def _three_bodies(occ):
    named = {name: occ.addBox(*lo, *size) for name, lo, size in BOXES}
    name, base, height, radius = CYLINDER
    named[name] = occ.addCylinder(*base, 0, 0, height, radius)
    return named


@pytest.fixture(scope="module")
def three_bodies(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("cad") / "three.step", _three_bodies)


def test_bodies_read_back_named_closed_and_within_tolerance(three_bodies):
    assembly = cad_assembly.load_step(three_bodies, tolerance=TOLERANCE)
    assert assembly.names == ("housing", "battery_cell", "feed_pin")
    name, _, height, radius = CYLINDER
    exact = {box: math.prod(size) * MM**3 for box, _, size in BOXES}
    exact[name] = math.pi * radius**2 * height * MM**3
    for body in assembly.bodies:
        assert body.mesh.is_watertight and body.mesh.is_winding_consistent
        assert body.deviation <= TOLERANCE
        # a chordal deviation d moves the surface inwards by at most d: |dV| <= area * d
        assert abs(body.volume - exact[body.name]) <= body.mesh.area * TOLERANCE, body.name
    lo, hi = assembly.body("battery_cell").bounds
    assert lo * 1e3 == pytest.approx([-4.0, -3.0, -2.5]) and hi * 1e3 == pytest.approx([3.0, 2.0, -1.5])
    # the cylinder is faceted: it loses volume, less when the tolerance is finer
    pin = assembly.body("feed_pin")
    assert 0 < exact[name] - pin.volume <= pin.mesh.area * TOLERANCE
    with pytest.raises(UnknownNameError, match="no body 'antenna'.*feed_pin"):
        assembly.body("antenna")


def test_materials_by_name_glob_and_toml(three_bodies, tmp_path):
    table = tmp_path / "materials.toml"
    table.write_text(
        "[materials]\n"
        "housing = { permittivity = 3.0, conductivity = 0.002 }\n"
        '"battery*" = { permittivity = 4.0, conductivity = 1.0 }\n'
        '"*" = "pec"\n'
    )
    assembly = cad_assembly.load_step(three_bodies, tolerance=1e-4, materials=table)
    housing, battery, pin = assembly.bodies
    assert isinstance(housing.medium, fdtd.Medium) and housing.medium.permittivity == 3.0  # exact name
    assert battery.medium.conductivity == 1.0  # the first matching glob, not the later "*"
    assert isinstance(pin.medium, fdtd.PEC)
    drude = cad_assembly.load_step(
        three_bodies,
        tolerance=1e-4,
        materials={
            "feed_*": {"model": "drude", "plasma_frequency": 2e15},
            "housing": "ignore",
            "bat*": "pec",
        },
    )
    assert isinstance(drude.body("feed_pin").medium, fdtd.Drude) and drude.body("housing").medium == "ignore"


def test_missing_material_names_the_bodies(three_bodies):
    with pytest.raises(
        ConfigurationError,
        match=r"three.step: no material for the bodies \['battery_cell', "
        r"'feed_pin'\] in <dict>",
    ):
        cad_assembly.load_step(three_bodies, tolerance=1e-4, materials={"housing": {"permittivity": 3.0}})
    with pytest.raises(ConfigurationError, match="'housing'.*unknown material 'copper'"):
        cad_assembly.load_step(three_bodies, materials={"housing": "copper"})


def test_damaged_missing_and_unknown_files(three_bodies, tmp_path):
    truncated = tmp_path / "truncated.step"
    truncated.write_text(three_bodies.read_text()[: len(three_bodies.read_text()) // 2])
    with pytest.raises(DataError, match="truncated.step: OpenCASCADE could not read this STEP file"):
        cad_assembly.load_step(truncated)
    with pytest.raises(MissingFileError, match="nowhere.step"):
        cad_assembly.load_step(tmp_path / "nowhere.step")
    with pytest.raises(MissingFileError, match="nowhere.toml"):
        cad_assembly.load_step(three_bodies, materials=tmp_path / "nowhere.toml")
    (tmp_path / "part.stl").write_text("solid x\nendsolid x\n")
    with pytest.raises(ConfigurationError, match="part.stl.*suffix '.stl'.*load_mesh"):
        cad_assembly.load_step(tmp_path / "part.stl")


def test_open_shell_is_refused(tmp_path):
    path = tmp_path / "open.brep"
    with cad_assembly.gmsh_session() as gmsh:
        gmsh.model.occ.addBox(0, 0, 0, 1e-3, 1e-3, 1e-3)
        gmsh.model.occ.addRectangle(0, 0, 2e-3, 1e-3, 1e-3)  # a sheet body: bounds no volume
        gmsh.model.occ.synchronize()
        gmsh.write(str(path))
    with pytest.raises(ConfigurationError, match="open.brep: 1 surfaces bound no solid"):
        cad_assembly.load_step(path)


def _plates(occ):
    return {
        "ground": occ.addBox(-10, -8, -0.0175, 20, 16, 0.035),  # a 35 um copper plane: a sheet (z)
        "short_pin": occ.addBox(6.9, 2.9, 0.0, 0.2, 0.2, 4.0),  # 0.2 mm square pin: a wire (z)
        "ring": occ.addCylinder(0, 0, 3.0, 0, 0, 0.05, 2.0),  # a thin disc of metal: not a rectangle
        "glass": occ.addBox(-9, -7, 5.0, 18, 14, 0.3),  # thin but a dielectric: stays a solid
        "screw": occ.addBox(8.0, -7.5, 1.0, 0.3, 0.3, 0.3),
    }


@pytest.fixture(scope="module")
def plates(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("cad") / "plates.step", _plates)


def test_thin_metal_becomes_sheets_and_wires(plates):
    grid = fdtd.Grid((24e-3, 20e-3, 14e-3), 0.5e-3)
    materials = {
        "ground": "pec",
        "short_pin": "pec",
        "ring": "ignore",
        "glass": {"permittivity": 6.5},
        "screw": "ignore",
    }
    assembly = cad_assembly.load_step(plates, tolerance=1e-4, materials=materials)
    glass, ground, pin = assembly.structures(grid)
    assert (glass.name, ground.name, pin.name) == ("glass", "ground", "short_pin")
    assert isinstance(glass.medium, fdtd.Medium) and not isinstance(glass.medium, PECSheet)
    assert isinstance(ground.medium, PECSheet) and ground.medium.size == pytest.approx((20e-3, 16e-3, 0.0))
    assert ground.medium.center[2] == pytest.approx(0.0, abs=1e-12)  # the node plane z = 0 (7 mm from -z)
    assert isinstance(pin.medium, PECSheet) and pin.medium.size == pytest.approx((0.0, 0.0, 4e-3))
    assert pin.medium.center[:2] == pytest.approx((7e-3, 3e-3))  # the node line nearest (7, 3) mm
    ground.check(grid, "ground")  # on a node plane: accepted when a simulation is built
    # the thin disc as metal: not a rectangle, so no sheet
    with pytest.raises(ConfigurationError, match=r"body 'ring' is PEC and thinner than a cell along \['z'\]"):
        cad_assembly.load_step(plates, materials={**materials, "ring": "pec"}).structures(grid)


def test_part_smaller_than_a_cell_is_refused(plates):
    materials = {"screw": {"permittivity": 4.0}, "*": "ignore"}
    assembly = cad_assembly.load_step(plates, tolerance=1e-4, materials=materials)
    with pytest.raises(
        ConfigurationError,
        match=r"body 'screw' measures 0.3 x 0.3 x 0.3 mm, smaller than "
        r"one cell \(0.5 x 0.5 x 0.5 mm\)",
    ):
        assembly.structures(fdtd.Grid((24e-3, 20e-3, 14e-3), 0.5e-3))
    # at finer cells it is kept
    (screw,) = assembly.structures(fdtd.Grid((24e-3, 20e-3, 14e-3), 0.25e-3))
    assert screw.name == "screw"


def _inverted_f(occ):
    """An inverted F over a ground plate (mm): a 1 mm arm at 13 mm, a stub and a pin down to the plate."""
    return {
        "ground": occ.addBox(-10, -8, -0.0175, 20, 16, 0.035),
        "short_pin": occ.addBox(-4.15, 7.7, 0.0175, 0.3, 0.3, 2.9825),  # from the copper to the arm
        "short_stub": occ.addBox(-4.5, 7.7, 3.0, 1.0, 4.8, 0.1),  # from over the pin to the arm's rim
        "arm": occ.addBox(-4.5, 12.5, 3.0, 10.0, 1.0, 0.1),
    }


@pytest.mark.parametrize("cell", [1.5e-3, 1e-3, 0.75e-3, 0.6e-3])
def test_thin_metal_that_touches_in_the_cad_still_touches_on_the_grid(tmp_path, cell):
    """Collapsing thin metal onto node planes moves each part by up to half a cell; the ends of parts
    that touch in the CAD follow (on 1 mm cells the stub's end, 12.5 mm, would round to 12 and the arm's
    line to 13: an open circuit)."""
    path = _write(tmp_path / "ifa.step", _inverted_f)
    assembly = cad_assembly.load_step(path, tolerance=1e-4, materials={"*": "pec"})
    sheets = {s.name: s.medium for s in assembly.structures(fdtd.Grid((30e-3, 36e-3, 18e-3), cell))}
    assert all(isinstance(sheet, PECSheet) for sheet in sheets.values())
    boxes = {}  # the rasterised box of each (zero-thick along its thin axes)
    for name, sheet in sheets.items():
        center, size = np.asarray(sheet.center), np.asarray(sheet.size)
        boxes[name] = np.array([center - size / 2, center + size / 2])
    for first, second in (("ground", "short_pin"), ("short_pin", "short_stub"), ("short_stub", "arm")):
        (lo1, hi1), (lo2, hi2) = boxes[first], boxes[second]
        assert np.all(lo1 <= hi2 + 1e-9) and np.all(lo2 <= hi1 + 1e-9), (first, second, boxes)
    for name, box in boxes.items():  # and nothing moved by more than a cell
        assert np.abs(box - assembly.body(name).bounds).max() <= cell + 1e-9, name
    assert boxes["ground"][1, 1] == pytest.approx(8e-3)  # the pin on its face does not trim its rim



@pytest.mark.parametrize("cell", [1.5e-3, 1e-3, 0.75e-3])
def test_thin_wires_take_the_cads_radius_and_join_the_metal_they_meet(tmp_path, cell):
    """``wires="thin"``: the 0.3 mm pin becomes a ThinWire of the square's equivalent radius (0.59 x 0.3
    mm, capped at STABLE_RADIUS cells) joined to the ground plate and the stub; on cells of 1 mm or more
    the 1 mm x 0.1 mm stub and arm are thin wires too, the arm's far end free on the half-node plane
    nearest the CAD's 5.5 mm; the pin's zeroed edges are the bare line's, and a simulation takes them all
    (the corner junctions' corrections merge)."""
    path = _write(tmp_path / "ifa.step", _inverted_f)
    assembly = cad_assembly.load_step(path, tolerance=1e-4, materials={"*": "pec"})
    grid = fdtd.Grid((30e-3, 36e-3, 18e-3), cell)
    structures = {s.name: s for s in assembly.structures(grid, wires="thin")}
    bare = {s.name: s for s in assembly.structures(grid)}
    pin = structures["short_pin"]
    assert isinstance(pin, fdtd.ThinWire) and pin.joined == (True, True)
    assert pin.radius == pytest.approx(min(0.59 * 0.3e-3, fdtd.thin_wire.STABLE_RADIUS * cell), rel=1e-3)
    assert np.allclose(cad_grid.drawn_bounds(pin, grid), cad_grid.drawn_bounds(bare["short_pin"], grid))
    stub, arm = structures["short_stub"], structures["arm"]
    if cell >= 1e-3:
        assert isinstance(stub, fdtd.ThinWire) and stub.joined == (True, True)
        assert isinstance(arm, fdtd.ThinWire) and not arm.joined[1]
        half_nodes = (arm.end[0] + grid.size[0] / 2) / cell - 0.5
        assert half_nodes == pytest.approx(round(half_nodes)) and abs(arm.end[0] - 5.5e-3) <= cell / 2 + 1e-9
        assert arm.radius == pytest.approx(cad_grid.equivalent_radius(1e-3, 0.1e-3))
    else:
        assert not isinstance(stub, fdtd.ThinWire) and not isinstance(arm, fdtd.ThinWire)
    fdtd.Simulation(size=grid.size, cell_size=cell, structures=list(structures.values()))
    with pytest.raises(ConfigurationError, match="wires must be 'bare' or 'thin'"):
        assembly.structures(grid, wires="round")


def test_equivalent_radius_of_a_strip_and_a_square():
    assert cad_grid.equivalent_radius(1.0, 0.0) == pytest.approx(0.25)  # a strip: w / 4
    assert cad_grid.equivalent_radius(0.3, 0.3) == pytest.approx(0.59 * 0.3)  # a square: 0.59 w
    assert cad_grid.equivalent_radius(0.1, 1.0) == cad_grid.equivalent_radius(1.0, 0.1)


def _frame_ring(occ):
    """A 1 mm metal ring (a phone frame) around a 20 x 16 mm opening, 4 mm tall; a 3 mm solid block."""
    outer, opening = occ.addBox(-11, -9, 0, 22, 18, 4), occ.addBox(-10, -8, -1, 20, 16, 6)
    (ring,), _ = occ.cut([(3, outer)], [(3, opening)])
    return {"ring": ring[1], "block": occ.addBox(-2, -2, -6, 4, 4, 3)}


def test_thin_walled_metal_solid_is_refused_until_the_cells_resolve_its_walls(tmp_path):
    path = _write(tmp_path / "ring.step", _frame_ring)
    assembly = cad_assembly.load_step(path, tolerance=1e-4, materials={"ring": "pec", "block": "pec"})
    thickness, area = assembly.body("ring").wall_thickness
    walls = area[np.isclose(thickness, 1e-3, rtol=1e-6)].sum()  # the CAD's 1 mm walls, both faces of each
    assert walls == pytest.approx(2 * 4e-3 * 2 * (22e-3 + 18e-3 + 20e-3 + 16e-3) / 2, rel=1e-9)
    block_thickness, _ = assembly.body("block").wall_thickness
    assert set(np.round(block_thickness * 1e3, 9)) == {3.0, 4.0}  # its height and its width
    size = (30e-3, 26e-3, 18e-3)
    for cell in (1.5e-3, 1e-3):  # walls no thicker than a cell: they would vanish or not by the grid's offset
        with pytest.raises(ConfigurationError, match=r"'ring' is PEC with walls 1 mm thick over 8\d% of"):
            assembly.structures(fdtd.Grid(size, cell))
    names = [s.name for s in assembly.structures(fdtd.Grid(size, 0.75e-3))]
    assert names == ["ring", "block"]


@pytest.mark.slow
def test_structures_voxelise_to_the_bodies_volume(three_bodies):
    grid = fdtd.Grid((20e-3, 16e-3, 10e-3), 0.5e-3)
    assembly = cad_assembly.load_step(
        three_bodies,
        tolerance=1e-4,
        materials={
            "housing": {"permittivity": 3.0},
            "battery_cell": {"permittivity": 4.0},
            "feed_pin": "pec",
        },
    )
    structures = assembly.structures(grid)
    assert [s.name for s in structures] == ["housing", "battery_cell", "feed_pin"]  # big, small, PEC
    for structure, body in zip(structures, assembly.bodies):
        fill = voxels.fill_fractions(structure.geometry, grid, component=None)
        assert float(fill.sum()) * grid.cell_volume == pytest.approx(body.volume, rel=0.01), body.name
    # the housing's faces lie on cell faces (half-way between nodes): its voxels are exactly its volume
    labels = voxels.material_grid(structures[:1], grid, component=None)
    assert int((labels == 1).sum()) == round(math.prod(BOXES[0][2]) * MM**3 / grid.cell_volume) == 32 * 24 * 8


def test_plot_names_the_bodies(three_bodies):
    assembly = cad_assembly.load_step(
        three_bodies,
        tolerance=1e-4,
        materials={"housing": {"permittivity": 3.0}, "battery*": {"permittivity": 4.0}, "feed_pin": "pec"},
    )
    sim = fdtd.Simulation(
        size=(20e-3, 16e-3, 10e-3),
        cell_size=0.5e-3,
        boundary=fdtd.PML(thickness=2),
        structures=assembly.structures(fdtd.Grid((20e-3, 16e-3, 10e-3), 0.5e-3)),
    )
    ax = sim.plot(normal="z", position=-2e-3)
    labels = {artist.get_label() for artist in ax.get_children()}
    assert {"structure 0: housing", "structure 1: battery_cell", "structure 2: feed_pin"} <= labels
    assert {"housing", "battery_cell", "feed_pin"} <= {text.get_text() for text in ax.texts}
    plt.close(ax.figure)


PHONE_MEDIA = {
    "housing": 3.0,
    "display_glass": 7.0,
    "pcb": 4.4,
    "ground_plane": "pec",
    "battery": 10.0,
    "ifa_arm": "pec",
    "ifa_short_stub": "pec",
    "ifa_feed_stub": "pec",
    "ifa_short_pin": "pec",
    "ifa_feed_pin": "pec",
    "frame_left_lower": "pec",
    "frame_left_upper": "pec",
    "frame_right_lower": "pec",
    "frame_right_upper": "pec",
    "frame_top": "pec",
    "frame_bottom": "pec",
}


def test_reference_phone_loads_with_its_bodies_and_media(tmp_path):
    from mindelec import cad_phone

    # the shipped file is what the generator writes for the default design
    regenerated = cad_phone.write_phone_step(tmp_path / "phone.step")
    assert regenerated.read_bytes() == cad_phone.EXAMPLE_STEP.read_bytes()
    phone = cad_assembly.load_step(
        cad_phone.EXAMPLE_STEP, tolerance=1e-4, materials=cad_phone.EXAMPLE_MATERIALS
    )
    assert phone.names == tuple(PHONE_MEDIA)
    for body in phone.bodies:
        expected = PHONE_MEDIA[body.name]
        if expected == "pec":
            assert isinstance(body.medium, fdtd.PEC), body.name
        else:
            assert body.medium.permittivity == expected and body.medium.conductivity > 0, body.name
    assert phone.body("ifa_arm").extents * 1e3 == pytest.approx((30.0, 1.0, 0.1))
    size = (80e-3, 150e-3, 12e-3)
    structures = {s.name: s for s in phone.structures(fdtd.Grid(size, 1e-3))}
    assert isinstance(structures["ground_plane"].medium, PECSheet)
    assert structures["ifa_short_pin"].medium.size == pytest.approx((0.0, 0.0, 3e-3))  # a wire, node to node
    assert isinstance(structures["frame_top"].medium, PECSheet)  # 1 mm plates on 1 mm cells: sheets
    finer = {s.name: s for s in phone.structures(fdtd.Grid(size, 0.75e-3))}
    assert not isinstance(finer["frame_top"].medium, PECSheet)  # thicker than a cell: a solid
    sim = fdtd.Simulation(
        size=size, cell_size=1e-3, boundary=fdtd.PML(thickness=2), structures=structures.values()
    )
    ax = sim.plot(normal="x", position=-20e-3)
    shown = {text.get_text() for text in ax.texts}
    assert {"housing", "pcb", "battery", "ifa_arm"} <= shown  # the 0.7 mm glass fills no cell half
    plt.close(ax.figure)


def test_phone_design_is_parametric_and_checked(tmp_path):
    from mindelec import cad_phone

    design = cad_phone.PhoneDesign(antenna_length=24.0, feed_to_short=4.0, clearance=8.0, frame=False)
    phone = cad_assembly.load_step(cad_phone.write_phone_step(tmp_path / "p.step", design), tolerance=1e-4)
    assert not [name for name in phone.names if name.startswith("frame")]
    assert phone.body("ifa_arm").extents[0] * 1e3 == pytest.approx(24.0)
    pins = [phone.body(f"ifa_{name}_pin").bounds.mean(0)[0] for name in ("short", "feed")]
    assert (pins[1] - pins[0]) * 1e3 == pytest.approx(4.0)
    with pytest.raises(ConfigurationError, match="antenna_height 9.0 mm must exceed"):
        cad_phone.PhoneDesign(antenna_height=9.0).check()


def test_translated_assembly_moves_every_body_and_keeps_its_volume():
    from mindelec import cad_phone

    phone = cad_assembly.load_step(
        cad_phone.EXAMPLE_STEP, tolerance=1e-4, materials=cad_phone.EXAMPLE_MATERIALS
    )
    offset = np.array([0.5e-3, -1.25e-3, 0.3e-3])
    moved = phone.translated(offset)
    assert moved.names == phone.names and moved.materials is phone.materials
    for before, after in zip(phone.bodies, moved.bodies):
        assert np.allclose(after.bounds, before.bounds + offset, atol=1e-12)
        assert after.volume == pytest.approx(before.volume, rel=1e-12)
        assert after.medium is before.medium
    assert np.allclose(phone.body("ifa_arm").bounds, moved.body("ifa_arm").bounds - offset, atol=1e-12)
    with pytest.raises(ConfigurationError, match="3 finite lengths"):
        phone.translated((1.0, 2.0))


def _cut_plate(gap):
    """A 0.1 mm copper plate (mm) on z = 0 cut across y by a gap of ``gap`` mm centred on y = 0."""
    return lambda occ: {
        "below": occ.addBox(-6, -9, -0.05, 12, 9 - gap / 2, 0.1),
        "above": occ.addBox(-6, gap / 2, -0.05, 12, 9 - gap / 2, 0.1),
    }


def _connected_across(structures, cell):
    """Whether PEC edges join the two plates on the grid: every y edge along x = 0 on the plates' plane
    within 8 mm of the cut is held at E = 0 by the simulation's own update coefficients."""
    simulation = fdtd.Simulation(size=(24e-3, 24e-3, 12e-3), cell_size=cell, structures=structures)
    electric, _ = simulation._coefficients()
    grid = simulation.grid
    x, z = (int(torch.argmin(grid.coordinates("Ey", a).abs())) for a in (0, 2))
    near_cut = grid.coordinates("Ey", 1).abs() < 8e-3
    return bool((electric["Ey"][1][x, near_cut, z] == 0).all())


@pytest.mark.parametrize("cell", [1.5e-3, 1e-3, 0.75e-3])
@pytest.mark.parametrize("gap", [1.0, 1.5, 2.0])
def test_a_gap_between_plates_stays_open_on_the_grid(tmp_path, cell, gap):
    """A cut narrower than about a cell and a half closed once both rims rounded outward (a phone frame's
    1.5 mm gaps were shorted on 1 and 1.5 mm cells); the grid keeps at least one cell open, and the
    plates still reach within a cell of their CAD rims."""
    path = _write(tmp_path / "cut.step", _cut_plate(gap))
    assembly = cad_assembly.load_step(path, tolerance=1e-4, materials={"*": "pec"})
    structures = assembly.structures(fdtd.Grid((24e-3, 24e-3, 12e-3), cell))
    assert not _connected_across(structures, cell)
    whole = _write(tmp_path / "whole.step", _cut_plate(0.0))  # the control: touching plates stay joined
    joined = cad_assembly.load_step(whole, tolerance=1e-4, materials={"*": "pec"})
    assert _connected_across(joined.structures(fdtd.Grid((24e-3, 24e-3, 12e-3), cell)), cell)
    for structure in structures:
        sheet, body = structure.medium, assembly.body(structure.name)
        rims = np.asarray(sheet.center)[1] + np.array([-1, 1]) * np.asarray(sheet.size)[1] / 2
        assert np.abs(rims - body.bounds[:, 1]).max() <= cell + 1e-9


@pytest.mark.parametrize("cell", [1.5e-3, 1e-3, 0.75e-3])
def test_conformal_plates_keep_the_cads_gap(tmp_path, cell):
    """With conformal metal the rims are cut where the CAD puts them, so a 1.5 mm cut keeps its width on
    every grid (the staircase's reopening made it one cell: 1 mm on 1 mm cells), and the plates' E edges
    across it are not held at zero (no short)."""
    from mindelec.cad_grid import drawn_bounds

    path = _write(tmp_path / "cut.step", _cut_plate(1.5))
    assembly = cad_assembly.load_step(path, tolerance=1e-4, materials={"*": "pec"})
    grid = fdtd.Grid((24e-3, 24e-3, 12e-3), cell)
    gaps = {}
    for conformal in (True, False):
        structures = assembly.structures(grid, conformal=conformal)
        drawn = {s.name: drawn_bounds(s, grid, conformal) for s in structures}
        gaps[conformal] = float(drawn["above"][0][1] - drawn["below"][1][1])
    assert abs(gaps[True] - 1.5e-3) < 1e-9
    assert abs(gaps[False] - {1.5e-3: 1.5e-3, 1e-3: 1e-3, 0.75e-3: 1.5e-3}[cell]) < 1e-9  # reopened: a cell
    structures = assembly.structures(grid, conformal=True)
    simulation = fdtd.Simulation(size=(24e-3, 24e-3, 12e-3), cell_size=cell, structures=structures,
                                 subpixel=True)
    electric, _ = simulation._coefficients(simulation._conformal)
    x, z = (int(torch.argmin(simulation.grid.coordinates("Ey", a).abs())) for a in (0, 2))
    across = simulation.grid.coordinates("Ey", 1).abs() < 2 * cell
    assert bool((electric["Ey"][1][x, across, z] != 0).any())


def test_a_gap_that_leaves_a_plate_under_a_cell_is_refused(tmp_path):
    path = _write(tmp_path / "strip.step", lambda occ: {
        "plate": occ.addBox(-6, -9, -0.05, 12, 9, 0.1),
        "strip": occ.addBox(-6, 0.4, -0.05, 12, 1.1, 0.1),  # 1.1 mm wide, 0.4 mm from the plate
    })
    assembly = cad_assembly.load_step(path, tolerance=1e-4, materials={"*": "pec"})
    with pytest.raises(ConfigurationError, match=r"body 'strip'.*gap to body 'plate'.*refine the cells"):
        assembly.structures(fdtd.Grid((24e-3, 24e-3, 12e-3), 1e-3))


def test_a_hollow_solid_has_its_walls_volume_and_keeps_its_place_among_the_media(tmp_path):
    """A 10 mm box with a 6 mm void (784 mm^3) overlapped by a 10.4 mm potting block (1,125 mm^3): the
    void's shell faces inward, so the case's volume is its walls' and the case is drawn over the potting
    (the larger body goes first; counting the void, 1,216 mm^3, put the potting over the case)."""

    def build(occ):
        outer, void = occ.addBox(-5, -5, -5, 10, 10, 10), occ.addBox(-3, -3, -3, 6, 6, 6)
        (case,), _ = occ.cut([(3, outer)], [(3, void)])
        return {"case": case[1], "potting": occ.addBox(-5.2, -5.2, -5.2, 10.4, 10.4, 10.4)}

    path = _write(tmp_path / "hollow.step", build)
    assembly = cad_assembly.load_step(path, materials={"case": {"permittivity": 4.0},
                                                       "potting": {"permittivity": 1.5}})
    assert assembly.body("case").volume == pytest.approx((1000 - 216) * MM**3, rel=1e-9)
    assert assembly.body("case").geometry.volume == pytest.approx((1000 - 216) * MM**3, rel=1e-9)
    grid = fdtd.Grid((14 * MM, 14 * MM, 14 * MM), 0.5 * MM)
    structures = assembly.structures(grid)
    wall = torch.tensor([[4.0 * MM, 0.1 * MM, 0.2 * MM]], dtype=torch.float64)
    owners = [s.medium.permittivity for s in structures if bool(s.geometry.contains(wall)[0])]
    assert owners[-1] == 4.0  # the case's wall, drawn last among what covers it


def test_a_thin_cylinder_tessellates_within_tolerance(tmp_path):
    """A via of 0.4 mm diameter and 1.6 mm length: gmsh's projection fails on its side, so the deviation
    is also bounded by the triangles' own vertices (it used to refine forever)."""
    path = _write(tmp_path / "via.step", lambda occ: {"via": occ.addCylinder(0, 0, 0, 0, 0, 1.6, 0.2)})
    via = cad_assembly.load_step(path, tolerance=1e-4).body("via")
    assert via.deviation <= 1e-4
    assert via.volume == pytest.approx(math.pi * 0.2**2 * 1.6 * MM**3, rel=0.05)


def test_a_label_entry_reaches_every_body_of_that_label(tmp_path):
    def build(occ):
        return {"screw": occ.addBox(0, 0, 0, 1, 1, 1), "screw ": occ.addBox(2, 0, 0, 1, 1, 1),
                "screw.2": occ.addBox(4, 0, 0, 1, 1, 1)}

    path = _write(tmp_path / "screws.step", build)
    assembly = cad_assembly.load_step(path, materials={"screw": "pec", "*": {"permittivity": 3.0}})
    names = [body.name for body in assembly.bodies]
    assert len(set(names)) == 3 and "screw.2" in names
    media = {body.name: body.medium for body in assembly.bodies}
    assert sum(isinstance(medium, fdtd.PEC) for medium in media.values()) == 2  # both labelled "screw"
    assert media["screw.2"].permittivity == 3.0  # labelled "screw.2" itself


def test_a_material_value_of_the_wrong_type_is_refused(three_bodies):
    for value in (True, "4"):
        with pytest.raises(ConfigurationError, match=r"\['permittivity'\] must be numbers"):
            cad_assembly.load_step(three_bodies, tolerance=1e-4, materials={"*": {"permittivity": value}})
