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

#: The JVM options and Spark properties of the services the suite starts (tests/support/
#: service_env.py; the orchestrators' tests, run in virtualenvs of their own, set the same).
from tests.support.service_env import use_suite_service_env  # noqa: E402

use_suite_service_env()

#: The orchestrators' tests run in virtualenvs of their own (`make test-orchestrators`,
#: tests/orchestrators/conftest.py), not in `make test`.
collect_ignore = ["orchestrators"]

#: The services the suite starts and builds in-process store literal tokens and destination
#: passwords encrypted under this key (a test that needs a service without one sets it empty).
from workloads.harness import HARNESS_SECRET_KEY  # noqa: E402

os.environ.setdefault("SERVICE_SECRET_KEY", HARNESS_SECRET_KEY)

from tests.support.iceberg_rest import RestCatalog, start_rest_catalog  # noqa: E402
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
def iceberg_rest(tmp_path_factory) -> RestCatalog:
    """One Iceberg REST catalog on the loopback for the session (tests/support/iceberg_rest.py)."""
    catalog = start_rest_catalog(tmp_path_factory.mktemp("iceberg-rest"))
    yield catalog
    catalog.stop()


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
