"""OpenMM Systems from files: a serialized ``System`` with its PDB, or a PDB parameterised with
OpenMM force-field files."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from common.errors import ConfigurationError, MissingFileError
from mindsponge.interop.openmm.reading import md
from mindsponge.interop.openmm.system import from_openmm, masses


def _check_file(path, what: str) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MissingFileError(f"{what} file not found: {path!r}")
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
        raise ConfigurationError(f"{system_xml!r} is not a serialized OpenMM object: {error}") from error
    if not isinstance(openmm_system, openmm.System):
        raise ConfigurationError(
            f"{system_xml!r} holds a serialized {type(openmm_system).__name__}, not a System")
    return _system_from_openmm(openmm_system, pdb, dtype), from_openmm(openmm_system, dtype=dtype)


def _system_from_openmm(openmm_system, pdb, dtype):
    from mindsponge.system import System

    structure = System.from_pdb(pdb, dtype=dtype)
    if structure.positions.shape[0] != openmm_system.getNumParticles():
        raise ConfigurationError(
            f"PDB {os.fspath(pdb)!r} has {structure.positions.shape[0]} atoms but the OpenMM System has "
            f"{openmm_system.getNumParticles()} particles"
        )
    charges = _charges(openmm_system, dtype)
    box = _box(openmm_system, dtype)
    return structure.replace(masses=masses(openmm_system, dtype), charges=charges, box=box)


def _charges(openmm_system, dtype) -> torch.Tensor:
    import openmm

    charges = torch.zeros(openmm_system.getNumParticles(), dtype=dtype)
    for force in openmm_system.getForces():
        if isinstance(force, openmm.NonbondedForce):
            charges = torch.tensor(
                [md(force.getParticleParameters(i)[0]) for i in range(force.getNumParticles())], dtype=dtype
            )
    return charges


def _box(openmm_system, dtype) -> torch.Tensor | None:
    if not openmm_system.usesPeriodicBoundaryConditions():
        return None
    vectors = openmm_system.getDefaultPeriodicBoxVectors()
    return torch.tensor([[md(component) for component in vector] for vector in vectors], dtype=dtype)


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
