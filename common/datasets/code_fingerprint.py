"""The code a dataset's generator runs: its module, the modules it imports, and the data packages' versions.

A :class:`CodeFingerprint` holds the SHA-256 of every Python file of that code (by a path
relative to the project or to the generator's folder) and the versions of the packages that
compute and store the data (:data:`DATA_PACKAGES`). The dataset runner stores it in the file
and refuses to resume a file made by other code, naming what changed (see
:mod:`common.datasets.runner`).

Which files (static, deterministic, nothing is imported): starting from the generator's
module, every ``import`` and ``from ... import`` statement of a module's source is followed,
wherever it stands (also inside functions, ``try`` blocks and ``if TYPE_CHECKING:``), as are
``importlib.import_module("name")`` and ``__import__("name")`` calls with a literal name.
``from package import name`` follows ``package.name`` when that is a module; importing
``a.b.c`` also follows the packages ``a`` and ``a.b`` (their ``__init__.py`` runs). A module
is followed when it belongs to the project (the packages :data:`PROJECT_PACKAGES`) or lies
beside the generator: in the folder that holds the generator's top-level module or package
(for a generator ``helpers.make:sample`` in ``/data/gen/helpers/make.py``: ``/data/gen``),
unless that folder is an installation folder (``site-packages``, the standard library).
Other packages are not hashed: their versions stand for them (only those of
:data:`DATA_PACKAGES`).

Not seen: modules imported by a computed name (``import_module(f"mindelec.{name}")``) or
reached as attributes of a package imported whole (``import mindelec; mindelec.sweeps``),
data files a generator reads, and packages outside :data:`DATA_PACKAGES`. Compiled kernels are
seen through their sources: a followed ``_kernels`` package brings the ``.cpp`` and ``.h`` files
beside its ``__init__.py``. A followed import that is never executed still counts: a change there
is reported, which errs on the safe side.
"""

import ast
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import pathlib
import site
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from common.datasets.recipe import generator_module

__all__ = [
    "CodeFingerprint",
    "code_fingerprint",
    "describe_changes",
    "package_versions",
    "PROJECT_PACKAGES",
    "DATA_PACKAGES",
]

PROJECT_PACKAGES = ("common", "mindelec", "mindsponge")
"""This repository's packages: a generator's imports of their modules are hashed."""

DATA_PACKAGES = ("torch", "numpy", "scipy", "h5py", "tblite", "openmm", "rdkit")
"""The packages whose versions a dataset records (those installed): they compute, sample or store the data."""

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
"""The folder holding :data:`PROJECT_PACKAGES`: hashed files under it are named relative to it."""

_MAX_LISTED = 10  # changes named in one message


@dataclasses.dataclass(frozen=True)
class CodeFingerprint:
    """The generator's code files and the versions of the data packages.

    Attributes:
        files: relative path (POSIX) -> SHA-256 hex digest of the file's bytes.
        packages: distribution name -> version, for the installed :data:`DATA_PACKAGES`.
    """

    files: Mapping[str, str]
    packages: Mapping[str, str]

    @property
    def digest(self) -> str:
        """SHA-256 of the files' digests and the versions: equal digests, equal code."""
        content = {"files": dict(self.files), "packages": dict(self.packages)}
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()

    def changes_since(self, earlier: "CodeFingerprint") -> list[str]:
        """What differs from ``earlier``, one phrase per file or package, in a stable order.

        A file changed, added (newly imported) or gone counts; a package whose version changed
        counts, one installed or removed since does not (a generator needing a removed package
        fails to import; one installed since was not used before).
        """
        changes = [
            f"{path} {'changed' if path in self.files else 'no longer imported'}"
            for path in sorted(earlier.files)
            if self.files.get(path) != earlier.files[path]
        ]
        changes += [f"{path} newly imported" for path in sorted(set(self.files) - set(earlier.files))]
        changes += [
            f"{name} {earlier.packages[name]} -> {self.packages[name]}"
            for name in sorted(set(self.packages) & set(earlier.packages))
            if self.packages[name] != earlier.packages[name]
        ]
        return changes

    def attributes(self) -> dict[str, str]:
        """The HDF5 attributes that store it: ``code_files`` and ``package_versions`` (JSON)."""
        return {
            "code_files": json.dumps(dict(self.files), sort_keys=True),
            "package_versions": json.dumps(dict(self.packages), sort_keys=True),
        }

    @classmethod
    def from_attributes(cls, attributes: Mapping[str, Any]) -> "CodeFingerprint | None":
        """The fingerprint stored by :meth:`attributes`; None for a file written without one."""
        if "code_files" not in attributes:
            return None
        return cls(json.loads(attributes["code_files"]), json.loads(attributes.get("package_versions", "{}")))


def describe_changes(changes: list[str]) -> str:
    """The changes as one phrase: ``"a.py changed; numpy 1.0 -> 2.0"`` (the first few, then a count)."""
    shown = "; ".join(changes[:_MAX_LISTED])
    return shown + (f"; and {len(changes) - _MAX_LISTED} more" if len(changes) > _MAX_LISTED else "")


def package_versions() -> dict[str, str]:
    """Version of each installed package of :data:`DATA_PACKAGES`, from its metadata (a source build
    without metadata is imported for its ``__version__``)."""
    versions = {}
    for name in DATA_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if _find_spec(name) is not None:
                versions[name] = str(getattr(importlib.import_module(name), "__version__", "unknown"))
    return versions


def code_fingerprint(function: Callable, reference: str) -> CodeFingerprint:
    """The fingerprint of the code a generator runs (see the module docstring for which files).

    Args:
        function: the generator (as :func:`common.datasets.recipe.resolve_function` gives it).
        reference: its ``"module:callable"`` (names the module when ``function`` has none,
            e.g. a ``functools.partial``).

    Returns:
        A :class:`CodeFingerprint`; its ``files`` are empty for a generator without a
        source file (a builtin).
    """
    module = generator_module(function, reference)
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return CodeFingerprint({}, package_versions())
    path = pathlib.Path(path).resolve()
    walk = _ImportWalk(module.__name__, path)
    files = {_key(file, walk.home): _sha256(file) for file in walk.files()}
    return CodeFingerprint(files, package_versions())


class _ImportWalk:
    """The files followed from one generator module (see the module docstring)."""

    def __init__(self, name: str, path: pathlib.Path):
        self.name, self.path = name, path
        self._specs: dict[str, Any] = {}  # top-level name -> spec, for this walk (sys.path may change)
        self.home = self._home(name.partition(".")[0]) or path.parent

    def files(self) -> list[pathlib.Path]:
        """The generator's file and the files of every module followed from it, sorted."""
        seen = {self.path}
        pending = [(self.name, self.path)]
        while pending:
            module_name, module_path = pending.pop()
            for imported in _imported_names(module_name, module_path):
                for found in self._module_files(imported):
                    if found[1] not in seen:
                        seen.add(found[1])
                        pending.append(found)
        return sorted(seen | set(_kernel_sources(seen)))

    def _module_files(self, name: str) -> Iterator[tuple[str, pathlib.Path]]:
        """``(module name, file)`` of each of ``a``, ``a.b``, ``a.b.c`` for ``name = "a.b.c"`` that is a
        followed Python module (stops at the first part that is not a module: an attribute)."""
        top, *rest = name.split(".")
        if not self._followed(top):
            return
        spec = self._spec(top)
        if spec.origin and spec.origin.endswith(".py"):
            yield top, pathlib.Path(spec.origin).resolve()
        locations = [pathlib.Path(location) for location in spec.submodule_search_locations or ()]
        for index, part in enumerate(rest):
            if not locations:  # the previous part is a plain module: the rest are its attributes
                return
            file, locations = _find_in(locations, part)
            if file is not None:
                yield ".".join([top, *rest[: index + 1]]), file.resolve()

    def _spec(self, top: str) -> Any:
        if top not in self._specs:
            self._specs[top] = _find_spec(top)
        return self._specs[top]

    def _home(self, top: str) -> pathlib.Path | None:
        """The folder holding the top-level module or package ``top``; None if it cannot be found."""
        spec = self._spec(top)
        if spec is None:
            return None
        if spec.submodule_search_locations:
            return pathlib.Path(next(iter(spec.submodule_search_locations))).resolve().parent
        if spec.origin and spec.origin.endswith(".py"):
            return pathlib.Path(spec.origin).resolve().parent
        return None

    def _followed(self, top: str) -> bool:
        """Whether the modules of ``top`` are hashed: the project's, or beside the generator."""
        if top in PROJECT_PACKAGES:
            return self._spec(top) is not None
        return self.home not in _installation_folders() and self._home(top) == self.home


def _kernel_sources(files) -> Iterator[pathlib.Path]:
    """The C++ sources (``.cpp``, ``.h``) beside each ``_kernels/__init__.py`` among ``files``."""
    for file in files:
        if file.name == "__init__.py" and file.parent.name == "_kernels":
            for suffix in ("*.cpp", "*.h"):
                yield from (source.resolve() for source in file.parent.glob(suffix))


def _imported_names(module_name: str, path: pathlib.Path) -> set[str]:
    """The absolute names of the modules (or module attributes) a module's source imports."""
    is_package = path.name == "__init__.py"
    package = module_name if is_package else module_name.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            if base is not None:
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and _literal_import(node) is not None:
            names.add(_literal_import(node))
    return names


def _absolute(module: str | None, level: int, package: str) -> str | None:
    """The absolute name of ``from <level dots><module> import``; None for a relative import past the top."""
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 >= len(parts):
        return None
    anchor = parts[: len(parts) - (level - 1)]
    return ".".join(anchor + ([module] if module else []))


def _literal_import(node: ast.Call) -> str | None:
    """``name`` of ``importlib.import_module("name")`` or ``__import__("name")``; None for other calls."""
    function = node.func
    called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
    if called not in ("import_module", "__import__") or len(node.args) != 1:
        return None
    argument = node.args[0]
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str) and argument.value[:1] != ".":
        return argument.value
    return None


def _find_in(locations: list[pathlib.Path], part: str) -> tuple[pathlib.Path | None, list | None]:
    """The file of submodule ``part`` of a package searched in ``locations``, and where its own
    submodules are (None for a plain module). ``(None, None)``: no such module."""
    namespace = []
    for location in locations:
        package = location / part
        if (package / "__init__.py").is_file():
            return package / "__init__.py", [package]
        if (location / f"{part}.py").is_file():
            return location / f"{part}.py", None
        if package.is_dir():
            namespace.append(package)
    return None, namespace or None


def _find_spec(name: str) -> Any:
    """``importlib.util.find_spec`` of a top-level module (found, not imported); None if absent."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec
        return None


@functools.lru_cache(maxsize=1)
def _installation_folders() -> frozenset[pathlib.Path]:
    """The standard library's and the site-packages folders: other packages there are not the generator's."""
    paths = sysconfig.get_paths()
    folders = [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]
    folders += site.getsitepackages() + [site.getusersitepackages()]
    return frozenset(pathlib.Path(folder).resolve() for folder in folders)


def _key(file: pathlib.Path, home: pathlib.Path) -> str:
    """A hashed file's name: relative to the project's root if under it, else to the generator's folder."""
    for base in (PROJECT_ROOT, home):
        if file.is_relative_to(base):
            return file.relative_to(base).as_posix()
    return file.as_posix()


def _sha256(file: pathlib.Path) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()
