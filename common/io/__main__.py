"""``python -m common.io check FILE [FILE ...]``: report what of H5Writer files is intact and recoverable.

Exit status 0 when every file is intact, 1 when one is damaged, 2 for a missing file.
"""

from __future__ import annotations

import argparse
import sys

from common.io.check import check


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m common.io", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check_command = commands.add_parser("check", help="report what is intact and what is recoverable")
    check_command.add_argument("files", nargs="+", help="HDF5 files written by common.io.H5Writer")
    arguments = parser.parse_args(argv)
    status = 0
    for path in arguments.files:
        try:
            report = check(path)
        except FileNotFoundError as error:
            print(error, file=sys.stderr)
            status = max(status, 2)
            continue
        print(report)
        if not report.intact:
            status = max(status, 1)
    return status


if __name__ == "__main__":
    sys.exit(main())
