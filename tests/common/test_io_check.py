"""``python -m common.io check`` on damaged dataset files: a verdict in bounded time, no hang, no traceback.

The reference file is a small dataset made by the dataset runner: a root table of samples,
a ``failed`` table of string columns (JSON parameters, messages, tracebacks) and a ``runs``
table. Copies truncated near the end (where HDF5 wrote its last global heap collection:
HDF5 itself loops for ever on a cut one) and at random points are checked: each must be
called damaged, with the file named, within a bound that catches a hang (not a speed test),
and every record the check calls recoverable must read back equal to the reference.
"""

import multiprocessing
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from test_io import ROOT, _environment  # tests/common is on the path; mace-torch owns "tests"

from common import datasets, io
from common.errors import DataError
from common.io.check import check_bounded
from common.io.reading import open_for_reading, read_column

SECONDS = 20.0  # bounds a hang; a check of a damaged copy takes well under a second, a few with SWMR retries
# a hang inside HDF5 ignores signals: pytest-timeout's thread method ends the run, printing the stacks
HANG = pytest.mark.timeout(300, method="thread")

RECIPE = textwrap.dedent(
    """
    name = "check_test"

    [generator]
    function = "common.datasets.examples:damped_oscillator"
    options = {{ n_times = 8, duration = 5.0 }}

    [parameters]
    frequency = {{ low = 0.5, high = 5.0, scale = "log" }}
    damping = {{ low = 0.0, high = 1.2 }}

    [sampling]
    method = "sobol"
    n = 16
    seed = 3

    [output]
    path = "{path}"
    """
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A dataset file made by the runner (some samples fail: damping >= 1), and its tables as read back."""
    folder = tmp_path_factory.mktemp("dataset")
    recipe = folder / "recipe.toml"
    recipe.write_text(RECIPE.format(path=(folder / "dataset.h5").as_posix()))
    summary = datasets.generate(recipe, workers=0, progress=False)
    assert summary.failed > 0 and summary.succeeded > 0  # both tables exist
    path = folder / "dataset.h5"
    tables = {group: io.read_table(path, group) for group in ("/", "failed", "runs")}
    assert "Traceback" in tables["failed"]["traceback"][0]  # the string columns the finding was about
    report = io.check(path)
    assert report.intact and report.exit_status == 0, report
    assert report.records == {
        group: (len(table["event" if group == "runs" else "sample_id"]),) * 2
        for group, table in tables.items()
    }
    return {"path": path, "data": path.read_bytes(), "tables": tables}


def _truncation_lengths(size):
    """Every 0.1 % step over the last 2 % of ``size`` and 10 random lengths (fixed seed)."""
    near_end = [int(size * (980 + step) / 1000) for step in range(20)]
    anywhere = np.random.default_rng(7).integers(1, size, 10).tolist()
    return sorted(set(near_end + anywhere))


def _assert_recoverable_rows_are_true(path, report, tables):
    """The first ``recoverable`` records of each table read back from the damaged file equal the reference."""
    with open_for_reading(path, check_length=False) as file:
        for group, (written, recoverable) in report.records.items():
            assert recoverable <= written == len(next(iter(tables[group].values())))
            for key, truth in tables[group].items():
                column = file[key] if group == "/" else file[group][key]
                read = read_column(column, slice(0, recoverable), f"{path}, group {group!r}, key {key!r}")
                np.testing.assert_array_equal(read, truth[:recoverable])


@pytest.mark.slow
@HANG
def test_truncated_dataset_files_are_damaged_within_a_bound(tmp_path, reference):
    data = reference["data"]
    path = tmp_path / "truncated.h5"
    reasons = []
    for length in _truncation_lengths(len(data)):
        path.write_bytes(data[:length])
        start = time.monotonic()
        report = io.check(path)
        assert time.monotonic() - start < SECONDS, length
        assert report.verdict == "damaged" and report.exit_status == 1, (length, str(report))
        assert str(report).startswith(f"{path}: DAMAGED")
        assert f"truncated: {length} bytes, the superblock says {len(data)}" in str(report)
        _assert_recoverable_rows_are_true(path, report, reference["tables"])
        reasons += [problem for table in report.tables.values() for problem in table.problems]
    # the sweep cut a string heap (the hang of the finding), and named the row it stopped at
    assert any("row " in reason and "global heap collection" in reason for reason in reasons)


def test_the_command_line_reports_damage_without_a_traceback(tmp_path, reference):
    data = reference["data"]
    damaged = {  # name -> (content, what its report must say)
        "cut_999.h5": (data[: len(data) * 999 // 1000], "truncated"),
        "cut_990.h5": (data[: len(data) * 990 // 1000], "truncated"),
        "cut_random.h5": (data[: _truncation_lengths(len(data))[0]], "truncated"),
        "empty.h5": (b"", "the file is empty (0 bytes)"),
        "text.h5": (b"sample_id,energy\n0,1.5\n", "not an HDF5 file"),
    }
    for name, (content, _) in damaged.items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "folder.h5").mkdir()
    path = reference["path"]
    cases = [  # (paths, exit status, path -> a text its report must hold)
        (
            [tmp_path / name for name in damaged],
            1,
            {tmp_path / name: text for name, (_, text) in damaged.items()},
        ),
        ([path], 0, {path: "table 'failed'"}),
    ]
    for paths, status, texts in cases:
        result = _run_check(paths)
        assert result.returncode == status, (result.stdout, result.stderr)
        verdict = "intact" if status == 0 else "DAMAGED"
        for report_path, text in texts.items():
            report = _report_of(result.stdout, report_path)
            assert report.startswith(f"{report_path}: {verdict}\n") and text in report, report
    for path, message in [
        (tmp_path / "folder.h5", f"{tmp_path / 'folder.h5'}: a directory, not an HDF5 file"),
        (tmp_path / "missing.h5", f"HDF5 file '{tmp_path / 'missing.h5'}' does not exist"),
    ]:
        result = _run_check([path])
        assert result.returncode == 2 and result.stderr == f"python -m common.io check: {message}\n"


def _run_check(paths):
    """``python -m common.io check PATHS``, checked to end in time and without a traceback."""
    command = [sys.executable, "-m", "common.io", "check", *map(str, paths)]
    start = time.monotonic()
    result = subprocess.run(
        command, capture_output=True, text=True, env=_environment(), cwd=ROOT, timeout=120
    )
    assert time.monotonic() - start < SECONDS * len(paths)
    assert "Traceback" not in result.stdout + result.stderr
    return result


def _report_of(stdout, path):
    """The report of ``path`` in the command line's output: its first line and the indented ones after it."""
    lines = stdout.splitlines()
    first = next(index for index, line in enumerate(lines) if line.startswith(f"{path}: "))
    end = next(
        (index for index in range(first + 1, len(lines)) if not lines[index].startswith("  ")), len(lines)
    )
    return "\n".join(lines[first:end]) + "\n"


@HANG
def test_a_zeroed_string_heap_is_refused_by_the_readers_and_the_check(tmp_path, reference):
    """A full-length file whose string heap is zeroed: HDF5 alone would loop for ever on it."""
    path = tmp_path / "zeroed.h5"
    path.write_bytes(reference["data"])
    with open_for_reading(path) as file:
        _, chunk = file["failed/message"].id.read_direct_chunk((0,))
    address = int.from_bytes(chunk[4:12], "little")  # row 0's reference: length, collection address, index
    size = int.from_bytes(reference["data"][address + 8 : address + 16], "little")
    assert reference["data"][address : address + 4] == b"GCOL"
    damaged = bytearray(reference["data"])
    damaged[address + 16 : address + size] = bytes(size - 16)  # the objects, after the collection's header
    path.write_bytes(damaged)
    start = time.monotonic()
    message = rf"zeroed.h5, group 'failed', key 'message': row 0: its string lies in .* at byte {address}"
    with pytest.raises(DataError, match=message):
        io.read_table(path, "failed", ["message"])
    with io.H5Writer(path) as writer, pytest.raises(DataError, match=rf"key 'message': row 0: .* {address}"):
        writer.read("failed", ["message"])
    report = io.check(path)
    assert time.monotonic() - start < SECONDS
    samples = len(reference["tables"]["/"]["sample_id"])
    assert report.records["failed"][1] == 0 and report.records["/"] == (samples, samples)
    assert any(
        f"key 'message': row 0: its string lies in the global heap collection at byte {address}" in line
        and "zeroed or damaged" in line
        for line in report.lines
    )


def test_check_bounded_gives_a_verdict_when_the_check_hangs_or_crashes(reference):
    """The child process that checks a file is stopped at the time limit, and its crash is reported."""
    report = check_bounded(reference["path"], timeout=0.01)  # too short to even start Python
    assert report.verdict == "undecided" and report.exit_status == 3
    assert "no verdict within 0.01 s" in str(report)

    def crash_the_child():
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            for child in multiprocessing.active_children():
                child.kill()
                return
            time.sleep(0.001)

    killer = threading.Thread(target=crash_the_child)
    killer.start()
    report = check_bounded(reference["path"])
    killer.join()
    assert report.verdict == "damaged" and "killed by signal 9" in str(report)
    assert check_bounded(reference["path"]).intact  # and undisturbed, the same check says intact
