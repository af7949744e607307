"""Two parallel half-wave dipoles: mutual impedance and envelope correlation over spacing, FDTD against the
moment method and the induced-EMF method.

Set-up (:func:`mindelec.dipole_pairs.dipole_pair`): two thin-wire dipoles of 22 cells (1 mm cells, ``L/a =
5000``), side by side and parallel, 50 ohm lumped ports at their centres, CPML, float32, one thread; one FDTD
run per driven port (:class:`mindelec.multiport.LumpedMultiport`) gives the 2 x 2 Z and S matrices at the
frequency where ``L = lambda / 2``, and a near-to-far box the embedded patterns.

Peers in the same run:

* the two-wire moment method at the same length and radius (``tests/mindelec/wire_reference.py``:
  delta gaps, Galerkin, 60 segments per wire) for Z21 and Z11;
* Carter's induced-EMF mutual impedance of infinitely thin half-wave dipoles (Balanis eq. 8-68), which
  a finite radius departs from by several per cent (``test_multiport.py`` checks the moment method tends
  to it as the radius vanishes);
* the envelope correlation from the S-parameters (Blanch et al. 2003, exact for lossless antennas)
  against the far-field integral of the embedded patterns.

Printed per spacing (in wavelengths at L = lambda/2): Z21 by the FDTD, the moment method and Carter, the
relative deviation from the moment method, Z11 against the moment method, the two ECCs and the total
efficiencies of the two routes, |S21| in dB, the diversity gain, and the FDTD's CPU time (core-seconds;
``time.process_time`` of the two runs at one thread). Last: the largest |dZ21| / |Z21| against the moment
method and the largest ECC difference.

    PYTHONPATH=. python benchmarks/mimo_dipoles.py [--quick]     # --quick: d = lambda/4 and lambda/2 only
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from common.units import SPEED_OF_LIGHT
from mindelec import diversity
from mindelec.dipole_pairs import dipole_pair

# the moment-method references live with the tests that validate them
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "mindelec"))
from wire_reference import induced_emf_mutual_impedance, moment_method_pair  # noqa: E402

CELL = 1e-3
LENGTH = 22  # cells: lambda = 44 cells at L = lambda / 2
SLENDERNESS = 5000
SPACINGS = (11, 22, 33, 44)  # cells: 0.25, 0.5, 0.75, 1 lambda
QUICK_SPACINGS = (11, 22)


def measure(spacing):
    """The figures of one spacing (cells) at L = lambda/2."""
    half_wave = SPEED_OF_LIGHT / (2 * LENGTH * CELL)
    frequencies = torch.tensor([half_wave], dtype=torch.float64)
    pair = dipole_pair(spacing, frequencies, frequencies, LENGTH, SLENDERNESS, cell_size=CELL)
    start = time.process_time()
    result = pair.multiport.run(pair.build, until=pair.until, progress=False)
    core_seconds = time.process_time() - start
    z = result.z_matrix[0].numpy()
    reference = moment_method_pair(1.0, 1 / SLENDERNESS, 2.0, spacing / LENGTH, 60)
    by_s = diversity.lossless_radiation_matrix(result.s_matrix)
    by_far = diversity.radiation_matrix(result.far_fields("far"), result.incident)
    correlation_s, correlation_far = (
        float(diversity.envelope_correlation(radiation)[0, 0, 1]) for radiation in (by_s, by_far)
    )
    return {
        "d": spacing / (2 * LENGTH),
        "z21": z[1, 0],
        "mom21": reference[1, 0],
        "carter": induced_emf_mutual_impedance(spacing / (2 * LENGTH)),
        "z11": z[0, 0],
        "mom11": reference[0, 0],
        "ecc_s": correlation_s,
        "ecc_far": correlation_far,
        "efficiency_s": float(diversity.total_efficiency(by_s)[0, 0]),
        "efficiency_far": float(diversity.total_efficiency(by_far)[0, 0]),
        "s21_db": float(diversity.coupling_db(result.s_matrix)[0, 1, 0]),
        "diversity_gain": float(diversity.diversity_gain(correlation_far)),
        "core_seconds": core_seconds,
        "cells": pair.cells,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="d = lambda/4 and lambda/2 only")
    spacings = QUICK_SPACINGS if parser.parse_args().quick else SPACINGS
    torch.set_num_threads(1)
    print(
        f"{'d/lam':>5} {'Z21 FDTD':>16} {'Z21 MoM':>16} {'Z21 Carter':>16} {'dev':>6} {'Z11 FDTD':>16} "
        f"{'Z11 MoM':>16} {'ECC S':>7} {'ECC far':>7} {'eff S':>6} {'eff far':>7} {'S21 dB':>6} {'DG dB':>5} "
        f"{'core-s':>6} grid"
    )
    rows = []
    for spacing in spacings:
        row = measure(spacing)
        rows.append(row)
        deviation = abs(row["z21"] - row["mom21"]) / abs(row["mom21"])
        grid = "x".join(str(n) for n in row["cells"])
        print(
            f"{row['d']:5.2f} {row['z21']:16.2f} {row['mom21']:16.2f} {row['carter']:16.2f} {deviation:6.1%} "
            f"{row['z11']:16.2f} {row['mom11']:16.2f} {row['ecc_s']:7.4f} {row['ecc_far']:7.4f} "
            f"{row['efficiency_s']:6.3f} {row['efficiency_far']:7.3f} {row['s21_db']:6.1f} "
            f"{row['diversity_gain']:5.2f} {row['core_seconds']:6.1f} {grid}",
            flush=True,
        )
    worst = max(abs(row["z21"] - row["mom21"]) / abs(row["mom21"]) for row in rows)
    ecc = max(abs(row["ecc_s"] - row["ecc_far"]) for row in rows)
    print(f"largest |Z21 - MoM| / |MoM| = {worst:.2%}; largest |ECC(S) - ECC(far field)| = {ecc:.4f}; "
          f"ratio |Z21 FDTD| / |Z21 MoM| at d = lambda/4: {abs(rows[0]['z21']) / abs(rows[0]['mom21']):.4f}")


if __name__ == "__main__":
    main()
