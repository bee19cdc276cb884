"""Scheduled syncs through a service of the module's own (so that it can be stopped and
started again on its data) and a real agent on a small SQLite table.

The service first runs with SERVICE_SCHEDULER off: the schedule is stored and shown, bad
ones are 422, nothing runs by itself, a manual sync loads the view. Started again with
the scheduler on after several periods went by, it makes one catch-up sync and goes on at
its cadence; the syncs are exact, never overlap, leave every_s between them, a manual
sync of a busy view is still a 409, PATCH to null stops them and PATCH back resumes them,
and a failing sync is retried a period later. Timing is asserted as lower bounds and
counts only; waits are generous polls, so a slow machine makes the module slower, not red.
"""

from __future__ import annotations

import datetime as dt
import time

import httpx
import pytest

from tests.support.oracle import keyed
from tests.support.people import KEY, VIEW_SQL, People
from workloads.harness import Api, start_agent, start_service

pytestmark = pytest.mark.integration

VIEW = "sched_v"
EVERY_S = 1
#: Catalog times are kept to the millisecond: a gap measured between two of them may be this short.
ROUNDING_S = 0.002
#: How long a poll waits for what should happen (a first sync on a fresh Spark JVM takes 10-30 s here).
PATIENCE_S = 180


class Scheduled:
    """The source table, its agent, and the service, which the tests stop and start again."""

    def __init__(self, root, logs):
        self.root, self.logs = root, logs
        self.people = People(root / "people.db", rows=300, seed=21)
        self.agent = start_agent(f"sqlite:///{self.people.path}", logs)
        self.service = self.api = None

    def start(self, scheduler: bool) -> None:
        """Start the service on the module's data dir (agent calls not retried: a failure fails fast)."""
        env = {"SERVICE_SCHEDULER": str(scheduler).lower(), "SERVICE_AGENT_RETRIES": "0"}
        self.service = start_service(self.root / "warehouse", self.logs, env=env)
        self.api = Api(self.service.url)

    def stop(self) -> None:
        self.api.close()
        self.service.stop()

    def syncs(self) -> list[dict]:
        """The view's sync records, oldest first."""
        r = self.api.http.get(f"/v1/views/{VIEW}/syncs")
        r.raise_for_status()
        return r.json()[::-1]

    def view(self) -> dict:
        r = self.api.http.get(f"/v1/views/{VIEW}")
        r.raise_for_status()
        return r.json()

    def patch(self, body: dict) -> dict:
        """PATCH the view, retried while a sync of it is under way (409, as for every PATCH)."""
        deadline = time.monotonic() + PATIENCE_S
        while True:
            r = self.api.http.patch(f"/v1/views/{VIEW}", json=body)
            if r.status_code != 409 or time.monotonic() > deadline:
                assert r.status_code == 200, r.text
                return r.json()
            assert "sync" in r.json()["detail"], r.text
            time.sleep(0.1)

    def close(self) -> None:
        if self.service:
            self.stop()
        self.agent.stop()


def ts(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def wait_for(what: str, predicate, within_s: float = PATIENCE_S):
    """Poll `predicate` until it gives something true; that."""
    deadline = time.monotonic() + within_s
    while not (found := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {within_s} s: {what}")
        time.sleep(0.2)
    return found


def settled(syncs: list[dict]) -> list[dict]:
    return [s for s in syncs if s["status"] in ("succeeded", "failed")]


def check_cadence(syncs: list[dict], every_s: float = EVERY_S) -> None:
    """Syncs never overlap, and a scheduled one starts at least every_s after the one before ended."""
    for before, after in zip(syncs, syncs[1:]):
        if before["finished_at"] is None:
            raise AssertionError(f"sync {before['id']} ({before['status']}) is followed by {after['id']}")
        assert ts(after["created_at"]) >= ts(before["finished_at"]) - ROUNDING_S, (before, after)
        if after["trigger"] == "schedule":
            assert ts(after["created_at"]) >= ts(before["finished_at"]) + every_s - ROUNDING_S, (before, after)


@pytest.fixture(scope="module")
def sched(tmp_path_factory, logs_dir):
    scheduled = Scheduled(tmp_path_factory.mktemp("schedules"), logs_dir)
    scheduled.start(scheduler=False)
    scheduled.api.add_source("sch", scheduled.agent.url)
    yield scheduled
    scheduled.close()


def test_bad_schedules_are_422_and_change_nothing(sched):
    sql = VIEW_SQL.format(source="sch")
    views = f"{sched.api.http.base_url}/v1/views"
    sched.api.add_view("sched_bad", sql)
    before = httpx.get(f"{views}/sched_bad").json()
    bad = [
        {"every_s": 0},
        {"every_s": -5},
        {"every_s": 1.5},
        {"every_s": "60"},
        {"every_s": True},
        {"every_s": 10**12},
        {},
        {"every_s": 60, "cron": "*/5 * * * *"},
        "hourly",
        60,
    ]
    for schedule in bad:
        for method, url, body in (
            ("POST", views, {"name": "sched_bad2", "sql": sql, "schedule": schedule}),
            ("PUT", f"{views}/sched_bad", {"sql": sql, "schedule": schedule}),
            ("PATCH", f"{views}/sched_bad", {"schedule": schedule}),
        ):
            r = httpx.request(method, url, json=body)
            assert r.status_code == 422, (method, schedule, r.text)
            assert all(e["loc"][:2] == ["body", "schedule"] for e in r.json()["detail"]), r.text
    assert httpx.get(f"{views}/sched_bad2").status_code == 404
    assert httpx.get(f"{views}/sched_bad").json() == before
    r = httpx.patch(f"{views}/nope", json={"schedule": {"every_s": 5}})
    assert r.status_code == 404, r.text
    # good values, by each method; PUT without `schedule` keeps it, PATCH with null removes it
    r = httpx.put(f"{views}/sched_bad", json={"sql": sql, "schedule": {"every_s": 3600}})
    assert r.status_code == 200 and r.json()["schedule"] == {"every_s": 3600}, r.text
    r = httpx.put(f"{views}/sched_bad", json={"sql": sql, "sample_size": 5})
    assert r.json()["schedule"] == {"every_s": 3600} and r.json()["next_run_at"] is None, r.text
    assert httpx.patch(f"{views}/sched_bad", json={"schedule": None}).json()["schedule"] is None
    assert httpx.delete(f"{views}/sched_bad").status_code == 204


def test_with_the_scheduler_off_a_schedule_is_kept_but_not_run(sched):
    view = sched.api.add_view(VIEW, VIEW_SQL.format(source="sch"), schedule={"every_s": EVERY_S})
    assert view["schedule"] == {"every_s": EVERY_S} and view["next_run_at"] is None
    time.sleep(3 * EVERY_S)  # a view never synced would be due at once
    assert sched.syncs() == []
    load = sched.api.sync(VIEW)  # a manual sync runs as ever
    assert load["status"] == "succeeded" and load["trigger"] == "api", load
    assert keyed(sched.api.rows(VIEW), KEY) == sched.people.truth()
    listed = [v for v in sched.api.http.get("/v1/views").json() if v["name"] == VIEW]
    assert listed[0]["schedule"] == {"every_s": EVERY_S} and listed[0]["next_run_at"] is None


def test_a_restart_after_missed_runs_makes_one_catch_up_sync_then_keeps_the_cadence(sched):
    (load,) = sched.syncs()
    sched.stop()
    time.sleep(max(0.0, ts(load["finished_at"]) + 4 * EVERY_S - time.time()))  # periods missed
    sched.start(scheduler=True)
    syncs = wait_for("the catch-up sync and the one after it", lambda: (s := settled(sched.syncs()))[2:] and s)
    catch_up, after = syncs[1], syncs[2]
    assert catch_up["trigger"] == after["trigger"] == "schedule", syncs
    assert catch_up["status"] == "succeeded", catch_up
    assert ts(catch_up["created_at"]) - ts(load["finished_at"]) >= 4 * EVERY_S - ROUNDING_S
    # one sync for the missed runs: the next waits a period after it, as any other
    assert ts(after["created_at"]) >= ts(catch_up["finished_at"]) + EVERY_S - ROUNDING_S, syncs
    check_cadence(settled(sched.syncs()))
    assert keyed(sched.api.rows(VIEW), KEY) == sched.people.truth()


def test_scheduled_syncs_are_exact_and_never_overlap(sched):
    for _ in range(2):
        sched.people.change(updates=30, inserts=20, deletes=10)
        changed = time.time()
        truth = sched.people.truth()
        wait_for(
            "a scheduled sync that started after the change",
            lambda changed=changed: any(
                s["status"] == "succeeded" and s["trigger"] == "schedule" and ts(s["started_at"]) > changed
                for s in sched.syncs()
            ),
        )
        assert keyed(sched.api.rows(VIEW), KEY) == truth
    syncs = settled(sched.syncs())
    assert [s["trigger"] for s in syncs] == ["api"] + ["schedule"] * (len(syncs) - 1)
    assert all(s["status"] == "succeeded" for s in syncs), [s["error"] for s in syncs]
    check_cadence(syncs)


def test_a_manual_sync_of_a_busy_view_is_still_a_409(sched):
    def post_while_busy() -> str | None:
        if sched.syncs()[-1]["status"] not in ("queued", "running"):
            return None
        r = sched.api.http.post(f"/v1/views/{VIEW}/syncs")
        if r.status_code == 202:  # the sync ended in between: ours is a manual one
            assert sched.api.http.get(f"/v1/views/{VIEW}/syncs/{r.json()['id']}").json()["trigger"] == "api"
            return None
        assert r.status_code == 409, r.text
        return r.json()["detail"]

    assert "already has sync" in wait_for("a POST .../syncs while a scheduled sync is under way", post_while_busy)
    check_cadence(settled(sched.syncs()))


def test_patch_to_null_stops_the_schedule_and_patch_back_resumes_it(sched):
    view = sched.patch({"schedule": None})
    assert view["schedule"] is None and view["next_run_at"] is None
    stopped = sched.syncs()  # a PATCH is answered only between two syncs (409 otherwise)
    assert all(s["status"] in ("succeeded", "failed") for s in stopped), stopped[-1]
    rows = keyed(sched.api.rows(VIEW), KEY)
    time.sleep(3 * EVERY_S + 1)
    assert sched.syncs() == stopped, "a view without a schedule was synced"
    # a long period: nothing runs, and next_run_at is a period after the last sync ended
    view = sched.patch({"schedule": {"every_s": 3600}})
    assert ts(view["next_run_at"]) == pytest.approx(ts(stopped[-1]["finished_at"]) + 3600, abs=ROUNDING_S)
    assert view["next_run_at"].endswith("+00:00"), view["next_run_at"]
    view = sched.patch({"schedule": {"every_s": EVERY_S}})
    assert view["schedule"] == {"every_s": EVERY_S}
    resumed = wait_for("a scheduled sync after PATCH back", lambda: settled(sched.syncs())[len(stopped) :])
    assert resumed[0]["trigger"] == "schedule" and resumed[0]["status"] == "succeeded", resumed[0]
    # the PATCHes kept the view's rows, version and history: no reload, nothing changed
    assert resumed[0]["metrics"]["rows_inserted"] == resumed[0]["metrics"]["rows_deleted"] == 0
    assert settled(sched.syncs())[: len(stopped)] == stopped
    assert keyed(sched.api.rows(VIEW), KEY) == rows == sched.people.truth()


def test_a_failing_scheduled_sync_is_recorded_and_retried_a_period_later(sched):
    port = sched.agent.port
    sched.agent.stop()
    down = time.time()
    try:
        failed = wait_for(
            "two failed scheduled syncs",
            lambda: (f := [s for s in settled(sched.syncs()) if ts(s["created_at"]) > down])[1:] and f,
        )
        assert all(s["status"] == "failed" and s["trigger"] == "schedule" and s["error"] for s in failed), failed
        # retried at the next due time, not in a tight loop
        assert len(failed) <= (time.time() - down) / EVERY_S + 1, failed
        check_cadence(settled(sched.syncs()))
    finally:
        sched.agent = start_agent(f"sqlite:///{sched.people.path}", sched.logs, port=port)
    sched.people.change(updates=10, inserts=5, deletes=5)
    back, truth = time.time(), sched.people.truth()
    wait_for(
        "a scheduled sync after the agent came back",
        lambda: any(s["status"] == "succeeded" and ts(s["created_at"]) > back for s in sched.syncs()),
    )
    assert keyed(sched.api.rows(VIEW), KEY) == truth
    check_cadence(settled(sched.syncs()))
