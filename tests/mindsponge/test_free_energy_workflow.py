"""The free-energy workflow (``mindsponge fe``) end to end on an analytic case, and resuming it.

The Hamiltonian: ``n`` independent particles in a harmonic well ``U = k r^2 / 2`` (an OpenMM
``CustomExternalForce`` with a global parameter ``k``, read from a serialized System and a PDB as any
``[system]`` source), taken through ``k = 100, 200, 400, 800`` kJ/mol/nm^2. Exactly,
``f(k1) - f(k0) = (3 n / 2) ln(k1 / k0)`` kT.
"""

import json
import math

import numpy as np
import pytest

N_PARTICLES = 4
FORCE_CONSTANTS = [100.0, 200.0, 400.0, 800.0]
EXACT_KT = 1.5 * N_PARTICLES * math.log(FORCE_CONSTANTS[-1] / FORCE_CONSTANTS[0])

CONFIG = """\
constraints = "none"
precision = "double"
minimize = false
seed = {seed}

[integrator]
friction = 20.0

[free_energy]
temperature = 300.0
steps_per_iteration = 50
iterations = {iterations}
equilibration = 5
hrex = {hrex}
bootstrap = 20

[free_energy.schedule]
parameters = {{ k = {constants} }}

[[free_energy.leg]]
name = "oscillator"
[free_energy.leg.system]
pdb = "oscillator.pdb"
openmm_xml = "oscillator.xml"

[output]
directory = "out"
"""


def write_oscillator(folder, iterations=60, hrex="true", seed=0, box=None, pressure=None):
    """The System (1 amu particles, a harmonic well around the origin, or with a cubic ``box`` (nm) around
    its centre), a PDB and the configuration (with ``pressure``, bar, the leg's)."""
    import openmm
    from openmm import app, unit

    centre = 0.0 if box is None else box / 2
    system = openmm.System()
    force = openmm.CustomExternalForce(f"0.5*k*((x-{centre})^2+(y-{centre})^2+(z-{centre})^2)")
    force.addGlobalParameter("k", FORCE_CONSTANTS[0])
    topology = app.Topology()
    residue = topology.addResidue("OSC", topology.addChain())
    for index in range(N_PARTICLES):
        system.addParticle(1.0)
        force.addParticle(index, [])
        topology.addAtom(f"P{index}", app.element.argon, residue)
    system.addForce(force)
    if box is not None:  # a periodic System (an empty periodic term): OpenMM then uses the box
        periodic = openmm.CustomBondForce("0")
        periodic.setUsesPeriodicBoundaryConditions(True)
        system.addForce(periodic)
        topology.setPeriodicBoxVectors(np.eye(3) * box * unit.nanometer)
        system.setDefaultPeriodicBoxVectors(*(openmm.Vec3(*row) * unit.nanometer for row in np.eye(3) * box))
    (folder / "oscillator.xml").write_text(openmm.XmlSerializer.serialize(system))
    spread = 0.05 if box is None else 0.15  # in a box, the start's overlap check sees the particles
    positions = np.random.default_rng(1).normal(centre, spread, (N_PARTICLES, 3)) * unit.nanometer
    with open(folder / "oscillator.pdb", "w") as handle:
        app.PDBFile.writeFile(topology, positions, handle)
    path = folder / "fe.toml"
    text = CONFIG.format(iterations=iterations, hrex=hrex, seed=seed, constants=FORCE_CONSTANTS)
    if pressure is not None:
        text = text.replace('name = "oscillator"\n', f'name = "oscillator"\npressure = {pressure}\n')
    path.write_text(text)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("hrex", ["true", "false"])
def test_harmonic_force_constant_change_matches_the_exact_free_energy(tmp_path, hrex):
    from mindsponge import cli_free_energy

    results = cli_free_energy.run(write_oscillator(tmp_path, hrex=hrex), progress=False)
    leg = results["legs"]["oscillator"]
    value, error = leg["kT"]["mbar"], leg["kT"]["mbar_error"]
    assert abs(value - EXACT_KT) < 4 * error + 0.1, (value, error, EXACT_KT)
    assert error < 1.0
    # BAR along the neighbouring steps agrees with MBAR within their uncertainties
    assert abs(leg["kT"]["bar"] - value) < 2 * leg["kT"]["bar_error"], leg["kT"]
    assert leg["kT"]["mbar_bootstrap_error"] > 0
    assert leg["overlap_min"] > 0.03
    assert leg["samples_per_state_total"] == [60] * 4
    # units: kJ/mol = kT * k_B T
    assert leg["kJ/mol"]["mbar"] == pytest.approx(value * 0.0083144626 * 300.0, rel=1e-6)
    assert leg["kcal/mol"]["mbar"] == pytest.approx(leg["kJ/mol"]["mbar"] / 4.184)
    combined = json.loads((tmp_path / "out" / "results.json").read_text())["combined"]
    assert combined["kT"]["value"] == pytest.approx(value)
    for name in ("u_kn.npz", "overlap.png", "convergence.png", "steps.png", "replicas.chk"):
        assert (tmp_path / "out" / "oscillator" / name).exists(), name
    assert "dG" in (tmp_path / "out" / "free_energy.log").read_text()
    if hrex == "true":
        assert all(0.0 < value <= 1.0 for value in leg["exchange_acceptance"])


@pytest.mark.slow
def test_automatic_equilibration_keeps_the_exact_answer(tmp_path):
    from mindsponge import cli_free_energy

    path = write_oscillator(tmp_path)
    path.write_text(path.read_text().replace("equilibration = 5", 'equilibration = "auto"'))
    leg = cli_free_energy.run(path, progress=False)["legs"]["oscillator"]
    assert 0 <= leg["equilibration_iterations"] < 60
    assert abs(leg["kT"]["mbar"] - EXACT_KT) < 4 * leg["kT"]["mbar_error"] + 0.1, leg["kT"]


@pytest.mark.slow
def test_a_leg_at_constant_pressure_moves_the_boxes_and_keeps_the_exact_answer(tmp_path):
    """The oscillators in a periodic box sampled at 0.01 bar (each replica's box moves with its barostat): the
    well does not depend on the volume while the box holds it, so the answer is the same exact one."""
    from mindsponge import cli_free_energy
    from mindsponge.free_energy_analysis import FreeEnergySamples

    results = cli_free_energy.run(write_oscillator(tmp_path, box=12.0, pressure=0.01), progress=False)
    leg = results["legs"]["oscillator"]
    value, error = leg["kT"]["mbar"], leg["kT"]["mbar_error"]
    assert abs(value - EXACT_KT) < 4 * error + 0.1, (value, error, EXACT_KT)
    samples = FreeEnergySamples.load(tmp_path / "out" / "oscillator" / "u_kn.npz")
    # u_k = beta (k_k r^2 / 2 + p V): the well's energy from two states, then each sample's volume
    kt, first, second = 0.0083144626 * 300.0, FORCE_CONSTANTS[0], FORCE_CONSTANTS[1]
    well = (samples.u_kn[1] - samples.u_kn[0]) * kt * first / (second - first)  # k0 r^2 / 2, kJ/mol
    volumes = (samples.u_kn[0] * kt - well) / (0.01 * 0.0602214076)  # nm^3
    assert volumes.min() > 0 and volumes.std() > 0.01 * volumes.mean(), (volumes.min(), volumes.std())
    assert abs(np.median(volumes) / 12.0**3 - 1) > 0.01  # the boxes moved away from the start


def test_a_stopped_run_resumes_without_losing_or_repeating_a_sample(tmp_path):
    """Stopped after 4 of 10 iterations, then resumed: the samples are an uninterrupted run's, bit for bit."""
    from mindsponge import cli_free_energy
    from mindsponge.free_energy_analysis import FreeEnergySamples

    straight = tmp_path / "straight"
    parts = tmp_path / "parts"
    straight.mkdir()
    parts.mkdir()
    cli_free_energy.run(write_oscillator(straight, iterations=10), progress=False)
    config = write_oscillator(parts, iterations=10)
    partial = cli_free_energy.run(config, progress=False, stop_after=4)
    assert "combined" not in partial and not (parts / "out" / "results.json").exists()
    stopped = FreeEnergySamples.load(parts / "out" / "oscillator" / "u_kn.npz")
    assert stopped.samples_per_state.tolist() == [4] * 4
    resumed = cli_free_energy.run(config, progress=False, resume=True)
    first = FreeEnergySamples.load(straight / "out" / "oscillator" / "u_kn.npz")
    second = FreeEnergySamples.load(parts / "out" / "oscillator" / "u_kn.npz")
    assert second.samples_per_state.tolist() == [10] * 4
    np.testing.assert_array_equal(first.u_kn, second.u_kn)
    np.testing.assert_array_equal(first.iteration, second.iteration)
    np.testing.assert_array_equal(first.u_kn[:, first.iteration < 4], stopped.u_kn)
    original = json.loads((straight / "out" / "results.json").read_text())
    assert resumed["legs"]["oscillator"]["kT"] == original["legs"]["oscillator"]["kT"]


@pytest.mark.slow  # two command-line processes (about 30 s): `make test` runs it
def test_a_killed_run_resumes_without_losing_or_repeating_a_sample(tmp_path):
    """``mindsponge fe`` killed with SIGKILL after a few iterations, then run again with ``--resume``: the
    samples equal an uninterrupted run's, bit for bit."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    from mindsponge import cli_free_energy
    from mindsponge.free_energy_analysis import FreeEnergySamples

    straight, killed = tmp_path / "straight", tmp_path / "killed"
    straight.mkdir()
    killed.mkdir()
    cli_free_energy.run(write_oscillator(straight, iterations=40), progress=False)
    config = write_oscillator(killed, iterations=40)
    environment = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "mindsponge", "fe", str(config), "--quiet"]
    checkpoint = killed / "out" / "oscillator" / "replicas.chk"
    process = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    writes, last, deadline = 0, None, time.monotonic() + 240
    while writes < 3 and process.poll() is None and time.monotonic() < deadline:
        stamp = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
        if stamp is not None and stamp != last:
            writes, last = writes + 1, stamp
        time.sleep(0.02)
    assert process.poll() is None, "the run finished before it could be killed: give it more iterations"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "out" / "results.json").exists()
    log = killed / "out" / "free_energy.log"
    before = log.read_text() if log.exists() else ""
    resumed = subprocess.run([*command, "--resume"], env=environment, capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # it continued from a checkpoint of the killed run (a fresh start would give the same samples too)
    written = log.read_text()[len(before):]
    resumed_at = re.findall(r"resumed from the checkpoint of iteration (\d+) of 40", written)
    assert resumed_at and 0 < int(resumed_at[0]) < 40, log.read_text()
    first = FreeEnergySamples.load(straight / "out" / "oscillator" / "u_kn.npz")
    second = FreeEnergySamples.load(killed / "out" / "oscillator" / "u_kn.npz")
    assert second.samples_per_state.tolist() == [40] * 4
    np.testing.assert_array_equal(first.iteration, second.iteration)
    np.testing.assert_array_equal(first.u_kn, second.u_kn)
