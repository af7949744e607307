"""Command line: ``python -m mindsponge.active CONFIG.toml [--max-rounds N] [--plot FILE] [--quiet]``.

Runs (or resumes) the active-learning loop of the configuration and prints one line per round.
Exit status 0 when the loop converged (a round's exploration flagged no frame), 1 when it stopped
at the largest number of rounds, 2 for an invalid configuration.
"""

import argparse
import sys

from common import config as config_module


def main(argv=None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m mindsponge.active",
        description="Active learning of a learned potential (committee + GFN-xTB).",
    )
    parser.add_argument(
        "config", help="the run's TOML configuration (see mindsponge.active.ActiveLearningConfig)"
    )
    parser.add_argument("--max-rounds", type=int, default=None, help="override max_rounds")
    parser.add_argument("--plot", default=None, help="save the uncertainty plot to this image file")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    arguments = parser.parse_args(argv)

    from mindsponge.active import ActiveLearning, load_config, plot_rounds

    try:
        config, base = load_config(arguments.config)
    except (config_module.ConfigError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    run = ActiveLearning(config, base, progress=not arguments.quiet)
    records = run.run(arguments.max_rounds)
    for record in records:
        print(
            ", ".join(
                f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
                for key, value in record.items()
            )
        )
    print(f"log: {run.directory / 'rounds.csv'}")
    if arguments.plot:
        explored = {
            record["round"]: run.exploration(record["round"])["disagreement"]
            for record in records
            if record["explored_frames"]
        }
        plot_rounds(records, explored, config.selection.threshold, arguments.plot)
    return 0 if records[-1]["converged"] else 1


if __name__ == "__main__":
    sys.exit(main())
