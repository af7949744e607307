"""Converters of OpenMM's standard forces: harmonic bonds and angles, periodic torsions,
CHARMM's harmonic impropers (a ``CustomTorsionForce`` of a known expression), CMAP, and
``NonbondedForce``."""

from __future__ import annotations

import math
import re

import torch

from mindsponge.forcefield.bonded import (
    CMAPTorsion,
    HarmonicAngle,
    HarmonicBond,
    HarmonicImproper,
    PeriodicTorsion,
)
from mindsponge.interop.openmm.custom import custom_bonded_term
from mindsponge.interop.openmm.reading import global_parameters, md, table, unsupported

# CustomTorsionForce energy expressions of harmonic impropers (whitespace removed, a numeric
# definition of pi dropped), to whether the angle difference is taken on the circle: OpenMM's
# charmm36.xml; OpenMM's CharmmPsfFile and Amber prmtop readers; ParmEd.
_IMPROPER_EXPRESSIONS = {
    "k*(theta-theta0)^2": False,
    "k*min(dtheta,2*pi-dtheta)^2;dtheta=abs(theta-theta0)": True,
    "k*dtheta^2;dtheta=min(diff,2*pi-diff);diff=abs(theta-theta0)": True,
}
_PI_DEFINITION = re.compile(r";pi=([0-9.eE+-]+)(?=;|$)")


def bond_term(index, force, dtype):
    """A :class:`HarmonicBond` term from OpenMM's HarmonicBondForce number ``index``."""
    atoms, (length, k) = table([force.getBondParameters(i) for i in range(force.getNumBonds())], 2, 2)
    return HarmonicBond(atoms, length.to(dtype), k.to(dtype), periodic=force.usesPeriodicBoundaryConditions())


def angle_term(index, force, dtype):
    """A :class:`HarmonicAngle` term from OpenMM's HarmonicAngleForce number ``index``."""
    atoms, (angle, k) = table([force.getAngleParameters(i) for i in range(force.getNumAngles())], 3, 2)
    return HarmonicAngle(atoms, angle.to(dtype), k.to(dtype), periodic=force.usesPeriodicBoundaryConditions())


def torsion_term(index, force, dtype):
    """A :class:`PeriodicTorsion` term from OpenMM's PeriodicTorsionForce number ``index``."""
    atoms, (periodicity, phase, k) = table(
        [force.getTorsionParameters(i) for i in range(force.getNumTorsions())], 4, 3
    )
    return PeriodicTorsion(
        atoms,
        periodicity.to(dtype),
        phase.to(dtype),
        k.to(dtype),
        periodic=force.usesPeriodicBoundaryConditions(),
    )


def custom_torsion_term(index, force, dtype):
    """CHARMM's harmonic impropers become :class:`HarmonicImproper`; any other expression a
    :class:`~mindsponge.forcefield.custom.CustomTorsion`."""
    expression = re.sub(r"\s+", "", force.getEnergyFunction()).rstrip(";")
    pi_definition = _PI_DEFINITION.search(expression)
    pi = float(pi_definition.group(1)) if pi_definition else math.pi
    expression = _PI_DEFINITION.sub("", expression)
    names = [force.getPerTorsionParameterName(p) for p in range(force.getNumPerTorsionParameters())]
    if (
        expression not in _IMPROPER_EXPRESSIONS
        or force.getNumGlobalParameters()
        or sorted(names) != ["k", "theta0"]
    ):
        return custom_bonded_term(index, force, dtype)
    rows = [force.getTorsionParameters(i) for i in range(force.getNumTorsions())]
    atoms, values = table([(*row[:4], *row[4]) for row in rows], 4, 2)
    k, angle = values[names.index("k")], values[names.index("theta0")]
    return HarmonicImproper(
        atoms,
        angle.to(dtype),
        k.to(dtype),
        period=2 * pi if _IMPROPER_EXPRESSIONS[expression] else None,
        periodic=force.usesPeriodicBoundaryConditions(),
    )


def cmap_term(index, force, dtype):
    """A :class:`CMAPTorsion` term from OpenMM's CMAPTorsionForce number ``index`` (maps, torsion pairs)."""
    maps = []
    for number in range(force.getNumMaps()):
        size, energy = force.getMapParameters(number)
        flat = torch.tensor([md(value) for value in energy], dtype=torch.float64)
        maps.append(flat.reshape(size, size).T.numpy())  # OpenMM: energy[i + size * j]
    atoms_and_map, _ = table([force.getTorsionParameters(i) for i in range(force.getNumTorsions())], 9, 0)
    map_index, atoms = atoms_and_map[:, 0], atoms_and_map[:, 1:]
    return CMAPTorsion(atoms, map_index, maps, periodic=force.usesPeriodicBoundaryConditions()).to(dtype)


_NONBONDED_METHODS = {
    "NoCutoff": "nocutoff",
    "CutoffNonPeriodic": "reaction_field",
    "CutoffPeriodic": "reaction_field",
    "Ewald": "ewald",
    "PME": "pme",
}


def nonbonded_term(index, force, dtype):
    """``NonbondedForce`` to :class:`~mindsponge.forcefield.nonbonded.Nonbonded`."""
    import openmm

    from mindsponge.forcefield.nonbonded import Nonbonded

    methods = {getattr(openmm.NonbondedForce, name): name for name in (*_NONBONDED_METHODS, "LJPME")}
    method_name = methods.get(force.getNonbondedMethod(), str(force.getNonbondedMethod()))
    if method_name not in _NONBONDED_METHODS:
        instead = (" (build the System with nonbondedMethod=PME: Lennard-Jones with a cutoff and the "
                   "dispersion correction)") if method_name == "LJPME" else ""
        supported = ", ".join(_NONBONDED_METHODS)
        raise unsupported(
            index, force,
            f"nonbonded method {method_name} is not supported{instead} (supported: {supported})")
    if force.getIncludeDirectSpace() is False:
        raise unsupported(index, force, "setIncludeDirectSpace(False) is not supported")
    _, particles = table([force.getParticleParameters(i) for i in range(force.getNumParticles())], 0, 3)
    charges, sigma, epsilon = particles
    pairs, (charge_products, exception_sigma, exception_epsilon) = table(
        [force.getExceptionParameters(i) for i in range(force.getNumExceptions())], 2, 3
    )
    offsets = _parameter_offsets(force)
    excluded = (charge_products == 0) & (exception_epsilon == 0)
    if offsets["exception_offsets"]:  # an exception with offsets stays one, whatever its base values
        excluded[[row[1] for row in offsets["exception_offsets"]]] = False
        position = torch.cumsum((~excluded).long(), 0) - 1  # OpenMM's exception index -> the term's
        offsets["exception_offsets"] = [(name, int(position[item]), *scales)
                                        for name, item, *scales in offsets["exception_offsets"]]
    options = {}
    if method_name == "PME":  # explicit PME parameters; OpenMM derives Ewald's from the tolerance
        alpha, *grid = force.getPMEParameters()
        if md(alpha) > 0:
            options["alpha"] = md(alpha)
            if all(size > 0 for size in grid):
                options["pme_grid"] = tuple(grid)
    return Nonbonded(
        charges.to(dtype),
        sigma.to(dtype),
        epsilon.to(dtype),
        method=_NONBONDED_METHODS[method_name],
        cutoff=md(force.getCutoffDistance()),
        switch_distance=md(force.getSwitchingDistance()) if force.getUseSwitchingFunction() else None,
        dispersion_correction=force.getUseDispersionCorrection(),
        ewald_tolerance=force.getEwaldErrorTolerance(),
        reaction_field_dielectric=force.getReactionFieldDielectric(),
        exclusions=pairs[excluded],
        exceptions=pairs[~excluded],
        exception_charge_products=charge_products[~excluded].to(dtype),
        exception_sigma=exception_sigma[~excluded].to(dtype),
        exception_epsilon=exception_epsilon[~excluded].to(dtype),
        exceptions_periodic=force.getExceptionsUsePeriodicBoundaryConditions(),
        **offsets,
        **options,
    )


def _parameter_offsets(force) -> dict:
    """The global parameters (name to default value) and the particle and exception parameter offsets of a
    ``NonbondedForce``, as keyword arguments of :class:`~mindsponge.forcefield.nonbonded.Nonbonded`
    (exception indices still OpenMM's)."""
    return {
        "global_parameters": global_parameters(force),
        "particle_offsets": [
            (name, particle, md(charge), md(sigma), md(epsilon))
            for name, particle, charge, sigma, epsilon in (
                force.getParticleParameterOffset(i) for i in range(force.getNumParticleParameterOffsets()))
        ],
        "exception_offsets": [
            (name, exception, md(charge), md(sigma), md(epsilon))
            for name, exception, charge, sigma, epsilon in (
                force.getExceptionParameterOffset(i) for i in range(force.getNumExceptionParameterOffsets()))
        ],
    }

