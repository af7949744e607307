"""Damaged H5Writer files: truncated or overwritten files give a DataError or only true records, fast.

The reference file holds two tables whose every value is a known function of its
``sample_id``, so any record a reader returns can be checked against the truth. Each
damaged copy is read by :func:`common.io.read_table`; it must raise an error naming the
file, or return a prefix of the true records, within a few seconds (a bound on a hang, not
a speed test). Two images are damaged: the file as a clean writer closed it, and as a
killed writer left it (flagged "open for writing", read in SWMR mode, where HDF5 retries
damaged metadata).
"""

import os
import re
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from test_io import ROOT, _environment  # tests/common is on the path; mace-torch owns "tests"

from common import io
from common.errors import DataError

RECORDS, WIDTH = 300, 512  # 64 records per 256 KiB chunk: 5 chunks per column
FAILED_EVERY = 7
SECONDS = 10.0  # bounds a hang; a damaged read takes well under a second


def _truth(sample_id):
    return np.arange(WIDTH, dtype=np.float64) * 0.5 + sample_id


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The reference file's bytes as a clean writer closed it, and as a killed writer left it."""
    path = tmp_path_factory.mktemp("reference") / "reference.h5"
    with io.H5Writer(path) as writer:
        for sample_id in range(RECORDS):
            writer.append({"sample_id": sample_id, "x": _truth(sample_id), "even": sample_id % 2 == 0})
            if sample_id % FAILED_EVERY == 0:
                writer.append({"sample_id": sample_id, "code": np.int32(3 * sample_id)}, group="failed")
        killed = path.read_bytes()  # everything appended is flushed; the flags say "open for writing"
    clean = path.read_bytes()
    assert killed[11] != 0 and clean[11] == 0
    with h5py.File(path, "r") as file:
        assert file["x"].fletcher32 and file["failed/code"].fletcher32  # HDF5's per-chunk checksum
        chunks = [file["x"].id.get_chunk_info(index) for index in range(file["x"].id.get_num_chunks())]
    return {"clean": clean, "killed": killed, "x_chunks": [(c.byte_offset, c.size) for c in chunks]}


def _read_truthfully(path):
    """Read both tables; return how many records came back (None per table that raised)."""
    counts = []
    start = time.monotonic()
    for group in ("/", "failed"):
        try:
            table = io.read_table(path, group=group)
        except ValueError as error:  # DataError, or a table made unreachable: both name the file
            assert str(path) in str(error)
            counts.append(None)
            continue
        ids = table["sample_id"]
        if group == "/":
            np.testing.assert_array_equal(ids, np.arange(len(ids)))
            np.testing.assert_array_equal(table["x"], np.array([_truth(i) for i in ids]).reshape(-1, WIDTH))
            np.testing.assert_array_equal(table["even"], ids % 2 == 0)
        else:
            np.testing.assert_array_equal(ids, np.arange(len(ids)) * FAILED_EVERY)
            np.testing.assert_array_equal(table["code"], 3 * ids)
        counts.append(len(ids))
    assert time.monotonic() - start < SECONDS
    return counts


@pytest.mark.parametrize("image", ["clean", "killed"])
def test_truncated_files_raise_or_return_only_true_records(tmp_path, images, image):
    data = images[image]
    path = tmp_path / "truncated.h5"
    path.write_bytes(data)
    assert _read_truthfully(path) == [RECORDS, len(range(0, RECORDS, FAILED_EVERY))]
    lengths = [int(len(data) * fraction) for fraction in (0.01, 0.05, 0.3, 0.6, 0.9)]
    for length in lengths:  # the lengths at which plain SWMR reads returned records of zeros
        path.write_bytes(data[:length])
        with pytest.raises(DataError, match="truncated"):
            io.read_table(path)
    for length in range(len(data) - 1, len(data) - 4000, -250):  # near the end: metadata written last
        path.write_bytes(data[:length])
        _read_truthfully(path)


@pytest.mark.slow
@pytest.mark.parametrize("image", ["clean", "killed"])
def test_overwritten_bytes_raise_or_return_only_true_records(tmp_path, images, image):
    data = images[image]
    structures = [match.start() for match in re.finditer(rb"OHDR|OCHK|EAHD|EADB|FAHD|FADB|BTHD|GCOL", data)]
    chunk_starts = [offset + size // 2 for offset, size in images["x_chunks"]]
    rng = np.random.default_rng(19)
    offsets = {
        "superblock": [9, 20, 30],
        "object headers and chunk indexes": [start + 13 for start in structures],
        "data chunks of x": chunk_starts,
        "anywhere": rng.integers(0, len(data) - 8, 12).tolist(),
    }
    path = tmp_path / "overwritten.h5"
    for where, positions in offsets.items():
        refused = 0
        for offset in positions:
            damaged = bytearray(data)
            damaged[offset : offset + 8] = bytes(byte ^ 0x5A for byte in damaged[offset : offset + 8])
            path.write_bytes(damaged)
            refused += None in _read_truthfully(path)
        if where != "anywhere":  # bytes that matter: each damage must be noticed
            assert refused == len(positions), where


def test_check_reports_what_is_intact_and_recoverable(tmp_path, images):
    path = tmp_path / "checked.h5"
    command = [sys.executable, "-m", "common.io", "check", str(path)]

    def run():
        environment = _environment()
        return subprocess.run(command, capture_output=True, text=True, env=environment, cwd=ROOT, timeout=60)

    path.write_bytes(images["killed"])
    result = run()
    assert result.returncode == 0, result.stderr
    assert f"table '/': {RECORDS} records, all intact" in result.stdout
    assert "left open by a killed writer" in result.stdout
    # a damaged third chunk of x: the records of the first two chunks (64 each) are recoverable
    offset, size = images["x_chunks"][2]
    damaged = bytearray(images["clean"])
    damaged[offset + 100] ^= 0xFF
    path.write_bytes(damaged)
    result = run()
    assert result.returncode == 1
    assert f"table '/': {RECORDS} records written, the first 128 recoverable" in result.stdout
    assert "key 'x': the chunk of rows 128.. cannot be read" in result.stdout
    report = io.check(path)
    assert not report.intact and report.records["/"] == (RECORDS, 128)
    assert report.records["failed"] == (len(range(0, RECORDS, FAILED_EVERY)),) * 2
    # truncated after the second chunk of x: still 128 records recoverable, and the cut is reported
    path.write_bytes(images["clean"][: images["x_chunks"][2][0] + 10])
    report = io.check(path)
    assert not report.intact and report.records["/"][1] == 128
    assert any("truncated" in line for line in report.lines)
    assert run().returncode == 1


def test_an_interrupted_table_creation_is_read_from_and_restored_by_its_undo_copy(tmp_path, images):
    from common.io import recovery

    path = tmp_path / "interrupted.h5"
    path.write_bytes(images["clean"])
    status = path.stat()
    identity = (status.st_dev, status.st_ino)
    recovery.save_undo(path, identity)  # what a writer does before creating a table...
    with open(path, "r+b") as handle:  # ...and a kill in the middle of the change
        handle.truncate(len(images["clean"]) // 2)
    assert _read_truthfully(path) == [RECORDS, len(range(0, RECORDS, FAILED_EVERY))]  # the undo copy
    with io.H5Writer(path) as writer:  # the next writer puts the undo copy back
        assert writer.count() == RECORDS
        writer.append({"sample_id": RECORDS, "x": _truth(RECORDS), "even": True})
    assert not recovery.undo_path(path, identity).exists()
    assert os.stat(path).st_ino == status.st_ino
    assert len(io.read_table(path)["sample_id"]) == RECORDS + 1


def test_a_chunk_torn_by_a_kill_keeps_its_committed_records(tmp_path):
    """A kill can cut short the rewrite of a column's last chunk: new first pages, old rest and checksum.

    The tear is made by splicing the bytes HDF5 wrote for the chunk before and after one more
    record: the committed records read back, the writer repairs the chunk and appends, and a
    tear that also changed a committed row is refused.
    """
    path = tmp_path / "torn.h5"
    records = 10  # of 64 per chunk: the last chunk is partly filled
    with io.H5Writer(path) as writer:
        for sample_id in range(records + 1):
            writer.append({"sample_id": sample_id, "x": _truth(sample_id), "even": sample_id % 2 == 0})
    with h5py.File(path, "r+") as file:
        _, after = file["x"].id.read_direct_chunk((0, 0))  # the chunk with one more record
        file["x"].resize(records, axis=0)  # HDF5 fills the dropped row with zeros and rewrites
        file["_committed"][0] = records
        _, before = file["x"].id.read_direct_chunk((0, 0))
    row_bytes, page = WIDTH * 8, 4096
    cut = (records * row_bytes // page + 1) * page  # the pages holding the new row were written
    torn = after[:cut] + before[cut:]
    assert torn[-4:] == before[-4:] != after[-4:]
    with h5py.File(path, "r+") as file:
        file["x"].id.write_direct_chunk((0, 0), torn, 0)
        with pytest.raises(OSError):  # HDF5 itself refuses the torn chunk
            file["x"][0]
    assert _read_truthfully(path)[0] == records
    report = io.check(path)
    assert report.intact and report.records["/"] == (records, records)
    with io.H5Writer(path) as writer:  # repairs the chunk, then extends it
        writer.append({"sample_id": records, "x": _truth(records), "even": True})
    assert _read_truthfully(path)[0] == records + 1
    with h5py.File(path, "r") as file:
        np.testing.assert_array_equal(file["x"][: records + 1, 0], np.arange(records + 1))
    # the same tear, but a committed row also changed: damage, not a kill
    damaged = bytearray(torn)
    damaged[3 * row_bytes + 8] ^= 0x10
    with h5py.File(path, "r+") as file:
        file["x"].resize(records, axis=0)
        file["_committed"][0] = records
        file["x"].id.write_direct_chunk((0, 0), bytes(damaged), 0)
    with pytest.raises(DataError, match="key 'x'"):
        io.read_table(path)
