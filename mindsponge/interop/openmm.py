"""OpenMM interoperability: an OpenMM ``System`` becomes a :class:`~mindsponge.forcefield.ForceField`.

Any force field OpenMM can assign (Amber, CHARMM, TIP3P water, GAFF through
openmmforcefields...) reaches mindsponge through OpenMM's ``System``: :func:`from_openmm`
translates its forces term by term, :func:`load` reads a serialized ``System`` (XML) plus
a PDB, and :func:`from_pdb_with_forcefield` parameterises a PDB with OpenMM force-field
files in one call.

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
                             exceptions)
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
``CMMotionRemover``          ignored (it is not an energy term)
===========================  ==========================================================

Every Custom*Force supports the whole Lepton expression language (``;`` definitions, all
functions), per-interaction and global parameters (their default values; see
:class:`~mindsponge.forcefield.custom.ExpressionEnergy`) and the tabulated functions
``Continuous1D/2D/3DFunction`` and ``Discrete1D/2D/3DFunction`` (CHARMM's NBFIX tables);
energy-parameter derivatives are ignored (they do not change the energy).

Not supported: ``CustomHbondForce``, ``CustomManyParticleForce``,
``CustomCVForce``, ``GBSAOBCForce``, ``NonbondedForce`` with ``LJPME``, global parameters or
parameter offsets, ``setIncludeDirectSpace(False)``; the AMOEBA, Drude, RPMD and ATM forces;
``CustomCentroidBondForce`` groups without explicit weights (OpenMM weights them by the
System's masses, which a force does not carry); virtual sites other than two/three-particle
averages and out-of-plane sites.

Term names are the mindsponge class names (``HarmonicBond``, ``PeriodicTorsion``,
``HarmonicImproper``, ``Nonbonded``...) or the force's own name when it was given one
(``force.setName``), with ``_2``, ``_3``... appended when a System holds several forces of one
kind. Each term records the index of the OpenMM force it came from in
``term.openmm_force_index``.

OpenMM is imported only when these functions run, so importing this module is cheap.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence

import torch

from common.errors import ConfigurationError
from mindsponge.forcefield.base import EnergyTerm, ForceField, VirtualSites
from mindsponge.forcefield.bonded import (
    CMAPTorsion,
    HarmonicAngle,
    HarmonicBond,
    HarmonicImproper,
    PeriodicTorsion,
)

__all__ = [
    "UnsupportedOpenMMForceError",
    "from_openmm",
    "load",
    "from_pdb_with_forcefield",
    "SUPPORTED_FORCES",
]

SUPPORTED_FORCES = (
    "HarmonicBondForce",
    "HarmonicAngleForce",
    "PeriodicTorsionForce",
    "CMAPTorsionForce",
    "NonbondedForce",
    "CustomBondForce",
    "CustomAngleForce",
    "CustomTorsionForce",
    "CustomExternalForce",
    "CustomCompoundBondForce",
    "CustomCentroidBondForce (explicit group weights)",
    "CustomNonbondedForce",
    "CustomGBForce",
    "CMMotionRemover (ignored)",
)

# CustomTorsionForce energy expressions of harmonic impropers (whitespace removed, a numeric
# definition of pi dropped), to whether the angle difference is taken on the circle: OpenMM's
# charmm36.xml; OpenMM's CharmmPsfFile and Amber prmtop readers; ParmEd.
_IMPROPER_EXPRESSIONS = {
    "k*(theta-theta0)^2": False,
    "k*min(dtheta,2*pi-dtheta)^2;dtheta=abs(theta-theta0)": True,
    "k*dtheta^2;dtheta=min(diff,2*pi-diff);diff=abs(theta-theta0)": True,
}
_PI_DEFINITION = re.compile(r";pi=([0-9.eE+-]+)(?=;|$)")


class UnsupportedOpenMMForceError(ConfigurationError):
    """An OpenMM force, or an option of one, that mindsponge cannot translate."""


def _unsupported(index: int, force, what: str) -> UnsupportedOpenMMForceError:
    return UnsupportedOpenMMForceError(
        f"OpenMM force {index} ({type(force).__name__}, name {force.getName()!r}): {what}. "
        f"mindsponge supports {', '.join(SUPPORTED_FORCES)}"
    )


def _table(rows: list, atoms_per_term: int, values_per_term: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split OpenMM parameter rows ``(atom, ..., value, ...)`` into atoms ``(M, k)`` and values ``(V, M)``."""
    atoms = torch.tensor([row[:atoms_per_term] for row in rows], dtype=torch.long).reshape(
        len(rows), atoms_per_term
    )
    values = torch.tensor(
        [[_md(value) for value in row[atoms_per_term:]] for row in rows], dtype=torch.float64
    )
    return atoms, values.reshape(len(rows), values_per_term).T


def _bond_term(index, force, dtype):
    atoms, (length, k) = _table([force.getBondParameters(i) for i in range(force.getNumBonds())], 2, 2)
    return HarmonicBond(atoms, length.to(dtype), k.to(dtype), periodic=force.usesPeriodicBoundaryConditions())


def _angle_term(index, force, dtype):
    atoms, (angle, k) = _table([force.getAngleParameters(i) for i in range(force.getNumAngles())], 3, 2)
    return HarmonicAngle(atoms, angle.to(dtype), k.to(dtype), periodic=force.usesPeriodicBoundaryConditions())


def _torsion_term(index, force, dtype):
    atoms, (periodicity, phase, k) = _table(
        [force.getTorsionParameters(i) for i in range(force.getNumTorsions())], 4, 3
    )
    return PeriodicTorsion(
        atoms,
        periodicity.to(dtype),
        phase.to(dtype),
        k.to(dtype),
        periodic=force.usesPeriodicBoundaryConditions(),
    )


def _custom_torsion_term(index, force, dtype):
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
        return _custom_bonded_term(index, force, dtype)
    rows = [force.getTorsionParameters(i) for i in range(force.getNumTorsions())]
    atoms, values = _table([(*row[:4], *row[4]) for row in rows], 4, 2)
    k, angle = values[names.index("k")], values[names.index("theta0")]
    return HarmonicImproper(
        atoms,
        angle.to(dtype),
        k.to(dtype),
        period=2 * pi if _IMPROPER_EXPRESSIONS[expression] else None,
        periodic=force.usesPeriodicBoundaryConditions(),
    )


def _cmap_term(index, force, dtype):
    maps = []
    for number in range(force.getNumMaps()):
        size, energy = force.getMapParameters(number)
        flat = torch.tensor([_md(value) for value in energy], dtype=torch.float64)
        maps.append(flat.reshape(size, size).T.numpy())  # OpenMM: energy[i + size * j]
    atoms_and_map, _ = _table([force.getTorsionParameters(i) for i in range(force.getNumTorsions())], 9, 0)
    map_index, atoms = atoms_and_map[:, 0], atoms_and_map[:, 1:]
    return CMAPTorsion(atoms, map_index, maps, periodic=force.usesPeriodicBoundaryConditions()).to(dtype)


_NONBONDED_METHODS = {
    "NoCutoff": "nocutoff",
    "CutoffNonPeriodic": "reaction_field",
    "CutoffPeriodic": "reaction_field",
    "Ewald": "ewald",
    "PME": "pme",
}


def _nonbonded_term(index, force, dtype):
    """``NonbondedForce`` to :class:`~mindsponge.forcefield.nonbonded.Nonbonded`."""
    import openmm

    from mindsponge.forcefield.nonbonded import Nonbonded

    methods = {getattr(openmm.NonbondedForce, name): name for name in (*_NONBONDED_METHODS, "LJPME")}
    method_name = methods.get(force.getNonbondedMethod(), str(force.getNonbondedMethod()))
    if method_name not in _NONBONDED_METHODS:
        raise _unsupported(
            index,
            force,
            f"nonbonded method {method_name} is not supported (supported: {', '.join(_NONBONDED_METHODS)})",
        )
    if (
        force.getNumGlobalParameters()
        or force.getNumParticleParameterOffsets()
        or force.getNumExceptionParameterOffsets()
    ):
        raise _unsupported(index, force, "global parameters and parameter offsets are not supported")
    if force.getIncludeDirectSpace() is False:
        raise _unsupported(index, force, "setIncludeDirectSpace(False) is not supported")
    _, particles = _table([force.getParticleParameters(i) for i in range(force.getNumParticles())], 0, 3)
    charges, sigma, epsilon = particles
    pairs, (charge_products, exception_sigma, exception_epsilon) = _table(
        [force.getExceptionParameters(i) for i in range(force.getNumExceptions())], 2, 3
    )
    excluded = (charge_products == 0) & (exception_epsilon == 0)
    options = {}
    if method_name == "PME":  # explicit PME parameters; OpenMM derives Ewald's from the tolerance
        alpha, *grid = force.getPMEParameters()
        if _md(alpha) > 0:
            options["alpha"] = _md(alpha)
            if all(size > 0 for size in grid):
                options["pme_grid"] = tuple(grid)
    return Nonbonded(
        charges.to(dtype),
        sigma.to(dtype),
        epsilon.to(dtype),
        method=_NONBONDED_METHODS[method_name],
        cutoff=_md(force.getCutoffDistance()),
        switch_distance=_md(force.getSwitchingDistance()) if force.getUseSwitchingFunction() else None,
        dispersion_correction=force.getUseDispersionCorrection(),
        ewald_tolerance=force.getEwaldErrorTolerance(),
        reaction_field_dielectric=force.getReactionFieldDielectric(),
        exclusions=pairs[excluded],
        exceptions=pairs[~excluded],
        exception_charge_products=charge_products[~excluded].to(dtype),
        exception_sigma=exception_sigma[~excluded].to(dtype),
        exception_epsilon=exception_epsilon[~excluded].to(dtype),
        exceptions_periodic=force.getExceptionsUsePeriodicBoundaryConditions(),
        **options,
    )


def _force_context(index: int, force) -> str:
    return f"OpenMM force {index} ({type(force).__name__}, name {force.getName()!r})"


def _tabulated_functions(index: int, force) -> dict:
    """The force's tabulated functions as :mod:`~mindsponge.forcefield.expressions` modules."""
    import openmm

    from mindsponge.forcefield import expressions

    functions = {}
    for number in range(force.getNumTabulatedFunctions()):
        name = force.getTabulatedFunctionName(number)
        function = force.getTabulatedFunction(number)
        parameters = function.getFunctionParameters()
        if isinstance(function, openmm.Continuous1DFunction):
            values, low, high = parameters
            table = expressions.Continuous1DFunction(values, low, high, function.getPeriodic())
        elif isinstance(function, openmm.Continuous2DFunction):
            table = expressions.Continuous2DFunction(*parameters, periodic=function.getPeriodic())
        elif isinstance(function, openmm.Continuous3DFunction):
            table = expressions.Continuous3DFunction(*parameters, periodic=function.getPeriodic())
        elif isinstance(function, openmm.Discrete1DFunction):
            table = expressions.Discrete1DFunction(parameters)
        elif isinstance(function, openmm.Discrete2DFunction):
            table = expressions.Discrete2DFunction(*parameters)
        elif isinstance(function, openmm.Discrete3DFunction):
            table = expressions.Discrete3DFunction(*parameters)
        else:
            raise _unsupported(index, force, f"tabulated function {name!r} is a {type(function).__name__}")
        functions[name] = table
    return functions


def _global_parameters(force) -> dict[str, float]:
    return {
        force.getGlobalParameterName(number): _md(force.getGlobalParameterDefaultValue(number))
        for number in range(force.getNumGlobalParameters())
    }


def _parameter_rows(rows: list, count: int, width: int) -> torch.Tensor:
    values = torch.tensor([[_md(value) for value in row] for row in rows], dtype=torch.float64)
    return values.reshape(count, width)


# bonded Custom*Forces: OpenMM class -> (mindsponge term, atoms per interaction, how to count and read rows)
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


def _custom_bonded_term(index, force, dtype):
    """``CustomBond/Angle/Torsion/External/CompoundBondForce`` to the term of the same name in
    :mod:`mindsponge.forcefield.custom`."""
    from mindsponge.forcefield import custom
    from mindsponge.forcefield.expressions import ExpressionError

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
    parameters = _parameter_rows([row[-1] for row in rows], count, len(names))
    options = {
        "global_parameters": _global_parameters(force),
        "functions": _tabulated_functions(index, force) if hasattr(force, "getNumTabulatedFunctions") else {},
        "name": term_name,
    }
    if kind == "CustomExternalForce":
        atoms = atoms[:, 0]
    else:
        options["periodic"] = force.usesPeriodicBoundaryConditions()
    try:
        term = getattr(custom, term_name)(atoms, force.getEnergyFunction(), names, parameters, **options)
    except ExpressionError as error:
        raise _unsupported(index, force, str(error)) from error
    return term.to(dtype)


def _custom_centroid_term(index, force, dtype):
    """``CustomCentroidBondForce`` to :class:`~mindsponge.forcefield.custom.CustomCentroidBond`
    (groups need explicit weights: OpenMM's default mass weights are not known to a force)."""
    from mindsponge.forcefield.custom import CustomCentroidBond
    from mindsponge.forcefield.expressions import ExpressionError

    groups = []
    for number in range(force.getNumGroups()):
        atoms, weights = force.getGroupParameters(number)
        if len(weights) == 0:
            raise _unsupported(
                index, force, f"group {number} has no explicit weights (OpenMM then uses the masses); "
                "give the weights with addGroup(particles, weights)"
            )
        groups.append((list(atoms), list(weights)))
    names = [force.getPerBondParameterName(p) for p in range(force.getNumPerBondParameters())]
    rows = [force.getBondParameters(i) for i in range(force.getNumBonds())]
    bonds = torch.tensor([list(row[0]) for row in rows], dtype=torch.long).reshape(
        len(rows), force.getNumGroupsPerBond()
    )
    try:
        term = CustomCentroidBond(
            groups,
            bonds,
            force.getEnergyFunction(),
            names,
            _parameter_rows([row[1] for row in rows], len(rows), len(names)),
            global_parameters=_global_parameters(force), functions=_tabulated_functions(index, force),
            periodic=force.usesPeriodicBoundaryConditions(),
        )
    except ExpressionError as error:
        raise _unsupported(index, force, str(error)) from error
    return term.to(dtype)


def _custom_nonbonded_term(index, force, dtype):
    """``CustomNonbondedForce`` to :class:`~mindsponge.forcefield.custom.CustomNonbonded`."""
    import openmm

    from mindsponge.forcefield.custom import CustomNonbonded
    from mindsponge.forcefield.expressions import ExpressionError

    method = force.getNonbondedMethod()
    cutoff = None if method == openmm.CustomNonbondedForce.NoCutoff else _md(force.getCutoffDistance())
    names = [force.getPerParticleParameterName(p) for p in range(force.getNumPerParticleParameters())]
    count = force.getNumParticles()
    parameters = _parameter_rows([force.getParticleParameters(i) for i in range(count)], count, len(names))
    exclusions = torch.tensor(
        [force.getExclusionParticles(i) for i in range(force.getNumExclusions())], dtype=torch.long
    ).reshape(-1, 2)
    groups = [force.getInteractionGroupParameters(i) for i in range(force.getNumInteractionGroups())]
    computed = [force.getComputedValueParameters(i) for i in range(force.getNumComputedValues())]
    try:
        term = CustomNonbonded(
            force.getEnergyFunction(), names, parameters,
            global_parameters=_global_parameters(force), functions=_tabulated_functions(index, force),
            computed_values=[(name, expression) for name, expression in computed], cutoff=cutoff,
            periodic=method == openmm.CustomNonbondedForce.CutoffPeriodic,
            switch_distance=_md(force.getSwitchingDistance())
            if force.getUseSwitchingFunction() and cutoff is not None else None,
            long_range_correction=force.getUseLongRangeCorrection(),
            exclusions=exclusions, interaction_groups=[(list(a), list(b)) for a, b in groups] or None,
        )
    except ExpressionError as error:
        raise _unsupported(index, force, str(error)) from error
    return term.to(dtype)


def _custom_gb_term(index, force, dtype):
    """``CustomGBForce`` to :class:`~mindsponge.forcefield.custom.CustomGB`."""
    import openmm

    from mindsponge.forcefield.custom import CustomGB
    from mindsponge.forcefield.expressions import ExpressionError

    kinds = {
        openmm.CustomGBForce.SingleParticle: "single",
        openmm.CustomGBForce.ParticlePair: "pair",
        openmm.CustomGBForce.ParticlePairNoExclusions: "pair_no_exclusions",
    }
    names = [force.getPerParticleParameterName(p) for p in range(force.getNumPerParticleParameters())]
    count = force.getNumParticles()
    parameters = _parameter_rows([force.getParticleParameters(i) for i in range(count)], count, len(names))
    computed = []
    for number in range(force.getNumComputedValues()):
        name, expression, kind = force.getComputedValueParameters(number)
        computed.append((name, expression, kinds[kind]))
    terms = []
    for number in range(force.getNumEnergyTerms()):
        expression, kind = force.getEnergyTermParameters(number)
        terms.append((expression, kinds[kind]))
    method = force.getNonbondedMethod()
    exclusions = torch.tensor(
        [force.getExclusionParticles(i) for i in range(force.getNumExclusions())], dtype=torch.long
    ).reshape(-1, 2)
    try:
        term = CustomGB(
            names,
            parameters,
            computed,
            terms,
            global_parameters=_global_parameters(force),
            functions=_tabulated_functions(index, force),
            cutoff=None if method == openmm.CustomGBForce.NoCutoff else _md(force.getCutoffDistance()),
            periodic=method == openmm.CustomGBForce.CutoffPeriodic,
            exclusions=exclusions,
        )
    except ExpressionError as error:
        raise _unsupported(index, force, str(error)) from error
    return term.to(dtype)


def _md(value) -> float:
    """A float in OpenMM's MD units from a float or an ``openmm.unit.Quantity``."""
    if hasattr(value, "value_in_unit_system"):
        from openmm import unit

        return float(value.value_in_unit_system(unit.md_unit_system))
    return float(value)


_CONVERTERS = {
    "HarmonicBondForce": _bond_term,
    "HarmonicAngleForce": _angle_term,
    "PeriodicTorsionForce": _torsion_term,
    "CustomTorsionForce": _custom_torsion_term,
    "CMAPTorsionForce": _cmap_term,
    "NonbondedForce": _nonbonded_term,
    "CustomBondForce": _custom_bonded_term,
    "CustomAngleForce": _custom_bonded_term,
    "CustomExternalForce": _custom_bonded_term,
    "CustomCompoundBondForce": _custom_bonded_term,
    "CustomCentroidBondForce": _custom_centroid_term,
    "CustomNonbondedForce": _custom_nonbonded_term,
    "CustomGBForce": _custom_gb_term,
}
_IGNORED = {"CMMotionRemover"}


def from_openmm(openmm_system, topology=None, dtype: torch.dtype = torch.float64) -> ForceField:
    """Translate an OpenMM ``System`` into a :class:`~mindsponge.forcefield.ForceField`.

    Args:
        openmm_system: an ``openmm.System``.
        topology: optional ``openmm.app.Topology`` or :class:`mindsponge.system.Topology`; when
            given, its atom count must match the System's.
        dtype: floating dtype of the parameters (float64 by default, exact for OpenMM's values). Use
            ``ff.to(dtype)`` to change it later.

    Returns:
        A :class:`~mindsponge.forcefield.ForceField` with one term per OpenMM force (in the
        System's order; ``CMMotionRemover`` is skipped). ``term.openmm_force_index`` is the
        index of the source force. Virtual sites (two/three-particle average, out-of-plane:
        TIP4P, TIP5P) become the force field's :class:`~mindsponge.forcefield.VirtualSites`.
        The System is the truth for the dynamics too: ``forcefield.masses`` holds its particle
        masses (hydrogen mass repartitioning included, float64 amu) and
        ``forcefield.constraints`` its constraints (a
        :class:`~mindsponge.forcefield.SystemConstraints`: pairs, the System's distances, and
        which of them no energy term holds), or ``None`` without constraints. A
        :class:`~mindsponge.simulation.Simulation` uses both by default.

    Raises:
        TypeError: ``openmm_system`` is not an ``openmm.System``.
        UnsupportedOpenMMForceError: a force, or an option of one, has no mindsponge
            equivalent (the message names the force and lists what is supported).
        ValueError: the topology does not match the System.
    """
    import openmm

    if not isinstance(openmm_system, openmm.System):
        raise TypeError(f"from_openmm expects an openmm.System, got {type(openmm_system).__name__}")
    if topology is not None:
        atoms = topology.n_atoms if hasattr(topology, "n_atoms") else topology.getNumAtoms()
        if atoms != openmm_system.getNumParticles():
            raise ValueError(
                f"topology has {atoms} atoms but the OpenMM System has "
                f"{openmm_system.getNumParticles()} particles"
            )
    terms: list[EnergyTerm] = []
    counts: dict[str, int] = {}
    for index, force in enumerate(openmm_system.getForces()):
        kind = type(force).__name__
        if kind in _IGNORED:
            continue
        if kind in _CONVERTERS:
            term = _CONVERTERS[kind](index, force, dtype)
        else:
            raise _unsupported(index, force, "this force type is not supported")
        base_name = term.name if force.getName() == kind else force.getName()
        counts[base_name] = counts.get(base_name, 0) + 1
        term.name = base_name if counts[base_name] == 1 else f"{base_name}_{counts[base_name]}"
        term.openmm_force_index = index
        terms.append(term)
    return ForceField(
        terms,
        virtual_sites=_virtual_sites(openmm_system),
        masses=_masses(openmm_system, torch.float64),
        constraints=_system_constraints(openmm_system),
    )


def _masses(openmm_system, dtype) -> torch.Tensor:
    """The System's particle masses ``(N,)``, amu (zero for virtual sites)."""
    return torch.tensor(
        [_md(openmm_system.getParticleMass(i)) for i in range(openmm_system.getNumParticles())], dtype=dtype
    )


def _system_constraints(openmm_system):
    """The System's distance constraints (``SystemConstraints`` or ``None``), each marked required
    unless an energy term holds it.

    OpenMM's ``createSystem`` drops the bond term of a constrained bond and the angle term of a
    rigid water (unless ``flexibleConstraints=True``); such a distance has nothing but the
    constraint to hold it. A pair is held when a force with two-atom bonds (``HarmonicBondForce``,
    ``CustomBondForce``) has a term on it, or when it is the end pair of an angle term.
    """
    from mindsponge.forcefield.base import SystemConstraints

    rows = [openmm_system.getConstraintParameters(i) for i in range(openmm_system.getNumConstraints())]
    if not rows:
        return None
    held = set()
    for force in openmm_system.getForces():
        if hasattr(force, "getNumBonds") and hasattr(force, "getBondParameters"):
            for bond in range(force.getNumBonds()):
                parameters = force.getBondParameters(bond)
                if len(parameters) >= 2 and all(isinstance(atom, int) for atom in parameters[:2]):
                    held.add(frozenset(parameters[:2]))
        if hasattr(force, "getNumAngles") and hasattr(force, "getAngleParameters"):
            for angle in range(force.getNumAngles()):
                parameters = force.getAngleParameters(angle)
                if len(parameters) >= 3 and all(isinstance(atom, int) for atom in parameters[:3]):
                    held.add(frozenset((parameters[0], parameters[2])))
    pairs = torch.tensor([row[:2] for row in rows], dtype=torch.long)
    distances = torch.tensor([_md(row[2]) for row in rows], dtype=torch.float64)
    required = torch.tensor([frozenset(row[:2]) not in held for row in rows], dtype=torch.bool)
    return SystemConstraints(pairs, distances, required)


def _virtual_sites(openmm_system) -> VirtualSites | None:
    """OpenMM's two/three-particle average and out-of-plane sites as :class:`VirtualSites`."""
    import openmm

    sites, parents, weights, cross_weights = [], [], [], []
    for particle in range(openmm_system.getNumParticles()):
        if not openmm_system.isVirtualSite(particle):
            continue
        site = openmm_system.getVirtualSite(particle)
        if isinstance(site, openmm.TwoParticleAverageSite):
            row = [site.getParticle(0), site.getParticle(1), site.getParticle(0)]
            weight, cross = [site.getWeight(0), site.getWeight(1), 0.0], 0.0
        elif isinstance(site, openmm.ThreeParticleAverageSite):
            row = [site.getParticle(i) for i in range(3)]
            weight, cross = [site.getWeight(i) for i in range(3)], 0.0
        elif isinstance(site, openmm.OutOfPlaneSite):
            row = [site.getParticle(i) for i in range(3)]
            weight = [1.0 - site.getWeight12() - site.getWeight13(), site.getWeight12(), site.getWeight13()]
            cross = site.getWeightCross()
        else:
            raise UnsupportedOpenMMForceError(
                f"particle {particle} is a {type(site).__name__} virtual site; mindsponge supports "
                "TwoParticleAverageSite, ThreeParticleAverageSite and OutOfPlaneSite"
            )
        sites.append(particle)
        parents.append(row)
        weights.append(weight)
        cross_weights.append(cross)
    if not sites:
        return None
    return VirtualSites(sites, parents, weights, cross_weights)


def _check_file(path, what: str) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} file not found: {path!r}")
    return path


def load(system_xml, pdb, dtype: torch.dtype = torch.float64):
    """Load a serialized OpenMM ``System`` and the structure it describes.

    Positions come from the PDB; the box from the System's default periodic box vectors
    when it uses periodic boundary conditions (exactly what an OpenMM ``Context`` does),
    else ``None``; masses and charges from the System.

    Args:
        system_xml: path of an OpenMM ``System`` serialized with ``openmm.XmlSerializer``.
        pdb: path of the matching PDB file (same atoms, same order).
        dtype: floating dtype of positions and parameters (float64 by default).

    Returns:
        ``(system, forcefield)``: a :class:`mindsponge.system.System` and a
        :class:`~mindsponge.forcefield.ForceField` that carries the System's masses and
        constraints (see :func:`from_openmm`), which a Simulation applies by default.

    Raises:
        FileNotFoundError: a file is missing (the message names it).
        ValueError: the XML is not a serialized System, or the atom counts differ.
        UnsupportedOpenMMForceError: see :func:`from_openmm`.
    """
    import openmm

    system_xml = _check_file(system_xml, "OpenMM System XML")
    pdb = _check_file(pdb, "PDB")
    with open(system_xml) as handle:
        text = handle.read()
    try:
        openmm_system = openmm.XmlSerializer.deserialize(text)
    except Exception as error:
        raise ValueError(f"{system_xml!r} is not a serialized OpenMM object: {error}") from error
    if not isinstance(openmm_system, openmm.System):
        raise ValueError(f"{system_xml!r} holds a serialized {type(openmm_system).__name__}, not a System")
    return _system_from_openmm(openmm_system, pdb, dtype), from_openmm(openmm_system, dtype=dtype)


def _system_from_openmm(openmm_system, pdb, dtype):
    from mindsponge.system import System

    structure = System.from_pdb(pdb, dtype=dtype)
    if structure.positions.shape[0] != openmm_system.getNumParticles():
        raise ValueError(
            f"PDB {os.fspath(pdb)!r} has {structure.positions.shape[0]} atoms but the OpenMM System has "
            f"{openmm_system.getNumParticles()} particles"
        )
    masses = _masses(openmm_system, dtype)
    charges = _charges(openmm_system, dtype)
    box = _box(openmm_system, dtype)
    return structure.replace(masses=masses, charges=charges, box=box)


def _charges(openmm_system, dtype) -> torch.Tensor:
    import openmm

    charges = torch.zeros(openmm_system.getNumParticles(), dtype=dtype)
    for force in openmm_system.getForces():
        if isinstance(force, openmm.NonbondedForce):
            charges = torch.tensor(
                [_md(force.getParticleParameters(i)[0]) for i in range(force.getNumParticles())], dtype=dtype
            )
    return charges


def _box(openmm_system, dtype) -> torch.Tensor | None:
    if not openmm_system.usesPeriodicBoundaryConditions():
        return None
    vectors = openmm_system.getDefaultPeriodicBoxVectors()
    return torch.tensor([[_md(component) for component in vector] for vector in vectors], dtype=dtype)


def from_pdb_with_forcefield(
    pdb,
    forcefield_files: Sequence[str] = ("amber14-all.xml", "amber14/tip3pfb.xml"),
    dtype: torch.dtype = torch.float64,
    **create_system_options,
):
    """Parameterise a PDB with OpenMM force-field files and translate the result.

    Args:
        pdb: path of a PDB file whose residues the force field knows (with hydrogens).
        forcefield_files: OpenMM force-field XML files (``openmm.app.ForceField`` names).
        dtype: floating dtype of positions and parameters (float64 by default).
        **create_system_options: passed to ``openmm.app.ForceField.createSystem`` in OpenMM's
            units, e.g. ``nonbondedMethod=openmm.app.PME``, ``nonbondedCutoff=0.9 *
            openmm.unit.nanometer``, ``rigidWater=False``, ``constraints=None``.

    Returns:
        ``(system, forcefield, openmm_system)``: the :class:`mindsponge.system.System`, the
        :class:`~mindsponge.forcefield.ForceField`, and the OpenMM ``System`` it came from
        (for comparisons).
    """
    from openmm import app

    pdb = _check_file(pdb, "PDB")
    topology = app.PDBFile(pdb).topology
    openmm_system = app.ForceField(*forcefield_files).createSystem(topology, **create_system_options)
    return (
        _system_from_openmm(openmm_system, pdb, dtype),
        from_openmm(openmm_system, topology, dtype=dtype),
        openmm_system,
    )
