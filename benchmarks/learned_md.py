"""Learned-potential MD of a small molecule against GFN2-xTB MD and peer packages' models.

The molecule is the reactant of the Claisen rearrangement (allyl vinyl ether, 14 atoms,
:func:`mindsponge.active.claisen.reactant`), run as the reactive example runs it: a
:class:`~mindsponge.simulation.Simulation` with :class:`~mindsponge.integrators.LangevinMiddle`
(0.5 fs, 300 K, 5/ps), mixed precision (float32 forces), one thread. Potentials:

- ``GFN2-xTB``: tblite through :class:`mindsponge.labels.XTB` (the labels of the active learning);
- ``SchNet``, ``PaiNN`` (64 features, 3 interactions), ``ACENet`` (64 channels, 2 layers, l <= 2,
  correlation 3): ``model.bind(atomic_numbers)``;
- ``committee``: four PaiNN as in the full-size active learning (``Committee(...).bind``: one
  graph for all; on the molecule's 182 pairs the models are evaluated together by
  ``torch.func.vmap``, on the 21 copies' 3,822 pairs one after the other on that graph, which is
  faster there), and ``committee (loop)`` the same four models one after the other, each with its
  own graph (the unbound ``Committee``), which is what the vectorisation saves;
- peers of the same size, where installed: torchmd-net's SchNet (``graph-network``, 64
  features, 3 interactions, 20 Gaussians, 0.5 nm) against our SchNet, and mace-torch's MACE
  (64 channels, 2 layers, l <= 2, correlation 3, through :class:`mindsponge.potentials.MACE`)
  against our ACENet. Both run in the same Simulation (torchmd-net's energy differentiated by
  the Simulation, as ours).

- ``SchNet x21``, ``PaiNN x21``, ``committee x21``: the same models bound with ``replicas=21``
  (:mod:`mindsponge.replicas`): 21 umbrella windows of the reactive example run as
  copies of the molecule in one Simulation, one network call per step for all; their time per
  step is divided by the copies (the cost of one window's step), ``--replicas`` sets the count.

``--waters 30``: the reactant in a droplet of 30 waters (104 atoms,
:func:`mindsponge.active.claisen.solvated_reactant`), where GFN2-xTB's cost grows with the atoms and the
learned potentials' with their neighbours: the case in which the reactive example's speed goal (learned
MD 20x GFN2-xTB per trajectory) is stated.

The learned models have random weights (the cost does not depend on them). Each potential's
simulation runs ``--steps`` steps per round; the rounds alternate between the potentials so that
all see the same machine load, and the best round counts. Times are the process's CPU time
(``time.process_time``; one thread, so the time it ran): on a machine shared with other jobs the
wall-clock time of the same run varied by 2x between runs, the CPU time much less. Printed: ms
per MD step and steps/s, ms per energy+forces call at a fixed configuration, the time per step outside the
potential (wall time of a round less the time the compiled loop's clock measured inside the called-back
potential, :class:`mindsponge.step_loop.CallbackClock`: the integrator, the loop, the call into Python and
back), then the ratios last:
GFN2-xTB's step time over each learned potential's (the speed-up of learned MD; the goal of the
reactive example is 20x), and ours over the peers' (above 1: ours is faster).

    OMP_NUM_THREADS=1 python benchmarks/learned_md.py [--quick] [--steps 25] [--rounds 8] [--threads 1]
        [--waters 30]

(with more than one thread the CPU time adds up the threads' times: compare those with care).
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from md_common import print_load_average

import mindsponge as ms
from mindsponge.active import Committee, claisen
from mindsponge.integrators import LangevinMiddle
from mindsponge.labels import XTB
from mindsponge.replicas import replicate

FEATURES, INTERACTIONS, N_RBF, CUTOFF = 64, 3, 20, 0.5  # nm


class TorchMDNetPotential(torch.nn.Module):
    """A torchmd-net model as a ``(positions nm, box) -> energy`` potential (its units, Angstrom)."""

    def __init__(self, model, atomic_numbers):
        super().__init__()
        self.model = model
        self.register_buffer("atomic_numbers", torch.as_tensor(atomic_numbers).long())
        self.register_buffer("batch", torch.zeros(len(atomic_numbers), dtype=torch.long))

    def forward(self, positions, box=None):
        energy, _ = self.model(self.atomic_numbers, positions * 10.0, batch=self.batch)
        return energy.sum()


class LoopCommittee(torch.nn.Module):
    """The committee mean evaluated model by model (the unbound :class:`Committee`)."""

    def __init__(self, committee, atomic_numbers):
        super().__init__()
        self.committee = committee
        self.register_buffer("atomic_numbers", torch.as_tensor(atomic_numbers).long())

    def forward(self, positions, box=None):
        return self.committee(positions, self.atomic_numbers, box)


def torchmdnet_schnet(atomic_numbers):
    """torchmd-net's SchNet of our SchNet's size, or ``None`` (printed why) if not installed."""
    try:
        from torchmdnet.models.model import create_model
    except ImportError as error:
        print(f"torchmd-net is not installed ({error}): skipped")
        return None
    args = {
        "model": "graph-network",
        "precision": 32,
        "embedding_dimension": FEATURES,
        "num_layers": INTERACTIONS,
        "num_rbf": N_RBF,
        "rbf_type": "gauss",
        "trainable_rbf": False,
        "activation": "ssp",
        "neighbor_embedding": False,
        "cutoff_lower": 0.0,
        "cutoff_upper": CUTOFF * 10.0,
        "max_z": 100,
        "max_num_neighbors": len(atomic_numbers),
        "aggr": "add",
        "derivative": False,
        "atom_filter": -1,
        "prior_model": None,
        "output_model": "Scalar",
        "reduce_op": "add",
        "box_vecs": None,
        "static_shapes": False,
        "check_errors": False,
    }
    return TorchMDNetPotential(create_model(args), atomic_numbers)


def mace_model():
    """mace-torch's MACE of our ACENet's size, or ``None`` (printed why) if not installed."""
    try:
        return ms.potentials.MACE(cutoff=CUTOFF, features=FEATURES, interactions=2, max_l=2, correlation=3)
    except ImportError as error:
        print(f"mace-torch is not installed ({error}): skipped")
        return None


def potentials(atomic_numbers) -> dict:
    """Every potential of the comparison, bound to the molecule's atomic numbers."""
    torch.manual_seed(0)
    size = {"cutoff": CUTOFF, "features": FEATURES}
    committee = Committee([ms.potentials.PaiNN(**size, interactions=INTERACTIONS) for _ in range(4)])
    table = {
        "GFN2-xTB": XTB(atomic_numbers),
        "SchNet": ms.potentials.SchNet(**size, interactions=INTERACTIONS, n_rbf=N_RBF).bind(atomic_numbers),
        "PaiNN": ms.potentials.PaiNN(**size, interactions=INTERACTIONS).bind(atomic_numbers),
        "ACENet": ms.potentials.ACENet(**size, interactions=2, max_l=2, correlation=3).bind(atomic_numbers),
        "committee": committee.bind(atomic_numbers),
        "committee (loop)": LoopCommittee(committee, atomic_numbers),
    }
    peers = {"torchmd-net SchNet": torchmdnet_schnet(atomic_numbers), "mace-torch MACE": mace_model()}
    table.update(
        {
            name: (peer if name.startswith("torchmd") else peer.bind(atomic_numbers))
            for name, peer in peers.items()
            if peer is not None
        }
    )
    return table


def cpu_best_of_rounds(functions: dict, repeats: int, rounds: int) -> dict:
    """Best CPU seconds per call of each function (after one warm-up call), timed in alternating rounds."""
    for function in functions.values():
        function()
    best = dict.fromkeys(functions, math.inf)
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.process_time()
            for _ in range(repeats):
                function()
            best[name] = min(best[name], (time.process_time() - start) / repeats)
    return best


def step_overhead(simulation, steps: int, rounds: int = 5) -> float:
    """Seconds per step spent outside the potential (the integrator, the loop, the call into Python): the
    wall time of ``steps`` steps less what the compiled loop's clock says its called-back potential took
    (:class:`mindsponge.step_loop.CallbackClock`), best of ``rounds``."""
    clock, start, best = simulation.step_loop.clock, simulation.state, math.inf
    for _ in range(rounds):
        simulation.state = start
        before, began = clock.seconds, time.perf_counter()
        simulation.run(steps)
        best = min(best, (time.perf_counter() - began - (clock.seconds - before)) / steps)
    simulation.state = start
    return best


def simulation(system, potential):
    """The reactive example's Langevin run of ``potential`` (velocities at 300 K)."""
    sim = ms.Simulation(
        system, potential, LangevinMiddle(0.0005, 300.0, 5.0), seed=0, progress=False, overlap_distance=None
    )
    sim.set_velocities(300.0, seed=0)
    return sim


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--steps", type=int, default=25, help="MD steps per round")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--replicas", type=int, default=21, help="copies of the replicated cases (windows)")
    parser.add_argument("--waters", type=int, default=0, help="the reactant in a droplet of this many waters")
    args = parser.parse_args()
    steps, rounds = (10, 2) if args.quick else (args.steps, args.rounds)
    torch.set_num_threads(args.threads)
    print_load_average("start")
    system = claisen.reactant() if args.waters == 0 else claisen.solvated_reactant(args.waters)
    table = potentials(system.atomic_numbers)
    simulations = {name: simulation(system, potential) for name, potential in table.items()}
    copies = dict.fromkeys(table, 1)
    copied = replicate(system, args.replicas)
    for name in ("SchNet", "PaiNN", "committee"):
        label = f"{name} x{args.replicas}"
        table[label], copies[label] = table[name].replicated(args.replicas), args.replicas
        simulations[label] = simulation(copied, table[label])
    # every round starts again from the first state: random-weight networks are not physical, and a long
    # trajectory of one (PaiNN x21 after 36 steps) can leave for configurations where it blows up
    starts = {name: sim.state for name, sim in simulations.items()}

    def restart_and_run(name):
        simulations[name].state = starts[name]
        simulations[name].run(steps)

    step = cpu_best_of_rounds(
        {name: (lambda name=name: restart_and_run(name)) for name in simulations}, repeats=1, rounds=rounds
    )
    force = cpu_best_of_rounds(
        {
            name: (lambda sim=sim: sim.energy_and_forces(sim.state.positions, None))
            for name, sim in simulations.items()
        },
        repeats=steps,
        rounds=rounds,
    )
    # replicated cases: the cost of one copy's (one window's) step and energy+forces
    step = {name: seconds / copies[name] for name, seconds in step.items()}
    force = {name: seconds / copies[name] for name, seconds in force.items()}
    overhead = {name: step_overhead(sim, steps) / copies[name] for name, sim in simulations.items()}
    print(
        f"Claisen reactant ({system.n_atoms} atoms, {args.waters} waters), {args.threads} thread(s), CPU "
        f"time, best of {rounds} rounds of {steps} steps (see the load average: the machine may be shared)"
    )
    print(f"(x{args.replicas}: {args.replicas} copies in one Simulation, times per copy)")
    for name in table:
        ms_step = step[name] / steps * 1e3
        print(
            f"{name:20s} {ms_step:8.2f} ms per MD step ({1e3 / ms_step:7.1f} steps/s), "
            f"{force[name] * 1e3:8.2f} ms per energy+forces call, {overhead[name] * 1e3:6.3f} ms per step "
            "outside the potential"
        )
    print_load_average("end")
    xtb = step["GFN2-xTB"]
    for name in table:
        if name != "GFN2-xTB":
            print(f"ratio GFN2-xTB/{name} MD step time (learned MD speed-up): {xtb / step[name]:.2f}")
    print(
        f"ratio committee (loop)/committee step time (vectorisation): "
        f"{step['committee (loop)'] / step['committee']:.2f}"
    )
    for ours, peer in (("SchNet", "torchmd-net SchNet"), ("ACENet", "mace-torch MACE")):
        if peer in step:
            print(f"ratio {peer}/{ours} MD step time (above 1: ours faster): {step[peer] / step[ours]:.2f}")


if __name__ == "__main__":
    main()
