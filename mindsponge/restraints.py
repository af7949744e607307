"""Receptor-ligand restraints for binding free energies, with their standard-state corrections.

In the complex leg of an absolute binding free energy the decoupled ligand would wander off through the
box; a restraint keeps it by the receptor, and an analytic (or one-dimensional numerical) correction
releases it to the standard concentration (1 M, ``V0 = 1.66054 nm^3`` per molecule) at the end. Three
kinds, all multiplied by the global parameter ``lambda_restraints`` (1: on), as openmmtools does:

- :class:`CentroidRestraint` ``kind="harmonic"``: ``U = lambda_restraints (K/2) r^2`` between the
  mass-weighted centroids of a receptor group and the ligand (openmmtools' ``HarmonicRestraintForce``);
- :class:`CentroidRestraint` ``kind="flat-bottom"``: ``U = lambda_restraints step(r - r0) (K/2) (r - r0)^2``
  (openmmtools' ``FlatBottomRestraintForce``);
- :class:`BoreschRestraint`: one distance, two angles and three dihedrals between three receptor atoms
  ``P3, P2, P1`` and three ligand atoms ``L1, L2, L3`` (Boresch, Tettinger, Leitgeb and Karplus,
  J. Phys. Chem. B 107, 9535 (2003))::

      U = lambda_restraints [K_r/2 (|P1 L1| - r0)^2 + K_thetaA/2 (angle(P2,P1,L1) - thetaA0)^2
          + K_thetaB/2 (angle(P1,L1,L2) - thetaB0)^2 + K_phiA/2 d(dihedral(P3,P2,P1,L1) - phiA0)^2
          + K_phiB/2 d(dihedral(P2,P1,L1,L2) - phiB0)^2 + K_phiC/2 d(dihedral(P1,L1,L2,L3) - phiC0)^2]

  with ``d`` the difference wrapped into ``[-pi, pi)``.

A restraint is an OpenMM force added to the OpenMM ``System`` (:meth:`CentroidRestraint.openmm_force`,
:func:`add_restraint`) before :func:`mindsponge.alchemy.alchemical_force_field` imports it, so mindsponge
evaluates exactly what OpenMM would (the tests compare energies and forces with OpenMM, and the
centroid forces with openmmtools' own). Distances are minimum-image in a periodic System (mindsponge wraps
molecules into the box, so host and guest may sit in different images).

How the restraint enters a leg (the choice made here): it is present at every state of the complex leg
with ``lambda_restraints = 1`` unless the schedule gives ``lambda_restraints`` values, which is how
openmmtools/YANK switch a Boresch restraint on (fully coupled, ``0 -> 1``) before decoupling. A
flat-bottom restraint that the bound ligand never touches needs no switching; a harmonic or Boresch
restraint held at every state leaves its (small, positive) free energy in the coupled state out of the
result unless it is switched on along the schedule.

Standard-state correction (:meth:`standard_state_correction`, kT): the free energy of releasing the
restrained, decoupled ligand to the standard concentration, openmmtools' convention and sign::

    centroid: dG = -ln(V0 / V_r),  V_r = integral_0^r_max 4 pi r^2 exp(-U(r)/kT) dr  (bounded by the box)
    Boresch:  dG = -ln[8 pi^2 V0 sqrt(K_r K_thetaA K_thetaB K_phiA K_phiB K_phiC)
                      / (r0^2 sin(thetaA0) sin(thetaB0) (2 pi kT)^3)]            (Boresch 2003, eq. 32)

with ``r_max`` where ``U`` reaches 100 kT (as openmmtools). The binding free energy is then
``dG_bind = dG_solvent - dG_complex - dG_restraint`` (:func:`mindsponge.free_energy.combine` with
``correction_kT = -dG_restraint``).

Atom selection when none is given (:func:`select_centroid_atoms`, :func:`select_boresch`) uses the
starting structure; units are nm, rad, kJ/mol, K.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from common import checks
from common.errors import ConfigurationError
from common.units import AVOGADRO, BOLTZMANN_MD

__all__ = [
    "BoreschRestraint",
    "CentroidRestraint",
    "STANDARD_STATE_VOLUME",
    "add_restraint",
    "boresch_geometry",
    "select_boresch",
    "select_centroid_atoms",
]

#: nm^3 per molecule at 1 mol/L
STANDARD_STATE_VOLUME = 1e24 / AVOGADRO
#: openmmtools integrates the centroid restraints' volume up to this energy (kT)
ENERGY_CUTOFF_KT = 100.0
CONTROLLING_PARAMETER = "lambda_restraints"
CENTROID_KINDS = ("harmonic", "flat-bottom")
CENTROID_EXPRESSIONS = {
    "harmonic": "(K/2)*distance(g1,g2)^2",
    "flat-bottom": "step(distance(g1,g2)-r0)*(K/2)*(distance(g1,g2)-r0)^2",
}
BORESCH_PARAMETERS = ("K_r", "r0", "K_thetaA", "thetaA0", "K_thetaB", "thetaB0", "K_phiA", "phiA0",
                      "K_phiB", "phiB0", "K_phiC", "phiC0")
BORESCH_ENERGY = (
    "(K_r/2)*(distance(p3,p4)-r0)^2 + (K_thetaA/2)*(angle(p2,p3,p4)-thetaA0)^2"
    " + (K_thetaB/2)*(angle(p3,p4,p5)-thetaB0)^2 + (K_phiA/2)*dA^2 + (K_phiB/2)*dB^2 + (K_phiC/2)*dC^2"
)
#: the wrapped dihedral differences that BORESCH_ENERGY uses (OpenMM's expression syntax)
BORESCH_DEFINITIONS = (
    "; dA = wA - floor(wA/(2*pi) + 0.5)*(2*pi); wA = dihedral(p1,p2,p3,p4) - phiA0;"
    " dB = wB - floor(wB/(2*pi) + 0.5)*(2*pi); wB = dihedral(p2,p3,p4,p5) - phiB0;"
    " dC = wC - floor(wC/(2*pi) + 0.5)*(2*pi); wC = dihedral(p3,p4,p5,p6) - phiC0;"
    f" pi = {math.pi!r}"
)


def _atoms(values, name: str, count: int | None = None) -> tuple[int, ...]:
    atoms = tuple(int(atom) for atom in values)
    if not atoms:
        raise ConfigurationError(f"{name} is empty: give atom indices (from 0)")
    if min(atoms) < 0:
        raise ConfigurationError(f"{name} must be atom indices from 0, got {min(atoms)}")
    if count is not None and len(atoms) != count:
        raise ConfigurationError(f"{name} must be {count} atom indices, got {len(atoms)}")
    if len(set(atoms)) != len(atoms):
        raise ConfigurationError(f"{name} repeats an atom: {list(atoms)}")
    return atoms


def _check_atoms_in(restraint, n_particles: int) -> None:
    for name in ("receptor_atoms", "ligand_atoms"):
        outside = [atom for atom in getattr(restraint, name) if atom >= n_particles]
        if outside:
            raise ConfigurationError(f"{type(restraint).__name__}: {name} holds atom {outside[0]}, "
                                     f"outside the System of {n_particles} particles")
    if set(restraint.receptor_atoms) & set(restraint.ligand_atoms):
        raise ConfigurationError(f"{type(restraint).__name__}: receptor_atoms and ligand_atoms share atoms "
                                 f"{sorted(set(restraint.receptor_atoms) & set(restraint.ligand_atoms))}")


@dataclass(frozen=True)
class CentroidRestraint:
    """A harmonic or flat-bottom restraint between the mass-weighted centroids of two groups.

    Attributes:
        kind: ``"harmonic"`` or ``"flat-bottom"``.
        receptor_atoms, ligand_atoms: atom indices (from 0) of the two groups.
        spring_constant: ``K``, kJ/mol/nm^2.
        well_radius: ``r0``, nm (flat-bottom only; 0 for harmonic).
    """

    kind: str
    receptor_atoms: tuple[int, ...]
    ligand_atoms: tuple[int, ...]
    spring_constant: float = 418.4
    well_radius: float = 0.0

    def __post_init__(self):
        if self.kind not in CENTROID_KINDS:
            raise ConfigurationError(f"CentroidRestraint: kind must be one of {CENTROID_KINDS}, "
                                     f"got {self.kind!r}")
        object.__setattr__(self, "receptor_atoms", _atoms(self.receptor_atoms, "receptor_atoms"))
        object.__setattr__(self, "ligand_atoms", _atoms(self.ligand_atoms, "ligand_atoms"))
        checks.positive(self.spring_constant, "CentroidRestraint: spring_constant (kJ/mol/nm^2)")
        if self.kind == "flat-bottom":
            checks.positive(self.well_radius, "CentroidRestraint: well_radius (nm)")
        elif self.well_radius != 0.0:
            raise ConfigurationError("CentroidRestraint: well_radius is for kind='flat-bottom' only; the "
                                     f"harmonic restraint has none, got {self.well_radius}")

    def energy(self, distance):
        """``U(r)`` without ``lambda_restraints``: ``distance`` (nm, array) -> kJ/mol."""
        distance = np.asarray(distance, dtype=float)
        stretch = np.maximum(distance - self.well_radius, 0.0)
        return 0.5 * self.spring_constant * stretch**2

    def openmm_force(self, masses: Sequence[float], periodic: bool = True):
        """The restraint as an ``openmm.CustomCentroidBondForce`` (mass weights given explicitly).

        Args:
            masses: ``(N,)`` amu, the System's particle masses (the groups' weights).
            periodic: minimum-image distance between the centroids (a periodic System).
        """
        import openmm

        expression = f"{CONTROLLING_PARAMETER}*({CENTROID_EXPRESSIONS[self.kind]})"
        force = openmm.CustomCentroidBondForce(2, expression)
        force.addGlobalParameter(CONTROLLING_PARAMETER, 1.0)
        values = [self.spring_constant]
        force.addPerBondParameter("K")
        if self.kind == "flat-bottom":
            force.addPerBondParameter("r0")
            values.append(self.well_radius)
        for atoms in (self.receptor_atoms, self.ligand_atoms):
            force.addGroup(list(atoms), [float(masses[atom]) for atom in atoms])
        force.addBond([0, 1], values)
        force.setUsesPeriodicBoundaryConditions(periodic)
        force.setName(f"{self.kind} restraint")
        return force

    def standard_state_correction(self, temperature: float, max_volume: float | None = None) -> float:
        """``-ln(V0 / V_r)``, kT: releasing the restrained decoupled ligand to 1 M (openmmtools' convention).

        Args:
            temperature: K.
            max_volume: nm^3, the box volume that bounds ``V_r`` (``None``: unbounded).
        """
        from scipy import integrate

        checks.positive(temperature, "standard_state_correction: temperature (K)")
        kT = BOLTZMANN_MD * temperature  # noqa: N806
        r_max = self.well_radius + math.sqrt(2.0 * ENERGY_CUTOFF_KT * kT / self.spring_constant)
        volume = 4.0 / 3.0 * math.pi * self.well_radius**3
        walls, _ = integrate.quad(lambda r: 4.0 * math.pi * r**2 * math.exp(-self.energy(r) / kT),
                                  self.well_radius, r_max, epsabs=0.0, epsrel=1e-12, limit=200)
        volume += walls
        if max_volume is not None:
            volume = min(volume, float(max_volume))
        return -math.log(STANDARD_STATE_VOLUME / volume)


@dataclass(frozen=True)
class BoreschRestraint:
    """Boresch orientational restraint: receptor atoms ``(P3, P2, P1)``, ligand atoms ``(L1, L2, L3)``.

    Attributes:
        receptor_atoms: ``(P3, P2, P1)`` indices; ``P1`` is the anchor bound to ``L1``.
        ligand_atoms: ``(L1, L2, L3)`` indices.
        r0: nm; theta_a0, theta_b0 (angles ``P2 P1 L1``, ``P1 L1 L2``), phi_a0, phi_b0, phi_c0 (dihedrals
            ``P3 P2 P1 L1``, ``P2 P1 L1 L2``, ``P1 L1 L2 L3``): rad, the restraint's minimum.
        k_r: kJ/mol/nm^2; k_theta_a, k_theta_b, k_phi_a, k_phi_b, k_phi_c: kJ/mol/rad^2.
    """

    receptor_atoms: tuple[int, int, int]
    ligand_atoms: tuple[int, int, int]
    r0: float
    theta_a0: float
    theta_b0: float
    phi_a0: float
    phi_b0: float
    phi_c0: float
    k_r: float = 4184.0
    k_theta_a: float = 41.84
    k_theta_b: float = 41.84
    k_phi_a: float = 41.84
    k_phi_b: float = 41.84
    k_phi_c: float = 41.84

    def __post_init__(self):
        object.__setattr__(self, "receptor_atoms", _atoms(self.receptor_atoms, "receptor_atoms", 3))
        object.__setattr__(self, "ligand_atoms", _atoms(self.ligand_atoms, "ligand_atoms", 3))
        checks.positive(self.r0, "BoreschRestraint: r0 (nm)")
        for name in ("theta_a0", "theta_b0"):
            value = getattr(self, name)
            if not 0.0 < value < math.pi:
                raise ConfigurationError(f"BoreschRestraint: {name} must lie strictly between 0 and pi rad "
                                         f"(a collinear anchor has no defined dihedral), got {value}")
        for name in ("phi_a0", "phi_b0", "phi_c0"):
            if not -math.pi <= getattr(self, name) <= math.pi:
                raise ConfigurationError(f"BoreschRestraint: {name} must lie in [-pi, pi] rad, got "
                                         f"{getattr(self, name)}")
        for name in ("k_r", "k_theta_a", "k_theta_b", "k_phi_a", "k_phi_b", "k_phi_c"):
            checks.positive(getattr(self, name), f"BoreschRestraint: {name}")

    def parameter_values(self) -> list[float]:
        """The per-bond parameters in the order of :data:`BORESCH_PARAMETERS`."""
        return [self.k_r, self.r0, self.k_theta_a, self.theta_a0, self.k_theta_b, self.theta_b0,
                self.k_phi_a, self.phi_a0, self.k_phi_b, self.phi_b0, self.k_phi_c, self.phi_c0]

    def openmm_force(self, masses: Sequence[float] | None = None, periodic: bool = True):
        """The restraint as an ``openmm.CustomCompoundBondForce`` of six particles.

        Args:
            masses: unused (the same call as :meth:`CentroidRestraint.openmm_force`).
            periodic: minimum-image geometry (a periodic System).
        """
        import openmm

        force = openmm.CustomCompoundBondForce(
            6, f"{CONTROLLING_PARAMETER}*({BORESCH_ENERGY}){BORESCH_DEFINITIONS}")
        force.addGlobalParameter(CONTROLLING_PARAMETER, 1.0)
        for name in BORESCH_PARAMETERS:
            force.addPerBondParameter(name)
        force.addBond([*self.receptor_atoms, *self.ligand_atoms], self.parameter_values())
        force.setUsesPeriodicBoundaryConditions(periodic)
        force.setName("Boresch restraint")
        return force

    def standard_state_correction(self, temperature: float, max_volume: float | None = None) -> float:
        """Boresch 2003 eq. 32, kT (the stiff-restraint limit; see the module docstring).

        Args:
            temperature: K.
            max_volume: unused (the restraint volume of a stiff restraint is far below any box).
        """
        checks.positive(temperature, "standard_state_correction: temperature (K)")
        kT = BOLTZMANN_MD * temperature  # noqa: N806
        stiffness = math.sqrt(self.k_r * self.k_theta_a * self.k_theta_b * self.k_phi_a * self.k_phi_b
                              * self.k_phi_c)
        numerator = 8.0 * math.pi**2 * STANDARD_STATE_VOLUME * stiffness
        sines = math.sin(self.theta_a0) * math.sin(self.theta_b0)
        denominator = self.r0**2 * sines * (2.0 * math.pi * kT) ** 3
        return -math.log(numerator / denominator)


def add_restraint(openmm_system, restraint, periodic: bool | None = None) -> int:
    """Add ``restraint``'s force to an OpenMM ``System`` (in place); returns the force's index.

    Args:
        openmm_system: ``openmm.System``; its masses weight centroid groups.
        restraint: :class:`CentroidRestraint` or :class:`BoreschRestraint`.
        periodic: minimum-image geometry (default: whether the System's forces use periodic boundaries).

    Raises:
        ConfigurationError: atoms outside the System, or shared by both groups.
    """
    n_particles = openmm_system.getNumParticles()
    _check_atoms_in(restraint, n_particles)
    masses = [openmm_system.getParticleMass(index)._value for index in range(n_particles)]
    if periodic is None:
        periodic = openmm_system.usesPeriodicBoundaryConditions()
    return openmm_system.addForce(restraint.openmm_force(masses, periodic=periodic))


def _heavy(atoms, masses) -> list[int]:
    heavy = [atom for atom in atoms if masses[atom] > 4.0]  # not hydrogen, even repartitioned
    return heavy or list(atoms)


def select_centroid_atoms(positions, receptor_atoms, ligand_atoms, masses, *, radius: float = 0.8,
                          minimum: int = 3) -> list[int]:
    """Receptor atoms for a centroid restraint, as YANK picks them: the receptor's heavy atoms within
    ``radius`` of the ligand's centroid (at least the ``minimum`` nearest).

    Args:
        positions: ``(N, 3)`` nm, the starting structure (ligand in its site).
        receptor_atoms, ligand_atoms: indices. masses: ``(N,)`` amu (hydrogens are those below 4 amu).
        radius: nm. minimum: the fewest atoms returned.

    Returns:
        sorted receptor atom indices.
    """
    positions = np.asarray(positions, dtype=float)
    masses = np.asarray(masses, dtype=float)
    ligand = list(ligand_atoms)
    centroid = (masses[ligand, None] * positions[ligand]).sum(0) / masses[ligand].sum()
    candidates = np.array(_heavy(receptor_atoms, masses))
    distances = np.linalg.norm(positions[candidates] - centroid, axis=1)
    chosen = candidates[distances <= radius]
    if len(chosen) < minimum:
        chosen = candidates[np.argsort(distances)[:minimum]]
    return sorted(int(atom) for atom in chosen)


def _angle(a, b, c) -> float:
    first, second = a - b, c - b
    cosine = first @ second / (np.linalg.norm(first) * np.linalg.norm(second))
    return float(np.arccos(np.clip(cosine, -1.0, 1.0)))


def _dihedral(a, b, c, d) -> float:
    b1, b2, b3 = b - a, c - b, d - c
    n1, n2 = np.cross(b1, b2), np.cross(b2, b3)
    m1 = np.cross(n1, b2 / np.linalg.norm(b2))
    return float(np.arctan2(-(m1 @ n2), n1 @ n2))  # OpenMM's sign (its dihedral())


def boresch_geometry(positions, receptor_atoms, ligand_atoms) -> dict[str, float]:
    """The six Boresch coordinates of a structure: ``r0`` (nm) and the angles and dihedrals (rad).

    Args:
        positions: ``(N, 3)`` nm. receptor_atoms: ``(P3, P2, P1)``. ligand_atoms: ``(L1, L2, L3)``.
    """
    positions = np.asarray(positions, dtype=float)
    p3, p2, p1 = (positions[atom] for atom in receptor_atoms)
    l1, l2, l3 = (positions[atom] for atom in ligand_atoms)
    return {"r0": float(np.linalg.norm(l1 - p1)), "theta_a0": _angle(p2, p1, l1),
            "theta_b0": _angle(p1, l1, l2),
            "phi_a0": _dihedral(p3, p2, p1, l1), "phi_b0": _dihedral(p2, p1, l1, l2),
            "phi_c0": _dihedral(p1, l1, l2, l3)}


def select_boresch(positions, receptor_atoms, ligand_atoms, masses, *, candidates: int = 12,
                   **force_constants) -> BoreschRestraint:
    """Boresch anchors by a fixed rule, and the restraint at the starting structure's geometry.

    The rule: ``L1`` is the ligand heavy atom nearest the ligand's centroid; ``L2`` and ``L3`` are the
    next heavy atoms by distance from ``L1``, the pair chosen (among the ``candidates`` nearest) to make
    the ``L1 L2 L3`` angle closest to 90 degrees. The receptor triple ``(P3, P2, P1)`` is chosen among
    the ``candidates`` receptor heavy atoms nearest ``L1`` to maximise the smallest sine of the angles
    ``P2 P1 L1``, ``P1 L1 L2`` and ``P3 P2 P1`` (no collinear anchor, where the dihedrals are undefined and
    eq. 32 diverges), with ``P1 P2`` and ``P2 P3`` between 0.1 and 0.35 nm (neighbouring atoms) and
    ``P1 L1`` at least 0.3 nm.

    Args:
        positions: ``(N, 3)`` nm. receptor_atoms, ligand_atoms: indices. masses: ``(N,)`` amu.
        candidates: how many atoms of each molecule are tried.
        force_constants: ``k_r`` (kJ/mol/nm^2), ``k_theta_a``... (kJ/mol/rad^2); defaults as
            :class:`BoreschRestraint` (10 kcal/mol/A^2 and 10 kcal/mol/rad^2).

    Raises:
        ConfigurationError: fewer than three heavy atoms in a molecule, or no usable receptor triple.
    """
    positions = np.asarray(positions, dtype=float)
    masses = np.asarray(masses, dtype=float)
    ligand, receptor = _heavy(ligand_atoms, masses), _heavy(receptor_atoms, masses)
    for name, atoms in (("ligand_atoms", ligand), ("receptor_atoms", receptor)):
        if len(atoms) < 3:
            raise ConfigurationError(f"select_boresch: {name} has {len(atoms)} atoms; a Boresch restraint "
                                     "needs three (non-collinear) atoms in each molecule")
    centroid = (masses[ligand, None] * positions[ligand]).sum(0) / masses[ligand].sum()
    l1 = min(ligand, key=lambda atom: np.linalg.norm(positions[atom] - centroid))
    near = sorted((atom for atom in ligand if atom != l1),
                  key=lambda atom: np.linalg.norm(positions[atom] - positions[l1]))[:candidates]

    def flatness(pair):  # |cos| of the angle L1 L2 L3, then the L1 L2 distance
        second, third = positions[pair[0]], positions[pair[1]]
        return abs(math.cos(_angle(positions[l1], second, third))), np.linalg.norm(second - positions[l1])

    l2, l3 = min(itertools.permutations(near, 2), key=flatness)
    pool = sorted(receptor, key=lambda atom: np.linalg.norm(positions[atom] - positions[l1]))[:candidates]
    best, best_score = None, 0.0
    for p3, p2, p1 in itertools.permutations(pool, 3):
        x3, x2, x1, y1, y2 = positions[p3], positions[p2], positions[p1], positions[l1], positions[l2]
        if not (0.1 <= np.linalg.norm(x1 - x2) <= 0.35 and 0.1 <= np.linalg.norm(x2 - x3) <= 0.35
                and np.linalg.norm(y1 - x1) >= 0.3):
            continue
        score = min(math.sin(_angle(x2, x1, y1)), math.sin(_angle(x1, y1, y2)), math.sin(_angle(x3, x2, x1)))
        if score > best_score:
            best, best_score = (p3, p2, p1), score
    if best is None:
        raise ConfigurationError("select_boresch: no receptor triple with bonded-distance neighbours and an "
                                 "anchor 0.3 nm or more from the ligand; give receptor_atoms (P3, P2, P1)")
    geometry = boresch_geometry(positions, best, (l1, l2, l3))
    return BoreschRestraint(tuple(int(a) for a in best), (int(l1), int(l2), int(l3)), **geometry,
                            **force_constants)
