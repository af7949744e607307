"""mindsponge.build.water_box: density, model geometry, no overlaps, and OpenMM's water templates."""

import math

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from common import units
from mindsponge import space
from mindsponge.build import WATER_MODELS, water_box

MODELS = ["tip3p", "spce", "tip4pew"]
# the force-field files OpenMM parameterises each model with
OPENMM_XML = {"tip3p": ["tip3p.xml", "amber14/tip3pfb.xml"], "spce": ["spce.xml"], "tip4pew": ["tip4pew.xml"]}


def sites(model):
    return 4 if model == "tip4pew" else 3


def oxygen_hydrogen_geometry(system, model):
    positions = system.positions.reshape(-1, sites(model), 3)
    oxygen_to_h1 = positions[:, 1] - positions[:, 0]
    oxygen_to_h2 = positions[:, 2] - positions[:, 0]
    lengths = torch.cat([torch.linalg.norm(oxygen_to_h1, dim=1), torch.linalg.norm(oxygen_to_h2, dim=1)])
    cosine = (oxygen_to_h1 * oxygen_to_h2).sum(1) / torch.linalg.norm(oxygen_to_h1, dim=1)
    cosine = cosine / torch.linalg.norm(oxygen_to_h2, dim=1)
    return lengths, torch.rad2deg(torch.arccos(cosine))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("n_molecules", [5, 129, 216])
def test_density_geometry_neutrality_and_no_overlaps(model, n_molecules):
    system = water_box(n_molecules, model=model, seed=1)
    n_sites = sites(model)
    assert system.n_atoms == n_sites * n_molecules
    # density from masses and volume (computed here, not by System.density)
    grams = system.masses.sum().item() / units.AVOGADRO
    cubic_centimetres = torch.linalg.det(system.box).item() * 1e-21
    assert grams / cubic_centimetres == pytest.approx(0.997, rel=1e-12)
    assert float(system.density) == pytest.approx(0.997, rel=1e-12)
    # rigid geometry of the model
    water = WATER_MODELS[model]
    lengths, angles = oxygen_hydrogen_geometry(system, model)
    torch.testing.assert_close(lengths, torch.full_like(lengths, water.oh_distance), rtol=0, atol=1e-12)
    torch.testing.assert_close(angles, torch.full_like(angles, water.hoh_angle), rtol=0, atol=1e-9)
    # neutral, per molecule
    torch.testing.assert_close(
        system.charges.reshape(-1, n_sites).sum(1),
        torch.zeros(n_molecules, dtype=torch.float64),
        rtol=0,
        atol=1e-12,
    )
    # no overlaps: periodic O-O and intermolecular atom-atom distances (scipy's periodic k-d tree)
    box_length = system.box[0, 0].item()
    oxygens = system.positions[::n_sites].numpy() % box_length
    if n_molecules > 1:
        distances, _ = cKDTree(oxygens, boxsize=box_length).query(oxygens, k=2)
        assert distances[:, 1].min() > 0.265
    real = system.positions.reshape(-1, n_sites, 3)[:, :3].reshape(-1, 3).numpy() % box_length
    pairs = cKDTree(real, boxsize=box_length).query_pairs(0.155, output_type="ndarray")
    assert (pairs[:, 0] // 3 == pairs[:, 1] // 3).all()  # only O-H and H-H pairs within a molecule
    # topology as OpenMM's templates expect
    topology = system.topology
    assert {residue.name for residue in topology.residues} == {"HOH"}
    assert [atom.name for atom in topology.atoms[:n_sites]] == list(water.atom_names)
    assert topology.bonds[:2] == ((0, 1), (0, 2)) and len(topology.bonds) == 2 * n_molecules


def test_box_size_sets_the_number_of_molecules():
    system = water_box(box_size=2.0, model="spce")
    expected = 0.997 * 8.0 / (sum(system.masses[:3].tolist()) * units.AMU_PER_NM3_TO_G_PER_CM3)
    assert system.n_atoms == 3 * round(expected)
    assert float(system.density) == pytest.approx(0.997, rel=0.5 / round(expected))
    assert torch.equal(system.box, torch.eye(3, dtype=torch.float64) * 2.0)
    lighter = water_box(n_molecules=100, density=0.9)
    assert float(lighter.density) == pytest.approx(0.9, rel=1e-12)


def test_seed_and_dtype():
    first, second = water_box(64, seed=3), water_box(64, seed=3)
    assert torch.equal(first.positions, second.positions)
    assert not torch.equal(first.positions, water_box(64, seed=4).positions)
    single = water_box(64, seed=3, dtype=torch.float32)
    assert single.dtype == torch.float32 and single.box.dtype == torch.float32
    space.check_box(single.box)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "give n_molecules or box_size"),
        ({"n_molecules": 10, "box_size": 1.0, "density": 1.0}, "not all three"),
        ({"n_molecules": 10, "model": "tip5p"}, "model must be one of"),
        ({"n_molecules": 0}, "at least 1"),
        ({"box_size": -1.0}, "box_size must be positive"),
        ({"n_molecules": 10, "density": 0.0}, "density must be positive"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        water_box(**kwargs)


@pytest.mark.parametrize("model", MODELS)
def test_openmm_forcefield_matches_templates(model):
    """OpenMM's water force fields parameterise the box: charges, masses, constraints and M sites agree."""
    openmm = pytest.importorskip("openmm")
    from openmm import app, unit

    system = water_box(60, model=model, seed=2)
    n_sites = sites(model)
    topology = system.topology.to_openmm(box=system.box)
    for xml in OPENMM_XML[model]:
        openmm_system = app.ForceField(xml).createSystem(
            topology, nonbondedMethod=app.PME, nonbondedCutoff=0.6 * unit.nanometer, rigidWater=True
        )
        assert openmm_system.getNumParticles() == system.n_atoms
        nonbonded = next(f for f in openmm_system.getForces() if isinstance(f, openmm.NonbondedForce))
        charges = [
            nonbonded.getParticleParameters(i)[0].value_in_unit(unit.elementary_charge) for i in range(60)
        ]
        if xml == "amber14/tip3pfb.xml":  # TIP3P-FB has its own charges; only the template match is checked
            assert sum(charges) == pytest.approx(0.0, abs=1e-9)
        else:
            np.testing.assert_allclose(charges, system.charges[:60].numpy(), rtol=0, atol=1e-12)
        masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
        np.testing.assert_allclose(masses, system.masses.numpy(), rtol=1e-4)  # ASE vs OpenMM element masses
        # rigid water: OpenMM constrains O-H1, O-H2 and H1-H2 to the geometry of its XML file
        positions = system.positions.numpy()
        assert openmm_system.getNumConstraints() == 3 * 60
        for index in range(openmm_system.getNumConstraints()):
            i, j, distance = openmm_system.getConstraintParameters(index)
            actual = np.linalg.norm(positions[i] - positions[j])
            if xml != "amber14/tip3pfb.xml":  # TIP3P-FB has its own geometry
                assert actual == pytest.approx(distance.value_in_unit(unit.nanometer), abs=1e-9)
        # OpenMM places the virtual sites where we put them, and the box has no clashes
        context = openmm.Context(
            openmm_system, openmm.VerletIntegrator(1e-3), openmm.Platform.getPlatformByName("Reference")
        )
        context.setPeriodicBoxVectors(*[openmm.Vec3(*row) for row in system.box.tolist()])
        context.setPositions(positions)
        context.computeVirtualSites()
        state = context.getState(getPositions=True, getEnergy=True)
        np.testing.assert_allclose(
            state.getPositions(asNumpy=True).value_in_unit(unit.nanometer), positions, rtol=0, atol=1e-12
        )
        energy_per_molecule = state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole) / 60
        # unminimised random orientations: weakly attractive (equilibrated liquid: about -41 kJ/mol);
        # a sanity check only, the overlap test above is the sharp one
        assert -60.0 < energy_per_molecule < 0.0
    assert n_sites == (4 if model == "tip4pew" else 3)


def test_tip4pew_virtual_site_distance():
    system = water_box(8, model="tip4pew")
    positions = system.positions.reshape(-1, 4, 3)
    distance = torch.linalg.norm(positions[:, 3] - positions[:, 0], dim=1)
    torch.testing.assert_close(distance, torch.full_like(distance, 0.0125), rtol=0, atol=5e-6)
    assert system.masses.reshape(-1, 4)[:, 3].eq(0).all()
    assert math.isclose(system.charges[3].item(), -1.04844)
