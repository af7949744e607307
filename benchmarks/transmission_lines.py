"""Transmission-line cross-sections: accuracy of Z0 and eps_eff against closed forms, and solve times.

Lines (zero-thickness strips, PEC boxes several line widths away; mindelec.lines builds them):

- ``microstrip``: 3.0 mm (3.2 mm with ``--quick``) on 1.6 mm FR4 (eps 4.4), 48 x 24 mm box: quasi-TEM
  (``quasi_tem_line``) against Hammerstad-Jensen, full-wave (``cross_section_modes(..., conductor=)``, the
  power-current Z0) at 2 and 5 GHz against Kirschning-Jansen;
- ``CPW``: conductor-backed coplanar waveguide, 1 mm strip, 0.2 mm gaps on 0.8 mm FR4, 12 x 8 mm box,
  quasi-TEM against the conformal mapping;
- ``coax``: a = 1 mm, b = 2.3 mm, PTFE (eps 2.1), quasi-TEM against ``eta0 / (2 pi sqrt(eps)) ln(b/a)``.

Each at two cell sizes ``d`` and ``d/2``; zero-thickness strips (and staircased circles) converge at first
order, so the value compared is the Richardson extrapolation ``2 X(d/2) - X(d)``, and the finer grid's
own error is printed beside it. Times are wall times of one solve on the finer grid.

No peer package is run here: Tidy3D's local mode solver installs beside the pinned torch (it is used by
``benchmarks/modes_tidy3d.py`` for dielectric guides), but on this microstrip with a zero-thickness PEC
strip (a zero-thickness ``td.PEC`` box) it returned one mode of n_eff^2 3.75 where the closed form and this
solver give 3.37, which was not investigated further, and its impedance plugin was not set up; the closed
forms are the reference.

Measured (``--quick``, 0.4 / 0.2 mm, loaded 2-core machine): extrapolated Z0 -0.38 % (quasi-TEM), -0.30 %
and +0.21 % (full-wave 2 and 5 GHz), CPW -0.08 %, coax +0.23 %; eps_eff -0.42 %, -0.23 %, +0.15 %, CPW
-0.13 %; 0.8-15 s per solve.

The worst extrapolated errors of Z0 and eps_eff over all lines are printed last.

    python benchmarks/transmission_lines.py [--quick]
"""

from __future__ import annotations

import argparse
import time

from mindelec import line_impedance, lines, modes, quasi_tem

FR4 = 4.4


def timed(function):
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def quasi_static(section, cells):
    """``[(Z0, eps_eff, seconds)]`` per cell size."""
    results = []
    for cell in cells:
        permittivity, conductor = section(cell)
        line, seconds = timed(lambda: quasi_tem.quasi_tem_line(permittivity, conductor, cell))  # noqa: B023
        results.append((line.impedance, line.effective_permittivity, seconds))
    return results


def full_wave(section, cells, frequency):
    results = []
    for cell in cells:
        permittivity, conductor = section(cell)
        mode, seconds = timed(
            lambda: modes.cross_section_modes(permittivity, cell, frequency, conductor=conductor)  # noqa: B023
        )
        z0 = line_impedance.mode_impedance(mode).power_current
        results.append((z0, mode.effective_index[0].real.item() ** 2, seconds))
    return results


def report(name, results, exact):
    """Print one line; return the extrapolated relative errors (Z0, eps_eff)."""
    (z_coarse, eps_coarse, _), (z_fine, eps_fine, seconds) = results
    z_error = (2 * z_fine - z_coarse) / exact[0] - 1
    eps_error = (2 * eps_fine - eps_coarse) / exact[1] - 1 if exact[1] is not None else 0.0
    eps_text = "" if exact[1] is None else (
        f", eps_eff {eps_fine:.4f} (closed form {exact[1]:.4f}): fine {eps_fine / exact[1] - 1:+.2%}, "
        f"extrapolated {eps_error:+.2%}"
    )
    print(
        f"{name}: Z0 {z_fine:.2f} ohm (closed form {exact[0]:.2f}): fine {z_fine / exact[0] - 1:+.2%}, "
        f"extrapolated {z_error:+.2%}{eps_text}; {seconds:.2f} s per solve",
        flush=True,
    )
    return z_error, eps_error


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="coarser grids (0.4 / 0.2 mm microstrip)")
    args = parser.parse_args()
    strip_cells = (0.4e-3, 0.2e-3) if args.quick else (0.2e-3, 0.1e-3)
    errors = []

    width = 3.2e-3 if args.quick else 3.0e-3  # a whole number of cells

    def microstrip(cell):
        return lines.microstrip_section(width, 1.6e-3, FR4, cell, 48e-3, 24e-3)

    exact = lines.microstrip_static(width, 1.6e-3, FR4)
    errors.append(report("microstrip, quasi-TEM", quasi_static(microstrip, strip_cells), exact))
    for frequency in (2e9, 5e9):
        exact = lines.microstrip_dispersive(width, 1.6e-3, FR4, frequency)
        results = full_wave(microstrip, strip_cells, frequency)
        errors.append(report(f"microstrip, full-wave {frequency / 1e9:g} GHz", results, exact))

    def coplanar(cell):
        return lines.coplanar_section(1e-3, 0.2e-3, 0.8e-3, FR4, cell, 12e-3, 8e-3)

    exact = lines.coplanar_backed(1e-3, 0.2e-3, 0.8e-3, FR4)
    errors.append(report("CPW, quasi-TEM", quasi_static(coplanar, (0.05e-3, 0.025e-3)), exact))

    def coax(cell):
        return lines.coax_section(1e-3, 2.3e-3, 2.1, cell)

    exact = (lines.coax_impedance(1e-3, 2.3e-3, 2.1), None)
    errors.append(report("coax, quasi-TEM", quasi_static(coax, (0.05e-3, 0.025e-3)), exact))
    worst_z = max(abs(z) for z, _ in errors)
    worst_eps = max(abs(eps) for _, eps in errors)
    print(f"worst extrapolated error against closed forms: Z0 {worst_z:.2%}, eps_eff {worst_eps:.2%}")


if __name__ == "__main__":
    main()
