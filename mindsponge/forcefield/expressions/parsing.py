"""Reading an OpenMM (Lepton) expression: its parts, and each part as a sympy tree.

An expression is an energy followed by optional ``; name = value`` definitions
(:func:`split_parts`); each part is parsed with sympy (:func:`parse_part`), ``^`` being the
power as in Lepton. Every identifier is renamed before sympy sees it, so that names sympy
knows (``E``, ``I``, ``beta``, ``gamma``...) stay plain symbols and functions of the
expression's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import sympy
from sympy.parsing.sympy_parser import convert_xor, parse_expr, standard_transformations

from mindsponge.forcefield.expressions.language import ExpressionError

_IDENTIFIER = re.compile(r"(?<![\w.])([A-Za-z_]\w*)(\s*\()?")
_ALLOWED_TEXT = re.compile(r"^[\w\s.+\-*/^(),]*$")


def split_parts(expression: str, context: str) -> tuple[str, list[str], list[str]]:
    """The energy part of ``expression`` and the names and bodies of its definitions, in order.

    Raises:
        ExpressionError: no energy before the first ``;``, or a definition not ``name = value``.
    """
    parts = [part.strip() for part in expression.split(";")]
    primary, definition_texts = parts[0], [part for part in parts[1:] if part]
    if not primary:
        raise ExpressionError(f"{context}: expression {expression!r} has no energy before its first ';'")
    names: list[str] = []
    bodies: list[str] = []
    for text in definition_texts:
        name, equals, body = text.partition("=")
        if not equals or not name.strip() or not body.strip():
            raise ExpressionError(
                f"{context}: expression {expression!r}: the part {text!r} after ';' must be 'name = value'"
            )
        names.append(name.strip())
        bodies.append(body.strip())
    return primary, names, bodies


def parse_part(text: str, error: Callable[[str], ExpressionError]):
    """The sympy tree of one part; ``error(what)`` makes the exception raised for bad text."""
    if not _ALLOWED_TEXT.match(text) or "**" in text:
        raise error(
            f"{text!r} holds characters outside OpenMM's expression language "
            "(names, numbers, + - * / ^, parentheses and commas)"
        )
    local: dict[str, object] = {}
    renamed: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        name, call = match.group(1), match.group(2)
        key = (name, bool(call))
        if key not in renamed:
            safe = f"{'f' if call else 'v'}{len(renamed)}_"
            renamed[key] = safe
            local[safe] = sympy.Function(name) if call else sympy.Symbol(name)
        return renamed[key] + ("(" if call else "")

    try:
        tree = parse_expr(
            _IDENTIFIER.sub(rename, text),
            local_dict=local,
            transformations=standard_transformations + (convert_xor,),
        )
    except Exception as exception:  # sympy raises SyntaxError, TokenError, TypeError...
        raise error(f"cannot parse {text!r}: {exception}") from exception
    return tree
