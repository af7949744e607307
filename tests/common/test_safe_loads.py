"""Loading never runs code from a file: a crafted pickle (whose unpickling would create a marker file)
is refused by our checkpoint and learned-potential loaders, before or without running it, whether it is
a bare ``torch.save`` file or a payload behind a valid checksum header; our own checkpoints still round
trip."""

import contextlib
import hashlib
import io as bytes_io
import json

import numpy as np
import pytest
import torch

import mindsponge as ms
from common import io
from common.errors import DataError


class _CreatesMarker:
    """Unpickling this calls ``open(marker, "w")``: the marker file appears if the pickle is run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def _crafted_payload(marker):
    buffer = bytes_io.BytesIO()
    torch.save({"state": _CreatesMarker(marker)}, buffer)
    return buffer.getvalue()


def _bare_file(folder, marker):
    """A bare ``torch.save`` file (the format of checkpoints written before checksums)."""
    path = folder / "bare.chk"
    path.write_bytes(_crafted_payload(marker))
    return path


def _checksummed_file(folder, marker, kind):
    """The crafted payload behind a correct checkpoint header: the checksum does not make it safe."""
    payload = _crafted_payload(marker)
    header = {"bytes": len(payload), "kind": kind, "sha256": hashlib.sha256(payload).hexdigest()}
    path = folder / "checksummed.chk"
    path.write_bytes(b"MINDSCIENCE-CHECKPOINT 2\n" + json.dumps(header).encode() + b"\n" + payload)
    return path


def test_the_crafted_file_runs_code_when_unpickled(tmp_path):
    """The control: loading the crafted file the unsafe way does create the marker."""
    marker = tmp_path / "marker"
    torch.load(_bare_file(tmp_path, marker), weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("layout", ["bare", "checksummed"])
def test_load_checkpoint_refuses_a_crafted_pickle_without_running_it(tmp_path, layout):
    marker = tmp_path / "marker"
    path = _bare_file(tmp_path, marker) if layout == "bare" else _checksummed_file(tmp_path, marker, None)
    with pytest.warns(UserWarning) if layout == "bare" else contextlib.nullcontext():
        with pytest.raises(DataError, match=f"{path.name}.*cannot be read"):
            io.load_checkpoint(path)
    assert not marker.exists()


def test_loading_a_crafted_learned_potential_runs_nothing(tmp_path):
    marker = tmp_path / "marker"
    path = _checksummed_file(tmp_path, marker, "mindsponge.potential")
    with pytest.raises(DataError, match="cannot be read"):
        ms.potentials.load(path)
    assert not marker.exists()


def test_our_checkpoints_round_trip(tmp_path):
    generator = torch.Generator().manual_seed(3)
    state = {
        "positions": torch.randn(5, 3, dtype=torch.float64, generator=generator),
        "step": 12,
        "names": ["a", "b"],
        "array": np.arange(6, dtype=np.float32).reshape(2, 3),
        "rng": generator.get_state(),
        "numpy_rng": np.random.default_rng(1).bit_generator.state,
    }
    io.save_checkpoint(tmp_path / "state.chk", state, kind="test")
    loaded = io.load_checkpoint(tmp_path / "state.chk", kind="test")
    assert torch.equal(loaded["positions"], state["positions"]) and loaded["step"] == 12
    assert loaded["names"] == ["a", "b"] and loaded["numpy_rng"] == state["numpy_rng"]
    np.testing.assert_array_equal(loaded["array"], state["array"])
    assert torch.equal(loaded["rng"], state["rng"])


def test_a_saved_learned_potential_loads_back_with_the_same_energy(tmp_path):
    torch.manual_seed(0)
    model = ms.potentials.SchNet(cutoff=0.5, features=8, interactions=1, elements=(1, 8))
    path = tmp_path / "schnet.pt"
    ms.potentials.save(model, path)
    loaded = ms.potentials.load(path)
    positions = torch.tensor([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.0, 0.1, 0.0]])
    numbers = torch.tensor([8, 1, 1])
    with torch.no_grad():
        energy = float(model(positions, numbers))
        assert float(loaded(positions, numbers)) == energy and energy != 0.0

