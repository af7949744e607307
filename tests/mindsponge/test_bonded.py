"""Bonded terms against OpenMM's Reference platform, finite differences and analytic results."""

import math

import numpy as np
import pytest
import torch

import mindsponge as ms
from mindsponge.forcefield import ForceField
from mindsponge.forcefield.bonded import (
    HarmonicAngle,
    HarmonicBond,
    HarmonicImproper,
    PeriodicTorsion,
    UreyBradley,
)
from mindsponge.interop.openmm import from_openmm

openmm = pytest.importorskip("openmm")

BOX = np.diag([1.5, 1.6, 1.7])


def _chain_positions(count, seed=0):
    """A random zig-zag chain (bond lengths ~0.15 nm) straddling the box faces."""
    rng = np.random.default_rng(seed)
    steps = rng.normal(size=(count, 3))
    steps = 0.15 * steps / np.linalg.norm(steps, axis=1, keepdims=True)
    return np.cumsum(steps, axis=0) + np.array([1.4, 1.5, 1.6])


def _bonded_system(periodic, seed=0):
    """An OpenMM System with every bonded force kind on a random 12-atom chain."""
    rng = np.random.default_rng(seed)
    count = 12
    system = openmm.System()
    for _ in range(count):
        system.addParticle(12.0)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*row) for row in BOX])
    bonds = openmm.HarmonicBondForce()
    angles = openmm.HarmonicAngleForce()
    torsions = openmm.PeriodicTorsionForce()
    impropers = openmm.CustomTorsionForce("k*(theta-theta0)^2")
    wrapped = openmm.CustomTorsionForce(
        "k*min(dtheta, 2*pi-dtheta)^2; dtheta = abs(theta-theta0); pi = 3.141593;"
    )
    for force in (impropers, wrapped):
        force.addPerTorsionParameter("k")
        force.addPerTorsionParameter("theta0")
    for i in range(count - 1):
        bonds.addBond(i, i + 1, 0.12 + 0.05 * rng.random(), 1e5 * rng.random())
    for i in range(count - 2):
        angles.addAngle(i, i + 1, i + 2, 1.5 + 1.5 * rng.random(), 300 * rng.random())
    for i in range(count - 3):
        for n in (1, 2, 3):
            torsions.addTorsion(i, i + 1, i + 2, i + 3, n, 2 * math.pi * rng.random(), 10 * rng.normal())
        impropers.addTorsion(i, i + 1, i + 2, i + 3, [100 * rng.random(), rng.uniform(-1, 1)])
        wrapped.addTorsion(i, i + 1, i + 2, i + 3, [100 * rng.random(), rng.uniform(-3, 3)])
    for force in (bonds, angles, torsions, impropers, wrapped):
        force.setUsesPeriodicBoundaryConditions(periodic)
        system.addForce(force)
    return system


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
@pytest.mark.parametrize("periodic", [False, True], ids=["whole", "periodic"])
def test_every_bonded_term_matches_openmm(periodic, compiled, reference):
    """Energies and forces of every bonded kind against OpenMM's Reference platform, by the compiled
    kernels (used for terms that are not periodic) and by the torch code."""
    system = _bonded_system(periodic)
    positions = _chain_positions(12)
    if periodic:  # wrap every atom into the box, breaking the chain across the faces
        positions = positions - np.floor(positions / np.diag(BOX)) * np.diag(BOX)
    expected = reference(system, positions, BOX)
    ff = from_openmm(system, dtype=torch.float64)
    for term in ff:
        term.compiled = compiled
    assert [type(term) for term in ff] == [
        HarmonicBond,
        HarmonicAngle,
        PeriodicTorsion,
        HarmonicImproper,
        HarmonicImproper,
    ]
    box = torch.tensor(BOX)
    x = torch.tensor(positions)
    energies = ff.energy_terms(x, box)
    for term in ff:
        reference_energy = expected.energies[term.openmm_force_index]
        assert abs(reference_energy) > 1.0
        assert energies[term.name].item() == pytest.approx(reference_energy, rel=1e-8), term.name
    forces = ms.forces(ff, x, box).numpy()
    error = np.sqrt(((forces - expected.forces) ** 2).sum() / (expected.forces**2).sum())
    assert error < 1e-10

    forces32 = ms.forces(ff.to(torch.float32), x.float(), box.float())
    assert forces32.dtype == torch.float32
    error32 = np.sqrt(((forces32.double().numpy() - expected.forces) ** 2).sum() / (expected.forces**2).sum())
    assert error32 < 1e-3


def test_bonded_forces_are_minus_the_gradient_by_finite_differences():
    system = _bonded_system(periodic=True, seed=3)
    ff = from_openmm(system, dtype=torch.float64)
    box = torch.tensor(BOX)
    x = torch.tensor(_chain_positions(12, seed=3))
    for term in ff:
        assert torch.autograd.gradcheck(lambda p, term=term: term(p, box), (x.clone().requires_grad_(),))
    forces = ms.forces(ff, x, box)
    assert torch.allclose(forces.sum(0), torch.zeros(3, dtype=torch.float64), atol=1e-9)
    # invariance: translating the whole molecule and wrapping atoms into the box
    shifted = x + torch.tensor([0.37, -1.1, 2.3], dtype=torch.float64)
    wrapped = ms.space.wrap(shifted, box)
    assert ff(wrapped, box).item() == pytest.approx(ff(x, box).item(), rel=1e-12)


@pytest.mark.parametrize("theta", [0.0, math.pi, math.pi - 1e-9, 1e-9], ids=["0", "180", "180-eps", "0+eps"])
def test_angle_energy_and_force_are_finite_at_0_and_180_degrees(theta):
    angle = HarmonicAngle([[0, 1, 2]], [2.0], [400.0])
    positions = torch.tensor(
        [[0.1, 0.0, 0.0], [0.0, 0.0, 0.0], [0.1 * math.cos(theta), 0.1 * math.sin(theta), 0.0]],
        dtype=torch.float64,
    )
    energy = angle(positions)
    assert energy.item() == pytest.approx(0.5 * 400.0 * (theta - 2.0) ** 2, rel=1e-12)
    assert torch.isfinite(ms.forces(angle, positions)).all()


def test_urey_bradley_and_trainable_parameters_have_analytic_gradients():
    positions = torch.tensor([[0.0, 0.0, 0.0], [0.1, 0.05, 0.0], [0.25, 0.0, 0.02]], dtype=torch.float64)
    term = UreyBradley([[0, 2]], [0.2], [5000.0], trainable=True)
    assert term.name == "UreyBradley"
    distance = positions[2].norm()
    energy = term(positions)
    assert energy.item() == pytest.approx(0.5 * 5000.0 * (distance.item() - 0.2) ** 2, rel=1e-12)
    grad_k, grad_length = torch.autograd.grad(energy, (term.k, term.length))
    assert grad_k.item() == pytest.approx(0.5 * (distance.item() - 0.2) ** 2, rel=1e-12)
    assert grad_length.item() == pytest.approx(-5000.0 * (distance.item() - 0.2), rel=1e-12)


def test_force_field_reports_terms_and_rejects_duplicates():
    bonds = HarmonicBond([[0, 1]], [0.1], [1000.0])
    ff = ForceField([bonds, HarmonicAngle([[0, 1, 2]], [1.9], [300.0])])
    positions = torch.tensor([[0.0, 0.0, 0.0], [0.12, 0.0, 0.0], [0.12, 0.1, 0.0]], dtype=torch.float64)
    energies = ff.energy_terms(positions, None)
    assert set(energies) == {"HarmonicBond", "HarmonicAngle"}
    assert ff(positions).item() == pytest.approx(sum(e.item() for e in energies.values()), rel=1e-14)
    assert energies["HarmonicBond"].item() == pytest.approx(0.5 * 1000.0 * 0.02**2, rel=1e-12)
    with pytest.raises(ValueError, match="HarmonicBond"):
        ff.add(HarmonicBond([[1, 2]], [0.1], [1000.0]))
    assert ff["HarmonicBond"] is bonds


def test_bad_bonded_input_raises_with_a_clear_message():
    with pytest.raises(ValueError, match=r"shape \(M, 3\)"):
        HarmonicAngle([[0, 1]], [1.0], [1.0])
    with pytest.raises(ValueError, match="'k' must have one value per interaction"):
        HarmonicBond([[0, 1], [1, 2]], [0.1, 0.1], [1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="integer"):
        HarmonicBond([[0.0, 1.0]], [0.1], [1.0])
    positions = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="atom index 2 out of range for 2 positions"):
        HarmonicBond([[0, 2]], [0.1], [1.0])(positions)
    with pytest.raises(ValueError, match="box is None"):
        HarmonicBond([[0, 1]], [0.1], [1.0], periodic=True)(positions, None)
    with pytest.raises(ValueError, match=r"positions must be an \(N, 3\) tensor"):
        ForceField([HarmonicBond([[0, 1]], [0.1], [1.0])])(torch.zeros(2, 2))


@pytest.mark.slow
@pytest.mark.parametrize("forcefield_file", ["amber19-all.xml", "charmm36.xml"])
def test_cmap_impropers_and_protein_bonded_terms_match_openmm(forcefield_file, villin_pdb, reference):
    """ff19SB carries CMAP; CHARMM36 CMAP, harmonic impropers and Urey-Bradley: villin, distorted."""
    from openmm import app, unit

    modeller = app.Modeller(villin_pdb.topology, villin_pdb.positions)
    modeller.deleteWater()
    modeller.delete([residue for residue in modeller.topology.residues() if residue.name == "Cl"])
    system = app.ForceField(forcefield_file).createSystem(modeller.topology, constraints=None)
    non_bonded = {
        "NonbondedForce",
        "CustomNonbondedForce",
        "CustomBondForce",
    }  # CHARMM's LJ (NBFIX) and 1-4 LJ
    for index in reversed(range(system.getNumForces())):
        if type(system.getForce(index)).__name__ in non_bonded:
            system.removeForce(index)
    positions = np.array(modeller.getPositions().value_in_unit(unit.nanometer))
    positions += np.random.default_rng(0).normal(scale=0.02, size=positions.shape)
    expected = reference(system, positions)
    ff = from_openmm(system)
    assert "CMAPTorsion" in ff.names
    if forcefield_file == "charmm36.xml":
        assert "HarmonicImproper" in ff.names
    x = torch.tensor(positions)
    energies = ff.energy_terms(x, None)
    for term in ff:
        assert energies[term.name].item() == pytest.approx(
            expected.energies[term.openmm_force_index], rel=1e-8
        )
    forces = ms.forces(ff, x).numpy()
    assert np.sqrt(((forces - expected.forces) ** 2).sum() / (expected.forces**2).sum()) < 1e-10


def test_compiled_forces_differentiate_again_and_fall_back_for_trainable_terms(require_compiled):
    """With the compiled kernels, create_graph=True still gives the torch code's second derivatives (a
    Hessian-vector product), energies without autograd are the same, and trainable terms use torch."""
    from mindsponge import _kernels

    require_compiled(lambda: _kernels.bonded(torch.zeros(1)))
    system = _bonded_system(periodic=False, seed=5)
    x = torch.tensor(_chain_positions(12, seed=5))
    direction = torch.randn(12, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    products = {}
    for compiled in (True, False):
        ff = from_openmm(system, dtype=torch.float64)
        for term in ff:
            term.compiled = compiled
        positions = x.clone().requires_grad_(True)
        forces = ms.forces(ff, positions, create_graph=True)
        (products[compiled],) = torch.autograd.grad((forces * direction).sum(), positions)
        with torch.no_grad():
            products[compiled, "energy"] = ff(x)
    torch.testing.assert_close(products[True], products[False], rtol=1e-10, atol=1e-8)
    torch.testing.assert_close(products[True, "energy"], products[False, "energy"], rtol=1e-12, atol=0)
    trainable = HarmonicAngle([[0, 1, 2]], [1.9], [300.0], trainable=True)
    assert trainable._kernels(x) is None
    assert HarmonicAngle([[0, 1, 2]], [1.9], [300.0])._kernels(x) is not None


def test_forces_can_be_differentiated_again_for_force_matching():
    """create_graph=True keeps the graph: d/dk of a loss on forces matches finite differences."""
    positions = torch.tensor(_chain_positions(5, seed=4))
    target = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def loss(k):
        term = HarmonicAngle([[0, 1, 2], [1, 2, 3], [2, 3, 4]], [1.9, 2.0, 2.1], k, trainable=True)
        return ((ms.forces(term, positions, create_graph=True) - target) ** 2).sum(), term

    value, term = loss([100.0, 200.0, 300.0])
    (gradient,) = torch.autograd.grad(value, term.k)
    step = 1e-4
    for index in range(3):
        k = [100.0, 200.0, 300.0]
        k[index] += step
        plus = loss(k)[0].item()
        k[index] -= 2 * step
        minus = loss(k)[0].item()
        assert gradient[index].item() == pytest.approx((plus - minus) / (2 * step), rel=1e-6)
