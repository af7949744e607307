"""The dataset runner: every sample of a recipe through :func:`common.parallel.run_jobs` into one HDF5 file.

One process (this one) writes the file with :class:`common.io.H5Writer`, appending each
sample as soon as it finishes; workers only compute. A run killed at any moment and
started again reads which sample ids the file already holds (finished or failed), skips
them and runs the rest, so the samples that were in flight are redone and nothing is
duplicated or lost. The ids are trusted only once this run holds the writer's lock: two
runs of one recipe at the same time never both write a sample (the second one is refused,
naming the file).

Failures are of two kinds. A sample that raises (after the recipe's ``retries``), runs
past its ``timeout``, or returns NaN or infinity (a :class:`NonFiniteLabelError` naming the
keys and counts, unless the recipe's ``[generator]`` says ``allow_nonfinite = true``), is
recorded in the ``failed`` table with the host and worker that ran it;
``generate(..., retry_failed=True)`` (``--retry-failed``) runs such samples again. An
*infrastructure* failure (the generator cannot be imported on a worker, a module it needs
is missing there, the worker holds other generator code, a worker process dies) is not the
sample's fault: on a Dask cluster the sample is rerun on other workers; if that is not
possible it is logged in the ``infrastructure`` table, not in ``failed``, and stays to do
for the next run (the command line then exits with status 3).

The code that computes the samples is fingerprinted
(:mod:`common.datasets.code_fingerprint`): the SHA-256 of the generator's module and of
every module of the project, or beside the generator, that it imports (transitively), and
the versions of the data packages (torch, numpy, scipy, h5py, tblite, openmm, rdkit). Resuming a
file created by other code is refused, naming the files and versions that changed, unless
``allow_changed_generator=True`` (``--allow-changed-generator``); every run records its
fingerprint, and what changed, in the ``runs`` table. Each worker checks it holds the same
code (else an infrastructure failure). Raising the recipe's ``n`` extends a dataset of
``random`` or ``sobol`` sampling (its first samples stay the same; see
:mod:`common.datasets.resuming` for every check made before a file is resumed). The first
sample to finish is checked (its keys against the recipe's ``labels``, its keys, shapes and
dtypes against the samples already in the file) before the rest is scheduled.

File layout (columnar, first axis the sample, in completion order):

* root table: ``sample_id`` (int64), ``sample_seed`` (int64, the generator's seed), one
  dataset per parameter, one per key the generator returns;
* ``failed`` table: ``sample_id``, ``sample_seed``, ``parameters`` (JSON), ``error_type``,
  ``message``, ``traceback``, ``host``, ``worker`` (``"pid N"`` or the Dask worker's
  address), ``attempts`` for every failed attempt-series of a sample; a sample retried
  with success stays there and is also in the root table (:func:`read_dataset` returns
  only the failures not resolved since);
* ``infrastructure`` table: ``sample_id``, ``time_utc``, ``host``, ``worker``,
  ``error_type``, ``message``: samples that could not run because of their worker;
* ``runs`` table: one ``start`` and one ``finish`` record per invocation (UTC time, host,
  process id, package version, command, workers or scheduler, counts, generator
  fingerprint, ``code_changes``: what differs from the code the file was created with,
  ``""`` if nothing; ``n_samples``: the recipe's ``n``). Files written before code
  fingerprints keep their ``runs`` columns (without the last two);
* root attributes (written when the file is created): :func:`common.io.provenance`
  (package version, git commit, host, creation time, command, the recipe as JSON, the
  sampling seed) plus ``recipe`` (the TOML text), ``recipe_source``, ``recipe_fingerprint``
  (without ``n``), ``generator``, ``n_samples`` (the recipe's ``n`` then),
  ``generator_file``, ``generator_source_sha256`` (its module's file), ``code_files``
  (JSON: relative path -> SHA-256 of each file of the code), ``package_versions`` (JSON:
  package -> version) and ``generator_fingerprint`` (SHA-256 of the function, options,
  code files and versions). Files written before code fingerprints have no ``code_files``
  or ``package_versions``, and their ``generator_fingerprint`` covers the module's file only.
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
from common.datasets.code_fingerprint import CodeFingerprint, code_fingerprint, describe_changes
from common.datasets.recipe import (
    RESERVED_COLUMNS,
    Recipe,
    generator_source,
    load_recipe,
    resolve_function,
    sample_parameters,
)
from common.datasets.recipe import sample_seed as derive_seed
from common.datasets.resuming import FileState, generator_fingerprint, open_locked
from common.errors import ArgumentTypeError, ConfigurationError, DataError

__all__ = ["generate", "GenerationSummary", "read_dataset", "NonFiniteLabelError"]

_MAX_LISTED = 20  # sample ids listed in a summary line


@dataclasses.dataclass
class GenerationSummary:
    """What one :func:`generate` call did.

    Attributes:
        path: the HDF5 file.
        requested: samples this call was asked to cover (the recipe's, or ``limit``).
        already_done: of those, samples the file held before this call (finished, or
            failed and not retried).
        succeeded: samples finished by this call.
        failed: samples that failed in this call.
        seconds: wall time of this call (s).
        failures: ``(sample_id, "ErrorType: message")`` of this call's failures.
        retried: failed samples of earlier runs that this call ran again.
        infrastructure: ``(sample_id, "ErrorType: message (host, worker)")`` of samples this
            call could not run because of their worker; they stay to do.
        unresolved: ids of the requested samples whose last attempt failed, in this call or
            an earlier one (``--retry-failed`` runs them again).
    """

    path: pathlib.Path
    requested: int
    already_done: int
    succeeded: int
    failed: int
    seconds: float
    failures: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    retried: int = 0
    infrastructure: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    unresolved: list[int] = dataclasses.field(default_factory=list)

    @property
    def samples_per_second(self) -> float:
        """Samples (finished or failed) handled per second by this call."""
        return (self.succeeded + self.failed) / self.seconds if self.seconds > 0 else float("nan")

    @property
    def exit_status(self) -> int:
        """The command line's status: 0 every requested sample finished, 1 some failed, 3 some
        could not run (infrastructure)."""
        return 3 if self.infrastructure else 1 if self.unresolved else 0

    def __str__(self) -> str:
        lines = [
            f"{self.path}: {self.succeeded} samples written, {self.failed} failed, "
            f"{self.already_done} already done, of {self.requested} "
            f"({self.seconds:.1f} s, {self.samples_per_second:.2f} samples/s)"
        ]
        if self.retried:
            lines.append(f"  {self.retried} samples that had failed were run again")
        lines += [f"  sample {sample_id} failed: {error}" for sample_id, error in self.failures[:5]]
        if len(self.failures) > 5:
            lines.append(f"  ... and {len(self.failures) - 5} more (see the 'failed' table)")
        if self.unresolved:
            lines.append(
                f"  {len(self.unresolved)} samples failed: ids {_listed(self.unresolved)} "
                "(rerun with --retry-failed to try them again)"
            )
        if self.infrastructure:
            lines.append(
                f"  {len(self.infrastructure)} samples could not run because of their worker "
                f"(not recorded as failed; rerun to do them): ids "
                f"{_listed(sorted(sample_id for sample_id, _ in self.infrastructure))}"
            )
            lines += [f"    sample {sample_id}: {error}" for sample_id, error in self.infrastructure[:3]]
        return "\n".join(lines)


def _listed(ids: list[int]) -> str:
    shown = ", ".join(str(sample_id) for sample_id in ids[:_MAX_LISTED])
    return shown + (f", ... ({len(ids) - _MAX_LISTED} more)" if len(ids) > _MAX_LISTED else "")


# ---------------------------------------------------------------------------------------------
# worker side


class NonFiniteLabelError(DataError):
    """A sample's results hold NaN or infinity and the recipe does not say ``allow_nonfinite = true``."""


_WORKER_GENERATORS: dict[tuple[str, str], Any] = {}  # (reference, code digest) -> generator, per process


def _worker_generator(function_reference: str, code: CodeFingerprint) -> Any:
    """The generator, imported once per worker process and checked to be the run's code.

    Raises:
        common.parallel.InfrastructureError: if it cannot be imported here, or its code (its
            module, the modules it imports, the data packages' versions) differs from the code
            the run was started with (the message names the files and versions).
    """
    key = (function_reference, code.digest)
    if key in _WORKER_GENERATORS:
        return _WORKER_GENERATORS[key]
    where = f"on host {socket.gethostname()} (pid {os.getpid()})"
    try:
        function = resolve_function(function_reference)
    except ValueError as error:
        raise parallel.InfrastructureError(f"cannot import the generator {where}: {error}") from error
    changes = code_fingerprint(function, function_reference).changes_since(code)
    if changes:
        path, _ = generator_source(function, function_reference)
        raise parallel.InfrastructureError(
            f"the code of the generator {path} {where} is not the code this run started with: "
            f"{describe_changes(changes)} (here, against the run's)"
        )
    _WORKER_GENERATORS[key] = function
    return function


def _run_sample(
    function_reference: str, options: dict, code: CodeFingerprint, allow_nonfinite: bool, job: tuple
) -> dict:
    """Worker side: one generator call, its result made picklable as numpy arrays.

    Raises:
        NonFiniteLabelError: if the result holds NaN or infinity and not ``allow_nonfinite``.
    """
    _, parameters, seed = job
    function = _worker_generator(function_reference, code)
    try:
        result = function(dict(parameters), seed, **options)
    except ImportError as error:  # a module missing on this worker: its environment, not the sample
        raise parallel.InfrastructureError(
            f"{function_reference} could not import a module on host {socket.gethostname()} "
            f"(pid {os.getpid()}): {error}"
        ) from error
    if not isinstance(result, dict) or not result or not all(isinstance(key, str) for key in result):
        raise ArgumentTypeError(
            f"{function_reference} must return a non-empty dict of name -> array, got {type(result).__name__}"
        )
    result = {key: _to_numpy(value) for key, value in result.items()}
    if not allow_nonfinite:
        _check_finite(function_reference, result)
    return result


def _check_finite(function_reference: str, result: dict) -> None:
    """Raise :class:`NonFiniteLabelError` naming each key holding NaN or infinity, and how many values."""
    found = []
    for key, value in sorted(result.items()):
        array = np.asarray(value)
        if array.dtype.kind in "fc":
            nan, non_finite = int(np.isnan(array).sum()), int((~np.isfinite(array)).sum())
            if non_finite:
                found.append(f"{key!r} {non_finite} of {array.size} ({nan} NaN, {non_finite - nan} inf)")
    if found:
        raise NonFiniteLabelError(
            f"{function_reference} returned non-finite values: {', '.join(found)}; set "
            "allow_nonfinite = true in the recipe's [generator] table to keep such samples"
        )


def _to_numpy(value: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return value


# ---------------------------------------------------------------------------------------------
# parent side


class _LabelMismatch(ValueError):
    """A sample's keys differ from the recipe's labels."""


def _checked_result(recipe: Recipe, parameters: dict, result: dict) -> dict:
    """The sample's columns: parameters echoed back unchanged dropped; clashes and label mismatches raise."""
    reference = recipe.generator.function
    echoed = {key for key in set(result) & set(parameters) if np.array_equal(result[key], parameters[key])}
    clashes = sorted((set(result) - echoed) & (set(parameters) | set(RESERVED_COLUMNS)))
    if clashes:
        raise ConfigurationError(
            f"{reference} returned keys {clashes}, which are parameters (with other values) "
            f"or reserved columns {RESERVED_COLUMNS}"
        )
    result = {key: value for key, value in result.items() if key not in echoed}
    labels = recipe.generator.labels
    if labels is not None and sorted(result) != sorted(set(labels) - echoed):
        raise _LabelMismatch(
            f"{reference} returned keys {sorted(result)}; the recipe's labels are {sorted(labels)}"
        )
    return result


def _executor_name(workers: int | None, scheduler: Any) -> str:
    if scheduler is not None:
        return f"dask {scheduler if isinstance(scheduler, str) else scheduler.scheduler.address}"
    if workers == 0:
        return "this process"
    return f"{workers or os.cpu_count()} local workers"


def _utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _append_run(
    writer: io.H5Writer,
    event: str,
    executor: str,
    recipe: Recipe,
    state: FileState,
    summary: "GenerationSummary",
) -> None:
    """Append a ``start`` or ``finish`` record to ``runs`` (without the columns a file written by an
    earlier version lacks)."""
    import common

    record = {
        "event": event,
        "time_utc": _utc_now(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "version": common.__version__,
        "command": " ".join(sys.argv),
        "executor": executor,
        "generator_fingerprint": state.fingerprint,
        "code_changes": describe_changes(state.code_changes),
        "n_samples": recipe.n_samples,
        "succeeded": summary.succeeded,
        "failed": summary.failed,
        "infrastructure_failures": len(summary.infrastructure),
    }
    columns = writer.columns("runs") or list(record)
    writer.append({key: value for key, value in record.items() if key in columns}, group="runs")


def _imported_by_a_worker() -> bool:
    """Whether the call comes from the top level of a main script a worker process is importing (as
    ``__mp_main__``: forkserver and spawn workers import the main script before running jobs)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back
    return False


def generate(
    recipe: Recipe | str | os.PathLike,
    output: str | os.PathLike | None = None,
    workers: int | None = None,
    scheduler: Any = None,
    limit: int | None = None,
    progress: bool = True,
    retry_failed: bool = False,
    allow_changed_generator: bool = False,
    threads: int | None = None,
) -> GenerationSummary:
    """Generate (or continue generating) the dataset of a recipe.

    Samples run through :func:`common.parallel.run_jobs` (a local process pool, or a
    Dask cluster given ``scheduler``) and are appended to the HDF5 file as they finish.
    Sample ``i`` gets the parameters ``sample_parameters(recipe)[i]`` and the seed
    ``sample_seed(recipe.sampling.seed, i)``, whatever runs it and in whatever order, so
    a resumed, local or distributed run gives the same dataset (rows in completion order;
    sort by ``sample_id``, or use :func:`read_dataset`). A sample that raises is recorded
    in the ``failed`` table and the run goes on; failures of the infrastructure are not
    (see the module docstring). Calling ``generate`` on a finished file does nothing; on a
    partial one it runs the missing samples.

    Args:
        recipe: a :class:`Recipe` or the path of a recipe TOML file (validated first).
        output: the HDF5 file; default the recipe's ``[output] path``.
        workers: local processes (default: all cores); ``0`` runs samples in this process.
        scheduler: a Dask scheduler address (``"tcp://host:8786"``) or ``distributed.Client``.
        limit: cover only the samples with id ``< limit`` (a first slice of the recipe;
            a later call with a larger limit, or none, continues).
        progress: show a tqdm progress bar (rate and ETA) on stderr.
        retry_failed: run again the samples whose last attempt failed (in earlier runs).
        allow_changed_generator: resume a file made by other code of the generator.
        threads: threads per worker (default: cores / workers; see :mod:`common.threads`).

    Returns:
        A :class:`GenerationSummary` (printable; ``exit_status`` says whether every requested
        sample is in the file).

    Raises:
        common.config.ConfigError: for an invalid recipe file, before any sample runs, or
            when the first sample returns other keys than the recipe's ``labels``.
        common.errors.ConfigurationError: (a ValueError) if ``output`` exists but was made
            from a different recipe, or other generator code (see ``allow_changed_generator``),
            or for a bad ``limit``.
        common.errors.DataError: if the first sample does not fit the samples already in the
            file (other keys, shapes or dtypes).
        RuntimeError: if another process is writing ``output``.
    """
    from tqdm.auto import tqdm

    if _imported_by_a_worker():
        raise RuntimeError(
            "generate() was called while a worker process imported the script that calls it: put the "
            "call under `if __name__ == \"__main__\":` (the workers import the main script, and each would "
            "start generating again)")
    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigurationError(f"generate: limit must be a positive int (number of samples), got {limit!r}")
    path = pathlib.Path(output if output is not None else recipe.output.path)
    function = resolve_function(recipe.generator.function)
    code = code_fingerprint(function, recipe.generator.function)
    attributes = _file_attributes(recipe, generator_source(function, recipe.generator.function), code)
    parameters = sample_parameters(recipe)
    requested = len(parameters) if limit is None else min(limit, len(parameters))
    run_function = functools.partial(
        _run_sample,
        recipe.generator.function,
        recipe.generator.options,
        code,
        recipe.generator.allow_nonfinite,
    )
    executor = _executor_name(workers, scheduler)
    start = time.perf_counter()
    parallel.check_pool_arguments(workers, threads, "generate")
    writer, state = open_locked(path, recipe, attributes, parameters, allow_changed_generator, requested)
    with writer:
        failed_before = {sample_id for sample_id in state.failed if sample_id < requested}
        skipped = state.finished | (set() if retry_failed else failed_before)
        done = {sample_id for sample_id in skipped if sample_id < requested}
        jobs = [
            (sample_id, parameters[sample_id], derive_seed(recipe.sampling.seed, sample_id))
            for sample_id in range(requested)
            if sample_id not in done
        ]
        summary = GenerationSummary(path, requested, len(done), 0, 0, 0.0)
        summary.retried = len(failed_before) if retry_failed else 0
        _append_run(writer, "start", executor, recipe, state, summary)
        bar = tqdm(
            total=requested,
            initial=len(done),
            desc=recipe.name or path.stem,
            unit="sample",
            disable=not progress,
            dynamic_ncols=True,
        )
        outcomes = _Outcomes(writer, recipe, path, summary, bar)
        try:
            for job, result in parallel.run_jobs(
                run_function,
                jobs,
                workers=workers,
                scheduler=scheduler,
                threads=threads,
                timeout=recipe.generator.timeout,
                retries=recipe.generator.retries,
                probe=True,
            ):
                outcomes.record(job, result)
        finally:
            bar.close()
            summary.seconds = time.perf_counter() - start
        failed_now = {sample_id for sample_id, _ in summary.failures}
        summary.unresolved = sorted((failed_before | failed_now) - outcomes.finished_now)
        _append_run(writer, "finish", executor, recipe, state, summary)
    return summary


def _file_attributes(recipe: Recipe, generator_file: tuple[str, str], code: CodeFingerprint) -> dict:
    """The attributes of a dataset file: provenance, the recipe, and the generator's code.

    Args:
        recipe: the recipe.
        generator_file: the generator's module file and its SHA-256 (:func:`generator_source`).
        code: the code the generator runs.
    """
    path, source_sha256 = generator_file
    return {
        **io.provenance(recipe.to_dict(), seed=recipe.sampling.seed),
        "recipe": recipe.text or config.dumps(recipe.to_dict()),
        "recipe_source": recipe.source,
        "recipe_fingerprint": recipe.fingerprint(),
        "generator": recipe.generator.function,
        "generator_file": path,
        "generator_source_sha256": source_sha256,
        "generator_fingerprint": generator_fingerprint(recipe, code),
        **code.attributes(),
        "n_samples": recipe.n_samples,
    }


class _Outcomes:
    """Writes what each job of :func:`generate` gave: a sample, a failure, or an infrastructure incident.

    The first sample to succeed checks the output format: a sample that does not fit then is fatal
    (the generator changed), later ones are recorded as failures.
    """

    def __init__(self, writer, recipe: Recipe, path: pathlib.Path, summary: GenerationSummary, bar):
        self.writer, self.recipe, self.path, self.summary, self.bar = writer, recipe, path, summary, bar
        self.validated = False
        self.held_before = writer.count("/") > 0  # samples of earlier runs the first one must fit
        self.finished_now: set[int] = set()

    def record(self, job: tuple, result: Any) -> None:
        sample_id, parameters, seed = job
        if isinstance(result, parallel.JobFailure) and result.infrastructure:
            self._incident(sample_id, result)
            return
        if not isinstance(result, parallel.JobFailure):
            result = self._sample(sample_id, parameters, seed, result)
        if isinstance(result, parallel.JobFailure):
            self._failure(sample_id, parameters, seed, result)
        self.bar.update()

    def _incident(self, sample_id: int, result: parallel.JobFailure) -> None:
        incident = {
            "sample_id": sample_id,
            "time_utc": _utc_now(),
            "host": result.host,
            "worker": result.worker,
            "error_type": result.error_type,
            "message": result.message,
        }
        self.writer.append(incident, group="infrastructure")
        where = ", ".join(part for part in (result.host, result.worker) if part)
        self.summary.infrastructure.append((sample_id, f"{result} ({where})"))
        not_run = len(self.summary.infrastructure)
        self.bar.set_postfix(failed=self.summary.failed, not_run=not_run, refresh=False)

    def _sample(self, sample_id: int, parameters: dict, seed: int, result: dict
                ) ->  parallel.JobFailure | None:
        """Check and append one sample; the failure it turned into, if it did not fit."""
        try:
            result = _checked_result(self.recipe, parameters, result)
        except _LabelMismatch as error:
            if not self.validated:
                raise self.recipe.error(
                    f"sample {sample_id}: {error}; fix the labels or the generator",
                    ("generator", "labels"),
                ) from None
            return parallel.JobFailure(type(error).__name__, str(error), "")
        except ValueError as error:
            return parallel.JobFailure(type(error).__name__, str(error), "")
        record = {"sample_id": sample_id, "sample_seed": seed, **parameters, **result}
        try:
            self.writer.append(record)
        except (ValueError, TypeError) as error:  # keys, shapes or dtypes unlike earlier samples
            if not self.validated and self.held_before:
                raise DataError(
                    f"{self.path}: sample {sample_id}, the first of this run to finish, does not fit "
                    f"the samples already in the file ({error}); the generator's output changed"
                ) from error
            if not self.validated:
                raise DataError(
                    f"{self.path}: sample {sample_id}, the first of this run to finish, returned a value "
                    f"the file cannot store ({error}); fix the generator's output"
                ) from error
            return parallel.JobFailure(type(error).__name__, str(error), "")
        self.validated = True
        self.summary.succeeded += 1
        self.finished_now.add(sample_id)
        return None

    def _failure(self, sample_id: int, parameters: dict, seed: int, result: parallel.JobFailure) -> None:
        failure = {
            "sample_id": sample_id,
            "sample_seed": seed,
            "parameters": json.dumps(parameters),
            "error_type": result.error_type,
            "message": result.message,
            "traceback": result.traceback,
            "host": result.host or socket.gethostname(),
            "worker": result.worker or f"pid {os.getpid()} (the writer's check)",
            "attempts": result.attempts,
        }
        self.writer.append(failure, group="failed")
        self.summary.failed += 1
        self.summary.failures.append((sample_id, str(result)))
        self.bar.set_postfix(failed=self.summary.failed, refresh=False)


def read_dataset(path: str | os.PathLike, group: str = "/") -> dict[str, np.ndarray]:
    """Read a generated dataset's table sorted by ``sample_id`` (column -> array, first axis the sample).

    Args:
        path: the HDF5 file.
        group: ``"/"`` for the samples; ``"failed"`` for the samples whose last attempt
            failed (one record each, the last; a failure resolved by a later success is
            left out: ``common.io.read_table(path, "failed")`` has the full log);
            ``"infrastructure"`` for the samples that could not run because of their worker;
            ``"runs"`` for the run log (which has no ``sample_id`` and stays in order).
    """
    table = io.read_table(path, group)
    if "sample_id" not in table:
        return table
    if group.strip("/") == "failed":
        with h5py.File(path, "r", swmr=True) as file:
            has_samples = "sample_id" in file
        finished = set(io.read_table(path, "/", ["sample_id"])["sample_id"].tolist() if has_samples else [])
        last = {int(sample_id): row for row, sample_id in enumerate(table["sample_id"])}
        rows = [row for sample_id, row in last.items() if sample_id not in finished]
        table = {key: column[rows] for key, column in table.items()}
    order = np.argsort(table["sample_id"], kind="stable")
    return {key: column[order] for key, column in table.items()}
