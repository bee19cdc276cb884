"""Agent and link failures: cut, damaged, stalled and refused answers, a killed agent.

The service and the agent are real processes; a fault proxy between them (tests/support/
faultproxy.py) damages the agent's answers on purpose. Each time the sync either recovers
by retrying, with the retries in its record, or fails within the configured time with a
clear error and the view untouched; the next sync is exact either way.
"""

from __future__ import annotations

import time

import pytest

from tests.support.faultproxy import REFUSE, Corrupt, FaultProxy, Slow, Stall, Truncate
from tests.support.oracle import check_sync, keyed
from tests.support.people import KEY, VIEW_SQL, People
from tests.support.special import AGENT_DEADLINE_S, AGENT_READ_TIMEOUT_S, AGENT_RETRIES
from workloads.harness import Api, start_agent

pytestmark = pytest.mark.integration

#: Generous bound on a failing sync: every attempt waits out the read timeout, plus Spark's work.
FAIL_WITHIN_S = (AGENT_RETRIES + 1) * (AGENT_READ_TIMEOUT_S + 15) + 30


@pytest.fixture(scope="module")
def setup(tmp_path_factory, logs_dir, special_service):
    """The agent behind a fault proxy, and the suite's service with short agent timeouts."""
    root = tmp_path_factory.mktemp("flaky")
    people = People(root / "people.db", rows=40_000)  # the load answer spans three frames of 16,384 rows
    # no change token: the load learns that the agent gives none, so each later sync's first
    # connection carries the strategy's answer, where the faults strike (a fault in the token's
    # answer: test_small_syncs.py)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir, extra=["--no-change-token"])
    proxy = FaultProxy("127.0.0.1", agent.port)
    api = Api(special_service.url)
    api.add_source("flaky", proxy.url)
    # group_hash, named (auto is the default): the faults strike at byte offsets of its answers
    api.add_view("people", VIEW_SQL.format(source="flaky"), strategy="group_hash")
    state = {"people": people, "agent": agent, "proxy": proxy, "api": api, "logs_dir": logs_dir}
    sync = api.sync("people")
    check_sync(api, "people", KEY, {}, people.truth(), sync)
    state["load_bytes"] = sync["metrics"]["bytes_from_agent"]
    yield state
    api.close()
    proxy.close()
    state["agent"].stop()


def _view(api) -> dict:
    return keyed(api.rows("people"), KEY)


def _exact_next(state) -> dict:
    """With the link healthy again, the next sync is exact."""
    api = state["api"]
    state["proxy"].plan()
    before = _view(api)
    sync = api.sync("people")
    check_sync(api, "people", KEY, before, state["people"].truth(), sync)
    return sync


@pytest.mark.parametrize(
    "fault",
    [Truncate(400), Truncate(5_000), Corrupt(700), Corrupt(3_000), REFUSE, Slow(300)],
    ids=["cut-early", "cut-late", "damaged-early", "damaged-late", "refused", "too-slow"],
)
def test_a_transient_failure_is_retried_and_the_retry_is_recorded(setup, fault):
    api, people, proxy = setup["api"], setup["people"], setup["proxy"]
    people.change()
    before = _view(api)
    proxy.plan(fault)  # the first connection misbehaves, the retry's is healthy
    sync = api.sync("people")
    check_sync(api, "people", KEY, before, people.truth(), sync)
    m = sync["metrics"]
    assert m["retries"] == 1, m["attempts"]
    [failed] = m["attempts"]
    assert failed["attempt"] == 1 and failed["source"] == "flaky" and failed["error"]
    if fault.kind == "slow":  # bytes kept coming, so only the call's deadline could end it
        assert "SERVICE_AGENT_DEADLINE_S" in failed["error"] and failed["seconds"] >= AGENT_DEADLINE_S, failed
    # the failed attempt's bytes are counted: the totals exceed the successful attempt's own
    assert m["bytes_from_agent"] >= failed["bytes_from_agent"] + m["sites"][0]["bytes_from_agent"]


@pytest.mark.parametrize(
    "fault, words",
    [(Corrupt(700), "checksum"), (Truncate(900), "agent"), (Stall(400), "timed out")],
    ids=["damaged", "cut", "stalled"],
)
def test_a_failure_that_persists_fails_the_sync_in_bounded_time_and_leaves_the_view(setup, fault, words):
    api, people, proxy = setup["api"], setup["people"], setup["proxy"]
    people.change()
    before = _view(api)
    history = len(api.http.get("/v1/views/people/syncs").json())
    proxy.plan(*[fault] * (AGENT_RETRIES + 1))
    started = time.monotonic()
    sync = api.sync("people")
    elapsed = time.monotonic() - started
    proxy.release()
    assert sync["status"] == "failed", sync["metrics"]
    assert words in sync["error"] and f"gave up after {AGENT_RETRIES + 1} attempt(s)" in sync["error"], sync["error"]
    assert elapsed < FAIL_WITHIN_S
    assert sync["metrics"]["retries"] == AGENT_RETRIES and len(sync["metrics"]["attempts"]) == AGENT_RETRIES + 1
    assert _view(api) == before
    assert api.http.get(f"/v1/views/people/syncs/{sync['id']}/delta").status_code == 409
    assert len(api.http.get("/v1/views/people/syncs").json()) == history + 1
    _exact_next(setup)


def test_an_agent_killed_mid_answer_fails_the_sync_and_a_restarted_one_catches_up(setup):
    api, people, proxy = setup["api"], setup["people"], setup["proxy"]
    people.change()
    before = _view(api)
    proxy.plan(Stall(300))  # hold the answer so the kill lands in the middle of it
    queued = api.http.post("/v1/views/people/syncs").json()
    deadline = time.monotonic() + 60
    while proxy.connections == 0 or proxy.answer_bytes < 300:
        assert time.monotonic() < deadline, "the sync never reached the agent"
        time.sleep(0.05)
    port = setup["agent"].port
    setup["agent"].kill()
    proxy.release()
    sync = _wait(api, "people", queued["id"])
    assert sync["status"] == "failed", sync
    assert "unreachable" in sync["error"] or "ended before its summary" in sync["error"], sync["error"]
    assert _view(api) == before
    setup["agent"] = start_agent(f"sqlite:///{people.path}", setup["logs_dir"], port=port)
    _exact_next(setup)


def test_a_running_sync_shows_its_phase_and_progress(setup):
    api, people, proxy = setup["api"], setup["people"], setup["proxy"]
    api.add_view("people_copy", VIEW_SQL.format(source="flaky"))  # a load: a long answer
    hold = int(setup["load_bytes"] * 0.6)  # past the first frame, before the last
    proxy.plan(Stall(hold))
    queued = api.http.post("/v1/views/people_copy/syncs").json()
    seen = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        record = api.http.get(f"/v1/views/people_copy/syncs/{queued['id']}").json()
        p = record.get("progress") or {}
        if record["status"] == "running" and p.get("phase") == "exchange_units" and p.get("rows_received", 0) > 0:
            seen = p
            break
        time.sleep(0.05)
    proxy.release()
    assert seen, "no progress of the exchange while the answer was held"
    assert 0 < seen["bytes_from_agent"] <= hold and seen["bytes_to_agent"] > 0
    assert seen["elapsed_s"] >= 0 and "eta_s" not in seen, "a load has no history to expect a time from"
    done = _wait(api, "people_copy", queued["id"])
    check_sync(api, "people_copy", KEY, {}, people.truth(), done)
    assert done["progress"] is None
    # after the load, two syncs: the next one's ETA is their median (service/eta.py)
    took = sorted(api.sync("people_copy")["metrics"]["wall_seconds"] for _ in range(2))
    proxy.plan(Stall(1))
    queued = api.http.post("/v1/views/people_copy/syncs").json()
    seen, deadline = None, time.monotonic() + 60
    while seen is None and time.monotonic() < deadline:
        record = api.http.get(f"/v1/views/people_copy/syncs/{queued['id']}").json()
        seen = (record.get("progress") or {}) if record["status"] == "running" else None
        seen = seen if seen and "expected_s" in seen else None
        time.sleep(0.05)
    proxy.release()
    assert seen, "no expected time in a running sync's progress"
    assert seen["expected_s"] == round((took[0] + took[1]) / 2, 3) and 0 <= seen["eta_s"] <= seen["expected_s"], seen
    assert _wait(api, "people_copy", queued["id"])["status"] == "succeeded"


def test_verify_mode_audits_the_view_against_a_full_read(setup):
    api, people, proxy = setup["api"], setup["people"], setup["proxy"]
    _exact_next(setup)
    before = _view(api)
    r = api.http.post("/v1/views/people/syncs", params={"wait": "true", "mode": "verify"})
    assert r.status_code == 200
    sync = r.json()
    check_sync(api, "people", KEY, before, people.truth(), sync)
    report = sync["metrics"]["verify"]
    assert report["divergent_rows"] == 0 and report["rows_compared"] == len(before)
    assert sync["metrics"]["mode"] == "verify"
    # A change the view's method did not see: made at the source between its read and the
    # full read (the proxy's second connection). Verify reports it and keeps the full read.
    victim = next(iter(before))[0]
    proxy.on_connect(2, lambda: people.update_one(victim, "changed under the audit"))
    sync = api.http.post("/v1/views/people/syncs", params={"wait": "true", "mode": "verify"}).json()
    proxy.on_connect(None, None)
    assert sync["status"] == "succeeded", sync["error"]
    report = sync["metrics"]["verify"]
    assert report["divergent_rows"] == 1, report
    assert report["examples"][0]["key"] == {"id": victim} and report["examples"][0]["fix"] == "update"
    assert keyed(api.rows("people"), KEY) == people.truth()
    assert api.http.post("/v1/views/people/syncs", params={"mode": "sometimes"}).status_code == 422


def _wait(api, view: str, sync_id: str, timeout_s: float = 300) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = api.http.get(f"/v1/views/{view}/syncs/{sync_id}").json()
        if record["status"] in ("succeeded", "failed"):
            return record
        time.sleep(0.1)
    raise AssertionError(f"sync {sync_id} did not finish in {timeout_s} s")
