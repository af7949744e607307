"""Run many independent jobs, and train data-parallel under ``torchrun``.

Two tools:

* :func:`run_jobs` maps a function over independent jobs (simulations, labelling
  runs) and yields ``(job, result)`` pairs as they complete: in a local process
  pool by default, on a Dask distributed cluster when given a scheduler address
  (``"tcp://host:8786"``) or a ``distributed.Client``. Exceptions raised by a job
  come back as results (a :class:`JobFailure`), so one bad job never stops a run.
* :class:`DistributedContext` wraps ``torch.distributed`` for data-parallel training
  launched by ``torchrun``: the same training script runs unchanged as one process
  or as N processes (gloo on CPU, NCCL on CUDA), each process seeing its shard of
  the data and averaging gradients.

Example (data-parallel training; run as ``python train.py`` or
``torchrun --nproc_per_node=2 train.py``):

    >>> from common import parallel                                   # doctest: +SKIP
    >>> ctx = parallel.DistributedContext.from_environment()          # doctest: +SKIP
    >>> model = ctx.wrap(model.to(ctx.device))                        # doctest: +SKIP
    >>> sampler = ctx.sampler(dataset, shuffle=True, seed=0)          # doctest: +SKIP
    >>> loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)  # doctest: +SKIP
    >>> for epoch in range(10):                                       # doctest: +SKIP
    ...     ctx.set_epoch(sampler, epoch)
    ...     for batch in loader:
    ...         ...  # forward, backward, optimiser step as usual
    ...     epoch_loss = ctx.all_reduce_mean(torch.tensor(running_loss))
    ...     if ctx.is_main:
    ...         print(epoch, epoch_loss.item())
    >>> ctx.close()                                                   # doctest: +SKIP

Example (independent jobs):

    >>> jobs = [{"temperature": 300.0}, {"temperature": 400.0}]
    >>> for job, result in parallel.run_jobs(simulate, jobs, workers=2):  # doctest: +SKIP
    ...     print(job, resu

The package: :mod:`~common.parallel.distributed` (``torchrun``), :mod:`~common.parallel.worker`
(one job in a worker), :mod:`~common.parallel.pool` (local processes) and
:mod:`~common.parallel.dask_cluster` (a Dask cluster).
"""

import contextlib
import functools
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from common import threads as thread_budgets
from common.errors import ArgumentTypeError, ConfigurationError
from common.parallel.dask_cluster import run_dask
from common.parallel.distributed import DistributedContext
from common.parallel.pool import run_pool
from common.parallel.worker import InfrastructureError, JobFailure, JobTimeoutError, call

__all__ = [
    "DistributedContext",
    "InfrastructureError",
    "JobFailure",
    "JobTimeoutError",
    "check_pool_arguments",
    "run_jobs",
]


def check_pool_arguments(workers: int | None, threads: int | None, caller: str) -> None:
    """Refuse a bad ``workers`` (an int >= 0, 0 = in this process) or ``threads`` (an int >= 1, per
    worker) before anything is started or written; ``None`` is the default for either."""
    from common.checks import non_negative_int, positive_int  # here: common.checks imports torch

    if workers is not None:
        non_negative_int(workers, f"{caller}: workers (0 = in this process)")
    if threads is not None:
        positive_int(threads, f"{caller}: threads (per worker)")


def run_jobs(
    fn: Callable[[Any], Any],
    jobs: Iterable[Any],
    workers: int | None = None,
    scheduler: "str | Any | None" = None,
    max_in_flight: int | None = None,
    threads: int | None = None,
    timeout: float | None = None,
    retries: int = 0,
    probe: bool = False,
) -> Iterator[tuple[Any, Any]]:
    """Run ``fn(job)`` for every job in parallel and yield ``(job, result)`` as jobs complete.

    A job that raises yields a :class:`JobFailure` as its result and the others go on.
    A worker that dies (segfault, out of memory) breaks a local pool: the pool is
    restarted and the jobs it held are rerun one at a time; one that kills its worker even
    alone yields a failure with ``infrastructure=True``, as does a job raising
    :class:`InfrastructureError` (on Dask, such a job is first rerun on the other workers).
    Results come in completion order, not job order. Jobs are submitted lazily, at most
    ``max_in_flight`` at a time, so ``jobs`` may be a long generator.

    Thread budget: each local worker runs with ``threads`` threads in every numerical
    library (:func:`common.threads.set_thread_budget`), by default
    ``common.threads.default_threads(workers)`` so that workers x threads <= cores.
    Dask worker processes get ``threads``, by default the cores of their host divided by
    the Dask worker threads on that host. With ``workers=0`` the budget applies only if
    given, for the duration of the run. Local workers also exit when this process dies
    (no orphans after a kill).

    Args:
        fn: a picklable callable of one argument (a module-level function or a
            ``functools.partial`` of one); it runs in another process.
        jobs: the jobs (picklable).
        workers: local processes (default ``os.cpu_count()``); ``0`` runs every job in
            this process, one after the other, for debugging. Ignored with a scheduler.
        scheduler: a Dask scheduler address (``"tcp://host:8786"``) or a
            ``distributed.Client``; jobs then run on that cluster's workers. A client
            made from an address is closed at the end.
        max_in_flight: jobs submitted but not yet finished; default twice the number
            of workers (or of the cluster's worker threads).
        threads: threads per worker process (see above); None for the default.
        timeout: seconds one attempt of a job may run before it fails with
            :class:`JobTimeoutError` (None: no limit). See
            :func:`common.parallel.worker.time_limit` for how.
        retries: extra attempts, in the same worker, for a job that raised (0: none).
        probe: until a job has succeeded, keep at most one job per worker (or Dask worker
            thread) in flight, so that the caller can check the first result and stop
            (close the iterator) before the remaining jobs are scheduled.

    Yields:
        ``(job, result)``; ``result`` is ``fn(job)`` or a :class:`JobFailure`.

    Example:
        >>> import math
        >>> sorted(result for _, result in run_jobs(math.sqrt, [1.0, 4.0, 9.0], workers=0))
        [1.0, 2.0, 3.0]
    """
    from common.checks import non_negative_int, positive_int  # here: common.checks imports torch

    if not callable(fn):
        raise ArgumentTypeError(f"run_jobs: fn must be callable, got {type(fn).__name__}")
    check_pool_arguments(workers, threads, "run_jobs")
    if max_in_flight is not None:
        positive_int(max_in_flight, "run_jobs: max_in_flight")
    non_negative_int(retries, "run_jobs: retries")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ConfigurationError(f"run_jobs: timeout must be a number of seconds > 0, got {timeout!r}")
    job_call = functools.partial(call, fn, timeout=timeout, retries=retries)
    if scheduler is not None:
        yield from run_dask(job_call, jobs, scheduler, max_in_flight, threads, probe)
    elif workers == 0:
        with thread_budgets.thread_budget(threads) if threads else contextlib.nullcontext():
            for job in jobs:
                yield job, job_call(job)
    else:
        workers = workers or os.cpu_count() or 1
        threads = threads or thread_budgets.default_threads(workers)
        yield from run_pool(job_call, jobs, workers, max_in_flight, threads, probe)
