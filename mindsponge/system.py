"""Molecular systems: the state a force field and an integrator work on.

A :class:`System` holds per-atom tensors in MD units (positions in nm, velocities in nm/ps,
masses in amu, charges in e), an optional periodic box (rows are the box vectors a, b, c in
nm, in OpenMM's reduced form, see :mod:`mindsponge.space`) and an optional
:class:`~mindsponge.topology.Topology` (atom names, elements, residues, chains, bonds). Systems are immutable:
:meth:`System.to` and :meth:`System.replace` return new ones, so nothing downstream reaches
back into the state that produced it.

Example:
    >>> import mindsponge as ms
    >>> system = ms.System.from_pdb("protein.pdb")           # doctest: +SKIP
    >>> system.positions.shape, system.box, system.density   # doctest: +SKIP
    >>> atoms = system.to_ase()                               # doctest: +SKIP
"""

import dataclasses
from dataclasses import dataclass

import torch

from common import checks, units
from common.deprecation import moved_attributes
from common.errors import ArgumentTypeError, ConfigurationError, DataError
from mindsponge import pdb, space
from mindsponge.topology import Atom, Residue, Topology

__all__ = ["LengthUnitError", "System"]

# the old name of LengthUnitError warns for one release
__getattr__ = moved_attributes(__name__, {"AtomOutsideBoxError": "mindsponge.system:LengthUnitError"})

# bonds longer than this (nm, the median over the topology's bonds) are lengths in Angstrom read as nm
LONGEST_MEDIAN_BOND = 0.5
# no matter is denser than this (g/cm^3; osmium, the densest element, is 22.6): a box this small is lengths
# in nm read as Angstrom
HIGHEST_DENSITY = 25.0


class LengthUnitError(DataError):
    """Positions or a box that look like lengths in the wrong unit (Angstrom read as nm, or the reverse).

    Positions may lie anywhere (outside the box too: OpenMM writes them unwrapped); what gives a unit
    mistake away is the bonded geometry (bonds ten times too long) and the density (a box a thousand
    times too small).

    Attributes:
        atom_index: the first atom of the longest-looking bond, or ``None`` (the box is wrong).
    """

    def __init__(self, message, atom_index=None):
        super().__init__(message)
        self.atom_index = atom_index


def _as_float_tensor(value, name, dtype, device):
    if isinstance(value, torch.Tensor) and value.is_complex():
        raise ArgumentTypeError(f"{name} must be real, got {value.dtype}")
    try:
        return torch.as_tensor(value, dtype=dtype, device=device)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ArgumentTypeError(f"{name} must be convertible to a {dtype} tensor: {error}") from error


def _as_positions(positions):
    """``positions`` as a floating (N, 3) tensor (torch's default dtype unless already floating)."""
    if not isinstance(positions, torch.Tensor) or not positions.is_floating_point():
        positions = _as_float_tensor(positions, "positions", torch.get_default_dtype(), None)
    if positions.dim() != 2 or positions.shape[1] != 3:
        raise ConfigurationError(f"positions must have shape (N, 3) in nm, got {tuple(positions.shape)}")
    return checks.finite(positions, "positions", item="atom")


def _per_atom(value, name, positions, shape):
    """``value`` as a finite tensor of ``shape`` in the dtype and on the device of ``positions``."""
    tensor = _as_float_tensor(value, name, positions.dtype, positions.device)
    if tuple(tensor.shape) != shape:
        raise ConfigurationError(
            f"{name} must have shape {shape} to match positions, got {tuple(tensor.shape)}")
    return checks.finite(tensor, name, item="atom")


def _check_topology(topology, n_atoms):
    if topology is None:
        return
    if not isinstance(topology, Topology):
        raise ArgumentTypeError(f"topology must be a mindsponge Topology, got {type(topology).__name__}")
    if topology.n_atoms != n_atoms:
        raise ConfigurationError(f"topology has {topology.n_atoms} atoms but positions has {n_atoms}")


def _first_bad_row(mask):
    """Index of the first True entry of a (N,) or (N, k) boolean mask, or None."""
    if mask.dim() > 1:
        mask = mask.any(dim=-1)
    bad = torch.nonzero(mask)
    return None if bad.numel() == 0 else int(bad[0, 0])


@dataclass(frozen=True, eq=False)
class System:
    """Positions, velocities, masses, charges, periodic box and topology of a molecular system.

    All per-atom tensors share the dtype and device of ``positions`` (other inputs are
    converted). Non-tensor positions become tensors of torch's default dtype.

    Args:
        positions: (N, 3) tensor, nm.
        masses: (N,) tensor, amu; positive (zero only for extra particles: atoms whose
            topology element is ``None``, such as TIP4P ``M`` sites).
        charges: (N,) tensor, e; zeros if omitted.
        box: (3, 3) tensor, nm, rows a, b, c in OpenMM's reduced form (lower triangular), or
            ``None`` for a non-periodic system.
        topology: :class:`Topology` with N atoms, or ``None``.
        velocities: (N, 3) tensor, nm/ps, or ``None``.

    Raises:
        common.errors.DataError: a NaN or infinite entry (a ``ValueError``), naming the argument
            and the atom (or box vector).
        ValueError: a wrong shape (naming the argument), a non-positive mass (naming the atom),
            an invalid box (:class:`mindsponge.space.BoxError`), or lengths in the wrong unit
            (:class:`LengthUnitError`: bonds ten times too long, a box denser than matter). Positions may
            lie anywhere, inside the box or not (OpenMM writes them unwrapped).
        TypeError: an argument of the wrong type.
    """

    positions: torch.Tensor
    masses: torch.Tensor
    charges: torch.Tensor | None = None
    box: torch.Tensor | None = None
    topology: Topology | None = None
    velocities: torch.Tensor | None = None

    def __post_init__(self):
        positions = _as_positions(self.positions)
        n_atoms = positions.shape[0]
        masses = _per_atom(self.masses, "masses", positions, (n_atoms,))
        charges = torch.zeros_like(masses)
        if self.charges is not None:
            charges = _per_atom(self.charges, "charges", positions, (n_atoms,))
        velocities = self.velocities
        if velocities is not None:
            velocities = _per_atom(velocities, "velocities", positions, (n_atoms, 3))
        _check_topology(self.topology, n_atoms)
        self._check_masses(masses, self.topology)
        box = None if self.box is None else self._checked_box(positions)
        self._check_units(positions, masses, box, self.topology)
        for name, value in (
            ("positions", positions),
            ("masses", masses),
            ("charges", charges),
            ("box", box),
            ("velocities", velocities),
        ):
            object.__setattr__(self, name, value)

    def _checked_box(self, positions):
        """``self.box`` as a tensor like ``positions``: finite and valid."""
        box = _as_float_tensor(self.box, "box", positions.dtype, positions.device)
        if box.dim() == 2:
            checks.finite(box, "box", item="box vector")
        space.check_box(box, "box")
        return box

    @staticmethod
    def _check_masses(masses, topology):
        values = masses.detach()
        extra = torch.zeros_like(values, dtype=torch.bool)
        if topology is not None:
            extra = torch.tensor([atom.element is None for atom in topology.atoms], device=values.device)
        bad = _first_bad_row((values < 0) | ((values == 0) & ~extra))
        if bad is not None:
            what = "" if topology is None else f" ({topology.atoms[bad].name!r})"
            raise ConfigurationError(
                f"masses must be positive (zero only for extra particles with element None), "
                f"atom {bad}{what} has mass {float(values[bad])}"
            )

    @staticmethod
    def _check_units(positions, masses, box, topology):
        """Refuse lengths in the wrong unit (:class:`LengthUnitError`): bonds whose median length is above
        :data:`LONGEST_MEDIAN_BOND` (positions in Angstrom), or a density above :data:`HIGHEST_DENSITY`
        (a box in nm read as Angstrom)."""
        if topology is not None and topology.bonds:
            bonds = torch.as_tensor(topology.bonds, dtype=torch.long, device=positions.device).reshape(-1, 2)
            lengths = torch.linalg.vector_norm(positions[bonds[:, 1]] - positions[bonds[:, 0]], dim=-1)
            median = float(lengths.median())
            if median > LONGEST_MEDIAN_BOND:
                longest = int(lengths.argmax())
                atom = int(bonds[longest, 0])
                residue = topology.residues[topology.atoms[atom].residue_index]
                what = f" ({topology.atoms[atom].name!r} of residue {residue.name})"
                raise LengthUnitError(
                    f"the bonds of the topology are {median:.3g} nm long (median; the bond of atom "
                    f"{atom}{what} "
                    f"{float(lengths[longest]):.3g} nm): the positions look like Angstrom given as nm "
                    "(divide them by 10)", atom)
        if box is not None:
            density = float(masses.sum() / space.volume(box)) * units.AMU_PER_NM3_TO_G_PER_CM3
            if density > HIGHEST_DENSITY:
                raise LengthUnitError(
                    f"the box {[round(value, 4) for value in torch.diagonal(box).tolist()]} nm holds "
                    f"{float(masses.sum()):.6g} amu: {density:.3g} g/cm^3, denser than any matter; the box "
                    "looks like nm given as Angstrom (or Angstrom as nm)")

    def __repr__(self):
        box = None if self.box is None else [round(value, 6) for value in torch.diagonal(self.box).tolist()]
        return (
            f"System(n_atoms={self.n_atoms}, dtype={self.dtype}, device={self.device}, box_diagonal={box}, "
            f"velocities={self.velocities is not None}, topology={self.topology!r})"
        )

    # --- basic properties ---
    @property
    def n_atoms(self):
        """Number of atoms (particles, including extra particles)."""
        return self.positions.shape[0]

    @property
    def dtype(self):
        """Floating dtype of the per-atom tensors."""
        return self.positions.dtype

    @property
    def device(self):
        """Device of the tensors."""
        return self.positions.device

    @property
    def periodic(self):
        """Whether the system has a periodic box."""
        return self.box is not None

    @property
    def atomic_numbers(self):
        """(N,) long tensor of atomic numbers from the topology (on the system's device)."""
        if self.topology is None:
            raise ConfigurationError("atomic_numbers needs a topology; this System has none")
        return self.topology.atomic_numbers.to(self.device)

    @property
    def volume(self):
        """Box volume, nm^3 (0-dim tensor)."""
        if self.box is None:
            raise ConfigurationError("volume needs a periodic box; this System's box is None")
        return space.volume(self.box)

    @property
    def density(self):
        """Mass density, g/cm^3 (0-dim tensor): total mass over box volume."""
        return self.masses.sum() / self.volume * units.AMU_PER_NM3_TO_G_PER_CM3

    # --- new systems from this one ---
    def replace(self, **changes):
        """A new System with some fields replaced (validated like a new one)."""
        return dataclasses.replace(self, **changes)

    def to(self, device=None, dtype=None):
        """A new System with every floating tensor moved to ``device`` and cast to ``dtype``."""

        def move(tensor):
            return None if tensor is None else tensor.to(device=device, dtype=dtype)

        return self.replace(
            positions=move(self.positions),
            masses=move(self.masses),
            charges=move(self.charges),
            box=move(self.box),
            velocities=move(self.velocities),
        )

    # --- PDB ---
    @classmethod
    def from_pdb(cls, path, dtype=torch.float64, device=None):
        """Read a PDB file (first model): positions, topology and box from CRYST1.

        Masses are the standard atomic masses of the elements (0 for extra particles),
        charges are zero. See :func:`mindsponge.pdb.read_pdb` for what the reader handles.

        Args:
            path: PDB file.
            dtype, device: of the tensors (float64 by default: PDB coordinates are exact in it).

        Raises:
            mindsponge.pdb.PDBError: a malformed record, ``file:line: ...``.
            LengthUnitError: lengths in the wrong unit (a CRYST1 box in nm, bonds ten times too long),
                naming the file (and ``file:line`` of the atom of a bond).
        """
        structure = pdb.read_pdb(path)
        box = structure.box
        kwargs = {"dtype": dtype, "device": device}
        try:
            return cls(
                positions=structure.positions.to(**kwargs),
                masses=structure.topology.masses(**kwargs),
                box=None if box is None else box.to(**kwargs),
                topology=structure.topology,
            )
        except LengthUnitError as error:
            where = path if error.atom_index is None else f"{path}:{structure.line_numbers[error.atom_index]}"
            raise LengthUnitError(f"{where}: {error}", error.atom_index) from None

    def to_pdb(self, path):
        """Write the system as a PDB file (CRYST1 box, ATOM/HETATM, TER, CONECT, END)."""
        if self.topology is None:
            raise ConfigurationError("to_pdb needs a topology (atom and residue names); this System has none")
        pdb.write_pdb(path, self.topology, self.positions, self.box)

    # --- ASE ---
    @classmethod
    def from_ase(cls, atoms, dtype=torch.float64, device=None):
        """Build a System from an ``ase.Atoms`` (Å -> nm, cell -> box).

        Masses come from ``atoms.get_masses()``, charges from the initial charges, velocities
        from the momenta if set. A cell that is not lower triangular is rotated (positions
        with it) to ASE's standard form, then reduced (:func:`mindsponge.space.reduce_box`);
        a cell without periodicity gives ``box=None``. The topology uses the arrays ASE's PDB
        reader fills (``atomtypes``, ``residuenames``, ``residuenumbers``) when present, plus
        ``chainids`` and ``info["bonds"]`` written by :meth:`to_ase`; element ``X`` becomes an
        extra particle (element ``None``). Massless particles carry no momentum in ASE: their
        velocities are zero.
        """
        import numpy as np
        from ase import units as ase_units

        positions = np.asarray(atoms.get_positions(), dtype=np.float64)
        box = None
        if atoms.pbc.any():
            if not atoms.pbc.all():
                raise ConfigurationError(
                    f"ase Atoms must be periodic in all three directions or none, got pbc={atoms.pbc}"
                )
            cell = np.asarray(atoms.cell[:], dtype=np.float64)
            if np.abs(np.triu(cell, 1)).max() > 1e-12 * np.abs(cell).max():
                cell, rotation = atoms.cell.standard_form()
                cell = np.asarray(cell[:], dtype=np.float64)
                positions = positions @ rotation.T
            box = space.reduce_box(torch.as_tensor(cell * units.ANGSTROM_TO_NM, dtype=torch.float64))
        velocities = None
        masses = atoms.get_masses()
        if atoms.has("momenta"):
            # ASE velocity unit: Å per ASE time unit; 1 fs = ase.units.fs ASE time units
            massive = masses[:, None] > 0
            velocities = np.where(massive, atoms.get_momenta() / np.where(massive, masses[:, None], 1.0), 0.0)
            velocities = velocities * ase_units.fs * units.ANGSTROM_TO_NM / units.FS_TO_PS
        symbols = atoms.get_chemical_symbols()
        names = atoms.arrays.get("atomtypes", symbols)
        residue_names = atoms.arrays.get("residuenames", ["MOL"] * len(atoms))
        residue_numbers = atoms.arrays.get("residuenumbers", np.ones(len(atoms), dtype=int))
        chain_ids = atoms.arrays.get("chainids", ["A"] * len(atoms))
        residues, topology_atoms, previous = [], [], None
        for name, symbol, residue_name, number, chain_id in zip(
            names, symbols, residue_names, residue_numbers, chain_ids
        ):
            key = (str(residue_name).strip(), int(number), str(chain_id))
            if key != previous:
                chain_index = (
                    0 if not residues else residues[-1].chain_index + (key[2] != residues[-1].chain_id)
                )
                residues.append(Residue(key[0], key[1], key[2], "", chain_index))
                previous = key
            element = None if symbol == "X" else symbol
            topology_atoms.append(Atom(str(name).strip(), element, len(residues) - 1))
        bonds = [tuple(bond) for bond in np.asarray(atoms.info.get("bonds", np.zeros((0, 2), dtype=int)))]
        kwargs = {"dtype": dtype, "device": device}
        return cls(
            positions=torch.as_tensor(positions * units.ANGSTROM_TO_NM, **kwargs),
            masses=torch.as_tensor(masses, **kwargs),
            charges=torch.as_tensor(atoms.get_initial_charges(), **kwargs),
            box=None if box is None else box.to(**kwargs),
            topology=Topology(topology_atoms, residues, bonds),
            velocities=None if velocities is None else torch.as_tensor(velocities, **kwargs),
        )

    def to_ase(self):
        """Convert to an ``ase.Atoms`` (nm -> Å, box -> cell with ``pbc=True``).

        Sets masses, initial charges and velocities (if any); with a topology also the symbols
        (``X`` for extra particles) and the arrays ``atomtypes``, ``residuenames``,
        ``residuenumbers`` (used by ASE's PDB writer), ``chainids`` and ``info["bonds"]``.
        Residue insertion codes are not kept.
        """
        import numpy as np
        from ase import Atoms
        from ase import units as ase_units

        def array(tensor):
            return tensor.detach().to(device="cpu", dtype=torch.float64).numpy()

        n_atoms = self.n_atoms
        symbols = ["X"] * n_atoms
        if self.topology is not None:
            symbols = ["X" if element is None else element for element in self.topology.elements]
        atoms = Atoms(
            symbols=symbols,
            positions=array(self.positions) * units.NM_TO_ANGSTROM,
            cell=None if self.box is None else array(self.box) * units.NM_TO_ANGSTROM,
            pbc=self.box is not None,
            masses=array(self.masses),
            charges=array(self.charges),
        )
        if self.velocities is not None:
            atoms.set_velocities(
                array(self.velocities) / units.ANGSTROM_TO_NM * units.FS_TO_PS / ase_units.fs
            )
        if self.topology is not None:
            residues = [self.topology.residues[atom.residue_index] for atom in self.topology.atoms]
            atoms.new_array("atomtypes", np.array([atom.name for atom in self.topology.atoms], dtype=object))
            atoms.new_array("residuenames", np.array([residue.name for residue in residues], dtype=object))
            atoms.new_array("residuenumbers", np.array([residue.number for residue in residues], dtype=int))
            atoms.new_array("chainids", np.array([residue.chain_id for residue in residues], dtype=object))
            atoms.info["bonds"] = np.array(self.topology.bonds, dtype=int).reshape(-1, 2)
        return atoms
