"""Whole systems translated from OpenMM against OpenMM's Reference platform, computed live.

Per-term energies: every OpenMM force in its own force group, the reciprocal space of the
NonbondedForce in another. Targets (float64): bonded terms 1e-8 relative, non-bonded 1e-6
with the same Ewald parameters; forces RMS relative error 1e-5 (1e-3 in float32).
"""

import numpy as np
import pytest
import torch

import mindsponge as ms
from mindsponge.interop.openmm import UnsupportedOpenMMForceError, from_openmm, from_pdb_with_forcefield, load

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402

NONBONDED_TOLERANCE = 1e-6
BONDED_TOLERANCE = 1e-8


def _distorted(positions, seed=0, scale=0.003):
    """Positions moved off the force field's minimum so that every bonded term is non-zero."""
    return positions + np.random.default_rng(seed).normal(scale=scale, size=positions.shape)


def _rms_relative(forces, reference):
    return float(np.sqrt(((forces - reference) ** 2).sum() / (reference**2).sum()))


def _compare(case, reference, seed=0):
    """Assert per-term energies and forces of ``case`` agree with OpenMM; return the force field."""
    positions = _distorted(case.positions, seed)
    expected = reference(case.system, positions, case.box)
    ff = from_openmm(case.system, case.topology)
    x = torch.tensor(positions)
    box = None if case.box is None else torch.tensor(case.box)
    compared = 0
    for term in ff:
        openmm_energy = expected.energies[term.openmm_force_index]
        parts = {name: energy.item() for name, energy in term.energy_terms(x, box).items()}
        if type(term).__name__ == "Nonbonded":
            if "coulomb_reciprocal" in parts:
                reciprocal = parts.pop("coulomb_reciprocal")
                assert reciprocal == pytest.approx(expected.reciprocal, rel=NONBONDED_TOLERANCE)
            assert sum(parts.values()) == pytest.approx(openmm_energy, rel=NONBONDED_TOLERANCE), term.name
        else:
            assert parts[term.name] == pytest.approx(openmm_energy, rel=BONDED_TOLERANCE, abs=1e-9), term.name
        compared += 1
    assert compared == len([f for f in case.system.getForces() if not isinstance(f, openmm.CMMotionRemover)])
    energies = ff.energy_terms(x, box)
    assert ff(x, box).item() == pytest.approx(expected.total, rel=NONBONDED_TOLERANCE)
    assert sum(e.item() for e in energies.values()) == pytest.approx(expected.total, rel=NONBONDED_TOLERANCE)
    forces = ms.forces(ff, x, box)
    assert forces.dtype == torch.float64
    assert _rms_relative(forces.numpy(), expected.forces) < 1e-5

    ff32 = from_openmm(case.system, dtype=torch.float32)
    forces32 = ms.forces(ff32, x.float(), None if box is None else box.float())
    assert forces32.dtype == torch.float32
    assert _rms_relative(forces32.double().numpy(), expected.forces) < 1e-3
    return ff, expected


def test_water_box_pme_matches_openmm_with_its_ewald_parameters(water_box, reference):
    case = water_box("PME", rigid=True)
    ff, expected = _compare(case, reference)
    nonbonded = ff["Nonbonded"]
    alpha, *grid = expected.pme_parameters
    # the Ewald parameters derived from the error tolerance are OpenMM's
    assert nonbonded.alpha == pytest.approx(alpha, rel=1e-12)
    assert tuple(nonbonded.pme_grid) == tuple(grid)


def test_flexible_water_box_pme_bonds_and_angles_match_openmm(water_box, reference):
    ff, _ = _compare(water_box("PME", rigid=False), reference, seed=1)
    assert len(ff["HarmonicBond"]) > 0 and len(ff["HarmonicAngle"]) > 0


@pytest.mark.parametrize("switching", [False, True], ids=["plain", "switched"])
def test_water_box_reaction_field_matches_openmm(switching, water_box, reference):
    options = {"switchDistance": 0.75 * unit.nanometer} if switching else {}
    ff, _ = _compare(water_box("CutoffPeriodic", rigid=False, **options), reference, seed=2)
    assert ff["Nonbonded"].method == "reaction_field"
    assert ff["Nonbonded"].switch_distance == (pytest.approx(0.75) if switching else None)


@pytest.mark.parametrize("method", ["NoCutoff", "CutoffNonPeriodic"])
def test_peptide_in_vacuum_amber14_matches_openmm(method, amber14, villin_vacuum, reference):
    case = villin_vacuum
    if method != "NoCutoff":
        system = amber14.createSystem(
            case.topology,
            nonbondedMethod=app.CutoffNonPeriodic,
            nonbondedCutoff=1.0 * unit.nanometer,
            constraints=None,
        )
        case = type(case)(system, case.topology, case.positions, None)
    ff, _ = _compare(case, reference, seed=3)
    assert {"HarmonicBond", "HarmonicAngle", "PeriodicTorsion", "Nonbonded"} <= set(ff.names)


def test_solvated_peptide_pme_matches_openmm(solvated_villin, reference):
    _compare(solvated_villin, reference, seed=4)


def test_pme_total_is_within_the_error_tolerance_of_exact_ewald(water_box, reference):
    """Our PME at OpenMM's default tolerance (5e-4) against OpenMM's Ewald at 1e-6."""
    tolerance = 5e-4
    exact = water_box("Ewald", rigid=True, ewaldErrorTolerance=1e-6)
    positions = _distorted(exact.positions, seed=5)
    expected = reference(exact.system, positions, exact.box)
    ff = from_openmm(water_box("PME", rigid=True, ewaldErrorTolerance=tolerance).system)
    x, box = torch.tensor(positions), torch.tensor(exact.box)
    energy, forces = ms.forcefield.energy_and_forces(ff, x, box)
    coulomb = sum(v.item() for k, v in ff.energy_terms(x, box).items() if k.startswith("coulomb"))
    assert abs(energy.item() - expected.total) < tolerance * abs(coulomb)
    assert _rms_relative(forces.numpy(), expected.forces) < tolerance


@pytest.mark.parametrize("method", ["PME", "CutoffPeriodic"])
def test_energy_is_invariant_to_translation_and_wrapping_and_forces_sum_to_zero(method, water_box):
    case = water_box(method, rigid=True)
    ff = from_openmm(case.system)
    box = torch.tensor(case.box)
    x = torch.tensor(_distorted(case.positions, seed=6))
    energy = ff(x, box).item()
    shift = torch.tensor([0.31, -0.77, 1.9], dtype=torch.float64)
    if method == "PME":
        # the PME grid breaks translation invariance by about its error tolerance (OpenMM's too);
        # a shift by whole grid cells is exact
        assert ff(x + shift, box).item() == pytest.approx(energy, rel=1e-5)
        grid = torch.tensor(ff["Nonbonded"].pme_grid, dtype=torch.float64)
        shift = torch.tensor([3.0, -5.0, 7.0], dtype=torch.float64) * torch.diagonal(box) / grid
    shifted = x + shift
    assert ff(shifted, box).item() == pytest.approx(energy, rel=1e-11)
    wrapped = ms.space.wrap(shifted, box)
    assert not torch.allclose(wrapped, shifted)
    assert ff(wrapped, box).item() == pytest.approx(energy, rel=1e-11)
    forces = ms.forces(ff, x, box)
    net = forces.sum(0).abs().max().item()
    assert net < (1e-3 if method == "PME" else 1e-8) * forces.abs().mean().item() * len(x) ** 0.5


def test_tip4p_virtual_sites_match_openmm(reference):
    forcefield = app.ForceField("amber14/tip4pew.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip4pew", boxSize=openmm.Vec3(2.0, 2.0, 2.0) * unit.nanometer)
    system = forcefield.createSystem(
        modeller.topology,
        nonbondedMethod=app.PME,
        nonbondedCutoff=0.9 * unit.nanometer,
        constraints=None,
        rigidWater=False,
    )
    positions = _distorted(np.array(modeller.getPositions().value_in_unit(unit.nanometer)), seed=7)
    box = np.array([list(v.value_in_unit(unit.nanometer)) for v in system.getDefaultPeriodicBoxVectors()])
    expected = reference(system, positions, box)
    ff = from_openmm(system)
    assert ff.virtual_sites is not None and len(ff.virtual_sites) == modeller.topology.getNumResidues()
    x, box_tensor = torch.tensor(positions), torch.tensor(box)
    assert ff(x, box_tensor).item() == pytest.approx(expected.total, rel=NONBONDED_TOLERANCE)
    forces = ms.forces(ff, x, box_tensor).numpy()
    # OpenMM reports the force acting on a site besides spreading it to the parents; ours is
    # carried over to the parents only
    sites = np.array([system.isVirtualSite(i) for i in range(system.getNumParticles())])
    assert np.all(forces[sites] == 0)
    assert _rms_relative(forces[~sites], expected.forces[~sites]) < 1e-5


@pytest.mark.slow
def test_load_serialized_system_and_pdb(tmp_path, villin_vacuum, solvated_villin, reference):
    for number, case in enumerate((villin_vacuum, solvated_villin)):
        xml = tmp_path / f"system{number}.xml"
        pdb = tmp_path / f"structure{number}.pdb"
        xml.write_text(openmm.XmlSerializer.serialize(case.system))
        with open(pdb, "w") as handle:
            app.PDBFile.writeFile(case.topology, case.positions * unit.nanometer, handle)
        system, ff = load(xml, pdb)
        assert (system.box is None) == (case.box is None)
        if case.box is not None:
            np.testing.assert_allclose(system.box.numpy(), case.box, rtol=1e-12)
        masses = [case.system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
        np.testing.assert_allclose(system.masses.numpy(), masses, rtol=1e-12)
        nonbonded = next(f for f in case.system.getForces() if isinstance(f, openmm.NonbondedForce))
        charges = [
            nonbonded.getParticleParameters(i)[0].value_in_unit(unit.elementary_charge)
            for i in range(system.n_atoms)
        ]
        np.testing.assert_allclose(system.charges.numpy(), charges, rtol=1e-12)
        # the PDB holds positions to 1e-4 nm: compare with OpenMM at the same positions
        expected = reference(case.system, system.positions.numpy(), case.box)
        assert ff(system.positions, system.box).item() == pytest.approx(
            expected.total, rel=NONBONDED_TOLERANCE
        )
    _, ff, openmm_system = from_pdb_with_forcefield(
        pdb, nonbondedMethod=app.PME, constraints=None, rigidWater=False, nonbondedCutoff=0.9 * unit.nanometer
    )
    assert openmm_system.getNumParticles() == solvated_villin.system.getNumParticles()
    assert ff["Nonbonded"].method == "pme"


def test_load_names_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.xml"):
        load(tmp_path / "missing.xml", tmp_path / "missing.pdb")
    xml = tmp_path / "system.xml"
    xml.write_text(openmm.XmlSerializer.serialize(openmm.System()))
    with pytest.raises(FileNotFoundError, match="missing.pdb"):
        load(xml, tmp_path / "missing.pdb")
    xml.write_text(openmm.XmlSerializer.serialize(openmm.VerletIntegrator(0.001)))
    (tmp_path / "empty.pdb").write_text("END\n")
    with pytest.raises(ValueError, match="not a System"):
        load(xml, tmp_path / "empty.pdb")


def test_unsupported_forces_and_options_are_named():
    system = openmm.System()
    for _ in range(3):
        system.addParticle(1.0)
    system.addForce(openmm.CMMotionRemover())
    system.addForce(openmm.CustomHbondForce("distance(a1, d1)"))
    with pytest.raises(
        UnsupportedOpenMMForceError, match=r"force 1 \(CustomHbondForce.*supports.*HarmonicBond"
    ):
        from_openmm(system)
    system.removeForce(1)
    nonbonded = openmm.NonbondedForce()
    for _ in range(3):
        nonbonded.addParticle(0.1, 0.3, 0.5)
    nonbonded.setNonbondedMethod(openmm.NonbondedForce.LJPME)
    system.addForce(nonbonded)
    with pytest.raises(UnsupportedOpenMMForceError, match="NonbondedForce.*LJPME"):
        from_openmm(system)
    nonbonded.setNonbondedMethod(openmm.NonbondedForce.NoCutoff)
    nonbonded.addGlobalParameter("lambda", 1.0)
    nonbonded.addParticleParameterOffset("lambda", 0, 0.1, 0.0, 0.0)
    assert from_openmm(system).global_parameters == {"lambda": 1.0}  # offsets are read (test_alchemy.py)
    torsion = openmm.CustomTorsionForce("k*cos(theta)")
    system.removeForce(1)
    system.addForce(torsion)
    with pytest.raises(UnsupportedOpenMMForceError, match=r"CustomTorsionForce.*k\*cos\(theta\)"):
        from_openmm(system)
    with pytest.raises(TypeError, match="openmm.System"):
        from_openmm("system.xml")


@pytest.mark.parametrize("case_name", ["villin_vacuum", "water_pme"])
def test_forces_are_minus_the_finite_difference_gradient_of_the_whole_force_field(
    case_name, request, water_box
):
    case = water_box("PME", rigid=False) if case_name == "water_pme" else request.getfixturevalue(case_name)
    ff = from_openmm(case.system)
    x = torch.tensor(_distorted(case.positions, seed=8))
    box = None if case.box is None else torch.tensor(case.box)
    forces = ms.forces(ff, x, box)
    step = 1e-5
    rng = np.random.default_rng(9)
    for atom, component in zip(rng.integers(0, len(x), 6), rng.integers(0, 3, 6)):
        plus, minus = x.clone(), x.clone()
        plus[atom, component] += step
        minus[atom, component] -= step
        derivative = (ff(plus, box) - ff(minus, box)).item() / (2 * step)
        assert -derivative == pytest.approx(forces[atom, component].item(), rel=1e-5, abs=1e-3)
