"""The phone's surrogate workflow (:mod:`mindelec.phone`, ``datasets/phone_antenna*.toml``): its model inputs,
a frequency scale of the inverted-F antenna for the surrogate's conditioning, inverse design on the designs
the grid draws, and the FDTD check of a proposed design.

The surrogates are :class:`mindelec.surrogate.antenna.Ensemble` of ``SParameterSurrogate`` learning complex
S11 and the total efficiency (a real spectrum) on one frequency axis, from :data:`INPUTS`: the design
parameters as the grid draws them (``PhoneModel.drawn``, recorded by ``phone_sample`` as ``*_used``). On
1.5 mm cells the arm, a 1 mm strip, is a wire: its length goes to whole cells and its line to a node, and
on one grid (``on_grid``) the ground plane's edge goes to a node, so designs up to a cell apart in arm
length or clearance are the same model, and a surrogate of the parameters as asked would learn a
staircase.

* :func:`ifa_resonance` - ``c / (4 (L + h))``, the quarter-wave resonance of an inverted-F arm of length
  ``L`` at height ``h`` in air (the bent wire from the short to the open end), a frequency scale on which the
  dips of different designs line up (``frequency_reference="mindelec.surrogate.phone:ifa_resonance"``);
* :func:`dual_band_design` - the design whose predicted ``|S11|`` is lowest at two frequencies at once (a
  dual-band tune), surest among near ties;
* :func:`drawn_steps` - the lattice on which a recipe's grid draws each input;
* :func:`phone_inverse_design` - :func:`mindelec.surrogate.antenna.inverse_design` (one target) or
  :func:`dual_band_design` (two) over the recipe's ranges with the inputs on that lattice;
* :func:`check_phone_design` - one FDTD run of a proposed design (:func:`mindelec.phone.phone_sample`) against
  the ensemble's prediction for it.
"""

from __future__ import annotations

import time

import torch

from common.errors import ConfigurationError, UnknownNameError
from common.units import SPEED_OF_LIGHT
from mindelec import cad_phone
from mindelec.surrogate.antenna import Ensemble, candidate_designs, inverse_design
from mindelec.surrogate.training import db, relative_error

__all__ = [
    "INPUTS", "DRAWN", "OUTPUTS", "MODEL_OPTIONS", "FIT_OPTIONS", "ifa_resonance", "phone_bounds",
    "drawn_steps", "dual_band_design", "phone_inverse_design", "check_phone_design",
]

#: the model inputs (mm), in order: the design parameters as the grid draws them
INPUTS = (
    "antenna_length_used", "antenna_height_used", "feed_to_short_used", "clearance_used", "frame_gap_used")
#: the design parameter each input draws
DRAWN = {
    "antenna_length_used": "antenna_length",
    "antenna_height_used": "antenna_height",
    "feed_to_short_used": "feed_to_short",
    "clearance_used": "clearance",
    "frame_gap_used": "frame_gap",
}
#: the spectra learnt, on the dataset's one frequency axis
OUTPUTS = ("s11", "total_efficiency")
#: ``SParameterSurrogate`` options: Fourier features of the frequency and of its ratio to the arm's resonance,
#: six hidden layers of 64
MODEL_OPTIONS = {
    "frequency_features": 4,
    "frequency_reference": "mindelec.surrogate.phone:ifa_resonance",
    "hidden_features": 64,
    "hidden_layers": 6,
}
#: ``fit`` options of each member: every training design trains it (no early-stopping split: the members'
#: seeds already differ, and a fifth of a few hundred designs is data the model misses), for a fixed
#: cosine schedule long enough to fit them. Chosen on the 410 training designs of the 512-design recipe
#: only (an inner split of 328 / 82, ensembles of 3; S11 relative L2): 0.040 with four layers, the 20 %
#: split and 3000 epochs; 0.033 without the split; 0.025 with 6000 epochs; 0.022 with six layers too
#: (four layers and 12000 epochs: 0.0215, at 1.5 times the training time; with the split, six layers
#: gave 0.039, and 128 wide, 6 Fourier octaves, 6 members or a learning rate of 1e-3 no better)
FIT_OPTIONS = {"epochs": 6000, "validation_fraction": 0.0}


def ifa_resonance(antenna_length_used, antenna_height_used) -> torch.Tensor:
    """Quarter-wave resonance (Hz) of an inverted-F arm: ``c / (4 (L + h))``, ``L`` and ``h`` in mm.

    Args:
        antenna_length_used, antenna_height_used: ``(B,)`` arm length and height above the ground (mm).

    Returns:
        ``(B,)`` float64, Hz.
    """
    length = torch.as_tensor(antenna_length_used, dtype=torch.float64)
    height = torch.as_tensor(antenna_height_used, dtype=torch.float64)
    return SPEED_OF_LIGHT / (4e-3 * (length + height))


def phone_bounds(recipe) -> dict[str, tuple[float, float]]:
    """``{input: (low, high)}`` (mm) of :data:`INPUTS` from a phone recipe's ``[parameters]`` ranges.

    Raises:
        UnknownNameError: for a recipe that does not sweep every design parameter of :data:`INPUTS`.
    """
    bounds = {}
    for name in INPUTS:
        parameter = DRAWN.get(name, name)
        if parameter not in recipe.parameters:
            raise UnknownNameError(
                f"phone_bounds: recipe {recipe.name!r} does not sweep {parameter!r}; it sweeps "
                f"{sorted(recipe.parameters)}")
        bounds[name] = (recipe.parameters[parameter].low, recipe.parameters[parameter].high)
    return bounds


def drawn_steps(generator_options: dict) -> dict[str, float | tuple[float, float]]:
    """``{input: lattice}`` (mm) of the :data:`INPUTS` that the grid of ``phone_sample``'s options draws
    on a lattice (a step, for its multiples, or ``(step, origin)`` for ``origin + k step``, as
    :func:`~mindelec.surrogate.antenna.candidate_designs` takes): the arm's height and the feed-to-short
    distance on whole cells; where the arm is a wire (cells no narrower than its strip) or without
    conformal cells (``subpixel``), its length on whole cells; without conformal cells, the frame gap on
    whole cells; with ``on_grid``, the clearance on the board's end less whole cells (the ground plane's
    edge on a node; without it, the phone moves to put that edge on a node and the clearance is drawn as
    asked). The others are drawn as asked."""
    cell = 1e3 * generator_options.get("cell", 1.5e-3)
    conformal = generator_options.get("subpixel", False) is not False
    wire = cad_phone.STRIP_WIDTH <= cell * (1 + 1e-6)
    steps: dict[str, float | tuple[float, float]] = {"antenna_height_used": cell, "feed_to_short_used": cell}
    if wire or not conformal:
        steps["antenna_length_used"] = cell
    if generator_options.get("on_grid", False):
        steps["clearance_used"] = (cell, cad_phone.PhoneDesign().board[1] / 2)  # the board's end
    if not conformal:
        steps["frame_gap_used"] = cell
    return steps


def dual_band_design(
    ensemble: Ensemble,
    targets: tuple[float, float],
    bounds: dict[str, tuple[float, float]],
    candidates: int = 4096,
    seed: int = 0,
    steps: dict[str, float] | None = None,
    uncertainty_weight: float = 10.0,
) -> dict:
    """The design whose predicted ``|S11|`` is low at both ``targets`` (Hz): a dual-band tune.

    A Sobol search of ``candidates`` designs inside ``bounds`` (``steps``: parameters on multiples of
    their step, as :func:`~mindelec.surrogate.antenna.candidate_designs`); the score is the larger of the
    two predicted ``|S11|`` in dB at the targets (linearly interpolated on the ensemble's axis), plus
    ``uncertainty_weight`` dB times the ensemble's relative spread over the band (by default a spread of
    0.1 costs 1 dB; 0 ignores it).

    Returns:
        ``parameters`` (dict, by the ensemble's inputs), ``targets`` (Hz), ``predicted_db`` ((2,) ``|S11|``
        in dB at the targets), ``s11`` ((F,) predicted complex S11), ``relative_spread``.

    Raises:
        ConfigurationError: for bounds that do not name every input, or targets that are not two
            different frequencies inside the ensemble's band; see ``candidate_designs`` for ``steps``.
    """
    names = ensemble.members[0].parameter_names
    frequencies = ensemble.frequencies
    inside = all(float(frequencies[0]) <= float(f) <= float(frequencies[-1]) for f in targets)
    if set(bounds) != set(names) or len(targets) != 2 or not inside or targets[0] == targets[1]:
        raise ConfigurationError(
            f"dual_band_design: bounds must name exactly {names} and targets be two different frequencies "
            f"in the band {float(frequencies[0]):.4g} .. {float(frequencies[-1]):.4g} Hz, got {targets}")
    designs = candidate_designs(names, bounds, candidates, seed, steps, "dual_band_design")
    prediction, spread = ensemble.predict(designs)
    levels = db(prediction)
    at = torch.tensor([float(f) for f in targets], dtype=torch.float64)
    position = (at - frequencies[0]) / (frequencies[1] - frequencies[0])
    low = position.floor().long().clamp(max=len(frequencies) - 2)
    weight = (position - low).to(levels)
    at_targets = levels[:, low] * (1 - weight) + levels[:, low + 1] * weight  # (candidates, 2)
    relative_spread = spread.norm(dim=1) / prediction.abs().norm(dim=1)
    score = at_targets.max(dim=1).values + uncertainty_weight * relative_spread
    best = int(torch.argmin(score))
    return {
        "parameters": {name: float(value) for name, value in zip(names, designs[best])},
        "targets": tuple(float(f) for f in targets),
        "predicted_db": at_targets[best],
        "s11": prediction[best],
        "relative_spread": float(relative_spread[best]),
    }


def phone_inverse_design(ensemble: Ensemble, target, recipe, candidates: int = 4096, seed: int = 0) -> dict:
    """Inverse design over ``recipe``'s ranges: one ``target`` (Hz), the design whose predicted ``|S11|``
    dip is closest to it (:func:`~mindelec.surrogate.antenna.inverse_design`), or two ``(f1, f2)``, a
    dual-band tune (:func:`dual_band_design`).

    The inputs are searched on the lattice the recipe's grid draws them on (:func:`drawn_steps`), the
    others continuously.

    Returns:
        the dict of ``inverse_design`` or ``dual_band_design`` (``parameters`` by :data:`INPUTS`, mm).
    """
    steps = drawn_steps(recipe.generator.options)
    bounds = phone_bounds(recipe)
    search = {"candidates": candidates, "seed": seed, "steps": steps}
    if isinstance(target, (tuple, list)):
        return dual_band_design(ensemble, tuple(target), bounds, **search)
    return inverse_design(ensemble, target, bounds, **search)


def check_phone_design(ensemble: Ensemble, parameters: dict, generator_options: dict | None = None) -> dict:
    """Simulate a phone design the ensemble proposed and score the prediction for the design as drawn.

    Args:
        ensemble: surrogates of a phone sweep with inputs :data:`INPUTS` and outputs ``("s11",
            "total_efficiency")``.
        parameters: the design by :data:`INPUTS` (mm); a drawn input is simulated as that design parameter.
        generator_options: the recipe's ``[generator] options`` (:func:`mindelec.phone.phone_sample`).

    Returns:
        ``design`` (``PhoneDesign`` fields simulated, mm), ``simulated`` (the sample's dict),
        ``predicted_s11`` and ``predicted_efficiency`` ((F,), for the inputs as drawn),
        ``predicted_resonance`` (Hz), ``relative_l2`` (of complex S11, prediction against FDTD) and
        ``fdtd_seconds`` (CPU seconds of the whole sample: STEP, set-up and run).

    Raises:
        UnknownNameError: for an ensemble with other inputs or without the efficiency output, or a
            design lacking one of :data:`INPUTS`.
        ConfigurationError: if the FDTD's frequencies are not the ensemble's.
    """
    from mindelec.antennas import resonance_frequency
    from mindelec.phone import phone_sample

    names = ensemble.members[0].parameter_names
    missing = [name for name in INPUTS if name not in parameters]
    if names != INPUTS or "total_efficiency" not in ensemble.outputs or missing:
        raise UnknownNameError(
            f"check_phone_design: the ensemble must take {INPUTS} (it takes {names}) and learn "
            f"total_efficiency (it learnt {ensemble.outputs}); the design must give every input (lacks "
            f"{missing})")
    design = {DRAWN.get(name, name): float(parameters[name]) for name in INPUTS}
    started = time.process_time()
    simulated = phone_sample(design, 0, **(generator_options or {}))
    seconds = time.process_time() - started
    frequencies = torch.as_tensor(simulated["frequencies"], dtype=torch.float64)
    if frequencies.shape != ensemble.frequencies.shape or not torch.allclose(
        frequencies, ensemble.frequencies.to(frequencies), rtol=1e-9
    ):
        raise ConfigurationError(
            "check_phone_design: the FDTD's frequencies are not the ensemble's; pass the recipe's options")
    drawn = {**parameters, **{name: float(simulated[name]) for name in DRAWN}}
    inputs = torch.tensor([[drawn[name] for name in INPUTS]], dtype=torch.float64)
    s11 = ensemble.predict(inputs)[0][0]
    efficiency = ensemble.predict(inputs, "total_efficiency")[0][0].real
    truth = torch.complex(torch.as_tensor(simulated["s11_real"]), torch.as_tensor(simulated["s11_imag"]))
    return {
        "design": design,
        "simulated": simulated,
        "predicted_s11": s11,
        "predicted_efficiency": efficiency,
        "predicted_resonance": float(resonance_frequency(ensemble.frequencies, db(s11)[None])[0]),
        "relative_l2": float(relative_error(s11[None], truth[None])[0]),
        "fdtd_seconds": seconds,
    }
