"""Small and first syncs: a no-change sync's fixed cost, and the first sync after a load at any churn.

A sync with nothing committed at the source since the last one reads no row: its change
token proves it (pipeline/change_token.py), in one request of a few hundred bytes, or,
where the statistics expect changes, in the sketch request the token rides on; a write
committed anywhere in the file, or a restarted agent, makes the next sync read, and every
sync stays exact. Without tokens (an agent run with --no-change-token), byte counts are
deterministic where timings are not, so they are asserted here: a sync with nothing changed
moves at most 1 KiB of request and answer bodies (both ways; HTTP's headers left out) on a
small SQLite view and at most 2 % of its load; an agent restarted between syncs no longer
holds the site query's reference and is sent it in full again, and the sync stays exact;
the first sync after a load costs at most 1.1× a full_ship sync of the same change, however
much of the table changed (auto ships the site query whole rather than reconcile a change
that large).
"""

from __future__ import annotations

import sqlite3

import pytest

from tests.support import older_agent
from tests.support.faultproxy import FaultProxy, Truncate
from tests.support.oracle import check_sync
from tests.support.people import KEY, VIEW_SQL, People
from tests.support.special import SMALL_SYNC_ROWS
from warehouse.pipeline import change_token
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

#: The issue's goal for a no-change sync: 1 KiB of bodies, both ways.
FIXED_COST_BYTES = 1024
#: ... and, on a small table, 2 % of its load (headers included).
FIXED_SHARE_OF_LOAD = 0.02
#: The first sync after a load costs at most this times full_ship's bytes.
FIRST_SYNC_OVER_FULL_SHIP = 1.1


def _moved(m: dict) -> int:
    return m["bytes_to_agent"] + m["bytes_from_agent"]


@pytest.fixture(scope="module")
def small(tmp_path_factory, logs_dir, api):
    """A ~5,500-row view's source and its agent (restartable on the same port)."""
    people = People(tmp_path_factory.mktemp("small") / "people.db", rows=5_600, seed=5)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    api.add_source("small", agent.url)
    yield people, agent
    agent.stop()


def _statistics(api, view: str) -> dict:
    stats = api.http.get(f"/v1/views/{view}/statistics").json()["sites"][0]
    return {
        "tuples": stats["update_statistics"]["tuples"],
        "observations": stats["update_statistics"]["observations"],
        "syncs": [(d["tno"], d["dno"]) for d in stats["deletion_statistics"]["syncs"]],
    }


def _commit_elsewhere(people: People) -> None:
    """A committed write to a table of the source file that the view does not read."""
    with sqlite3.connect(people.path) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS elsewhere (n INTEGER)")
        conn.execute("INSERT INTO elsewhere VALUES (1)")


def test_a_no_change_sync_reads_nothing_by_its_change_token(api, small, logs_dir):
    """Syncs whose statistics expect nothing ask for the token on its own, before planning
    (where they expect changes, it rides on the exchange's first request: the next test)."""
    people, agent = small
    api.add_view("small_people", VIEW_SQL.format(source="small"))  # auto, the default
    load = api.sync("small_people")
    check_sync(api, "small_people", KEY, {}, people.truth(), load)
    before = people.truth()
    for _ in range(2):  # the first after the load guesses; the second expects what it saw: nothing
        seen = _statistics(api, "small_people")
        still = api.sync("small_people")
        check_sync(api, "small_people", KEY, before, before, still)
        m = still["metrics"]
        assert m["unchanged_by_token"] is True and m["rows_scanned"] == 0 and m["round_trips"] == 1, m
        (call,) = m["sites"][0]["calls"]  # the token, the site query by reference: nothing else
        assert call["call"] == "POST /v1/change_token" and call["body_to_agent"] < 200, call
        assert m["body_bytes_to_agent"] + m["body_bytes_from_agent"] <= FIXED_COST_BYTES, m
        assert _moved(m) <= FIXED_SHARE_OF_LOAD * _moved(load["metrics"]), (_moved(m), _moved(load["metrics"]))
        # the update and deletion statistics are an empty delta's: every tuple saw one sync more
        now = _statistics(api, "small_people")
        assert now["tuples"] == seen["tuples"] == len(before), (seen, now)
        assert now["observations"] == seen["observations"] + len(before), (seen, now)
        assert now["syncs"] == [*seen["syncs"], (len(before), 0)], (seen, now)
    people.change(updates=30, inserts=10, deletes=5)
    changed = api.sync("small_people")
    check_sync(api, "small_people", KEY, before, people.truth(), changed)
    assert changed["metrics"]["unchanged_by_token"] is False and changed["metrics"]["rows_scanned"] > 0
    before = people.truth()
    # a write committed to a table the view does not read: the next sync reads, and finds nothing
    _commit_elsewhere(people)
    elsewhere = api.sync("small_people")
    check_sync(api, "small_people", KEY, before, before, elsewhere)
    assert elsewhere["metrics"]["unchanged_by_token"] is False, elsewhere["metrics"]
    assert elsewhere["metrics"]["rows_scanned"] == len(before), elsewhere["metrics"]
    # after syncs carried over by their token, a change is found exactly (the statistics held)
    people.change(updates=20, inserts=5, deletes=5)
    found = api.sync("small_people")
    check_sync(api, "small_people", KEY, before, people.truth(), found)
    before = people.truth()
    assert api.sync("small_people")["metrics"]["unchanged_by_token"] is True

    # a restarted agent gives other tokens: the next sync reads though nothing changed, and
    # sends the site query in full again, once (the agent no longer holds its reference); the
    # statistics expect changes, so the token rides on the sketch request
    port = int(agent.url.rsplit(":", 1)[1])
    agent.stop()
    restarted = start_agent(f"sqlite:///{people.path}", logs_dir, port=port)
    try:
        after_restart = api.sync("small_people")
        check_sync(api, "small_people", KEY, before, before, after_restart)
        m = after_restart["metrics"]
        assert m["unchanged_by_token"] is False and m["rows_scanned"] == len(before) and m["token_rode"], m
        calls = [c["call"] for c in m["sites"][0]["calls"]]
        assert calls[:2] == ["POST /v1/sketch", "POST /v1/sketch"], calls
        assert api.sync("small_people")["metrics"]["rows_scanned"] == 0
    finally:
        restarted.stop()


def test_without_change_tokens_a_no_change_sync_moves_under_a_kibibyte_of_bodies(api, small, logs_dir):
    """An agent run with --no-change-token: every sync reads; one that finds nothing, where
    the statistics expect little change, is the sketch's probe. The load learnt that the agent
    gives no token: later syncs do not ask. Once syncs find changes, the probe is left out
    (budget.probe_pays): a sync that then finds nothing is the main stage, still one request."""
    people, _ = small
    plain = start_agent(f"sqlite:///{people.path}", logs_dir, extra=["--no-change-token"])
    try:
        api.add_source("plain", plain.url)
        api.add_view("plain_people", VIEW_SQL.format(source="plain"))
        load = api.sync("plain_people")
        check_sync(api, "plain_people", KEY, {}, people.truth(), load)
        before = people.truth()
        for _ in range(2):  # the first after the load guesses; the second expects what it saw: nothing
            still = api.sync("plain_people")
            check_sync(api, "plain_people", KEY, before, before, still)
            m = still["metrics"]
            assert "unchanged_by_token" not in m and "--no-change-token" in m["change_token_reason"], m
            assert m["chosen"] == "sketch" and m["round_trips"] == 1 and m["rows_scanned"] == len(before), m
            bodies = m["body_bytes_to_agent"] + m["body_bytes_from_agent"]
            assert bodies <= FIXED_COST_BYTES, (
                f"a no-change sync moved {bodies} bytes of bodies: {m['sites'][0]['calls']}"
            )
            # the site query travels by reference: the sketch request is the control message (with the
            # rows the warehouse expects, which lets the agent read a small table without a reader
            # process) and a 3-cell probe
            (sketch,) = m["sites"][0]["calls"]
            assert sketch["call"] == "POST /v1/sketch" and sketch["body_to_agent"] < 240, sketch
        people.change(updates=30, inserts=10, deletes=5)
        check_sync(api, "plain_people", KEY, before, people.truth(), api.sync("plain_people"))
        before = people.truth()
        still = api.sync("plain_people")  # the statistics expect changes: no probe
        check_sync(api, "plain_people", KEY, before, before, still)
        m = still["metrics"]
        (sketch,) = m["sites"][0]["calls"]
        assert m["sketch_stages"] == 1 and m["round_trips"] == 1 and sketch["body_to_agent"] > 240, m
    finally:
        plain.stop()


@pytest.mark.parametrize("older", [False, True], ids=["agent", "older agent"])
def test_a_one_percent_sync_of_a_small_table_is_one_stage_carrying_the_token(api, tmp_path, logs_dir, older):
    """#52's sync of a 1,000-row table with 1 % of it changed, once the statistics expect such
    changes: one sketch stage (a second only when it failed to peel), the change token riding
    on it (change_token.rides). No probe before it (its odds of finding nothing are slim:
    budget.probe_pays) and no cells request after (a few updated rows come whole:
    budget.whole_updates). A sync that then finds nothing is that one request, which the
    token ends unread, carried over as the token's own request would have; the token a
    ridden sync read is kept with its version (the next unchanged sync proves it).

    An agent that predates `updated_rows` and `change_token` sends digests, and the cells
    request follows (and a fetch of the rows whose column digests collided, about one in 256
    changed cells: sketch/columns.py); it answers no token, so none is kept, and the next
    sync asks for one on its own and reads; exact throughout."""
    people = People(tmp_path / "people.db", rows=1_000, seed=31)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir, prefix=older_agent.PREFIX if older else None)
    source = "pct_older" if older else "pct"

    def after_stages(m: dict) -> list[str]:
        if not older:
            return []
        return ["POST /v1/sketch/cells"] + ["POST /v1/fetch"] * bool(m.get("cells_fallback_rows"))

    def calls(sync: dict) -> list[str]:
        return [c["call"] for c in sync["metrics"]["sites"][0]["calls"]]

    try:
        api.add_source(source, agent.url)
        view = f"{source}_people"
        api.add_view(view, VIEW_SQL.format(source=source))  # auto
        check_sync(api, view, KEY, {}, people.truth(), api.sync(view))
        for _ in range(2):  # the first after the load guesses (the token on its own); the second observed
            before = people.truth()
            people.change(updates=6, inserts=2, deletes=2)
            sync = api.sync(view)
            check_sync(api, view, KEY, before, people.truth(), sync)
        m = sync["metrics"]
        stages = m["sketch_stages"]
        assert m["chosen"] == "sketch" and stages == 1 + bool(m.get("peel_failed")), m
        assert calls(sync) == ["POST /v1/sketch"] * stages + after_stages(m), m
        assert m["round_trips"] == len(calls(sync)), m
        assert m["token_rode"] is True, m
        if older:
            assert "unchanged_by_token" not in m and m["change_token_reason"] == change_token.NOT_ANSWERED, m
        else:
            assert m["unchanged_by_token"] is False, m

        # nothing changed, while the statistics still expect changes
        before, seen = people.truth(), _statistics(api, view)
        still = api.sync(view)
        check_sync(api, view, KEY, before, before, still)
        m = still["metrics"]
        if older:  # no token kept by the ridden sync: asked for on its own, and the site read
            assert calls(still)[0] == "POST /v1/change_token" and m["rows_scanned"] == len(before), m
        else:  # one request, ended by the token that rode on it: as the token's own request ends a sync
            assert calls(still) == ["POST /v1/sketch"] and m["round_trips"] == 1 and m["token_rode"] is True, m
            assert m["unchanged_by_token"] is True and m["rows_scanned"] == 0, m
            assert m["fragment_written"] == "carried" and m["rows_inserted"] == m["rows_updated"] == 0, m
            now = _statistics(api, view)  # an empty delta's: every tuple saw one sync more
            assert now["tuples"] == seen["tuples"] == len(before), (seen, now)
            assert now["observations"] == seen["observations"] + len(before), (seen, now)
            assert now["syncs"] == [*seen["syncs"], (len(before), 0)], (seen, now)

        # a change after it: exact, the token riding again (kept by the sync that found nothing)
        people.change(updates=6, inserts=2, deletes=2)
        changed = api.sync(view)
        check_sync(api, view, KEY, before, people.truth(), changed)
        m = changed["metrics"]
        if not older:
            assert calls(changed)[0] == "POST /v1/sketch" and m["unchanged_by_token"] is False, m
            # the token that rode on it was kept with its version: the next sync ends by it
            before = people.truth()
            after = api.sync(view)
            check_sync(api, view, KEY, before, before, after)
            assert after["metrics"]["unchanged_by_token"] is True and calls(after) == ["POST /v1/sketch"], after
    finally:
        agent.stop()


@pytest.mark.parametrize("churn", [0.5, 0.9])
def test_the_first_sync_after_a_load_costs_at_most_a_tenth_more_than_full_ship(api, tmp_path, logs_dir, churn):
    people = People(tmp_path / "people.db", rows=20_000, seed=13)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    source = f"churn{int(churn * 100)}"
    try:
        api.add_source(source, agent.url)
        views = {s: f"{source}_{s}" for s in ("auto", "full_ship")}
        for strategy, view in views.items():
            api.add_view(view, VIEW_SQL.format(source=source), strategy=strategy)
            api.sync(view)
        before = people.truth()
        people.change(updates=int(churn * 20_000), inserts=2_000, deletes=2_000)
        synced = {}
        for strategy, view in views.items():
            synced[strategy] = api.sync(view)
            check_sync(api, view, KEY, before, people.truth(), synced[strategy])
        auto, full = synced["auto"]["metrics"], synced["full_ship"]["metrics"]
        assert _moved(auto) <= FIRST_SYNC_OVER_FULL_SHIP * _moved(full), (auto, _moved(full))
    finally:
        agent.stop()


def test_a_cut_change_token_answer_is_retried(api, small, logs_dir):
    """The token's request fails as any other can: the sync retries it, and stays exact."""
    people, _ = small  # its agent was stopped by the restart test: one of this test's own
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    proxy = FaultProxy("127.0.0.1", agent.port)
    try:
        api.add_source("small_cut", proxy.url)
        api.add_view("cut_people", VIEW_SQL.format(source="small_cut"), strategy="full_ship")
        load = api.sync("cut_people")
        check_sync(api, "cut_people", KEY, {}, people.truth(), load)
        before = people.truth()
        people.change(updates=5)
        proxy.plan(Truncate(60))  # inside the token's answer, the first of the sync
        sync = api.sync("cut_people")
        check_sync(api, "cut_people", KEY, before, people.truth(), sync)
        m = sync["metrics"]
        assert m["retries"] == 1 and m["unchanged_by_token"] is False, m
        (failed,) = m["attempts"]  # its one request was the token's, cut in its answer's headers
        assert failed["round_trips"] == 1 and failed["bytes_from_agent"] <= 60, failed
    finally:
        proxy.close()
        agent.stop()


def test_a_view_crosses_the_small_sync_threshold_both_ways(special_service, tmp_path, logs_dir):
    """On a service whose small_sync_rows is SMALL_SYNC_ROWS: a view syncs on Arrow while its
    stored rows and delta fit, on Spark once it outgrows them (the sync whose delta outgrows
    them builds by Spark), and on Arrow again once it shrinks; exact throughout."""
    api = special_service.api
    # a third of it: a sync that ships the view whole (old and returned rows together) still fits
    people = People(tmp_path / "people.db", rows=SMALL_SYNC_ROWS // 3, seed=29)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    try:
        api.add_source("crossing", agent.url)
        views = {s: f"crossing_{s}" for s in ("auto", "full_ship")}
        for strategy, view in views.items():
            api.add_view(view, VIEW_SQL.format(source="crossing"), strategy=strategy)

        def synced(expected: str) -> None:
            for view in views.values():
                sync = api.sync(view)
                check_sync(api, view, KEY, before.get(view, {}), people.truth(), sync)
                before[view] = people.truth()
                m = sync["metrics"]
                assert m["executor"] == expected, (view, m["executor"], expected, m.get("chosen"), m["spark_jobs"])

        before: dict = {}
        synced("arrow")  # the load
        people.change(updates=20, inserts=10, deletes=5)
        synced("arrow")
        people.change(updates=10, inserts=SMALL_SYNC_ROWS, deletes=0)  # past the threshold
        synced("spark")  # stored rows fit, the returned ones do not
        people.change(updates=30, inserts=5, deletes=5)
        synced("spark")  # stored rows past it
        people.change(updates=0, inserts=0, deletes=SMALL_SYNC_ROWS)  # below it again
        synced("spark")  # decided on the stored rows before the delete
        people.change(updates=10, inserts=3, deletes=2)
        synced("arrow")
    finally:
        agent.stop()
