"""Write and read labelled configurations as extxyz, ASE database, npz or HDF5.

Labels are a dict of arrays, first axis the configuration (as :func:`mindsponge.labels.label`,
:class:`~mindsponge.labels.TrajectoryLabels` and ``common.datasets.read_dataset`` give them):

- ``positions`` ``(S, N, 3)`` nm, ``energy`` ``(S,)`` kJ/mol, ``forces`` ``(S, N, 3)`` kJ/mol/nm;
- ``atomic_numbers`` ``(N,)`` or ``(S, N)`` integers (read back as ``(S, N)`` int64);
- optionally ``box`` ``(S, 3, 3)`` nm (periodic configurations), and further per-configuration
  scalars ``(S,)`` such as ``temperature`` (K) or ``sample_id``.

Formats (chosen from the suffix, or ``format=``):

- ``"extxyz"`` (``.extxyz``, ``.xyz``) and ``"db"`` (``.db``, ASE's SQLite database): through
  ``ase.io`` and ``ase.db`` in ASE's units, energy in eV and forces in eV/Å (converted with
  :mod:`common.units`, so any ASE-based tool reads them: ``atoms.get_forces()``); the extra
  scalars go to ``atoms.info`` / the row's key-value pairs;
- ``"npz"``: numpy's archive of the arrays as given, in the labels' units (exact round trip);
- ``"h5"`` (``.h5``, ``.hdf5``): an :class:`common.io.H5Writer` table, one record per
  configuration, the layout of ``common.datasets`` files, which
  :meth:`mindsponge.train.TrainingData.from_hdf5` trains on; reading a generated dataset gives
  its records sorted by ``sample_id``.

Example::

    write_labels("water.extxyz", labels)
    read_labels("water.extxyz")["forces"]     # (S, 3, 3) kJ/mol/nm

From the shell, ``python -m mindsponge.label_io INPUT OUTPUT [--overwrite]`` converts between the
formats (e.g. a ``common.datasets`` HDF5 file to extxyz for another code).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import numpy as np

from common import units
from common.errors import ConfigurationError, DataError, MissingFileError, OutputExistsError

__all__ = ["FORMATS", "DEFAULT_KEYS", "write_labels", "read_labels", "read_configurations"]

FORMATS = {".extxyz": "extxyz", ".xyz": "extxyz", ".db": "db", ".npz": "npz", ".h5": "h5", ".hdf5": "h5"}
_REQUIRED = ("positions", "atomic_numbers", "energy", "forces")
_EV_PER_ANGSTROM = units.EV_PER_ANGSTROM_TO_KJ_PER_MOL_NM


def _format(path: pathlib.Path, format: str | None) -> str:
    if format is None:
        format = FORMATS.get(path.suffix.lower())
    if format not in set(FORMATS.values()):
        raise ConfigurationError(f"{path}: unknown label format {format!r}; give one of "
                         f"{sorted(set(FORMATS.values()))} or a suffix among {sorted(FORMATS)}")
    return format


def _checked(labels: dict) -> dict[str, np.ndarray]:
    """Labels as arrays with a configuration axis; ``atomic_numbers`` becomes ``(S, N)`` int64."""
    missing = [key for key in _REQUIRED if key not in labels]
    if missing:
        raise DataError(f"labels lack {missing}; they have {sorted(labels)}")
    arrays = {key: np.asarray(value) for key, value in labels.items()}
    positions = arrays["positions"]
    if positions.ndim == 2:  # one configuration
        arrays = {key: value[None] for key, value in arrays.items()}
        positions = arrays["positions"]
    count, atoms = positions.shape[:2]
    numbers = arrays["atomic_numbers"]
    if not (np.issubdtype(numbers.dtype, np.integer)
            or (np.issubdtype(numbers.dtype, np.floating) and np.all(numbers == np.round(numbers)))):
        raise DataError(f"labels['atomic_numbers'] must be whole numbers (elements' atomic numbers), got "
                        f"{numbers.dtype} values such as {numbers.reshape(-1)[:3].tolist()}")
    arrays["atomic_numbers"] = np.broadcast_to(numbers[-1] if numbers.ndim == 3 else numbers,
                                               (count, atoms)).astype(np.int64)
    expected = {"positions": (count, atoms, 3), "forces": (count, atoms, 3), "energy": (count,),
                "box": (count, 3, 3)}
    for key, value in arrays.items():
        shape = expected.get(key, value.shape if key == "atomic_numbers" else (count, *value.shape[1:]))
        if value.shape != shape:
            raise DataError(f"labels[{key!r}] has shape {value.shape}, expected {shape} "
                            f"({count} configurations of {atoms} atoms)")
    for key in ("positions", "energy", "forces", "box"):
        if key in arrays:
            finite = np.isfinite(arrays[key].reshape(count, -1)).all(1)
            if not finite.all():
                raise DataError(f"labels[{key!r}] of configuration {int(np.argmin(finite))} is not finite")
    return arrays


def _to_atoms(arrays: dict[str, np.ndarray], index: int):
    """Configuration ``index`` as an ``ase.Atoms`` with a single-point calculator (eV, eV/Å)."""
    import ase
    from ase.calculators.singlepoint import SinglePointCalculator

    box = arrays.get("box")
    atoms = ase.Atoms(numbers=arrays["atomic_numbers"][index],
                      positions=arrays["positions"][index] * units.NM_TO_ANGSTROM,
                      cell=None if box is None else box[index] * units.NM_TO_ANGSTROM, pbc=box is not None)
    atoms.calc = SinglePointCalculator(
        atoms, energy=float(arrays["energy"][index]) / units.EV_TO_KJ_PER_MOL,
        forces=arrays["forces"][index] / _EV_PER_ANGSTROM)
    return atoms


def _extras(arrays: dict[str, np.ndarray], index: int) -> dict:
    """Per-configuration scalars of configuration ``index`` (other extra columns stay out of ASE files)."""
    return {key: value[index].item() for key, value in arrays.items()
            if key not in _REQUIRED and key != "box" and value.ndim == 1}


#: where the reference labels are, by default: ASE's own calculator results
DEFAULT_KEYS = {"energy": "energy", "forces": "forces"}


def _checked_keys(keys: dict | None) -> dict[str, str]:
    unknown = sorted(set(keys or {}) - {"energy", "forces"})
    if unknown:
        raise ConfigurationError(f"label keys: unknown label(s) {unknown}; keys maps 'energy' and 'forces' "
                                 f"to the names a file uses, e.g. {{'energy': 'REF_energy', 'forces': "
                                 f"'REF_forces'}}")
    return {**DEFAULT_KEYS, **(keys or {})}


def _frame_label(frame, info: dict, data: dict, label: str, key: str, where: str):
    """The ``label`` ("energy" or "forces") of one frame, in eV or eV/Å: from the calculator when
    ``key`` is ASE's own name, else from the per-frame values (``info``) or per-atom arrays (``data``)."""
    results = frame.calc.results if frame.calc is not None else {}
    if key in results:  # ASE's readers keep energy, free_energy, forces and stress as calculator results
        return results[key]
    stored = info if label == "energy" else data
    if key in stored:
        return stored[key]
    raise DataError(
        f"{where} has no {label} under {key!r} (calculator results {sorted(results)}, per-configuration "
        f"keys {sorted(info)}, per-atom arrays {sorted(data)}); name it with keys={{{label!r}: ...}} (MACE "
        f"files use 'REF_{label}')")


def _frame_configuration(frame, info: dict, data: dict, keys: dict, where: str) -> dict:
    """One ``ase.Atoms`` (eV, eV/Å) as a configuration in the labels' units."""
    try:
        energy, forces = (np.asarray(_frame_label(frame, info, data, label, keys[label], where),
                                     dtype=np.float64) for label in ("energy", "forces"))
    except (TypeError, ValueError) as error:
        if isinstance(error, DataError):
            raise
        raise DataError(f"{where}: energy {keys['energy']!r} and forces {keys['forces']!r} must be numbers "
                        f"({error})") from error
    if energy.size != 1 or forces.shape != (len(frame), 3):
        raise DataError(f"{where}: energy {keys['energy']!r} has shape {energy.shape} and forces "
                        f"{keys['forces']!r} {forces.shape}; expected one value and ({len(frame)}, 3)")
    configuration = {"positions": frame.positions * units.ANGSTROM_TO_NM,
                     "atomic_numbers": frame.numbers.astype(np.int64),
                     "energy": float(energy.reshape(())) * units.EV_TO_KJ_PER_MOL,
                     "forces": forces * _EV_PER_ANGSTROM}
    for key in ("positions", "energy", "forces"):
        if not np.isfinite(configuration[key]).all():
            raise DataError(f"{where}: {key} is not finite")
    if frame.pbc.all():
        configuration["box"] = frame.cell[:] * units.ANGSTROM_TO_NM
    elif frame.pbc.any():
        raise DataError(f"{where} is periodic along some axes only (pbc {frame.pbc.tolist()}); labels hold "
                        f"fully periodic or non-periodic configurations")
    for key, value in info.items():
        if key not in keys.values() and isinstance(value, int | float | np.number) \
                and not isinstance(value, bool):
            configuration[key] = value
    return configuration


def _stack(configurations: list[dict], source: str) -> dict[str, np.ndarray]:
    """Configurations of one size as the labels' arrays (scalars every configuration has are kept)."""
    atoms = len(configurations[0]["positions"])
    for index, configuration in enumerate(configurations):
        if len(configuration["positions"]) != atoms:
            raise DataError(
                f"{source}: configuration {index} has {len(configuration['positions'])} atoms, the first "
                f"has {atoms}; read_configurations (or TrainingData.from_file) reads mixed sizes")
    shared = set.intersection(*(set(configuration) for configuration in configurations))
    periodic = ["box" in configuration for configuration in configurations]
    if any(periodic) and not all(periodic):
        raise DataError(f"{source}: configuration {periodic.index(not periodic[0])} is "
                        f"{'not ' if periodic[0] else ''}periodic, the first is"
                        f"{'' if periodic[0] else ' not'}; read_configurations reads such a mix")
    return {key: np.stack([np.asarray(configuration[key]) for configuration in configurations])
            for key in sorted(shared)}


def _write_ase(path: pathlib.Path, arrays: dict[str, np.ndarray], format: str, keys: dict[str, str]) -> None:
    frames = []
    for index in range(len(arrays["energy"])):
        atoms = _to_atoms(arrays, index)
        atoms.info.update(_extras(arrays, index))
        if keys != DEFAULT_KEYS:  # the labels under the file's own names, not as calculator results
            results = atoms.calc.results
            atoms.calc = None
            atoms.info[keys["energy"]] = float(results["energy"])
            atoms.arrays[keys["forces"]] = np.asarray(results["forces"])
        frames.append(atoms)
    if format == "extxyz":
        import ase.io

        ase.io.write(path, frames, format="extxyz")
        return
    import ase.db
    from ase.db.core import reserved_keys
    from ase.db.row import AtomsRow

    # names the database keeps for itself or a row computes (row.mass, row.charge) come back wrong
    taken = set(reserved_keys) | {name for name in dir(AtomsRow) if not name.startswith("_")}
    clashing = sorted(set(frames[0].info) & taken)
    if clashing:
        raise DataError(f"{path}: the extra label(s) {clashing} are names an ASE database keeps or computes "
                        f"for itself (it would return its own values); rename them or use extxyz, npz or h5")
    with ase.db.connect(path, type="db", append=False) as database:
        for frame in frames:
            extras = dict(frame.info)
            frame.info.clear()
            database.write(frame, key_value_pairs=extras)


def _write_h5(path: pathlib.Path, arrays: dict[str, np.ndarray]) -> None:
    from common.io import H5Writer

    with H5Writer(path, mode="w") as writer:
        for index in range(len(arrays["energy"])):
            writer.append({key: value[index] for key, value in arrays.items()})


def write_labels(path: str | os.PathLike, labels: dict, format: str | None = None,
                 overwrite: bool = False, keys: dict[str, str] | None = None) -> pathlib.Path:
    """Write labelled configurations (see the module docstring for keys, units and formats).

    Args:
        path: the file; its suffix chooses the format unless ``format`` is given.
        labels: the dict of arrays (a single configuration without the first axis is accepted).
        format: ``"extxyz"``, ``"db"``, ``"npz"`` or ``"h5"``.
        overwrite: replace an existing file (otherwise :class:`FileExistsError`).
        keys: extxyz only: store the energy and forces under these names in ``info`` and ``arrays``
            instead of as calculator results, e.g. ``{"energy": "REF_energy", "forces":
            "REF_forces"}`` for ``mace_run_train`` (still eV and eV/Å).

    Returns:
        the path written.

    Raises:
        DataError: a missing key or mismatched shapes (naming the key).
    """
    path = pathlib.Path(path)
    format = _format(path, format)
    arrays = _checked(labels)
    keys = _checked_keys(keys)
    if keys != DEFAULT_KEYS and format != "extxyz":
        raise ConfigurationError(f"write_labels: keys are for extxyz files, not {format!r} ({path})")
    if path.exists() and not overwrite:
        raise OutputExistsError(f"{path} exists; pass overwrite=True to replace it")
    path.unlink(missing_ok=True)
    if format == "npz":
        with open(path, "wb") as file:  # an open file keeps numpy from appending ".npz"
            np.savez(file, **arrays)
    elif format == "h5":
        _write_h5(path, arrays)
    else:
        _write_ase(path, arrays, format, keys)
    return path


def _read_ase(path: pathlib.Path, format: str, keys: dict[str, str]) -> list[dict]:
    if format == "extxyz":
        entries = _read_extxyz(path)
    else:
        import sqlite3

        import ase.db

        try:
            with ase.db.connect(path, type="db") as database:
                rows = sorted(database.select(), key=lambda row: row.id)
                entries = [(row.toatoms(), dict(row.key_value_pairs), dict(row.data)) for row in rows]
        except (sqlite3.DatabaseError, ValueError, KeyError) as error:
            raise DataError(f"{path} cannot be read as an ASE database ({type(error).__name__}: {error})") \
                from error
    if not entries:
        raise DataError(f"{path}: no configurations")
    return [_frame_configuration(frame, info, data, keys, f"{path}: configuration {index}")
            for index, (frame, info, data) in enumerate(entries)]


def _read_extxyz(path: pathlib.Path) -> list[tuple]:
    """The frames of an extxyz file with their ``info`` and ``arrays``; a damaged frame raises
    :class:`DataError` naming the file and the frame."""
    import ase.io

    entries = []
    try:
        for frame in ase.io.iread(path, index=":", format="extxyz"):
            entries.append((frame, dict(frame.info), dict(frame.arrays)))
    except Exception as error:  # ASE's reader raises ValueError, XYZError, IndexError... on damaged text
        raise DataError(f"{path}: configuration {len(entries)} (counting from 0) cannot be read as extxyz "
                        f"({type(error).__name__}: {error})") from error
    return entries


def _renamed(table: dict, keys: dict[str, str], source: str) -> dict:
    """A table's columns under the labels' names (``keys`` maps label -> the file's column)."""
    missing = [name for name in keys.values() if name not in table]
    if missing:
        raise DataError(f"{source} has no column(s) {missing}; it has {sorted(table)}")
    renamed = {label: table[name] for label, name in keys.items()}
    return {**{key: value for key, value in table.items() if key not in keys.values()}, **renamed}


def _source(path, format: str | None, keys: dict | None) -> tuple[pathlib.Path, str, dict[str, str]]:
    """The checked path, format and label keys of a file to read."""
    path = pathlib.Path(path)
    format = _format(path, format)
    keys = _checked_keys(keys)
    if not path.is_file():
        raise MissingFileError(f"no label file {str(path)!r}")
    return path, format, keys


def _read_columns(path: pathlib.Path, format: str, keys: dict[str, str]) -> dict[str, np.ndarray]:
    """An npz archive's or HDF5 table's labels as arrays."""
    if format == "npz":
        import zipfile

        try:
            with np.load(path) as archive:
                table = dict(archive)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as error:
            raise DataError(f"{path} cannot be read as an npz archive of label arrays "
                            f"({type(error).__name__}: {error})") from error
    else:
        from common.datasets import read_dataset

        table = read_dataset(path)
    try:
        return _checked(_renamed(table, keys, str(path)))
    except DataError as error:
        message = str(error)
        raise DataError(message if message.startswith(str(path)) else f"{path}: {message}") from error


def read_configurations(path: str | os.PathLike, format: str | None = None,
                        keys: dict[str, str] | None = None) -> list[dict]:
    """Read labelled configurations one by one, of any sizes (molecules of different sizes in one file).

    Args:
        path: an extxyz file, ASE database, npz archive or HDF5 table (``common.datasets``).
        format: as in :func:`write_labels` (default from the suffix).
        keys: where the reference labels are when the file does not use ASE's own ``energy`` and
            ``forces``: ``{"energy": "REF_energy", "forces": "REF_forces"}`` (MACE's convention; an
            extxyz's per-configuration ``info`` key and per-atom ``arrays`` key, an ASE database's
            key-value pair and ``data`` entry, an npz/HDF5 column). Still eV and eV/Å in ASE files.

    Returns:
        one dict per configuration: ``positions`` ``(N, 3)`` nm, ``atomic_numbers`` ``(N,)`` int64,
        ``energy`` kJ/mol, ``forces`` ``(N, 3)`` kJ/mol/nm, ``box`` ``(3, 3)`` nm when periodic, and
        the configuration's numeric scalars (``temperature``, ``group``...).

    Raises:
        MissingFileError: no such file. DataError: no configurations, a configuration without the
            labels (naming it and the keys it has), shapes that do not match.
    """
    path, format, keys = _source(path, format, keys)
    if format in ("extxyz", "db"):
        return _read_ase(path, format, keys)
    arrays = _read_columns(path, format, keys)
    return [{key: value[index] for key, value in arrays.items()} for index in range(len(arrays["energy"]))]


def read_labels(path: str | os.PathLike, format: str | None = None,
                keys: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Read labelled configurations of one size, written by :func:`write_labels` or by other tools.

    Args:
        path: an extxyz file, ASE database, npz archive or HDF5 table (``common.datasets``).
        format: as in :func:`write_labels` (default from the suffix).
        keys: the file's names of ``energy`` and ``forces``, as in :func:`read_configurations`.

    Returns:
        ``positions`` ``(S, N, 3)`` nm, ``atomic_numbers`` ``(S, N)`` int64, ``energy`` ``(S,)``
        kJ/mol, ``forces`` ``(S, N, 3)`` kJ/mol/nm, and ``box`` ``(S, 3, 3)`` nm and per-configuration
        scalars when stored.

    Raises:
        MissingFileError: no such file. DataError: configurations without energy and forces,
            different atom counts (:func:`read_configurations` reads those), missing keys.
    """
    path, format, keys = _source(path, format, keys)
    if format in ("extxyz", "db"):
        return _stack(_read_ase(path, format, keys), str(path))
    return _read_columns(path, format, keys)


def main(argv: list[str] | None = None) -> int:
    """``python -m mindsponge.label_io INPUT OUTPUT [--overwrite]``: convert labels between formats."""
    parser = argparse.ArgumentParser(prog="python -m mindsponge.label_io", description=main.__doc__)
    parser.add_argument("input", help="extxyz, ASE db, npz or HDF5 file with labelled configurations")
    parser.add_argument("output", help="the file to write; its suffix chooses the format")
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    parser.add_argument("--energy-key", default="energy", help="INPUT's energy key (MACE: REF_energy)")
    parser.add_argument("--forces-key", default="forces", help="INPUT's forces key (MACE: REF_forces)")
    arguments = parser.parse_args(argv)
    keys = {"energy": arguments.energy_key, "forces": arguments.forces_key}
    try:
        labels = read_labels(arguments.input, keys=keys)
        write_labels(arguments.output, labels, overwrite=arguments.overwrite)
    except (ConfigurationError, DataError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    count, atoms = labels["positions"].shape[:2]
    print(f"{arguments.output}: {count} configurations of {atoms} atoms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
