"""The README's Python examples run as written (so the tour stays true)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path):
    environment = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(README.parent))
    completed = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]], cwd=tmp_path, env=environment,
        capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, f"README example {index} failed:\n{BLOCKS[index]}\n{completed.stderr}"
