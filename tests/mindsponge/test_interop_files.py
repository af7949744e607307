"""Systems prepared for Amber, GROMACS and CHARMM (``ms.interop.load_amber``, ``load_gromacs``,
``load_charmm``) against OpenMM's Reference platform, computed live on real files.

The Amber files are openmmtools' test systems (tleap output with GAFF ligands); the GROMACS and
CHARMM files are written by ParmEd from one of them. Each reference System is built here with
OpenMM's readers and the documented defaults spelled out (PME and a 1.0 nm cutoff with a box,
NoCutoff without, HBonds constraints), so the defaults are checked too. Per-force energies and forces
in float64, at positions moved off the minimum, as in ``test_openmm_interop.py``: bonded terms
1e-8 relative, non-bonded 1e-6, forces 1e-5 RMS relative.
"""

import os

import numpy as np
import pytest
import torch

import mindsponge as ms
from common.errors import ConfigurationError, DataError, MissingFileError, UnknownNameError

openmm = pytest.importorskip("openmm")
openmmtools = pytest.importorskip("openmmtools")
from openmm import app, unit  # noqa: E402

DATA = os.path.join(os.path.dirname(openmmtools.__file__), "data")
NONBONDED_TOLERANCE = 1e-6
BONDED_TOLERANCE = 1e-8
GB_TOLERANCE = 1e-10  # Amber's OBC2 (GBSAOBCForce) as its CustomGBForce form with GBSAOBCForce's constants


def _data(*parts):
    return os.path.join(DATA, *parts)


def _distorted(positions, seed=0, scale=0.003):
    return positions + np.random.default_rng(seed).normal(scale=scale, size=positions.shape)


def _rms_relative(forces, reference):
    return float(np.sqrt(((forces - reference) ** 2).sum() / (reference**2).sum()))


def _compare(loaded, openmm_system, reference, gb_tolerance=GB_TOLERANCE):
    """Per-force energies, total and forces of ``loaded`` against ``openmm_system`` (same force order)."""
    system, forcefield = loaded
    positions = _distorted(system.positions.numpy())
    box = system.box
    expected = reference(openmm_system, positions, None if box is None else box.numpy())
    x = torch.tensor(positions)
    for term in forcefield:
        parts = {name: energy.item() for name, energy in term.energy_terms(x, box).items()}
        target = expected.energies[term.openmm_force_index]
        if "coulomb_reciprocal" in parts:
            target += expected.reciprocal
        kind = type(term).__name__
        tolerance = {"Nonbonded": NONBONDED_TOLERANCE, "CustomGB": gb_tolerance}.get(kind, BONDED_TOLERANCE)
        assert sum(parts.values()) == pytest.approx(target, rel=tolerance, abs=1e-9), term.name
    assert forcefield(x, box).item() == pytest.approx(expected.total, rel=NONBONDED_TOLERANCE)
    assert _rms_relative(ms.forces(forcefield, x, box).numpy(), expected.forces) < 1e-5
    assert system.n_atoms == openmm_system.getNumParticles()


def _masses(openmm_system):
    return np.array([openmm_system.getParticleMass(i).value_in_unit(unit.amu)
                     for i in range(openmm_system.getNumParticles())])


def _amber(prmtop, inpcrd, **options):
    """OpenMM's own System of an Amber pair, the inpcrd's box on the topology."""
    topology_file = app.AmberPrmtopFile(prmtop)
    box = app.AmberInpcrdFile(inpcrd).boxVectors
    if box is not None:
        topology_file.topology.setPeriodicBoxVectors(box)
    return topology_file.createSystem(**options)


CB7 = (_data("cb7-b2", "complex-explicit.prmtop"), _data("cb7-b2", "complex-explicit.inpcrd"))
BENZENE_TOLUENE = (_data("benzene-toluene-implicit", "complex.prmtop"),
                   _data("benzene-toluene-implicit", "complex.inpcrd"))
T4_LYSOZYME = (_data("T4-lysozyme-L99A-implicit", "complex.prmtop"),
               _data("T4-lysozyme-L99A-implicit", "complex.crd"))
DHFR = (_data("dhfr", "JAC.prmtop"), _data("dhfr", "JAC.inpcrd"))
ALANINE = (_data("alanine-dipeptide-explicit", "alanine-dipeptide.prmtop"),
           _data("alanine-dipeptide-explicit", "alanine-dipeptide.crd"))


def test_amber_cb7_host_guest_in_water_matches_openmm_with_pme_by_default(reference):
    """CB7 with a GAFF guest in TIP3P (4,491 atoms): PME, 1.0 nm and HBonds when nothing is said."""
    loaded = ms.interop.load_amber(*CB7)
    openmm_system = _amber(*CB7, nonbondedMethod=app.PME, nonbondedCutoff=1.0 * unit.nanometer,
                           constraints=app.HBonds)
    _compare(loaded, openmm_system, reference)
    system, forcefield = loaded
    expected_box = app.AmberInpcrdFile(CB7[1]).boxVectors.value_in_unit(unit.nanometer)
    np.testing.assert_allclose(system.box.numpy(), np.array([list(v) for v in expected_box]), rtol=1e-12)
    assert forcefield["Nonbonded"].cutoff == pytest.approx(1.0)
    assert len(forcefield.constraints.pairs) == openmm_system.getNumConstraints() > 0
    np.testing.assert_allclose(system.masses.numpy(), _masses(openmm_system), rtol=1e-12)
    assert system.topology.n_atoms == 4491 and system.topology.atoms[0].residue_index == 0


def test_amber_hydrogen_mass_repartitioning_and_options_by_name(reference):
    options = dict(nonbondedMethod="CutoffPeriodic", nonbondedCutoff=0.9, hydrogenMass=3.0,
                   constraints="AllBonds")
    system, forcefield = ms.interop.load_amber(*ALANINE, **options)
    openmm_system = _amber(*ALANINE, nonbondedMethod=app.CutoffPeriodic, nonbondedCutoff=0.9 * unit.nanometer,
                           hydrogenMass=3.0 * unit.amu, constraints=app.AllBonds)
    masses = _masses(openmm_system)
    np.testing.assert_allclose(system.masses.numpy(), masses, rtol=1e-12)
    np.testing.assert_allclose(forcefield.masses.numpy(), masses, rtol=1e-12)
    hydrogens = [i for i, atom in enumerate(system.topology.atoms) if atom.element == "H"]
    waters = {i for i, atom in enumerate(system.topology.atoms)
              if system.topology.residues[atom.residue_index].name in ("WAT", "HOH")}
    # hydrogens weigh 3 amu (water keeps its masses: OpenMM leaves it alone)
    assert all(masses[i] == pytest.approx(3.0) for i in hydrogens if i not in waters)
    assert system.masses.sum().item() == pytest.approx(masses.sum(), rel=1e-12)
    assert len(forcefield.constraints.pairs) == openmm_system.getNumConstraints()
    _compare((system, forcefield), openmm_system, reference)


@pytest.mark.filterwarnings("ignore:Non-optimal GB parameters")  # OpenMM's, on the prmtop's mbondi radii
def test_amber_implicit_solvent_obc2_matches_openmm_gbsaobcforce(reference):
    """Benzene and toluene in OBC2: OpenMM's GBSAOBCForce runs as its CustomGBForce form; no box,
    so NoCutoff by default."""
    loaded = ms.interop.load_amber(*BENZENE_TOLUENE, implicitSolvent="OBC2")
    openmm_system = _amber(*BENZENE_TOLUENE, implicitSolvent=app.OBC2, constraints=app.HBonds)
    assert any(isinstance(force, openmm.GBSAOBCForce) for force in openmm_system.getForces())
    _compare(loaded, openmm_system, reference)
    system, forcefield = loaded
    assert system.box is None and forcefield["Nonbonded"].method == "nocutoff"
    assert "CustomGB" in forcefield.energy_terms(system.positions, None)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Non-optimal GB parameters")
def test_amber_t4_lysozyme_with_p_xylene_in_obc2_matches_openmm(reference):
    """T4 lysozyme L99A with p-xylene (2,621 atoms) in OBC2 implicit solvent, no cutoff."""
    loaded = ms.interop.load_amber(*T4_LYSOZYME, implicitSolvent="OBC2")
    _compare(loaded, _amber(*T4_LYSOZYME, implicitSolvent=app.OBC2, constraints=app.HBonds), reference)


@pytest.mark.slow
def test_amber_dhfr_jac_benchmark_matches_openmm(reference):
    """DHFR in water (JAC, 23,558 atoms), PME."""
    loaded = ms.interop.load_amber(*DHFR)
    openmm_system = _amber(*DHFR, nonbondedMethod=app.PME, nonbondedCutoff=1.0 * unit.nanometer,
                           constraints=app.HBonds)
    _compare(loaded, openmm_system, reference)
    assert len(loaded[1].constraints.pairs) == openmm_system.getNumConstraints()


@pytest.fixture(scope="module")
def parmed_files(tmp_path_factory):
    """Alanine dipeptide in water (2,269 atoms) and CB7 with its guest in vacuum, written by ParmEd
    as self-contained GROMACS top/gro and CHARMM psf/crd/par."""
    parmed = pytest.importorskip("parmed")
    folder = tmp_path_factory.mktemp("parmed")
    files = {}
    sources = {"alanine": ALANINE,
               "cb7": (_data("cb7-b2", "complex-vacuum.prmtop"), _data("cb7-b2", "complex-vacuum.inpcrd"))}
    for name, (prmtop, inpcrd) in sources.items():
        structure = parmed.load_file(prmtop, inpcrd)
        paths = {suffix: str(folder / f"{name}.{suffix}") for suffix in ("top", "gro", "psf", "crd", "par")}
        structure.save(paths["top"])
        structure.save(paths["gro"])
        structure.save(paths["psf"])
        structure.save(paths["crd"], format="charmmcrd")
        parmed.charmm.CharmmParameterSet.from_structure(structure).write(par=paths["par"])
        paths["box"] = None if structure.box is None else [length / 10 for length in structure.box[:3]]
        files[name] = paths
    return files


def _gromacs(paths, **options):
    box = app.GromacsGroFile(paths["gro"]).getPeriodicBoxVectors()
    return app.GromacsTopFile(paths["top"], periodicBoxVectors=box).createSystem(**options)


def _charmm(paths, box, **options):
    topology_file = app.CharmmPsfFile(paths["psf"])
    if box is not None:
        topology_file.setBox(*[length * unit.nanometer for length in box])
    return topology_file.createSystem(app.CharmmParameterSet(paths["par"]), **options)


def test_gromacs_top_gro_in_water_matches_openmm(parmed_files, reference):
    paths = parmed_files["alanine"]
    loaded = ms.interop.load_gromacs(paths["top"], paths["gro"])
    openmm_system = _gromacs(paths, nonbondedMethod=app.PME, nonbondedCutoff=1.0 * unit.nanometer,
                             constraints=app.HBonds)
    _compare(loaded, openmm_system, reference)
    system, forcefield = loaded
    gro_box = app.GromacsGroFile(paths["gro"]).getPeriodicBoxVectors().value_in_unit(unit.nanometer)
    np.testing.assert_allclose(system.box.numpy(), np.array([list(v) for v in gro_box]), rtol=1e-12)
    assert len(forcefield.constraints.pairs) == openmm_system.getNumConstraints() > 0
    np.testing.assert_allclose(system.masses.numpy(), _masses(openmm_system), rtol=1e-12)


def test_gromacs_without_a_box_runs_without_cutoff_and_takes_hydrogen_masses(parmed_files, reference):
    paths = parmed_files["cb7"]
    with open(paths["gro"]) as handle:  # a gro always ends with a box line; zeros: no periodicity
        lines = handle.read().splitlines()
    lines[-1] = "   0.00000   0.00000   0.00000"
    vacuum = paths["gro"].replace(".gro", "-vacuum.gro")
    with open(vacuum, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    loaded = ms.interop.load_gromacs(paths["top"], vacuum, hydrogenMass=2.0, constraints=None)
    openmm_system = app.GromacsTopFile(paths["top"]).createSystem(
        nonbondedMethod=app.NoCutoff, hydrogenMass=2.0 * unit.amu, constraints=None)
    _compare(loaded, openmm_system, reference)
    assert loaded[0].box is None and loaded[1].constraints is None
    np.testing.assert_allclose(loaded[0].masses.numpy(), _masses(openmm_system), rtol=1e-12)


def test_charmm_psf_crd_par_with_a_box_matches_openmm(parmed_files, reference):
    paths = parmed_files["alanine"]
    box = paths["box"]
    loaded = ms.interop.load_charmm(paths["psf"], paths["crd"], [paths["par"]], box=box)
    openmm_system = _charmm(paths, box, nonbondedMethod=app.PME, nonbondedCutoff=1.0 * unit.nanometer,
                            constraints=app.HBonds)
    _compare(loaded, openmm_system, reference)
    system, forcefield = loaded
    np.testing.assert_allclose(system.box.numpy(), np.diag(box), rtol=1e-12)
    assert len(forcefield.constraints.pairs) == openmm_system.getNumConstraints() > 0
    np.testing.assert_allclose(system.masses.numpy(), _masses(openmm_system), rtol=1e-12)


def test_charmm_gaff_host_guest_without_box_matches_openmm(parmed_files, reference):
    paths = parmed_files["cb7"]
    loaded = ms.interop.load_charmm(paths["psf"], paths["crd"], paths["par"])
    _compare(loaded, _charmm(paths, None, nonbondedMethod=app.NoCutoff, constraints=app.HBonds), reference)
    assert loaded[0].box is None


def test_missing_files_are_named(tmp_path, parmed_files):
    missing = str(tmp_path / "absent.prmtop")
    with pytest.raises(MissingFileError, match="Amber prmtop file not found: .*absent.prmtop"):
        ms.interop.load_amber(missing, CB7[1])
    with pytest.raises(MissingFileError, match="GROMACS coordinate \\(gro\\) file not found: .*absent.gro"):
        ms.interop.load_gromacs(parmed_files["cb7"]["top"], str(tmp_path / "absent.gro"))
    with pytest.raises(MissingFileError, match="CHARMM parameter file not found: .*absent.prm"):
        paths = parmed_files["cb7"]
        ms.interop.load_charmm(paths["psf"], paths["crd"], [paths["par"], str(tmp_path / "absent.prm")])
    with pytest.raises(MissingFileError, match="GROMACS include folder not found"):
        paths = parmed_files["cb7"]
        ms.interop.load_gromacs(paths["top"], paths["gro"], include_dir=tmp_path / "nowhere")


def test_coordinates_whose_atom_count_disagrees_with_the_topology_are_refused(tmp_path, parmed_files):
    paths = parmed_files["cb7"]
    with open(paths["gro"]) as handle:
        lines = handle.read().splitlines()
    count = int(lines[1])
    short = tmp_path / "short.gro"
    short.write_text("\n".join([lines[0], str(count - 1), *lines[2:2 + count - 1], lines[-1]]) + "\n")
    message = f"short.gro' holds {count - 1} atoms but the topology .*cb7.top' has {count}"
    with pytest.raises(DataError, match=message):
        ms.interop.load_gromacs(paths["top"], short)
    with pytest.raises(DataError, match="holds 27 atoms but the topology .*explicit.prmtop' has 4491"):
        ms.interop.load_amber(CB7[0], BENZENE_TOLUENE[1])


def test_unknown_and_contradictory_options_are_refused(parmed_files):
    with pytest.raises(UnknownNameError, match="'nonbondedCutof' \\(did you mean 'nonbondedCutoff'"):
        ms.interop.load_amber(*CB7, nonbondedCutof=1.0)
    paths = parmed_files["cb7"]
    with pytest.raises(UnknownNameError, match="GromacsTopFile.createSystem takes no option 'implicit"):
        ms.interop.load_gromacs(paths["top"], paths["gro"], implicitSolvent="OBC2")
    with pytest.raises(ConfigurationError, match="nonbondedMethod='pme' is not one of NoCutoff, .*PME"):
        ms.interop.load_amber(*CB7, nonbondedMethod="pme")
    with pytest.raises(ConfigurationError, match="OpenMM cannot build a System from .*complex.prmtop.* "
                                                 "nonbondedMethod=PME"):
        ms.interop.load_amber(*BENZENE_TOLUENE, nonbondedMethod="PME")  # no box
    with pytest.raises(ConfigurationError, match="box must be \\(3,\\) edge lengths"):
        ms.interop.load_charmm(paths["psf"], paths["crd"], paths["par"], box=[3.0, 3.0])


def test_a_file_openmm_cannot_read_is_named(tmp_path):
    broken = tmp_path / "broken.prmtop"
    broken.write_text("%VERSION nonsense\n")
    with pytest.raises(DataError, match="AmberPrmtopFile cannot read the Amber prmtop file .*broken.prmtop"):
        ms.interop.load_amber(broken, CB7[1])


def test_coordinates_in_another_atom_order_are_refused_naming_the_line(tmp_path, parmed_files):
    """A gro or crd with two atom lines swapped has the right count but puts every coordinate of the two
    atoms on the other: refused by name (ParmEd's files pass, OpenMM's renaming, HH31 -> H1, allowed)."""
    paths = parmed_files["alanine"]
    lines = open(paths["gro"]).read().splitlines()
    lines[2], lines[3] = lines[3], lines[2]
    swapped = tmp_path / "swapped.gro"
    swapped.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"swapped.gro', line 3: atom 1 is CH3 of residue ACE, but the top"):
        ms.interop.load_gromacs(paths["top"], swapped)
    lines = open(paths["crd"]).read().splitlines()
    first = next(index for index, line in enumerate(lines) if line.split()[:1] == ["1"])
    lines[first], lines[first + 1] = lines[first + 1], lines[first]
    swapped = tmp_path / "swapped.crd"
    swapped.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"swapped.crd', atom 1: atom 1 is CH3"):
        ms.interop.load_charmm(paths["psf"], swapped, paths["par"], box=paths["box"])


def test_damaged_files_and_bad_arguments_are_refused_as_such(tmp_path, parmed_files):
    text = open(BENZENE_TOLUENE[0]).read()
    truncated = tmp_path / "truncated.prmtop"  # cut inside %FLAG SCREEN, the last per-atom section
    truncated.write_text(text[: text.index("%FLAG SCREEN") + 200])
    with pytest.raises(DataError, match=r"truncated.prmtop': %FLAG SCREEN holds \d+ values for 27 atoms"):
        ms.interop.load_amber(truncated, BENZENE_TOLUENE[1], implicitSolvent="OBC2")
    start = text.index("%FLAG CHARGE")
    garbled = tmp_path / "garbled.prmtop"
    value = start + text[start:].index("E+00") - 4
    garbled.write_text(text[:value] + "x" + text[value + 1:])
    with pytest.raises(DataError, match="garbled.prmtop'.*damaged"):
        ms.interop.load_amber(garbled, BENZENE_TOLUENE[1])
    lines = open(BENZENE_TOLUENE[1]).read().splitlines()
    lines[2] = "         nan" + lines[2][12:]
    nan = tmp_path / "nan.inpcrd"
    nan.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="nan.inpcrd': the coordinates of atom 1 are not finite"):
        ms.interop.load_amber(BENZENE_TOLUENE[0], nan)
    for dtype in (torch.int64, torch.float16, "float32"):
        with pytest.raises(ConfigurationError, match="dtype must be torch.float32 or torch.float64"):
            ms.interop.load_amber(*BENZENE_TOLUENE, dtype=dtype)
    paths = parmed_files["cb7"]
    with pytest.raises(UnknownNameError, match="'includeDir' \\(did you mean 'include_dir'"):
        ms.interop.load_gromacs(paths["top"], paths["gro"], includeDir=str(tmp_path))
    system, _ = ms.interop.load_charmm(paths["psf"], paths["crd"], paths["par"],
                                       box=[3.0, 3.1, 3.2] * unit.nanometer)
    np.testing.assert_allclose(system.box.numpy(), np.diag([3.0, 3.1, 3.2]))


def test_obc2_matches_gbsaobcforce_for_an_atom_engulfed_by_a_scaled_sphere(reference):
    """OpenMM's CustomGBForce form of OBC2 leaves out GBSAOBCForce's term for an atom inside another's
    scaled sphere (sr2 - r > or1); mindsponge adds it back. A hydrogen 0.03 nm from a sulfur (radius
    0.18 nm, scale 0.96) of T4 lysozyme's methionine, and three particles with a large scale factor."""
    system = openmm.System()
    force = openmm.GBSAOBCForce()
    for charge, radius, scale in ((0.3, 0.12, 0.85), (-0.3, 0.18, 3.0), (0.1, 0.15, 0.8)):
        system.addParticle(1.0)
        force.addParticle(charge, radius, scale)
    system.addForce(force)
    converted = ms.interop.openmm.from_openmm(system)  # a GBSAOBCForce is read as its CustomGB form
    for distance in (0.005, 0.02, 0.1, 0.3):
        positions = np.array([[0.0, 0.0, 0.0], [distance, 0.0, 0.0], [0.0, 0.4, 0.0]])
        expected = reference(system, positions, None)
        x = torch.tensor(positions)
        assert converted(x, None).item() == pytest.approx(expected.total, rel=1e-10, abs=1e-9), distance
        assert _rms_relative(ms.forces(converted, x, None).numpy(), expected.forces) < 1e-8, distance
