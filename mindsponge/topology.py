"""Topology: the atoms, residues, chains and bonds of a molecular system.

A :class:`Topology` is what a structure file says about a system besides the coordinates: atom
names and elements (:class:`Atom`), residues and chains (:class:`Residue`) and bonds. It is
immutable, shared by every :class:`~mindsponge.system.System` made from the same structure, and
converts to and from OpenMM's ``openmm.app.Topology``. :mod:`mindsponge.pdb` reads and writes
it; a :class:`~mindsponge.system.System` carries one.

Example:
    >>> from mindsponge.topology import Atom, Residue, Topology
    >>> water = Topology([Atom("O", "O", 0), Atom("H1", "H", 0), Atom("H2", "H", 0)],
    ...                  [Residue("HOH", 1)], bonds=[(0, 1), (0, 2)])
    >>> water.n_atoms, water.describe_atom(1)
    (3, 'atom 1 (H1 of HOH 1)')
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from common.errors import ConfigurationError
from mindsponge import elements

__all__ = ["Atom", "Residue", "Topology"]


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
                raise ConfigurationError(f"atom {index} ({atom.name!r}): unknown element {atom.element!r}")
            if not 0 <= atom.residue_index < n_residues:
                raise ConfigurationError(
                    f"atom {index} ({atom.name!r}): residue_index {atom.residue_index} is out of range "
                    f"for {n_residues} residues"
                )
        for index, (i, j) in enumerate(self.bonds):
            if not (0 <= i < self.n_atoms and 0 <= j < self.n_atoms) or i == j:
                raise ConfigurationError(
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
            raise ConfigurationError(
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
