"""The pool of syncs: a few at once, one per source, oldest due first, large ones kept to a share, and cancelling syncs.

A service of the module's own allows two syncs at once and one per source
(SERVICE_MAX_CONCURRENT_SYNCS=2, SERVICE_MAX_SYNCS_PER_SOURCE=1), one of them large (a view
of LARGE_ROWS rows or more: SERVICE_LARGE_SYNC_ROWS, half the pool), over two SQLite
sources: `quick`, an agent that reads as fast as it can, and `paced`, one that reads at
most PACED_ROWS_PER_S rows per second (the agent's --max-rows-per-s), so that each of its
syncs takes seconds. The limits are observed from outside, in the sync records' start
and end times; a sync is held running by a fault proxy that stalls the agent's answer.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.support.faultproxy import FaultProxy, Stall
from tests.support.oracle import check_sync, keyed
from tests.support.people import KEY, VIEW_SQL, People
from workloads.harness import Api, Process, start_agent, start_service

pytestmark = pytest.mark.integration

ROWS = 2_000
#: The paced agent's read rate: a full read of ROWS takes about two seconds.
PACED_ROWS_PER_S = 1_000
#: A view over both sources: its sync takes a slot on each.
JOIN_SQL = (
    "SELECT q.id, p.id AS pid, q.name, p.score FROM quick.people q JOIN paced.people p ON p.id = q.id"
    " WHERE q.score >= 0 AND p.score >= 0"
)
#: Generous bound on how long a few small syncs may take on a loaded machine.
WITHIN_S = 300
#: Views of this many rows or more are large (SERVICE_LARGE_SYNC_ROWS): those of the fixture's sources are not.
LARGE_ROWS = 5_000
#: The small tables of the fairness test, their rows, and their schedule's period.
SMALL_TABLES, SMALL_ROWS, SMALL_EVERY_S = 24, 20, 5
#: What a small sync may wait beyond the syncs of its own source that ran before it: the
#: scheduler's look at the catalog (every second), and the runner's hand-over after each sync.
SLACK_S, HANDOVER_S = 2.0, 0.25


@pytest.fixture(scope="module")
def pool(tmp_path_factory, logs_dir):
    root = tmp_path_factory.mktemp("pool")
    quick_db, paced_db, held_db = (People(root / f"{n}.db", rows=ROWS, seed=i) for i, n in enumerate("qph"))
    quick = start_agent(f"sqlite:///{quick_db.path}", logs_dir)
    paced = start_agent(f"sqlite:///{paced_db.path}", logs_dir, extra=["--max-rows-per-s", str(PACED_ROWS_PER_S)])
    held = start_agent(f"sqlite:///{held_db.path}", logs_dir)
    proxy = FaultProxy("127.0.0.1", held.port)
    env = {
        "SERVICE_MAX_CONCURRENT_SYNCS": "2",
        "SERVICE_MAX_SYNCS_PER_SOURCE": "1",
        "SERVICE_SPARK_DRIVER_MEMORY": "1g",
        "SERVICE_LARGE_SYNC_ROWS": str(LARGE_ROWS),
    }
    service = start_service(root / "warehouse", logs_dir, env=env)
    api = Api(service.url)
    api.add_source("quick", quick.url)
    api.add_source("paced", paced.url)
    api.add_source("held", proxy.url)
    services = [service]

    def restart() -> tuple[Process, int]:
        """Stop the service as an operator would (SIGTERM) and start it again on its port; the
        new process, and where the stop's lines begin in their shared log."""
        offset = services[-1].log.stat().st_size
        services[-1].stop()
        services.append(start_service(root / "warehouse", logs_dir, port=service.port, env=env))
        return services[-1], offset

    dbs = {"quick": quick_db, "paced": paced_db, "held": held_db}
    yield api, dbs, proxy, restart
    proxy.release()
    api.close()
    services[-1].stop()
    proxy.close()
    for agent in (quick, paced, held):
        agent.stop()


def joined(quick: People, paced: People) -> dict:
    """JOIN_SQL evaluated on the two sources, keyed as `oracle.keyed` keys the service's rows."""
    names = {k[0]: row["name"] for k, row in quick.truth().items()}
    out = {}
    for k, row in paced.truth().items():
        if k[0] in names:
            out[(k[0], k[0])] = {"id": k[0], "pid": k[0], "name": names[k[0]], "score": row["score"]}
    return out


def record(api: Api, view: str, sync_id: str) -> dict:
    r = api.http.get(f"/v1/views/{view}/syncs/{sync_id}")
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(api: Api, view: str, sync_id: str, statuses: tuple[str, ...], within_s: float = WITHIN_S) -> dict:
    deadline = time.monotonic() + within_s
    while (sync := record(api, view, sync_id))["status"] not in statuses:
        assert time.monotonic() < deadline, f"sync {sync_id} of {view} still {sync['status']} after {within_s} s"
        time.sleep(0.2)
    return sync


def start(api: Api, view: str) -> str:
    r = api.http.post(f"/v1/views/{view}/syncs")
    assert r.status_code == 202, r.text
    return r.json()["id"]


def deltasieve(api: Api, *args: str) -> subprocess.CompletedProcess:
    """The command-line client as a user runs it, against the module's service."""
    return subprocess.run(
        [sys.executable, "-m", "deltasieve_cli", "--url", str(api.http.base_url), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def overlapping(a: dict, b: dict) -> bool:
    return a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]


def unschedule(api: Api, view: str) -> None:
    """Remove the view's schedule (refused while its sync is under way: tried again until it ends)."""
    deadline = time.monotonic() + WITHIN_S
    while (r := api.http.patch(f"/v1/views/{view}", json={"schedule": None})).status_code == 409:
        assert time.monotonic() < deadline, r.text
        time.sleep(0.1)
    assert r.status_code == 200, r.text


def metric(api: Api, line_start: str) -> float:
    for line in api.http.get("/metrics").text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {line_start} in /metrics")


def test_four_views_over_two_sources_run_one_per_source(pool):
    """Four loads started at once, and a join of both sources: never two against one agent,
    all exact, the waiting ones say how long they waited."""
    api, dbs, _, _ = pool
    views = {"q1": "quick", "q2": "quick", "p1": "paced", "p2": "paced"}
    for view, source in views.items():
        api.add_view(view, VIEW_SQL.format(source=source))
    api.add_view("qp", JOIN_SQL)
    ids = {view: start(api, view) for view in [*views, "qp"]}
    done = {view: wait_for(api, view, ids[view], ("succeeded", "failed")) for view in ids}
    assert done["qp"]["status"] == "succeeded", done["qp"]["error"]
    assert keyed(api.rows("qp"), ["id", "pid"]) == joined(dbs["quick"], dbs["paced"])
    for view in views:  # the join needs a slot on both sources: it ran alone
        assert not overlapping(done["qp"], done[view]), (done["qp"], done[view])
    assert done["qp"]["queued_s"] > 0
    for view, source in views.items():
        check_sync(api, view, KEY, {}, dbs[source].truth(), done[view])
    for first, second in (("q1", "q2"), ("p1", "p2")):
        a, b = sorted((done[first], done[second]), key=lambda s: s["started_at"])
        assert not overlapping(a, b), (a, b)  # one at a time against the agent
        assert b["started_at"] >= a["finished_at"]
        # it waited for the other's whole sync (no bound in seconds: a fast machine syncs in a blink)
        assert b["queued_s"] > 0 and b["queued_s"] >= a["metrics"]["wall_seconds"] * 0.5, (a, b)
    # the pool was used: a quick and a paced sync ran side by side
    assert any(overlapping(done[q], done[p]) for q in ("q1", "q2") for p in ("p1", "p2"))
    assert metric(api, 'deltasieve_sync_queue_wait_seconds_count{trigger="api"}') >= 4
    assert metric(api, "deltasieve_syncs_queued ") == 0


def test_due_scheduled_views_are_served_oldest_first(pool):
    """Three scheduled views on the paced source and three on the quick one, due every second:
    while a sync waits for its source, no other view of that source runs twice, and every
    view runs again and again (the quick source's views are not held behind the paced ones)."""
    api, dbs, _, _ = pool
    views = {f"sq{i}": "quick" for i in range(3)} | {f"sp{i}": "paced" for i in range(3)}
    for view, source in views.items():
        api.add_view(view, VIEW_SQL.format(source=source), schedule={"every_s": 1})
    deadline = time.monotonic() + WITHIN_S
    while True:
        history = {v: [s for s in api.http.get(f"/v1/views/{v}/syncs").json() if s["finished_at"]] for v in views}
        if all(len(h) >= 3 for h in history.values()):
            break
        assert time.monotonic() < deadline, {v: len(h) for v, h in history.items()}
        time.sleep(1)
    for view in views:  # the schedules off, so that nothing runs while we read the records
        unschedule(api, view)
    api.wait_idle()
    syncs = [{"view": v, **s} for v in views for s in api.http.get(f"/v1/views/{v}/syncs").json() if s["finished_at"]]
    assert all(s["status"] == "succeeded" for s in syncs), [s["error"] for s in syncs if s["error"]]
    for source in ("quick", "paced"):
        mine = sorted((s for s in syncs if views[s["view"]] == source), key=lambda s: s["started_at"])
        for a, b in zip(mine, mine[1:], strict=False):
            assert b["started_at"] >= a["finished_at"], (a, b)  # one at a time against the agent
        for waiting in mine:
            turns = [s["view"] for s in mine if waiting["created_at"] < s["started_at"] < waiting["started_at"]]
            assert len(turns) == len(set(turns)) <= 2, (waiting, turns)  # each other view once at most
    for view, source in views.items():
        assert keyed(api.rows(view), KEY) == dbs[source].truth()


def held_and_queued(api, proxy, people: People, views: tuple[str, str]) -> tuple[dict, str, str]:
    """Both views loaded from the held source, the source changed, then the first view's sync
    held at its agent and the second's queued behind it (the source's one slot): the rows
    loaded, the running sync's id and the queued one's."""
    for view in views:
        api.add_view(view, VIEW_SQL.format(source="held"))
        check_sync(api, view, KEY, {}, people.truth(), api.sync(view))
    loaded = people.truth()
    people.change()
    connections = proxy.connections
    proxy.plan(Stall(0), Stall(0), Stall(0))  # the agent's answers are held from now on
    running = start(api, views[0])
    wait_for(api, views[0], running, ("running",))
    deadline = time.monotonic() + 120
    while proxy.connections == connections:  # it waits on the agent
        assert time.monotonic() < deadline, "the sync did not reach the agent"
        time.sleep(0.1)
    queued = start(api, views[1])
    time.sleep(1)
    assert record(api, views[1], queued)["status"] == "queued"
    return loaded, running, queued


def test_cancel_a_queued_and_a_running_sync(pool):
    """A running sync held at its agent and a queued one behind it on the same source: the
    queued one is cancelled and never runs, the running one stops, the view keeps its last
    version, and the next sync is exact."""
    api, dbs, proxy, _ = pool
    people = dbs["held"]
    loaded, running, queued = held_and_queued(api, proxy, people, ("h1", "h2"))

    cancelled = deltasieve(api, "sync", "h2", "--cancel", "--json")  # the view's sync under way: the queued one
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["id"] == queued
    gone = record(api, "h2", queued)
    assert (gone["status"], gone["error_code"], gone["started_at"], gone["queued_s"]) == (
        "failed",
        "cancelled",
        None,
        None,
    ), gone
    assert api.http.delete(f"/v1/views/h2/syncs/{queued}").status_code == 409  # finished
    again = deltasieve(api, "sync", "h2", "--cancel")
    assert again.returncode == 1 and "no sync of view h2 is queued or running" in again.stderr, again.stderr

    r = api.http.delete(f"/v1/views/h1/syncs/{running}")
    assert r.status_code == 202, r.text
    stopped = wait_for(api, "h1", running, ("succeeded", "failed"), 60)
    assert (stopped["status"], stopped["error_code"]) == ("failed", "cancelled"), stopped
    assert "cancelled" in stopped["error"]
    assert api.http.delete(f"/v1/views/h1/syncs/{running}").status_code == 409
    assert api.http.delete("/v1/views/h1/syncs/no-such-sync").status_code == 404
    assert api.http.delete(f"/v1/views/h1/syncs/{queued}").status_code == 404  # h2's, not h1's
    assert keyed(api.rows("h1"), KEY) == loaded  # the view is at its last version
    assert record(api, "h2", queued)["started_at"] is None  # it never ran

    proxy.plan()  # the agent answers again
    proxy.release()
    truth = people.truth()
    for view in ("h1", "h2"):
        check_sync(api, view, KEY, loaded, truth, api.sync(view))


def test_queued_syncs_cancelled_in_one_call(pool):
    """DELETE /v1/syncs?status=queued cancels the queued syncs, of the views named or all, and
    answers how many; the running one goes on; anything else it is asked is a 4xx that says why."""
    api, _, proxy, _ = pool
    views = ("b1", "b2", "b3")
    for view in views:
        api.add_view(view, VIEW_SQL.format(source="held"))
    connections = proxy.connections
    proxy.plan(Stall(0), Stall(0), Stall(0))  # b1's load is held at its agent; b2's and b3's wait for the source
    running = start(api, "b1")
    deadline = time.monotonic() + 120
    while proxy.connections == connections:
        assert time.monotonic() < deadline, "the sync did not reach the agent"
        time.sleep(0.1)
    queued = {view: start(api, view) for view in views[1:]}

    for params, status, words in (
        ({"status": "running"}, 422, "only queued syncs"),
        ({}, 422, "status"),
        ({"status": "queued", "view": "no-such-view"}, 404, "no-such-view"),
    ):
        r = api.http.delete("/v1/syncs", params=params)
        assert r.status_code == status and words in r.text, (params, r.status_code, r.text)
    r = api.http.delete("/v1/syncs", params={"status": "queued", "view": ["b2", "b1"]})
    assert (r.status_code, r.json()) == (200, {"cancelled": 1}), r.text
    assert record(api, "b3", queued["b3"])["status"] == "queued"
    r = api.http.delete("/v1/syncs", params={"status": "queued"})
    assert (r.status_code, r.json()) == (200, {"cancelled": 1}), r.text
    for view, sync_id in queued.items():
        gone = record(api, view, sync_id)
        assert (gone["status"], gone["error_code"], gone["started_at"]) == ("failed", "cancelled", None), gone
    assert record(api, "b1", running)["status"] == "running"
    assert api.http.delete("/v1/syncs", params={"status": "queued"}).json() == {"cancelled": 0}

    assert api.http.delete(f"/v1/views/b1/syncs/{running}").status_code == 202
    assert wait_for(api, "b1", running, ("succeeded", "failed"), 60)["error_code"] == "cancelled"
    proxy.plan()  # the agent answers again
    proxy.release()


def test_a_stopped_service_ends_its_running_sync_as_interrupted(pool):
    """SIGTERM while a sync waits on its agent and another is queued: the running one is told
    to stop and recorded `interrupted` before the catalog closes (no traceback in the log),
    and retried once at the next start by a sync that names it; the queued one is queued
    again and runs then; both exact, and the stopped sync's view keeps its last version
    until its retry commits."""
    api, dbs, proxy, restart = pool
    people = dbs["held"]
    before, running, queued = held_and_queued(api, proxy, people, ("s1", "s2"))
    service, offset = restart()
    log = service.log.read_bytes()[offset:].decode(errors="replace")
    # the stop ended well (pyspark itself may print a trace when its JVM, in the same process
    # group, got the SIGTERM first: ours are the lifespan's and the syncs')
    assert "shutdown failed" not in log and "closed database" not in log and "Exception in thread" not in log, log[
        -4000:
    ]
    stopped, again = record(api, "s1", running), record(api, "s2", queued)
    assert (stopped["status"], stopped["error_code"]) == ("failed", "interrupted"), stopped
    assert again["status"] in ("queued", "running") and again["trigger"] == "api", again
    (retry,) = [s for s in api.http.get("/v1/views/s1/syncs").json() if s.get("retry_of") == running]
    assert retry["trigger"] == "retry" and retry["status"] in ("queued", "running"), retry
    assert keyed(api.rows("s1"), KEY) == before  # the retry waits on the held agent too
    proxy.plan()
    proxy.release()
    truth = people.truth()
    ran = wait_for(api, "s2", queued, ("succeeded", "failed"))
    assert ran["status"] == "succeeded" and ran["started_at"] is not None, ran
    assert keyed(api.rows("s2"), KEY) == truth
    check_sync(api, "s1", KEY, before, truth, wait_for(api, "s1", retry["id"], ("succeeded", "failed")))


def small_source(path) -> str:
    """A SQLite file of SMALL_TABLES tables of SMALL_ROWS rows (an ERP's codes): its URL."""
    with sqlite3.connect(path) as c:
        for t in range(SMALL_TABLES):
            c.execute(f"CREATE TABLE code_{t:03d} (id INTEGER PRIMARY KEY, label TEXT NOT NULL)")
            c.executemany(f"INSERT INTO code_{t:03d} VALUES (?, ?)", [(i, f"label {t}.{i}") for i in range(SMALL_ROWS)])
    return f"sqlite:///{path}"


def test_large_syncs_keep_to_a_share_and_small_views_keep_their_schedules(pool, tmp_path, logs_dir):
    """Two large views on sources of their own, each synced with its agent's answer held, and
    SMALL_TABLES small tables of a third source mirrored on a schedule: one large sync runs and
    the other waits (the pool's second slot is the small views'), and meanwhile every small
    view loads and syncs on schedule, each waiting only for the syncs of its own source that
    ran before it (each other view once at most), never for a large one. Without the share, the
    two held syncs would fill the pool and no small view would load."""
    api = pool[0]
    big, agents, proxies = {}, [], []
    try:
        for i, name in enumerate(("big_a", "big_b")):
            big[name] = People(tmp_path / f"{name}.db", rows=LARGE_ROWS + 100, seed=10 + i)
            agents.append(start_agent(f"sqlite:///{big[name].path}", logs_dir))
            proxies.append(FaultProxy("127.0.0.1", agents[-1].port))
            api.add_source(name, proxies[-1].url)
            api.add_view(f"l_{name}", VIEW_SQL.format(source=name))
            loaded = api.sync(f"l_{name}")
            assert loaded["status"] == "succeeded" and loaded["metrics"]["rows_after"] >= LARGE_ROWS, loaded
            big[name].change()
            proxies[-1].plan(Stall(0), Stall(0), Stall(0))  # its agent's answers are held from now on
        held = {f"l_{name}": start(api, f"l_{name}") for name in big}
        agents.append(start_agent(small_source(tmp_path / "codes.db"), logs_dir))
        try:
            api.add_source("codes", agents[-1].url)
            r = api.http.post(
                "/v1/sources/codes/mirror", json={"schedule": {"every_s": SMALL_EVERY_S}, "destinations": []}
            )
            assert r.status_code == 200, r.text
            small = [m["view"] for m in r.json()["created"]]
            assert len(small) == SMALL_TABLES
            deadline = time.monotonic() + WITHIN_S
            while True:  # until every small view has loaded and synced on its schedule at least once
                statuses = [record(api, view, sync_id)["status"] for view, sync_id in held.items()]
                assert statuses.count("running") <= 1, statuses  # the large syncs' share: one slot of two
                done = {v: [s for s in api.http.get(f"/v1/views/{v}/syncs").json() if s["finished_at"]] for v in small}
                if all(sum(s["status"] == "succeeded" for s in d) >= 2 for d in done.values()):
                    break
                assert time.monotonic() < deadline, {v: len(d) for v, d in done.items()}
                time.sleep(0.5)
            assert sorted(statuses) == ["queued", "running"], statuses  # the held one runs all along
            for view in small:
                unschedule(api, view)
        finally:
            for view, sync_id in held.items():  # a queued or a running sync is cancelled, then the agents answer again
                api.http.delete(f"/v1/views/{view}/syncs/{sync_id}")
            for proxy in proxies:
                proxy.plan()
                proxy.release()
        api.wait_idle()
        syncs = [{"view": v, **s} for v in small for s in api.http.get(f"/v1/views/{v}/syncs").json()]
        assert all(s["status"] == "succeeded" for s in syncs), [s["error"] for s in syncs if s["error"]]
        ran = sorted(syncs, key=lambda s: s["started_at"])
        for a, b in zip(ran, ran[1:], strict=False):
            assert b["started_at"] >= a["finished_at"], (a, b)  # one at a time against the codes agent
        for view in small:
            mine = sorted((s for s in syncs if s["view"] == view), key=lambda s: s["created_at"])
            for prev, sync in zip(mine, mine[1:], strict=False):
                if sync["trigger"] != "schedule":
                    continue
                due = _at(prev["finished_at"]) + SMALL_EVERY_S
                before = [s for s in ran if due <= _at(s["started_at"]) < _at(sync["started_at"])]
                assert len({s["view"] for s in before}) == len(before), (sync, before)  # each other view once at most
                busy = sum(_at(s["finished_at"]) - _at(s["started_at"]) for s in before)
                assert _at(sync["started_at"]) - due <= busy + SLACK_S + HANDOVER_S * len(before), (sync, busy, before)
    finally:  # the agents this test started, whatever became of it
        for agent in agents:
            agent.stop()
        for proxy in proxies:
            proxy.close()


def _at(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()
