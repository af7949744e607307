"""``mindsponge run``: a run killed with SIGKILL between two checkpoints and resumed reports every
step once, in order, in the CSV log and in the H5MD trajectory (read with h5py and MDAnalysis),
exactly as an uninterrupted run; paths relative to the configuration file; output paths that
leave the output directory are refused with their key and line; the final structure is a PDB
that mindsponge and OpenMM read back; progress bars stay small on a non-terminal stderr."""

import csv
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import mindsponge as ms
from common import io
from mindsponge import pdb
from mindsponge.cli import main
from mindsponge.cli import run as cli_run

openmm = pytest.importorskip("openmm")
h5py = pytest.importorskip("h5py")
mda = pytest.importorskip("MDAnalysis")
from openmm import app  # noqa: E402

ROOT = pathlib.Path(ms.__file__).resolve().parents[1]

STEPS, REPORT_EVERY, TRAJECTORY_EVERY, CHECKPOINT_EVERY = 100, 5, 10, 40
CONFIG = f"""
steps = {STEPS}
constraints = "water"
minimize_tolerance = 50.0

[system.water_box]
n_molecules = 64

[forcefield]
files = ["tip3p.xml"]
nonbonded_method = "CutoffPeriodic"
cutoff = 0.6

[integrator]
dt = 0.002

[barostat]
type = "c_rescale"
every = 5

[output]
directory = "out"
report_every = {REPORT_EVERY}
trajectory_every = {TRAJECTORY_EVERY}
checkpoint_every = {CHECKPOINT_EVERY}
"""


def _command(config, *options, cwd):
    """Start ``python -m mindsponge run config`` in ``cwd`` (not the configuration's folder)."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "mindsponge", "run", str(config), *options],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _logged_steps(path):
    with open(path) as handle:
        return [int(row["step"]) for row in csv.DictReader(handle)]


def _log(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """A run killed between checkpoints then resumed, and the same run uninterrupted.

    Returns the two output directories, what the killed run had written, the standard error of
    the resumed run and the working directory of the runs."""
    root = tmp_path_factory.mktemp("cli")
    for name in ("straight", "resumed"):
        (root / name).mkdir()
        (root / name / "run.toml").write_text(CONFIG)
    runs = {name: root / name / "out" for name in ("straight", "resumed")}
    killed = _command(root / "resumed" / "run.toml", cwd=root)
    log = runs["resumed"] / "log.csv"
    deadline = time.monotonic() + 600  # a loaded machine may first build the compiled kernels
    # kill once the log and the trajectory hold steps past the first checkpoint (and before the end)
    while time.monotonic() < deadline and killed.poll() is None:
        if log.is_file() and any(step > CHECKPOINT_EVERY + TRAJECTORY_EVERY for step in _logged_steps(log)):
            break
        time.sleep(0.01)
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    assert killed.returncode == -signal.SIGKILL
    before = {
        "log": _logged_steps(log),
        "checkpoint": io.load_checkpoint(runs["resumed"] / "run.chk")["state"]["step"],
    }
    with h5py.File(runs["resumed"] / "trajectory.h5md", "r") as handle:
        before["frames"] = handle["particles/all/position/step"][:].tolist()
    resumed = _command(root / "resumed" / "run.toml", "--resume", cwd=root)
    # meanwhile the uninterrupted run, in this process with one thread as the commands
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["run", str(root / "straight" / "run.toml"), "--quiet"]) == 0
    finally:
        torch.set_num_threads(threads)
    errors = resumed.communicate(timeout=300)[1].decode()
    assert resumed.returncode == 0, errors
    return runs, before, errors, root


@pytest.mark.slow
def test_kill_between_checkpoints_then_resume_reports_every_step_once(killed_and_resumed):
    runs, before, _, root = killed_and_resumed
    # the kill came between two checkpoints, after the run had reported steps past the last one
    # (so a resume that appended would repeat them)
    assert before["checkpoint"] % CHECKPOINT_EVERY == 0 and before["checkpoint"] >= CHECKPOINT_EVERY
    assert max(before["log"]) > before["checkpoint"] and max(before["frames"]) > before["checkpoint"]
    assert max(before["log"]) < STEPS
    # relative paths are relative to the configuration file, not to the working directory
    assert not (root / "out").exists()
    expected_log = list(range(REPORT_EVERY, STEPS + 1, REPORT_EVERY))
    expected_frames = list(range(TRAJECTORY_EVERY, STEPS + 1, TRAJECTORY_EVERY))
    resumed, straight = _log(runs["resumed"] / "log.csv"), _log(runs["straight"] / "log.csv")
    assert [int(row["step"]) for row in resumed] == expected_log
    # and the rows are those of the uninterrupted run (the restart is bit-identical)
    for column in ("time", "potential_energy", "kinetic_energy", "pressure", "volume"):
        assert [row[column] for row in resumed] == [row[column] for row in straight], column
    trajectories = {name: h5py.File(path / "trajectory.h5md", "r") for name, path in runs.items()}
    with trajectories["resumed"] as handle, trajectories["straight"] as reference:
        series = ["particles/all/position", "particles/all/box/edges"]
        series += [f"observables/{name}" for name in ("potential_energy", "kinetic_energy", "temperature")]
        for name in series:
            group = handle[name]
            assert group["step"][:].tolist() == expected_frames, name
            assert group["value"].shape[0] == group["time"].shape[0] == len(expected_frames), name
            np.testing.assert_array_equal(group["value"][:], reference[name]["value"][:], err_msg=name)
            np.testing.assert_allclose(group["time"][:], 0.002 * np.array(expected_frames), rtol=1e-9)
        positions = handle["particles/all/position/value"][:]
        boxes = handle["particles/all/box/edges/value"][:]
    # MDAnalysis reads the same frames (positions in Angstrom), steps and box
    universe = mda.Universe(str(runs["resumed"] / "final.pdb"), str(runs["resumed"] / "trajectory.h5md"))
    assert universe.trajectory.n_frames == len(expected_frames)
    for index, timestep in enumerate(universe.trajectory):
        assert timestep.data["step"] == expected_frames[index]
        np.testing.assert_allclose(timestep.positions, positions[index] * 10.0, rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(timestep.dimensions[:3], np.diag(boxes[index]) * 10.0, rtol=1e-6)


@pytest.mark.slow
def test_final_structure_is_a_pdb_of_the_last_state(killed_and_resumed):
    runs, *_ = killed_and_resumed
    path = runs["resumed"] / "final.pdb"
    state = io.load_checkpoint(runs["resumed"] / "run.chk")["state"]
    assert state["step"] == STEPS
    structure = pdb.read_pdb(path)
    assert structure.topology.n_atoms == 192
    torch.testing.assert_close(structure.positions.double(), state["positions"].double(), rtol=0, atol=1e-4)
    torch.testing.assert_close(structure.box.double(), state["box"].double(), rtol=0, atol=1e-4)
    # the barostat changed the box along the run: the PDB holds the final one
    with h5py.File(runs["resumed"] / "trajectory.h5md", "r") as handle:
        first_box = handle["particles/all/box/edges/value"][0]
    assert abs(float(state["box"][0, 0]) - first_box[0, 0]) > 1e-4
    reference = app.PDBFile(str(path))
    assert reference.topology.getNumAtoms() == 192
    vectors = np.array(reference.topology.getPeriodicBoxVectors().value_in_unit(openmm.unit.nanometer))
    np.testing.assert_allclose(vectors, state["box"].numpy(), atol=1e-4)
    positions = np.array(reference.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer))
    np.testing.assert_allclose(positions, state["positions"].numpy(), atol=1e-4)


@pytest.mark.slow
def test_progress_on_a_non_terminal_stderr_is_small(killed_and_resumed):
    # the resumed run was not --quiet and its stderr is a pipe: its bars were drawn a few times only
    *_, errors, _ = killed_and_resumed
    assert errors.count("\r") <= 4 and len(errors) < 1000, errors


def test_simulation_progress_bar_is_rate_limited_on_a_non_terminal(capsys):
    class Slow(torch.nn.Module):
        """A free particle whose force evaluation takes 5 ms."""

        def forward(self, positions, box=None):
            time.sleep(0.005)
            return 0.0 * positions.sum()

    system = ms.System(torch.zeros(1, 3, dtype=torch.float64), torch.ones(1, dtype=torch.float64))
    simulation = ms.Simulation(
        system, Slow(), ms.integrators.VelocityVerlet(0.001), remove_center_of_mass_motion=False
    )
    capsys.readouterr()
    simulation.run(300)  # 1.5 s: plain tqdm redraws every 0.1 s, about 15 times
    errors = capsys.readouterr().err
    assert 1 <= errors.count("\r") <= 2 and "300/300" in errors, errors
    simulation.progress = False
    simulation.run(10)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("key", "value"),
    [("log", "/tmp/escape.csv"), ("trajectory", "../escape.h5md"), ("checkpoint", "sub/../../run.chk")],
)
def test_output_files_outside_the_output_directory_are_refused(tmp_path, capsys, key, value):
    text = CONFIG + f'{key} = "{value}"\n'
    line = text.splitlines().index(f'{key} = "{value}"') + 1
    path = tmp_path / "run.toml"
    path.write_text(text)
    capsys.readouterr()
    assert main(["run", str(path), "--quiet"]) == 2
    message = capsys.readouterr().err
    assert message.startswith(f"error: {path}:{line}: [output] key '{key}': ") and value in message, message
    assert not (tmp_path / "out").exists()  # refused before anything is written


def _water_config_in(folder, output_keys=""):
    """A 4-step run of 8 waters from ``water.pdb`` next to ``folder/run.toml``, output to ``results``."""
    folder.mkdir()
    ms.build.water_box(8, box_size=1.25).to_pdb(folder / "water.pdb")
    (folder / "run.toml").write_text(
        'steps = 4\nconstraints = "water"\nminimize = false\n[system]\npdb = "water.pdb"\n'
        '[forcefield]\nfiles = ["tip3p.xml"]\nnonbonded_method = "CutoffPeriodic"\ncutoff = 0.6\n'
        '[output]\ndirectory = "results"\nreport_every = 2\n' + output_keys
    )


def test_input_paths_are_relative_to_the_configuration(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "inputs"
    _water_config_in(folder, 'trajectory = ""\nfinal_structure = "pdb/last.pdb"\n')
    monkeypatch.chdir(tmp_path)  # the working directory holds no water.pdb
    assert main(["run", "inputs/run.toml", "--quiet"]) == 0, capsys.readouterr().err
    assert _logged_steps(folder / "results" / "log.csv") == [2, 4]
    assert pdb.read_pdb(folder / "results" / "pdb" / "last.pdb").topology.n_atoms == 24
    assert not (folder / "results" / "trajectory.h5md").exists()


def test_output_option_replaces_the_output_directory(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "inputs"
    _water_config_in(folder)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "inputs/run.toml", "--quiet", "--output", "elsewhere"]) == 0, capsys.readouterr().err
    assert _logged_steps(tmp_path / "elsewhere" / "log.csv") == [2, 4]
    assert (tmp_path / "elsewhere" / "final.pdb").is_file()
    assert not (folder / "results").exists()


REPLICAS = """
steps = {steps}
constraints = "hbonds"
seed = 4

[system]
pdb = "{pdb}"

[forcefield]
files = ["amber14-all.xml"]
nonbonded_method = "NoCutoff"

[integrator]
dt = 0.002

[replicas]
low = 300.0
high = 400.0
count = 4
steps_per_round = 50

[output]
directory = "remd"
"""


def test_replicas_table_runs_temperature_exchange_and_resumes(tmp_path, capsys):
    """``[replicas]``: the tables of every round and of the exchanges; ``--resume`` continues to more steps
    and gives the rounds of a straight run."""
    source = ROOT / "tests" / "mindsponge" / "data" / "alanine_dipeptide.pdb"
    for name, steps in (("straight", 400), ("resumed", 200)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.toml").write_text(REPLICAS.format(steps=steps, pdb=source))
        assert main(["run", str(tmp_path / name / "run.toml"), "--quiet"]) == 0, capsys.readouterr().err
    config = tmp_path / "resumed" / "run.toml"
    config.write_text(REPLICAS.format(steps=400, pdb=source))
    assert main(["run", str(config), "--quiet", "--resume"]) == 0, capsys.readouterr().err
    tables = {name: (tmp_path / name / "remd" / "replicas.csv").read_text()
              for name in ("straight", "resumed")}
    assert tables["straight"] == tables["resumed"]
    rows = list(csv.DictReader(tables["straight"].splitlines()))
    assert [int(row["round"]) for row in rows] == list(range(1, 9))
    assert all(sorted(int(row[f"state{r}"]) for r in range(4)) == [0, 1, 2, 3] for row in rows)
    exchange = (tmp_path / "straight" / "remd" / "exchange.csv").read_text()
    assert "0-1,300-330.193," in exchange and "round_trips" in exchange and "free_energy_kT" in exchange


def test_replicas_with_a_berendsen_barostat_are_refused_with_the_line(tmp_path, capsys):
    path = tmp_path / "run.toml"
    config = CONFIG.replace('type = "c_rescale"', 'type = "berendsen"')
    path.write_text(config + "\n[replicas]\ntemperatures = [300.0, 310.0]\nsteps_per_round = 50\n")
    assert main(["run", str(path), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert "which the Berendsen barostat does not" in error and "run.toml:17: key 'barostat'" in error, error


def test_replicas_with_a_barostat_move_their_boxes(tmp_path):
    path = tmp_path / "run.toml"
    config = CONFIG.replace(f"steps = {STEPS}", "steps = 20").replace("every = 5", "every = 2")
    path.write_text(config + "\n[replicas]\ntemperatures = [300.0, 310.0]\nsteps_per_round = 10\n")
    sampler = cli_run(path, progress=False)
    assert sampler.pressure == 1.0
    volumes = [float(torch.linalg.det(state.box)) for state in sampler.replica_states]
    start = float(torch.linalg.det(sampler._spec.system.box))
    assert all(abs(volume / start - 1) > 1e-9 for volume in volumes)


def test_resume_with_changed_settings_is_refused_unless_allowed(tmp_path, capsys):
    """A resume with another time step would continue another simulation from this one's state: refused,
    naming the change; more steps and other reporting are free; --allow-changed-config continues and
    records the change."""
    config = tmp_path / "run.toml"
    short = CONFIG.replace(f"steps = {STEPS}", "steps = 4")
    config.write_text(short)
    assert main(["run", str(config), "--quiet"]) == 0
    config.write_text(short.replace("steps = 4", "steps = 6").replace(f"report_every = {REPORT_EVERY}",
                                                                      "report_every = 2"))
    assert main(["run", str(config), "--resume", "--quiet"]) == 0
    config.write_text(short.replace("steps = 4", "steps = 8").replace("dt = 0.002", "dt = 0.001"))
    assert main(["run", str(config), "--resume", "--quiet"]) == 2
    error = capsys.readouterr().err
    assert "integrator.dt: 0.002 -> 0.001" in error and "--allow-changed-config" in error
    with pytest.warns(UserWarning, match="changed settings: integrator.dt"):
        assert main(["run", str(config), "--resume", "--quiet", "--allow-changed-config"]) == 0
    import json

    record = json.loads((tmp_path / "out" / "run_settings.json").read_text())
    assert record["settings"]["integrator"]["dt"] == 0.001
    assert record["changes"] == [["integrator.dt: 0.002 -> 0.001"]]
    (tmp_path / "out" / "run_settings.json").write_text("{not json")
    assert main(["run", str(config), "--resume", "--quiet"]) == 2
    assert "run_settings.json: damaged run settings" in capsys.readouterr().err
