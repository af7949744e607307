"""``mindsponge fe`` refuses bad configurations with the file, line and key, before anything runs."""

import pytest
from test_free_energy_workflow import write_oscillator

from common.config import ConfigError

ALCHEMICAL = """\
constraints = "none"

[free_energy]
iterations = 4
equilibration = 1
{extra_free_energy}
[free_energy.region]
{region}

[free_energy.schedule]
{schedule}

[[free_energy.leg]]
name = "vacuum"
[free_energy.leg.system]
pdb = "oscillator.pdb"
openmm_xml = "oscillator.xml"
"""


def refused(tmp_path, region="atoms = [0]", schedule="electrostatics = 2\nsterics = 2",
            extra_free_energy=""):
    from mindsponge import cli_free_energy

    write_oscillator(tmp_path)
    path = tmp_path / "bad.toml"
    path.write_text(ALCHEMICAL.format(region=region, schedule=schedule, extra_free_energy=extra_free_energy))
    with pytest.raises(ConfigError) as caught:
        cli_free_energy.run(path, progress=False)
    assert not (tmp_path / "free_energy").exists()  # nothing written
    return caught.value, path.read_text().splitlines()


def line_of(lines, text):
    return next(number for number, line in enumerate(lines, 1) if line.startswith(text))


def test_an_unknown_key_is_named_with_its_line(tmp_path):
    error, lines = refused(tmp_path, extra_free_energy="temprature = 300.0")
    assert error.line == line_of(lines, "temprature") and "temprature" in str(error)
    assert "bad.toml" in str(error)


def test_region_atoms_outside_the_system_are_refused(tmp_path):
    error, lines = refused(tmp_path, region="atoms = [0, 9]")
    assert error.line == line_of(lines, "atoms") and "atom 9" in str(error) and "4 atoms" in str(error)


def test_an_unknown_residue_is_refused(tmp_path):
    error, lines = refused(tmp_path, region='residue = "MOL"')
    assert error.line == line_of(lines, "residue") and "OSC" in str(error)


def test_an_empty_schedule_is_refused(tmp_path):
    error, lines = refused(tmp_path, schedule="lambda_electrostatics = []\nlambda_sterics = []")
    assert error.line == line_of(lines, "lambda_electrostatics") and "empty" in str(error)


def test_lambdas_outside_zero_one_are_refused(tmp_path):
    schedule = "lambda_electrostatics = [1.0, 0.0]\nlambda_sterics = [1.0, 1.5]"
    error, lines = refused(tmp_path, schedule=schedule)
    assert error.line == line_of(lines, "lambda_sterics") and "[0, 1]" in str(error) and "1.5" in str(error)


def test_mismatched_lambda_lists_are_refused(tmp_path):
    error, lines = refused(tmp_path, schedule="lambda_electrostatics = [1.0, 0.0]\nlambda_sterics = [1.0]")
    assert error.line == line_of(lines, "lambda_sterics") and "1 values" in str(error)


def test_equilibration_must_leave_samples(tmp_path):
    from mindsponge import cli_free_energy

    path = write_oscillator(tmp_path, iterations=5)  # equilibration = 5
    with pytest.raises(ConfigError) as caught:
        cli_free_energy.run(path, progress=False)
    assert caught.value.line == line_of(path.read_text().splitlines(), "equilibration")
    assert "fewer" in str(caught.value)


def test_equilibration_is_a_count_or_auto(tmp_path):
    from mindsponge import cli_free_energy

    path = write_oscillator(tmp_path)
    path.write_text(path.read_text().replace("equilibration = 5", 'equilibration = "soon"'))
    with pytest.raises(ConfigError) as caught:
        cli_free_energy.run(path, progress=False)
    assert caught.value.line == line_of(path.read_text().splitlines(), "equilibration")
    assert "'auto'" in str(caught.value)


def test_a_schedule_parameter_the_force_field_lacks_is_refused(tmp_path):
    from mindsponge import cli_free_energy

    path = write_oscillator(tmp_path)
    path.write_text(path.read_text().replace("{ k = ", "{ spring = "))
    with pytest.raises(ConfigError) as caught:
        cli_free_energy.run(path, progress=False)
    assert "spring" in str(caught.value) and caught.value.line == line_of(path.read_text().splitlines(),
                                                                          "parameters")
