"""Build the documentation site: ``python docs/build.py [--output DIR]`` (``make docs``).

1. The tutorial notebooks, executed at their small size (``NOTEBOOK_SIZE=small``). The test suite saves
   the copies it executes into ``build/notebooks`` (``make test``), and so does this script; a copy whose
   recorded source hash matches the notebook is reused, any other notebook is executed (and kept).
2. The API reference: one page per public module, from the docstrings.
3. The configuration references of ``mindsponge run``, ``mindelec run`` and dataset recipes, from the
   schemas (:mod:`common.config_reference`).
4. The validation record (``tests/validation_record.py``: each comparison with a reference, its
   tolerance and, when the tests ran, the measured figure) and the benchmark tables with a plot each
   (``benchmarks/results.toml``).
5. Sphinx, with every warning an error (broken internal links and references included).

Everything generated goes to ``docs/_generated`` (not committed); the site goes to ``docs/_build/html``.
"""

import argparse
import hashlib
import importlib
import json
import os
import pkgutil
import shutil
import sys
import tempfile
import time
from pathlib import Path

import tomllib

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
GENERATED = DOCS / "_generated"
EXECUTED = Path(os.environ.get("MINDSCIENCE_EXECUTED_NOTEBOOKS", ROOT / "build" / "notebooks"))
VALIDATION = Path(os.environ.get("MINDSCIENCE_VALIDATION_RECORD", ROOT / "build" / "validation"))
PACKAGES = ("common", "mindelec", "mindsponge")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

SCHEMAS = [
    ("mindsponge-run", "``mindsponge run`` configuration", "mindsponge.cli:RunConfig",
     "The TOML file of ``mindsponge run CONFIG.toml`` (:mod:`mindsponge.cli`)."),
    ("mindelec-run", "``mindelec run`` configuration", "mindelec.cli:RunConfig",
     "The TOML file of ``mindelec run CONFIG.toml`` (:mod:`mindelec.cli`)."),
    ("dataset-recipe", "Dataset recipes", "common.datasets.recipe:Recipe",
     "The TOML recipes of ``python -m common.datasets`` (:mod:`common.datasets`), as in ``datasets/``."),
]


def source_hash(path: Path) -> str:
    """SHA-256 of a notebook's file, stored in its executed copy to tell whether the copy is current."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def executed_notebooks(target: Path, execute: bool = True) -> list[Path]:
    """Executed copies of ``notebooks/*.ipynb`` in ``target``: reused from the tests' copies when current.

    With ``execute=False`` a notebook without a current executed copy is shown as it is, without outputs.
    """
    import nbclient
    import nbformat

    target.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        digest, cached = source_hash(path), EXECUTED / path.name
        if cached.exists() and nbformat.read(cached, as_version=4).metadata.get("source_sha256") == digest:
            shutil.copyfile(cached, target / path.name)
        elif not execute:
            print(f"{path.name}: no current executed copy, shown without outputs", flush=True)
            notebook = nbformat.read(path, as_version=4)
            notebook.metadata.setdefault("language_info", {"name": "python", "pygments_lexer": "ipython3"})
            nbformat.write(notebook, target / path.name)
        else:
            print(f"executing {path.name} (small size)", flush=True)
            start = time.perf_counter()
            notebook = nbformat.read(path, as_version=4)
            os.environ["NOTEBOOK_SIZE"] = "small"
            os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend: figures become outputs
            client = nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                                             resources={"metadata": {"path": str(path.parent)}})
            # the files a notebook writes (datasets, run folders) go to a fresh folder, as in the tests:
            # none is left in notebooks/, and none left by an earlier run is resumed
            with tempfile.TemporaryDirectory(prefix=f"{path.stem}_") as output:
                os.environ["NOTEBOOK_OUTPUT_DIR"] = output
                client.execute()
            del os.environ["NOTEBOOK_OUTPUT_DIR"]
            notebook.metadata["source_sha256"] = digest
            EXECUTED.mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, cached)  # the next build reuses it
            shutil.copyfile(cached, target / path.name)
            print(f"  {time.perf_counter() - start:.0f} s", flush=True)
        written.append(target / path.name)
    return written


def public_modules() -> list[str]:
    """The importable public modules of the three packages (no ``_private`` parts, no ``__main__``)."""
    names = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        names.append(package)
        for module in pkgutil.walk_packages(root.__path__, package + "."):
            parts = module.name.split(".")
            if any(part.startswith("_") for part in parts[1:]):
                continue
            names.append(module.name)
    return sorted(names)


def public_names(module_name: str) -> list[str]:
    """The names a module documents: its ``__all__``, or its public functions and classes defined there."""
    import inspect

    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return [name for name in module.__all__ if getattr(module, name, None) is not None
                and getattr(getattr(module, name), "__module__", module_name) == module_name]
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
            and value.__module__ == module_name]


def api_pages(target: Path) -> None:
    """One page per public module (its docstring and its own public names) and an index per package."""
    import inspect

    target.mkdir(parents=True, exist_ok=True)
    modules = public_modules()
    for name in modules:
        module = importlib.import_module(name)
        lines = [f"# `{name}`", "", "```{eval-rst}", f".. automodule:: {name}", "   :no-members:", ""]
        for member in public_names(name):  # functions and classes; constants are described by their module
            value = getattr(module, member)
            if inspect.isclass(value) or inspect.isfunction(value):
                kind = "autoclass" if inspect.isclass(value) else "autofunction"
                lines += [f".. {kind}:: {name}.{member}", ""]
        lines += ["```", ""]
        (target / f"{name}.md").write_text("\n".join(lines))
    index = ["# API reference", "", "Every public module, generated from the docstrings (units and shapes "
             "are given there).", ""]
    for package in PACKAGES:
        index += [f"## `{package}`", "", "```{toctree}", ":maxdepth: 1", ""]
        index += [name for name in modules if name == package or name.startswith(package + ".")]
        index += ["```", ""]
    (target / "index.md").write_text("\n".join(index))


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def configuration_pages(target: Path) -> None:
    """The configuration references, one table per TOML table, generated from the schemas."""
    from common.config_reference import describe

    target.mkdir(parents=True, exist_ok=True)
    index = ["# Configuration references", "", "Generated from the configuration schemas, so they list "
             "exactly the keys the loaders accept. An unknown key or a bad value is reported with its "
             "file, line and key.", "", "```{toctree}", ":maxdepth: 1", ""]
    for slug, title, schema_path, summary in SCHEMAS:
        module_name, class_name = schema_path.split(":")
        schema = getattr(importlib.import_module(module_name), class_name)
        lines = [f"# {title}", "", summary, ""]
        table = None
        for row in describe(schema):
            if row.table != table:
                table = row.table
                lines += ["", f"## `[{table}]`" if table else "## Top level", "",
                          "| key | type | default | description |", "|---|---|---|---|"]
            default = "required" if row.default is None else f"`{row.default}`"
            lines.append(f"| `{row.key}` | `{_escape(row.type)}` | {_escape(default)} | "
                         f"{_escape(row.description or '')} |")
        (target / f"{slug}.md").write_text("\n".join(lines) + "\n")
        index.append(slug)
    index += ["```", ""]
    (target / "index.md").write_text("\n".join(index))


def validation_page(target: Path) -> None:
    """The validation record: every registered comparison, with the figures of the last test run."""
    import validation_record

    measured = {}
    for path in sorted(VALIDATION.glob("*.jsonl")) if VALIDATION.exists() else []:
        for line in path.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                measured.setdefault(entry["test"], {})[entry["case"]] = entry["measured"]
    lines = ["# Validation record", "", validation_record.__doc__.strip().split("\n\n")[0], "",
             "Figures come from the last `make test` run on this build machine "
             f"({'found' if measured else 'none found: run `make test` first to fill the last column'}).", ""]
    for area, entries in validation_record.by_area().items():
        lines += [f"## {area}", "", "| comparison | reference | tolerance | measured | test |",
                  "|---|---|---|---|---|"]
        for entry in entries:
            figure = "; ".join(dict.fromkeys(measured.get(entry.test, {}).values()))  # each case once
            cells = (entry.what, entry.reference, entry.tolerance, str(figure))
            lines.append("| " + " | ".join(_escape(cell) for cell in cells) + f" | `{entry.test}` |")
        lines.append("")
    (target / "validation.md").write_text("\n".join(lines))


def benchmark_page(target: Path) -> None:
    """The benchmark tables from ``benchmarks/results.toml``, with a bar chart of the ratios per benchmark."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = tomllib.loads((ROOT / "benchmarks" / "results.toml").read_text())
    figures = target / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    lines = ["# Benchmarks", "", results["about"].strip(), ""]
    for name, benchmark in results["benchmark"].items():
        rows = benchmark["rows"]
        heading = f"## `benchmarks/{benchmark['script']}`: {benchmark['title']}"
        lines += [heading, "", benchmark["note"].strip(), "",
                  "| case | ours | peer | ratio (higher is better) | measured |", "|---|---|---|---|---|"]
        for row in rows:
            lines.append(f"| {_escape(row['case'])} | {row['ours']} | {row['peer']} | {row['ratio']:.3g} | "
                         f"{row['measured']} |")
        figure, axis = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
        axis.barh([row["case"] for row in rows][::-1], [row["ratio"] for row in rows][::-1], color="tab:blue")
        axis.axvline(1.0, color="black", linewidth=1)
        axis.set_xlabel(f"ratio to {benchmark['peer']} (1 = parity)")
        figure.tight_layout()
        figure.savefig(figures / f"{name}.png", dpi=90)
        plt.close(figure)
        lines += ["", f"![{benchmark['title']}](figures/{name}.png)", ""]
    lines += ["```{include} ../benchmarks-measured.md", "```", ""]
    (target / "benchmarks.md").write_text("\n".join(lines))


def main(argv=None) -> int:
    """Generate the pages and build the site; returns Sphinx's exit status."""
    parser = argparse.ArgumentParser(prog="python docs/build.py", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DOCS / "_build" / "html")
    parser.add_argument("--no-execute", action="store_true",
                        help="quick build: notebooks without a current executed copy are shown as they are")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    shutil.rmtree(GENERATED, ignore_errors=True)
    executed_notebooks(GENERATED / "notebooks", execute=not args.no_execute)
    api_pages(GENERATED / "api")
    configuration_pages(GENERATED / "configuration")
    validation_page(GENERATED)
    benchmark_page(GENERATED)
    from sphinx.cmd.build import build_main

    status = build_main(["-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(args.output)])
    print(f"docs: {args.output} ({time.perf_counter() - start:.0f} s, status {status})")
    return status


if __name__ == "__main__":
    sys.exit(main())
