"""Tests of common.datasets: recipe validation, sampling, the resumable runner, Dask vs local pool."""

import hashlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest
from scipy import constants
from scipy.integrate import solve_ivp
from scipy.stats import qmc

from common import config, datasets, io
from common.datasets.code_fingerprint import CodeFingerprint, code_fingerprint
from common.datasets.examples import damped_oscillator
from common.datasets.recipe import resolve_function
from common.errors import DataError

ROOT = pathlib.Path(__file__).resolve().parents[2]

RECIPE = textwrap.dedent(
    """
    name = "oscillator_test"

    [generator]
    function = "common.datasets.examples:damped_oscillator"
    options = {{ n_times = 16, duration = 5.0, noise = 0.01{extra_options} }}

    [parameters]
    frequency = {{ low = 0.5, high = 5.0, scale = "log" }}
    damping = {{ low = 0.0, high = 1.2 }}

    [sampling]
    method = "sobol"
    n = {n}
    seed = 3

    [output]
    path = "{path}"
    """
)


def _recipe(folder, n=32, extra_options="", name="recipe"):
    path = folder / f"{name}.toml"
    path.write_text(RECIPE.format(n=n, extra_options=extra_options, path=(folder / f"{name}.h5").as_posix()))
    return path


def _environment():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------------------------
# validation before any work

BAD_RECIPES = [
    # (text replaced, replacement, line of the error, text the message must hold)
    (
        'method = "sobol"',
        'metod = "sobol"',
        13,
        "[sampling] key 'metod': unknown key (did you mean 'method'?)",
    ),
    ("n_times = 16", "n_time = 16", 6, "takes no option 'n_time'"),
    ('method = "sobol"', 'method = "halton"', 13, "key 'method'"),
    ("high = 1.2", "high = -1.0", 10, "[parameters.damping] key 'high'"),
    ("examples:damped_oscillator", "examples:no_such_function", 5, "has no attribute 'no_such_function'"),
    ('method = "sobol"', 'method = "grid"', 9, "needs 'points'"),
    ("n = 32", "n = 0", 14, "key 'n'"),
    ("damping = {", "runs = {", 10, "not one of ('sample_id', 'sample_seed', 'runs', 'failed', 'infra"),
    ("damping = { low = 0.0, high = 1.2 }", "damping = { values = [nan, 1.0] }", 10, "values must be finite"),
    ("\n[parameters]", 'labels = ["a/b"]\n[parameters]', 7, "label 'a/b' cannot name a column"),
]


@pytest.mark.parametrize(("old", "new", "line", "message"), BAD_RECIPES)
def test_bad_recipe_fails_before_any_work(tmp_path, old, new, line, message):
    path = _recipe(tmp_path)
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    with pytest.raises(config.ConfigError) as raised:
        datasets.generate(path, progress=False)
    assert raised.value.line == line, str(raised.value)
    assert message in str(raised.value) and str(path) in str(raised.value)
    assert not (tmp_path / "recipe.h5").exists()  # nothing ran


def test_command_line_reports_bad_key_with_line(tmp_path):
    path = _recipe(tmp_path)
    path.write_text(path.read_text().replace("seed = 3", "sead = 3"))
    completed = subprocess.run(
        [sys.executable, "-m", "common.datasets", "generate", str(path)],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2
    assert f"{path}:15: [sampling] key 'sead': unknown key" in completed.stderr
    assert not (tmp_path / "recipe.h5").exists()


# ---------------------------------------------------------------------------------------------
# sampling


def test_sobol_parameters_are_scipy_scrambled_sobol_points(tmp_path):
    recipe = datasets.load_recipe(_recipe(tmp_path, n=16))
    parameters = datasets.sample_parameters(recipe)
    unit = qmc.Sobol(2, scramble=True, rng=3).random(16)
    np.testing.assert_allclose([p["frequency"] for p in parameters], 0.5 * 10.0 ** unit[:, 0], rtol=1e-12)
    np.testing.assert_allclose([p["damping"] for p in parameters], 1.2 * unit[:, 1], rtol=1e-12)


def test_grid_is_the_cross_product_first_parameter_slowest():
    recipe = datasets.loads_recipe(
        textwrap.dedent(
            """
            [generator]
            function = "common.datasets.examples:damped_oscillator"
            [parameters]
            frequency = { low = 1.0, high = 100.0, scale = "log", points = 3 }
            damping = { values = [0.1, 0.5] }
            [sampling]
            method = "grid"
            [output]
            path = "grid.h5"
            """
        )
    )
    expected = [(f, d) for f in (1.0, 10.0, 100.0) for d in (0.1, 0.5)]
    got = [(p["frequency"], p["damping"]) for p in datasets.sample_parameters(recipe)]
    assert recipe.n_samples == 6
    np.testing.assert_allclose(got, expected, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# the runner


def _reference_displacement(frequency, damping, times):
    """The oscillator integrated by scipy (RK45, tight tolerances): independent of the generator."""

    def rate(_, state):
        return [state[1], -2 * damping * frequency * state[1] - frequency**2 * state[0]]

    solution = solve_ivp(rate, (0.0, times[-1]), [1.0, 0.0], t_eval=times, rtol=1e-10, atol=1e-12)
    return solution.y[0]


def test_generated_dataset_holds_every_sample_and_records_failures(tmp_path):
    path = _recipe(tmp_path, n=32)
    summary = datasets.generate(path, workers=2, progress=False)
    recipe = datasets.load_recipe(path)
    parameters = datasets.sample_parameters(recipe)
    should_fail = {i for i, p in enumerate(parameters) if p["damping"] >= 1.0}
    assert 0 < len(should_fail) < 32  # the recipe exercises both outcomes
    assert (summary.succeeded, summary.failed, summary.already_done) == (
        32 - len(should_fail),
        len(should_fail),
        0,
    )

    table = datasets.read_dataset(tmp_path / "recipe.h5")
    failed = datasets.read_dataset(tmp_path / "recipe.h5", group="failed")
    assert set(failed["sample_id"]) == should_fail
    assert all("damping must be in [0, 1)" in message for message in failed["message"])
    assert all(error_type == "ConfigurationError" for error_type in failed["error_type"])
    assert table["sample_id"].tolist() == sorted(set(range(32)) - should_fail)
    assert table["displacement"].shape == (len(table["sample_id"]), 16)
    for row, sample_id in enumerate(table["sample_id"]):
        assert table["frequency"][row] == parameters[sample_id]["frequency"]
        assert table["sample_seed"][row] == datasets.sample_seed(3, int(sample_id))
        reference = _reference_displacement(
            table["frequency"][row], table["damping"][row], table["times"][row]
        )
        residual = table["displacement"][row] - reference
        assert 0.003 < residual.std() < 0.02  # the noise of standard deviation 0.01, nothing else
    seeds = table["sample_seed"]
    assert len(set(seeds.tolist())) == len(seeds)  # independent noise per sample

    with h5py.File(tmp_path / "recipe.h5", "r") as file:  # closed cleanly: plain h5py opens it
        assert file.attrs["recipe"] == path.read_text()
        assert file.attrs["generator"] == "common.datasets.examples:damped_oscillator"
        assert file.attrs["seed"] == 3 and file.attrs["version"] and file.attrs["host"]
        assert file.attrs["time_utc"].startswith("20") and file.attrs["recipe_fingerprint"]
    runs = io.read_table(tmp_path / "recipe.h5", "runs")
    assert runs["event"].tolist() == ["start", "finish"]
    assert runs["succeeded"].tolist() == [0, summary.succeeded]

    again = datasets.generate(path, workers=2, progress=False)  # finished: nothing to do
    assert (again.succeeded, again.failed, again.already_done) == (0, 0, 32)
    assert len(io.read_table(tmp_path / "recipe.h5")["sample_id"]) == 32 - len(should_fail)


def test_limit_then_continue(tmp_path):
    path = _recipe(tmp_path, n=20)
    first = datasets.generate(path, workers=0, limit=7, progress=False)
    assert first.succeeded + first.failed == 7
    second = datasets.generate(path, workers=0, progress=False)
    assert (second.already_done, second.succeeded + second.failed) == (7, 13)
    ids = np.concatenate(
        [io.read_table(tmp_path / "recipe.h5", group)["sample_id"] for group in ("/", "failed")]
    )
    assert sorted(ids.tolist()) == list(range(20))


def test_resume_refuses_a_file_from_another_recipe(tmp_path):
    path = _recipe(tmp_path, n=4)
    datasets.generate(path, workers=0, progress=False)
    path.write_text(path.read_text().replace("seed = 3", "seed = 4").replace("noise = 0.01", "noise = 0.02"))
    with pytest.raises(ValueError, match="different recipe") as raised:  # naming what differs
        datasets.generate(path, workers=0, progress=False)
    assert "generator.options.noise: 0.01 -> 0.02; sampling.seed: 3 -> 4" in str(raised.value)


def test_a_file_that_lost_a_label_column_is_refused(tmp_path):
    path = _recipe(tmp_path, n=4)
    labels = 'labels = ["times", "displacement", "velocity", "energy"]\n[parameters]'
    path.write_text(path.read_text().replace("\n[parameters]", labels))
    datasets.generate(path, workers=0, progress=False)
    with h5py.File(tmp_path / "recipe.h5", "a") as file:
        del file["energy"]
    path.write_text(path.read_text().replace("n = 4", "n = 6"))
    with pytest.raises(DataError, match=r"recipe.h5: its samples have no column\(s\) \['energy'\]"):
        datasets.generate(path, workers=0, progress=False)


def test_a_truncated_output_file_is_refused_as_truncated(tmp_path):
    path = _recipe(tmp_path, n=4)
    datasets.generate(path, workers=0, progress=False)
    output = tmp_path / "recipe.h5"
    output.write_bytes(output.read_bytes()[: output.stat().st_size // 2])
    path.write_text(path.read_text().replace("n = 4", "n = 6"))
    with pytest.raises(DataError, match="recipe.h5 is truncated .*python -m common.io check"):
        datasets.generate(path, workers=0, progress=False)


def test_bad_workers_are_refused_before_the_file_is_made(tmp_path):
    path = _recipe(tmp_path, n=4)
    with pytest.raises(ValueError, match="generate: workers"):
        datasets.generate(path, workers=-1, progress=False)
    with pytest.raises(ValueError, match="generate: threads"):
        datasets.generate(path, workers=0, threads=0, progress=False)
    assert not (tmp_path / "recipe.h5").exists()


@pytest.mark.slow
def test_a_script_without_a_main_guard_is_told_so(tmp_path):
    """The workers import the main script; an unguarded generate() call there would start over in each of
    them: it refuses, naming the guard."""
    script = tmp_path / "unguarded.py"
    recipe = str(_recipe(tmp_path, n=2))
    script.write_text(f"from common import datasets\n"
                      f"print(datasets.generate({recipe!r}, workers=1, progress=False))\n")
    completed = subprocess.run([sys.executable, str(script)], env=_environment(), capture_output=True,
                               text=True, timeout=600)
    assert 'put the call under `if __name__ == "__main__":`' in completed.stderr


@pytest.mark.slow
def test_sigkill_midway_then_restart_gives_every_sample_once(tmp_path):
    n = 48
    path = _recipe(tmp_path, n=n, extra_options=", delay = 0.05")
    output = tmp_path / "recipe.h5"
    command = [sys.executable, "-m", "common.datasets", "generate", str(path), "--workers", "2", "--quiet"]
    with open(tmp_path / "stderr.txt", "w") as errors:
        process = subprocess.Popen(
            command, env=_environment(), stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 240
            written = 0
            while written < 8:  # let it write some samples, then kill it and its workers mid-run
                assert process.poll() is None, (tmp_path / "stderr.txt").read_text()
                assert time.monotonic() < deadline, "the run wrote nothing in 240 s"
                time.sleep(0.2)
                try:
                    written = len(io.read_table(output)["sample_id"])
                except (FileNotFoundError, ValueError, OSError):  # file or table not created yet
                    written = 0
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == -signal.SIGKILL
    before = io.read_table(output)["sample_id"]
    assert 8 <= len(before) < n  # killed midway
    with pytest.raises(OSError):  # the killed writer left the file flagged as open for writing
        h5py.File(output, "r").close()

    summary = datasets.generate(path, workers=2, progress=False)
    done_before = summary.already_done
    assert done_before >= len(before) and summary.succeeded + summary.failed == n - done_before

    with h5py.File(output, "r") as file:  # the file opens cleanly after the restart
        assert "sample_id" in file and "failed" in file
    table, failed = io.read_table(output), io.read_table(output, "failed")
    ids = np.concatenate([table["sample_id"], failed["sample_id"]]).tolist()
    assert sorted(ids) == list(range(n))  # every sample id exactly once
    recipe = datasets.load_recipe(path)
    parameters = datasets.sample_parameters(recipe)
    for row, sample_id in enumerate(table["sample_id"]):  # each row holds its own sample, intact
        expected = damped_oscillator(
            parameters[sample_id],
            datasets.sample_seed(3, int(sample_id)),
            n_times=16,
            duration=5.0,
            noise=0.01,
        )
        np.testing.assert_array_equal(table["displacement"][row], expected["displacement"])
    runs = io.read_table(output, "runs")
    assert runs["event"].tolist() == ["start", "start", "finish"]


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        yield cluster


@pytest.mark.slow
def test_dask_cluster_gives_the_same_dataset_as_the_local_pool(tmp_path, dask_cluster):
    path = _recipe(tmp_path, n=24)
    local = datasets.generate(path, output=tmp_path / "local.h5", workers=2, progress=False)
    remote = datasets.generate(
        path, output=tmp_path / "dask.h5", scheduler=dask_cluster.scheduler_address, progress=False
    )
    assert (local.succeeded, local.failed) == (remote.succeeded, remote.failed)
    for group in ("/", "failed"):
        local_table = datasets.read_dataset(tmp_path / "local.h5", group)
        remote_table = datasets.read_dataset(tmp_path / "dask.h5", group)
        assert local_table.keys() == remote_table.keys()
        for key in local_table:
            if key not in ("traceback", "worker"):  # tracebacks name the executor's frames
                np.testing.assert_array_equal(remote_table[key], local_table[key], err_msg=key)
    runs = io.read_table(tmp_path / "dask.h5", "runs")
    assert runs["executor"][0].startswith("dask tcp://")
    # each failure names the host and the worker that ran it: a Dask worker's address, a local pid
    dask_workers = set(dask_cluster.scheduler_info["workers"])
    remote_failed = datasets.read_dataset(tmp_path / "dask.h5", "failed")
    assert set(remote_failed["worker"]) <= dask_workers
    local_failed = datasets.read_dataset(tmp_path / "local.h5", "failed")
    local_workers = set(local_failed["worker"])
    assert all(worker.startswith("pid ") for worker in local_workers)
    assert f"pid {os.getpid()}" not in local_workers  # pool workers, not this process
    assert set(local_failed["host"]) == set(remote_failed["host"]) == {socket.gethostname()}


def echo_temperature(params, seed, shift=0.0):
    """A generator returning its parameter back, shifted by ``shift`` (module-level: importable)."""
    return {"temperature": params["temperature"] + shift, "energy": np.float64(2.0 * params["temperature"])}


@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_a_parameter_echoed_back_is_stored_once_and_a_changed_one_fails(tmp_path, shift):
    recipe = datasets.loads_recipe(
        textwrap.dedent(
            f"""
            [generator]
            function = "test_datasets:echo_temperature"
            options = {{ shift = {shift} }}
            [parameters]
            temperature = {{ low = 300.0, high = 600.0, points = 4 }}
            [sampling]
            method = "grid"
            [output]
            path = "{(tmp_path / "echo.h5").as_posix()}"
            """
        )
    )
    summary = datasets.generate(recipe, workers=0, progress=False)
    if shift == 0.0:
        assert (summary.succeeded, summary.failed) == (4, 0)
        table = datasets.read_dataset(tmp_path / "echo.h5")
        assert sorted(table) == ["energy", "sample_id", "sample_seed", "temperature"]
        np.testing.assert_array_equal(table["temperature"], [300.0, 400.0, 500.0, 600.0])
        np.testing.assert_array_equal(table["energy"], 2 * table["temperature"])
    else:
        assert (summary.succeeded, summary.failed) == (0, 4)
        assert "parameters (with other values)" in summary.failures[0][1]


SHIPPED = sorted((ROOT / "datasets").glob("*.toml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.stem)
def test_shipped_recipe_is_valid_and_has_a_small_and_a_full_variant(path):
    recipe = datasets.load_recipe(path)
    assert recipe.n_samples == len(datasets.sample_parameters(recipe)) > 0
    stem = path.stem.removesuffix("_small")
    assert (ROOT / "datasets" / f"{stem}.toml").is_file() and (
        ROOT / "datasets" / f"{stem}_small.toml"
    ).is_file()
    assert stem in (ROOT / "datasets" / "README.md").read_text()  # it has a dataset card


def _generate_shipped(stem, folder, limit):
    """The first ``limit`` samples of a shipped recipe, in this process; all must succeed."""
    summary = datasets.generate(
        ROOT / "datasets" / f"{stem}.toml",
        output=folder / f"{stem}.h5",
        workers=0,
        limit=limit,
        progress=False,
    )
    assert (summary.succeeded, summary.failed) == (limit, 0), summary
    return datasets.read_dataset(folder / f"{stem}.h5")


def test_small_ethanol_xtb_recipe_generates_labelled_configurations(tmp_path):
    table = _generate_shipped("ethanol_xtb_small", tmp_path, limit=2)
    shapes = {key: value.shape[1:] for key, value in table.items()}
    assert shapes == {
        "sample_id": (),
        "sample_seed": (),
        "temperature": (),
        "positions": (9, 3),
        "atomic_numbers": (9,),
        "energy": (),
        "forces": (9, 3),
    }
    assert sorted(table["atomic_numbers"][0].tolist()) == [1] * 6 + [6, 6, 8]  # C2H5OH
    # GFN2-xTB total energy of ethanol is about -11.4 hartree = -3.0e4 kJ/mol
    assert np.all((table["energy"] > -3.2e4) & (table["energy"] < -2.8e4))
    bonds = np.linalg.norm(table["positions"][:, :, None] - table["positions"][:, None], axis=-1)
    assert 0.09 < np.sort(bonds[0][bonds[0] > 0])[0] < 0.12  # shortest bond (O-H or C-H) in nm


def test_small_fluoroethanol_recipe_samples_trajectories_from_several_conformers(tmp_path):
    """Four trajectories (two temperatures, two conformers) of four frames each: the frames of one
    trajectory differ from each other, the two conformers start in different rotamers, and a frame's label
    is tblite's GFN2-xTB energy of its positions."""
    import torch

    from mindsponge.labels import XTB, label

    table = _generate_shipped("fluoroethanol_xtb_small", tmp_path, limit=16)
    assert table["positions"].shape == (16, 9, 3)
    np.testing.assert_array_equal(table["frame"], np.tile([0, 1, 2, 3], 4))
    np.testing.assert_array_equal(table["conformer"], np.tile(np.repeat([0, 1], 4), 2))
    trajectories = table["positions"].reshape(4, 4, 9, 3)
    moves = np.abs(np.diff(trajectories, axis=1)).max(axis=(2, 3))
    assert moves.min() > 1e-3  # 20 steps apart: successive frames differ

    def torsion(positions):  # O-C-C-F, degrees
        b0, b1, b2 = positions[0] - positions[1], positions[2] - positions[1], positions[3] - positions[2]
        b1 = b1 / np.linalg.norm(b1)
        v, w = b0 - (b0 @ b1) * b1, b2 - (b2 @ b1) * b1
        return np.degrees(np.arctan2(np.cross(b1, v) @ w, v @ w))

    starts = [abs(torsion(table["positions"][index])) for index in (0, 4)]  # 300 K, conformers 0 and 1
    assert abs(starts[0] - starts[1]) > 60, starts  # anti and gauche, not one rotamer twice
    numbers = torch.as_tensor(table["atomic_numbers"][5])
    reference = label(XTB(numbers), torch.as_tensor(table["positions"][5]))
    assert float(table["energy"][5]) == pytest.approx(float(reference["energy"]), abs=1e-6)


def test_small_waveguide_recipe_matches_the_analytic_slab_transmission(tmp_path):
    table = _generate_shipped("waveguide_sparameters_small", tmp_path, limit=1)
    assert table["frequencies"].shape == (1, 26) and table["s21_real"].shape == (1, 26)
    s11 = np.hypot(table["s11_real"], table["s11_imag"])
    s21 = np.hypot(table["s21_real"], table["s21_imag"])
    np.testing.assert_allclose(s11**2 + s21**2, 1.0, atol=0.03)  # a lossless slab conserves power
    # TM1 mode through a slab filling a 20 mm guide: beta = sqrt(eps k0^2 - (pi/h)^2) in each section,
    # |S21|^-2 = 1 + (r - 1/r)^2 sin^2(beta_slab L) / 4 with r = beta_slab / beta_empty
    wavenumber = 2 * np.pi * table["frequencies"] / constants.c
    cutoff = np.pi / 20e-3
    beta_empty = np.sqrt(wavenumber**2 - cutoff**2)
    beta_slab = np.sqrt(table["permittivity"][:, None] * wavenumber**2 - cutoff**2)
    ratio = beta_slab / beta_empty
    phase = beta_slab * table["length"][:, None]
    analytic = 1 / np.sqrt(1 + 0.25 * (ratio - 1 / ratio) ** 2 * np.sin(phase) ** 2)
    np.testing.assert_allclose(s21, analytic, atol=0.05)
    assert s11.max() > 0.1  # the slab does reflect: the comparison is not trivial


# ---------------------------------------------------------------------------------------------
# concurrency, failures, retries, changed code, thread budgets (issue 19)

GENERATORS = pathlib.Path(__file__).resolve().parent


def _small_recipe(folder, function, options="", n=8, extra="", name="small"):
    """A recipe of ``dataset_generators:<function>`` over one parameter x in [0, 1) (random sampling)."""
    path = folder / f"{name}.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            name = "{name}"
            [generator]
            function = "dataset_generators:{function}"
            options = {{ {options} }}
            {extra}
            [parameters]
            x = {{ low = 0.0, high = 1.0 }}
            [sampling]
            method = "random"
            n = {n}
            seed = 1
            [output]
            path = "{(folder / f"{name}.h5").as_posix()}"
            """
        )
    )
    return path


def _command(path, *arguments, environment=None, wait=True):
    command = [sys.executable, "-m", "common.datasets", "generate", str(path), "--quiet", *arguments]
    environment = {**_environment(), "PYTHONPATH": f"{ROOT}{os.pathsep}{GENERATORS}", **(environment or {})}
    if not wait:
        return subprocess.Popen(
            command,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_two_concurrent_runs_of_one_recipe_never_write_a_sample_twice(tmp_path):
    path = _small_recipe(tmp_path, "logged", f'log = "{(tmp_path / "log").as_posix()}", delay = 0.15', n=24)
    runs = [_command(path, "--workers", "0", wait=False) for _ in range(2)]  # started together
    outputs = [run.communicate(timeout=240) for run in runs]
    statuses = sorted(run.returncode for run in runs)
    assert statuses == [0, 2], outputs  # one run did the work, the other was refused
    refused = outputs[[run.returncode for run in runs].index(2)][1]
    assert str(tmp_path / "small.h5") in refused and "being written by another process" in refused
    ids = io.read_table(tmp_path / "small.h5")["sample_id"].tolist()
    assert sorted(ids) == list(range(24))  # every sample once
    assert len((tmp_path / "log").read_text().split()) == 24  # and computed once


HOLD_WRITER = (
    "import sys; from common import io; writer = io.H5Writer(sys.argv[1]); "
    "print('holding', flush=True); sys.stdin.read()"
)


def test_a_run_refuses_a_file_another_writer_holds_and_names_it(tmp_path):
    path = _small_recipe(tmp_path, "flag_controlled", n=4)
    datasets.generate(path, workers=0, limit=2, progress=False)
    holder = subprocess.Popen(  # another process writing the file (holds its writer until stdin closes)
        [sys.executable, "-c", HOLD_WRITER, str(tmp_path / "small.h5")],
        env=_environment(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(RuntimeError, match="being written by another process") as raised:
            datasets.generate(path, workers=0, progress=False)
    finally:
        holder.communicate("", timeout=60)
    assert str(tmp_path / "small.h5") in str(raised.value)
    assert datasets.generate(path, workers=0, progress=False).succeeded == 2  # continues once released


def test_retry_failed_reruns_failed_samples_and_resolves_them(tmp_path):
    flag = tmp_path / "broken"
    flag.touch()
    path = _small_recipe(tmp_path, "flag_controlled", f'flag = "{flag.as_posix()}"', n=16)
    parameters = datasets.sample_parameters(datasets.load_recipe(path))
    failing = sorted(i for i, values in enumerate(parameters) if values["x"] > 0.5)
    assert 0 < len(failing) < 16

    first = _command(path, "--workers", "0")
    assert first.returncode == 1, first.stderr  # samples failed: non-zero, and named
    assert f"{len(failing)} samples failed: ids {', '.join(map(str, failing))}" in first.stdout
    flag.unlink()  # the cause is fixed
    again = datasets.generate(path, workers=0, progress=False)  # without retry_failed: they stay failed
    assert (again.succeeded, again.failed, again.unresolved, again.exit_status) == (0, 0, failing, 1)

    retried = datasets.generate(path, workers=0, retry_failed=True, progress=False)
    counts = (retried.succeeded, retried.failed, retried.retried, retried.unresolved)
    assert counts == (len(failing), 0, len(failing), [])
    assert retried.exit_status == 0
    table = datasets.read_dataset(tmp_path / "small.h5")
    assert table["sample_id"].tolist() == list(range(16))  # every sample once
    np.testing.assert_array_equal(table["y"], [2.0 * values["x"] for values in parameters])
    assert len(datasets.read_dataset(tmp_path / "small.h5", "failed")["sample_id"]) == 0  # resolved
    log = io.read_table(tmp_path / "small.h5", "failed")  # the log keeps what happened
    assert sorted(log["sample_id"].tolist()) == failing
    assert set(log["host"]) == {socket.gethostname()} and set(log["attempts"]) == {1}
    assert len(set(log["worker"])) == 1 and log["worker"][0] != f"pid {os.getpid()}"  # the command's process


def test_samples_with_nonfinite_labels_fail_naming_the_keys_unless_allowed(tmp_path):
    flag = tmp_path / "diverging"
    flag.touch()
    options = f'flag = "{flag.as_posix()}"'
    path = _small_recipe(tmp_path, "nonfinite_while_flagged", options, n=16)
    parameters = datasets.sample_parameters(datasets.load_recipe(path))
    diverging = sorted(i for i, values in enumerate(parameters) if values["x"] > 0.5)
    assert 0 < len(diverging) < 16

    summary = datasets.generate(path, workers=0, progress=False)
    counts = (summary.succeeded, summary.failed, summary.unresolved)
    assert counts == (16 - len(diverging), len(diverging), diverging)
    table = datasets.read_dataset(tmp_path / "small.h5")
    assert table["sample_id"].tolist() == sorted(set(range(16)) - set(diverging))
    assert np.isfinite(table["y"]).all() and np.isfinite(table["z"]).all()
    failed = datasets.read_dataset(tmp_path / "small.h5", "failed")
    assert failed["sample_id"].tolist() == diverging
    assert set(failed["error_type"]) == {"NonFiniteLabelError"}
    for message in failed["message"]:
        assert "'y' 1 of 1 (1 NaN, 0 inf), 'z' 1 of 3 (0 NaN, 1 inf)" in message
        assert "allow_nonfinite = true" in message

    flag.unlink()  # the calculation is fixed: --retry-failed runs them again
    retried = datasets.generate(path, workers=0, retry_failed=True, progress=False)
    assert (retried.succeeded, retried.failed, retried.unresolved) == (len(diverging), 0, [])
    assert datasets.read_dataset(tmp_path / "small.h5")["sample_id"].tolist() == list(range(16))

    flag.touch()
    kept = _small_recipe(tmp_path, "nonfinite_while_flagged", options, n=16, extra="allow_nonfinite = true",
                         name="kept")
    assert datasets.load_recipe(kept).fingerprint() != datasets.load_recipe(path).fingerprint()
    summary = datasets.generate(kept, workers=0, progress=False)
    assert (summary.succeeded, summary.failed) == (16, 0)
    table = datasets.read_dataset(tmp_path / "kept.h5")
    assert np.isnan(table["y"][diverging]).all() and np.isinf(table["z"][diverging, 1]).all()
    np.testing.assert_array_equal(np.isfinite(table["y"]), table["x"] <= 0.5)

    kept.write_text(kept.read_text().replace("allow_nonfinite = true", 'allow_nonfinite = "yes"'))
    with pytest.raises(config.ConfigError, match="key 'allow_nonfinite': expected bool") as raised:
        datasets.load_recipe(kept)
    lines = kept.read_text().splitlines()
    assert raised.value.line == lines.index('allow_nonfinite = "yes"') + 1 and str(kept) in str(raised.value)


@pytest.mark.slow
def test_retries_and_timeout_recipe_keys(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    options = f'marks = "{marks.as_posix()}"'
    once = _small_recipe(tmp_path, "fails_first_attempt", options, n=4, name="once")
    assert datasets.generate(once, workers=0, progress=False).failed == 4  # no retries: the first attempt
    for mark in marks.iterdir():
        mark.unlink()
    twice = _small_recipe(tmp_path, "fails_first_attempt", options, n=4, extra="retries = 1", name="twice")
    assert datasets.load_recipe(twice).fingerprint() == datasets.load_recipe(once).fingerprint()
    summary = datasets.generate(twice, workers=0, progress=False)
    assert (summary.succeeded, summary.failed) == (4, 0)  # the second attempt of each sample succeeded

    log = (tmp_path / "log").as_posix()
    limits = "timeout = 0.5\nretries = 1"
    slow = _small_recipe(tmp_path, "logged", f'log = "{log}", delay = 30.0', n=3, extra=limits, name="slow")
    start = time.monotonic()
    summary = datasets.generate(slow, workers=1, progress=False)
    assert time.monotonic() - start < 60  # 3 samples x 2 attempts x 0.5 s (+ start-up), not 3 x 30 s
    failed = datasets.read_dataset(tmp_path / "slow.h5", "failed")
    assert summary.failed == 3 and failed["sample_id"].tolist() == [0, 1, 2]
    assert set(failed["error_type"]) == {"JobTimeoutError"} and set(failed["attempts"]) == {2}
    assert all("0.5 s" in message for message in failed["message"])

    bad = _recipe(tmp_path, name="bad")
    bad.write_text(bad.read_text().replace("[parameters]", "timeout = -1.0\n\n[parameters]"))
    with pytest.raises(config.ConfigError, match="key 'timeout'"):
        datasets.load_recipe(bad)


def test_changed_generator_code_is_refused_unless_allowed(tmp_path, monkeypatch):
    module = tmp_path / "changing_generator.py"
    module.write_text(
        "import numpy as np\n\ndef square(params, seed):\n    return {'y': np.float64(params['x'] ** 2)}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "changing.toml"
    path.write_text(_small_recipe(tmp_path, "flag_controlled", n=6).read_text().replace(
        "dataset_generators:flag_controlled", "changing_generator:square"
    ).replace("small.h5", "changing.h5"))
    datasets.generate(path, workers=0, limit=3, progress=False)
    with h5py.File(tmp_path / "changing.h5", "r") as file:
        assert file.attrs["generator_file"] == str(module)
        assert file.attrs["generator_source_sha256"] == hashlib.sha256(module.read_bytes()).hexdigest()

    module.write_text(module.read_text().replace("** 2", "** 3"))  # the generator changed
    with pytest.raises(ValueError, match="other code of the generator changing_generator:square") as raised:
        datasets.generate(path, workers=0, progress=False)
    assert str(tmp_path / "changing.h5") in str(raised.value)
    assert "--allow-changed-generator" in str(raised.value)
    refused = _command(path, "--workers", "0", environment={"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"})
    assert refused.returncode == 2 and "other code of the generator" in refused.stderr
    assert len(io.read_table(tmp_path / "changing.h5")["sample_id"]) == 3  # nothing was added

    summary = datasets.generate(path, workers=0, allow_changed_generator=True, progress=False)
    assert summary.succeeded == 3
    runs = io.read_table(tmp_path / "changing.h5", "runs")
    assert len(set(runs["generator_fingerprint"])) == 2  # the mix is on record
    module.write_text(module.read_text().replace("** 3", "** 4"))  # changed again, but nothing is left
    assert datasets.generate(path, workers=0, progress=False).succeeded == 0  # a finished file opens


@pytest.mark.slow
def test_first_sample_with_other_keys_than_the_labels_stops_before_the_rest_run(tmp_path):
    log = tmp_path / "log"
    path = _small_recipe(
        tmp_path, "logged", f'log = "{log.as_posix()}", delay = 0.3', n=24, extra='labels = ["y", "w"]'
    )
    with pytest.raises(config.ConfigError) as raised:
        datasets.generate(path, workers=2, progress=False)
    assert raised.value.line == 6 and str(path) in str(raised.value)  # the labels line
    assert "returned keys ['y']; the recipe's labels are ['w', 'y']" in str(raised.value)
    assert len(log.read_text().split()) <= 2  # one sample per worker ran, not the 24

    # the samples already in a file fix keys, shapes and dtypes: a first sample unlike them stops the run
    size = tmp_path / "size"
    size.write_text("2")
    path = _small_recipe(tmp_path, "sized", f'size_file = "{size.as_posix()}"', n=6, name="sized")
    datasets.generate(path, workers=0, limit=2, progress=False)
    size.write_text("3")  # same recipe, same code, other output
    with pytest.raises(DataError, match="key 'y' has shape") as raised:
        datasets.generate(path, workers=0, progress=False)
    assert str(tmp_path / "sized.h5") in str(raised.value)
    assert "the generator's output changed" in str(raised.value)
    table = datasets.read_dataset(tmp_path / "sized.h5")
    assert table["y"].shape == (2, 2) and "failed" not in h5py.File(tmp_path / "sized.h5", "r")


@pytest.mark.slow
def test_a_worker_that_cannot_import_the_generator_is_not_a_sample_failure(tmp_path):
    path = _small_recipe(tmp_path, "not_on_workers", n=6)
    completed = _command(path, "--workers", "1", environment={"GENERATOR_ONLY_ON_HEAD": "1"})
    assert completed.returncode == 3, completed.stdout + completed.stderr
    assert "6 samples could not run because of their worker" in completed.stdout
    with h5py.File(tmp_path / "small.h5", "r") as file:
        assert "failed" not in file and "sample_id" not in file  # nothing recorded as the samples' fault
    incidents = io.read_table(tmp_path / "small.h5", "infrastructure")
    assert sorted(incidents["sample_id"].tolist()) == list(range(6))
    assert all("cannot import the generator" in message for message in incidents["message"])
    assert set(incidents["host"]) == {socket.gethostname()}
    assert all(worker.startswith("pid ") for worker in incidents["worker"])
    fixed = datasets.generate(path, workers=1, progress=False)  # the workers' environment is repaired
    assert (fixed.succeeded, fixed.exit_status) == (6, 0)
    assert sorted(io.read_table(tmp_path / "small.h5")["sample_id"].tolist()) == list(range(6))


def test_dask_worker_that_cannot_import_the_generator_is_avoided(tmp_path, dask_cluster, monkeypatch):
    distributed = pytest.importorskip("distributed")
    folder = tmp_path / "only_on_one_worker"
    folder.mkdir()
    (folder / "one_worker_generator.py").write_text(
        "import numpy as np\n\ndef double(params, seed):\n    return {'y': np.float64(2 * params['x'])}\n"
    )
    monkeypatch.syspath_prepend(str(folder))  # this process (which validates the recipe) can import it
    path = _small_recipe(tmp_path, "flag_controlled", n=12)
    path.write_text(
        path.read_text().replace("dataset_generators:flag_controlled", "one_worker_generator:double")
    )
    with distributed.Client(dask_cluster.scheduler_address) as client:
        addresses = sorted(client.scheduler_info()["workers"])
        client.run(lambda: sys.path.insert(0, str(folder)), workers=addresses[:1])  # one worker of two
        summary = datasets.generate(path, scheduler=client, progress=False)
    assert (summary.succeeded, summary.failed, summary.infrastructure) == (12, 0, [])
    table = datasets.read_dataset(tmp_path / "small.h5")
    assert table["sample_id"].tolist() == list(range(12))
    np.testing.assert_array_equal(table["y"], 2 * table["x"])

    nowhere = tmp_path / "nowhere.toml"  # a generator no worker can import: nothing recorded as failed
    nowhere.write_text(path.read_text().replace("one_worker_generator", "dataset_generators").replace(
        "double", "not_on_workers").replace("small.h5", "nowhere.h5"))
    with distributed.Client(dask_cluster.scheduler_address) as client:
        client.run(lambda: sys.modules.pop("dataset_generators", None) and None)
        client.run(lambda: sys.path.remove(str(GENERATORS)) if str(GENERATORS) in sys.path else None)
        summary = datasets.generate(nowhere, scheduler=client, progress=False)
    assert (summary.succeeded, summary.failed, len(summary.infrastructure)) == (0, 0, 12)
    assert summary.exit_status == 3
    incidents = io.read_table(tmp_path / "nowhere.h5", "infrastructure")
    assert set(incidents["worker"]) <= set(addresses)


def _session_processes(session):
    """Process ids of the live (not zombie) processes in session ``session`` (Linux /proc)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session and fields[0] != "Z":
                found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killing_the_run_leaves_no_orphan_workers(tmp_path):
    log = tmp_path / "log"
    path = _small_recipe(tmp_path, "logged", f'log = "{log.as_posix()}", delay = 0.3', n=400)
    process = _command(path, "--workers", "2", wait=False)
    try:
        deadline = time.monotonic() + 120
        while not log.exists() or len(log.read_text().split()) < 4:  # the workers are running samples
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        assert len(_session_processes(process.pid)) >= 4  # the run, its forkserver and two workers
        process.kill()  # SIGKILL to the run only, not to its process group
        process.wait()
        deadline = time.monotonic() + 30
        while _session_processes(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _session_processes(process.pid) == []  # the workers died with the run
    finally:
        for pid in _session_processes(process.pid):
            os.kill(pid, signal.SIGKILL)


def test_a_worker_holding_other_generator_code_refuses_to_run_it():
    from common import parallel
    from common.datasets import runner

    reference = "common.datasets.examples:damped_oscillator"
    job = (0, {"frequency": 1.0, "damping": 0.1}, 0)
    examples = ROOT / "common" / "datasets" / "examples.py"
    code = code_fingerprint(resolve_function(reference), reference)  # the code the run started with
    assert code.files["common/datasets/examples.py"] == hashlib.sha256(examples.read_bytes()).hexdigest()
    result = runner._run_sample(reference, {"n_times": 4}, code, False, job)  # the code the run started with
    assert result["displacement"].shape == (4,)
    other = CodeFingerprint({**code.files, "common/datasets/examples.py": "0" * 64}, code.packages)
    with pytest.raises(parallel.InfrastructureError, match="is not the code this run started with") as raised:
        runner._run_sample(reference, {"n_times": 4}, other, False, job)  # the run started with other code
    assert str(examples) in str(raised.value) and "common/datasets/examples.py changed" in str(raised.value)
