"""What an orchestrator sees of the real service: the Python client (deltasieve.client) runs
syncs to their end and raises on a failed one, and each sync's OpenLineage events reach the
file the service writes them to (the suite's second service has lineage on: tests/support/
special.py), one run per sync: START and COMPLETE, then OTHER once its Delta table holds it,
or START and FAIL."""

from __future__ import annotations

import json
import time

import pytest
from deltalake import DeltaTable

from deltasieve import Client, ServiceError, SyncFailed, Unreachable
from service.lineage import run_id
from tests.support.people import KEY, VIEW_SQL, People
from workloads.harness import free_port, start_agent

pytestmark = pytest.mark.integration

SOURCE, VIEW = "orch", "orch_people"
#: Seconds the events of a sync's publishing may take to reach the file (the publisher runs after the commit).
PUBLISHED_WITHIN_S = 60


@pytest.fixture(scope="module")
def setup(tmp_path_factory, logs_dir, special_service):
    """A view over a small SQLite table, synced once through the client, and a sync that failed
    because its agent was gone."""
    root = tmp_path_factory.mktemp("orchestration")
    people = People(root / "people.db", rows=500)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    client = Client(special_service.url)
    client.post("/v1/sources", {"name": SOURCE, "url": agent.url})
    client.post("/v1/views", {"name": VIEW, "sql": VIEW_SQL.format(source=SOURCE)})
    done = client.sync(VIEW)
    agent.stop()
    with pytest.raises(SyncFailed) as failure:
        client.sync(VIEW)
    yield {"client": client, "done": done, "failed": failure.value, "people": people, "lineage": special_service}
    client.close()


def test_the_client_runs_a_sync_to_its_end_and_reads_the_view(setup):
    client, done = setup["client"], setup["done"]
    assert done.succeeded and done.view == VIEW and done.finished_at
    assert done.metrics["rows_inserted"] == len(setup["people"].truth())
    view = client.view(VIEW)
    assert (view.key, view.columns[:2]) == (KEY, ["id", "name"])
    assert VIEW in [v.name for v in client.views()]
    assert [s.id for s in client.syncs(VIEW)][1] == done.id  # newest first: the failed one leads


def test_a_failed_sync_raises_with_its_record_and_says_it_may_pass_later(setup):
    failed = setup["failed"]
    assert failed.sync.status == "failed" and failed.sync.error_code == "agent_unreachable"
    assert failed.transient and failed.sync.error and failed.sync.id in str(failed)
    assert setup["client"].sync_record(VIEW, failed.sync.id) == failed.sync


def test_the_client_says_what_the_service_refused_and_when_it_is_not_there(setup):
    with pytest.raises(ServiceError) as refused:
        setup["client"].sync("no_such_view")
    assert refused.value.status == 404 and "no_such_view" in refused.value.detail and not refused.value.transient
    with Client(f"http://127.0.0.1:{free_port()}") as nobody, pytest.raises(Unreachable):
        nobody.views()


def test_each_sync_sends_its_lineage_events(setup):
    done, failed = setup["done"], setup["failed"].sync
    deadline = time.monotonic() + PUBLISHED_WITHIN_S
    while True:  # OTHER comes once the publisher applied the sync to the view's Delta table
        events = [e for e in _events(setup["lineage"].lineage_file) if e["job"]["name"] == VIEW]
        if any(e["eventType"] == "OTHER" for e in events) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    runs = {run_id(done.id): "done", run_id(failed.id): "failed"}
    for run in ("done", "failed"):  # each run's events in order; the two runs' may interleave
        kinds = [e["eventType"] for e in events if runs[e["run"]["runId"]] == run]
        assert kinds == (["START", "COMPLETE", "OTHER"] if run == "done" else ["START", "FAIL"]), (run, kinds)
    by_type = {(runs[e["run"]["runId"]], e["eventType"]): e for e in events}
    complete = by_type["done", "COMPLETE"]
    (source,) = complete["inputs"]
    assert (source["name"], source["facets"]["datasource"]["name"]) == ("people", SOURCE)
    (table,) = complete["outputs"]
    assert table["namespace"] == "file" and table["name"].endswith(f"/tables/{VIEW}")
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == done.metrics["rows_inserted"]
    assert [f["name"] for f in table["facets"]["schema"]["fields"]] == ["id", "name", "city", "score"]
    (applied,) = by_type["done", "OTHER"]["outputs"]
    version = int(applied["facets"]["version"]["datasetVersion"])
    history = DeltaTable(table["name"]).history()
    assert any(c["version"] == version and c.get("deltasieve.sync_id") == done.id for c in history), history
    assert by_type["failed", "FAIL"]["run"]["facets"]["errorMessage"]["message"].startswith("agent_unreachable: ")


def _events(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
