"""The orchestrators' tests (`make test-orchestrators`), against the real service.

Each orchestrator's module runs in a virtualenv of its own, deltasieve installed there with
that orchestrator's extra (.venv-airflow: test_airflow.py, .venv-dagster: test_dagster.py),
with pytest's --confcutdir set here: the main suite's conftest loads the service's packages,
which these virtualenvs do not hold, and `make test` does not collect this directory
(tests/conftest.py). The service and its agents run from the project's virtualenv
(DELTASIEVE_SERVICE_PYTHON, .venv/bin/python unless set), as a deployment runs them beside
the orchestrator's workers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deltasieve import Client  # noqa: E402
from tests.support.people import VIEW_SQL, People  # noqa: E402
from tests.support.service_env import use_suite_service_env  # noqa: E402
from workloads.harness import Process, start_agent, start_service  # noqa: E402

use_suite_service_env()

SERVICE_PYTHON = os.environ.get("DELTASIEVE_SERVICE_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
#: The service's admin key (SERVICE_API_KEY): every call without it is refused, so a test
#: that passes has sent it.
API_KEY = "orchestrators-admin-5e2b91"
#: A view over a live agent, and one whose agent is gone: each sync of it fails (agent_unreachable).
VIEW, GONE = "orch_people", "orch_gone"
ROWS = 500
#: Seconds the service and an agent may take to start: niced on a machine a benchmark kept
#: busy, the service took more than the main suite's 180 s and an agent more than its 30.
STARTUP_S = 600
SLOW_START = {"python": SERVICE_PYTHON, "startup_timeout_s": STARTUP_S}


@dataclass
class Deltasieve:
    url: str
    client: Client
    people: People


@pytest.fixture(scope="session")
def deltasieve(tmp_path_factory):
    """The service (with an admin key), a view over a SQLite table behind a live agent, and a
    view over the same table whose agent stopped after its source was added."""
    logs = tmp_path_factory.mktemp("logs")
    people = People(tmp_path_factory.mktemp("legacy") / "people.db", rows=ROWS)
    with ExitStack() as started:  # each process stopped, also when a later one does not start
        agent, gone = (
            started.enter_context(closing_process(start_agent(f"sqlite:///{people.path}", logs, **SLOW_START)))
            for _ in range(2)
        )
        warehouse = tmp_path_factory.mktemp("warehouse")
        service = start_service(warehouse, logs, env={"SERVICE_API_KEY": API_KEY}, **SLOW_START)
        started.enter_context(closing_process(service))
        client = started.enter_context(Client(service.url, API_KEY))
        for source, view, at in (("orch", VIEW, agent), ("orch_gone", GONE, gone)):
            client.post("/v1/sources", {"name": source, "url": at.url})
            client.post("/v1/views", {"name": view, "sql": VIEW_SQL.format(source=source)})
        gone.stop()
        yield Deltasieve(service.url, client, people)


@contextmanager
def closing_process(process: Process) -> Iterator[Process]:
    try:
        yield process
    finally:
        process.stop()
