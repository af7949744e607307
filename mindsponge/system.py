"""Molecular systems: the state a force field and an integrator work on.

A :class:`System` holds per-atom tensors in MD units (positions in nm, velocities in nm/ps,
masses in amu, charges in e), an optional periodic box (rows are the box vectors a, b, c in
nm, in OpenMM's reduced form, see :mod:`mindsponge.space`) and an optional
:class:`Topology` (atom names, elements, residues, chains, bonds). Systems are immutable:
:meth:`System.to` and :meth:`System.replace` return new ones, so nothing downstream reaches
back into the state that produced it.

Example:
    >>> import mindsponge as ms
    >>> system = ms.System.from_pdb("protein.pdb")           # doctest: +SKIP
    >>> system.positions.shape, system.box, system.density   # doctest: +SKIP
    >>> atoms = system.to_ase()                               # doctest: +SKIP
"""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from common import checks, units
from common.errors import DataError
from mindsponge import elements, space

__all__ = ["Atom", "AtomOutsideBoxError", "Residue", "System", "Topology"]


class AtomOutsideBoxError(DataError):
    """An atom lies more than one box length outside the primary cell (often an Å/nm mix-up).

    Attributes:
        atom_index: index of the first such atom.
    """

    def __init__(self, message, atom_index):
        super().__init__(message)
        self.atom_index = atom_index


@dataclass(frozen=True)
class Atom:
    """One atom of a :class:`Topology`.

    Attributes:
        name: atom name (``"CA"``, ``"O"``, ``"H1"``).
        element: element symbol (``"C"``, ``"Cl"``), or ``None`` for a massless extra
            particle (a virtual site such as the TIP4P ``M`` site).
        residue_index: index into :attr:`Topology.residues`.
    """

    name: str
    element: str | None
    residue_index: int


@dataclass(frozen=True)
class Residue:
    """One residue of a :class:`Topology`.

    Attributes:
        name: residue name (``"ALA"``, ``"HOH"``).
        number: residue sequence number (PDB resSeq).
        chain_id: chain identifier (PDB column 22).
        insertion_code: PDB insertion code, ``""`` if none.
        chain_index: index of the chain; consecutive residues belong to the same chain when
            both their ``chain_id`` and ``chain_index`` agree (a PDB ``TER`` or a new chain in
            an OpenMM topology starts a new chain even when the identifier repeats).
    """

    name: str
    number: int
    chain_id: str = "A"
    insertion_code: str = ""
    chain_index: int = 0


@dataclass(frozen=True, eq=True)
class Topology:
    """Atoms, residues, chains and bonds of a system.

    Args:
        atoms: sequence of :class:`Atom`, one per particle, in system order.
        residues: sequence of :class:`Residue`; every atom's ``residue_index`` points here.
        bonds: sequence of atom index pairs ``(i, j)``.

    Raises:
        ValueError: naming the atom or bond whose element, residue index or atom index is invalid.
    """

    atoms: Sequence[Atom]
    residues: Sequence[Residue]
    bonds: Sequence[tuple[int, int]] = ()

    def __post_init__(self):
        object.__setattr__(self, "atoms", tuple(self.atoms))
        object.__setattr__(self, "residues", tuple(self.residues))
        object.__setattr__(self, "bonds", tuple((int(i), int(j)) for i, j in self.bonds))
        n_residues = len(self.residues)
        for index, atom in enumerate(self.atoms):
            if atom.element is not None and not elements.is_element(atom.element):
                raise ValueError(f"atom {index} ({atom.name!r}): unknown element {atom.element!r}")
            if not 0 <= atom.residue_index < n_residues:
                raise ValueError(
                    f"atom {index} ({atom.name!r}): residue_index {atom.residue_index} is out of range "
                    f"for {n_residues} residues"
                )
        for index, (i, j) in enumerate(self.bonds):
            if not (0 <= i < self.n_atoms and 0 <= j < self.n_atoms) or i == j:
                raise ValueError(
                    f"bond {index} ({i}, {j}) must join two different atoms in [0, {self.n_atoms})"
                )

    def __repr__(self):
        return (
            f"Topology(n_atoms={self.n_atoms}, n_residues={self.n_residues}, n_chains={len(self.chains())}, "
            f"n_bonds={len(self.bonds)})"
        )

    @property
    def n_atoms(self):
        """Number of atoms."""
        return len(self.atoms)

    @property
    def n_residues(self):
        """Number of residues."""
        return len(self.residues)

    @property
    def elements(self):
        """Element symbols, one per atom (``None`` for extra particles)."""
        return [atom.element for atom in self.atoms]

    @property
    def atomic_numbers(self):
        """(N,) long tensor of atomic numbers (0 for extra particles)."""
        return torch.tensor([elements.atomic_number(atom.element) for atom in self.atoms], dtype=torch.long)

    @property
    def residue_indices(self):
        """(N,) long tensor: the residue index of every atom."""
        return torch.tensor([atom.residue_index for atom in self.atoms], dtype=torch.long)

    def describe_atom(self, index):
        """``"atom 7 (H of ALA 2)"``: an atom's index, name, residue name and number, for messages."""
        atom = self.atoms[index]
        residue = self.residues[atom.residue_index]
        return f"atom {index} ({atom.name} of {residue.name} {residue.number})"

    def masses(self, dtype=None, device=None):
        """(N,) tensor of standard atomic masses (amu) of the elements; 0 for extra particles."""
        return torch.tensor([elements.mass(atom.element) for atom in self.atoms], dtype=dtype, device=device)

    def bond_tensor(self, device=None):
        """(B, 2) long tensor of bonded atom index pairs."""
        return torch.tensor(self.bonds, dtype=torch.long, device=device).reshape(-1, 2)

    def chains(self):
        """Residue indices grouped by chain.

        Returns:
            list of ``(chain_id, [residue indices])``, in order; a new chain starts where the
            ``chain_id`` or the ``chain_index`` of consecutive residues changes.
        """
        groups = []
        previous = None
        for index, residue in enumerate(self.residues):
            key = (residue.chain_id, residue.chain_index)
            if key != previous:
                groups.append((residue.chain_id, []))
                previous = key
            groups[-1][1].append(index)
        return groups

    def check_residue_order(self, purpose):
        """Raise ValueError unless atoms run residue by residue and residues chain by chain.

        PDB files and OpenMM topologies store atoms in that order; ``purpose`` names the caller.
        """
        residue_indices = [atom.residue_index for atom in self.atoms]
        if any(later < earlier for earlier, later in zip(residue_indices, residue_indices[1:])):
            first = next(i for i in range(1, self.n_atoms) if residue_indices[i] < residue_indices[i - 1])
            raise ValueError(
                f"{purpose} needs the atoms of each residue to be contiguous and residues in atom order; "
                f"atom {first} ({self.atoms[first].name!r}) belongs to residue {residue_indices[first]} "
                f"after an atom of residue {residue_indices[first - 1]}"
            )

    @classmethod
    def from_openmm(cls, openmm_topology):
        """Build a Topology from an ``openmm.app.Topology`` (atoms, residues, chains, bonds).

        Residue numbers are the residue ids where they are integers, else the 1-based residue index.
        """
        residues = []
        for residue in openmm_topology.residues():
            try:
                number = int(residue.id)
            except ValueError:
                number = residue.index + 1
            residues.append(
                Residue(
                    residue.name, number, residue.chain.id, residue.insertionCode.strip(), residue.chain.index
                )
            )
        atoms = [
            Atom(atom.name, None if atom.element is None else atom.element.symbol, atom.residue.index)
            for atom in openmm_topology.atoms()
        ]
        bonds = [(bond[0].index, bond[1].index) for bond in openmm_topology.bonds()]
        return cls(atoms, residues, bonds)

    def to_openmm(self, box=None):
        """Convert to an ``openmm.app.Topology`` (needs the ``openmm`` extra).

        Args:
            box: optional (3, 3) tensor, nm; set as the topology's periodic box vectors.

        Returns:
            ``openmm.app.Topology`` with the same atoms, residues, chains and bonds; extra
            particles get ``element=None``, as OpenMM's force-field templates expect.
        """
        from openmm import Vec3, app, unit

        self.check_residue_order("Topology.to_openmm (OpenMM numbers atoms residue by residue)")
        topology = app.Topology()
        openmm_residues = [None] * self.n_residues
        for chain_id, residue_indices in self.chains():
            chain = topology.addChain(chain_id)
            for index in residue_indices:
                residue = self.residues[index]
                openmm_residues[index] = topology.addResidue(
                    residue.name, chain, str(residue.number), residue.insertion_code
                )
        atoms_by_residue = [[] for _ in range(self.n_residues)]
        for index, atom in enumerate(self.atoms):
            atoms_by_residue[atom.residue_index].append(index)
        openmm_atoms = [None] * self.n_atoms
        for residue_index, atom_indices in enumerate(atoms_by_residue):
            for index in atom_indices:
                atom = self.atoms[index]
                element = None if atom.element is None else app.Element.getBySymbol(atom.element)
                openmm_atoms[index] = topology.addAtom(atom.name, element, openmm_residues[residue_index])
        for i, j in self.bonds:
            topology.addBond(openmm_atoms[i], openmm_atoms[j])
        if box is not None:
            rows = box.detach().double().cpu().tolist()
            topology.setPeriodicBoxVectors([Vec3(*row) for row in rows] * unit.nanometer)
        return topology


def _as_float_tensor(value, name, dtype, device):
    if isinstance(value, torch.Tensor) and value.is_complex():
        raise TypeError(f"{name} must be real, got {value.dtype}")
    try:
        return torch.as_tensor(value, dtype=dtype, device=device)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"{name} must be convertible to a {dtype} tensor: {error}") from error


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
            an invalid box (:class:`mindsponge.space.BoxError`), or an atom more than one box
            length outside the primary cell (:class:`AtomOutsideBoxError`, a sign of Å/nm mix-ups).
        TypeError: an argument of the wrong type.
    """

    positions: torch.Tensor
    masses: torch.Tensor
    charges: torch.Tensor | None = None
    box: torch.Tensor | None = None
    topology: Topology | None = None
    velocities: torch.Tensor | None = None

    def __post_init__(self):
        positions = self.positions
        if not isinstance(positions, torch.Tensor) or not positions.is_floating_point():
            positions = _as_float_tensor(positions, "positions", torch.get_default_dtype(), None)
        if positions.dim() != 2 or positions.shape[1] != 3:
            raise ValueError(f"positions must have shape (N, 3) in nm, got {tuple(positions.shape)}")
        n_atoms = positions.shape[0]
        dtype, device = positions.dtype, positions.device

        def per_atom(value, name, shape):
            tensor = _as_float_tensor(value, name, dtype, device)
            if tuple(tensor.shape) != shape:
                raise ValueError(
                    f"{name} must have shape {shape} to match positions, got {tuple(tensor.shape)}"
                )
            return checks.finite(tensor, name, item="atom")

        positions = per_atom(positions, "positions", (n_atoms, 3))
        masses = per_atom(self.masses, "masses", (n_atoms,))
        charges = (
            torch.zeros(n_atoms, dtype=dtype, device=device)
            if self.charges is None
            else per_atom(self.charges, "charges", (n_atoms,))
        )
        velocities = (
            None if self.velocities is None else per_atom(self.velocities, "velocities", (n_atoms, 3))
        )
        topology = self.topology
        if topology is not None:
            if not isinstance(topology, Topology):
                raise TypeError(f"topology must be a mindsponge Topology, got {type(topology).__name__}")
            if topology.n_atoms != n_atoms:
                raise ValueError(f"topology has {topology.n_atoms} atoms but positions has {n_atoms}")
        self._check_masses(masses, topology)
        box = self.box
        if box is not None:
            box = _as_float_tensor(box, "box", dtype, device)
            if box.dim() == 2:
                checks.finite(box, "box", item="box vector")
            space.check_box(box, "box")
            self._check_inside(positions, box, topology)
        for name, value in (
            ("positions", positions),
            ("masses", masses),
            ("charges", charges),
            ("box", box),
            ("velocities", velocities),
        ):
            object.__setattr__(self, name, value)

    @staticmethod
    def _check_masses(masses, topology):
        values = masses.detach()
        extra = torch.zeros_like(values, dtype=torch.bool)
        if topology is not None:
            extra = torch.tensor([atom.element is None for atom in topology.atoms], device=values.device)
        bad = _first_bad_row((values < 0) | ((values == 0) & ~extra))
        if bad is not None:
            what = "" if topology is None else f" ({topology.atoms[bad].name!r})"
            raise ValueError(
                f"masses must be positive (zero only for extra particles with element None), "
                f"atom {bad}{what} has mass {float(values[bad])}"
            )

    @staticmethod
    def _check_inside(positions, box, topology):
        fractional = space.fractional(positions.detach(), box.detach())
        bad = _first_bad_row((fractional < -1) | (fractional >= 2))
        if bad is not None:
            what = ""
            if topology is not None:
                atom = topology.atoms[bad]
                residue = topology.residues[atom.residue_index]
                what = f" ({atom.name!r} of residue {residue.name} {residue.number})"
            raise AtomOutsideBoxError(
                f"atom {bad}{what} at {positions[bad].tolist()} nm lies more than one box length outside "
                f"the periodic box (fractional coordinates {fractional[bad].tolist()}); are the positions "
                "and the box both in nm?",
                bad,
            )

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
            raise ValueError("atomic_numbers needs a topology; this System has none")
        return self.topology.atomic_numbers.to(self.device)

    @property
    def volume(self):
        """Box volume, nm^3 (0-dim tensor)."""
        if self.box is None:
            raise ValueError("volume needs a periodic box; this System's box is None")
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
            AtomOutsideBoxError: an atom more than one box length outside the CRYST1 box,
                naming the atom index and ``file:line``.
        """
        from mindsponge import pdb

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
        except AtomOutsideBoxError as error:
            line = structure.line_numbers[error.atom_index]
            raise AtomOutsideBoxError(f"{path}:{line}: {error}", error.atom_index) from None

    def to_pdb(self, path):
        """Write the system as a PDB file (CRYST1 box, ATOM/HETATM, TER, CONECT, END)."""
        from mindsponge import pdb

        if self.topology is None:
            raise ValueError("to_pdb needs a topology (atom and residue names); this System has none")
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
                raise ValueError(
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
