# deltasieve — every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-unit test-integration lint format bench bench-quick openapi clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "Java 17+ is needed by Spark (Debian: apt-get install openjdk-17-jre-headless)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[service,test]'
	touch $(STAMP)

demo: install
	$(PY) scripts/demo.py

test: install lint
	$(PY) -m pytest -q

# ruff, configured in pyproject.toml: lint, and check that the code is formatted
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test-unit: install
	$(PY) -m pytest -q tests/unit

test-integration: install
	$(PY) -m pytest -q tests/integration

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[service,test,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks --full

bench-quick: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks --quick

clean:
	rm -rf demo-data .pytest_cache
