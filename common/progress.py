"""Progress bars that do not flood logs: tqdm on a terminal, rate-limited anywhere else.

A tqdm bar redraws up to ten times a second. On a terminal each redraw overwrites the last;
written to a file or a pipe (the standard error of a batch job, a CI log) every redraw stays,
and a long run leaves tens of kilobytes of bars. :func:`bar` returns a tqdm bar that redraws
at most every ``NON_TERMINAL_INTERVAL`` seconds when standard error is not a terminal (nor a
Jupyter kernel's stream, where tqdm draws a widget), and behaves as plain tqdm otherwise.

Example::

    from common import progress
    with progress.bar(total=steps, enabled=show, unit="step", desc="md") as bar:
        for _ in range(steps):
            ...
            bar.update(1)
"""

from __future__ import annotations

import sys

__all__ = ["NON_TERMINAL_INTERVAL", "bar", "interactive"]

# seconds between redraws when standard error is a file or a pipe
NON_TERMINAL_INTERVAL = 60.0


def interactive(stream=None) -> bool:
    """Whether ``stream`` (default: the current ``sys.stderr``) is a terminal or a Jupyter stream."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        if callable(isatty) and isatty():
            return True
    except ValueError:  # a closed stream
        return False
    return type(stream).__module__.startswith("ipykernel")


def bar(total: int | None = None, enabled: bool = True, **options):
    """A ``tqdm.auto.tqdm`` bar on standard error, rate-limited when that is not a terminal.

    Args:
        total: the number of iterations expected, or ``None``.
        enabled: ``False`` gives a disabled bar (writes nothing).
        options: further tqdm keyword arguments (``desc``, ``unit``, ``leave``...); explicit
            ``mininterval``/``maxinterval`` are kept.

    Returns:
        The tqdm bar (a context manager; ``update(n)`` advances it).
    """
    from tqdm.auto import tqdm

    if enabled and not interactive():
        options.setdefault("mininterval", NON_TERMINAL_INTERVAL)
        # tqdm's monitor thread forces a redraw every maxinterval seconds: not more often either
        options.setdefault("maxinterval", max(NON_TERMINAL_INTERVAL, options["mininterval"]))
    return tqdm(total=total, disable=not enabled, **options)
