"""Waveguide mode solver: ``mindelec.modes.cross_section_modes`` against Tidy3D's local mode solver.

The same cross-sections on the same uniform grids, PEC walls around them, staircased (no subpixel
smoothing on either side; the cores are whole numbers of cells), two modes at one frequency:

- ``SOI strip``: silicon (n = 3.48) 500 x 220 nm in oxide (n = 1.444), 1.7 x 1.4 um, 1550 nm;
- ``SiN strip``: silicon nitride (n = 2.0) 1000 x 400 nm in oxide, 3.0 x 2.4 um, 1550 nm (a weaker,
  wider guide: more of the mode in the cladding);
- ``SOI strip, 1310 nm``: a 400 x 220 nm silicon strip at 1310 nm.

Each case at two cell sizes (20 and 10 nm; 40 and 20 nm for the nitride). Printed: both solvers'
effective indices (TE0, TM0), their differences, the wall time of each solve (best of ``--repeats``),
and last the ratio of the solve times (Tidy3D's over ours: above 1, ours is faster). The two codes
place the permittivity on the Yee grid differently, so at a finite cell their indices differ by a few
1e-3 and converge towards each other from opposite sides as the cell shrinks.

Tidy3D (``tidy3d`` on the package index) runs its mode solver locally, without an account; it warns
that local subpixel averaging needs its ``tidy3d-extras``, which is not used here (``subpixel=False``).

    python benchmarks/modes_tidy3d.py [--quick] [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from common.units import SPEED_OF_LIGHT
from mindelec import modes

OXIDE = 1.444
# name: (core index, core width (z), core height (y), domain width, domain height, wavelength (m), cells)
CASES = {
    "SOI strip": (3.48, 500e-9, 220e-9, 1.7e-6, 1.4e-6, 1.55e-6, (20e-9, 10e-9)),
    "SiN strip": (2.0, 1000e-9, 400e-9, 3.0e-6, 2.4e-6, 1.55e-6, (40e-9, 20e-9)),
    "SOI strip, 1310 nm": (3.48, 400e-9, 220e-9, 1.6e-6, 1.4e-6, 1.31e-6, (20e-9, 10e-9)),
}


def permittivity_grid(core, width, height, domain_width, domain_height, cell):
    """``(cells_y, cells_z)`` permittivity of a centred rectangular core in oxide."""
    cells_y, cells_z = round(domain_height / cell), round(domain_width / cell)
    core_y, core_z = round(height / cell), round(width / cell)
    grid = torch.full((cells_y, cells_z), OXIDE**2, dtype=torch.float64)
    y0, z0 = (cells_y - core_y) // 2, (cells_z - core_z) // 2
    grid[y0 : y0 + core_y, z0 : z0 + core_z] = core**2
    return grid


def ours(case, cell):
    core, width, height, domain_width, domain_height, wavelength, _ = case
    grid = permittivity_grid(core, width, height, domain_width, domain_height, cell)
    result = modes.cross_section_modes(grid, cell, SPEED_OF_LIGHT / wavelength, num_modes=2)
    return sorted(result.effective_index.real.tolist(), reverse=True)


def tidy3d_solve(case, cell):
    import tidy3d as td
    from tidy3d.plugins.mode import ModeSolver

    core, width, height, domain_width, domain_height, wavelength, _ = case
    um = 1e6  # Tidy3D's lengths are micrometres
    structure = td.Structure(
        geometry=td.Box(center=(0, 0, 0), size=(td.inf, height * um, width * um)),
        medium=td.Medium(permittivity=core**2),
    )
    simulation = td.Simulation(
        size=(1.0, domain_height * um, domain_width * um),
        grid_spec=td.GridSpec.uniform(dl=cell * um),
        structures=[structure],
        medium=td.Medium(permittivity=OXIDE**2),
        run_time=1e-12,
        boundary_spec=td.BoundarySpec.all_sides(td.PECBoundary()),
        subpixel=False,
    )
    solver = ModeSolver(
        simulation=simulation,
        plane=td.Box(center=(0, 0, 0), size=(0, domain_height * um, domain_width * um)),
        mode_spec=td.ModeSpec(num_modes=2),
        freqs=[td.C_0 / (wavelength * um)],
    )
    return sorted(solver.solve().n_eff.values.reshape(-1).tolist(), reverse=True)


def best_time(function, repeats):
    best, value = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        value = function()
        best = min(best, time.perf_counter() - start)
    return value, best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the coarser cell of each case only")
    parser.add_argument("--repeats", type=int, default=3, help="solves per case and solver (best counts)")
    args = parser.parse_args()
    try:
        import tidy3d
    except ImportError as error:
        raise SystemExit(f"tidy3d is not installed ({error}): pip install tidy3d") from error
    tidy3d.config.logging.level = "ERROR"  # its note on subpixel averaging, once per solve
    totals = {"ours": 0.0, "tidy3d": 0.0}
    for name, case in CASES.items():
        for cell in case[-1][:1] if args.quick else case[-1]:
            mine, mine_seconds = best_time(lambda: ours(case, cell), args.repeats)  # noqa: B023 - called now
            theirs, their_seconds = best_time(lambda: tidy3d_solve(case, cell), args.repeats)  # noqa: B023
            totals["ours"] += mine_seconds
            totals["tidy3d"] += their_seconds
            differences = ", ".join(f"{a - b:+.4f}" for a, b in zip(mine, theirs))
            print(
                f"{name}, {cell * 1e9:.0f} nm: mindelec n_eff {mine[0]:.4f} / {mine[1]:.4f} "
                f"({mine_seconds:.2f} s), Tidy3D {theirs[0]:.4f} / {theirs[1]:.4f} ({their_seconds:.2f} s); "
                f"differences {differences}",
                flush=True,
            )
    print(f"ratio Tidy3D / mindelec solve time (all cases): {totals['tidy3d'] / totals['ours']:.2f}")


if __name__ == "__main__":
    main()
