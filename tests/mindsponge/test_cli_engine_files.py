"""``mindsponge run`` with Amber, GROMACS and CHARMM files in ``[system]`` (benzene and toluene, 27
atoms: openmmtools' tleap files, and ParmEd's GROMACS and CHARMM translation of them), and the
refusals of contradictory or missing keys, named with the file, line and key."""

import os
import shutil

import pytest

from mindsponge.cli import main, run

openmm = pytest.importorskip("openmm")
openmmtools = pytest.importorskip("openmmtools")

DATA = os.path.join(os.path.dirname(openmmtools.__file__), "data", "benzene-toluene-implicit")
RUN = 'steps = 4\nminimize_tolerance = 50.0\nprecision = "double"\nconstraints = "hbonds"\n'
OUTPUT = '\n[output]\ndirectory = "out"\nreport_every = 2\n'


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The Amber pair and ParmEd's top/gro and psf/crd/par of it, in one folder."""
    parmed = pytest.importorskip("parmed")
    folder = tmp_path_factory.mktemp("benzene_toluene")
    for name in ("complex.prmtop", "complex.inpcrd"):
        shutil.copy(os.path.join(DATA, name), folder / name)
    structure = parmed.load_file(str(folder / "complex.prmtop"), str(folder / "complex.inpcrd"))
    structure.save(str(folder / "complex.top"))
    structure.save(str(folder / "complex.gro"))
    lines = (folder / "complex.gro").read_text().splitlines()  # ParmEd's box around the molecules:
    lines[-1] = "   0.00000   0.00000   0.00000"                # zeros, GROMACS's "no box"
    (folder / "complex.gro").write_text("\n".join(lines) + "\n")
    structure.save(str(folder / "complex.psf"))
    structure.save(str(folder / "complex.crd"), format="charmmcrd")
    parmed.charmm.CharmmParameterSet.from_structure(structure).write(par=str(folder / "complex.par"))
    return folder


@pytest.mark.filterwarnings("ignore:Non-optimal GB parameters")
@pytest.mark.parametrize("system, terms", [
    ('prmtop = "complex.prmtop"\ninpcrd = "complex.inpcrd"\n[forcefield]\nimplicit_solvent = "OBC2"\n',
     {"CustomGB", "Nonbonded"}),
    ('top = "complex.top"\ngro = "complex.gro"\n', {"Nonbonded"}),
    ('psf = "complex.psf"\ncrd = "complex.crd"\nparams = "complex.par"\n', {"Nonbonded"}),
], ids=["amber", "gromacs", "charmm"])
def test_engine_files_run_from_a_configuration(files, system, terms):
    path = files / f"run_{len(system)}.toml"
    path.write_text(RUN + "\n[system]\n" + system + OUTPUT)
    simulation = run(path, progress=False)
    assert simulation.state.step == 4
    assert terms <= {term.name for term in simulation.forcefield}
    assert simulation.state.box is None  # no box in these coordinates: NoCutoff by default
    assert simulation.forcefield.constraints is not None  # constraints = "hbonds" reached the System
    log = (path.parent / "out" / "log.csv").read_text().splitlines()
    assert log[0].startswith("step,") and len(log) == 3


@pytest.mark.parametrize("system, extra, key, line, message", [
    ('prmtop = "complex.prmtop"\n', "", "[system] key 'prmtop'", 7, "prmtop needs inpcrd (the Amber"),
    ('pdb = "x.pdb"\nprmtop = "complex.prmtop"\ninpcrd = "complex.inpcrd"\n', "", "[system] key 'prmtop'", 8,
     "prmtop cannot be used: this table already takes the system from a PDB structure"),
    ('gro = "complex.gro"\n', "", "[system] key 'gro'", 7, "gro belongs with top, which is missing"),
    ('psf = "complex.psf"\ncrd = "complex.crd"\n', "", "[system] key 'psf'", 7, "psf needs params"),
    ('top = "complex.top"\ngro = "complex.gro"\n', '[forcefield]\nfiles = ["amber14-all.xml"]\n',
     "[forcefield] key 'files'", 10, "cannot apply to [system] top: GROMACS files carry their own"),
    ('top = "complex.top"\ngro = "complex.gro"\n', '[forcefield]\nimplicit_solvent = "OBC2"\n',
     "[forcefield] key 'implicit_solvent'", 10, "applies to Amber (prmtop) and CHARMM (psf) files only"),
], ids=["missing-inpcrd", "two-sources", "gro-without-top", "missing-params", "files", "implicit-solvent"])
def test_contradictory_or_missing_system_keys_name_file_line_and_key(files, capsys, system, extra, key, line,
                                                                     message):
    path = files / "bad.toml"
    path.write_text(RUN + "\n[system]\n" + system + extra + OUTPUT)
    capsys.readouterr()
    assert main(["run", str(path), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {path}:{line}: {key}: "), error
    assert message in error, error


def test_a_gro_that_disagrees_with_its_top_is_refused_by_the_command(files, capsys):
    lines = (files / "complex.gro").read_text().splitlines()
    count = int(lines[1])
    short = [lines[0], str(count - 1), *lines[2:1 + count], lines[-1]]
    (files / "short.gro").write_text("\n".join(short) + "\n")
    path = files / "short.toml"
    path.write_text(RUN + '\n[system]\ntop = "complex.top"\ngro = "short.gro"\n' + OUTPUT)
    capsys.readouterr()
    assert main(["run", str(path), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert f"short.gro' holds {count - 1} atoms but the topology" in error, error
