"""The scheduler's rule on a real catalog, its clock given: due times, skips, catch-up, retries."""

from __future__ import annotations

import contextlib
import datetime as dt

import pytest

from service.catalog import Catalog
from service.errors import Conflict, NotFound
from service.records import SyncRecord
from service.scheduler import MAX_SLEEP_S, Scheduler, next_run_at
from warehouse.view_options import ViewOptions

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Runner:
    """Queues in the catalog like SyncRunner.submit_due, runs nothing."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog

    def submit_due(self, due: list) -> list[SyncRecord]:
        records = []
        for view, _ in due:
            with contextlib.suppress(Conflict, NotFound):
                records.append(self.catalog.queue_sync(view, "schedule"))
        return records


@pytest.fixture
def catalog(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    yield catalog
    catalog.close()


def add_view(catalog: Catalog, name: str, options: dict) -> None:
    catalog.add_view(
        name, "SELECT p.id FROM crm.people p", {}, ViewOptions.from_stored({"strategy": "auto", **options})
    )


def finish(catalog: Catalog, sync: SyncRecord, at: dt.datetime, status: str = "succeeded") -> None:
    catalog.update_sync(sync.id, status=status, started_at=at.isoformat(), finished_at=at.isoformat())


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_a_view_never_synced_is_due_at_once_and_one_under_way_is_not_due_again(catalog):
    add_view(catalog, "v", {"schedule": {"every_s": 10}})
    add_view(catalog, "plain", {})
    scheduler = Scheduler(catalog, Runner(catalog))
    scheduler.tick(dt.datetime.now(dt.UTC))
    (sync,) = catalog.syncs("v")
    assert sync.trigger == "schedule" and sync.status == "queued"
    assert catalog.syncs("plain") == []
    for _ in range(3):  # queued, then running: never queued twice
        assert scheduler.tick(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)) == MAX_SLEEP_S
        catalog.update_sync(sync.id, status="running")
    assert len(catalog.syncs("v")) == 1


def test_the_next_run_counts_from_the_end_of_the_last_sync_whatever_started_it(catalog):
    add_view(catalog, "v", {"schedule": {"every_s": 10}})
    scheduler = Scheduler(catalog, Runner(catalog))
    manual = catalog.queue_sync("v")  # trigger api
    finish(catalog, manual, at(0))
    assert scheduler.tick(at(4)) == MAX_SLEEP_S  # due in 6 s: looks again within MAX_SLEEP_S
    assert scheduler.tick(at(9.5)) == pytest.approx(0.5)
    assert len(catalog.syncs("v")) == 1
    scheduler.tick(at(10))
    newest = catalog.syncs("v")[0]
    assert newest.trigger == "schedule" and len(catalog.syncs("v")) == 2


def test_runs_missed_while_down_make_one_sync_then_the_cadence_goes_on_from_it(catalog):
    add_view(catalog, "v", {"schedule": {"every_s": 10}})
    scheduler = Scheduler(catalog, Runner(catalog))
    finish(catalog, catalog.queue_sync("v", "schedule"), at(0))
    for t in (1000, 1000.5, 1001):  # a hundred periods missed: one sync, however often it looks
        scheduler.tick(at(t))
    syncs = catalog.syncs("v")
    assert len(syncs) == 2 and syncs[0].status == "queued"
    finish(catalog, syncs[0], at(1003))
    scheduler.tick(at(1012))
    assert len(catalog.syncs("v")) == 2
    scheduler.tick(at(1013))
    assert len(catalog.syncs("v")) == 3


def test_a_failed_sync_is_retried_a_period_later_not_at_once(catalog):
    add_view(catalog, "v", {"schedule": {"every_s": 30}})
    scheduler = Scheduler(catalog, Runner(catalog))
    finish(catalog, catalog.queue_sync("v", "schedule"), at(0), status="failed")
    for t in (1, 5, 29.9):
        scheduler.tick(at(t))
    assert len(catalog.syncs("v")) == 1
    scheduler.tick(at(30))
    assert len(catalog.syncs("v")) == 2


def test_a_removed_schedule_queues_nothing_even_if_the_scheduler_looked_before(catalog):
    add_view(catalog, "v", {"schedule": {"every_s": 10}})
    catalog.set_view_options("v", ViewOptions.from_stored({"strategy": "auto"}))
    with pytest.raises(Conflict, match="no schedule"):
        catalog.queue_sync("v", "schedule")
    assert catalog.queue_sync("v").trigger == "api"  # a manual sync needs none


def test_next_run_at_of_a_view_never_synced_is_its_definition_time():
    assert next_run_at(5, None, "2026-01-01T00:00:00.000+00:00") == T0


def test_the_catalog_lists_scheduled_views_with_their_newest_sync_in_one_read(catalog):
    add_view(catalog, "never", {"schedule": {"every_s": 10}})
    add_view(catalog, "plain", {})
    add_view(catalog, "unscheduled", {"schedule": None})
    add_view(catalog, "ran", {"schedule": {"every_s": 30}})
    finish(catalog, catalog.queue_sync("ran"), at(0), status="failed")
    newest = catalog.queue_sync("ran", "schedule")
    catalog.update_sync(newest.id, status="running")
    listed = {s.view: s for s in catalog.schedules()}
    assert sorted(listed) == ["never", "ran"]
    assert (listed["never"].every_s, listed["never"].status) == (10, None)
    assert (listed["ran"].every_s, listed["ran"].status, listed["ran"].finished_at) == (30, "running", None)
    finish(catalog, newest, at(5))
    assert catalog.schedules()[1].finished_at == at(5).isoformat()
