"""``mindelec surrogate train SWEEP.h5 ...``: train an S11 surrogate ensemble on a dataset, resumably.

The run folder gets the stored design split (``split.json``), the members' checkpoints (a killed run,
started again with the same command, resumes; the same command started twice shares the members between
the two processes), the trained models and ``metrics.json`` (held-out and extrapolation scores against the
mean predictor, :func:`mindelec.surrogate.antenna.evaluate`).
"""

from __future__ import annotations

import json
import pathlib
import sys

__all__ = ["add_surrogate_commands", "surrogate_command"]


def add_surrogate_commands(commands) -> None:
    """Add ``surrogate train`` to an ``argparse`` sub-parser collection."""
    surrogate = commands.add_parser("surrogate", help="train data-driven surrogates on a dataset")
    actions = surrogate.add_subparsers(dest="action", required=True)
    train = actions.add_parser("train", help="train an S11 surrogate ensemble on an HDF5 sweep")
    train.add_argument("sweep", help="HDF5 dataset (e.g. from datasets/patch_antenna_small.toml)")
    train.add_argument(
        "--parameters",
        nargs="+",
        default=["length", "width", "inset_used", "permittivity", "height"],
        help="parameter columns, in the model's input order (default: the patch antenna's, its inset as "
        "simulated on the grid)",
    )
    train.add_argument("--output", help="run folder (default: <sweep name>_surrogate)")
    train.add_argument("--members", type=int, default=3, help="ensemble size (default 3)")
    train.add_argument("--epochs", type=int, default=2000)
    train.add_argument("--learning-rate", "--lr", dest="learning_rate", type=float, default=3e-3,
                       help="Adam's peak learning rate (default 3e-3)")
    train.add_argument(
        "--frequency-features", type=int, default=4, help="Fourier octaves of the frequency input"
    )
    train.add_argument(
        "--frequency-reference",
        help="'package.module:function' giving each design's frequency scales (Hz) from its parameters, "
        "e.g. mindelec.antennas:cavity_modes (the network also sees f / f_ref of each)",
    )
    train.add_argument("--plain", action="store_true", help="a plain parameters -> S11 MLP instead")
    train.add_argument("--test-fraction", type=float, default=0.2)
    train.add_argument("--quiet", action="store_true", help="no progress bar")


def surrogate_command(arguments) -> int:
    """Run ``mindelec surrogate train``; exit status 0, or 2 with the error on stderr."""
    from mindelec.surrogate.antenna import describe_scores, evaluate, train_ensemble

    folder = pathlib.Path(
        arguments.output or pathlib.Path(arguments.sweep).with_suffix("").name + "_surrogate"
    )
    options = (
        {"conditioning": "none"}
        if arguments.plain
        else {
            "frequency_features": arguments.frequency_features,
            "frequency_reference": arguments.frequency_reference,
        }
    )
    try:
        ensemble, _ = train_ensemble(
            arguments.sweep,
            arguments.parameters,
            folder,
            members=arguments.members,
            model_options=options,
            split_options={"test_fraction": arguments.test_fraction},
            epochs=arguments.epochs,
            learning_rate=arguments.learning_rate,
            progress=not arguments.quiet,
        )
        metrics = {
            subset: evaluate(ensemble, arguments.sweep, subset)
            for subset in ("test", "extrapolation")
            if ensemble.split[subset]
        }
    except (ValueError, KeyError, FileNotFoundError) as error:
        print(f"mindelec surrogate train: error: {error}", file=sys.stderr)
        return 2
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2))
    for subset, scores in metrics.items():
        print(f"{subset}, {describe_scores(scores)}")
    print(f"models and metrics written to {folder.resolve()}")
    return 0
