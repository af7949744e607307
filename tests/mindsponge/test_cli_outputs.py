"""``mindsponge run`` writes only where it may: an ``[output] directory`` outside the configuration's
folder (``..``, absolute, a symbolic link) and output files that are symbolic links to elsewhere are
refused with the file, line and key before anything is written; out-of-range values name their file,
line and key too. (A subfolder and ``--output`` elsewhere are run in ``test_cli.py``.)"""

import pathlib
import re

import pytest
import tomllib

from mindsponge.cli import main

pytest.importorskip("openmm")

CONFIG = """steps = 4
constraints = "water"

[system.water_box]
n_molecules = 8

[forcefield]
files = ["tip3p.xml"]
nonbonded_method = "CutoffPeriodic"
cutoff = 0.6

[output]
directory = "{directory}"
report_every = 2
"""


@pytest.fixture
def places(tmp_path):
    """A configuration folder ``project`` and a folder ``outside`` next to it holding one file."""
    project, outside = tmp_path.resolve() / "project", tmp_path.resolve() / "outside"
    project.mkdir()
    outside.mkdir()
    (outside / "log.csv").write_text("precious")
    return project, outside


def _listing(folder):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def _refused(capsys, path, key, arguments=()):
    """Run ``path``: exit status 2 and an error naming the file, the line of ``[output] key`` (or of the
    ``[output]`` table when the key is not in the file) and the key."""
    lines = path.read_text().splitlines()
    starts = [line.split(" = ")[0] for line in lines]
    line = starts.index(key) + 1 if key in starts else lines.index("[output]") + 1
    capsys.readouterr()
    assert main(["run", str(path), "--quiet", *arguments]) == 2
    message = capsys.readouterr().err
    assert message.startswith(f"error: {path}:{line}: [output] key '{key}': "), message
    return message


@pytest.mark.parametrize("escape", ["../outside", "absolute", "link"])
def test_an_output_directory_outside_the_configuration_folder_is_refused(places, capsys, escape):
    project, outside = places
    if escape == "link":
        (project / "link").symlink_to(outside, target_is_directory=True)
    directory = str(outside) if escape == "absolute" else escape
    path = project / "run.toml"
    path.write_text(CONFIG.format(directory=directory))
    message = _refused(capsys, path, "directory")
    assert f"resolves to {outside}, outside the configuration's folder {project}" in message
    assert _listing(outside) == ["log.csv"] and (outside / "log.csv").read_text() == "precious"
    assert _listing(project) == (["link", "run.toml"] if escape == "link" else ["run.toml"])


@pytest.mark.parametrize(("key", "name"), [("log", "log.csv"), ("trajectory", "trajectory.h5md"),
                                           ("final_structure", "final.pdb")])
def test_an_output_file_linked_to_elsewhere_is_refused(places, capsys, key, name):
    project, outside = places
    path = project / "run.toml"
    path.write_text(CONFIG.format(directory="out") + f'{key} = "{name}"\n')
    (project / "out").mkdir()
    (project / "out" / name).symlink_to(outside / "log.csv")
    message = _refused(capsys, path, key)
    assert f"symbolic link to {outside / 'log.csv'}" in message
    assert _listing(outside) == ["log.csv"] and (outside / "log.csv").read_text() == "precious"
    assert _listing(project) == ["out", f"out/{name}", "run.toml"]


def test_a_linked_output_folder_under_the_command_line_folder_is_refused(places, tmp_path, capsys):
    """``--output`` may be anywhere, but the files in it still may not lead elsewhere."""
    project, outside = places
    path = project / "run.toml"
    path.write_text(CONFIG.format(directory="out") + 'log = "logs/log.csv"\n')
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    (chosen / "logs").symlink_to(outside, target_is_directory=True)
    _refused(capsys, path, "log", ["--output", str(chosen)])
    assert _listing(outside) == ["log.csv"] and (outside / "log.csv").read_text() == "precious"


def test_replica_exchange_files_linked_to_elsewhere_are_refused(places, capsys):
    project, outside = places
    path = project / "run.toml"
    replicas = "[replicas]\ntemperatures = [300.0, 320.0]\nsteps_per_round = 2\n"
    path.write_text(CONFIG.format(directory="remd") + replicas)
    (project / "remd").mkdir()
    (project / "remd" / "replicas.csv").symlink_to(outside / "log.csv")
    message = _refused(capsys, path, "directory")
    assert "'replicas.csv' in the output folder" in message
    assert (outside / "log.csv").read_text() == "precious" and _listing(project / "remd") == ["replicas.csv"]


@pytest.mark.parametrize(("table", "key", "value"), [
    ("output", "report_every", "0"), ("output", "trajectory_every", "-5"),
    ("output", "checkpoint_every", "0"),
    ("integrator", "friction", "0.0"), ("thermostat", "time_constant", "0.0"), ("barostat", "every", "0"),
    ("barostat", "compressibility", "-1e-5"), ("forcefield", "switch_distance", "0.8"),
    ("forcefield", "ewald_tolerance", "0.0"), ("system.water_box", "box_size", "-1.0"),
    ("replicas", "steps_per_round", "0"), ("replicas", "workers", "-1"), ("replicas", "count", "1"),
])
def test_out_of_range_values_name_their_file_line_and_key(tmp_path, capsys, table, key, value):
    text = CONFIG.format(directory="out")
    if f"\n{key} = " in text:  # a key the configuration has
        text = re.sub(rf"\n{key} = .*\n", f"\n{key} = {value}\n", text)
    elif f"[{table}]\n" in text:  # a key of a table the configuration has
        text = text.replace(f"[{table}]\n", f"[{table}]\n{key} = {value}\n")
    else:
        ladder = "low = 300.0\nhigh = 400.0\n" + ("" if key == "count" else "count = 4\n")
        text += f"\n[{table}]\n" + (ladder if table == "replicas" else "") + f"{key} = {value}\n"
    line = text.splitlines().index(f"{key} = {value}") + 1
    path = tmp_path / "run.toml"
    path.write_text(text)
    capsys.readouterr()
    assert main(["run", str(path), "--quiet"]) == 2
    message = capsys.readouterr().err
    assert message.startswith(f"error: {path}:{line}: [{table}] key '{key}': invalid value: {key}"), message
    assert f"got {tomllib.loads(f'given = {value}')['given']}" in message
    assert not (tmp_path / "out").exists()


def test_hydrogen_mass_with_a_serialized_system_names_its_line(tmp_path, capsys):
    text = ('steps = 4\n[system]\npdb = "a.pdb"\nopenmm_xml = "a.xml"\n\n[forcefield]\n'
            'hydrogen_mass = 3.0\n[output]\ndirectory = "out"\n')
    path = tmp_path / "run.toml"
    path.write_text(text)
    capsys.readouterr()
    assert main(["run", str(path), "--quiet"]) == 2
    message = capsys.readouterr().err
    assert message.startswith(f"error: {path}:7: [forcefield] key 'hydrogen_mass': cannot apply to [system] "
                              "openmm_xml"), message


def test_a_barostat_without_a_periodic_box_names_its_table_line(tmp_path, capsys):
    dipeptide = pathlib.Path(__file__).parent / "data" / "alanine_dipeptide.pdb"  # no CRYST1: no box
    text = (f'steps = 4\n[system]\npdb = "{dipeptide}"\n[forcefield]\nfiles = ["amber14-all.xml"]\n'
            'nonbonded_method = "NoCutoff"\n\n[barostat]\nevery = 5\n[output]\ndirectory = "out"\n')
    path = tmp_path / "run.toml"
    path.write_text(text)
    capsys.readouterr()
    assert main(["run", str(path), "--quiet"]) == 2
    message = capsys.readouterr().err
    assert message.startswith(f"error: {path}:8: key 'barostat': needs a periodic system"), message
    assert not (tmp_path / "out").exists()
