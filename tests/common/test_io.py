"""Tests of common.io: kill-safe HDF5 appends, atomic checkpoints, provenance, the HDF5 Dataset."""

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest
import torch

from common import io
from common.errors import DataError
from common.io import recovery

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A writer that appends records until killed. Each record's content is a function of
# its sample_id, so a reader can tell an intact record from a damaged one. Every
# 5th sample is also recorded as "failed" (a second table, created mid-run), and a
# third table appears once 12 records exist (another structural change mid-run).
WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from common.io import H5Writer

    path, rows = sys.argv[1], int(sys.argv[2])
    with H5Writer(path) as writer:
        start = writer.count()
        for sample_id in range(start, start + 100000):
            data = np.arange(rows * 512, dtype=np.float64).reshape(rows, 512) + sample_id
            writer.append({"sample_id": sample_id, "data": data, "note": "sample %d" % sample_id})
            if sample_id % 5 == 3:
                message = "failed %d " % sample_id * 50
                writer.append({"sample_id": sample_id, "message": message}, group="failed")
            if sample_id >= 12:
                writer.append({"sample_id": sample_id, "flag": sample_id % 2 == 0}, group="extra/late")
            print(sample_id, flush=True)
    """
)


def _environment():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _run_until_killed(script, arguments, wait_for_lines, extra_delay, folder):
    """Start ``script``, wait until it printed ``wait_for_lines`` lines, SIGKILL it after ``extra_delay`` s.

    Returns the integers the script printed before it died.
    """
    with open(folder / "stderr.txt", "w+") as errors:  # a file: a full stderr pipe cannot block the script
        process = subprocess.Popen(
            [sys.executable, "-c", script, *map(str, arguments)],
            stdout=subprocess.PIPE,
            stderr=errors,
            env=_environment(),
            text=True,
        )
        printed = []
        try:
            while len(printed) < wait_for_lines:
                line = process.stdout.readline()
                if not line:
                    process.wait()
                    errors.seek(0)
                    raise AssertionError(f"the script stopped early: {errors.read()}")
                printed.append(int(line))
            time.sleep(extra_delay)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
            # read through the same buffered stream as above (communicate() would skip its buffer)
            printed += [int(line) for line in process.stdout.read().split()]
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()
    assert process.returncode == -signal.SIGKILL
    return printed


def _table_if_created(path, group, keys):
    """The table ``group``, or empty columns if the writer was killed before creating it."""
    try:
        return io.read_table(path, group=group)
    except ValueError as error:
        assert f"no H5Writer table at group {group!r}" in str(error)
        return {key: np.array([]) for key in keys}


def _check_intact(path, rows, printed):
    """Every printed id is readable and intact, and nothing half-written is reported."""
    table = io.read_table(path)
    count = len(table["sample_id"])
    # the record after the last printed one may be complete but unprinted (killed before print)
    assert max(printed) + 1 <= count <= max(printed) + 2
    np.testing.assert_array_equal(table["sample_id"], np.arange(count))
    expected = np.arange(rows * 512, dtype=np.float64).reshape(rows, 512)
    for sample_id in range(count):
        np.testing.assert_array_equal(table["data"][sample_id], expected + sample_id)
        assert table["note"][sample_id] == f"sample {sample_id}"
    # the other tables were appended before the print: every printed id is there, intact
    failed = _table_if_created(path, "failed", ["sample_id", "message"])
    assert (
        {i for i in printed if i % 5 == 3}
        <= set(failed["sample_id"])
        <= {i for i in range(count) if i % 5 == 3}
    )
    for sample_id, message in zip(failed["sample_id"], failed["message"]):
        assert message == f"failed {sample_id} " * 50
    late = _table_if_created(path, "extra/late", ["sample_id", "flag"])
    assert {i for i in printed if i >= 12} <= set(late["sample_id"]) <= set(range(12, count))
    assert late["flag"].tolist() == [i % 2 == 0 for i in late["sample_id"]]
    return count


@pytest.mark.parametrize("rows", [1, 256], ids=["small-records", "2MB-records"])
def test_sigkill_at_random_moments_loses_no_finished_record(tmp_path, rows):
    path = tmp_path / "killed.h5"
    generator = random.Random(rows)
    total = 0
    for _ in range(4):
        printed = _run_until_killed(
            WRITER,
            [path, rows],
            wait_for_lines=generator.randint(1, 8),
            extra_delay=generator.uniform(0, 0.05),
            folder=tmp_path,
        )
        assert printed[0] == total  # each run resumes exactly after the last complete record
        total = _check_intact(path, rows, printed)
        try:  # plain h5py opens the file if the kill came between SWMR sessions (creating a table)
            h5py.File(path, "r").close()
        except OSError as error:  # killed while appending: only SWMR readers (ours) open it
            assert "consistency flags" in str(error)
    assert total >= 4
    # reopening with a writer recovers the file: plain h5py opens it again, no partial rows remain
    with io.H5Writer(path) as writer:
        assert writer.count() == total
        assert "/" in writer.groups and set(writer.groups) <= {"/", "failed", "extra/late"}
    with h5py.File(path, "r") as file:
        assert file["data"].shape == (total, rows, 512)
        assert file[io.COMMITTED][0] == total


def test_reader_sees_only_complete_records_while_writer_runs(tmp_path):
    path = tmp_path / "live.h5"
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "64"], stdout=subprocess.PIPE, env=_environment(), text=True
    )
    try:
        printed = [int(process.stdout.readline()) for _ in range(3)]
        counts = []
        for _ in range(5):
            table = io.read_table(path)  # concurrent with the writer
            counts.append(len(table["sample_id"]))
            assert counts[-1] >= printed[-1] + 1
            expected = np.arange(64 * 512, dtype=np.float64).reshape(64, 512)
            for sample_id, data in zip(table["sample_id"], table["data"]):
                np.testing.assert_array_equal(data, expected + sample_id)
            printed.append(int(process.stdout.readline()))
    finally:
        process.kill()
        process.wait()
    assert counts[-1] > counts[0]  # the file grew while it was being read


def test_writer_round_trip_types_and_appending_later(tmp_path):
    path = tmp_path / "types.h5"
    with io.H5Writer(path, attributes={"seed": 5, "name": "types"}) as writer:
        for index in range(3):
            writer.append(
                {
                    "index": index,
                    "energy": float(index) / 3,
                    "forces": torch.full((4, 3), index, dtype=torch.float32),
                    "complex": np.complex128(1j * index),
                    "ok": bool(index % 2),
                    "elements": np.array(["H", "He", "Li"][:2]),
                    "label": "é" * index,
                }
            )
    with io.H5Writer(path) as writer:  # reopening appends
        assert writer.count() == 3
        assert writer.columns() == ["complex", "elements", "energy", "forces", "index", "label", "ok"]
        assert writer.columns("failed") == []  # no such table yet
        assert (
            writer.append(
                {
                    "index": 3,
                    "energy": 1.0,
                    "forces": torch.ones(4, 3),
                    "complex": np.complex128(0),
                    "ok": True,
                    "elements": np.array(["C", "N"]),
                    "label": "",
                }
            )
            == 3
        )
    table = io.read_table(path)
    assert table["index"].dtype == np.int64 and table["index"].tolist() == [0, 1, 2, 3]
    assert table["energy"].tolist() == [0.0, 1 / 3, 2 / 3, 1.0]
    assert table["forces"].dtype == np.float32 and table["forces"].shape == (4, 4, 3)
    assert table["complex"].tolist() == [0j, 1j, 2j, 0j]
    assert table["ok"].tolist() == [False, True, False, True]
    assert table["elements"].tolist() == [["H", "He"]] * 3 + [["C", "N"]]
    assert table["label"].tolist() == ["", "é", "éé", ""]
    with h5py.File(path, "r") as file:
        assert file.attrs["seed"] == 5 and file.attrs["name"] == "types"
    assert list(io.read_table(path, keys=["index"])) == ["index"]
    # mode "w" starts over
    with io.H5Writer(path, mode="w") as writer:
        assert writer.count() == 0 and writer.groups == []


def test_writer_errors_name_the_key(tmp_path):
    path = tmp_path / "errors.h5"
    with io.H5Writer(path) as writer:
        writer.append({"x": np.zeros(3), "n": 1})
        with pytest.raises(ValueError, match=r"key 'x' has shape \(4,\), the table's is \(3,\)"):
            writer.append({"x": np.zeros(4), "n": 1})
        with pytest.raises(ValueError, match=r"key 'x' has dtype float32, the table's is float64"):
            writer.append({"x": np.zeros(3, dtype=np.float32), "n": 1})
        with pytest.raises(ValueError, match=r"missing \['n'\], unexpected \['m'\]"):
            writer.append({"x": np.zeros(3), "m": 1})
        with pytest.raises(TypeError, match=r"record key 'n': cannot store dict"):
            writer.append({"x": np.zeros(3), "n": {}})
        with pytest.raises(ValueError, match=r"column name '_hidden'"):
            writer.append({"_hidden": 1}, group="other")
        with pytest.raises(RuntimeError, match="already open in another H5Writer"):
            io.H5Writer(path)
        assert writer.count() == 1  # failed appends leave nothing behind
    with pytest.raises(ValueError, match="mode must be 'a'"):
        io.H5Writer(path, mode="r")
    with pytest.raises(ValueError, match=r"no H5Writer table at group 'nothere'"):
        io.read_table(path, group="nothere")
    with pytest.raises(ValueError, match=r"unknown keys \['y'\]"):
        io.read_table(path, keys=["y"])
    with pytest.raises(FileNotFoundError, match="missing.h5"):
        io.read_table(tmp_path / "missing.h5")
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(ValueError, match="no HDF5 signature"):
        io.H5Writer(tmp_path / "text.h5")


def test_superblock_checksum_is_hdf5s():
    """Our lookup3 reproduces the checksum HDF5 itself stored in a fresh file's superblock."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "fresh.h5"
        h5py.File(path, "w", libver="latest").close()
        head = path.read_bytes()[:64]
    end = 12 + 4 * head[9]
    assert recovery.lookup3(head[:end]) == int.from_bytes(head[end : end + 4], "little")
    # published test vectors of lookup3 hashlittle (initval 0)
    assert recovery.lookup3(b"") == 0xDEADBEEF
    assert recovery.lookup3(b"Four score and seven years ago") == 0x17770551


def test_dataset_over_files_and_dataloader_workers(tmp_path):
    paths = [tmp_path / "a.h5", tmp_path / "b.h5"]
    for file_index, path in enumerate(paths):
        with io.H5Writer(path) as writer:
            for index in range(5 + file_index):
                writer.append(
                    {"id": 100 * file_index + index, "x": torch.full((2,), float(index)), "tag": "t"}
                )
    dataset = io.H5Dataset(paths, keys=["id", "x"])
    assert len(dataset) == 11
    assert dataset[0]["id"].item() == 0 and dataset[5]["id"].item() == 100 and dataset[-1]["id"].item() == 105
    assert torch.equal(dataset[7]["x"], torch.full((2,), 2.0)) and set(dataset[7]) == {"id", "x"}
    with pytest.raises(IndexError, match="out of range"):
        dataset[11]
    doubled = io.H5Dataset(paths[0], transform=lambda item: item["x"] * 2)
    assert torch.equal(doubled[3], torch.full((2,), 6.0)) and io.H5Dataset(paths[0])[0]["tag"] == "t"
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2, shuffle=False)
    ids = torch.cat([batch["id"] for batch in loader]).tolist()
    assert ids == [0, 1, 2, 3, 4, 100, 101, 102, 103, 104, 105]
    dataset.close()
    with pytest.raises(ValueError, match="paths is empty"):
        io.H5Dataset([])


# ---------------------------------------------------------------------------------------------
# checkpoints

CHECKPOINTER = textwrap.dedent(
    """
    import sys
    import torch
    from common.io import save_checkpoint

    path = sys.argv[1]
    for version in range(1, 100000):
        save_checkpoint(path, {"version": version, "data": torch.full((1_000_000,), float(version))})
        print(version, flush=True)
    """
)


@pytest.mark.slow
def test_kill_during_checkpoint_save_leaves_a_complete_checkpoint(tmp_path):
    path = tmp_path / "run.chk"
    io.save_checkpoint(path, {"version": 0, "data": torch.zeros(1_000_000)})
    generator = random.Random(3)
    for _ in range(2):
        printed = _run_until_killed(
            CHECKPOINTER,
            [path],
            wait_for_lines=generator.randint(1, 3),
            extra_delay=generator.uniform(0, 0.05),
            folder=tmp_path,
        )
        state = io.load_checkpoint(path)
        assert state["version"] in (printed[-1], printed[-1] + 1)
        assert torch.equal(state["data"], torch.full((1_000_000,), float(state["version"])))


def test_checkpoint_round_trip_is_bit_exact_including_rng_states(tmp_path):
    import random as python_random

    generator = torch.Generator().manual_seed(7)
    torch.rand(3, generator=generator)
    numpy_generator = np.random.default_rng(11)
    numpy_generator.random(5)
    legacy = np.random.RandomState(3)
    state = {
        "positions": torch.randn(10, 3, dtype=torch.float64),
        "half": torch.randn(4).half(),
        "step": 12,
        "time": 0.1 + 0.2,
        "name": "water",
        "flags": (True, None, 3 + 4j),
        "array": np.arange(6, dtype=np.int16).reshape(2, 3),
        "strings": np.array(["a", "bcd"]),
        "scalar": np.float32(1.5),
        "nested": {"list": [1, 2.5, "x", torch.tensor([1, 2])], "empty": {}},
        "torch_rng": torch.get_rng_state(),
        "generator": generator.get_state(),
        "numpy_rng": numpy_generator.bit_generator.state,
        "legacy_rng": legacy.get_state(),
        "python_rng": python_random.Random(5).getstate(),
        "dtype": torch.float32,
    }
    path = tmp_path / "state.chk"
    io.save_checkpoint(path, state)
    loaded = io.load_checkpoint(path)
    assert loaded.keys() == state.keys()
    assert torch.equal(loaded["positions"], state["positions"]) and loaded["half"].dtype == torch.float16
    assert loaded["step"] == 12 and loaded["time"] == 0.1 + 0.2 and loaded["flags"] == (True, None, 3 + 4j)
    assert loaded["array"].dtype == np.int16 and np.array_equal(loaded["array"], state["array"])
    assert loaded["strings"].tolist() == ["a", "bcd"]
    assert type(loaded["scalar"]) is np.float32 and loaded["scalar"] == 1.5
    assert loaded["nested"]["list"][:3] == [1, 2.5, "x"] and loaded["nested"]["empty"] == {}
    assert loaded["dtype"] is torch.float32
    # restored RNG states continue the same streams
    restored = torch.Generator().set_state(loaded["generator"])
    assert torch.equal(torch.rand(5, generator=restored), torch.rand(5, generator=generator))
    restored_numpy = np.random.default_rng()
    restored_numpy.bit_generator.state = loaded["numpy_rng"]
    assert np.array_equal(restored_numpy.random(4), numpy_generator.random(4))
    restored_legacy = np.random.RandomState()
    restored_legacy.set_state(loaded["legacy_rng"])
    assert np.array_equal(restored_legacy.random_sample(3), legacy.random_sample(3))
    restored_python = python_random.Random()
    restored_python.setstate(loaded["python_rng"])
    assert restored_python.random() == python_random.Random(5).random()
    torch.set_rng_state(loaded["torch_rng"])
    first = torch.rand(3)
    torch.set_rng_state(state["torch_rng"])
    assert torch.equal(first, torch.rand(3))


def test_checkpoint_errors(tmp_path):
    with pytest.raises(TypeError, match=r"state\['model'\]\[0\] is a Linear"):
        io.save_checkpoint(tmp_path / "x.chk", {"model": [torch.nn.Linear(2, 2)]})
    with pytest.raises(TypeError, match="store generator.get_state"):
        io.save_checkpoint(tmp_path / "x.chk", {"rng": torch.Generator()})
    with pytest.raises(TypeError, match="object"):
        io.save_checkpoint(tmp_path / "x.chk", {"a": np.array([None])})
    assert not (tmp_path / "x.chk").exists()
    with pytest.raises(FileNotFoundError, match="nothere.chk"):
        io.load_checkpoint(tmp_path / "nothere.chk")
    (tmp_path / "bad.chk").write_bytes(b"garbage")
    with pytest.raises(DataError, match="bad.chk' is not a checkpoint"):
        io.load_checkpoint(tmp_path / "bad.chk")


# ---------------------------------------------------------------------------------------------
# provenance


def test_provenance_records_versions_parameters_and_commit(tmp_path):
    from dataclasses import dataclass

    @dataclass
    class Parameters:
        steps: int
        output: pathlib.Path

    record = io.provenance({"run": Parameters(3, pathlib.Path("out")), "scale": np.float64(2.0)}, seed=4)
    assert record["torch"] == torch.__version__ and record["numpy"] == np.__version__
    assert record["seed"] == 4 and record["time_utc"].endswith("+00:00")
    assert json.loads(record["parameters"]) == {"run": {"steps": 3, "output": "out"}, "scale": 2.0}
    if (ROOT / ".git").exists():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert record["git_commit"] == head.stdout.strip()
    with h5py.File(tmp_path / "p.h5", "w") as file:
        written = io.write_provenance(file, parameters={"a": 1}, seed=2)
        assert file.attrs["seed"] == 2 and json.loads(file.attrs["parameters"]) == {"a": 1}
        assert file.attrs["version"] == written["version"]
    with pytest.raises(TypeError, match="seed must be an int"):
        io.provenance(seed=1.5)
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        io.provenance({"a": object()})


def test_reopening_clears_a_dangling_string_reference_left_by_a_kill(tmp_path):
    """A kill can leave, after the last complete record, a string reference HDF5 never wrote.

    HDF5 frees the old string of a row it overwrites, so appending there would fail;
    the writer zeroes such references when it opens the file.
    """
    import struct

    path = tmp_path / "dangling.h5"
    with io.H5Writer(path) as writer:
        for index in range(3):
            writer.append({"message": f"m{index}"})
    with h5py.File(path, "r+") as file:  # row 3: length 5 at heap collection 0xd3f0cb, object 3
        filter_mask, raw = file["message"].id.read_direct_chunk((0,))
        raw = raw[:48] + struct.pack("<IQI", 5, 0xD3F0CB, 3) + raw[64:]
        file["message"].id.write_direct_chunk((0,), raw, filter_mask)
    with h5py.File(path, "r+") as file:  # what HDF5 itself does with it
        file["message"].resize((4,))
        with pytest.raises(OSError):
            file["message"][3] = "x"
        file["message"].resize((3,))
    with io.H5Writer(path) as writer:
        assert writer.append({"message": "m3"}) == 3
    assert io.read_table(path)["message"].tolist() == ["m0", "m1", "m2", "m3"]
