"""Fixtures shared by the whole suite: real service and agent processes, scratch dirs, and
the legacy databases (one PostgreSQL and one MariaDB server per session; `source` over every engine)."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: JVM options of every JVM the suite starts (the services' Spark, the in-process Spark of
#: the unit tests, the standalone cluster): the client compiler only and the serial
#: collector. The suite's syncs are short jobs on small tables, where C2's compilations and
#: G1's threads compete with the work for two cores: measured here on an idle machine, 18
#: syncs of a 3,000-row view with a service of their own took 62.6 s against 72.7 s with
#: the JVM's defaults (the 15 after the loads 31.1 s against 39.0). Semantics are the same; the
#: benchmarks and the product keep the defaults. A JDK_JAVA_OPTIONS of the caller wins.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("JDK_JAVA_OPTIONS", TEST_JVM_OPTIONS)
#: Spark properties of the services the suite starts (SERVICE_SPARK_CONF; a module that
#: sets its own, like the standalone cluster's, replaces them): expressions and plans are
#: evaluated as interpreted (Spark runs its own test suite both ways; results are the same)
#: rather than compiled to Java for each new query shape, which the suite's hundreds of
#: views over small tables pay for and rarely win back. Measured here, serially: the same
#: three modules took 93 CPU-seconds against 103 with code generation (the JVM's share is
#: half); over the whole suite the gain was within one run's noise. The benchmarks and the
#: product keep Spark's defaults.
TEST_SPARK_CONF = '{"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}'
os.environ.setdefault("SERVICE_SPARK_CONF", TEST_SPARK_CONF)

#: The services the suite starts and builds in-process store literal tokens and destination
#: passwords encrypted under this key (a test that needs a service without one sets it empty).
from workloads.harness import HARNESS_SECRET_KEY  # noqa: E402

os.environ.setdefault("SERVICE_SECRET_KEY", HARNESS_SECRET_KEY)

from tests.support.s3_server import S3Server, start_s3_server  # noqa: E402
from tests.support.sources import ENGINES, SourceDatabase, database_name  # noqa: E402
from tests.support.special import SpecialService  # noqa: E402
from workloads.harness import Api, start_service  # noqa: E402
from workloads.mariadb import MariadbDatabase, MariadbServer, start_mariadb  # noqa: E402
from workloads.postgres import PostgresDatabase, PostgresServer, start_postgres  # noqa: E402


def pytest_sessionstart(session):
    """The ahead-of-time kernels the agent and the executors load (deltasieve_protocol/compiled.py),
    built before any test imports them if a kernel changed since `make install` built them:
    a process keeps the extension it imported first, stale or not."""
    from deltasieve_protocol import compiled

    compiled.build()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "engines(*names): run a test taking `source` on these engines only (default: all of tests.support.sources.ENGINES)",
    )


#: The JVM a worker starts that modules share, and the words in a module's source that say
#: it uses it: the fault-injecting service (`special_service`), and the in-process Spark
#: session of the unit tests (build_session reuses it within a process).
SHARED_JVMS = {"special-service": "special_service", "in-process-spark": "build_session"}


@functools.cache
def shared_jvm(module: str) -> str | None:
    """The shared JVM the test module at `module` (a path from the repository's root) uses, if any."""
    source = (ROOT / module).read_text(errors="replace") if module.endswith(".py") else ""
    return next((jvm for jvm, word in SHARED_JVMS.items() if word in source), None)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run with -p no:xdist has no such hook
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (make test), but the modules that share a JVM go to one worker as one
    unit: under plain loadfile each worker that drew such a module started that JVM again, and
    a fresh one costs ~40 CPU-seconds here (its start, then its first sync's class loading and
    Python workers) against ~4 for a sync. (`--dist loadgroup` cannot do it: xdist 3.8 marks a
    group in the node id, which pytest 9.2 no longer lets it change, so every test would be a
    unit of its own.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedJvmScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return shared_jvm(module) or module

    return SharedJvmScheduling(config, log)


def pytest_generate_tests(metafunc):
    """`source` runs on every engine, or on those its `engines` marker names."""
    if "source" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("engines")
        engines = list(marker.args) if marker else list(ENGINES)
        unknown = set(engines) - set(ENGINES)
        if unknown:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid}: unknown engine(s) {sorted(unknown)}; known: {sorted(ENGINES)}"
            )
        metafunc.parametrize("source", engines, indirect=True)


@pytest.fixture(scope="session")
def logs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def service(tmp_path_factory, logs_dir):
    """One warehouse service process for the integration tests (Spark starts once)."""
    proc = start_service(tmp_path_factory.mktemp("warehouse"), logs_dir)
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def special_service(tmp_path_factory, logs_dir) -> SpecialService:
    """A second service for the modules that inject faults (tests/support/special.py)."""
    service = SpecialService(tmp_path_factory.mktemp("special"), logs_dir)
    yield service
    service.stop()


@pytest.fixture(scope="session")
def api(service):
    client = Api(service.url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory) -> PostgresServer:
    """One PostgreSQL server for the session, started on first use; tests get databases in it."""
    server = start_postgres(tmp_path_factory.mktemp("postgres"), dbname=None)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> S3Server:
    """One S3-protocol server on the loopback for the session (moto's server mode), started on
    first use; tests get buckets of their own in it (tests/support/s3_server.py)."""
    server = start_s3_server(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mariadb_server(tmp_path_factory) -> MariadbServer:
    """One MariaDB server for the session (Debian's mariadb-server, installed when missing),
    started on first use; tests get databases in it."""
    server, _ = start_mariadb(tmp_path_factory.mktemp("mariadb"), dbname=None)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mariadb(mariadb_server, request) -> MariadbDatabase:
    """A database of the module's own in the session's MariaDB server (`owner` and SELECT-only `reader`)."""
    return mariadb_server.create_database(database_name(request.module.__name__))


@pytest.fixture(scope="module")
def postgres(postgres_server, request) -> PostgresDatabase:
    """A database of the module's own in the session's server (roles `owner` and `reader`)."""
    return postgres_server.create_database(database_name(request.module.__name__))


@pytest.fixture
def source(request, tmp_path) -> SourceDatabase:
    """A fresh, empty legacy database on the engine of the test's parameter."""
    return ENGINES[request.param](request, tmp_path)
