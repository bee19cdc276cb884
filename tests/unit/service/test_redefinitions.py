"""A redefinition in the catalog and in the change feed (service/redefinitions.py, catalog.py).

The catalog keeps what the stored rows follow until a sync applies the new definition; the
feed cuts a view's deltas where a sync redefined it, each part with its columns; a Parquet
request across such a sync is refused with the requests that give the same lines.
"""

from __future__ import annotations

import pytest

from service.catalog import Catalog
from service.errors import Conflict
from service.records import SyncRecord
from service.redefinitions import parquet_refused, redefine_within, segments
from warehouse.multisets.multiset import _cols
from warehouse.pipeline.redefine import write_redefined
from warehouse.store.versions import ViewStore
from warehouse.view_options import ViewOptions
from warehouse.viewdef import ViewDef

OLD = ViewDef("SELECT ...", _cols("id int", "v text"), ["id"], [])
NEW = ViewDef("SELECT ...", _cols("id int", "w text"), ["id"], [])


@pytest.fixture
def catalog(tmp_path):
    c = Catalog(tmp_path / "catalog.db")
    yield c
    c.close()


def _options(catalog: Catalog) -> ViewOptions:
    return catalog.view("v").options


def _add(catalog: Catalog) -> None:
    catalog.add_view("v", "SELECT old", OLD.to_json(), ViewOptions.from_stored({"strategy": "group_hash"}))


def test_a_redefinition_waits_for_the_sync_that_applies_it(catalog):
    _add(catalog)
    record = catalog.redefine_view("v", "SELECT new", NEW.to_json(), _options(catalog), OLD.to_json())
    assert record.definition == NEW.to_json() and record.applied == OLD.to_json()
    # a second PUT before that sync: the rows still follow the first definition
    again = catalog.redefine_view("v", "SELECT newer", NEW.to_json(), _options(catalog), NEW.to_json())
    assert again.applied == OLD.to_json()
    sync = catalog.queue_sync("v", "api")
    assert sync.trigger == "redefine", "whatever starts it"
    with pytest.raises(Conflict, match="cannot be redefined while its sync"):
        catalog.redefine_view("v", "SELECT x", OLD.to_json(), _options(catalog), None)
    catalog.update_sync(sync.id, status="succeeded")
    catalog.redefinition_applied("v", NEW.to_json())
    assert catalog.view("v").applied is None
    assert catalog.queue_sync("v").trigger == "api"


def test_a_put_back_to_what_the_rows_follow_leaves_nothing_to_apply(catalog):
    _add(catalog)
    catalog.redefine_view("v", "SELECT new", NEW.to_json(), _options(catalog), OLD.to_json())
    back = catalog.redefine_view("v", "SELECT old", OLD.to_json(), _options(catalog), NEW.to_json())
    assert back.applied is None and catalog.queue_sync("v").trigger == "api"


def test_a_view_never_loaded_is_redefined_with_nothing_to_apply(catalog):
    _add(catalog)
    assert catalog.redefine_view("v", "SELECT new", NEW.to_json(), _options(catalog), None).applied is None


def test_its_own_sync_may_redefine_a_view(catalog, tmp_path):
    """A table view following its table: the sync under way stores the new definition and applies it."""
    _add(catalog)
    sync = catalog.queue_sync("v")
    store = ViewStore(tmp_path, "v")  # nothing stored yet: nothing to apply, but stored
    record = redefine_within(catalog, store, "v", sync.id, "SELECT new", NEW)
    assert record.definition == NEW.to_json()
    assert catalog.sync("v", sync.id).trigger == "redefine"
    with pytest.raises(Conflict):
        redefine_within(catalog, store, "v", "another-sync", "SELECT old", OLD)


def _syncs(*pairs: tuple[str, str]) -> list[SyncRecord]:
    at = "2026-01-01T00:00:00+00:00"
    return [SyncRecord(i, "v", "succeeded", None, at, at, at, {}, None, trigger) for i, trigger in pairs]


def test_the_feed_is_cut_where_a_sync_redefined_the_view(tmp_path, catalog):
    _add(catalog)
    catalog.redefine_view("v", "SELECT new", NEW.to_json(), _options(catalog), None)
    view = catalog.view("v")
    store = ViewStore(tmp_path, "v")
    for sync_id in "abcd":
        store.delta(sync_id).mkdir(parents=True)
    write_redefined(store.delta("c"), OLD, NEW)
    syncs = _syncs(("a", "api"), ("b", "schedule"), ("c", "redefine"), ("d", "api"))
    parts = segments(store, view, syncs, [])
    assert [(p.view.columns[1].name, p.redefined, [s.id for s in p.syncs]) for p in parts] == [
        ("v", False, ["a", "b"]),
        ("w", True, ["c", "d"]),
    ]
    # the syncs before it alone: the old columns, though the view has the new ones now
    assert [p.view.columns[1].name for p in segments(store, view, syncs[:2], syncs[2:])] == ["v"]
    # a sync recorded as redefine whose delta does not say so (it had nothing to apply): no cut
    assert len(segments(store, view, _syncs(("a", "api"), ("d", "redefine")), [])) == 1

    refused = parquet_refused("v", "z", parts, feed=True)
    assert refused is not None
    assert refused.detail == (
        "sync c redefined view 'v': its delta starts with a schema line and a Parquet file holds one schema; "
        "read the same lines in 3 requests: "
        "read up to sync b in Parquet (GET /v1/views/v/changes?after=z&limit_syncs=2&format=parquet), "
        "then sync c in NDJSON (GET /v1/views/v/changes?after=b&limit_syncs=1&format=ndjson; "
        "it has the schema line, then the rows in the new columns), "
        "then the syncs after it in Parquet (GET /v1/views/v/changes?after=c&format=parquet)"
    )
    starting = parquet_refused("v", "b", segments(store, view, syncs[2:], []), feed=True)
    assert starting is not None and "in 2 requests: sync c in NDJSON" in starting.detail
    assert "after=b&limit_syncs=1&format=ndjson" in starting.detail
    assert parquet_refused("v", None, parts[:1], feed=True) is None
    one = parquet_refused("v", None, segments(store, view, syncs[2:3], syncs[3:]), feed=False)
    assert one is not None and one.detail.endswith("(GET /v1/views/v/syncs/c/delta?format=ndjson)")
