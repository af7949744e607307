"""Throughput of the dataset runner (common.datasets.generate) against a plain loop over the generator.

The generator is ``common.datasets.examples.damped_oscillator`` with ``integrate=True``: one
``scipy.integrate.solve_ivp`` (DOP853, rtol 1e-10) per sample, a few milliseconds of pure
CPU work, the cost profile of a small simulation. All runs happen in this script, one
after the other, on the same samples (datasets/oscillator.toml with N samples and
``integrate = true``):

* plain loop: ``damped_oscillator(params, seed, **options)`` for every sample in this
  process, results kept in memory (no file): the floor any runner is measured against;
* runner, in process (``workers=0``): the same calls plus validation, the HDF5 append of
  every sample (flushed), the progress bookkeeping: the runner's overhead;
* runner with a local process pool of 1 and 2 workers (pool start-up included: that is
  what a user waits for); 2 workers against 1 gives the scaling efficiency;
* runner on a Dask ``LocalCluster`` of 2 single-threaded worker processes (cluster
  start-up excluded, as a cluster is usually running already).

Ratios (printed last): runner overhead = in-process runner time / plain loop time (1.0
means no overhead); scaling efficiency = rate(2 workers) / (2 x rate(1 worker)); Dask
against the local pool at 2 workers. The machine's load average is printed too: on a
shared 2-core machine the 2-worker numbers depend on what else runs.

Usage::

    .venv/bin/python benchmarks/datasets.py [--quick] [--samples N] [--no-dask]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import tempfile
import time

from common import datasets
from common.datasets.examples import damped_oscillator

SHIPPED_RECIPE = pathlib.Path(__file__).resolve().parents[1] / "datasets" / "oscillator.toml"
SHIPPED_OPTIONS = "options = { n_times = 128, duration = 10.0, noise = 0.01 }"
OPTIONS = "options = { n_times = 256, duration = 10.0, integrate = true }"


def benchmark_recipe(samples: int) -> datasets.Recipe:
    """The shipped oscillator recipe with ``samples`` samples, integrating numerically."""
    text = SHIPPED_RECIPE.read_text()
    if SHIPPED_OPTIONS not in text or "n = 4096" not in text:
        raise RuntimeError(f"{SHIPPED_RECIPE} changed: update SHIPPED_OPTIONS / n in {__file__}")
    return datasets.loads_recipe(text.replace(SHIPPED_OPTIONS, OPTIONS).replace("n = 4096", f"n = {samples}"))


def plain_loop(recipe) -> float:
    """Seconds for calling the generator on every sample in this process."""
    parameters = datasets.sample_parameters(recipe)
    start = time.perf_counter()
    results = [
        damped_oscillator(
            values, datasets.sample_seed(recipe.sampling.seed, index), **recipe.generator.options
        )
        for index, values in enumerate(parameters)
    ]
    elapsed = time.perf_counter() - start
    assert len(results) == len(parameters)
    return elapsed


def runner(recipe, folder: pathlib.Path, label: str, **executor) -> float:
    """Seconds for ``datasets.generate`` into a fresh file (all samples must succeed)."""
    start = time.perf_counter()
    summary = datasets.generate(recipe, output=folder / f"{label}.h5", progress=False, **executor)
    elapsed = time.perf_counter() - start
    assert (summary.succeeded, summary.failed) == (recipe.n_samples, 0), summary
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 samples, one repeat")
    parser.add_argument("--samples", type=int, default=None, help="samples per run (default 400, quick 64)")
    parser.add_argument("--no-dask", action="store_true", help="skip the Dask LocalCluster run")
    arguments = parser.parse_args()
    samples = arguments.samples or (64 if arguments.quick else 400)
    repeats = 1 if arguments.quick else 2
    recipe = benchmark_recipe(samples)

    print(
        f"damped_oscillator (solve_ivp, {recipe.generator.options['n_times']} points), {samples} samples, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, best of {repeats}"
    )
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as directory:
        folder = pathlib.Path(directory)
        variants = {
            "runner, in process": {"workers": 0},
            "runner, 1 worker": {"workers": 1},
            "runner, 2 workers": {"workers": 2},
        }
        for repeat in range(repeats):  # interleaved, so load changes hit every variant alike
            times["plain loop"] = min(times.get("plain loop", float("inf")), plain_loop(recipe))
            for name, executor in variants.items():
                elapsed = runner(recipe, folder, f"{name}{repeat}", **executor)
                times[name] = min(times.get(name, float("inf")), elapsed)
        if not arguments.no_dask:
            import distributed

            with distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster:
                address = cluster.scheduler_address
                runner(recipe, folder, "dask_warmup", scheduler=address)  # workers import the generator
                for repeat in range(repeats):
                    elapsed = runner(recipe, folder, f"dask{repeat}", scheduler=address)
                    times["runner, Dask 2 workers"] = min(
                        times.get("runner, Dask 2 workers", float("inf")), elapsed
                    )
    rates = {name: samples / seconds for name, seconds in times.items()}
    for name, seconds in times.items():
        print(f"  {name:24s} {seconds:8.3f} s  {rates[name]:9.1f} samples/s")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    ratios = [
        f"runner overhead (in-process runner / plain loop time) = "
        f"{times['runner, in process'] / times['plain loop']:.2f}",
        f"scaling efficiency (rate with 2 workers / twice the rate with 1) = "
        f"{rates['runner, 2 workers'] / (2 * rates['runner, 1 worker']):.2f}",
        f"local pool 1 worker / plain loop rate = {rates['runner, 1 worker'] / rates['plain loop']:.2f}",
    ]
    if "runner, Dask 2 workers" in rates:
        ratios.append(
            f"Dask LocalCluster / local pool rate at 2 workers = "
            f"{rates['runner, Dask 2 workers'] / rates['runner, 2 workers']:.2f}"
        )
    print("ratios: " + "; ".join(ratios))


if __name__ == "__main__":
    main()
