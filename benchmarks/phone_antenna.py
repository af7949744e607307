"""The reference phone's antenna from its CAD file: S11, efficiencies, pattern, gain and their convergence.

The device is ``mindelec/examples/phone.step`` (the default ``mindelec.cad_phone.PhoneDesign``: a 72 x 144 x
8.7 mm candy bar, an inverted-F antenna of 30 mm, 3 mm high, over a 10 mm clearance, its feed 6 mm from its
shorting pin, the metal frame with its two gaps),
its media from ``phone_materials.toml`` (lossy housing, glass, FR4 and a lossy battery block), loaded with
``mindelec.cad_assembly.load_step`` and moved by less than 1.5 mm so that the feed pin's foot (on the
ground copper, at the ground plane's edge) lies on a node of every grid used (a multiple of 3 mm). The feed
is a 50 ohm ``LumpedPort`` across one cell between the copper and the feed pin (the CAD's 0.5 mm feed gap
becomes one cell: the port needs a whole Yee edge), the pin a PEC wire from there to the arm.

One run per cell size (uniform cells, 10 PML cells, 15 mm of air around the phone, float32, one thread,
``until_decayed=1e-5``, cut at 40 ns, the lossless run at 150 ns; whether the fields decayed is recorded)
gives:

* S11 (50 ohm) over 0.5-3.5 GHz and its resonances (minima of |S11|, refined by a parabola in dB);
* accepted power ``P_acc = Re(V conj(I))`` at the port, incident power ``P_inc``; the radiated power
  ``P_rad`` from the near-to-far monitor's closed box (its flux; the far-field integral agrees);
  absorbed ``P_abs = P_acc - P_rad`` (the media's losses: nothing else takes power inside the box);
  radiation efficiency ``P_rad / P_acc``, total efficiency ``P_rad / P_inc = (1 - |S11|^2) P_rad / P_acc``;
* directivity and gain (``4 pi U / P_acc = D P_rad / P_acc``, the far-field integral's ``P_rad``) at the
  far-field frequency nearest each resonance (a 0.1 GHz grid).

The power balance is checked by one more run at the coarsest cell with every medium made lossless: there
the box's flux must equal the accepted power (within 1 %), so that in the lossy runs the difference is the
absorption. (An independent volume integral of ``sigma |E|^2`` over the bodies is not done here.)

Convergence: the finest grid's deepest resonance, followed to the nearest resonance on each coarser
grid, extrapolated to zero cell by Richardson from the three finest grids (the order fitted from the
three, ``f(h) = f0 + C h^p``). The IFA's 1 mm strips are one-cell wires on the 1.5 and 1.0 mm grids
and 1 mm sheets on the finer ones, and the frame's 1 mm plates sheets on 1.0 mm cells and more, solids
below, so only the grids under 1 mm share one model of them. The pins stand on node lines wherever the
CAD puts them: the default design's 6 mm between feed and shorting pin and its 3 mm arm height are whole
cells on 1.5, 1.0, 0.75, 0.6 and 0.5 mm (with the 5 mm of the designs before 2026-12-07 the pin spacing
was drawn 4.5, 5.0, 5.25, 4.8 and 5.0 mm on those grids, which kept the series from converging). Cost: the CPU
seconds of each FDTD run (update coefficients and steps, one thread); loading the STEP file and
building the structures come on top.

The set-up (loading, placing, the port, the box geometries) and the port's and box's figures are
``mindelec.phone`` (``phone_simulation``, ``figures_of_merit``, ``resonances``), shared with the phone's
dataset generator and notebook.

Results are cached per cell size and STEP file (its hash in the name) under
``benchmarks/output/phone_antenna/``, and each run writes a restart file there every 10 minutes: a killed
run resumes within its cell size (its cost is then its set-up plus its steps at the rate of the steps after
the restart, and marked so). The derived figures of every grid are kept in
``benchmarks/data/phone_antenna.json`` with the STEP file's hash: a later run with ``--cells`` adds its
grids to those recorded for the same STEP file (a new file starts a new record and keeps the old one under
``"previous_devices"``, by its hash), and the convergence is computed over all recorded grids, so a study
spread over several sessions resumes from the repository.

With ``--conformal`` the metal is cut conformally where the CAD puts it (``phone_simulation(subpixel=True)``,
:mod:`mindelec.fdtd.conformal`, which also smooths the dielectric interfaces) instead of staircased: on
the staircase a face moves to the nearest node, up to half a cell, differently on every grid (the frame's
faces, the ground plane's edges and the pins' positions here), which is what kept the staircased grids
from converging. Those runs are cached and recorded apart (``"conformal"`` in the JSON).

The port's gap is one cell by default, so it shrinks with the cells (1.5 to 0.5 mm) and each grid models
another feed. ``--port-gap MM`` keeps it (whole cells: 1.5 mm on 1.5, 0.75 and 0.5 mm cells), recorded apart
(``"..._port_gap_1.5mm"``); on the grid whose cell it is, the run is the default one.

    python benchmarks/phone_antenna.py [--quick] [--conformal] [--cells 1.5 1.0 0.75 0.6]   # --quick: 1.5 mm
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import pathlib
import time

import numpy as np
import torch

from mindelec import cad_phone, phone

OUTPUT = pathlib.Path(__file__).parent / "output" / "phone_antenna"
DATA = pathlib.Path(__file__).parent / "data" / "phone_antenna.json"
ALIGN = 3e-3  # the feed lands on a multiple of this (m): a node for every cell size that divides it
BAND = (0.5e9, 3.5e9)
PORT_FREQUENCIES = np.linspace(*BAND, 151)
FAR_FREQUENCIES = np.arange(0.6e9, 3.41e9, 0.1e9)
CELLS = (1.5e-3, 1.0e-3, 0.75e-3, 0.6e-3)
QUICK_CELLS = (1.5e-3,)
LOSSLESS_CELL = 1.5e-3  # the power-balance run with lossless media
UNTIL = 40e-9  # the lossy runs stop here if the fields have not decayed by 1e-5
LOSSLESS_UNTIL = 150e-9  # the lossless run rings longer: cut at 40 ns, its balance missed by up to 19 %


def device_hash() -> str:
    """The STEP file's identity (12 hex digits of its SHA-256): a new file, new runs and a new record."""
    return hashlib.sha256(cad_phone.EXAMPLE_STEP.read_bytes()).hexdigest()[:12]


def record_name(conformal, wires, port_gap=None) -> str | None:
    """The key of a study's record in the JSON (``None``: the staircased bare-wire one-cell-gap study, at the
    top); ``port_gap`` in m."""
    parts = ["conformal"] * conformal + ["thin_wires"] * (wires == "thin")
    parts += [f"port_gap_{port_gap * 1e3:g}mm"] if port_gap else []
    return "_".join(parts) or None


def run_case(cell, lossless=False, conformal=False, wires="bare", port_gap=None):
    """One run, cached: a dict of arrays (port spectra, far-field figures per far frequency, cost);
    ``conformal``: the metal cut conformally (``phone_simulation(subpixel=True)``) instead of staircased;
    ``wires``: the pins (and the arm on cells of 1 mm or more) as ``"bare"`` lines or ``"thin"`` wires of
    the CAD's radius (``phone_simulation(wires=)``); ``port_gap``: the port's gap (m, whole cells; ``None``
    and one cell are the default run)."""
    if port_gap is not None and abs(port_gap - cell) < 1e-9 * cell:
        port_gap = None
    until = LOSSLESS_UNTIL if lossless else UNTIL
    kind = ("conformal_" if conformal else "") + ("thin_wires_" if wires == "thin" else "") + (
        f"lossless_{until * 1e9:.0f}ns_" if lossless else "") + (
        f"gap_{port_gap * 1e6:.0f}um_" if port_gap else "")
    path = OUTPUT / f"{kind}cell_{cell * 1e6:.0f}um_{device_hash()}.npz"
    if path.exists():
        return dict(np.load(path))
    sim = phone.phone_simulation(
        None, cell, lossless, align=ALIGN, frequencies=PORT_FREQUENCIES, far_frequencies=FAR_FREQUENCIES,
        band=BAND, subpixel=conformal, wires=wires, port_gap=port_gap,
    ).simulation
    OUTPUT.mkdir(parents=True, exist_ok=True)
    restart = path.with_suffix(".restart")
    wall = time.perf_counter()
    result = sim.run(until=until, until_decayed=1e-5, progress=False,
                     restart_file=restart, restart_every=600)
    wall = time.perf_counter() - wall
    cost = result.cost  # a resumed run: its set-up, plus its steps at the rate of the steps it ran
    resumed_from = cost["resumed_from"]
    scale = result.steps / (result.steps - resumed_from)
    seconds = cost["setup_seconds"] + cost["stepping_seconds"] * scale
    wall *= seconds / (cost["setup_seconds"] + cost["stepping_seconds"])
    radiated, peak = result["far"].power_and_peak()  # one far-field pass (the costly part on fine grids)
    figures = dict(
        phone.figures_of_merit(result), radiated=radiated.double().numpy(),
        directivity=(4 * math.pi * peak / radiated).double().numpy(),
        cells=np.array(sim.grid.shape), steps=np.array(result.steps), cpu_seconds=np.array(seconds),
        wall_seconds=np.array(wall), setup_seconds=np.array(cost["setup_seconds"]),
        resumed_from_step=np.array(resumed_from),
        decayed=np.array(bool(result.metadata["decayed"])),
    )
    np.savez(path, **figures)
    return figures


def summary(figures):
    """The figures of merit at each resonance of one run (a list of dicts)."""
    rows = []
    far_s11 = np.interp(FAR_FREQUENCIES, PORT_FREQUENCIES, np.abs(figures["s11"]))
    for frequency, decibels in phone.resonances(figures["frequencies"], figures["s11"]):
        k = int(np.argmin(np.abs(FAR_FREQUENCIES - frequency)))
        accepted = np.interp(FAR_FREQUENCIES[k], PORT_FREQUENCIES, figures["accepted"])
        radiation = figures["flux"][k] / accepted
        rows.append(dict(
            resonance_ghz=frequency / 1e9, s11_db=decibels, far_ghz=FAR_FREQUENCIES[k] / 1e9,
            radiation_efficiency=radiation, total_efficiency=radiation * (1 - far_s11[k] ** 2),
            absorbed_fraction=1 - radiation, far_field_over_flux=figures["radiated"][k] / figures["flux"][k],
            directivity_dbi=10 * math.log10(figures["directivity"][k]),
            gain_dbi=10 * math.log10(figures["directivity"][k] * figures["radiated"][k] / accepted),
        ))
    return rows


def decay(figures, until) -> str:
    """Whether a run's fields decayed by 1e-5 before ``until`` (s), in words."""
    if bool(figures["decayed"]):
        return "decayed by 1e-5"
    return f"NOT decayed by 1e-5: cut at {until * 1e9:g} ns"


def richardson(cells, values):
    """``(f0, p)`` of ``f(h) = f0 + C h^p`` through three points (p by bisection)."""
    (h1, h2, h3), (f1, f2, f3) = cells, values
    target = (f1 - f2) / (f2 - f3)

    def mismatch(p):
        return (h1**p - h2**p) / (h2**p - h3**p) - target

    lo, hi = 0.2, 6.0
    if mismatch(lo) * mismatch(hi) > 0:
        return float("nan"), float("nan")
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mismatch(lo) * mismatch(mid) > 0 else (lo, mid)
    p = (lo + hi) / 2
    constant = (f2 - f3) / (h2**p - h3**p)
    return f3 - constant * h3**p, p


def without_nan(value):
    """``value`` with every float NaN (a Richardson fit without a solution) as ``None``: strict JSON."""
    if isinstance(value, dict):
        return {key: without_nan(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_nan(item) for item in value]
    return None if isinstance(value, float) and math.isnan(value) else value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1.5 mm cells only")
    parser.add_argument("--cells", type=float, nargs="+", help="cell sizes in mm (divisors of 3 mm)")
    parser.add_argument("--conformal", action="store_true",
                        help="conformal metal (subpixel=True), recorded apart from the staircased runs")
    parser.add_argument("--wires", choices=["bare", "thin"], default="bare",
                        help="the pins as bare lines (0.2 cells' radius) or thin wires of the CAD's radius, "
                        "recorded apart")
    parser.add_argument("--port-gap", type=float, help="the port's gap in mm (whole cells on every grid), "
                        "recorded apart; default one cell")
    args = parser.parse_args()
    port_gap = args.port_gap * 1e-3 if args.port_gap else None
    record = record_name(args.conformal, args.wires, port_gap)
    torch.set_num_threads(1)
    cells = tuple(c * 1e-3 for c in args.cells) if args.cells else QUICK_CELLS if args.quick else CELLS
    lossless_figures = run_case(LOSSLESS_CELL, lossless=True, conformal=args.conformal, wires=args.wires,
                                port_gap=port_gap)
    lossless = summary(lossless_figures)
    balance = [abs(row["radiation_efficiency"] - 1) for row in lossless]
    print(f"lossless media, {LOSSLESS_CELL * 1e3:g} mm ({decay(lossless_figures, LOSSLESS_UNTIL)}): "
          "box flux / accepted - 1 at the resonances: "
          + ", ".join(f"{b:.2%}" for b in balance), flush=True)
    table = {}
    for cell in cells:
        figures = run_case(cell, conformal=args.conformal, wires=args.wires, port_gap=port_gap)
        rows = summary(figures)
        table[cell] = (figures, rows)
        shape = tuple(int(n) for n in figures["cells"])
        print(f"{cell * 1e3:g} mm cells {shape}, {int(figures['steps'])} steps ({decay(figures, UNTIL)}), "
              f"{float(figures['cpu_seconds']):.0f} core-s ({float(figures['wall_seconds']):.0f} s wall"
              + (f"; its set-up plus its steps at the rate of those after the restart at step "
                 f"{int(figures['resumed_from_step'])})"
                 if int(figures.get("resumed_from_step", 0)) else ")"))
        for row in rows:
            print("  resonance {resonance_ghz:.4f} GHz, S11 {s11_db:.1f} dB; at {far_ghz:.1f} GHz: "
                  "radiation "
                  "efficiency {radiation_efficiency:.1%}, total {total_efficiency:.1%}, absorbed "
                  "{absorbed_fraction:.1%} of accepted; far-field power / box flux "
                  "{far_field_over_flux:.4f}; "
                  "D {directivity_dbi:.2f} dBi, G {gain_dbi:.2f} dBi".format(**row), flush=True)
    whole = json.loads(DATA.read_text()) if DATA.exists() else {}
    previous = whole.pop("previous_devices", {})
    if whole and whole.get("device") != device_hash():  # a new STEP file: the old one's studies kept apart
        previous[whole["device"]] = whole
        whole = {}
    recorded = whole.get(record, {}) if record else whole
    runs = recorded.get("runs", {}) if not args.quick else {}
    for cell, (figures, rows) in table.items():
        runs[f"{cell * 1e3:g}"] = {
            "grid": [int(v) for v in figures["cells"]], "steps": int(figures["steps"]),
            "core_seconds": float(figures["cpu_seconds"]), "decayed": bool(figures["decayed"]),
            "resonances": rows,
        }
        if int(figures.get("resumed_from_step", 0)):
            runs[f"{cell * 1e3:g}"]["core_seconds_scaled_from_step"] = int(figures["resumed_from_step"])
    grids = sorted(runs, key=float, reverse=True)  # coarse to fine, cell sizes in mm
    derived = {"device": device_hash(), "cells_mm": [float(c) for c in grids], "lossless_cell_mm":
               LOSSLESS_CELL * 1e3, "lossless_balance": balance, "runs": {c: runs[c] for c in grids}}
    if len(grids) >= 3 and all(runs[c]["resonances"] for c in grids[-3:]):
        # the finest grid's deepest resonance, followed to the nearest resonance of each coarser grid
        deepest = min(runs[grids[-1]]["resonances"], key=lambda row: row["s11_db"])["resonance_ghz"]
        tracked = [min((row["resonance_ghz"] for row in runs[c]["resonances"]),
                       key=lambda frequency: abs(frequency - deepest)) for c in grids]
        extrapolated, order = richardson([float(c) for c in grids[-3:]], tracked[-3:])
        found = not math.isnan(extrapolated)
        derived.update(tracked_resonance_ghz=tracked, resonance_extrapolated_ghz=extrapolated, order=order)
        print(f"the finest grid's deepest resonance on each recorded grid ({', '.join(grids)} mm): "
              f"{', '.join(f'{f:.4f}' for f in tracked)} GHz; from the three finest: "
              + (f"{extrapolated:.4f} GHz at zero cell (Richardson, order {order:.2f}); finest run "
                 f"{100 * (tracked[-1] / extrapolated - 1):+.2f} %" if found else
                 "no Richardson extrapolation (not monotone); spread of the three "
                 f"{100 * (max(tracked[-3:]) / min(tracked[-3:]) - 1):.2f} %"))
    others = {key: value for key, value in whole.items()  # the studies beside the staircased one
              if isinstance(value, dict) and "runs" in value and key != record}
    if record:  # the staircased bare-wire record stays as it was, the others go beside it
        derived = {**{key: value for key, value in whole.items() if key != record},
                   "device": device_hash(), record: derived}
    else:
        derived.update(others)
    if previous:
        derived["previous_devices"] = previous
    if not args.quick:  # the grids recorded are in the file: a partial study says so
        DATA.write_text(json.dumps(without_nan(derived), indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
