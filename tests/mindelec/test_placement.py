"""Where things sit in an FDTD set-up (issue 45, item 5): a monitor is refused when it reaches into a PML (a
flux box read 44 % and 99 % low there, silently), naming the monitor, the axis and the cells to move; a
source in a PML or a structure outside the domain warns; a domain that is not a whole number of cells
warns with the cell size it really gets.

The refusal's edge is checked against physics: a flux box moved inward by exactly the cells the message
names is accepted and measures the power a box well inside measures (Poynting's theorem in vacuum)."""

import re
import warnings

import pytest
import torch

import mindelec as me
from common.errors import ConfigurationError
from common.geometry import Rectangle

fdtd = me.fdtd
CELL = 2e-5
CELLS, PML_CELLS = 60, 10
SIZE = (CELLS * CELL, CELLS * CELL)
PULSE = fdtd.GaussianPulse(f0=1e12, fwidth=0.5e12)  # 15 cells per wavelength at 1 THz
FREQUENCIES = [0.8e12, 1e12, 1.2e12]


def _simulation(monitors, **overrides):
    arguments = dict(
        size=SIZE, cell_size=CELL, boundary=fdtd.PML(PML_CELLS), dtype=torch.float64,
        sources=[fdtd.PointDipole((0, 0), "Ez", PULSE)], monitors=monitors,
    )
    arguments.update(overrides)
    return fdtd.Simulation(**arguments)


def _box(edge_cells):
    return fdtd.FluxBox("box", FREQUENCIES, center=(0, 0), size=(edge_cells * CELL, edge_cells * CELL))


def test_a_flux_box_in_the_pml_is_refused_and_one_moved_in_as_told_measures_the_right_power():
    with pytest.raises(ConfigurationError, match=r"FluxBox\('box'.*reaches into the PML along x") as error:
        _simulation([_box(CELLS - 2 * PML_CELLS + 2)])
    inward = int(re.search(r"move it (\d+) cell\(s\) inward", str(error.value)).group(1))
    assert inward >= 1
    edge = CELLS - 2 * PML_CELLS + 2 - 2 * inward  # moved in at both ends
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # accepted without a word
        outer = _simulation([_box(edge)])
    inner = _simulation([_box(12)])
    until = PULSE.duration + 3 * SIZE[0] / 3e8
    outer_flux = outer.run(until=until, progress=False)["box"]["flux"]
    inner_flux = inner.run(until=until, progress=False)["box"]["flux"]
    # the same radiated power crosses both closed boxes around the dipole
    assert torch.allclose(outer_flux / inner_flux, torch.ones(3, dtype=torch.float64), atol=0.02)


def test_power_monitors_in_the_pml_are_refused():
    plane = fdtd.FluxMonitor("plane", FREQUENCIES, center=(-(CELLS / 2 - 3) * CELL, 0), size=(0, 10 * CELL))
    with pytest.raises(ConfigurationError, match=r"FluxMonitor\('plane'.*reaches into the PML along x"):
        _simulation([plane])
    cube = dict(
        size=(20 * CELL,) * 3, sources=[fdtd.PointDipole((0, 0, 0), "Ez", PULSE)], boundary=fdtd.PML(4)
    )
    far = fdtd.NearToFarMonitor("far", FREQUENCIES, center=(0, 0, 0), size=(18 * CELL, 8 * CELL, 8 * CELL))
    with pytest.raises(ConfigurationError, match=r"NearToFarMonitor\('far'.*reaches into the PML along x"):
        _simulation([far], **cube)
    inside = fdtd.NearToFarMonitor("far", FREQUENCIES, center=(0, 0, 0), size=(8 * CELL,) * 3)
    _simulation([inside], **cube)


def test_a_plane_across_the_whole_domain_is_a_cross_section_and_accepted():
    """A flux plane larger than the domain spans the transverse axis PML and all, like a mode port; only
    its position along the normal is checked."""
    across = fdtd.FluxMonitor("across", FREQUENCIES, center=(5 * CELL, 0), size=(0, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _simulation([across])


def test_a_probe_in_the_pml_is_refused_a_source_warns_and_a_whole_domain_field_map_is_accepted():
    with pytest.raises(ConfigurationError, match=r"FieldProbe\('edge'.*PML along y.*move it 9 cell"):
        _simulation([fdtd.FieldProbe("edge", (0, (CELLS / 2 - 2) * CELL), ("Ez",))])
    with pytest.warns(fdtd.PlacementWarning, match=r"PointDipole.*lies in the PML along x"):
        _simulation([], sources=[fdtd.PointDipole(((CELLS / 2 - 1) * CELL, 0), "Ez", PULSE)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _simulation([fdtd.DFTMonitor("everything", FREQUENCIES, ("Ez",)), fdtd.Snapshots("frames", every=5)])


def test_a_structure_outside_the_domain_warns():
    outside = fdtd.Structure(Rectangle((2e-3, 0), (2.1e-3, 1e-4)), fdtd.Medium(4.0))
    with pytest.warns(fdtd.PlacementWarning, match=r"wholly outside the domain along x"):
        _simulation([], structures=[outside])
    inside = fdtd.Structure(Rectangle((0, 2e-4), (1e-4, 3e-4)), fdtd.Medium(4.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _simulation([], structures=[inside])


def test_a_domain_that_is_not_whole_cells_warns_with_the_cell_it_gets():
    expected = r"along y is 60.5 cells of 2e-05 m.*give size 0.0012 m"
    with pytest.warns(fdtd.GridWarning, match=expected) as caught:
        _simulation([], size=(CELLS * CELL, 60.5 * CELL))
    got = float(re.search(r"the cells are ([0-9.e+-]+) m", str(caught[0].message)).group(1))
    assert got == pytest.approx(60.5 * CELL / 60, rel=1e-5)  # what the run really uses
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _simulation([], size=(CELLS * CELL, 61 * CELL))


@pytest.mark.parametrize(
    ("medium", "cause"),
    [
        (fdtd.PEC(), r"structure 1 \(PEC\(\)\) crosses the plane and is metal: the 2D \(line\) mode solver "
                     r"takes no metal"),
        (fdtd.Medium(4.0, conductivity=0.5), r"structure 1 \(Medium.*\) crosses the plane and is lossy"),
        (fdtd.Drude(2e14, 1e12), r"structure 1 \(Drude.*\) crosses the plane and is dispersive"),
    ],
    ids=["metal", "loss", "dispersion"],
)
def test_a_mode_port_names_the_structure_and_the_real_cause(medium, cause):
    """The guide is lossless; a second structure across the port's plane is the cause and is named (not
    the guide, not a structure elsewhere). The same medium away from the plane leaves the port alone (it
    used to be refused wherever it was in the domain)."""
    size, cell = (4e-3, 2e-3), 1e-4
    guide = fdtd.Structure(Rectangle((-2e-3, -2e-4), (2e-3, 2e-4)), fdtd.Medium(4.0))
    crossing = fdtd.Structure(Rectangle((-1.5e-3, 5e-4), (-5e-4, 7e-4)), medium)
    elsewhere = fdtd.Structure(Rectangle((1e-3, 5e-4), (1.5e-3, 7e-4)), medium)
    with pytest.raises(ConfigurationError, match=cause) as error:
        fdtd.CrossSection(-1e-3, size, cell, structures=[guide, crossing, elsewhere])
    assert "structure 0" not in str(error.value) and "structure 2" not in str(error.value)
    fdtd.CrossSection(-1e-3, size, cell, structures=[guide, elsewhere])  # the plane itself is fine
