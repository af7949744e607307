"""Tests of the code provenance of datasets: the generator's imports and package versions are
fingerprinted, a resume with changed code is refused naming the change, and raising n extends a dataset."""

import hashlib
import json
import pathlib
import sys
import textwrap

import h5py
import numpy as np
import pytest
import torch
from scipy.stats import qmc

from common import config, datasets, io
from common.datasets.code_fingerprint import code_fingerprint
from common.datasets.recipe import resolve_function
from common.datasets.resuming import UncheckedImportsWarning

ROOT = pathlib.Path(__file__).resolve().parents[2]

GENERATOR = """\
import numpy as np

from {helper} import scale


def sample(params, seed):
    return {{"y": np.float64(scale(params["x"]))}}
"""

HELPER = """\
def scale(x):
    from common.checks import non_negative_int  # a lazy import of a project module

    non_negative_int(0, "unused")
    return {factor}x
"""


@pytest.fixture
def generator(tmp_path, monkeypatch):
    """A generator module importing a helper module beside it, in a folder on sys.path.

    The modules' names are unique per test (Python keeps imported modules in ``sys.modules``).
    Returns ``(folder, generator module name, helper module name)``.
    """
    folder = tmp_path / "generators"
    folder.mkdir()
    name, helper = f"gen_{tmp_path.name}", f"helper_{tmp_path.name}"
    (folder / f"{name}.py").write_text(GENERATOR.format(helper=helper))
    (folder / f"{helper}.py").write_text(HELPER.format(factor=""))
    monkeypatch.syspath_prepend(str(folder))
    yield folder, name, helper
    _reload(name, helper)


def _recipe(folder, function, n=8, method="random", name="data"):
    path = folder / f"{name}.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [generator]
            function = "{function}"

            [parameters]
            x = {{ low = 0.0, high = 1.0 }}

            [sampling]
            method = "{method}"
            n = {n}
            seed = 5

            [output]
            path = "{(folder / f"{name}.h5").as_posix()}"
            """
        )
    )
    return path


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _reload(*modules):
    """Forget imported modules, so that this process imports their changed files (as a new run would)."""
    for module in modules:
        sys.modules.pop(module, None)


def test_a_changed_helper_module_is_refused_naming_it_unless_allowed(tmp_path, generator):
    folder, name, helper = generator
    path = _recipe(tmp_path, f"{name}:sample")
    output = tmp_path / "data.h5"
    datasets.generate(path, workers=0, limit=4, progress=False)
    with h5py.File(output, "r") as file:
        files = json.loads(file.attrs["code_files"])
        versions = json.loads(file.attrs["package_versions"])
    assert files[f"{name}.py"] == _sha256(folder / f"{name}.py")
    assert files[f"{helper}.py"] == _sha256(folder / f"{helper}.py")  # the helper beside the generator
    for module in ("common/__init__.py", "common/checks.py", "common/errors.py"):  # lazy import, transitively
        assert files[module] == _sha256(ROOT / module)
    assert not [key for key in files if "numpy" in key or "torch" in key]  # other packages: by version
    assert versions["numpy"] == np.__version__ and versions["h5py"] == h5py.__version__
    assert versions["torch"] == str(torch.__version__)

    (folder / f"{helper}.py").write_text(HELPER.format(factor="1000 * "))  # y = x -> y = 1000 x
    _reload(name, helper)
    with pytest.raises(ValueError, match=f"other code of the generator {name}:sample") as raised:
        datasets.generate(path, workers=0, progress=False)
    message = str(raised.value)
    assert f"{helper}.py changed" in message and f"{name}.py" not in message  # names what changed
    assert str(output) in message and "--allow-changed-generator" in message
    assert len(io.read_table(output)["sample_id"]) == 4  # nothing was added

    summary = datasets.generate(path, workers=0, allow_changed_generator=True, progress=False)
    assert summary.succeeded == 4
    table = datasets.read_dataset(output)
    first, rest = table["sample_id"] < 4, table["sample_id"] >= 4
    np.testing.assert_array_equal(table["y"][first], table["x"][first])
    np.testing.assert_allclose(table["y"][rest], 1000 * table["x"][rest], rtol=1e-15)  # the mix is real
    runs = io.read_table(output, "runs")
    fingerprints = runs["generator_fingerprint"].tolist()
    assert fingerprints[0] == fingerprints[1] != fingerprints[2] == fingerprints[3]  # both, on record
    with h5py.File(output, "r") as file:
        assert file.attrs["generator_fingerprint"] == fingerprints[0]  # the file's own: the first code's
    assert runs["code_changes"].tolist() == ["", "", f"{helper}.py changed", f"{helper}.py changed"]


def test_a_changed_package_version_is_named_in_the_refusal(tmp_path, generator):
    _, name, _ = generator
    path = _recipe(tmp_path, f"{name}:sample", n=4)
    output = tmp_path / "data.h5"
    datasets.generate(path, workers=0, limit=2, progress=False)
    with h5py.File(output, "r+") as file:  # as if the file had been made with another numpy
        versions = json.loads(file.attrs["package_versions"])
        versions["numpy"] = "1.0.0"
        file.attrs["package_versions"] = json.dumps(versions)
    with pytest.raises(ValueError, match=f"numpy 1.0.0 -> {np.__version__}") as raised:
        datasets.generate(path, workers=0, progress=False)
    assert str(output) in str(raised.value)
    assert datasets.generate(path, workers=0, allow_changed_generator=True, progress=False).succeeded == 2


def _digest(content):
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def _legacy_file(output, recipe_path):
    """Make ``output`` look as if written before code fingerprints and before ``n`` left the recipe's
    fingerprint (attributes and ``runs`` columns as that version wrote them)."""
    recipe = datasets.load_recipe(recipe_path)
    content = {key: config.to_dict(recipe)[key] for key in ("generator", "parameters", "sampling")}
    for key in ("timeout", "retries", "allow_nonfinite"):  # not in that version's fingerprint
        del content["generator"][key]
    with h5py.File(output, "r+") as file:
        source = {
            "function": recipe.generator.function,
            "options": recipe.generator.options,
            "source_sha256": file.attrs["generator_source_sha256"],
        }
        file.attrs["generator_fingerprint"] = _digest(source)
        runs = file["runs/generator_fingerprint"]
        runs[:] = [_digest(source)] * len(runs)
        file.attrs["recipe_fingerprint"] = _digest(content)
        del file.attrs["code_files"], file.attrs["package_versions"]
        del file["runs/code_changes"], file["runs/n_samples"]


def test_a_file_written_before_code_fingerprints_resumes_with_a_warning(tmp_path, generator):
    folder, name, helper = generator
    path = _recipe(tmp_path, f"{name}:sample", n=4)
    output = tmp_path / "data.h5"
    datasets.generate(path, workers=0, limit=2, progress=False)
    _legacy_file(output, path)
    (folder / f"{helper}.py").write_text(HELPER.format(factor="1000 * "))  # not seen in such a file
    _reload(name, helper)
    path.write_text(path.read_text().replace("n = 4", "n = 6"))  # and its dataset extended
    with pytest.warns(UncheckedImportsWarning, match="not the modules it imports") as warned:
        summary = datasets.generate(path, workers=0, progress=False)
    assert str(output) in str(warned[0].message) and name in str(warned[0].message)
    assert (summary.already_done, summary.succeeded) == (2, 4)
    runs = io.read_table(output, "runs")
    assert "code_changes" not in runs and len(set(runs["generator_fingerprint"])) == 1  # same module

    (folder / f"{name}.py").write_text(GENERATOR.format(helper=helper) + "\n# edited\n")  # this is checked
    _reload(name, helper)
    assert datasets.generate(path, workers=0, progress=False).succeeded == 0  # finished: nothing to mix
    path.write_text(path.read_text().replace("n = 6", "n = 8"))  # more samples would mix the two codes
    with pytest.raises(ValueError, match=rf"{name}\.py changed \(sha256"):
        datasets.generate(path, workers=0, progress=False)


@pytest.mark.parametrize("method", ["random", "sobol"])
def test_raising_n_extends_the_dataset_keeping_its_first_samples(tmp_path, generator, method):
    _, name, _ = generator
    path = _recipe(tmp_path, f"{name}:sample", n=8, method=method)
    output = tmp_path / "data.h5"
    datasets.generate(path, workers=0, progress=False)
    before = datasets.read_dataset(output)
    path.write_text(path.read_text().replace("n = 8", "n = 16"))
    summary = datasets.generate(path, workers=0, progress=False)
    assert (summary.already_done, summary.succeeded, summary.requested) == (8, 8, 16)
    table = datasets.read_dataset(output)
    assert table["sample_id"].tolist() == list(range(16))
    for key, column in before.items():  # the first eight rows are the same samples, untouched
        np.testing.assert_array_equal(table[key][:8], column)
    if method == "sobol":  # the sampling's own definition, outside the code under test
        unit = qmc.Sobol(1, scramble=True, rng=5).random(16)[:, 0]
    else:
        seeded = torch.Generator().manual_seed(5)
        unit = torch.rand(16, 1, generator=seeded, dtype=torch.float64)[:, 0].numpy()
    np.testing.assert_allclose(table["x"], unit, rtol=1e-15)
    assert io.read_table(output, "runs")["n_samples"].tolist() == [8, 8, 16, 16]

    path.write_text(path.read_text().replace("n = 16", "n = 12"))  # fewer than the file holds
    with pytest.raises(config.ConfigError, match="already holds sample 15") as raised:
        datasets.generate(path, workers=0, progress=False)
    assert raised.value.line == path.read_text().splitlines().index("n = 12") + 1  # the recipe's n
    assert str(path) in str(raised.value)


def test_raising_n_of_a_latin_hypercube_is_refused(tmp_path, generator):
    _, name, _ = generator
    path = _recipe(tmp_path, f"{name}:sample", n=6, method="lhs")
    datasets.generate(path, workers=0, limit=3, progress=False)
    path.write_text(path.read_text().replace("n = 6", "n = 12"))
    with pytest.raises(config.ConfigError, match="method 'lhs' draws other points for another n") as raised:
        datasets.generate(path, workers=0, progress=False)
    assert raised.value.line == path.read_text().splitlines().index("n = 12") + 1
    assert "Keep n = 6" in str(raised.value)
    assert len(io.read_table(tmp_path / "data.h5")["sample_id"]) == 3
    path.write_text(path.read_text().replace("n = 12", "n = 6"))
    assert datasets.generate(path, workers=0, progress=False).succeeded == 3


def test_samples_whose_parameters_differ_from_the_sampling_are_refused(tmp_path, generator):
    _, name, _ = generator
    path = _recipe(tmp_path, f"{name}:sample", n=6)
    output = tmp_path / "data.h5"
    datasets.generate(path, workers=0, limit=3, progress=False)
    with h5py.File(output, "r+") as file:  # as if the sampling had given other points then
        row = int(np.flatnonzero(file["sample_id"][:3] == 1)[0])
        file["x"][row] = file["x"][row] + 1e-6
    with pytest.raises(ValueError, match="sample 1 has x = ") as raised:
        datasets.generate(path, workers=0, progress=False)
    assert str(output) in str(raised.value) and "the sampling changed" in str(raised.value)


def test_the_fingerprint_follows_relative_and_literal_imports_of_a_generator_package(tmp_path, monkeypatch):
    package = f"pkg_{tmp_path.name}"
    root = tmp_path / "generators"
    files = {
        "__init__.py": "",
        "make.py": (
            "import importlib\n\nfrom . import tools\nfrom .sub.deep import depth\n\n\n"
            "def sample(params, seed):\n"
            f"    lazy = importlib.import_module('{package}.lazy')\n"
            "    return {'y': tools.twice(params['x']) + depth + lazy.ONE}\n"
        ),
        "tools.py": "def twice(x):\n    return 2 * x\n",
        "sub/__init__.py": "",
        "sub/deep.py": "from ..tools import twice\n\ndepth = twice(0)\n",
        "lazy.py": "ONE = 1\n",
        "unused.py": "UNUSED = 0\n",  # beside them, never imported: not part of the code
    }
    for name, text in files.items():
        (root / package / name).parent.mkdir(parents=True, exist_ok=True)
        (root / package / name).write_text(text)
    monkeypatch.syspath_prepend(str(root))
    reference = f"{package}.make:sample"
    try:
        code = code_fingerprint(resolve_function(reference), reference)
    finally:
        _reload(*[module for module in sys.modules if module.split(".")[0] == package])
    expected = {f"{package}/{name}" for name in files if name != "unused.py"}
    assert set(code.files) == expected  # named relative to the folder holding the generator's package
    for name in expected:
        assert code.files[name] == _sha256(root / name)


def test_the_fingerprint_of_an_fdtd_generator_covers_the_compiled_kernel_sources():
    """A change in the C++ the FDTD runs is a change in the data: the kernel's sources are hashed."""
    reference = "mindelec.antennas:patch_antenna_sample"
    code = code_fingerprint(resolve_function(reference), reference)
    kernel = pathlib.Path(__file__).resolve().parents[2] / "mindelec" / "_kernels" / "yee.cpp"
    assert code.files["mindelec/_kernels/yee.cpp"] == _sha256(kernel)
    assert "mindelec/fdtd/updates.py" in code.files


def test_the_data_packages_include_rdkit_which_builds_the_molecules():
    import importlib.metadata

    reference = "mindsponge.labels:xtb_sample"
    code = code_fingerprint(resolve_function(reference), reference)
    assert code.packages["rdkit"] == importlib.metadata.version("rdkit")
