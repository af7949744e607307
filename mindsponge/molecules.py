"""Molecules to label: one structure (elements and coordinates) from a name, a file, ASE or SMILES.

:func:`load_molecule` turns any of these into a :class:`Molecule` (atomic numbers, positions in
nm, total charge):

- a built-in name (:data:`MOLECULES`, or any name of ASE's G2 collection): ``"ethanol"``;
- an XYZ file (``"water.xyz"``; read here, so a bad line is reported as ``file:line``), a PDB
  file (through :meth:`mindsponge.system.System.from_pdb`), or any other file ASE reads
  (extxyz, CIF, ...; the first frame);
- an ``ase.Atoms``, or a :class:`~mindsponge.system.System` with a topology;
- a SMILES string spelled ``"smiles:CCO"`` (the prefix keeps ``"CO"``, carbon monoxide in G2,
  apart from methanol's SMILES): RDKit adds explicit hydrogens, embeds 3D coordinates (ETKDG,
  fixed seed) and optimises them with MMFF94 (UFF when MMFF has no parameters); the charge is
  the sum of the formal charges.

:func:`conformers` gives several structures of one molecule: RDKit's ETKDG ensemble of a SMILES
(MMFF-optimised, pruned by RMSD), or every frame of a multi-frame file; labelling from all of them
covers the conformers that molecular dynamics will visit (rotamers, ring puckers), which short runs
from one geometry do not.

A molecule has no periodic box (a periodic ``ase.Atoms`` is refused: label a crystal or a box of
solvent with ``label(XTB(numbers), positions, box)``). Every structure is checked: element
numbers >= 1 (no dummy atoms) and finite coordinates; an error names the atom (and ``file:line``
for a file).

Example::

    water = load_molecule("smiles:O")
    water.atomic_numbers, water.positions.shape, water.charge    # [8 1 1], (3, 3) nm, 0.0
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass

import numpy as np

from common import units
from common.errors import ConfigurationError, DataError, MissingFileError
from mindsponge import elements

__all__ = ["MOLECULES", "Molecule", "load_molecule", "molecule", "from_smiles", "read_xyz", "conformers"]

# built-in molecules: name -> name in ase's G2 collection (MP2 geometries)
MOLECULES = {"ethanol": "CH3CH2OH", "water": "H2O", "methane": "CH4", "methanol": "CH3OH",
             "acetaldehyde": "CH3CHO", "formamide": "HCONH2"}
SMILES_PREFIX = "smiles:"
_EMBEDDING_SEED = 0xC0FFEE  # fixed: the same SMILES gives the same starting geometry
_MULTI_FRAME_SUFFIXES = (".extxyz", ".xyz", ".traj")
_CONFORMER_RMSD = 0.3  # Å: ETKDG conformers closer than this (after alignment) count as one


@dataclass(frozen=True)
class Molecule:
    """One structure to label.

    Attributes:
        atomic_numbers: ``(N,)`` int64, every entry >= 1.
        positions: ``(N, 3)`` float64, nm (finite).
        charge: total charge, e.
        source: where it came from (a name, a file, ``smiles:...``), for messages.
    """

    atomic_numbers: np.ndarray
    positions: np.ndarray
    charge: float = 0.0
    source: str = ""

    def to_ase(self):
        """The structure as an ``ase.Atoms`` (positions in Å; charge in ``info["charge"]``)."""
        import ase

        atoms = ase.Atoms(numbers=self.atomic_numbers, positions=self.positions * units.NM_TO_ANGSTROM)
        atoms.info["charge"] = self.charge
        return atoms


def molecule(name: str):
    """A built-in molecule as an ``ase.Atoms`` (positions in Å, as ASE keeps them).

    Args:
        name: a key of :data:`MOLECULES` or any name of ``ase.collections.g2``.

    Raises:
        ValueError: an unknown name (the message lists the built-in ones).
    """
    import ase.build
    from ase.collections import g2

    key = MOLECULES.get(name, name)
    if key not in g2.names:
        raise ConfigurationError(
            f"unknown molecule {name!r}; built-in: {sorted(MOLECULES)} or a name of ase's G2 set, "
            f"a file (.xyz, .pdb, anything ase.io reads), or '{SMILES_PREFIX}<SMILES>'")
    return ase.build.molecule(key)


def _checked(numbers, positions_nm, charge: float, source: str, lines=None) -> Molecule:
    """A :class:`Molecule` after checking elements and coordinates (``lines``: file line per atom)."""
    numbers = np.asarray(numbers, dtype=np.int64)
    positions = np.asarray(positions_nm, dtype=np.float64)
    if len(numbers) == 0:
        raise DataError(f"{source}: no atoms")

    def where(atom: int) -> str:
        return f"{source}:{lines[atom]}" if lines is not None else source

    for atom in np.flatnonzero(numbers < 1)[:1]:
        raise DataError(f"{where(atom)}: atom {atom} has no element (atomic number {numbers[atom]})")
    for atom in np.flatnonzero(~np.isfinite(positions).all(axis=1))[:1]:
        raise DataError(f"{where(atom)}: atom {atom} has non-finite coordinates {positions[atom].tolist()}")
    return Molecule(numbers, positions, float(charge), source)


def _xyz_atom(fields: list[str], path, line: int) -> tuple[int, list[float]]:
    """Atomic number and Å coordinates of one XYZ atom line (``fields`` split on whitespace)."""
    if len(fields) < 4:
        raise DataError(f"{path}:{line}: expected 'element x y z', got {' '.join(fields)!r}")
    symbol = elements.normalize_symbol(fields[0])
    if fields[0].isdigit() and 1 <= int(fields[0]) < 119:
        number = int(fields[0])
    elif symbol is None or not elements.is_element(symbol):
        raise DataError(f"{path}:{line}: unknown element {fields[0]!r}")
    else:
        number = elements.atomic_number(symbol)
    try:
        coordinates = [float(text) for text in fields[1:4]]
    except ValueError:
        coordinates = " ".join(fields[1:4])
        raise DataError(f"{path}:{line}: coordinates must be numbers, got {coordinates!r}") from None
    return number, coordinates


def read_xyz(path: str | os.PathLike, charge: float = 0.0) -> Molecule:
    """The first frame of an XYZ file (atom count, comment line, ``element x y z`` lines in Å).

    Elements may be symbols in any case or atomic numbers; extra columns are ignored.

    Raises:
        DataError: ``file:line: ...`` for a bad atom count, a short or malformed atom line, an
            unknown element or non-finite coordinates.
    """
    text = pathlib.Path(path).read_text().splitlines()
    try:
        count = int(text[0].split()[0]) if text and text[0].split() else None
    except ValueError:
        count = None
    if count is None or count < 1:
        raise DataError(f"{path}:1: the first line must be the number of atoms, got {text[:1]!r}")
    if len(text) < count + 2:
        raise DataError(f"{path}:{len(text)}: {count} atoms announced, the file ends after "
                        f"{max(len(text) - 2, 0)} atom lines")
    atoms = [_xyz_atom(text[line - 1].split(), path, line) for line in range(3, count + 3)]
    numbers, coordinates = zip(*atoms, strict=True)
    return _checked(numbers, np.asarray(coordinates) * units.ANGSTROM_TO_NM, charge, str(path),
                    lines=list(range(3, count + 3)))


def _rdkit():
    try:
        from rdkit import Chem
        from rdkit.Chem import AllChem
    except ImportError as error:
        raise ImportError("SMILES input needs RDKit: pip install rdkit "
                          "(or 'mindscience-torch[xtb]')") from error
    return Chem, AllChem


def _embedded(smiles: str, count: int):
    """RDKit molecule of ``smiles`` with explicit hydrogens and up to ``count`` optimised conformers."""
    Chem, AllChem = _rdkit()
    parsed = Chem.MolFromSmiles(smiles)
    if parsed is None:
        raise DataError(f"RDKit cannot parse the SMILES {smiles!r}")
    mol = Chem.AddHs(parsed)
    if count == 1:
        ok = AllChem.EmbedMolecule(mol, randomSeed=_EMBEDDING_SEED) == 0
    else:
        parameters = AllChem.ETKDGv3()
        parameters.randomSeed, parameters.pruneRmsThresh = _EMBEDDING_SEED, _CONFORMER_RMSD
        ok = len(AllChem.EmbedMultipleConfs(mol, numConfs=count, params=parameters)) > 0
    if not ok:
        raise DataError(f"RDKit could not embed {smiles!r} in 3D")
    if AllChem.MMFFHasAllMoleculeParams(mol):
        AllChem.MMFFOptimizeMoleculeConfs(mol, maxIters=2000)
    else:
        AllChem.UFFOptimizeMoleculeConfs(mol, maxIters=2000)
    return mol


def from_smiles(smiles: str, charge: float | None = None) -> Molecule:
    """3D structure of a SMILES string through RDKit (explicit hydrogens, ETKDG, MMFF94 or UFF).

    Args:
        smiles: the SMILES (without the ``smiles:`` prefix).
        charge: total charge, e (default: the sum of RDKit's formal charges).

    Raises:
        ImportError: RDKit is not installed (``pip install 'mindscience-torch[xtb]'``).
        DataError: RDKit cannot parse the SMILES or embed it in 3D.
    """
    return _smiles_conformers(smiles, 1, charge)[0]


def _smiles_conformers(smiles: str, count: int, charge: float | None) -> list[Molecule]:
    Chem, _ = _rdkit()
    mol = _embedded(smiles, count)
    numbers = [atom.GetAtomicNum() for atom in mol.GetAtoms()]
    total = Chem.GetFormalCharge(mol) if charge is None else charge
    source = f"{SMILES_PREFIX}{smiles}"
    return [_checked(numbers, conformer.GetPositions() * units.ANGSTROM_TO_NM, total, source)
            for conformer in mol.GetConformers()]


def conformers(source, count: int = 10, charge: float | None = None) -> list[Molecule]:
    """Several structures of one molecule, to start labelling runs from.

    Args:
        source: ``"smiles:..."`` (RDKit's ETKDG v3 ensemble with a fixed seed, each conformer
            optimised with MMFF94 or UFF, near-duplicates within 0.03 nm RMSD pruned), a
            multi-frame file ASE reads (every frame, up to ``count``), or anything
            :func:`load_molecule` takes (then its one structure).
        count: the most conformers to return (>= 1).
        charge: total charge, e, as in :func:`load_molecule`.

    Returns:
        1 to ``count`` :class:`Molecule` with the same atoms in the same order.

    Raises:
        ConfigurationError: a bad ``count``; as :func:`load_molecule` for the source.
    """
    from common import checks

    count = checks.positive_int(count, "conformers: count")
    if isinstance(source, str) and source.startswith(SMILES_PREFIX):
        return _smiles_conformers(source[len(SMILES_PREFIX):], count, charge)
    path = pathlib.Path(source) if isinstance(source, str | os.PathLike) else None
    if path is not None and path.is_file() and path.suffix.lower() in _MULTI_FRAME_SUFFIXES and count > 1:
        import ase.io

        frames = ase.io.read(path, index=f":{count}")
        return [_from_atoms(frame, charge, f"{path} frame {index}") for index, frame in enumerate(frames)]
    return [load_molecule(source, charge)]


def _from_atoms(atoms, charge: float | None, source: str) -> Molecule:
    if atoms.pbc.any():
        raise DataError(f"{source}: periodic structures are not molecules; label them with "
                        "label(XTB(atomic_numbers), positions, box)")
    if charge is None:
        charge = atoms.info.get("charge", 0.0)
    return _checked(atoms.numbers, atoms.positions * units.ANGSTROM_TO_NM, charge, source)


def _from_file(path: pathlib.Path, charge: float | None) -> Molecule:
    if path.suffix.lower() == ".xyz":
        return read_xyz(path, 0.0 if charge is None else charge)
    if path.suffix.lower() == ".pdb":
        from mindsponge.system import System

        system = System.from_pdb(path)
        return _checked(system.atomic_numbers.numpy(), system.positions.numpy(), charge or 0.0, str(path))
    import ase.io

    return _from_atoms(ase.io.read(path, index=0), charge, str(path))


def load_molecule(source, charge: float | None = None) -> Molecule:
    """A :class:`Molecule` from a name, a file, ``smiles:...``, an ``ase.Atoms`` or a ``System``.

    Args:
        source: see the module docstring.
        charge: total charge, e (default: 0, the formal charge of a SMILES, or
            ``atoms.info["charge"]``).

    Raises:
        FileNotFoundError: a path with a structure suffix that does not exist.
        ValueError: an unknown name; :class:`~common.errors.DataError` for a bad structure.
    """
    if isinstance(source, Molecule):
        return source if charge is None else Molecule(source.atomic_numbers, source.positions, charge,
                                                      source.source)
    if hasattr(source, "get_positions") and hasattr(source, "numbers"):
        return _from_atoms(source, charge, "ase.Atoms")
    if hasattr(source, "atomic_numbers") and hasattr(source, "positions"):
        positions = source.positions.detach().cpu().double().numpy()
        return _checked(source.atomic_numbers.cpu().numpy(), positions, charge or 0.0, "System")
    if isinstance(source, str) and source.startswith(SMILES_PREFIX):
        return from_smiles(source[len(SMILES_PREFIX):], charge)
    path = pathlib.Path(source)
    if path.is_file():
        return _from_file(path, charge)
    if isinstance(source, os.PathLike) or path.suffix.lower() in (".xyz", ".pdb", ".extxyz", ".traj", ".cif"):
        raise MissingFileError(f"no structure file {str(source)!r}")
    return _from_atoms(molecule(str(source)), charge, str(source))

