"""Concurrency: one sync per view at a time, several views at once, no redefinition under a sync.

Syncs are made busy deterministically: a fault proxy between the service and the agent
(tests/support/faultproxy.py) holds the agent's answers until the test releases them, so a
sync stays `running` (and the next one `queued`) for exactly as long as the test needs.
The session's service allows two syncs at once (SERVICE_MAX_CONCURRENT_SYNCS=2) and one
per source (SERVICE_MAX_SYNCS_PER_SOURCE=1): the agent is registered twice, as `busy` and
`busy_too`, so that two views of it run side by side (tests/integration/test_sync_pool.py
has the per-source limit).
"""

from __future__ import annotations

import time

import pytest

from tests.support.faultproxy import FaultProxy, Stall
from tests.support.oracle import check_sync, keyed
from tests.support.people import KEY, VIEW_SQL, People
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

#: Generous bound on how long a released sync (a load of a few thousand rows) may take under load.
FINISH_WITHIN_S = 300


@pytest.fixture(scope="module")
def held(api, tmp_path_factory, logs_dir):
    # The session's service is shared: a sync another module left under way would hold one
    # of the two workers, and the syncs below would queue behind it.
    api.wait_idle()
    people = People(tmp_path_factory.mktemp("busy") / "people.db", rows=3_000)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    proxy = FaultProxy("127.0.0.1", agent.port)
    api.add_source("busy", proxy.url)
    api.add_source("busy_too", proxy.url)
    yield people, proxy
    proxy.release()
    proxy.close()
    agent.stop()


def wait_for(api, view: str, sync_id: str, statuses: tuple[str, ...], within_s: float = FINISH_WITHIN_S) -> dict:
    deadline = time.monotonic() + within_s
    while True:
        r = api.http.get(f"/v1/views/{view}/syncs/{sync_id}")
        assert r.status_code == 200, r.text
        record = r.json()
        if record["status"] in statuses:
            return record
        assert time.monotonic() < deadline, f"sync {sync_id} of {view} still {record['status']} after {within_s} s"
        time.sleep(0.2)


def start(api, view: str) -> str:
    r = api.http.post(f"/v1/views/{view}/syncs")
    assert r.status_code == 202, r.text
    return r.json()["id"]


def conflict(r, *words: str) -> str:
    assert r.status_code == 409, r.text
    detail = r.json()["detail"]
    for word in words:
        assert word in detail, detail
    return detail


def test_busy_views_refuse_a_second_sync_a_delete_and_a_redefinition(api, held):
    people, proxy = held
    sql, sql_b = VIEW_SQL.format(source="busy"), VIEW_SQL.format(source="busy_too")
    for name in ("busy_a", "busy_b", "busy_c"):
        api.add_view(name, sql_b if name == "busy_b" else sql)
    defined = {name: api.http.get(f"/v1/views/{name}").json() for name in ("busy_a", "busy_b", "busy_c")}
    listed = api.http.get("/v1/views").json()

    proxy.plan(Stall(0), Stall(0))  # the next two answers of the agent are held
    a, b = start(api, "busy_a"), start(api, "busy_b")
    wait_for(api, "busy_a", a, ("running",), 120)
    wait_for(api, "busy_b", b, ("running",), 120)
    deadline = time.monotonic() + 120
    while proxy.connections < 2:  # both are waiting on the agent at the same time
        assert time.monotonic() < deadline, "the two syncs did not both reach the agent"
        time.sleep(0.1)
    c = start(api, "busy_c")  # both workers are busy: this one waits its turn
    assert api.http.get(f"/v1/views/busy_c/syncs/{c}").json()["status"] == "queued"

    for view, sync_id, status in (("busy_a", a, "running"), ("busy_c", c, "queued")):
        conflict(api.http.post(f"/v1/views/{view}/syncs"), sync_id, status)
        conflict(api.http.post(f"/v1/views/{view}/syncs", params={"wait": "true"}), sync_id)
        conflict(api.http.delete(f"/v1/views/{view}"), "cannot be deleted", sync_id, status, "wait")
        conflict(
            api.http.put(f"/v1/views/{view}", json={"sql": sql + " AND p.score < 10"}),
            "cannot be redefined",
            sync_id,
            status,
        )
    # nothing changed: same definitions, same list, one sync each
    assert api.http.get("/v1/views").json() == listed
    for name, view in defined.items():
        assert api.http.get(f"/v1/views/{name}").json() == view
        assert len(api.http.get(f"/v1/views/{name}/syncs").json()) == 1

    proxy.release()
    truth = people.truth()
    for view, sync_id in (("busy_a", a), ("busy_b", b), ("busy_c", c)):
        record = wait_for(api, view, sync_id, ("succeeded", "failed"))
        check_sync(api, view, KEY, {}, truth, record)
    ra = api.http.get(f"/v1/views/busy_a/syncs/{a}").json()
    rb = api.http.get(f"/v1/views/busy_b/syncs/{b}").json()
    # side by side: each started before the other finished
    assert ra["started_at"] < rb["finished_at"] and rb["started_at"] < ra["finished_at"]

    # once idle, a view can be redefined: history and rows stay until its next sync applies it
    narrow = sql_b + " AND p.score < 100"
    history = api.http.get("/v1/views/busy_b/syncs").json()
    r = api.http.put("/v1/views/busy_b", json={"sql": narrow})
    assert r.status_code == 200, r.text
    assert r.json()["sql"] == narrow and r.json()["name"] == "busy_b"
    assert api.http.get("/v1/views/busy_b/syncs").json() == history
    assert keyed(api.rows("busy_b"), KEY) == truth
    sync = api.sync("busy_b")
    assert sync["trigger"] == "redefine", sync
    check_sync(api, "busy_b", KEY, truth, {k: v for k, v in truth.items() if v["score"] < 100}, sync)

    # ... and deleted, with its rows and history; the name is free again
    assert api.http.delete("/v1/views/busy_a").status_code == 204
    for path in ("/v1/views/busy_a", "/v1/views/busy_a/rows", "/v1/views/busy_a/syncs", f"/v1/views/busy_a/syncs/{a}"):
        assert api.http.get(path).status_code == 404, path
    assert "busy_a" not in [v["name"] for v in api.http.get("/v1/views").json()]
    assert api.http.delete("/v1/views/busy_a").status_code == 404
    api.add_view("busy_a", sql)
    people.change()
    sync = api.sync("busy_a")
    check_sync(api, "busy_a", KEY, {}, people.truth(), sync)  # a fresh load, not the old rows
    before = keyed(api.rows("busy_c"), KEY)
    sync = api.sync("busy_c")
    check_sync(api, "busy_c", KEY, before, people.truth(), sync)
