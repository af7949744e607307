"""Training data for learned potentials: :class:`TrainingData` and its train/validation/test splits.

:class:`TrainingData` reads the columnar HDF5 tables written by :class:`common.io.H5Writer` (and
by the dataset generator, e.g. with :func:`mindsponge.labels.xtb_sample`): per sample
``positions`` (N, 3) nm, ``atomic_numbers`` (N,), ``energy`` () kJ/mol, ``forces`` (N, 3)
kJ/mol/nm and optionally ``group`` (), the trajectory a sample comes from.

:func:`make_split` splits the samples into training, validation and test sets at random or by
group (all samples of a trajectory in one set, so that the validation and test sets measure
transfer to unseen trajectories rather than interpolation between neighbouring frames).
:func:`store_split` writes a split into the dataset file (group ``/split``), and
:meth:`TrainingData.from_hdf5` reads it back.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

import numpy as np
import torch
from torch import Tensor

from common import io
from common.errors import ConfigurationError, DataError, MissingFileError

__all__ = ["TrainingData", "DatasetError", "SPLIT_NAMES", "make_split", "store_split", "read_split"]

#: the parts of a split, as stored in checkpoints and dataset files
SPLIT_NAMES = ("train_indices", "validation_indices", "test_indices")


class DatasetError(DataError):
    """A dataset file that cannot be used for training (the message names the file and key)."""


def _refuse_periodic(columns, where: str) -> None:
    """Refuse periodic data: the potentials batch molecules without a box, so training would see a
    periodic configuration as a cluster in vacuum and its labels would not match."""
    if "box" in columns:
        raise DatasetError(f"{where} is periodic (it has a 'box'); training takes non-periodic molecules "
                           f"only: the potentials evaluate batches without a box, so a periodic sample's "
                           f"forces would be fitted as those of a cluster in vacuum")


@dataclasses.dataclass
class TrainingData:
    """Configurations with reference energies and forces, held in memory (flat over atoms).

    Attributes:
        positions: ``(A, 3)`` float64 tensor, nm, the atoms of all samples one after another.
        atomic_numbers: ``(A,)`` long tensor.
        energy: ``(S,)`` float64 tensor, kJ/mol.
        forces: ``(A, 3)`` float64 tensor, kJ/mol/nm.
        offsets: ``(S + 1,)`` long tensor: sample ``s`` holds atoms ``offsets[s]:offsets[s + 1]``.
        groups: optional ``(S,)`` long tensor, the trajectory (or other group) of every sample, for
            splits that keep a group together (the ``group`` column of a dataset file).
        split: optional ``{"train_indices", "validation_indices", "test_indices"}`` stored with the
            dataset (:func:`store_split`); a :class:`~mindsponge.training.Trainer` uses it.
    """

    positions: Tensor
    atomic_numbers: Tensor
    energy: Tensor
    forces: Tensor
    offsets: Tensor
    groups: Tensor | None = None
    split: dict | None = None

    def __len__(self) -> int:
        return len(self.energy)

    @property
    def n_atoms(self) -> Tensor:
        """``(S,)`` atoms per sample."""
        return self.offsets[1:] - self.offsets[:-1]

    @classmethod
    def from_arrays(cls, positions, atomic_numbers, energy, forces, source: str = "arrays",
                    groups=None) -> TrainingData:
        """From ``positions`` (S, N, 3) nm, ``atomic_numbers`` (S, N) or (N,), ``energy`` (S,) kJ/mol,
        ``forces`` (S, N, 3) kJ/mol/nm and optional integer ``groups`` (S,) (trajectory ids).

        Raises:
            DatasetError: no samples, shapes that do not match (naming the keys), non-finite values
                (naming the first bad sample).
        """
        positions = np.asarray(positions, dtype=np.float64)
        numbers = np.asarray(atomic_numbers)
        energy = np.asarray(energy, dtype=np.float64).reshape(-1) if np.ndim(energy) else np.asarray(energy)
        forces = np.asarray(forces, dtype=np.float64)
        if positions.ndim != 3 or positions.shape[-1] != 3:
            raise DatasetError(f"{source}: 'positions' must be (samples, atoms, 3) nm, got {positions.shape}")
        samples, atoms = positions.shape[:2]
        if samples == 0:
            raise DatasetError(f"{source}: the dataset holds no samples")
        if numbers.shape == (atoms,):
            numbers = np.broadcast_to(numbers, (samples, atoms))
        expected = {"atomic_numbers": (samples, atoms), "energy": (samples,), "forces": (samples, atoms, 3)}
        for key, value in (("atomic_numbers", numbers), ("energy", energy), ("forces", forces)):
            if value.shape != expected[key]:
                raise DatasetError(
                    f"{source}: {key!r} has shape {value.shape} but positions {positions.shape} need "
                    f"{expected[key]}"
                )
        if not np.issubdtype(numbers.dtype, np.integer):
            raise DatasetError(f"{source}: 'atomic_numbers' must be integers, got {numbers.dtype}")
        for key, value in (("positions", positions), ("energy", energy), ("forces", forces)):
            finite = np.isfinite(value.reshape(samples, -1)).all(1)
            if not finite.all():
                raise DatasetError(f"{source}: {key!r} of sample {int(np.argmin(finite))} is not finite")
        return cls(torch.from_numpy(positions.reshape(-1, 3).copy()),
                   torch.from_numpy(numbers.reshape(-1).astype(np.int64)),
                   torch.from_numpy(energy.copy()), torch.from_numpy(forces.reshape(-1, 3).copy()),
                   torch.arange(samples + 1, dtype=torch.long) * atoms, _groups(groups, samples, source))

    @classmethod
    def from_hdf5(cls, paths, group: str = "/", keys: dict[str, str] | None = None) -> TrainingData:
        """Read one or more HDF5 tables written by :class:`common.io.H5Writer`.

        Args:
            paths: a file or a list of files (concatenated; the number of atoms may differ
                between files).
            group: the table in each file.
            keys: column names when they differ from ``positions``, ``atomic_numbers``,
                ``energy``, ``forces``, ``group`` (e.g. ``{"energy": "energy_gfn2"}``). The
                ``group`` column (trajectory ids) is optional. A split stored in a single file
                (:func:`store_split`) is read into :attr:`split`.

        Raises:
            FileNotFoundError: a missing file.
            DatasetError: an unreadable (corrupt) file, a missing column, no samples, mismatched
                shapes or non-finite values (the message names the file and column).
        """
        names = {"positions": "positions", "atomic_numbers": "atomic_numbers", "energy": "energy",
                 "forces": "forces", **(keys or {})}
        group_key = names.pop("group", "group")
        paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        if not paths:
            raise DatasetError("TrainingData.from_hdf5: no files given")
        parts = []
        for path in paths:
            if not pathlib.Path(path).is_file():
                raise MissingFileError(f"dataset file {str(path)!r} does not exist")
            _check_hdf5(path)
            try:
                table = io.read_table(path, group=group)
            except (OSError, KeyError) as error:
                raise DatasetError(f"dataset file {str(path)!r} cannot be read as HDF5 ({error})") from error
            except ValueError as error:
                raise DatasetError(f"dataset file {str(path)!r}: {error}") from error
            missing = [name for name in names.values() if name not in table]
            if missing:
                raise DatasetError(
                    f"dataset file {str(path)!r} has no column(s) {missing}; it has {sorted(table)}")
            _refuse_periodic(table, f"dataset file {str(path)!r}")
            parts.append(cls.from_arrays(*(table[names[key]] for key in
                                           ("positions", "atomic_numbers", "energy", "forces")),
                                         source=f"dataset file {str(path)!r}", groups=table.get(group_key)))
        data = cls.concatenate(parts)
        if len(paths) == 1:
            data.split = read_split(paths[0])
        return data

    @classmethod
    def from_file(cls, paths, keys: dict[str, str] | None = None) -> TrainingData:
        """Read one or more files of labelled configurations, each in any format
        :mod:`mindsponge.label_io` reads (chosen by suffix): HDF5 tables (:meth:`from_hdf5`), extxyz,
        ASE databases, npz. Molecules of different sizes may share a file.

        Args:
            paths: a file or a list of files (concatenated).
            keys: the files' names of ``energy`` and ``forces`` (and, in HDF5 tables, of the other
                columns, as in :meth:`from_hdf5`), e.g. ``{"energy": "REF_energy", "forces":
                "REF_forces"}`` for MACE's extxyz files. ASE files hold eV and eV/Å.

        Raises:
            MissingFileError: a missing file. ConfigurationError: an unknown suffix.
            DatasetError: no samples, a configuration without labels (naming the file, the
                configuration and the keys it has), non-finite values.
        """
        from mindsponge import label_io

        paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        if not paths:
            raise DatasetError("TrainingData.from_file: no files given")
        if len(paths) == 1 and label_io.FORMATS.get(pathlib.Path(paths[0]).suffix.lower()) == "h5":
            return cls.from_hdf5(paths[0], keys=keys)
        parts = []
        for path in paths:
            if label_io.FORMATS.get(pathlib.Path(path).suffix.lower()) == "h5":
                parts.append(cls.from_hdf5(path, keys=keys))
                continue
            label_keys = {label: name for label, name in (keys or {}).items()
                          if label in ("energy", "forces")}
            try:
                configurations = label_io.read_configurations(path, keys=label_keys)
            except DataError as error:
                raise DatasetError(str(error)) from error
            parts.append(cls.from_configurations(configurations, source=f"dataset file {str(path)!r}"))
        return cls.concatenate(parts)

    @classmethod
    def from_configurations(cls, configurations: list[dict], source: str = "configurations") -> TrainingData:
        """From configurations of any sizes, as :func:`mindsponge.label_io.read_configurations` gives
        them (``positions`` (N, 3) nm, ``atomic_numbers`` (N,), ``energy`` kJ/mol, ``forces`` (N, 3)
        kJ/mol/nm, optionally an integer ``group``)."""
        if not configurations:
            raise DatasetError(f"{source}: the dataset holds no samples")
        by_size: dict[int, list[int]] = {}
        for index, configuration in enumerate(configurations):
            _refuse_periodic(configuration, f"{source}: sample {index}")
            for key in ("positions", "energy", "forces"):
                if not np.isfinite(np.asarray(configuration[key], dtype=np.float64)).all():
                    raise DatasetError(f"{source}: {key!r} of sample {index} is not finite")
            by_size.setdefault(len(configuration["positions"]), []).append(index)
        parts, order = [], []
        for size, indices in by_size.items():
            columns = [np.stack([np.asarray(configurations[index][key]) for index in indices])
                       for key in ("positions", "atomic_numbers", "energy", "forces")]
            parts.append(cls.from_arrays(*columns, source=f"{source} ({size}-atom samples)"))
            order.extend(indices)
        data = cls.concatenate(parts)
        groups = [configuration.get("group") for configuration in configurations]
        if all(group is not None for group in groups):
            data.groups = _groups(np.asarray(groups)[order], len(configurations), source)
        return data.subset(torch.as_tensor(np.argsort(order)))

    @classmethod
    def concatenate(cls, parts: list[TrainingData]) -> TrainingData:
        """Samples of several datasets one after another (groups of later parts renumbered after the
        earlier ones'; no stored split)."""
        atom_offsets = np.cumsum([0] + [len(part.positions) for part in parts[:-1]])
        shifted = [part.offsets[1:] + int(start) for part, start in zip(parts, atom_offsets, strict=True)]
        offsets = torch.cat([parts[0].offsets[:1], *shifted])
        groups, first = [], 0
        for part in parts:
            ids = part.groups if part.groups is not None else torch.arange(len(part))
            groups.append(ids - int(ids.min()) + first)
            first = int(groups[-1].max()) + 1
        return cls(torch.cat([p.positions for p in parts]), torch.cat([p.atomic_numbers for p in parts]),
                   torch.cat([p.energy for p in parts]), torch.cat([p.forces for p in parts]), offsets,
                   torch.cat(groups) if any(p.groups is not None for p in parts) else None)

    def atom_indices(self, samples: Tensor) -> tuple[Tensor, Tensor]:
        """Atom indices ``(a,)`` of the given samples and the batch index ``(a,)`` (0..len(samples)-1)."""
        counts = self.n_atoms[samples]
        batch = torch.repeat_interleave(torch.arange(len(samples)), counts)
        starts = torch.repeat_interleave(self.offsets[samples] - (torch.cumsum(counts, 0) - counts), counts)
        return starts + torch.arange(int(counts.sum())), batch

    def subset(self, samples: Tensor) -> TrainingData:
        """The given samples ``(k,)`` as a new dataset."""
        atoms, _ = self.atom_indices(samples)
        counts = self.n_atoms[samples]
        return TrainingData(self.positions[atoms], self.atomic_numbers[atoms], self.energy[samples],
                            self.forces[atoms], torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)]),
                            None if self.groups is None else self.groups[samples])


def _check_hdf5(path) -> None:
    """Raise :class:`DatasetError` for an empty, truncated or non-HDF5 file.

    The SWMR reader of :func:`common.io.read_table` skips HDF5's end-of-file check (a file being
    written may grow) and retries damaged metadata for minutes, so a plain open checks first. A
    file left flagged "open for writing" by a killed writer is fine (the SWMR reader handles it).
    """
    import h5py

    try:
        h5py.File(path, "r").close()
    except OSError as error:
        if "already open for write" not in str(error):
            raise DatasetError(f"dataset file {str(path)!r} cannot be read as HDF5 ({error})") from error


def _groups(groups, samples: int, source: str) -> Tensor | None:
    if groups is None:
        return None
    groups = np.asarray(groups)
    if groups.shape != (samples,) or not np.issubdtype(groups.dtype, np.integer):
        raise DatasetError(f"{source}: 'group' must be ({samples},) integers (trajectory ids), got "
                           f"{groups.shape} {groups.dtype}")
    return torch.from_numpy(groups.astype(np.int64))


def make_split(data: TrainingData, validation_fraction: float, test_fraction: float = 0.0,
               by: str = "random", seed: int = 0) -> dict[str, list[int]]:
    """Split the samples of ``data`` into training, validation and test sets.

    Args:
        data: the dataset.
        validation_fraction, test_fraction: shares of the samples (``by="random"``) or of the
            groups (``by="group"``) held out; at least one sample (group) for validation, none for
            test when ``test_fraction`` is 0.
        by: ``"random"`` (per sample) or ``"group"`` (whole groups, from ``data.groups``).
        seed: seed of the shuffle.

    Returns:
        ``{"train_indices", "validation_indices", "test_indices"}``: sorted lists of sample indices.

    Raises:
        ValueError: fractions outside [0, 1) or summing to 1 or more, an unknown ``by``.
        DatasetError: ``by="group"`` without groups, or too few samples (groups) for the split.
    """
    if not 0.0 < validation_fraction < 1.0 or not 0.0 <= test_fraction < 1.0 \
            or validation_fraction + test_fraction >= 1.0:
        raise ConfigurationError(
            f"validation_fraction in (0, 1) and test_fraction in [0, 1) must leave samples to "
                         f"train on, got {validation_fraction!r} and {test_fraction!r}")
    if by not in ("random", "group"):
        raise ConfigurationError(f"split by must be 'random' or 'group', got {by!r}")
    if by == "group" and data.groups is None:
        raise DatasetError("a split by group needs the dataset's 'group' column (trajectory ids); it has "
                           "none")
    units = data.groups.unique() if by == "group" else torch.arange(len(data))
    order = units[torch.randperm(len(units), generator=torch.Generator().manual_seed(seed))]
    n_validation = max(1, int(round(validation_fraction * len(units))))
    n_test = max(1, int(round(test_fraction * len(units)))) if test_fraction > 0 else 0
    if n_validation + n_test >= len(units):
        raise DatasetError(f"{len(units)} {'groups' if by == 'group' else 'samples'} are too few for a "
                           f"validation share {validation_fraction} and a test share {test_fraction}")
    parts = {"validation_indices": order[:n_validation],
             "test_indices": order[n_validation:n_validation + n_test],
             "train_indices": order[n_validation + n_test:]}
    if by == "group":
        parts = {name: torch.nonzero(torch.isin(data.groups, ids)).reshape(-1) for name, ids in parts.items()}
    return {name: sorted(parts[name].tolist()) for name in SPLIT_NAMES}


def store_split(path: str | os.PathLike, split: dict) -> None:
    """Write ``split`` (``{name: sample indices}``) into the HDF5 dataset file ``path`` (group ``/split``,
    replaced if present), next to the table :meth:`TrainingData.from_hdf5` reads."""
    import h5py

    with h5py.File(path, "a") as file:
        if "split" in file:
            del file["split"]
        group = file.create_group("split")
        for name in SPLIT_NAMES:
            group.create_dataset(name, data=np.asarray(split.get(name, []), dtype=np.int64))


def read_split(path: str | os.PathLike) -> dict | None:
    """The split stored in the HDF5 dataset file ``path`` by :func:`store_split`, or ``None``."""
    import h5py

    with h5py.File(path, "r") as file:
        if "split" not in file:
            return None
        return {name: file["split"][name][()].tolist() for name in SPLIT_NAMES if name in file["split"]}
