"""Sphinx configuration of the documentation site (built by ``make docs``: ``docs/build.py`` writes the
generated pages into ``docs/_generated`` and then runs Sphinx with warnings treated as errors)."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MINDSCIENCE_PROGRESS", "0")

project = "mindscience-torch"
author = "the mindscience-torch developers"
copyright = "2026, the mindscience-torch developers"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]

# The notebooks are executed once, by docs/build.py (or by the test suite, whose executed copies it reuses),
# at their small size; Sphinx only renders them.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_inherit_docstrings = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
html_theme = "furo"
html_title = "mindscience-torch"
html_static_path = []
suppress_warnings = ["myst.header"]
