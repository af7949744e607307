"""The Claisen rearrangement's profile from a committee trained by active learning, against GFN2-xTB.

The reactive case of ``notebooks/reactive_claisen.ipynb`` at full size, in resumable steps:

1. the GFN2-xTB reference of ``benchmarks/claisen_profile.py``: 71 umbrella windows of 3.5 ps on
   s = d(O2-C3) - d(C0-C5), MBAR, and the 1,704 frames its windows labelled; read from
   ``benchmarks/data/claisen_reference*.npz`` (run when absent);
2. active learning by ``datasets/active/claisen_active.toml`` from those frames: a committee of four
   PaiNN, umbrella exploration with the committee's mean over both basins and the barrier, the
   frames whose force disagreement exceeds the threshold labelled with GFN2-xTB, warm-started
   retraining, until a round flags nothing or after ``max_rounds``. Every round's exploration is
   summarised by how its frames ended: chair, boat, open or apart (``claisen.ring_conformation``;
   "apart" is the dissociation a single PaiNN trained on the reference's frames showed in
   ``claisen_profile.py``), among all frames and among the flagged ones;
3. the last committee's profile, every window started from the reference's last frame, the windows
   as copies of the molecule in one simulation per part (``--parts``, run by ``--workers``
   processes); barrier and reaction free energy against GFN2-xTB's, and the windows whose molecule
   came apart;
4. ``--profile-rounds K``: K more rounds driven by production, each exploring the frames the
   previous committee's profile ended its windows on, together with the dissociation probe (the
   reference's window ends near s = 0 with the fragments moved 0.2-0.6 nm apart), through
   ``ActiveLearning.supply_exploration``; every such round's committee is profiled in turn.

Resumable from the repository: after every round the files a run needs to continue (each round's
``record.json``, ``labels.h5`` and ``summary.txt``, the last committee's models, ``rounds.csv``) are copied to
``benchmarks/data/claisen_committee/``, and each part of the profile is stored there when it
finishes; a run whose ``--output`` lacks them starts from there. ``--quick``: the notebook's small
configuration (a smoke test: the figures mean nothing), kept in ``--output`` only. ``--rounds N``
profiles the committee of round ``N`` (or of the round that converged before it) instead of the last.

Printed last: the committee's barrier and reaction free energy minus GFN2-xTB's (kJ/mol; the goal
is 4 in magnitude).

    OMP_NUM_THREADS=1 python benchmarks/claisen_committee.py [--quick] [--workers 2] [--rounds 2]
        [--profile-rounds 1]
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import shutil
import time

import numpy as np
import torch
from claisen_profile import FULL, QUICK, TEMPERATURE, halves, profile_numbers, reference

from common.parallel import JobFailure, run_jobs
from mindsponge import active
from mindsponge import potentials as potentials_module
from mindsponge.active import claisen
from mindsponge.bias import UmbrellaSampling
from mindsponge.label_io import write_labels
from mindsponge.labels import XTB

ROOT = pathlib.Path(__file__).resolve().parent
KINDS = ("chair", "boat", "open", "apart")
KEPT = ("record.json", "labels.h5", "summary.txt")  # of every round; the last committee's model_M.pt besides


def keep(run: active.ActiveLearning, store: pathlib.Path) -> None:
    """Copy what continuing the run needs from its directory to ``store`` (older models dropped)."""
    latest = max(record["round"] for record in run.records if not record["converged"])
    for old in store.glob("round_*/model_*.pt"):
        if old.parent.name != f"round_{latest:03d}":
            old.unlink()
    for path in run.directory.glob("round_*/*"):
        model = path.suffix == ".pt" and path.parent.name == f"round_{latest:03d}"
        if path.name in KEPT or model:
            (store / path.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, store / path.parent.name / path.name)
    shutil.copy2(run.directory / "rounds.csv", store / "rounds.csv")


def restore(store: pathlib.Path, directory: pathlib.Path) -> None:
    """Copy the stored rounds into an output directory that lacks them."""
    for path in store.glob("round_*/*"):
        target = directory / path.parent.name / path.name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def exploration_summary(run: active.ActiveLearning, record: dict, threshold: float) -> str:
    """How the round's explored and flagged frames ended, by ring conformation (kept in the round's
    ``summary.txt``, written while its exploration is there)."""
    path = run.round_directory(record["round"]) / "summary.txt"
    if not path.is_file():
        if not record["explored_frames"]:
            return "no exploration"
        explored = run.exploration(record["round"])
        kinds = np.array(claisen.ring_conformation(explored["positions"]))
        flagged = explored["disagreement"] > threshold

        def counts(chosen) -> str:
            return ", ".join(f"{np.sum(kinds[chosen] == kind)} {kind}" for kind in KINDS)

        path.write_text(f"explored {len(kinds)} frames ({counts(slice(None))}); flagged {int(flagged.sum())} "
                        f"({counts(flagged)}); trajectories stopped early: {record['stopped_trajectories']}")
    return path.read_text()


SHIFTS = (0.0, 0.2, 0.4, 0.6)  # nm, the fragments' separation added by the dissociation probe


def dissociation_probe(frames, centers) -> np.ndarray:
    """The hole a single PaiNN fell into, built by hand: the reference's window ends within 0.05 nm of
    s = 0 with the vinyl-oxy fragment (C0, C1, O2 and their hydrogens) moved ``SHIFTS`` nm away from
    the allyl one along the line between their centres; ``(ends, len(SHIFTS), N, 3)`` nm."""
    numbers = claisen.reactant().atomic_numbers
    heavy = np.flatnonzero(numbers.numpy() > 1)
    moved = []
    for frame in frames[np.abs(centers) <= 0.05]:
        nearest = heavy[np.argmin(np.linalg.norm(frame[:, None] - frame[None, heavy], axis=-1), axis=1)]
        vinyl = np.isin(nearest, [0, 1, 2])
        direction = frame[vinyl].mean(0) - frame[~vinyl].mean(0)
        for shift in SHIFTS:
            copy = frame.copy()
            copy[vinyl] += shift * direction / np.linalg.norm(direction)
            moved.append(copy)
    return np.array(moved).reshape(-1, len(SHIFTS), *frames.shape[1:])


def dissociation_check(committee, frames, centers, threshold: float) -> str:
    """The dissociation probe seen by ``committee``: the median energy change (GFN2-xTB's and the
    committee mean's) and force disagreement at each separation."""
    numbers = claisen.reactant().atomic_numbers
    moved = torch.as_tensor(dissociation_probe(frames, centers).reshape(-1, *frames.shape[1:]))
    xtb = XTB(numbers)
    reference = np.array([float(xtb(positions, None)) for positions in moved]).reshape(-1, len(SHIFTS))
    energies, _ = committee.predict(moved, numbers)
    learned = energies.mean(0).detach().double().numpy().reshape(-1, len(SHIFTS))
    disagreement = committee.force_disagreement(moved, numbers).numpy().reshape(-1, len(SHIFTS))
    rows = ", ".join(
        f"{shift:.1f} nm: {np.median(reference[:, k] - reference[:, 0]):+.0f} / "
        f"{np.median(learned[:, k] - learned[:, 0]):+.0f} kJ/mol, {np.median(disagreement[:, k]):.0f}"
        for k, shift in enumerate(SHIFTS))
    return (f"fragments moved apart at the {len(reference)} window ends near s = 0 (energy change GFN2-xTB / "
            f"committee, force disagreement in kJ/mol/nm, threshold {threshold:g}): {rows}")


def profile_part(job, model_paths, numbers, size, force_constant):
    """One part of the committee's profile: ``job = (windows, centres, starts)``; its samples,
    last frames and CPU seconds per window step."""
    _, centers, starts = job
    torch.set_num_threads(1)
    committee = active.Committee([potentials_module.load(path) for path in model_paths])
    umbrella, frames, seconds = claisen.umbrella_profile(
        committee.bind(numbers), centers, force_constant, TEMPERATURE, size["steps"], size["equilibration"],
        every=size["every"], seed=1, starts=starts, replicas=True, progress=False)
    return np.stack(umbrella.samples), frames, seconds


def committee_profile(run, store, centers, size, force_constant, starts, parts, workers):
    """The last committee's umbrella samples and last frames, window by window (parts kept in ``store``)."""
    latest = max(record["round"] for record in run.records if not record["converged"])
    model_paths = sorted(run.round_directory(latest).glob("model_*.pt"))
    numbers = claisen.reactant().atomic_numbers
    pieces = np.array_split(np.arange(len(centers)), parts)
    missing = [(windows, centers[windows], starts[windows]) for part, windows in enumerate(pieces)
               if not (store / f"profile_{latest:03d}_{part}.npz").is_file()]
    part_of = {tuple(windows): part for part, windows in enumerate(pieces)}
    task = functools.partial(profile_part, model_paths=model_paths, numbers=numbers, size=size,
                             force_constant=force_constant)
    for job, result in run_jobs(task, missing, workers=workers, threads=1):
        if isinstance(result, JobFailure):
            raise RuntimeError(f"profile windows {job[0].tolist()} failed: {result}")
        samples, frames, seconds = result
        np.savez_compressed(store / f"profile_{latest:03d}_{part_of[tuple(job[0])]}.npz", windows=job[0],
                            samples=samples, frames=frames, seconds=seconds)
        print(f"profile part {part_of[tuple(job[0])]} (windows {job[0][0]}-{job[0][-1]}): "
              f"{1e3 * seconds:.2f} ms per window step", flush=True)
    umbrella = UmbrellaSampling(claisen.reaction_coordinate(), centers, force_constant, TEMPERATURE)
    frames, seconds = np.zeros((len(centers), len(numbers), 3)), []
    for part in range(parts):
        with np.load(store / f"profile_{latest:03d}_{part}.npz") as saved:
            for window, samples, last in zip(saved["windows"], saved["samples"], saved["frames"]):
                umbrella.add_samples(int(window), samples)
                frames[window] = last
            seconds.append(float(saved["seconds"]))
    return umbrella, frames, float(np.mean(seconds))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test at the notebook's small size")
    parser.add_argument("--workers", type=int, default=2, help="processes for the profile's parts")
    parser.add_argument("--parts", type=int, default=4, help="parts of the profile's windows")
    parser.add_argument("--rounds", type=int, default=None,
                        help="profile the committee of this round at the latest (default: max_rounds)")
    parser.add_argument("--profile-rounds", type=int, default=0,
                        help="rounds after the profiled one whose exploration is the previous committee's "
                             "profile (its window ends) and the dissociation probe, each profiled")
    parser.add_argument("--output", type=pathlib.Path, default=ROOT / "output" / "claisen_committee")
    args = parser.parse_args()
    size = QUICK if args.quick else FULL
    output = args.output / ("quick" if args.quick else "full")
    store = output / "kept" if args.quick else ROOT / "data" / "claisen_committee"
    output.mkdir(parents=True, exist_ok=True)
    store.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    centers = np.linspace(*size["centers"])
    force_constant = size["force_constant"]  # kJ/mol/nm^2
    edges = np.linspace(centers[0] - 0.02, centers[-1] + 0.02, 101)

    started = time.time()
    umbrella, frames, xtb_seconds, labels = reference(size, centers, force_constant, output)
    barrier, reaction = profile_numbers(umbrella, edges)
    print(f"GFN2-xTB: barrier {barrier:.1f} kJ/mol, reaction {reaction:.1f} kJ/mol (halves: "
          + ", ".join(f"{b:.1f} and {r:.1f}" for b, r in halves(umbrella, edges))
          + f"), {len(labels['energy'])} labelled frames; windows near the barrier end "
          + ", ".join(claisen.ring_conformation(frames[np.abs(centers) <= 0.05])), flush=True)

    initial = output / "reference_labels.h5"
    if not initial.is_file():
        write_labels(initial, labels)
    name = claisen.SIZES["small" if args.quick else "full"]["active"]
    config, base = active.load_config(ROOT.parent / "datasets" / "active" / name)
    config.directory, config.initial = str(output / "active"), str(initial)
    run = active.ActiveLearning(config, base, progress=True)
    restore(store, run.directory)
    last_round = config.max_rounds if args.rounds is None else min(args.rounds, config.max_rounds)
    finished = [index for index in range(last_round + 1)
                if (run.round_directory(index) / "record.json").is_file()]
    for rounds in range(min(max(finished, default=0), last_round), last_round + 1):  # each round kept
        records = run.run(max_rounds=rounds)
        report_round(run, store, records[-1], config.selection.threshold)
        if records[-1]["converged"]:
            break

    print("round 0: " + dissociation_check(run.load_committee(0), frames, centers, config.selection.threshold)
          if (run.round_directory(0) / "model_0.pt").is_file() else "round 0: its models are not kept")
    reported = functools.partial(report_committee, run, store, frames, centers, size, args,
                                 (barrier, reaction), xtb_seconds, edges, started)
    learned_frames = reported(records)
    numbers = claisen.reactant().atomic_numbers
    for _ in range(args.profile_rounds):  # production-driven rounds: the profile is the exploration
        index = records[-1]["round"] + 1
        if records[-1]["converged"]:
            break
        folder = run.round_directory(index)
        if not (folder / "record.json").is_file() and not (folder / "exploration.npz").is_file():
            probe = dissociation_probe(frames, centers)[:, 1:].reshape(-1, *frames.shape[1:])
            run.supply_exploration(index, np.concatenate([learned_frames, probe]), numbers)
        records = run.run(max_rounds=index)
        report_round(run, store, records[-1], config.selection.threshold)
        learned_frames = reported(records)


def report_round(run, store, record, threshold) -> None:
    """Keep the round's files in ``store`` and print its record and exploration summary."""
    summary = exploration_summary(run, record, threshold)
    keep(run, store)
    print(f"round {record['round']}: {record['training_frames']} training frames, validation force MAE "
          f"{record['validation_force_mae']:.1f} kJ/mol/nm, added {record['added_frames']}; {summary}",
          flush=True)


def report_committee(run, store, frames, centers, size, args, reference_numbers, xtb_seconds, edges, started,
                     records) -> np.ndarray:
    """The last committee's dissociation check and profile against GFN2-xTB's (printed); returns the
    profile's window ends ``(windows, N, 3)`` nm."""
    threshold = run.config.selection.threshold
    print(f"round {records[-1]['round']}: " + dissociation_check(run.committee, frames, centers, threshold),
          flush=True)
    learned, learned_frames, seconds = committee_profile(run, store, centers, size, size["force_constant"],
                                                         frames, args.parts, args.workers)
    learned_barrier, learned_reaction = profile_numbers(learned, edges)
    kinds = np.array(claisen.ring_conformation(learned_frames))
    apart = [f"{center:+.3f}" for center, kind in zip(centers, kinds) if kind == "apart"]
    numbers = claisen.reactant().atomic_numbers
    ends = run.committee.force_disagreement(torch.as_tensor(learned_frames), numbers).numpy()
    print(f"the committee's own window ends: force disagreement median {np.median(ends):.0f} kJ/mol/nm, "
          f"above the threshold in {int(np.sum(ends > threshold))} of {len(ends)} windows"
          + (f"; {np.median(ends[kinds == 'apart']):.0f} in those that came apart" if apart else ""))
    barrier, reaction = reference_numbers
    print(f"committee ({len(run.committee)} {run.config.committee.model}, {len(records) - 1} rounds): "
          f"barrier {learned_barrier:.1f} kJ/mol, reaction {learned_reaction:.1f} kJ/mol, "
          f"{1e3 * seconds:.2f} ms per window step; windows come apart: {', '.join(apart) or 'none'}; "
          f"{time.time() - started:.0f} s")
    print(f"committee - GFN2-xTB: barrier {learned_barrier - barrier:+.1f} kJ/mol, reaction "
          f"{learned_reaction - reaction:+.1f} kJ/mol; ratio GFN2-xTB/committee MD step time per window: "
          f"{xtb_seconds / seconds:.2f}", flush=True)
    return learned_frames


if __name__ == "__main__":
    main()
