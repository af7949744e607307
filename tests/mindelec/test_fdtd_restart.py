"""Restart files: a run stopped (by an exception or SIGKILL) and started again gives the uninterrupted
result, bit for bit."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import mindelec as me
from common.errors import ConfigurationError, DataError
from common.geometry import Box
from common.io import load_checkpoint
from mindelec import ports
from mindelec.fdtd import restart as restart_module
from mindelec.fdtd.simulation import Simulation
from mindelec.fdtd.updates import YeeStepper

fdtd = me.fdtd
CELL = 1e-3
STEPS = 700
STOP_AT = 512  # the run is stopped at this finiteness check: the file then holds step 256


def simulation(delta_permittivity=1.5):
    """A small 3D run with state of every kind: CPML, a dispersive (Lorentz) block, conformal PEC sheets, a
    lumped port (per-step samples), a flux box (running DFTs with pending samples), a probe and snapshots."""
    waveform = fdtd.GaussianPulse(f0=4e9, fwidth=6e9)
    port = fdtd.LumpedPort("feed", center=(0, 0, CELL / 2), size=(CELL,) * 3, waveform=waveform,
                           frequencies=torch.linspace(2e9, 8e9, 7))
    sheets = [
        fdtd.pec_sheet(center=(2 * CELL, 0, z), size=(4 * CELL, 0, 0), cell_size=CELL) for z in (0, CELL)
    ]
    block = fdtd.Structure(
        Box((-5 * CELL, -3 * CELL, -3 * CELL), (-2 * CELL, 3 * CELL, 3 * CELL)),
        fdtd.Lorentz(delta_permittivity, resonance_frequency=6e9, damping_frequency=1e9, permittivity=2.0),
    )
    return Simulation(
        size=(22 * CELL,) * 3, cell_size=CELL, boundary=fdtd.PML(thickness=6),
        structures=[block, *sheets, fdtd.lumped_resistor(center=(4 * CELL, 0, CELL / 2), size=(CELL,) * 3,
                                                         axis="z", resistance=100.0), port.resistor],
        sources=[port.source],
        monitors=[port, fdtd.FluxBox("box", [3e9, 5e9, 7e9], center=(0, 0, 0), size=(8 * CELL,) * 3),
                  fdtd.FieldProbe("probe", position=(0, 3 * CELL, 0), components=("Ez", "Hx")),
                  fdtd.Snapshots("snap", every=100, components=("Ez",))],
        threads=1,
    )


def assert_identical(left, right, where="result"):
    if isinstance(left, dict):
        assert left.keys() == right.keys(), where
        for key in left:
            assert_identical(left[key], right[key], f"{where}[{key!r}]")
    elif isinstance(left, torch.Tensor):
        assert torch.equal(left, right), where
    else:
        assert left == right, where


def stop_at(monkeypatch, step):
    """Make the run raise KeyboardInterrupt at its finiteness check after ``step`` steps."""
    check = Simulation._check_finite

    def interrupted(self, state, done):
        check(self, state, done)
        if done == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(Simulation, "_check_finite", interrupted)


def count_steps(monkeypatch):
    """A list that grows by one per Yee step taken."""
    taken = []
    step = YeeStepper.step

    def counted(self, state, index, inplace):
        taken.append(index)
        return step(self, state, index, inplace)

    monkeypatch.setattr(YeeStepper, "step", counted)
    return taken


@pytest.mark.parametrize("decay", [None, fdtd.Decay(1e-7, check_every=32)], ids=["steps", "until_decayed"])
def test_stopped_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, decay):
    sim, maximum = simulation(), STEPS if decay is None else 4000
    reference = sim.run(steps=maximum, until_decayed=decay, progress=False)
    if decay is not None:  # decayed after the stop, well before the maximum (800 steps)
        assert reference.metadata["decayed"] and STOP_AT < reference.steps < 2000
    path = tmp_path / "run.restart"
    with monkeypatch.context() as patch:
        stop_at(patch, STOP_AT)
        with pytest.raises(KeyboardInterrupt):
            sim.run(steps=maximum, until_decayed=decay, progress=False, restart_file=path, restart_every=0)
    assert load_checkpoint(path, kind=restart_module.KIND)["step"] == STOP_AT - restart_module.CHECK_EVERY
    taken = count_steps(monkeypatch)
    resumed = sim.run(steps=maximum, until_decayed=decay, progress=False, restart_file=path, restart_every=0)
    assert taken[0] == STOP_AT - restart_module.CHECK_EVERY and len(taken) == reference.steps - taken[0]
    assert resumed.steps == reference.steps and resumed.metadata == reference.metadata
    assert reference.cost["resumed_from"] == 0 and resumed.cost["resumed_from"] == taken[0]
    assert all(resumed.cost[key] > 0 for key in ("setup_seconds", "stepping_seconds"))
    assert_identical(dict(resumed), dict(reference))
    assert torch.equal(resumed.times, reference.times)
    assert not path.exists()  # a completed run removes its restart file


def test_mode_source_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """A mode source (a current sheet with a profile) and mode monitors: stopped, resumed, the same S21."""
    size, cell = (0.06, 0.02, 0.01), 1e-3
    port_list = [ports.ModePort(name, fdtd.CrossSection(x, size, cell), direction=direction)
                 for name, x, direction in (("1", -0.015, 1), ("2", 0.015, -1))]
    frequencies = torch.linspace(10e9, 13e9, 4, dtype=torch.float64)
    sim = Simulation(size, cell, (fdtd.PML(thickness=10), fdtd.PEC(), fdtd.PEC()),
                     sources=port_list[0].source(fdtd.GaussianPulse(f0=11.5e9, fwidth=4e9)).currents,
                     monitors=[port.monitor(frequencies) for port in port_list], threads=1)
    reference = sim.run(steps=800, progress=False)
    path = tmp_path / "guide.restart"
    with monkeypatch.context() as patch:
        stop_at(patch, STOP_AT)
        with pytest.raises(KeyboardInterrupt):
            sim.run(steps=800, progress=False, restart_file=path, restart_every=0)
    taken = count_steps(monkeypatch)
    resumed = sim.run(steps=800, progress=False, restart_file=path)
    assert taken[0] == STOP_AT - restart_module.CHECK_EVERY
    assert_identical(dict(resumed), dict(reference))


@pytest.mark.slow
def test_killed_process_resumes_to_the_uninterrupted_result(tmp_path):
    """SIGKILL while the run writes a restart file every 256 steps: the file left is whole and resumes."""
    path, steps = tmp_path / "run.restart", 4000
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_fdtd_restart import simulation
        simulation().run(steps={steps}, progress=False, restart_file={str(path)!r}, restart_every=0)
    """)
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    process = subprocess.Popen([sys.executable, "-c", script], env=environment)
    try:
        deadline = time.monotonic() + 300
        while not path.exists() or load_checkpoint(path, kind=restart_module.KIND)["step"] < 512:
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no restart file after 300 s"
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    saved = load_checkpoint(path, kind=restart_module.KIND)["step"]
    assert 512 <= saved < steps
    sim = simulation()
    reference = sim.run(steps=steps, progress=False)
    with pytest.MonkeyPatch.context() as patch:
        taken = count_steps(patch)
        resumed = sim.run(steps=steps, progress=False, restart_file=path)
    assert taken[0] == saved and len(taken) == steps - saved
    assert_identical(dict(resumed), dict(reference))
    assert not path.exists()


def test_restart_file_of_another_set_up_or_damaged_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "run.restart"
    with monkeypatch.context() as patch:
        stop_at(patch, STOP_AT)
        with pytest.raises(KeyboardInterrupt):
            simulation().run(steps=STEPS, progress=False, restart_file=path, restart_every=0)
    saved = path.read_bytes()
    with pytest.raises(ConfigurationError, match="another set-up"):  # another material
        simulation(delta_permittivity=1.6).run(steps=STEPS, progress=False, restart_file=path)
    with pytest.raises(ConfigurationError, match="another set-up"):  # another run length
        simulation().run(steps=STEPS + 1, progress=False, restart_file=path)
    with pytest.raises(ConfigurationError, match="another set-up"):  # another stop criterion
        simulation().run(steps=STEPS, until_decayed=1e-3, progress=False, restart_file=path)
    assert path.read_bytes() == saved  # refused, not overwritten
    damaged = bytearray(saved)
    damaged[len(damaged) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(DataError, match="run.restart"):
        simulation().run(steps=STEPS, progress=False, restart_file=path)


def test_restart_file_refusals(tmp_path):
    sim = simulation()
    with pytest.raises(ConfigurationError, match="restart_every"):
        sim.run(steps=10, progress=False, restart_file=tmp_path / "a", restart_every=-1)
    with pytest.raises(ConfigurationError, match="restart_every"):
        sim.run(steps=10, progress=False, restart_file=tmp_path / "a", restart_every=float("nan"))
    with pytest.raises(ConfigurationError, match="does not exist"):
        sim.run(steps=10, progress=False, restart_file=tmp_path / "missing" / "a")
    design = fdtd.DesignRegion(center=(0, 0), size=(4 * CELL, 4 * CELL),
                               permittivity=torch.full((5, 5), 2.0, requires_grad=True))
    differentiable = fdtd.Simulation(
        size=(30 * CELL, 30 * CELL), cell_size=CELL, boundary=fdtd.PML(8), design_regions=[design],
        sources=[fdtd.PointDipole((5 * CELL, 0), "Ez", fdtd.GaussianPulse(4e9, 4e9))],
    )
    with pytest.raises(ConfigurationError, match="differentiable"):
        differentiable.run(steps=10, progress=False, restart_file=tmp_path / "a")
