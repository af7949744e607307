"""The Python examples of the README and of the user guide (``docs/guide/*.md``) run as written, and give
what the text says they give (a block that appears in both runs once; illustrative fragments in the guide
use the ``{code-block}`` directive and are not run).

Each example runs in a fresh interpreter; after it, a check keyed by a string the example contains asserts
the shapes, units and numbers the README states for it, against something independent where there is one:

- autodiff tour: the shapes in its comments, unit normals, and the Laplacian against nested autograd;
- PDE tour: "relative L2 error, about 1e-5" (asserted below 1e-4, a factor 10 of slack);
- FDTD tour: the probe series matches ``result.times``, and ``dipole.h5`` read back with h5py holds it;
- MD tour: "(N, 3)" with N = 3 x 216 and the force field "reproduces OpenMM's energies" (OpenMM's
  Reference platform, same positions and box, within 1e-4 relative);
- learned-potential tour: the ASE calculator's forces (eV/Angstrom) are the model's kJ/mol/nm forces
  converted with ``ase.units``, and the energy is a 0-d tensor.

The README's other figures (PINN errors, benchmark ratios) come from full-size runs of ``benchmarks/`` and
are not reproduced here.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
GUIDES = sorted((README.parent / "docs" / "guide").glob("*.md"))
BLOCKS = list(dict.fromkeys(
    block
    for path in [README, *GUIDES]
    for block in re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
))

# key (a string the example contains) -> statements run after it, in the same interpreter
CHECKS = {
    "MultiScaleMLP(2, 1": """
assert points.shape == (1000, 2) and u.shape == (1000, 1) and laplacian.shape == (1000,)
assert boundary.shape == (200, 2)
assert torch.allclose(normals.norm(dim=1), torch.ones(200, dtype=normals.dtype))
(gradient,) = torch.autograd.grad(model(points).sum(), points, create_graph=True)
nested = sum(torch.autograd.grad(gradient[:, a].sum(), points, retain_graph=True)[0][:, a] for a in range(2))
assert torch.allclose(laplacian, nested, rtol=1e-4, atol=1e-5)
""",
    "pde.Trainer(problem": """
error = float(pde.relative_l2(model(x)[:, 0], torch.sin(math.pi * x[:, 0])))
print("README_CHECK relative L2", error)
assert error < 1e-4, f"README says about 1e-5, got {error}"
""",
    "me.fdtd.PointDipole": """
import h5py
import numpy as np
series = result["p"]["Ez"]
assert series.shape == result.times.shape and series.abs().max() > 0
with h5py.File("dipole.h5", "r") as handle:
    assert np.array_equal(handle["p/Ez"][()], series.numpy())
    assert np.array_equal(handle["times"][()], result.times.numpy()) and handle.attrs["dt"] == sim.dt
""",
    "ms.build.water_box(n_molecules=216": """
import openmm
import torch
assert system.positions.shape == (648, 3) and forces.shape == (648, 3) and system.box.shape == (3, 3)
positions = system.positions.detach().double()
box = system.box.detach().double()
ours = float(sum(value for value in forcefield.to(torch.float64).energy_terms(positions, box).values()))
reference_platform = openmm.Platform.getPlatformByName("Reference")
context = openmm.Context(openmm_system, openmm.VerletIntegrator(0.001), reference_platform)
context.setPeriodicBoxVectors(*[openmm.Vec3(*row) for row in box.tolist()])
context.setPositions(positions.numpy())
reference = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
print("README_CHECK energy", ours, reference)
assert abs(ours - reference) <= 1e-4 * abs(reference), (ours, reference)
""",
    'ms.System.from_ase(molecule("CH3CH2OH"))': """
from ase import units
import numpy as np
assert energy.dim() == 0 and forces.shape == (9, 3)
kj_per_mol_nm = units.kJ / units.mol / units.nm
assert np.allclose(atoms.get_forces(), forces.detach().double().numpy() * kj_per_mol_nm, rtol=1e-4, atol=1e-6)
assert float(restraint(ethanol.positions)) >= 0
""",
    'molecule="smiles:O=C1C=CNC(=O)N1"': """
import ase.io
import numpy as np
from ase import units
assert sample["positions"].shape == (12, 3)
assert sorted(sample["atomic_numbers"].tolist()) == [1] * 4 + [6] * 4 + [7] * 2 + [8] * 2
assert water["forces"].shape == (3, 3) and water["atomic_numbers"].tolist() == [8, 1, 1]
atoms = ase.io.read("uracil.extxyz")   # ASE's own reader, eV/Angstrom
kj_per_mol_nm = units.kJ / units.mol / units.nm
assert np.allclose(atoms.get_forces() / kj_per_mol_nm, sample["forces"], rtol=1e-6, atol=1e-3)
assert np.allclose(read_labels("uracil.extxyz")["forces"][0], sample["forces"], atol=1e-3)
""",
}
CHECKED = [next((key for key in CHECKS if key in block), None) for block in BLOCKS]


def test_readme_has_examples():
    assert len(BLOCKS) >= 3


def test_every_readme_example_has_its_statements_checked():
    assert all(CHECKED), f"README examples without a check in tests/test_readme.py: {CHECKED}"


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs_and_gives_what_it_says(index, tmp_path):
    environment = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(README.parent))
    code = BLOCKS[index] + "\n# ---- README checks (tests/test_readme.py)\n" + CHECKS.get(CHECKED[index], "")
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=environment,
        capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, f"README example {index} failed:\n{code}\n{completed.stderr}"
