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
