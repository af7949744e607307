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
import dataclasses
import multiprocessing
import os
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["DistributedContext", "JobFailure", "run_jobs"]


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
        self._owns_group = False

    @classmethod
    def from_environment(cls, device: "str | torch.device | None" = None, backend: str | None = None):
        """Join the process group described by torchrun's environment variables (or run alone).

        Args:
            device: ``"cpu"``, ``"cuda"`` or a device; default CUDA when available
                (``cuda:<LOCAL_RANK>``) else CPU.
            backend: the ``torch.distributed`` backend; default ``"nccl"`` on CUDA,
                ``"gloo"`` on CPU.

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
        if world_size == 1:
            return cls(0, 1, 0, device, None)
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
        if missing:
            raise ValueError(
                f"DistributedContext: WORLD_SIZE={world_size} but {missing} unset; launch with "
                "torchrun (python -m torch.distributed.run), which sets them"
            )
        backend = backend or ("nccl" if device.type == "cuda" else "gloo")
        context = cls(rank, world_size, local_rank, device, backend)
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


@dataclasses.dataclass(frozen=True)
class JobFailure:
    """What :func:`run_jobs` yields in place of a result when a job raised (or its worker died).

    Attributes:
        error_type: the exception's class name, e.g. ``"ValueError"``.
        message: ``str(exception)``.
        traceback: the formatted traceback, from the worker.
    """

    error_type: str
    message: str
    traceback: str

    def __str__(self) -> str:
        return f"{self.error_type}: {self.message}"


def _call(fn: Callable[[Any], Any], job: Any) -> Any:
    """Run one job in a worker; an exception becomes a :class:`JobFailure` (keeps the traceback)."""
    try:
        return fn(job)
    except Exception as error:
        return JobFailure(type(error).__name__, str(error), traceback.format_exc())


def _lost_worker(error: BaseException) -> JobFailure:
    return JobFailure(
        type(error).__name__,
        f"the worker process running this job died ({error})",
        "".join(traceback.format_exception(error)),
    )


def run_jobs(
    fn: Callable[[Any], Any],
    jobs: Iterable[Any],
    workers: int | None = None,
    scheduler: "str | Any | None" = None,
    max_in_flight: int | None = None,
) -> Iterator[tuple[Any, Any]]:
    """Run ``fn(job)`` for every job in parallel and yield ``(job, result)`` as jobs complete.

    A job that raises yields a :class:`JobFailure` as its result and the others go on;
    so does a job whose worker process died (the pool is then restarted and the jobs it
    held are rerun). Results come
    in completion order, not job order. Jobs are submitted lazily, at most
    ``max_in_flight`` at a time, so ``jobs`` may be a long generator.

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

    Yields:
        ``(job, result)``; ``result`` is ``fn(job)`` or a :class:`JobFailure`.

    Example:
        >>> import math
        >>> sorted(result for _, result in run_jobs(math.sqrt, [1.0, 4.0, 9.0], workers=0))
        [1.0, 2.0, 3.0]
    """
    if not callable(fn):
        raise TypeError(f"run_jobs: fn must be callable, got {type(fn).__name__}")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 0):
        raise ValueError(f"run_jobs: workers must be an int >= 0 (0 = in this process), got {workers!r}")
    if max_in_flight is not None and (not isinstance(max_in_flight, int) or max_in_flight < 1):
        raise ValueError(f"run_jobs: max_in_flight must be an int >= 1, got {max_in_flight!r}")
    if scheduler is not None:
        yield from _run_dask(fn, jobs, scheduler, max_in_flight)
    elif workers == 0:
        for job in jobs:
            yield job, _call(fn, job)
    else:
        yield from _run_pool(fn, jobs, workers or os.cpu_count() or 1, max_in_flight)


def _run_pool(fn: Callable, jobs: Iterable, workers: int, max_in_flight: int | None) -> Iterator[tuple]:
    """Local process pool. Workers start by forkserver: a clean process, not a fork of a threaded parent.

    A worker that dies (segfault, OOM killer, ``os._exit``) breaks the whole pool and every job
    in it. The pool is then restarted and those jobs become suspects, rerun one at a time: a job
    that kills its worker while running alone is the culprit and fails; the others finish.
    """
    from concurrent.futures.process import BrokenProcessPool

    limit = max_in_flight or 2 * workers
    context = multiprocessing.get_context("forkserver")
    pending_jobs = iter(jobs)
    suspects: collections.deque = collections.deque()
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context)
    in_flight: dict[concurrent.futures.Future, tuple[Any, bool]] = {}  # future -> (job, ran alone)
    try:
        while True:
            if suspects:
                if not in_flight:
                    job = suspects.popleft()
                    in_flight[pool.submit(_call, fn, job)] = (job, True)
            else:
                for job in pending_jobs:
                    in_flight[pool.submit(_call, fn, job)] = (job, False)
                    if len(in_flight) >= limit:
                        break
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
                    result = _lost_worker(error)
                yield job, result
            if broken:  # the pool is unusable: restart it, rerun what it held
                suspects.extend(job for job, _ in in_flight.values())
                in_flight.clear()
                pool.shutdown(wait=False, cancel_futures=True)
                pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _run_dask(fn: Callable, jobs: Iterable, scheduler: Any, max_in_flight: int | None) -> Iterator[tuple]:
    """Jobs on a Dask distributed cluster, submitted lazily through ``distributed.as_completed``."""
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
        threads = sum(client.nthreads().values()) or 1
        limit = max_in_flight or 2 * threads
        pending_jobs = iter(jobs)
        in_flight: dict[str, Any] = {}
        completed = distributed.as_completed(loop=client.loop)

        def submit_more() -> None:
            for job in pending_jobs:
                future = client.submit(_call, fn, job, pure=False)
                in_flight[future.key] = job
                completed.add(future)
                if len(in_flight) >= limit:
                    return

        submit_more()
        for future in completed:
            job = in_flight.pop(future.key)
            try:
                result = future.result()
            except Exception as error:  # the worker died (KilledWorker) or the result was lost
                result = _lost_worker(error)
            future.release()
            yield job, result
            submit_more()
    finally:
        if own_client:
            client.close()
