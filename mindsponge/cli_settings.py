"""What a resumed ``mindsponge run`` must share with the run it continues.

A run's settings (its configuration, less what may change between a run and its continuation) are
written to ``run_settings.json`` in the output folder when it starts. ``--resume`` compares the
configuration with them: a changed time step, integrator, thermostat, barostat, constraints,
precision, system or force field would continue another simulation from this one's state, so the
resume is refused, listing every change, unless ``--allow-changed-config`` is given (changing ``dt``
after a blow-up is a reason to); the changes are then warned about and kept in the file's
``changes`` list, one entry per resume that changed them.

Free to change: ``steps`` (a resumed run continues up to it), the ``[output]`` table (reporting),
``minimize``, ``minimize_tolerance`` and ``seed`` (used at the start only; a resumed run takes its
random state from the checkpoint).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import warnings

from common.differences import nested_differences
from common.errors import ConfigurationError, DataError

__all__ = ["SETTINGS_FILE", "FREE_TO_CHANGE", "run_settings", "check_resumed_settings"]

SETTINGS_FILE = "run_settings.json"
FREE_TO_CHANGE = ("steps", "output", "minimize", "minimize_tolerance", "seed")


def run_settings(config) -> dict:
    """The settings of a run configuration (a dataclass) as JSON values, less :data:`FREE_TO_CHANGE`."""
    settings = dataclasses.asdict(config)
    for key in FREE_TO_CHANGE:
        settings.pop(key, None)
    return json.loads(json.dumps(settings, default=str))


def check_resumed_settings(path: pathlib.Path, config, resume: bool, allow_changed: bool) -> None:
    """Write the run's settings to ``path`` (a new run), or compare them with the saved ones (a resume).

    Args:
        path: ``run_settings.json`` in the output folder.
        config: the run's configuration (a dataclass).
        resume: the run continues a checkpoint; a folder without the file (a run from before the file
            existed) is not checked.
        allow_changed: accept changed settings (warned about and recorded) instead of refusing them.

    Raises:
        ConfigurationError: a resume whose settings differ, without ``allow_changed`` (every change
            is listed, with the file). DataError: a damaged ``run_settings.json`` (named).
    """
    current = run_settings(config)
    record = {"settings": current, "changes": []}
    if resume and path.is_file():
        try:
            stored = json.loads(path.read_text())
            saved, earlier = stored["settings"], list(stored.get("changes", []))
        except (ValueError, KeyError, TypeError) as error:  # JSONDecodeError is a ValueError
            raise DataError(f"{path}: damaged run settings ({type(error).__name__}: {error}); remove it to "
                            "resume without the check, or start the run again") from error
        changed = nested_differences(saved, current)
        if changed and not allow_changed:
            raise ConfigurationError(
                f"--resume: the configuration differs from the run it continues ({path}): "
                f"{'; '.join(changed)}. "
                f"A resumed run continues the same simulation: restore these settings, or pass "
                f"--allow-changed-config to continue with the new ones (the change is recorded)")
        record["changes"] = earlier
        if changed:
            warnings.warn(f"resuming with changed settings: {'; '.join(changed)}", stacklevel=2)
            record["changes"].append(changed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
