"""Data-driven electromagnetics: S-parameter and field surrogates, and an autoencoder for field data.

* :class:`SParameterSurrogate`: geometry parameters ``(B, P)`` -> complex S-parameters ``(B, F, K)`` over a
  fixed frequency axis (an MLP on normalised inputs and outputs), trained by
  :func:`train_sparameter_surrogate` on a sweep stored in HDF5 by ``common.datasets`` /
  ``common.io.H5Writer`` (columnar: ``sample_id``, one column per parameter, ``frequencies`` (N, F),
  ``s11_real``, ``s11_imag``, ``s21_real``, ``s21_imag`` (N, F): the keys of
  :func:`mindelec.sweeps.sparameter_sample`).
* :class:`FieldSurrogate`: a permittivity map ``(B, H, W)`` -> the complex frequency-domain field map
  ``(B, H, W)`` (a small convolutional encoder-decoder with coordinate channels), trained on FDTD DFT
  fields (:func:`mindelec.sweeps.field_sample`).
* :class:`ConvAutoencoder`: compresses grids ``(B, C, H, W)`` (field snapshots, geometry tensors) to a
  latent grid ``(B, latent_channels, H / 2^levels, W / 2^levels)``; :attr:`ConvAutoencoder.compression_ratio`
  and :func:`relative_error` report what it achieves.
* :func:`fit`: the one training loop of all three: Adam with a cosine schedule, a seeded train/validation
  split, the best-validation weights kept, atomic checkpoints (``common.io.save_checkpoint``) from which
  a killed run resumes bit for bit, a
  history dict, a tqdm progress bar, and data-parallel training under ``torchrun`` through
  ``common.parallel.DistributedContext``.
* :func:`export_touchstone` and :func:`plot_comparison`: predicted and simulated S-parameters as
  Touchstone files (scikit-rf, via :mod:`mindelec.ports`) and a comparison plot.

Example::

    model, history = train_sparameter_surrogate("sweep.h5", ["length", "permittivity"], epochs=2000)
    s = model.predict(torch.tensor([[12e-3, 3.0]]))        # (1, F, 2) complex: S11, S21
    model.save("surrogate.pt"); SParameterSurrogate.load("surrogate.pt")
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from common.errors import ConfigurationError, DataError
from common.nn import MLP

__all__ = [
    "fit",
    "CHECKPOINT_FORMAT",
    "relative_error",
    "SParameterSurrogate",
    "load_sweep",
    "train_sparameter_surrogate",
    "FieldSurrogate",
    "load_field_dataset",
    "ConvAutoencoder",
    "export_touchstone",
    "plot_comparison",
    "db",
]


# ---------------------------------------------------------------------------------------------- training


def _split(count: int, validation_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not 0 <= validation_fraction < 1:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    validation = round(validation_fraction * count)
    if count - validation < 1:
        raise ValueError(f"fit: {count} samples leave none for training")
    return order[validation:], order[:validation]


#: the ``format`` entry of :func:`fit` checkpoints (checked when one is resumed)
CHECKPOINT_FORMAT = "mindelec.surrogate.fit/1"


def _resume_state(path, settings: dict, count: int) -> dict:
    """The state of a :func:`fit` checkpoint, after checking its kind and that it belongs to this run."""
    from common.io import load_checkpoint

    state = load_checkpoint(path, kind="mindelec.surrogate.fit")
    found = state.get("format") if isinstance(state, dict) else None
    if found != CHECKPOINT_FORMAT:
        raise DataError(
            f"checkpoint {os.fspath(path)!r} is not a {CHECKPOINT_FORMAT!r} checkpoint (found format "
            f"{found!r}); pass another checkpoint path, or resume=False to overwrite it"
        )
    for key, value in settings.items():
        if state["settings"].get(key) != value:
            raise ConfigurationError(
                f"checkpoint {os.fspath(path)!r} was written with {key} = {state['settings'].get(key)!r}, "
                f"this call has {value!r}; use the same settings to resume, or resume=False to start over"
            )
    indices = state["train_indices"] + state["validation_indices"]
    if sorted(indices) != list(range(count)):
        raise ConfigurationError(
            f"checkpoint {os.fspath(path)!r} splits {len(indices)} samples; this call has {count}"
        )
    return state


def fit(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    epochs: int = 1000,
    lr: float = 3e-3,
    batch_size: int = 64,
    validation_fraction: float = 0.2,
    seed: int = 0,
    lr_decay: float = 0.01,
    weight_decay: float = 0.0,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 100,
    progress: bool = True,
    context=None,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    resume: bool = True,
) -> dict:
    """Train ``model`` so that ``model(inputs) ~ targets`` (mean squared error by default).

    Adam with a cosine learning-rate schedule from ``lr`` to ``lr * lr_decay``; the samples are split
    once (seeded) into training and validation sets; at the end the model holds the weights of the
    epoch with the lowest validation loss (the training loss without a validation set).

    Resuming: when ``checkpoint`` names an existing file (and ``resume`` is true), training continues
    from it, as ``mindsponge.train`` does: the model, optimiser, schedule, best weights, history, the
    stored train/validation split and the shuffling generator's state are restored, so a run killed
    at any moment and started again with the same call ends with the same weights and history, bit
    for bit, as one that was never interrupted (epochs after the last checkpoint are redone). A
    checkpoint of a finished run returns at once.

    Args:
        model: maps ``(B, ...)`` inputs to ``(B, ...)`` outputs shaped like ``targets``.
        inputs, targets: ``(N, ...)`` tensors, already on the model's device and dtype.
        epochs: passes over the training set.
        lr, lr_decay, weight_decay: Adam settings (see above).
        batch_size: samples per step (per process under ``torchrun``).
        validation_fraction: share of the samples held out (``0``: none).
        seed: the split and shuffling seed.
        checkpoint: optional file; an atomic checkpoint (``common.io.save_checkpoint``; ``format``
            :data:`CHECKPOINT_FORMAT`, ``model``, ``optimizer``, ``scheduler``, ``epoch`` (epochs done),
            ``history``, ``best_state``, ``best_score``, ``train_indices``, ``validation_indices``,
            ``sampler_state``, ``settings``) is written every ``checkpoint_every`` epochs and at the end
            (by the main process only).
        progress: show a tqdm bar (main process only).
        context: a ``common.parallel.DistributedContext`` for data-parallel training (each process sees
            a shard of the training set; gradients and training losses are averaged over processes, every
            process evaluates the whole validation set); ``None``: alone.
        loss: ``loss(prediction, target) -> 0-d tensor``; default mean squared error.
        resume: continue from an existing ``checkpoint`` (default); ``False`` starts at epoch 0 and
            overwrites it.

    Returns:
        history dict: ``epoch``, ``train_loss``, ``validation_loss`` (``nan`` without validation), ``lr``
        (lists, one entry per epoch), ``best_epoch``, ``train_indices`` and ``validation_indices`` (lists).

    Raises:
        ValueError: if inputs and targets have different sample counts or there is nothing to train on.
        DataError: (a ValueError) if the checkpoint to resume is not a :func:`fit` checkpoint (naming the
            kind expected and found).
        ConfigurationError: (a ValueError) if it was written with other settings (named) or sample count.
        FloatingPointError: if no epoch gave a finite loss.
    """
    from common.io import save_checkpoint

    if len(inputs) != len(targets):
        raise ValueError(f"fit: inputs hold {len(inputs)} samples but targets {len(targets)}")
    if not (isinstance(epochs, int) and epochs >= 1):
        raise ValueError(f"fit: epochs must be a positive integer, got {epochs!r}")
    loss = loss or nn.functional.mse_loss
    settings = {
        "epochs": epochs,
        "lr": lr,
        "batch_size": batch_size,
        "validation_fraction": validation_fraction,
        "seed": seed,
        "lr_decay": lr_decay,
        "weight_decay": weight_decay,
    }
    state = None
    if checkpoint is not None and resume and os.path.isfile(checkpoint):
        state = _resume_state(checkpoint, settings, len(inputs))
        train_index = torch.as_tensor(state["train_indices"], dtype=torch.long)
        validation_index = torch.as_tensor(state["validation_indices"], dtype=torch.long)
    else:
        train_index, validation_index = _split(len(inputs), validation_fraction, seed)
    is_main = context is None or context.is_main
    network = model if context is None else context.wrap(model)
    # the sampler only orders the training indices (a DistributedSampler shards them); batches are sliced
    # from the tensors directly
    generator = None
    if context is None:
        generator = torch.Generator().manual_seed(seed)
        sampler = torch.utils.data.RandomSampler(train_index, generator=generator)
    else:
        sampler = context.sampler(train_index, shuffle=True, seed=seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda epoch: lr_decay + (1 - lr_decay) * 0.5 * (1 + math.cos(math.pi * epoch / epochs))
    )
    history = {
        "epoch": [],
        "train_loss": [],
        "validation_loss": [],
        "lr": [],
        "best_epoch": -1,
        "train_indices": train_index.tolist(),
        "validation_indices": validation_index.tolist(),
    }
    best, best_state, first_epoch = math.inf, None, 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["scheduler"])
        if generator is not None and state["sampler_state"] is not None:
            generator.set_state(state["sampler_state"])
        history, best, best_state, first_epoch = (
            state["history"],
            state["best_score"],
            state["best_state"],
            state["epoch"],
        )

    def save(epochs_done):
        save_checkpoint(
            checkpoint,
            {
                "format": CHECKPOINT_FORMAT,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": schedule.state_dict(),
                "epoch": epochs_done,
                "history": history,
                "best_state": best_state,
                "best_score": best,
                "train_indices": train_index.tolist(),
                "validation_indices": validation_index.tolist(),
                "sampler_state": None if generator is None else generator.get_state(),
                "settings": settings,
            },
            kind="mindelec.surrogate.fit",
        )

    bar = tqdm(
        range(first_epoch, epochs),
        total=epochs,
        initial=first_epoch,
        desc=f"fit {type(model).__name__}",
        disable=not (progress and is_main),
    )
    for epoch in bar:
        if context is not None:
            context.set_epoch(sampler, epoch)
        model.train()
        total, count = 0.0, 0
        order = train_index[torch.as_tensor(list(sampler), dtype=torch.long)]
        for batch in order.split(batch_size):
            batch_inputs, batch_targets = inputs[batch], targets[batch]
            optimizer.zero_grad()
            value = loss(network(batch_inputs), batch_targets)
            value.backward()
            optimizer.step()
            total, count = total + float(value.detach()) * len(batch_inputs), count + len(batch_inputs)
        train_loss = total / count
        validation_loss = math.nan
        if len(validation_index):
            model.eval()
            with torch.no_grad():
                validation_loss = float(loss(model(inputs[validation_index]), targets[validation_index]))
        if context is not None:
            train_loss = float(context.all_reduce_mean(torch.tensor(train_loss, dtype=torch.float64)))
        history["epoch"].append(epoch)
        history["train_loss"].append(train_loss)
        history["validation_loss"].append(validation_loss)
        history["lr"].append(schedule.get_last_lr()[0])
        schedule.step()
        score = validation_loss if len(validation_index) else train_loss
        if score < best:
            best, history["best_epoch"] = score, epoch
            best_state = {key: value.detach().clone() for key, value in model.state_dict().items()}
        if is_main:
            bar.set_postfix(train=f"{train_loss:.3g}", validation=f"{validation_loss:.3g}", refresh=False)
            if checkpoint is not None and ((epoch + 1) % checkpoint_every == 0 or epoch == epochs - 1):
                save(epoch + 1)
    bar.close()
    if best_state is None:
        raise FloatingPointError(
            f"fit: every epoch's loss was nan or inf (last {history['train_loss'][-1]}); "
            "lower lr or check the data for nan"
        )
    model.load_state_dict(best_state)
    model.eval()
    return history


def relative_error(prediction: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Per-sample relative L2 error ``||prediction - reference|| / ||reference||``: ``(B, ...) -> (B,)``."""
    if prediction.shape != reference.shape:
        raise ValueError(
            f"relative_error: prediction {tuple(prediction.shape)} and reference "
            f"{tuple(reference.shape)} differ in shape"
        )
    difference = (prediction - reference).reshape(len(reference), -1)
    return torch.linalg.vector_norm(difference, dim=1) / torch.linalg.vector_norm(
        reference.reshape(len(reference), -1), dim=1
    ).clamp(min=torch.finfo(reference.real.dtype).tiny)


def db(s: torch.Tensor) -> torch.Tensor:
    """``20 log10 |s|`` (dB), floored at -240 dB; same shape as ``s``."""
    return 20 * torch.log10(s.abs().clamp(min=1e-12))


# ---------------------------------------------------------------------------------------------- S-parameters


def _sweep_columns(path, keys) -> dict[str, np.ndarray]:
    from common.io import read_table

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"sweep file {path!r} does not exist")
    table = read_table(path)
    missing = [key for key in keys if key not in table]
    if missing:
        raise KeyError(f"sweep file {path!r} has no column(s) {missing}; it has {sorted(table)}")
    if len(table[keys[0]]) == 0:
        raise ValueError(f"sweep file {path!r} holds no samples")
    return table


def _common_axis(table, key, path) -> np.ndarray:
    axis = np.asarray(table[key], dtype=np.float64)
    if axis.ndim != 2 or not np.array_equal(axis, np.broadcast_to(axis[0], axis.shape)):
        raise ValueError(
            f"sweep file {os.fspath(path)!r}: the rows of {key!r} differ; the samples must share one "
            "frequency axis"
        )
    return axis[0]


def load_sweep(path, parameter_names: Sequence[str], outputs: Sequence[str] = ("s11", "s21")) -> dict:
    """Read an S-parameter sweep written by ``common.datasets`` (or any ``common.io.H5Writer`` table).

    Args:
        path: the HDF5 file.
        parameter_names: the parameter columns, in the model's input order.
        outputs: S-parameter names; the file needs ``<name>_real`` and ``<name>_imag`` columns (N, F).

    Returns:
        dict: ``parameters`` (N, P) float64 tensor, ``s`` (N, F, K) complex128 tensor, ``frequencies`` (F,)
        float64 tensor (Hz), ``sample_id`` (N,) int64 tensor (``arange(N)`` if the file has none).

    Raises:
        FileNotFoundError, KeyError (missing column, named), ValueError (rows with different frequency axes).
    """
    parameter_names, outputs = list(parameter_names), list(outputs)
    keys = (
        parameter_names
        + ["frequencies"]
        + [f"{name}_{part}" for name in outputs for part in ("real", "imag")]
    )
    table = _sweep_columns(path, keys)
    frequencies = _common_axis(table, "frequencies", path)
    parameters = np.stack(
        [np.asarray(table[name], dtype=np.float64).reshape(-1) for name in parameter_names], 1
    )
    s = np.stack(
        [np.asarray(table[f"{name}_real"]) + 1j * np.asarray(table[f"{name}_imag"]) for name in outputs], -1
    )
    sample_id = table.get("sample_id", np.arange(len(parameters)))
    return {
        "parameters": torch.as_tensor(parameters),
        "s": torch.as_tensor(s, dtype=torch.complex128),
        "frequencies": torch.as_tensor(frequencies),
        "sample_id": torch.as_tensor(np.asarray(sample_id)),
    }


class SParameterSurrogate(nn.Module):
    """Geometry parameters -> complex S-parameters over a fixed band.

    An MLP (``common.nn.MLP``) maps the standardised parameters and one frequency (scaled to ``[-1, 1]``
    over the band) to the standardised real and imaginary parts of the ``K`` S-parameters at that
    frequency; the model evaluates it at every frequency of its axis. Sharing one network across
    frequencies lets a small sweep teach it how the response moves with frequency (resonances shift
    with the geometry), which a network with one output per frequency must learn separately.

    Args:
        parameter_names: names of the ``P`` inputs (e.g. ``("length", "permittivity")``), in order.
        frequencies: ``(F,)`` the frequency axis (Hz) the model predicts on.
        outputs: names of the ``K`` S-parameters (e.g. ``("s11", "s21")``).
        hidden_features, hidden_layers, activation: of the MLP.

    Shapes:
        :meth:`forward`: ``(B, P)`` parameters (SI units) -> ``(B, F, K, 2)`` standardised features
        (training); :meth:`predict`: ``(B, P)`` -> ``(B, F, K)`` complex; :meth:`predict_db`: the same in dB.
    """

    def __init__(
        self,
        parameter_names: Sequence[str],
        frequencies,
        outputs: Sequence[str] = ("s11", "s21"),
        hidden_features: int = 128,
        hidden_layers: int = 4,
        activation: str = "silu",
    ):
        super().__init__()
        self.parameter_names, self.outputs = tuple(parameter_names), tuple(outputs)
        if not self.parameter_names or not self.outputs:
            raise ValueError("SParameterSurrogate: parameter_names and outputs must not be empty")
        frequencies = torch.as_tensor(frequencies, dtype=torch.float64).reshape(-1)
        if len(frequencies) > 1 and not bool((frequencies.diff() > 0).all()):
            raise ValueError("SParameterSurrogate: frequencies must be strictly increasing (Hz)")
        self.options = {
            "hidden_features": hidden_features,
            "hidden_layers": hidden_layers,
            "activation": activation,
        }
        parameters, outputs_count = len(self.parameter_names), len(self.outputs)
        self.network = MLP(parameters + 1, 2 * outputs_count, hidden_features, hidden_layers, activation)
        self.register_buffer("frequencies", frequencies)
        span = (frequencies[-1] - frequencies[0]).clamp(min=1.0)
        self.register_buffer("scaled_frequencies", ((frequencies - frequencies[0]) / span * 2 - 1).float())
        self.register_buffer("input_shift", torch.zeros(parameters))
        self.register_buffer("input_scale", torch.ones(parameters))
        self.register_buffer("output_shift", torch.zeros(outputs_count, 2))  # one per S-parameter and part,
        self.register_buffer("output_scale", torch.ones(outputs_count, 2))  # shared by all frequencies

    def check_frequencies(self, frequencies, source: str = "dataset") -> None:
        """Raise ``ValueError`` unless ``frequencies`` (Hz) is the model's axis (to 1e-9 relative)."""
        frequencies = torch.as_tensor(frequencies, dtype=torch.float64).reshape(-1).cpu()
        mine = self.frequencies.cpu()
        if frequencies.shape != mine.shape or not torch.allclose(frequencies, mine, rtol=1e-9, atol=0.0):
            raise ValueError(
                f"{source}: its frequency axis ({len(frequencies)} points, {float(frequencies[0]):.6g} .. "
                f"{float(frequencies[-1]):.6g} Hz) does not match the model's ({len(mine)} points, "
                f"{float(mine[0]):.6g} .. {float(mine[-1]):.6g} Hz); resample the data or train a new model"
            )

    def set_normalization(self, parameters: torch.Tensor, s: torch.Tensor) -> None:
        """Standardise inputs and outputs by the mean and spread of training data (N, P), (N, F, K)."""
        features = torch.view_as_real(s.to(torch.complex128)).flatten(0, 1)  # (N F, K, 2)
        for prefix, values in (("input", parameters.to(torch.float64)), ("output", features)):
            scale = values.std(0, unbiased=False) if len(values) > 1 else torch.ones_like(values[0])
            getattr(self, f"{prefix}_shift").copy_(values.mean(0))
            getattr(self, f"{prefix}_scale").copy_(torch.where(scale > 0, scale, torch.ones_like(scale)))

    def encode_targets(self, s: torch.Tensor) -> torch.Tensor:
        """``(N, F, K)`` complex -> ``(N, F, K, 2)`` standardised features in the model's dtype."""
        expected = (len(self.frequencies), len(self.outputs))
        if s.dim() != 3 or tuple(s.shape[1:]) != expected:
            raise ValueError(
                f"encode_targets: s must have shape (N, {expected[0]}, {expected[1]}) (frequencies, "
                f"{self.outputs}), got {tuple(s.shape)}"
            )
        features = torch.view_as_real(s.to(torch.complex128)).to(self.output_shift)
        return (features - self.output_shift) / self.output_scale

    def forward(self, parameters: torch.Tensor) -> torch.Tensor:
        if parameters.dim() != 2 or parameters.shape[1] != len(self.parameter_names):
            raise ValueError(
                f"SParameterSurrogate expects parameters (B, {len(self.parameter_names)}) "
                f"{self.parameter_names}, got shape {tuple(parameters.shape)}"
            )
        scaled = ((parameters.to(self.input_shift) - self.input_shift) / self.input_scale).to(
            self.scaled_frequencies
        )
        count, frequencies = len(scaled), len(self.scaled_frequencies)
        inputs = torch.cat(
            [
                scaled[:, None, :].expand(-1, frequencies, -1),
                self.scaled_frequencies[None, :, None].expand(count, -1, -1),
            ],
            -1,
        )
        return self.network(inputs).reshape(count, frequencies, len(self.outputs), 2)

    def predict(self, parameters: torch.Tensor) -> torch.Tensor:
        """Complex S-parameters ``(B, F, K)`` for parameters ``(B, P)`` (SI units)."""
        features = self(parameters).to(self.output_shift) * self.output_scale + self.output_shift
        return torch.view_as_complex(features.to(torch.float64).contiguous())

    def predict_db(self, parameters: torch.Tensor) -> torch.Tensor:
        """``20 log10 |S|`` (dB), ``(B, F, K)``."""
        return db(self.predict(parameters))

    def save(self, path) -> None:
        """Write weights, normalisation and configuration atomically (``common.io.save_checkpoint``)."""
        from common.io import save_checkpoint

        save_checkpoint(
            path,
            {
                "state": self.state_dict(),
                "parameter_names": list(self.parameter_names),
                "outputs": list(self.outputs),
                "options": self.options,
            },
            kind="mindelec.SParameterSurrogate",
        )

    @classmethod
    def load(cls, path) -> SParameterSurrogate:
        """A model saved by :meth:`save`."""
        from common.io import load_checkpoint

        saved = load_checkpoint(path, kind="mindelec.SParameterSurrogate")
        model = cls(
            saved["parameter_names"], saved["state"]["frequencies"], saved["outputs"], **saved["options"]
        )
        model.load_state_dict(saved["state"])
        return model.eval()


def train_sparameter_surrogate(
    path,
    parameter_names: Sequence[str],
    outputs: Sequence[str] = ("s11", "s21"),
    model: SParameterSurrogate | None = None,
    **fit_options,
):
    """Train an :class:`SParameterSurrogate` on a sweep file (see :func:`load_sweep`).

    Args:
        path: the HDF5 sweep.
        parameter_names, outputs: as :func:`load_sweep`.
        model: continue training this model (its frequency axis, parameters and outputs must match the
            file's); default a new one on the file's frequency axis.
        **fit_options: passed to :func:`fit` (``epochs``, ``lr``, ``validation_fraction``, ``seed``,
            ``checkpoint``, ``progress``, ``context``, ...).

    Returns:
        ``(model, history)``; ``history`` as :func:`fit` returns it, plus ``sample_id`` of the validation
        samples (``validation_sample_ids``).

    Raises:
        ValueError: if the file's frequency axis does not match ``model``'s (or the names differ).
    """
    sweep = load_sweep(path, parameter_names, outputs)
    if model is None:
        model = SParameterSurrogate(parameter_names, sweep["frequencies"], outputs)
        model.set_normalization(sweep["parameters"], sweep["s"])
    else:
        if tuple(parameter_names) != model.parameter_names or tuple(outputs) != model.outputs:
            raise ValueError(
                f"sweep {os.fspath(path)!r}: parameters {tuple(parameter_names)} and outputs "
                f"{tuple(outputs)} differ from the model's {model.parameter_names}, {model.outputs}"
            )
        model.check_frequencies(sweep["frequencies"], f"sweep file {os.fspath(path)!r}")
    context = fit_options.get("context")
    if context is not None:
        model.to(context.device)
    inputs = sweep["parameters"].to(model.input_shift)
    history = fit(model, inputs, model.encode_targets(sweep["s"]), **fit_options)
    history["validation_sample_ids"] = sweep["sample_id"][history["validation_indices"]].tolist()
    return model, history


# ---------------------------------------------------------------------------------------------- fields


def _conv_block(channels_in, channels_out, stride=1):
    return nn.Sequential(nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1), nn.SiLU())


def _pad_to_multiple(grid: torch.Tensor, multiple: int) -> tuple[torch.Tensor, tuple[int, int]]:
    height, width = grid.shape[-2:]
    pad_h, pad_w = (-height) % multiple, (-width) % multiple
    return nn.functional.pad(grid, (0, pad_w, 0, pad_h), mode="replicate"), (height, width)


class FieldSurrogate(nn.Module):
    """Permittivity map -> complex frequency-domain field map (a small convolutional U-Net).

    Input channels: the standardised permittivity and the two node coordinates in ``[-1, 1]`` (so that
    the network knows where the source and ports are); ``levels`` stride-2 stages with skip connections, and
    at the bottleneck a global context vector (the spatial mean through a linear layer) added everywhere,
    since fields in a guide depend on the whole structure, beyond any convolution's receptive field.

    Args:
        width: channels of the first stage (doubled per level).
        levels: down-sampling stages (the receptive field grows like ``2^levels``).
        permittivity_scale: the permittivity is standardised as ``(eps - 1) / permittivity_scale``.

    Shapes:
        :meth:`forward`: ``(B, H, W)`` relative permittivity -> ``(B, 2, H, W)`` (real, imaginary parts).
        :meth:`predict`: ``(B, H, W)`` -> ``(B, H, W)`` complex.
    """

    def __init__(self, width: int = 16, levels: int = 3, permittivity_scale: float = 3.0):
        super().__init__()
        self.levels, self.permittivity_scale = int(levels), float(permittivity_scale)
        self.options = {"width": width, "levels": levels, "permittivity_scale": permittivity_scale}
        channels = [width * 2**level for level in range(levels + 1)]
        self.stem = _conv_block(3, channels[0])
        self.down = nn.ModuleList(
            nn.Sequential(
                _conv_block(channels[i], channels[i + 1], stride=2),
                _conv_block(channels[i + 1], channels[i + 1]),
            )
            for i in range(levels)
        )
        self.up = nn.ModuleList(
            nn.ConvTranspose2d(channels[i + 1], channels[i], 2, stride=2) for i in range(levels)
        )
        self.merge = nn.ModuleList(_conv_block(2 * channels[i], channels[i]) for i in range(levels))
        self.context = nn.Linear(channels[-1], channels[-1])
        self.head = nn.Conv2d(channels[0], 2, 1)

    def forward(self, permittivity: torch.Tensor) -> torch.Tensor:
        if permittivity.dim() != 3:
            raise ValueError(
                f"FieldSurrogate expects permittivity (B, H, W), got {tuple(permittivity.shape)}"
            )
        dtype = self.head.weight.dtype
        grid, (height, width) = _pad_to_multiple(permittivity.to(dtype)[:, None], 2**self.levels)
        rows = torch.linspace(-1, 1, grid.shape[-2], dtype=dtype, device=grid.device)
        columns = torch.linspace(-1, 1, grid.shape[-1], dtype=dtype, device=grid.device)
        coordinates = torch.stack(torch.meshgrid(rows, columns, indexing="ij")).expand(len(grid), -1, -1, -1)
        hidden = self.stem(torch.cat([(grid - 1) / self.permittivity_scale, coordinates], 1))
        skips = []
        for stage in self.down:
            skips.append(hidden)
            hidden = stage(hidden)
        # global context at the bottleneck: a waveguide's field depends on the whole structure
        hidden = hidden + self.context(hidden.mean(dim=(2, 3)))[:, :, None, None]
        for level in reversed(range(self.levels)):
            hidden = self.merge[level](torch.cat([self.up[level](hidden), skips[level]], 1))
        return self.head(hidden)[..., :height, :width]

    def predict(self, permittivity: torch.Tensor) -> torch.Tensor:
        """Complex field ``(B, H, W)``."""
        output = self(permittivity)
        return torch.complex(output[:, 0], output[:, 1])


def load_field_dataset(path) -> dict:
    """Read field samples (the keys of :func:`mindelec.sweeps.field_sample`) from an HDF5 table.

    Returns:
        dict: ``permittivity`` (N, H, W) float tensor, ``field`` (N, H, W) complex128 tensor, ``frequency``
        (): Hz (all samples must share it).
    """
    table = _sweep_columns(path, ["permittivity", "field_real", "field_imag", "frequency"])
    frequency = np.unique(np.asarray(table["frequency"], dtype=np.float64))
    if len(frequency) != 1:
        raise ValueError(f"field file {os.fspath(path)!r} mixes frequencies {frequency.tolist()} Hz")
    field = np.asarray(table["field_real"]) + 1j * np.asarray(table["field_imag"])
    return {
        "permittivity": torch.as_tensor(np.asarray(table["permittivity"], dtype=np.float64)),
        "field": torch.as_tensor(field, dtype=torch.complex128),
        "frequency": float(frequency[0]),
    }


# ---------------------------------------------------------------------------------------------- encoding


class ConvAutoencoder(nn.Module):
    """Convolutional autoencoder for 2D grids (field snapshots, geometry tensors).

    ``levels`` stride-2 convolutions take ``(B, C, H, W)`` to the latent ``(B, latent_channels, H / 2^levels,
    W / 2^levels)``; transposed convolutions mirror them. Inputs are standardised by one shift and scale per
    channel (:meth:`set_normalization`); ``H`` and ``W`` must be multiples of ``2^levels``.

    Args:
        channels: input channels ``C``.
        latent_channels: channels of the latent grid.
        width: channels of the first stage (doubled per level).
        levels: down-sampling stages.

    Shapes:
        :meth:`encode`: ``(B, C, H, W)`` -> latent; :meth:`decode`: latent -> ``(B, C, H, W)``;
        :meth:`forward` = decode(encode(x)).
    """

    def __init__(self, channels: int = 1, latent_channels: int = 4, width: int = 16, levels: int = 3):
        super().__init__()
        self.channels, self.latent_channels, self.levels = int(channels), int(latent_channels), int(levels)
        widths = [width * 2**level for level in range(levels)]
        encoder, decoder = [], []
        previous = channels
        for stage_width in widths:
            encoder += [
                nn.Conv2d(previous, stage_width, 4, stride=2, padding=1),
                nn.SiLU(),
                nn.Conv2d(stage_width, stage_width, 3, padding=1),
                nn.SiLU(),
            ]
            previous = stage_width
        encoder.append(nn.Conv2d(previous, latent_channels, 1))
        decoder.append(nn.Conv2d(latent_channels, previous, 1))
        for stage_width in reversed([channels] + widths[:-1]):
            decoder += [
                nn.SiLU(),
                nn.Conv2d(previous, previous, 3, padding=1),
                nn.SiLU(),
                nn.ConvTranspose2d(previous, stage_width, 4, stride=2, padding=1),
            ]
            previous = stage_width
        self.encoder, self.decoder = nn.Sequential(*encoder), nn.Sequential(*decoder)
        self.register_buffer("shift", torch.zeros(channels))
        self.register_buffer("scale", torch.ones(channels))

    def _check(self, grid: torch.Tensor) -> None:
        factor = 2**self.levels
        if (
            grid.dim() != 4
            or grid.shape[1] != self.channels
            or grid.shape[2] % factor
            or grid.shape[3] % factor
        ):
            raise ValueError(
                f"ConvAutoencoder expects (B, {self.channels}, H, W) with H and W multiples of "
                f"{factor}, got {tuple(grid.shape)}"
            )

    def set_normalization(self, grids: torch.Tensor) -> None:
        """Per-channel mean and standard deviation of training grids ``(N, C, H, W)``."""
        self._check(grids)
        self.shift.copy_(grids.mean(dim=(0, 2, 3)))
        self.scale.copy_(grids.std(dim=(0, 2, 3)).clamp(min=torch.finfo(grids.dtype).tiny))

    def encode(self, grid: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, latent_channels, H / 2^levels, W / 2^levels)``."""
        self._check(grid)
        return self.encoder((grid - self.shift[:, None, None]) / self.scale[:, None, None])

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """Latent -> ``(B, C, H, W)`` in the input's units."""
        return self.decoder(latent) * self.scale[:, None, None] + self.shift[:, None, None]

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(grid))

    @property
    def compression_ratio(self) -> float:
        """Input values per latent value: ``C H W / (latent_channels H W / 4^levels)``."""
        return self.channels * 4**self.levels / self.latent_channels


# ---------------------------------------------------------------------------------------------- export, plots


def export_touchstone(path, frequencies, s11, s21=None, z0: float = 50.0):
    """Write a one-port (``.s1p``, S11 only) or symmetric reciprocal two-port (``.s2p``) Touchstone file.

    The two-port matrix is ``[[S11, S21], [S21, S11]]`` (a mirror-symmetric, reciprocal device such as the
    waveguide block of :mod:`mindelec.sweeps`).

    Args:
        path: the file (suffix ``.s1p`` or ``.s2p``).
        frequencies: ``(F,)`` Hz.
        s11, s21: ``(F,)`` complex (tensors or arrays).
        z0: reference impedance (ohm).

    Returns:
        The path written (via :func:`mindelec.ports.write_touchstone`, scikit-rf).
    """
    from mindelec import ports

    s11 = torch.as_tensor(np.asarray(s11 if not isinstance(s11, torch.Tensor) else s11.detach().cpu()))
    if s21 is None:
        return ports.write_touchstone(path, frequencies, s11, z0=z0)
    s21 = torch.as_tensor(np.asarray(s21 if not isinstance(s21, torch.Tensor) else s21.detach().cpu()))
    matrix = torch.stack([torch.stack([s11, s21], -1), torch.stack([s21, s11], -1)], -2)
    return ports.write_touchstone(path, frequencies, matrix, z0=z0)


def plot_comparison(
    frequencies,
    simulated,
    predicted,
    labels: Sequence[str] = ("S11", "S21"),
    axes=None,
    title: str | None = None,
):
    """Plot simulated (lines) and predicted (dashed) ``|S|`` in dB over frequency (GHz).

    Args:
        frequencies: ``(F,)`` Hz.
        simulated, predicted: ``(F, K)`` complex.
        labels: names of the K columns.
        axes: a matplotlib Axes (default: a new figure).

    Returns:
        The matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(figsize=(6, 3.5))
    gigahertz = np.asarray(torch.as_tensor(frequencies).cpu()) / 1e9
    simulated, predicted = torch.as_tensor(simulated), torch.as_tensor(predicted)
    for k, label in enumerate(labels):
        line = axes.plot(gigahertz, db(simulated[:, k]).numpy(), label=f"{label} FDTD")[0]
        axes.plot(
            gigahertz,
            db(predicted[:, k]).detach().numpy(),
            "--",
            color=line.get_color(),
            label=f"{label} surrogate",
        )
    axes.set_xlabel("frequency (GHz)")
    axes.set_ylabel("|S| (dB)")
    if title:
        axes.set_title(title)
    axes.legend(fontsize="small")
    return axes
