"""common.threads: explicit thread budgets, checked against what threadpoolctl and torch report."""

import os

import numpy as np
import pytest
import threadpoolctl
import torch

from common import geometry as geo
from common import nn as cnn
from common import pde, threads
from common.errors import ConfigurationError


@pytest.fixture(autouse=True)
def _restore_thread_settings():
    """The tests change this process's budgets: put torch's and every pool's back afterwards."""
    torch_threads = torch.get_num_threads()
    with threadpoolctl.threadpool_limits(limits=None):
        yield
    torch.set_num_threads(torch_threads)


def _pool_threads():
    """Threads of every thread pool loaded in this process, as threadpoolctl reports them."""
    return {pool["num_threads"] for pool in threadpoolctl.threadpool_info()}


def test_workers_times_threads_never_exceed_the_cores():
    for cores in (1, 2, 3, 8, 64):
        for workers in range(1, 10):
            budget = threads.threads_per_worker(workers, cores=cores)
            assert budget >= 1 and (workers * budget <= cores or budget == 1)
            assert workers * (budget + 1) > cores  # and no thread is wasted
    assert threads.available_cores() == len(os.sched_getaffinity(0))
    with pytest.raises(ConfigurationError, match="workers"):
        threads.threads_per_worker(0)


def test_default_budget_follows_torchrun_and_omp_num_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    cores = len(os.sched_getaffinity(0))
    assert threads.default_threads() == max(1, cores // 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's explicit choice caps the default
    assert threads.default_threads(1) == 1


def test_thread_budget_sets_every_pool_and_restores_them(monkeypatch):
    np.dot(np.ones((64, 64)), np.ones((64, 64)))  # OpenBLAS is loaded
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    threadpoolctl.threadpool_limits(2)
    before_pools = _pool_threads()
    with threads.thread_budget(1):
        assert torch.get_num_threads() == 1 and _pool_threads() == {1}
        assert os.environ["OMP_NUM_THREADS"] == "1"  # for libraries loaded later
    assert torch.get_num_threads() == 2 and _pool_threads() == before_pools
    assert "OMP_NUM_THREADS" not in os.environ
    with pytest.raises(ConfigurationError, match="thread budget"):
        threads.set_thread_budget(0)


def test_pde_trainer_trains_under_its_thread_budget():
    torch.set_num_threads(2)
    seen = []

    def monitor(model):
        seen.append(torch.get_num_threads())
        return {"threads": float(torch.get_num_threads())}

    line = geo.Interval(0.0, 1.0)
    problem = pde.Problem(("x",), ("u",), [pde.Residual("pde", line, lambda x, u: u[:, 0] - x[:, 0], 16)])
    model = cnn.MLP(1, 1, hidden_features=8, hidden_layers=1).double()
    trainer = pde.Trainer(
        problem, model, steps=4, monitor=monitor, monitor_every=2, progress=False, threads=1
    )
    trainer.fit()
    assert seen == [1, 1] and torch.get_num_threads() == 2  # restored after training
    with pytest.raises(ConfigurationError, match="threads"):
        pde.Trainer(problem, model, threads=0)


def test_busy_elsewhere_counts_another_process_and_not_this_one():
    """A busy-loop process is counted; this process's own threads (busy or not) are not."""
    import subprocess
    import sys
    import time

    if threads.busy_elsewhere() is None:
        pytest.skip("no /proc/loadavg here")
    loop = "import time\nend = time.time() + 20\nwhile time.time() < end: pass"
    busy = subprocess.Popen([sys.executable, "-c", loop])
    try:
        time.sleep(0.3)
        readings = []
        for _ in range(9):
            readings.append(threads.busy_elsewhere())
            time.sleep(0.02)
    finally:
        busy.kill()
        busy.wait()
    assert sorted(readings)[len(readings) // 2] >= 1


def test_load_follower_takes_the_median_reading_within_its_limit_and_restores(monkeypatch):
    readings = iter([0, 1, 1, 0, 0, 3, 3])
    monkeypatch.setattr(threads, "busy_elsewhere", lambda: next(readings))
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)  # the limit: what torch has when a block starts
        follower = threads.LoadFollower(interval=0.0)
        with follower.following():
            seen = [torch.get_num_threads()] + [follower.update() for _ in range(5)]
            with follower.following():  # a nested block keeps the outer limit and gives nothing back
                pass
            assert follower.limit == 3
        # medians of the last three readings: 0, 1, 1, 1, 0, 0 others busy -> 4 cores less them, at most 3
        assert seen == [3, 3, 3, 3, 3, 3]
        assert torch.get_num_threads() == 3
        torch.set_num_threads(4)
        crowded = threads.LoadFollower(interval=0.0)
        monkeypatch.setattr(threads, "busy_elsewhere", lambda: 3)
        with crowded.following():
            assert torch.get_num_threads() == 1  # 4 cores, 3 busy elsewhere
            monkeypatch.setattr(threads, "busy_elsewhere", lambda: 0)
            assert crowded.update() == 1  # one quiet reading is not enough: the median of (3, 0) is 3
            assert crowded.update() == 4  # the median of (3, 0, 0) is 0
        assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)
