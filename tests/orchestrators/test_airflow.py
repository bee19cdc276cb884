"""DeltasieveSyncOperator in Airflow (.venv-airflow, `make test-orchestrators`): DAGs run by
dag.test() against the real service, the deferrable operator's wait handed to its trigger;
the trigger's own run as the triggerer drives it; a failed sync fails its task with the
service's reason."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from tests.orchestrators.conftest import API_KEY, GONE, ROWS, VIEW

#: Airflow reads its home at import: a scratch one, its metadata database created by the fixture.
AIRFLOW_HOME = os.environ.setdefault(
    "AIRFLOW_HOME", os.path.join(os.environ.get("TMPDIR", "/tmp"), "deltasieve-airflow")
)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from airflow.sdk import DAG, task  # noqa: E402

from deltasieve.orchestration.airflow import (  # noqa: E402
    AirflowException,
    AirflowFailException,
    DeltasieveSyncOperator,
    DeltasieveSyncTrigger,
)

pytestmark = pytest.mark.integration

#: What the DAGs' callbacks and tasks saw, keyed by the test that looked.
SEEN: dict[str, list] = {}


@pytest.fixture(scope="module")
def airflow(request, monkeypatch_module):
    """Airflow's metadata database (SQLite, in AIRFLOW_HOME; made while the service starts) and
    the service's connection, deltasieve_default: its host the service's URL, its password the API key."""
    migrate = subprocess.Popen(
        [sys.executable, "-m", "airflow", "db", "migrate"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deltasieve = request.getfixturevalue("deltasieve")
    output, _ = migrate.communicate()
    assert migrate.returncode == 0, output.decode(errors="replace")
    conn = {"conn_type": "http", "host": deltasieve.url, "password": API_KEY}
    monkeypatch_module.setenv("AIRFLOW_CONN_DELTASIEVE_DEFAULT", json.dumps(conn))
    return deltasieve


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _keep(test: str):
    @task
    def keep(summary: dict, sync_id: str) -> None:
        SEEN.setdefault(test, []).append((summary, sync_id))

    return keep


def test_a_dag_syncs_the_view_deferred_then_in_the_worker(airflow):
    with DAG("deltasieve_sync", schedule=None) as dag:
        deferred = DeltasieveSyncOperator(task_id="load", view=VIEW)  # the connection, deferrable
        polled = DeltasieveSyncOperator(
            task_id="again", view=VIEW, url=airflow.url, api_key=API_KEY, deferrable=False, poll_s=0.2
        )
        keep = _keep("dag")
        deferred >> keep(deferred.output, deferred.output["sync_id"]) >> polled
        polled >> keep(polled.output, polled.output["sync_id"])
    airflow.people.change(updates=10, inserts=3, deletes=2)  # before the second, polled sync
    run = dag.test()
    assert run.state == "success", run
    (load, load_id), (again, again_id) = SEEN["dag"]
    assert load["sync_id"] == load_id and again["sync_id"] == again_id and load_id != again_id
    assert load["status"] == "succeeded" and load["rows_inserted"] == ROWS
    record = airflow.client.sync_record(VIEW, again_id)
    assert record.succeeded
    for name in ("rows_inserted", "rows_updated", "rows_deleted", "rows_in_view", "wall_seconds", "bytes_from_agent"):
        assert again[name] == record.metrics[name], name
    assert len(airflow.client.view(VIEW).columns) == 4


def test_a_failed_sync_fails_its_task_with_the_services_reason(airflow):
    def failed(context):
        SEEN.setdefault("failed", []).append(str(context["exception"]))

    with DAG("deltasieve_gone", schedule=None) as dag:
        DeltasieveSyncOperator(task_id="gone", view=GONE, poll_s=0.2, on_failure_callback=failed)
    run = dag.test()
    assert run.state == "failed", run
    (last, *_) = airflow.client.syncs(GONE)
    assert last.status == "failed" and last.error_code == "agent_unreachable"
    (message,) = SEEN["failed"]
    assert f"sync {last.id} of view {GONE} failed [agent_unreachable]: " in message and last.error in message


def test_the_trigger_runs_as_the_triggerer_runs_it(airflow):
    """The trigger rebuilt from what it serialized (as the triggerer does), its event, and the
    operator resumed on it; a refused read is the trigger's error event, a failed sync the task's failure."""
    started = airflow.client.sync(VIEW, wait=False)
    classpath, kwargs = DeltasieveSyncTrigger(airflow.url, VIEW, started.id, API_KEY, poll_s=0.2).serialize()
    assert classpath == "deltasieve.orchestration.airflow.DeltasieveSyncTrigger"
    event = asyncio.run(_first(DeltasieveSyncTrigger(**kwargs)))
    assert event.payload["status"] == "finished" and event.payload["sync"]["id"] == started.id
    operator = DeltasieveSyncOperator(task_id="resumed", view=VIEW)
    summary = operator.execute_complete({}, event.payload)
    assert summary["sync_id"] == started.id and summary["rows_in_view"] == len(airflow.people.truth())

    refused = asyncio.run(_first(DeltasieveSyncTrigger(airflow.url, VIEW, started.id, "dsk_wrong")))
    assert refused.payload["status"] == "error" and "401" in refused.payload["message"]
    with pytest.raises(AirflowException, match="401"):
        operator.execute_complete({}, refused.payload)

    gone = airflow.client.sync(GONE, wait=False)
    ended = asyncio.run(_first(DeltasieveSyncTrigger(airflow.url, GONE, gone.id, API_KEY, poll_s=0.2)))
    with pytest.raises(AirflowException, match="agent_unreachable") as failure:
        operator.execute_complete({}, ended.payload)
    assert not isinstance(failure.value, AirflowFailException)  # a later sync may pass: retries apply


async def _first(trigger: DeltasieveSyncTrigger):
    """The trigger's first event, as the triggerer takes it (it stops the generator after one)."""
    events = trigger.run()
    try:
        return await anext(events)
    finally:
        await events.aclose()
