"""S-parameter surrogate inference against the FDTD run it replaces.

Usage: ``.venv/bin/python benchmarks/em_surrogate.py [--quick]``

Times, in the same process:

* the FDTD: ``mindelec.sweeps.sparameter_sample`` for one design of the waveguide block (the device run;
  the reference run is cached, as in a sweep), default 1 mm cells (``--quick``: 2 mm);
* the surrogate: ``SParameterSurrogate.predict`` (default size, 128 x 4 MLP evaluated at every frequency)
  for one design, and per design in a batch of 256 designs.

The surrogate's cost does not depend on its training, so it is fitted briefly on analytic data
(``sweeps.block_s_parameters``) only to have realistic weights. The speed-up ratios are printed last.
"""

import argparse
import time

import numpy as np
import torch

from mindelec import surrogate, sweeps


def best_time(function, repeats):
    """Smallest wall time (s) of ``repeats`` calls after one warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="coarse FDTD grid, fewer repeats")
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    options = {"n_frequencies": 26}
    if arguments.quick:
        options.update(cell_size=2e-3, guide_length=160e-3, port_offset=45e-3, pml=10)
    setup = sweeps.WaveguideSetup(**options)
    design = {"length": 15e-3, "permittivity": 3.0}
    fdtd_seconds = best_time(
        lambda: sweeps.sparameter_sample(design, seed=0, **options), 1 if arguments.quick else 2
    )

    frequencies = setup.frequencies
    model = surrogate.SParameterSurrogate(["length", "permittivity"], frequencies)
    generator = np.random.default_rng(0)
    parameters = np.stack([generator.uniform(4e-3, 30e-3, 32), generator.uniform(1.5, 4.5, 32)], 1)
    s = torch.as_tensor(
        np.stack(
            [np.stack(sweeps.block_s_parameters(frequencies.numpy(), *row, setup), -1) for row in parameters]
        )
    )
    model.set_normalization(torch.as_tensor(parameters), s)
    surrogate.fit(
        model, torch.as_tensor(parameters).float(), model.encode_targets(s), epochs=20, progress=False
    )
    single = torch.tensor([[15e-3, 3.0]])
    batch = torch.as_tensor(generator.uniform([4e-3, 1.5], [30e-3, 4.5], (256, 2))).float()
    repeats = 20 if arguments.quick else 100
    with torch.no_grad():
        single_seconds = best_time(lambda: model.predict(single), repeats)
        batch_seconds = best_time(lambda: model.predict(batch), max(1, repeats // 10)) / len(batch)

    print(
        f"FDTD grid {setup.guide_length / setup.cell_size:.0f} x {setup.height / setup.cell_size:.0f} "
        "cells, "
        f"{len(frequencies)} frequencies; 1 thread"
    )
    print(f"FDTD, one design:                 {fdtd_seconds * 1e3:10.1f} ms")
    print(f"surrogate, one design:            {single_seconds * 1e3:10.3f} ms")
    print(f"surrogate, per design (256 batch): {batch_seconds * 1e3:9.4f} ms")
    print(
        f"speed-up over FDTD: {fdtd_seconds / single_seconds:,.0f}x (one design), "
        f"{fdtd_seconds / batch_seconds:,.0f}x (batched)"
    )


if __name__ == "__main__":
    main()
