"""Jobs for tests/common/test_parallel.py, in a module without heavy imports (workers import it)."""

import os
import time


def exit_worker_if_negative(value):
    """Kills its worker process for a negative value (like a segfaulting simulation), else squares."""
    if value < 0:
        os._exit(1)
    return value * value


def raise_infrastructure_if_negative(value):
    """An InfrastructureError for a negative value (as a worker missing a package), else squares."""
    from common.parallel import InfrastructureError

    if value < 0:
        raise InfrastructureError(f"this worker cannot run job {value}")
    return value * value


def spin(seconds):
    """Busy Python loop for ``seconds`` (interruptible only between bytecodes), then returns the pid."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return os.getpid()


def sleep_then_pid(seconds):
    """Sleeps ``seconds`` (a blocking call), then returns the pid."""
    time.sleep(seconds)
    return os.getpid()


_CALLS: dict = {}


def fail_first_attempt(value):
    """Raises on the first call with ``value`` in this process, returns ``value`` on later ones."""
    _CALLS[value] = _CALLS.get(value, 0) + 1
    if _CALLS[value] == 1:
        raise RuntimeError(f"first attempt of {value} fails")
    return value


def log_then_square(job):
    """Appends ``value`` to the file ``path`` (one line per call), sleeps 0.2 s, returns the square."""
    path, value = job
    with open(path, "a") as handle:
        handle.write(f"{value}\n")
    time.sleep(0.2)
    return value * value


def thread_counts(_):
    """Threads this worker may use: torch's, each loaded pool's (threadpoolctl), OMP_NUM_THREADS."""
    import numpy  # noqa: F401  (loads OpenBLAS, so that threadpoolctl sees a pool)
    import threadpoolctl
    import torch

    pools = sorted({pool["num_threads"] for pool in threadpoolctl.threadpool_info()})
    return torch.get_num_threads(), pools, os.environ.get("OMP_NUM_THREADS")
