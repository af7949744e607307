"""Converters of OpenMM's Custom*Forces to the terms of :mod:`mindsponge.forcefield.custom`."""

from __future__ import annotations

import torch

from mindsponge.interop.openmm.reading import (
    global_parameters,
    md,
    parameter_rows,
    tabulated_functions,
    translating,
    unsupported,
)

_CUSTOM_BONDED = {
    "CustomBondForce": ("CustomBond", 2, "getNumBonds", "getBondParameters", "getNumPerBondParameters",
                        "getPerBondParameterName"),
    "CustomAngleForce": ("CustomAngle", 3, "getNumAngles", "getAngleParameters", "getNumPerAngleParameters",
                         "getPerAngleParameterName"),
    "CustomTorsionForce": ("CustomTorsion", 4, "getNumTorsions", "getTorsionParameters",
                           "getNumPerTorsionParameters", "getPerTorsionParameterName"),
    "CustomExternalForce": ("CustomExternal", 1, "getNumParticles", "getParticleParameters",
                            "getNumPerParticleParameters", "getPerParticleParameterName"),
    "CustomCompoundBondForce": ("CustomCompoundBond", None, "getNumBonds", "getBondParameters",
                                "getNumPerBondParameters", "getPerBondParameterName"),
}


def custom_bonded_term(index, force, dtype):
    """``CustomBond/Angle/Torsion/External/CompoundBondForce`` to the term of the same name in
    :mod:`mindsponge.forcefield.custom`."""
    from mindsponge.forcefield import custom

    kind = type(force).__name__
    term_name, width, count_method, row_method, names_count, name_method = _CUSTOM_BONDED[kind]
    names = [getattr(force, name_method)(p) for p in range(getattr(force, names_count)())]
    count = getattr(force, count_method)()
    rows = [getattr(force, row_method)(i) for i in range(count)]
    if width is None:  # compound bonds: (particles, parameters)
        atoms = torch.tensor([list(row[0]) for row in rows], dtype=torch.long).reshape(
            count, force.getNumParticlesPerBond()
        )
    else:
        atoms = torch.tensor([row[:width] for row in rows], dtype=torch.long).reshape(count, width)
    parameters = parameter_rows([row[-1] for row in rows], count, len(names))
    options = {
        "global_parameters": global_parameters(force),
        "functions": tabulated_functions(index, force) if hasattr(force, "getNumTabulatedFunctions") else {},
        "name": term_name,
    }
    if kind == "CustomExternalForce":
        atoms = atoms[:, 0]
    else:
        options["periodic"] = force.usesPeriodicBoundaryConditions()
    with translating(index, force):
        term = getattr(custom, term_name)(atoms, force.getEnergyFunction(), names, parameters, **options)
    return term.to(dtype)


def custom_centroid_term(index, force, dtype):
    """``CustomCentroidBondForce`` to :class:`~mindsponge.forcefield.custom.CustomCentroidBond`
    (groups need explicit weights: OpenMM's default mass weights are not known to a force)."""
    from mindsponge.forcefield.custom import CustomCentroidBond

    groups = []
    for number in range(force.getNumGroups()):
        atoms, weights = force.getGroupParameters(number)
        if len(weights) == 0:
            raise unsupported(
                index, force, f"group {number} has no explicit weights (OpenMM then uses the masses); "
                "give the weights with addGroup(particles, weights)"
            )
        groups.append((list(atoms), list(weights)))
    names = [force.getPerBondParameterName(p) for p in range(force.getNumPerBondParameters())]
    rows = [force.getBondParameters(i) for i in range(force.getNumBonds())]
    bonds = torch.tensor([list(row[0]) for row in rows], dtype=torch.long).reshape(
        len(rows), force.getNumGroupsPerBond()
    )
    with translating(index, force):
        term = CustomCentroidBond(
            groups,
            bonds,
            force.getEnergyFunction(),
            names,
            parameter_rows([row[1] for row in rows], len(rows), len(names)),
            global_parameters=global_parameters(force), functions=tabulated_functions(index, force),
            periodic=force.usesPeriodicBoundaryConditions(),
        )
    return term.to(dtype)


def custom_nonbonded_term(index, force, dtype):
    """``CustomNonbondedForce`` to :class:`~mindsponge.forcefield.custom.CustomNonbonded`."""
    import openmm

    from mindsponge.forcefield.custom import CustomNonbonded

    method = force.getNonbondedMethod()
    cutoff = None if method == openmm.CustomNonbondedForce.NoCutoff else md(force.getCutoffDistance())
    names, parameters = _particle_parameters(force)
    groups = [force.getInteractionGroupParameters(i) for i in range(force.getNumInteractionGroups())]
    computed = [force.getComputedValueParameters(i) for i in range(force.getNumComputedValues())]
    with translating(index, force):
        term = CustomNonbonded(
            force.getEnergyFunction(), names, parameters,
            global_parameters=global_parameters(force), functions=tabulated_functions(index, force),
            computed_values=[(name, expression) for name, expression in computed], cutoff=cutoff,
            periodic=method == openmm.CustomNonbondedForce.CutoffPeriodic,
            switch_distance=md(force.getSwitchingDistance())
            if force.getUseSwitchingFunction() and cutoff is not None else None,
            # OpenMM ignores the long-range correction without periodic images (NoCutoff included)
            long_range_correction=force.getUseLongRangeCorrection()
            and method == openmm.CustomNonbondedForce.CutoffPeriodic,
            exclusions=_exclusions(force), interaction_groups=[(list(a), list(b)) for a, b in groups] or None,
        )
    return term.to(dtype)


def custom_gb_term(index, force, dtype):
    """``CustomGBForce`` to :class:`~mindsponge.forcefield.custom.CustomGB`."""
    import openmm

    from mindsponge.forcefield.custom import CustomGB

    kinds = {
        openmm.CustomGBForce.SingleParticle: "single",
        openmm.CustomGBForce.ParticlePair: "pair",
        openmm.CustomGBForce.ParticlePairNoExclusions: "pair_no_exclusions",
    }
    names, parameters = _particle_parameters(force)
    computed = []
    for number in range(force.getNumComputedValues()):
        name, expression, kind = force.getComputedValueParameters(number)
        computed.append((name, expression, kinds[kind]))
    terms = []
    for number in range(force.getNumEnergyTerms()):
        expression, kind = force.getEnergyTermParameters(number)
        terms.append((expression, kinds[kind]))
    method = force.getNonbondedMethod()
    with translating(index, force):
        term = CustomGB(
            names,
            parameters,
            computed,
            terms,
            global_parameters=global_parameters(force),
            functions=tabulated_functions(index, force),
            cutoff=None if method == openmm.CustomGBForce.NoCutoff else md(force.getCutoffDistance()),
            periodic=method == openmm.CustomGBForce.CutoffPeriodic,
            exclusions=_exclusions(force),
        )
    return term.to(dtype)


def _particle_parameters(force) -> tuple[list[str], torch.Tensor]:
    """The per-particle parameter names of a nonbonded or GB force and their values ``(N, P)``."""
    names = [force.getPerParticleParameterName(p) for p in range(force.getNumPerParticleParameters())]
    count = force.getNumParticles()
    return names, parameter_rows([force.getParticleParameters(i) for i in range(count)], count, len(names))


def _exclusions(force) -> torch.Tensor:
    """The excluded pairs of a nonbonded or GB force, ``(E, 2)``."""
    rows = [force.getExclusionParticles(i) for i in range(force.getNumExclusions())]
    return torch.tensor(rows, dtype=torch.long).reshape(-1, 2)
