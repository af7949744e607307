"""S-parameter surrogates: a sweep read from HDF5, the model and its training (:mod:`mindelec.surrogate`)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from common.errors import ConfigurationError, MissingFileError, UnknownNameError
from common.nn import MLP
from mindelec.surrogate.training import db, fit

__all__ = ["SParameterSurrogate", "load_sweep", "train_sparameter_surrogate"]


def sweep_columns(path, keys) -> dict[str, np.ndarray]:
    """The columns ``keys`` of the HDF5 table at ``path`` (naming the file and any column missing)."""
    from common.io import read_table

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MissingFileError(f"sweep file {path!r} does not exist")
    table = read_table(path)
    missing = [key for key in keys if key not in table]
    if missing:
        raise UnknownNameError(f"sweep file {path!r} has no column(s) {missing}; it has {sorted(table)}")
    if len(table[keys[0]]) == 0:
        raise ConfigurationError(f"sweep file {path!r} holds no samples")
    return table


def _common_axis(table, key, path) -> np.ndarray:
    axis = np.asarray(table[key], dtype=np.float64)
    if axis.ndim != 2 or not np.array_equal(axis, np.broadcast_to(axis[0], axis.shape)):
        raise ConfigurationError(
            f"sweep file {os.fspath(path)!r}: the rows of {key!r} differ; the samples must share one "
            "frequency axis"
        )
    return axis[0]


def load_sweep(path, parameter_names: Sequence[str], outputs: Sequence[str] = ("s11", "s21")) -> dict:
    """Read an S-parameter sweep written by ``common.datasets`` (or any ``common.io.H5Writer`` table).

    Args:
        path: the HDF5 file.
        parameter_names: the parameter columns, in the model's input order.
        outputs: names of the ``K`` spectra learnt; the file needs ``<name>_real`` and ``<name>_imag``
            columns (N, F) of a complex one (an S-parameter), or a column ``<name>`` (N, F) of a real one
            (e.g. ``total_efficiency``: its imaginary part is then 0).

    Returns:
        dict: ``parameters`` (N, P) float64 tensor, ``s`` (N, F, K) complex128 tensor, ``frequencies`` (F,)
        float64 tensor (Hz), ``sample_id`` (N,) int64 tensor (``arange(N)`` if the file has none).

    Raises:
        FileNotFoundError, KeyError (missing column, named), ValueError (rows with different frequency axes).
    """
    parameter_names, outputs = list(parameter_names), list(outputs)
    table = sweep_columns(path, parameter_names + ["frequencies"])
    missing = [
        name for name in outputs if not ({f"{name}_real", f"{name}_imag"} <= set(table) or name in table)]
    if missing:
        raise UnknownNameError(
            f"sweep file {os.fspath(path)!r} has neither <name>_real and <name>_imag nor <name> columns for "
            f"{missing}; it has {sorted(table)}"
        )
    frequencies = _common_axis(table, "frequencies", path)
    parameters = np.stack(
        [np.asarray(table[name], dtype=np.float64).reshape(-1) for name in parameter_names], 1
    )
    s = np.stack(
        [
            np.asarray(table[f"{name}_real"]) + 1j * np.asarray(table[f"{name}_imag"])
            if f"{name}_real" in table
            else np.asarray(table[name]) + 0j
            for name in outputs
        ],
        -1,
    )
    sample_id = table.get("sample_id", np.arange(len(parameters)))
    return {
        "parameters": torch.as_tensor(parameters),
        "s": torch.as_tensor(s, dtype=torch.complex128),
        "frequencies": torch.as_tensor(frequencies),
        "sample_id": torch.as_tensor(np.asarray(sample_id)),
    }


def _frequency_reference(reference: str | None, parameter_names: tuple, conditioning: str):
    """The frequency-scale function named ``reference`` and the parameter column of each of its arguments."""
    if reference is None:
        return None, {}, 0
    import inspect

    from common.datasets.recipe import resolve_function

    if conditioning != "frequency":
        raise ConfigurationError("SParameterSurrogate: frequency_reference needs conditioning='frequency'")
    function = resolve_function(reference)
    arguments = [
        name
        for name, argument in inspect.signature(function).parameters.items()
        if argument.default is inspect.Parameter.empty
        and argument.kind in (argument.POSITIONAL_OR_KEYWORD, argument.KEYWORD_ONLY)
    ]
    missing = [name for name in arguments if name not in parameter_names]
    if missing:
        raise ConfigurationError(
            f"SParameterSurrogate: frequency_reference {reference!r} needs the parameters {missing}, "
            f"which are not among the model's inputs {parameter_names}"
        )
    columns = {name: parameter_names.index(name) for name in arguments}
    try:  # the number of scales it returns, from one call on unit values
        probe = function(**{name: torch.ones(1, dtype=torch.float64) for name in columns})
        count = torch.as_tensor(probe).reshape(1, -1).shape[1]
    except Exception as error:
        raise ConfigurationError(
            f"SParameterSurrogate: frequency_reference {reference!r} failed on unit inputs ({error}); it "
            "must map (B,) parameter columns to (B,) or (B, M) frequencies (Hz)"
        ) from error
    return function, columns, count


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
        frequency_features: ``k`` adds multi-scale Fourier features of the scaled frequency ``u``,
            ``sin(2^j pi u), cos(2^j pi u)`` for ``j < k``, to the network's input (the "multi-frequency"
            conditioning: sharp resonances need more than a linear frequency input); ``0``: ``u`` only.
        conditioning: ``"frequency"`` (the above, one network evaluated at every frequency) or
            ``"none"``: a plain MLP from the parameters to all ``F K`` outputs at once (the baseline).
        frequency_reference: ``"package.module:function"`` giving each design's physical frequency scales
            (Hz, ``(B,)`` or ``(B, M)``) from the parameter columns it names as arguments (e.g.
            ``"mindelec.antennas:cavity_resonance"``, the patch's transmission-line resonance, or
            ``"mindelec.antennas:cavity_modes"``, its first cavity modes); the network then also sees
            ``f / f_ref - 1`` of each scale and its Fourier features, frequency axes on which
            the resonances of different designs line up (``"frequency"`` conditioning only; stored by
            name, so a saved model reloads it).

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
        frequency_features: int = 0,
        conditioning: str = "frequency",
        frequency_reference: str | None = None,
    ):
        super().__init__()
        if conditioning not in ("frequency", "none") or not (
            isinstance(frequency_features, int) and frequency_features >= 0
        ):
            raise ConfigurationError(
                "SParameterSurrogate: conditioning must be 'frequency' or 'none' and frequency_features a "
                f"non-negative integer, got {conditioning!r}, {frequency_features!r}"
            )
        self.parameter_names, self.outputs = tuple(parameter_names), tuple(outputs)
        if not self.parameter_names or not self.outputs:
            raise ConfigurationError("SParameterSurrogate: parameter_names and outputs must not be empty")
        self.reference, self.reference_columns, self.reference_count = _frequency_reference(
            frequency_reference, self.parameter_names, conditioning
        )
        frequencies = torch.as_tensor(frequencies, dtype=torch.float64).reshape(-1)
        if len(frequencies) > 1 and not bool((frequencies.diff() > 0).all()):
            raise ConfigurationError("SParameterSurrogate: frequencies must be strictly increasing (Hz)")
        self.options = {
            "hidden_features": hidden_features,
            "hidden_layers": hidden_layers,
            "activation": activation,
            "frequency_features": frequency_features,
            "conditioning": conditioning,
            "frequency_reference": frequency_reference,
        }
        parameters, outputs_count = len(self.parameter_names), len(self.outputs)
        self.register_buffer("frequencies", frequencies)
        span = (frequencies[-1] - frequencies[0]).clamp(min=1.0)
        scaled = ((frequencies - frequencies[0]) / span * 2 - 1).float()
        octaves = (2.0 ** torch.arange(frequency_features, dtype=torch.float32)) * math.pi * scaled[:, None]
        # (F, 1 + 2 k): the frequency inputs of the network
        self.register_buffer(
            "scaled_frequencies", torch.cat([scaled[:, None], octaves.sin(), octaves.cos()], 1)
        )
        if conditioning == "frequency":
            width = parameters + self.scaled_frequencies.shape[1] * (1 + self.reference_count)
            self.network = MLP(width, 2 * outputs_count, hidden_features, hidden_layers, activation)
        else:
            self.network = MLP(
                parameters, 2 * outputs_count * len(frequencies), hidden_features, hidden_layers, activation
            )
        self.register_buffer("input_shift", torch.zeros(parameters))
        self.register_buffer("input_scale", torch.ones(parameters))
        self.register_buffer("output_shift", torch.zeros(outputs_count, 2))  # one per S-parameter and part,
        self.register_buffer("output_scale", torch.ones(outputs_count, 2))  # shared by all frequencies

    def check_frequencies(self, frequencies, source: str = "dataset") -> None:
        """Raise ``ValueError`` unless ``frequencies`` (Hz) is the model's axis (to 1e-9 relative)."""
        frequencies = torch.as_tensor(frequencies, dtype=torch.float64).reshape(-1).cpu()
        mine = self.frequencies.cpu()
        if frequencies.shape != mine.shape or not torch.allclose(frequencies, mine, rtol=1e-9, atol=0.0):
            raise ConfigurationError(
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
            raise ConfigurationError(
                f"encode_targets: s must have shape (N, {expected[0]}, {expected[1]}) (frequencies, "
                f"{self.outputs}), got {tuple(s.shape)}"
            )
        features = torch.view_as_real(s.to(torch.complex128)).to(self.output_shift)
        return (features - self.output_shift) / self.output_scale

    def forward(self, parameters: torch.Tensor) -> torch.Tensor:
        if parameters.dim() != 2 or parameters.shape[1] != len(self.parameter_names):
            raise ConfigurationError(
                f"SParameterSurrogate expects parameters (B, {len(self.parameter_names)}) "
                f"{self.parameter_names}, got shape {tuple(parameters.shape)}"
            )
        scaled = ((parameters.to(self.input_shift) - self.input_shift) / self.input_scale).to(
            self.scaled_frequencies
        )
        count, frequencies = len(scaled), len(self.scaled_frequencies)
        if self.options["conditioning"] == "none":
            return self.network(scaled).reshape(count, frequencies, len(self.outputs), 2)
        features = [
            scaled[:, None, :].expand(-1, frequencies, -1),
            self.scaled_frequencies[None].expand(count, -1, -1),
        ]
        if self.reference is not None:
            features.append(self._reference_features(parameters))
        return self.network(torch.cat(features, -1)).reshape(count, frequencies, len(self.outputs), 2)

    def _reference_features(self, parameters: torch.Tensor) -> torch.Tensor:
        """``(B, F, M (1 + 2 k))``: ``f / f_ref - 1`` of every design, frequency and scale, with its Fourier
        features."""
        columns = {
            name: parameters[:, index].to(torch.float64) for name, index in self.reference_columns.items()
        }
        reference = torch.as_tensor(self.reference(**columns), dtype=torch.float64).reshape(
            len(parameters), -1
        )
        if reference.shape[1] != self.reference_count or not bool(
            (torch.isfinite(reference) & (reference > 0)).all()
        ):
            raise ConfigurationError(
                f"SParameterSurrogate: {self.options['frequency_reference']} gave {reference.shape[1]} "
                f"frequency scales per design (the model was built for {self.reference_count}), or a "
                "non-positive or non-finite one"
            )
        # (B, F, M): the detuning from each of the M scales
        detuning = (self.frequencies[None, :, None].to(reference) / reference[:, None, :] - 1).to(
            self.scaled_frequencies
        )
        octaves = (self.scaled_frequencies.shape[1] - 1) // 2
        angles = detuning[..., None] * math.pi * 2.0 ** torch.arange(octaves).to(detuning)
        return torch.cat([detuning[..., None], angles.sin(), angles.cos()], -1).flatten(2)

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
        **fit_options: passed to :func:`fit` (``epochs``, ``learning_rate``, ``validation_fraction``,
            ``seed``, ``checkpoint``, ``progress``, ``context``, ...).

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
            raise ConfigurationError(
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
