"""SAR of the reference phone in a flat phantom of head liquid: 1 g and 10 g, and where its power goes.

The device is the reference phone of ``benchmarks/phone_antenna.py`` (``mindelec/examples/phone.step``,
its lossy media, fed at its inverted-F antenna's feed by a 50 ohm lumped port), its display towards a flat
phantom (``mindelec.phone.PhantomPlacement``: IEEE 1528 / IEC 62209 head liquid at the run's frequency in
a 2 mm shell, reaching 30 mm beyond the phone's outline, 60 mm deep), 5 mm from the display glass to the
shell (up to a cell more on the grid: the liquid's faces sit on node planes). One run per frequency and
cell size (10 PML cells, 15 mm of air, float32, one thread, until the field energy decays by 1e-5 or 40 ns)
gives, at that frequency (``mindelec.phone.phone_sar``):

* the peak spatial-average SAR over 1 g and 10 g cubes, per watt accepted at the feed and per watt
  incident (a 50 ohm transmitter's conducted power: ``(1 - |S11|^2)`` times the former);
* where the accepted power goes: radiated (the flux out of the near-to-far box around phone and phantom),
  absorbed in the phantom (``sigma |E|^2 / 2`` summed over its cells) and lost in the phone (the rest).

Check: the same set-up with every medium of the phone lossless at 1.5 mm, where radiated + absorbed in the
phantom must equal the accepted power (two independent integrals: a surface flux and a volume sum).

There is no peer solver here: the SAR machinery is validated against the standards' reference dipoles in
``benchmarks/sar_dipole.py`` (within 2.6 % at 900 MHz and 6.0 % at 1800 MHz). The phone's own figures are
not converged (see ``benchmarks/phone_antenna.py``): the 1.5 and 1.0 mm grids draw the antenna's 1 mm
strips as wires.

Runs are cached under ``benchmarks/output/phone_sar/`` per frequency, cell size and STEP file; the derived
figures go to ``benchmarks/data/phone_sar.json``; the ratio printed last is the lossless power balance.

    python benchmarks/phone_sar.py [--cells 1.5 1.0] [--frequencies 1.8 2.1]   # GHz
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import numpy as np
import torch
from phone_antenna import ALIGN, device_hash

from mindelec import phone

OUTPUT = pathlib.Path(__file__).parent / "output" / "phone_sar"
DATA = pathlib.Path(__file__).parent / "data" / "phone_sar.json"
FREQUENCIES = (1.8e9, 2.1e9)  # the DCS / upper band, where the phone's inverted-F antenna works
CELLS = (1.5e-3,)
BALANCE_CELL = 1.5e-3
SPACING = 5e-3
BAND = (1.0e9, 3.0e9)


def run_case(frequency, cell, lossless=False):
    """One run at ``frequency`` (Hz) on ``cell`` (m), cached: :func:`mindelec.phone.phone_sar`'s figures,
    ``steps``, ``cells`` and ``core_seconds``."""
    kind = "lossless_" if lossless else ""
    path = OUTPUT / f"{kind}f{frequency / 1e6:.0f}MHz_cell_{cell * 1e6:.0f}um_{device_hash()}.json"
    if path.exists():
        return json.loads(path.read_text())
    model = phone.phone_simulation(None, cell, lossless, align=ALIGN, band=BAND,
                                   phantom=phone.PhantomPlacement(frequency, spacing=SPACING))
    start = time.process_time()
    result = model.simulation.run(until=40e-9, until_decayed=1e-5, progress=False)
    figures = phone.phone_sar(model, result)
    del figures["local_sar"], figures["origin"]  # the map: not kept
    figures["s11"] = [figures["s11"].real, figures["s11"].imag]
    figures.update(steps=int(result.steps), cells=[int(n) for n in model.simulation.grid.shape],
                   core_seconds=time.process_time() - start, spacing_mm=model.drawn["phantom_spacing"])
    OUTPUT.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, default=float))
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=float, nargs="+", help="cell sizes in mm (divisors of 3 mm)")
    parser.add_argument("--frequencies", type=float, nargs="+", help="GHz, within 0.3-6")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cells = tuple(c * 1e-3 for c in args.cells) if args.cells else CELLS
    frequencies = tuple(f * 1e9 for f in args.frequencies) if args.frequencies else FREQUENCIES
    balance = run_case(max(frequencies), BALANCE_CELL, lossless=True)
    imbalance = balance["absorbed_phone"]
    print(f"lossless phone, {BALANCE_CELL * 1e3:g} mm, {max(frequencies) / 1e9:g} GHz: radiated "
          f"{balance['radiated']:.1%} + absorbed in the phantom {balance['absorbed_phantom']:.1%} of the "
          f"accepted power (1 - their sum: {imbalance:+.2%})", flush=True)
    derived = {"device": device_hash(), "spacing_asked_mm": SPACING * 1e3, "lossless": balance, "runs": []}
    for cell in cells:
        for frequency in frequencies:
            figures = run_case(frequency, cell)
            derived["runs"].append(dict(figures, cell_mm=cell * 1e3))
            s11 = 20 * np.log10(abs(complex(*figures["s11"])))
            print(f"{cell * 1e3:g} mm {tuple(figures['cells'])}, {frequency / 1e9:g} GHz, spacing "
                  f"{figures['spacing_mm']:.1f} mm, {figures['steps']} steps, {figures['core_seconds']:.0f} "
                  f"core-s: S11 {s11:.1f} dB; SAR 1 g {figures['sar_1g']:.2f}, 10 g {figures['sar_10g']:.2f} "
                  f"W/kg per W accepted ({figures['sar_1g_incident']:.2f}, {figures['sar_10g_incident']:.2f} "
                  f"per W incident); radiated {figures['radiated']:.1%}, phantom "
                  f"{figures['absorbed_phantom']:.1%}, phone {figures['absorbed_phone']:.1%} of accepted",
                  flush=True)
    DATA.write_text(json.dumps(derived, indent=1, default=float) + "\n")
    print(f"ratio (radiated + absorbed in the phantom) / accepted, lossless phone: {1 - imbalance:.4f}")


if __name__ == "__main__":
    main()
