"""``python -m mindelec run config.toml``: see :mod:`mindelec.cli`."""

import sys

from mindelec.cli import main

if __name__ == "__main__":
    sys.exit(main())
