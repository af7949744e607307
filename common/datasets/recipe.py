"""Dataset recipes: TOML files naming a generator, a parameter space, its sampling and an output file.

A recipe is validated completely when it is loaded, before any sample runs: TOML syntax,
unknown or missing keys and wrong types (by :mod:`common.config`), then the meaning (the
generator can be imported and accepts the options, ranges are ordered, grid sampling has
points for every range, parameter names do not clash). Every error is a
:class:`common.config.ConfigError` naming the file, line and key.

Recipes are trusted code. The ``[generator] function`` of a recipe is imported, and the
import-time code of its module runs, as soon as the recipe is loaded or validated (also by
``python -m common.datasets validate``); then it runs on every worker, for every sample. Run
only recipes whose generator module you would run yourself.

A sample whose results hold NaN or infinity is recorded as failed unless ``[generator]``
says ``allow_nonfinite = true`` (a bool; part of the fingerprint when true).

Optional ``[generator]`` keys (they change how samples run, not what they hold, so they are
not part of the recipe's fingerprint and may change between a run and its resumption):

* ``timeout``: seconds one attempt of a sample may run; a sample that runs longer fails
  with a ``JobTimeoutError`` (see :func:`common.parallel.run_jobs` for how it is enforced).
* ``retries``: extra attempts for a sample that raised (default 0), for generators that
  fail now and then (a calculation that does not converge on a loaded machine); the
  sample's seed is the same at every attempt. Only the last failure is recorded.

Example recipe::

    name = "oscillator"
    description = "damped oscillators for a toy surrogate"

    [generator]
    function = "common.datasets.examples:damped_oscillator"
    options = { n_times = 32 }
    labels = ["times", "displacement", "velocity", "energy"]   # optional: the keys of every sample
    allow_nonfinite = false   # optional: keep samples holding NaN or inf (default: failed)
    timeout = 60.0         # optional: seconds per attempt of a sample
    retries = 1            # optional: extra attempts for a sample that raised

    [parameters]
    frequency = { low = 0.5, high = 5.0, scale = "log" }   # rad/s
    damping = { low = 0.0, high = 0.9 }
    solver = { values = ["analytic"] }

    [sampling]
    method = "sobol"       # grid | random | sobol | lhs
    n = 64                 # random, sobol: raise it later to extend the dataset
    seed = 0

    [output]
    path = "oscillator.h5"
"""

import dataclasses
import hashlib
import importlib
import inspect
import itertools
import json
import keyword
import math
import pathlib
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from common import checks, config
from common.errors import ConfigurationError, MissingFileError

__all__ = [
    "Recipe",
    "GeneratorTable",
    "Parameter",
    "Sampling",
    "Output",
    "load_recipe",
    "loads_recipe",
    "resolve_function",
    "generator_module",
    "generator_source",
    "sample_parameters",
    "sample_seed",
    "RESERVED_COLUMNS",
    "RESERVED_GROUPS",
    "EXTENDABLE_METHODS",
]

RESERVED_COLUMNS = ("sample_id", "sample_seed")
"""Columns the runner adds to every sample; no parameter or generator output may use these names."""

RESERVED_GROUPS = ("runs", "failed", "infrastructure")
"""Groups the runner keeps beside the samples in the file's root; no column may take these names."""

EXECUTION_KEYS = ("timeout", "retries")
"""``[generator]`` keys that change how samples run, not their content (not fingerprinted)."""

EXTENDABLE_METHODS = ("random", "sobol")
"""Sampling methods whose first points do not depend on ``n``: raising ``n`` extends such a dataset.

``random`` draws the points one after the other from a seeded generator, ``sobol`` takes
the first ``n`` points of one scrambled sequence. ``lhs`` draws a new Latin hypercube for
every ``n``; ``grid``'s size follows from its ``points`` (part of the fingerprint).
"""


@dataclasses.dataclass
class GeneratorTable:
    """``[generator]``: the callable producing one sample.

    Attributes:
        function: ``"module:callable"``, an importable callable
            ``fn(params: dict, seed: int, **options) -> dict[str, array]``.
        options: keyword arguments passed to every call.
        labels: the keys every sample must return (checked on the first sample to finish,
            before the others are scheduled, and then on every sample); default: the
            keys of the first finished sample.
        allow_nonfinite: keep samples whose results hold NaN or infinity; by default
            (False) such a sample is recorded as failed (``NonFiniteLabelError``, naming
            the keys). Part of the fingerprint when True: it decides which samples the
            dataset holds.
        timeout: seconds one attempt of a sample may run (None: no limit).
        retries: extra attempts for a sample that raised (0: none).
    """

    function: str
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    labels: list[str] | None = None
    allow_nonfinite: bool = False
    timeout: float | None = None
    retries: int = 0

    def __post_init__(self):
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ConfigurationError(f"timeout must be a finite number of seconds > 0, got {self.timeout}")
        checks.non_negative_int(self.retries, "retries")


@dataclasses.dataclass
class Parameter:
    """One entry of ``[parameters]``: a range (``low``, ``high``) or a list (``values``).

    Attributes:
        low, high: bounds of a continuous parameter, ``low < high`` (``low > 0`` for
            ``scale = "log"``).
        scale: ``"linear"`` (uniform) or ``"log"`` (uniform in the logarithm).
        points: number of values of a range for ``method = "grid"`` (``linspace`` or
            ``geomspace`` including both bounds); not used by the other methods.
        values: the values of a listed parameter (all numbers, all strings or all
            booleans): crossed with the other parameters by ``method = "grid"``, drawn
            uniformly by the other methods.
    """

    low: float | None = None
    high: float | None = None
    scale: Literal["linear", "log"] = "linear"
    points: int | None = None
    values: list[bool | int | float | str] | None = None

    def __post_init__(self):
        if self.values is not None:
            self._check_values()
        else:
            self._check_range()

    def _check_values(self) -> None:
        if self.low is not None or self.high is not None or self.points is not None:
            raise ConfigurationError("give either values or a range (low, high, points), not both")
        if not self.values:
            raise ConfigurationError("values must list at least one value")
        kinds = {_kind(value) for value in self.values}
        if len(kinds) > 1:
            raise ConfigurationError(
                f"values must be all numbers, all strings or all booleans, got {self.values}"
            )
        if kinds == {"number"} and not all(math.isfinite(value) for value in self.values):
            raise ConfigurationError(f"values must be finite numbers, got {self.values}")
        if kinds == {"number"} and any(isinstance(value, float) for value in self.values):
            self.values = [float(value) for value in self.values]

    def _check_range(self) -> None:
        if self.low is None or self.high is None:
            raise ConfigurationError("give a range { low = ..., high = ... } or a list { values = [...] }")
        if not math.isfinite(self.low):
            raise ConfigurationError(f"low must be finite, got {self.low}")
        if not (math.isfinite(self.high) and self.high > self.low):
            raise ConfigurationError(
                f"high must be finite and above the lower bound {self.low}, got {self.high}")
        if self.scale == "log" and self.low <= 0:
            raise ConfigurationError(f"low must be > 0 for a log scale, got {self.low}")
        if self.points is not None:
            checks.positive_int(self.points, "points")

    @property
    def is_range(self) -> bool:
        """True for a range, False for a list of values."""
        return self.values is None

    def grid(self) -> list:
        """The grid values: ``points`` values spanning a range, or the listed values."""
        if not self.is_range:
            return list(self.values)
        spacing = np.geomspace if self.scale == "log" else np.linspace
        return spacing(self.low, self.high, self.points).tolist()

    def from_unit(self, unit: np.ndarray) -> list:
        """Map points ``u`` of ``[0, 1)`` to the range (uniform in the value or its log) or to
        ``values[floor(u * len(values))]``."""
        if not self.is_range:
            indices = np.minimum((unit * len(self.values)).astype(int), len(self.values) - 1)
            return [self.values[index] for index in indices]
        if self.scale == "log":
            return np.exp(np.log(self.low) + unit * (np.log(self.high) - np.log(self.low))).tolist()
        return (self.low + unit * (self.high - self.low)).tolist()


def _kind(value: Any) -> str:
    return "bool" if isinstance(value, bool) else "str" if isinstance(value, str) else "number"


@dataclasses.dataclass
class Sampling:
    """``[sampling]``: how points of the parameter space are chosen.

    Attributes:
        method: ``"grid"`` (the full cross product; ``n`` may be omitted), ``"random"``
            (i.i.d. uniform), ``"sobol"`` (scrambled Sobol) or ``"lhs"`` (Latin hypercube).
        n: number of samples (required except for ``grid``, where it must equal the
            product of the grid sizes if given). Not part of the recipe's fingerprint: a
            dataset of a method in :data:`EXTENDABLE_METHODS` is extended by raising it.
        seed: seeds the sampling and, with the sample id, each sample's seed.
    """

    method: Literal["grid", "random", "sobol", "lhs"]
    n: int | None = None
    seed: int = 0

    def __post_init__(self):
        if self.n is not None:
            checks.positive_int(self.n, "n")
        checks.non_negative_int(self.seed, "seed")


@dataclasses.dataclass
class Output:
    """``[output]``: where the dataset goes.

    Attributes:
        path: the HDF5 file (a relative path is relative to the working directory).
    """

    path: pathlib.Path


@dataclasses.dataclass
class Recipe:
    """A dataset recipe (see the module docstring for the TOML form).

    Attributes:
        generator, parameters, sampling, output: the tables of the recipe.
        name, description: free text, stored with the dataset.
        text: the recipe's TOML source (stored in the dataset's provenance).
        source: the file it was read from (``"<string>"`` if none).
    """

    generator: GeneratorTable
    parameters: dict[str, Parameter]
    sampling: Sampling
    output: Output
    name: str = ""
    description: str = ""
    text: str = dataclasses.field(default="", init=False, repr=False)
    source: str = dataclasses.field(default="<string>", init=False, repr=False)

    @property
    def n_samples(self) -> int:
        """Number of samples the recipe defines."""
        if self.sampling.method == "grid":
            return math.prod(len(parameter.grid()) for parameter in self.parameters.values())
        return self.sampling.n

    def fingerprint(self) -> str:
        """SHA-256 of what determines the samples (generator, options, labels, parameters, sampling).

        Two recipes with the same fingerprint produce the same samples; the runner refuses
        to resume a file made by a recipe with another fingerprint. ``sampling.n`` is left
        out: a recipe of :data:`EXTENDABLE_METHODS` with a larger ``n`` extends the dataset
        (its first samples are the same), and the runner refuses other changes of ``n``.
        ``allow_nonfinite`` counts only when True, so recipes without it keep the
        fingerprint they had before it existed.
        """
        content = self._fingerprinted()
        del content["sampling"]["n"]
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()

    def fingerprint_with_n(self, n: int | None) -> str:
        """The fingerprint as ``common.datasets`` computed it before it left ``n`` out, with
        ``sampling.n = n``: what files written by those versions store."""
        content = self._fingerprinted()
        content["sampling"]["n"] = n
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()

    def _fingerprinted(self) -> dict[str, Any]:
        content = {key: config.to_dict(self)[key] for key in ("generator", "parameters", "sampling")}
        for key in EXECUTION_KEYS:
            del content["generator"][key]
        if not self.generator.allow_nonfinite:
            del content["generator"]["allow_nonfinite"]
        return content

    def error(self, reason: str, key_path: tuple) -> config.ConfigError:
        """A :class:`common.config.ConfigError` naming this recipe's file and the line of ``key_path``."""
        line = config._LineIndex(self.text).line_of(key_path) if self.text else None
        return config.ConfigError(reason, self.source, line, key_path)

    def to_dict(self) -> dict[str, Any]:
        """The recipe as plain data (without ``text`` and ``source``)."""
        data = config.to_dict(self)
        del data["text"], data["source"]
        return data


def resolve_function(reference: str) -> Callable:
    """Import ``"package.module:callable"`` (attributes may be dotted) and return the callable.

    Raises:
        ValueError: if the reference is malformed, the module cannot be imported, or the
            attribute is missing or not callable (the message says which).
    """
    module_name, separator, attribute = reference.partition(":")
    if not separator or not module_name or not attribute:
        raise ConfigurationError(f"{reference!r} must have the form 'package.module:callable'")
    try:
        target = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(f"cannot import module {module_name!r} of {reference!r}: {error}") from error
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigurationError(
                f"module {module_name!r} has no attribute {attribute!r} (from {reference!r})")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigurationError(f"{reference!r} is a {type(target).__name__}, not a callable")
    return target


def generator_module(function: Callable, reference: str) -> Any:
    """The module defining a generator (for a ``functools.partial`` or an instance, the module
    named by its ``"module:callable"`` reference)."""
    return inspect.getmodule(function) or importlib.import_module(reference.partition(":")[0])


def generator_source(function: Callable, reference: str) -> tuple[str, str]:
    """The source file of a generator and the SHA-256 of its bytes.

    The file is that of the module defining ``function`` (for a ``functools.partial`` or an
    instance, of the module named by ``reference``). Only this file is hashed; the code the
    generator runs, with the modules it imports, is fingerprinted by
    :func:`common.datasets.code_fingerprint.code_fingerprint`.

    Returns:
        ``(path, sha256 hex digest)``; ``("", "")`` if the callable has no source file
        (a builtin).
    """
    path = getattr(generator_module(function, reference), "__file__", None)
    if not path:
        return "", ""
    return path, hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def _check_options(function: Callable, reference: str, options: dict) -> str | None:
    """None if ``function`` accepts ``options`` as keyword arguments, else the reason."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None  # builtins without a signature: cannot check
    parameters = list(signature.parameters.values())
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return f"{reference} must accept (params, seed, **options); its signature is {signature}"
    keywords = {p.name for p in parameters[2:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = sorted(set(options) - keywords)
    if unknown:
        return f"{reference} takes no option {unknown[0]!r}; it accepts {sorted(keywords)}"
    return None


def _semantic_errors(recipe: Recipe) -> list[tuple[str, tuple]]:
    """Problems across tables, as (reason, key path)."""
    errors = _generator_errors(recipe) + _parameter_errors(recipe) + _label_errors(recipe)
    return errors + _sampling_errors(recipe, errors)


def _generator_errors(recipe: Recipe) -> list[tuple[str, tuple]]:
    try:
        function = resolve_function(recipe.generator.function)
    except ValueError as error:
        return [(str(error), ("generator", "function"))]
    reason = _check_options(function, recipe.generator.function, recipe.generator.options)
    return [] if reason is None else [(reason, ("generator", "options"))]


def _parameter_errors(recipe: Recipe) -> list[tuple[str, tuple]]:
    errors = []
    if not recipe.parameters:
        errors.append(("the recipe needs at least one parameter", ("parameters",)))
    for name, parameter in recipe.parameters.items():
        if not name.isidentifier() or keyword.iskeyword(name) or name in RESERVED_COLUMNS + RESERVED_GROUPS:
            errors.append(
                (
                    f"parameter name must be a Python identifier and not one of "
                    f"{RESERVED_COLUMNS + RESERVED_GROUPS}",
                    ("parameters", name),
                )
            )
        if recipe.sampling.method == "grid" and parameter.is_range and parameter.points is None:
            errors.append(
                ("a range needs 'points' (number of grid values) for method 'grid'", ("parameters", name))
            )
    return errors


def _label_errors(recipe: Recipe) -> list[tuple[str, tuple]]:
    errors = []
    for label in recipe.generator.labels or ():
        if label in recipe.parameters or label in RESERVED_COLUMNS + RESERVED_GROUPS:
            errors.append((f"label {label!r} clashes with a parameter or a name the file reserves "
                           f"{RESERVED_COLUMNS + RESERVED_GROUPS}", ("generator", "labels")))
        elif not label or "/" in label or label.startswith("_"):
            errors.append((f"label {label!r} cannot name a column: it must be non-empty, without '/', "
                           f"and not start with '_'", ("generator", "labels")))
    return errors


def _sampling_errors(recipe: Recipe, earlier: list) -> list[tuple[str, tuple]]:
    """The sample count's problems (the grid's size is only checked when nothing else is wrong)."""
    method, n = recipe.sampling.method, recipe.sampling.n
    if method != "grid" and n is None:
        return [(f"method {method!r} needs n (the number of samples)", ("sampling", "n"))]
    if method == "grid" and n is not None and not earlier and n != recipe.n_samples:
        return [
            (
                f"the grid has {recipe.n_samples} points but n = {n}; omit n or make it match",
                ("sampling", "n"),
            )
        ]
    return []


def loads_recipe(text: str, filename: str = "<string>") -> Recipe:
    """Parse and validate recipe TOML ``text``.

    Raises:
        common.config.ConfigError: on any problem, naming ``filename``, the line and the key.
    """
    recipe = config.loads(text, Recipe, filename=filename)
    errors = _semantic_errors(recipe)
    if errors:
        reason, key_path = errors[0]
        line = config._LineIndex(text).line_of(key_path)  # the line lookup common.config uses itself
        raise config.ConfigError(reason, filename, line, key_path)
    recipe.text, recipe.source = text, filename
    return recipe


def load_recipe(path: str | pathlib.Path) -> Recipe:
    """Read and validate the recipe file ``path`` (see :func:`loads_recipe`)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise MissingFileError(f"recipe {str(path)!r} does not exist or is not a file")
    return loads_recipe(path.read_text(encoding="utf-8"), filename=str(path))


def sample_parameters(recipe: Recipe) -> list[dict[str, Any]]:
    """The parameter values of every sample, in sample-id order.

    ``grid``: the cross product, the first parameter varying slowest. ``random``,
    ``sobol``, ``lhs``: ``n`` points of the unit cube (one dimension per parameter, from
    :class:`common.geometry.samplers.UnitSampler` seeded with ``sampling.seed``) mapped
    to the ranges and value lists. Deterministic for a given recipe.

    Returns:
        One dict per sample: parameter name -> Python float, int, str or bool.
    """
    names = list(recipe.parameters)
    if recipe.sampling.method == "grid":
        axes = [recipe.parameters[name].grid() for name in names]
        return [dict(zip(names, point)) for point in itertools.product(*axes)]
    import torch

    from common.geometry.samplers import UnitSampler

    kind = {"random": "uniform", "sobol": "sobol", "lhs": "lhs"}[recipe.sampling.method]
    sampler = UnitSampler(kind, len(names), seed=recipe.sampling.seed, dtype=torch.float64)
    unit = sampler(recipe.sampling.n).numpy()
    columns = [recipe.parameters[name].from_unit(unit[:, index]) for index, name in enumerate(names)]
    return [dict(zip(names, row)) for row in zip(*columns)]


def sample_seed(recipe_seed: int, sample_id: int) -> int:
    """The seed passed to the generator for sample ``sample_id``: independent of run order and workers.

    Derived with ``numpy.random.SeedSequence([recipe_seed, sample_id])``; in ``[0, 2**32)``.
    """
    return int(np.random.SeedSequence([recipe_seed, sample_id]).generate_state(1, np.uint32)[0])
