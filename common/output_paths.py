"""Where a command-line run may write: its output folder and the files in it, kept inside the folder
the user chose, with ``..`` and symbolic links resolved (:meth:`pathlib.Path.resolve`).

``mindsponge run`` and ``mindelec run`` share these rules (one helper, :func:`output_folder`):

* ``[output] directory`` in the configuration is relative to the configuration file's folder and
  must lie inside that folder once resolved: ``"../../x"``, ``"/tmp/x"`` or a symbolic link to a
  folder elsewhere are refused with the file, line and key, before anything is written;
* ``--output DIR`` on the command line (relative to the working directory) replaces it and may be
  anywhere: the person running the command chose it;
* every output file must lie inside the output folder once resolved: a ``log.csv`` (or any other
  output) that is a symbolic link to a file elsewhere is refused, naming its ``[output]`` key.

The checks run before the run writes anything; a link made between the check and the write is
not caught.

Example::

    folder = output_folder("runs/a/run.toml", config.output.directory, command_line=arguments.output)
    log = folder.file(config.output.log, key="log")     # an absolute path inside folder.path
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

from common.config import key_error
from common.errors import ConfigurationError

__all__ = ["OutputFolder", "output_folder"]


@dataclasses.dataclass(frozen=True)
class OutputFolder:
    """The output folder of a run (see the module docstring); make it with :func:`output_folder`.

    Attributes:
        path: the folder, absolute, with symbolic links resolved (it may not exist yet).
        config: the configuration file, as given (named in errors).
        chosen_by: what chose the folder when the configuration's ``[output] directory`` did not
            (``"--output"``), named in errors; ``None`` for ``[output] directory``.
    """

    path: pathlib.Path
    config: str | os.PathLike
    chosen_by: str | None = None

    def file(self, name: str | os.PathLike, key: str | None = None) -> pathlib.Path:
        """The output file ``name`` (relative to the folder), absolute and with links resolved.

        Args:
            name: the file's path relative to the output folder.
            key: the ``[output]`` key that gave ``name`` (named in the error); ``None`` for a file
                the run names itself (``result.h5``).

        Returns:
            The resolved path, inside :attr:`path`.

        Raises:
            common.config.ConfigError: the file would lie outside the folder (``..``, an absolute
                path, or a symbolic link to elsewhere); names the configuration file, line and key.
            common.errors.ConfigurationError: the same for a file the run names itself in a folder
                the configuration did not choose (names :attr:`chosen_by` and the folder).
        """
        resolved = (self.path / name).resolve()
        if resolved.is_relative_to(self.path):
            return resolved
        relative = pathlib.PurePath(name)
        if relative.is_absolute() or ".." in relative.parts:
            reason = (f"{str(name)!r} leaves the run's output folder {self.path}; give a file name (or a "
                      f"relative path without '..') inside it")
        else:
            reason = (f"{str(name)!r} in the output folder {self.path} is (or lies under) a symbolic link "
                      f"to {resolved}, outside that folder; outputs are written inside it only: remove "
                      f"the link or choose another name")
        if key is not None or self.chosen_by is None:
            raise key_error(self.config, ("output", key or "directory"), reason)
        raise ConfigurationError(f"{self.config}: {self.chosen_by} {self.path}: {reason}")


def output_folder(config: str | os.PathLike, directory: str | os.PathLike,
                  command_line: str | os.PathLike | None = None) -> OutputFolder:
    """The output folder of a run: ``command_line`` if given, else ``directory`` from the configuration.

    Args:
        config: the configuration file (as given on the command line).
        directory: ``[output] directory``: relative to the configuration file's folder (or absolute),
            and inside that folder once resolved.
        command_line: ``--output DIR``, relative to the working directory; it replaces ``directory``
            and may be anywhere.

    Returns:
        The :class:`OutputFolder` (nothing is created).

    Raises:
        common.config.ConfigError: ``directory`` resolves outside the configuration's folder (through
            ``..``, an absolute path or a symbolic link); names the file, line and key.
    """
    if command_line is not None:
        return OutputFolder(pathlib.Path(command_line).resolve(), config, chosen_by="--output")
    root = pathlib.Path(config).resolve().parent
    resolved = (root / directory).resolve()
    if not resolved.is_relative_to(root):
        raise key_error(config, ("output", "directory"), (
            f"{str(directory)!r} resolves to {resolved}, outside the configuration's folder {root}; a "
            f"configuration writes only inside its own folder: give a folder inside it, or pass --output "
            f"DIR on the command line to write elsewhere"))
    return OutputFolder(resolved, config)
