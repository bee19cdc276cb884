"""DeltasieveSyncOperator in Airflow (.venv-airflow, `make test-orchestrators`): DAGs run by
dag.test() against the real service, the deferrable operator's wait handed to its trigger;
the trigger's own run as the triggerer drives it; a failed sync fails its task with the
service's reason."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.orchestrators.conftest import API_KEY, GONE, VIEW

#: Airflow reads its configuration at import: a scratch home, its metadata database made by the
#: fixture; its DAG folder the DAGs this module runs (Airflow 3's dag.test() writes them to the
#: database from there), their parse given the time a busy machine takes.
DAGS = Path(__file__).parent / "dags"
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="deltasieve-airflow-"))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
os.environ["AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT"] = "600"
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from deltasieve.orchestration.airflow import (  # noqa: E402
    AirflowException,
    AirflowFailException,
    DeltasieveSyncOperator,
    DeltasieveSyncTrigger,
)
from tests.orchestrators.dags import deltasieve_dags as dags  # noqa: E402

pytestmark = pytest.mark.integration

SUMMED = ("rows_inserted", "rows_updated", "rows_deleted", "rows_in_view", "wall_seconds", "bytes_from_agent")


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


def test_a_dag_syncs_the_view_deferred_and_in_the_worker(airflow, caplog):
    dag_test = logging.getLogger("airflow.sdk.definitions.dag")  # what dag.test() says it does
    with caplog.at_level(logging.INFO, logger=dag_test.name):
        dag_test.addHandler(caplog.handler)
        try:
            run = dags.load.test()
        finally:
            dag_test.removeHandler(caplog.handler)
    assert run.state == "success", run
    assert "[DAG TEST] running trigger in line" in caplog.messages  # the task deferred to its trigger
    ((loaded, loaded_id),) = dags.SEEN["deltasieve_load"]
    assert (
        loaded["sync_id"] == loaded_id
        and loaded["status"] == "succeeded"
        and loaded["rows_inserted"] == len(airflow.people.truth())
    )

    airflow.people.change(updates=10, inserts=3, deletes=2)
    run = dags.polled.test()
    assert run.state == "success", run
    ((synced, synced_id),) = dags.SEEN["deltasieve_polled"]
    record = airflow.client.sync_record(VIEW, synced_id)
    assert record.succeeded and synced["sync_id"] == record.id != loaded_id
    assert {name: synced[name] for name in SUMMED} == {name: record.metrics[name] for name in SUMMED}
    assert synced["rows_updated"] > 0 and synced["rows_in_view"] == len(airflow.people.truth())


def test_a_failed_sync_fails_its_task_with_the_services_reason(airflow):
    run = dags.gone.test()
    assert run.state == "failed", run
    (last, *_) = airflow.client.syncs(GONE)
    assert last.status == "failed" and last.error_code == "agent_unreachable"
    (message,) = dags.SEEN["deltasieve_gone"]
    assert f"sync {last.id} of view {GONE} failed [agent_unreachable]: " in message and last.error in message


def test_the_trigger_runs_as_the_triggerer_runs_it(airflow):
    """The trigger rebuilt from what it serialized (as the triggerer does), its event, and the
    operator (given the service's URL and key, no connection) resumed on it; a refused read is
    the trigger's error event, a failed sync the task's failure, one retries may pass."""
    started = airflow.client.sync(VIEW, wait=False)
    classpath, kwargs = DeltasieveSyncTrigger(airflow.url, VIEW, started.id, API_KEY, poll_s=0.2).serialize()
    assert classpath == "deltasieve.orchestration.airflow.DeltasieveSyncTrigger"
    event = asyncio.run(_first(DeltasieveSyncTrigger(**kwargs)))
    assert event.payload["status"] == "finished" and event.payload["sync"]["id"] == started.id
    operator = DeltasieveSyncOperator(task_id="resumed", view=VIEW, url=airflow.url, api_key=API_KEY)
    assert operator.service() == (airflow.url, API_KEY)
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
