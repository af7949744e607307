"""Execute every tutorial notebook at its small size (NOTEBOOK_SIZE=small), and check what it states.

A notebook that raises fails the test with the cell's error. Notebooks choose their problem size from the
environment variable NOTEBOOK_SIZE ("small" here, "full" when a user runs them).

Where a notebook's text states a number that its small size reproduces, a check cell appended to the
executed copy (the file is not changed) asserts it with the notebook's own variables:

- ``md_forcefield``: "in double precision the energies and forces agree with OpenMM's to round-off; in
  single precision the forces stay within about 1e-5 (relative RMS)": every energy term within 1e-8
  relative (of the largest term), float64 forces within 1e-8 and float32 forces within 3e-5 of OpenMM's
  Reference platform;
- ``md_water_npt``: "the first peak of g(r) sits at about 0.28 nm": within 0.02 nm;
- ``em_surrogate``: the patch area from fill fractions, "240 instead of 192 mm^2" (within 1 mm^2), and the
  held-out S11 error below the mean-of-training predictor's;
- ``em_fdtd_basics``: the FDTD field along the axis against the Hankel-function solution it plots (median
  amplitude ratio within 5 % of 1 beyond one wavelength from the source).
- ``em_antenna``: "the first deep |S11| dip near 7.5 GHz" of Sheen et al.'s patch antenna: within 4 % of
  7.5 GHz on the small (coarse) grid, which narrows the feed line and moves it by 0.4 mm; and "everything
  the port accepts is radiated": the far field's radiated power within 10 % of the port's accepted power
  at every pattern frequency.
- ``em_mie_scattering``: cross-sections from one TF/SF run against the Mie series: the cylinder's scattering
  within 1 % mean (TM and TE, 20 nm cells) and, at the small size (50 nm cells), the spheres' extinction
  within 4 % mean (the full size, 33 nm cells, reaches 1 %: ``tests/mindelec/test_tfsf.py``).
- ``em_transmission_lines``: the microstrip's full-wave eps_eff within 1 % of Kirschning-Jansen at every
  frequency of the sweep, the extrapolated quasi-TEM Z0 within 2 % of Hammerstad-Jensen, the coplanar
  waveguide within 2 % (Z0) and 1 % (eps_eff) of the conformal mapping, the through-line's |S11| below -30 dB.
- ``em_phone``: the "1 - |S11|^2 (mismatch limit)" it plots bounds the total efficiency with lossy media
  (energy conservation; within 2 % where the port accepts a fifth of the incident power or more, elsewhere
  both are round-off), the small recipe's "6 designs", and of the phone under the phantom, a 1 g SAR above
  the 10 g one and power absorbed both in the phantom and in the lossy phone.

The other notebooks state numbers only for their full size (metadynamics basins, learned-force-field
spreads) or none; they are only executed.

When ``MINDSCIENCE_EXECUTED_NOTEBOOKS`` names a folder (``make test`` sets ``build/notebooks``), each
executed notebook is saved there without the check cell, with the SHA-256 of its source in its metadata:
the documentation build (``docs/build.py``) shows those copies instead of executing the notebooks again.
"""

import hashlib
import os
from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))

CHECKS = {
    "md_forcefield": """
largest = max(abs(theirs) for _, _, theirs in rows)
for name, ours, theirs in rows:
    assert abs(ours - theirs) <= 1e-8 * largest, (name, ours, theirs)
assert rms_relative < 1e-8, rms_relative
assert rms_relative32 < 3e-5, rms_relative32
""",
    "md_water_npt": """
assert abs(peak - 0.28) <= 0.02, peak
""",
    "em_surrogate": """
assert abs(patch_area - 240.0) <= 1.0, patch_area
assert float(error_db) < float(baseline_db), (float(error_db), float(baseline_db))
""",
    "em_antenna": """
assert abs(resonance - 7.5e9) <= 0.04 * 7.5e9, resonance
efficiency = far.efficiency(feed["accepted_power"][::10])
assert ((efficiency - 1).abs() < 0.1).all(), efficiency  # lossless board: radiated = accepted
""",
    "em_mie_scattering": """
for error in cylinder_errors.values():
    assert error.mean() < 0.01, error
for error in sphere_errors.values():
    assert error.mean() < (0.04 if SMALL else 0.01), error
""",
    "em_transmission_lines": """
assert worst_eps_error < 0.01, eps_errors  # full-wave eps_eff within 1 % of Kirschning-Jansen
assert abs(z_extrapolated / z_static - 1) < 0.02, z_extrapolated
assert abs(z_cpw_extrapolated / z_cpw - 1) < 0.02 and abs(eps_cpw_extrapolated / eps_cpw - 1) < 0.01
assert float(s11_db.max()) < -30, s11_db
""",
    "em_phone": """
mismatch = np.interp(figures["far_frequencies"], frequencies, 1 - np.abs(s11) ** 2)
accepting = mismatch > 0.2
assert accepting.sum() >= 3, mismatch
total = figures["total_efficiency"]
assert (total <= 1.02 * mismatch)[accepting].all(), (total, mismatch)  # lossy media: radiated <= accepted
assert len(sweep_s11) == 6, len(sweep_s11)
assert exposure["sar_1g"] > exposure["sar_10g"] > 0, exposure["sar_1g"]
assert exposure["absorbed_phantom"] > 0.05 and exposure["absorbed_phone"] > 0.01, exposure  # lossy phone
""",
    "em_fdtd_basics": """
beyond = np.abs(x) > wavelength
ratio = np.median(np.abs(simulated[beyond]) / np.abs(exact[beyond]))
assert abs(ratio - 1) < 0.05, ratio
""",
}


def test_checks_name_existing_notebooks():
    assert set(CHECKS) <= {path.stem for path in NOTEBOOKS}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("NOTEBOOK_SIZE", "small")
    # the kernel's own inline backend (no display needed): the figures become outputs the docs show
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("NOTEBOOK_OUTPUT_DIR", str(tmp_path))
    notebook = nbformat.read(path, as_version=4)
    if path.stem in CHECKS:
        notebook.cells.append(nbformat.v4.new_code_cell(CHECKS[path.stem]))
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK_DIR)}}
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as error:
        pytest.fail(f"{path.name}: {error}")
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: {errors[0]['ename']}: {errors[0]['evalue']}"
    _keep_executed_copy(path, notebook)


def _keep_executed_copy(path, notebook):
    folder = os.environ.get("MINDSCIENCE_EXECUTED_NOTEBOOKS")
    if not folder:
        return
    if path.stem in CHECKS:
        notebook.cells.pop()
    notebook.metadata["source_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    os.makedirs(folder, exist_ok=True)
    nbformat.write(notebook, os.path.join(folder, path.name))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
    """Notebooks are stored stripped (the repository stays small and diffs stay readable); their outputs
    appear in the documentation site, which executes them (``docs/build.py``)."""
    notebook = nbformat.read(path, as_version=4)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, (path.name, index)
