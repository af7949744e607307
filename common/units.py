"""Physical constants (SI, CODATA 2022 as ``scipy.constants``) and the molecular-dynamics unit system.

The MD unit system is that of OpenMM and MindSPONGE: length in nm, time in ps,
mass in amu (g/mol), energy in kJ/mol, charge in elementary charges, temperature
in K and pressure in bar. It is consistent without factors for kinetic energy:
1 amu nm^2/ps^2 = 1 kJ/mol, so ``0.5 * masses * velocities**2`` is in kJ/mol and
``forces / masses`` (kJ/mol/nm / amu) is an acceleration in nm/ps^2.

Constants below are in SI unless their name says ``_MD`` (MD units). Conversion
factors are plain floats: multiply a value in the first unit by the factor to get
the second (``x_nm = x_angstrom * ANGSTROM_TO_NM``).

Example:
    >>> from common import units
    >>> thermal_energy = units.BOLTZMANN_MD * 300.0   # kJ/mol
    >>> round(thermal_energy, 4)
    2.4943
"""

import math

# --- SI constants: exact where the SI (2019) defines them, otherwise CODATA 2022 ---
SPEED_OF_LIGHT = 299_792_458.0  # m/s (exact)
PLANCK = 6.62607015e-34  # J s (exact)
HBAR = PLANCK / (2.0 * math.pi)  # J s
ELEMENTARY_CHARGE = 1.602176634e-19  # C (exact)
BOLTZMANN = 1.380649e-23  # J/K (exact)
AVOGADRO = 6.02214076e23  # 1/mol (exact)
GAS_CONSTANT = BOLTZMANN * AVOGADRO  # J/(mol K) (exact)
VACUUM_PERMEABILITY = 1.25663706127e-6  # H/m (mu_0, measured since 2019)
VACUUM_PERMITTIVITY = 8.8541878188e-12  # F/m (epsilon_0 = 1 / (mu_0 c^2))
VACUUM_IMPEDANCE = VACUUM_PERMEABILITY * SPEED_OF_LIGHT  # ohm (Z_0 = mu_0 c)
ATOMIC_MASS_UNIT = 1.66053906892e-27  # kg (atomic mass constant m_u)
ELECTRON_MASS = 9.1093837139e-31  # kg
BOHR = 5.29177210544e-11  # m
HARTREE = 4.3597447222060e-18  # J

# --- MD unit system: nm, ps, amu, kJ/mol, e, K, bar ---
BOLTZMANN_MD = GAS_CONSTANT / 1000.0  # kJ/(mol K) = 0.00831446...
# Coulomb constant 1/(4 pi eps0) in kJ/mol nm / e^2: the value of OpenMM 8 (ONE_4PI_EPS0, from
# CODATA 2018), so that energies agree with OpenMM to the last digit. CODATA 2022 gives
# 138.9354575502, 7e-10 relative lower.
COULOMB_MD = 138.93545764438198
# 1 bar nm^3 expressed in kJ/mol: bar * nm^3 -> J (1e5 * 1e-27) -> kJ/mol.
BAR_NM3_TO_KJ_PER_MOL = 1e5 * 1e-27 * AVOGADRO / 1000.0  # 0.0602214...
KJ_PER_MOL_NM3_TO_BAR = 1.0 / BAR_NM3_TO_KJ_PER_MOL  # 16.6054...
# density: amu (g/mol) per nm^3 -> g/cm^3 (1 nm^3 = 1e-21 cm^3)
AMU_PER_NM3_TO_G_PER_CM3 = 1.0 / AVOGADRO * 1e21  # 1.66054e-3

# --- conversions ---
ANGSTROM_TO_NM = 0.1
NM_TO_ANGSTROM = 10.0
BOHR_TO_NM = BOHR * 1e9
FS_TO_PS = 1e-3
ATM_TO_BAR = 1.01325  # exact
KCAL_TO_KJ = 4.184  # thermochemical calorie, exact (also kcal/mol -> kJ/mol)
EV_TO_KJ_PER_MOL = ELEMENTARY_CHARGE * AVOGADRO / 1000.0  # 96.485...
HARTREE_TO_KJ_PER_MOL = HARTREE * AVOGADRO / 1000.0  # 2625.4996...
# forces: Hartree/Bohr (xtb, most quantum codes) and eV/Angstrom (ASE) -> kJ/mol/nm
HARTREE_PER_BOHR_TO_KJ_PER_MOL_NM = HARTREE_TO_KJ_PER_MOL / BOHR_TO_NM  # 49614.75...
EV_PER_ANGSTROM_TO_KJ_PER_MOL_NM = EV_TO_KJ_PER_MOL / ANGSTROM_TO_NM  # 964.85...
# dipole moment: e nm -> debye (1 D = 1e-21 / c C m)
E_NM_TO_DEBYE = ELEMENTARY_CHARGE * 1e-9 * SPEED_OF_LIGHT * 1e21  # 48.0320...
