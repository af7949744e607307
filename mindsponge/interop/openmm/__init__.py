"""OpenMM interoperability: an OpenMM ``System`` becomes a :class:`~mindsponge.forcefield.ForceField`.

Any force field OpenMM can assign (Amber, CHARMM, TIP3P water, GAFF through
openmmforcefields...) reaches mindsponge through OpenMM's ``System``: :func:`from_openmm`
translates its forces term by term, :func:`load` reads a serialized ``System`` (XML) plus
a PDB, :func:`from_pdb_with_forcefield` parameterises a PDB with OpenMM force-field
files in one call, and :func:`load_amber`, :func:`load_gromacs` and :func:`load_charmm` read
systems prepared for those engines (prmtop/inpcrd, top/gro, psf/crd with parameter files)
through OpenMM's own readers.

Supported forces (anything else raises :class:`UnsupportedOpenMMForceError` naming it):

===========================  ==========================================================
OpenMM force                 mindsponge term
===========================  ==========================================================
``HarmonicBondForce``        :class:`~mindsponge.forcefield.bonded.HarmonicBond`
``HarmonicAngleForce``       :class:`~mindsponge.forcefield.bonded.HarmonicAngle`
``PeriodicTorsionForce``     :class:`~mindsponge.forcefield.bonded.PeriodicTorsion`
``CMAPTorsionForce``         :class:`~mindsponge.forcefield.bonded.CMAPTorsion`
``NonbondedForce``           :class:`~mindsponge.forcefield.nonbonded.Nonbonded` (no cutoff,
                             cutoff, reaction field, Ewald, PME; switching, dispersion correction,
                             exceptions; global parameters with particle and exception parameter
                             offsets, set with ``ForceField.set_global_parameters``)
``CustomTorsionForce``       :class:`~mindsponge.forcefield.bonded.HarmonicImproper` for the CHARMM
                             expressions ``k*(theta-theta0)^2`` and ParmEd's wrapped form (fast
                             path), :class:`~mindsponge.forcefield.custom.CustomTorsion` otherwise
``CustomBondForce``          :class:`~mindsponge.forcefield.custom.CustomBond`
``CustomAngleForce``         :class:`~mindsponge.forcefield.custom.CustomAngle`
``CustomExternalForce``      :class:`~mindsponge.forcefield.custom.CustomExternal` (position
                             restraints, ``periodicdistance``)
``CustomCompoundBondForce``  :class:`~mindsponge.forcefield.custom.CustomCompoundBond`
                             (``distance``, ``angle``, ``dihedral``, ``point*`` functions)
``CustomCentroidBondForce``  :class:`~mindsponge.forcefield.custom.CustomCentroidBond` (groups with
                             explicit weights)
``CustomNonbondedForce``     :class:`~mindsponge.forcefield.custom.CustomNonbonded` (no cutoff,
                             cutoff periodic or not; switching, long-range correction, exclusions,
                             interaction groups, computed values)
``CustomGBForce``            :class:`~mindsponge.forcefield.custom.CustomGB` (all computed-value
                             and energy-term kinds; Amber's OBC2 from ``implicit/obc2.xml``)
``GBSAOBCForce``             :class:`~mindsponge.forcefield.custom.CustomGB`: OBC2 as its
                             ``CustomGBForce`` form (:mod:`~mindsponge.interop.openmm.obc`)
``CMMotionRemover``          ``forcefield.remove_center_of_mass_motion = True``: the Simulation
                             removes the centre-of-mass motion (``False`` without one)
``MonteCarloBarostat``,      ``forcefield.barostat``, the same :mod:`mindsponge.barostats` barostat:
``MonteCarlo``               the Simulation runs at constant pressure with it unless given
``AnisotropicBarostat``      ``barostat=`` (set ``forcefield.barostat = None`` for constant volume)
===========================  ==========================================================

Every Custom*Force supports the whole Lepton expression language (``;`` definitions, all
functions), per-interaction and global parameters (their default values, changed at run time with
``ForceField.set_global_parameters``; see :class:`~mindsponge.forcefield.custom.ExpressionEnergy`)
and the tabulated functions
``Continuous1D/2D/3DFunction`` and ``Discrete1D/2D/3DFunction`` (CHARMM's NBFIX tables);
energy-parameter derivatives are ignored (they do not change the energy).

Not supported (each refusal says what to use instead where there is something): ``CustomHbondForce``,
``CustomManyParticleForce``, ``CustomCVForce``, ``NonbondedForce`` with ``LJPME`` (use PME),
``setIncludeDirectSpace(False)``;
``AndersenThermostat`` (use Langevin dynamics or a thermostat),
``MonteCarloMembraneBarostat`` and ``MonteCarloFlexibleBarostat`` (pass
``barostat=ms.barostats.MonteCarloAnisotropicBarostat(...)``); the AMOEBA, Drude, RPMD and ATM forces;
``CustomCentroidBondForce`` groups without explicit weights (OpenMM weights them by the
System's masses, which a force does not carry); virtual sites other than two/three-particle
averages and out-of-plane sites.

Term names are the mindsponge class names (``HarmonicBond``, ``PeriodicTorsion``,
``HarmonicImproper``, ``Nonbonded``...) or the force's own name when it was given one
(``force.setName``), with ``_2``, ``_3``... appended when a System holds several forces of one
kind. Each term records the index of the OpenMM force it came from in
``term.openmm_force_index``.

OpenMM is imported only when these functions run, so importing this module is cheap.

Modules: :mod:`.reading` (a force's rows in MD units, the error), :mod:`.standard` and
:mod:`.custom` (the converters per force class), :mod:`.system` (:func:`from_openmm`: the
forces, masses, constraints and virtual sites), :mod:`.files` (:func:`load`,
:func:`from_pdb_with_forcefield`), :mod:`.engine_files` (:func:`load_amber`, :func:`load_gromacs`,
:func:`load_charmm`).
"""

from mindsponge.interop.openmm.engine_files import load_amber, load_charmm, load_gromacs
from mindsponge.interop.openmm.files import from_pdb_with_forcefield, load
from mindsponge.interop.openmm.reading import SUPPORTED_FORCES, UnsupportedOpenMMForceError
from mindsponge.interop.openmm.system import from_openmm

__all__ = [
    "UnsupportedOpenMMForceError",
    "from_openmm",
    "load",
    "from_pdb_with_forcefield",
    "load_amber",
    "load_gromacs",
    "load_charmm",
    "SUPPORTED_FORCES",
]
