"""``common.output_paths``: an output folder from the configuration stays inside the configuration's folder,
output files stay inside the output folder, ``..`` and symbolic links resolved; ``--output`` may be anywhere.
``common.config.key_error`` names the file, line and key of a check made after loading."""

import pathlib

import pytest

from common import config
from common.config import ConfigError
from common.errors import ConfigurationError
from common.output_paths import output_folder

CONFIG = 'steps = 4\n\n[output]\nlog = "log.csv"\ndirectory = "{directory}"\n'


@pytest.fixture
def places(tmp_path):
    """A configuration folder ``project`` and a folder ``outside`` next to it (holding one file)."""
    project, outside = tmp_path.resolve() / "project", tmp_path.resolve() / "outside"
    project.mkdir()
    outside.mkdir()
    (outside / "precious.csv").write_text("keep")
    return project, outside


def _config(project, directory):
    path = project / "run.toml"
    path.write_text(CONFIG.format(directory=directory))
    return path


@pytest.mark.parametrize("escape", ["../outside", "sub/../../outside", "absolute", "link"])
def test_a_directory_outside_the_configuration_folder_is_refused(places, escape):
    project, outside = places
    if escape == "link":
        (project / "link").symlink_to(outside, target_is_directory=True)
    directory = str(outside) if escape == "absolute" else escape
    path = _config(project, directory)
    with pytest.raises(ConfigError) as refused:
        output_folder(path, pathlib.Path(directory))
    assert str(refused.value).startswith(f"{path}:5: [output] key 'directory': '{directory}' resolves to "
                                         f"{outside}, outside the configuration's folder {project}")
    assert "--output" in str(refused.value)
    assert sorted(item.name for item in outside.iterdir()) == ["precious.csv"]


def test_a_subfolder_and_the_folder_itself_are_accepted(places):
    project, _ = places
    path = _config(project, "runs/a")
    assert output_folder(path, pathlib.Path("runs/a")).path == project / "runs" / "a"
    assert output_folder(path, pathlib.Path(".")).path == project
    assert output_folder(path, project / "b").path == project / "b"  # absolute, inside
    (project / "inner").symlink_to(project / "runs", target_is_directory=True)  # a link that stays inside
    assert output_folder(path, pathlib.Path("inner")).path == project / "runs"
    assert not (project / "runs").exists()  # nothing is created


def test_the_command_line_folder_may_be_anywhere_and_is_relative_to_the_working_directory(
        places, monkeypatch):
    project, outside = places
    path = _config(project, "../outside")  # replaced by --output, so not refused
    monkeypatch.chdir(outside)
    folder = output_folder(path, pathlib.Path("../outside"), command_line="results")
    assert folder.path == outside / "results" and folder.chosen_by == "--output"
    assert folder.file("log.csv", key="log") == outside / "results" / "log.csv"


@pytest.mark.parametrize("name", ["../escape.csv", "/tmp/escape.csv", "sub/../../escape.csv"])
def test_a_file_leaving_the_output_folder_is_refused_with_its_key(places, name):
    project, _ = places
    path = _config(project, "out")
    folder = output_folder(path, pathlib.Path("out"))
    with pytest.raises(ConfigError) as refused:
        folder.file(name, key="log")
    assert str(refused.value).startswith(
        f"{path}:4: [output] key 'log': '{name}' leaves the run's output folder {project / 'out'}")


@pytest.mark.parametrize("layout", ["file", "dangling", "folder"])
def test_a_symbolic_link_to_elsewhere_inside_the_output_folder_is_refused(places, layout):
    project, outside = places
    path = _config(project, "out")
    (project / "out").mkdir()
    if layout == "file":
        (project / "out" / "log.csv").symlink_to(outside / "precious.csv")
        name, target = "log.csv", outside / "precious.csv"
    elif layout == "dangling":
        (project / "out" / "log.csv").symlink_to(outside / "new.csv")
        name, target = "log.csv", outside / "new.csv"
    else:
        (project / "out" / "logs").symlink_to(outside, target_is_directory=True)
        name, target = "logs/log.csv", outside / "log.csv"
    folder = output_folder(path, pathlib.Path("out"))
    with pytest.raises(ConfigError) as refused:
        folder.file(name, key="log")
    assert str(refused.value).startswith(f"{path}:4: [output] key 'log': '{name}' in the output folder "
                                         f"{project / 'out'} is (or lies under) a symbolic link to {target}")
    # a file the run names itself: the [output] directory key, or the command-line option
    with pytest.raises(ConfigError, match=r"key 'directory': .*symbolic link"):
        folder.file(name)
    command_line = output_folder(path, pathlib.Path("out"), command_line=project / "out")
    with pytest.raises(ConfigurationError) as refused:
        command_line.file(name)
    assert str(refused.value).startswith(f"{path}: --output {project / 'out'}: '{name}' in the output folder")
    assert sorted(item.name for item in outside.iterdir()) == ["precious.csv"]
    assert (outside / "precious.csv").read_text() == "keep"


def test_files_inside_the_output_folder_are_accepted(places):
    project, _ = places
    folder = output_folder(_config(project, "out"), pathlib.Path("out"))
    assert folder.file("log.csv", key="log") == project / "out" / "log.csv"
    assert folder.file("pdb/../final.pdb", key="final_structure") == project / "out" / "final.pdb"
    (project / "out").mkdir()
    (project / "out" / "latest.csv").symlink_to(project / "out" / "log.csv")  # a link inside
    assert folder.file("latest.csv", key="log") == project / "out" / "log.csv"


def test_key_error_names_the_line_of_the_key_or_of_its_table(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('steps = 4\n\n[output]\nreport_every = 0\n\n[[probes]]\nname = "a"\n\n'
                    '[[probes]]\nname = "b"\n')
    assert str(config.key_error(path, ("output", "report_every"), "must be positive")) == (
        f"{path}:4: [output] key 'report_every': must be positive")
    assert config.key_error(path, ("output", "log"), "x").line == 3  # not in the file: its table
    assert config.key_error(path, ("probes", 1, "name"), "x").line == 10
    assert config.key_error(path, ("barostat",), "x").line is None
    missing = config.key_error(tmp_path / "missing.toml", ("output", "log"), "x")
    assert missing.line is None and str(missing).startswith(f"{tmp_path / 'missing.toml'}: ")
