# `make demo` and `make test` set everything up themselves on a fresh machine.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PREFECT_HOME ?= $(CURDIR)/.prefect/home
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 90
# Python writes each module's bytecode the first time it imports it, so later processes
# start from it: nothing is compiled that nothing imports.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast bench lint clean

$(STAMP): pyproject.toml scripts/install_env.py
	$(PYTHON) -m venv $(VENV)
	# uv when it can (pip's package sources handed over), else pip: scripts/install_env.py.
	$(PYTHON) scripts/install_env.py $(VENV) dev,pipeline,service,bench,enrich
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p "$(PREFECT_HOME)"  # Prefect creates its home without parents
	$(VENV)/bin/desched demo

test: $(STAMP)
	mkdir -p "$(PREFECT_HOME)"
	DESCHED_CONTRACT_EXAMPLES=full $(PY) -m pytest -q

# The inner loop: every test but those marked slow (tests/conftest.py names them). The
# registry's contract suite runs here too, with a tenth of its Hypothesis examples.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

bench: $(STAMP)
	$(PY) benchmarks/bench_decisions.py
	$(PY) benchmarks/bench_simulator.py

lint: $(STAMP)
	$(VENV)/bin/ruff check desched tests benchmarks scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) .prefect .pytest_cache .hypothesis
