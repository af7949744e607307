"""An OpenMM ``System`` read as a whole: its forces term by term, its masses, constraints and
virtual sites."""

from __future__ import annotations

import torch

from common.errors import ArgumentTypeError, ConfigurationError
from mindsponge.forcefield.base import EnergyTerm, ForceField, VirtualSites
from mindsponge.interop.openmm import custom, obc, standard
from mindsponge.interop.openmm.reading import UnsupportedOpenMMForceError, md, unsupported

# OpenMM force class -> converter(index, force, dtype) -> EnergyTerm
_CONVERTERS = {
    "HarmonicBondForce": standard.bond_term,
    "HarmonicAngleForce": standard.angle_term,
    "PeriodicTorsionForce": standard.torsion_term,
    "CustomTorsionForce": standard.custom_torsion_term,
    "CMAPTorsionForce": standard.cmap_term,
    "NonbondedForce": standard.nonbonded_term,
    "CustomBondForce": custom.custom_bonded_term,
    "CustomAngleForce": custom.custom_bonded_term,
    "CustomExternalForce": custom.custom_bonded_term,
    "CustomCompoundBondForce": custom.custom_bonded_term,
    "CustomCentroidBondForce": custom.custom_centroid_term,
    "CustomNonbondedForce": custom.custom_nonbonded_term,
    "CustomGBForce": custom.custom_gb_term,
    "GBSAOBCForce": obc.obc_term,  # Amber's OBC2, as its CustomGBForce form
}
# forces that are not energy terms: how a run uses them (see _dynamics)
_DYNAMICS = {"CMMotionRemover", "MonteCarloBarostat", "MonteCarloAnisotropicBarostat"}
# forces refused with what to use instead
_INSTEAD = {
    "AndersenThermostat": "remove it and run with integrator=ms.integrators.LangevinMiddle(dt, "
                          "temperature, friction), or VelocityVerlet(dt, "
                          "thermostat=ms.thermostats.Bussi(temperature, 0.1))",
    "MonteCarloMembraneBarostat": "remove it and pass barostat=ms.barostats.MonteCarloAnisotropicBarostat("
                                  "pressure, temperature, scale_z=...) to the Simulation",
    "MonteCarloFlexibleBarostat": "remove it and pass barostat=ms.barostats.MonteCarloAnisotropicBarostat("
                                  "pressure, temperature) to the Simulation",
    "DrudeForce": "Drude polarisable force fields are not supported; use a fixed-charge force field",
}


def check_dtype(caller: str, dtype) -> None:
    """Refuse a dtype other than float32 and float64 (integers would truncate coordinates and
    charges, half precision overflows), naming the caller."""
    if dtype not in (torch.float32, torch.float64):
        raise ArgumentTypeError(f"{caller}: dtype must be torch.float32 or torch.float64, got {dtype!r}")


def from_openmm(openmm_system, topology=None, dtype: torch.dtype = torch.float64) -> ForceField:
    """Translate an OpenMM ``System`` into a :class:`~mindsponge.forcefield.ForceField`.

    Args:
        openmm_system: an ``openmm.System``.
        topology: optional ``openmm.app.Topology`` or :class:`mindsponge.system.Topology`; when
            given, its atom count must match the System's.
        dtype: floating dtype of the parameters (float64 by default, exact for OpenMM's values). Use
            ``ff.to(dtype)`` to change it later.

    Returns:
        A :class:`~mindsponge.forcefield.ForceField` with one term per OpenMM energy force (in the
        System's order). ``term.openmm_force_index`` is the
        index of the source force. Virtual sites (two/three-particle average, out-of-plane:
        TIP4P, TIP5P) become the force field's :class:`~mindsponge.forcefield.VirtualSites`.
        The System is the truth for the dynamics too: ``forcefield.masses`` holds its particle
        masses (hydrogen mass repartitioning included, float64 amu) and
        ``forcefield.constraints`` its constraints (a
        :class:`~mindsponge.forcefield.SystemConstraints`: pairs, the System's distances, and
        which of them no energy term holds), or ``None`` without constraints;
        ``forcefield.barostat`` its ``MonteCarloBarostat`` or ``MonteCarloAnisotropicBarostat`` as a
        :mod:`mindsponge.barostats` barostat (``None`` without one); and
        ``forcefield.remove_center_of_mass_motion`` whether it holds a ``CMMotionRemover``. A
        :class:`~mindsponge.simulation.Simulation` uses all of them by default, as an OpenMM
        ``Context`` does (set ``forcefield.barostat = None`` for constant volume).

    Raises:
        TypeError: ``openmm_system`` is not an ``openmm.System``.
        UnsupportedOpenMMForceError: a force, or an option of one, has no mindsponge
            equivalent (the message names the force, what to use instead where there is something,
            and what is supported).
        ValueError: the topology does not match the System.
    """
    import openmm

    if not isinstance(openmm_system, openmm.System):
        raise ArgumentTypeError(f"from_openmm expects an openmm.System, got {type(openmm_system).__name__}")
    check_dtype("from_openmm", dtype)
    if topology is not None:
        atoms = topology.n_atoms if hasattr(topology, "n_atoms") else topology.getNumAtoms()
        if atoms != openmm_system.getNumParticles():
            raise ConfigurationError(
                f"topology has {atoms} atoms but the OpenMM System has "
                f"{openmm_system.getNumParticles()} particles"
            )
    _refuse_unsupported(openmm_system)
    terms: list[EnergyTerm] = []
    counts: dict[str, int] = {}
    for index, force in enumerate(openmm_system.getForces()):
        kind = type(force).__name__
        if kind in _DYNAMICS:
            continue
        term = _CONVERTERS[kind](index, force, dtype)
        base_name = term.name if force.getName() == kind else force.getName()
        counts[base_name] = counts.get(base_name, 0) + 1
        term.name = base_name if counts[base_name] == 1 else f"{base_name}_{counts[base_name]}"
        term.openmm_force_index = index
        terms.append(term)
    forcefield = ForceField(
        terms,
        virtual_sites=_virtual_sites(openmm_system),
        masses=masses(openmm_system, torch.float64),
        constraints=_system_constraints(openmm_system),
    )
    forcefield.barostat, forcefield.remove_center_of_mass_motion = _dynamics(openmm_system)
    return forcefield


def _refuse_unsupported(openmm_system) -> None:
    """Refuse the first force that has no mindsponge equivalent, before reading any (so that a Drude System
    is refused as Drude, not by an option of another force), saying what to use instead where there is
    something."""
    for index, force in enumerate(openmm_system.getForces()):
        kind = type(force).__name__
        if kind in _INSTEAD:
            raise unsupported(index, force, f"not supported: {_INSTEAD[kind]}")
        if kind not in _CONVERTERS and kind not in _DYNAMICS:
            raise unsupported(index, force, "this force type is not supported")


def _dynamics(openmm_system):
    """``(barostat, remove_center_of_mass_motion)`` of the System's non-energy forces: its
    ``MonteCarloBarostat`` or ``MonteCarloAnisotropicBarostat`` as a :mod:`mindsponge.barostats` barostat (or
    ``None``), and whether it holds a ``CMMotionRemover`` (OpenMM then removes the centre-of-mass motion)."""
    from openmm import unit

    from mindsponge import barostats

    barostat, remover = None, False
    for force in openmm_system.getForces():
        kind = type(force).__name__
        if kind == "CMMotionRemover":
            remover = True
        elif kind == "MonteCarloBarostat":
            barostat = barostats.MonteCarloBarostat(force.getDefaultPressure().value_in_unit(unit.bar),
                                                    force.getDefaultTemperature().value_in_unit(unit.kelvin),
                                                    every=force.getFrequency())
        elif kind == "MonteCarloAnisotropicBarostat":
            pressure = tuple(force.getDefaultPressure().value_in_unit(unit.bar))
            temperature = force.getDefaultTemperature().value_in_unit(unit.kelvin)
            barostat = barostats.MonteCarloAnisotropicBarostat(
                pressure, temperature, every=force.getFrequency(),
                scale_x=force.getScaleX(), scale_y=force.getScaleY(), scale_z=force.getScaleZ())
    return barostat, remover


def masses(openmm_system, dtype) -> torch.Tensor:
    """The System's particle masses ``(N,)``, amu (zero for virtual sites)."""
    return torch.tensor(
        [md(openmm_system.getParticleMass(i)) for i in range(openmm_system.getNumParticles())], dtype=dtype
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
    distances = torch.tensor([md(row[2]) for row in rows], dtype=torch.float64)
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

