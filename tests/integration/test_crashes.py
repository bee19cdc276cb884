"""Atomic syncs: the service is SIGKILLed in the middle of a sync and restarted on its data.

The kill lands at each named point of a sync (warehouse/faults.py: the test arms a file the
service checks at every point) and at seeded random moments. After the restart the view is
exactly the old version or exactly the new one, the sync record says which, nothing the
interrupted sync wrote is left on disk, and the next sync is exact.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.support.oracle import check_sample, check_sync, keyed
from tests.support.people import KEY, VIEW_SQL, People
from tests.support.special import SKETCH_ROTATION, SpecialService
from warehouse.faults import POINTS
from warehouse.strategies.sketch import prep as sketch_prep
from workloads.harness import Api, start_agent

pytestmark = pytest.mark.integration

VIEW = "crash_people"
#: The crash view's sample size.
SAMPLE = 300
#: Seconds a killed service is given to die once armed (the sync itself takes a few).
DIE_WITHIN_S = 300


class Warehouse:
    """The suite's special service (killed and started again on the same data), the source."""

    def __init__(self, service: SpecialService, people: People):
        self.service = service
        self.people = people

    def __getattr__(self, name: str):
        """api, proc, kill_file, data_dir, restart: the service's, as they are after any restart."""
        return getattr(self.service, name)

    def view_dir(self) -> Path:
        return self.data_dir / "views" / VIEW

    def current(self) -> dict:
        return json.loads((self.view_dir() / "CURRENT").read_text())


@pytest.fixture(scope="module")
def wh(tmp_path_factory, logs_dir, special_service):
    root = tmp_path_factory.mktemp("crashes")
    people = People(root / "people.db", rows=6_000, seed=5)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    w = Warehouse(special_service, people)
    w.api.add_source("crashy", agent.url)
    # named: auto is the default; with a sample, which must commit with the view
    w.api.add_view(VIEW, VIEW_SQL.format(source="crashy"), strategy="group_hash", sample_size=SAMPLE)
    check_sync(w.api, VIEW, KEY, {}, people.truth(), w.api.sync(VIEW))
    yield w
    # leave the shared service as the next module expects it: running, nothing armed
    special_service.kill_file.unlink(missing_ok=True)
    if special_service.proc.proc.poll() is not None:
        special_service.restart()
    agent.stop()


def _start_sync(api: Api) -> str:
    r = api.http.post(f"/v1/views/{VIEW}/syncs")
    assert r.status_code == 202, r.text
    return r.json()["id"]


def _record(api: Api, sync_id: str) -> dict:
    r = api.http.get(f"/v1/views/{VIEW}/syncs/{sync_id}")
    r.raise_for_status()
    return r.json()


def _assert_no_leftovers(w: Warehouse, sync_id: str, committed: bool) -> None:
    view_dir = w.view_dir()
    staging = view_dir / "staging"
    assert not staging.exists() or not any(staging.iterdir()), f"staging not cleaned: {list(staging.iterdir())}"
    delta = view_dir / "deltas" / sync_id
    assert delta.exists() == committed, f"delta of sync {sync_id}: exists={delta.exists()}, committed={committed}"
    versions = sorted(int(p.name) for p in (view_dir / "versions").iterdir())
    current = w.current()["version"]
    assert max(versions) == current, f"a version newer than CURRENT ({current}) is left: {versions}"
    assert not (view_dir / "CURRENT.tmp").exists()


def _sample(w: Warehouse, rows: dict) -> dict:
    return check_sample(w.api, VIEW, KEY, rows, SAMPLE)[0]


def _settle(w: Warehouse, sync_id: str, before: dict, before_sample: dict) -> dict:
    """After the restart: the record, the view and its sample agree, one of exactly two ways."""
    record = _record(w.api, sync_id)
    rows = keyed(w.api.rows(VIEW), KEY)
    sample = _sample(w, rows)  # of the view as it is, whichever version that is
    if record["status"] == "succeeded":
        assert rows == w.people.truth(), "the sync is recorded as succeeded but the view is not the new version"
        assert w.current()["sync_id"] == sync_id
    else:
        assert record["status"] == "failed", record
        assert "interrupted" in record["error"], record["error"]
        assert rows == before, "the sync failed but the view changed"
        assert sample == before_sample, "the sync failed but the sample changed"
        assert w.current()["sync_id"] != sync_id
    _assert_no_leftovers(w, sync_id, committed=record["status"] == "succeeded")
    return record


def _next_sync_is_exact(w: Warehouse) -> None:
    before = keyed(w.api.rows(VIEW), KEY)
    w.people.change(updates=40, inserts=15, deletes=5)
    check_sync(w.api, VIEW, KEY, before, w.people.truth(), w.api.sync(VIEW))


@pytest.mark.parametrize("point", POINTS)
def test_a_kill_at_each_point_leaves_the_old_or_the_new_view_whole(wh, point):
    before = keyed(wh.api.rows(VIEW), KEY)
    before_sample = _sample(wh, before)
    wh.people.change()
    wh.kill_file.write_text(point)
    sync_id = _start_sync(wh.api)
    wh.proc.proc.wait(timeout=DIE_WITHIN_S)
    assert wh.proc.proc.returncode == -signal.SIGKILL, f"the service did not die at {point}: {wh.proc.tail()}"
    assert not wh.kill_file.exists(), "the kill point was never reached"
    wh.restart()
    record = _settle(wh, sync_id, before, before_sample)
    # only a kill after the pointer moved leaves the new version; the restart records it as succeeded
    assert record["status"] == ("succeeded" if point == "after_visible" else "failed")
    if record["status"] == "failed":  # its change token was never kept: the next sync reads the change
        again = wh.api.sync(VIEW)
        assert again["metrics"]["unchanged_by_token"] is False, again["metrics"]
        check_sync(wh.api, VIEW, KEY, before, wh.people.truth(), again)
    _next_sync_is_exact(wh)


def _syncs(api: Api) -> list[dict]:
    r = api.http.get(f"/v1/views/{VIEW}/syncs")
    r.raise_for_status()
    return r.json()


def _killed_at(w: Warehouse, point: str) -> None:
    """Wait for the armed kill at `point` to end the service."""
    w.proc.proc.wait(timeout=DIE_WITHIN_S)
    assert w.proc.proc.returncode == -signal.SIGKILL, f"the service did not die at {point}: {w.proc.tail()}"
    assert not w.kill_file.exists(), "the kill point was never reached"


def test_a_killed_sync_is_retried_once_after_the_restart(wh):
    """SIGKILL in a sync, then again in its retry: the first restart queues one retry naming
    the killed sync, the second settles the killed retry as interrupted and retries nothing;
    the view keeps its last version throughout, and the next sync is exact."""
    point = "fragments_written"
    before = keyed(wh.api.rows(VIEW), KEY)
    wh.people.change()
    wh.kill_file.write_text(point)
    killed = _start_sync(wh.api)
    _killed_at(wh, point)
    wh.kill_file.write_text(point)  # armed for the retry
    wh.restart(retry_interrupted=True)
    (retry,) = [s for s in _syncs(wh.api) if s.get("retry_of") == killed]
    assert retry["trigger"] == "retry", retry
    _killed_at(wh, point)
    wh.restart(retry_interrupted=True)
    first, again = _record(wh.api, killed), _record(wh.api, retry["id"])
    assert (first["error_code"], again["error_code"]) == ("interrupted", "interrupted"), (first, again)
    assert not [s for s in _syncs(wh.api) if s.get("retry_of") == retry["id"]], "a retry was retried"
    assert [s["status"] for s in _syncs(wh.api)][:2] == ["failed", "failed"], "a sync runs after the second restart"
    assert keyed(wh.api.rows(VIEW), KEY) == before
    check_sync(wh.api, VIEW, KEY, before, wh.people.truth(), wh.api.sync(VIEW))


@pytest.mark.parametrize("point", ["before_visible", "after_visible"])
def test_a_sync_whose_start_the_machine_lost_is_settled_by_its_store(wh, point):
    """The catalog writes a sync's start without an fsync (Catalog.set_running): a machine that
    stops (power, kernel) may lose it, and the record reads queued at the next start. The kill is
    real; the lost write is put back as a power loss would leave it, with the service down. A
    sync that committed is settled as succeeded (not run again); one that did not runs again,
    what its first attempt left removed (its delta, moved into place before the pointer)."""
    before = keyed(wh.api.rows(VIEW), KEY)
    before_sample = _sample(wh, before)
    wh.people.change()
    wh.kill_file.write_text(point)
    sync_id = _start_sync(wh.api)
    _killed_at(wh, point)
    with contextlib.closing(sqlite3.connect(wh.data_dir / "catalog.db")) as catalog, catalog:
        catalog.execute(
            "UPDATE syncs SET status = 'queued', started_at = NULL, queued_s = NULL, progress = NULL WHERE id = ?",
            (sync_id,),
        )
    wh.restart()
    wh.api.wait_idle()
    record = _settle(wh, sync_id, before, before_sample)
    assert record["status"] == "succeeded", record
    # settled from its store, or started again (the lost start is not put back by the restart)
    assert (record["started_at"] is None) == (point == "after_visible"), record
    _next_sync_is_exact(wh)


@pytest.mark.parametrize("seed", [11])
def test_a_kill_at_a_random_moment_leaves_the_old_or_the_new_view_whole(wh, seed):
    rng = random.Random(seed)
    # how long a sync takes here, to aim the kill inside one
    before = keyed(wh.api.rows(VIEW), KEY)
    wh.people.change()
    started = time.monotonic()
    check_sync(wh.api, VIEW, KEY, before, wh.people.truth(), wh.api.sync(VIEW))
    duration = time.monotonic() - started

    before = keyed(wh.api.rows(VIEW), KEY)
    before_sample = _sample(wh, before)
    wh.people.change()
    sync_id = _start_sync(wh.api)
    time.sleep(rng.uniform(0.1, 1.1) * duration)
    status = _record(wh.api, sync_id)["status"]
    wh.proc.kill(signal.SIGKILL)
    wh.restart()
    record = _settle(wh, sync_id, before, before_sample)
    if status == "succeeded":
        assert record["status"] == "succeeded"
    _next_sync_is_exact(wh)


def test_a_kill_between_staging_and_commit_keeps_the_sketch_table_in_step(wh):
    """The sketch table commits with its fragment; its secret rotates every SKETCH_ROTATION syncs."""
    view = "crash_sketch"
    wh.api.add_view(view, VIEW_SQL.format(source="crashy"), strategy="sketch")
    before = {}
    for _ in range(2):  # the load, then the first sketch sync, which builds the table
        check_sync(wh.api, view, KEY, before, wh.people.truth(), wh.api.sync(view))
        before = wh.people.truth()
        wh.people.change(updates=40, inserts=15, deletes=5)
    wh.kill_file.write_text("fragments_written")  # the new fragment and table are staged
    r = wh.api.http.post(f"/v1/views/{view}/syncs")
    assert r.status_code == 202, r.text
    wh.proc.proc.wait(timeout=DIE_WITHIN_S)
    assert wh.proc.proc.returncode == -signal.SIGKILL, wh.proc.tail()
    wh.restart()
    assert wh.api.http.get(f"/v1/views/{view}/syncs/{r.json()['id']}").json()["status"] == "failed"
    assert keyed(wh.api.rows(view), KEY) == before
    # the stored table is still the stored fragment's: the next sync peels exactly the
    # pairs that differ (check_sync counts them) without rebuilding the table
    rebuilt, prepared = [], []
    for _ in range(SKETCH_ROTATION):
        sync = wh.api.sync(view)
        check_sync(wh.api, view, KEY, before, wh.people.truth(), sync)
        rebuilt.append(bool(sync["metrics"].get("sketch_rebuilt")))
        prepared.append(bool(sync["metrics"].get("sketch_prepared")))
        before = wh.people.truth()
        wh.people.change(updates=40, inserts=15, deletes=5)
    # built after the load, used by sync 2 (1 use), killed sync not counted: uses 2 and 3,
    # then a new secret, whose table was built in the background after use 3 committed
    assert rebuilt == [False, False, True], rebuilt
    assert prepared == [False, False, True], prepared


def test_a_service_killed_while_it_prepares_a_sketch_table_leaves_the_next_sync_exact(wh):
    """The table for the sync after a load is built in the background once the load has
    committed; a kill before it is published leaves a temporary directory, which the restart
    removes, and the next sync builds the table itself."""
    view = "crash_prep"
    wh.api.add_view(view, VIEW_SQL.format(source="crashy"), strategy="sketch")
    wh.kill_file.write_text(sketch_prep.BUILT)  # the table is written, not yet renamed
    r = wh.api.http.post(f"/v1/views/{view}/syncs")  # the load
    assert r.status_code == 202, r.text
    wh.proc.proc.wait(timeout=DIE_WITHIN_S)
    assert wh.proc.proc.returncode == -signal.SIGKILL, wh.proc.tail()
    site_dir = wh.data_dir / "views" / view / "versions" / "1" / "site-0"
    assert list(site_dir.glob(f"{sketch_prep.PREPARED}.tmp-*")), "killed while publishing the table"
    wh.restart()
    assert wh.api.http.get(f"/v1/views/{view}/syncs/{r.json()['id']}").json()["status"] == "succeeded"
    assert not list(site_dir.glob(f"{sketch_prep.PREPARED}*")), "the restart removed the half-published table"
    before = wh.people.truth()
    assert keyed(wh.api.rows(view), KEY) == before
    wh.people.change(updates=40, inserts=15, deletes=5)
    sync = wh.api.sync(view)
    check_sync(wh.api, view, KEY, before, wh.people.truth(), sync)
    m = sync["metrics"]
    assert m["sketch_rebuilt"] and not m["sketch_prepared"] and m["sketch_built_inline_s"] > 0, m
