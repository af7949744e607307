"""``[free_energy.restraint]`` of ``mindsponge fe``: the binding restraint of one leg, from the file.

The table and its defaults are described in :mod:`mindsponge.cli_free_energy`; the restraints and their
standard-state corrections in :mod:`mindsponge.restraints`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from common import checks
from common import config as config_module
from common.errors import ConfigurationError

__all__ = ["RestraintConfig", "build_restraint", "restraint_summary"]


@dataclass
class RestraintConfig:
    """``[free_energy.restraint]``: a receptor-ligand restraint in one leg (see the module docstring).

    Attributes:
        kind: ``"flat-bottom"``, ``"harmonic"`` or ``"boresch"``.
        leg: the name of the restrained leg.
        receptor_atoms, ligand_atoms: indices (from 0); default: chosen from the starting structure.
        receptor_residues: residue names of the receptor (default: all but the region, water and ions).
        radius: nm, the selection radius of a centroid restraint's receptor atoms.
        spring_constant: kJ/mol/nm^2 (centroid kinds). well_radius: nm (flat-bottom).
        k_distance: kJ/mol/nm^2, k_angle: kJ/mol/rad^2 (boresch: the distance, and the angles and
            dihedrals).
    """

    kind: Literal["flat-bottom", "harmonic", "boresch"]
    leg: str = "complex"
    receptor_atoms: list[int] | None = None
    ligand_atoms: list[int] | None = None
    receptor_residues: list[str] | None = None
    radius: float = 0.8
    spring_constant: float = 418.4
    well_radius: float | None = None
    k_distance: float = 4184.0
    k_angle: float = 41.84

    def __post_init__(self):
        for key in ("radius", "spring_constant", "k_distance", "k_angle"):
            checks.positive(getattr(self, key), key)
        if self.well_radius is not None:
            if self.kind != "flat-bottom":
                raise ConfigurationError(f"well_radius is for kind = \"flat-bottom\" only, not {self.kind!r}")
            checks.positive(self.well_radius, "well_radius (nm)")
        if self.kind == "boresch":
            for key in ("receptor_atoms", "ligand_atoms"):
                if getattr(self, key) is not None and len(getattr(self, key)) != 3:
                    raise ConfigurationError(f"{key} of a Boresch restraint must be three atoms, got "
                                             f"{len(getattr(self, key))}")


#: residues that are not the receptor by default: water and monatomic ions
SOLVENT_RESIDUES = {"HOH", "WAT", "SOL", "TIP3", "TIP4", "TP3", "NA", "CL", "K", "Na+", "Cl-", "K+", "MG",
                    "CA"}


def build_restraint(settings: RestraintConfig, system, region_atoms, config_path):
    """The leg's restraint (:mod:`mindsponge.restraints`), atoms chosen where the file gives none.

    Args:
        settings: the ``[free_energy.restraint]`` table. system: the leg's
            :class:`~mindsponge.system.System` (positions ``(N, 3)`` nm, masses amu, topology).
        region_atoms: the alchemical region (the ligand). config_path: the file, for errors.

    Returns:
        :class:`~mindsponge.restraints.CentroidRestraint` or :class:`~mindsponge.restraints.BoreschRestraint`.

    Raises:
        common.config.ConfigError: atoms outside the system, no receptor, no usable Boresch anchors.
    """
    from mindsponge import restraints

    where = ("free_energy", "restraint")
    positions = system.positions.detach().cpu().double().numpy()
    masses = system.masses.detach().cpu().double().numpy()
    residues = system.topology.residues if system.topology is not None else None
    for key in ("receptor_atoms", "ligand_atoms"):
        outside = [atom for atom in getattr(settings, key) or () if not 0 <= atom < system.n_atoms]
        if outside:
            raise config_module.key_error(config_path, (*where, key), (
                f"atom {outside[0]} is outside the leg's system of {system.n_atoms} atoms"))
    if residues is None:
        names = [""] * system.n_atoms
    else:
        names = [residues[atom.residue_index].name for atom in system.topology.atoms]
    region = set(region_atoms)
    if settings.receptor_residues is not None:
        receptor = [atom for atom, name in enumerate(names) if name in settings.receptor_residues]
    else:
        receptor = [atom for atom, name in enumerate(names)
                    if atom not in region and name not in SOLVENT_RESIDUES]
    if not receptor and settings.receptor_atoms is None:
        raise config_module.key_error(config_path, (*where, "receptor_residues"), (
            "selects no receptor atom in this leg's system: name the receptor's residues, or give "
            "receptor_atoms"))
    ligand = settings.ligand_atoms or list(region_atoms)
    try:
        if settings.kind == "boresch":
            constants = {"k_r": settings.k_distance, **{f"k_{name}": settings.k_angle for name in
                                                        ("theta_a", "theta_b", "phi_a", "phi_b", "phi_c")}}
            if settings.receptor_atoms is not None and settings.ligand_atoms is not None:
                geometry = restraints.boresch_geometry(positions, settings.receptor_atoms,
                                                       settings.ligand_atoms)
                return restraints.BoreschRestraint(settings.receptor_atoms, settings.ligand_atoms, **geometry,
                                                   **constants)
            return restraints.select_boresch(positions, settings.receptor_atoms or receptor, ligand, masses,
                                             **constants)
        chosen = settings.receptor_atoms or restraints.select_centroid_atoms(
            positions, receptor, ligand, masses, radius=settings.radius)
        well_radius = 0.0
        if settings.kind == "flat-bottom":
            well_radius = settings.well_radius or 0.3 + float(np.linalg.norm(
                np.average(positions[chosen], axis=0, weights=masses[chosen])
                - np.average(positions[ligand], axis=0, weights=masses[ligand])))
        return restraints.CentroidRestraint(settings.kind, chosen, ligand, settings.spring_constant,
                                            well_radius)
    except ConfigurationError as error:
        raise config_module.key_error(config_path, where, str(error)) from error


def restraint_summary(name, restraint, system, temperature: float) -> dict:
    """The restraint of leg ``name`` (a :mod:`mindsponge.restraints` object; ``system`` the leg's, box nm;
    temperature K) and its standard-state correction (kT, kJ/mol, kcal/mol) for
    ``results.json``; a periodic leg's box bounds the restraint volume."""
    import dataclasses

    from common.units import BOLTZMANN_MD
    from mindsponge.free_energy_analysis import KCAL_PER_KJ

    volume = None
    if system.box is not None:
        volume = abs(float(np.linalg.det(system.box.detach().cpu().double().numpy())))
    value = restraint.standard_state_correction(temperature, max_volume=volume)
    kT = BOLTZMANN_MD * temperature  # noqa: N806
    return {"leg": name, "kind": getattr(restraint, "kind", "boresch"),
            "parameters": {key: list(item) if isinstance(item, tuple) else item
                           for key, item in dataclasses.asdict(restraint).items()},
            "standard_state_correction": {"kT": value, "kJ/mol": value * kT,
                                          "kcal/mol": value * kT * KCAL_PER_KJ},
            "sign": "dG_bind = dG_solvent - dG_complex - standard_state_correction"}
