"""PINN benchmark: MindElec's 2D TE point source, against this suite's FDTD reference of the same problem.

Set-up (MindElec's ``time_domain_maxwell`` example): domain [0, 1]^2 m, a magnetic line current at
(0.4975, 0.4975) m smoothed by a Gaussian of radius 0.02 m, a Gaussian-modulated 1 GHz pulse, t in
[0, 4 ns], zero initial fields, absorbing sides. The reference is :func:`mindelec.pinn.fdtd_reference`
(same smoothed source as a distributed current, 2.5 mm cells, CPML outside the domain: the open
domain). Printed: how far the exact solution with the chosen sides is from that reference (the error an
exact solver of the posed problem would have), then the PINN's relative L2 errors of Ex, Ey, Hz over 20
frames, the number of collocation-point evaluations (points per step x steps) spent and the wall time;
MindElec reports 0.0356 / 0.0343 / 0.0230 after ~4e8 point evaluations. With ``--compare``, the other
network (MultiScaleMLP) on the same budget. Incremental training is ``benchmarks/pinn_incremental.py``.

Sides: MindElec's first-order Mur condition (``--absorbing-order 1``) puts the exact solution 4% (relative
L2) from the open domain, twice the 2% goal, since it reflects waves that meet a side obliquely (17% at 45
degrees); the default is the second-order Engquist-Majda condition (0.6-0.9%).

Method (``--formulation potential``, the default): the network gives a potential ``psi`` with
``Ex = psi_y``, ``Ey = -psi_x``, ``Hz = eps_r psi_t`` (:class:`mindelec.pinn.PotentialTE`), so two of
the three TE equations hold exactly and the loss is the scalar wave equation plus the absorbing
condition; the source's quasi-static potential (:class:`mindelec.pinn.PointSourcePotential`) carries the
steep near field; all derivatives come from one forward-mode pass. Training is one
:class:`mindelec.pinn.Schedule` run by :func:`mindelec.pinn.train_schedule`: growing time windows
``[0, k T / n]`` (``--windows``), then the whole interval (``--whole-fraction`` of the steps), one Adam
carried over, warm-up-free cosine decay of the learning rate from ``--lr`` to ``--final-factor`` of it over
the whole run; the defaults (36000 steps x 1024 points = 3.7e7 evaluations) are the one-command run.
The default network is one sine MLP (128 x 4) whose normalised inputs are multiplied by 4
(``--input-frequency``: a unit factor starts the first layer far below the pulse's frequencies) and which also
takes the distance to the source (``--radial``, softened by 5 cm).
``--formulation fields`` is the direct three-field PINN (MindElec's formulation) with causal weighting
and gradient-norm balancing.

Cost (cProfile of 40 steps, 128 x 4 network, 1024 points, one core): the backward pass takes 58% of a step,
the forward-mode jet's layers 25%, the source potential 8% (0.24 s of CPU per step, under load). Stacking the
jet's ten rows into one matrix product per layer was tried and was slower (0.27-0.30 s), so the jets stay
:mod:`common.autodiff`'s; the model is float32 already.

Usage: ``python benchmarks/pinn.py [--quick] [--steps N] [--batch N] [--save model.pt] [--output r.json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch

import mindelec as me
from common import nn as cnn
from common.units import SPEED_OF_LIGHT

pinn = me.pinn
MINDELEC = {"Ex": 0.0356, "Ey": 0.0343, "Hz": 0.0230, "evaluations": 6000 * 8 * 8192}


# per formulation: problem options and trainer options
SETTINGS = {
    "potential": ({"boundary_weight": 1.0}, {"balance": None}),
    "fields": (
        {"boundary_weight": 10.0, "causal_bins": 16, "causal_epsilon": 0.01},
        {"balance": "gradnorm", "balance_every": 100},
    ),
}


def problem_options(batch, formulation, absorbing_order=1, source_fraction=0.25, boundary_fraction=0.25):
    """Keyword arguments of :func:`mindelec.pinn.point_source_problem`: ``batch`` points per step split
    between domain, source region and boundary (``absorbing_order`` 2: second-order Engquist-Majda walls,
    potential formulation only), and the formulation's loss weights."""
    n_source, n_boundary = int(batch * source_fraction), int(batch * boundary_fraction)
    return dict(
        n_domain=batch - n_source - n_boundary,
        n_source=n_source,
        n_boundary=n_boundary,
        formulation=formulation,
        absorbing_order=absorbing_order,
        **SETTINGS[formulation][0],
    )


def build(setup, batch, formulation, absorbing_order=1):
    """Problem and scales of ``setup`` with :func:`problem_options`."""
    return pinn.point_source_problem(setup, **problem_options(batch, formulation, absorbing_order))


def wall_floor(setup, order, cell_size, frames=20):
    """Relative L2 distance (Ex, Ey, Hz over ``frames`` snapshots) between the exact solution of the posed
    problem, walls of absorbing ``order`` (1 Mur, 2 Engquist-Majda) on the domain's sides, and the open-domain
    solution that :func:`mindelec.pinn.fdtd_reference` computes: the error an exact solver of the posed
    problem would have against the reference.

    Both solve the scalar wave equation of the TE potential, ``psi_tt = c^2 (laplace psi - Mz)``
    (``Ex = psi_y``, ``Ey = -psi_x``, ``Hz = psi_t / c``), by leapfrog on a ``cell_size`` grid; the
    walls use Mur's (1981) discretisation, the open domain is padded by ``c T`` so no reflection returns.
    """
    c = SPEED_OF_LIGHT
    dt = 0.5 * cell_size / c
    steps = math.ceil(setup.duration / dt)
    every = max(1, steps // frames)
    source, waveform = setup.source(), setup.waveform()
    lower, upper = (
        torch.tensor(setup.lower, dtype=torch.float64),
        torch.tensor(setup.upper, dtype=torch.float64),
    )
    inner = [round(float(u - lo) / cell_size) + 1 for lo, u in zip(lower, upper)]

    def run(pad, walls):
        axes = [lower[a] - pad * cell_size + cell_size * torch.arange(inner[a] + 2 * pad) for a in range(2)]
        xx, yy = torch.meshgrid(*axes, indexing="ij")
        density = source.profile(torch.stack([xx.flatten(), yy.flatten()], 1)).reshape(xx.shape)
        previous, current = torch.zeros_like(xx), torch.zeros_like(xx)
        k1 = (c * dt - cell_size) / (c * dt + cell_size)
        k2, k3 = (
            2 * cell_size / (c * dt + cell_size),
            (c * dt) ** 2 / (2 * cell_size * (c * dt + cell_size)),
        )
        snapshots = []
        sides = (
            lambda u: (u[0], u[1]),
            lambda u: (u[-1], u[-2]),
            lambda u: (u[:, 0], u[:, 1]),
            lambda u: (u[:, -1], u[:, -2]),
        )
        for step in range(steps):
            moment = float(waveform(torch.tensor(step * dt, dtype=torch.float64)))
            laplacian = torch.zeros_like(current)
            laplacian[1:-1, 1:-1] = (
                current[2:, 1:-1]
                + current[:-2, 1:-1]
                + current[1:-1, 2:]
                + current[1:-1, :-2]
                - 4 * current[1:-1, 1:-1]
            ) / cell_size**2
            new = 2 * current - previous + (c * dt) ** 2 * (laplacian - source.amplitude * moment * density)
            for side in sides if walls else ():  # views of the wall row and the first interior row
                (n0, n1), (c0, c1), (p0, p1) = side(new), side(current), side(previous)
                mur = c1 + k1 * (n1 - c0)
                if order == 2:  # along the wall, corners keep first order
                    along = (c0[2:] - 2 * c0[1:-1] + c0[:-2]) + (c1[2:] - 2 * c1[1:-1] + c1[:-2])
                    mur[1:-1] = (
                        -p1[1:-1] + k1 * (n1[1:-1] + p0[1:-1]) + k2 * (c0[1:-1] + c1[1:-1]) + k3 * along
                    )
                n0.copy_(mur)
            previous, current = current, new
            if (step + 1) % every == 0:
                window = (slice(pad, pad + inner[0]), slice(pad, pad + inner[1]))
                psi, psi_t = current[window], (current - previous)[window] / dt
                snapshots.append(
                    torch.stack(
                        [
                            (psi[1:-1, 2:] - psi[1:-1, :-2]) / (2 * cell_size),
                            -(psi[2:, 1:-1] - psi[:-2, 1:-1]) / (2 * cell_size),
                            psi_t[1:-1, 1:-1] / c,
                        ]
                    )
                )
        return torch.stack(snapshots)

    walled, open_domain = run(0, True), run(math.ceil(c * setup.duration / cell_size) + 2, False)
    difference = (walled - open_domain).pow(2).sum((0, 2, 3)).sqrt()
    return dict(zip(("Ex", "Ey", "Hz"), (difference / open_domain.pow(2).sum((0, 2, 3)).sqrt()).tolist()))


def parse_arguments(argv=None) -> argparse.Namespace:
    """The command line, with the defaults that depend on other options filled in."""
    parser = base_parser(__doc__, "CI-sized run (a few minutes)")
    parser.add_argument("--steps", type=int, default=None, help="Adam steps in all (36000; quick 200)")
    parser.add_argument(
        "--batch", type=int, default=None, help="collocation points per step (1024; quick 256)"
    )
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    parser.add_argument("--final-factor", type=float, default=0.01, help="last learning rate / --lr (cosine)")
    parser.add_argument("--windows", type=int, default=6, help="phases: n - 1 growing windows, then [0, T]")
    parser.add_argument("--whole-fraction", type=float, default=0.5, help="fraction of steps on [0, T]")
    parser.add_argument("--radius", type=float, default=0.02, help="source smoothing radius (m)")
    parser.add_argument("--compare", action="store_true", help="also train the other network, same budget")
    parser.add_argument("--save", default=None, help="write the trained model's state_dict to this file")
    parser.add_argument("--initial", default=None, help="start from this state_dict (of --save)")
    parser.add_argument("--formulation", choices=("potential", "fields"), default="potential")
    parser.add_argument(
        "--network",
        choices=("multiscale", "plain"),
        default="plain",
        help="sine MultiScaleMLP (4 x 64) or one sine MLP (128 x 4); --compare trains the other",
    )
    parser.add_argument(
        "--absorbing-order",
        type=int,
        choices=(1, 2),
        default=None,
        help="sides: 1 first-order Mur (MindElec's), 2 second-order Engquist-Majda (potential formulation: "
        "the default)",
    )
    parser.add_argument(
        "--radial",
        type=float,
        default=0.05,
        help="potential formulation: give the network the distance to the source softened by this (m; 0: no)",
    )
    parser.add_argument(
        "--input-frequency",
        type=float,
        default=4.0,
        help="plain network: factor on its normalised inputs (first-layer frequencies up to this / 3)",
    )
    parser.add_argument("--cell-size", type=float, default=None, help="FDTD reference cell size (m)")
    parser.add_argument("--monitors", type=int, default=None, help="error evaluations per run (20; quick 5)")
    args = parser.parse_args(argv)
    if args.absorbing_order is None:
        args.absorbing_order = 2 if args.formulation == "potential" else 1
    args.monitors = args.monitors or (5 if args.quick else 20)
    args.steps = args.steps or (200 if args.quick else 36000)
    args.batch = args.batch or (256 if args.quick else 1024)
    args.cell_size = args.cell_size or (1e-2 if args.quick else 2.5e-3)
    return args


def softening(args, problem):
    """--radial (m) as the dimensionless softening of the radial input, or None (no radial input)."""
    return args.radial / problem.scales.length if args.radial else None


def make_model(args, problem, network=None):
    """The network (``args.network`` by default) for ``problem``: a plain sine MLP or a MultiScaleMLP."""
    if (network or args.network) == "plain":
        return plain_model(problem, args.formulation, softening(args, problem), args.input_frequency)
    return pinn.default_model(problem, radial_softening=softening(args, problem))


def schedule(args) -> pinn.Schedule:
    """The command line's :class:`mindelec.pinn.Schedule`."""
    whole = 1.0 if args.windows == 1 else args.whole_fraction
    return pinn.Schedule(args.steps, args.lr, args.windows, whole, args.final_factor)


def run(args, setup, reference, network):
    """Train ``network`` ("plain" or "multiscale") by the command line's schedule; the run's record."""
    torch.manual_seed(0)
    problem, scales = build(setup, args.batch, args.formulation, args.absorbing_order)
    model = make_model(args, problem, network)
    if args.initial and network == args.network:
        model.load_state_dict(torch.load(args.initial, weights_only=True))
    result = pinn.train_schedule(
        setup,
        model,
        schedule(args),
        problem_options(args.batch, args.formulation, args.absorbing_order),
        monitor=pinn.reference_monitor(reference, scales),
        monitors=args.monitors,
        **SETTINGS[args.formulation][1],
    )
    del result["trainer"]  # not part of the record
    errors = result["errors"]
    name = "MultiScaleMLP" if network == "multiscale" else "plain sine MLP"
    print(
        f"{name} PINN ({args.formulation}, {args.windows} phases, one command): Ex {errors['Ex']:.4f}  "
        f"Ey {errors['Ey']:.4f}  Hz {errors['Hz']:.4f}  after {result['evaluations']:.3g} point evaluations "
        f"({result['seconds']:.0f} s); MindElec: 0.0356 0.0343 0.0230 after {MINDELEC['evaluations']:.3g}"
    )
    if args.save and network == args.network:
        torch.save(model.state_dict(), args.save)
    return result


def main(argv=None):
    args = parse_arguments(argv)
    torch.set_num_threads(args.threads)
    setup = pinn.PointSourceSetup(source_radius=args.radius)
    results = {key: value for key, value in vars(args).items()}
    start = time.perf_counter()
    reference = pinn.fdtd_reference(setup, cell_size=args.cell_size, frames=20, stride=4)
    results["fdtd_seconds"] = time.perf_counter() - start
    print(f"FDTD reference ({args.cell_size * 1e3:g} mm cells): {results['fdtd_seconds']:.1f} s")
    floor = results["floor"] = wall_floor(setup, args.absorbing_order, args.cell_size)
    print(
        f"exact solution with order-{args.absorbing_order} sides vs the open-domain reference (an exact "
        f"solver's error): Ex {floor['Ex']:.4f}  Ey {floor['Ey']:.4f}  Hz {floor['Hz']:.4f}"
    )
    main_run = results[args.network] = run(args, setup, reference, args.network)
    if args.compare:
        other = "multiscale" if args.network == "plain" else "plain"
        results[other] = run(args, setup, reference, other)
    largest = max(main_run["errors"][name] for name in ("Ex", "Ey", "Hz"))
    print(
        f"largest component error / MindElec's largest: {largest / 0.0356:.3f} with "
        f"{main_run['evaluations'] / MINDELEC['evaluations']:.3f} of its point evaluations"
    )
    return write_results(args.output, results)


def base_parser(doc: str, quick: str) -> argparse.ArgumentParser:
    """The PINN benchmarks' parser, described by ``doc``'s first line, with ``--quick`` (help ``quick``),
    ``--threads`` and ``--output``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=None, help="write the figures to this JSON file")
    return parser


def write_results(path, results):
    """Write ``results`` as JSON to ``path`` (None: nowhere); return them."""
    if path:
        with open(path, "w") as handle:
            json.dump(results, handle, indent=1)
    return results


def plain_model(problem, formulation, radial_softening=None, input_frequency=1.0):
    """The single-scale network compared with MultiScaleMLP: one sine MLP of the same cost (128^2 = 4 x 64^2
    weights) for the potential formulation (optionally with the radial input; ``input_frequency`` multiplies
    its normalised inputs, SIREN's first-layer ``w0``), a tanh MLP for the fields formulation."""
    if formulation == "potential":
        return pinn.default_model(
            problem,
            scales=(input_frequency,),
            hidden_features=128,
            hidden_layers=4,
            radial_softening=radial_softening,
        )
    plain = pinn.ZeroInitialFields(_centred_mlp(problem), time_column=2)
    plain.in_features = 3
    return plain


def _centred_mlp(problem):
    """A plain tanh MLP with MultiScaleMLP's input normalisation (one scale), for the comparison."""
    lo, hi = problem.domain.bounds_float64
    return cnn.MultiScaleMLP(
        3,
        3,
        (1.0,),
        hidden_features=128,
        hidden_layers=5,
        activation="tanh",
        input_center=((lo + hi) / 2).tolist(),
        input_scale=(2 / (hi - lo)).tolist(),
    )


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
