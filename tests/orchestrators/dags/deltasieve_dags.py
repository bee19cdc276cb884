"""The DAGs tests/orchestrators/test_airflow.py runs with dag.test(). Airflow 3 writes a DAG it
tests to its database from its DAG folder, which the tests set to this directory; the tasks
run are those of this module as the test imports it, which keep what they saw in SEEN."""

from __future__ import annotations

from airflow.sdk import DAG, task

from deltasieve.orchestration.airflow import DeltasieveSyncOperator
from tests.orchestrators.conftest import GONE, VIEW

#: Per DAG, what its tasks returned (the sync's summary and its sync_id XCom) or failed with.
SEEN: dict[str, list] = {}


@task
def keep(dag_id: str, summary: dict, sync_id: str) -> None:
    SEEN.setdefault(dag_id, []).append((summary, sync_id))


def failed(context) -> None:
    SEEN.setdefault(context["dag"].dag_id, []).append(str(context["exception"]))


with DAG("deltasieve_load", schedule=None) as load:  # deferrable: the trigger waits
    synced = DeltasieveSyncOperator(task_id="sync", view=VIEW)
    synced >> keep("deltasieve_load", synced.output, synced.output["sync_id"])

with DAG("deltasieve_polled", schedule=None) as polled:  # the worker waits
    synced = DeltasieveSyncOperator(task_id="sync", view=VIEW, deferrable=False, poll_s=0.2)
    synced >> keep("deltasieve_polled", synced.output, synced.output["sync_id"])

with DAG("deltasieve_gone", schedule=None) as gone:
    DeltasieveSyncOperator(task_id="sync", view=GONE, poll_s=0.2, on_failure_callback=failed)
