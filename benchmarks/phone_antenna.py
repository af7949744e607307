"""The reference phone's antenna from its CAD file: S11, efficiencies, pattern, gain and their convergence.

The device is ``mindelec/examples/phone.step`` (the default ``mindelec.cad_phone.PhoneDesign``: a 72 x 144 x
8.7 mm candy bar, an inverted-F antenna of 30 mm over a 10 mm clearance, the metal frame with its two gaps),
its media from ``phone_materials.toml`` (lossy housing, glass, FR4 and a lossy battery block), loaded with
``mindelec.cad_assembly.load_step`` and moved by less than 1.5 mm so that the feed pin's foot (on the
ground copper, at the ground plane's edge) lies on a node of every grid used (a multiple of 3 mm). The feed
is a 50 ohm ``LumpedPort`` across one cell between the copper and the feed pin (the CAD's 0.5 mm feed gap
becomes one cell: the port needs a whole Yee edge), the pin a PEC wire from there to the arm.

One run per cell size (uniform cells, 10 PML cells, 15 mm of air around the phone, float32, one thread,
``until_decayed=1e-5``) gives:

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
and 1 mm sheets on the finer ones, so only the finer grids share one model of them. Cost: the CPU
seconds of each FDTD run (update coefficients and steps, one thread); loading the STEP file and
building the structures come on top.

Results are cached per cell size and STEP file (its hash in the name) under
``benchmarks/output/phone_antenna/`` (a killed run resumes at the next cell size); the derived figures
are written to ``benchmarks/data/phone_antenna.json``.

    python benchmarks/phone_antenna.py [--quick] [--cells 1.5 1.0 0.75 0.6]   # --quick: 1.5 mm cells only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import pathlib
import time

import numpy as np
import tomllib
import torch

import mindelec as me
from mindelec import cad, cad_assembly, cad_phone

fdtd = me.fdtd
OUTPUT = pathlib.Path(__file__).parent / "output" / "phone_antenna"
DATA = pathlib.Path(__file__).parent / "data" / "phone_antenna.json"
ALIGN = 3e-3  # the feed lands on a multiple of this (m): a node for every cell size that divides it
AIR, PML = 15e-3, 10  # air around the phone (m), PML thickness (cells)
BAND = (0.5e9, 3.5e9)
PORT_FREQUENCIES = np.linspace(*BAND, 151)
FAR_FREQUENCIES = np.arange(0.6e9, 3.41e9, 0.1e9)
CELLS = (1.5e-3, 1.0e-3, 0.75e-3, 0.6e-3)
QUICK_CELLS = (1.5e-3,)
HOUSING_WALL = 1e-3  # the tray's wall of mindelec.cad_phone.build_phone (m)


def materials(lossless=False):
    """The phone's materials table (a dict), with every conductivity removed when ``lossless``."""
    table = tomllib.loads(cad_phone.EXAMPLE_MATERIALS.read_text())["materials"]
    if lossless:
        table = {
            name: {k: v for k, v in spec.items() if k != "conductivity"} if isinstance(spec, dict) else spec
            for name, spec in table.items()
        }
    return table


def box_geometries(assembly, structures):
    """The structures with their CAD meshes replaced by the same shapes as boxes and box CSG.

    Rasterising a triangle mesh (a parity test per sample point) takes minutes on a million-cell grid; the
    phone's bodies are boxes (volume equal to their bounding box's) and the housing a tray (its bounding
    box less a cavity open at the top, ``HOUSING_WALL`` thick). Sheets and wires stay as they are.
    """
    from common.geometry import Box

    replaced = []
    for structure in structures:
        if not isinstance(structure.geometry, cad.MeshGeometry):
            replaced.append(structure)
            continue
        body = assembly.body(structure.name)
        lo, hi = body.bounds
        if structure.name == "housing":
            wall = HOUSING_WALL
            cavity = Box(lo + [wall, wall, wall], hi + [-wall, -wall, 1.0])
            geometry = Box(lo, hi) - cavity
        else:
            if abs(body.volume - np.prod(hi - lo)) > 1e-6 * np.prod(hi - lo):
                raise ValueError(f"body {body.name!r} is not a box; it needs its own replacement here")
            geometry = Box(lo, hi)
        replaced.append(fdtd.Structure(geometry, structure.medium, name=structure.name))
    return replaced


def phone_simulation(cell, lossless=False):
    """The phone on a grid of ``cell`` (m): ``(simulation, port)``."""
    assembly = cad_assembly.load_step(cad_phone.EXAMPLE_STEP, tolerance=1e-4, materials=materials(lossless))
    pin, ground = assembly.body("ifa_feed_pin"), assembly.body("ground_plane")
    # the feed: under the pin's centre line, at the ground plane's edge (y) and on its copper (z)
    feed = np.array([pin.bounds.mean(0)[0], ground.bounds[1][1], ground.bounds.mean(0)[2]])
    assembly = assembly.translated(np.round(feed / ALIGN) * ALIGN - feed)
    foot = np.round(feed / ALIGN) * ALIGN
    lo = np.min([body.bounds[0] for body in assembly.bodies], axis=0)
    hi = np.max([body.bounds[1] for body in assembly.bodies], axis=0)
    half = np.maximum(np.abs(lo), np.abs(hi)) + AIR
    half = np.ceil(half / ALIGN) * ALIGN + PML * cell  # a multiple of 3 mm plus the PML: nodes on 3 mm
    size = tuple(float(v) for v in 2 * half)
    grid = fdtd.Grid(size, cell)
    arm = assembly.body("ifa_arm")
    top = round(arm.bounds.mean(0)[2] / cell) * cell  # the arm's node plane
    waveform = fdtd.GaussianPulse(f0=sum(BAND) / 2, fwidth=BAND[1] - BAND[0])
    port = fdtd.LumpedPort(
        "feed", center=(foot[0], foot[1], foot[2] + cell / 2), size=(cell,) * 3, waveform=waveform,
        frequencies=torch.as_tensor(PORT_FREQUENCIES),
    )
    feed_pin = fdtd.pec_sheet(
        center=(foot[0], foot[1], (foot[2] + cell + top) / 2), size=(0, 0, top - foot[2] - cell),
        cell_size=cell,
    )
    meshed = [s for s in assembly.structures(grid) if s.name != "ifa_feed_pin"]
    structures = box_geometries(assembly, meshed)
    box = [float(2 * (h - (PML + 2) * cell)) for h in half]
    far = fdtd.NearToFarMonitor("far", torch.as_tensor(FAR_FREQUENCIES), center=(0, 0, 0), size=box)
    sim = fdtd.Simulation(
        size=size, cell_size=cell, boundary=fdtd.PML(thickness=PML),
        structures=[*structures, feed_pin, port.resistor], sources=[port.source], monitors=[port, far],
        threads=1,
    )
    return sim, port


def resonances(frequencies, s11):
    """Frequencies (Hz) and |S11| (dB) of the local minima of |S11| below -6 dB, refined by a parabola."""
    decibels = 20 * np.log10(np.abs(s11))
    found = []
    for k in range(1, len(frequencies) - 1):
        if decibels[k] < min(decibels[k - 1], decibels[k + 1]) and decibels[k] < -6:
            a, b, c = decibels[k - 1 : k + 2]
            shift = 0.5 * (a - c) / (a - 2 * b + c)
            step = frequencies[1] - frequencies[0]
            found.append((frequencies[k] + shift * step, b - 0.25 * (a - c) * shift))
    return found


def run_case(cell, lossless=False):
    """One run, cached: a dict of arrays (port spectra, far-field figures per far frequency, cost)."""
    device = hashlib.sha256(cad_phone.EXAMPLE_STEP.read_bytes()).hexdigest()[:12]  # a new STEP: new runs
    path = OUTPUT / f"{'lossless_' if lossless else ''}cell_{cell * 1e6:.0f}um_{device}.npz"
    if path.exists():
        return dict(np.load(path))
    sim, port = phone_simulation(cell, lossless)
    start = time.process_time()
    wall = time.perf_counter()
    result = sim.run(until=40e-9, until_decayed=1e-5, progress=False)
    seconds, wall = time.process_time() - start, time.perf_counter() - wall
    feed, far = result["feed"], result["far"]
    accepted = feed["accepted_power"].numpy()
    figures = dict(
        frequencies=PORT_FREQUENCIES, s11=feed["s11"].numpy(), impedance=feed["impedance"].numpy(),
        accepted=accepted, incident=feed["incident_power"].numpy(), far_frequencies=FAR_FREQUENCIES,
        flux=far["flux"].double().numpy(), radiated=far.radiated_power.double().numpy(),
        directivity=far.directivity().double().numpy(),
        cells=np.array(sim.grid.shape), steps=np.array(result.steps), cpu_seconds=np.array(seconds),
        wall_seconds=np.array(wall),
    )
    OUTPUT.mkdir(parents=True, exist_ok=True)
    np.savez(path, **figures)
    return figures


def summary(figures):
    """The figures of merit at each resonance of one run (a list of dicts)."""
    rows = []
    far_s11 = np.interp(FAR_FREQUENCIES, PORT_FREQUENCIES, np.abs(figures["s11"]))
    for frequency, decibels in resonances(figures["frequencies"], figures["s11"]):
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1.5 mm cells only")
    parser.add_argument("--cells", type=float, nargs="+", help="cell sizes in mm (divisors of 3 mm)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cells = tuple(c * 1e-3 for c in args.cells) if args.cells else QUICK_CELLS if args.quick else CELLS
    lossless = summary(run_case(cells[0], lossless=True))
    balance = [abs(row["radiation_efficiency"] - 1) for row in lossless]
    print(f"lossless media, {cells[0] * 1e3:g} mm: box flux / accepted - 1 at the resonances: "
          + ", ".join(f"{b:.2%}" for b in balance), flush=True)
    table = {}
    for cell in cells:
        figures = run_case(cell)
        rows = summary(figures)
        table[cell] = (figures, rows)
        shape = tuple(int(n) for n in figures["cells"])
        print(f"{cell * 1e3:g} mm cells {shape}, {int(figures['steps'])} steps, "
              f"{float(figures['cpu_seconds']):.0f} core-s ({float(figures['wall_seconds']):.0f} s wall)")
        for row in rows:
            print("  resonance {resonance_ghz:.4f} GHz, S11 {s11_db:.1f} dB; at {far_ghz:.1f} GHz: "
                  "radiation "
                  "efficiency {radiation_efficiency:.1%}, total {total_efficiency:.1%}, absorbed "
                  "{absorbed_fraction:.1%} of accepted; far-field power / box flux "
                  "{far_field_over_flux:.4f}; "
                  "D {directivity_dbi:.2f} dBi, G {gain_dbi:.2f} dBi".format(**row), flush=True)
    derived = {"cells_mm": [c * 1e3 for c in cells], "lossless_balance": balance, "runs": {}}
    for cell, (figures, rows) in table.items():
        derived["runs"][f"{cell * 1e3:g}"] = {
            "grid": [int(v) for v in figures["cells"]], "steps": int(figures["steps"]),
            "core_seconds": float(figures["cpu_seconds"]), "resonances": rows,
        }
    finest = sorted(cells)[:3]
    if len(cells) >= 3 and all(table[c][1] for c in finest):
        # the finest grid's deepest resonance, followed to the nearest resonance of each coarser grid
        deepest = min(table[finest[0]][1], key=lambda row: row["s11_db"])["resonance_ghz"]
        tracked = [min((row["resonance_ghz"] for row in table[c][1]), key=lambda f: abs(f - deepest))
                   for c in sorted(cells, reverse=True)]
        extrapolated, order = richardson(finest[::-1], tracked[-3:])
        derived.update(tracked_resonance_ghz=tracked, resonance_extrapolated_ghz=extrapolated, order=order)
        sizes = ", ".join(f"{c * 1e3:g}" for c in sorted(cells, reverse=True))
        error = 100 * (tracked[-1] / extrapolated - 1)
        print(f"the finest grid's deepest resonance on each grid ({sizes} mm): "
              f"{', '.join(f'{f:.4f}' for f in tracked)} GHz; from the three finest: {extrapolated:.4f} "
              f"GHz at zero cell (Richardson, order {order:.2f}); finest run {error:+.2f} %")
    if not args.quick:  # the cells run are in the file: a partial study says so
        DATA.write_text(json.dumps(derived, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
