"""What differs between two nested settings (dicts of dicts and values), key path by key path.

Used to tell a user exactly what changed when a run is resumed with other settings
(``mindsponge run --resume``) or a dataset file is resumed with another recipe
(:mod:`common.datasets`)."""

from __future__ import annotations

from typing import Any

__all__ = ["nested_differences"]


def nested_differences(before: Any, after: Any, prefix: str = "") -> list[str]:
    """``"key.path: before -> after"`` for every value that differs between two nested dicts.

    Args:
        before, after: dicts (nested) or values; a key missing on one side reads as ``None``.
        prefix: the key path of ``before`` and ``after`` themselves (empty at the top).

    Returns:
        one line per differing leaf, in sorted key order; empty when they are equal.
    """
    if isinstance(before, dict) and isinstance(after, dict):
        changed = []
        for key in sorted(set(before) | set(after), key=str):
            name = f"{prefix}.{key}" if prefix else str(key)
            changed += nested_differences(before.get(key), after.get(key), name)
        return changed
    return [] if before == after else [f"{prefix or 'value'}: {before!r} -> {after!r}"]
