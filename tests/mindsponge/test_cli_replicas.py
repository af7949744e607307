"""``mindsponge run`` with a ``[replicas]`` table runs whole rounds: ``steps`` that are not a whole number
of rounds of ``steps_per_round`` (fewer than one, or a remainder) are refused instead of running fewer
steps, or none, and exiting as if done.

The system is the harmonic oscillator of ``test_free_energy_workflow`` (a PDB with its OpenMM System).
"""

import csv

import pytest
from test_free_energy_workflow import write_oscillator

from common.errors import ConfigurationError

CONFIG = """\
steps = {steps}
constraints = "none"
precision = "double"
minimize = false

[system]
pdb = "oscillator.pdb"
openmm_xml = "oscillator.xml"

[replicas]
temperatures = [300.0, 330.0]
steps_per_round = 5

[output]
directory = "remd"
"""


def _config(folder, steps):
    write_oscillator(folder)
    path = folder / "run.toml"
    path.write_text(CONFIG.format(steps=steps))
    return path


@pytest.mark.parametrize("steps", [3, 12])
def test_steps_that_are_not_whole_rounds_are_refused(tmp_path, steps):
    from mindsponge.cli import run

    with pytest.raises(ConfigurationError, match=rf"run.toml:1: .*steps must be a whole number .* "
                                                 rf"steps_per_round = 5 .* got {steps}"):
        run(_config(tmp_path, steps), progress=False)
    assert not (tmp_path / "remd").exists()  # refused when the configuration is read: nothing written


def test_whole_rounds_run_every_step(tmp_path):
    from mindsponge.cli import run

    sampler = run(_config(tmp_path, 10), progress=False)
    assert sampler.rounds_done == 2
    rows = list(csv.DictReader((tmp_path / "remd" / "replicas.csv").read_text().splitlines()))
    assert [int(row["round"]) for row in rows] == [1, 2]
