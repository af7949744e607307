"""RDF throughput: ``mindsponge.analysis.rdf`` against MDAnalysis' ``InterRDF`` on the same frames.

A synthetic periodic "liquid" (uniformly random oxygen positions in a cubic box, new positions
every frame) held in memory; both compute the O-O g(r) up to 0.9 nm in 90 bins, excluding
self pairs. The two results are checked to agree, each is timed best of a few rounds (the
machine is shared: the load average is printed), and the ratio of frames per second
mindsponge / MDAnalysis is printed last.

Usage::

    .venv/bin/python benchmarks/analysis_rdf.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer atoms and frames")
    arguments = parser.parse_args()
    import MDAnalysis as mda
    from MDAnalysis.analysis.rdf import InterRDF

    from mindsponge import analysis

    torch.set_num_threads(2)
    n_atoms, n_frames, edge = (300, 10, 2.0) if arguments.quick else (1000, 40, 3.1)  # O atoms, frames, nm
    rng = np.random.default_rng(0)
    positions = rng.uniform(0.0, edge, size=(n_frames, n_atoms, 3))
    boxes = torch.eye(3, dtype=torch.float64).expand(n_frames, 3, 3) * edge
    universe = mda.Universe.empty(n_atoms, trajectory=True)
    universe.load_new((positions * 10).astype(np.float32), dimensions=[edge * 10] * 3 + [90.0] * 3)
    positions = torch.from_numpy(positions)

    def ours():
        return analysis.rdf(
            positions, boxes, torch.arange(n_atoms), torch.arange(n_atoms), r_max=0.9, bins=90
        )

    def theirs():
        return InterRDF(
            universe.atoms, universe.atoms, nbins=90, range=(0.0, 9.0), exclusion_block=(1, 1)
        ).run()

    _, g = ours()
    reference = theirs().results.rdf
    print(f"largest |g - g_MDAnalysis| = {np.abs(g.numpy() - reference).max():.2e}")

    def best(function, rounds=3):
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            function()
            times.append(time.perf_counter() - start)
        return min(times)

    ours_time, theirs_time = best(ours), best(theirs)
    print(f"{n_atoms} atoms, {n_frames} frames, load average {os.getloadavg()[0]:.1f}")
    print(f"mindsponge.analysis.rdf: {n_frames / ours_time:.1f} frames/s")
    print(f"MDAnalysis InterRDF:     {n_frames / theirs_time:.1f} frames/s")
    print(f"ratio mindsponge/MDAnalysis frames per second: {theirs_time / ours_time:.2f}")


if __name__ == "__main__":
    main()
