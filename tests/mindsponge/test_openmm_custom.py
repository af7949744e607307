"""OpenMM's Custom*Forces translated by ``from_openmm``, against OpenMM's Reference platform (float64).

Each test builds a small System with the force under test (random positions, fixed seeds) and
compares the translated term's energy (per force, through OpenMM force groups) and the total
forces with OpenMM's. Bonded custom forces agree to round-off (1e-10 relative); the non-bonded
long-range correction is integrated by OpenMM in float32, hence 1e-8 on energies with it.
The CHARMM36 case is a solvated tripeptide with NaCl built by OpenMM's ``charmm36.xml`` (see
``data/make_charmm36_peptide.py``), whose ``LennardJones`` CustomNonbondedForce carries the
NBFIX tables.
"""

import copy
import gzip
import os

import numpy as np
import pytest
import torch

import mindsponge as ms
from mindsponge.forcefield.expressions import ExpressionError, compile_expression
from mindsponge.interop.openmm import UnsupportedOpenMMForceError, from_openmm

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data")
N_ATOMS = 40
BOX = 2.6  # nm, cubic


def _system(forces, n_atoms=N_ATOMS, box=None, masses=None):
    system = openmm.System()
    for atom in range(n_atoms):
        system.addParticle(12.0 if masses is None else masses[atom])
    if box is not None:
        system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*row) for row in box])
    for force in forces:
        system.addForce(copy.deepcopy(force))
    return system


def _positions(seed=0, n_atoms=N_ATOMS, size=BOX):
    return np.random.default_rng(seed).uniform(0.0, size, (n_atoms, 3))


def _rms_relative(forces, reference):
    return float(np.sqrt(((forces - reference) ** 2).sum() / (reference**2).sum()))


def _compare(system, positions, reference, box=None, energy_tolerance=1e-10, force_tolerance=1e-10):
    """Per-term and total energies and forces of the translated System against OpenMM's."""
    expected = reference(system, positions, box)
    forcefield = from_openmm(system)
    x = torch.tensor(positions)
    box_tensor = None if box is None else torch.tensor(box)
    for term in forcefield:
        energy = term(x, box_tensor).item()
        openmm_energy = expected.energies[term.openmm_force_index]
        assert energy == pytest.approx(openmm_energy, rel=energy_tolerance, abs=1e-9), term.name
    energy, forces = ms.forcefield.energy_and_forces(forcefield, x, box_tensor)
    assert energy.item() == pytest.approx(expected.total, rel=energy_tolerance, abs=1e-9)
    assert _rms_relative(forces.numpy(), expected.forces) < force_tolerance
    return forcefield, expected


BOND_EXPRESSIONS = [
    "k*(r-r0)^2",
    "D*(1-exp(-a*(r-r0)))^2; a=sqrt(k/(2*D))",
    "k*min(r, r0)^2 + select(step(r-r0), cube(r-r0), square(r)) + erfc(r)*atan(r) + log(1+r)*tanh(r)",
    "k*max(0, r-r0)^2 + abs(sin(r))*cosh(r-1) + sec(r/3) + csc(r+1) + cot(r+0.5) + recip(r+1)",
    "4*k*((r0/r)^12-(r0/r)^6) + floor(3*r)*0 + ceil(r)*delta(r) + erf(r)^2 + asin(r/10) + acos(r/10)",
]


@pytest.mark.parametrize("periodic", [False, True], ids=["open", "periodic"])
@pytest.mark.parametrize("expression", BOND_EXPRESSIONS)
def test_custom_bond_force_matches_openmm(expression, periodic, reference):
    force = openmm.CustomBondForce(expression)
    force.addPerBondParameter("k")
    force.addPerBondParameter("r0")
    force.addGlobalParameter("D", 250.0)
    rng = np.random.default_rng(1)
    for first in range(15):
        force.addBond(first, first + 20, [rng.uniform(50, 500), rng.uniform(0.3, 1.2)])
    force.setUsesPeriodicBoundaryConditions(periodic)
    box = np.eye(3) * BOX if periodic else None
    forcefield, _ = _compare(_system([force], box=box), _positions(2), reference, box)
    assert type(forcefield["CustomBond"]).__name__ == "CustomBond"


ANGLE_EXPRESSIONS = ["k*(theta-theta0)^2", "k*(cos(theta)-cos(theta0))^2 + 0.1*sin(theta)^3"]
TORSION_EXPRESSIONS = [
    "k*(1+cos(n*theta-phase))",
    "k*(theta-phase)^2 + 0.5*abs(theta) + 0.01*n*atan2(sin(theta), cos(theta))",
    "k*dtheta^2; dtheta=min(diff, 2*pi-diff); diff=abs(theta-phase); pi=3.141592653589793",
]


@pytest.mark.parametrize("expression", ANGLE_EXPRESSIONS)
def test_custom_angle_force_matches_openmm(expression, reference):
    force = openmm.CustomAngleForce(expression)
    force.addPerAngleParameter("k")
    force.addPerAngleParameter("theta0")
    rng = np.random.default_rng(3)
    for first in range(12):
        force.addAngle(first, first + 1, first + 2, [rng.uniform(50, 300), rng.uniform(1.5, 2.2)])
    _compare(_system([force]), _positions(4), reference)


@pytest.mark.parametrize("expression", TORSION_EXPRESSIONS)
def test_custom_torsion_force_matches_openmm(expression, reference):
    force = openmm.CustomTorsionForce(expression)
    for name in ("k", "n", "phase"):
        force.addPerTorsionParameter(name)
    rng = np.random.default_rng(5)
    for first in range(12):
        force.addTorsion(
            first, first + 1, first + 2, first + 3, [rng.uniform(1, 10), 1 + first % 3, rng.uniform(-3, 3)]
        )
    forcefield, _ = _compare(_system([force]), _positions(6), reference)
    assert type(forcefield["CustomTorsion"]).__name__ == "CustomTorsion"


@pytest.mark.parametrize("box_kind", ["cubic", "triclinic"])
def test_position_restraints_with_periodicdistance_match_openmm(box_kind, reference):
    """Restraints to reference points, some given one box vector away (the minimum image must
    bring them back), as ``app.Modeller`` users write them."""
    if box_kind == "cubic":
        box = np.eye(3) * BOX
    else:
        box = ms.space.box_from_lengths_and_angles(
            BOX, BOX, BOX, 60.0, 60.0, 90.0, dtype=torch.float64
        ).numpy()
    force = openmm.CustomExternalForce("k*periodicdistance(x, y, z, x0, y0, z0)^2 + 0.5*w*(z-z0)^2")
    for name in ("x0", "y0", "z0"):
        force.addPerParticleParameter(name)
    force.addGlobalParameter("k", 1000.0)
    force.addGlobalParameter("w", 5.0)
    positions = _positions(7)
    rng = np.random.default_rng(8)
    for atom in range(0, N_ATOMS, 2):
        anchor = (
            positions[atom] + rng.normal(scale=0.05, size=3) + box[rng.integers(0, 3)] * rng.integers(-1, 2)
        )
        force.addParticle(atom, list(anchor))
    assert force.usesPeriodicBoundaryConditions()
    forcefield, expected = _compare(_system([force], box=box), positions, reference, box)
    # a restraint whose anchor sits one box vector away contributes its short image, not the long way
    assert expected.total < 1000.0 * 20 * 0.05**2 * 3 * 4 + 5.0 * 20 * BOX**2


@pytest.mark.parametrize("periodic", [False, True], ids=["open", "periodic"])
def test_custom_compound_bond_force_matches_openmm(periodic, reference):
    force = openmm.CustomCompoundBondForce(
        4,
        "k*(distance(p1,p2)-r0)^2 + 0.3*(angle(p1,p2,p3)-1.9)^2 + cos(2*dihedral(p1,p2,p3,p4))"
        " + 0.01*x1*y2 - 0.02*z4 + pointdistance(x1, y1, z1, (x3+x4)/2, (y3+y4)/2, (z3+z4)/2)"
        " + pointangle(x1, y1, z1, x2, y2, z2, x4, y4, z4)"
        " + 0.2*pointdihedral(x4, y4, z4, x3, y3, z3, x2, y2, z2, x1, y1, z1)",
    )
    force.addPerBondParameter("k")
    force.addPerBondParameter("r0")
    for first in range(8):
        force.addBond([first, first + 8, first + 16, first + 24], [100.0 + first, 0.4])
    force.setUsesPeriodicBoundaryConditions(periodic)
    box = np.eye(3) * BOX if periodic else None
    _compare(_system([force], box=box), _positions(9), reference, box)


def test_custom_centroid_bond_force_matches_openmm(reference):
    force = openmm.CustomCentroidBondForce(3, "k*(distance(g1,g2)-d0)^2 + angle(g1,g2,g3) + 0.1*x3")
    force.addPerBondParameter("k")
    force.addPerBondParameter("d0")
    force.addGlobalParameter("unused", 1.0)
    force.addGroup([0, 1, 2], [12.0, 1.0, 16.0])
    force.addGroup([5, 6], [1.0, 1.0])
    force.addGroup([9, 10, 11, 12], [0.5, 1.5, 1.0, 2.0])
    force.addGroup([20], [3.0])
    force.addBond([0, 1, 2], [300.0, 0.5])
    force.addBond([3, 0, 1], [100.0, 1.0])
    _compare(_system([force]), _positions(10), reference)


def test_centroid_groups_weighted_by_mass_are_refused_with_the_group_named():
    force = openmm.CustomCentroidBondForce(2, "distance(g1,g2)")
    force.addGroup([0, 1], [1.0, 1.0])
    force.addGroup([2, 3])
    force.addBond([0, 1], [])
    with pytest.raises(
        UnsupportedOpenMMForceError, match="CustomCentroidBondForce.*group 1 has no explicit weights"
    ):
        from_openmm(_system([force], n_atoms=4))


def _with_test_options(force, method, switching, long_range):
    """``force`` (a CustomNonbondedForce) with every fourth atom excluded from the next, a 1 nm
    cutoff, switching from 0.85 nm if ``switching`` and the long-range correction if ``long_range``."""
    for atom in range(0, N_ATOMS - 1, 4):
        force.addExclusion(atom, atom + 1)
    force.setNonbondedMethod(method)
    force.setCutoffDistance(1.0)
    force.setUseSwitchingFunction(switching)
    force.setSwitchingDistance(0.85)
    force.setUseLongRangeCorrection(long_range)
    return force


def _nonbonded_force(method, switching=False, long_range=False):
    """LJ with per-particle parameters, a computed value, a global parameter and tabulated
    functions of every kind (symmetric in the two particles, as OpenMM requires)."""
    force = openmm.CustomNonbondedForce(
        "4*eps*((sig/r)^12-(sig/r)^6) + scale*soft(r) + nbfix(type1, type2)/r^6 + ion(type1)*ion(type2)/r^4"
        " + 0.01*grid2(r, s1+s2) + 0.01*grid3(r, s1*s2, type1+type2) + 1e-5*cube3(type1, type2, 0)/r^6"
        "; sig=0.5*(s1+s2); eps=sqrt(e1*e2)"
    )
    force.addPerParticleParameter("s")
    force.addPerParticleParameter("lambda_e")
    force.addPerParticleParameter("type")
    force.addGlobalParameter("scale", 0.7)
    force.addGlobalParameter("lambda", 0.8)
    force.addComputedValue("e", "lambda*lambda_e")
    radii = np.linspace(0.0, 0.9, 25)
    force.addTabulatedFunction("soft", openmm.Continuous1DFunction(list(np.exp(-4 * radii)), 0.0, 0.9))
    table = -(np.arange(3)[:, None] + np.arange(3)[None, :] + 1.0) * 1e-3
    table[0, 2] = table[2, 0] = -5e-3  # an NBFIX-like pair entry
    force.addTabulatedFunction("nbfix", openmm.Discrete2DFunction(3, 3, list(table.T.ravel())))
    force.addTabulatedFunction("ion", openmm.Discrete1DFunction([0.0, 0.01, -0.02]))
    x, y = np.linspace(0, 1.0, 9), np.linspace(0.3, 0.7, 5)
    grid = np.cos(3 * x)[:, None] * np.sin(2 * y)[None, :]
    force.addTabulatedFunction(
        "grid2", openmm.Continuous2DFunction(9, 5, list(grid.T.ravel()), 0, 1.0, 0.3, 0.7)
    )
    z = np.linspace(0, 4, 4)
    grid = np.cos(3 * x)[:, None, None] * np.sin(2 * y)[None, :, None] * (1 + z)[None, None, :]
    force.addTabulatedFunction(
        "grid3",
        openmm.Continuous3DFunction(9, 5, 4, list(grid.transpose(2, 1, 0).ravel()), 0, 1.0, 0.01, 0.1, 0, 4),
    )
    cube = np.arange(27, dtype=float).reshape(3, 3, 3)
    cube = cube + cube.transpose(1, 0, 2)
    force.addTabulatedFunction(
        "cube3", openmm.Discrete3DFunction(3, 3, 3, list(cube.transpose(2, 1, 0).ravel()))
    )
    classes = [(0.15, 0.2, 0), (0.2, 0.9, 1), (0.3, 0.5, 2), (0.25, 1.0, 0), (0.18, 0.3, 2)]
    for atom in range(N_ATOMS):
        force.addParticle(list(classes[atom * 7 % len(classes)]))
    return _with_test_options(force, method, switching, long_range)


@pytest.mark.parametrize(
    "method, switching, long_range",
    [
        ("NoCutoff", False, False),
        ("CutoffNonPeriodic", True, False),
        ("CutoffPeriodic", False, False),
        ("CutoffPeriodic", True, True),
    ],
)
def test_custom_nonbonded_with_tabulated_functions_matches_openmm(method, switching, long_range, reference):
    force = _nonbonded_force(getattr(openmm.CustomNonbondedForce, method), switching, long_range)
    box = np.eye(3) * BOX
    positions = _positions(12)
    tolerance = 1e-8 if long_range else 1e-10
    forcefield, expected = _compare(_system([force], box=box), positions, reference, box, tolerance)
    term = forcefield["CustomNonbonded"]
    assert term.expression.global_parameters == {"scale": 0.7, "lambda": 0.8}
    assert term.long_range_correction == long_range
    if long_range:  # the correction itself, against OpenMM's energy with and without it
        without = reference(
            _system([_nonbonded_force(force.getNonbondedMethod(), switching, False)], box=box), positions, box
        )
        correction = (term.long_range_coefficient() / BOX**3).item()
        assert correction == pytest.approx(expected.total - without.total, rel=1e-6)
        assert abs(correction) > 1e-3


def test_custom_nonbonded_global_parameter_change_follows_openmm_set_parameter(reference):
    force = _nonbonded_force(openmm.CustomNonbondedForce.CutoffPeriodic, True, True)
    box = np.eye(3) * BOX
    positions = _positions(13)
    system = _system([force], box=box)
    term = from_openmm(system)["CustomNonbonded"]
    term.expression.set_global_parameter("lambda", 0.3)
    context = openmm.Context(
        system, openmm.VerletIntegrator(1e-3), openmm.Platform.getPlatformByName("Reference")
    )
    context.setPositions(positions)
    context.setParameter("lambda", 0.3)
    openmm_energy = (
        context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    )
    assert term(torch.tensor(positions), torch.tensor(box)).item() == pytest.approx(openmm_energy, rel=1e-8)


@pytest.mark.parametrize("search", ["group pairs", "cell list"])
@pytest.mark.parametrize("method", ["NoCutoff", "CutoffNonPeriodic", "CutoffPeriodic"])
def test_custom_nonbonded_interaction_groups_match_openmm(method, search, reference, monkeypatch):
    """Overlapping sets (pairs inside the overlap count once per group), a pair in two groups
    (counted twice), exclusions honoured, and the long-range correction's pair counts; with the
    groups' pairs searched directly (small groups) and through the cell list of all atoms."""
    if search == "cell list":
        monkeypatch.setattr("mindsponge.forcefield.custom.nonbonded._CANDIDATES_PER_ATOM", 0)
    periodic = method == "CutoffPeriodic"
    force = _nonbonded_force(getattr(openmm.CustomNonbondedForce, method), periodic, periodic)
    force.addInteractionGroup(list(range(0, 15)), list(range(10, 30)))
    force.addInteractionGroup([0, 1, 2, 3], [30, 31, 32, 33, 34, 12])
    force.addInteractionGroup([35, 36], [35, 36, 37, 38, 39])
    box = np.eye(3) * BOX
    _compare(_system([force], box=box), _positions(14), reference, box, 1e-8 if periodic else 1e-10)


@pytest.mark.parametrize("periodic", [False, True], ids=["open", "periodic"])
def test_continuous_tables_inside_and_outside_their_range_match_openmm(periodic, reference):
    """Splines of every dimension evaluated through a one-particle compound bond, at points inside
    and outside the tables' ranges (zero outside unless periodic)."""
    force = openmm.CustomCompoundBondForce(1, "f1(x1) + f2(x1, y1) + f3(x1, y1, z1)")
    knots = np.linspace(0.0, 2.0, 7)
    values = np.sin(np.pi * knots) + 0.3
    values[-1] = values[0]  # exactly periodic (OpenMM checks it, also on the knot derivatives)
    force.addTabulatedFunction("f1", openmm.Continuous1DFunction(list(values), 0.0, 2.0, periodic))
    grid = np.sin(np.pi * knots)[:, None] * np.cos(np.pi * knots)[None, :]
    grid[-1], grid[:, -1] = grid[0], grid[:, 0]
    force.addTabulatedFunction(
        "f2", openmm.Continuous2DFunction(7, 7, list(grid.T.ravel()), 0, 2, 0, 2, periodic)
    )
    cube = grid[:, :, None] * np.cos(np.pi * knots)[None, None, :] + 0.1
    cube[:, :, -1] = cube[:, :, 0]
    force.addTabulatedFunction(
        "f3",
        openmm.Continuous3DFunction(
            7, 7, 7, list(cube.transpose(2, 1, 0).ravel()), 0, 2, 0, 2, 0, 2, periodic
        ),
    )
    for atom in range(N_ATOMS):
        force.addBond([atom], [])
    positions = _positions(15, size=3.0) - 0.5  # some coordinates below 0 and above 2
    _compare(_system([force]), positions, reference)


def _lennard_jones_force(kind, method, switching=False, long_range=False, repulsive_pair=False):
    """A Lennard-Jones CustomNonbondedForce: CHARMM's per-type tables ``acoef/r^12 - bcoef/r^6``
    (with an NBFIX-like entry and a type without Lennard-Jones), or ``4*eps*((sig/r)^12-(sig/r)^6)``
    with Lorentz-Berthelot rules in definitions and a global scale. ``repulsive_pair`` gives one
    pair of types a negative ``bcoef``: not a Lennard-Jones pair any more."""
    sigma, epsilon = np.array([0.3, 0.35, 0.25]), np.array([0.5, 0.0, 0.8])
    if kind == "tables":
        force = openmm.CustomNonbondedForce("acoef(type1, type2)/r^12 - bcoef(type1, type2)/r^6")
        force.addPerParticleParameter("type")
        pair_sigma = 0.5 * (sigma[:, None] + sigma[None, :])
        pair_epsilon = np.sqrt(epsilon[:, None] * epsilon[None, :])
        acoef, bcoef = 4 * pair_epsilon * pair_sigma**12, 4 * pair_epsilon * pair_sigma**6
        bcoef[0, 2] = bcoef[2, 0] = 1.5 * bcoef[0, 2]
        if repulsive_pair:
            bcoef[0, 2] = bcoef[2, 0] = -bcoef[0, 2]
        for name, values in (("acoef", acoef), ("bcoef", bcoef)):
            force.addTabulatedFunction(name, openmm.Discrete2DFunction(3, 3, list(values.T.ravel())))
        for atom in range(N_ATOMS):
            force.addParticle([atom % 3])
    else:
        force = openmm.CustomNonbondedForce(
            "scale*4*eps*((sig/r)^12-(sig/r)^6); sig=0.5*(s1+s2); eps=sqrt(e1*e2)"
        )
        force.addGlobalParameter("scale", 0.9)
        force.addPerParticleParameter("s")
        force.addPerParticleParameter("e")
        for atom in range(N_ATOMS):
            force.addParticle([sigma[atom % 3], epsilon[atom % 3]])
    return _with_test_options(force, method, switching, long_range)


def _energy_and_gradient(term, positions, box, create_graph=False):
    x = torch.tensor(positions, requires_grad=True)
    energy = term(x, None if box is None else torch.tensor(box))
    (gradient,) = torch.autograd.grad(energy, x, create_graph=create_graph)
    return energy, gradient, x


@pytest.mark.parametrize("kind", ["tables", "combination"])
@pytest.mark.parametrize(
    "method, switching, long_range, groups",
    [
        ("NoCutoff", False, False, False),
        ("CutoffNonPeriodic", True, False, True),
        ("CutoffPeriodic", True, True, False),
        ("CutoffPeriodic", False, False, True),
    ],
)
def test_lennard_jones_custom_nonbonded_runs_on_the_nonbonded_kernel(
    kind, method, switching, long_range, groups, reference
):
    """The fast path (Nonbonded's LJ kernel) against OpenMM, and against the generic path (the
    expression differentiated in r) on the same term; float32 against OpenMM too."""
    force = _lennard_jones_force(kind, getattr(openmm.CustomNonbondedForce, method), switching, long_range)
    if groups:  # a pair in two groups counts twice: weight 2 on the kernel's epsilon
        force.addInteractionGroup(list(range(0, 15)), list(range(10, 30)))
        force.addInteractionGroup([0, 1, 2, 3], [30, 31, 32, 33, 34, 12])
    box = np.eye(3) * BOX
    positions = _positions(21)
    system = _system([force], box=box)
    forcefield, expected = _compare(system, positions, reference, box, 1e-8 if long_range else 1e-10)
    term = forcefield["CustomNonbonded"]
    periodic_box = box if method == "CutoffPeriodic" else None
    fast_energy, fast_gradient, _ = _energy_and_gradient(term, positions, periodic_box)
    assert term.uses_lennard_jones_kernel
    term.lennard_jones_kernel = False
    generic_energy, generic_gradient, _ = _energy_and_gradient(term, positions, periodic_box)
    assert not term.uses_lennard_jones_kernel
    assert fast_energy.item() == pytest.approx(generic_energy.item(), rel=1e-12)
    assert _rms_relative(fast_gradient.numpy(), generic_gradient.numpy()) < 1e-12
    term32 = from_openmm(system, dtype=torch.float32)["CustomNonbonded"]
    x32 = torch.tensor(positions, dtype=torch.float32)
    forces32 = ms.forces(term32, x32, torch.tensor(box, dtype=torch.float32))
    assert term32.uses_lennard_jones_kernel
    assert _rms_relative(forces32.double().numpy(), expected.forces) < 1e-5
    if kind == "combination":  # a global parameter change reaches the kernel's epsilon
        term.lennard_jones_kernel = True
        term.expression.set_global_parameter("scale", 0.45)
        halved, _, _ = _energy_and_gradient(term, positions, periodic_box)
        assert term.uses_lennard_jones_kernel
        assert halved.item() == pytest.approx(fast_energy.item() / 2, rel=1e-12)


def test_custom_nonbonded_outside_the_lennard_jones_form_takes_the_generic_path(reference):
    """A negative ``bcoef`` entry cannot be written as sigma and epsilon: the generic path runs,
    and still matches OpenMM (float64 and float32); its second derivatives (create_graph), and
    those of the kernel path, match finite differences."""
    force = _lennard_jones_force("tables", openmm.CustomNonbondedForce.CutoffPeriodic, True, False, True)
    box = np.eye(3) * BOX
    positions = _positions(22)
    forcefield, _ = _compare(_system([force], box=box), positions, reference, box)
    term = forcefield["CustomNonbonded"]
    assert not term.uses_lennard_jones_kernel
    system = _system([force], box=box)
    x32, box32 = torch.tensor(positions, dtype=torch.float32), torch.tensor(box, dtype=torch.float32)
    forces32 = ms.forces(from_openmm(system, dtype=torch.float32), x32, box32)
    assert _rms_relative(forces32.double().numpy(), reference(system, positions, box).forces) < 1e-5
    for kernel in (True, False):
        term.lennard_jones_kernel = kernel
        lj_term = from_openmm(_system([_lennard_jones_force("tables", 2, True)], box=box))["CustomNonbonded"]
        lj_term.lennard_jones_kernel = kernel
        for candidate in (term, lj_term):  # Hessian-vector product against differences of gradients
            direction = torch.tensor(np.random.default_rng(3).normal(size=positions.shape))
            _, gradient, x = _energy_and_gradient(candidate, positions, box, create_graph=True)
            (product,) = torch.autograd.grad((gradient * direction).sum(), x)
            step = 1e-6
            _, ahead, _ = _energy_and_gradient(candidate, positions + step * direction.numpy(), box)
            _, behind, _ = _energy_and_gradient(candidate, positions - step * direction.numpy(), box)
            difference = ((ahead - behind) / (2 * step)).numpy()
            assert _rms_relative(product.numpy(), difference) < 1e-6


def test_lennard_jones_kernel_with_constant_coefficients_and_no_parameters():
    """Constant coefficients (no per-particle parameters) keep float64: the kernel path equals
    the pair sum written out in numpy."""
    positions = torch.tensor(_positions(23, size=2.0))
    term = ms.forcefield.custom.CustomNonbonded(
        "4*(0.3^12/r^12-0.3^6/r^6)", [], torch.zeros(N_ATOMS, 0), cutoff=0.9
    )
    energy = term(positions).item()
    assert term.uses_lennard_jones_kernel
    first, second = np.triu_indices(N_ATOMS, 1)
    r = np.linalg.norm(positions.numpy()[second] - positions.numpy()[first], axis=1)
    r = r[r < 0.9]
    assert energy == pytest.approx((4 * (0.3**12 / r**12 - 0.3**6 / r**6)).sum(), rel=1e-12)


def test_inverse_power_forms_are_recognised_with_their_coefficients():
    """``sum_k c_k / r^k`` after substituting definitions: coefficients checked by hand."""
    tabulated = {"acoef": 2, "bcoef": 2}
    tables = compile_expression("acoef(t1, t2)/r^12 - bcoef(t1, t2)/r^6", tabulated, dynamic=["r"])
    assert set(tables.inverse_powers) == {12, 6}
    functions = {"acoef": lambda a, b: 10 * a + b, "bcoef": lambda a, b: a * b}
    values = {"t1": torch.tensor([2.0, 3.0]), "t2": torch.tensor([5.0, 7.0])}
    assert tables.inverse_powers[12](values, functions).tolist() == [25.0, 37.0]
    assert tables.inverse_powers[6](values, functions).tolist() == [-10.0, -21.0]
    rules = compile_expression(
        "4*eps*((sig/r)^12-(sig/r)^6); sig=0.5*(s1+s2); eps=sqrt(e1*e2)", dynamic=["r"]
    )
    values = {"s1": 0.3, "s2": 0.4, "e1": 0.5, "e2": 2.0}
    values = {name: torch.tensor(value, dtype=torch.float64) for name, value in values.items()}
    assert rules.inverse_powers[12](values).item() == pytest.approx(4 * 0.35**12)
    assert rules.inverse_powers[6](values).item() == pytest.approx(-4 * 0.35**6)
    for expression in ("k/r^12 + 1", "exp(-r)/r^6", "a/r^12 + b*r", "(a/r)^2.5", "k/(r-1)^6"):
        assert compile_expression(expression, dynamic=["r"]).inverse_powers is None, expression
    assert compile_expression("k/r^12").inverse_powers is None  # no dynamic variable: not looked for


def _charmm36_peptide():
    with gzip.open(os.path.join(DATA, "charmm36_peptide_system.xml.gz"), "rt") as handle:
        system = openmm.XmlSerializer.deserialize(handle.read())
    pdb = app.PDBFile(os.path.join(DATA, "charmm36_peptide.pdb"))
    positions = np.array(pdb.getPositions().value_in_unit(unit.nanometer))
    positions += np.random.default_rng(16).normal(scale=0.003, size=positions.shape)
    box = np.array([list(v.value_in_unit(unit.nanometer)) for v in system.getDefaultPeriodicBoxVectors()])
    return system, pdb.topology, positions, box


def test_charmm36_peptide_with_nbfix_ions_matches_openmm(reference):
    system, topology, positions, box = _charmm36_peptide()
    kinds = {type(force).__name__ for force in system.getForces()}
    assert {"CustomNonbondedForce", "CustomBondForce", "CustomTorsionForce", "CMAPTorsionForce"} <= kinds
    forcefield = from_openmm(system, topology)
    x, box_tensor = torch.tensor(positions), torch.tensor(box)
    expected = reference(system, positions, box)
    for term in forcefield:
        parts = term.energy_terms(x, box_tensor)
        energy = sum(value.item() for value in parts.values())
        if "coulomb_reciprocal" in parts:
            assert parts["coulomb_reciprocal"].item() == pytest.approx(expected.reciprocal, rel=1e-6)
            energy -= parts["coulomb_reciprocal"].item()
        tolerance = 1e-6 if type(term).__name__ == "Nonbonded" else 1e-10
        assert energy == pytest.approx(expected.energies[term.openmm_force_index], rel=tolerance), term.name
    assert type(forcefield["LennardJones"]).__name__ == "CustomNonbonded"
    assert forcefield["LennardJones"].uses_lennard_jones_kernel  # NBFIX tables fit sigma and epsilon
    assert type(forcefield["LennardJones14"]).__name__ == "CustomBond"
    assert type(forcefield["HarmonicImproper"]).__name__ == "HarmonicImproper"  # the fast path stays
    energy, forces = ms.forcefield.energy_and_forces(forcefield, x, box_tensor)
    assert energy.item() == pytest.approx(expected.total, rel=1e-6)
    assert _rms_relative(forces.numpy(), expected.forces) < 1e-5
    forcefield32 = from_openmm(system, dtype=torch.float32)
    forces32 = ms.forces(forcefield32, x.float(), box_tensor.float())
    assert _rms_relative(forces32.double().numpy(), expected.forces) < 1e-3

    # NBFIX is active: the (SOD, CLA) and (SOD, carboxylate O) table entries are not the
    # Lorentz-Berthelot combinations of their diagonals, and such pairs lie within the cutoff
    lennard_jones = forcefield["LennardJones"]
    types = lennard_jones.particle_parameters[:, 0].long()
    acoef = lennard_jones.expression.functions["acoef"]
    size = acoef.sizes[0]
    table = acoef.values.reshape(size, size).T  # table[i, j] = values[i + size j]
    atoms = list(topology.atoms())
    sodium = [i for i, atom in enumerate(atoms) if atom.element.symbol == "Na"]
    partners = [
        i
        for i, atom in enumerate(atoms)  # chloride and the C-terminal carboxylate oxygens
        if atom.element.symbol == "Cl" or (atom.residue.name == "PHE" and atom.element.symbol == "O")
    ]
    assert sodium and partners
    pair_types = {(int(types[i]), int(types[j])) for i in sodium for j in partners}
    nbfix = [(a, b) for a, b in pair_types if not np.isclose(table[a, b], np.sqrt(table[a, a] * table[b, b]))]
    assert nbfix
    nbfix_atoms = [(i, j) for i in sodium for j in partners if (int(types[i]), int(types[j])) in nbfix]
    distances = [
        np.linalg.norm(ms.space.minimum_image(x[j] - x[i], box_tensor).numpy()) for i, j in nbfix_atoms
    ]
    assert min(distances) < lennard_jones.cutoff


def test_expression_errors_name_the_force_the_expression_and_the_function():
    force = openmm.CustomBondForce("k*foo(r)")
    force.addPerBondParameter("k")
    force.addBond(0, 1, [1.0])
    with pytest.raises(UnsupportedOpenMMForceError, match=r"force 0 \(CustomBondForce.*k\*foo\(r\).*'foo'"):
        from_openmm(_system([force], n_atoms=2))
    force = openmm.CustomAngleForce("k*theta + q")
    force.addPerAngleParameter("k")
    with pytest.raises(UnsupportedOpenMMForceError, match=r"CustomAngleForce.*unknown variable.*'q'"):
        from_openmm(_system([force], n_atoms=3))
    with pytest.raises(ExpressionError, match=r"my force.*'sin' takes 1 argument"):
        compile_expression("sin(r, r)", context="my force")
    with pytest.raises(ExpressionError, match=r"after ';' must be 'name = value'"):
        compile_expression("a; a")
    with pytest.raises(ExpressionError, match="characters outside"):
        compile_expression("r % 2")


def test_lepton_precedence_and_definition_scoping():
    """Values worked out by hand for Lepton's rules: ``^`` binds tighter than unary minus and is
    right-associative; a definition is visible to the parts before it."""
    r = torch.tensor([2.0], dtype=torch.float64)
    assert compile_expression("-r^2")({"r": r}).item() == -4.0
    assert compile_expression("2^3^2")({}).item() == 512.0
    assert compile_expression("r^-1 + 1e-3*r")({"r": r}).item() == pytest.approx(0.502)
    assert compile_expression("a*b; a=b+1; b=r*3")({"r": r}).item() == 42.0
    assert compile_expression("step(0)+delta(0)+select(0, 5, 7)+min(r, 1)+max(r, 1)")({"r": r}).item() == 12.0


@pytest.mark.parametrize("method", ["NoCutoff", "CutoffNonPeriodic"])
def test_amber_obc2_implicit_solvent_custom_gb_force_matches_openmm(method, villin_pdb, reference):
    """Villin with amber14 and OpenMM's ``implicit/obc2.xml``, whose GB term is a CustomGBForce."""
    modeller = app.Modeller(villin_pdb.topology, villin_pdb.positions)
    modeller.deleteWater()
    modeller.delete([residue for residue in modeller.topology.residues() if residue.name == "Cl"])
    system = app.ForceField("amber14-all.xml", "implicit/obc2.xml").createSystem(
        modeller.topology, nonbondedMethod=getattr(app, method), constraints=None
    )
    positions = np.array(modeller.getPositions().value_in_unit(unit.nanometer))
    forcefield, _ = _compare(system, positions, reference, energy_tolerance=1e-9, force_tolerance=1e-9)
    assert type(forcefield["CustomGB"]).__name__ == "CustomGB"


@pytest.mark.parametrize("method", ["NoCutoff", "CutoffPeriodic"])
def test_custom_gb_force_with_every_kind_of_value_and_term_matches_openmm(method, reference):
    """A pair value (excluded pairs left out), two single values and energy terms of all three
    kinds (OpenMM's Reference platform allows one pair value per force)."""
    force = openmm.CustomGBForce()
    force.addPerParticleParameter("q")
    force.addPerParticleParameter("radius")
    force.addGlobalParameter("eps", 78.5)
    force.addTabulatedFunction(
        "shape", openmm.Continuous1DFunction(list(np.exp(-np.linspace(0, 1, 11))), 0, 1)
    )
    force.addComputedValue(
        "I", "step(r+radius2-radius1)*shape(r)*radius2/r", openmm.CustomGBForce.ParticlePair
    )
    force.addComputedValue("B", "1/(1/radius+I) + 0.01*x^2", openmm.CustomGBForce.SingleParticle)
    force.addComputedValue("S", "exp(-B*q^2) + 0.1*y*I", openmm.CustomGBForce.SingleParticle)
    force.addEnergyTerm("-0.5*(1-1/eps)*q^2/B + 0.1*S", openmm.CustomGBForce.SingleParticle)
    force.addEnergyTerm(
        "-(1-1/eps)*q1*q2/f; f=sqrt(r^2+B1*B2*exp(-r^2/(4*B1*B2)))", openmm.CustomGBForce.ParticlePair
    )
    force.addEnergyTerm("0.01*q1*q2*S1*S2/r", openmm.CustomGBForce.ParticlePairNoExclusions)
    rng = np.random.default_rng(17)
    for _ in range(N_ATOMS):
        force.addParticle([rng.uniform(-1, 1), rng.uniform(0.1, 0.2)])
    for atom in range(0, N_ATOMS - 2, 3):
        force.addExclusion(atom, atom + 2)
    force.setNonbondedMethod(getattr(openmm.CustomGBForce, method))
    force.setCutoffDistance(1.0)
    box = np.eye(3) * BOX
    _compare(_system([force], box=box), _positions(18), reference, box)
