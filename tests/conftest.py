"""Fixtures shared by every test package."""

import os

import pytest


@pytest.fixture(scope="session")
def require_compiled():
    """``require_compiled(load)``: the compiled kernels that ``load()`` returns (a ``*._kernels`` loader).

    Skips the test when ``MINDSCIENCE_NO_EXTENSIONS=1`` (the kernels are disabled on purpose) and fails
    it when they do not build here (the ExtensionWarning names the reason).
    """

    def require(load):
        if os.environ.get("MINDSCIENCE_NO_EXTENSIONS") == "1":
            pytest.skip("MINDSCIENCE_NO_EXTENSIONS=1")
        module = load()
        assert module is not None, f"{load.__module__}.{load.__name__}: the compiled kernels failed to build"
        return module

    return require


@pytest.fixture
def validation_figure(request):
    """``validation_figure(text)``: store the figure a validation test measured (e.g. ``"max |dR| = 2.1e-3"``)
    for the documentation's validation record (``tests/validation_record.py``).

    Written as one JSON line per call to ``$MINDSCIENCE_VALIDATION_RECORD/<worker>.jsonl`` when that
    variable is set (``make test`` sets it to ``build/validation``); otherwise nothing is written.
    """
    import json

    folder = os.environ.get("MINDSCIENCE_VALIDATION_RECORD")
    path, _, name = request.node.nodeid.partition("::")
    test = f"{path}::{name.split('[')[0]}"

    def record(text):
        if folder:
            os.makedirs(folder, exist_ok=True)
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            with open(os.path.join(folder, f"{worker}.jsonl"), "a") as handle:
                entry = {"test": test, "case": request.node.nodeid, "measured": str(text)}
                handle.write(json.dumps(entry) + "\n")

    return record


def pytest_collection_modifyitems(config, items):
    """Run the long tests first: the notebooks, then every other ``slow`` test, then the rest.

    ``make test`` runs ``pytest -n 2 --dist worksteal``: each worker takes half of the tests in collection
    order, and a worker that runs out steals the back half of the other's queue. Collected first, the long
    tests start early and the short ones at the back are what moves between workers, so the run does not
    end waiting on one long notebook (collected last, the phone notebook started in the last ten minutes
    with one worker idle). The sort is stable: each module's tests stay together and in their order.
    """

    def rank(item):
        if item.path.name == "test_notebooks.py":
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)
