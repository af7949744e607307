"""The compiled expression kernel (``ExpressionPairTerm``, mindsponge.forcefield.custom.compiled) vs OpenMM.

Custom bonds and custom non-bonded forces whose expressions use every function of OpenMM's language,
definitions, per-bond, per-particle and global parameters: the energies and forces of the kernel path
(the terms' default on CPU, and the step loop's form of the terms) against OpenMM's Reference platform
(float64) to 1e-10 relative (1e-8 on energies with the long-range correction, which OpenMM integrates in
float32), and against mindsponge's torch path (``compiled_expression = False``).
"""

import copy
import pickle

import numpy as np
import pytest
import torch

import mindsponge as ms
from mindsponge import _kernels, step_loop
from mindsponge.forcefield.expressions.program import lower_expression
from mindsponge.interop.openmm import from_openmm

openmm = pytest.importorskip("openmm")

pytestmark = pytest.mark.skipif(_kernels.load() is None, reason="compiled kernels unavailable")

N_ATOMS = 12
TOLERANCE = 1e-10
# r stays in (0.12, 0.6) nm (see _positions): inside every function's domain, away from the jumps
EXPRESSIONS = [
    "k*(r - r0)^2",
    "a*exp(-b*r) + log(r) + sqrt(r) + sin(r)*cos(r) + tan(r) + sec(r) + csc(r) + cot(r)",
    "asin(r) + acos(r) + atan(r) + sinh(r) + cosh(r) + tanh(r) + erf(r) + erfc(2*r)",
    "abs(r - r0) + step(r - r0)*r + delta(r)*r + floor(10*r) + ceil(10*r) + recip(r) + square(r) + cube(r)",
    "min(r, r0)^2 + max(r, r0)^3 + atan2(r, b) + select(step(r - r0), r^2, 1/r)",
    "r^a + a^r + (scale*r)^(1/6) + r^(-2.5)*scale^k",
    "u + v; u = w*w*scale; v = k*w^4; w = r - r0",
]


def _positions(seed=0):
    """A chain of atoms 0.12-0.6 nm apart along random directions."""
    generator = np.random.default_rng(seed)
    steps = generator.normal(size=(N_ATOMS, 3))
    steps *= generator.uniform(0.12, 0.6, (N_ATOMS, 1)) / np.linalg.norm(steps, axis=1, keepdims=True)
    return np.cumsum(steps, axis=0)


def _bond_force(expression):
    force = openmm.CustomBondForce(expression)
    force.addGlobalParameter("scale", 0.7)
    for name in ("k", "r0", "a", "b"):
        force.addPerBondParameter(name)
    generator = np.random.default_rng(1)
    for atom in range(N_ATOMS - 1):
        force.addBond(atom, atom + 1, [generator.uniform(100, 300), generator.uniform(0.2, 0.4),
                                       generator.uniform(0.5, 1.5), generator.uniform(0.5, 2.0)])
    return force


def _system(force):
    system = openmm.System()
    for _ in range(N_ATOMS):
        system.addParticle(12.0)
    system.addForce(force)
    return system


def _check(system, positions, box, reference, energy_tolerance=TOLERANCE):
    """Energy and forces of the translated force on the kernel, the torch path and the step loop's force
    program, against OpenMM."""
    expected = reference(system, positions, box)
    forcefield = from_openmm(system)
    (term,) = list(forcefield)
    x = torch.tensor(positions)
    box_tensor = None if box is None else torch.tensor(box)
    assert term.compiled_terms(_kernels.load()) is not None
    kernels = _kernels.load()
    program, compiled_names, _ = step_loop.force_program(forcefield, kernels, torch.float64, box_tensor)
    assert compiled_names == [term.name]
    loop_energy, loop_forces = program.evaluate(x, box_tensor)
    kernel_energy, kernel_forces = ms.forcefield.energy_and_forces(forcefield, x, box_tensor)
    term.compiled_expression = False
    torch_energy, torch_forces = ms.forcefield.energy_and_forces(forcefield, x, box_tensor)
    scale = max(1.0, abs(expected.total))
    force_scale = np.abs(expected.forces).max()
    for energy, forces in ((loop_energy, loop_forces), (kernel_energy, kernel_forces),
                           (torch_energy, torch_forces)):
        assert abs(float(energy) - expected.total) / scale < energy_tolerance
        assert np.abs(forces.numpy() - expected.forces).max() / force_scale < TOLERANCE


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_custom_bond_expressions_match_openmm(expression, reference):
    """Every function of the language on custom bonds, the kernel against OpenMM's Reference platform."""
    _check(_system(_bond_force(expression)), _positions(), None, reference)


@pytest.mark.parametrize("method", ["NoCutoff", "CutoffNonPeriodic", "CutoffPeriodic"])
def test_soft_core_nonbonded_matches_openmm(method, reference):
    """openmmtools' soft-core Lennard-Jones (Beutler, alpha 0.5) with per-particle parameters, a global
    lambda, interaction groups (a pair in two groups counts twice), exclusions, switching and the
    long-range correction, as a CustomNonbondedForce."""
    force = openmm.CustomNonbondedForce(
        "U; U = lambda_sterics*4*epsilon*x*(x-1.0); x = (sigma/reff)^6;"
        "reff = sigma*(softcore_alpha*(1.0-lambda_sterics) + (r/sigma)^6)^(1/6);"
        "epsilon = sqrt(epsilon1*epsilon2); sigma = 0.5*(sigma1 + sigma2)")
    force.addGlobalParameter("lambda_sterics", 0.4)
    force.addGlobalParameter("softcore_alpha", 0.5)
    force.addPerParticleParameter("sigma")
    force.addPerParticleParameter("epsilon")
    generator = np.random.default_rng(2)
    for atom in range(N_ATOMS):  # one atom without Lennard-Jones: sqrt(eps1 eps2) = 0
        force.addParticle([generator.uniform(0.25, 0.35), 0.0 if atom == 5 else generator.uniform(0.2, 0.9)])
    force.addExclusion(0, 1)
    force.addInteractionGroup(range(4), range(3, N_ATOMS))
    force.addInteractionGroup([0, 1], [7, 8])
    box = None
    force.setNonbondedMethod(getattr(openmm.CustomNonbondedForce, method))
    if method != "NoCutoff":
        force.setCutoffDistance(0.9)
        force.setUseSwitchingFunction(True)
        force.setSwitchingDistance(0.8)
    system = _system(force)
    positions = _positions(3)
    if method == "CutoffPeriodic":
        force.setUseLongRangeCorrection(True)
        box = np.diag([2.0, 2.1, 2.2])
        system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*row) for row in box])
    # OpenMM integrates the long-range correction in float32
    _check(system, positions, box, reference, 1e-8 if method == "CutoffPeriodic" else TOLERANCE)


def test_kernel_follows_global_parameters_and_copies(reference):
    """Setting a global parameter changes the kernel's energy (its program is rebuilt), and a term whose
    kernel was built deep-copies (the kernel is left behind and rebuilt)."""
    system = _system(_bond_force(EXPRESSIONS[-1]))
    positions = _positions()
    forcefield = from_openmm(system)
    x = torch.tensor(positions)
    first = float(forcefield(x))
    forcefield.set_global_parameters(scale=0.2)
    second = float(forcefield(x))
    system.getForce(0).setGlobalParameterDefaultValue(0, 0.2)
    assert second == pytest.approx(reference(system, positions, None).total, rel=TOLERANCE)
    assert abs(second - first) > 0.05
    assert float(copy.deepcopy(forcefield)(x)) == second


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_force_fields_with_custom_expressions_pickle_after_they_ran(expression, reference):
    """Worker processes get force fields pickled: one whose kernel and torch expression were built (its
    torch nodes are closures) comes back with OpenMM's energy on both paths."""
    system = _system(_bond_force(expression))
    positions = _positions()
    forcefield = from_openmm(system)
    x = torch.tensor(positions)
    forcefield(x)  # the kernel path
    (term,) = list(forcefield)
    term.compiled_expression = False
    forcefield(x)  # the torch path
    term.compiled_expression = True
    copied = pickle.loads(pickle.dumps(forcefield))
    expected = reference(system, positions, None).total
    assert float(copied(x)) == pytest.approx(expected, rel=TOLERANCE)
    (copied_term,) = list(copied)
    copied_term.compiled_expression = False
    assert float(copied(x)) == pytest.approx(expected, rel=TOLERANCE)


def test_lowering_folds_constants_and_refuses_what_it_cannot_compile():
    """Global parameters fold into constants; tabulated or unknown functions have no compiled form."""
    program = lower_expression("lambda^2*8*r; lambda = 0.5*g", "r", {}, {"g": 1.0})
    assert program.code.shape[0] == 3  # the variable r, the folded constant 0.25*8, one product
    assert program.values.tolist()[1] == 2.0
    assert lower_expression("table(r)", "r", {}, {}) is None
    assert lower_expression("pointdistance(r, 0, 0, 0, 0, 0)", "r", {}, {}) is None
    assert lower_expression("r*unknown", "r", {}, {}) is None
