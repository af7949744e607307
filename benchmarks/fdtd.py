"""FDTD throughput: mindelec.fdtd against the `fdtd` package (flaport) and a memory-bandwidth roofline.

Usage: ``.venv/bin/python benchmarks/fdtd.py [--quick] [--backend torch|numpy]``

For a 3D grid of 128^3 and a 2D grid of 2048^2 (float32, PEC walls, one point source, no monitors)
it measures cell updates per second (cells x steps / wall time of the stepping, after a warm-up) of

* ``mindelec.fdtd.Simulation.run``, forward-only path (in-place updates under no_grad), twice: with the
  compiled kernel of ``mindelec._kernels`` doing the bulk updates (one pass over the grid for all H, one
  for all E), and with ``compiled=False`` (pure torch, one pass per curl term);
* the ``fdtd`` package on the same grid (backend ``torch`` by default, float32; half as many steps,
  it is slow);
* the roofline: a torch triad ``a = b + s * c`` over arrays much larger than the caches gives the
  memory bandwidth B (bytes/s); the roofline is ``B / bytes_per_cell``.

Bytes per cell update counted: a fused Yee update reads and writes each field component once and
reads one curl source that is not already in cache, 12 B per component in float32: 72 B in 3D
(6 components), 36 B in 2D TM (3 components).

The compiled kernel moves exactly these bytes in 3D (fields read once and written once, each curl
source read once per group from memory, its neighbouring rows from cache), about 40 B in 2D TM.
The machine's bandwidth drifts when other jobs run: the triad is measured before, between and after
the measurements of each grid, and the highest value is used (the conservative choice).

The ratios (ours / fdtd package, ours / roofline, compiled and pure torch) are printed last.

Monitor cost (3D, 128^3, compiled): the same run bare, with a ``FluxBox`` and with a ``FluxBox`` plus a
``NearToFarMonitor``, both boxes 100 cells wide around the source and 20 frequencies over the pulse's
band, runs of 4x the steps above (the DFTs sample every 3rd step here and fold 16 samples at a time),
the three cases alternating over three rounds (best of each): Mcells/s, the ratio to the bare run and to
the roofline.

Small grid with CPML (3D, 56x62x32 cells, PML of 8 cells on every side, float32, 1 thread: the grid of
the patch-antenna dataset, ``mindelec.antennas``): milliseconds per step of the compiled and the pure
torch path, alternating over three rounds (best of each), and their ratio. On grids this small the
per-step cost is dominated by the CPML slabs, not by the bulk update. Measured on a heavily loaded
2-core machine (1 thread, CPU time per step of the patch-antenna run itself, 200 steps, repeated):
before the CPML moved into the compiled kernel, compiled 3.7-6.8 ms and pure torch 3.4-5.9 ms per step
(about 50 small torch operations per step for the slabs); with the slabs in a second kernel pass the
compiled path took 1.4-2.6 ms per step, 2-3x faster than before and than the pure torch path. That second
pass re-read each slab's field, source and coefficient rows (on the phone's 164 x 260 x 76 grid with a
CPML of 10 cells it took 56 ms of an 81 ms step, the bulk pass 20 ms); the slabs are now fused into the
bulk pass, which reads only their psi more (the same grid: 40 ms a step, both measured one after the
other while two other runs shared the machine).
"""

import argparse
import math
import sys
import time
from pathlib import Path

import torch

# this script is named fdtd.py: keep its folder off the path so that `import fdtd` finds the package
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]


def bandwidth(elements=2**25, repeats=10):
    """Triad bandwidth (bytes/s) of this machine, float32, best of ``repeats``."""
    b = torch.rand(elements)
    c = torch.rand(elements)
    a = torch.empty(elements)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        torch.add(b, c, alpha=0.5, out=a)
        best = min(best, time.perf_counter() - start)
    return 3 * 4 * elements / best


def ours(shape, steps, compiled, monitors=()):
    """Cell updates per second of mindelec.fdtd on ``shape`` (cells), float32: ``(per step, whole run)``.

    Each ``run`` starts from new zero fields, whose allocation and first touch (page faults) cost about
    as much as a few steps. The per-step rate, ``cells x steps / (t(2 steps) - t(steps))`` with each time
    the best of two runs, leaves that set-up out, as the `fdtd` package's rate does (its grid keeps its
    fields between runs); the whole-run rate ``cells x 2 steps / t(2 steps)`` includes it, and replaces
    the per-step rate when the difference is implausibly small (other jobs disturbed the timing).
    """
    return rates(simulation(shape, compiled, monitors), steps)


def simulation(shape, compiled, monitors=(), pml=None, threads=None):
    """The benchmark run on ``shape`` cells of 1 um (float32, PEC walls or a CPML of ``pml`` cells, a point
    source), warmed up; ``threads`` as in :class:`mindelec.fdtd.Simulation`."""
    import mindelec as me

    fdtd = me.fdtd
    spacing = 1e-6
    size = tuple(n * spacing for n in shape)
    boundary = fdtd.PEC() if pml is None else fdtd.PML(pml)
    sim = fdtd.Simulation(size=size, cell_size=spacing, boundary=boundary, dtype=torch.float32,
                          sources=[fdtd.PointDipole((0.0,) * len(shape), "Ez",
                                                    fdtd.GaussianPulse(3e13, 2e13))], compiled=compiled,
                          monitors=monitors, threads=threads)
    sim.run(steps=2, progress=False)  # warm-up
    return sim


def rates(sim, steps):
    """``(per step, whole run)`` cell updates per second of ``sim`` (see :func:`ours`)."""

    def seconds(count):
        start = time.perf_counter()
        sim.run(steps=count, progress=False)
        return time.perf_counter() - start

    times = {count: min(seconds(count) for _ in range(2)) for count in (steps, 2 * steps)}
    cells = math.prod(sim.grid.shape)
    whole_run = cells * 2 * steps / times[2 * steps]
    difference = times[2 * steps] - times[steps]
    if difference < times[steps] / 2:  # noise from other jobs swamped the difference: whole-run rate
        return whole_run, whole_run
    return cells * steps / difference, whole_run


def peer(shape, steps, backend):
    """Cell updates per second of the `fdtd` package on the same grid."""
    import fdtd

    fdtd.set_backend("torch.float32" if backend == "torch" else "numpy.float32")
    grid_shape = tuple(shape) + (1,) * (3 - len(shape))
    grid = fdtd.Grid(grid_shape, grid_spacing=1e-6, permittivity=1.0)
    center = tuple(n // 2 for n in grid_shape)
    grid[center[0], center[1], center[2]] = fdtd.PointSource(period=30, name="source")
    grid.run(2, progress_bar=False)  # warm-up
    start = time.perf_counter()
    grid.run(steps, progress_bar=False)
    return math.prod(shape) * steps / (time.perf_counter() - start)


def monitor_cost(steps, shape=(128, 128, 128), rounds=5):
    """Rates (cells/s) of whole compiled 3D runs of ``2 steps`` steps: bare, with a flux box, with a flux
    box and an NTFF surface (a whole run: the per-step difference of two runs is too noisy on a shared
    machine, and a user pays the monitors' set-up too).

    The three cases are measured in turn ``rounds`` times; each keeps its best rate."""
    import mindelec as me

    fdtd = me.fdtd
    frequencies = torch.linspace(1.5e13, 3e13, 20)
    box = dict(center=(0.0, 0.0, 0.0), size=(100e-6,) * 3)
    cases = {
        "bare": (),
        "flux box": (fdtd.FluxBox("flux", frequencies, **box),),
        "flux box + NTFF": (
            fdtd.FluxBox("flux", frequencies, **box),
            fdtd.NearToFarMonitor("far", frequencies, **box),
        ),
    }
    sims = {label: simulation(shape, True, monitors) for label, monitors in cases.items()}
    best = dict.fromkeys(cases, 0.0)
    for _ in range(rounds):  # the cases alternate, so that the machine's drifting load hits them alike
        for label, sim in sims.items():
            best[label] = max(best[label], rates(sim, steps)[1])
    return best


def small_grid_with_pml(steps, shape=(56, 62, 32), rounds=3):
    """Seconds per step ``{"compiled": ..., "pure torch": ...}`` of a small 3D run with a CPML of 8 cells,
    1 thread (sets torch's thread count for the rest of the process); the cases alternate, best of each."""
    sims = {label: simulation(shape, compiled, pml=8, threads=1)
            for label, compiled in (("compiled", True), ("pure torch", False))}
    best = dict.fromkeys(sims, math.inf)
    for _ in range(rounds):
        for label, sim in sims.items():
            best[label] = min(best[label], math.prod(shape) / rates(sim, steps)[0])
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--backend", default="torch", choices=("torch", "numpy"), help="fdtd package backend")
    parser.add_argument("--monitors-only", action="store_true", help="only the monitor-cost runs")
    arguments = parser.parse_args()
    steps = 5 if arguments.quick else 20
    peer_steps = 3 if arguments.quick else 10
    bytes_per_cell = {3: 72, 2: 36}
    from mindelec import _kernels

    if _kernels.yee() is None:
        print("the compiled kernel is unavailable: both mindelec.fdtd rows use pure torch")
    print(f"threads: {torch.get_num_threads()}")
    ratios = []
    for shape in [] if arguments.monitors_only else [(128, 128, 128), (2048, 2048)]:
        name = "x".join(map(str, shape))
        triads = [bandwidth()]
        rates = {}
        for label, compiled in (("compiled", True), ("pure torch", False)):
            rates[label] = ours(shape, steps, compiled)
            triads.append(bandwidth())
        rate_peer = peer(shape, peer_steps, arguments.backend)
        triad = max(*triads, bandwidth())
        roofline = triad / bytes_per_cell[len(shape)]
        for label, (per_step, whole_run) in rates.items():
            print(f"{name}: mindelec.fdtd {label}: {per_step / 1e6:.1f} Mcells/s per step "
                  f"({whole_run / 1e6:.1f} over whole runs of {2 * steps} steps)")
        print(f"{name}: fdtd package ({arguments.backend}) {rate_peer / 1e6:.1f} Mcells/s, "
              f"roofline {roofline / 1e6:.1f} Mcells/s ({bytes_per_cell[len(shape)]} B/cell at a triad "
              f"bandwidth of {triad / 1e9:.1f} GB/s)")
        for label, (per_step, _) in rates.items():
            ratios.append((name, label, per_step / rate_peer, per_step / roofline))
    for name, label, versus_peer, versus_roofline in ratios:
        print(f"{name} {label}: mindelec.fdtd / fdtd package = {versus_peer:.2f}x, "
              f"mindelec.fdtd / roofline = {100 * versus_roofline:.0f} %")
    triads = [bandwidth()]
    # enough steps that the DFTs sample and fold many times, and that the difference of a run of 2n steps
    # and one of n (the per-step rate) stands above the machine's noise
    rates = monitor_cost(10 * steps)
    roofline = max(*triads, bandwidth()) / bytes_per_cell[3]
    for label, rate in rates.items():
        print(f"128x128x128 monitors, {label}: {rate / 1e6:.1f} Mcells/s, "
              f"{100 * rate / rates['bare']:.0f} % of the bare run, "
              f"{100 * rate / roofline:.0f} % of the roofline")
    seconds = small_grid_with_pml(10 * steps)
    for label, per_step in seconds.items():
        print(f"56x62x32 with PML(8), 1 thread, {label}: {1e3 * per_step:.2f} ms per step")
    ratio = seconds["compiled"] / seconds["pure torch"]
    print(f"56x62x32 with PML(8): compiled / pure torch time per step = {ratio:.2f}")


if __name__ == "__main__":
    main()
