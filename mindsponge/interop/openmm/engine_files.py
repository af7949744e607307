"""Systems prepared for other MD engines: Amber ``prmtop``/``inpcrd``, GROMACS ``top``/``gro`` and
CHARMM ``psf``/``crd`` with parameter files, read by OpenMM's own readers.

Drug-discovery set-ups arrive in these formats (tleap with GAFF ligands, ``gmx pdb2gmx`` or
ACPYPE, CHARMM-GUI). Each loader hands the files to OpenMM (``openmm.app.AmberPrmtopFile`` and
``AmberInpcrdFile``, ``GromacsTopFile`` and ``GromacsGroFile``, ``CharmmPsfFile``, ``CharmmCrdFile``
and ``CharmmParameterSet``), builds the OpenMM ``System`` with ``createSystem`` and translates it
with :func:`~mindsponge.interop.openmm.from_openmm`, so the force field, masses (hydrogen mass
repartitioning included) and constraints are exactly those OpenMM would simulate.

System options are ``createSystem``'s keyword arguments under OpenMM's names, with two
conveniences: a plain number is read in MD units (``nonbondedCutoff=1.2`` nm, ``hydrogenMass=3.0``
amu, ``switchDistance`` nm, ``implicitSolventSaltConc`` mol/L, ``implicitSolventKappa`` 1/nm,
``temperature`` K), and ``nonbondedMethod``, ``constraints`` and ``implicitSolvent`` may be given by
name (``"PME"``, ``"HBonds"``, ``"OBC2"``); OpenMM's own objects and quantities are accepted as they
are. The defaults differ from OpenMM's where OpenMM's would surprise a simulation:

- ``nonbondedMethod``: ``PME`` when the coordinates carry a periodic box (and no implicit solvent
  is asked for), ``NoCutoff`` otherwise;
- ``nonbondedCutoff``: 1.0 nm;
- ``constraints``: ``HBonds`` (bonds to hydrogen rigid; water rigid through ``rigidWater=True``,
  OpenMM's default).

Amber's OBC2 implicit solvent without salt (``implicitSolvent="OBC2"``) is a ``GBSAOBCForce`` in
OpenMM; it is replaced by OpenMM's own equivalent ``CustomGBForce`` (``customgbforces.GBSAOBC2Force``,
the same charges, radii and screening factors), which mindsponge runs.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import os

import torch

from common.errors import ConfigurationError, DataError, MissingFileError, UnknownNameError
from mindsponge.interop.openmm.files import _box, _charges, _check_file
from mindsponge.interop.openmm.system import from_openmm, masses

__all__ = ["load_amber", "load_gromacs", "load_charmm"]

# options given by name: the option -> the names OpenMM's app module defines for it
_NAMED = {
    "nonbondedMethod": ("NoCutoff", "CutoffNonPeriodic", "CutoffPeriodic", "Ewald", "PME", "LJPME"),
    "constraints": ("HBonds", "AllBonds", "HAngles"),
    "implicitSolvent": ("HCT", "OBC1", "OBC2", "GBn", "GBn2"),
}
# options given as plain numbers: the option -> its MD unit (a name of openmm.unit, or a quotient)
_UNITS = {
    "nonbondedCutoff": "nanometer",
    "switchDistance": "nanometer",
    "hydrogenMass": "amu",
    "drudeMass": "amu",
    "temperature": "kelvin",
    "implicitSolventSaltConc": "molar",
    "implicitSolventKappa": "/nanometer",
}
_NOT_OPTIONS = {"self", "params", "verbose"}


def load_amber(prmtop, inpcrd, dtype: torch.dtype = torch.float64, *, return_openmm_system: bool = False,
               **system_options):
    """Load an Amber system (tleap's ``prmtop`` and ``inpcrd``/``rst7``) through OpenMM.

    Args:
        prmtop: path of the Amber topology (parameters included: GAFF ligands, ff14SB, TIP3P...).
        inpcrd: path of the matching coordinates (``inpcrd``, ``rst7`` or ``crd``); its box, when it
            has one, is the system's box (else the prmtop's, else none).
        dtype: floating dtype of positions and parameters (float64 by default).
        **system_options: ``AmberPrmtopFile.createSystem`` options under OpenMM's names (see the
            module docstring for the defaults and plain-number units), e.g. ``nonbondedMethod="PME"``,
            ``nonbondedCutoff=0.9`` (nm), ``constraints="HBonds"`` or ``None``, ``rigidWater=True``,
            ``hydrogenMass=3.0`` (amu), ``ewaldErrorTolerance=5e-4``, ``switchDistance=0.8`` (nm),
            ``implicitSolvent="OBC2"`` (with ``soluteDielectric``, ``solventDielectric``,
            ``implicitSolventSaltConc``), ``removeCMMotion=True``.

    Returns:
        ``(system, forcefield)`` as :func:`~mindsponge.interop.openmm.load` returns them: a
        :class:`mindsponge.system.System` (positions ``(N, 3)`` nm, masses ``(N,)`` amu from the OpenMM
        System, charges ``(N,)`` e, box ``(3, 3)`` nm or ``None``, the prmtop's topology) and a
        :class:`~mindsponge.forcefield.ForceField` carrying the System's masses and constraints; with
        ``return_openmm_system=True`` also the ``openmm.System`` itself, third (for
        :func:`mindsponge.alchemy.alchemical_force_field`).

    Raises:
        MissingFileError: a file is missing (named).
        DataError: OpenMM cannot read a file, or the atom counts of the two files differ (both named).
        UnknownNameError: an option ``createSystem`` does not take (the close names and all are listed).
        ConfigurationError: an option value OpenMM refuses (PME without a box, a cutoff with GBSA...).
        UnsupportedOpenMMForceError: see :func:`~mindsponge.interop.openmm.from_openmm`.
    """
    from openmm import app

    prmtop = _check_file(prmtop, "Amber prmtop")
    inpcrd = _check_file(inpcrd, "Amber coordinate (inpcrd)")
    topology_file = _read(app.AmberPrmtopFile, prmtop, "Amber prmtop")
    coordinates = _read(app.AmberInpcrdFile, inpcrd, "Amber coordinate (inpcrd)")
    _check_counts(prmtop, topology_file.topology.getNumAtoms(), inpcrd, len(coordinates.positions))
    box = coordinates.boxVectors
    if box is not None:
        topology_file.topology.setPeriodicBoxVectors(box)
    openmm_system = _create_system(topology_file, prmtop, "load_amber", system_options)
    return _translate(_obc2_as_custom_gb(openmm_system), topology_file.topology, coordinates.positions, dtype,
                      return_openmm_system)


def load_gromacs(top, gro, include_dir=None, defines: dict | None = None, dtype: torch.dtype = torch.float64,
                 *, return_openmm_system: bool = False, **system_options):
    """Load a GROMACS system (``top`` and ``gro``) through OpenMM.

    Args:
        top: path of the GROMACS topology. ``#include``\\ d files are looked for next to the file that
            includes them, then in ``include_dir``.
        gro: path of the matching coordinates; its box (the last line) is the system's box (a box
            line of zeros: no periodic box).
        include_dir: the folder holding the force-field files the topology includes (GROMACS's
            ``share/gromacs/top``, or a folder with ``amber99sb-ildn.ff/``...); by default OpenMM's
            guess of the GROMACS installation. OpenMM's ``GromacsTopFile`` searches one such folder.
        defines: preprocessor symbols for ``#ifdef`` blocks (``{"POSRES": ""}``, ``{"FLEXIBLE": ""}``).
        dtype: floating dtype of positions and parameters (float64 by default).
        **system_options: ``GromacsTopFile.createSystem`` options under OpenMM's names (see the
            module docstring): ``nonbondedMethod``, ``nonbondedCutoff`` (nm), ``constraints``,
            ``rigidWater``, ``hydrogenMass`` (amu), ``ewaldErrorTolerance``, ``switchDistance`` (nm),
            ``useDispersionCorrection``, ``removeCMMotion``.

    Returns:
        ``(system, forcefield)``, as :func:`load_amber`.

    Raises:
        MissingFileError: a file or the include folder is missing (named).
        DataError: OpenMM cannot read a file (a missing ``#include`` included), or the gro's atom
            count differs from the topology's (both named).
        UnknownNameError, ConfigurationError, UnsupportedOpenMMForceError: as :func:`load_amber`.
    """
    from openmm import app, unit

    top = _check_file(top, "GROMACS topology (top)")
    gro = _check_file(gro, "GROMACS coordinate (gro)")
    if include_dir is not None:
        include_dir = os.fspath(include_dir)
        if not os.path.isdir(include_dir):
            raise MissingFileError(f"GROMACS include folder not found: {include_dir!r}")
    coordinates = _read(app.GromacsGroFile, gro, "GROMACS coordinate (gro)")
    box = coordinates.getPeriodicBoxVectors()
    if box is not None and not any(any(vector) for vector in box.value_in_unit(unit.nanometer)):
        box = None  # an all-zero box line: a system without periodicity
    topology_file = _read(app.GromacsTopFile, top, "GROMACS topology (top)", periodicBoxVectors=box,
                          includeDir=include_dir, defines=defines)
    _check_counts(top, topology_file.topology.getNumAtoms(), gro, len(coordinates.positions))
    openmm_system = _create_system(topology_file, top, "load_gromacs", system_options)
    return _translate(openmm_system, topology_file.topology, coordinates.positions, dtype,
                      return_openmm_system)


def load_charmm(psf, crd, params, box=None, dtype: torch.dtype = torch.float64, *,
                return_openmm_system: bool = False, **system_options):
    """Load a CHARMM system (CHARMM-GUI's ``psf``, ``crd`` and parameter files) through OpenMM.

    Args:
        psf: path of the CHARMM (or X-PLOR) ``psf``.
        crd: path of the matching CHARMM coordinate file (``crd``, standard or extended).
        params: path, or sequence of paths, of the parameter files (``.prm``, ``.par``, ``.rtf``,
            ``.str``; CHARMM-GUI's ``toppar`` files), read together by ``CharmmParameterSet``.
        box: the periodic box, which a psf/crd pair does not carry: ``(3,)`` edge lengths of a
            rectangular box or ``(3, 3)`` box vectors (rows a, b, c), nm (CHARMM-GUI writes them
            in ``step*.str`` as ``A``, ``B``, ``C``, in Angstrom); ``None``: not periodic.
        dtype: floating dtype of positions and parameters (float64 by default).
        **system_options: ``CharmmPsfFile.createSystem`` options under OpenMM's names (see the
            module docstring): ``nonbondedMethod``, ``nonbondedCutoff`` (nm), ``switchDistance``
            (nm; CHARMM-GUI uses 1.0 with a 1.2 nm cutoff), ``constraints``, ``rigidWater``,
            ``hydrogenMass`` (amu), ``ewaldErrorTolerance``, ``implicitSolvent``, ``removeCMMotion``.

    Returns:
        ``(system, forcefield)``, as :func:`load_amber`.

    Raises:
        MissingFileError: a file is missing (named).
        DataError: OpenMM cannot read a file, or the crd's atom count differs from the psf's (both named).
        ConfigurationError: a box of the wrong shape or not positive, or an option value OpenMM refuses.
        UnknownNameError, UnsupportedOpenMMForceError: as :func:`load_amber`.
    """
    from openmm import Vec3, app, unit

    psf = _check_file(psf, "CHARMM psf")
    crd = _check_file(crd, "CHARMM coordinate (crd)")
    params = [params] if isinstance(params, (str, os.PathLike)) else list(params)
    if not params:
        raise ConfigurationError("load_charmm needs at least one CHARMM parameter file (params)")
    params = [_check_file(path, "CHARMM parameter") for path in params]
    vectors = None
    if box is not None:
        rows = _box_rows(box)
        vectors = [Vec3(*row) for row in rows] * unit.nanometer
    topology_file = _read(app.CharmmPsfFile, psf, "CHARMM psf", periodicBoxVectors=vectors)
    coordinates = _read(app.CharmmCrdFile, crd, "CHARMM coordinate (crd)")
    _check_counts(psf, topology_file.topology.getNumAtoms(), crd, len(coordinates.positions))
    try:
        parameters = app.CharmmParameterSet(*params)
    except Exception as error:
        raise DataError(f"OpenMM cannot read the CHARMM parameter files {params}: {error}") from error
    openmm_system = _create_system(topology_file, psf, "load_charmm", system_options, parameters)
    return _translate(openmm_system, topology_file.topology, coordinates.positions, dtype,
                      return_openmm_system)


def _box_rows(box) -> list[list[float]]:
    """A CHARMM box as three rows of nm: from ``(3,)`` edge lengths or ``(3, 3)`` vectors."""
    rows = torch.as_tensor(box, dtype=torch.float64)
    if rows.shape == (3,):
        rows = torch.diag(rows)
    if rows.shape != (3, 3) or not bool(torch.isfinite(rows).all()) or not bool((rows.diagonal() > 0).all()):
        raise ConfigurationError(
            f"box must be (3,) edge lengths or (3, 3) box vectors in nm with positive diagonal, got {box!r}")
    return rows.tolist()


def _read(reader, path: str, what: str, **arguments):
    """``reader(path, **arguments)``, its failures named with the file."""
    try:
        return reader(path, **arguments)
    except Exception as error:
        raise DataError(f"OpenMM's {reader.__name__} cannot read the {what} file {path!r}: "
                        f"{type(error).__name__}: {error}") from error


def _check_counts(topology_path: str, topology_atoms: int, coordinates_path: str, coordinate_atoms: int):
    if topology_atoms != coordinate_atoms:
        raise DataError(
            f"{coordinates_path!r} holds {coordinate_atoms} atoms but the topology {topology_path!r} has "
            f"{topology_atoms}: give the coordinates written with this topology")


def _create_system(topology_file, path: str, caller: str, given: dict, *leading):
    """``topology_file.createSystem`` with the defaults of the module docstring and ``given`` options."""
    from openmm import app

    accepted = [name for name in inspect.signature(topology_file.createSystem).parameters
                if name not in _NOT_OPTIONS]
    for name in given:
        if name not in accepted:
            close = difflib.get_close_matches(name, accepted, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnknownNameError(
                f"{caller}: {type(topology_file).__name__}.createSystem takes no option {name!r}{hint}; "
                f"it takes {', '.join(accepted)}")
    options = {name: _option_value(caller, name, value) for name, value in given.items()}
    periodic = topology_file.topology.getPeriodicBoxVectors() is not None
    implicit = options.get("implicitSolvent") is not None
    options.setdefault("nonbondedMethod", app.PME if periodic and not implicit else app.NoCutoff)
    if options["nonbondedMethod"] is not app.NoCutoff:
        options.setdefault("nonbondedCutoff", _option_value(caller, "nonbondedCutoff", 1.0))
    options.setdefault("constraints", app.HBonds)
    try:
        return topology_file.createSystem(*leading, **options)
    except Exception as error:
        shown = ", ".join(f"{name}={value}" for name, value in options.items())
        raise ConfigurationError(
            f"{caller}: OpenMM cannot build a System from {path!r} with {shown}: "
            f"{type(error).__name__}: {error}") from error


def _option_value(caller: str, name: str, value):
    """An option in OpenMM's terms: names of methods to OpenMM's objects, plain numbers to quantities."""
    from openmm import app, unit

    if name in _NAMED and isinstance(value, str):
        if value not in _NAMED[name]:
            raise ConfigurationError(
                f"{caller}: {name}={value!r} is not one of {', '.join(_NAMED[name])}"
                + (" (or None)" if name in ("constraints", "implicitSolvent") else ""))
        return getattr(app, value)
    if name in _UNITS and isinstance(value, (int, float)) and not isinstance(value, bool):
        md_unit = _UNITS[name]
        if md_unit.startswith("/"):
            return value / getattr(unit, md_unit[1:])
        return value * getattr(unit, md_unit)
    return value


def _obc2_as_custom_gb(openmm_system):
    """The System with its ``GBSAOBCForce`` (Amber's OBC2) replaced by OpenMM's equivalent
    ``CustomGBForce`` (``customgbforces.GBSAOBC2Force``), at the same index; others unchanged."""
    import openmm
    from openmm.app.internal import customgbforces

    forces = list(openmm_system.getForces())
    if not any(isinstance(force, openmm.GBSAOBCForce) for force in forces):
        return openmm_system
    replaced = []
    for force in forces:
        if isinstance(force, openmm.GBSAOBCForce):
            force = _custom_obc2(force, customgbforces)
        else:
            force = copy.deepcopy(force)
        replaced.append(force)
    while openmm_system.getNumForces():
        openmm_system.removeForce(openmm_system.getNumForces() - 1)
    for force in replaced:
        openmm_system.addForce(force)
    return openmm_system


def _custom_obc2(force, customgbforces):
    import openmm
    from openmm import unit

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
    custom.finalize()
    if cutoff is not None:
        custom.setNonbondedMethod(openmm.CustomGBForce.CutoffPeriodic if periodic
                                  else openmm.CustomGBForce.CutoffNonPeriodic)
        custom.setCutoffDistance(cutoff)
    custom.setForceGroup(force.getForceGroup())
    return custom


def _translate(openmm_system, openmm_topology, positions, dtype, return_openmm_system=False):
    """``(System, ForceField)`` of an OpenMM System, its topology and positions (a quantity); with
    ``return_openmm_system``, ``(System, ForceField, openmm_system)`` (as ``from_pdb_with_forcefield``)."""
    from openmm import unit

    from mindsponge.system import System
    from mindsponge.topology import Topology

    coordinates = torch.tensor(positions.value_in_unit(unit.nanometer), dtype=dtype)
    system = System(
        positions=coordinates,
        masses=masses(openmm_system, dtype),
        charges=_charges(openmm_system, dtype),
        box=_box(openmm_system, dtype),
        topology=Topology.from_openmm(openmm_topology),
    )
    forcefield = from_openmm(openmm_system, openmm_topology, dtype=dtype)
    return (system, forcefield, openmm_system) if return_openmm_system else (system, forcefield)
