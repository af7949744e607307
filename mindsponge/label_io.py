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

import numpy as np

from common import units
from common.errors import ConfigurationError, DataError, MissingFileError, OutputExistsError

__all__ = ["FORMATS", "write_labels", "read_labels"]

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
    arrays["atomic_numbers"] = np.broadcast_to(numbers[-1] if numbers.ndim == 3 else numbers,
                                               (count, atoms)).astype(np.int64)
    expected = {"positions": (count, atoms, 3), "forces": (count, atoms, 3), "energy": (count,),
                "box": (count, 3, 3)}
    for key, value in arrays.items():
        shape = expected.get(key, value.shape if key == "atomic_numbers" else (count, *value.shape[1:]))
        if value.shape != shape:
            raise DataError(f"labels[{key!r}] has shape {value.shape}, expected {shape} "
                            f"({count} configurations of {atoms} atoms)")
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


def _from_frames(frames: list, extras: list[dict], source: str) -> dict[str, np.ndarray]:
    """Labels from ``ase.Atoms`` with calculators (eV, eV/Å) and per-frame scalars."""
    if not frames:
        raise DataError(f"{source}: no configurations")
    atoms = len(frames[0])
    for index, frame in enumerate(frames):
        if len(frame) != atoms:
            raise DataError(f"{source}: configuration {index} has {len(frame)} atoms, the first has {atoms}")
        if frame.calc is None:
            raise DataError(f"{source}: configuration {index} has no energy and forces")
    result = {
        "positions": np.stack([frame.positions * units.ANGSTROM_TO_NM for frame in frames]),
        "atomic_numbers": np.stack([frame.numbers for frame in frames]).astype(np.int64),
        "energy": np.array([frame.get_potential_energy() * units.EV_TO_KJ_PER_MOL for frame in frames]),
        "forces": np.stack([frame.get_forces() * _EV_PER_ANGSTROM for frame in frames]),
    }
    if all(frame.pbc.all() for frame in frames):
        result["box"] = np.stack([frame.cell[:] * units.ANGSTROM_TO_NM for frame in frames])
    shared = set.intersection(*(set(extra) for extra in extras)) if extras else set()
    for key in sorted(shared):
        values = [extra[key] for extra in extras]
        if all(isinstance(value, int | float | np.number) for value in values):
            result[key] = np.asarray(values)
    return result


def _write_ase(path: pathlib.Path, arrays: dict[str, np.ndarray], format: str) -> None:
    frames = []
    for index in range(len(arrays["energy"])):
        atoms = _to_atoms(arrays, index)
        atoms.info.update(_extras(arrays, index))
        frames.append(atoms)
    if format == "extxyz":
        import ase.io

        ase.io.write(path, frames, format="extxyz")
        return
    import ase.db

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
                 overwrite: bool = False) -> pathlib.Path:
    """Write labelled configurations (see the module docstring for keys, units and formats).

    Args:
        path: the file; its suffix chooses the format unless ``format`` is given.
        labels: the dict of arrays (a single configuration without the first axis is accepted).
        format: ``"extxyz"``, ``"db"``, ``"npz"`` or ``"h5"``.
        overwrite: replace an existing file (otherwise :class:`FileExistsError`).

    Returns:
        the path written.

    Raises:
        DataError: a missing key or mismatched shapes (naming the key).
    """
    path = pathlib.Path(path)
    format = _format(path, format)
    arrays = _checked(labels)
    if path.exists() and not overwrite:
        raise OutputExistsError(f"{path} exists; pass overwrite=True to replace it")
    path.unlink(missing_ok=True)
    if format == "npz":
        with open(path, "wb") as file:  # an open file keeps numpy from appending ".npz"
            np.savez(file, **arrays)
    elif format == "h5":
        _write_h5(path, arrays)
    else:
        _write_ase(path, arrays, format)
    return path


def _read_ase(path: pathlib.Path, format: str) -> dict[str, np.ndarray]:
    if format == "extxyz":
        import ase.io

        frames = ase.io.read(path, index=":", format="extxyz")
        return _from_frames(frames, [dict(frame.info) for frame in frames], str(path))
    import ase.db

    with ase.db.connect(path, type="db") as database:
        rows = sorted(database.select(), key=lambda row: row.id)
        return _from_frames([row.toatoms() for row in rows], [dict(row.key_value_pairs) for row in rows],
                            str(path))


def read_labels(path: str | os.PathLike, format: str | None = None) -> dict[str, np.ndarray]:
    """Read labelled configurations written by :func:`write_labels` or by other tools.

    Args:
        path: an extxyz file, ASE database, npz archive or HDF5 table (``common.datasets``).
        format: as in :func:`write_labels` (default from the suffix).

    Returns:
        ``positions`` ``(S, N, 3)`` nm, ``atomic_numbers`` ``(S, N)`` int64, ``energy`` ``(S,)``
        kJ/mol, ``forces`` ``(S, N, 3)`` kJ/mol/nm, and ``box`` ``(S, 3, 3)`` nm and per-configuration
        scalars when stored.

    Raises:
        FileNotFoundError: no such file. DataError: configurations without energy and forces,
            different atom counts (extxyz/db cannot be stacked then), missing keys.
    """
    path = pathlib.Path(path)
    format = _format(path, format)
    if not path.is_file():
        raise MissingFileError(f"no label file {str(path)!r}")
    if format == "npz":
        with np.load(path) as archive:
            return _checked(dict(archive))
    if format == "h5":
        from common.datasets import read_dataset

        return _checked(read_dataset(path))
    return _read_ase(path, format)


def main(argv: list[str] | None = None) -> int:
    """``python -m mindsponge.label_io INPUT OUTPUT [--overwrite]``: convert labels between formats."""
    parser = argparse.ArgumentParser(prog="python -m mindsponge.label_io", description=main.__doc__)
    parser.add_argument("input", help="extxyz, ASE db, npz or HDF5 file with labelled configurations")
    parser.add_argument("output", help="the file to write; its suffix chooses the format")
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    arguments = parser.parse_args(argv)
    labels = read_labels(arguments.input)
    write_labels(arguments.output, labels, overwrite=arguments.overwrite)
    count, atoms = labels["positions"].shape[:2]
    print(f"{arguments.output}: {count} configurations of {atoms} atoms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
