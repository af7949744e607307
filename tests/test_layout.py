"""The architecture's two written rules, checked on the source: rooms small enough to live in,
and imports that only run downwards (common <- mindelec, common <- mindsponge)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "mindelec", "mindsponge")
MAX_LINES = 600  # "no file in the packages over about 600 lines" (docs/guide/architecture.md)
# what each package may import from the suite
ALLOWED = {"common": {"common"}, "mindelec": {"common", "mindelec"}, "mindsponge": {"common", "mindsponge"}}


def _sources(package, suffixes=(".py",)):
    return sorted(path for path in (ROOT / package).rglob("*") if path.suffix in suffixes)


def _suite_imports(path):
    """The top-level suite packages a module imports (absolute imports; relative ones stay inside)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(name.split(".")[0] for name in names if name.split(".")[0] in PACKAGES)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_the_size_limit(package):
    sources = _sources(package, (".py", ".cpp", ".h"))  # the compiled kernels' sources too
    assert sources, f"no source files found under {package}/"
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in sources}
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines (split them by job): {too_long}"


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_run_one_way(package):
    wrong = {}
    for path in _sources(package):
        outside = _suite_imports(path) - ALLOWED[package]
        if outside:
            wrong[str(path.relative_to(ROOT))] = sorted(outside)
    assert not wrong, f"{package} may import only {sorted(ALLOWED[package])}; these do not: {wrong}"
