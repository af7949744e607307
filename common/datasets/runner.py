"""The dataset runner: every sample of a recipe through :func:`common.parallel.run_jobs` into one HDF5 file.

One process (this one) writes the file with :class:`common.io.H5Writer`, appending each
sample as soon as it finishes; workers only compute. A run killed at any moment and
started again reads which sample ids the file already holds (finished or failed), skips
them and runs the rest, so the samples that were in flight are redone and nothing is
duplicated or lost.

File layout (columnar, first axis the sample, in completion order):

* root table: ``sample_id`` (int64), ``sample_seed`` (int64, the generator's seed), one
  dataset per parameter, one per key the generator returns;
* ``failed`` table: ``sample_id``, ``sample_seed``, ``parameters`` (JSON), ``error_type``,
  ``message``, ``traceback`` for every sample that raised or returned bad data;
* ``runs`` table: one ``start`` and one ``finish`` record per invocation (UTC time, host,
  process id, package version, command, workers or scheduler, counts);
* root attributes: :func:`common.io.provenance` (package version, git commit, host,
  creation time, command, the recipe as JSON, the sampling seed) plus ``recipe`` (the
  TOML text), ``recipe_source``, ``recipe_fingerprint``, ``generator``, ``n_samples``.
"""

import dataclasses
import datetime
import functools
import json
import os
import pathlib
import socket
import sys
import time
from typing import Any

import h5py
import numpy as np

from common import config, io, parallel
from common.datasets.recipe import RESERVED_COLUMNS, Recipe, load_recipe, resolve_function, sample_parameters
from common.datasets.recipe import sample_seed as derive_seed

__all__ = ["generate", "GenerationSummary", "read_dataset"]


@dataclasses.dataclass
class GenerationSummary:
    """What one :func:`generate` call did.

    Attributes:
        path: the HDF5 file.
        requested: samples this call was asked to cover (the recipe's, or ``limit``).
        already_done: of those, samples the file held before this call (finished or failed).
        succeeded: samples finished by this call.
        failed: samples that failed in this call.
        seconds: wall time of this call (s).
        failures: ``(sample_id, "ErrorType: message")`` of this call's failures.
    """

    path: pathlib.Path
    requested: int
    already_done: int
    succeeded: int
    failed: int
    seconds: float
    failures: list[tuple[int, str]] = dataclasses.field(default_factory=list)

    @property
    def samples_per_second(self) -> float:
        """Samples (finished or failed) handled per second by this call."""
        return (self.succeeded + self.failed) / self.seconds if self.seconds > 0 else float("nan")

    def __str__(self) -> str:
        lines = [
            f"{self.path}: {self.succeeded} samples written, {self.failed} failed, "
            f"{self.already_done} already done, of {self.requested} "
            f"({self.seconds:.1f} s, {self.samples_per_second:.2f} samples/s)"
        ]
        lines += [f"  sample {sample_id} failed: {error}" for sample_id, error in self.failures[:5]]
        if len(self.failures) > 5:
            lines.append(f"  ... and {len(self.failures) - 5} more (see the 'failed' table)")
        return "\n".join(lines)


def _run_sample(function_reference: str, options: dict, labels: list[str] | None, job: tuple) -> dict:
    """Worker side: one generator call, its result checked and made picklable as numpy arrays."""
    _, parameters, seed = job
    result = resolve_function(function_reference)(dict(parameters), seed, **options)
    if not isinstance(result, dict) or not result or not all(isinstance(key, str) for key in result):
        raise TypeError(
            f"{function_reference} must return a non-empty dict of name -> array, got {type(result).__name__}"
        )
    # a generator may echo a parameter back (stored once, as the parameter's column), but not change it
    echoed = {
        key
        for key in set(result) & set(parameters)
        if np.array_equal(_to_numpy(result[key]), parameters[key])
    }
    clashes = sorted((set(result) - echoed) & (set(parameters) | set(RESERVED_COLUMNS)))
    if clashes:
        raise ValueError(
            f"{function_reference} returned keys {clashes}, which are parameters (with other values) "
            f"or reserved columns {RESERVED_COLUMNS}"
        )
    result = {key: value for key, value in result.items() if key not in echoed}
    if labels is not None and sorted(result) != sorted(set(labels) - echoed):
        raise ValueError(
            f"{function_reference} returned keys {sorted(result)}; the recipe's labels are {sorted(labels)}"
        )
    return {key: _to_numpy(value) for key, value in result.items()}


def _to_numpy(value: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return value


def _recorded_ids(path: pathlib.Path, fingerprint: str) -> set[int]:
    """Sample ids the file holds (finished or failed); checks it was made by the same recipe."""
    if not path.exists():
        return set()
    with h5py.File(path, "r", swmr=True) as file:
        stored = file.attrs.get("recipe_fingerprint")
        if stored is None:
            raise ValueError(
                f"{path} exists but was not written by common.datasets; choose another output path"
            )
        if stored != fingerprint:
            raise ValueError(
                f"{path} was generated from a different recipe (generator, parameters or sampling "
                f"differ); resuming would mix datasets. Choose another output path or delete the file"
            )
        tables = [name for name, group in (("/", file), ("failed", file.get("failed"))) if _is_table(group)]
    return {
        int(sample_id)
        for name in tables
        for sample_id in io.read_table(path, name, ["sample_id"])["sample_id"]
    }


def _is_table(group: Any) -> bool:
    return isinstance(group, h5py.Group) and io.COMMITTED in group


def _executor_name(workers: int | None, scheduler: Any) -> str:
    if scheduler is not None:
        return f"dask {scheduler if isinstance(scheduler, str) else scheduler.scheduler.address}"
    if workers == 0:
        return "this process"
    return f"{workers or os.cpu_count()} local workers"


def _run_record(event: str, workers: Any, scheduler: Any, succeeded: int, failed: int) -> dict[str, Any]:
    import common

    return {
        "event": event,
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "version": common.__version__,
        "command": " ".join(sys.argv),
        "executor": _executor_name(workers, scheduler),
        "succeeded": succeeded,
        "failed": failed,
    }


def generate(
    recipe: Recipe | str | os.PathLike,
    output: str | os.PathLike | None = None,
    workers: int | None = None,
    scheduler: Any = None,
    limit: int | None = None,
    progress: bool = True,
) -> GenerationSummary:
    """Generate (or continue generating) the dataset of a recipe.

    Samples run through :func:`common.parallel.run_jobs` (a local process pool, or a
    Dask cluster given ``scheduler``) and are appended to the HDF5 file as they finish.
    Sample ``i`` gets the parameters ``sample_parameters(recipe)[i]`` and the seed
    ``sample_seed(recipe.sampling.seed, i)``, whatever runs it and in whatever order, so
    a resumed, local or distributed run gives the same dataset (rows in completion order;
    sort by ``sample_id``, or use :func:`read_dataset`). A sample that raises is recorded
    in the ``failed`` table and the run goes on. Calling ``generate`` on a finished file
    does nothing; on a partial one it runs the missing samples.

    Args:
        recipe: a :class:`Recipe` or the path of a recipe TOML file (validated first).
        output: the HDF5 file; default the recipe's ``[output] path``.
        workers: local processes (default: all cores); ``0`` runs samples in this process.
        scheduler: a Dask scheduler address (``"tcp://host:8786"``) or ``distributed.Client``.
        limit: cover only the samples with id ``< limit`` (a first slice of the recipe;
            a later call with a larger limit, or none, continues).
        progress: show a tqdm progress bar (rate and ETA) on stderr.

    Returns:
        A :class:`GenerationSummary` (printable).

    Raises:
        common.config.ConfigError: for an invalid recipe file, before any sample runs.
        ValueError: if ``output`` exists but was made from a different recipe, or for a
            bad ``limit``.
        RuntimeError: if another process is writing ``output``.
    """
    from tqdm.auto import tqdm

    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"generate: limit must be a positive int (number of samples), got {limit!r}")
    path = pathlib.Path(output if output is not None else recipe.output.path)
    fingerprint = recipe.fingerprint()
    parameters = sample_parameters(recipe)
    requested = len(parameters) if limit is None else min(limit, len(parameters))
    done = {sample_id for sample_id in _recorded_ids(path, fingerprint) if sample_id < requested}
    jobs = [
        (sample_id, parameters[sample_id], derive_seed(recipe.sampling.seed, sample_id))
        for sample_id in range(requested)
        if sample_id not in done
    ]
    attributes = {
        **io.provenance(recipe.to_dict(), seed=recipe.sampling.seed),
        "recipe": recipe.text or config.dumps(recipe.to_dict()),
        "recipe_source": recipe.source,
        "recipe_fingerprint": fingerprint,
        "generator": recipe.generator.function,
        "n_samples": recipe.n_samples,
    }
    run_function = functools.partial(
        _run_sample, recipe.generator.function, recipe.generator.options, recipe.generator.labels
    )
    summary = GenerationSummary(path, requested, len(done), 0, 0, 0.0)
    start = time.perf_counter()
    with io.H5Writer(path, attributes=attributes) as writer:
        writer.append(_run_record("start", workers, scheduler, 0, 0), group="runs")
        bar = tqdm(
            total=requested,
            initial=len(done),
            desc=recipe.name or path.stem,
            unit="sample",
            disable=not progress,
            dynamic_ncols=True,
        )
        try:
            for (sample_id, sample_parameters_, seed), result in parallel.run_jobs(
                run_function, jobs, workers=workers, scheduler=scheduler
            ):
                if not isinstance(result, parallel.JobFailure):
                    record = {"sample_id": sample_id, "sample_seed": seed, **sample_parameters_, **result}
                    try:
                        writer.append(record)
                        summary.succeeded += 1
                    except (ValueError, TypeError) as error:  # keys, shapes or dtypes unlike earlier samples
                        result = parallel.JobFailure(type(error).__name__, str(error), "")
                if isinstance(result, parallel.JobFailure):
                    failure = {
                        "sample_id": sample_id,
                        "sample_seed": seed,
                        "parameters": json.dumps(sample_parameters_),
                        "error_type": result.error_type,
                        "message": result.message,
                        "traceback": result.traceback,
                    }
                    writer.append(failure, group="failed")
                    summary.failed += 1
                    summary.failures.append((sample_id, str(result)))
                    bar.set_postfix(failed=summary.failed, refresh=False)
                bar.update()
        finally:
            bar.close()
            summary.seconds = time.perf_counter() - start
        writer.append(
            _run_record("finish", workers, scheduler, summary.succeeded, summary.failed), group="runs"
        )
    return summary


def read_dataset(path: str | os.PathLike, group: str = "/") -> dict[str, np.ndarray]:
    """Read a generated dataset's table sorted by ``sample_id`` (column -> array, first axis the sample).

    Args:
        path: the HDF5 file.
        group: ``"/"`` for the samples, ``"failed"`` for the failures, ``"runs"`` for the run log
            (which has no ``sample_id`` and stays in order).
    """
    table = io.read_table(path, group)
    if "sample_id" not in table:
        return table
    order = np.argsort(table["sample_id"], kind="stable")
    return {key: column[order] for key, column in table.items()}
