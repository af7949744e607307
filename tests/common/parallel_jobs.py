"""Jobs for tests/common/test_parallel.py, in a module without heavy imports (workers import it)."""

import os


def exit_worker_if_negative(value):
    """Kills its worker process for a negative value (like a segfaulting simulation), else squares."""
    if value < 0:
        os._exit(1)
    return value * value
