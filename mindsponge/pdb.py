"""Reading and writing PDB files.

The reader follows the fixed-column PDB format and OpenMM's ``PDBFile`` conventions:

* ``ATOM`` and ``HETATM`` records, first model only (``MODEL``/``ENDMDL``), stops at ``END``;
* ``TER`` ends a chain; a change of chain identifier starts one;
* a residue is a run of atoms with the same chain, resSeq, insertion code and name;
  4-character residue names (column 21) and hexadecimal resSeq beyond 9999 are accepted;
* alternate locations: the first one of each atom is kept;
* ``CRYST1`` gives the box, converted from Å and degrees to OpenMM's reduced triclinic
  form (:func:`mindsponge.space.box_from_lengths_and_angles`); the placeholder unit cube
  (a = b = c = 1 Å) of non-crystallographic entries means no box;
* elements from columns 77-78 (``EP`` marks an extra particle, element ``None``); where they
  are blank, inferred from the atom name as OpenMM does (leading digits dropped, ``CL``,
  ``NA``, ``MG``, ``BE``, ``LI``, ``K``, ``ZN`` and single-atom ``CA`` residues are
  two-letter elements, otherwise the first letter); virtual-site names (``M``, ``MW``,
  ``EP*``, ``LP*``, Drude ``D<name>``) become extra particles;
* bonds from ``CONECT`` records plus the bonds OpenMM adds from its residue templates:
  water O-H bonds, and the bonds of standard amino and nucleic acids (peptide and
  phosphodiester links, disulfides) found from the geometry (:func:`standard_bonds`); on
  OpenMM's own PDB files the bond lists agree exactly.

Residue and atom names are kept as written (OpenMM's ``PDBFile`` additionally renames
non-standard names such as ``WAT`` -> ``HOH`` through its ``pdbNames.xml``).

Errors name the file and line: ``protein.pdb:17: ATOM record too short ...``.
"""

from dataclasses import dataclass

import numpy as np
import torch
from ase.data import covalent_radii

from common import units
from common.errors import ConfigurationError, DataError, UnknownNameError
from mindsponge import elements, space
from mindsponge.topology import Atom, Residue, Topology

__all__ = ["PDBError", "PDBStructure", "read_pdb", "standard_bonds", "write_pdb"]

WATER_RESIDUE_NAMES = frozenset(
    {"HOH", "WAT", "SOL", "H2O", "TIP", "TIP3", "TP3", "TIP4", "TP4", "SPC", "T3P", "T4P"}
)
# residues OpenMM writes as ATOM records (all others are HETATM)
_STANDARD_RESIDUES = frozenset(
    "ALA ASN CYS GLU HIS LEU MET PRO THR TYR ARG ASP GLN GLY ILE LYS PHE SER TRP VAL "
    "A G C U I DA DG DC DT DI".split()
)
# residues whose bonds OpenMM takes from its templates (pdbNames.xml, residues.xml), with variants
POLYMER_RESIDUE_NAMES = frozenset(
    "GLY ALA VAL LEU ILE SER THR CYS CYX CYM PRO PHE TYR TRP HIS HSP HSH HIP HIH HID HIE HSD HSE ASP ASH "
    "ASN GLU GLH GLN MET LYS LYN ARG ORN AIB PCA FOR ACE NME NMA NH2 NHE UNK "
    "A ADE A3 A5 G GUA G3 G5 C CYT C3 C5 U URA U3 U5 DA DAD DA3 DA5 DG DGU DG3 DG5 DC DCY DC3 DC5 "
    "DT THY DT3 DT5".split()
)
_BOND_TOLERANCE = 1.2  # bonded: distance < 1.2 x the sum of covalent radii
_COORDINATE_END = 54  # columns 31-54 hold x, y, z


class PDBError(DataError):
    """A malformed PDB file; the message starts with ``file:line:``."""


@dataclass(frozen=True)
class PDBStructure:
    """The first model of a PDB file.

    Attributes:
        topology: atoms, residues, chains and bonds.
        positions: (N, 3) float64 tensor, nm.
        box: (3, 3) float64 tensor, nm, in reduced form, or ``None`` without ``CRYST1``.
        line_numbers: the line of every atom's record (1-based).
        path: the file read.
    """

    topology: Topology
    positions: torch.Tensor
    box: torch.Tensor | None
    line_numbers: tuple[int, ...]
    path: str


def _parse_serial(text):
    """Atom serial number, decimal or OpenMM's hexadecimal continuation beyond 99999."""
    try:
        return int(text)
    except ValueError:
        return int(text, 16) - 0xA0000 + 100000


def _infer_element(name, residue_atom_names):
    """Element symbol inferred from an atom name as OpenMM does; ``None`` for extra particles.

    Raises:
        KeyError: if nothing sensible can be inferred.
    """
    upper = name.upper()
    while len(upper) > 1 and upper[0].isdigit():
        upper = upper[1:]
    for prefix, symbol in (
        ("CL", "Cl"),
        ("NA", "Na"),
        ("MG", "Mg"),
        ("BE", "Be"),
        ("LI", "Li"),
        ("ZN", "Zn"),
    ):
        if upper.startswith(prefix):
            return symbol
    if upper.startswith("K"):
        return "K"
    if len(residue_atom_names) == 1 and upper.startswith("CA"):
        return "Ca"
    if upper in ("M", "MW") or upper.startswith(("EP", "LP")):
        return None
    if upper.startswith("D") and name[1:] in residue_atom_names:
        return None  # a Drude particle
    symbol = elements.normalize_symbol(upper[:1])
    if symbol is None:
        raise UnknownNameError(name)
    return symbol


class _Reader:
    """State of one pass over a PDB file."""

    def __init__(self, path):
        self.path = str(path)
        self.atoms = []  # (name, element columns 77-78, residue index, line number)
        self.residues = []
        self.positions = []
        self.line_numbers = []
        self.serials = {}
        self.connects = []
        self.box = None
        self.residue_key = None
        self.residue_atom_names = set()
        self.chain_index = 0
        self.chain_id = None
        self.chain_ended = False
        self.models_seen = 0
        self.first_model_done = False

    def error(self, line_number, message):
        return PDBError(f"{self.path}:{line_number}: {message}")

    def read(self):
        try:
            with open(self.path) as file:
                for line_number, raw in enumerate(file, 1):
                    if self.process(raw.rstrip("\r\n"), line_number):
                        break
        except UnicodeDecodeError as error:
            raise PDBError(f"{self.path}: not a text PDB file ({error})") from None
        if not self.atoms:
            raise PDBError(f"{self.path}: no ATOM or HETATM records")
        return self.finish()

    def process(self, line, line_number):
        """Handle one line; True to stop reading."""
        record = line[:6].rstrip()
        if record == "CONECT":
            self.read_connect(line, line_number)
        elif self.first_model_done:
            return False
        elif record in ("ATOM", "HETATM"):
            self.read_atom(record, line, line_number)
        elif record == "CRYST1":
            self.read_cryst1(line, line_number)
        elif record == "MODEL":
            self.models_seen += 1
            self.first_model_done = self.models_seen > 1
        elif record == "ENDMDL":
            self.first_model_done = True
        elif record == "TER":
            self.chain_ended = True
        elif record == "END":
            return True
        return False

    def read_cryst1(self, line, line_number):
        try:
            lengths = [float(line[start : start + 9]) * units.ANGSTROM_TO_NM for start in (6, 15, 24)]
            angles = [float(line[start : start + 7]) for start in (33, 40, 47)]
        except ValueError:
            raise self.error(
                line_number,
                f"CRYST1 record needs a, b, c (columns 7-33) and angles (columns 34-54), got {line!r}",
            ) from None
        if 0.0 in lengths or all(abs(length - units.ANGSTROM_TO_NM) < 1e-9 for length in lengths):
            return  # no box, or the unit-cube placeholder of non-crystallographic entries
        try:
            self.box = space.box_from_lengths_and_angles(*lengths, *angles, dtype=torch.float64)
        except space.BoxError as error:
            raise self.error(line_number, f"invalid CRYST1 box: {error}") from None

    def read_connect(self, line, line_number):
        serials = []
        for start in range(6, min(len(line), 31), 5):
            field = line[start : start + 5].strip()
            if field:
                try:
                    serials.append(_parse_serial(field))
                except ValueError:
                    raise self.error(line_number, f"CONECT record has a bad atom serial {field!r}") from None
        if len(serials) > 1:
            self.connects.append((serials[0], serials[1:], line_number))

    def read_atom(self, record, line, line_number):
        if len(line) < _COORDINATE_END:
            raise self.error(
                line_number,
                f"{record} record too short ({len(line)} characters; the coordinates need columns 31-54)",
            )
        name = line[12:16].strip()
        try:
            coordinates = [float(line[start : start + 8]) * units.ANGSTROM_TO_NM for start in (30, 38, 46)]
        except ValueError:
            raise self.error(
                line_number,
                f"{record} record for atom {name!r} has unreadable coordinates "
                f"(columns 31-54: {line[30:54]!r})",
            ) from None
        alternate_location = line[16]
        residue_name = line[17:20].strip()
        if line[20] != " ":
            residue_name = (line[17:20] + line[20]).strip()
        chain_id = line[21]
        residue_field = line[22:27]
        chain_changed = self.chain_ended or chain_id != self.chain_id
        if chain_changed and self.chain_id is not None:
            self.chain_index += 1
        self.chain_ended = False
        self.chain_id = chain_id
        key = (self.chain_index, residue_field, residue_name)
        if key != self.residue_key or (residue_field[:4] == "****" and name in self.residue_atom_names):
            self.start_residue(key, residue_name, residue_field, chain_id)
        elif name in self.residue_atom_names:
            if alternate_location != " ":
                return  # a further alternate location of an atom already read
        self.residue_atom_names.add(name)
        serial_field = line[6:11].strip()
        if serial_field:
            try:
                self.serials[_parse_serial(serial_field)] = len(self.atoms)
            except ValueError:
                raise self.error(line_number, f"bad atom serial number {serial_field!r}") from None
        element_field = line[76:78].strip()
        self.atoms.append((name, element_field, len(self.residues) - 1, line_number))
        self.positions.append(coordinates)
        self.line_numbers.append(line_number)

    def start_residue(self, key, residue_name, residue_field, chain_id):
        number_field = residue_field[:4]
        try:
            number = int(number_field)
        except ValueError:
            try:
                number = int(number_field, 16) - 0xA000 + 10000
            except ValueError:
                number = self.residues[-1].number + 1 if self.residues else 1
        self.residues.append(
            Residue(residue_name, number, chain_id, residue_field[4].strip(), self.chain_index)
        )
        self.residue_key = key
        self.residue_atom_names = set()

    def finish(self):
        names_by_residue = [set() for _ in self.residues]
        for name, _, residue_index, _ in self.atoms:
            names_by_residue[residue_index].add(name)
        positions = torch.tensor(self.positions, dtype=torch.float64)
        atoms = [
            Atom(name, self._element(name, field, names_by_residue[residue], line_number), residue)
            for name, field, residue, line_number in self.atoms
        ]
        bonds = standard_bonds(atoms, self.residues, positions)
        self._add_connect_bonds(bonds)
        topology = Topology(atoms, self.residues, bonds)
        return PDBStructure(topology, positions, self.box, tuple(self.line_numbers), self.path)

    def _element(self, name, element_field, residue_names, line_number):
        """The element of an atom: columns 77-78 (``EP``: an extra particle, ``None``), or else
        inferred from its name among the names of its residue."""
        if not element_field:
            try:
                return _infer_element(name, residue_names)
            except KeyError:
                raise self.error(
                    line_number,
                    f"cannot infer the element of atom {name!r} from its name and columns 77-78 are "
                    "blank; write the element symbol there (EP for an extra particle)",
                ) from None
        if element_field.upper() == "EP":
            return None
        element = elements.normalize_symbol(element_field)
        if element is None:
            raise self.error(line_number, f"unknown element {element_field!r} for atom {name!r}")
        return element

    def _add_connect_bonds(self, bonds):
        """Append to ``bonds`` the CONECT bonds within the first model that it does not hold."""
        known = {frozenset(bond) for bond in bonds}
        for first, others, _ in self.connects:
            if first not in self.serials:
                continue  # CONECT of an atom outside the first model
            for other in others:
                if other not in self.serials:
                    continue
                pair = (self.serials[first], self.serials[other])
                if pair[0] != pair[1] and frozenset(pair) not in known:
                    known.add(frozenset(pair))
                    bonds.append(pair)


def _water_bonds(atoms, residues):
    """O-H bonds of every water residue (a residue with a water name, one O and two H)."""
    members = {}
    for index, atom in enumerate(atoms):
        if residues[atom.residue_index].name.upper() in WATER_RESIDUE_NAMES:
            members.setdefault(atom.residue_index, []).append(index)
    bonds = []
    for indices in members.values():
        oxygens = [index for index in indices if atoms[index].element == "O"]
        hydrogens = [index for index in indices if atoms[index].element == "H"]
        if len(oxygens) == 1 and len(hydrogens) == 2:
            bonds.extend((oxygens[0], hydrogen) for hydrogen in hydrogens)
    return bonds


def _covalent_pairs(indices, atoms, positions):
    """Index pairs among ``indices`` closer than 1.2 x the sum of covalent radii (no H-H pairs)."""
    if len(indices) < 2:
        return []
    indices = np.asarray(indices)
    points = positions[indices]
    radii = np.array([covalent_radii[elements.atomic_number(atoms[i].element)] for i in indices])
    hydrogen = np.array([atoms[i].element == "H" for i in indices])
    distances = np.linalg.norm(points[:, None] - points[None], axis=-1) * units.NM_TO_ANGSTROM
    bonded = distances < _BOND_TOLERANCE * (radii[:, None] + radii[None])
    bonded &= ~(hydrogen[:, None] & hydrogen[None])
    first, second = np.nonzero(np.triu(bonded, 1))
    return list(zip(indices[first].tolist(), indices[second].tolist()))


def standard_bonds(atoms, residues, positions):
    """Bonds OpenMM's ``PDBFile`` adds without ``CONECT`` records, found from the geometry.

    OpenMM bonds standard residues from templates by atom name; names vary between
    programs (``HB1``/``HB3``), so mindsponge finds the same bonds from distances instead:

    * water residues: O-H1 and O-H2;
    * standard amino-acid and nucleic-acid residues (and their protonation variants): atom
      pairs closer than 1.2 x the sum of covalent radii, except H-H;
    * consecutive standard residues of a chain: C-N (peptide) and O3'-P links, same criterion;
    * disulfide bridges: SG-SG pairs of cysteines without HG closer than 0.3 nm.

    Args:
        atoms: sequence of :class:`mindsponge.system.Atom`.
        residues: sequence of :class:`mindsponge.system.Residue`.
        positions: (N, 3) array or tensor, nm.

    Returns:
        list of ``(i, j)`` atom index pairs.
    """
    positions = np.asarray(positions.detach().cpu() if isinstance(positions, torch.Tensor) else positions)
    bonds = _water_bonds(atoms, residues)
    members = [[] for _ in residues]
    for index, atom in enumerate(atoms):
        if atom.element is not None:
            members[atom.residue_index].append(index)
    standard = [residue.name.upper() in POLYMER_RESIDUE_NAMES for residue in residues]
    for residue_index, indices in enumerate(members):
        if standard[residue_index]:
            bonds.extend(_covalent_pairs(indices, atoms, positions))
    bonds.extend(_link_bonds(atoms, residues, members, standard, positions))
    bonds.extend(_disulfide_bonds(atoms, residues, members, positions))
    return bonds


def _link_bonds(atoms, residues, members, standard, positions):
    """Peptide C-N and nucleic O3'-P bonds between consecutive standard residues of a chain."""
    bonds = []
    for residue_index in range(1, len(residues)):
        previous, current = residues[residue_index - 1], residues[residue_index]
        same_chain = (previous.chain_id, previous.chain_index) == (current.chain_id, current.chain_index)
        if not (same_chain and standard[residue_index - 1] and standard[residue_index]):
            continue
        for tail_names, head_name in ((("C",), "N"), (("O3'", "O3*"), "P")):
            tails = [i for i in members[residue_index - 1] if atoms[i].name in tail_names]
            heads = [i for i in members[residue_index] if atoms[i].name == head_name]
            if tails and heads:
                bonds.extend(_covalent_pairs([tails[0], heads[0]], atoms, positions))
    return bonds


def _disulfide_bonds(atoms, residues, members, positions):
    """SG-SG pairs closer than 0.3 nm of cysteines without HG."""
    sulfurs = []
    for residue_index, indices in enumerate(members):
        names = {atoms[i].name: i for i in indices}
        if residues[residue_index].name.upper() in ("CYS", "CYX") and "SG" in names and "HG" not in names:
            sulfurs.append(names["SG"])
    bonds = []
    for position, first in enumerate(sulfurs):
        for second in sulfurs[position + 1 :]:
            if np.linalg.norm(positions[first] - positions[second]) < 0.3:
                bonds.append((first, second))
    return bonds


def read_pdb(path):
    """Read the first model of a PDB file.

    Args:
        path: file name.

    Returns:
        :class:`PDBStructure` (topology, positions in nm, box in nm or None, line numbers).

    Raises:
        PDBError: ``file:line: ...`` for a truncated record, unreadable numbers, an unknown
            element or an atom whose element cannot be inferred.
    """
    return _Reader(path).read()


def _format_index(index, places):
    """Decimal index, switching to OpenMM's hexadecimal continuation when it does not fit."""
    if index < 10**places:
        return f"{index:{places}d}"
    shifted = (index - 10**places + 10 * 16 ** (places - 1)) % (16**places)
    return f"{shifted:{places}X}"


def _format_coordinate(value, atom_index):
    if -999.999 < value < 9999.999:
        return f"{value:8.3f}"
    raise ConfigurationError(
        f"atom {atom_index}: coordinate {value:.6g} Å does not fit the 8-column PDB field")


def write_pdb(path, topology, positions, box=None):
    """Write one model as a PDB file, in OpenMM's layout.

    Args:
        path: file name.
        topology: :class:`mindsponge.system.Topology`.
        positions: (N, 3) tensor, nm.
        box: (3, 3) tensor, nm, or ``None``; written as ``CRYST1``.

    Bonds other than water O-H bonds (which :func:`read_pdb` restores) are written as
    ``CONECT`` records, so reading the file back gives the same topology (except residue
    insertion codes longer than one character and names longer than the PDB columns).
    """
    values = _angstrom_positions(topology, positions)
    topology.check_residue_order(f"write_pdb({path!r})")
    lines = ["REMARK   1 CREATED WITH MINDSPONGE"]
    if box is not None:
        a, b, c, alpha, beta, gamma = space.box_lengths_and_angles(box)
        lines.append(
            f"CRYST1{a * 10:9.3f}{b * 10:9.3f}{c * 10:9.3f}{alpha:7.2f}{beta:7.2f}{gamma:7.2f}"
            " P 1           1 "
        )
    serials = _write_atoms(lines, topology, values)
    _write_connects(lines, topology, positions, serials)
    lines.append("END")
    with open(path, "w") as file:
        file.write("\n".join(lines) + "\n")


def _angstrom_positions(topology, positions):
    """Positions ``(N, 3)`` in Å, float64 on the CPU, checked against the topology and finite."""
    values = positions.detach().to(device="cpu", dtype=torch.float64) * units.NM_TO_ANGSTROM
    if tuple(values.shape) != (topology.n_atoms, 3):
        raise ConfigurationError(
            f"positions must have shape ({topology.n_atoms}, 3), got {tuple(values.shape)}")
    if not torch.isfinite(values).all():
        bad = int(torch.nonzero(~torch.isfinite(values).all(dim=1))[0, 0])
        raise ConfigurationError(f"position of atom {bad} is not finite: {values[bad].tolist()}")
    return values


def _write_atoms(lines, topology, values):
    """Append the ATOM/HETATM records chain by chain, each chain closed by TER; returns the
    serial number of each atom."""
    atoms_by_residue = [[] for _ in topology.residues]
    for index, atom in enumerate(topology.atoms):
        atoms_by_residue[atom.residue_index].append(index)
    serial = 1
    serials = [0] * topology.n_atoms
    for chain_id, residue_indices in topology.chains():
        chain = (chain_id or " ")[:1]
        for residue_index in residue_indices:
            residue = topology.residues[residue_index]
            record = "ATOM  " if residue.name in _STANDARD_RESIDUES else "HETATM"
            number = (
                str(residue.number) if len(str(residue.number)) <= 4 else _format_index(residue.number, 4)
            )
            columns = f"{residue.name[:3]:>3s} {chain}{number:>4s}"
            insertion = residue.insertion_code[:1] or " "
            for index in atoms_by_residue[residue_index]:
                atom = topology.atoms[index]
                lines.append(
                    f"{record}{_format_index(serial, 5)} {_atom_columns(atom)} {columns}{insertion}   "
                    f"{_coordinates(values, index)}  1.00  0.00          {_symbol(atom):>2s}  "
                )
                serials[index] = serial
                serial += 1
        lines.append(f"TER   {_format_index(serial, 5)}      {columns}")
        serial += 1
    return serials


def _symbol(atom):
    return "EP" if atom.element is None else atom.element


def _atom_columns(atom):
    """Columns 13-16: the atom name, shifted right by one when short and its element one letter."""
    atom_name = atom.name[:4]
    if len(atom_name) < 4 and atom_name[:1].isalpha() and len(_symbol(atom)) < 2:
        atom_name = " " + atom_name
    return f"{atom_name:<4s}"


def _coordinates(values, index):
    return "".join(_format_coordinate(value, index) for value in values[index].tolist())


def _write_connects(lines, topology, positions, serials):
    """Append CONECT records for the bonds that :func:`standard_bonds` does not restore."""
    restored = {frozenset(bond) for bond in standard_bonds(topology.atoms, topology.residues, positions)}
    neighbours = {}
    for i, j in topology.bonds:
        if frozenset((i, j)) not in restored:
            neighbours.setdefault(i, []).append(j)
            neighbours.setdefault(j, []).append(i)
    for index in sorted(neighbours):
        bonded = [serials[other] for other in neighbours[index]]
        for start in range(0, len(bonded), 4):
            fields = "".join(_format_index(other, 5) for other in bonded[start : start + 4])
            lines.append(f"CONECT{_format_index(serials[index], 5)}{fields}")
