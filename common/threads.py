"""Thread budgets: how many threads each worker process, and each trainer, may use (and the memory a
simulation may take: :func:`available_memory`).

torch, OpenMP codes (tblite's GFN2-xTB), OpenBLAS and MKL each start one thread per core by
default. ``W`` worker processes on ``C`` cores then run ``W x C`` threads that fight over
``C`` cores: the shipped ``datasets/ethanol_xtb_small.toml`` with two workers on two cores
took 85-107 s that way, against 1.4 s with one thread per worker. The rule here is
``workers x threads <= cores``, applied explicitly where processes are started:

* :func:`common.parallel.run_jobs` gives every local worker ``default_threads(workers)``
  threads (its ``threads=`` argument overrides), and every Dask worker process its share of
  the cores of its host;
* :meth:`common.parallel.DistributedContext.from_environment` gives each ``torchrun`` process
  ``default_threads(LOCAL_WORLD_SIZE)`` (its ``threads=`` argument overrides);
* the trainers (``common.pde.Trainer``, ``mindsponge.train.Trainer``) take ``threads=``
  (default ``default_threads()``) and train under :func:`thread_budget`.

``default_threads(n)`` is ``cores // n``, capped by ``OMP_NUM_THREADS`` when the environment
sets it.

A budget covers the libraries already loaded (through ``threadpoolctl`` and
``torch.set_num_threads``) and those loaded later (through the ``OMP_NUM_THREADS`` family of
environment variables, which they read when they start; processes started later inherit
them too).

Example:
    >>> from common import threads
    >>> threads.threads_per_worker(2, cores=8)
    4
    >>> with threads.thread_budget(1):                   # doctest: +SKIP
    ...     labels = xtb_sample(params, seed)            # one thread, restored afterwards
"""

import contextlib
import os
import sys
import time
from collections.abc import Iterator

from common import checks

__all__ = [
    "LoadFollower",
    "busy_elsewhere",
    "free_cores",
    "available_cores",
    "threads_per_worker",
    "local_processes",
    "default_threads",
    "set_thread_budget",
    "set_threads",
    "thread_budget",
    "available_memory",
]

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
"""Environment variables through which numerical libraries take their thread count at start."""


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports it, else ``os.cpu_count()``)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def free_cores(samples: int = 5, interval: float = 0.02) -> int:
    """Cores this process may use that no other process is running on now (at least 1).

    The cores of this process's CPU affinity minus the runnable scheduling entities of the rest of
    the machine, from the fourth field of ``/proc/loadavg`` (runnable count, which includes the
    reading thread itself), as the median of ``samples`` readings ``interval`` seconds apart.
    Without ``/proc/loadavg`` (not Linux): every core of the affinity.

    Returns:
        int between 1 and the number of usable cores.
    """
    checks.positive_int(samples, "free_cores: samples")
    checks.non_negative(interval, "free_cores: interval")
    usable = available_cores()
    readings = []
    for sample in range(samples):
        try:
            with open("/proc/loadavg") as handle:
                readings.append(int(handle.read().split()[3].split("/")[0]) - 1)
        except (OSError, IndexError, ValueError):
            return usable
        if sample + 1 < samples:
            time.sleep(interval)
    others = sorted(readings)[len(readings) // 2]
    return max(1, min(usable, usable - others))


def busy_elsewhere() -> int | None:
    """Runnable threads of other processes now: the runnable count of ``/proc/loadavg`` less this process's
    own running threads (``/proc/self/task``), or ``None`` where those files do not exist (not Linux).

    One reading, no waiting (about 0.1 ms): this process's OpenMP workers that spin between parallel
    regions are its own and are not counted, so a process never mistakes itself for the load.
    """
    try:
        with open("/proc/loadavg") as handle:
            runnable = int(handle.read().split()[3].split("/")[0])
        own = 0
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/stat") as handle:
                    if handle.read().rsplit(")", 1)[1].split()[0] == "R":
                        own += 1
            except OSError:  # the thread ended meanwhile
                continue
    except (OSError, IndexError, ValueError):
        return None
    return max(0, runnable - max(own, 1))


class LoadFollower:
    """Keep torch's thread count at the cores other processes leave free, within a limit, while a block of
    work runs.

    With more runnable threads than cores, the threads of torch's OpenMP pool wait for each other at every
    parallel region while another process holds one of their cores: measured on 2 cores with one busy-loop
    process, a step of a 3,000-atom water box took about 5 times longer with 2 threads than with 1.

    ``with follower.following():`` takes torch's thread count as the limit (the user's ``OMP_NUM_THREADS``
    or ``torch.set_num_threads``), calls :meth:`update` once and gives the count back at the end; inside,
    :meth:`update` (between blocks of steps) sets ``torch.set_num_threads`` to the cores less the other
    processes' runnable threads (:func:`busy_elsewhere`, the median of the last three readings, read at most
    every ``interval`` seconds and kept between blocks), at least 1 and at most the limit. Blocks may nest
    (the outermost gives the count back). The kernels' results do not depend on the thread count
    (:mod:`mindsponge._kernels`), so following the load changes the speed, never the numbers.

    Args:
        interval: seconds between two readings of the load.
    """

    def __init__(self, interval: float = 0.5):
        self.interval = checks.non_negative(interval, "LoadFollower: interval")
        self.limit = 1
        self._readings: list[int] = []
        self._last = -float("inf")
        self._depth = 0
        self._saved = None

    @contextlib.contextmanager
    def following(self) -> Iterator["LoadFollower"]:
        """A block that follows the load (see the class docstring)."""
        import torch

        if self._depth == 0:
            self._saved = torch.get_num_threads()
            self.limit = self._saved
        self._depth += 1
        try:
            self.update()
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0 and torch.get_num_threads() != self._saved:
                torch.set_num_threads(self._saved)

    def update(self) -> int:
        """The thread count for the next block of work (set in torch if it changed)."""
        import torch

        now = time.monotonic()
        if now - self._last >= self.interval and self.limit > 1:
            self._last = now
            busy = busy_elsewhere()
            if busy is not None:
                self._readings = [*self._readings[-2:], busy]
        if self._readings and self.limit > 1:
            others = sorted(self._readings)[len(self._readings) // 2]
            threads = max(1, min(self.limit, available_cores() - others))
            if threads != torch.get_num_threads():
                torch.set_num_threads(threads)
        return torch.get_num_threads()


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Threads per worker so that ``workers x threads <= cores`` (at least 1 each).

    Args:
        workers: worker processes sharing the machine (>= 1).
        cores: the cores they share; default :func:`available_cores`.
    """
    from common.checks import positive_int  # here: common.checks imports torch, workers may not need it

    positive_int(workers, "threads_per_worker: workers")
    return max(1, (available_cores() if cores is None else positive_int(cores, "cores")) // workers)


def local_processes() -> int:
    """Processes of this job on this machine: ``LOCAL_WORLD_SIZE`` (set by ``torchrun``), else 1."""
    text = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(text) if text.isdigit() and int(text) > 0 else 1


def default_threads(processes: int | None = None) -> int:
    """The default budget of each of ``processes`` processes sharing this machine.

    ``threads_per_worker(processes)``, but no more than ``OMP_NUM_THREADS`` when the
    environment sets it (a budget the user chose). ``processes`` defaults to
    :func:`local_processes`.
    """
    budget = threads_per_worker(local_processes() if processes is None else processes)
    chosen = os.environ.get("OMP_NUM_THREADS", "")
    return min(budget, int(chosen)) if chosen.isdigit() and int(chosen) > 0 else budget


def set_thread_budget(threads: int) -> None:
    """Let this process use ``threads`` threads from now on, in every numerical library.

    Sets ``torch.set_num_threads`` (if torch is imported), the thread pools ``threadpoolctl``
    finds (OpenMP, OpenBLAS, MKL, BLIS already loaded), and the :data:`THREAD_VARIABLES`
    for libraries loaded later and child processes. Process-wide and permanent: for a
    temporary budget use :func:`thread_budget`.

    Raises:
        common.errors.ConfigurationError: if ``threads`` is not a positive int.
    """
    from common.checks import positive_int

    _apply(positive_int(threads, "thread budget"))


def set_threads(threads, owner: str = "threads") -> int | None:
    """Apply a ``threads=`` argument as the simulations take it, once: ``None``, an int or ``"free"``.

    ``None`` leaves every thread setting alone; a positive int is :func:`set_thread_budget`;
    ``"free"`` measures the cores not busy right now (:func:`free_cores`) and uses that many.

    Returns:
        the thread count applied, or ``None``.

    Raises:
        common.errors.ConfigurationError: anything else (the message starts with ``owner``).
    """
    from common.checks import positive_int
    from common.errors import ConfigurationError

    if threads is None:
        return None
    if threads == "free":
        count = free_cores()
    elif isinstance(threads, str):
        raise ConfigurationError(f"{owner}: expected None, a positive int or 'free', got {threads!r}")
    else:
        count = positive_int(threads, owner)
    _apply(count)
    return count


def _apply(threads: int) -> None:
    """:func:`set_thread_budget` without the check (for worker start-up: no torch import)."""
    import threadpoolctl

    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)
    threadpoolctl.threadpool_limits(limits=threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def thread_budget(threads: int) -> Iterator[int]:
    """Run a block with ``threads`` threads (as :func:`set_thread_budget`), then restore the previous limits.

    Yields:
        ``threads``.
    """
    import threadpoolctl

    from common.checks import positive_int

    positive_int(threads, "thread budget")
    saved_environment = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    torch = sys.modules.get("torch")
    saved_torch = torch.get_num_threads() if torch is not None else None
    with threadpoolctl.threadpool_limits(limits=threads):
        for name in THREAD_VARIABLES:
            os.environ[name] = str(threads)
        if torch is not None:
            torch.set_num_threads(threads)
        try:
            yield threads
        finally:
            for name, value in saved_environment.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            if saved_torch is not None:
                torch.set_num_threads(saved_torch)


def available_memory(device) -> int | None:
    """Bytes of memory free for new tensors on ``device`` (a ``torch.device``), or ``None`` when it cannot
    be told (psutil's available memory on the CPU, else the free physical pages; CUDA's free memory)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        import psutil

        return psutil.virtual_memory().available
    except ImportError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
