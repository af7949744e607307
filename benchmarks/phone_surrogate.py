"""The reference phone's surrogate over its design space: held-out accuracy, speed, and the whole study's cost
against FDTD alone.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/phone_surrogate.py [--run FOLDER] [--limit N]
    PYTHONPATH=. .venv/bin/python benchmarks/phone_surrogate.py --quick     # the small recipe

1. The dataset: ``datasets/phone_antenna.toml`` (``mindelec.phone:phone_sample``: complex S11 and total
   efficiency over 0.5-3.5 GHz of designs swept over arm length and height, feed-to-short distance,
   clearance and frame gap; 1.5 mm cells, NOT converged: these are the figures of a surrogate of the 1.5 mm
   model), generated in the run folder by ``common.datasets.generate`` (resumable: a killed benchmark
   started again continues; ``--limit`` uses the first N designs).
2. An ensemble of ``--members`` ``SParameterSurrogate`` learning S11 and the total efficiency from
   ``mindelec.surrogate.phone.INPUTS`` (the arm height and feed-to-short distance as drawn), conditioned on
   the frequency (Fourier features) and on ``f / f_ref - 1`` for the arm's quarter-wave resonance
   (``mindelec.surrogate.phone:ifa_resonance``), trained on 80 % of the designs.
3. Held out (``mindelec.surrogate.antenna.evaluate`` on the other 20 %): relative L2 of complex S11, the
   resonance error (lowest ``|S11|``; % of each design's own resonance, and of the band centre), the total
   efficiency's error at each design's resonance (points), each against the mean predictor.
4. Speed: one design's FDTD (CPU seconds of its sample: STEP, set-up and run; the mean over the dataset's
   runs plus the set-up measured on the checked design) against the ensemble's prediction per design in a
   batch of 1024 (one thread).
5. Inverse design, each searched over 4096 Sobol candidates through the ensemble (drawn parameters on
   whole cells) and simulated once by FDTD: the design with its ``|S11|`` dip at ``--target``, and a
   dual-band tune, the design whose larger predicted ``|S11|`` at the two ``--dual-band`` frequencies is
   lowest (``mindelec.surrogate.phone.dual_band_design``), with the FDTD's ``|S11|`` at both. By default
   the two frequencies are a pair the design space reaches: the two deepest dips of the held-out design
   whose two deepest dips lie furthest apart (a design the ensemble never saw).
6. The whole study (dataset + training + the two inverse designs' 2 x 4096 queries + their two FDTD
   checks) against FDTD alone for the same queries, and the break-even number of queries ``(dataset +
   training) / (t_FDTD - t_surrogate)``. The ratio printed last is the whole study's: FDTD alone /
   surrogate study.

Results go to ``<run>/results.json``.
"""

import argparse
import json
import pathlib
import time

import numpy as np
import torch

import common.datasets as datasets
from mindelec import phone
from mindelec.antennas import resonance_frequency
from mindelec.cad_phone import PhoneDesign
from mindelec.surrogate import db
from mindelec.surrogate.antenna import describe_scores, evaluate, train_ensemble
from mindelec.surrogate.phone import INPUTS, MODEL_OPTIONS, OUTPUTS, check_phone_design, phone_inverse_design

ROOT = pathlib.Path(__file__).resolve().parent.parent
CANDIDATES = 4096


def held_out_resonances(ensemble, table, ids) -> dict:
    """Mean and worst resonance error of the ensemble on ``ids``, % of each design's true resonance."""
    rows = [int(np.flatnonzero(table["sample_id"] == i)[0]) for i in ids]
    inputs = torch.tensor([[float(table[name][row]) for name in INPUTS] for row in rows], dtype=torch.float64)
    frequencies = torch.as_tensor(table["frequencies"][0])
    predicted = resonance_frequency(frequencies, db(ensemble.predict(inputs)[0]))
    truth = torch.as_tensor(table["resonance"][rows])
    error = ((predicted - truth).abs() / truth * 100).numpy()
    return {"mean": float(error.mean()), "median": float(np.median(error)), "worst": float(error.max())}


def surrogate_seconds(ensemble, table) -> float:
    """The ensemble's time per design (both outputs) in a batch of 1024 designs, the best of three."""
    rows = np.arange(1024) % len(table["sample_id"])
    batch = torch.tensor(np.stack([table[name][rows] for name in INPUTS], 1), dtype=torch.float64)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for output in OUTPUTS:
            ensemble.predict(batch, output)
        best = min(best, time.perf_counter() - started)
    return best / len(batch)


def setup_seconds(recipe, design: dict) -> float:
    """CPU seconds of writing, loading and setting up one design (the part of a sample before its run)."""
    options = {k: v for k, v in recipe.generator.options.items() if k in ("cell", "air", "pml")}
    started = time.process_time()
    phone.phone_simulation(PhoneDesign(**design), **options)
    return time.process_time() - started


def dual_band_share(table) -> float:
    """The share of designs with two or more ``|S11|`` dips below -6 dB (``mindelec.phone.resonances``)."""
    s11 = table["s11_real"] + 1j * table["s11_imag"]
    return float(np.mean([len(phone.resonances(f, s)) >= 2 for f, s in zip(table["frequencies"], s11)]))


def held_out_dual_band(table, ids) -> tuple[tuple[float, float], int]:
    """The two deepest ``|S11|`` dips below -6 dB (Hz, ascending) of the held-out design ``ids`` whose two
    deepest dips lie furthest apart, and that design's id.

    Raises:
        SystemExit: if no held-out design has two dips (then pass ``--dual-band``).
    """
    best, source = None, None
    for sample in ids:
        row = int(np.flatnonzero(table["sample_id"] == sample)[0])
        s11 = table["s11_real"][row] + 1j * table["s11_imag"][row]
        dips = sorted(phone.resonances(table["frequencies"][row], s11), key=lambda dip: dip[1])
        if len(dips) >= 2:
            pair = tuple(sorted(frequency for frequency, _ in dips[:2]))
            if best is None or pair[1] - pair[0] > best[1] - best[0]:
                best, source = pair, int(sample)
    if best is None:
        raise SystemExit("no held-out design has two dips below -6 dB: give --dual-band F1 F2")
    return best, source


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small recipe, small models")
    parser.add_argument("--run", default=str(ROOT / "benchmarks" / "output" / "phone_surrogate"))
    parser.add_argument("--limit", type=int, help="use the recipe's first N designs only")
    parser.add_argument("--workers", type=int, default=1, help="dataset processes, one thread each")
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3000)
    parser.add_argument("--target", type=float, default=2.4e9, help="inverse design's dip frequency (Hz)")
    parser.add_argument("--dual-band", type=float, nargs=2, metavar=("F1", "F2"),
                        help="the dual-band tune's two frequencies (Hz); default: the two deepest dips "
                             "of the held-out design whose two deepest dips lie furthest apart")
    return parser.parse_args()


def main():
    arguments = parse_arguments()
    torch.set_num_threads(1)
    run = pathlib.Path(arguments.run)
    run.mkdir(parents=True, exist_ok=True)
    recipe = datasets.load_recipe(
        ROOT / "datasets" / ("phone_antenna_small.toml" if arguments.quick else "phone_antenna.toml"))
    data = run / f"{recipe.name}.h5"
    started = time.perf_counter()
    summary = datasets.generate(
        recipe, output=data, workers=arguments.workers, threads=1, limit=arguments.limit, progress=False)
    print(f"dataset: {summary} ({time.perf_counter() - started:.0f} s wall in this call)", flush=True)
    table = datasets.read_dataset(data)
    designs = len(table["sample_id"])
    epochs, members = (400, 2) if arguments.quick else (arguments.epochs, arguments.members)
    started = time.process_time()
    ensemble, _ = train_ensemble(
        data, INPUTS, run / "ensemble", members=members, model_options=MODEL_OPTIONS, outputs=OUTPUTS,
        split_options={"extrapolation_parameter": None}, epochs=epochs, progress=False, threads=1)
    # the CPU time of every call that trained (a resumed run adds the rest of its training to the first's)
    ledger = run / "ensemble" / "training_core_seconds.txt"
    training = (float(ledger.read_text()) if ledger.exists() else 0.0) + time.process_time() - started
    ledger.write_text(f"{training}\n")
    scores = evaluate(ensemble, data, "test")
    resonance = held_out_resonances(ensemble, table, ensemble.split["test"])
    print(describe_scores(scores), flush=True)
    print(f"held-out resonance error {resonance['mean']:.2f} % of the true resonance (median "
          f"{resonance['median']:.2f} %, worst {resonance['worst']:.2f} %); total efficiency at the "
          f"resonance {100 * scores['total_efficiency_error_at_resonance']:.2f} points (mean predictor "
          f"{100 * scores['mean_total_efficiency_error_at_resonance']:.2f}); designs with two dips below "
          f"-6 dB: {100 * dual_band_share(table):.0f} %", flush=True)

    dual_source = None
    if arguments.dual_band is None:
        arguments.dual_band, dual_source = held_out_dual_band(table, ensemble.split["test"])
    inverse = {}
    for task, target in (("single_band", arguments.target), ("dual_band", tuple(arguments.dual_band))):
        started = time.perf_counter()
        proposal = phone_inverse_design(ensemble, target, recipe, candidates=CANDIDATES)
        seconds = time.perf_counter() - started
        checked = check_phone_design(ensemble, proposal["parameters"], recipe.generator.options)
        inverse[task] = (seconds, checked)
    _, check = inverse["single_band"]
    fdtd_resonance = float(check["simulated"]["resonance"])
    print(f"inverse design for {arguments.target / 1e9:g} GHz: {check['design']}; FDTD dip at "
          f"{fdtd_resonance / 1e9:.4f} GHz ({100 * (fdtd_resonance / arguments.target - 1):+.2f} % from the "
          f"target; predicted {check['predicted_resonance'] / 1e9:.4f} GHz), S11 relative L2 against the "
          f"prediction {check['relative_l2']:.3f}", flush=True)
    _, dual = inverse["dual_band"]
    simulated = dual["simulated"]
    frequencies = simulated["frequencies"]
    dual_fdtd = np.interp(arguments.dual_band, frequencies, simulated["s11_db"])
    dual_predicted = np.interp(arguments.dual_band, frequencies, db(dual["predicted_s11"]).numpy())
    dual_dips = phone.resonances(frequencies, simulated["s11_real"] + 1j * simulated["s11_imag"])
    print(f"dual-band tune for {arguments.dual_band[0] / 1e9:.4g} and {arguments.dual_band[1] / 1e9:.4g} GHz"
          + (f" (the dips of held-out design {dual_source})" if dual_source is not None else "") + ": "
          f"{dual['design']}; |S11| FDTD {dual_fdtd[0]:.1f} / {dual_fdtd[1]:.1f} dB, predicted "
          f"{dual_predicted[0]:.1f} / {dual_predicted[1]:.1f} dB; FDTD dips below -6 dB at "
          + (", ".join(f"{f / 1e9:.3f} GHz" for f, _ in dual_dips) or "none")
          + f"; S11 relative L2 against the prediction {dual['relative_l2']:.3f}", flush=True)
    inverse_seconds = sum(seconds for seconds, _ in inverse.values())
    check_seconds = sum(result["fdtd_seconds"] for _, result in inverse.values())

    setup = setup_seconds(recipe, check["design"])
    fdtd = float(np.mean(table["fdtd_seconds"])) + setup
    surrogate = surrogate_seconds(ensemble, table)
    dataset_cost = designs * fdtd
    queries = len(inverse) * CANDIDATES
    study = dataset_cost + training + inverse_seconds + check_seconds
    fdtd_only = queries * fdtd
    break_even = (dataset_cost + training) / (fdtd - surrogate)
    results = {
        "recipe": recipe.name, "designs": designs, "split": {k: len(v) for k, v in ensemble.split.items()},
        "members": members, "epochs": epochs, "scores": scores, "resonance_error_percent": resonance,
        "dual_band_share": dual_band_share(table),
        "inverse_design": {
            "target": arguments.target, "design": check["design"], "fdtd_resonance": fdtd_resonance,
            "predicted_resonance": check["predicted_resonance"], "relative_l2": check["relative_l2"],
            "fdtd_total_efficiency_at_target": float(np.interp(
                arguments.target, check["simulated"]["frequencies"], check["simulated"]["total_efficiency"])),
            "predicted_total_efficiency_at_target": float(np.interp(
                arguments.target, check["simulated"]["frequencies"], check["predicted_efficiency"].numpy())),
        },
        "dual_band": {
            "targets": list(arguments.dual_band), "targets_from_held_out_design": dual_source,
            "design": dual["design"], "fdtd_s11_db": dual_fdtd.tolist(),
            "predicted_s11_db": dual_predicted.tolist(), "relative_l2": dual["relative_l2"],
            "fdtd_dips": [[f, d] for f, d in dual_dips],
            "fdtd_total_efficiency": np.interp(
                arguments.dual_band, frequencies, simulated["total_efficiency"]).tolist(),
        },
        "cost_core_seconds": {
            "fdtd_per_design": fdtd, "setup_per_design": setup, "surrogate_per_design": surrogate,
            "dataset": dataset_cost, "training": training, "inverse_queries": inverse_seconds,
            "checks": check_seconds, "queries": queries, "study": study, "fdtd_only": fdtd_only,
            "break_even_queries": break_even,
        },
    }
    (run / "results.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    print(f"FDTD {fdtd:.1f} core-s per design ({setup:.1f} of it set-up), surrogate {surrogate * 1e6:.0f} us "
          f"per design (ensemble of {members}, both outputs, batch of 1024): per-design speed-up "
          f"{fdtd / surrogate:.3g}")
    print(f"whole study: dataset {dataset_cost / 60:.1f} core-min ({designs} designs) + training "
          f"{training / 60:.1f} + {queries} queries {inverse_seconds:.2f} s + {len(inverse)} checks "
          f"{check_seconds:.0f} s = {study / 60:.1f} core-min; FDTD alone for the {queries} queries "
          f"{fdtd_only / 3600:.1f} core-h; break-even at {break_even:.0f} queries")
    print(f"ratio (FDTD alone / surrogate study, {queries} queries): {fdtd_only / study:.3g}")


if __name__ == "__main__":
    main()
