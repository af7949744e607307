"""Shared OpenMM-built test systems and an OpenMM Reference-platform evaluator.

Systems are small (a few hundred to ~2,000 atoms) and built once per session:

- ``villin_vacuum``: villin headpiece (584 atoms, from openmm's ``test.pdb``) with amber14,
  no cutoff, flexible bonds;
- ``water_box(method, rigid)``: a 2.2 nm TIP3P-FB box (~1,000 atoms) made by
  ``Modeller.addSolvent``, PME / reaction field (``CutoffPeriodic``) / Ewald;
- ``solvated_villin``: villin with the waters of ``test.pdb`` within 0.35 nm of it, in
  the original periodic box, PME.

``openmm_reference(openmm_system, positions, box)`` evaluates energies per force (one force
group per force, the reciprocal space of a NonbondedForce in its own group) and total forces
on OpenMM's Reference platform (float64), with virtual sites placed from their parents.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import numpy as np
import pytest

openmm = pytest.importorskip("openmm")
from openmm import app, unit  # noqa: E402

DATA = os.path.join(os.path.dirname(app.__file__), "data")
FORCEFIELD_FILES = ("amber14-all.xml", "amber14/tip3pfb.xml")
CUTOFF = 0.9  # nm


@dataclass
class OpenMMCase:
    """An OpenMM System with positions (nm, (N, 3)) and box (nm, (3, 3) or None)."""

    system: object
    topology: object
    positions: np.ndarray
    box: np.ndarray | None


@dataclass
class OpenMMResult:
    """Energies per force index (kJ/mol), the reciprocal-space energy, and forces (kJ/mol/nm)."""

    energies: dict[int, float]
    reciprocal: float
    forces: np.ndarray
    total: float
    pme_parameters: tuple | None


def openmm_reference(openmm_system, positions: np.ndarray, box: np.ndarray | None = None) -> OpenMMResult:
    """Per-force energies and total forces on OpenMM's Reference platform."""
    system = copy.deepcopy(openmm_system)
    forces = system.getForces()
    reciprocal_group = len(forces)
    assert reciprocal_group < 32
    for index, force in enumerate(forces):
        force.setForceGroup(index)
        if isinstance(force, openmm.NonbondedForce):
            force.setReciprocalSpaceForceGroup(reciprocal_group)
    context = openmm.Context(
        system, openmm.VerletIntegrator(1e-3), openmm.Platform.getPlatformByName("Reference")
    )
    if box is not None:
        context.setPeriodicBoxVectors(*[openmm.Vec3(*row) for row in box])
    context.setPositions(positions)
    context.computeVirtualSites()  # as an integrator does: sites follow their parents
    energies = {
        index: context.getState(getEnergy=True, groups={index})
        .getPotentialEnergy()
        .value_in_unit(unit.kilojoule_per_mole)
        for index in range(len(forces))
    }
    reciprocal = (
        context.getState(getEnergy=True, groups={reciprocal_group})
        .getPotentialEnergy()
        .value_in_unit(unit.kilojoule_per_mole)
    )
    state = context.getState(getEnergy=True, getForces=True)
    pme_parameters = None
    for force in forces:
        if (
            isinstance(force, openmm.NonbondedForce)
            and force.getNonbondedMethod() == openmm.NonbondedForce.PME
        ):
            pme_parameters = force.getPMEParametersInContext(context)
    return OpenMMResult(
        energies=energies,
        reciprocal=reciprocal,
        forces=state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer),
        total=state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole),
        pme_parameters=pme_parameters,
    )


def _positions(modeller) -> np.ndarray:
    return np.array(modeller.getPositions().value_in_unit(unit.nanometer))


def _box(openmm_system) -> np.ndarray | None:
    if not openmm_system.usesPeriodicBoundaryConditions():
        return None
    return np.array(
        [list(v.value_in_unit(unit.nanometer)) for v in openmm_system.getDefaultPeriodicBoxVectors()]
    )


@pytest.fixture(scope="session")
def amber14():
    return app.ForceField(*FORCEFIELD_FILES)


@pytest.fixture(scope="session")
def villin_pdb():
    return app.PDBFile(os.path.join(DATA, "test.pdb"))


@pytest.fixture(scope="session")
def villin_vacuum(amber14, villin_pdb) -> OpenMMCase:
    modeller = app.Modeller(villin_pdb.topology, villin_pdb.positions)
    modeller.deleteWater()
    system = amber14.createSystem(modeller.topology, nonbondedMethod=app.NoCutoff, constraints=None)
    return OpenMMCase(system, modeller.topology, _positions(modeller), None)


@pytest.fixture(scope="session")
def solvated_villin(amber14, villin_pdb) -> OpenMMCase:
    modeller = app.Modeller(villin_pdb.topology, villin_pdb.positions)
    positions = _positions(modeller)
    solute = np.array([atom.index for atom in modeller.topology.atoms() if atom.residue.name != "HOH"])
    far_waters = []
    for residue in modeller.topology.residues():
        if residue.name != "HOH":
            continue
        oxygen = positions[[atom.index for atom in residue.atoms()][0]]
        if np.min(np.linalg.norm(positions[solute] - oxygen, axis=1)) > 0.35:
            far_waters.append(residue)
    modeller.delete(far_waters)
    system = amber14.createSystem(
        modeller.topology,
        nonbondedMethod=app.PME,
        nonbondedCutoff=CUTOFF * unit.nanometer,
        constraints=None,
        rigidWater=False,
    )
    return OpenMMCase(system, modeller.topology, _positions(modeller), _box(system))


@pytest.fixture(scope="session")
def water_box(amber14):
    """Factory: ``water_box(method="PME", rigid=True, size=2.2, **createSystem options)``."""
    cache = {}

    def build(method: str = "PME", rigid: bool = True, size: float = 2.2, **options) -> OpenMMCase:
        key = (method, rigid, size, repr(sorted(options.items())))
        if key not in cache:
            if size not in cache:
                modeller = app.Modeller(app.Topology(), [])
                modeller.addSolvent(
                    amber14, model="tip3p", boxSize=openmm.Vec3(size, size, size) * unit.nanometer
                )
                cache[size] = modeller
            modeller = cache[size]
            system = amber14.createSystem(
                modeller.topology,
                nonbondedMethod=getattr(app, method),
                nonbondedCutoff=CUTOFF * unit.nanometer,
                rigidWater=rigid,
                constraints=None,
                **options,
            )
            cache[key] = OpenMMCase(system, modeller.topology, _positions(modeller), _box(system))
        return cache[key]

    return build


@pytest.fixture(scope="session")
def reference():
    """The :func:`openmm_reference` evaluator."""
    return openmm_reference
