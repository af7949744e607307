"""Command line: ``python -m common.datasets generate RECIPE [--workers N] [--scheduler ADDRESS]``.

Also ``--limit K`` (only sample ids < K), ``--output PATH``, ``--threads T`` (per worker),
``--retry-failed``, ``--allow-changed-generator``, ``--quiet``; ``validate RECIPE`` checks only
(it imports the recipe's generator module: recipes are trusted code).

Exit status: 0 every requested sample is in the file; 1 some samples failed (listed; rerun
with ``--retry-failed``); 2 nothing ran (invalid recipe or arguments, an output file made by
another recipe or other code: the generator's module, the modules it imports or the data
packages' versions, named in the message; or being written by another run); 3 some samples
could not run because of their workers (not recorded as failed; rerun to do them).
"""

import argparse
import sys

from common import config


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m common.datasets", description="Generate datasets from recipes (datasets/*.toml)."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("generate", help="generate (or resume) the dataset of a recipe")
    run.add_argument("recipe", help="the recipe TOML file")
    run.add_argument("--workers", type=int, default=None, help="local worker processes (default: all cores)")
    run.add_argument("--scheduler", default=None, help="Dask scheduler address, e.g. tcp://host:8786")
    run.add_argument("--limit", type=int, default=None, help="only the samples with id < LIMIT")
    run.add_argument("--output", default=None, help="HDF5 file (default: the recipe's [output] path)")
    run.add_argument(
        "--threads", type=int, default=None, help="threads per worker (default: cores / workers)"
    )
    run.add_argument(
        "--retry-failed", action="store_true", help="run again the samples that failed in earlier runs"
    )
    run.add_argument(
        "--allow-changed-generator",
        action="store_true",
        help="resume a file made by other code: the generator's module, the modules it imports or the "
        "package versions (each run records its fingerprint and what changed)",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    check = commands.add_parser("validate", help="check a recipe without running anything")
    check.add_argument("recipe", help="the recipe TOML file")
    arguments = parser.parse_args(argv)

    from common.datasets import generate, load_recipe, sample_parameters

    try:
        recipe = load_recipe(arguments.recipe)
    except (config.ConfigError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if arguments.command == "validate":
        count = len(sample_parameters(recipe))
        print(f"{arguments.recipe}: valid; {count} samples of {recipe.generator.function}")
        return 0
    try:
        summary = generate(
            recipe,
            output=arguments.output,
            workers=arguments.workers,
            scheduler=arguments.scheduler,
            limit=arguments.limit,
            progress=not arguments.quiet,
            retry_failed=arguments.retry_failed,
            allow_changed_generator=arguments.allow_changed_generator,
            threads=arguments.threads,
        )
    except (ValueError, RuntimeError, OSError) as error:  # refusals: the output file, arguments, busy file
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary)
    return summary.exit_status


if __name__ == "__main__":
    sys.exit(main())
