"""The patch-antenna S11 surrogate: held-out accuracy, learning curve, and speed against the 3D FDTD.

Usage::

    .venv/bin/python -m common.datasets generate datasets/patch_antenna.toml --output patch_antenna.h5
    .venv/bin/python benchmarks/antenna_surrogate.py --data patch_antenna.h5 [--run FOLDER]
    .venv/bin/python benchmarks/antenna_surrogate.py --quick     # the small recipe, generated here

On designs the models never saw (``mindelec.surrogate.antenna.evaluate``: the stored split's ``test``
designs, inside the training ranges, and its ``extrapolation`` designs, the longest patches):

* the frequency-conditioned ensemble (Fourier features of the frequency and of ``f / f_ref - 1`` for each
  ``f_ref`` of the patch's first cavity modes, ``mindelec.antennas:cavity_modes``), the same with the
  transmission-line resonance alone (``one_scale``: ``mindelec.antennas:cavity_resonance``) and without
  any ``f_ref`` (``unreferenced``), and the plain parameters -> S11 MLP, each against the mean predictor;
* the learning curve: the conditioned model (one member) on the first 1/8, 1/4 and 1/2 of the training
  designs, and the ensemble's first member (all of them), scored on the same held-out set;
* inverse design (``inverse``): the design the ensemble puts at a 6 and at an 8 GHz dip (4096 Sobol
  candidates, the inset on whole cells), simulated by FDTD (``check_patch_design``);
* speed: the prediction per design (a batch of 1024 designs, one thread) of the ensemble (its spread is
  the uncertainty) and of one member, against one FDTD run of a mid-range design of the data's recipe
  (one thread). The ratios are printed last.

Every run folder is resumable (a killed benchmark started again continues); ``--parts`` runs some of
the parts; two processes on two cores can share a run folder, with different parts or the same ones (an
ensemble's members are then shared between them, see ``train_ensemble``); results are merged into
``<run>/results.json``.
"""

import argparse
import json
import pathlib
import time

import torch

import common.datasets as datasets
from mindelec import antennas
from mindelec.surrogate import load_sweep
from mindelec.surrogate.antenna import (
    Ensemble,
    check_patch_design,
    describe_scores,
    design_split,
    evaluate,
    inverse_design,
    train_ensemble,
)

NAMES = ["length", "width", "inset_used", "permittivity", "height"]
REFERENCE = "mindelec.antennas:cavity_modes"
SUBSETS = ("test", "extrapolation")
CONFIGURATIONS = {
    "conditioned": {"frequency_features": 4, "frequency_reference": REFERENCE},
    "one_scale": {"frequency_features": 4, "frequency_reference": "mindelec.antennas:cavity_resonance"},
    "unreferenced": {"frequency_features": 4},
    "plain": {"conditioning": "none"},
}
PARTS = (*CONFIGURATIONS, "curve", "inverse", "speed")
TARGETS = (6e9, 8e9)


def scores_line(label: str, scores: dict) -> str:
    return f"{label:34s} {describe_scores(scores)}"


def speed(best: Ensemble, data, recipe) -> dict:
    """Seconds per design: one FDTD run of a mid-range design, and the surrogate in a batch of 1024."""
    table = datasets.read_dataset(data)
    design = {
        "length": 13e-3,
        "width": 16e-3,
        "inset": 0.25,
        "permittivity": 3.3,
        "height": 1.1e-3,
    }
    started = time.perf_counter()
    antennas.patch_antenna_sample(design, 0, **recipe.generator.options)
    fdtd_seconds = time.perf_counter() - started
    batch = torch.as_tensor(
        [[float(table[name][row % len(table[name])]) for name in NAMES] for row in range(1024)],
        dtype=torch.float64,
    )
    timings = {}
    for label, model in (("ensemble", best), ("one member", Ensemble(best.members[:1], best.split))):
        model.predict(batch)
        started = time.perf_counter()
        model.predict(batch)
        timings[label] = (time.perf_counter() - started) / len(batch)
    return {
        "fdtd_seconds": fdtd_seconds,
        "ensemble_seconds": timings["ensemble"],
        "one_member_seconds": timings["one member"],
    }


def learning_curve(ensemble, data) -> dict:
    """One conditioned member on the first 1/8, 1/4 and 1/2 of the training designs: scores by size."""
    sweep = load_sweep(data, NAMES, ("s11",))
    total = len(design_split(sweep["sample_id"], sweep["parameters"])["train"])
    curve = {}
    for size in sorted({max(2, total // 8), max(2, total // 4), max(2, total // 2)}):
        curve[str(size)] = scores = evaluate(
            ensemble("conditioned", f"curve_{size}", members=1, train_limit=size), data
        )
        print(scores_line(f"learning curve, {size} training designs", scores), flush=True)
    return curve


def inverse(best: Ensemble, recipe) -> dict:
    """For each target (Hz): the design the ensemble picks, its FDTD resonance and S11 error."""
    bounds = {
        ("inset_used" if name == "inset" else name): (spec.low, spec.high)
        for name, spec in recipe.parameters.items()
        if name in NAMES or name == "inset"
    }
    steps = {"inset_used": 1 / antennas.PatchSetup(**recipe.generator.options).n_length}  # whole cells
    found = {}
    for target in TARGETS:
        proposal = inverse_design(best, target, bounds, candidates=4096, steps=steps)
        check = check_patch_design(best, proposal["parameters"], recipe.generator.options)
        found[f"{target / 1e9:g} GHz"] = entry = {
            "design": check["design"],
            "predicted_resonance": check["predicted_resonance"],
            "fdtd_resonance": float(check["simulated"]["resonance"]),
            "relative_l2": check["relative_l2"],
            "relative_spread": proposal["relative_spread"],
        }
        print(
            f"inverse design for {target / 1e9:g} GHz: FDTD dip at {entry['fdtd_resonance'] / 1e9:.3f} GHz "
            f"(predicted {entry['predicted_resonance'] / 1e9:.3f}), relative L2 of S11 against the "
            f"prediction {entry['relative_l2']:.4f} (ensemble spread {entry['relative_spread']:.4f}); "
            f"design {check['design']}",
            flush=True,
        )
    return found


def report_speed(best: Ensemble, data, recipe, results: dict, save) -> None:
    """The speed part: the first member's learning-curve point at the full training set, and the timings."""
    scores = evaluate(Ensemble(best.members[:1], best.split), data)
    results["learning_curve"][str(len(best.split["train"]))] = scores
    print(scores_line(f"learning curve, {len(best.split['train'])} training designs", scores), flush=True)
    results["speed"] = timing = speed(best, data, recipe)
    save()
    print(
        f"FDTD {timing['fdtd_seconds']:.2f} s per design; surrogate per design in a batch of 1024: ensemble "
        f"of {len(best.members)} {timing['ensemble_seconds'] * 1e6:.0f} us, one member "
        f"{timing['one_member_seconds'] * 1e6:.0f} us"
    )
    print(
        f"speed-up (FDTD / surrogate): ensemble {timing['fdtd_seconds'] / timing['ensemble_seconds']:.3g}, "
        f"one member {timing['fdtd_seconds'] / timing['one_member_seconds']:.3g}"
    )


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="HDF5 dataset of datasets/patch_antenna.toml")
    parser.add_argument("--quick", action="store_true", help="generate and use the small recipe")
    parser.add_argument("--run", default="antenna_surrogate_run", help="run folder (resumable)")
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2000)
    parser.add_argument("--hidden-features", type=int, default=64, help="width of every network")
    parser.add_argument(
        "--parts", nargs="+", default=list(PARTS), choices=PARTS, help="what to run (default: everything)"
    )
    return parser.parse_args()


def main():
    arguments = parse_arguments()
    torch.set_num_threads(1)
    run = pathlib.Path(arguments.run)
    run.mkdir(parents=True, exist_ok=True)
    root = pathlib.Path(__file__).resolve().parent.parent
    recipe = datasets.load_recipe(
        root / "datasets" / ("patch_antenna_small.toml" if arguments.quick else "patch_antenna.toml")
    )
    data = pathlib.Path(arguments.data or run / f"{recipe.name}.h5")
    if arguments.quick and arguments.data is None:
        datasets.generate(recipe, output=data, workers=1, threads=1, progress=False)
    epochs = 300 if arguments.quick else arguments.epochs
    fit = {"epochs": epochs, "progress": not arguments.quick, "threads": 1}
    path = run / "results.json"
    results = {
        "data": str(data),
        "epochs": epochs,
        "hidden_features": arguments.hidden_features,
        "models": {},
        "learning_curve": {},
    }

    def save():
        """Merge into the results file (another process may have written other parts meanwhile)."""
        stored = json.loads(path.read_text()) if path.exists() else {}
        for key in ("models", "learning_curve"):
            results[key] = {**stored.get(key, {}), **results[key]}
        path.write_text(json.dumps({**stored, **results}, indent=2))

    def ensemble(part: str, folder: str | None = None, members: int = arguments.members, **options):
        return train_ensemble(
            data,
            NAMES,
            run / (folder or part),
            members=members,
            model_options={**CONFIGURATIONS[part], "hidden_features": arguments.hidden_features},
            **options,
            **fit,
        )[0]

    for part in [part for part in CONFIGURATIONS if part in arguments.parts]:
        started = time.perf_counter()
        model = ensemble(part)
        entry = {subset: evaluate(model, data, subset) for subset in SUBSETS if model.split[subset]}
        results["models"][part] = {
            **entry,
            "members": arguments.members,
            "training_seconds": time.perf_counter() - started,
        }
        for subset, scores in entry.items():
            print(scores_line(f"{part}, {subset}", scores), flush=True)
        save()

    if "curve" in arguments.parts:
        results["learning_curve"].update(learning_curve(ensemble, data))

    if "inverse" in arguments.parts:
        results["inverse_design"] = inverse(ensemble("conditioned"), recipe)

    save()
    if "speed" in arguments.parts:
        report_speed(ensemble("conditioned"), data, recipe, results, save)


if __name__ == "__main__":
    main()
