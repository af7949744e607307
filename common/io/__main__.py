"""``python -m common.io check FILE [FILE ...]``: report what of H5Writer files is intact and recoverable.

Each file is checked by :func:`common.io.check.check_bounded`: in a child process with a
time limit (``--timeout``), so that no damaged file can make the command hang or end in a
traceback. The report of each file is printed; a path that is not a file gets one line on
stderr naming it.

Exit status (the worst file's): 0 every file is intact, 1 one is damaged, 2 a path is not a
readable file (missing, a directory, no permission), 3 no verdict within the time limit.
"""

from __future__ import annotations

import argparse
import sys

from common.io.check import EXIT_STATUS, TIMEOUT_SECONDS, TIMEOUT_SECONDS_PER_GB, check_bounded


def _positive_seconds(text: str) -> float:
    """``--timeout``'s value: a positive number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m common.io", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check_command = commands.add_parser("check", help="report what is intact and what is recoverable")
    check_command.add_argument("files", nargs="+", help="HDF5 files written by common.io.H5Writer")
    check_command.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help=f"time limit per file (default {TIMEOUT_SECONDS:g} s plus {TIMEOUT_SECONDS_PER_GB:g} s per GB)",
    )
    arguments = parser.parse_args(argv)
    status = 0
    for path in arguments.files:
        try:
            report = check_bounded(path, arguments.timeout)
        except OSError as error:
            print(f"python -m common.io check: {error}", file=sys.stderr)
            status = max(status, EXIT_STATUS["not a file"])
            continue
        print(report, flush=True)
        status = max(status, report.exit_status)
    return status


if __name__ == "__main__":
    sys.exit(main())
