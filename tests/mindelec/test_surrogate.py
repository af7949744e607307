"""mindelec.surrogate: the S-parameter surrogate on a sweep stored like the dataset generator stores it
(analytic Fabry-Perot S-parameters of the waveguide block, sweeps.block_s_parameters) against trivial mean
predictors on held-out samples; frequency-axis and column checks; checkpoints and Touchstone files read back
by scikit-rf; the autoencoder on FDTD field snapshots; the field surrogate on FDTD DFT fields."""

import numpy as np
import pytest
import skrf
import torch
from scipy.stats import qmc

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
        lr=3e-3,
        validation_fraction=0.25,
        seed=1,
        checkpoint=folder / "fit.chk",
        checkpoint_every=100,
        progress=False,
    )
    return path, model, history


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
    assert (path.parent / "fit.chk").is_file() and len(history["train_loss"]) == 600
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


def test_autoencoder_round_trip_on_fdtd_snapshots():
    sim = fdtd.Simulation(
        size=(32e-3, 32e-3),
        resolution=1e-3,
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
        model, frames, frames, epochs=150, lr=5e-3, batch_size=16, validation_fraction=0.25, progress=False
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


def test_field_surrogate_learns_fdtd_fields():
    options = {
        "resolution": 2e-3,
        "guide_length": 160e-3,
        "port_offset": 45e-3,
        "pml": 10,
        "n_frequencies": 2,
    }
    generator = np.random.default_rng(0)
    samples = [
        sweeps.field_sample({"length": length, "permittivity": permittivity}, seed=0, **options)
        for length, permittivity in zip(generator.uniform(4e-3, 30e-3, 6), generator.uniform(1.5, 4.5, 6))
    ]
    permittivity = torch.as_tensor(np.stack([s["permittivity"] for s in samples])).float()
    field = torch.as_tensor(np.stack([s["field_real"] + 1j * s["field_imag"] for s in samples]))
    torch.manual_seed(0)
    model = surrogate.FieldSurrogate(width=8, levels=3)
    target = torch.view_as_real(field).permute(0, 3, 1, 2).float()
    surrogate.fit(model, permittivity, target, epochs=300, lr=5e-3, validation_fraction=0.0, progress=False)
    with torch.no_grad():
        predicted = model.predict(permittivity).to(torch.complex128)
    assert predicted.shape == field.shape == (6, 80, 10)
    error = surrogate.relative_error(predicted, field).mean()
    mean_error = surrogate.relative_error(field.mean(0).expand_as(field), field).mean()
    print(
        f"field surrogate (training set): relative error {float(error):.3f}, "
        f"mean predictor {float(mean_error):.3f}"
    )
    # the field maps differ from sample to sample: the mean predictor is far off (0.66); the network fits
    # them (0.075 measured; 0.44 without the bottleneck's global context)
    assert mean_error > 0.3 and error < 0.3 * mean_error


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
    sys.argv[1], ["length", "permittivity"], epochs=200, lr=1e-2, batch_size=8, validation_fraction=0.25,
    seed=1, progress=False, context=context)
weights = torch.cat([parameter.detach().flatten() for parameter in model.parameters()])
with open(f"{sys.argv[2]}.{context.rank}.json", "w") as handle:
    json.dump({"world_size": context.world_size, "train_loss": history["train_loss"],
               "validation_loss": history["validation_loss"], "weights": weights.tolist()}, handle)
"""


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
