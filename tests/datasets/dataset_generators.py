"""Generators for tests/datasets/test_datasets.py, importable by worker processes (light imports)."""

import multiprocessing
import os
import pathlib
import time

import numpy as np


def flag_controlled(params, seed, flag=""):
    """``{"y": 2 x}``; raises for ``x > 0.5`` while the file ``flag`` exists (a condition fixed later)."""
    if flag and pathlib.Path(flag).exists() and params["x"] > 0.5:
        raise RuntimeError(f"x = {params['x']} > 0.5 fails while {flag} exists")
    return {"y": np.float64(2.0 * params["x"])}


def fails_first_attempt(params, seed, marks=""):
    """Raises at the first attempt of each sample (marked by a file in ``marks``), succeeds after."""
    mark = pathlib.Path(marks) / str(seed)
    if not mark.exists():
        mark.touch()
        raise RuntimeError(f"first attempt of the sample with seed {seed}")
    return {"y": np.float64(params["x"])}


def nonfinite_while_flagged(params, seed, flag=""):
    """``{"y": x, "z": [x, 0, 1]}``; for ``x > 0.5``, while the file ``flag`` exists, ``y`` is NaN and ``z``
    holds an infinity (a calculation that diverges until it is fixed)."""
    x = params["x"]
    broken = bool(flag) and pathlib.Path(flag).exists() and x > 0.5
    return {"y": np.float64(np.nan if broken else x), "z": np.array([x, np.inf if broken else 0.0, 1.0])}


def logged(params, seed, log="", delay=0.0, extra_key=False):
    """Appends the seed to the file ``log``, sleeps ``delay`` s, returns ``{"y": x}`` (and ``"z"``)."""
    with open(log, "a") as handle:
        handle.write(f"{seed}\n")
    time.sleep(delay)
    result = {"y": np.float64(params["x"])}
    if extra_key:
        result["z"] = np.float64(0.0)
    return result


def not_on_workers(params, seed):
    """``{"y": x}`` in the process that loads the recipe; on a worker process it cannot even be imported."""
    return {"y": np.float64(params["x"])}


if multiprocessing.parent_process() is not None and os.environ.get("GENERATOR_ONLY_ON_HEAD") == "1":
    raise ImportError("dataset_generators: a package this module needs is missing on this worker")


def sized(params, seed, size_file=""):
    """``{"y": x * ones(n)}`` with ``n`` read from the file ``size_file`` (an output that can change)."""
    return {"y": np.full(int(pathlib.Path(size_file).read_text()), params["x"])}
