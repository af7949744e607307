"""GDS import: layers of a layout written by gdstk become 2D polygons or 3D prisms with the file's areas."""

import math

import gdstk  # the cad extra, part of all: installed by make install
import pytest
import torch

from common.errors import ConfigurationError
from common.geometry import rasterize
from mindelec import fdtd
from mindelec.gds import Prism, structures_from_gds


@pytest.fixture
def layout(tmp_path):
    """A GDS file in um: a 2 x 1 rectangle (layer 1), a disk of radius 0.6 (2/5), a bent path (layer 3)."""
    library = gdstk.Library(unit=1e-6, precision=1e-9)
    top = library.new_cell("TOP")
    top.add(gdstk.rectangle((-1.5, -1.0), (0.5, 0.0), layer=1))
    top.add(gdstk.ellipse((0.8, 0.9), 0.6, tolerance=1e-4, layer=2, datatype=5))
    top.add(gdstk.FlexPath([(-1.5, 1.2), (-0.5, 1.2), (-0.5, 1.8)], 0.2, layer=3))
    path = tmp_path / "device.gds"
    library.write_gds(str(path))
    areas = {
        key: sum(p.area() for p in top.get_polygons() if (p.layer, p.datatype) == key) * 1e-12
        for key in ((1, 0), (2, 5), (3, 0))
    }
    return path, areas


def _rasterized_area(structure, ndim):
    axis = torch.linspace(-2e-6, 2e-6, 201, dtype=torch.float64)
    spacing = float(axis[1] - axis[0])
    centers = [axis, axis] + ([torch.tensor([0.0], dtype=torch.float64)] if ndim == 3 else [])
    fill = rasterize(structure.geometry, centers, [spacing] * ndim, supersample=8)
    return float(fill.sum()) * spacing**2


def test_2d_layers_keep_the_layout_areas(layout):
    path, areas = layout
    media = {1: fdtd.Medium(12.0), (2, 5): fdtd.Medium(2.1), 3: fdtd.PEC()}
    structures = structures_from_gds(path, media)
    assert [type(s.medium) for s in structures] == [fdtd.Medium, fdtd.Medium, fdtd.PEC]
    for structure, key in zip(structures, ((1, 0), (2, 5), (3, 0))):
        assert _rasterized_area(structure, 2) == pytest.approx(areas[key], rel=2e-3)
    assert areas[(2, 5)] == pytest.approx(math.pi * 0.36e-12, rel=1e-3)
    sim = fdtd.Simulation(size=(4e-6, 4e-6), cell_size=0.1e-6, structures=structures)
    assert len(sim.structures) == 3


def test_3d_prisms_and_their_normals(layout):
    path, areas = layout
    (slab,) = structures_from_gds(path, {1: (-0.11e-6, 0.11e-6, fdtd.Medium(12.0))})
    assert isinstance(slab.geometry, Prism)
    assert slab.geometry.volume == pytest.approx(areas[(1, 0)] * 0.22e-6, rel=1e-9)
    # the z = 0 section has the layout's area; the prism ends at its heights
    assert _rasterized_area(slab, 3) == pytest.approx(areas[(1, 0)], rel=2e-3)
    inside = torch.tensor([[-0.5e-6, -0.5e-6, 0.1e-6], [-0.5e-6, -0.5e-6, 0.12e-6]], dtype=torch.float64)
    assert slab.geometry.contains(inside).tolist() == [True, False]
    near = torch.tensor([[-0.5e-6, -0.5e-6, 0.105e-6], [0.49e-6, -0.5e-6, 0.0]], dtype=torch.float64)
    assert slab.geometry.boundary_normal(near).tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    sim = fdtd.Simulation(size=(4e-6, 4e-6, 1e-6), cell_size=0.1e-6, structures=[slab], subpixel=True)
    assert sim.plot(normal="x", position=-0.5e-6) is not None


def test_refusals_name_the_layer_and_the_cells(layout, tmp_path):
    path, _ = layout
    with pytest.raises(ConfigurationError, match=r"layer \(7, 0\) has no polygon in cell 'TOP'"):
        structures_from_gds(path, {7: fdtd.Medium(2.0)})
    with pytest.raises(ConfigurationError, match="must map to a medium"):
        structures_from_gds(path, {1: (0.0, fdtd.Medium(2.0))})
    library = gdstk.read_gds(str(path))
    library.new_cell("OTHER").add(gdstk.rectangle((0, 0), (1, 1)))
    with pytest.raises(ConfigurationError, match="2 top-level cells"):
        structures_from_gds(library, {1: fdtd.Medium(2.0)})
    with pytest.raises(FileNotFoundError, match="no GDS file"):
        structures_from_gds(tmp_path / "missing.gds", {1: fdtd.Medium(2.0)})
