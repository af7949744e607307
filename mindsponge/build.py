"""Building systems from scratch: boxes of rigid water.

:func:`water_box` fills a cubic periodic box with rigid water molecules of a standard model
(TIP3P, SPC/E, TIP4P-Ew) at a requested mass density. Atom and residue names follow
OpenMM's force-field templates (residue ``HOH`` with atoms ``O``, ``H1``, ``H2`` and, for
four-site models, the massless virtual site ``M`` with element ``None``), so
``system.topology.to_openmm()`` is parameterised by OpenMM's ``tip3p.xml``, ``spce.xml`` or
``tip4pew.xml`` directly.

Placement: oxygens start on the densest-spaced lattice (simple cubic, body-centred or
face-centred cubic) with at least as many sites as molecules, a random subset of sites is
kept, and overlapping oxygens are pushed apart (periodic soft-sphere relaxation) until
every O-O distance is at least ``min_oxygen_distance``. Orientations are uniformly random
and re-drawn for molecules with an intermolecular atom pair closer than
``min_atom_distance``. The box is not equilibrated: minimise and run MD before sampling.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from common import units
from common.errors import ConfigurationError, SimulationError
from mindsponge import elements
from mindsponge.system import Atom, Residue, System, Topology

__all__ = ["WATER_MODELS", "WaterModel", "water_box"]

# mass density of liquid water near 300 K and 1 bar, g/cm^3
EXPERIMENTAL_WATER_DENSITY = 0.997


@dataclass(frozen=True)
class WaterModel:
    """Geometry and charges of a rigid water model.

    Attributes:
        name: model name.
        oh_distance: O-H bond length, nm.
        hoh_angle: H-O-H angle, degrees.
        oxygen_charge, hydrogen_charge: partial charges, e.
        virtual_site_charge: charge of the virtual site M, e (four-site models), else ``None``.
        virtual_site_weights: weights ``(w_O, w_H1, w_H2)`` placing M at ``w_O O + w_H1 H1 + w_H2 H2``
            (OpenMM's ``average3`` virtual site), or ``None``.
    """

    name: str
    oh_distance: float
    hoh_angle: float
    oxygen_charge: float
    hydrogen_charge: float
    virtual_site_charge: float | None = None
    virtual_site_weights: tuple[float, float, float] | None = None

    @property
    def atom_names(self):
        """Atom names of one molecule, in order."""
        return ("O", "H1", "H2", "M") if self.virtual_site_weights else ("O", "H1", "H2")

    @property
    def atom_elements(self):
        """Element symbols of one molecule (``None`` for M)."""
        return ("O", "H", "H", None) if self.virtual_site_weights else ("O", "H", "H")

    @property
    def charges(self):
        """Charges of one molecule, e."""
        charges = [self.oxygen_charge, self.hydrogen_charge, self.hydrogen_charge]
        return tuple(charges + ([self.virtual_site_charge] if self.virtual_site_weights else []))

    @property
    def molecule_mass(self):
        """Mass of one molecule, amu."""
        return sum(elements.mass(element) for element in self.atom_elements)

    def local_coordinates(self):
        """(atoms, 3) float64 array, nm: O at the origin, the H-O-H bisector along +y, in the xy plane."""
        half_angle = math.radians(self.hoh_angle) / 2
        x, y = self.oh_distance * math.sin(half_angle), self.oh_distance * math.cos(half_angle)
        coordinates = [[0.0, 0.0, 0.0], [x, y, 0.0], [-x, y, 0.0]]
        if self.virtual_site_weights:
            weights = np.asarray(self.virtual_site_weights)
            coordinates.append(list(weights @ np.asarray(coordinates)))
        return np.asarray(coordinates, dtype=np.float64)


# parameters as in OpenMM's tip3p.xml, spce.xml and tip4pew.xml
WATER_MODELS = {
    "tip3p": WaterModel("tip3p", 0.09572, 104.52, -0.834, 0.417),
    "spce": WaterModel("spce", 0.1, 109.47, -0.8476, 0.4238),
    "tip4pew": WaterModel(
        "tip4pew", 0.09572, 104.52, 0.0, 0.52422, -1.04844, (0.786646558, 0.106676721, 0.106676721)
    ),
}


def _lattice_sites(n_sites_min, box_length):
    """Sites of the cubic lattice (sc, bcc or fcc) with >= n_sites_min sites and the largest spacing."""
    bases = {
        "sc": (np.zeros((1, 3)), 1.0),
        "bcc": (np.array([[0, 0, 0], [0.5, 0.5, 0.5]]), math.sqrt(3) / 2),
        "fcc": (np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]]), 1 / math.sqrt(2)),
    }
    best = None
    for basis, neighbour_factor in bases.values():
        cells = math.ceil((n_sites_min / len(basis)) ** (1 / 3) - 1e-9)
        spacing = neighbour_factor * box_length / cells
        if best is None or spacing > best[2]:
            best = (basis, cells, spacing)
    basis, cells, _ = best
    grid = np.stack(np.meshgrid(*[np.arange(cells)] * 3, indexing="ij"), axis=-1).reshape(-1, 1, 3)
    return ((grid + basis).reshape(-1, 3) + 0.25) * (box_length / cells)


def _relax_oxygens(positions, box_length, min_distance, max_sweeps=2000):
    """Push apart periodic point pairs closer than min_distance (a soft-sphere relaxation)."""
    from scipy.spatial import cKDTree

    for _ in range(max_sweeps):
        positions %= box_length
        pairs = cKDTree(positions, boxsize=box_length).query_pairs(min_distance, output_type="ndarray")
        if len(pairs) == 0:
            return positions
        separation = positions[pairs[:, 1]] - positions[pairs[:, 0]]
        separation -= box_length * np.round(separation / box_length)
        distance = np.linalg.norm(separation, axis=1, keepdims=True)
        push = 0.5 * (min_distance * 1.02 - distance) * separation / distance
        np.add.at(positions, pairs[:, 0], -push)
        np.add.at(positions, pairs[:, 1], push)
    raise SimulationError(
        f"water_box: could not separate oxygens by {min_distance} nm in {max_sweeps} sweeps; "
        "lower min_oxygen_distance or the density"
    )


def _random_rotations(rng, count):
    """(count, 3, 3) rotation matrices, uniformly distributed (Shoemake's quaternions)."""
    u1, u2, u3 = rng.random((3, count))
    w = np.sqrt(1 - u1) * np.sin(2 * np.pi * u2)
    x = np.sqrt(1 - u1) * np.cos(2 * np.pi * u2)
    y = np.sqrt(u1) * np.sin(2 * np.pi * u3)
    z = np.sqrt(u1) * np.cos(2 * np.pi * u3)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], axis=-1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], axis=-1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], axis=-1),
        ],
        axis=1,
    )


def _orient(rng, oxygens, local, box_length, min_atom_distance, max_sweeps=500):
    """Random orientations, re-drawn for molecules with intermolecular atoms closer than min_atom_distance."""
    from scipy.spatial import cKDTree

    n_molecules = len(oxygens)
    n_real = 3  # O, H1, H2: the virtual site lies inside the molecule
    rotations = _random_rotations(rng, n_molecules)
    molecule_of_atom = np.repeat(np.arange(n_molecules), n_real)
    for _ in range(max_sweeps):
        atoms = oxygens[:, None, :] + np.einsum("mij,aj->mai", rotations, local[:n_real])
        tree = cKDTree(atoms.reshape(-1, 3) % box_length, boxsize=box_length)
        pairs = tree.query_pairs(min_atom_distance, output_type="ndarray")
        molecules = molecule_of_atom[pairs]
        clashing = np.unique(molecules[molecules[:, 0] != molecules[:, 1]])
        if len(clashing) == 0:
            return oxygens[:, None, :] + np.einsum("mij,aj->mai", rotations, local)
        rotations[clashing] = _random_rotations(rng, len(clashing))
    raise SimulationError(
        f"water_box: could not orient the molecules without intermolecular atoms closer than "
        f"{min_atom_distance} nm in {max_sweeps} sweeps"
    )


def water_box(
    n_molecules=None,
    box_size=None,
    model="tip3p",
    density=None,
    seed=0,
    min_oxygen_distance=0.27,
    min_atom_distance=0.16,
    dtype=torch.float64,
    device=None,
):
    """A cubic periodic box of rigid water molecules at a given density.

    Give two of ``n_molecules``, ``box_size`` and ``density`` (``density`` defaults to the
    experimental 0.997 g/cm^3, so one of the others suffices). With ``box_size`` the number
    of molecules is rounded to the nearest integer, so the density is met to within half a
    molecule.

    Args:
        n_molecules: number of water molecules.
        box_size: edge of the cubic box, nm.
        model: ``"tip3p"``, ``"spce"`` or ``"tip4pew"`` (see :data:`WATER_MODELS`).
        density: mass density, g/cm^3 (default 0.997).
        seed: seed of the random placement and orientations.
        min_oxygen_distance: smallest O-O distance, nm.
        min_atom_distance: smallest distance between atoms of different molecules, nm.
        dtype, device: of the returned tensors.

    Returns:
        :class:`mindsponge.System` with positions (nm), masses (element masses, 0 for M),
        the model's charges, a cubic box, and a topology (residues ``HOH``, bonds O-H1, O-H2).

    Raises:
        ValueError: an unknown model, too few or too many of the size arguments, or
            non-positive sizes.
    """
    key = str(model).lower().replace("/", "").replace("-", "").replace("_", "")
    if key not in WATER_MODELS:
        raise ConfigurationError(f"model must be one of {sorted(WATER_MODELS)}, got {model!r}")
    water = WATER_MODELS[key]
    n_molecules, box_size = _count_and_size(n_molecules, box_size, density, water.molecule_mass)
    rng = np.random.default_rng(seed)
    sites = _lattice_sites(n_molecules, box_size)
    oxygens = sites[np.sort(rng.choice(len(sites), size=n_molecules, replace=False))]
    oxygens = _relax_oxygens(oxygens, box_size, min_oxygen_distance)
    positions = _orient(rng, oxygens, water.local_coordinates(), box_size, min_atom_distance)

    topology = _water_topology(water, n_molecules)
    kwargs = {"dtype": dtype, "device": device}
    return System(
        positions=torch.as_tensor(positions.reshape(-1, 3), **kwargs),
        masses=topology.masses(**kwargs),
        charges=torch.tensor(water.charges * n_molecules, **kwargs),
        box=torch.eye(3, **kwargs) * box_size,
        topology=topology,
    )


def _count_and_size(n_molecules, box_size, density, molecule_mass):
    """The number of molecules and the box edge (nm) from two of them and the density (g/cm^3,
    default experimental), checked."""
    if n_molecules is not None and box_size is not None:
        if density is not None:
            raise ConfigurationError("give two of n_molecules, box_size and density, not all three")
    elif n_molecules is None and box_size is None:
        raise ConfigurationError("give n_molecules or box_size (nm)")
    density = EXPERIMENTAL_WATER_DENSITY if density is None else float(density)
    if not density > 0:
        raise ConfigurationError(f"density must be positive (g/cm^3), got {density}")
    molecule_volume = molecule_mass * units.AMU_PER_NM3_TO_G_PER_CM3 / density  # nm^3
    if box_size is None:
        n_molecules = int(n_molecules)
        if n_molecules < 1:
            raise ConfigurationError(f"n_molecules must be at least 1, got {n_molecules}")
        return n_molecules, (n_molecules * molecule_volume) ** (1 / 3)
    box_size = float(box_size)
    if not box_size > 0:
        raise ConfigurationError(f"box_size must be positive (nm), got {box_size}")
    if n_molecules is None:
        n_molecules = round(box_size**3 / molecule_volume)
        if n_molecules < 1:
            raise ConfigurationError(
                f"box_size {box_size} nm holds no water molecule at density {density} g/cm^3")
    return n_molecules, box_size


def _water_topology(water, n_molecules):
    """Residues ``HOH`` of the model's atoms, with bonds O-H1 and O-H2."""
    n_sites = len(water.atom_names)
    residues = [Residue("HOH", index + 1, "A") for index in range(n_molecules)]
    atoms = [
        Atom(name, element, index)
        for index in range(n_molecules)
        for name, element in zip(water.atom_names, water.atom_elements)
    ]
    bonds = [
        (n_sites * index + 0, n_sites * index + hydrogen)
        for index in range(n_molecules)
        for hydrogen in (1, 2)
    ]
    return Topology(atoms, residues, bonds)
