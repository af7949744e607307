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
OpenMM; it is replaced by OpenMM's ``CustomGBForce`` form of it (``customgbforces.GBSAOBC2Force``, the
same charges, radii and screening factors), which mindsponge runs. That form lacks one term of
``GBSAOBCForce``'s Born integral, the one for an atom engulfed by another's scaled sphere (a clash
near a sulfur, whose scaled radius is large); it is added back (:mod:`mindsponge.interop.openmm.obc`),
so the two agree also there.

The coordinates must be those of the topology, atom by atom: besides the atom counts, a gro's or
crd's atom names are compared with the topology's (a swapped pair of lines is refused, naming the
line), and every per-atom section of a prmtop must hold one value per atom (a truncated file is
refused, naming the section).
"""

from __future__ import annotations

import difflib
import inspect
import numbers
import os

import torch

from common.errors import ConfigurationError, DataError, MissingFileError, UnknownNameError
from mindsponge.interop.openmm.files import _box, _charges, _check_file
from mindsponge.interop.openmm.obc import obc2_as_custom_gb
from mindsponge.interop.openmm.system import check_dtype, from_openmm, masses

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
_LOADER_ARGUMENTS = {"load_amber": ("dtype", "return_openmm_system"),
                     "load_gromacs": ("include_dir", "defines", "dtype", "return_openmm_system"),
                     "load_charmm": ("box", "dtype", "return_openmm_system")}
# the per-atom sections of a prmtop (each holds one value per atom when present)
_PER_ATOM_SECTIONS = ("ATOM_NAME", "CHARGE", "ATOMIC_NUMBER", "MASS", "ATOM_TYPE_INDEX",
                      "NUMBER_EXCLUDED_ATOMS", "AMBER_ATOM_TYPE", "TREE_CHAIN_CLASSIFICATION", "JOIN_ARRAY",
                      "IROTAT", "RADII", "SCREEN")


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
        :func:`mindsponge.alchemy.alchemical_force_field`), with an OBC2 ``GBSAOBCForce`` already replaced
        by the ``CustomGBForce`` mindsponge runs (:mod:`~mindsponge.interop.openmm.obc`): compare with
        ``AmberPrmtopFile.createSystem``'s own System to check the two against each other.

    Raises:
        MissingFileError: a file is missing (named).
        DataError: OpenMM cannot read a file, or the atom counts of the two files differ (both named).
        UnknownNameError: an option ``createSystem`` does not take (the close names and all are listed).
        ConfigurationError: an option value OpenMM refuses (PME without a box, a cutoff with GBSA...).
        UnsupportedOpenMMForceError: see :func:`~mindsponge.interop.openmm.from_openmm`.
    """
    from openmm import app

    check_dtype("load_amber", dtype)
    prmtop = _check_file(prmtop, "Amber prmtop")
    inpcrd = _check_file(inpcrd, "Amber coordinate (inpcrd)")
    topology_file = _read(app.AmberPrmtopFile, prmtop, "Amber prmtop")
    _check_prmtop_sections(topology_file, prmtop)
    coordinates = _read(app.AmberInpcrdFile, inpcrd, "Amber coordinate (inpcrd)")
    _check_counts(prmtop, topology_file.topology.getNumAtoms(), inpcrd, len(coordinates.positions))
    box = coordinates.boxVectors
    if box is not None:
        topology_file.topology.setPeriodicBoxVectors(box)
    openmm_system = _create_system(topology_file, prmtop, "load_amber", system_options)
    return _translate(obc2_as_custom_gb(openmm_system), topology_file.topology, coordinates.positions, dtype,
                      return_openmm_system, inpcrd)


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

    check_dtype("load_gromacs", dtype)
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
    searched = f" (include folder {include_dir!r})" if include_dir else \
        " (no include_dir given: OpenMM's guess of the GROMACS installation was searched)"
    topology_file = _read(app.GromacsTopFile, top, "GROMACS topology (top)", periodicBoxVectors=box,
                          includeDir=include_dir, defines=defines, note=searched)
    _check_counts(top, topology_file.topology.getNumAtoms(), gro, len(coordinates.positions))
    # a gro line: residue number and name, atom name (5 characters each); names cut to 5 characters
    _check_names(top, topology_file.topology, gro,
                 [(residue, atom) for residue, atom in zip(coordinates.residueNames, coordinates.atomNames,
                                                           strict=True)], first_line=3, width=5)
    openmm_system = _create_system(topology_file, top, "load_gromacs", system_options)
    return _translate(openmm_system, topology_file.topology, coordinates.positions, dtype,
                      return_openmm_system, gro)


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

    check_dtype("load_charmm", dtype)
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
    _check_names(psf, topology_file.topology, crd, _crd_names(crd), first_line=None, width=None)
    try:
        parameters = app.CharmmParameterSet(*params)
    except Exception as error:
        raise DataError(f"OpenMM cannot read the CHARMM parameter files {params}: {error}") from error
    openmm_system = _create_system(topology_file, psf, "load_charmm", system_options, parameters,
                                   parameter_files=params)
    return _translate(openmm_system, topology_file.topology, coordinates.positions, dtype,
                      return_openmm_system, crd)


def _box_rows(box) -> list[list[float]]:
    """A CHARMM box as three rows of nm: from ``(3,)`` edge lengths or ``(3, 3)`` vectors."""
    from openmm import unit

    if unit.is_quantity(box):
        box = box.value_in_unit(unit.nanometer)
    rows = torch.as_tensor(box, dtype=torch.float64)
    if rows.shape == (3,):
        rows = torch.diag(rows)
    if rows.shape != (3, 3) or not bool(torch.isfinite(rows).all()) or not bool((rows.diagonal() > 0).all()):
        raise ConfigurationError(
            f"box must be (3,) edge lengths or (3, 3) box vectors in nm with positive diagonal, got {box!r}")
    return rows.tolist()


def _read(reader, path: str, what: str, note: str = "", **arguments):
    """``reader(path, **arguments)``, its failures named with the file (and ``note`` added)."""
    try:
        return reader(path, **arguments)
    except Exception as error:
        hint = ""
        if reader.__name__ == "AmberPrmtopFile" and isinstance(error, IndexError | KeyError):
            hint = (" (a truncated file, or a prmtop older than Amber 7 without %FLAG sections: ParmEd "
                    "converts those)")
        raise DataError(f"OpenMM's {reader.__name__} cannot read the {what} file {path!r}: "
                        f"{type(error).__name__}: {error}{note}{hint}") from error


def _check_prmtop_sections(topology_file, path: str) -> None:
    """Refuse a prmtop whose per-atom sections do not hold one value per atom (a truncated file:
    OpenMM's reader would pair the short list with the first atoms and give the rest defaults)."""
    raw = topology_file._prmtop._raw_data
    atoms = topology_file.topology.getNumAtoms()
    for section in _PER_ATOM_SECTIONS:
        if section in raw and len(raw[section]) != atoms:
            raise DataError(f"Amber prmtop {path!r}: %FLAG {section} holds {len(raw[section])} values for "
                            f"{atoms} atoms (a truncated or damaged file?)")


def _crd_names(path: str) -> list[tuple[str, str]]:
    """``(residue name, atom name)`` of every atom line of a CHARMM crd (standard or extended)."""
    names = []
    with open(path) as file:
        lines = [line for line in file if not line.startswith("*")]
    for line in lines[1:]:  # the first is the atom count
        words = line.split()
        if len(words) >= 4:
            names.append((words[2], words[3]))
    return names


def _check_names(topology_path: str, topology, coordinates_path: str, names, first_line, width) -> None:
    """Refuse coordinates whose residue and atom names differ from the topology's, atom by atom (lines
    in another order give a valid-looking but wrong system); ``width`` cuts the topology's names as
    the file format does; ``first_line`` is the file line of the first atom (for the message)."""
    from openmm.app import PDBFile

    PDBFile._loadNameReplacementTables()  # the topology readers rename atoms by these tables (HH31 -> H1)
    residues, atoms = PDBFile._residueNameReplacements, PDBFile._atomNameReplacements
    for index, (atom, (residue_name, atom_name)) in enumerate(zip(topology.atoms(), names, strict=False)):
        residue_name, atom_name = residue_name.strip(), atom_name.strip()
        expected = (atom.residue.name[:width] if width else atom.residue.name,
                    atom.name[:width] if width else atom.name)
        standard_residue = residues.get(residue_name, residue_name)
        standard = (standard_residue, atoms.get(standard_residue, {}).get(atom_name, atom_name))
        standard = tuple(name[:width] if width else name for name in standard)
        if expected not in ((residue_name, atom_name), standard):
            where = f"line {first_line + index}" if first_line else f"atom {index + 1}"
            raise DataError(
                f"{coordinates_path!r}, {where}: atom {index + 1} is {atom_name} of residue "
                f"{residue_name}, but the topology {topology_path!r} has {expected[1]} of "
                f"{expected[0]} there: give the coordinates written with this topology, atoms in its order")


def _check_counts(topology_path: str, topology_atoms: int, coordinates_path: str, coordinate_atoms: int):
    if topology_atoms != coordinate_atoms:
        raise DataError(
            f"{coordinates_path!r} holds {coordinate_atoms} atoms but the topology {topology_path!r} has "
            f"{topology_atoms}: give the coordinates written with this topology")


def _create_system(topology_file, path: str, caller: str, given: dict, *leading, parameter_files=()):
    """``topology_file.createSystem`` with the defaults of the module docstring and ``given`` options."""
    from openmm import app

    accepted = [name for name in inspect.signature(topology_file.createSystem).parameters
                if name not in _NOT_OPTIONS]
    own = _LOADER_ARGUMENTS[caller]
    for name in given:
        if name not in accepted:
            close = difflib.get_close_matches(name, accepted + list(own), n=1)  # own: include_dir...
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
        damaged = isinstance(error, ValueError) and "could not convert" in str(error)  # a garbled number
        if type(error).__name__ == "MissingParameter" or isinstance(error, KeyError) or damaged:
            files = f" and the parameter files {list(parameter_files)}" if parameter_files else ""
            raise DataError(f"{caller}: {path!r}{files}: damaged, or without parameters OpenMM needs: "
                            f"{type(error).__name__}: {error}") from error
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
    if name in _UNITS and isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = float(value)
        md_unit = _UNITS[name]
        if md_unit.startswith("/"):
            return value / getattr(unit, md_unit[1:])
        return value * getattr(unit, md_unit)
    return value


def _translate(openmm_system, openmm_topology, positions, dtype, return_openmm_system, coordinates_path):
    """``(System, ForceField)`` of an OpenMM System, its topology and positions (a quantity); with
    ``return_openmm_system``, ``(System, ForceField, openmm_system)`` (as ``from_pdb_with_forcefield``)."""
    from openmm import unit

    from mindsponge.system import System
    from mindsponge.topology import Topology

    coordinates = torch.tensor(positions.value_in_unit(unit.nanometer), dtype=dtype)
    finite = torch.isfinite(coordinates).all(1)
    if not bool(finite.all()):
        atom = int(torch.argmin(finite.int()))
        raise DataError(f"{coordinates_path!r}: the coordinates of atom {atom + 1} are not finite "
                        f"({coordinates[atom].tolist()})")
    system = System(
        positions=coordinates,
        masses=masses(openmm_system, dtype),
        charges=_charges(openmm_system, dtype),
        box=_box(openmm_system, dtype),
        topology=Topology.from_openmm(openmm_topology),
    )
    forcefield = from_openmm(openmm_system, openmm_topology, dtype=dtype)
    return (system, forcefield, openmm_system) if return_openmm_system else (system, forcefield)
