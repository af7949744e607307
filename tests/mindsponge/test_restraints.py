"""Binding restraints (mindsponge.restraints) against openmmtools, OpenMM and closed forms.

- centroid restraints (harmonic, flat-bottom) on CB7-B2 (openmmtools' ``HostGuestVacuum``, a box added):
  energies and forces of mindsponge's import equal OpenMM's evaluation of openmmtools' own
  ``HarmonicRestraintForce`` / ``FlatBottomRestraintForce`` on the same System, and the standard-state
  correction equals openmmtools' ``compute_standard_state_correction``;
- Boresch: the energy equals OpenMM's ``CustomCompoundBondForce`` and an independent numpy evaluation
  of the six coordinates; eq. 32 of Boresch et al. 2003 against the Boltzmann factor integrated by scipy.
"""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import pytest
import torch

openmm = pytest.importorskip("openmm")
pytest.importorskip("openmmtools")
from openmm import unit  # noqa: E402

import mindsponge as ms  # noqa: E402
from common.errors import ConfigurationError  # noqa: E402
from common.units import BOLTZMANN_MD  # noqa: E402
from mindsponge import restraints  # noqa: E402

with contextlib.redirect_stdout(io.StringIO()):
    from openmmtools import forces as mmforces
    from openmmtools import states as mmstates
    from openmmtools import testsystems

TEMPERATURE = 300.0
BOX = 3.2  # nm
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def host_guest():
    """CB7 (atoms 0-125) and B2 (126-155) in vacuum: ``(masses, positions (N, 3) nm, receptor, ligand)``."""
    case = testsystems.HostGuestVacuum()
    system = case.system
    masses = [system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.getNumParticles())]
    positions = np.asarray(case.positions.value_in_unit(unit.nanometer))
    return masses, positions, list(range(126)), list(range(126, 156))


def _bare_system(masses, periodic: bool):
    system = openmm.System()
    for mass in masses:
        system.addParticle(mass)
    if periodic:
        system.setDefaultPeriodicBoxVectors(*(openmm.Vec3(*row) for row in BOX * np.eye(3)))
    return system


def _openmm_energy_forces(system, positions):
    platform = openmm.Platform.getPlatformByName("Reference")
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform)
    context.setPositions(positions)
    state = context.getState(getEnergy=True, getForces=True)
    return (state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole),
            state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer))


def _ours(system, positions, periodic):
    force_field = ms.interop.openmm.from_openmm(system)
    box = torch.tensor(BOX * np.eye(3)) if periodic else None
    energy, forces = ms.energy_and_forces(force_field, torch.tensor(positions), box)
    return float(energy), forces.numpy()


def _openmmtools_force(kind, receptor, ligand):
    if kind == "harmonic":
        return mmforces.HarmonicRestraintForce(250.0 * unit.kilojoule_per_mole / unit.nanometer**2, receptor,
                                               ligand)
    return mmforces.FlatBottomRestraintForce(250.0 * unit.kilojoule_per_mole / unit.nanometer**2,
                                             0.3 * unit.nanometer, receptor, ligand)


@pytest.mark.parametrize("periodic", [False, True], ids=["vacuum", "periodic"])
@pytest.mark.parametrize("kind", ["harmonic", "flat-bottom"])
def test_centroid_restraint_matches_openmmtools(host_guest, kind, periodic):
    masses, positions, receptor, ligand = host_guest
    displaced = positions.copy()
    displaced[ligand] += np.array([0.35, -0.2, 0.25])  # out of the flat bottom's well
    if periodic:
        displaced[ligand] += np.array([BOX, 0.0, -BOX])  # another image: the minimum image must be used
    reference = _bare_system(masses, periodic)
    force = _openmmtools_force(kind, receptor, ligand)
    force.setUsesPeriodicBoundaryConditions(periodic)
    reference.addForce(force)
    expected_energy, expected_forces = _openmm_energy_forces(reference, displaced)
    ours = _bare_system(masses, periodic)
    restraint = restraints.CentroidRestraint(kind, receptor, ligand, 250.0,
                                             0.3 if kind == "flat-bottom" else 0.0)
    restraints.add_restraint(ours, restraint, periodic=periodic)
    energy, forces = _ours(ours, displaced, periodic)
    print(f"{kind} ({'periodic' if periodic else 'vacuum'}): OpenMM/openmmtools {expected_energy:.6f} "
          f"kJ/mol, mindsponge {energy:.6f}")
    assert expected_energy > 1.0
    assert abs(energy - expected_energy) < TOLERANCE * abs(expected_energy)
    assert np.abs(forces - expected_forces).max() < TOLERANCE * np.abs(expected_forces).max()


@pytest.mark.parametrize("spring_constant, well_radius, box", [
    (250.0, 0.0, BOX), (250.0, 0.5, BOX), (4184.0, 0.1, BOX), (2.0, 0.0, 2.0), (5.0, 1.0, 2.0)],
    ids=["harmonic", "flat-bottom", "stiff-flat-bottom", "harmonic-box-bound", "flat-bottom-box-bound"])
def test_standard_state_correction_matches_openmmtools(host_guest, spring_constant, well_radius, box):
    masses, _, receptor, ligand = host_guest
    kind = "flat-bottom" if well_radius else "harmonic"
    system = _bare_system(masses, periodic=True)
    system.setDefaultPeriodicBoxVectors(*(openmm.Vec3(*row) for row in box * np.eye(3)))
    constant = spring_constant * unit.kilojoule_per_mole / unit.nanometer**2
    if kind == "harmonic":
        force = mmforces.HarmonicRestraintForce(constant, receptor, ligand)
    else:
        force = mmforces.FlatBottomRestraintForce(constant, well_radius * unit.nanometer, receptor, ligand)
    force.setUsesPeriodicBoundaryConditions(True)  # a periodic System: openmmtools bounds V_r by the box
    system.addForce(force)
    state = mmstates.ThermodynamicState(system, TEMPERATURE * unit.kelvin)
    expected = force.compute_standard_state_correction(state)
    restraint = restraints.CentroidRestraint(kind, receptor, ligand, spring_constant, well_radius)
    ours = restraint.standard_state_correction(TEMPERATURE, max_volume=box**3)
    print(f"{kind} K={spring_constant} r0={well_radius} box={box}: openmmtools {expected:.8f} kT, "
          f"ours {ours:.8f}")
    assert ours == pytest.approx(expected, rel=1e-7, abs=1e-9)


def _boresch(host_guest, **constants):
    masses, positions, receptor, ligand = host_guest
    return restraints.select_boresch(positions, receptor, ligand, masses, **constants)


def _numpy_boresch_energy(restraint, positions):
    """The Boresch energy from the six coordinates (an evaluation independent of OpenMM's expression)."""
    geometry = restraints.boresch_geometry(positions, restraint.receptor_atoms, restraint.ligand_atoms)
    energy = 0.5 * restraint.k_r * (geometry["r0"] - restraint.r0) ** 2
    for name in ("theta_a", "theta_b"):
        difference = geometry[f"{name}0"] - getattr(restraint, f"{name}0")
        energy += 0.5 * getattr(restraint, f"k_{name}") * difference**2
    for name in ("phi_a", "phi_b", "phi_c"):
        difference = geometry[f"{name}0"] - getattr(restraint, f"{name}0")
        difference = (difference + math.pi) % (2 * math.pi) - math.pi
        energy += 0.5 * getattr(restraint, f"k_{name}") * difference**2
    return energy


@pytest.mark.parametrize("periodic", [False, True], ids=["vacuum", "periodic"])
def test_boresch_energy_matches_openmm_and_its_coordinates(host_guest, periodic):
    masses, positions, receptor, ligand = host_guest
    restraint = _boresch(host_guest)
    geometry = restraints.boresch_geometry(positions, restraint.receptor_atoms, restraint.ligand_atoms)
    # the anchors are not collinear, and the restraint sits at the starting structure's geometry
    assert min(math.sin(restraint.theta_a0), math.sin(restraint.theta_b0)) > 0.5
    assert restraint.r0 == pytest.approx(geometry["r0"])
    system = _bare_system(masses, periodic)
    system.addForce(restraint.openmm_force(masses, periodic=periodic))
    assert abs(_openmm_energy_forces(system, positions)[0]) < 1e-9  # OpenMM agrees it is at its minimum
    generator = np.random.default_rng(3)
    for trial in range(4):
        moved = positions.copy()
        rotation, _ = np.linalg.qr(np.eye(3) + 0.3 * generator.normal(size=(3, 3)))
        centre = moved[ligand].mean(0)
        moved[ligand] = (moved[ligand] - centre) @ rotation.T + centre + generator.normal(scale=0.1, size=3)
        if periodic and trial % 2:
            moved[ligand] -= BOX  # another image
        system = _bare_system(masses, periodic)
        system.addForce(restraint.openmm_force(masses, periodic=periodic))
        expected_energy, expected_forces = _openmm_energy_forces(system, moved)
        energy, forces = _ours(system, moved, periodic)
        independent = _numpy_boresch_energy(restraint, moved if not (periodic and trial % 2) else
                                            np.vstack([moved[:126], moved[126:] + BOX]))
        print(f"trial {trial}: OpenMM {expected_energy:.6f} kJ/mol, mindsponge {energy:.6f}, "
              f"numpy {independent:.6f}")
        assert expected_energy > 1.0
        assert abs(energy - expected_energy) < TOLERANCE * expected_energy
        assert abs(independent - expected_energy) < TOLERANCE * expected_energy
        assert np.abs(forces - expected_forces).max() < TOLERANCE * np.abs(expected_forces).max()


def _integrated_correction(restraint, temperature):
    """``-ln(8 pi^2 V0 / Z)`` with ``Z`` the restraint's Boltzmann factor integrated over the ligand's
    position (``r^2 sin(thetaA) dr dthetaA dphiA``) and orientation (``sin(thetaB) dthetaB dphiB dphiC``)
    by scipy: the integral is a product of one-dimensional ones."""
    from scipy import integrate

    kT = BOLTZMANN_MD * temperature  # noqa: N806

    def quad(function, lower, upper, centre):
        return integrate.quad(function, lower, upper, points=[centre], epsabs=0.0, epsrel=1e-12, limit=400)[0]

    partition = quad(lambda r: r**2 * math.exp(-0.5 * restraint.k_r * (r - restraint.r0) ** 2 / kT),
                     0.0, restraint.r0 + 3.0, restraint.r0)
    for name in ("theta_a", "theta_b"):
        k, centre = getattr(restraint, f"k_{name}"), getattr(restraint, f"{name}0")

        def angular(theta, k=k, centre=centre):
            return math.sin(theta) * math.exp(-0.5 * k * (theta - centre) ** 2 / kT)

        partition *= quad(angular, 0.0, math.pi, centre)
    for name in ("phi_a", "phi_b", "phi_c"):
        k = getattr(restraint, f"k_{name}")
        partition *= quad(lambda phi, k=k: math.exp(-0.5 * k * phi**2 / kT), -math.pi, math.pi, 0.0)
    return -math.log(8.0 * math.pi**2 * restraints.STANDARD_STATE_VOLUME / partition)


@pytest.mark.parametrize("scale", [1.0, 10.0, 100.0])
def test_boresch_correction_against_numerical_integration(host_guest, scale):
    """Eq. 32 is the stiff limit: with ``U = K/2 x^2`` the exact one-dimensional integrals differ from
    its Gaussian ones by ``1 + kT/(K_r r0^2)`` (the ``r^2`` factor: ``<r^2> = r0^2 + kT/K_r``) and by about
    ``exp(-kT/(2 K_theta))`` for each angle (``<sin theta> = sin(theta0) exp(-kT/(2 K))``, Gaussian average);
    the dihedral integrals are Gaussian up to tails beyond +-pi. So the tolerance is
    ``kT/(K_r r0^2) + kT/(2 K_thetaA) + kT/(2 K_thetaB)`` (kT), and it shrinks with the stiffness."""
    constants = {"k_r": 4184.0 * scale, **{f"k_{name}": 41.84 * scale for name in
                                           ("theta_a", "theta_b", "phi_a", "phi_b", "phi_c")}}
    restraint = _boresch(host_guest, **constants)
    kT = BOLTZMANN_MD * TEMPERATURE  # noqa: N806
    analytic = restraint.standard_state_correction(TEMPERATURE)
    numerical = _integrated_correction(restraint, TEMPERATURE)
    tolerance = (kT / (restraint.k_r * restraint.r0**2) + kT / (2 * restraint.k_theta_a)
                 + kT / (2 * restraint.k_theta_b))
    print(f"stiffness x{scale:g}: eq. 32 {analytic:.5f} kT, integrated {numerical:.5f} kT, difference "
          f"{analytic - numerical:+.2e} (tolerance {tolerance:.2e})")
    assert abs(analytic - numerical) < tolerance


def test_select_centroid_atoms_is_near_the_ligand(host_guest):
    masses, positions, receptor, ligand = host_guest
    chosen = restraints.select_centroid_atoms(positions, receptor, ligand, masses, radius=0.5)
    centroid = np.average(positions[ligand], axis=0, weights=np.asarray(masses)[ligand])
    distances = np.linalg.norm(positions[chosen] - centroid, axis=1)
    assert len(chosen) >= 3 and set(chosen) <= set(receptor)
    assert (distances <= 0.5).all() and all(masses[atom] > 4.0 for atom in chosen)
    far = restraints.select_centroid_atoms(positions, receptor, ligand, masses, radius=0.01)
    assert len(far) == 3


def test_refusals(host_guest):
    masses, _, receptor, ligand = host_guest
    with pytest.raises(ConfigurationError, match="kind"):
        restraints.CentroidRestraint("soft", receptor, ligand)
    with pytest.raises(ConfigurationError, match="well_radius"):
        restraints.CentroidRestraint("harmonic", receptor, ligand, 100.0, 0.5)
    with pytest.raises(ConfigurationError, match="well_radius"):
        restraints.CentroidRestraint("flat-bottom", receptor, ligand, 100.0)
    with pytest.raises(ConfigurationError, match="ligand_atoms must be 3"):
        restraints.BoreschRestraint((0, 1, 2), (3, 4), 0.5, 1.0, 1.0, 0.0, 0.0, 0.0)
    with pytest.raises(ConfigurationError, match="theta_a0"):
        restraints.BoreschRestraint((0, 1, 2), (3, 4, 5), 0.5, math.pi, 1.0, 0.0, 0.0, 0.0)
    system = _bare_system(masses, periodic=False)
    with pytest.raises(ConfigurationError, match="outside the System"):
        restraints.add_restraint(system, restraints.CentroidRestraint("harmonic", receptor, [500]))
    with pytest.raises(ConfigurationError, match="share atoms"):
        restraints.add_restraint(system, restraints.CentroidRestraint("harmonic", receptor, [0, 130]))
