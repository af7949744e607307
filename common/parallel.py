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
    ...     print(job, result)
"""

import collections
import concurrent.futures
import contextlib
import ctypes
import dataclasses
import functools
import multiprocessing
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from common import threads as thread_budgets
from common.errors import ConfigurationError, MindScienceError

if TYPE_CHECKING:
    import torch

__all__ = ["DistributedContext", "InfrastructureError", "JobFailure", "JobTimeoutError", "run_jobs"]


# ---------------------------------------------------------------------------------------------
# data-parallel training under torchrun


def _environment_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError as error:
        raise ValueError(
            f"environment variable {name}={text!r} must be an integer (torchrun sets it)"
        ) from error


class DistributedContext:
    """The process group of a data-parallel run, or a single process when not launched by torchrun.

    Make it with :meth:`from_environment` (reads ``RANK``, ``WORLD_SIZE`` and
    ``LOCAL_RANK``, which ``torchrun`` sets). With ``world_size > 1`` it initialises
    ``torch.distributed`` (backend gloo on CPU, nccl on CUDA), :meth:`wrap` returns a
    ``DistributedDataParallel`` model (gradients averaged over processes at each
    backward pass) and :meth:`sampler` a ``DistributedSampler`` giving each process a
    disjoint shard of the dataset. With ``world_size == 1`` (a plain ``python`` run)
    nothing is initialised and the same calls return the model itself and an
    ordinary sampler, so one script serves both.

    Equivalence with one process: with a per-process batch size ``B / world_size``
    and mean losses, the averaged gradient equals that of a single process on the
    global batch of size ``B`` (up to summation order), so training agrees in
    expectation, and exactly when the shards are the same samples.

    Attributes:
        rank: this process's index, ``0 <= rank < world_size``.
        world_size: number of processes.
        local_rank: index of this process on its machine (selects its GPU).
        device: ``cuda:<local_rank>`` when CUDA is used, else ``cpu``.
        backend: ``"gloo"``, ``"nccl"`` or ``None`` (single process).
        threads: this process's thread budget (:mod:`common.threads`), set by
            :meth:`from_environment`; None if the context was made directly.

    Example:
        >>> ctx = DistributedContext.from_environment()   # single process outside torchrun
        >>> ctx.world_size, ctx.is_main
        (1, True)
        >>> ctx.close()
    """

    def __init__(
        self, rank: int, world_size: int, local_rank: int, device: "torch.device", backend: str | None
    ):
        if world_size < 1:
            raise ValueError(f"DistributedContext: world_size must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"DistributedContext: rank must be in [0, {world_size}), got {rank}")
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.device = device
        self.backend = backend
        self.threads: int | None = None
        self._owns_group = False

    @classmethod
    def from_environment(
        cls,
        device: "str | torch.device | None" = None,
        backend: str | None = None,
        threads: int | None = None,
    ):
        """Join the process group described by torchrun's environment variables (or run alone).

        Sets this process's thread budget (:func:`common.threads.set_thread_budget`):
        ``threads``, by default ``common.threads.default_threads(LOCAL_WORLD_SIZE)``, so
        that the processes ``torchrun`` starts on one machine do not oversubscribe its cores.

        Args:
            device: ``"cpu"``, ``"cuda"`` or a device; default CUDA when available
                (``cuda:<LOCAL_RANK>``) else CPU.
            backend: the ``torch.distributed`` backend; default ``"nccl"`` on CUDA,
                ``"gloo"`` on CPU.
            threads: threads of this process (None: the default above).

        Returns:
            A context; ``world_size == 1`` when ``WORLD_SIZE`` is unset or 1.

        Raises:
            ValueError: if RANK/WORLD_SIZE/LOCAL_RANK are not integers, or
                ``WORLD_SIZE > 1`` but ``MASTER_ADDR``/``MASTER_PORT`` are missing.
        """
        import torch
        import torch.distributed as dist

        world_size = _environment_int("WORLD_SIZE", 1)
        rank = _environment_int("RANK", 0)
        local_rank = _environment_int("LOCAL_RANK", 0)
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", local_rank)
        threads = thread_budgets.default_threads() if threads is None else threads
        thread_budgets.set_thread_budget(threads)
        if world_size == 1:
            context = cls(0, 1, 0, device, None)
            context.threads = threads
            return context
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
        if missing:
            raise ValueError(
                f"DistributedContext: WORLD_SIZE={world_size} but {missing} unset; launch with "
                "torchrun (python -m torch.distributed.run), which sets them"
            )
        backend = backend or ("nccl" if device.type == "cuda" else "gloo")
        context = cls(rank, world_size, local_rank, device, backend)
        context.threads = threads
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
            context._owns_group = True
        return context

    @property
    def is_main(self) -> bool:
        """True on rank 0: the process that should print, log and save checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when running with more than one process."""
        return self.world_size > 1

    def wrap(self, model: "torch.nn.Module") -> "torch.nn.Module":
        """``DistributedDataParallel(model)`` with several processes, else ``model`` unchanged.

        The model should already be on :attr:`device`. Its parameters are broadcast
        from rank 0, so all processes start from the same weights.
        """
        if not self.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)

    def sampler(self, dataset, shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        """A sampler giving this process its shard of ``dataset`` (pass it to a ``DataLoader``).

        Args:
            dataset: a map-style dataset (``len`` and integer indexing).
            shuffle: reshuffle every epoch (call :meth:`set_epoch` each epoch).
            seed: the shuffling seed; the same on all processes, so the shards are disjoint.
            drop_last: drop the tail so that all shards have equal length (otherwise a
                ``DistributedSampler`` pads the shards by repeating samples).

        Returns:
            A ``DistributedSampler`` with several processes; otherwise a
            ``RandomSampler`` (seeded ``torch.Generator``) or ``SequentialSampler``.
        """
        import torch
        import torch.utils.data as data

        if self.distributed:
            return data.DistributedSampler(
                dataset,
                num_replicas=self.world_size,
                rank=self.rank,
                shuffle=shuffle,
                seed=seed,
                drop_last=drop_last,
            )
        if not shuffle:
            return data.SequentialSampler(dataset)
        return data.RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))

    @staticmethod
    def set_epoch(sampler, epoch: int) -> None:
        """Tell a ``DistributedSampler`` the epoch (new shuffle each epoch); a no-op for other samplers."""
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)

    def all_reduce_mean(self, tensor: "torch.Tensor") -> "torch.Tensor":
        """The mean of ``tensor`` over all processes (a new tensor; ``tensor`` itself when alone).

        Args:
            tensor: any shape, same shape on every process; floating point.
        """
        if not self.distributed:
            return tensor
        import torch.distributed as dist

        reduced = tensor.detach().clone().to(self.device)
        dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
        return (reduced / self.world_size).to(tensor.device)

    def barrier(self) -> None:
        """Wait until every process reaches this point (no-op when alone)."""
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        """Leave the process group if this context created it (idempotent)."""
        if self._owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self._owns_group = False

    def __enter__(self) -> "DistributedContext":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"DistributedContext(rank={self.rank}, world_size={self.world_size}, "
            f"device={str(self.device)!r}, backend={self.backend!r})"
        )


# ---------------------------------------------------------------------------------------------
# independent jobs on a process pool or a Dask cluster


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


def _worker_name() -> str:
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
def _time_limit(seconds: float | None) -> Iterator[None]:
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


def _call(fn: Callable[[Any], Any], job: Any, timeout: float | None = None, retries: int = 0) -> Any:
    """Run one job in a worker, up to ``1 + retries`` times, each within ``timeout`` seconds.

    The last exception becomes a :class:`JobFailure` (with its traceback, host and worker);
    an :class:`InfrastructureError` is not retried here (see :func:`run_jobs`).
    """
    for attempt in range(1, retries + 2):
        try:
            with _time_limit(timeout):
                return fn(job)
        except Exception as error:
            infrastructure = isinstance(error, InfrastructureError)
            if infrastructure or attempt > retries:
                return JobFailure(
                    type(error).__name__,
                    str(error),
                    traceback.format_exc(),
                    socket.gethostname(),
                    _worker_name(),
                    attempt,
                    infrastructure,
                )
    raise AssertionError("unreachable")  # the last attempt returns


def _lost_worker(error: BaseException, host: str = "", worker: str = "") -> JobFailure:
    return JobFailure(
        type(error).__name__,
        f"the worker process running this job died ({error}); it is not known whether the job or the "
        "machine (out of memory, a kill) was at fault",
        "".join(traceback.format_exception(error)),
        host,
        worker,
        infrastructure=True,
    )


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


_DASK_BUDGET: list[int] = []  # the thread budget already set in this Dask worker process


def _call_on_dask(
    call: Callable[[Any], Any], threads: int | None, host_threads: dict[str, int], job: Any
) -> Any:
    """Dask task: set this worker process's thread budget (once), then run the job.

    ``threads`` given: that budget. Otherwise the cores of this host divided by the Dask
    worker threads on this host (``host_threads``, by worker address), at least 1.
    """
    if threads is None:
        address = _worker_name()
        threads = max(1, thread_budgets.available_cores() // host_threads.get(address, 1))
    if _DASK_BUDGET != [threads]:
        thread_budgets._apply(threads)
        _DASK_BUDGET[:] = [threads]
    return call(job)


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
            :class:`JobTimeoutError` (None: no limit). See :func:`_time_limit` for how.
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
        raise TypeError(f"run_jobs: fn must be callable, got {type(fn).__name__}")
    if workers is not None:
        non_negative_int(workers, "run_jobs: workers (0 = in this process)")
    if max_in_flight is not None:
        positive_int(max_in_flight, "run_jobs: max_in_flight")
    if threads is not None:
        positive_int(threads, "run_jobs: threads (per worker)")
    non_negative_int(retries, "run_jobs: retries")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ConfigurationError(f"run_jobs: timeout must be a number of seconds > 0, got {timeout!r}")
    call = functools.partial(_call, fn, timeout=timeout, retries=retries)
    if scheduler is not None:
        yield from _run_dask(call, jobs, scheduler, max_in_flight, threads, probe)
    elif workers == 0:
        with thread_budgets.thread_budget(threads) if threads else contextlib.nullcontext():
            for job in jobs:
                yield job, call(job)
    else:
        workers = workers or os.cpu_count() or 1
        threads = threads or thread_budgets.default_threads(workers)
        yield from _run_pool(call, jobs, workers, max_in_flight, threads, probe)


_NO_MORE_JOBS = object()


def _run_pool(
    call: Callable, jobs: Iterable, workers: int, max_in_flight: int | None, threads: int, probe: bool
) -> Iterator[tuple]:
    """Local process pool. Workers start by forkserver: a clean process, not a fork of a threaded parent.

    A worker that dies (segfault, OOM killer, ``os._exit``) breaks the whole pool and every job
    in it. The pool is then restarted and those jobs become suspects, rerun one at a time: a job
    that kills its worker while running alone fails (as an infrastructure failure); the others finish.
    """
    from concurrent.futures.process import BrokenProcessPool

    limit = max_in_flight or 2 * workers
    context = multiprocessing.get_context("forkserver")

    run_alive, alive_signal = context.Pipe(duplex=False)  # workers exit when alive_signal closes

    def new_pool() -> concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_start_worker, initargs=(threads, run_alive)
        )

    pending_jobs = iter(jobs)
    suspects: collections.deque = collections.deque()
    probing = probe
    pool = new_pool()
    in_flight: dict[concurrent.futures.Future, tuple[Any, bool]] = {}  # future -> (job, ran alone)
    try:
        while True:
            if suspects:
                if not in_flight:
                    job = suspects.popleft()
                    in_flight[pool.submit(call, job)] = (job, True)
            else:
                room = min(limit, workers) if probing else limit
                while len(in_flight) < room:
                    job = next(pending_jobs, _NO_MORE_JOBS)
                    if job is _NO_MORE_JOBS:
                        break
                    in_flight[pool.submit(call, job)] = (job, False)
            if not in_flight:
                return
            done, _ = concurrent.futures.wait(in_flight, return_when=concurrent.futures.FIRST_COMPLETED)
            broken = False
            for future in done:
                job, alone = in_flight.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool as error:
                    broken = True
                    if not alone:
                        suspects.append(job)
                        continue
                    result = _lost_worker(error, socket.gethostname(), "a local pool worker")
                probing = probing and isinstance(result, JobFailure)
                yield job, result
            if broken:  # the pool is unusable: restart it, rerun what it held
                suspects.extend(job for job, _ in in_flight.values())
                in_flight.clear()
                pool.shutdown(wait=False, cancel_futures=True)
                pool = new_pool()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        alive_signal.close()
        run_alive.close()


def _run_dask(
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
    try:
        import distributed
    except ImportError as error:
        raise ImportError(
            "run_jobs(scheduler=...) needs Dask distributed: pip install 'mindscience-torch[dask]'"
        ) from error
    own_client = isinstance(scheduler, str)
    if own_client:
        client = distributed.Client(scheduler, set_as_default=False)
    elif isinstance(scheduler, distributed.Client):
        client = scheduler
    else:
        raise TypeError(
            f"run_jobs: scheduler must be an address like 'tcp://host:8786' or a distributed.Client, "
            f"got {type(scheduler).__name__}"
        )
    try:
        workers_info = client.scheduler_info()["workers"]
        threads_by_host = collections.Counter()
        for info in workers_info.values():
            threads_by_host[info["host"]] += info["nthreads"]
        host_threads = {address: threads_by_host[info["host"]] for address, info in workers_info.items()}
        task = functools.partial(_call_on_dask, call, threads, host_threads)
        total_threads = sum(info["nthreads"] for info in workers_info.values()) or 1
        limit = max_in_flight or 2 * total_threads
        pending_jobs = iter(jobs)
        in_flight: dict[str, Any] = {}
        excluded: set[str] = set()
        completed = distributed.as_completed(loop=client.loop)
        probing = probe

        def allowed_workers() -> list[str]:
            return sorted(set(client.scheduler_info()["workers"]) - excluded)

        unrunnable: list[Any] = []  # jobs left when every worker had an infrastructure failure
        last_infrastructure: list[JobFailure] = []

        def submit(job: Any) -> None:
            placement = {}
            if excluded:
                allowed = allowed_workers()
                if not allowed:
                    unrunnable.append(job)
                    return
                placement = {"workers": allowed, "allow_other_workers": False}
            future = client.submit(task, job, pure=False, **placement)
            in_flight[future.key] = job
            completed.add(future)

        def submit_more() -> None:
            room = min(limit, total_threads) if probing else limit
            while len(in_flight) < room:
                job = next(pending_jobs, _NO_MORE_JOBS)
                if job is _NO_MORE_JOBS:
                    return
                submit(job)

        def nowhere(job: Any) -> tuple[Any, JobFailure]:
            failure = last_infrastructure[-1]
            message = f"no worker of the cluster can run it (the last one to try said: {failure.message})"
            return job, dataclasses.replace(failure, message=message)

        submit_more()
        for future in completed:
            job = in_flight.pop(future.key)
            try:
                result = future.result()
            except Exception as error:  # the worker died (KilledWorker) or the result was lost
                result = _lost_worker(error)
            future.release()
            if isinstance(result, JobFailure) and result.infrastructure and result.worker:
                excluded.add(result.worker)
                last_infrastructure.append(result)
                submit(job)  # rerun elsewhere, if a worker is left
                if not unrunnable:
                    continue
                job, result = nowhere(unrunnable.pop())
            probing = probing and isinstance(result, JobFailure)
            yield job, result
            submit_more()
            while unrunnable:
                yield nowhere(unrunnable.pop())
    finally:
        if own_client:
            client.close()
