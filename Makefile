# deltasieve — every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
KERNELS_STAMP := deltasieve_protocol/._compiled_kernels.stamp

.PHONY: install demo docs test test-unit test-integration test-orchestrators lint format bench bench-quick bench-10m bench-stamped bench-join bench-dumps bench-sample bench-publishing soak bench-resume bench-scale bench-small bench-many-sources openapi clean

install: $(STAMP) $(KERNELS_STAMP)

# mysqlclient (the MySQL/MariaDB agent's driver, the `mysql` extra) builds against libmariadb
MYSQL_BUILD_DEPS := pkg-config libmariadb-dev

$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "Java 17+ is needed by Spark (Debian: apt-get install openjdk-17-jre-headless)"; exit 1; }
	@pkg-config --exists libmariadb 2>/dev/null || scripts/apt_install.sh $(MYSQL_BUILD_DEPS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[service,iceberg,test,mysql,docs]'
	touch $(STAMP)

# The kernels (row encoding, hash, IBLT fold, the MariaDB reader's loops) compiled ahead of time into an extension module
# beside deltasieve_protocol/compiled.py, again whenever their source changes: the agent and the
# executors then run them without loading numba (a stale build is not used: compiled.py)
$(KERNELS_STAMP): $(STAMP) $(wildcard deltasieve_protocol/kernels/*.py) deltasieve_protocol/compiled.py
	$(PY) -c 'from deltasieve_protocol.fingerprints import compile_kernels; compile_kernels()'
	touch $(KERNELS_STAMP)

demo: install
	$(PY) scripts/demo.py

# Test modules run on TEST_WORKERS pytest-xdist workers, each module wholly in one (its
# fixtures: a service, a PostgreSQL server per worker); TEST_WORKERS=0 runs them in-process.
TEST_WORKERS ?= 2

test: install lint docs
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The documentation site: scripts/docs_gen.py writes the generated pages (reference from the
# code and openapi/, benchmarks from tests/benchmarks/results/) into docs/, then MkDocs builds
# docs/ into site/ with warnings as errors (broken links and anchors among them).
docs: install
	$(PY) scripts/docs_gen.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# ruff, configured in pyproject.toml: lint, and check that the code is formatted; mypy over
# the product packages; scripts/check_layout.py: no product module in an import circle, no two
# test modules of one name, and a report of the longest modules and functions (not a limit)
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) scripts/check_layout.py

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test-unit: install
	$(PY) -m pytest -q tests/unit

test-integration: install
	$(PY) -m pytest -q tests/integration

# The orchestrators' operators (deltasieve/orchestration/) against the real service, each
# orchestrator in a virtualenv of its own holding deltasieve with its extra (.venv-airflow,
# .venv-dagster): their dependency trees are large, pin many of ours and would slow make test,
# which does not collect tests/orchestrators/. The service and its agents run from .venv;
# --confcutdir keeps pytest from the main suite's conftest (it loads the service's packages).
ORCHESTRATORS := airflow dagster
ORCHESTRATOR_TEST_DEPS := 'pytest>=8,<10' 'pytest-timeout>=2.3,<3'

.venv-%/.installed: pyproject.toml
	test -x .venv-$*/bin/python || $(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet --upgrade pip
	.venv-$*/bin/python -m pip install --quiet -e '.[$*]' $(ORCHESTRATOR_TEST_DEPS)
	touch $@

test-orchestrators: install $(foreach o,$(ORCHESTRATORS),.venv-$(o)/.installed)
	$(foreach o,$(ORCHESTRATORS),.venv-$(o)/bin/python -m pytest -q --confcutdir tests/orchestrators tests/orchestrators/test_$(o).py &&) true

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[service,iceberg,test,mysql,docs,bench]'
	touch $(BENCH_STAMP)

# Under an hour on 2 cores (46 minutes measured): students at 1,000,000 rows with full_ship
# and auto on SQLite and on PostgreSQL, the other five workloads at 200,000 rows with the
# service's six strategies, 3 rounds; results/full.json and .md (plan in meta.plan).
bench: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks --full

# students at 10,000,000 rows, auto and full_ship, 3 rounds: expected to take about an hour
# on 2 cores (45-75 minutes; the source is generated in 20,000-row batches in about 2 of
# them). Needs ~6 GB of memory besides the service's Spark heap and ~10 GB of disk in
# tests/benchmarks/work/. Writes results/10m.json and .md with the agent's peak RSS per
# sync and the service's (its process and Spark JVM) over the run.
bench-10m: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks --10m

# change stamps at 1M rows: timestamp on students-stamped (an indexed updated_at, a soft-delete
# flag) on SQLite and PostgreSQL beside auto and full_ship, and row_version on students on
# PostgreSQL beside full_ship, 3 rounds; results/stamped.json and .md.
bench-stamped: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks --stamped

bench-quick: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks --quick

# a view across two SQLite sources, a 1,000,000-row fact table joined to a 10,000-row
# dimension, beside the fact table's own view, 5 rounds of changes (about 5 minutes);
# results/join-1m.json and .md.
bench-join: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks.join --rounds 5

# dump files: a 1,000,000-row CSV table dumped anew each round, snapshot_diff (each of paper
# 000's algorithms) beside auto, sketch and full_ship (about 9 minutes), and the window's
# quality at three displacements and nine buffer sizes (about 12 more); results/dumps-1m.json,
# .md and -quality.png. --quality-only measures the quality again on the last run's dumps.
bench-dumps: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks.dumps --rounds 3

# A view's random sample at 1M rows, M = 10,000 (#19): per sync, the deferred maintenance
# (candidate log, stack/nomem refresh) beside drawing the sample anew and per-operation
# maintenance, with E(|C|) and E(Ψ) next to the measured ones. Writes results/sample-1m.{json,md}.
bench-sample: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks.sample

# Publishing's cost per sync (#37): students at 1,000,000 rows on SQLite, one view published to
# its Delta Lake table and a PostgreSQL warehouse's table (a server it starts) beside the same
# view unpublished; the load, 5 rounds of the workload's rates, one of ten times them, one of
# recent keys; in each round too, each mode's cost beside merge's (#51): a view per kind (Delta
# Lake, PostgreSQL, Iceberg in the embedded SQLite catalog) with a table in each of merge,
# soft_delete and history, synced in turn, its tables applied one after the other (about 6
# minutes more); then small rounds of the published view until its Delta table's compaction
# was due (every 50 versions), none begun after 18 minutes (about 20 in all);
# results/publishing-1m.json and .md (--modes off leaves the modes out).
bench-publishing: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks.publishing --rounds 5 --budget-min 18

# The soak, by default its tables scenario (#52): a generated schema of 5,000 SQLite tables over
# five sources (4,750 of 100-10,000 rows, 225 of 100,000, 25 of 1,000,000: about 72M rows, 1.8 GB,
# made once in about 5 minutes and kept under
# tests/benchmarks/work/soak-tables-cache/), mirrored, each view scheduled every 300 s; once every
# view has loaded (the warm-up: hours on 2 cores), 30 minutes with a writer changing
# the tables: schedule lateness by table size and source, syncs a minute, memory and data
# directory over time, then a sample of views compared with their tables; results/soak-tables.json and .md.
# `make soak SOAK=faults`: the faults scenario (#38): 210 views mirrored from two SQLite databases
# and a PostgreSQL one, each scheduled every 180 s, a writer changing the tables, agents and the
# service SIGKILLed and started again at random, for 30 minutes; then every view synced once more
# and compared with its table (about 40 minutes in all); results/soak.json and .md.
# Not part of `make test`.
SOAK ?= tables
soak: $(BENCH_STAMP)
ifeq ($(SOAK),faults)
	$(PY) -m tests.benchmarks.soak --scenario faults --minutes 30 --views 210 --every-s 180
else
	$(PY) -m tests.benchmarks.soak --scenario tables --tables 5000 --minutes 30 --every-s 300
endif

# A long load that survives a failure (#39): students at 10,000,000 rows on SQLite, loaded once
# undisturbed, then again with the agent SIGKILLed once 90 % of its bytes were sent and the
# sync's retry resuming after them; beside them, what starting over would have cost. Needs the
# disk and memory of bench-10m's load; results/resumed-10m.json and .md.
# Scale projection (#39): students with the default strategy at 1M, 3M and 10M rows on SQLite
# and PostgreSQL, one sitting each (results/scale/; a sitting already there is kept, so a run
# can be spread over sessions), then each phase's cost per row and what 100M rows would take
# (results/scale.{json,md}); about 1.5 hours on 2 cores
bench-scale: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks.scale run

# Small syncs' service time (#52): SQLite tables of 100, 1,000, 10,000 and 100,000 rows, each
# synced 9 times with no change and 9 times after 1 % of its rows changed, timed at the client
# (POST with wait, loopback), on a service with SERVICE_SMALL_SYNC_ROWS=0 (every sync on Spark)
# and on one with it above every size (in process); the medians, each sync's own phases and
# executor, and the size where Spark catches up, which SERVICE_SMALL_SYNC_ROWS is set from.
# About 10 minutes on two cores; results/small-path.json and .md.
bench-small: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks.small_path --sizes 100,1000,10000,100000 --syncs 9

# Many sources (#52): 50 SQLite sources of 20 tables of 200 rows, an agent process each, every
# source mirrored with every view scheduled each 300 s, a writer changing rows; the service's
# threads, open files, TCP connections and memory (its /metrics) as sources are added and over
# 10 minutes of schedules, and the syncs done. Needs ~6 GB for the agents; about 15 minutes.
# results/many-sources.json and .md.
bench-many-sources: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks.many_sources --sources 50 --tables 20 --every-s 300 --minutes 10

bench-resume: $(BENCH_STAMP)
	$(PY) -m tests.benchmarks.resumed --rows 10000000 --at 0.9

clean:
	rm -rf demo-data .pytest_cache site
