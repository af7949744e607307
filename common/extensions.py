"""Compiled CPU kernels: build a PyTorch C++ extension lazily, or fall back quietly.

Some inner loops (MD pair kernels, fused FDTD updates) are much faster as a small C++
kernel than as a chain of eager torch operations. This module compiles such a kernel
the first time it is needed, with :func:`torch.utils.cpp_extension.load`, and caches
it. The compiled module is an optimisation only: every caller keeps a complete pure
torch path and uses it whenever :func:`load` returns ``None``, which happens (after
one warning that names the reason) when

- the environment variable ``MINDSCIENCE_NO_EXTENSIONS`` is ``1``;
- torch's extension build is unavailable (no ninja, no C++ compiler);
- a source file is missing or the compilation fails.

Sources are compiled with ``-O3 -march=native -fopenmp`` (the kernel is built on the
machine that runs it). Kernels should parallelise with ``at::parallel_for`` so that
they follow ``torch.set_num_threads``. Builds land in torch's extension directory
(``$TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``), one per
name and source hash, so a machine compiles each kernel once. Two processes that
build the same kernel at once (pytest-xdist workers) serialise on a lock of that
directory; the second one then loads the finished build. The lock is an ``fcntl.flock``,
which the operating system releases when its holder dies, so a process killed while
compiling never makes later runs wait (torch's own lock file, which it would leave
behind, is removed under the lock; without ``fcntl`` one older than
``STALE_LOCK_SECONDS`` is).

Building ahead of time: ``python -m common.extensions build package.module:loader ...`` calls each
loader (a function that returns a kernel module, such as ``mindsponge._kernels:load``) and prints how
long each took; ``make install`` builds the suite's kernels this way, so that the first simulation
does not stop to compile. A kernel compiled on first use says so on standard error first ("compiling
the ... kernel (once per machine, about N s)").

Example::

    from common import extensions
    kernels = extensions.load("md_pair_kernels", [Path(__file__).parent / "pairs.cpp"])
    if kernels is not None:
        energy = kernels.pair_energy(...)
    else:
        energy = pure_torch_pair_energy(...)
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType

from common.errors import ArgumentTypeError

__all__ = ["ExtensionWarning", "build_seconds", "load", "main"]

DEFAULT_CFLAGS = ("-O3", "-march=native", "-fopenmp")
# without fcntl: a torch build lock older than this was left by a killed build (a kernel compiles in
# a few minutes)
STALE_LOCK_SECONDS = 900.0

# wall-clock seconds each kernel took to compile or load in this process, by name
build_seconds: dict[str, float] = {}
# about how long one source file takes to compile on one core, s (torch's headers dominate)
SECONDS_PER_SOURCE = 35.0

_cache: dict[tuple, ModuleType | None] = {}
_warned: set[str] = set()


class ExtensionWarning(UserWarning):
    """A compiled kernel is unavailable; the pure torch path is used instead."""


def _warn_once(name: str, reason: str, stacklevel: int) -> None:
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"compiled kernel {name!r} unavailable ({reason}); using the pure torch path",
                      ExtensionWarning, stacklevel=stacklevel + 1)


def load(name: str, sources: list[str | Path], extra_cflags: tuple = ()) -> ModuleType | None:
    """Compile (once per machine) and import a C++ extension, or return ``None``.

    Args:
        name: the extension's module name, a Python identifier (it must match the
            ``TORCH_EXTENSION_NAME`` the sources bind with ``PYBIND11_MODULE``).
        sources: paths of the ``.cpp`` files.
        extra_cflags: compiler flags added to ``-O3 -march=native -fopenmp``.

    Returns:
        The compiled module, or ``None`` after one :class:`ExtensionWarning` naming the
        reason (extensions disabled by ``MINDSCIENCE_NO_EXTENSIONS=1``, no compiler or
        ninja, a missing source, a failed compilation). The result is cached per
        process; compiler output is shown only in the warning of a failed build.

    Raises:
        TypeError: ``name`` is not an identifier string, ``sources`` is not a list of
            paths, or ``extra_cflags`` is not a tuple of strings.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentTypeError(f"extensions.load: name must be a Python identifier string, got {name!r}")
    if isinstance(sources, (str, Path)) or not all(isinstance(source, (str, Path)) for source in sources):
        raise ArgumentTypeError(
            f"extensions.load({name!r}): sources must be a list of paths, got {sources!r}")
    if not isinstance(extra_cflags, tuple) or not all(isinstance(flag, str) for flag in extra_cflags):
        raise ArgumentTypeError(f"extensions.load({name!r}): extra_cflags must be a tuple of strings, "
                        f"got {extra_cflags!r}")
    if os.environ.get("MINDSCIENCE_NO_EXTENSIONS") == "1":
        _warn_once(name, "MINDSCIENCE_NO_EXTENSIONS=1", stacklevel=2)
        return None
    # kernels are looked up on every call of a hot loop: the key uses the paths as given (resolving
    # them costs tens of microseconds)
    key = (name, tuple(str(source) for source in sources), extra_cflags)
    if key in _cache:
        return _cache[key]
    paths = [str(Path(source).resolve()) for source in sources]
    _cache[key] = module = _build(name, paths, extra_cflags)
    return module


def _build(name: str, paths: list[str], extra_cflags: tuple) -> ModuleType | None:
    missing = [path for path in paths if not Path(path).is_file()]
    if missing:
        _warn_once(name, f"source file not found: {missing[0]}", stacklevel=3)
        return None
    try:
        from torch.utils import cpp_extension

        cpp_extension.verify_ninja_availability()
    except (ImportError, RuntimeError, OSError) as error:
        _warn_once(name, f"torch C++ extension build unavailable: {error}", stacklevel=3)
        return None
    output = io.StringIO()
    start = time.perf_counter()
    if _needs_compiling(cpp_extension, name, paths):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        estimate = SECONDS_PER_SOURCE * len(paths) / min(cores, len(paths))
        print(f"compiling the {name} kernel (once per machine, about {estimate:.0f} s; `make install` "
              "builds it ahead of time)", file=sys.stderr, flush=True)
    try:
        with _build_lock(cpp_extension, name), contextlib.redirect_stdout(output), \
                contextlib.redirect_stderr(output), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = cpp_extension.load(name=name, sources=paths,
                                        extra_cflags=[*DEFAULT_CFLAGS, *extra_cflags],
                                        extra_ldflags=["-fopenmp"], verbose=False)
    except Exception as error:  # noqa: BLE001 - any build failure means: use the fallback
        details = f"{error}\n{output.getvalue()}".strip()
        _warn_once(name, f"compilation failed: {details[-2000:]}", stacklevel=3)
        return None
    build_seconds[name] = time.perf_counter() - start
    return module


def _needs_compiling(cpp_extension, name: str, paths: list[str]) -> bool:
    """Whether loading ``name`` will compile: no built module yet, or a source newer than it."""
    directory = Path(cpp_extension._get_build_directory(name, verbose=False))
    built = sorted(directory.glob(f"{name}*.so"), key=lambda path: path.stat().st_mtime)
    if not built:
        return True
    newest = built[-1].stat().st_mtime
    headers = [path for path in Path(paths[0]).parent.glob("*.h")]
    return any(Path(path).stat().st_mtime > newest for path in [*paths, *headers])


def main(argv: list[str] | None = None) -> int:
    """``python -m common.extensions build MODULE:LOADER ...``: build (or load) each kernel now.

    Returns:
        0 when every loader returned a module, 1 when one returned ``None`` (its warning says why).
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python -m common.extensions",
                                     description="Build the compiled kernels ahead of their first use.")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build kernels: package.module:loader ...")
    build.add_argument("loaders", nargs="+", help="e.g. mindsponge._kernels:load")
    arguments = parser.parse_args(argv)
    status = 0
    for spec in arguments.loaders:
        module_name, _, function_name = spec.partition(":")
        start = time.perf_counter()
        module = getattr(importlib.import_module(module_name), function_name)()
        seconds = time.perf_counter() - start
        verdict = "ready" if module is not None else "UNAVAILABLE (the pure torch path will be used)"
        print(f"{spec}: {verdict} in {seconds:.1f} s")
        status = status if module is not None else 1
    return status


@contextlib.contextmanager
def _build_lock(cpp_extension, name: str):
    """Hold an exclusive lock on the build directory of ``name`` while it compiles or loads.

    torch's own lock is a file whose existence is the lock: a build killed midway leaves it
    behind, and every later build of the kernel waits on it forever. This lock is an
    ``fcntl.flock`` on ``build.lock`` beside it, which the operating system releases when its
    holder dies. Every build here takes it first, so under it torch's lock file can only be a
    killed build's leftover, and it is removed. Without ``fcntl`` (Windows) a torch lock older
    than ``STALE_LOCK_SECONDS`` is removed instead.
    """
    directory = Path(cpp_extension._get_build_directory(name, verbose=False))
    torch_lock = directory / "lock"
    try:
        import fcntl
    except ImportError:
        with contextlib.suppress(OSError):
            if time.time() - torch_lock.stat().st_mtime > STALE_LOCK_SECONDS:
                torch_lock.unlink()
        yield
        return
    with open(directory / "build.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            torch_lock.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


if __name__ == "__main__":
    sys.exit(main())
