"""``mindsponge fe`` refuses what used to fail late, silently or obscurely: schedules and settings at load
(with the file, line and key, before anything is written), leg mistakes before the first leg runs, resumes
with changed settings or damaged files (naming them), and results that JSON cannot hold.

The system is the harmonic oscillator of ``test_free_energy_workflow`` (``U = k r^2 / 2``, states differing
in ``k``), run for a few iterations of a few steps.
"""

import json
import shutil

import pytest
from test_free_energy_config import line_of
from test_free_energy_workflow import write_oscillator

from common.config import ConfigError
from common.errors import ConfigurationError, DataError

SCHEDULE = "parameters = { k = [100.0, 200.0, 400.0, 800.0] }"


def _config(folder, iterations=4, change=lambda text: text, **options):
    """The oscillator's configuration, made fast (5 steps per iteration, no bootstrap, no plots)."""
    path = write_oscillator(folder, iterations=iterations, **options)
    text = (path.read_text().replace("steps_per_iteration = 50", "steps_per_iteration = 5")
            .replace("equilibration = 5", "equilibration = 1").replace("bootstrap = 20", "bootstrap = 0")
            .replace('directory = "out"', 'directory = "out"\nplots = false'))
    path.write_text(change(text))
    return path


def _refused(folder, change, **options):
    """The error of a configuration refused before anything was written, and the file's lines."""
    from mindsponge import cli_free_energy

    path = _config(folder, change=change, **options)
    with pytest.raises(ConfigError) as caught:
        cli_free_energy.run(path, progress=False)
    assert not (folder / "out").exists()  # refused before anything was written
    assert str(path) in str(caught.value)
    return caught.value, path.read_text().splitlines()


@pytest.mark.parametrize("schedule, key", [
    ("parameters = { k = [100.0] }", "parameters"),
    ("lambda_electrostatics = [1.0]\nlambda_sterics = [1.0]", "lambda_electrostatics"),
])
def test_a_one_state_schedule_is_refused_at_load(tmp_path, schedule, key):
    error, lines = _refused(tmp_path, lambda text: text.replace(SCHEDULE, schedule))
    assert error.line == line_of(lines, key) and "two or more" in str(error)


@pytest.mark.parametrize("extra", ["electrostatics = 3\nsterics = 3",
                                   "lambda_electrostatics = [1.0, 0.0]\nlambda_sterics = [1.0, 1.0]"])
def test_schedules_of_several_kinds_are_refused(tmp_path, extra):
    error, lines = _refused(tmp_path, lambda text: text.replace(SCHEDULE, f"{SCHEDULE}\n{extra}"))
    assert error.line == line_of(lines, "[free_energy.schedule]") and "different kinds" in str(error)
    assert "parameters" in str(error)


def test_a_parameter_that_is_not_finite_is_refused_at_load(tmp_path):
    error, lines = _refused(tmp_path, lambda text: text.replace(SCHEDULE, "parameters = { k = [1.0, nan] }"))
    assert error.line == line_of(lines, "parameters") and "finite" in str(error)


def test_a_negative_seed_is_refused_at_load(tmp_path):
    error, lines = _refused(tmp_path, lambda text: text.replace("seed = 0", "seed = -3"))
    assert error.line == line_of(lines, "seed") and "-3" in str(error)


def test_lambda_restraints_without_a_restraint_names_that_key(tmp_path):
    schedule = f"{SCHEDULE}\nlambda_restraints = [1.0, 1.0, 0.5, 0.0]"
    error, lines = _refused(tmp_path, lambda text: text.replace(SCHEDULE, schedule))
    assert error.line == line_of(lines, "lambda_restraints") and "restraint" in error.reason


@pytest.mark.parametrize("key, name", [("pdb", "oscillator.pdb"), ("openmm_xml", "oscillator.xml")])
def test_a_missing_input_file_is_named_with_its_key(tmp_path, key, name):
    error, lines = _refused(tmp_path, lambda text: text.replace(f'"{name}"', '"missing.file"'))
    assert error.line == line_of(lines, key) and "missing.file" in str(error)


def _second_leg(text, options):
    """The configuration with a second oscillator leg, named ``second``, carrying ``options`` lines."""
    leg = text[text.index("[[free_energy.leg]]"):text.index("[output]")]
    second = leg.replace('name = "oscillator"', f'name = "second"\n{options}')
    return text.replace("[output]", f"{second}[output]")


def test_pressure_on_a_leg_without_a_box_is_refused_before_any_leg_runs(tmp_path):
    error, lines = _refused(tmp_path, lambda text: _second_leg(text, "pressure = 1.0"))
    assert error.line == line_of(lines, "pressure") and error.key_path[-1] == "pressure"
    assert error.key_path[2] == 1 and "no box" in str(error)


def test_a_combination_without_its_legs_is_refused_before_any_leg_runs(tmp_path):
    error, lines = _refused(tmp_path, lambda text: text.replace("[free_energy]\n",
                                                                '[free_energy]\ncombine = "hydration"\n'))
    assert error.line == line_of(lines, "combine") and "vacuum" in str(error) and "oscillator" in str(error)


def test_results_are_strict_json_and_list_the_overlap_warnings(tmp_path):
    """A step between identical states (k = 100 twice) and one with hardly any overlap (k = 100 -> 10^4):
    results.json is strict JSON, and the pair that overlaps too little is warned about there and in the
    log."""
    from mindsponge import cli_free_energy

    path = _config(tmp_path, iterations=10, change=lambda text: text.replace(
        SCHEDULE, "parameters = { k = [100.0, 100.0, 10000.0] }"))
    with pytest.warns(RuntimeWarning, match=r"states 1 .* and 2 .* overlap by .* below 0.03"):
        cli_free_energy.run(path, progress=False)

    def refuse(constant):
        raise ValueError(f"results.json holds {constant}, which is not JSON")

    results = json.loads((tmp_path / "out" / "results.json").read_text(), parse_constant=refuse)
    leg = results["legs"]["oscillator"]
    assert len(leg["warnings"]) == 1 and leg["warnings"][0].startswith("states 1 ")
    assert leg["overlap_min"] < 0.03
    assert "leg oscillator: states 1 " in (tmp_path / "out" / "free_energy.log").read_text()


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A folder with the oscillator run stopped after 2 of its 4 iterations (copied by each test)."""
    from mindsponge import cli_free_energy

    folder = tmp_path_factory.mktemp("stopped")
    cli_free_energy.run(_config(folder), progress=False, stop_after=2)
    return folder


def _copy(stopped_run, tmp_path):
    shutil.copytree(stopped_run, tmp_path / "run")
    return tmp_path / "run" / "fe.toml", tmp_path / "run" / "out" / "oscillator"


def test_a_resume_with_changed_settings_is_refused_naming_them(stopped_run, tmp_path):
    """dt, friction, precision and minimize were not recorded: a resume with them changed continued the
    run (another precision crashed it) instead of being refused; the unchanged configuration resumes."""
    from mindsponge import cli_free_energy
    from mindsponge.free_energy_analysis import FreeEnergySamples

    path, leg = _copy(stopped_run, tmp_path)
    text = path.read_text()
    for key, changed in (("dt", text.replace("friction = 20.0", "friction = 20.0\ndt = 0.001")),
                         ("friction", text.replace("friction = 20.0", "friction = 10.0")),
                         ("precision", text.replace('precision = "double"', 'precision = "mixed"')),
                         ("minimize", text.replace("minimize = false", "minimize = true"))):
        path.write_text(changed)
        with pytest.raises(ConfigurationError, match=rf"leg.json: .*other settings \(changed: .*\b{key}\b"):
            cli_free_energy.run(path, progress=False, resume=True)
    path.write_text(text)
    cli_free_energy.run(path, progress=False, resume=True)
    assert FreeEnergySamples.load(leg / "u_kn.npz").samples_per_state.tolist() == [4] * 4


def test_a_leg_json_of_the_first_layout_is_refused_listing_what_it_lacks(stopped_run, tmp_path):
    """A leg.json written before dt, friction... were recorded cannot vouch for them: refused, saying
    which keys to add."""
    from mindsponge import cli_free_energy

    path, leg = _copy(stopped_run, tmp_path)
    record = json.loads((leg / "leg.json").read_text())
    first = ("states", "temperature", "steps_per_iteration", "hrex", "seed", "n_atoms")
    (leg / "leg.json").write_text(json.dumps({key: record[key] for key in first}))
    with pytest.raises(ConfigurationError, match="earlier mindsponge, which did not record dt, friction, "
                       "minimize, constraints, precision, force_field, so") as caught:
        cli_free_energy.run(path, progress=False, resume=True)
    assert '"format": 2' in str(caught.value) and '"force_field": ' in str(caught.value)


def test_a_checkpoint_without_its_leg_json_is_refused(stopped_run, tmp_path):
    """Without leg.json the leg looked new while the sampler went on from the checkpoint: 9 samples per
    state instead of 4."""
    from mindsponge import cli_free_energy
    from mindsponge.free_energy_analysis import FreeEnergySamples

    path, leg = _copy(stopped_run, tmp_path)
    (leg / "leg.json").unlink()
    with pytest.raises(DataError, match=r"replicas.chk has no leg.json beside it"):
        cli_free_energy.run(path, progress=False, resume=True)
    assert FreeEnergySamples.load(leg / "u_kn.npz").samples_per_state.tolist() == [2] * 4


@pytest.mark.parametrize("name, damage", [("leg.json", lambda content: b"{not json"),
                                          ("start.npz", lambda content: content[: len(content) // 2])])
def test_damaged_leg_files_are_refused_naming_them(stopped_run, tmp_path, name, damage):
    from mindsponge import cli_free_energy

    path, leg = _copy(stopped_run, tmp_path)
    (leg / name).write_bytes(damage((leg / name).read_bytes()))
    with pytest.raises(DataError, match=f"{leg / name}: "):
        cli_free_energy.run(path, progress=False, resume=True)
