"""Incremental training of the point-source PINN: pre-train over a permittivity range, fine-tune to a new one.

MindElec's incremental training reaches about 0.06 (relative L2) on an unseen permittivity after a short
fine-tune. Here: a parametric network (the permittivity is an input,
:func:`mindelec.pinn.point_source_problem` with a range) is pre-trained over ``--range`` by the one-command
schedule (:func:`mindelec.pinn.train_schedule`: windows, then the whole interval); then, at the unseen
``--unseen`` value, against the FDTD reference there:

- pre-trained: its error before any fine-tuning;
- fine-tuned: :func:`mindelec.pinn.fine_tune` for ``--finetune-steps`` (early layers frozen, ``--freeze``; a
  lower learning rate, ``--finetune-lr``, with a warm-up; by default the same windows as the main run,
  ``--finetune-windows 1`` the whole interval only);
- from scratch, same budget: a new network trained for the same steps by the same schedule at full rate;
- from scratch, ``--scratch-factor`` times the budget (5: the goal is the fine-tune at <= 1/5 of its steps).

Printed: the four errors (largest of Ex, Ey, Hz) and the steps. Defaults: MindElec's set-up over 4 ns;
``--quick`` a reduced one (0.6 m square, 2 ns, a 64 x 3 network, a few minutes idle).

The full size fine-tunes for 7200 steps, a fifth of the 36000 that the one-command schedule
(``benchmarks/pinn.py``) trains from scratch; the long run from scratch is then 36000 steps of the same
schedule. It takes about two hours on one core (2026-11-26: about 10 steps a second), half of it that
long run. ``--save-pretrained FILE`` stores the pre-trained network (with the options that shaped it)
and ``--pretrained FILE`` starts from it instead of pre-training, refusing a file made with other
pre-training options, so the run can be split in two. ``--runs`` picks the parts: ``tuned``
(pre-training and fine-tune) and ``scratch`` (the two runs from scratch, which need no pre-training), so
the two can run side by side on two cores.

Usage: ``python benchmarks/pinn_incremental.py [--quick] [--pretrain-steps N] [--finetune-steps N]
[--save-pretrained FILE | --pretrained FILE] [--runs tuned scratch]``.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import torch

import mindelec as me

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pinn as pinn_benchmark  # noqa: E402 - benchmarks/pinn.py, the sibling benchmark

pinn = me.pinn


def parse_arguments(argv=None) -> argparse.Namespace:
    """The command line, with the size-dependent defaults filled in."""
    parser = pinn_benchmark.base_parser(__doc__, "reduced problem (minutes)")
    parser.add_argument("--pretrain-steps", type=int, default=None, help="(20000; quick 1500)")
    parser.add_argument(
        "--finetune-steps", type=int, default=None,
        help="(7200, a fifth of the one-command schedule's 36000 from scratch; quick 300)",
    )
    parser.add_argument(
        "--scratch-factor", type=int, default=5, help="steps of the long scratch run / fine-tune"
    )
    parser.add_argument("--batch", type=int, default=None, help="points per step (1024; quick 256)")
    parser.add_argument(
        "--lr", type=float, default=2e-3, help="peak learning rate of pre-training and scratch"
    )
    parser.add_argument("--finetune-lr", type=float, default=5e-4, help="peak learning rate of the fine-tune")
    parser.add_argument("--freeze", type=int, default=1, help="hidden layers frozen when fine-tuning")
    parser.add_argument("--windows", type=int, default=None, help="phases of every run (6; quick 3)")
    parser.add_argument(
        "--finetune-windows", type=int, default=None, help="phases of the fine-tune (1: the whole interval "
        "only; default: --windows)",
    )
    parser.add_argument(
        "--range", type=float, nargs=2, default=(1.0, 4.0), help="pre-training permittivities"
    )
    parser.add_argument("--unseen", type=float, default=2.5, help="the fine-tuning permittivity")
    parser.add_argument(
        "--retarded-time", action="store_true",
        help="give every network the retarded time t - sqrt(eps_r) s as an input (default_model)",
    )
    parser.add_argument("--save-pretrained", default=None, help="store the pre-trained network in this file")
    parser.add_argument("--pretrained", default=None, help="start from this --save-pretrained file")
    parser.add_argument(
        "--runs", nargs="+", choices=("tuned", "scratch"), default=("tuned", "scratch"),
        help="parts to run: pre-training and fine-tune, the runs from scratch (both)",
    )
    args = parser.parse_args(argv)
    args.pretrain_steps = args.pretrain_steps or (1500 if args.quick else 20000)
    args.finetune_steps = args.finetune_steps or (300 if args.quick else 7200)
    args.batch = args.batch or (256 if args.quick else 1024)
    args.windows = args.windows or (3 if args.quick else 6)
    args.finetune_windows = args.finetune_windows or args.windows
    return args


def setup_for(args, permittivity) -> pinn.PointSourceSetup:
    """MindElec's set-up (``--quick``: 0.6 m square, source at the centre, 2 ns) at ``permittivity``."""
    if args.quick:
        return pinn.PointSourceSetup(
            upper=(0.6, 0.6), source_position=(0.3, 0.3), duration=2e-9, permittivity=permittivity
        )
    return pinn.PointSourceSetup(permittivity=permittivity)


def new_model(args, problem):
    """The benchmark's sine network (one scale, input factor 4, radial input); 64 x 3 with ``--quick``."""
    width, depth = (64, 3) if args.quick else (128, 4)
    softening = 0.05 / problem.scales.length
    return pinn.default_model(
        problem,
        scales=(4.0,),
        hidden_features=width,
        hidden_layers=depth,
        radial_softening=softening,
        retarded_time=args.retarded_time,
    )


def train(args, setup, model, schedule, monitor, freeze=None, curves=None, name=None):
    """Train (``freeze`` given: fine-tune) ``model`` by ``schedule``; the largest component error at the end
    and the seconds. With ``curves`` (a dict), store the error along the run there under ``name``:
    ``{"steps": [...], "errors": [...]}`` (the largest component error, about 20 points)."""
    options = pinn_benchmark.problem_options(args.batch, "potential", 2)
    common = dict(problem_options=options, monitor=monitor, monitors=20, threads=args.threads)
    if freeze is None:
        result = pinn.train_schedule(setup, model, schedule, **common)
    else:
        result = pinn.fine_tune(model, setup, schedule, freeze=freeze, **common)
    if curves is not None:
        history = result["history"]
        curves[name] = {"steps": history["monitor_step"], "errors": history["monitor/max"]}
    return result["errors"]["max"], result["seconds"]


def pretraining_options(args) -> dict:
    """The options that shape the pre-trained network."""
    keys = ("quick", "pretrain_steps", "batch", "lr", "windows", "range", "threads", "retarded_time")
    return {key: list(value) if isinstance(value, tuple) else value for key, value in vars(args).items()
            if key in keys}


def load_pretrained(args, model) -> float:
    """Load ``--pretrained`` into ``model``; its pre-training seconds. Refuses a file made with other
    pre-training options (naming them)."""
    stored = torch.load(args.pretrained, weights_only=True)
    expected = pretraining_options(args)
    options = {"retarded_time": False, **stored["options"]}  # files from before the option: without it
    different = {key: (options.get(key), value) for key, value in expected.items()
                 if key != "threads" and options.get(key) != value}
    if different:
        raise SystemExit(f"{args.pretrained}: pre-trained with other options (stored, asked): {different}")
    model.load_state_dict(stored["state_dict"])
    return float(stored["seconds"])


def main(argv=None):
    args = parse_arguments(argv)
    torch.set_num_threads(args.threads)
    unseen = setup_for(args, args.unseen)
    reference = pinn.fdtd_reference(unseen, cell_size=1e-2 if args.quick else 2.5e-3, frames=10, stride=4)
    fixed = setup_for(args, (args.unseen, args.unseen))  # the parameter column kept, at one value
    pretraining = setup_for(args, tuple(args.range))
    problem, scales = pinn.point_source_problem(
        pretraining, **pinn_benchmark.problem_options(args.batch, "potential", 2)
    )
    monitor = pinn.reference_monitor(reference, scales, parameters=(args.unseen,))
    def schedule(steps, lr, warmup=0, windows=args.windows):
        return pinn.Schedule(steps, lr, windows, 0.5 if windows > 1 else 1.0, warmup=warmup)

    results = {"arguments": vars(args), "curves": {}}
    steps = args.finetune_steps
    if "tuned" in args.runs:
        torch.manual_seed(0)
        model = new_model(args, problem)
        if args.pretrained:
            pretrain_seconds = load_pretrained(args, model)
        else:
            _, pretrain_seconds = train(
                args, pretraining, model, schedule(args.pretrain_steps, args.lr), monitor
            )
        if args.save_pretrained:
            stored = {"state_dict": model.state_dict(), "seconds": pretrain_seconds}
            torch.save(dict(stored, options=pretraining_options(args)), args.save_pretrained)
        results.update(pretrained=monitor(model)["max"], pretrain_seconds=pretrain_seconds)
        print(
            f"pre-trained on permittivity {args.range} ({args.pretrain_steps} steps, "
            f"{pretrain_seconds:.0f} s): largest error at {args.unseen} {results['pretrained']:.4f}"
        )
        results["finetuned"], _ = train(
            args,
            fixed,
            copy.deepcopy(model),
            schedule(steps, args.finetune_lr, warmup=max(steps // 10, 1), windows=args.finetune_windows),
            monitor,
            args.freeze,
            results["curves"],
            "finetuned",
        )
        print(f"at permittivity {args.unseen}: fine-tuned ({steps} steps, {args.freeze} layers frozen) "
              f"{results['finetuned']:.4f}")
        pinn_benchmark.write_results(args.output, results)  # each part as it ends: a long run may be cut
    if "scratch" in args.runs:
        for name, budget in (("scratch", steps), ("scratch_long", args.scratch_factor * steps)):
            torch.manual_seed(1)
            scratch_model = new_model(args, problem)
            results[name], _ = train(
                args, fixed, scratch_model, schedule(budget, args.lr), monitor, None, results["curves"], name
            )
            print(f"at permittivity {args.unseen}: from scratch {budget} steps {results[name]:.4f}")
            pinn_benchmark.write_results(args.output, results)
    return pinn_benchmark.write_results(args.output, results)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    start = time.perf_counter()
    main()
    print(f"{time.perf_counter() - start:.0f} s")
