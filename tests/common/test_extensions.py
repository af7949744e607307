"""common.extensions: lazy C++ kernels that fall back to pure torch with one warning."""

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from common import extensions

# pybind11 only (no torch headers): compiles in seconds, yet goes through torch's build
PROBE_SOURCE = textwrap.dedent("""
    #include <pybind11/pybind11.h>
    int add(int a, int b) { return a + b; }
    PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add", &add); }
""")


@pytest.fixture
def build_dir(tmp_path, monkeypatch):
    """A private torch extension directory and a clean per-process cache."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "torch_extensions"))
    monkeypatch.delenv("MINDSCIENCE_NO_EXTENSIONS", raising=False)
    monkeypatch.setattr(extensions, "_cache", {})
    monkeypatch.setattr(extensions, "_warned", set())
    return tmp_path


def _probe(tmp_path: Path, text: str = PROBE_SOURCE) -> Path:
    source = tmp_path / "probe.cpp"
    source.write_text(text)
    return source


@pytest.mark.slow
def test_builds_caches_and_runs(build_dir, capfd):
    source = _probe(build_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = extensions.load("ms_probe_ok", [source])
    assert module is not None and module.add(2, 3) == 5
    assert extensions.load("ms_probe_ok", [str(source)]) is module
    assert extensions.build_seconds["ms_probe_ok"] > 0
    captured = capfd.readouterr()  # the compiler's output is hidden; the build announces itself, once
    assert captured.out == ""
    assert captured.err.startswith("compiling the ms_probe_ok kernel (once per machine")
    assert captured.err.count("\n") == 1


@pytest.mark.slow
def test_failed_compilation_warns_once_and_returns_none(build_dir):
    source = _probe(build_dir, "#include <pybind11/pybind11.h>\nthis is not C++;\n")
    match = "ms_probe_bad.*compilation failed.*probe.cpp"
    with pytest.warns(extensions.ExtensionWarning, match=match) as record:
        assert extensions.load("ms_probe_bad", [source]) is None
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert extensions.load("ms_probe_bad", [source]) is None


def test_disabled_by_environment(build_dir, monkeypatch):
    monkeypatch.setenv("MINDSCIENCE_NO_EXTENSIONS", "1")
    with pytest.warns(extensions.ExtensionWarning, match="MINDSCIENCE_NO_EXTENSIONS=1"):
        assert extensions.load("ms_probe_off", [_probe(build_dir)]) is None
    assert not any(build_dir.glob("torch_extensions/*/ms_probe_off"))


def test_missing_source_names_the_file(build_dir):
    with pytest.warns(extensions.ExtensionWarning, match="not found: .*nowhere.cpp"):
        assert extensions.load("ms_probe_missing", [build_dir / "nowhere.cpp"]) is None


@pytest.mark.parametrize("arguments, match", [
    (("not an identifier", ["a.cpp"]), "name must be a Python identifier"),
    (("ms_probe", "a.cpp"), "sources must be a list of paths"),
    (("ms_probe", ["a.cpp"], ["-O2"]), "extra_cflags must be a tuple"),
])
def test_bad_arguments(arguments, match):
    with pytest.raises(TypeError, match=match):
        extensions.load(*arguments)


@pytest.mark.slow
def test_two_processes_build_at_once(build_dir):
    """Two workers compiling the same kernel at once both get a working module."""
    source = _probe(build_dir)
    script = (f"from common import extensions; m = extensions.load('ms_probe_race', [{str(source)!r}]); "
              "print(m.add(1, 1))")
    environment = {**os.environ, "TORCH_EXTENSIONS_DIR": str(build_dir / "race"), "PYTHONWARNINGS": "error"}
    environment.pop("MINDSCIENCE_NO_EXTENSIONS", None)
    workers = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=environment,
                                cwd=Path(__file__).resolve().parents[2])
               for _ in range(2)]
    for worker in workers:
        out, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, err
        assert out.strip() == "2"


def _run_in_subprocess(build_dir, script, timeout=600):
    environment = {**os.environ, "TORCH_EXTENSIONS_DIR": str(build_dir / "torch_extensions")}
    environment.pop("MINDSCIENCE_NO_EXTENSIONS", None)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                          cwd=Path(__file__).resolve().parents[2], timeout=timeout)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="fcntl.flock is POSIX; Windows uses the age rule")
def test_build_killed_while_compiling_does_not_block_the_next(build_dir):
    """A process killed while holding the build lock (torch's lock file left behind, seconds old)
    does not make the next build wait: the operating system released the lock with the process."""
    source = _probe(build_dir)
    killed = _run_in_subprocess(build_dir, textwrap.dedent("""
        import os, signal
        from torch.utils import cpp_extension
        from common import extensions
        with extensions._build_lock(cpp_extension, "ms_probe_killed"):
            open(os.path.join(cpp_extension._get_build_directory("ms_probe_killed", False), "lock"), "w")
            os.kill(os.getpid(), signal.SIGKILL)
    """))
    assert killed.returncode == -9, killed.stderr
    assert (build_dir / "torch_extensions" / "ms_probe_killed" / "lock").exists()
    script = (f"from common import extensions; "
              f"print(extensions.load('ms_probe_killed', [{str(source)!r}]).add(1, 2))")
    loaded = _run_in_subprocess(build_dir, script, timeout=300)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "3"


@pytest.mark.slow
def test_the_suites_kernels_are_built_at_install_and_announced_when_compiled_at_first_use(tmp_path):
    """``make install`` builds the kernels (``python -m common.extensions build``): a simulation after it
    compiles nothing. A kernel compiled at first use says so first."""
    if os.environ.get("MINDSCIENCE_NO_EXTENSIONS") == "1":
        pytest.skip("MINDSCIENCE_NO_EXTENSIONS=1")
    built = subprocess.run([sys.executable, "-m", "common.extensions", "build", "mindsponge._kernels:load"],
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0 and "mindsponge._kernels:load: ready" in built.stdout, built.stderr
    script = ("import mindsponge as ms, torch\n"
              "s = ms.System(torch.tensor([[0.0, 0, 0], [0.3, 0, 0]]), torch.tensor([12.0, 12.0]))\n"
              "t = ms.forcefield.bonded.HarmonicBond([[0, 1]], 0.15, 1000.0)\n"
              "sim = ms.Simulation(s, ms.ForceField([t]), ms.integrators.VelocityVerlet(0.001),\n"
              "                    progress=False)\n"
              "assert sim.step_loop is not None\n"
              "sim.run(10)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "compiling the" not in run.stderr
    source = tmp_path / "announced.cpp"
    source.write_text('#include <torch/extension.h>\nint one() { return 1; }\n'
                      'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("one", &one); }\n')
    probe = (f"from common import extensions\nimport sys\n"
             f"assert extensions.load('ms_probe_announced_{os.getpid()}', [{str(source)!r}]).one() == 1\n")
    first = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=900,
                           env=dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path / "build")))
    assert first.returncode == 0, first.stderr
    assert "compiling the ms_probe_announced" in first.stderr
