"""The ``[system]`` table of ``mindsponge run`` (:mod:`mindsponge.cli`): where the system comes from,
and building it with its force field.

One source per configuration::

    [system.water_box]                  # a box of rigid water, parameterised by [forcefield] files
    n_molecules = 216

    [system]                            # a PDB parameterised by [forcefield] files,
    pdb = "protein.pdb"                 #   or by a serialized OpenMM System:
    openmm_xml = "system.xml"           #   (optional)

    [system]                            # Amber (tleap): ms.interop.load_amber
    prmtop = "complex.prmtop"
    inpcrd = "complex.inpcrd"

    [system]                            # GROMACS: ms.interop.load_gromacs
    top = "topol.top"
    gro = "conf.gro"
    include_dir = "forcefields"         # optional: where the top's #include files are

    [system]                            # a molecule on a learned potential ([potential] table,
    molecule = "smiles:OCCF"            #   mindsponge.cli_learned), or a structure file (.xyz, .pdb ...)

    [system]                            # CHARMM (CHARMM-GUI): ms.interop.load_charmm
    psf = "step3_input.psf"
    crd = "step3_input.crd"
    params = ["toppar/par_all36m_prot.prm", "toppar/toppar_water_ions.str"]
    box = [6.0, 6.0, 6.0]               # optional: the periodic box (nm), which psf and crd do not carry

Amber, GROMACS and CHARMM files carry their parameters, so ``[forcefield] files`` is refused with
them; ``[forcefield] nonbonded_method`` defaults to PME when the coordinates carry a box and to
NoCutoff otherwise (PME for a PDB or a water box, as before), ``cutoff``, ``switch_distance``,
``ewald_tolerance`` and ``hydrogen_mass`` apply to every source but ``openmm_xml``, and
``implicit_solvent`` (``"OBC2"``...) to Amber and CHARMM files. The top-level ``constraints`` key
sets which bonds the System constrains. Paths are relative to the configuration file's folder.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from common import checks
from common import config as config_module
from common.errors import ConfigurationError

__all__ = ["WaterBoxConfig", "SystemConfig", "build", "resolve_paths", "refuse_combinations"]

DEFAULT_FORCEFIELD_FILES = ("amber14-all.xml", "amber14/tip3pfb.xml")
# the key that names each source, and how a message describes it (without naming a key, so that the
# configuration loader reports the line of the one key it does name)
_SOURCES = {"pdb": "a PDB structure", "prmtop": "Amber files", "top": "GROMACS files", "psf": "CHARMM files",
            "water_box": "a water box table", "molecule": "a molecule for a learned potential"}
# keys that belong with a source: key -> its source's key
_COMPANIONS = {"openmm_xml": "pdb", "inpcrd": "prmtop", "gro": "top", "include_dir": "top", "crd": "psf",
               "params": "psf", "box": "psf"}
# keys a source needs: source -> ((key, what it is), ...)
_REQUIRED = {"prmtop": (("inpcrd", "the Amber coordinates"),), "top": (("gro", "the GROMACS coordinates"),),
             "psf": (("crd", "the CHARMM coordinates"), ("params", "the CHARMM parameter files"))}
_ENGINE_SOURCES = ("prmtop", "top", "psf")


@dataclass
class WaterBoxConfig:
    """``[system.water_box]``: a cubic box of rigid water (:func:`mindsponge.build.water_box`).

    Attributes:
        n_molecules: number of water molecules (give two of ``n_molecules``, ``box_size``, ``density``;
            ``density`` defaults to 0.997 g/cm^3, so one of the others suffices).
        box_size: edge of the cubic box (nm).
        model: ``"tip3p"``, ``"spce"`` or ``"tip4pew"`` (:data:`mindsponge.build.WATER_MODELS`).
        density: mass density (g/cm^3).
        seed: seed of the random placement and orientations.
    """

    n_molecules: int | None = None
    box_size: float | None = None
    model: str = "tip3p"
    density: float | None = None
    seed: int = 0

    def __post_init__(self):
        if self.n_molecules is not None:
            checks.positive_int(self.n_molecules, "n_molecules")
        for key in ("box_size", "density"):
            if getattr(self, key) is not None:
                checks.positive(getattr(self, key), key)


@dataclass
class SystemConfig:
    """``[system]``: where the system comes from (one source; see the module docstring).

    Attributes:
        pdb: the structure (path relative to the configuration file); its box is read from CRYST1.
        openmm_xml: a serialized OpenMM System for ``pdb`` (then ``[forcefield]`` is not used): its
            forces, constraints and masses are read as OpenMM would run them.
        water_box: a ``[system.water_box]`` table instead of ``pdb``.
        prmtop, inpcrd: an Amber topology and its coordinates (box from the inpcrd).
        top, gro: a GROMACS topology and its coordinates (box from the gro).
        include_dir: the folder of the GROMACS force-field files the top includes.
        psf, crd, params: a CHARMM psf, its coordinates and the parameter files (one or a list).
        box: the CHARMM system's periodic box, edge lengths (nm); not set: not periodic.
        molecule: ``"smiles:..."`` or a structure file (relative to the configuration file): a molecule
            for the learned potential of ``[potential]`` (:mod:`mindsponge.cli_learned`).
    """

    pdb: pathlib.Path | None = None
    openmm_xml: pathlib.Path | None = None
    water_box: WaterBoxConfig | None = None
    prmtop: pathlib.Path | None = None
    inpcrd: pathlib.Path | None = None
    top: pathlib.Path | None = None
    gro: pathlib.Path | None = None
    include_dir: pathlib.Path | None = None
    psf: pathlib.Path | None = None
    crd: pathlib.Path | None = None
    params: pathlib.Path | list[pathlib.Path] | None = None
    box: tuple[float, float, float] | None = None
    molecule: str | None = None

    def __post_init__(self):
        # each message names exactly one key that was given, so that the loader reports its line
        _check_source(self)
        if isinstance(self.params, pathlib.Path):
            self.params = [self.params]
        if self.params is not None and not self.params:
            raise ConfigurationError("params must name at least one CHARMM parameter file")
        if self.box is not None:
            for length in self.box:
                checks.positive(length, "box (edge lengths, nm)")

    @property
    def source(self) -> str:
        """The key of the source: ``"pdb"``, ``"water_box"``, ``"prmtop"``, ``"top"`` or ``"psf"``."""
        return next(source for source in _SOURCES if getattr(self, source) is not None)


def _check_source(system: SystemConfig) -> None:
    """One source, with the keys it needs and no keys of another (each message names one given key)."""
    for companion, source in _COMPANIONS.items():
        if getattr(system, companion) is not None and getattr(system, source) is None:
            raise ConfigurationError(f"{companion} belongs with {source}, which is missing")
    given = [source for source in _SOURCES if getattr(system, source) is not None]
    if not given:
        raise ConfigurationError(
            "give the system's source: pdb (optionally with openmm_xml), prmtop and inpcrd, top and gro, "
            "psf with crd and params, a [system.water_box] table, or molecule (a learned potential)")
    if len(given) > 1:
        raise ConfigurationError(f"{given[1]} cannot be used: this table already takes the system from "
                                 f"{_SOURCES[given[0]]}; give one source")
    for key, what in _REQUIRED.get(given[0], ()):
        if getattr(system, key) is None:
            raise ConfigurationError(f"{given[0]} needs {key} ({what})")


def resolve_paths(config, folder: pathlib.Path) -> None:
    """Make the input paths of ``config`` relative to ``folder``.

    Force-field files are taken from ``folder`` when a file of that name is there, else left to
    OpenMM (which looks among its bundled force fields).
    """

    def resolve(path):
        return path if path is None or path.is_absolute() else folder / path

    system = config.system
    for key in ("pdb", "openmm_xml", "prmtop", "inpcrd", "top", "gro", "include_dir", "psf", "crd"):
        setattr(system, key, resolve(getattr(system, key)))
    if system.params is not None:
        system.params = [resolve(path) for path in system.params]
    if system.molecule is not None and not system.molecule.startswith("smiles:"):
        system.molecule = str(resolve(pathlib.Path(system.molecule)))
    if config.forcefield.files is not None:
        config.forcefield.files = [
            str(folder / name) if (folder / name).is_file() else name for name in config.forcefield.files
        ]


def refuse_combinations(config, config_path) -> None:
    """``[system]`` and ``[forcefield]`` settings valid alone but not together, named with the file,
    line and key."""
    source, forcefield = config.system.source, config.forcefield
    if config.system.openmm_xml is not None and forcefield.hydrogen_mass is not None:
        raise config_module.key_error(config_path, ("forcefield", "hydrogen_mass"), (
            "cannot apply to [system] openmm_xml: the serialized System fixes the masses (build it "
            "with createSystem(hydrogenMass=...)), so remove the key"))
    if source in _ENGINE_SOURCES and forcefield.files is not None:
        raise config_module.key_error(config_path, ("forcefield", "files"), (
            f"cannot apply to [system] {source}: {_SOURCES[source]} carry their own parameters, so "
            "remove the key"))
    if forcefield.implicit_solvent is not None and source not in ("prmtop", "psf"):
        raise config_module.key_error(config_path, ("forcefield", "implicit_solvent"), (
            "applies to Amber (prmtop) and CHARMM (psf) files only; with force-field XML files give "
            "OpenMM's implicit/*.xml in files instead"))


def build(config, dtype, return_openmm_system=False):
    """System and force field of a configuration (paths resolved: :func:`resolve_paths`); with
    ``return_openmm_system``, ``(system, forcefield, openmm_system)`` (the alchemical workflow,
    :mod:`mindsponge.cli_free_energy`, builds its force field from the OpenMM System)."""
    from openmm import app, unit

    from mindsponge.interop import openmm as interop

    source = config.system
    if source.molecule is not None:  # its potential is the learned one of [potential]
        return _molecule(source.molecule, dtype, return_openmm_system)
    if source.source in _ENGINE_SOURCES:
        return _load_engine_files(config, dtype, return_openmm_system)
    settings = config.forcefield
    files = settings.files if settings.files is not None else list(DEFAULT_FORCEFIELD_FILES)
    method = settings.nonbonded_method or "PME"
    options = {  # the System carries the configured constraints, which the Simulation then applies
        "nonbondedMethod": getattr(app, method),
        "rigidWater": "water" in config.constraints,
        "constraints": app.HBonds if "hbonds" in config.constraints else None,
        "removeCMMotion": True,  # the System's CMMotionRemover: the Simulation removes it, as OpenMM
    }
    if settings.hydrogen_mass is not None:
        options["hydrogenMass"] = settings.hydrogen_mass * unit.amu
    if method != "NoCutoff":
        options["nonbondedCutoff"] = settings.cutoff * unit.nanometer
    if method in ("PME", "Ewald"):
        options["ewaldErrorTolerance"] = settings.ewald_tolerance
    if settings.switch_distance is not None:
        options["switchDistance"] = settings.switch_distance * unit.nanometer
    if source.openmm_xml is not None:
        loaded = interop.load(source.openmm_xml, source.pdb, dtype=dtype)
        if return_openmm_system:
            import openmm

            loaded = (*loaded, openmm.XmlSerializer.deserialize(source.openmm_xml.read_text()))
        return loaded
    if source.pdb is not None:
        loaded = interop.from_pdb_with_forcefield(source.pdb, files, dtype=dtype, **options)
    else:
        loaded = _water_box(source.water_box, files, options, dtype)
    return loaded if return_openmm_system else loaded[:2]


def _molecule(molecule, dtype, return_openmm_system):
    """``(System, None)`` of a SMILES or a structure file (:func:`mindsponge.molecules.load_molecule`)."""
    import torch

    if return_openmm_system:
        raise ConfigurationError("[system] molecule runs on a learned potential, which has no OpenMM System: "
                                 "give a force-field source (pdb, prmtop, top, psf, water_box)")

    from mindsponge.molecules import load_molecule
    from mindsponge.system import System

    structure = load_molecule(molecule)
    system = System.from_ase(structure.to_ase())
    return system.replace(positions=torch.as_tensor(structure.positions, dtype=dtype)), None


def _water_box(settings, files, options, dtype):
    import torch
    from openmm import app, unit

    from mindsponge import build as builders
    from mindsponge.interop import openmm as interop

    system = builders.water_box(settings.n_molecules, settings.box_size, model=settings.model,
                                density=settings.density, seed=settings.seed, dtype=dtype)
    openmm_system = app.ForceField(*files).createSystem(system.topology.to_openmm(system.box), **options)
    forcefield = interop.from_openmm(openmm_system, dtype=dtype)
    masses = [openmm_system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.n_atoms)]
    return system.replace(masses=torch.tensor(masses, dtype=dtype)), forcefield, openmm_system


def _load_engine_files(config, dtype, return_openmm_system=False):
    """Amber, GROMACS or CHARMM files through :mod:`mindsponge.interop.openmm.engine_files`."""
    from mindsponge.interop.openmm import engine_files

    source, settings = config.system, config.forcefield
    options = {
        "return_openmm_system": return_openmm_system,
        "rigidWater": "water" in config.constraints,
        "constraints": "HBonds" if "hbonds" in config.constraints else None,
        "removeCMMotion": True,
        "nonbondedCutoff": settings.cutoff,
        "ewaldErrorTolerance": settings.ewald_tolerance,
    }
    optional = {"nonbondedMethod": settings.nonbonded_method, "hydrogenMass": settings.hydrogen_mass,
                "switchDistance": settings.switch_distance, "implicitSolvent": settings.implicit_solvent}
    options.update({option: value for option, value in optional.items() if value is not None})
    if source.prmtop is not None:
        return engine_files.load_amber(source.prmtop, source.inpcrd, dtype=dtype, **options)
    if source.top is not None:
        return engine_files.load_gromacs(source.top, source.gro, include_dir=source.include_dir, dtype=dtype,
                                         **options)
    return engine_files.load_charmm(source.psf, source.crd, source.params, box=source.box, dtype=dtype,
                                    **options)
