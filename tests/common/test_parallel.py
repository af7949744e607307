"""Tests of common.parallel: torchrun data-parallel training and the job runner (pool and Dask)."""

import json
import math
import os
import pathlib
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import parallel_jobs  # noqa: E402  (tests/common is on sys.path under pytest)
import pytest
import torch

from common import parallel

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Linear regression trained with DistributedContext, exactly as a user script would be.
# The global batch is 16 samples: one process takes 16 per step, two processes 8 each.
# Without shuffling, DistributedSampler gives rank r the samples r, r + 2, ..., so the
# two shards of a step together are the single process's batch, and averaging the
# gradients (DistributedDataParallel) reproduces its step up to summation order.
TRAIN = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import torch
    from common import parallel

    output, shuffle = sys.argv[1], sys.argv[2] == "shuffle"
    ctx = parallel.DistributedContext.from_environment(device="cpu")
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(256, 3))
    targets = inputs @ np.array([1.5, -2.0, 0.5]) + 0.3 + 0.1 * rng.normal(size=256)
    dataset = torch.utils.data.TensorDataset(
        torch.tensor(inputs, dtype=torch.float64), torch.tensor(targets, dtype=torch.float64)[:, None]
    )
    torch.manual_seed(1)
    model = ctx.wrap(torch.nn.Linear(3, 1).double())
    sampler = ctx.sampler(dataset, shuffle=shuffle, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=16 // ctx.world_size, sampler=sampler)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for epoch in range(15):
        ctx.set_epoch(sampler, epoch)
        total = torch.zeros((), dtype=torch.float64)
        for features, labels in loader:
            optimiser.zero_grad()
            loss = torch.nn.functional.mse_loss(model(features), labels)
            loss.backward()
            optimiser.step()
            total += loss.detach() * len(labels)
        losses.append(ctx.all_reduce_mean(total / len(sampler)).item())
    if ctx.is_main:
        with open(output, "w") as handle:
            json.dump({"world_size": ctx.world_size, "losses": losses}, handle)
    ctx.close()
    """
)


def _environment():
    environment = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE")}
    return {**environment, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _train(tmp_path, processes, shuffle):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    output = tmp_path / f"losses_{processes}_{shuffle}.json"
    launcher = (
        [sys.executable]
        if processes == 1
        else [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    )
    completed = subprocess.run(
        [*launcher, str(script), str(output), "shuffle" if shuffle else "ordered"],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(output.read_text())
    assert result["world_size"] == processes
    return np.array(result["losses"])


def _least_squares_loss():
    """The minimum mean squared error of the script's data (numpy lstsq): where training must end."""
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(256, 3))
    targets = inputs @ np.array([1.5, -2.0, 0.5]) + 0.3 + 0.1 * rng.normal(size=256)
    design = np.hstack([inputs, np.ones((256, 1))])
    coefficients = np.linalg.lstsq(design, targets, rcond=None)[0]
    return float(np.mean((design @ coefficients - targets) ** 2))


@pytest.mark.slow
def test_torchrun_two_processes_match_single_process(tmp_path):
    single = _train(tmp_path, 1, shuffle=False)
    double = _train(tmp_path, 2, shuffle=False)
    # same samples per step: the same trajectory up to floating-point summation order
    np.testing.assert_allclose(double, single, rtol=1e-9)
    optimum = _least_squares_loss()
    assert single[0] > 10 * optimum  # training had something to do
    assert single[-1] == pytest.approx(optimum, rel=0.05)
    # shuffled shards: a different sample order, the same result in expectation
    shuffled = _train(tmp_path, 2, shuffle=True)
    assert shuffled[-1] == pytest.approx(optimum, rel=0.05)


def test_single_process_context_without_torchrun(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    ctx = parallel.DistributedContext.from_environment(device="cpu")
    assert (ctx.rank, ctx.world_size, ctx.is_main, ctx.backend) == (0, 1, True, None)
    model = torch.nn.Linear(2, 1)
    assert ctx.wrap(model) is model
    dataset = torch.utils.data.TensorDataset(torch.arange(10.0))
    assert sorted(ctx.sampler(dataset, shuffle=True, seed=3)) == list(range(10))
    assert list(ctx.sampler(dataset, shuffle=False)) == list(range(10))
    value = torch.tensor([1.0, 2.0])
    assert torch.equal(ctx.all_reduce_mean(value), value)
    ctx.close()


def test_bad_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        parallel.DistributedContext.from_environment(device="cpu")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR"):
        parallel.DistributedContext.from_environment(device="cpu")


@pytest.mark.parametrize("workers", [0, 2])
def test_run_jobs_local_returns_every_result_and_failures(workers):
    values = [4.0, -1.0, 9.0, 2.25, 16.0]
    results = dict(parallel.run_jobs(math.sqrt, values, workers=workers))
    assert sorted(results) == sorted(values)
    for value, result in results.items():
        if value < 0:
            assert isinstance(result, parallel.JobFailure)
            assert result.error_type == "ValueError" and "math domain error" in result.message
            assert "Traceback" in result.traceback
        else:
            assert result == math.sqrt(value)


def test_run_jobs_survives_a_dying_worker():
    values = [1, 2, -3, 4, 5, 6, 7, 8]
    results = dict(
        parallel.run_jobs(parallel_jobs.exit_worker_if_negative, values, workers=2, max_in_flight=3)
    )
    assert sorted(results) == sorted(values)
    assert isinstance(results[-3], parallel.JobFailure) and "died" in results[-3].message
    assert results[-3].infrastructure  # a dead worker is never reported as the job's own error
    # only the job that killed its worker fails: the jobs that were in the broken pool are rerun
    assert all(results[value] == value * value for value in values if value > 0)


def test_run_jobs_on_dask_local_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as cluster:
        values = [float(value) for value in range(-2, 20)]
        results = dict(parallel.run_jobs(math.sqrt, values, scheduler=cluster.scheduler_address))
        with distributed.Client(cluster) as client:  # a Client is accepted too
            again = dict(parallel.run_jobs(math.sqrt, values[:3], scheduler=client, max_in_flight=1))
    assert sorted(results) == values
    for value in values:
        expected = math.sqrt(value) if value >= 0 else None
        assert (
            (results[value] == expected)
            if expected is not None
            else isinstance(results[value], parallel.JobFailure)
        )
    assert isinstance(again[-2.0], parallel.JobFailure) and again[0.0] == 0.0


def test_run_jobs_rejects_bad_arguments():
    with pytest.raises(ValueError, match="workers"):
        list(parallel.run_jobs(math.sqrt, [1.0], workers=-1))
    with pytest.raises(TypeError, match="scheduler"):
        list(parallel.run_jobs(math.sqrt, [1.0], scheduler=42))
    with pytest.raises(ValueError, match="timeout"):
        list(parallel.run_jobs(math.sqrt, [1.0], timeout=-1.0))
    with pytest.raises(ValueError, match="threads"):
        list(parallel.run_jobs(math.sqrt, [1.0], threads=0))


@pytest.mark.parametrize("workers", [0, 2])
def test_infrastructure_errors_are_told_from_job_errors_with_host_and_worker(workers):
    job = parallel_jobs.raise_infrastructure_if_negative
    results = dict(parallel.run_jobs(job, [-1, 2], workers=workers))
    assert results[2] == 4
    failure = results[-1]
    assert failure.infrastructure and failure.error_type == "InfrastructureError"
    assert failure.host == socket.gethostname()
    pid = int(failure.worker.removeprefix("pid "))
    assert (pid == os.getpid()) == (workers == 0)  # a pool worker is another process
    job_error = dict(parallel.run_jobs(math.sqrt, [-1.0], workers=workers))[-1.0]
    assert not job_error.infrastructure and job_error.worker.startswith("pid ")


@pytest.mark.parametrize("workers", [0, 1])
def test_timeout_interrupts_a_job_and_retries_rerun_it(workers):
    start = time.monotonic()
    results = list(
        parallel.run_jobs(parallel_jobs.sleep_then_pid, [30.0, 0.01], workers=workers, timeout=0.5)
    )
    assert time.monotonic() - start < 15  # not the 30 s the job wanted (pool start-up included)
    outcome = dict(results)
    assert isinstance(outcome[30.0], parallel.JobFailure) and outcome[30.0].error_type == "JobTimeoutError"
    assert "0.5 s" in outcome[30.0].message and not outcome[30.0].infrastructure
    assert isinstance(outcome[0.01], int)
    values = [101 + workers, 102 + workers]  # fresh values: the job remembers them per process
    first = dict(parallel.run_jobs(parallel_jobs.fail_first_attempt, values, workers=workers))
    assert all(isinstance(result, parallel.JobFailure) and result.attempts == 1 for result in first.values())
    values = [201 + workers, 202 + workers]
    second = dict(parallel.run_jobs(parallel_jobs.fail_first_attempt, values, workers=workers, retries=1))
    assert second == {value: value for value in values}


def test_probe_holds_jobs_back_until_the_caller_has_seen_a_success(tmp_path):
    log = tmp_path / "calls.txt"
    jobs = [(str(log), value) for value in range(12)]
    results = parallel.run_jobs(parallel_jobs.log_then_square, jobs, workers=2, probe=True)
    job, result = next(results)
    assert result == job[1] ** 2
    results.close()  # the caller stops at the first result: the pool shuts down
    assert len(log.read_text().split()) <= 2  # one job per worker ran, not the 4 of a full queue
    unprobed = parallel.run_jobs(parallel_jobs.log_then_square, jobs, workers=2, max_in_flight=12)
    next(unprobed)
    unprobed.close()
    assert len(log.read_text().split()) > 4  # without probe the whole queue was submitted and ran


@pytest.mark.parametrize(("workers", "threads"), [(2, None), (2, 1), (1, 2)])
def test_each_pool_worker_gets_an_explicit_thread_budget(workers, threads, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the default, not the test runner's choice
    runs = parallel.run_jobs(parallel_jobs.thread_counts, range(4), workers=workers, threads=threads)
    results = [result for _, result in runs]
    cores = os.cpu_count()
    expected = threads or max(1, cores // workers)  # workers x threads <= cores by default
    for torch_threads, pools, environment in results:
        assert torch_threads == expected and pools == [expected] and environment == str(expected)


def test_dask_workers_get_a_thread_budget_and_a_timeout():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
    ) as cluster:
        address = cluster.scheduler_address
        results = dict(parallel.run_jobs(parallel_jobs.spin, [30.0, 0.01], scheduler=address, timeout=0.5))
        budget = dict(parallel.run_jobs(parallel_jobs.thread_counts, [0], scheduler=address))
        workers = list(cluster.scheduler_info["workers"])
    assert isinstance(results[30.0], parallel.JobFailure) and results[30.0].error_type == "JobTimeoutError"
    assert results[30.0].worker == workers[0]  # the Dask worker's address
    torch_threads, _, _ = budget[0]
    assert torch_threads == max(1, os.cpu_count() // 2)  # 2 worker threads on this host share its cores
    torch.set_num_threads(os.cpu_count())  # the cluster ran in this process: undo its budget


def test_distributed_context_sets_the_thread_budget(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    try:
        ctx = parallel.DistributedContext.from_environment(device="cpu", threads=1)
        assert ctx.threads == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_pool_that_breaks_between_collect_and_submit_is_restarted(monkeypatch):
    """A worker can die after the last wait returned: the next submit then meets a broken pool."""
    from concurrent.futures.process import BrokenProcessPool

    from common.parallel import pool as local_pool

    new_pool, pools = local_pool._PoolRun._new_pool, []

    def breaking_first_pool(run):
        executor = new_pool(run)
        if not pools:  # the first pool refuses its third submission, as a broken pool does
            submit, calls = executor.submit, []

            def submit_until_broken(*args, **kwargs):
                calls.append(args)
                if len(calls) == 3:
                    raise BrokenProcessPool("a child process terminated abruptly")
                return submit(*args, **kwargs)

            executor.submit = submit_until_broken
        pools.append(executor)
        return executor

    monkeypatch.setattr(local_pool._PoolRun, "_new_pool", breaking_first_pool)
    values = [1, 2, 3, 4, 5, 6]
    job = parallel_jobs.exit_worker_if_negative
    results = list(parallel.run_jobs(job, values, workers=2, max_in_flight=3))
    assert len(pools) == 2  # restarted once
    assert sorted(job for job, _ in results) == values  # every job once: none lost, none twice
    assert all(result == job * job for job, result in results)
