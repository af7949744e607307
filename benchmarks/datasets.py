"""Throughput of the dataset runner on the shipped xTB recipe: 2 workers against a plain loop per core.

The recipe is ``datasets/ethanol_xtb_small.toml`` (``mindsponge.labels:xtb_sample``: a 20-step
GFN2-xTB Langevin MD of ethanol with tblite, then its energy and forces; about 0.15 s per
sample on one core), with its sample count replaced. All runs happen in this script:

* plain loop: ``xtb_sample(params, seed, **options)`` for ``2 N`` samples in this process,
  under a budget of one thread (:func:`common.threads.thread_budget`), results kept in
  memory; the generator is imported and called once before the clock starts. This is one
  core's rate.
* runner: ``common.datasets.generate(recipe, workers=2, threads=1)`` into a fresh HDF5 file,
  once with ``N`` and once with ``2 N`` samples, everything a user waits for included (pool
  start-up, each worker importing torch, tblite and the generator, the first-sample check,
  the HDF5 appends).

Each worker's start-up (importing torch and tblite) costs seconds, as much as tens of samples,
whatever the thread budget. So two ratios are printed: the whole ``2 N`` run against the plain
loop (start-up included: it approaches 1 only for long runs), and, last, the throughput once
running, ``N / (t(2 N) - t(N))`` (the start-up cancels), against twice the plain loop's rate.
1.0 means two workers give twice one core's throughput; the goal is at least 0.9. N must be
large enough that the work of N samples (about 0.045 s each) outweighs the variation of the
start-up between the two runs (seconds): with N = 64 the difference measured 0.50, with the
default N = 512 it measured 1.08 and 1.11 in two runs on an idle 2-core machine. Without a
thread budget (``--oversubscribed``: each worker with as many threads as cores, the behaviour
before ``common.threads``) the shipped 16-sample recipe took 85-107 s on a 2-core machine
instead of 1.4 s.

Usage::

    .venv/bin/python benchmarks/datasets.py [--samples N] [--oversubscribed]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import tempfile
import time

from common import datasets, threads

RECIPE = pathlib.Path(__file__).resolve().parents[1] / "datasets" / "ethanol_xtb_small.toml"
WORKERS = 2


def benchmark_recipe(samples: int) -> datasets.Recipe:
    """The shipped small xTB recipe with ``samples`` samples (same generator, options, sampling seed)."""
    text = RECIPE.read_text()
    if "n = 16" not in text:
        raise RuntimeError(f"{RECIPE} changed: update the sample count replacement in {__file__}")
    return datasets.loads_recipe(text.replace("n = 16", f"n = {samples}"), filename=str(RECIPE))


def plain_loop(recipe: datasets.Recipe) -> float:
    """Seconds for calling the generator on every sample in this process, with one thread."""
    from mindsponge.labels import xtb_sample

    parameters = datasets.sample_parameters(recipe)
    options = recipe.generator.options
    with threads.thread_budget(1):
        xtb_sample(parameters[0], 0, **options)  # imports and first-call set-up, off the clock
        start = time.perf_counter()
        results = [
            xtb_sample(values, datasets.sample_seed(recipe.sampling.seed, index), **options)
            for index, values in enumerate(parameters)
        ]
        elapsed = time.perf_counter() - start
    assert len(results) == len(parameters)
    return elapsed


def runner(recipe: datasets.Recipe, output: pathlib.Path, threads_per_worker: int) -> float:
    """Seconds for ``datasets.generate`` with 2 local workers into a fresh file (all samples must succeed)."""
    start = time.perf_counter()
    summary = datasets.generate(
        recipe, output=output, workers=WORKERS, threads=threads_per_worker, progress=False
    )
    elapsed = time.perf_counter() - start
    assert (summary.succeeded, summary.failed) == (recipe.n_samples, 0), summary
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--samples", type=int, default=512, help="N: runs of N and 2 N samples (default 512)"
    )
    parser.add_argument(
        "--oversubscribed",
        action="store_true",
        help="also run 16 samples with as many threads per worker as cores (slow: what the budget fixes)",
    )
    arguments = parser.parse_args()
    samples = arguments.samples
    cores = threads.available_cores()
    print(
        f"{RECIPE.name}: {samples} and {2 * samples} samples of mindsponge.labels:xtb_sample, "
        f"{WORKERS} workers, {cores} cores, load average {os.getloadavg()[0]:.1f}"
    )
    loop_seconds = plain_loop(benchmark_recipe(2 * samples))
    with tempfile.TemporaryDirectory() as directory:
        folder = pathlib.Path(directory)
        short = runner(benchmark_recipe(samples), folder / "short.h5", threads_per_worker=1)
        long = runner(benchmark_recipe(2 * samples), folder / "long.h5", threads_per_worker=1)
        oversubscribed = None
        if arguments.oversubscribed:
            oversubscribed = runner(benchmark_recipe(16), folder / "over.h5", threads_per_worker=cores)
    loop_rate = 2 * samples / loop_seconds
    running_rate = samples / (long - short) if long > short else float("nan")
    rows = [
        (f"plain loop, 1 thread, {2 * samples} samples", loop_seconds, loop_rate),
        (f"runner, {WORKERS} x 1 thread, {samples} samples", short, samples / short),
        (f"runner, {WORKERS} x 1 thread, {2 * samples} samples", long, 2 * samples / long),
        ("runner once running (the difference)", long - short, running_rate),
    ]
    if oversubscribed is not None:
        rows.append((f"runner, {WORKERS} x {cores} threads, 16 samples", oversubscribed, 16 / oversubscribed))
    for name, seconds, rate in rows:
        print(f"  {name:42s} {seconds:8.2f} s  {rate:7.2f} samples/s")
    print(f"  start-up of the runner (t(N) - N / running rate): {short - samples / running_rate:.2f} s")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print(
        f"ratio with start-up: rate(2 workers, {2 * samples} samples) / (2 x plain loop rate) = "
        f"{2 * samples / long / (2 * loop_rate):.2f}"
    )
    print(
        "ratio: rate(2 workers, once running) / (2 x rate(plain loop per core)) = "
        f"{running_rate / (2 * loop_rate):.2f}"
    )


if __name__ == "__main__":
    main()
