"""Amber's OBC2 implicit solvent (OpenMM's ``GBSAOBCForce``) as a ``CustomGBForce``, which mindsponge runs.

OpenMM's own ``CustomGBForce`` form of it (``customgbforces.GBSAOBC2Force``: the same charges, radii
and screening factors) lacks one term of ``GBSAOBCForce``'s Born integral: the one for an atom
engulfed by another's scaled sphere (``sr2 - r > or1``; a clash near a sulfur, whose scaled radius is
large). It is added back here (:data:`_ENGULFED`), and its rounded constants are replaced by
``GBSAOBCForce``'s own (:func:`_exact_constants`), so the two agree to rounding, also there.
"""

from __future__ import annotations

import copy
import math

from common.errors import ConfigurationError
from common.units import COULOMB_MD

__all__ = ["custom_obc2", "obc2_as_custom_gb", "obc_term"]

# customgbforces.GBSAOBC2Force's Born integral and the same with GBSAOBCForce's term for an atom
# engulfed by the other's scaled sphere (sr2 - r > or1: 2 (1/or1 - 1/L) inside the 0.5 factor)
_BORN_INTEGRAL = "0.5*(1/L-1/U+0.25*(r-sr2^2/r)*(1/(U^2)-1/(L^2))+0.5*log(L/U)/r)"
_ENGULFED = f"{_BORN_INTEGRAL}+step(sr2-r-or1)*(1/or1-1/L)"


def _exact_constants(surface: float) -> dict[str, float]:
    """customgbforces' rounded constants -> ``GBSAOBCForce``'s: Coulomb's 1/(4 pi eps0) (OpenMM's
    ``ONE_4PI_EPS0``, :data:`common.units.COULOMB_MD`, kJ/mol nm/e^2) and the ACE term's 4 pi times the
    surface energy (kJ/mol/nm^2). The rounded ones alone left the energies 2e-7 apart."""
    return {"138.935485": COULOMB_MD, "28.3919551": 4 * math.pi * surface}


def obc2_as_custom_gb(openmm_system):
    """The System with its ``GBSAOBCForce`` (Amber's OBC2) replaced by its :func:`custom_obc2` form, at the
    same index; others unchanged (for a System that must hold only forces mindsponge runs as they are)."""
    import openmm

    forces = list(openmm_system.getForces())
    if not any(isinstance(force, openmm.GBSAOBCForce) for force in forces):
        return openmm_system
    replaced = []
    for force in forces:
        if isinstance(force, openmm.GBSAOBCForce):
            force = custom_obc2(force)
        else:
            force = copy.deepcopy(force)
        replaced.append(force)
    while openmm_system.getNumForces():
        openmm_system.removeForce(openmm_system.getNumForces() - 1)
    for force in replaced:
        openmm_system.addForce(force)
    return openmm_system


def custom_obc2(force):
    """The ``CustomGBForce`` equal to a ``GBSAOBCForce`` (OBC2; its surface term ACE or none)."""
    import openmm
    from openmm import unit
    from openmm.app.internal import customgbforces

    surface = force.getSurfaceAreaEnergy().value_in_unit(unit.kilojoule_per_mole / unit.nanometer**2)
    if surface != 0 and abs(surface - 2.25936) > 1e-9:  # customgbforces' ACE term: 4 pi 2.25936 = 28.3919551
        raise ConfigurationError(
            f"a GBSAOBCForce with surface-area energy {surface} kJ/mol/nm^2 has no OpenMM CustomGBForce "
            "equivalent (ACE: 2.25936 kJ/mol/nm^2, or 0 for none)")
    periodic = force.getNonbondedMethod() == openmm.GBSAOBCForce.CutoffPeriodic
    cutoff = None if force.getNonbondedMethod() == openmm.GBSAOBCForce.NoCutoff else force.getCutoffDistance()
    custom = customgbforces.GBSAOBC2Force(
        solventDielectric=force.getSolventDielectric(), soluteDielectric=force.getSoluteDielectric(),
        SA="ACE" if surface != 0 else None,
        cutoff=None if cutoff is None else cutoff.value_in_unit(unit.nanometer), kappa=0.0)
    for particle in range(force.getNumParticles()):
        charge, radius, scale = force.getParticleParameters(particle)
        custom.addParticle([charge, radius, scale])
    name, expression, kind = custom.getComputedValueParameters(0)
    if _BORN_INTEGRAL not in expression:
        raise RuntimeError(f"OpenMM's GBSAOBC2Force has another Born integral than expected: {expression}")
    custom.setComputedValueParameters(0, name, expression.replace(_BORN_INTEGRAL, _ENGULFED, 1), kind)
    custom.finalize()
    for term in range(custom.getNumEnergyTerms()):  # GBSAOBCForce's constants, not rounded ones
        expression, kind = custom.getEnergyTermParameters(term)
        for rounded, exact in _exact_constants(surface).items():
            expression = expression.replace(rounded, repr(exact))
        custom.setEnergyTermParameters(term, expression, kind)
    if cutoff is not None:
        custom.setNonbondedMethod(openmm.CustomGBForce.CutoffPeriodic if periodic
                                  else openmm.CustomGBForce.CutoffNonPeriodic)
        custom.setCutoffDistance(cutoff)
    custom.setForceGroup(force.getForceGroup())
    return custom


def obc_term(index, force, dtype):
    """The mindsponge term of a ``GBSAOBCForce`` (as :func:`from_openmm
    <mindsponge.interop.openmm.from_openmm>` converts forces): its :func:`custom_obc2` form."""
    from mindsponge.interop.openmm.custom import custom_gb_term

    return custom_gb_term(index, custom_obc2(force), dtype)
