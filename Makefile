# `make demo` and `make test` set everything up themselves on a fresh machine.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PREFECT_HOME ?= $(CURDIR)/.prefect/home
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 90

.PHONY: demo test test-fast bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -e '.[dev,pipeline,service,bench,enrich]'
	# Byte-compile here, on every core (pip compiles one file after another), leaving out the
	# packages' own test suites, which nothing imports; a file that does not compile is
	# skipped, as pip skips it. pip leaves an editable project alone: desched's sources are
	# compiled too, else a machine with PYTHONDONTWRITEBYTECODE set compiles them in every
	# process (~50 ms).
	$(PY) -m compileall -q -j 0 -x '/tests?/' $(VENV)/lib >/dev/null || true
	$(PY) -m compileall -q desched
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
