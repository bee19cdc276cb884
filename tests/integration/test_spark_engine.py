"""The service outlives its Spark JVM.

On a local master an out-of-memory error in a task ends Spark's whole JVM (seen on the
1M-row wide benchmark with a 2g heap). The service used to keep answering /health while
every later sync failed with "internal error: ConnectionRefusedError". Now the sync that
was running fails with a message that says what happened, the view stays as it was, a new
JVM starts, and the next sync is exact. The JVM is killed for real: at a named point of a
sync (warehouse/faults.py, `spark:POINT`) and, while idle, with SIGKILL from the outside.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.support.jvm import java_heap, java_pid
from tests.support.oracle import check_sync, keyed
from tests.support.people import KEY, VIEW_SQL, People
from tests.support.special import HEAP
from warehouse.faults import PLANNING, SPARK_TARGET
from workloads.harness import Api, start_agent

pytestmark = pytest.mark.integration

VIEW = "engine_people"


@pytest.fixture(scope="module")
def setup(tmp_path_factory, logs_dir, special_service):
    """The suite's service with a kill file and a heap of its own (tests/support/special.py):
    the heap is set by the settings, and kept by the JVMs that replace a dead one."""
    root = tmp_path_factory.mktemp("engine")
    people = People(root / "people.db", rows=4_000, seed=9)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    service, kill_file = special_service.proc, special_service.kill_file
    api = Api(service.url)
    api.add_source("engine_src", agent.url)
    # group_hash: it plans its groups over the snapshot on Spark (the rest of a small sync,
    # like the whole of a sketch sync that peels, may run in Arrow with no Spark at all)
    api.add_view(VIEW, VIEW_SQL.format(source="engine_src"), strategy="group_hash")
    check_sync(api, VIEW, KEY, {}, people.truth(), api.sync(VIEW))
    yield api, people, kill_file, service
    api.close()
    agent.stop()


def _exact_sync(api: Api, people: People) -> None:
    before = keyed(api.rows(VIEW), KEY)
    people.change(updates=30, inserts=10, deletes=5)
    check_sync(api, VIEW, KEY, before, people.truth(), api.sync(VIEW))


def test_a_jvm_that_dies_during_a_sync_fails_that_sync_clearly_and_is_replaced(setup):
    api, people, kill_file, service = setup
    first_jvm = java_pid(service.proc.pid)
    assert java_heap(service.proc.pid) == HEAP, "SERVICE_SPARK_DRIVER_MEMORY sets the heap"
    before = keyed(api.rows(VIEW), KEY)
    # killed as the site starts planning: the plan's job needs Spark
    kill_file.write_text(f"{SPARK_TARGET}:{PLANNING}")
    people.change(updates=30, inserts=10, deletes=5)
    record = api.sync(VIEW)
    assert not kill_file.exists(), "the fault never fired"
    assert record["status"] == "failed", record
    assert (
        "Spark engine stopped during this sync" in record["error"] and "SERVICE_SPARK_DRIVER_MEMORY" in record["error"]
    ), record["error"]
    assert keyed(api.rows(VIEW), KEY) == before, "the failed sync changed the view"
    _exact_sync(api, people)  # on a new JVM: the next sync starts one if the service has not yet
    assert java_pid(service.proc.pid) != first_jvm
    assert java_heap(service.proc.pid) == HEAP, "the new JVM has the heap the settings give"


def test_a_jvm_killed_while_idle_is_replaced_before_the_next_sync(setup):
    api, people, _, service = setup
    jvm = java_pid(service.proc.pid)
    os.kill(jvm, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (
        os.path.exists(f"/proc/{jvm}")
        and open(f"/proc/{jvm}/stat").read().split()[2] != "Z"
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    _exact_sync(api, people)
    assert java_pid(service.proc.pid) != jvm
    r = api.http.get(f"/v1/views/{VIEW}/statistics")
    assert r.status_code == 200, r.text
