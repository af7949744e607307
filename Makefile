# Two commands on a fresh machine: `make demo` and `make test`.
# Everything the project needs is installed into .venv by the `install` target.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The CPU wheel of torch that the set-up pins (the package itself accepts torch>=2.4).
TORCH_PIN := torch==2.13.0
DEMO_DIR ?= demo_output
PYTEST_WORKERS ?= 2

.PHONY: install demo test check lint docs benchmarks clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH_PIN)"
	$(PY) -m pip install --quiet -e ".[all]" "$(TORCH_PIN)"
	@# the compiled kernels, now rather than at the first simulation (optional: the torch path runs without them)
	-$(PY) -m common.extensions build mindsponge._kernels:load mindelec._kernels:yee
	touch $@

# A real default run of each package on shipped inputs; every output goes under $(DEMO_DIR).
demo: install
	$(PY) -m common.demo --output $(DEMO_DIR)/common
	$(VENV)/bin/mindelec run mindelec/examples/dipole2d.toml --output $(DEMO_DIR)/mindelec
	$(VENV)/bin/mindsponge run mindsponge/examples/water_npt.toml --output $(DEMO_DIR)/mindsponge
	@echo "demo outputs are in $(abspath $(DEMO_DIR)): common/ (geometry and autodiff check), mindelec/ (2D dipole FDTD: field.png, spectrum.png, result.h5), mindsponge/ (TIP3P NPT: log.csv, trajectory.h5md, run.chk, final.pdb)"

lint: install
	$(VENV)/bin/ruff check .

# The fast tier for the inner loop (under about 3 minutes on 2 cores): lint and every test not marked slow
# (long validations, notebooks, command-line runs in subprocesses); `make test` runs them all.
check: install lint
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal -m "not slow" -q

# The tests keep the notebooks they execute and the figures the validation tests measured under build/,
# where `make docs` finds them.
test: install lint
	rm -rf build/validation
	NOTEBOOK_SIZE=small OMP_NUM_THREADS=1 MINDSCIENCE_EXECUTED_NOTEBOOKS=build/notebooks \
		MINDSCIENCE_VALIDATION_RECORD=build/validation $(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal --durations=25

# The documentation site, into docs/_build/html (warnings are errors).
docs: install
	OMP_NUM_THREADS=1 $(PY) docs/build.py

benchmarks: install
	for script in benchmarks/*.py; do $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache build docs/_build docs/_generated
