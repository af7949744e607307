"""The reference of a configuration schema: every key, its type, default and description.

A schema is a dataclass as :mod:`common.config` loads it. Each field is documented in its class
docstring's ``Attributes:`` section (Google style), one entry per key, several keys sharing an entry
when written ``low, high: ...``::

    @dataclass
    class Grid:
        \"\"\"The domain.

        Attributes:
            size: domain extent per axis (m).
            cell_size: the edge of a cell (m).
        \"\"\"

:func:`describe` walks nested dataclasses (tables) and lists of dataclasses (arrays of tables), so the
documentation site's configuration pages are generated from the schemas and cannot drift from them;
:func:`undocumented` lists the keys without a description (a test keeps it empty).
"""

import dataclasses
import inspect
import re
import types
import typing
from typing import Any

__all__ = ["KeyReference", "describe", "undocumented", "attribute_descriptions"]

_NAMES = r"(?P<names>[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)"
_ENTRY = re.compile(rf"^{_NAMES}\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")


@dataclasses.dataclass(frozen=True)
class KeyReference:
    """One configuration key.

    Attributes:
        table: the dotted table path (``""`` for top-level keys, ``"integrator"``, ``"sources[]"`` for an
            array of tables, ``"parameters.<name>"`` for a table of named tables).
        key: the key's name in its table.
        type: the accepted type, as text (``float``, ``"PME" | "Ewald"``, ``list[float]``...).
        default: the default as TOML-like text, or ``None`` when the key is required.
        description: the text of the ``Attributes:`` entry, or ``None`` when the key is undocumented.
    """

    table: str
    key: str
    type: str
    default: str | None
    description: str | None


def attribute_descriptions(cls) -> dict[str, str]:
    """The ``Attributes:`` entries of ``cls``'s docstring: key name -> description (one line of text)."""
    lines = (inspect.getdoc(cls) or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        return {}
    descriptions, current, entry_indent = {}, None, None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            break
        entry_indent = indent if entry_indent is None else entry_indent
        match = _ENTRY.match(line.strip()) if indent == entry_indent else None
        if match:
            current = [name.strip() for name in match["names"].split(",")]
            for name in current:
                descriptions[name] = match["text"].strip()
        elif current and indent > entry_indent:
            for name in current:
                descriptions[name] = f"{descriptions[name]} {line.strip()}".strip()
    return descriptions


def _type_text(annotation) -> str:
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(value).replace("'", '"') for value in arguments)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(argument) for argument in arguments if argument is not type(None))
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_text(argument) for argument in arguments)}]"
    if dataclasses.is_dataclass(annotation):
        return "table"
    return getattr(annotation, "__name__", str(annotation))


def _default_text(field: dataclasses.Field) -> str | None:
    if field.default is not dataclasses.MISSING:
        value: Any = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return None
    if dataclasses.is_dataclass(value):
        return "(table with its defaults)"
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str | type(None)) or hasattr(value, "__fspath__"):
        return f'"{value}"'
    return repr(value)


def _nested(annotation):
    """The dataclass a field's annotation holds (a table) and the suffix of its path: ``""`` for one table,
    ``"[]"`` for an array of tables, ``".<name>"`` for a table of named tables."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if dataclasses.is_dataclass(annotation):
        return annotation, ""
    if origin in (list, tuple) and arguments and dataclasses.is_dataclass(arguments[0]):
        return arguments[0], "[]"
    if origin is dict and len(arguments) == 2 and dataclasses.is_dataclass(arguments[1]):
        return arguments[1], ".<name>"
    if origin in (typing.Union, types.UnionType):
        for argument in arguments:
            if dataclasses.is_dataclass(argument):
                return argument, ""
    return None, ""


def describe(schema, table: str = "") -> list[KeyReference]:
    """Every key of the configuration schema ``schema`` (a dataclass), tables after their parent's keys.

    Args:
        schema: the dataclass :func:`common.config.load` fills from a TOML file.
        table: the dotted path of ``schema``'s table (``""`` for the top level).

    Returns:
        One :class:`KeyReference` per key, in declaration order; a nested table's keys follow the key
        that holds it.
    """
    hints = typing.get_type_hints(schema)
    descriptions = attribute_descriptions(schema)
    rows, nested = [], []
    for field in dataclasses.fields(schema):
        if not field.init:  # set by the loader, not a key of the file
            continue
        annotation = hints[field.name]
        rows.append(
            KeyReference(table, field.name, _type_text(annotation), _default_text(field),
                         descriptions.get(field.name))
        )
        child, suffix = _nested(annotation)
        if child is not None:
            path = f"{table}.{field.name}" if table else field.name
            nested.append((child, path + suffix))
    for child, path in nested:
        rows.extend(describe(child, path))
    return rows


def undocumented(schema) -> list[str]:
    """The keys of ``schema`` (dotted paths) whose ``Attributes:`` entry is missing."""
    rows = describe(schema)
    return [f"{row.table}.{row.key}" if row.table else row.key for row in rows if row.description is None]
