"""Materials tables for CAD assemblies: body names or glob patterns mapped to FDTD media.

A table is a TOML file with one ``[materials]`` table (or the same mapping as a Python dict)::

    [materials]
    housing = { permittivity = 3.0, conductivity = 0.002 }   # a Medium (relative permittivity, S/m)
    display_glass = { permittivity = 6.5 }
    "battery*" = { permittivity = 4.0, conductivity = 1.0 }  # a glob pattern (fnmatch)
    pcb_ground = "pec"                                        # a perfect conductor
    "antenna_*" = "pec"
    "screw*" = "ignore"                                       # bodies left out of the simulation
    silver_ink = { model = "drude", plasma_frequency = 2.1e15, collision_frequency = 4e12 }
    ceramic = { model = "lorentz", permittivity = 9.0, delta_permittivity = 2.0,
                resonance_frequency = 5e10, damping_frequency = 1e9 }

Keys of a medium: ``permittivity`` (relative), ``conductivity`` (S/m), ``permeability`` (relative),
and with ``model = "drude"`` ``plasma_frequency``, ``collision_frequency`` (Hz), with
``model = "lorentz"`` ``delta_permittivity``, ``resonance_frequency``, ``damping_frequency`` (Hz): the
arguments of :class:`mindelec.fdtd.Medium`, :class:`~mindelec.fdtd.Drude` and
:class:`~mindelec.fdtd.Lorentz`. In a dict the values may also be media themselves.

Look-up (:meth:`MaterialTable.lookup`): an exact key wins; otherwise the first glob pattern in the
table's order that matches. A body's unique name is tried first, then its CAD label (bodies that
share a label, e.g. four screws ``screw``, are named ``screw``, ``screw.2``, ...).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import pathlib

import tomllib

from common.errors import ConfigurationError, MissingFileError

__all__ = ["IGNORE", "MaterialTable", "load_materials", "medium_from_spec"]

#: the material entry that leaves a body out of the simulation
IGNORE = "ignore"
_MODELS = {
    None: ("permittivity", "conductivity", "permeability"),
    "drude": ("plasma_frequency", "collision_frequency", "permittivity", "conductivity", "permeability"),
    "lorentz": ("delta_permittivity", "resonance_frequency", "damping_frequency", "permittivity",
                "conductivity", "permeability"),
}


def medium_from_spec(spec, where: str):
    """A medium from one table entry.

    Args:
        spec: ``"pec"``, ``"ignore"``, a dict of medium keys (see the module docstring), or a
            ``mindelec.fdtd`` medium (``Medium``, ``Drude``, ``Lorentz``, ``PEC``), returned as is.
        where: how errors name the entry (file and key).

    Returns:
        a ``mindelec.fdtd`` medium, or :data:`IGNORE`.

    Raises:
        ConfigurationError: for an unknown string, model or key, or a value the medium refuses.
    """
    from mindelec import fdtd

    if isinstance(spec, (fdtd.Medium, fdtd.PEC)):
        return spec
    if isinstance(spec, str):
        if spec.lower() == "pec":
            return fdtd.PEC()
        if spec.lower() == IGNORE:
            return IGNORE
        raise ConfigurationError(
            f"{where}: unknown material {spec!r}; expected \"pec\", \"ignore\" or a table of medium keys "
            "such as { permittivity = 4.0, conductivity = 0.01 }"
        )
    if not isinstance(spec, dict):
        raise ConfigurationError(
            f"{where}: expected \"pec\", \"ignore\" or a table of medium keys, got {spec!r}")
    spec = dict(spec)
    model = spec.pop("model", None)
    model = model.lower() if isinstance(model, str) else model
    if model not in _MODELS:
        raise ConfigurationError(
            f"{where}: unknown model {model!r}; expected \"drude\" or \"lorentz\" (or none)")
    unknown = sorted(set(spec) - set(_MODELS[model]))
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown key(s) {unknown} for a {model or 'plain'} medium; expected some of "
            f"{list(_MODELS[model])}"
        )
    wrong = sorted(key for key, value in spec.items() if isinstance(value, bool | str))
    if wrong:  # float() would read true as 1 and "4" as 4
        raise ConfigurationError(f"{where}: {wrong} must be numbers, got "
                                 f"{', '.join(f'{key} = {spec[key]!r}' for key in wrong)}")
    cls = {None: fdtd.Medium, "drude": fdtd.Drude, "lorentz": fdtd.Lorentz}[model]
    try:
        return cls(**spec)
    except (TypeError, ValueError) as error:
        raise ConfigurationError(f"{where}: {error}") from None


@dataclasses.dataclass(frozen=True)
class MaterialTable:
    """Body names or glob patterns mapped to media, in the table's order.

    Attributes:
        entries: ``((pattern, medium), ...)``; ``medium`` is a ``mindelec.fdtd`` medium or :data:`IGNORE`.
        source: the file the table came from (``"<dict>"`` for a mapping), for error messages.
    """

    entries: tuple
    source: str = "<dict>"

    @classmethod
    def from_mapping(cls, mapping, source: str = "<dict>") -> MaterialTable:
        """A table from ``{pattern: spec}`` (see :func:`medium_from_spec` for the specs)."""
        if not isinstance(mapping, dict) or not mapping:
            raise ConfigurationError(
                f"{source}: the materials table must map body names or glob patterns to media, "
                f"got {mapping!r}")
        entries = tuple(
            (str(key), medium_from_spec(spec, f"{source}: [materials] {key!r}"))
            for key, spec in mapping.items())
        return cls(entries, source)

    def lookup(self, *names: str):
        """The medium for the first of ``names`` that the table matches, or ``None``.

        Every name is tried against the exact keys first (a body's unique name, then its label:
        ``screw.2`` takes the entry ``screw``), then each name against the glob patterns in order.
        """
        exact = dict(self.entries)
        for name in names:
            if name in exact:
                return exact[name]
        for name in names:
            for pattern, medium in self.entries:
                if fnmatch.fnmatchcase(name, pattern):
                    return medium
        return None

    @property
    def patterns(self) -> tuple[str, ...]:
        """The table's names and glob patterns, in the order they are matched."""
        return tuple(pattern for pattern, _ in self.entries)


def load_materials(materials) -> MaterialTable:
    """A :class:`MaterialTable` from a TOML file (a ``[materials]`` table), a dict, or a table.

    Raises:
        MissingFileError: for a file that does not exist.
        ConfigurationError: for bad TOML, a missing ``[materials]`` table or a bad entry (naming the file
            and the key).
    """
    if isinstance(materials, MaterialTable):
        return materials
    if isinstance(materials, dict):
        return MaterialTable.from_mapping(materials)
    path = pathlib.Path(materials)
    if not path.is_file():
        raise MissingFileError(f"materials table {str(path)!r} does not exist")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"materials table {str(path)!r}: not valid TOML: {error}") from None
    if "materials" not in data:
        raise ConfigurationError(
            f"materials table {str(path)!r}: expected a [materials] table mapping body names or glob "
            f"patterns to media; found the keys {sorted(data)}"
        )
    return MaterialTable.from_mapping(data["materials"], str(path))
