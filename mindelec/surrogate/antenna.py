"""The antenna surrogate workflow: a stored held-out split, an ensemble of S11 surrogates, held-out scores,
inverse design, and a geometry autoencoder (:mod:`mindelec.surrogate`).

* :func:`design_split` - which designs train, which are held out (``test``: inside the training
  ranges) and which are extrapolation (``extrapolation``: above a quantile of one parameter, so outside
  the range any training design covers). Stored as JSON in the run folder and reused on resume.
* :func:`train_ensemble` - ``members`` :class:`SParameterSurrogate` of one configuration trained on
  the training designs only (different seeds), each resumable after a kill (its checkpoint in the run
  folder); :class:`Ensemble` gives the mean prediction and the spread (the uncertainty).
* :func:`evaluate` - relative L2 error of complex S11, mean ``|S11|`` error in dB, resonance-frequency
  error (% of the band centre), and the same for the mean predictor, on designs the models never saw
  (it refuses training designs).
* :func:`inverse_design` - the design whose predicted ``|S11|`` minimum sits at a target frequency;
  :func:`check_patch_design` simulates a proposed patch design by FDTD and scores the prediction.
* :func:`voxel_autoencoder` - a :class:`ConvAutoencoder` over voxel tensors ``(N, C, nx, ny, nz)``
  (the z layers as channels), with its compression ratio and held-out reconstruction error.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import time
from collections.abc import Sequence

try:
    import fcntl
except ImportError:  # no flock (Windows): members are trained in order, one process per folder
    fcntl = None

import torch

from common.errors import ConfigurationError, MissingFileError, UnknownNameError
from mindelec.surrogate.fields import ConvAutoencoder
from mindelec.surrogate.sparameters import SParameterSurrogate, load_sweep
from mindelec.surrogate.training import db, fit, relative_error

__all__ = [
    "design_split",
    "train_ensemble",
    "Ensemble",
    "evaluate",
    "describe_scores",
    "inverse_design",
    "candidate_designs",
    "check_patch_design",
    "voxel_autoencoder",
]

SPLIT_FILE = "split.json"


def design_split(
    sample_ids: Sequence[int],
    parameters: torch.Tensor,
    test_fraction: float = 0.2,
    extrapolation_parameter: int | None = 0,
    extrapolation_quantile: float = 0.9,
    seed: int = 0,
) -> dict[str, list[int]]:
    """Split designs into ``train``, ``test`` (held out, inside the ranges) and ``extrapolation``.

    Args:
        sample_ids: ``(N,)`` the designs' ids (``sample_id`` of the dataset).
        parameters: ``(N, P)``.
        test_fraction: share of the non-extrapolation designs held out.
        extrapolation_parameter: index of the parameter whose top ``1 - extrapolation_quantile`` share of
            designs is set apart (``None``: no extrapolation set).
        seed: of the random test draw.

    Returns:
        ``{"train": [...], "test": [...], "extrapolation": [...]}`` lists of sample ids, disjoint.

    Raises:
        ValueError: for fractions outside ``[0, 1)`` or a split leaving fewer than 2 training designs.
    """
    ids = torch.as_tensor(list(sample_ids), dtype=torch.long)
    if not (0 <= test_fraction < 1 and 0 < extrapolation_quantile <= 1) or len(ids) != len(parameters):
        raise ConfigurationError(
            "design_split: need 0 <= test_fraction < 1, 0 < extrapolation_quantile <= 1 and one id per "
            f"design; got {test_fraction}, {extrapolation_quantile}, {len(ids)} ids for {len(parameters)} "
            "designs"
        )
    outside = torch.zeros(len(ids), dtype=torch.bool)
    if extrapolation_parameter is not None:
        column = parameters[:, extrapolation_parameter].to(torch.float64)
        outside = column > torch.quantile(column, extrapolation_quantile)
    inside = torch.nonzero(~outside).reshape(-1)
    order = inside[torch.randperm(len(inside), generator=torch.Generator().manual_seed(seed))]
    tested = round(test_fraction * len(inside))
    if len(inside) - tested < 2:
        raise ConfigurationError(
            f"design_split: {len(ids)} designs leave {len(inside) - tested} for training; need 2"
        )
    return {
        "train": sorted(ids[order[tested:]].tolist()),
        "test": sorted(ids[order[:tested]].tolist()),
        "extrapolation": sorted(ids[outside].tolist()),
    }


def _stored_split(folder: pathlib.Path, split: dict) -> dict:
    """The split stored in ``folder`` (written now if absent); refuses a different one."""
    path = folder / SPLIT_FILE
    if path.exists():
        stored = json.loads(path.read_text())
        if stored != split:
            raise ConfigurationError(
                f"{path}: the stored split differs from this run's (other data or split options); "
                "use a new run folder"
            )
        return stored
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(split))
    os.replace(temporary, path)
    return split


def _rows(sweep, ids) -> torch.Tensor:
    """Row indices of the sample ids ``ids`` in ``sweep``."""
    position = {int(sample): row for row, sample in enumerate(sweep["sample_id"].tolist())}
    return torch.as_tensor([position[int(sample)] for sample in ids], dtype=torch.long)


class Ensemble:
    """Surrogates trained alike from different seeds: mean prediction and spread.

    Attributes:
        members: the :class:`SParameterSurrogate` models.
        split: the design split they were trained on (``train`` ids only).
    """

    def __init__(self, members: Sequence[SParameterSurrogate], split: dict):
        if not members:
            raise ConfigurationError("Ensemble: needs at least one member")
        self.members, self.split = list(members), split

    @property
    def frequencies(self) -> torch.Tensor:
        """``(F,)`` Hz."""
        return self.members[0].frequencies

    @property
    def outputs(self) -> tuple[str, ...]:
        """The names of the spectra the members learnt (``"s11"`` first)."""
        return self.members[0].outputs

    def predict(self, parameters: torch.Tensor, output: str = "s11") -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, P)`` -> the mean of ``output`` (complex, ``(B, F)``) and the members' standard deviation
        of it ``(B, F)``.

        Raises:
            UnknownNameError: for an output the members did not learn.
        """
        if output not in self.outputs:
            raise UnknownNameError(
                f"Ensemble.predict: no output {output!r}; the members learnt {self.outputs}")
        column = self.outputs.index(output)
        with torch.no_grad():
            predictions = torch.stack([member.predict(parameters)[..., column] for member in self.members])
        spread = predictions.std(0) if len(self.members) > 1 else torch.zeros(predictions.shape[1:])
        return predictions.mean(0), spread.abs()

    @classmethod
    def load(cls, folder) -> Ensemble:
        """The ensemble :func:`train_ensemble` saved in ``folder``."""
        folder = pathlib.Path(folder)
        paths = sorted(folder.glob("member_*.model.pt"))
        if not paths:
            raise MissingFileError(f"{folder}: no trained member (member_*.model.pt)")
        split = json.loads((folder / SPLIT_FILE).read_text())
        return cls([SParameterSurrogate.load(path) for path in paths], split)


def train_ensemble(
    path,
    parameter_names: Sequence[str],
    folder,
    members: int = 3,
    model_options: dict | None = None,
    split_options: dict | None = None,
    train_limit: int | None = None,
    outputs: Sequence[str] = ("s11",),
    **fit_options,
) -> tuple[Ensemble, list]:
    """Train ``members`` surrogates of complex S11 (and other spectra) on the training designs of a sweep,
    resumably.

    Args:
        path: the HDF5 sweep (``s11_real``, ``s11_imag``, ``frequencies`` and the parameter columns).
        parameter_names: the model inputs, in order.
        folder: the run folder: ``split.json`` (the design split), ``member_<k>.pt`` (each member's
            :func:`fit` checkpoint, resumed after a kill) and ``member_<k>.model.pt`` (the trained model).
            Processes started on the same folder share the members: each trains the members no other
            process holds (``member_<k>.lock``, released when its holder ends or is killed), then waits
            for the others' and loads them, so two processes on two cores train an ensemble in about half
            the time and return the same ensemble.
        members: ensemble size; member ``k`` uses seed ``k`` (initial weights, validation split, shuffling).
        model_options: :class:`SParameterSurrogate` options (``frequency_features``, ``conditioning``...).
        split_options: :func:`design_split` options.
        train_limit: train on the first ``train_limit`` training designs only (a learning curve at a
            fixed held-out set); the returned ensemble's ``split["train"]`` lists those.
        outputs: the spectra learnt, ``"s11"`` first (:func:`~mindelec.surrogate.load_sweep`: e.g.
            ``("s11", "total_efficiency")``, a real column, learnt by the same network).
        **fit_options: :func:`fit` options (``epochs``, ``learning_rate``, ``progress``...).

    Returns:
        ``(ensemble, histories)``.

    Raises:
        ValueError: if ``folder`` holds the split of other data.
    """
    outputs = tuple(outputs)
    if not outputs or outputs[0] != "s11":
        raise ConfigurationError(f"train_ensemble: outputs must start with 's11', got {outputs}")
    sweep = load_sweep(path, parameter_names, outputs)
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    split = _stored_split(
        folder, design_split(sweep["sample_id"], sweep["parameters"], **(split_options or {}))
    )
    if train_limit is not None:
        if not 2 <= train_limit <= len(split["train"]):
            raise ConfigurationError(
                f"train_ensemble: train_limit must be in [2, {len(split['train'])}], got {train_limit}"
            )
        split = {**split, "train": split["train"][:train_limit]}
    rows = _rows(sweep, split["train"])
    parameters, s = sweep["parameters"][rows], sweep["s"][rows]

    def train(member):
        torch.manual_seed(member)
        model = SParameterSurrogate(parameter_names, sweep["frequencies"], outputs, **(model_options or {}))
        model.set_normalization(parameters, s)
        history = fit(  # a member another process finished resumes from its final checkpoint at once
            model,
            parameters.to(model.input_shift),
            model.encode_targets(s),
            seed=member,
            checkpoint=folder / f"member_{member}.pt",
            **fit_options,
        )
        model.save(folder / f"member_{member}.model.pt")
        return model, history

    trained, held_elsewhere = {}, []
    for member in range(members):
        with _member_lock(folder / f"member_{member}.lock", wait=False) as held:
            if held:
                trained[member] = train(member)
            else:
                held_elsewhere.append(member)
    for member in held_elsewhere:
        with _member_lock(folder / f"member_{member}.lock", wait=True):
            trained[member] = train(member)
    models, histories = zip(*(trained[member] for member in range(members)))
    return Ensemble(models, split), list(histories)


@contextlib.contextmanager
def _member_lock(path: pathlib.Path, wait: bool):
    """Hold the exclusive lock ``path`` (``fcntl.flock``: the system releases it when the holding process
    ends, also by SIGKILL). Yields ``True`` once held; ``False`` at once when another process holds it
    and ``wait`` is false."""
    if fcntl is None:
        yield True
        return
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def evaluate(ensemble: Ensemble, path, subset: str = "test", dip_level: float = -10.0) -> dict[str, float]:
    """Scores of ``ensemble`` on the designs of ``subset`` of its split, read from the sweep at ``path``.

    Args:
        ensemble: the trained :class:`Ensemble` (its split names the designs).
        path: the HDF5 sweep.
        subset: ``"test"`` or ``"extrapolation"``.
        dip_level: the level (dB) a true ``|S11|`` dip must go under to count in ``dip_error``.

    Returns:
        ``relative_l2`` (mean over designs of ``||S_pred - S|| / ||S||`` over the band, complex S11),
        ``db_error`` (mean ``|S11|`` error, dB), ``resonance_error`` (mean ``|f_res,pred - f_res|`` / band
        centre, %; ``f_res`` the frequency of the lowest ``|S11|``, which jumps between dips of nearly equal
        depth, so a few designs can dominate the mean: ``resonance_error_median`` is its median),
        ``dip_error`` (each true dip deeper than ``dip_level`` dB, the usual -10 dB matching criterion, from
        :func:`~mindelec.antennas.dip_frequencies`, against the nearest predicted dip of any depth or the
        predicted lowest point: the mean distance over all those dips, % of the band centre; it follows
        every resonance and does not jump with the dips' depth order; ``dips``: how many),
        ``uncertainty`` (mean ensemble spread of S11 / mean ``|S11|``), the same scores for the mean
        predictor (the mean training S11: ``mean_*``), ``designs`` (count) and ``dip_level``; for every
        other (real) output ``name`` the ensemble learnt (e.g. ``total_efficiency``): ``name_error``, the
        mean absolute error over the band, ``name_error_at_resonance``, at each design's true ``f_res``
        (interpolated), and ``mean_name_error_at_resonance`` for the mean predictor.

    Raises:
        ValueError: if ``subset`` is ``"train"``, empty, or shares a design with the training set.
    """
    from mindelec.antennas import dip_frequencies, resonance_frequency

    split = ensemble.split
    ids, train = split.get(subset, []), set(split["train"])
    if subset == "train" or not ids or train.intersection(ids):
        raise ConfigurationError(
            f"evaluate: subset {subset!r} must be a non-empty held-out set of the split "
            "(never training designs)"
        )
    names = ensemble.members[0].parameter_names
    sweep = load_sweep(path, names, ("s11",))
    truth = sweep["s"][_rows(sweep, ids), :, 0]
    prediction, spread = ensemble.predict(sweep["parameters"][_rows(sweep, ids)])
    mean = sweep["s"][_rows(sweep, split["train"]), :, 0].mean(0).expand_as(truth)
    frequencies = sweep["frequencies"]
    centre = float(frequencies[0] + frequencies[-1]) / 2
    resonance = resonance_frequency(frequencies, db(truth))
    true_dips = dip_frequencies(frequencies, db(truth), dip_level)

    def scores(guess):
        lowest = resonance_frequency(frequencies, db(guess))
        shift = (lowest - resonance).abs() / centre * 100
        dip_shifts = [  # candidates: every predicted local minimum and the predicted lowest point
            (dips[:, None] - torch.cat([found, lowest[row : row + 1]])).abs().min(1).values
            for row, (dips, found) in enumerate(
                zip(true_dips, dip_frequencies(frequencies, db(guess), below=float("inf")))
            )
            if len(dips)
        ]
        dip_shifts = torch.cat(dip_shifts) / centre * 100 if dip_shifts else torch.zeros(0)
        return {
            "relative_l2": float(relative_error(guess, truth).mean()),
            "db_error": float((db(guess) - db(truth)).abs().mean()),
            "resonance_error": float(shift.mean()),
            "resonance_error_median": float(shift.median()),
            "dip_error": float(dip_shifts.mean()) if len(dip_shifts) else float("nan"),
        }

    result = scores(prediction)
    result.update({f"mean_{key}": value for key, value in scores(mean).items()})
    rows = _rows(sweep, ids)
    for name in ensemble.outputs[1:]:
        values = load_sweep(path, names, (name,))["s"][:, :, 0].real
        true, guess = values[rows], ensemble.predict(sweep["parameters"][rows], name)[0].real
        baseline = values[_rows(sweep, split["train"])].mean(0).expand_as(true)
        at = [_interpolate(frequencies, resonance, table) for table in (true, guess, baseline)]
        result[f"{name}_error"] = float((guess - true).abs().mean())
        result[f"{name}_error_at_resonance"] = float((at[1] - at[0]).abs().mean())
        result[f"mean_{name}_error_at_resonance"] = float((at[2] - at[0]).abs().mean())
    result.update(
        uncertainty=float(spread.mean() / truth.abs().mean()),
        designs=len(ids),
        dips=sum(len(dips) for dips in true_dips),
        dip_level=dip_level,
    )
    return result


def _interpolate(frequencies: torch.Tensor, at: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``values`` ``(B, F)`` on ``frequencies`` ``(F,)``, linearly interpolated to one frequency per row
    ``at`` ``(B,)``."""
    step = frequencies[1] - frequencies[0]
    position = ((at - frequencies[0]) / step).clamp(0, len(frequencies) - 1.000001)
    low = position.floor().long()
    weight = (position - low).to(values)
    rows = torch.arange(len(values))
    return values[rows, low] * (1 - weight) + values[rows, low + 1] * weight


def describe_scores(scores: dict) -> str:
    """One line of :func:`evaluate`'s scores, each next to the mean predictor's."""
    return (
        f"{scores['designs']} designs: relative L2 {scores['relative_l2']:.4f} (mean predictor "
        f"{scores['mean_relative_l2']:.3f}), |S11| {scores['db_error']:.3f} dB "
        f"({scores['mean_db_error']:.2f}), "
        f"resonance {scores['resonance_error']:.2f} % of the band centre (median "
        f"{scores['resonance_error_median']:.2f} %; mean predictor {scores['mean_resonance_error']:.2f} %), "
        f"{scores['dips']} dips below {scores['dip_level']:g} dB {scores['dip_error']:.2f} % "
        f"({scores['mean_dip_error']:.2f} %), "
        f"ensemble spread {scores['uncertainty']:.3f}"
    )


def candidate_designs(
    names: Sequence[str],
    bounds: dict[str, tuple[float, float]],
    candidates: int,
    seed: int = 0,
    steps: dict[str, float | tuple[float, float]] | None = None,
    caller: str = "candidate_designs",
) -> torch.Tensor:
    """``(candidates, P)`` scrambled-Sobol designs inside ``bounds`` (columns in the order of ``names``),
    the parameters of ``steps`` on their lattice inside their bounds (see :func:`inverse_design`): a step
    ``s`` puts a parameter on multiples of ``s``, a pair ``(s, origin)`` on ``origin + k s``.

    Raises:
        ValueError: (naming ``caller``) for a step that is not positive, of no parameter in ``names``, or
            that leaves no lattice point inside its bounds.
    """
    names = list(names)
    low = torch.tensor([bounds[name][0] for name in names], dtype=torch.float64)
    high = torch.tensor([bounds[name][1] for name in names], dtype=torch.float64)
    draws = torch.quasirandom.SobolEngine(len(names), scramble=True, seed=seed).draw(
        candidates, dtype=torch.float64
    )
    designs = low + draws * (high - low)
    for name, lattice in (steps or {}).items():
        grid, origin = lattice if isinstance(lattice, (tuple, list)) else (lattice, 0.0)
        low_bound, high_bound = (v - origin for v in bounds.get(name, (origin, origin - 1.0)))
        lowest, highest = (1, 0)  # no lattice point, unless the step is positive
        if grid > 0:  # the points inside the bounds, forgiving the rounding of a bound on the lattice
            lowest, highest = math.ceil(low_bound / grid - 1e-9), math.floor(high_bound / grid + 1e-9)
        if name not in names or lowest > highest:
            raise ConfigurationError(
                f"{caller}: steps[{name!r}] = {lattice} must have a step > 0 for one of {names} with a "
                f"lattice point inside its bounds {bounds.get(name)}"
            )
        column = names.index(name)
        points = ((designs[:, column] - origin) / grid).round().clamp(lowest, highest)
        designs[:, column] = origin + points * grid
    return designs


def inverse_design(
    ensemble: Ensemble,
    target: float,
    bounds: dict[str, tuple[float, float]],
    candidates: int = 4096,
    seed: int = 0,
    steps: dict[str, float] | None = None,
    uncertainty_weight: float = 100.0,
) -> dict:
    """The design whose predicted ``|S11|`` dip is closest to ``target`` (Hz), deepest and surest among ties.

    A Sobol search of ``candidates`` designs inside ``bounds`` (one ``(low, high)`` per parameter name);
    the score is the distance of the predicted resonance from the target in frequency steps, plus a
    tenth of the predicted ``|S11|`` in dB at the target (deeper dips win among designs on the target),
    plus ``uncertainty_weight`` times the ensemble's relative spread (``||spread|| / ||S11||`` over the
    band; on held-out patch designs it follows the true relative error closely): by default a spread of
    0.01 weighs as much as one frequency step off target, so the search avoids designs the ensemble
    is unsure of (0 ignores the spread).
    ``steps`` puts parameters the simulator draws on a grid (a patch's inset snaps to whole cells:
    ``{"inset_used": 1 / n_length}``) on multiples of their step inside the bounds (or on
    ``origin + k step`` for a pair ``(step, origin)``), so that the winner is a design the simulator
    draws as it is.

    Returns:
        ``parameters`` (dict), ``resonance`` (predicted, Hz), ``s11`` ((F,) predicted complex S11),
        ``spread`` ((F,) ensemble spread), ``relative_spread`` (its norm over the prediction's).

    Raises:
        ValueError: for bounds that do not name every parameter, a target outside the band, or a step
            that is not positive or leaves no multiple inside its bounds.
    """
    from mindelec.antennas import resonance_frequency

    names = ensemble.members[0].parameter_names
    frequencies = ensemble.frequencies
    if set(bounds) != set(names) or not float(frequencies[0]) <= target <= float(frequencies[-1]):
        raise ConfigurationError(
            f"inverse_design: bounds must name exactly {names} and the target {target} Hz lie in the band "
            f"{float(frequencies[0]):.4g} .. {float(frequencies[-1]):.4g} Hz"
        )
    designs = candidate_designs(names, bounds, candidates, seed, steps, "inverse_design")
    prediction, spread = ensemble.predict(designs)
    levels = db(prediction)
    step = float(frequencies[1] - frequencies[0])
    at_target = int(torch.argmin((frequencies - target).abs()))
    resonance = resonance_frequency(frequencies, levels)
    relative_spread = spread.norm(dim=1) / prediction.abs().norm(dim=1)
    score = (resonance - target).abs() / step + 0.1 * levels[:, at_target]
    score = score + uncertainty_weight * relative_spread
    best = int(torch.argmin(score))
    return {
        "parameters": {name: float(value) for name, value in zip(names, designs[best])},
        "resonance": float(resonance[best]),
        "s11": prediction[best],
        "spread": spread[best],
        "relative_spread": float(relative_spread[best]),
    }


def check_patch_design(ensemble: Ensemble, parameters: dict, generator_options: dict | None = None) -> dict:
    """Simulate a patch antenna the ensemble proposed (e.g. :func:`inverse_design`) and score the prediction.

    The FDTD draws the inset in whole cells, so the design is simulated first
    (:func:`mindelec.antennas.patch_antenna_sample`) and the ensemble then predicts S11 for the design as
    simulated: its ``inset_used`` column (or ``inset``, if the ensemble learned from that) is the inset
    the FDTD drew.

    Args:
        ensemble: surrogates of a patch-antenna sweep; their parameter names are those of the
            generator (``length``, ``width``, ``inset`` or ``inset_used``, ``permittivity``, ``height``).
        parameters: the design, by the ensemble's parameter names (SI units).
        generator_options: the recipe's ``[generator.options]`` (:class:`mindelec.antennas.PatchSetup`).

    Returns:
        ``design`` (the generator's parameters as simulated), ``simulated`` (the sample's dict:
        ``s11_db``, ``resonance``...), ``predicted_s11`` ((F,) complex, for the design as simulated),
        ``predicted_resonance`` (Hz), ``relative_l2`` (of complex S11, prediction against FDTD) and
        ``fdtd_seconds``.

    Raises:
        KeyError: if ``parameters`` lacks one of the ensemble's parameter names.
        ValueError: if the FDTD's frequencies (set by ``generator_options``) are not the ensemble's.
    """
    from mindelec.antennas import PatchSetup, patch_antenna_sample, resonance_frequency

    names = ensemble.members[0].parameter_names
    missing = [name for name in names if name not in parameters]
    if missing:
        raise UnknownNameError(f"check_patch_design: the design lacks {missing}; the ensemble takes {names}")
    frequencies = PatchSetup(**(generator_options or {})).frequencies  # refused before the FDTD runs
    if frequencies.shape != ensemble.frequencies.shape or not torch.allclose(
        frequencies, ensemble.frequencies.to(frequencies), rtol=1e-9
    ):
        raise ConfigurationError(
            f"check_patch_design: the FDTD's {len(frequencies)} frequencies ({float(frequencies[0]):.4g} .. "
            f"{float(frequencies[-1]):.4g} Hz) are not the ensemble's; pass the recipe's generator options"
        )
    design = {("inset" if name == "inset_used" else name): float(parameters[name]) for name in names}
    started = time.perf_counter()
    simulated = patch_antenna_sample(design, 0, **(generator_options or {}))
    seconds = time.perf_counter() - started
    design["inset"] = float(simulated["inset_used"])
    simulated_inputs = [design["inset" if name == "inset_used" else name] for name in names]
    prediction = ensemble.predict(torch.tensor([simulated_inputs], dtype=torch.float64))[0][0]
    truth = torch.complex(torch.as_tensor(simulated["s11_real"]), torch.as_tensor(simulated["s11_imag"]))
    return {
        "design": design,
        "simulated": simulated,
        "predicted_s11": prediction,
        "predicted_resonance": float(resonance_frequency(ensemble.frequencies, db(prediction)[None])[0]),
        "relative_l2": float(relative_error(prediction[None], truth[None])[0]),
        "fdtd_seconds": seconds,
    }


def _layers(voxels: torch.Tensor) -> torch.Tensor:
    """``(N, C, nx, ny, nz)`` -> ``(N, C nz, nx, ny)``: the z layers of every channel as 2D channels."""
    if voxels.dim() != 5:
        raise ConfigurationError(
            f"voxel_autoencoder: voxels must be (N, C, nx, ny, nz), got {tuple(voxels.shape)}")
    count, channels, nx, ny, nz = voxels.shape
    return voxels.permute(0, 1, 4, 2, 3).reshape(count, channels * nz, nx, ny)


def voxel_autoencoder(
    voxels: torch.Tensor,
    held_out: torch.Tensor,
    latent_channels: int = 4,
    levels: int = 3,
    seed: int = 0,
    **fit_options,
) -> tuple[ConvAutoencoder, dict[str, float]]:
    """Train a :class:`ConvAutoencoder` on voxel tensors and score it on voxels it never saw.

    Args:
        voxels: ``(N, C, nx, ny, nz)`` training geometries (e.g. :func:`mindelec.antennas.patch_voxels`);
            ``nx`` and ``ny`` multiples of ``2^levels``.
        held_out: ``(M, C, nx, ny, nz)`` geometries for the score.
        latent_channels, levels: of the autoencoder.
        seed: of the initial weights (``torch.manual_seed``) and of :func:`fit`'s split and shuffling.
        **fit_options: :func:`fit` options.

    Returns:
        ``(model, report)``: ``report`` holds ``compression_ratio`` (input values per latent value),
        ``relative_error`` (mean relative L2 reconstruction error of the held-out voxels) and
        ``train_relative_error``. ``model.encode(_layers(v))`` is the latent code.
    """
    train, test = _layers(voxels).float(), _layers(held_out).float()
    torch.manual_seed(seed)
    model = ConvAutoencoder(train.shape[1], latent_channels, levels=levels)
    model.set_normalization(train)
    fit(model, train, train, seed=seed, **fit_options)
    with torch.no_grad():
        report = {
            "compression_ratio": model.compression_ratio,
            "relative_error": float(relative_error(model(test), test).mean()),
            "train_relative_error": float(relative_error(model(train), train).mean()),
        }
    return model, report
