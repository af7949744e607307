"""LogReporter: the CSV columns of DESIGN.md plus speed (ns/day), their values against analytic
ideal-gas results, printing to standard output; reporter argument errors.

For non-interacting particles each atom is its own molecule, so the molecular-virial pressure
is ``2 K / (3 V)`` and the density ``M / V``: the log must show exactly these.
"""

import csv
import io
import math
import types

import pytest
import torch

import mindsponge as ms
from mindsponge import reporters

DESIGN_HEADER = "step,time,potential_energy,kinetic_energy,total_energy,temperature,pressure,volume,density"
KJ_PER_MOL_NM3_TO_BAR = 16.605390671738467
AMU_PER_NM3_TO_G_PER_CM3 = 1.66053906892e-3


def _ideal_gas_simulation(reporter, box=True, n_atoms=50, edge=3.0):
    generator = torch.Generator().manual_seed(0)
    system = ms.System(
        torch.rand(n_atoms, 3, generator=generator, dtype=torch.float64) * edge,
        torch.full((n_atoms,), 4.0, dtype=torch.float64),
        box=torch.eye(3, dtype=torch.float64) * edge if box else None,
    )
    simulation = ms.Simulation(
        system,
        ms.ForceField(),
        ms.integrators.LangevinMiddle(0.002, 300.0, 1.0),
        reporters=[reporter],
        remove_center_of_mass_motion=False,
        progress=False,
    )
    simulation.set_velocities(300.0, seed=1)
    return simulation


def _rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_log_columns_are_the_ideal_gas_values(tmp_path):
    path = tmp_path / "log.csv"
    simulation = _ideal_gas_simulation(reporters.LogReporter(path, every=4))
    simulation.run(8)
    simulation.close()
    text = path.read_text()
    assert text.splitlines()[0] == DESIGN_HEADER + ",speed"
    rows = _rows(text)
    assert [int(row["step"]) for row in rows] == [4, 8]
    assert [float(row["time"]) for row in rows] == pytest.approx([0.008, 0.016])
    last = rows[-1]
    kinetic, volume = float(last["kinetic_energy"]), float(last["volume"])
    state = simulation.state
    assert kinetic == pytest.approx(0.5 * float((4.0 * state.velocities**2).sum()), abs=2e-6)
    assert float(last["potential_energy"]) == 0.0
    assert float(last["total_energy"]) == pytest.approx(kinetic, abs=2e-6)
    dof = 3 * 50  # no constraints, centre-of-mass motion kept
    assert float(last["temperature"]) == pytest.approx(2 * kinetic / (dof * 0.00831446261815324), rel=1e-6)
    assert volume == pytest.approx(27.0, rel=1e-9)
    assert float(last["pressure"]) == pytest.approx(
        2 * kinetic / (3 * volume) * KJ_PER_MOL_NM3_TO_BAR, rel=1e-5
    )
    assert float(last["density"]) == pytest.approx(50 * 4.0 / volume * AMU_PER_NM3_TO_G_PER_CM3, rel=1e-6)


def test_speed_is_simulated_time_per_wall_day(tmp_path, monkeypatch):
    """A clock that advances 2 s per report: 4 steps of 2 fs = 8e-6 ns per 2 s = 0.3456 ns/day."""
    ticks = iter(range(0, 1000, 2))
    monkeypatch.setattr(reporters, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    path = tmp_path / "log.csv"
    simulation = _ideal_gas_simulation(reporters.LogReporter(path, every=4))
    simulation.run(12)
    simulation.close()
    speeds = [float(row["speed"]) for row in _rows(path.read_text())]
    assert math.isnan(speeds[0])  # no previous report to measure from
    assert speeds[1:] == pytest.approx([4 * 0.002 * 1e-3 / (2.0 / 86400.0)] * 2, rel=1e-4)


def test_log_to_file_and_standard_output(tmp_path, capsys):
    path = tmp_path / "log.csv"
    simulation = _ideal_gas_simulation(reporters.LogReporter(path, every=5, stdout=True))
    simulation.run(10)
    simulation.close()
    printed = capsys.readouterr().out
    assert printed == path.read_text()
    assert len(_rows(printed)) == 2


def test_log_to_standard_output_only_without_a_box(capsys):
    simulation = _ideal_gas_simulation(reporters.LogReporter(None, every=5), box=False)
    simulation.run(5)
    simulation.close()
    (row,) = _rows(capsys.readouterr().out)
    assert int(row["step"]) == 5
    assert all(math.isnan(float(row[column])) for column in ("pressure", "volume", "density"))
    assert math.isfinite(float(row["temperature"]))


@pytest.mark.parametrize("every", [0, -5, 2.5, True])
def test_reporters_refuse_a_bad_interval(tmp_path, every):
    with pytest.raises(ValueError, match=r"LogReporter: every \(steps\) must be a positive int"):
        reporters.LogReporter(tmp_path / "log.csv", every=every)
    with pytest.raises(ValueError, match=r"H5MDReporter: every \(steps\) must be a positive int"):
        reporters.H5MDReporter(tmp_path / "traj.h5md", every=every)



def test_h5md_reporter_refuses_an_unwritable_path_at_once_and_continues_after_close(tmp_path):
    """The trajectory file is created with the reporter: a folder that does not exist fails before any
    step, naming the file; a simulation closed and run again goes on appending to the same file."""
    from common.errors import ConfigurationError
    from mindsponge.analysis import read_h5md

    missing = tmp_path / "no_such_folder" / "traj.h5md"
    with pytest.raises(ConfigurationError, match=r"cannot create the trajectory .*no_such_folder/traj\.h5md"):
        reporters.H5MDReporter(missing, every=2)
    path = tmp_path / "traj.h5md"
    trajectory = reporters.H5MDReporter(path, every=2)
    assert path.is_file()
    simulation = _ideal_gas_simulation(trajectory)
    simulation.run(4)
    simulation.close()
    simulation.run(4)
    simulation.close()
    frames = read_h5md(path)
    assert len(frames.positions) == 4

def test_truncate_then_append_reports_every_step_once(tmp_path):
    """A run checkpointed at step 8 and stopped at step 12, in the middle of writing step 14 (a
    partial CSV row; a position frame whose step and time were not written), continued with
    reporters cut back to step 8: each step once, and the values of an uninterrupted run."""
    h5py = pytest.importorskip("h5py")

    def simulation(directory, append=False):
        directory.mkdir(exist_ok=True)
        log = reporters.LogReporter(directory / "log.csv", every=2, append=append)
        trajectory = reporters.H5MDReporter(directory / "traj.h5md", every=4, append=append)
        result = _ideal_gas_simulation(log)
        result.reporters.append(trajectory)
        result.checkpoint, result.checkpoint_every = directory / "run.chk", 8
        return result

    straight = simulation(tmp_path / "straight")
    straight.run(16)
    straight.close()
    stopped = simulation(tmp_path / "stopped")
    stopped.run(12)
    stopped.close()
    with open(tmp_path / "stopped" / "log.csv", "a") as handle:
        handle.write("14,0.028000,1.5")
    with h5py.File(tmp_path / "stopped" / "traj.h5md", "a") as handle:
        handle["particles/all/position/value"].resize(4, axis=0)
    resumed = simulation(tmp_path / "stopped", append=True)
    resumed.load_checkpoint(tmp_path / "stopped" / "run.chk")
    assert resumed.state.step == 8
    for reporter in resumed.reporters:
        reporter.truncate(resumed.state.step)
    resumed.run(8)
    resumed.close()
    rows, reference = (
        _rows((tmp_path / name / "log.csv").read_text()) for name in ("stopped", "straight")
    )
    assert [int(row["step"]) for row in rows] == [2, 4, 6, 8, 10, 12, 14, 16]
    for column in ("time", "kinetic_energy", "pressure"):
        assert [row[column] for row in rows] == [row[column] for row in reference], column
    with (
        h5py.File(tmp_path / "stopped" / "traj.h5md", "r") as handle,
        h5py.File(tmp_path / "straight" / "traj.h5md", "r") as expected,
    ):
        for name in ("particles/all/position", "particles/all/box/edges", "observables/temperature"):
            assert handle[f"{name}/step"][:].tolist() == [4, 8, 12, 16], name
            for dataset in ("value", "time"):
                assert (handle[f"{name}/{dataset}"][:] == expected[f"{name}/{dataset}"][:]).all(), name


def test_truncate_without_files_and_of_a_header_only_log(tmp_path):
    h5py = pytest.importorskip("h5py")
    log = reporters.LogReporter(tmp_path / "log.csv", every=2, append=True)
    trajectory = reporters.H5MDReporter(tmp_path / "traj.h5md", every=2, append=True)
    log.truncate(10)  # nothing written yet but the log's header: nothing to do
    trajectory.truncate(10)
    assert (tmp_path / "log.csv").read_text().splitlines() == [DESIGN_HEADER + ",speed"]
    with h5py.File(tmp_path / "traj.h5md", "r") as handle:  # created with the reporter, still empty
        assert list(handle) == []
    (tmp_path / "log.csv").write_text("step,ti")  # killed while writing the header
    log = reporters.LogReporter(tmp_path / "log.csv", every=2, append=True)
    log.truncate(0)
    simulation = _ideal_gas_simulation(log)
    simulation.run(2)
    simulation.close()
    assert (tmp_path / "log.csv").read_text().splitlines()[0] == DESIGN_HEADER + ",speed"
    assert [int(row["step"]) for row in _rows((tmp_path / "log.csv").read_text())] == [2]


def test_the_log_exists_before_the_first_report_and_a_second_run_continues_it(tmp_path):
    """A run that dies before its first report still leaves the log's header; a run after the
    simulation closed its reporters appends to the log instead of starting it again."""
    log = reporters.LogReporter(tmp_path / "log.csv", every=2)
    assert (tmp_path / "log.csv").read_text().splitlines() == [DESIGN_HEADER + ",speed"]
    simulation = _ideal_gas_simulation(log)
    simulation.run(2)
    simulation.close()
    simulation.run(2)
    simulation.close()
    text = (tmp_path / "log.csv").read_text()
    assert text.splitlines()[0] == DESIGN_HEADER + ",speed" and text.count("step,") == 1
    assert [int(row["step"]) for row in _rows(text)] == [2, 4]


def test_truncate_of_a_damaged_trajectory_names_the_file(tmp_path):
    from common.errors import DataError

    path = tmp_path / "traj.h5md"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(200))  # an HDF5 signature, then nothing usable
    with pytest.raises(DataError, match=rf"cannot open the trajectory '{path}' to cut it back to step 8"):
        reporters.H5MDReporter(path, every=4, append=True).truncate(8)


def test_a_damaged_trajectory_frame_is_refused_naming_the_dataset_and_frame(tmp_path):
    """Four overwritten bytes in the chunk of one frame: read_h5md refuses that frame (Fletcher-32), where
    the file had been read back with 0.0 and inf in it; an older file without checksums reads, noted once."""
    import h5py
    import numpy as np

    from mindsponge.analysis import TrajectoryError, UnverifiedTrajectoryWarning, read_h5md

    path = tmp_path / "trajectory.h5md"
    simulation = _ideal_gas_simulation(reporters.H5MDReporter(path, every=2))
    simulation.run(10)
    simulation.close()
    assert len(read_h5md(path).positions) == 5
    with h5py.File(path, "r") as handle:
        dataset = handle["particles/all/position/value"]
        assert dataset.fletcher32
        offset = dataset.id.get_chunk_info(3).byte_offset
    with open(path, "r+b") as handle:
        handle.seek(offset + 40)
        handle.write(np.array([0.0, np.inf], dtype=np.float32).tobytes()[:4])
    damaged = r"trajectory\.h5md.*/particles/all/position/value frame 3 is damaged"
    with pytest.raises(TrajectoryError, match=damaged):
        read_h5md(path)
    unverified = tmp_path / "unverified.h5md"
    with h5py.File(unverified, "w") as handle:
        group = handle.create_group("particles/all/position")
        group["value"] = np.zeros((2, 3, 3), dtype=np.float32)
        group["step"] = np.array([0, 1])
        group["time"] = np.array([0.0, 0.002])
    with pytest.warns(UnverifiedTrajectoryWarning, match="without checksums"):
        assert read_h5md(unverified).positions.shape == (2, 3, 3)
