"""mindelec.surrogate.antenna: the S11 surrogate workflow on an analytic patch-antenna family.

The reference is the cavity model of a rectangular patch near its TM010 resonance, a parallel RLC at
the feed: ``f_r = c / (2 L sqrt(eps_r))``, ``Z = R / (1 + j Q (f / f_r - f_r / f))`` seen from 50 ohm
(Balanis, Antenna Theory, ch. 14). Tests: the split keeps held-out and extrapolation designs out of
training and the scores refuse training designs; the Fourier-conditioned ensemble beats the mean predictor
on designs it never saw; inverse design lands the analytic resonance on the target; a run killed with
SIGKILL and started again ends with the same weights as one never interrupted; the CLI; the voxel
autoencoder's round trip on patch geometries it never saw.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from scipy.stats import qmc

from common.io import H5Writer
from mindelec import antennas
from mindelec.cli import main
from mindelec.surrogate import SParameterSurrogate
from mindelec.surrogate.antenna import (
    Ensemble,
    check_patch_design,
    evaluate,
    inverse_design,
    train_ensemble,
    voxel_autoencoder,
)

C0 = 299_792_458.0
NAMES = ["length", "permittivity"]
BOUNDS = {"length": (10e-3, 16e-3), "permittivity": (2.2, 4.4)}
FREQUENCIES = np.linspace(3e9, 9e9, 41)


def cavity_resonance(length, permittivity):
    return C0 / (2 * length * np.sqrt(permittivity))


def cavity_s11(length, permittivity, frequencies=FREQUENCIES, resistance=120.0, quality=12.0):
    f_r = cavity_resonance(length, permittivity)
    impedance = resistance / (1 + 1j * quality * (frequencies / f_r - f_r / frequencies))
    return (impedance - 50) / (impedance + 50)


def radiation_efficiency(permittivity):
    """A made-up radiation efficiency falling with the substrate's permittivity (a lossier, smaller
    antenna), for the efficiency output: the total efficiency is it times ``1 - |S11|^2``."""
    return 0.9 - 0.15 * (permittivity - 2.2)


def write_sweep(path, count=96):
    unit = qmc.Sobol(2, seed=1).random(count)
    low, high = np.array([BOUNDS[n][0] for n in NAMES]), np.array([BOUNDS[n][1] for n in NAMES])
    parameters = low + unit * (high - low)
    with H5Writer(path, mode="w") as writer:
        for index, (length, permittivity) in enumerate(parameters):
            s11 = cavity_s11(length, permittivity)
            writer.append(
                {
                    "sample_id": index,
                    "length": length,
                    "permittivity": permittivity,
                    "frequencies": FREQUENCIES,
                    "s11_real": s11.real,
                    "s11_imag": s11.imag,
                    "total_efficiency": radiation_efficiency(permittivity) * (1 - np.abs(s11) ** 2),
                }
            )
    return parameters


FIT = {"epochs": 300, "lr": 3e-3, "batch_size": 32, "progress": False, "threads": 1}
MODEL = {"frequency_features": 3, "hidden_features": 64, "hidden_layers": 3}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ensemble")
    path = folder / "sweep.h5"
    parameters = write_sweep(path)
    ensemble, _ = train_ensemble(path, NAMES, folder / "run", members=2, model_options=MODEL, **FIT)
    return path, parameters, ensemble, folder / "run"


@pytest.mark.slow
def test_split_keeps_held_out_designs_out_of_training(trained):
    path, parameters, ensemble, run = trained
    split = ensemble.split
    train, test, extrapolation = (set(split[k]) for k in ("train", "test", "extrapolation"))
    assert train and test and extrapolation
    assert not (train & test) and not (train & extrapolation) and not (test & extrapolation)
    assert len(train | test | extrapolation) == len(parameters)
    # extrapolation designs are longer than every training design: outside the training range
    assert parameters[sorted(extrapolation), 0].min() > parameters[sorted(train), 0].max()
    assert json.loads((run / "split.json").read_text()) == split
    with pytest.raises(ValueError, match="never training"):
        evaluate(ensemble, path, "train")
    leaky = Ensemble(ensemble.members, {**split, "test": split["test"] + split["train"][:1]})
    with pytest.raises(ValueError, match="never training"):
        evaluate(leaky, path, "test")


def test_ensemble_beats_the_mean_predictor_on_unseen_designs(trained):
    path, _, ensemble, _ = trained
    test = evaluate(ensemble, path, "test")
    assert test["relative_l2"] < 0.5 * test["mean_relative_l2"]
    assert test["db_error"] < test["mean_db_error"]
    assert test["resonance_error"] < test["mean_resonance_error"]
    extrapolation = evaluate(ensemble, path, "extrapolation")
    assert extrapolation["designs"] > 0 and np.isfinite(extrapolation["relative_l2"])
    assert test["uncertainty"] > 0  # two members from different seeds disagree somewhat
    # one dip per design (-7.7 dB: 120 ohm at resonance seen from 50 ohm): the nearest predicted dip is
    # never farther than the predicted lowest one
    dips = evaluate(ensemble, path, "test", dip_level=-5.0)
    assert dips["dips"] == dips["designs"] and evaluate(ensemble, path, "test")["dips"] == 0
    assert dips["dip_error"] <= dips["resonance_error"] + 1e-9 and dips["dip_error"] < dips["mean_dip_error"]


def test_an_efficiency_spectrum_learnt_beside_s11_matches_the_analytic_one_at_unseen_resonances(tmp_path):
    """The total efficiency ``eta_rad(eps) (1 - |S11|^2)`` of the cavity family, learnt as a second output
    of the same networks: at each held-out design's resonance within a third of the mean predictor's
    error, and the refusals of outputs the models lack."""
    path = tmp_path / "sweep.h5"
    write_sweep(path)
    ensemble, _ = train_ensemble(
        path, NAMES, tmp_path / "run", members=1, model_options=MODEL,
        outputs=("s11", "total_efficiency"), **FIT,
    )
    scores = evaluate(ensemble, path, "test")
    error = scores["total_efficiency_error_at_resonance"]
    assert error < scores["mean_total_efficiency_error_at_resonance"] / 3, scores
    assert scores["total_efficiency_error"] < 0.05
    assert scores["relative_l2"] < 0.5 * scores["mean_relative_l2"]
    with pytest.raises(KeyError, match="no output 'gain'"):
        ensemble.predict(torch.zeros(1, 2, dtype=torch.float64), "gain")
    with pytest.raises(ValueError, match="outputs must start with 's11'"):
        train_ensemble(path, NAMES, tmp_path / "other", outputs=("total_efficiency",), **FIT)
    with pytest.raises(KeyError, match=r"nor <name> columns for \['gain'\]"):
        train_ensemble(path, NAMES, tmp_path / "other", outputs=("s11", "gain"), **FIT)


def test_dip_frequencies_finds_every_dip_below_the_level_and_follows_them_when_their_depths_swap():
    """Two Lorentzian dips in dB (near 3.2 GHz at -20 dB, 4.1 GHz at -19.9 dB) and a shallow one (-6 dB at
    2.5 GHz) on a 10 MHz grid: the two deep ones within a tenth of a step of the curve's minima (found on
    a 100x finer grid), not the shallow one nor the band edges; deepening the second by 0.2 dB moves the
    lowest dip by 0.9 GHz but no dip."""

    def curve(frequencies, second_depth):
        dips = ((3.2e9, 20.0, 0.08e9), (4.1e9, second_depth, 0.1e9), (2.5e9, 6.0, 0.05e9))
        return -sum(depth / (1 + ((frequencies - f0) / width) ** 2) for f0, depth, width in dips)[None]

    frequencies = torch.linspace(2e9, 5e9, 301, dtype=torch.float64)
    fine = torch.linspace(2e9, 5e9, 30001, dtype=torch.float64)
    exact = torch.stack(
        [
            fine[window][curve(fine[window], 19.9)[0].argmin()]
            for window in ((fine > 3e9) & (fine < 3.6e9), (fine > 3.8e9) & (fine < 4.4e9))
        ]
    )
    found = antennas.dip_frequencies(frequencies, curve(frequencies, 19.9))
    assert len(found) == 1
    torch.testing.assert_close(found[0], exact, rtol=0, atol=1e6)
    assert len(antennas.dip_frequencies(frequencies, curve(frequencies, 19.9), below=float("inf"))[0]) == 3
    lowest = [antennas.resonance_frequency(frequencies, curve(frequencies, x)).item() for x in (19.9, 20.2)]
    assert lowest == pytest.approx([3.2e9, 4.1e9], abs=5e6)
    swapped = antennas.dip_frequencies(frequencies, curve(frequencies, 20.2))[0]
    torch.testing.assert_close(swapped, found[0], rtol=0, atol=1e6)
    assert antennas.dip_frequencies(frequencies, curve(frequencies, 19.9) + 25.0)[0].numel() == 0  # all > -10


def test_inverse_design_puts_the_analytic_resonance_on_target(trained):
    _, _, ensemble, _ = trained
    target = 6.0e9
    found = inverse_design(ensemble, target, BOUNDS, candidates=1024)
    truth = cavity_resonance(found["parameters"]["length"], found["parameters"]["permittivity"])
    assert abs(truth - target) / target < 0.03
    with pytest.raises(ValueError, match="bounds"):
        inverse_design(ensemble, 20e9, BOUNDS)
    # a parameter the simulator draws on a grid: the winner sits on it, still on target
    on_grid = inverse_design(ensemble, target, BOUNDS, candidates=1024, steps={"permittivity": 0.25})
    permittivity = on_grid["parameters"]["permittivity"]
    assert permittivity / 0.25 == pytest.approx(round(permittivity / 0.25), abs=1e-9)
    assert 2.2 <= permittivity <= 4.4
    truth = cavity_resonance(on_grid["parameters"]["length"], permittivity)
    assert abs(truth - target) / target < 0.03
    # a lattice offset from zero: 2.3, 2.7, ... 4.3
    offset = inverse_design(ensemble, target, BOUNDS, candidates=1024, steps={"permittivity": (0.4, 2.3)})
    permittivity = offset["parameters"]["permittivity"]
    assert (permittivity - 2.3) / 0.4 == pytest.approx(round((permittivity - 2.3) / 0.4), abs=1e-9)
    assert 2.3 - 1e-9 <= permittivity <= 4.3 + 1e-9
    # the ensemble's spread steers the search: weighing it heavily never picks a less certain design
    band_spread = float(found["spread"].norm() / found["s11"].abs().norm())
    assert found["relative_spread"] == pytest.approx(band_spread)
    blind = inverse_design(ensemble, target, BOUNDS, candidates=1024, uncertainty_weight=0.0)
    wary = inverse_design(ensemble, target, BOUNDS, candidates=1024, uncertainty_weight=1e4)
    assert wary["relative_spread"] <= blind["relative_spread"]
    for steps in ({"permittivity": 0.0}, {"permittivity": 5.0}, {"thickness": 0.1},
                  {"permittivity": (5.0, 1.0)}):  # 1.0, 6.0: no point inside 2.2 .. 4.4
        with pytest.raises(ValueError, match="steps"):
            inverse_design(ensemble, target, BOUNDS, steps=steps)


def test_train_ensemble_refuses_another_split_in_its_folder(trained):
    path, _, _, run = trained
    with pytest.raises(ValueError, match="stored split"):
        train_ensemble(path, NAMES, run, members=1, split_options={"test_fraction": 0.5}, **FIT)


@pytest.mark.slow
def test_frequency_reference_lines_resonances_up_and_survives_a_reload(tmp_path):
    # designs whose true resonance sits 4 % below the transmission-line estimate, a sharper dip (Q 25)
    unit = qmc.Sobol(4, seed=2).random(128)
    low, high = np.array([10e-3, 12e-3, 2.2, 0.6e-3]), np.array([16e-3, 20e-3, 4.4, 1.6e-3])
    designs = low + unit * (high - low)
    names = ["length", "width", "permittivity", "height"]
    path = tmp_path / "sweep.h5"
    with H5Writer(path, mode="w") as writer:
        for index, design in enumerate(designs):
            resonance = 0.96 * float(antennas.cavity_resonance(*design[[0, 1, 2, 3]]))
            impedance = 120.0 / (1 + 25j * (FREQUENCIES / resonance - resonance / FREQUENCIES))
            s11 = (impedance - 50) / (impedance + 50)
            columns = dict(zip(names, design))
            writer.append(
                {
                    "sample_id": index,
                    **columns,
                    "frequencies": FREQUENCIES,
                    "s11_real": s11.real,
                    "s11_imag": s11.imag,
                }
            )
    scores = {}
    for label, reference in (("plain", None), ("referenced", "mindelec.antennas:cavity_resonance")):
        ensemble, _ = train_ensemble(
            path,
            names,
            tmp_path / label,
            members=1,
            model_options={**MODEL, "frequency_reference": reference},
            **FIT,
        )
        scores[label] = evaluate(ensemble, path, "test")["relative_l2"]
    assert scores["referenced"] < 0.5 * scores["plain"]
    model = ensemble.members[0]
    reloaded = Ensemble.load(tmp_path / "referenced").members[0]
    probe = torch.tensor(designs[:4])
    assert torch.equal(model.predict(probe), reloaded.predict(probe))
    with pytest.raises(ValueError, match="width"):
        train_ensemble(
            path,
            ["length", "permittivity"],
            tmp_path / "missing",
            members=1,
            model_options={"frequency_reference": "mindelec.antennas:cavity_resonance"},
            **FIT,
        )


@pytest.mark.slow
def test_cavity_mode_references_line_up_a_second_resonance(tmp_path):
    # two resonances, 4 % below the cavity model's TM10 and 3 % above its TM02, over 3-12 GHz: one
    # reference (TM10) lines up the first dip only, the cavity modes line up both
    frequencies = np.linspace(3e9, 12e9, 61)
    unit = qmc.Sobol(4, seed=3).random(128)
    low, high = np.array([10e-3, 12e-3, 2.2, 0.6e-3]), np.array([16e-3, 20e-3, 4.4, 1.6e-3])
    designs = low + unit * (high - low)
    names = ["length", "width", "permittivity", "height"]
    modes = antennas.cavity_modes(*torch.tensor(designs).T)
    second = antennas.CAVITY_MODES.index((0, 2))
    path = tmp_path / "sweep.h5"
    with H5Writer(path, mode="w") as writer:
        for index, design in enumerate(designs):
            impedance = sum(
                resistance / (1 + 1j * quality * (frequencies / resonance - resonance / frequencies))
                for resistance, quality, resonance in (
                    (120.0, 25.0, 0.96 * float(modes[index, 0])),
                    (80.0, 40.0, 1.03 * float(modes[index, second])),
                )
            )
            s11 = (impedance - 50) / (impedance + 50)
            writer.append(
                {"sample_id": index, **dict(zip(names, design)), "frequencies": frequencies}
                | {"s11_real": s11.real, "s11_imag": s11.imag}
            )
    scores = {}
    for label in ("cavity_resonance", "cavity_modes"):
        ensemble, _ = train_ensemble(
            path,
            names,
            tmp_path / label,
            members=1,
            model_options={**MODEL, "frequency_reference": f"mindelec.antennas:{label}"},
            **FIT,
        )
        scores[label] = evaluate(ensemble, path, "test")["relative_l2"]
    assert scores["cavity_modes"] < 0.7 * scores["cavity_resonance"], scores
    reloaded = Ensemble.load(tmp_path / "cavity_modes").members[0]
    assert torch.equal(
        ensemble.members[0].predict(torch.tensor(designs[:4])), reloaded.predict(torch.tensor(designs[:4]))
    )


def test_cavity_modes_reduce_to_the_ideal_cavity_and_the_transmission_line_resonance():
    lengths, widths = torch.tensor([10e-3, 14e-3]), torch.tensor([18e-3, 12e-3])
    modes = antennas.cavity_modes(lengths, widths, torch.tensor([2.2, 4.4]), torch.tensor([0.8e-3, 1.5e-3]))
    assert modes.shape == (2, len(antennas.CAVITY_MODES))
    first = antennas.CAVITY_MODES.index((1, 0))
    resonance = antennas.cavity_resonance(
        lengths, widths, torch.tensor([2.2, 4.4]), torch.tensor([0.8e-3, 1.5e-3])
    )
    torch.testing.assert_close(modes[:, first], resonance, rtol=1e-12, atol=0.0)
    # a vanishing substrate: no fringing, eps_eff = eps_r, the ideal magnetic-wall cavity
    thin = antennas.cavity_modes(14e-3, 18e-3, 3.0, 1e-12)
    ideal = [C0 / (2 * np.sqrt(3.0)) * np.hypot(m / 14e-3, n / 18e-3) for m, n in antennas.CAVITY_MODES]
    np.testing.assert_allclose(thin.numpy(), ideal, rtol=1e-6)
    square = antennas.cavity_modes(15e-3, 15e-3, 3.0, 1e-3)
    column = antennas.CAVITY_MODES.index
    assert float(square[column((2, 0))]) == pytest.approx(float(square[column((0, 2))]), rel=1e-12)
    assert float(square[column((2, 0))]) == pytest.approx(2 * float(square[column((1, 0))]), rel=1e-12)
    with pytest.raises(ValueError, match="height"):
        antennas.cavity_modes(14e-3, 18e-3, 3.0, 0.0)


SCRIPT = """
import sys
from mindelec.surrogate.antenna import train_ensemble
train_ensemble(sys.argv[1], ["length", "permittivity"], sys.argv[2], members=int(sys.argv[3]),
               model_options={"frequency_features": 2, "hidden_features": 32, "hidden_layers": 2},
               epochs=120, checkpoint_every=10, batch_size=16, progress=False, threads=1)
"""


@pytest.mark.slow
def test_training_resumes_after_kill_with_the_same_weights(tmp_path):
    path = tmp_path / "sweep.h5"
    write_sweep(path, count=32)
    environment = {**os.environ, "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", SCRIPT, str(path)]
    subprocess.run([*command, str(tmp_path / "whole"), "1"], check=True, env=environment)
    process = subprocess.Popen([*command, str(tmp_path / "killed"), "1"], env=environment)
    checkpoint = tmp_path / "killed" / "member_0.pt"
    while not checkpoint.exists() and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "killed" / "member_0.model.pt").exists()  # killed before the end
    subprocess.run([*command, str(tmp_path / "killed"), "1"], check=True, env=environment)
    whole, resumed = (Ensemble.load(tmp_path / name).members[0].state_dict() for name in ("whole", "killed"))
    assert all(torch.equal(whole[key], resumed[key]) for key in whole)


@pytest.mark.slow
def test_processes_sharing_a_run_folder_train_different_members_and_wait_for_the_others(tmp_path):
    """A member whose lock another process holds is left to it: the process trains the free member,
    waits, and then takes the held member over from its checkpoint; the ensemble equals one trained
    alone."""
    fcntl = pytest.importorskip("fcntl")  # member locks need flock (POSIX)
    path = tmp_path / "sweep.h5"
    write_sweep(path, count=32)
    environment = {**os.environ, "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", SCRIPT, str(path)]
    subprocess.run([*command, str(tmp_path / "alone"), "2"], check=True, env=environment)
    shared = tmp_path / "shared"
    shared.mkdir()
    with open(shared / "member_0.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # this test is the "other process" holding member 0
        process = subprocess.Popen([*command, str(shared), "2"], env=environment)
        while not (shared / "member_1.model.pt").exists() and process.poll() is None:
            time.sleep(0.05)
        time.sleep(0.5)
        assert process.poll() is None, "the process ended without member 0"
        assert not (shared / "member_0.pt").exists(), "member 0 was trained while another process held it"
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert process.wait(timeout=120) == 0
    for alone, both in zip(Ensemble.load(tmp_path / "alone").members, Ensemble.load(shared).members):
        alone, both = alone.state_dict(), both.state_dict()
        assert all(torch.equal(alone[key], both[key]) for key in alone)


def test_cli_trains_and_writes_held_out_metrics(tmp_path, capsys):
    path = tmp_path / "sweep.h5"
    write_sweep(path, count=32)
    arguments = [
        "surrogate",
        "train",
        str(path),
        "--parameters",
        *NAMES,
        "--output",
        str(tmp_path / "run"),
        "--members",
        "1",
        "--epochs",
        "30",
        "--quiet",
    ]
    assert main(arguments) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(metrics) == {"test", "extrapolation"}
    assert "relative L2" in capsys.readouterr().out
    assert main(["surrogate", "train", str(tmp_path / "missing.h5"), "--output", str(tmp_path / "x")]) == 2
    assert (
        main(["surrogate", "train", str(path), "--parameters", "depth", "--output", str(tmp_path / "y")]) == 2
    )


@pytest.mark.slow
def test_voxel_autoencoder_round_trip_on_unseen_patch_geometries():
    names = ("length", "width", "inset", "permittivity", "height")
    unit = qmc.Sobol(5, seed=0).random(40)
    low = np.array([10e-3, 12e-3, 0.1, 2.2, 0.6e-3])
    high = np.array([16e-3, 20e-3, 0.4, 4.4, 1.6e-3])
    designs = [dict(zip(names, low + u * (high - low))) for u in unit]
    voxels = torch.stack([antennas.patch_voxels(d, cell=1e-3, shape=(24, 24, 4)) for d in designs])
    # the voxels are the geometry: (eps - 1) x substrate height and the patch's area come back out
    column = (voxels[:, 0, 0, 0, :] - 1).sum(-1) * 1e-3
    expected = torch.tensor([(d["permittivity"] - 1) * d["height"] for d in designs], dtype=torch.float64)
    assert torch.allclose(column, expected, rtol=0.25)  # fill fractions in quarters of a 1 mm cell
    areas = voxels[:, 1].sum((1, 2, 3)) * 1e-6
    # the patch less the two slots of its inset notch (each a twelfth of the width, PatchSetup's gap, as
    # deep as the inset), and the 6 mm of line before the patch (a sixth of the width)
    expected = torch.tensor(
        [
            d["length"] * d["width"] - d["inset"] * d["length"] * d["width"] / 6 + 6e-3 * d["width"] / 6
            for d in designs
        ],
        dtype=torch.float64,
    )
    assert torch.allclose(areas, expected, rtol=0.03)
    model, report = voxel_autoencoder(
        voxels[:32],
        voxels[32:],
        latent_channels=2,
        levels=2,
        epochs=150,
        batch_size=8,
        progress=False,
        threads=1,
    )
    mean = voxels[:32].mean(0, keepdim=True).expand_as(voxels[32:])
    mean_error = float(
        ((mean - voxels[32:]).flatten(1).norm(dim=1) / voxels[32:].flatten(1).norm(dim=1)).mean()
    )
    assert report["compression_ratio"] == pytest.approx(2 * 4 * 16 / 2)
    assert report["relative_error"] < 0.6 * mean_error


def test_cavity_resonance_matches_balanis_design_example():
    # Balanis, Antenna Theory (3rd ed.), example 14.1: er = 2.2, h = 0.1588 cm, designed for 10 GHz
    # gives W = 1.186 cm and L = 0.906 cm
    frequency = antennas.cavity_resonance(0.906e-2, 1.186e-2, 2.2, 0.1588e-2)
    assert float(frequency) == pytest.approx(10e9, rel=2e-3)
    lengths = torch.tensor([8e-3, 12e-3, 16e-3])
    assert bool((antennas.cavity_resonance(lengths, 16e-3, 3.0, 1e-3).diff() < 0).all())
    with pytest.raises(ValueError, match="permittivity"):
        antennas.cavity_resonance(1e-2, 1e-2, 0.5, 1e-3)


def test_patch_antenna_cells_follow_the_design_and_bad_designs_are_refused():
    from common.errors import ConfigurationError

    setup = antennas.PatchSetup(n_length=8, n_width=8, n_height=1, line_cells=4, margin=3, air_cells=6, pml=5)
    design = {"length": 12e-3, "width": 16e-3, "feed_offset": 0.2, "permittivity": 3.0, "height": 0.8e-3}
    simulation, port = antennas.patch_antenna_simulation(design, setup)
    assert simulation.grid.spacing == pytest.approx((16e-3 / 8, 12e-3 / 8, 0.8e-3))
    assert simulation.grid.shape == (2 * (5 + 3) + 8, 2 * 5 + 2 + 4 + 8 + 3, 2 * 5 + 1 + 1 + 6)
    assert port.impedance == 50.0
    with pytest.raises(ConfigurationError, match="feed_offset"):
        antennas.patch_antenna_simulation({**design, "feed_offset": 0.45}, setup)
    # an inset feed: the line runs 3 of the 8 cells into the patch, in a notch of one-cell slots
    inset = {**design, "feed_offset": 0.0, "inset": 0.4}
    simulation, _ = antennas.patch_antenna_simulation(inset, setup)
    metal = antennas.patch_voxels(inset, cell=1e-3, shape=(24, 32, 4))[1].amax(-1)
    row = metal[:, 6 + 1]  # across the notch, one cell past the patch's edge (the line starts at y = 0)
    assert int((row > 0.5).sum()) < int((metal[:, 6 + 9] > 0.5).sum())  # the slots are open
    with pytest.raises(ConfigurationError, match="notch"):
        antennas.patch_antenna_simulation({**inset, "feed_offset": 0.2}, setup)
    with pytest.raises(ConfigurationError, match="inset"):
        antennas.patch_antenna_simulation({**inset, "inset": 0.6}, setup)
    with pytest.raises(ConfigurationError, match="missing"):
        antennas.patch_antenna_simulation({"length": 12e-3}, setup)
    with pytest.raises(ConfigurationError, match="even"):
        antennas.PatchSetup(n_width=7)


@pytest.mark.filterwarnings("ignore:.*(cells per wavelength|gap voltage is still).*:UserWarning")
def test_check_patch_design_predicts_the_design_the_fdtd_drew():
    """The inset snaps to whole cells in the FDTD: the prediction is scored for the snapped design."""
    options = {
        "n_length": 8,
        "n_width": 8,
        "n_height": 1,
        "line_cells": 4,
        "margin": 3,
        "air_cells": 6,
        "pml": 5,
        "n_frequencies": 46,
        "duration": 1.5e-9,
    }
    names = ["length", "width", "inset_used", "permittivity", "height"]
    torch.manual_seed(0)
    frequencies = antennas.PatchSetup(**options).frequencies
    model = SParameterSurrogate(names, frequencies, ("s11",), hidden_features=16)
    member = Ensemble([model], {"train": []})
    design = {"length": 13e-3, "width": 16e-3, "inset_used": 0.27, "permittivity": 3.3, "height": 1.1e-3}
    checked = check_patch_design(member, design, options)
    assert checked["design"]["inset"] == 2 / 8  # 0.27 of 8 cells: 2 cells drawn
    assert checked["design"]["inset"] == checked["simulated"]["inset_used"]
    snapped = torch.tensor([[13e-3, 16e-3, 0.25, 3.3, 1.1e-3]], dtype=torch.float64)
    requested = torch.tensor([[13e-3, 16e-3, 0.27, 3.3, 1.1e-3]], dtype=torch.float64)
    expected = model.predict(snapped)[0, :, 0].detach()
    assert torch.allclose(checked["predicted_s11"], expected)
    assert not torch.allclose(checked["predicted_s11"], model.predict(requested)[0, :, 0].detach())
    truth = checked["simulated"]["s11_real"] + 1j * checked["simulated"]["s11_imag"]
    assert checked["relative_l2"] == pytest.approx(
        np.linalg.norm(expected.numpy() - truth) / np.linalg.norm(truth), rel=1e-9
    )
    with pytest.raises(KeyError, match="height"):
        check_patch_design(member, {k: v for k, v in design.items() if k != "height"}, options)
    with pytest.raises(ValueError, match="frequencies"):
        check_patch_design(member, design, {**options, "n_frequencies": 31})
