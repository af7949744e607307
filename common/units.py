"""Physical constants (SI, CODATA 2018) and the molecular-dynamics unit system.

The MD unit system is that of OpenMM and MindSPONGE: length in nm, time in ps,
mass in amu (g/mol), energy in kJ/mol, charge in elementary charges, temperature
in K and pressure in bar. Constants below are given in SI unless their name says
``_MD`` (MD units). Conversion factors are plain floats: multiply a value in the
first unit by the factor to get the second (``x_nm = x_angstrom * ANGSTROM_TO_NM``).

Example:
    >>> from common import units
    >>> thermal_energy = units.BOLTZMANN_MD * 300.0   # kJ/mol
"""

# --- SI constants (exact where the SI defines them) ---
SPEED_OF_LIGHT = 299_792_458.0  # m/s
VACUUM_PERMEABILITY = 1.25663706212e-6  # H/m
VACUUM_PERMITTIVITY = 8.8541878128e-12  # F/m
VACUUM_IMPEDANCE = VACUUM_PERMEABILITY * SPEED_OF_LIGHT  # ohm
PLANCK = 6.62607015e-34  # J s
ELEMENTARY_CHARGE = 1.602176634e-19  # C
BOLTZMANN = 1.380649e-23  # J/K
AVOGADRO = 6.02214076e23  # 1/mol
GAS_CONSTANT = BOLTZMANN * AVOGADRO  # J/(mol K)
ATOMIC_MASS_UNIT = 1.66053906660e-27  # kg
BOHR = 0.529177210903e-10  # m
HARTREE = 4.3597447222071e-18  # J

# --- MD unit system: nm, ps, amu, kJ/mol, e, K, bar ---
BOLTZMANN_MD = GAS_CONSTANT / 1000.0  # kJ/(mol K) = 0.00831446...
# Coulomb constant 1/(4 pi eps0) in kJ/mol nm / e^2; the value OpenMM uses (ONE_4PI_EPS0).
COULOMB_MD = 138.935456
# 1 bar nm^3 expressed in kJ/mol: bar * nm^3 -> J (1e5 * 1e-27) -> kJ/mol.
BAR_NM3_TO_KJ_PER_MOL = 1e5 * 1e-27 * AVOGADRO / 1000.0  # 0.0602214...
KJ_PER_MOL_NM3_TO_BAR = 1.0 / BAR_NM3_TO_KJ_PER_MOL  # 16.6054...
AMU_PER_NM3_TO_G_PER_CM3 = 1.0 / AVOGADRO * 1e21  # 1.66054 g/cm^3 per amu/nm^3

# --- conversions ---
ANGSTROM_TO_NM = 0.1
NM_TO_ANGSTROM = 10.0
BOHR_TO_NM = BOHR * 1e9
KCAL_TO_KJ = 4.184
EV_TO_KJ_PER_MOL = ELEMENTARY_CHARGE * AVOGADRO / 1000.0  # 96.485...
HARTREE_TO_KJ_PER_MOL = HARTREE * AVOGADRO / 1000.0  # 2625.4996...
FS_TO_PS = 1e-3
