# `make train`, `make test`, `make lint` and `make check` build .venv from the pinned
# requirements when it is missing. The lock pins every dependency, uv among them: pip
# installs uv, and uv installs the lock as listed (--no-deps: no resolver), downloading and
# byte-compiling in parallel, which pip does one package at a time; `pip check` then fails
# the build if the lock ever misses a pin.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV := $(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps

.PHONY: train test lint check bench clean

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$$(grep '^uv==' requirements.lock)"
	$(UV) --compile-bytecode -r requirements.lock
	$(UV) --no-build-isolation -e .
	$(BIN)/python -m pip check
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/jaxrl-async train $(ARGS)

# Two workers, one test file each at a time (module fixtures run once): JAX compiles on
# one core, so a second worker uses the other. Set PYTEST_WORKERS=0 to run in-process.
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile
# The package byte-compiled once before a suite: its workers and the many Python processes
# its tests start then read the bytecode instead of each compiling the modules it imports
# (under PYTHONDONTWRITEBYTECODE none would write it for the next).
PRECOMPILE := $(BIN)/python -m compileall -q jaxrl_async tests

# The fast tier: unit and small integration tests (everything not marked slow).
test: $(STAMP)
	$(PRECOMPILE)
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

# Lint, format, types and the import layers; the settings live in pyproject.toml
# ([tool.ruff], [tool.mypy], [tool.importlinter]). mypy checks independent modules in
# parallel worker processes, one a core.
MYPY_WORKERS ?= 2
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --num-workers $(MYPY_WORKERS) jaxrl_async
	$(BIN)/lint-imports

# Everything CI runs: lint, then every test, slow ones included; the 25 slowest are listed
# at the end, to keep the whole within its budget (docs/development.md).
check: lint
	$(PRECOMPILE)
	$(PYTEST) --durations=25 $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/jaxrl-async bench $(ARGS)

clean:
	rm -rf $(VENV) runs
