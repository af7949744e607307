"""Conformal rims of zero-thickness PEC sheets (``pec_sheet`` with ``subpixel=True``).

Reference: a rectangular cavity with a septum, a zero-thickness PEC sheet across its middle plane from one
wall to a rim at ``x = L``, solved by mode matching (the two half-guides beside the sheet against the full
guide beyond its rim, their modes' amplitudes matched on the rim's plane; N = 100 and 200 modes, extrapolated
in 1/N, agree with N = 200 and 400 to 4e-6). The cavity is periodic along y (two cells), so its modes are
those of the 2D cross-section: ``Ey`` (TM: Dirichlet on the sheet, the modes even about its plane) and
``Hy`` (TE: Neumann, odd modes).
"""

import functools
import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from test_conformal import _h_operator, _largest_eigenvalue, _paths_agree

from common.units import SPEED_OF_LIGHT
from mindelec import fdtd

LENGTH, HEIGHT = 6e-3, 4e-3  # the cavity along x and z (m)


@functools.cache
def _septum_modes(polarization, modes):
    """On the rim's plane, upper half ``0 < z < H/2``: the transverse wavenumbers (1/m) of the modes beside
    the sheet and beyond its rim, their overlaps ``<beyond_m, beside_n>`` and their norms."""
    half = HEIGHT / 2
    nodes, weights = np.polynomial.legendre.leggauss(4 * modes + 200)
    z, weights = (nodes + 1) * half / 2, weights * half / 2
    beyond_k = (2 * np.arange(1, modes + 1) - 1) * np.pi / HEIGHT
    if polarization == "TM":  # E = 0 on the sheet (both sides) and the walls
        beside_k = 2 * np.arange(1, modes + 1) * np.pi / HEIGHT
        beside, beyond = np.sin(np.outer(beside_k, z)), np.cos(np.outer(beyond_k, z))
    else:  # dH/dn = 0 on the sheet and the walls; the odd modes vanish on the plane beyond the rim
        beside_k = 2 * np.arange(0, modes) * np.pi / HEIGHT
        beside, beyond = np.cos(np.outer(beside_k, z)), np.sin(np.outer(beyond_k, z))
    return beside_k, beyond_k, (beyond * weights) @ beside.T, (beside**2) @ weights, (beyond**2) @ weights


def _septum_matrix(wavenumber, rim, polarization, modes):
    """The mode-matching matrix (symmetric, singular at a resonance): the normal derivative's continuity on
    the rim's plane, for the field there expanded in the modes beyond the rim."""
    beside_k, beyond_k, overlap, beside_norm, beyond_norm = _septum_modes(polarization, modes)

    def admittance(transverse, distance):  # d/dx of the mode at the plane, for unit amplitude there
        beta = np.sqrt((wavenumber**2 - transverse**2).astype(complex))
        value = beta / np.tan(beta * distance) if polarization == "TM" else -beta * np.tan(beta * distance)
        return value.real

    left = (overlap * (admittance(beside_k, rim) / beside_norm)) @ overlap.T
    return left + np.diag(admittance(beyond_k, LENGTH - rim) * beyond_norm)


def _septum_reference(rim, polarization, guess):
    """The resonance's wavenumber (1/m) nearest ``guess`` (within 5 %), extrapolated in 1/modes."""

    def smallest(wavenumber, modes):
        values = np.linalg.eigvalsh(_septum_matrix(wavenumber, rim, polarization, modes))
        return values[np.argmin(np.abs(values))]

    found = []
    for modes in (100, 200):
        grid = np.linspace(0.95 * guess, 1.05 * guess, 21)
        values = [smallest(k, modes) for k in grid]
        roots = [brentq(smallest, a, b, args=(modes,), xtol=1e-12)
                 for a, b, fa, fb in zip(grid, grid[1:], values, values[1:]) if fa * fb < 0]
        roots = [k for k in roots if abs(smallest(k, modes)) < 1e-6 * np.abs(values).max()]  # not poles
        found.append(min(roots, key=lambda k: abs(k - guess)))
    return 2 * found[1] - found[0]


def _septum(rim, cells_per_mm, subpixel):
    cell = 1e-3 / cells_per_mm
    width = 2 * cell
    sheet = fdtd.pec_sheet(center=(-LENGTH / 2 + rim / 2, 0.0, 0.0), size=(rim, width, 0.0), cell_size=cell)
    return fdtd.Simulation(
        size=(LENGTH, width, HEIGHT), cell_size=cell, boundary=(fdtd.PEC(), fdtd.Periodic(), fdtd.PEC()),
        structures=[sheet], subpixel=subpixel, dtype=torch.float64,
    )


def _resonance(sim, guess, polarization):
    """The semi-discrete wavenumber (1/m) of the probed operator's TM (no ``Hy``) or TE (``Hy``) mode
    nearest ``guess``."""
    import scipy.sparse.linalg as sparse_linalg

    operator = _h_operator(sim)
    count = operator.shape[0] // 3
    if polarization == "TE":  # its y-invariant modes lie in the Hy block (and clear of the gradients' zeros)
        operator = operator[count : 2 * count, count : 2 * count]
        values = sparse_linalg.eigs(operator, k=2, sigma=(guess * SPEED_OF_LIGHT * sim.dt) ** 2)[0]
        wavenumbers = np.sqrt(np.clip(values.real, 0, None)) / (SPEED_OF_LIGHT * sim.dt)
        return float(wavenumbers[np.argmin(np.abs(wavenumbers - guess))])
    values, vectors = sparse_linalg.eigs(operator, k=4, sigma=(guess * SPEED_OF_LIGHT * sim.dt) ** 2)
    weight = np.abs(vectors) ** 2
    kind = weight[count : 2 * count].sum(0) / weight.sum(0) < 0.5  # little Hy: TM
    wavenumbers = np.sqrt(np.clip(values.real[kind], 0, None)) / (SPEED_OF_LIGHT * sim.dt)
    return float(wavenumbers[np.argmin(np.abs(wavenumbers - guess))])


@pytest.mark.slow
@pytest.mark.parametrize("polarization", ["TM", "TE"])
def test_septum_resonance_follows_the_rim_within_a_cell(polarization):
    """The rim moved across one cell in eighths (4 cells per mm, the resonance against mode matching): with
    conformal rims, their singular-field factors and their placement, how much longer the sheet acts than
    drawn no longer depends on where the rim lies in its cell (measured spread 0.0098 cells in TM, 0.0036 in
    TE, at rims on sixteenths offset from these; the offset itself, -0.07 and 0.008 cells, halves at 8 cells
    per mm: second order, ``test_septum_converges_at_second_order``), and the resonance moves monotonically
    with the rim. The staircase's resonance steps, its sheet -0.34 to 0.55 cells (TM) and 0.24 to 1.04
    cells (TE) longer (measured; factors without the placement left -0.065 to 0.063 and 0.010 to 0.132)."""
    cells_per_mm, guess = 4, {"TM": 1078.0, "TE": 486.0}[polarization]
    rims = 2.25e-3 + np.arange(9) * 0.25e-3 / 8
    references, found = [], {False: [], True: []}
    for rim in rims:
        references.append(_septum_reference(rim, polarization, guess))
        guess = references[-1]
        for subpixel in (False, True):
            found[subpixel].append(_resonance(_septum(rim, cells_per_mm, subpixel), guess, polarization))
    slope = np.gradient(references, rims, edge_order=2)  # 1/m per m of rim
    excess = {kind: (np.array(found[kind]) - references) / slope * cells_per_mm * 1e3 for kind in found}
    conformal, staircase = excess[True], excess[False]
    assert np.abs(conformal).max() < 0.1, conformal
    assert np.ptp(conformal) < 0.02, conformal
    assert 4 * np.abs(conformal).max() < np.abs(staircase).max(), (conformal, staircase)
    assert 20 * np.ptp(conformal) < np.ptp(staircase), (conformal, staircase)
    steps = np.diff(found[True]) * np.sign(slope[0])
    assert (steps > 0).all(), found[True]


@pytest.mark.slow
@pytest.mark.parametrize("polarization", ["TM", "TE"])
def test_septum_converges_at_second_order(polarization):
    """Rims at fixed places (so at other offsets in their cells at each resolution), 4, 8 and 16 cells per
    mm: the resonance's error against mode matching falls as the square of the cell (measured orders
    1.98 and 1.92 in TM, 2.39 and 2.72 in TE; 32 cells per mm continues TM's at 1.98-2.03, the errors
    3.2e-5 to 3.4e-5). The rims placed only by the factors converged at order 0.81 and 1.82 (TM), 0.83 and
    4.25 (TE): their error depends on where the rim lies in its cell."""
    guess = {"TM": 1078.0, "TE": 486.0}[polarization]
    for rim in (2.325e-3, 2.41e-3):
        reference = _septum_reference(rim, polarization, guess)
        errors = [abs(_resonance(_septum(rim, cells_per_mm, True), reference, polarization) / reference - 1)
                  for cells_per_mm in (4, 8, 16)]
        order = math.log(errors[0] / errors[2], 4)
        assert order > 1.7, (rim, errors)
        assert errors[0] < 3e-3 and errors[1] < errors[0] / 2.5, (rim, errors)


def test_a_sheet_drawn_in_pieces_is_one_conductor():
    """Rim factors apply at free rims only: a plate drawn as two abutting pieces gives the whole plate's
    weights (to round-off); a plate whose rim meets a perpendicular sheet has no factor there (nor has
    that sheet's rim on the plate), nor has a strip's end where a lumped element feeds it; a rim on the
    domain's wall takes none."""
    cell = 1e-4
    size = 16 * cell

    def weights(*sheets):
        sim = fdtd.Simulation(size=(size,) * 3, cell_size=cell, structures=list(sheets), subpixel=True)
        return sim._conformal.fractions

    whole = weights(fdtd.pec_sheet((0.3 * cell, 0.0, 0.0), (6.4 * cell, 5.3 * cell, 0.0), cell))
    pieces = weights(fdtd.pec_sheet((-1.3 * cell, 0.0, 0.0), (3.2 * cell, 5.3 * cell, 0.0), cell),
                     fdtd.pec_sheet((1.9 * cell, 0.0, 0.0), (3.2 * cell, 5.3 * cell, 0.0), cell))
    for component in whole:
        assert torch.allclose(whole[component], pieces[component], rtol=0, atol=1e-12), component

    plate = fdtd.pec_sheet((0.0, 0.0, 0.0), (6 * cell, 5.3 * cell, 0.0), cell)  # rims at x = +-3 cells
    wall = fdtd.pec_sheet((3 * cell, 0.0, -2 * cell), (0.0, 5.3 * cell, 4 * cell), cell)  # under x = 3
    above = (11, slice(7, 10), 8)  # Ez edges from the plate's plane up at x = 3 cells, off its corners
    assert float((weights(plate)["Ez"][above] - 1).abs().min()) > 0.05  # the free rim's factors
    assert float(weights(plate, wall)["Ez"][above].max()) == 1.0
    assert float((weights(plate, wall)["Ez"][(5, slice(7, 10), 8)] - 1).abs().min()) > 0.05

    # a strip fed by a resistor (a port's gap) from a ground plane below its end at x = 3 cells
    strip = fdtd.pec_sheet((0.0, 0.0, 0.0), (6 * cell, 4 * cell, 0.0), cell)
    ground = fdtd.pec_sheet((0.0, 0.0, -2 * cell), (12 * cell, 12 * cell, 0.0), cell)
    feed = fdtd.lumped_resistor((3 * cell, 0.0, -cell), (cell, cell, 2 * cell), "z", 50.0)
    fed = weights(strip, ground, feed)["Ez"]
    assert float(fed[11, 8, 7]) == 1.0 and abs(float(fed[5, 8, 7]) - 1) > 0.05

    reach = weights(fdtd.pec_sheet((0.0, 0.0, 0.0), (size, 6 * cell, 0.0), cell))["Ez"]  # wall to wall
    assert float(reach[0, 8, 8]) == 1.0 and float(reach[-1, 8, 8]) == 1.0  # rims on the walls: none
    assert abs(float(reach[8, 11, 8]) - 1) > 0.05  # the free rim at y = 3 cells


def test_off_grid_plates_and_wires_keep_the_leapfrog_stable():
    """Plates with both rims and their corners off the grid (their rim factors, up to sqrt(2), included)
    beside a wire whose ends are off it: at ``courant=1`` the largest eigenvalue of the probed operator
    stays below the leapfrog's bound 4 (measured 0.65-0.70 of it, the step 0.78-0.82 of Yee's)."""
    cell = 1e-4
    size = 14 * cell
    for x, y, width, depth in ((0.013, -0.021, 0.61, 0.43), (0.031, 0.007, 0.53, 0.57)):
        plate = fdtd.pec_sheet(center=(x * size, y * size, 0.0), size=(width * size, depth * size, 0.0),
                               cell_size=cell)
        wire = fdtd.pec_sheet(center=(3 * cell, -4 * cell, 0.1 * size + 0.5 * cell), size=(0, 0, 0.37 * size),
                              cell_size=cell)
        sim = fdtd.Simulation(size=(size,) * 3, cell_size=cell, structures=[plate, wire], subpixel=True,
                              courant=1.0, dtype=torch.float64)
        assert sim._stepper(1).conformal.count > 100
        assert sim.dt < 0.9 * sim._stability_limit()
        assert _largest_eigenvalue(sim) < 4.0


@pytest.mark.slow
def test_patch_over_a_ground_plane_radiates_away():
    """A patch with off-grid rims over a ground plane that runs into the PML: after 6,000 steps the fields
    between them and above fall below 1e-4 of their peak (measured 2e-6)."""
    cell, cells = 1e-4, 30
    size = cells * cell
    patch = fdtd.pec_sheet(center=(0.013 * size, -0.021 * size, 0.0), size=(0.41 * size, 0.29 * size, 0.0),
                           cell_size=cell)
    ground = fdtd.pec_sheet(center=(0.0, 0.0, -2 * cell), size=(2 * size, 2 * size, 0.0), cell_size=cell)
    frequency = SPEED_OF_LIGHT / (12 * cell)
    sim = fdtd.Simulation(
        size=(size,) * 3, cell_size=cell, boundary=fdtd.PML(8), structures=[ground, patch], subpixel=True,
        sources=[fdtd.PointDipole((0.02 * size, 0.03 * size, -cell), "Ez",
                                  fdtd.GaussianPulse(frequency, 0.5 * frequency))],
        monitors=[fdtd.FieldProbe("above", (0.2 * size, 0.1 * size, 0.1 * size), ("Ez", "Hx")),
                  fdtd.FieldProbe("between", (0.05 * size, 0.0, -cell), ("Ez", "Hy"))],
    )
    assert sim._stepper(1).conformal.count > 100
    result = sim.run(steps=6000, progress=False)
    for probe, components in (("above", ("Ez", "Hx")), ("between", ("Ez", "Hy"))):
        for component in components:
            series = result[probe][component].abs()
            assert bool(torch.isfinite(series).all())
            assert float(series[-500:].max()) < 1e-4 * float(series.max())


def test_compiled_torch_and_differentiable_paths_agree_with_sheets():
    """With off-grid sheet rims (a patch over a dielectric above a ground plane), the compiled kernel's
    path, the torch path and a differentiable run give the same fields, and the gradient of the probe's
    energy with respect to the dielectric's permittivity matches central differences."""
    from common import geometry

    cell = 1e-4
    size = 16 * cell
    frequency = SPEED_OF_LIGHT / (10 * cell)

    def run(permittivity, compiled=True):
        substrate = fdtd.Structure(geometry.Box((-size, -size, -2 * cell), (size, size, 0.0)),
                                   fdtd.Medium(permittivity))
        patch = fdtd.pec_sheet((0.3 * cell, -0.2 * cell, 0.0), (7.3 * cell, 5.6 * cell, 0.0), cell)
        ground = fdtd.pec_sheet((0.0, 0.0, -2 * cell), (size, size, 0.0), cell)
        sim = fdtd.Simulation(
            size=(size,) * 3, cell_size=cell, structures=[substrate, ground, patch], subpixel=True,
            dtype=torch.float64, compiled=compiled,
            sources=[fdtd.PointDipole((1.1 * cell, 0.4 * cell, -cell), "Ez",
                                      fdtd.GaussianPulse(frequency, 0.5 * frequency))],
            monitors=[fdtd.FieldProbe("p", (4.5 * cell, 0.3 * cell, -cell), ("Ez",))],
        )
        assert sim._stepper(1).conformal.count > 50
        return sim.run(steps=150, progress=False)["p"]["Ez"]

    _paths_agree(run, 2.2)


def test_sheets_displace_no_dielectric():
    """A patch on a substrate's top face leaves the smoothed permittivity of every E node it does not cover
    as the substrate alone gives it (its 0.8-cell box had counted as vacuum in the smoothing: the Sheen
    patch resonated 12 % high with ``subpixel=True``)."""
    from common import geometry

    cell = 1e-4
    size = 16 * cell
    substrate = fdtd.Structure(geometry.Box((-size, -size, -3 * cell), (size, size, 0.0)), fdtd.Medium(2.2))
    patch = fdtd.pec_sheet((0.3 * cell, 0.0, 0.0), (6.4 * cell, 6 * cell, 0.0), cell)

    def coefficients(*structures):
        sim = fdtd.Simulation(size=(size,) * 3, cell_size=cell, structures=list(structures), subpixel=True,
                              dtype=torch.float64)
        electric = sim._coefficients(sim._conformal)[0]  # cb = dt / (eps0 eps): per unit time step
        shape = sim.grid.shape
        return {c: torch.broadcast_to(torch.as_tensor(v[1]), shape) / sim.dt for c, v in electric.items()}

    alone, covered = coefficients(substrate), coefficients(substrate, patch)
    for component in ("Ex", "Ey", "Ez"):
        free = covered[component] != 0
        assert int((~free).sum()) > 0 or component == "Ez"
        assert torch.allclose(covered[component][free], alone[component][free], rtol=1e-12, atol=0), component


def test_a_sheet_off_the_node_planes_is_refused():
    """A sheet between node planes would cover no tangential E node (or snap half a cell): refused, with
    the planes it could lie on; so is a sheet in a 2D run."""
    cell = 1e-4
    sheet = fdtd.pec_sheet(center=(0.0, 0.0, 0.37 * cell), size=(4 * cell, 4 * cell, 0.0), cell_size=cell)
    with pytest.raises(ValueError, match=r"structure 0 .*z = 3\.7e-05 m, 0\.370 cells past the node plane"):
        fdtd.Simulation(size=(10 * cell,) * 3, cell_size=cell, structures=[sheet])
    with pytest.raises(ValueError, match="structure 0 .*3D simulation; this one is 2D"):
        fdtd.Simulation(size=(10 * cell,) * 2, cell_size=cell, structures=[sheet])


def test_placed_rims_act_where_drawn():
    """``placed_rim`` inverts the table of how far past its placed position a rim acts: over a cell of drawn
    positions on either side, the placed rim plus its excess is the drawn rim, the placement moves
    monotonically with it and lies 0 to 0.17 cells inward, never beyond 0.92 of a cell past a node line."""
    from mindelec.fdtd import sheet_rims

    cell = 1e-4
    grid = fdtd.Simulation(size=(16 * cell,) * 3, cell_size=cell).grid
    for side in (-1.0, 1.0):
        drawn = side * np.linspace(2.0, 3.0, 161) * cell  # rims 2-3 cells from the middle
        placed = np.array([sheet_rims.placed_rim(float(d), side, grid, 0) for d in drawn])
        inward = side * (drawn - placed) / cell
        offset = np.mod(side * (placed + 8 * cell) / cell, 1.0)
        offset = np.where(offset > 1 - 1e-9, 0.0, offset)
        excess = np.interp(offset, sheet_rims.RIM_OFFSETS, sheet_rims.RIM_EXCESS)
        assert np.allclose(inward, excess, atol=1e-9), (inward - excess)
        assert (inward > -0.001).all() and (inward < 0.17).all(), inward
        assert (offset < 0.922).all(), offset
        assert (np.diff(side * placed) > 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["TM", "TE"])
def test_septum_between_walls_converges_at_second_order_in_3d(family):
    """The septum spanning a cavity between PEC walls in y (1.5 mm), its side rims on the walls: the fields
    vary along its free rim, all six components present. Each family's modes are the 2D septum's lifted,
    ``k^2 = k_2D^2 + (pi/W)^2`` (TM_y: no Hy, Ey even about the sheet's plane; TE_y: Hy odd), and at 4 and
    6 cells per mm (the rim at other offsets in its cell) the error falls as the cell's square (measured
    orders 2.01 and 2.00, errors 9.4e-3 and 1.09e-2 at 4 cells per mm; TM 1.99 on to 8 cells per mm, and
    the error varies by under 1e-4 as the rim moves across a cell)."""
    import scipy.sparse.linalg as sparse_linalg

    width, rim = 1.5e-3, 2.325e-3
    across = _septum_reference(rim, family, {"TM": 1078.0, "TE": 486.0}[family])
    reference = math.hypot(across, math.pi / width)
    errors = []
    for cells_per_mm in (4, 6):
        cell = 1e-3 / cells_per_mm
        sheet = fdtd.pec_sheet(center=(-LENGTH / 2 + rim / 2, 0.0, 0.0), size=(rim, width, 0.0),
                               cell_size=cell)
        sim = fdtd.Simulation(size=(LENGTH, width, HEIGHT), cell_size=cell, boundary=fdtd.PEC(),
                              structures=[sheet], subpixel=True, dtype=torch.float64)
        operator = _h_operator(sim)
        values, vectors = sparse_linalg.eigs(operator, k=10, sigma=(reference * SPEED_OF_LIGHT * sim.dt) ** 2)
        count = operator.shape[0] // 3
        blocks = np.abs(vectors.reshape(3, count, -1)) ** 2
        along_y = blocks[1].sum(0) / blocks.sum((0, 1))
        mirrored = 1 if family == "TE" else 2  # Hy (TE_y, odd) or Hz (TM_y, even) against its mirror in z
        field = vectors[mirrored * count : (mirrored + 1) * count].reshape(*sim.grid.shape, -1)
        parity = (field * field[:, :, ::-1]).sum((0, 1, 2)).real / (np.abs(field) ** 2).sum((0, 1, 2))
        kind = (along_y < 1e-6) & (parity > 0.5) if family == "TM" else (along_y > 1e-3) & (parity < -0.5)
        wavenumbers = np.sqrt(np.clip(values.real[kind], 0, None)) / (SPEED_OF_LIGHT * sim.dt)
        errors.append(abs(float(wavenumbers[np.argmin(np.abs(wavenumbers - reference))]) / reference - 1))
    order = math.log(errors[0] / errors[1], 1.5)
    assert errors[0] < 0.02 and order > 1.7, errors


def test_a_sheets_cover_is_computed_near_it_only_and_equals_the_whole_grids():
    """A sheet's cover is evaluated for the elements within 1.5 cells of its rectangle only; everywhere it
    equals, to the bit, the cover evaluated at every element of the grid (plates with placed rims, a strip
    narrower than two cells, a sheet meeting another, one reaching the domain's wall)."""
    from mindelec.fdtd.grid import component_axis
    from mindelec.fdtd.sheet_rims import _rectangle_cover, sheet_cover
    from mindelec.fdtd.smoothing import node_points

    cell = 1e-4
    sheets = [
        fdtd.pec_sheet((0.3 * cell, 0.2 * cell, 0.0), (6.4 * cell, 5.3 * cell, 0.0), cell),  # placed rims
        fdtd.pec_sheet((-2.55 * cell, 4.6 * cell, 2 * cell), (5.1 * cell, 1.35 * cell, 0.0), cell),  # strip
        fdtd.pec_sheet((3 * cell, 0.0, -2 * cell), (0.0, 5.3 * cell, 4 * cell), cell),  # meets the plate
        fdtd.pec_sheet((0.0, -5 * cell, -4 * cell), (16 * cell, 3.7 * cell, 0.0), cell),  # wall to wall
    ]
    sim = fdtd.Simulation(size=(16 * cell,) * 3, cell_size=cell, structures=sheets, subpixel=True)
    grid, nonzero = sim.grid, 0
    for component in ("Ex", "Ey", "Ez", "Hx", "Hy", "Hz"):
        axis = component_axis(component)
        axes = [axis] if component[0] == "E" else [a for a in range(3) if a != axis]
        points = node_points(grid, component)
        for sheet in sheets:
            near = sheet_cover(sheet, grid, points, axes, sim.structures)
            assert torch.equal(near, _rectangle_cover(sheet, grid, points, axes, sim.structures)), component
            nonzero += int((near > 0).sum())
    assert nonzero > 300
