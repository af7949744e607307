"""``mindelec run`` takes its output folder as ``mindsponge run`` does: ``[output] directory`` relative to
the configuration's folder and inside it, ``--output`` anywhere, output files inside the output folder
(symbolic links resolved), refusals naming the file, line and key before anything is written; the old
default folder in the working directory still works for a release, with a FutureWarning; out-of-range
values name their file, line and key."""

import warnings

import h5py
import pytest

from mindelec import cli

CONFIG = """until = 5e-12
[grid]
size = [1e-3, 1e-3]
cell_size = 4e-5
pml_thickness = 6
[[sources]]
position = [0.0, 0.0]
frequency = 2e11
fwidth = 1.5e11
[[probes]]
name = "p"
position = [2e-4, 0.0]
[output]
snapshot_every = 20
"""


@pytest.fixture
def places(tmp_path):
    """A configuration folder ``project`` and a folder ``outside`` next to it holding one file."""
    project, outside = tmp_path.resolve() / "project", tmp_path.resolve() / "outside"
    project.mkdir()
    outside.mkdir()
    (outside / "result.h5").write_text("precious")
    return project, outside


def _listing(folder):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def _written(folder):
    """The three outputs exist, and result.h5 holds the probe and the configuration."""
    assert _listing(folder) == sorted(cli.OUTPUT_FILES)
    with h5py.File(folder / "result.h5", "r") as file:
        assert "config" in file.attrs and len(file["p/Ez"]) > 0


def _run(arguments, capsys):
    """``mindelec run`` with FutureWarnings as errors; returns the exit status and standard error."""
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        status = cli.main(["run", *map(str, arguments), "--quiet"])
    return status, capsys.readouterr().err


@pytest.mark.slow
def test_the_output_directory_is_relative_to_the_configuration(places, monkeypatch, capsys):
    project, outside = places
    path = project / "run.toml"
    path.write_text(CONFIG + 'directory = "results/a"\n')
    monkeypatch.chdir(outside)
    assert _run([path], capsys) == (0, "")
    _written(project / "results" / "a")
    assert _listing(outside) == ["result.h5"]


@pytest.mark.slow
def test_the_command_line_folder_may_be_outside_the_configuration_folder(places, monkeypatch, capsys):
    project, outside = places
    path = project / "run.toml"
    path.write_text(CONFIG + 'directory = "../escape"\n')  # replaced by --output, so not refused
    monkeypatch.chdir(outside)
    assert _run([path, "--output", "chosen"], capsys) == (0, "")
    _written(outside / "chosen")
    assert _listing(project) == ["run.toml"]


@pytest.mark.slow
def test_the_default_folder_stays_in_the_working_directory_for_a_release_with_a_warning(
        places, monkeypatch, capsys):
    project, outside = places
    path = project / "run.toml"
    path.write_text(CONFIG)
    monkeypatch.chdir(outside)
    with pytest.warns(FutureWarning, match=rf"writes into {outside / 'run_output'} .*the next release .*"
                                           rf"{project / 'run_output'}"):
        assert cli.main(["run", str(path), "--quiet"]) == 0
    _written(outside / "run_output")
    monkeypatch.chdir(project)  # the configuration's folder: the same place either way, no warning
    assert _run(["run.toml"], capsys) == (0, "")
    _written(project / "run_output")


@pytest.mark.parametrize("escape", ["../outside", "absolute", "link"])
def test_an_output_directory_outside_the_configuration_folder_is_refused(places, capsys, escape):
    project, outside = places
    if escape == "link":
        (project / "link").symlink_to(outside, target_is_directory=True)
    directory = str(outside) if escape == "absolute" else escape
    path = project / "run.toml"
    path.write_text(CONFIG + f'directory = "{directory}"\n')
    status, message = _run([path], capsys)
    assert status == 2
    assert message.startswith(f"mindelec run: error: {path}:15: [output] key 'directory': '{directory}' "
                              f"resolves to {outside}, outside the configuration's folder {project}"), message
    assert _listing(outside) == ["result.h5"] and (outside / "result.h5").read_text() == "precious"


@pytest.mark.parametrize("chosen_by", ["configuration", "command line"])
def test_an_output_file_linked_to_elsewhere_is_refused(places, tmp_path, capsys, chosen_by):
    project, outside = places
    path = project / "run.toml"
    path.write_text(CONFIG + 'directory = "out"\n')
    folder = project / "out" if chosen_by == "configuration" else tmp_path / "chosen"
    folder.mkdir()
    (folder / "result.h5").symlink_to(outside / "result.h5")
    status, message = _run([path] + (["--output", folder] if chosen_by == "command line" else []), capsys)
    assert status == 2
    where = f"{path}:15: [output] key 'directory': " if chosen_by == "configuration" else f"{path}: --output "
    assert message.startswith(f"mindelec run: error: {where}"), message
    assert f"'result.h5' in the output folder {folder} is (or lies under) a symbolic link to " in message
    assert _listing(outside) == ["result.h5"] and (outside / "result.h5").read_text() == "precious"
    assert _listing(folder) == ["result.h5"]


@pytest.mark.parametrize(("table", "key", "value"), [
    ("output", "snapshot_every", "0"), ("output", "spectrum_points", "-1"),
    ("output", "spectrum_max", "-1e9"),
    ("grid", "courant", "1.5"), ("grid", "cell_size", "0.0"), ("grid", "pml_thickness", "-2"),
    ("grid", "size", "[1e-3, 0.0]"), ("sources[0]", "frequency", "0.0"), ("", "until", "-1e-12"),
])
def test_out_of_range_values_name_their_file_line_and_key(tmp_path, capsys, table, key, value):
    given = next((line for line in CONFIG.splitlines() if line.startswith(f"{key} = ")), None)
    if given is not None:
        text = CONFIG.replace(given, f"{key} = {value}")
    else:  # a key the configuration leaves to its default: added to its table
        text = CONFIG.replace(f"[{table}]\n", f"[{table}]\n{key} = {value}\n")
    line = text.splitlines().index(f"{key} = {value}") + 1
    path = tmp_path / "run.toml"
    path.write_text(text)
    status, message = _run([path, "--output", tmp_path / "out"], capsys)
    assert status == 2
    where = f"[{table}] key '{key}'" if table else f"key '{key}'"
    assert message.startswith(f"mindelec run: error: {path}:{line}: {where}: invalid value: {key}"), message
    assert not (tmp_path / "out").exists()


def test_a_structure_without_its_radius_names_its_table_line(tmp_path, capsys):
    text = CONFIG + '[[structures]]\nshape = "box"\nlower = [0.0, 0.0]\nupper = [1e-4, 1e-4]\n'
    text += '[[structures]]\nshape = "disk"\ncenter = [0.0, 0.0]\n'
    path = tmp_path / "run.toml"
    path.write_text(text)
    status, message = _run([path, "--output", tmp_path / "out"], capsys)
    assert status == 2
    line = len(CONFIG.splitlines()) + 5  # the second [[structures]]: it gives no radius
    assert message.startswith(f"mindelec run: error: {path}:{line}: key 'structures[1]': invalid value: "
                              "a disk needs a positive radius (m), got 0.0"), message
    path.write_text(text + "radius = -1e-4\n")
    status, message = _run([path, "--output", tmp_path / "out"], capsys)
    radius = f"{path}:{line + 3}: [structures[1]] key 'radius': "
    assert message.startswith(f"mindelec run: error: {radius}"), message
