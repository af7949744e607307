"""FDTD throughput: mindelec.fdtd against the `fdtd` package (flaport) and a memory-bandwidth roofline.

Usage: ``.venv/bin/python benchmarks/fdtd.py [--quick] [--backend torch|numpy]``

For a 3D grid of 128^3 and a 2D grid of 2048^2 (float32, PEC walls, one point source, no monitors)
it measures cell updates per second (cells x steps / wall time, after a warm-up) of

* ``mindelec.fdtd.Simulation.run`` (forward-only path: in-place updates under no_grad);
* the ``fdtd`` package on the same grid and number of steps (backend ``torch`` by default, float32);
* the roofline: a torch triad ``a = b + s * c`` over arrays much larger than the caches gives the
  memory bandwidth B (bytes/s); the roofline is ``B / bytes_per_cell``.

Bytes per cell update counted: a fused Yee update reads and writes each field component once and
reads one curl source that is not already in cache, 12 B per component in float32: 72 B in 3D
(6 components), 36 B in 2D TM (3 components).

The ratios (ours / fdtd package, ours / roofline) are printed last.
"""

import argparse
import math
import sys
import time
from pathlib import Path

import torch

# this script is named fdtd.py: keep its folder off the path so that `import fdtd` finds the package
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]


def bandwidth(elements=2**25, repeats=5):
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


def ours(shape, steps):
    """Cell updates per second of mindelec.fdtd on ``shape`` (cells), float32."""
    import mindelec as me

    fdtd = me.fdtd
    spacing = 1e-6
    size = tuple(n * spacing for n in shape)
    sim = fdtd.Simulation(size=size, resolution=spacing, boundary=fdtd.PEC(), dtype=torch.float32,
                          sources=[fdtd.PointDipole((0.0,) * len(shape), "Ez",
                                                    fdtd.GaussianPulse(3e13, 2e13))])
    sim.run(steps=2, progress=False)  # warm-up
    start = time.perf_counter()
    sim.run(steps=steps, progress=False)
    return math.prod(shape) * steps / (time.perf_counter() - start)


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--backend", default="torch", choices=("torch", "numpy"), help="fdtd package backend")
    arguments = parser.parse_args()
    steps = 5 if arguments.quick else 20
    bytes_per_cell = {3: 72, 2: 36}
    measured = bandwidth()
    print(f"threads: {torch.get_num_threads()}, triad bandwidth: {measured / 1e9:.1f} GB/s")
    ratios = []
    for shape in [(128, 128, 128), (2048, 2048)]:
        name = "x".join(map(str, shape))
        roofline = measured / bytes_per_cell[len(shape)]
        rate_ours = ours(shape, steps)
        rate_peer = peer(shape, steps, arguments.backend)
        print(f"{name}: mindelec.fdtd {rate_ours / 1e6:.1f} Mcells/s, fdtd package ({arguments.backend}) "
              f"{rate_peer / 1e6:.1f} Mcells/s, roofline {roofline / 1e6:.1f} Mcells/s "
              f"({bytes_per_cell[len(shape)]} B/cell)")
        ratios.append((name, rate_ours / rate_peer, rate_ours / roofline))
    for name, versus_peer, versus_roofline in ratios:
        print(f"{name}: mindelec.fdtd / fdtd package = {versus_peer:.2f}x, "
              f"mindelec.fdtd / roofline = {100 * versus_roofline:.0f} %")


if __name__ == "__main__":
    main()
