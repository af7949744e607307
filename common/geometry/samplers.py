"""Unit-cube samplers: uniform (torch), scrambled Sobol and Latin hypercube (``scipy.stats.qmc``).

Every shape draws its random points by mapping points of the unit cube ``[0, 1)^k`` onto
itself (interior: the bounding box; boundary: a measure-preserving parametrisation of the
surface). :class:`UnitSampler` is that source of unit points. Successive calls continue
the sequence: a Sobol engine keeps its position, a Latin hypercube draws a fresh design of
the requested size, the uniform sampler advances its seeded ``torch.Generator``.
"""

from __future__ import annotations

import math
import numbers
import warnings

import torch

from common.errors import ConfigurationError

SAMPLERS = ("uniform", "sobol", "lhs")


def check_sampler(sampler: str) -> str:
    """Return ``sampler`` if it names a known sampler, else raise ``ValueError``."""
    if sampler not in SAMPLERS:
        raise ConfigurationError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    return sampler


def check_count(n, name: str = "n") -> int:
    """Return ``n`` as an int if it is a positive integer, else raise ``ValueError``."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n <= 0:
        raise ConfigurationError(f"{name} must be a positive integer (number of points), got {n!r}")
    return int(n)


def resolve_dtype(dtype: torch.dtype | None) -> torch.dtype:
    """``dtype`` or the torch default dtype; raise ``ValueError`` unless it is a floating dtype."""
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ConfigurationError(f"dtype must be a floating torch dtype (e.g. torch.float32), got {dtype!r}")
    return dtype


class UnitSampler:
    """A seeded source of points in the unit cube ``[0, 1)^dim``.

    Args:
        sampler: ``"uniform"`` (i.i.d., ``torch.rand``), ``"sobol"`` (scrambled Sobol sequence,
            ``scipy.stats.qmc.Sobol``) or ``"lhs"`` (Latin hypercube, ``scipy.stats.qmc.LatinHypercube``;
            every call of size ``m`` is a full Latin hypercube design of ``m`` points).
        dim: dimension ``k >= 1`` of the unit cube.
        seed: integer seed; ``None`` draws one from torch's global generator, so that
            ``torch.manual_seed`` makes the result reproducible.
        dtype: floating dtype of the returned points (default: torch's default dtype).
        device: device of the returned points (default: CPU).

    Calling the sampler with ``m`` returns an ``(m, dim)`` tensor. It also owns a seeded
    ``torch.Generator`` (:attr:`generator`) for any auxiliary randomness.
    """

    def __init__(self, sampler: str, dim: int, seed: int | None = None,
                 dtype: torch.dtype | None = None, device: torch.device | str | None = None):
        self.sampler = check_sampler(sampler)
        self.dim = check_count(dim, "dim")
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()).item())
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ConfigurationError(f"seed must be a non-negative integer or None, got {seed!r}")
        seed = int(seed)
        self.dtype = resolve_dtype(dtype)
        self.device = torch.device("cpu") if device is None else torch.device(device)
        self.generator = torch.Generator().manual_seed(seed)
        self._engine = None
        if sampler != "uniform":
            from scipy.stats import qmc

            engine_class = qmc.Sobol if sampler == "sobol" else qmc.LatinHypercube
            try:
                self._engine = engine_class(dim, scramble=True, rng=seed)
            except TypeError:  # scipy < 1.15 names the argument ``seed``
                self._engine = engine_class(dim, scramble=True, seed=seed)

    def __call__(self, m: int) -> torch.Tensor:
        """Draw ``m`` points: an ``(m, dim)`` tensor with entries in ``[0, 1)``."""
        check_count(m, "m")
        if self._engine is None:
            unit = torch.rand(m, self.dim, generator=self.generator, dtype=self.dtype)
        else:
            with warnings.catch_warnings():
                # Sobol warns when m is not a power of two; a prefix of the sequence is still
                # a low-discrepancy set, which is all we use.
                warnings.simplefilter("ignore", UserWarning)
                unit = torch.as_tensor(self._engine.random(m), dtype=self.dtype)
            # rounding float64 -> float32 may produce exactly 1.0
            unit = unit.clamp_(max=1.0 - torch.finfo(self.dtype).eps)
        return unit.to(self.device)


def rejection_sample(n: int, draw, candidates, acceptance: float, what: str):
    """Draw candidates in batches and keep the accepted ones until ``n`` are collected.

    Args:
        n: number of points wanted.
        draw: ``m -> (m, k)`` unit points (a :class:`UnitSampler`).
        candidates: ``unit -> (tensors, keep)``: maps unit points to a tuple of ``(m, ...)``
            tensors and an ``(m,)`` bool tensor marking the accepted rows.
        acceptance: a priori accepted fraction in ``(0, 1]``; ``1`` means one batch of
            exactly ``n`` (so that Sobol/LHS designs are used whole).
        what: description of the shape, for the error raised when nothing is accepted.

    Returns:
        the tuple of tensors, each with exactly ``n`` rows: the first ``n`` accepted
        candidates in the order they were drawn (unbiased: the stopping rule depends only
        on the count).
    """
    chunks, collected, drawn, accepted = [], 0, 0, 0
    while collected < n:
        need = n - collected
        if acceptance >= 1.0:
            batch = need
        else:
            batch = min(math.ceil(1.2 * need / max(acceptance, 1e-3)) + 16, max(4 * need, 2**20))
        tensors, keep = candidates(draw(batch))
        kept = int(keep.sum())
        chunks.append(tuple(t[keep] for t in tensors))
        collected += kept
        drawn += batch
        accepted += kept
        if accepted == 0 and drawn >= 2**21:
            raise ConfigurationError(
                f"{what}: none of {drawn} candidate points was accepted; is the shape empty?")
        acceptance = max(accepted / drawn, 1e-3) if accepted else acceptance / 8
        acceptance = min(acceptance, 0.999)  # after the first batch, always oversample a little
    return tuple(torch.cat(parts)[:n] for parts in zip(*chunks))
