"""Writer exclusion by file identity (symlinks, hard links) and checkpoint verification.

* A writer holding a file excludes every other writer reaching the same file by another
  name (a symlink, a hard link); the refused attempt neither clears the live writer's
  "open for writing" flag nor disturbs its records, and table creation keeps the links.
* A checkpoint with a flipped byte, cut short, holding NaN or inf, or of another kind is
  refused with a DataError naming the file (and the key, and both kinds).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from test_io import _environment  # tests/common is on the path; mace-torch owns "tests"

from common import io
from common.errors import DataError
from common.io import recovery

LIVE_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from common.io import H5Writer

    with H5Writer(sys.argv[1]) as writer:
        writer.append({"sample_id": 0, "x": np.zeros(3)})
        print(0, flush=True)
        for line in sys.stdin:
            sample_id = int(line)
            writer.append({"sample_id": sample_id, "x": np.full(3, float(sample_id))})
            if sample_id % 4 == 0:  # a new table, created while other names of the file exist
                writer.append({"sample_id": sample_id}, group=f"table{sample_id}")
            print(sample_id, flush=True)
    """
)


@pytest.mark.slow
def test_symlinks_and_hard_links_to_a_live_file_are_refused(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "other").mkdir()
    path = tmp_path / "data" / "live.h5"
    process = subprocess.Popen(
        [sys.executable, "-c", LIVE_WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_environment(),
        text=True,
    )
    try:
        assert process.stdout.readline().strip() == "0"
        inode = path.stat().st_ino
        symlink, hard_link = tmp_path / "other" / "symlink.h5", tmp_path / "other" / "hard.h5"
        symlink.symlink_to(path)
        os.link(path, hard_link)
        relative = os.path.relpath(path)
        for sample_id in range(1, 9):
            for name in (path, symlink, hard_link, relative):
                with pytest.raises(RuntimeError, match="already open in another H5Writer"):
                    io.H5Writer(name)
            assert recovery.read_superblock(path).flags != 0  # the live writer's flag stays
            process.stdin.write(f"{sample_id}\n")
            process.stdin.flush()
            assert process.stdout.readline().strip() == str(sample_id)
    finally:
        process.stdin.close()
        process.wait(timeout=60)
    assert process.returncode == 0
    # every acknowledged record is intact, read through any name; the links survived table creation
    table = io.read_table(hard_link)
    np.testing.assert_array_equal(table["sample_id"], np.arange(9))
    np.testing.assert_array_equal(table["x"], np.repeat(np.arange(9.0), 3).reshape(9, 3))
    assert io.read_table(symlink, group="table8")["sample_id"].tolist() == [8]
    assert path.stat().st_ino == inode and os.path.samefile(path, hard_link) and symlink.is_symlink()
    # mode "w" through a link empties the one file in place
    with io.H5Writer(hard_link, mode="w") as writer:
        writer.append({"sample_id": 99})
    assert io.read_table(path)["sample_id"].tolist() == [99] and os.path.samefile(path, hard_link)


def _state():
    return {
        "positions": torch.linspace(0, 1, 30, dtype=torch.float64).reshape(10, 3),
        "nested": {"weights": torch.ones(4, 2), "array": np.arange(5.0)},
        "step": 7,
    }


def test_a_flipped_or_missing_byte_is_refused(tmp_path):
    path = tmp_path / "run.chk"
    io.save_checkpoint(path, _state(), kind="test.state")
    data = path.read_bytes()
    loaded = io.load_checkpoint(path, kind="test.state")
    assert torch.equal(loaded["positions"], _state()["positions"]) and loaded["step"] == 7
    header_end = data.index(b"\n", data.index(b"\n") + 1) + 1
    for offset in (3, 30, header_end + 10, (header_end + len(data)) // 2, len(data) - 1):
        damaged = bytearray(data)
        damaged[offset] ^= 0x01
        path.write_bytes(damaged)
        with pytest.raises(DataError, match="run.chk"):
            io.load_checkpoint(path, kind="test.state")
    path.write_bytes(data[:-100])
    with pytest.raises(DataError, match="run.chk' is truncated"):
        io.load_checkpoint(path)
    path.write_bytes(data)
    path.write_bytes(data[: header_end + 100] + data[header_end + 101 :] + b"\x00")  # same length
    with pytest.raises(DataError, match="SHA-256 does not match"):
        io.load_checkpoint(path)


def test_nan_and_inf_are_refused_on_save_and_on_load(tmp_path):
    path = tmp_path / "run.chk"
    io.save_checkpoint(path, _state())
    bad = _state()
    bad["positions"][4, 1] = float("nan")
    with pytest.raises(DataError, match=r"run.chk': state\['positions'\] of row 4 are not finite"):
        io.save_checkpoint(path, bad)
    bad = _state()
    bad["nested"]["array"][2] = np.inf
    with pytest.raises(DataError, match=r"state\['nested'\]\['array'\] of row 2 is not finite: inf"):
        io.save_checkpoint(path, bad)
    assert torch.equal(io.load_checkpoint(path)["positions"], _state()["positions"])  # the old one stays
    # a checkpoint written before checksums (a bare torch.save) loads with a warning, and is checked
    legacy = tmp_path / "legacy.chk"
    torch.save({"positions": _state()["positions"], "step": 3}, legacy)
    with pytest.warns(UserWarning, match="no checksum"):
        assert io.load_checkpoint(legacy)["step"] == 3
    nan_positions = _state()["positions"]
    nan_positions[9, 2] = float("nan")
    torch.save({"positions": nan_positions}, legacy)
    with pytest.warns(UserWarning), pytest.raises(DataError, match=r"state\['positions'\] of row 9"):
        io.load_checkpoint(legacy)


def test_a_checkpoint_of_another_kind_is_refused_naming_both(tmp_path):
    path = tmp_path / "run.chk"
    io.save_checkpoint(path, _state(), kind="mindsponge.train")
    with pytest.raises(DataError, match="of kind 'mindsponge.train'; expected 'mindsponge.Simulation'"):
        io.load_checkpoint(path, kind="mindsponge.Simulation")
    assert io.load_checkpoint(path, kind=("mindsponge.potential", "mindsponge.train"))["step"] == 7
    assert io.load_checkpoint(path)["step"] == 7  # no kind expected: any
    io.save_checkpoint(path, _state())
    with pytest.raises(DataError, match="names no kind; expected 'mindsponge.Simulation'"):
        io.load_checkpoint(path, kind="mindsponge.Simulation")

