"""Resuming a dataset file: whether a run may add to it, and which samples it already holds.

:func:`open_locked` opens the file's writer (taking its lock, so that no other run writes
between these checks and this run's first append) and refuses the file unless:

* it was made by this recipe: same fingerprint (:meth:`Recipe.fingerprint`; the files of
  earlier versions, whose fingerprint included ``n``, are recognised too);
* this recipe's ``n`` covers every sample the file holds and, for a sampling method outside
  :data:`~common.datasets.recipe.EXTENDABLE_METHODS`, is the file's ``n``;
* every sample in the file has the parameters this recipe's sampling gives it (so a raised
  ``n`` continues the dataset; a changed sampling library would not);
* it was made by the same code (:class:`~common.datasets.code_fingerprint.CodeFingerprint`:
  the generator's module, the modules it imports, the data packages' versions), or
  ``allow_changed`` is given; the refusal names what changed. A file written before code
  fingerprints existed is checked on the generator's module alone, with a warning (once per
  file and process) that the modules it imports were not checked.
"""

import dataclasses
import hashlib
import json
import pathlib
import warnings

import numpy as np

from common import io
from common.datasets.code_fingerprint import CodeFingerprint, describe_changes
from common.datasets.recipe import EXTENDABLE_METHODS, RESERVED_COLUMNS, Recipe, loads_recipe
from common.differences import nested_differences
from common.errors import BusyError, ConfigurationError, DataError

__all__ = ["FileState", "open_locked", "generator_fingerprint", "UncheckedImportsWarning"]

_PARAMETER_RTOL = 1e-12  # stored and recomputed parameter values agree to this (last-bit libm differences)
_UNCHECKED_NOTED: set[str] = set()  # files noted once as written without code fingerprints


class UncheckedImportsWarning(UserWarning):
    """A dataset file written before code fingerprints: the modules its generator imports were not checked."""


@dataclasses.dataclass
class FileState:
    """What an existing dataset file holds, and how this run's code compares (read under the lock).

    Attributes:
        finished: ids of the samples in the root table.
        failed: sample id -> ``"ErrorType: message"`` of its last failure, for failed samples
            not finished since.
        fingerprint: the generator fingerprint this run records in ``runs`` (for a file written
            before code fingerprints, the kind that file records: generator module only).
        code_changes: what differs between the code the file was created with and this run's
            (empty when nothing does); allowed, or the file would have been refused.
    """

    finished: set[int]
    failed: dict[int, str]
    fingerprint: str
    code_changes: list[str]


def generator_fingerprint(recipe: Recipe, code: CodeFingerprint) -> str:
    """SHA-256 of the generator's function, options and code (:attr:`CodeFingerprint.digest`)."""
    return _generator_digest(recipe, code_sha256=code.digest)


def _legacy_generator_fingerprint(recipe: Recipe, source_sha256: str) -> str:
    """The generator fingerprint of files written before code fingerprints: its module's file only."""
    return _generator_digest(recipe, source_sha256=source_sha256)


def _generator_digest(recipe: Recipe, **code: str) -> str:
    content = {"function": recipe.generator.function, "options": recipe.generator.options, **code}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def open_locked(
    path: pathlib.Path, recipe: Recipe, attributes: dict, parameters: list[dict], allow_changed: bool,
    requested: int | None = None,
) -> tuple[io.H5Writer, FileState]:
    """Open the writer (taking the file's lock), check the file may be resumed, read what it holds.

    Holding the lock before reading means no other run can write between the read and this
    run's first append: two runs of one recipe never compute or write a sample twice.

    Args:
        path: the dataset file (created with ``attributes`` if it does not exist).
        recipe: this run's recipe.
        attributes: this run's root attributes (``runner._file_attributes``: the recipe's
            and generator's fingerprints, the code files and package versions).
        parameters: ``sample_parameters(recipe)``.
        allow_changed: resume a file made by other code.
        requested: the samples this run covers (ids below it; default all): a file made by other
            code that already holds all of them is opened (nothing would be mixed; the changes are
            recorded in the run's entry) without ``allow_changed``.

    Raises:
        RuntimeError: if another process is writing the file (another ``generate`` of it).
        common.errors.ConfigurationError: the file was made by another recipe or other code,
            or this recipe's ``n`` does not fit it (a :class:`common.config.ConfigError`
            naming the recipe's line), or its samples' parameters differ from this sampling's.
    """
    try:
        writer = io.H5Writer(path, attributes=attributes)
    except RuntimeError as error:
        raise BusyError(
            f"{path} is being written by another process (another generate run of this recipe?); "
            f"wait for it to finish, or give another output file ({error})"
        ) from error
    try:
        stored = writer.attributes
        _check_recipe(path, stored, recipe)
        finished, failed = _read_ids(writer)
        covered = set(range(len(parameters) if requested is None else requested)) <= finished
        fingerprint, changes = _check_code(path, stored, attributes, recipe, allow_changed or covered)
        _check_sample_count(path, stored, recipe, finished | set(failed))
        _check_parameters(writer, recipe, parameters)
        _check_columns(writer, recipe)
    except BaseException:
        writer.close()
        raise
    return writer, FileState(finished, failed, fingerprint, changes)


def _check_recipe(path: pathlib.Path, stored: dict, recipe: Recipe) -> None:
    """Refuse a file made by another recipe (its fingerprint, or the one earlier versions computed with n)."""
    fingerprint = stored.get("recipe_fingerprint")
    if fingerprint is None:
        raise ConfigurationError(
            f"{path} exists but was not written by common.datasets; choose another output path"
        )
    file_n = None if stored.get("n_samples") is None else int(stored["n_samples"])
    legacy = {recipe.fingerprint_with_n(n) for n in (recipe.sampling.n, file_n)}
    if fingerprint != recipe.fingerprint() and fingerprint not in legacy:
        raise ConfigurationError(
            f"{path} was generated from a different recipe ({_recipe_changes(stored, recipe)}); resuming "
            f"would mix datasets. Choose another output path or delete the file"
        )


def _recipe_changes(stored: dict, recipe: Recipe) -> str:
    """What differs between the recipe stored in a file and ``recipe`` (``n`` left out, as extending is
    allowed), as ``key.path: file's -> this recipe's``; a generic phrase when the stored one cannot be
    read."""
    generic = "generator, options, labels, parameters or sampling differ"
    try:
        before = loads_recipe(str(stored["recipe"]), "<the file's recipe>")._fingerprinted()
    except (KeyError, ValueError, TypeError):  # an old file, or a recipe whose generator is gone
        return generic
    after = recipe._fingerprinted()
    for content in (before, after):
        content["sampling"].pop("n", None)
    changed = nested_differences(before, after)
    return "; ".join(changed) if changed else generic


def _check_code(
    path: pathlib.Path, stored: dict, current: dict, recipe: Recipe, allow_changed: bool
) -> tuple[str, list[str]]:
    """The generator fingerprint this run records, and what changed in the code since the file was made."""
    if stored.get("generator_fingerprint") is None:
        raise ConfigurationError(
            f"{path} was made by an earlier common.datasets that did not fingerprint the generator's "
            "code, so resuming it could mix outputs of different code; generate into a new file"
        )
    stored_code = CodeFingerprint.from_attributes(stored)
    if stored_code is not None:
        fingerprint = current["generator_fingerprint"]
        changes = CodeFingerprint.from_attributes(current).changes_since(stored_code)
    else:  # written before code fingerprints: only the generator's module can be compared
        fingerprint = _legacy_generator_fingerprint(recipe, current["generator_source_sha256"])
        module = stored.get("generator_file", "?")
        changes = []
        if fingerprint != stored["generator_fingerprint"]:
            was = str(stored.get("generator_source_sha256", "?"))[:12]
            changes = [f"{module} changed (sha256 {was} then, {current['generator_source_sha256'][:12]} now)"]
        if str(path) not in _UNCHECKED_NOTED:
            _UNCHECKED_NOTED.add(str(path))
            warnings.warn(
                f"{path} was written before common.datasets fingerprinted the modules a generator "
                f"imports and the package versions: only the generator's module {module} was checked, "
                "not the modules it imports",
                UncheckedImportsWarning,
                stacklevel=4,
            )
    if changes and not allow_changed:
        raise ConfigurationError(
            f"{path} was made by other code of the generator {recipe.generator.function} "
            f"(since it was created: {describe_changes(changes)}); resuming would mix the outputs "
            "of two versions of the code. Generate into a new file, or pass "
            "allow_changed_generator=True (--allow-changed-generator) to resume anyway "
            "(each run records its code fingerprint and changes in 'runs')"
        )
    return fingerprint, changes


def _read_ids(writer: io.H5Writer) -> tuple[set[int], dict[int, str]]:
    """The finished ids, and the last failure of each failed id not finished since."""
    finished = {int(sample_id) for sample_id in writer.read("/", ["sample_id"]).get("sample_id", [])}
    keys = ("sample_id", "error_type", "message")
    table = writer.read("failed", list(keys))
    failed = {}
    for sample_id, error_type, message in zip(*(table.get(key, []) for key in keys)):
        if int(sample_id) not in finished:
            failed[int(sample_id)] = f"{error_type}: {message}"  # the last failure wins
    return finished, failed


def _check_sample_count(path: pathlib.Path, stored: dict, recipe: Recipe, held: set[int]) -> None:
    """Refuse an ``n`` that leaves out samples of the file, or that changes a non-extendable sampling."""
    n, file_n = recipe.n_samples, int(stored.get("n_samples", recipe.n_samples))
    method = recipe.sampling.method
    if method not in EXTENDABLE_METHODS and n != file_n:
        raise recipe.error(
            f"{path} holds a dataset of n = {file_n}; method {method!r} draws other points for another n, "
            f"so n = {n} would change its first samples. Keep n = {file_n} or generate into a new file "
            f"(the methods {list(EXTENDABLE_METHODS)} extend a dataset when n is raised)",
            ("sampling", "n"),
        )
    if held and max(held) >= n:
        raise recipe.error(
            f"{path} already holds sample {max(held)} (of a larger n); n = {n} would leave it out of the "
            f"dataset. Raise n to at least {max(held) + 1} (generate's limit runs part of a recipe)",
            ("sampling", "n"),
        )


def _check_columns(writer: io.H5Writer, recipe: Recipe) -> None:
    """Refuse a file whose samples lack a column every sample of this recipe has (a damaged file)."""
    if not writer.count("/"):
        return
    held = set(writer.columns("/"))
    needed = set(RESERVED_COLUMNS) | set(recipe.parameters) | set(recipe.generator.labels or ())
    missing = sorted(needed - held)
    if missing:
        raise DataError(
            f"{writer.path}: its samples have no column(s) {missing}, which every sample of this recipe "
            f"has (it holds {sorted(held)}); the file was damaged or edited. Generate into a new file"
        )


def _check_parameters(writer: io.H5Writer, recipe: Recipe, parameters: list[dict]) -> None:
    """Refuse a file whose samples' parameters are not the ones this recipe's sampling gives them."""
    if not writer.count("/"):
        return
    table = writer.read("/", ["sample_id", *recipe.parameters])
    ids = table["sample_id"]
    for name in recipe.parameters:
        expected = np.array([parameters[sample_id][name] for sample_id in ids])
        held = table[name]
        if expected.dtype.kind in "fi" and held.dtype.kind in "fi":
            differ = ~np.isclose(held, expected, rtol=_PARAMETER_RTOL, atol=0.0, equal_nan=True)
        else:
            differ = held != expected
        if differ.any():
            row = int(np.argmax(differ))
            raise ConfigurationError(
                f"{writer.path}: sample {ids[row]} has {name} = {held[row]!r} in the file, but this "
                f"recipe's sampling gives it {expected[row]!r}; the sampling changed (another version "
                "of the sampling code or of scipy/torch?), so new samples would not continue the "
                "dataset. Generate into a new file"
            )
