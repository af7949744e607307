"""Run configurations: TOML files loaded into dataclasses, validated once at the edge.

A configuration schema is a plain dataclass whose fields may be scalars (``bool``,
``int``, ``float``, ``str``, ``pathlib.Path``), ``Literal`` choices, ``Enum``s,
``Optional``/unions, ``list``/``tuple``/``dict`` of those, and nested dataclasses.
A TOML table maps to a nested dataclass field and an array of tables (``[[name]]``)
to a ``list`` of dataclasses. Fields with defaults may be omitted; an ``int`` is
accepted where a ``float`` is expected. A dataclass ``__post_init__`` may validate
further by raising ``ValueError``: the error is reported with the key and line.

Every problem raises :class:`ConfigError` (a ``ValueError``) whose message names the
file, the line, the table and the key, e.g.::

    run.toml:4: [grid] key 'nam': unknown key; expected one of name, size, resolution

``tomllib`` gives no source positions, so lines are found by scanning the text for
table headers and ``key =`` lines (a key inside an inline table is reported at the
line of that inline table).

Example:
    >>> from dataclasses import dataclass, field
    >>> from typing import Literal
    >>> @dataclass
    ... class Grid:
    ...     size: tuple[float, float]
    ...     resolution: float = 1e-5
    >>> @dataclass
    ... class Run:
    ...     grid: Grid
    ...     solver: Literal["fdtd", "fdfd"] = "fdtd"
    ...     steps: list[int] = field(default_factory=list)
    >>> run = loads('[grid]\\nsize = [1, 2e-3]\\n', Run)
    >>> run.grid.size
    (1.0, 0.002)
    >>> to_dict(run)
    {'grid': {'size': [1.0, 0.002], 'resolution': 1e-05}, 'solver': 'fdtd', 'steps': []}
"""

import dataclasses
import datetime
import difflib
import enum
import json
import math
import pathlib
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

import tomllib

from common.errors import ArgumentTypeError, ConfigurationError, MissingFileError

__all__ = ["ConfigError", "load", "loads", "from_dict", "to_dict", "dump", "dumps", "key_error"]

KeyPath = tuple  # tuple[str | int, ...]: table names, keys and (0-based) list indices


class ConfigError(ConfigurationError):
    """A configuration that cannot be loaded: bad TOML, unknown key, wrong type, bad value.

    Attributes:
        filename: the file (or ``"<string>"``) the configuration came from.
        line: 1-based line of the offending key or table, or None if it has none
            (e.g. a missing top-level key).
        key_path: the path to the key, e.g. ``("sources", 1, "position")``.
        reason: what is wrong, without the location.
    """

    def __init__(
        self, reason: str, filename: str = "<string>", line: int | None = None, key_path: KeyPath = ()
    ):
        self.reason = reason
        self.filename = filename
        self.line = line
        self.key_path = tuple(key_path)
        location = filename if line is None else f"{filename}:{line}"
        super().__init__(f"{location}: {_describe_path(self.key_path)}{reason}")


def load(source: str | pathlib.Path, schema: type) -> Any:
    """Load a TOML file into an instance of the dataclass ``schema``.

    Args:
        source: path of the TOML file.
        schema: a dataclass type; TOML tables map to its nested dataclass fields.

    Returns:
        An instance of ``schema``.

    Raises:
        FileNotFoundError: if ``source`` does not exist.
        ConfigError: if the file is not valid TOML or does not match ``schema``; the
            message names the file, line, table and key.
        TypeError: if ``schema`` is not a dataclass type.
    """
    path = pathlib.Path(source)
    if not path.is_file():
        raise MissingFileError(f"configuration file {str(path)!r} does not exist or is not a file")
    return loads(path.read_text(encoding="utf-8"), schema, filename=str(path))


def loads(text: str, schema: type, filename: str = "<string>") -> Any:
    """Load TOML ``text`` into an instance of the dataclass ``schema``.

    Args:
        text: the TOML document.
        schema: a dataclass type.
        filename: name used in error messages.

    Returns:
        An instance of ``schema``.

    Raises:
        ConfigError: on a TOML syntax error (with its line) or a mismatch with ``schema``.
        TypeError: if ``schema`` is not a dataclass type or ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise ArgumentTypeError(f"loads: text must be a str holding TOML, got {type(text).__name__}")
    _check_schema(schema)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        match = re.search(r"\(at line (\d+), column (\d+)\)", message)
        if match is None:
            raise ConfigError(f"TOML syntax error: {message}", filename) from None
        reason = message[: match.start()].strip()
        raise ConfigError(
            f"TOML syntax error: {reason} (column {match.group(2)})", filename, int(match.group(1))
        ) from None
    return _Converter(filename, _LineIndex(text)).convert(data, schema, ())


def key_error(source: str | pathlib.Path, key_path: KeyPath, reason: str) -> ConfigError:
    """A :class:`ConfigError` for a check made after loading, naming the file, line and key.

    For values only the caller can judge (an output folder outside the configuration's folder,
    a setting the built system cannot take): the line is that of ``key_path`` in the file, or of
    its table when the key was left to its default (``None`` if the file cannot be read).

    Args:
        source: the configuration file, as passed to :func:`load` (it is named as given).
        key_path: the key, e.g. ``("output", "directory")`` or ``("structures", 1, "radius")``.
        reason: what is wrong and what is expected, without the location.

    Returns:
        The error, to be raised by the caller.
    """
    try:
        lines = _LineIndex(pathlib.Path(source).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        lines = None
    return _Converter(str(source), lines).error(reason, tuple(key_path))


def from_dict(data: Mapping[str, Any], schema: type, filename: str = "<dict>") -> Any:
    """Build an instance of the dataclass ``schema`` from a nested mapping (as ``tomllib`` returns).

    The same validation as :func:`loads` applies; errors name the key but no line.

    Args:
        data: nested mapping of TOML-like values.
        schema: a dataclass type.
        filename: name used in error messages.

    Returns:
        An instance of ``schema``.
    """
    _check_schema(schema)
    return _Converter(filename, None).convert(data, schema, ())


def to_dict(instance: Any) -> dict[str, Any]:
    """The resolved configuration as plain JSON/TOML-compatible data.

    Dataclasses become dicts (in field order), tuples become lists, paths become
    strings, enums their values; ``None`` is kept (JSON null). Suitable for
    ``json.dumps`` and for provenance records.

    Args:
        instance: a dataclass instance.

    Returns:
        A nested dict.
    """
    if not dataclasses.is_dataclass(instance) or isinstance(instance, type):
        raise ArgumentTypeError(f"to_dict: expected a dataclass instance, got {type(instance).__name__}")
    return _plain(instance)


def dumps(instance: Any) -> str:
    """Write a dataclass instance (or a nested dict) as TOML text that :func:`loads` reads back.

    Keys whose value is ``None`` are left out (TOML has no null; such fields are
    expected to default to ``None``).

    Args:
        instance: a dataclass instance or a mapping with string keys.

    Returns:
        The TOML document.
    """
    data = to_dict(instance) if dataclasses.is_dataclass(instance) else _plain(instance)
    if not isinstance(data, dict):
        raise ArgumentTypeError(
            f"dumps: expected a dataclass instance or a dict, got {type(instance).__name__}")
    lines: list[str] = []
    _write_table(data, (), lines, header=None)
    return "\n".join(lines).lstrip("\n") + "\n"


def dump(instance: Any, path: str | pathlib.Path) -> None:
    """Write :func:`dumps` of ``instance`` to the file ``path`` (UTF-8)."""
    pathlib.Path(path).write_text(dumps(instance), encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# conversion


def _check_schema(schema: Any) -> None:
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        raise ArgumentTypeError(f"schema must be a dataclass type, got {schema!r}")


def _describe_path(path: KeyPath) -> str:
    """``("grid", "size", 2)`` -> ``"[grid] key 'size[2]': "``; the empty path -> ``""``."""
    if not path:
        return ""
    # the key is the last name together with the list indices that follow it
    split = len(path) - 1
    while split > 0 and isinstance(path[split], int):
        split -= 1
    table, key = _join(path[:split]), _join(path[split:])
    return (f"[{table}] " if table else "") + f"key '{key}': "


def _join(parts: KeyPath) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else json.dumps(part)
            text += f".{name}" if text else name
    return text


def _type_name(annotation: Any) -> str:
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        if dataclasses.is_dataclass(annotation):
            return f"table ({annotation.__name__})"
        return annotation.__name__
    return repr(annotation).replace("typing.", "").replace("NoneType", "None")


def _show_value(value: Any) -> str:
    kind = {dict: "table", list: "array"}.get(type(value), type(value).__name__)
    if isinstance(value, dict):
        return kind
    text = repr(value)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


class _Converter:
    """Converts TOML data to typed values, raising ConfigError with file and line."""

    def __init__(self, filename: str, line_index: "_LineIndex | None"):
        self.filename = filename
        self.line_index = line_index

    def error(self, reason: str, path: KeyPath) -> ConfigError:
        line = self.line_index.line_of(path) if self.line_index is not None else None
        return ConfigError(reason, self.filename, line, path)

    def convert(self, value: Any, annotation: Any, path: KeyPath) -> Any:
        if annotation is Any or annotation is object:
            return value
        origin = typing.get_origin(annotation)
        arguments = typing.get_args(annotation)
        if origin is typing.Union or origin is types.UnionType:
            return self._union(value, annotation, arguments, path)
        if origin is typing.Literal:
            if any(_same_value(value, choice) for choice in arguments):
                return value
            choices = ", ".join(repr(choice) for choice in arguments)
            raise self.error(f"{value!r} is not one of the choices {choices}", path)
        if origin in (list, tuple, dict) or annotation in (list, tuple, dict):
            return self._container(value, annotation, origin or annotation, arguments, path)
        if isinstance(annotation, type):
            if dataclasses.is_dataclass(annotation):
                return self._dataclass(value, annotation, path)
            if issubclass(annotation, enum.Enum):
                return self._enum(value, annotation, path)
            return self._scalar(value, annotation, path)
        raise ArgumentTypeError(
            f"configuration schema: unsupported annotation {annotation!r} at {_join(path)}")

    def _union(self, value: Any, annotation: Any, arguments: tuple, path: KeyPath) -> Any:
        if value is None and type(None) in arguments:
            return None
        # an exact scalar match first, so that `int | float` keeps ints and `float | str` keeps strings
        if type(value) in arguments and type(value) in (bool, int, float, str):
            return value
        errors = []
        for member in arguments:
            if member is type(None):
                continue
            try:
                return self.convert(value, member, path)
            except ConfigError as error:
                errors.append(error)
        # the alternative that got furthest into the value (e.g. the right table, a bad key in it)
        deepest = max(errors, key=lambda error: len(error.key_path))
        if len(errors) == 1 or len(deepest.key_path) > len(path):
            raise deepest
        raise self.error(f"expected {_type_name(annotation)}, got {_show_value(value)}", path)

    def _container(self, value: Any, annotation: Any, origin: type, arguments: tuple, path: KeyPath) -> Any:
        if origin is dict:
            if not isinstance(value, dict):
                raise self.error(
                    f"expected {_type_name(annotation)} (a table), got {_show_value(value)}", path
                )
            value_type = arguments[1] if len(arguments) == 2 else Any
            return {key: self.convert(item, value_type, (*path, key)) for key, item in value.items()}
        if not isinstance(value, list):
            raise self.error(f"expected {_type_name(annotation)} (an array), got {_show_value(value)}", path)
        if origin is list:
            item_type = arguments[0] if arguments else Any
            return [self.convert(item, item_type, (*path, index)) for index, item in enumerate(value)]
        if not arguments or (len(arguments) == 2 and arguments[1] is Ellipsis):
            item_type = arguments[0] if arguments else Any
            return tuple(self.convert(item, item_type, (*path, index)) for index, item in enumerate(value))
        if len(value) != len(arguments):
            raise self.error(
                f"expected {_type_name(annotation)} with {len(arguments)} items, "
                f"got {len(value)}: {_show_value(value)}",
                path,
            )
        return tuple(
            self.convert(item, item_type, (*path, index))
            for index, (item, item_type) in enumerate(zip(value, arguments))
        )

    def _enum(self, value: Any, annotation: type[enum.Enum], path: KeyPath) -> enum.Enum:
        for member in annotation:
            if _same_value(value, member.value) or value == member.name:
                return member
        choices = ", ".join(repr(member.value) for member in annotation)
        raise self.error(f"{value!r} is not one of the choices {choices}", path)

    def _scalar(self, value: Any, annotation: type, path: KeyPath) -> Any:
        if annotation is float and type(value) in (int, float):
            return float(value)
        if annotation is pathlib.Path and isinstance(value, str):
            return pathlib.Path(value)
        if annotation is datetime.date and isinstance(value, datetime.datetime):
            raise self.error(f"expected date, got {_show_value(value)}", path)
        if isinstance(value, annotation) and not (isinstance(value, bool) and annotation is not bool):
            return value
        raise self.error(f"expected {_type_name(annotation)}, got {_show_value(value)}", path)

    def _dataclass(self, value: Any, schema: type, path: KeyPath) -> Any:
        if not isinstance(value, dict):
            raise self.error(f"expected {_type_name(schema)}, got {_show_value(value)}", path)
        fields = {field.name: field for field in dataclasses.fields(schema) if field.init}
        hints = _field_types(schema)
        for key in value:
            if key not in fields:
                close = difflib.get_close_matches(key, list(fields), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise self.error(f"unknown key{hint}; expected one of {', '.join(fields)}", (*path, key))
        arguments = {}
        for name, field in fields.items():
            if name in value:
                arguments[name] = self.convert(value[name], hints[name], (*path, name))
            elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise self.error(f"missing required key of type {_type_name(hints[name])}", (*path, name))
        try:
            return schema(**arguments)
        except (ValueError, TypeError) as error:
            # attribute the failure to a key when the message names exactly one of those given
            named = [name for name in arguments if re.search(rf"\b{re.escape(name)}\b", str(error))]
            where = (*path, named[0]) if len(named) == 1 else path
            raise self.error(f"invalid value: {error}", where) from error


def _field_types(schema: type) -> dict[str, Any]:
    """Resolved field annotations of a dataclass (string annotations evaluated in its module)."""
    try:
        return typing.get_type_hints(schema)
    except NameError as error:
        fields = dataclasses.fields(schema)
        if any(isinstance(field.type, str) for field in fields):
            raise ArgumentTypeError(
                f"configuration schema {schema.__qualname__}: cannot resolve the annotation "
                f"{error.name!r}; define the dataclasses it refers to at module level"
            ) from error
        return {field.name: field.type for field in fields}


def _same_value(value: Any, choice: Any) -> bool:
    """Equality that does not confuse True with 1 or 1 with 1.0 in a Literal."""
    return type(value) is type(choice) and value == choice


# ---------------------------------------------------------------------------------------------
# line lookup

_KEY_PART = re.compile(r"""\s*(?:([A-Za-z0-9_-]+)|"((?:[^"\\]|\\.)*)"|'([^']*)')\s*""")


def _parse_keys(text: str, start: int) -> tuple[list[str], int] | None:
    """Parse a dotted key at ``text[start:]``; returns the parts and the end position."""
    parts = []
    position = start
    while True:
        match = _KEY_PART.match(text, position)
        if match is None or match.end() == position:
            return None
        bare, basic, literal = match.groups()
        if basic is not None:
            basic = json.loads(f'"{basic}"') if "\\" in basic else basic
        parts.append(next(part for part in (bare, basic, literal) if part is not None))
        position = match.end()
        if position < len(text) and text[position] == ".":
            position += 1
            continue
        return parts, position


class _LineIndex:
    """Maps key paths (with array-of-tables indices) to the 1-based line defining them."""

    def __init__(self, text: str):
        self.lines: dict[KeyPath, int] = {}
        array_counts: dict[KeyPath, int] = {}
        table: KeyPath = ()
        in_multiline_string = False
        for number, line in enumerate(text.splitlines(), start=1):
            toggles = line.count('"""') + line.count("'''")
            if in_multiline_string:
                in_multiline_string = toggles % 2 == 0
                continue
            stripped = line.lstrip()
            if stripped.startswith("["):
                is_array = stripped.startswith("[[")
                parsed = _parse_keys(stripped, 2 if is_array else 1)
                if parsed is None:
                    continue
                table = ()
                for index, name in enumerate(parsed[0]):
                    table = (*table, name)
                    is_last = index == len(parsed[0]) - 1
                    if is_last and is_array:
                        array_counts[table] = array_counts.get(table, 0) + 1
                    if table in array_counts:
                        table = (*table, array_counts[table] - 1)
                    self.lines.setdefault(table, number)
                continue
            parsed = _parse_keys(line, 0)
            if parsed is not None and parsed[1] < len(line) and line[parsed[1]] == "=":
                key: KeyPath = table
                for name in parsed[0]:
                    key = (*key, name)
                    self.lines.setdefault(key, number)
                in_multiline_string = toggles % 2 == 1

    def line_of(self, path: KeyPath) -> int | None:
        """Line of ``path``, or of its longest defined prefix; None if nothing matches."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None


# ---------------------------------------------------------------------------------------------
# output


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, pathlib.PurePath):
        return str(value)
    return value


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value: Any, path: KeyPath) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item, (*path, index)) for index, item in enumerate(value)) + "]"
    if isinstance(value, dict):
        items = [
            f"{_toml_key(key)} = {_toml_value(item, (*path, key))}"
            for key, item in value.items()
            if item is not None
        ]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise ArgumentTypeError(
        f"dumps: {_join(path)} holds {type(value).__name__} {value!r}, which TOML cannot store")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _write_table(data: dict, path: KeyPath, lines: list[str], header: str | None) -> None:
    if header is not None:
        lines.extend(["", header])
    for key, value in data.items():
        if value is None or isinstance(value, dict) or _is_table_array(value):
            continue
        lines.append(f"{_toml_key(key)} = {_toml_value(value, (*path, key))}")
    for key, value in data.items():
        name = ".".join(_toml_key(part) for part in (*path, key))
        if isinstance(value, dict):
            _write_table(value, (*path, key), lines, f"[{name}]")
        elif _is_table_array(value):
            for item in value:
                _write_table(item, (*path, key), lines, f"[[{name}]]")
