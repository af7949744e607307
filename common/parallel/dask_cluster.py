"""Jobs of :func:`common.parallel.run_jobs` on a Dask distributed cluster."""

import collections
import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from common import threads as thread_budgets
from common.errors import ArgumentTypeError
from common.parallel.pool import NO_MORE_JOBS
from common.parallel.worker import JobFailure, lost_worker, worker_name

__all__ = ["run_dask"]

_DASK_BUDGET: list[int] = []  # the thread budget already set in this Dask worker process


def _call_on_dask(
    call: Callable[[Any], Any], threads: int | None, host_threads: dict[str, int], job: Any
) -> Any:
    """Dask task: set this worker process's thread budget (once), then run the job.

    ``threads`` given: that budget. Otherwise the cores of this host divided by the Dask
    worker threads on this host (``host_threads``, by worker address), at least 1.
    """
    if threads is None:
        address = worker_name()
        threads = max(1, thread_budgets.available_cores() // host_threads.get(address, 1))
    if _DASK_BUDGET != [threads]:
        thread_budgets._apply(threads)
        _DASK_BUDGET[:] = [threads]
    return call(job)


def run_dask(
    call: Callable,
    jobs: Iterable,
    scheduler: Any,
    max_in_flight: int | None,
    threads: int | None,
    probe: bool,
) -> Iterator[tuple]:
    """Jobs on a Dask distributed cluster, submitted lazily through ``distributed.as_completed``.

    A job failing with an infrastructure error on a worker is resubmitted to the workers that
    have not (yet) had one; that worker gets no further jobs from this run.
    """
    distributed = _import_distributed()
    client, own_client = _client(distributed, scheduler)
    try:
        run = _DaskRun(distributed, client, call, jobs, max_in_flight, threads, probe)
        yield from run.results()
    finally:
        if own_client:
            client.close()


def _import_distributed():
    try:
        import distributed
    except ImportError as error:
        raise ImportError(
            "run_jobs(scheduler=...) needs Dask distributed: pip install 'mindscience-torch[dask]'"
        ) from error
    return distributed


def _client(distributed, scheduler) -> tuple[Any, bool]:
    """The client of ``scheduler`` (an address or a client), and whether this run made it."""
    if isinstance(scheduler, str):
        return distributed.Client(scheduler, set_as_default=False), True
    if isinstance(scheduler, distributed.Client):
        return scheduler, False
    raise ArgumentTypeError(
        f"run_jobs: scheduler must be an address like 'tcp://host:8786' or a distributed.Client, "
        f"got {type(scheduler).__name__}"
    )


class _DaskRun:
    """The state of one :func:`run_dask`: jobs in flight, workers excluded, jobs no worker can run."""

    def __init__(self, distributed, client, call, jobs, max_in_flight, threads, probe):
        self.client = client
        workers_info = client.scheduler_info()["workers"]
        threads_by_host = collections.Counter()
        for info in workers_info.values():
            threads_by_host[info["host"]] += info["nthreads"]
        host_threads = {address: threads_by_host[info["host"]] for address, info in workers_info.items()}
        self.task = functools.partial(_call_on_dask, call, threads, host_threads)
        self.total_threads = sum(info["nthreads"] for info in workers_info.values()) or 1
        self.limit = max_in_flight or 2 * self.total_threads
        self.pending_jobs = iter(jobs)
        self.in_flight: dict[str, Any] = {}
        self.excluded: set[str] = set()
        self.completed = distributed.as_completed(loop=client.loop)
        self.probing = probe
        self.unrunnable: list[Any] = []  # jobs left when every worker had an infrastructure failure
        self.last_infrastructure: list[JobFailure] = []

    def _allowed_workers(self) -> list[str]:
        return sorted(set(self.client.scheduler_info()["workers"]) - self.excluded)

    def _submit(self, job: Any) -> None:
        placement = {}
        if self.excluded:
            allowed = self._allowed_workers()
            if not allowed:
                self.unrunnable.append(job)
                return
            placement = {"workers": allowed, "allow_other_workers": False}
        future = self.client.submit(self.task, job, pure=False, **placement)
        self.in_flight[future.key] = job
        self.completed.add(future)

    def _submit_more(self) -> None:
        room = min(self.limit, self.total_threads) if self.probing else self.limit
        while len(self.in_flight) < room:
            job = next(self.pending_jobs, NO_MORE_JOBS)
            if job is NO_MORE_JOBS:
                return
            self._submit(job)

    def _nowhere(self, job: Any) -> tuple[Any, JobFailure]:
        failure = self.last_infrastructure[-1]
        message = f"no worker of the cluster can run it (the last one to try said: {failure.message})"
        return job, dataclasses.replace(failure, message=message)

    def _outcome(self, future) -> tuple[Any, Any] | None:
        """``(job, result)`` of a finished future, or ``None`` when its job was resubmitted elsewhere."""
        job = self.in_flight.pop(future.key)
        try:
            result = future.result()
        except Exception as error:  # the worker died (KilledWorker) or the result was lost
            result = lost_worker(error)
        future.release()
        if isinstance(result, JobFailure) and result.infrastructure and result.worker:
            self.excluded.add(result.worker)
            self.last_infrastructure.append(result)
            self._submit(job)  # rerun elsewhere, if a worker is left
            if not self.unrunnable:
                return None
            job, result = self._nowhere(self.unrunnable.pop())
        return job, result

    def results(self) -> Iterator[tuple]:
        """``(job, result)`` as the jobs complete."""
        self._submit_more()
        for future in self.completed:
            outcome = self._outcome(future)
            if outcome is None:
                continue
            self.probing = self.probing and isinstance(outcome[1], JobFailure)
            yield outcome
            self._submit_more()
            while self.unrunnable:
                yield self._nowhere(self.unrunnable.pop())
