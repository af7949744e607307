"""Constants and conversions of common.units against scipy.constants, ASE and OpenMM."""

import math

import pytest
import scipy.constants as si

from common import units


def codata(name):
    return si.physical_constants[name][0]


@pytest.mark.parametrize(
    ("ours", "reference"),
    [
        ("SPEED_OF_LIGHT", "speed of light in vacuum"),
        ("PLANCK", "Planck constant"),
        ("HBAR", "reduced Planck constant"),
        ("ELEMENTARY_CHARGE", "elementary charge"),
        ("BOLTZMANN", "Boltzmann constant"),
        ("AVOGADRO", "Avogadro constant"),
        ("GAS_CONSTANT", "molar gas constant"),
        ("VACUUM_PERMEABILITY", "vacuum mag. permeability"),
        ("VACUUM_PERMITTIVITY", "vacuum electric permittivity"),
        ("VACUUM_IMPEDANCE", "characteristic impedance of vacuum"),
        ("ATOMIC_MASS_UNIT", "atomic mass constant"),
        ("ELECTRON_MASS", "electron mass"),
        ("BOHR", "Bohr radius"),
        ("HARTREE", "Hartree energy"),
    ],
)
def test_si_constants_match_scipy_codata(ours, reference):
    # CODATA publishes 10-12 significant digits; derived ones (hbar, Z0) are rounded there
    assert getattr(units, ours) == pytest.approx(codata(reference), rel=1e-12, abs=0)


def test_electromagnetic_constants_are_consistent():
    # eps0 mu0 c^2 = 1 holds to the precision the constants are published with
    c = units.SPEED_OF_LIGHT
    assert units.VACUUM_PERMITTIVITY * units.VACUUM_PERMEABILITY * c**2 == pytest.approx(1.0, rel=1e-10)
    assert units.VACUUM_IMPEDANCE == pytest.approx(
        math.sqrt(units.VACUUM_PERMEABILITY / units.VACUUM_PERMITTIVITY)
    )


def test_md_units_against_scipy():
    assert units.BOLTZMANN_MD == pytest.approx(si.k * si.N_A / 1e3, rel=1e-15)
    # 1 amu nm^2 / ps^2 = 1 kJ/mol: kinetic energy needs no factor in MD units
    amu_in_kg_per_mol = 1e-3  # the MD amu is the dalton as a molar mass, 1 g/mol
    assert amu_in_kg_per_mol * (1e-9 / 1e-12) ** 2 / 1e3 == pytest.approx(1.0, rel=1e-15)
    # pressure: kJ/mol/nm^3 -> bar
    assert units.KJ_PER_MOL_NM3_TO_BAR == pytest.approx(1e3 / si.N_A / 1e-27 / si.bar, rel=1e-14)
    # density: 1 amu/nm^3 in g/cm^3 (water: 33.4 molecules of 18 amu per nm^3 is 1 g/cm^3); with the atomic
    # mass constant, which differs from 1 g/mol / N_A by 1.05e-9 since the SI of 2019
    assert units.AMU_PER_NM3_TO_G_PER_CM3 == pytest.approx(si.m_u * 1e3 / 1e-21, rel=2e-9)
    # Coulomb constant of OpenMM 8 (CODATA 2018): within 1e-9 of the current CODATA value
    coulomb = si.e**2 * si.N_A / (4 * math.pi * si.epsilon_0) * 1e9 / 1e3
    assert units.COULOMB_MD == pytest.approx(coulomb, rel=1e-9)


def test_coulomb_constant_is_openmms():
    openmm = pytest.importorskip("openmm")
    system = openmm.System()
    force = openmm.NonbondedForce()
    for _ in range(2):
        system.addParticle(1.0)
        force.addParticle(1.0, 1.0, 0.0)
    force.setNonbondedMethod(openmm.NonbondedForce.NoCutoff)
    system.addForce(force)
    context = openmm.Context(
        system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    context.setPositions([openmm.Vec3(0, 0, 0), openmm.Vec3(1, 0, 0)])  # nm, two unit charges 1 nm apart
    energy = context.getState(getEnergy=True).getPotentialEnergy()._value  # kJ/mol
    assert units.COULOMB_MD == pytest.approx(energy, rel=1e-15)


def test_conversions_against_scipy_and_ase():
    ase_units = pytest.importorskip("ase.units")
    assert units.ANGSTROM_TO_NM == pytest.approx(si.angstrom / si.nano, rel=1e-15)
    assert units.NM_TO_ANGSTROM == pytest.approx(si.nano / si.angstrom, rel=1e-15)
    assert units.FS_TO_PS == pytest.approx(si.femto / si.pico)
    assert units.ATM_TO_BAR == pytest.approx(si.atm / si.bar, rel=1e-15)
    assert units.KCAL_TO_KJ == pytest.approx(si.calorie, rel=1e-15)
    assert units.BOHR_TO_NM == pytest.approx(codata("Bohr radius") / si.nano, rel=1e-14)
    assert units.EV_TO_KJ_PER_MOL == pytest.approx(si.eV * si.N_A / 1e3, rel=1e-14)
    assert units.HARTREE_TO_KJ_PER_MOL == pytest.approx(codata("Hartree energy") * si.N_A / 1e3, rel=1e-14)
    hartree_per_bohr = codata("Hartree energy") / codata("Bohr radius")  # N
    assert units.HARTREE_PER_BOHR_TO_KJ_PER_MOL_NM == pytest.approx(
        hartree_per_bohr * si.N_A / 1e3 * 1e-9, rel=1e-14
    )
    # ASE: energies in eV, lengths in Angstrom; ase.units.kJ / ase.units.mol is kJ/mol in eV (CODATA 2014)
    kj_per_mol_in_ev = ase_units.kJ / ase_units.mol
    assert units.EV_TO_KJ_PER_MOL == pytest.approx(1 / kj_per_mol_in_ev, rel=1e-7)
    assert units.EV_PER_ANGSTROM_TO_KJ_PER_MOL_NM == pytest.approx(10 / kj_per_mol_in_ev, rel=1e-7)
    assert units.HARTREE_TO_KJ_PER_MOL == pytest.approx(ase_units.Hartree / kj_per_mol_in_ev, rel=1e-7)
    # dipole: 1 e nm in debye; ase.units.Debye is the debye in e Angstrom
    assert units.E_NM_TO_DEBYE == pytest.approx(10 / ase_units.Debye, rel=1e-7)
    assert units.E_NM_TO_DEBYE == pytest.approx(si.e * si.nano / (1e-21 / si.c), rel=1e-14)
