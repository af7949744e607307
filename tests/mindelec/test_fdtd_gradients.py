"""Differentiability of mindelec.fdtd: gradients through whole runs against finite differences,
and memory that grows like sqrt(steps) thanks to time-segment checkpointing."""

import json
import os
import subprocess
import sys

import pytest
import torch

import mindelec as me
from common.geometry import Rectangle

fdtd = me.fdtd


def _design_simulation(permittivity, steps_frequency=3e11):
    waveform = fdtd.GaussianPulse(steps_frequency, 2e11)
    return fdtd.Simulation(
        size=(1.2e-3, 1.0e-3),
        cell_size=4e-5,
        boundary=fdtd.PML(6),
        dtype=torch.float64,
        sources=[fdtd.PointDipole((-3e-4, 0.0), "Ez", waveform)],
        design_regions=[
            fdtd.DesignRegion(center=(0.0, 0.0), size=(1.2e-4, 1.2e-4), permittivity=permittivity)
        ],
        monitors=[
            fdtd.FieldProbe("probe", (3.2e-4, 4e-5), ("Ez", "Hy")),
            fdtd.DFTMonitor("dft", [2.5e11, 3.5e11], ("Ez",), center=(2.8e-4, 0.0), size=(8e-5, 8e-5)),
        ],
    )


def _objective(result):
    probe = result["probe"]
    return (
        (probe["Ez"] ** 2).sum() * 1e-6
        + (probe["Hy"] ** 2).sum() * 1e-1
        + result["dft"]["Ez"].abs().pow(2).sum()
    )


def test_design_region_gradient_matches_finite_differences():
    shape = fdtd.Grid((1.2e-3, 1.0e-3), 4e-5).cell_counts((0.0, 0.0), (1.2e-4, 1.2e-4))
    generator = torch.Generator().manual_seed(0)
    base = 2.0 + torch.rand(shape, generator=generator, dtype=torch.float64)
    permittivity = base.clone().requires_grad_()
    objective = _objective(_design_simulation(permittivity).run(steps=160, progress=False))
    (gradient,) = torch.autograd.grad(objective, permittivity)
    assert gradient.abs().max() > 0
    step = 1e-5
    for cell in [(0, 0), (1, 2), (shape[0] - 1, shape[1] - 1)]:
        values = []
        for sign in (1, -1):
            shifted = base.clone()
            shifted[cell] += sign * step
            with torch.no_grad():
                values.append(float(_objective(_design_simulation(shifted).run(steps=160, progress=False))))
        finite_difference = (values[0] - values[1]) / (2 * step)
        assert abs(float(gradient[cell]) - finite_difference) <= 1e-6 * abs(finite_difference), cell


def test_gradient_through_structure_medium_and_conductivity():
    permittivity = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    conductivity = torch.tensor(5.0, dtype=torch.float64, requires_grad=True)

    def objective(eps, sigma):
        sim = fdtd.Simulation(
            size=(1.2e-3, 1.0e-3),
            cell_size=4e-5,
            boundary=fdtd.PML(6),
            dtype=torch.float64,
            structures=[
                fdtd.Structure(
                    Rectangle((-1e-4, -2e-4), (1.5e-4, 2e-4)),
                    fdtd.Medium(permittivity=eps, conductivity=sigma),
                )
            ],
            sources=[fdtd.PointDipole((-3e-4, 0.0), "Ez", fdtd.GaussianPulse(3e11, 2e11))],
            monitors=[fdtd.FieldProbe("probe", (3.2e-4, 0.0), ("Ez",))],
        )
        return (sim.run(steps=150, progress=False)["probe"]["Ez"] ** 2).sum()

    gradients = torch.autograd.grad(objective(permittivity, conductivity), (permittivity, conductivity))
    for index, gradient in enumerate(gradients):
        step = 1e-5
        values = []
        for sign in (1, -1):
            arguments = [permittivity.detach().clone(), conductivity.detach().clone()]
            arguments[index] += sign * step
            with torch.no_grad():
                values.append(float(objective(*arguments)))
        finite_difference = (values[0] - values[1]) / (2 * step)
        assert abs(float(gradient) - finite_difference) <= 1e-3 * abs(finite_difference)


_MEMORY_SCRIPT = r"""
import json, sys, torch
import mindelec as me
fdtd = me.fdtd
def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
cells, steps = int(sys.argv[1]), int(sys.argv[2])
size = (cells * 1e-5, cells * 1e-5)
shape = fdtd.Grid(size, 1e-5).cell_counts((0.0, 0.0), (2e-4, 2e-4))
permittivity = torch.full(shape, 2.0, dtype=torch.float64, requires_grad=True)
sim = fdtd.Simulation(size=size, cell_size=1e-5, boundary=fdtd.PML(10), dtype=torch.float64,
                      sources=[fdtd.PointDipole((-2e-4, 0.0), "Ez", fdtd.GaussianPulse(3e12, 2e12))],
                      design_regions=[fdtd.DesignRegion((0.0, 0.0), (2e-4, 2e-4), permittivity)],
                      monitors=[fdtd.FieldProbe("p", (2e-4, 0.0), ("Ez",))])
baseline = rss("VmRSS:")
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
loss = (sim.run(steps=steps, progress=False)["p"]["Ez"] ** 2).sum()
loss.backward()
print(json.dumps({"peak": rss("VmHWM:") - baseline, "field_bytes": cells * cells * 8}))
"""


def _peak_memory(cells, steps):
    environment = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="16384")
    output = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, str(cells), str(steps)],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc peak-RSS reset")
def test_differentiable_run_memory_grows_like_sqrt_steps():
    """Peak memory (RSS above the pre-run baseline, forward + backward) of a differentiable 2D run.

    Measured (96 x 96 cells, float64, 2 cores): 500 steps -> about 60 MB, 2,000 steps -> about 75 MB; plain
    autograd would keep at least two full-grid curl differences per step (2,000 x 2 x 74 kB = 295 MB).
    """
    short, long = _peak_memory(96, 500), _peak_memory(96, 2000)
    # sqrt growth predicts at most a ratio of 2 between 4x the steps; linear growth 4
    assert long["peak"] < 2.5 * short["peak"], (short, long)
    linear_lower_bound = 2000 * 2 * long["field_bytes"]
    assert long["peak"] < 0.5 * linear_lower_bound, (long, linear_lower_bound)
