"""Execute every tutorial notebook at its small size (NOTEBOOK_SIZE=small).

A notebook that raises fails the test with the cell's error. Notebooks choose their
problem size from the environment variable NOTEBOOK_SIZE ("small" here, "full" when
a user runs them).
"""

from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("NOTEBOOK_SIZE", "small")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("NOTEBOOK_OUTPUT_DIR", str(tmp_path))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK_DIR)}}
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: {errors[0]['ename']}: {errors[0]['evalue']}"
