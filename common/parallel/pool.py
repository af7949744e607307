"""Jobs of :func:`common.parallel.run_jobs` on a local process pool (forkserver workers)."""

import collections
import concurrent.futures
import itertools
import multiprocessing
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from common import threads as thread_budgets
from common.parallel.worker import JobFailure, lost_worker

__all__ = ["run_pool", "NO_MORE_JOBS"]

#: what ``next(jobs, NO_MORE_JOBS)`` returns when the jobs are exhausted
NO_MORE_JOBS = object()


def _exit_with_run(run_alive: Any) -> None:
    """Make this worker process exit when the process that runs :func:`run_jobs` dies.

    ``run_alive`` is the reading end of a pipe whose only writing end that process holds
    (a local worker's parent is the pool's forkserver, not that process, and neither exits
    by itself while workers live). A daemon thread waits on it: when the run ends, killed
    or not, the pipe reaches end-of-file and the worker exits, leaving no orphan.
    """

    def watch() -> None:
        try:
            run_alive.recv_bytes()
        except (EOFError, OSError):
            pass
        os._exit(1)

    threading.Thread(target=watch, name="run-watch", daemon=True).start()


def _start_worker(threads: int, run_alive: Any) -> None:
    """Local pool initializer: the worker's thread budget, and its exit with the run."""
    _exit_with_run(run_alive)  # first: importing a generator's torch later takes seconds
    thread_budgets._apply(threads)  # checked by run_jobs; unchecked here, so no torch import


def run_pool(
    call: Callable, jobs: Iterable, workers: int, max_in_flight: int | None, threads: int, probe: bool
) -> Iterator[tuple]:
    """Local process pool. Workers start by forkserver: a clean process, not a fork of a threaded parent.

    A worker that dies (segfault, OOM killer, ``os._exit``) breaks the whole pool and every job
    in it. The pool is then restarted and those jobs become suspects, rerun one at a time: a job
    that kills its worker while running alone fails (as an infrastructure failure); the others finish.
    """
    run = _PoolRun(call, jobs, workers, max_in_flight or 2 * workers, threads, probe)
    try:
        while run.submit():
            yield from run.collect()
    finally:
        run.close()


class _PoolRun:
    """The state of one :func:`run_pool`: the pool, the jobs in flight and the suspects."""

    def __init__(self, call, jobs, workers: int, limit: int, threads: int, probe: bool):
        self.call, self.workers, self.limit, self.threads, self.probing = call, workers, limit, threads, probe
        self.context = multiprocessing.get_context("forkserver")
        # workers exit when alive_signal closes
        self.run_alive, self.alive_signal = self.context.Pipe(duplex=False)
        self.pending_jobs = iter(jobs)
        self.suspects: collections.deque = collections.deque()
        self.pool = self._new_pool()
        self.in_flight: dict[concurrent.futures.Future, tuple[Any, bool]] = {}  # future -> (job, ran alone)

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=self.context,
            initializer=_start_worker,
            initargs=(self.threads, self.run_alive),
        )

    def submit(self) -> bool:
        """Submit the jobs due (a suspect alone, else up to the limit); whether any job is in flight.

        The pool can break between :meth:`collect` and here (a worker died after the last wait
        returned): ``pool.submit`` then refuses, and the pool is restarted as in :meth:`collect`.
        """
        from concurrent.futures.process import BrokenProcessPool

        while True:
            try:
                self._submit_due()
                return bool(self.in_flight)
            except BrokenProcessPool:
                self._restart()

    def _submit_due(self) -> None:
        if self.suspects:
            if not self.in_flight:
                self.in_flight[self.pool.submit(self.call, self.suspects[0])] = (self.suspects[0], True)
                self.suspects.popleft()
            return
        room = min(self.limit, self.workers) if self.probing else self.limit
        while len(self.in_flight) < room:
            job = next(self.pending_jobs, NO_MORE_JOBS)
            if job is NO_MORE_JOBS:
                return
            try:
                self.in_flight[self.pool.submit(self.call, job)] = (job, False)
            except BaseException:  # not submitted: it stays the next job due
                self.pending_jobs = itertools.chain([job], self.pending_jobs)
                raise

    def _restart(self) -> None:
        """The pool is unusable: start a new one; the jobs it held become suspects."""
        self.suspects.extend(job for job, _ in self.in_flight.values())
        self.in_flight.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = self._new_pool()

    def collect(self) -> Iterator[tuple]:
        """Wait for at least one job and yield ``(job, result)`` of those done; restart a broken pool."""
        from concurrent.futures.process import BrokenProcessPool

        done, _ = concurrent.futures.wait(self.in_flight, return_when=concurrent.futures.FIRST_COMPLETED)
        broken = False
        for future in done:
            job, alone = self.in_flight.pop(future)
            try:
                result = future.result()
            except BrokenProcessPool as error:
                broken = True
                if not alone:
                    self.suspects.append(job)
                    continue
                result = lost_worker(error, socket.gethostname(), "a local pool worker")
            self.probing = self.probing and isinstance(result, JobFailure)
            yield job, result
        if broken:  # rerun what the pool held
            self._restart()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.alive_signal.close()
        self.run_alive.close()
