"""Data-parallel training under ``torchrun``: :class:`DistributedContext` (see :mod:`common.parallel`)."""

import os
from typing import TYPE_CHECKING

from common import threads as thread_budgets
from common.errors import ConfigurationError

if TYPE_CHECKING:
    import torch

__all__ = ["DistributedContext"]


def _environment_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError as error:
        raise ConfigurationError(
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
            raise ConfigurationError(f"DistributedContext: world_size must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise ConfigurationError(f"DistributedContext: rank must be in [0, {world_size}), got {rank}")
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
            raise ConfigurationError(
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
