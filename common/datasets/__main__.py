"""Command line: ``python -m common.datasets generate RECIPE [--workers N] [--scheduler ADDRESS]``.

Also ``--limit K`` (only sample ids < K), ``--output PATH``, ``--quiet``; ``validate RECIPE`` checks only.
"""

import argparse
import sys

from common import config


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 done, 2 invalid recipe or arguments)."""
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
    summary = generate(
        recipe,
        output=arguments.output,
        workers=arguments.workers,
        scheduler=arguments.scheduler,
        limit=arguments.limit,
        progress=not arguments.quiet,
    )
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
