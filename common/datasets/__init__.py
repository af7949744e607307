"""Dataset generation from recipes: resumable, on one machine or a Dask cluster, with provenance.

A recipe (``datasets/<name>.toml``, see :mod:`common.datasets.recipe`) names a generator
``fn(params: dict, seed: int, **options) -> dict[str, array]``, the parameter space and its
sampling, and the output HDF5 file. :func:`generate` runs every sample through
:func:`common.parallel.run_jobs` and appends each finished one to the file (see
:mod:`common.datasets.runner` for the layout); a killed run started again continues.

From the command line::

    python -m common.datasets generate datasets/oscillator_small.toml --workers 2
    python -m common.datasets generate RECIPE --scheduler tcp://host:8786   # on a Dask cluster
    python -m common.datasets validate RECIPE                             # check only
    python -m common.datasets generate RECIPE --retry-failed              # rerun the failed samples

Recipes are trusted code: the ``[generator] function`` is imported (its module's import-time
code runs) when the recipe is loaded or validated, and is run on every worker. Exit status
of ``generate``: 0 complete, 1 samples failed (listed), 2 refused before running, 3 samples
could not run because of their workers (see :mod:`common.datasets.__main__`).

From Python (in a script, under ``if __name__ == "__main__":``: the worker processes import the
script, and a call at its top level would start generating again in each of them; ``generate``
refuses to run there):

    >>> from common import datasets                                           # doctest: +SKIP
    >>> summary = datasets.generate("datasets/oscillator_small.toml", workers=2)  # doctest: +SKIP
    >>> print(summary)                                                        # doctest: +SKIP
    >>> table = datasets.read_dataset("oscillator_small.h5")  # by sample_id    # doctest: +SKIP
"""

from common.datasets.recipe import (
    Parameter,
    Recipe,
    Sampling,
    load_recipe,
    loads_recipe,
    sample_parameters,
    sample_seed,
)
from common.datasets.runner import GenerationSummary, generate, read_dataset

__all__ = [
    "Recipe",
    "Parameter",
    "Sampling",
    "load_recipe",
    "loads_recipe",
    "sample_parameters",
    "sample_seed",
    "generate",
    "read_dataset",
    "GenerationSummary",
]
