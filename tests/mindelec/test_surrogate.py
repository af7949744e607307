"""mindelec.surrogate: the S-parameter surrogate on a sweep stored like the dataset generator stores it
(analytic Fabry-Perot S-parameters of the waveguide block, sweeps.block_s_parameters) against trivial mean
predictors on held-out samples; frequency-axis and column checks; checkpoints and Touchstone files read back
by scikit-rf; the autoencoder on FDTD field snapshots; the field surrogate on FDTD DFT fields of designs it
never saw; fit resuming after kill -9 bit for bit, and refusing a foreign or mismatched checkpoint."""

import numpy as np
import pytest
import skrf
import torch
from scipy.stats import qmc

from common.errors import ConfigurationError, DataError
from common.io import H5Writer
from mindelec import fdtd, surrogate, sweeps

PARAMETERS = ["length", "permittivity"]


def write_sweep(path, count, n_frequencies=16, f_max=14e9, seed=0):
    """An analytic sweep in the generator's columnar layout; returns the parameters (count, 2)."""
    setup = sweeps.WaveguideSetup(n_frequencies=n_frequencies, f_max=f_max)
    unit = qmc.Sobol(2, seed=seed).random(count)
    parameters = np.stack([4e-3 + 26e-3 * unit[:, 0], 1.5 + 3.0 * unit[:, 1]], 1)
    frequencies = setup.frequencies.numpy()
    with H5Writer(path, mode="w") as writer:
        for index, (length, permittivity) in enumerate(parameters):
            s11, s21 = sweeps.block_s_parameters(frequencies, length, permittivity, setup)
            writer.append(
                {
                    "sample_id": index,
                    "length": length,
                    "permittivity": permittivity,
                    "frequencies": frequencies,
                    "s11_real": s11.real,
                    "s11_imag": s11.imag,
                    "s21_real": s21.real,
                    "s21_imag": s21.imag,
                }
            )
    return parameters


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    path = folder / "sweep.h5"
    write_sweep(path, 64)
    torch.manual_seed(0)
    model, history = surrogate.train_sparameter_surrogate(
        path,
        PARAMETERS,
        epochs=600,
        learning_rate=3e-3,
        validation_fraction=0.25,
        seed=1,
        checkpoint=folder / "fit.chk",
        checkpoint_every=100,
        progress=False,
    )
    return path, model, history


@pytest.mark.slow
def test_sparameter_surrogate_beats_mean_predictors(trained):
    path, model, history = trained
    sweep = surrogate.load_sweep(path, PARAMETERS)
    held_out, seen = history["validation_indices"], history["train_indices"]
    assert len(held_out) == 16 and not set(held_out) & set(seen)
    truth = sweep["s"][held_out]
    with torch.no_grad():
        predicted = model.predict(sweep["parameters"][held_out])
    assert predicted.shape == truth.shape == (16, 16, 2) and predicted.dtype == torch.complex128
    error_db = (surrogate.db(predicted[..., 0]) - surrogate.db(truth[..., 0])).abs().mean()
    # trivial predictors from the training samples: the mean complex response, the mean |S11| in dB
    mean_complex = sweep["s"][seen].mean(0).expand_as(truth)
    mean_db = surrogate.db(sweep["s"][seen][..., 0]).mean(0).expand_as(truth[..., 0])
    error_mean_complex = (surrogate.db(mean_complex[..., 0]) - surrogate.db(truth[..., 0])).abs().mean()
    error_mean_db = (mean_db - surrogate.db(truth[..., 0])).abs().mean()
    print(
        f"held-out mean |S11| error: surrogate {float(error_db):.2f} dB, mean complex "
        f"{float(error_mean_complex):.2f} dB, mean dB {float(error_mean_db):.2f} dB; relative "
        f"{float(surrogate.relative_error(predicted, truth).mean()):.3f} vs "
        f"{float(surrogate.relative_error(mean_complex, truth).mean()):.3f}"
    )
    assert error_db < 0.6 * error_mean_db and error_db < 0.6 * error_mean_complex
    assert (
        surrogate.relative_error(predicted, truth).mean()
        < 0.5 * surrogate.relative_error(mean_complex, truth).mean()
    )


def test_checkpoints_save_load_and_touchstone(trained, tmp_path):
    path, model, history = trained
    assert (path.parent / "fit.chk").is_file() and len(history["loss"]) == 600
    model.save(tmp_path / "model.pt")
    loaded = surrogate.SParameterSurrogate.load(tmp_path / "model.pt")
    parameters = torch.tensor([[12e-3, 3.0], [25e-3, 2.0]], dtype=torch.float64)
    with torch.no_grad():
        predicted = model.predict(parameters)
        assert torch.equal(loaded.predict(parameters), predicted)
    frequencies = model.frequencies
    written = surrogate.export_touchstone(
        tmp_path / "predicted.s2p", frequencies, predicted[0, :, 0], predicted[0, :, 1]
    )
    network = skrf.Network(str(written))
    np.testing.assert_allclose(network.f, frequencies.numpy(), rtol=1e-12)
    np.testing.assert_allclose(network.s[:, 0, 0], predicted[0, :, 0].numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(network.s[:, 1, 0], network.s[:, 0, 1])  # reciprocal
    one_port = skrf.Network(
        str(surrogate.export_touchstone(tmp_path / "s11.s1p", frequencies, predicted[1, :, 0]))
    )
    np.testing.assert_allclose(one_port.s[:, 0, 0], predicted[1, :, 0].numpy(), rtol=1e-9, atol=1e-12)


def test_frequency_axis_and_column_errors(trained, tmp_path):
    _, model, _ = trained
    other = tmp_path / "other_band.h5"
    write_sweep(other, 4, f_max=13e9)
    with pytest.raises(ValueError, match="other_band.h5.*frequency axis .* does not match the model's"):
        surrogate.train_sparameter_surrogate(other, PARAMETERS, model=model, epochs=1, progress=False)
    coarse = tmp_path / "coarse.h5"
    write_sweep(coarse, 4, n_frequencies=8)
    with pytest.raises(ValueError, match="8 points"):
        surrogate.train_sparameter_surrogate(coarse, PARAMETERS, model=model, epochs=1, progress=False)
    with pytest.raises(KeyError, match="no column\\(s\\) \\['width'\\]"):
        surrogate.load_sweep(coarse, ["length", "width"])
    with H5Writer(tmp_path / "mixed.h5", mode="w") as writer:
        for top in (13e9, 14e9):
            frequencies = np.linspace(9.5e9, top, 4)
            writer.append(
                {
                    "length": 1e-2,
                    "permittivity": 2.0,
                    "frequencies": frequencies,
                    "s11_real": np.zeros(4),
                    "s11_imag": np.zeros(4),
                    "s21_real": np.ones(4),
                    "s21_imag": np.zeros(4),
                }
            )
    with pytest.raises(ValueError, match="rows of 'frequencies' differ"):
        surrogate.load_sweep(tmp_path / "mixed.h5", PARAMETERS)
    with pytest.raises(FileNotFoundError, match="missing.h5"):
        surrogate.load_sweep(tmp_path / "missing.h5", PARAMETERS)
    with pytest.raises(ValueError, match="expects parameters \\(B, 2\\)"):
        model.predict(torch.zeros(3, 3))


@pytest.mark.slow
def test_autoencoder_round_trip_on_fdtd_snapshots():
    sim = fdtd.Simulation(
        size=(32e-3, 32e-3),
        cell_size=1e-3,
        boundary=fdtd.PML(thickness=6),
        sources=[fdtd.PointDipole((-5e-3, 3e-3), "Ez", fdtd.GaussianPulse(f0=20e9, fwidth=12e9))],
        monitors=[fdtd.Snapshots("s", every=2, components=("Ez",))],
    )
    frames = sim.run(steps=200, progress=False)["s"]["Ez"][
        25:
    ]  # 75 frames once the pulse has left the source
    frames = (frames / frames.abs().amax(dim=(1, 2), keepdim=True))[:, None]
    torch.manual_seed(0)
    model = surrogate.ConvAutoencoder(channels=1, latent_channels=1, width=8, levels=2)
    model.set_normalization(frames)
    history = surrogate.fit(
        model, frames, frames, epochs=150, learning_rate=5e-3, batch_size=16, validation_fraction=0.25,
        progress=False
    )
    held_out = history["validation_indices"]
    with torch.no_grad():
        latent = model.encode(frames[held_out])
        error = surrogate.relative_error(model.decode(latent), frames[held_out])
    assert latent.shape == (len(held_out), 1, 8, 8) and model.compression_ratio == 16.0
    assert frames[0].numel() / latent[0].numel() == model.compression_ratio
    print(
        f"autoencoder: compression 16, held-out relative error mean {float(error.mean()):.3f} "
        f"max {float(error.max()):.3f}"
    )
    # stated: 16x compression of held-out snapshots to a mean relative L2 error below 0.3 (measured ~0.17)
    assert float(error.mean()) < 0.3
    with pytest.raises(ValueError, match="multiples of 4"):
        model(torch.zeros(1, 1, 30, 32))


@pytest.mark.slow
def test_field_surrogate_predicts_fdtd_fields_of_unseen_designs():
    """Trained on 16 FDTD field maps (Sobol designs), scored on 3 designs it never saw (another Sobol
    sequence, inside the training ranges) against the mean of the training fields."""
    options = {
        "cell_size": 2e-3,
        "guide_length": 160e-3,
        "port_offset": 45e-3,
        "pml": 10,
        "n_frequencies": 2,
    }
    training_units = qmc.Sobol(2, seed=0).random(16)
    held_out_units = 0.1 + 0.8 * qmc.Sobol(2, seed=7).random(8)[2:8:2]
    units = np.concatenate([training_units, held_out_units])
    samples = [
        sweeps.field_sample({"length": 4e-3 + 26e-3 * u, "permittivity": 1.5 + 3.0 * v}, seed=0, **options)
        for u, v in units
    ]
    permittivity = torch.as_tensor(np.stack([s["permittivity"] for s in samples])).float()
    field = torch.as_tensor(np.stack([s["field_real"] + 1j * s["field_imag"] for s in samples]))
    train, held_out = slice(0, 16), slice(16, None)
    assert not any(np.allclose(u, t) for u in held_out_units for t in training_units)
    torch.manual_seed(0)
    model = surrogate.FieldSurrogate(width=8, levels=3)
    target = torch.view_as_real(field).permute(0, 3, 1, 2).float()
    fit_options = dict(epochs=300, learning_rate=5e-3, validation_fraction=0.0, progress=False)
    surrogate.fit(model, permittivity[train], target[train], **fit_options)
    with torch.no_grad():
        predicted = model.predict(permittivity[held_out]).to(torch.complex128)
    assert predicted.shape == field[held_out].shape == (3, 80, 10)
    error = surrogate.relative_error(predicted, field[held_out]).mean()
    mean_field = field[train].mean(0).expand_as(field[held_out])
    mean_error = surrogate.relative_error(mean_field, field[held_out]).mean()
    print(
        f"field surrogate (3 held-out designs): relative error {float(error):.3f}, "
        f"mean-of-training predictor {float(mean_error):.3f}"
    )
    # the field maps differ from design to design: the mean predictor is far off (0.68 measured); the network
    # predicts unseen designs to 0.32 (per design 0.12-0.51; 0.22 with 32 training designs)
    assert mean_error > 0.3 and error < 0.7 * mean_error


def test_fit_with_a_single_process_distributed_context_matches_plain_fit():
    from common.parallel import DistributedContext

    generator = torch.Generator().manual_seed(0)
    inputs = torch.rand(40, 2, generator=generator)
    targets = torch.sin(3 * inputs).sum(1, keepdim=True)
    histories = []
    for context in (None, DistributedContext.from_environment(device="cpu")):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        histories.append(
            surrogate.fit(model, inputs, targets, epochs=30, batch_size=8, progress=False, context=context)
        )
    assert histories[0]["train_loss"] == histories[1]["train_loss"]
    assert histories[0]["validation_loss"][-1] < 0.2 * histories[0]["validation_loss"][0]
    with pytest.raises(ValueError, match="inputs hold 40 samples but targets 39"):
        surrogate.fit(model, inputs, targets[:39], epochs=1, progress=False)


def test_fit_refuses_nan_data():
    model = torch.nn.Linear(2, 1)
    with pytest.raises(FloatingPointError, match="nan or inf"):
        surrogate.fit(model, torch.zeros(8, 2), torch.full((8, 1), float("nan")), epochs=2, progress=False)


TORCHRUN_SCRIPT = """
import json, sys
import torch
from common.parallel import DistributedContext
from mindelec import surrogate

context = DistributedContext.from_environment(device="cpu")
torch.manual_seed(0)
model, history = surrogate.train_sparameter_surrogate(
    sys.argv[1], ["length", "permittivity"], epochs=200, learning_rate=1e-2, batch_size=8,
    validation_fraction=0.25, seed=1, progress=False, context=context)
weights = torch.cat([parameter.detach().flatten() for parameter in model.parameters()])
with open(f"{sys.argv[2]}.{context.rank}.json", "w") as handle:
    json.dump({"world_size": context.world_size, "train_loss": history["loss"],
               "validation_loss": history["validation_loss"], "weights": weights.tolist()}, handle)
"""


@pytest.mark.slow
def test_torchrun_data_parallel_training(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    write_sweep(tmp_path / "sweep.h5", 32)
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_SCRIPT)
    environment = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE")}
    environment.update(PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(script),
            str(tmp_path / "sweep.h5"),
            str(tmp_path / "result"),
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"result.{rank}.json").read_text()) for rank in (0, 1)]
    assert all(result["world_size"] == 2 for result in ranks)
    # DistributedDataParallel keeps the replicas identical and both report the all-reduced training loss
    np.testing.assert_array_equal(ranks[0]["weights"], ranks[1]["weights"])
    assert ranks[0]["train_loss"] == ranks[1]["train_loss"]
    assert min(ranks[0]["validation_loss"]) < 0.7 * ranks[0]["validation_loss"][0]  # and it learns


RESUME_SCRIPT = """
import sys, time
import torch
from mindelec import surrogate

torch.set_num_threads(1)
generator = torch.Generator().manual_seed(0)
inputs = torch.rand(48, 3, generator=generator)
targets = torch.sin(3 * inputs).sum(1, keepdim=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def slow_loss(prediction, target):  # slows the run so that the parent can kill it part-way
    time.sleep(0.003)
    return torch.nn.functional.mse_loss(prediction, target)


surrogate.fit(model, inputs, targets, epochs=int(sys.argv[2]), learning_rate=1e-2, batch_size=8,
              validation_fraction=0.25, seed=3, checkpoint=sys.argv[1], checkpoint_every=1, progress=False,
              loss=slow_loss)
"""


def _resume_problem():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.rand(48, 3, generator=generator)
    return inputs, torch.sin(3 * inputs).sum(1, keepdim=True)


def _resume_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


@pytest.mark.slow
def test_fit_resumes_after_kill_9_and_ends_bit_identical(tmp_path):
    """Issue 19: fit restarted at epoch 0 after a kill and overwrote its checkpoint. Killed (SIGKILL) part-way
    and called again, it continues from the checkpoint and ends with the uninterrupted run's weights and
    history, bit for bit."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from common.io import load_checkpoint

    epochs = 60
    options = dict(learning_rate=1e-2, batch_size=8, validation_fraction=0.25, seed=3, progress=False)
    path = tmp_path / "fit.chk"
    script = tmp_path / "train.py"
    script.write_text(RESUME_SCRIPT)
    environment = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), OMP_NUM_THREADS="1")
    process = subprocess.Popen([sys.executable, str(script), str(path), str(epochs)], env=environment)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if path.exists() and load_checkpoint(path)["done"] >= 5:
                process.kill()  # SIGKILL: no handler, no final checkpoint
                break
            time.sleep(0.02)
    finally:
        process.kill()
        returncode = process.wait()
    assert returncode == -9, "the training process must have been killed part-way"
    killed_at = load_checkpoint(path)["done"]
    assert 5 <= killed_at < epochs

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        inputs, targets = _resume_problem()
        resumed = _resume_model(seed=99)  # other initial weights: everything must come from the checkpoint
        resumed_history = surrogate.fit(resumed, inputs, targets, epochs=epochs, checkpoint=path, **options)
        plain = _resume_model(seed=0)
        plain_history = surrogate.fit(plain, inputs, targets, epochs=epochs, **options)
    finally:
        torch.set_num_threads(threads)
    assert resumed_history["epoch"] == list(range(1, epochs + 1))
    assert resumed_history["loss"] == plain_history["loss"]
    assert resumed_history["validation_loss"] == plain_history["validation_loss"]
    assert resumed_history["validation_indices"] == plain_history["validation_indices"]
    assert resumed_history["best_epoch"] == plain_history["best_epoch"]
    for (name, value), (_, expected) in zip(resumed.state_dict().items(), plain.state_dict().items()):
        assert torch.equal(value, expected), name
    assert load_checkpoint(path)["done"] == epochs
    # a finished checkpoint returns at once with the same best weights
    again = _resume_model(seed=5)
    surrogate.fit(again, inputs, targets, epochs=epochs, checkpoint=path, **options)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), plain.state_dict().values()))


def test_fit_refuses_a_foreign_or_mismatched_checkpoint(tmp_path):
    from common.io import save_checkpoint

    inputs, targets = _resume_problem()
    path = tmp_path / "fit.chk"
    save_checkpoint(path, {"format": "mindsponge.train/1", "model": {}}, kind="mindsponge.train")
    with pytest.raises(DataError, match="of kind 'mindsponge.train'; expected 'mindelec.surrogate.fit'"):
        surrogate.fit(_resume_model(0), inputs, targets, epochs=3, checkpoint=path, progress=False)
    history = surrogate.fit(
        _resume_model(0), inputs, targets, epochs=3, checkpoint=path, progress=False, resume=False
    )
    assert history["epoch"] == [1, 2, 3]  # resume=False starts over and overwrites
    with pytest.raises(ConfigurationError, match="written with lr = 0.003, this call has 0.01"):
        surrogate.fit(_resume_model(0), inputs, targets, epochs=3, learning_rate=1e-2, checkpoint=path,
                      progress=False)
    with pytest.raises(ConfigurationError, match="splits 48 samples; this call has 40"):
        surrogate.fit(_resume_model(0), inputs[:40], targets[:40], epochs=3, checkpoint=path, progress=False)
