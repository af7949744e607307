"""Nonbonded (LJ + Coulomb) against OpenMM's NonbondedForce on the Reference platform, live.

Systems: a ~650-atom TIP3P box (``Modeller.addSolvent``) and villin (openmm's ``test.pdb``,
amber14, with its 1-4 exceptions) in vacuum and in a periodic box. Each case builds an OpenMM
System holding only the NonbondedForce, evaluates it in float64, and compares the total energy,
the reciprocal-space force group and the forces with ours.
"""

import math
import os
import warnings

import numpy as np
import pytest
import torch

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402

from mindsponge import _kernels, space  # noqa: E402
from mindsponge.forcefield import ForceField, forces  # noqa: E402
from mindsponge.forcefield.ewald import PMEReciprocal, ewald_alpha, pme_grid_size  # noqa: E402
from mindsponge.forcefield.nonbonded import Nonbonded, NonbondedMethodError  # noqa: E402

KJ = unit.kilojoule_per_mole
OPENMM_METHODS = {"pme": app.PME, "ewald": app.Ewald, "reaction_field": app.CutoffPeriodic,
                  "cutoff": app.CutoffPeriodic, "nocutoff": app.NoCutoff}
REFERENCE_PLATFORM = openmm.Platform.getPlatformByName("Reference")


@pytest.fixture(scope="module")
def water():
    forcefield = app.ForceField("amber14-all.xml", "amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(1.9, 1.9, 1.9) * unit.nanometer)
    return forcefield, modeller.topology, modeller.positions


@pytest.fixture(scope="module")
def villin():
    pdb = app.PDBFile(os.path.join(os.path.dirname(app.__file__), "data", "test.pdb"))
    modeller = app.Modeller(pdb.topology, pdb.positions)
    modeller.deleteWater()
    modeller.delete([residue for residue in modeller.topology.residues() if len(list(residue.atoms())) == 1])
    forcefield = app.ForceField("amber14-all.xml")
    return forcefield, modeller.topology, modeller.positions


def openmm_case(forcefield, topology, positions, method, cutoff=0.8, switch=None, dispersion=True,
                dielectric=78.3, box=None, tolerance=5e-4, platform=REFERENCE_PLATFORM):
    """OpenMM reference (energy, reciprocal group energy, forces, NonbondedForce, box, context) in float64
    (on the Reference platform; the CPU platform computes in single precision)."""
    if box is not None:
        topology.setPeriodicBoxVectors(box * unit.nanometer)
    system = forcefield.createSystem(topology, nonbondedMethod=OPENMM_METHODS[method],
                                     nonbondedCutoff=cutoff * unit.nanometer, constraints=None,
                                     rigidWater=False, ewaldErrorTolerance=tolerance)
    for index in reversed(range(system.getNumForces())):
        if not isinstance(system.getForce(index), openmm.NonbondedForce):
            system.removeForce(index)
    force = system.getForce(0)
    if method == "cutoff":
        dielectric = 1.0
    force.setReactionFieldDielectric(dielectric)
    force.setUseDispersionCorrection(dispersion)
    if switch is not None:
        force.setUseSwitchingFunction(True)
        force.setSwitchingDistance(switch)
    force.setReciprocalSpaceForceGroup(1)
    context = openmm.Context(system, openmm.VerletIntegrator(1.0), platform)
    context.setPositions(positions)
    state = context.getState(getEnergy=True, getForces=True)
    reciprocal = context.getState(getEnergy=True, groups={1}).getPotentialEnergy().value_in_unit(KJ)
    reference = {
        "system": system,  # owns the NonbondedForce returned below: keep it alive
        "context": context,
        "energy": state.getPotentialEnergy().value_in_unit(KJ),
        "reciprocal": reciprocal,
        "forces": np.asarray(state.getForces().value_in_unit(KJ / unit.nanometer)),
        "positions": np.asarray(positions.value_in_unit(unit.nanometer)),
        "box": None if method == "nocutoff" else np.asarray(
            [v.value_in_unit(unit.nanometer) for v in system.getDefaultPeriodicBoxVectors()]),
    }
    if method == "pme":
        reference["pme"] = force.getPMEParametersInContext(context)
    return force, reference


def ours_from(force, method, dtype=torch.float64, pme_parameters=None, **options):
    """Our Nonbonded with the particles, exclusions and exceptions of an OpenMM NonbondedForce."""
    particles = np.array([[p.value_in_unit(p.unit) for p in force.getParticleParameters(i)]
                          for i in range(force.getNumParticles())])
    exclusions, exceptions, parameters = [], [], []
    for index in range(force.getNumExceptions()):
        i, j, charge_product, sigma, epsilon = force.getExceptionParameters(index)
        values = [charge_product.value_in_unit(charge_product.unit), sigma.value_in_unit(unit.nanometer),
                  epsilon.value_in_unit(KJ)]
        if values[0] == 0.0 and values[2] == 0.0:
            exclusions.append((i, j))
        else:
            exceptions.append((i, j))
            parameters.append(values)
    parameters = np.array(parameters).reshape(-1, 3)
    if pme_parameters is not None:
        alpha, nx, ny, nz = pme_parameters
        options.update(alpha=alpha, pme_grid=(nx, ny, nz))
    tensor = lambda values: torch.tensor(values, dtype=dtype)  # noqa: E731
    return Nonbonded(
        tensor(particles[:, 0]), tensor(particles[:, 1]), tensor(particles[:, 2]), method=method,
        cutoff=force.getCutoffDistance().value_in_unit(unit.nanometer),
        switch_distance=(force.getSwitchingDistance().value_in_unit(unit.nanometer)
                         if force.getUseSwitchingFunction() else None),
        dispersion_correction=force.getUseDispersionCorrection(),
        ewald_tolerance=force.getEwaldErrorTolerance(),
        reaction_field_dielectric=force.getReactionFieldDielectric(),
        exclusions=torch.tensor(exclusions, dtype=torch.long).reshape(-1, 2),
        exceptions=torch.tensor(exceptions, dtype=torch.long).reshape(-1, 2),
        exception_charge_products=tensor(parameters[:, 0]), exception_sigma=tensor(parameters[:, 1]),
        exception_epsilon=tensor(parameters[:, 2]), **options)


def evaluate(model, reference, dtype=torch.float64):
    positions = torch.tensor(reference["positions"], dtype=dtype, requires_grad=True)
    box = None if reference["box"] is None else torch.tensor(reference["box"], dtype=dtype)
    terms = model.energy_terms(positions, box)
    energy = sum(terms.values())
    (gradient,) = torch.autograd.grad(energy, positions)
    return terms, energy.item(), -gradient.detach().numpy()


def force_error(ours, reference):
    return math.sqrt(((ours - reference) ** 2).mean() / (reference**2).mean())


WATER_CASES = [
    ("pme", {}),
    ("pme", {"switch": 0.7}),
    ("pme", {"dispersion": False}),
    ("ewald", {}),
    ("reaction_field", {}),
    ("reaction_field", {"switch": 0.65, "dispersion": False}),
    ("cutoff", {}),
]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
@pytest.mark.parametrize("method, options", WATER_CASES)
def test_water_box_matches_openmm(water, method, options, compiled, validation_figure):
    force, reference = openmm_case(*water, method, **options)
    model = ours_from(force, method, pme_parameters=reference.get("pme"), compiled=compiled)
    terms, energy, ours = evaluate(model, reference)
    assert abs(energy - reference["energy"]) <= 1e-6 * abs(reference["energy"])
    assert force_error(ours, reference["forces"]) < 1e-5
    validation_figure(
        f"{method}: energy {abs(energy - reference['energy']) / abs(reference['energy']):.1e} relative, "
        f"forces {force_error(ours, reference['forces']):.1e}"
    )
    if method in ("pme", "ewald"):
        # OpenMM's reciprocal-space force group holds the reciprocal sum and the self energy
        assert terms["coulomb_reciprocal"].item() == pytest.approx(reference["reciprocal"], rel=1e-6)
    else:
        assert reference["reciprocal"] == 0.0 and "coulomb_reciprocal" not in terms
    assert ("dispersion_correction" in terms) == options.get("dispersion", True)


def test_pme_parameters_from_tolerance_match_openmm(water):
    force, reference = openmm_case(*water, "pme", cutoff=0.8, tolerance=5e-4)
    alpha, nx, ny, nz = reference["pme"]
    box = torch.tensor(reference["box"])
    assert ewald_alpha(0.8, 5e-4) == pytest.approx(alpha, rel=1e-12)
    assert pme_grid_size(alpha, box, 5e-4) == (nx, ny, nz)
    # and with those defaults the energy equals OpenMM's
    terms, energy, _ = evaluate(ours_from(force, "pme"), reference)
    assert abs(energy - reference["energy"]) <= 1e-6 * abs(reference["energy"])


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_water_box_float32(water, compiled):
    force, reference = openmm_case(*water, "pme")
    model = ours_from(force, "pme", dtype=torch.float32, pme_parameters=reference["pme"], compiled=compiled)
    terms, energy, ours = evaluate(model, reference, dtype=torch.float32)
    assert terms["coulomb_direct"].dtype == torch.float32
    # the total is a small difference of large terms: compare with their magnitude
    magnitude = sum(abs(term.item()) for term in terms.values())
    assert abs(energy - reference["energy"]) <= 1e-6 * magnitude
    assert force_error(ours, reference["forces"]) < 1e-3


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_villin_vacuum_no_cutoff_with_exceptions(villin, compiled):
    force, reference = openmm_case(*villin, "nocutoff")
    assert force.getNumExceptions() > 0
    model = ours_from(force, "nocutoff", compiled=compiled)
    assert len(model.exceptions) > 0
    terms, energy, ours = evaluate(model, reference)
    assert abs(energy - reference["energy"]) <= 1e-6 * abs(reference["energy"])
    assert force_error(ours, reference["forces"]) < 1e-5
    assert set(terms) == {"lennard_jones", "coulomb_direct"}


def test_villin_nonperiodic_reaction_field(villin):
    force, reference = openmm_case(*villin, "reaction_field", cutoff=1.0)
    force.setNonbondedMethod(openmm.NonbondedForce.CutoffNonPeriodic)
    system = openmm.System()
    for _ in range(force.getNumParticles()):
        system.addParticle(1.0)
    system.addForce(openmm.XmlSerializer.clone(force))
    context = openmm.Context(system, openmm.VerletIntegrator(1.0), REFERENCE_PLATFORM)
    context.setPositions(reference["positions"])
    state = context.getState(getEnergy=True, getForces=True)
    reference.update(energy=state.getPotentialEnergy().value_in_unit(KJ), box=None,
                     forces=np.asarray(state.getForces().value_in_unit(KJ / unit.nanometer)))
    terms, energy, ours = evaluate(ours_from(force, "reaction_field"), reference)
    assert abs(energy - reference["energy"]) <= 1e-6 * abs(reference["energy"])
    assert force_error(ours, reference["forces"]) < 1e-5
    assert "dispersion_correction" not in terms  # OpenMM: none without periodicity


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
@pytest.mark.parametrize("method", ["pme", "ewald"])
def test_villin_periodic_with_exceptions(villin, method, compiled):
    box = np.diag([4.0, 4.2, 4.4])
    force, reference = openmm_case(*villin, method, cutoff=1.0, switch=0.9, box=box)
    model = ours_from(force, method, pme_parameters=reference.get("pme"), compiled=compiled)
    terms, energy, ours = evaluate(model, reference)
    assert abs(energy - reference["energy"]) <= 1e-6 * abs(reference["energy"])
    assert force_error(ours, reference["forces"]) < 1e-5
    assert terms["coulomb_reciprocal"].item() == pytest.approx(reference["reciprocal"], rel=1e-6)


def test_pme_within_tolerance_of_exact_ewald(water):
    tolerance = 5e-4
    force, reference = openmm_case(*water, "pme", tolerance=tolerance)
    pme = ours_from(force, "pme")
    exact = ours_from(force, "ewald", alpha=pme.alpha, ewald_kmax=(15, 15, 15))  # converged sum
    _, e_pme, f_pme = evaluate(pme, reference)
    terms, e_exact, f_exact = evaluate(exact, reference)
    coulomb = abs(terms["coulomb_reciprocal"].item())
    assert abs(e_pme - e_exact) < tolerance * coulomb
    assert force_error(f_pme, f_exact) < tolerance


@pytest.fixture(scope="module")
def water_model(water):
    force, reference = openmm_case(*water, "pme")
    return ours_from(force, "pme", pme_parameters=reference["pme"]), reference


def test_invariance_translation_and_wrapping(water_model, water):
    model, reference = water_model
    positions = torch.tensor(reference["positions"])
    box = torch.tensor(reference["box"])
    energy = model(positions, box).item()
    # PME is exactly invariant under translations by whole grid spacings (others move the atoms
    # relative to the grid and change the energy by the interpolation error, as in OpenMM)
    spacing = torch.diagonal(box) / torch.tensor(model.pme_grid, dtype=box.dtype)
    shifted = positions + torch.tensor([3.0, -7.0, 11.0], dtype=box.dtype) * spacing
    assert model(shifted, box).item() == pytest.approx(energy, rel=1e-10)
    builds = model.neighbors.n_builds
    wrapped = space.wrap(shifted, box)
    assert not torch.allclose(wrapped, shifted)
    assert model(wrapped, box).item() == pytest.approx(energy, rel=1e-10)
    assert model.neighbors.n_builds == builds  # wrapping is not a displacement
    force, rf_reference = openmm_case(*water, "reaction_field")
    reaction_field = ours_from(force, "reaction_field")
    energy = reaction_field(positions, box).item()
    shifted = positions + torch.tensor([0.37, -1.21, 2.53], dtype=box.dtype)
    assert reaction_field(space.wrap(shifted, box), box).item() == pytest.approx(energy, rel=1e-10)


def test_net_force_and_finite_differences(water_model):
    model, reference = water_model
    positions = torch.tensor(reference["positions"])
    box = torch.tensor(reference["box"])
    ours = forces(model, positions, box)
    # PME's B-spline interpolation leaves a small net force, as in OpenMM; compare magnitudes
    net_openmm = np.linalg.norm(reference["forces"].sum(0))
    assert ours.sum(0).norm().item() < 10 * net_openmm + 1e-6 * ours.norm().item()
    step = 1e-5
    for atom, axis in [(0, 0), (1, 2), (100, 1), (len(positions) - 1, 2)]:
        plus, minus = positions.clone(), positions.clone()
        plus[atom, axis] += step
        minus[atom, axis] -= step
        derivative = (model(plus, box) - model(minus, box)).item() / (2 * step)
        assert -derivative == pytest.approx(ours[atom, axis].item(), rel=1e-6, abs=1e-4)


def test_reaction_field_forces_sum_to_zero(water):
    force, reference = openmm_case(*water, "reaction_field")
    model = ours_from(force, "reaction_field")
    _, _, ours = evaluate(model, reference)
    assert np.abs(ours.sum(0)).max() < 1e-9 * np.abs(ours).max() * len(ours)


def test_autograd_path_equals_analytic_and_double_backward(water):
    force, reference = openmm_case(*water, "pme")
    analytic = ours_from(force, "pme", pme_parameters=reference["pme"])
    autograd = ours_from(force, "pme", pme_parameters=reference["pme"], analytic_forces=False)
    positions = torch.tensor(reference["positions"], requires_grad=True)
    box = torch.tensor(reference["box"])
    terms_a = analytic.energy_terms(positions, box)
    terms_b = autograd.energy_terms(positions, box)
    for name in terms_a:
        assert terms_b[name].item() == pytest.approx(terms_a[name].item(), rel=1e-10)
    (g_a,) = torch.autograd.grad(sum(terms_a.values()), positions, create_graph=True)
    (g_b,) = torch.autograd.grad(sum(terms_b.values()), positions, create_graph=True)
    assert torch.allclose(g_a, g_b, rtol=1e-8, atol=1e-8)
    # a Hessian-vector product through the analytic path equals the finite difference of forces
    generator = torch.Generator().manual_seed(0)
    direction = torch.randn(positions.shape, dtype=positions.dtype, generator=generator)
    (hessian_direction,) = torch.autograd.grad((g_a * direction).sum(), positions)
    step = 1e-6
    plus = forces(analytic, positions.detach() + step * direction, box)
    minus = forces(analytic, positions.detach() - step * direction, box)
    finite = -(plus - minus) / (2 * step)
    assert force_error(hessian_direction.numpy(), finite.numpy()) < 1e-5


def test_charges_gradient_uses_autograd(water):
    force, reference = openmm_case(*water, "reaction_field")
    model = ours_from(force, "reaction_field")
    positions = torch.tensor(reference["positions"])
    box = torch.tensor(reference["box"])
    model.charges.requires_grad_(True)
    energy = model(positions, box)
    (gradient,) = torch.autograd.grad(energy, model.charges)
    step = 1e-6
    with torch.no_grad():
        model.charges[3] += step
        plus = model(positions, box).item()
        model.charges[3] -= 2 * step
        minus = model(positions, box).item()
    assert gradient[3].item() == pytest.approx((plus - minus) / (2 * step), rel=1e-5)


def test_force_field_sum_and_names(water_model):
    model, reference = water_model
    positions = torch.tensor(reference["positions"])
    box = torch.tensor(reference["box"])
    terms = ForceField([model]).energy_terms(positions, box)
    assert set(terms) == {"lennard_jones", "coulomb_direct", "coulomb_reciprocal", "coulomb_exclusions",
                          "dispersion_correction"}
    assert sum(terms.values()).item() == pytest.approx(reference["energy"], rel=1e-6)


def test_bad_input():
    charges = torch.tensor([0.5, -0.5])
    sigma = torch.tensor([0.3, 0.3])
    epsilon = torch.tensor([0.5, 0.5])
    positions = torch.tensor([[0.0, 0.0, 0.0], [0.3, 0.0, 0.0]])
    with pytest.raises(NonbondedMethodError, match="needs a periodic box"):
        Nonbonded(charges, sigma, epsilon, method="pme")(positions, None)
    with pytest.raises(ValueError, match="method must be one of"):
        Nonbonded(charges, sigma, epsilon, method="pppm")
    with pytest.raises(ValueError, match="switch_distance"):
        Nonbonded(charges, sigma, epsilon, method="cutoff", cutoff=1.0, switch_distance=1.2)
    with pytest.raises(ValueError, match="sigma must be a"):
        Nonbonded(charges, sigma[:1], epsilon)
    with pytest.raises(ValueError, match="exception_charge_products is required"):
        Nonbonded(charges, sigma, epsilon, exceptions=torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match="outside"):
        Nonbonded(charges, sigma, epsilon, exclusions=torch.tensor([[0, 2]]))
    with pytest.raises(ValueError, match="positions must be a"):
        Nonbonded(charges, sigma, epsilon, method="nocutoff")(positions[:1], None)


# --- compiled kernels (mindsponge._kernels) against the pure torch path and OpenMM ------------------


@pytest.fixture(scope="module")
def kernels(require_compiled):
    """The compiled kernels (see tests/conftest.py)."""
    return require_compiled(_kernels.nonbonded)


@pytest.fixture(scope="module")
def large_water():
    """A 2.9 nm TIP3P box (~2,400 atoms): large enough for the cell search (not all pairs)."""
    forcefield = app.ForceField("amber14-all.xml", "amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(2.9, 2.9, 2.9) * unit.nanometer)
    force, reference = openmm_case(forcefield, modeller.topology, modeller.positions, "pme", cutoff=0.9)
    return force, reference


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_compiled_equals_pure_torch_and_openmm(kernels, large_water, dtype):
    force, reference = large_water
    models = {compiled: ours_from(force, "pme", dtype=dtype, pme_parameters=reference["pme"],
                                  compiled=compiled) for compiled in (True, False)}
    results = {compiled: evaluate(model, reference, dtype) for compiled, model in models.items()}
    assert len(models[True].neighbors.pairs) > 300_000  # the cell search, not all pairs
    (terms_c, energy_c, forces_c), (terms_t, energy_t, forces_t) = results[True], results[False]
    magnitude = sum(abs(term.item()) for term in terms_t.values())
    if dtype == torch.float64:
        for name in terms_t:  # tabulated erfc (compiled) vs torch.special.erfc: same to ~1e-12
            assert terms_c[name].item() == pytest.approx(terms_t[name].item(), rel=1e-10, abs=1e-9)
        assert force_error(forces_c, forces_t) < 1e-10
        assert abs(energy_c - reference["energy"]) <= 1e-6 * abs(reference["energy"])
        assert force_error(forces_c, reference["forces"]) < 1e-5
    else:
        assert abs(energy_c - energy_t) <= 1e-6 * magnitude
        assert force_error(forces_c, forces_t) < 1e-5
        assert abs(energy_c - reference["energy"]) <= 1e-6 * magnitude
        assert force_error(forces_c, reference["forces"]) < 1e-3


@pytest.mark.parametrize("component", ["lennard_jones", "coulomb_direct"])
def test_compiled_component_forces_equal_pure_torch(kernels, large_water, component):
    """The compiled direct sum scatters the gradient of E_LJ + E_Coulomb; the gradient of one named
    component alone (LJ, or Coulomb weighted twice against LJ) still equals the pure torch one."""
    force, reference = large_water
    gradients = {}
    for compiled in (True, False):
        model = ours_from(force, "pme", pme_parameters=reference["pme"], compiled=compiled)
        positions = torch.tensor(reference["positions"], requires_grad=True)
        terms = model.energy_terms(positions, torch.tensor(reference["box"]))
        energy = terms[component]
        if component == "coulomb_direct":
            energy = 2 * energy + terms["lennard_jones"]
        (gradients[compiled],) = torch.autograd.grad(energy, positions)
    assert force_error(gradients[True].numpy(), gradients[False].numpy()) < 1e-10


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_compiled_pme_equals_pure_torch(kernels, dtype):
    """Spreading and gathering of the compiled PME against the torch ones, triclinic box."""
    box = space.box_from_lengths_and_angles(3.1, 3.3, 3.0, 75.0, 95.0, 80.0, dtype=torch.float64)
    generator = torch.Generator().manual_seed(5)
    positions = (torch.rand(600, 3, dtype=torch.float64, generator=generator) * 1.4 - 0.2) @ box
    charges = torch.randn(600, dtype=torch.float64, generator=generator)
    charges -= charges.mean()
    results = {}
    for compiled in (True, False):
        pme = PMEReciprocal(3.0, (24, 25, 27), order=5, compiled=compiled)
        results[compiled] = pme(positions.to(dtype), charges.to(dtype), box.to(dtype), True)
    (energy_c, forces_c), (energy_t, forces_t) = results[True], results[False]
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    assert energy_c.item() == pytest.approx(energy_t.item(), rel=tolerance)
    assert force_error(forces_c.double().numpy(), forces_t.double().numpy()) < tolerance


def test_disabled_extensions_fall_back_to_torch(water_model, monkeypatch):
    """With MINDSCIENCE_NO_EXTENSIONS=1 the same model gives the same result from pure torch."""
    model, reference = water_model
    positions = torch.tensor(reference["positions"])
    box = torch.tensor(reference["box"])
    expected = forces(model, positions, box)
    monkeypatch.setenv("MINDSCIENCE_NO_EXTENSIONS", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _kernels.nonbonded() is None
        fallback = forces(model, positions, box)
    assert force_error(fallback.numpy(), expected.numpy()) < 1e-10


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_float64_parameters_with_float32_positions(water_model, compiled):
    """Parameters keep their dtype; the evaluation follows the positions' dtype (mixed precision)."""
    model, reference = water_model
    model.compiled = compiled
    try:
        positions = torch.tensor(reference["positions"], dtype=torch.float32)
        box = torch.tensor(reference["box"], dtype=torch.float32)
        terms = model.energy_terms(positions.requires_grad_(True), box)
        (gradient,) = torch.autograd.grad(sum(terms.values()), positions)
    finally:
        model.compiled = True
    assert gradient.dtype == torch.float32
    magnitude = sum(abs(term.item()) for term in terms.values())
    assert abs(sum(terms.values()).item() - reference["energy"]) <= 1e-6 * magnitude
    assert force_error(-gradient.double().numpy(), reference["forces"]) < 1e-3


@pytest.mark.parametrize("method, switch", [("pme", 0.6), ("reaction_field", None)])
def test_compiled_equals_pure_torch_triclinic(kernels, method, switch):
    """A triclinic box large enough for the cell search: both paths give the same energies and forces."""
    box = space.box_from_lengths_and_angles(4.2, 4.4, 4.6, 70.0, 80.0, 100.0, dtype=torch.float64)
    generator = torch.Generator().manual_seed(7)
    grid = torch.stack(torch.meshgrid(*(torch.arange(11.0, dtype=torch.float64),) * 3, indexing="ij"), -1)
    jitter = 0.3 * torch.rand(1331, 3, dtype=torch.float64, generator=generator)
    fractional = (grid.reshape(-1, 3) + jitter) / 11
    positions = (fractional - 0.2) @ box  # some atoms outside the box
    charges = torch.randn(1331, dtype=torch.float64, generator=generator) * 0.3
    sigma = torch.full((1331,), 0.25, dtype=torch.float64)
    epsilon = torch.where(torch.arange(1331) % 3 == 0, 0.5, 0.0).to(torch.float64)
    bonded = torch.stack([torch.arange(0, 1330, 2), torch.arange(1, 1331, 2)], 1)
    results = {}
    for compiled in (True, False):
        model = Nonbonded(charges, sigma, epsilon, method=method, cutoff=0.8, switch_distance=switch,
                          exclusions=bonded, compiled=compiled)
        x = positions.clone().requires_grad_(True)
        terms = model.energy_terms(x, box)
        (gradient,) = torch.autograd.grad(sum(terms.values()), x)
        results[compiled] = terms, gradient
        assert len(model.neighbors.pairs) > 20_000
    (terms_c, gradient_c), (terms_t, gradient_t) = results[True], results[False]
    for name in terms_t:
        assert terms_c[name].item() == pytest.approx(terms_t[name].item(), rel=1e-10, abs=1e-9)
    assert force_error(gradient_c.numpy(), gradient_t.numpy()) < 1e-10


@pytest.mark.parametrize("method", ["pme", "reaction_field", "cutoff"])
@pytest.mark.parametrize("lengths, angles, cutoff", [((2.4, 2.5, 2.6), (80.0, 100.0, 70.0), 0.8),
                                                     ((2.6, 2.6, 2.6), (109.47, 109.47, 109.47), 1.0)],
                         ids=["skewed-triclinic", "truncated-octahedron"])
def test_cluster_kernel_in_small_boxes_with_a_long_skin_and_wrapped_atoms(kernels, method, lengths, angles,
                                                                           cutoff):
    """The compiled cluster kernel against the pure torch path in small skewed boxes, with a skin so long
    that several images of a partner are listed (only one can be within the cutoff), at the build and
    after atoms moved a little and some were wrapped by lattice vectors (the list is kept)."""
    box = space.reduce_box(space.box_from_lengths_and_angles(*lengths, *angles, dtype=torch.float64))
    generator = torch.Generator().manual_seed(11)
    grid = torch.stack(torch.meshgrid(*(torch.arange(7.0, dtype=torch.float64),) * 3, indexing="ij"), -1)
    jitter = 0.25 * torch.rand(343, 3, dtype=torch.float64, generator=generator)
    fractional = (grid.reshape(-1, 3) + jitter) / 7
    positions = fractional @ box
    charges = torch.randn(343, dtype=torch.float64, generator=generator) * 0.3
    sigma = torch.full((343,), 0.2, dtype=torch.float64)
    epsilon = torch.where(torch.arange(343) % 3 == 0, 0.5, 0.0).to(torch.float64)
    bonded = torch.stack([torch.arange(0, 342, 2), torch.arange(1, 343, 2)], 1)
    models = {compiled: Nonbonded(charges, sigma, epsilon, method=method, cutoff=cutoff, skin=0.4,
                                  exclusions=bonded, compiled=compiled) for compiled in (True, False)}
    assert models[True].neighbors.list_cutoff > space.max_cutoff(box)
    wrapped = torch.randint(-1, 2, (343, 3), generator=generator).to(torch.float64) @ box
    moved = positions + 0.03 * (torch.rand(343, 3, dtype=torch.float64, generator=generator) - 0.5) + wrapped
    for x in (positions, moved):
        results = {}
        for compiled, model in models.items():
            x = x.clone().requires_grad_(True)
            terms = model.energy_terms(x, box)
            (gradient,) = torch.autograd.grad(sum(terms.values()), x)
            results[compiled] = terms, gradient
        assert models[True].neighbors.n_builds == 1
        (terms_c, gradient_c), (terms_t, gradient_t) = results[True], results[False]
        for name in terms_t:
            assert terms_c[name].item() == pytest.approx(terms_t[name].item(), rel=1e-10, abs=1e-9)
        assert force_error(gradient_c.numpy(), gradient_t.numpy()) < 1e-10


# --- a small rhombic dodecahedron: the cell search through several periodic images -------------------


CPU_PLATFORM = openmm.Platform.getPlatformByName("CPU")


@pytest.fixture(scope="module")
def dodecahedron_water():
    """TIP3P (1,860 atoms) in a 3 nm rhombic dodecahedron (OpenMM's reduced box vectors). A 1.0 nm cutoff
    is within 6% of the largest this box allows (c_z / 2 = 1.06 nm); with the 0.1 nm skin the list cutoff is
    beyond it, and the cell search reaches some cells through several periodic images."""
    length = 3.0
    vectors = [openmm.Vec3(length, 0, 0), openmm.Vec3(0, length, 0),
               openmm.Vec3(length / 2, length / 2, length * math.sqrt(0.5))] * unit.nanometer
    forcefield = app.ForceField("amber14-all.xml", "amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxVectors=vectors)
    return forcefield, modeller.topology, modeller.positions


@pytest.mark.slow
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
@pytest.mark.parametrize("method", ["pme", "reaction_field"])
def test_small_dodecahedron_matches_openmm_cpu(dodecahedron_water, method, compiled):
    """Energies and forces against OpenMM's CPU platform (its Reference platform disagrees with itself in
    small triclinic boxes), at the start, after every atom moved (the list is kept) and after the box grew."""
    force, reference = openmm_case(*dodecahedron_water, method, cutoff=1.0, platform=CPU_PLATFORM)
    model = ours_from(force, method, pme_parameters=reference.get("pme"), compiled=compiled)
    assert model.neighbors.list_cutoff > space.max_cutoff(torch.tensor(reference["box"]))
    generator = np.random.default_rng(3)
    moved = reference["positions"] + generator.uniform(-0.028, 0.028, reference["positions"].shape)
    grown = reference["box"] * 1.01
    for positions, box, builds in ((reference["positions"], reference["box"], 1),
                                   (moved, reference["box"], 1), (moved * 1.01, grown, 2)):
        context = reference["context"]
        context.setPeriodicBoxVectors(*box)
        context.setPositions(positions)
        state = context.getState(getEnergy=True, getForces=True)
        expected_energy = state.getPotentialEnergy().value_in_unit(KJ)
        expected_forces = np.asarray(state.getForces().value_in_unit(KJ / unit.nanometer))
        terms, energy, ours = evaluate(model, {"positions": positions, "box": box})
        assert model.neighbors.n_builds == builds
        magnitude = sum(abs(term.item()) for term in terms.values())
        assert abs(energy - expected_energy) <= 2e-6 * magnitude  # OpenMM CPU: single precision
        assert force_error(ours, expected_forces) < 2e-5


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_pair_listed_beyond_max_cutoff_counts_once_it_comes_within_the_cutoff(compiled):
    """Two atoms 1.085 nm apart along the height of a 3 nm dodecahedron (max_cutoff 1.061 nm, list
    cutoff 1.1 nm; OpenMM's reduced minimum image of that displacement is a 2.2 nm translate). Each
    moves 0.045 nm towards the other (less than half the skin: no rebuild): at 0.995 nm the pair
    interacts, with the reaction-field and Lennard-Jones energy of that distance."""
    box = torch.tensor([[3.0, 0, 0], [0, 3.0, 0], [1.5, 1.5, 3.0 * math.sqrt(0.5)]], dtype=torch.float64)
    start = torch.tensor([[0.5, 0.5, 0.5], [0.6, 0.6, 1.575]], dtype=torch.float64)
    assert space.minimum_image(start[1] - start[0], box).norm() > 2.0
    charges = torch.tensor([0.5, -0.5], dtype=torch.float64)
    sigma = torch.full((2,), 0.3, dtype=torch.float64)
    epsilon = torch.full((2,), 0.5, dtype=torch.float64)
    model = Nonbonded(charges, sigma, epsilon, method="reaction_field", cutoff=1.0, skin=0.1,
                      dispersion_correction=False, compiled=compiled)
    assert model(start, box).item() == 0.0  # beyond the cutoff
    moved = start + torch.tensor([[0.0, 0.0, 0.045], [0.0, 0.0, -0.045]], dtype=torch.float64)
    energy = model(moved, box).item()
    assert model.neighbors.n_builds == 1
    r = float((moved[1] - moved[0]).norm())
    assert 0.99 < r < 1.0
    coulomb = 138.935458 * charges[0].item() * charges[1].item() * (1 / r + model.krf * r**2 - model.crf)
    lennard_jones = 4 * 0.5 * ((0.3 / r) ** 12 - (0.3 / r) ** 6)
    assert coulomb + lennard_jones < -1e-3  # small near the cutoff, but not zero as for a missed pair
    assert energy == pytest.approx(coulomb + lennard_jones, rel=1e-6)
