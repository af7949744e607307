"""The validation record names real tests, and the documentation's completeness checks hold: every public
function, class and method has a docstring, and every configuration key is documented."""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import validation_record

ROOT = Path(__file__).resolve().parent.parent


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    functions = (node for node in tree.body if isinstance(node, ast.FunctionDef))
    return {node.name for node in functions if node.name.startswith("test_")}


@pytest.mark.parametrize("entry", validation_record.RECORD, ids=lambda entry: entry.test.split("::")[1])
def test_record_entry_names_an_existing_test(entry):
    path, name = entry.test.split("::")
    assert (ROOT / path).is_file(), entry
    assert name in _test_functions(ROOT / path), entry
    assert entry.what and entry.reference and entry.tolerance


def _public_modules():
    for package in ("common", "mindelec", "mindsponge"):
        root = importlib.import_module(package)
        yield root
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            parts = info.name.split(".")
            if not any(part.startswith("_") for part in parts[1:]):
                yield importlib.import_module(info.name)


def _undocumented(module):
    for name, value in vars(module).items():
        if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
            continue
        if not (inspect.isfunction(value) or inspect.isclass(value)):
            continue
        if not inspect.getdoc(value):
            yield f"{module.__name__}.{name}"
        if inspect.isclass(value):
            for member, attribute in vars(value).items():
                function = getattr(attribute, "fget", None) or getattr(attribute, "__func__", attribute)
                if member.startswith("_") or not inspect.isfunction(function):
                    continue
                if not (function.__doc__ or inspect.getdoc(getattr(value, member))):
                    yield f"{module.__name__}.{name}.{member}"


def test_every_public_module_function_class_and_method_has_a_docstring():
    missing = [f"{module.__name__} (module)" for module in _public_modules() if not module.__doc__]
    missing += [name for module in _public_modules() for name in _undocumented(module)]
    assert not missing, "no docstring: " + ", ".join(missing)


@pytest.mark.parametrize("schema", ["mindsponge.cli:RunConfig", "mindelec.cli:RunConfig",
                                    "common.datasets.recipe:Recipe"])
def test_every_configuration_key_is_documented(schema):
    from common.config_reference import undocumented

    module, name = schema.split(":")
    assert undocumented(getattr(importlib.import_module(module), name)) == []


def test_config_reference_reads_attribute_sections_and_finds_gaps():
    import dataclasses

    from common.config_reference import describe, undocumented

    @dataclasses.dataclass
    class Inner:
        """A table.

        Attributes:
            low, high: the bounds (m),
                continued here.
        """

        low: float = 0.0
        high: float = 1.0
        forgotten: int = 3

    @dataclasses.dataclass
    class Outer:
        """Top.

        Attributes:
            inner: the inner table.
        """

        inner: list[Inner]

    rows = describe(Outer)
    assert [(row.table, row.key) for row in rows] == [("", "inner"), ("inner[]", "low"), ("inner[]", "high"),
                                                      ("inner[]", "forgotten")]
    assert rows[1].description == "the bounds (m), continued here." and rows[1].default == "0.0"
    assert rows[0].default is None
    assert undocumented(Outer) == ["inner[].forgotten"]
