"""Retention removes the syncs its policy lets go, with their files, and leaves tombstones (service/retention.py)."""

from __future__ import annotations

import json

import pytest

from service.catalog import Catalog, now
from service.errors import Gone, NotFound
from service.readers import Readers
from service.retention import Keep, RetentionTask
from warehouse.formats import STORAGE_FORMAT
from warehouse.store.versions import ViewStore
from warehouse.view_options import ViewOptions


def _synced(catalog: Catalog, store: ViewStore, statuses: str) -> list[str]:
    """Run one fake sync per letter (s: succeeded, committing a version and a delta; f: failed)."""
    ids = []
    number = 0
    for status in statuses:
        sync = catalog.queue_sync("v")
        stamp = now()
        catalog.update_sync(
            sync.id, status="succeeded" if status == "s" else "failed", started_at=stamp, finished_at=stamp
        )
        if status == "s":
            number += 1
            version = store.root / "versions" / str(number)
            version.mkdir(parents=True)
            (version / "meta.json").write_text(json.dumps({"format": STORAGE_FORMAT, "sync_id": sync.id}))
            (store.delta(sync.id)).mkdir(parents=True)
            (store.delta(sync.id) / "part-0.parquet").write_bytes(b"x")
            (store.root / "CURRENT").write_text(
                json.dumps({"format": STORAGE_FORMAT, "version": number, "sync_id": sync.id})
            )
        ids.append(sync.id)
    return ids


@pytest.fixture
def setup(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    catalog.add_view("v", "SELECT 1", {"sites": []}, ViewOptions.from_stored({"strategy": "auto"}))
    store = ViewStore(tmp_path, "v")
    yield catalog, store
    catalog.close()


TWO = Keep(count=2)


def _task(catalog, store, readers=None, keep=TWO, needed=None) -> RetentionTask:
    return RetentionTask(catalog, lambda view: store, readers or Readers(), keep, 3600, needed)


def test_the_policy_keeps_its_syncs_the_current_one_and_leaves_tombstones(setup):
    catalog, store = setup
    ids = _synced(catalog, store, "sssfsff")  # the current version is the 5th sync's
    assert _task(catalog, store).run_once() == 4  # syncs 1-4 go; 5 (current) and 6-7 (the newest two) stay
    assert [s.id for s in catalog.history("v")] == ids[4:]
    assert sorted(p.name for p in (store.root / "deltas").iterdir()) == [ids[4]]
    # versions: the current one and KEEP_OLD_VERSIONS (1) before it; the others went with their syncs
    assert sorted(int(p.name) for p in (store.root / "versions").iterdir()) == [3, 4]
    for removed in ids[:4]:
        with pytest.raises(Gone, match="retention policy"):
            catalog.sync("v", removed)
        with pytest.raises(Gone):
            catalog.succeeded_after("v", removed)
    with pytest.raises(NotFound):
        catalog.succeeded_after("v", "never-was")
    with pytest.raises(Gone, match="its load among them"):  # from the start: the load is gone
        catalog.succeeded_after("v", None)
    assert [s.id for s in catalog.succeeded_after("v", ids[4])] == []
    assert _task(catalog, store).run_once() == 0  # nothing more to do


def test_a_sync_a_consumer_still_needs_stays_with_every_later_one(setup):
    catalog, store = setup
    ids = _synced(catalog, store, "sssss")
    assert _task(catalog, store, keep=Keep(count=1), needed=lambda: {"v": ids[1]}).run_once() == 1
    assert [s.id for s in catalog.history("v")] == ids[1:]


def test_a_view_being_read_is_left_alone_until_its_reader_is_done(setup):
    catalog, store = setup
    ids = _synced(catalog, store, "sss")
    readers = Readers()
    readers.hold("v")
    task = _task(catalog, store, readers, keep=Keep(count=1))
    assert task.run_once() == 0
    readers.release("v")
    assert task.run_once() == 2
    assert [s.id for s in catalog.history("v")] == ids[2:]


def test_a_duration_keeps_the_syncs_that_finished_within_it(setup):
    catalog, store = setup
    _synced(catalog, store, "ss")
    assert _task(catalog, store, keep=Keep(seconds=3600)).run_once() == 0


def test_a_crash_between_tombstone_and_files_is_finished_by_the_next_round(setup):
    catalog, store = setup
    ids = _synced(catalog, store, "ssss")
    assert catalog.bury_syncs({"v": [ids[0]]})  # the record went, the files stayed
    assert store.delta(ids[0]).is_dir()
    _task(catalog, store, keep=Keep(count=10)).run_once()
    assert not store.delta(ids[0]).exists()
    assert not (store.root / "versions" / "1").exists()


def test_deleting_a_view_forgets_its_tombstones(setup):
    catalog, store = setup
    ids = _synced(catalog, store, "ss")
    catalog.bury_syncs({"v": [ids[0]]})
    catalog.delete_view("v", store.drop)
    catalog.add_view("v", "SELECT 1", {"sites": []}, ViewOptions.from_stored({"strategy": "auto"}))
    with pytest.raises(NotFound):
        catalog.sync("v", ids[0])


def test_the_setting_takes_a_duration_or_a_count_and_refuses_the_rest():
    from pydantic import ValidationError

    from service.settings import ServiceSettings

    assert ServiceSettings().keep_policy() == Keep(seconds=30 * 86400)
    assert ServiceSettings(keep_deltas="1000").keep_policy() == Keep(count=1000)
    for wrong in ("", "-3", "30 days", "1.5h", "0d"):
        with pytest.raises(ValidationError, match="SERVICE_KEEP_DELTAS must be a duration"):
            ServiceSettings(keep_deltas=wrong)


def test_tombstones_stay_bounded_and_an_id_past_them_is_a_404_that_says_why(setup):
    catalog, store = setup
    ids = _synced(catalog, store, "sssss")
    for sync_id in ids[:4]:
        catalog.bury_syncs({"v": [sync_id]})
    assert catalog.prune_tombstones("v", 2) == 2
    assert catalog.buried("v") == set(ids[2:4])
    with pytest.raises(Gone):
        catalog.sync("v", ids[2])
    with pytest.raises(NotFound, match="removed so long ago"):
        catalog.succeeded_after("v", ids[0])


def _views(tmp_path, names: str) -> tuple[Catalog, dict[str, ViewStore]]:
    catalog = Catalog(tmp_path / "catalog.db")
    for name in names:
        catalog.add_view(name, "SELECT 1", {"sites": []}, ViewOptions.from_stored({"strategy": "auto"}))
    return catalog, {name: ViewStore(tmp_path, name) for name in names}


def _commit(catalog: Catalog, store: ViewStore, number: int) -> str:
    """One fake succeeded sync of the store's view that commits version `number` and a delta."""
    sync = catalog.queue_sync(store.view)
    catalog.update_sync(sync.id, status="succeeded", started_at=now(), finished_at=now())
    version = store.root / "versions" / str(number)
    version.mkdir(parents=True)
    (version / "meta.json").write_text(json.dumps({"format": STORAGE_FORMAT, "sync_id": sync.id}))
    store.delta(sync.id).mkdir(parents=True)
    (store.root / "CURRENT").write_text(json.dumps({"format": STORAGE_FORMAT, "version": number, "sync_id": sync.id}))
    return sync.id


def test_a_round_visits_only_the_views_with_syncs_to_remove_and_writes_their_tombstones_once(tmp_path):
    """Three views with syncs the policy lets go and one without: one catalog commit for the
    tombstones of all three, and a later round asks for no store but the one that has syncs to go."""
    catalog, stores = _views(tmp_path, "abcd")
    ids = {
        name: [_commit(catalog, store, n) for n in range(1, 5 if name != "d" else 2)] for name, store in stores.items()
    }
    asked: list[str] = []

    def store_of(view: str) -> ViewStore:
        asked.append(view)
        return stores[view]

    commits = []
    catalog._conn.set_trace_callback(lambda sql: commits.append(sql) if sql.strip().upper() == "COMMIT" else None)
    task = RetentionTask(catalog, store_of, Readers(), Keep(count=1), 3600)
    assert task.run_once() == 9  # a, b, c: all but the current sync
    assert len(commits) == 1
    assert all([s.id for s in catalog.history(v)] == ids[v][-1:] for v in "abc")
    _commit(catalog, stores["b"], 5)
    asked.clear()
    assert task.run_once() == 1
    assert set(asked) == {"b"}, asked  # a, c and d have nothing to remove: not looked at
    catalog.close()


def test_files_go_only_after_their_tombstones_are_on_disk_and_a_version_left_goes_later(tmp_path):
    """When a forgotten sync's files are removed, another connection to the catalog already reads
    its tombstone (committed), so a crash then leaves no record whose files went; the version
    of a forgotten sync still among the recent ones is removed by a later round."""
    catalog, stores = _views(tmp_path, "v")
    ids = [_commit(catalog, stores["v"], n) for n in range(1, 4)]
    other = Catalog(tmp_path / "catalog.db")
    removed = []

    class Observed(ViewStore):
        def remove_sync(self, sync_id: str) -> bool:
            with pytest.raises(Gone):  # its tombstone committed first
                other.sync("v", sync_id)
            removed.append(sync_id)
            return super().remove_sync(sync_id)

    store = Observed(tmp_path, "v")
    task = RetentionTask(catalog, lambda view: store, Readers(), Keep(count=1), 3600)
    assert task.run_once() == 2 and removed == ids[:2]
    assert sorted(int(p.name) for p in (store.root / "versions").iterdir()) == [2, 3]  # 2 is recent: left
    _commit(catalog, store, 4)
    task.run_once()
    assert sorted(int(p.name) for p in (store.root / "versions").iterdir()) == [3, 4]  # the left one went
    other.close()
    catalog.close()
