"""Retention, freshness and source health through a service of the module's own, which keeps
3 syncs per view (SERVICE_KEEP_DELTAS=3), applies the policy every second and checks its
sources' agents every 2 s (service/retention.py, service/source_health.py, service/metrics.py)."""

from __future__ import annotations

import json
import re
import sqlite3
import time

import pytest

from tests.support import polling
from tests.support.oracle import check_sync
from tests.support.people import KEY, VIEW_SQL, People
from workloads.harness import Api, free_port, start_agent, start_service

pytestmark = pytest.mark.integration

KEEP = 3
SYNCS = 6
WAIT_S = 60


@pytest.fixture(scope="module")
def kept(tmp_path_factory, logs_dir):
    """(api, data dir): a service with a short retention and source checks of its own."""
    data_dir = tmp_path_factory.mktemp("retention") / "warehouse"
    env = {
        "SERVICE_KEEP_DELTAS": str(KEEP),
        "SERVICE_RETENTION_INTERVAL_S": "1",
        "SERVICE_SOURCE_CHECK_INTERVAL_S": "2",
        "SERVICE_SPARK_DRIVER_MEMORY": "1g",
        "SERVICE_SCHEDULER": "false",
    }
    proc = start_service(data_dir, logs_dir, env=env)
    api = Api(proc.url)
    yield api, data_dir
    api.close()
    proc.stop()


@pytest.fixture(scope="module")
def people(tmp_path_factory, logs_dir, kept):
    api, _ = kept
    people = People(tmp_path_factory.mktemp("people") / "people.db", rows=2_000, seed=38)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    api.add_source("ret", agent.url)
    yield people
    agent.stop()


def until(what: str, check):
    return polling.until(what, check, WAIT_S)


def metric(api: Api, name: str, **labels: str) -> float | None:
    """The value of one series of GET /metrics, None when absent."""
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in api.http.get("/metrics").text.splitlines():
        match = re.fullmatch(rf"{name}\{{{re.escape(wanted)}\}} (\S+)", line)
        if match:
            return float(match.group(1))
    return None


def test_retention_keeps_the_policys_syncs_and_answers_410_for_the_others(kept, people):
    api, data_dir = kept
    api.add_view("ret_v", VIEW_SQL.format(source="ret"))
    ids, truths, before = [], [], {}
    for rnd in range(SYNCS):
        if rnd:
            people.change(updates=40, inserts=20, deletes=10)
        truth = people.truth()
        sync = api.sync("ret_v")
        check_sync(api, "ret_v", KEY, before, truth, sync)
        ids.append(sync["id"])
        truths.append(truth)
        before = truth

    def kept_ids() -> list[str]:
        return [s["id"] for s in api.http.get("/v1/views/ret_v/syncs").json()][::-1]

    store = data_dir / "views" / "ret_v"
    current = json.loads((store / "CURRENT").read_text())
    assert current["sync_id"] == ids[-1]  # the current version's sync is always kept

    def stored() -> tuple[list[str], list[int]]:
        """The syncs whose delta is stored, and the versions (a sync's files go just after its record)."""
        deltas = sorted(p.name for p in (store / "deltas").iterdir())
        return deltas, sorted(int(p.name) for p in (store / "versions").iterdir())

    until("only the policy's syncs kept", lambda: kept_ids() == ids[-KEEP:])
    # their deltas and the versions they committed (with_before reads them), none of the removed ones'
    kept_files = (sorted(ids[-KEEP:]), list(range(current["version"] - KEEP + 1, current["version"] + 1)))
    until("only the kept syncs' files", lambda: stored() == kept_files)

    removed = ids[0]
    r = api.http.get("/v1/views/ret_v/changes", params={"after": removed})
    assert r.status_code == 410 and "retention" in r.json()["detail"] and "/rows" in r.json()["detail"], r.text
    assert api.http.get(f"/v1/views/ret_v/syncs/{removed}").status_code == 410
    assert api.http.get(f"/v1/views/ret_v/syncs/{removed}/delta").status_code == 410
    r = api.http.get("/v1/views/ret_v/changes")  # from the start: the load is gone
    assert r.status_code == 410 and "load" in r.json()["detail"], r.text
    r = api.http.get("/v1/views/ret_v/changes", params={"after": "0" * 32})
    assert r.status_code == 404, r.text

    # the way out the 410 names: the rows, then the feed after the sync they hold
    rows = api.http.get("/v1/views/ret_v/rows")
    assert rows.headers["X-Last-Sync"] == ids[-1]
    # a position kept still feeds: the deltas after the oldest kept sync turn its rows into the view's
    feed = api.http.get("/v1/views/ret_v/changes", params={"after": ids[-KEEP]})
    assert feed.status_code == 200 and feed.headers["X-Syncs"] == str(KEEP - 1), feed.text
    rows_then = dict(truths[-KEEP])
    for line in map(json.loads, feed.text.splitlines()):
        k = tuple(line["row"][c] for c in KEY)
        if line["op"] == "delete":
            rows_then.pop(k)
        else:
            rows_then[k] = line["row"]
    assert rows_then == truths[-1]

    # one more sync: the oldest kept goes, the view stays exact
    people.change(updates=40, inserts=20, deletes=10)
    truth = people.truth()
    sync = api.sync("ret_v")
    check_sync(api, "ret_v", KEY, truths[-1], truth, sync)
    until("the next oldest removed", lambda: kept_ids() == [*ids[-KEEP + 1 :], sync["id"]])
    assert api.http.get("/v1/views/ret_v/changes", params={"after": ids[-KEEP]}).status_code == 410


def test_a_view_that_never_succeeded_has_freshness_series_at_zero(kept, people):
    api, _ = kept
    api.add_view("ret_idle", VIEW_SQL.format(source="ret"))
    assert metric(api, "deltasieve_last_success_timestamp_seconds", view="ret_idle") == 0.0
    assert metric(api, "deltasieve_data_as_of_timestamp_seconds", view="ret_idle") == 0.0
    assert api.http.get("/v1/views/ret_idle").json()["data_as_of"] is None
    sync = api.sync("ret_idle")
    assert sync["status"] == "succeeded"
    view = api.http.get("/v1/views/ret_idle").json()
    assert view["data_as_of"] == sync["started_at"]
    as_of = metric(api, "deltasieve_data_as_of_timestamp_seconds", view="ret_idle")
    last = metric(api, "deltasieve_last_success_timestamp_seconds", view="ret_idle")
    assert as_of and last and as_of <= last <= time.time()


def test_a_source_with_a_wrong_token_or_no_agent_shows_failing_health(kept, people, tmp_path, logs_dir):
    api, _ = kept
    db = tmp_path / "locked.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    agent = start_agent(f"sqlite:///{db}", logs_dir, token="the-right-token")
    try:
        api.add_source("ret_locked", agent.url, "a-wrong-token", check=False)
        api.add_source("ret_gone", f"http://127.0.0.1:{free_port()}", check=False)

        def health(name: str) -> dict | None:
            return api.http.get(f"/v1/sources/{name}").json()["health"]

        refused = until(
            "the wrong token refused", lambda: (h := health("ret_locked")) and h["status"] == "refused" and h
        )
        assert "401" in refused["error"] and refused["since"] <= refused["checked_at"]
        gone = until("no agent unreachable", lambda: (h := health("ret_gone")) and h["status"] == "unreachable" and h)
        assert gone["error"]
        assert until("the good source ok", lambda: (h := health("ret")) and h["status"] == "ok")
        listed = {s["name"]: s["health"]["status"] for s in api.http.get("/v1/sources").json() if s["health"]}
        assert listed["ret_locked"] == "refused" and listed["ret"] == "ok"
        assert metric(api, "deltasieve_source_up", source="ret_locked") == 0.0
        assert metric(api, "deltasieve_source_up", source="ret") == 1.0
        # the token put right: the next check finds it ok
        r = api.http.patch("/v1/sources/ret_locked", json={"token": "the-right-token"})
        assert r.status_code == 200 and r.json()["health"]["status"] == "ok", r.text
        assert metric(api, "deltasieve_source_up", source="ret_locked") == 1.0
        # a sync failing so says which of the two it met, for programs
        api.add_view("ret_locked_t", "SELECT id FROM ret_locked.t")
        r = api.http.patch("/v1/sources/ret_locked", json={"token": "a-wrong-token", "check": False})
        assert r.status_code == 200, r.text
        refused_sync = api.sync("ret_locked_t")
        agent.stop()
        api.http.patch("/v1/sources/ret_locked", json={"token": "the-right-token", "check": False})
        unreachable_sync = api.sync("ret_locked_t")
        codes = refused_sync["error_code"], unreachable_sync["error_code"]
        assert codes == ("agent_refused", "agent_unreachable"), (refused_sync, unreachable_sync)
    finally:
        agent.stop()


def test_a_feed_reader_mid_stream_keeps_the_syncs_it_reads(kept, tmp_path, logs_dir):
    api, _ = kept
    big = People(tmp_path / "big.db", rows=100_000, seed=7)
    agent = start_agent(f"sqlite:///{big.path}", logs_dir)
    try:
        api.add_source("ret_big", agent.url)
        api.add_view("ret_bigv", VIEW_SQL.format(source="ret_big"))
        load = api.sync("ret_bigv")
        loaded = big.truth()
        # an answer of some 10 MB: the service's writes block on the socket while the reader pauses
        with api.http.stream("GET", "/v1/views/ret_bigv/changes") as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            got = [next(lines) for _ in range(10)]
            for _ in range(KEEP):  # the load falls outside the policy meanwhile
                big.change(updates=10, inserts=5, deletes=2)
                assert api.sync("ret_bigv")["status"] == "succeeded"
            time.sleep(3)  # three rounds of retention
            listed = [s["id"] for s in api.http.get("/v1/views/ret_bigv/syncs").json()]
            assert load["id"] in listed, "a sync a reader is streaming was removed"
            got += [line for line in lines if line]
        rows = [json.loads(line) for line in got]
        assert {row["op"] for row in rows} == {"insert"} and len(rows) == len(loaded)
        assert {(row["row"]["id"],) for row in rows} == loaded.keys()
        # the reader gone, the load goes
        until("the load removed", lambda: api.http.get(f"/v1/views/ret_bigv/syncs/{load['id']}").status_code == 410)
    finally:
        agent.stop()
