"""What runs in a worker of :func:`common.parallel.run_jobs`: one job under a time limit and
retries, its failure as a :class:`JobFailure`, and the errors that name what went wrong."""

import contextlib
import ctypes
import dataclasses
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from common.errors import MindScienceError

__all__ = ["InfrastructureError", "JobFailure", "JobTimeoutError", "call", "lost_worker", "worker_name"]


class InfrastructureError(MindScienceError, RuntimeError):
    """Raised by a job function when its worker cannot run jobs at all: not the job's fault.

    For instance the job's code cannot be imported on that worker, or the worker holds a
    different version of it. :func:`run_jobs` never reports it as the job's failure: on a
    Dask cluster the job is rerun on another worker (and that worker gets no more jobs);
    when no worker is left, or in a local pool (whose workers share one environment), the
    job's :class:`JobFailure` has ``infrastructure=True``.
    """


@dataclasses.dataclass(frozen=True)
class JobFailure:
    """What :func:`run_jobs` yields in place of a result when a job raised (or its worker died).

    Attributes:
        error_type: the exception's class name, e.g. ``"ValueError"``.
        message: ``str(exception)``.
        traceback: the formatted traceback, from the worker.
        host: the host name of the worker ("" if unknown, e.g. the worker died).
        worker: ``"pid 1234"`` for a local process, the Dask worker's address on a cluster.
        attempts: how many times the job ran (``1 + retries`` for a job that kept failing).
        infrastructure: True when the job never had a fair run (its worker died, or raised
            :class:`InfrastructureError`): not the job's fault, worth running again elsewhere
            or later; False when the job itself raised.
    """

    error_type: str
    message: str
    traceback: str
    host: str = ""
    worker: str = ""
    attempts: int = 1
    infrastructure: bool = False

    def __str__(self) -> str:
        return f"{self.error_type}: {self.message}"


class JobTimeoutError(MindScienceError, TimeoutError):
    """A job ran longer than the ``timeout`` given to :func:`run_jobs`."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "the job ran longer than its time limit"


def worker_name() -> str:
    """The Dask worker's address inside a Dask worker, else ``"pid <pid>"``."""
    if "distributed" in sys.modules:
        try:
            return sys.modules["distributed"].get_worker().address
        except ValueError:  # not inside a Dask worker
            pass
    return f"pid {os.getpid()}"


def _raise_in_thread(thread_id: int, state: dict) -> None:
    """Timer callback: raise JobTimeoutError in thread ``thread_id`` unless its job has finished."""
    with state["lock"]:
        if not state["finished"]:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(thread_id), ctypes.py_object(JobTimeoutError)
            )


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`JobTimeoutError` in the block after ``seconds``.

    In a process's main thread (local workers, ``workers=0``) an interval timer's SIGALRM
    interrupts the job, even in ``time.sleep`` or a blocking call. In other threads (Dask
    workers) an asynchronous exception is raised in the job's thread; it takes effect at the
    job's next Python bytecode, so a long call into compiled code finishes first.
    """
    if seconds is None:
        yield
        return
    message = f"the job ran longer than its time limit of {seconds:g} s"
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):

        def expire(signum, frame):
            raise JobTimeoutError(message)

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return
    state = {"lock": threading.Lock(), "finished": False}
    timer = threading.Timer(seconds, _raise_in_thread, (threading.get_ident(), state))
    timer.daemon = True
    timer.start()
    try:
        yield
    except JobTimeoutError as error:
        raise JobTimeoutError(message) from error
    finally:
        with state["lock"]:
            state["finished"] = True
        timer.cancel()


def call(fn: Callable[[Any], Any], job: Any, timeout: float | None = None, retries: int = 0) -> Any:
    """Run one job in a worker, up to ``1 + retries`` times, each within ``timeout`` seconds.

    The last exception becomes a :class:`JobFailure` (with its traceback, host and worker);
    an :class:`InfrastructureError` is not retried here (see :func:`run_jobs`).
    """
    for attempt in range(1, retries + 2):
        try:
            with time_limit(timeout):
                return fn(job)
        except Exception as error:
            infrastructure = isinstance(error, InfrastructureError)
            if infrastructure or attempt > retries:
                return JobFailure(
                    type(error).__name__,
                    str(error),
                    traceback.format_exc(),
                    socket.gethostname(),
                    worker_name(),
                    attempt,
                    infrastructure,
                )
    raise AssertionError("unreachable")  # the last attempt returns


def lost_worker(error: BaseException, host: str = "", worker: str = "") -> JobFailure:
    """The :class:`JobFailure` of a job whose worker process died (killed, out of memory) while running it."""
    return JobFailure(
        type(error).__name__,
        f"the worker process running this job died ({error}); it is not known whether the job or the "
        "machine (out of memory, a kill) was at fault",
        "".join(traceback.format_exception(error)),
        host,
        worker,
        infrastructure=True,
    )
