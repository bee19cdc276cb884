"""A redefinition in the catalog, the view's versions and the change feed (service/redefinitions.py, catalog.py).

The catalog holds the definition the view asks for, its current version the one its rows
follow: a redefinition is pending while the two differ, and the sync queued then applies it
(trigger "redefine"); a version a widening sync committed is none. The feed cuts a view's
deltas where a sync redefined it, each part with its columns; a Parquet request across such a
sync is refused with the requests that give the same lines.
"""

from __future__ import annotations

import pytest

from deltasieve_protocol.types import Column, LogicalType
from service.catalog import Catalog
from service.errors import Conflict
from service.records import SyncRecord, ViewRecord
from service.redefinitions import parquet_refused, pending_redefinition, redefine_within, segments
from warehouse.multisets.multiset import _cols
from warehouse.pipeline.redefine import write_redefined
from warehouse.store.versions import Version, ViewStore
from warehouse.view_options import ViewOptions
from warehouse.viewdef import ViewDef

OLD = ViewDef("SELECT ...", _cols("id int", "v text"), ["id"], [])
NEW = ViewDef("SELECT ...", _cols("id int", "w text"), ["id"], [])
#: OLD with its column v widened in place, as an evolving sync takes it (pipeline/schema_policy.py)
WIDENED = ViewDef("SELECT ...", [OLD.columns[0], Column("v", LogicalType.parse("decimal(16,4)"))], ["id"], [])


@pytest.fixture
def catalog(tmp_path):
    c = Catalog(tmp_path / "catalog.db")
    yield c
    c.close()


@pytest.fixture
def store(tmp_path):
    return ViewStore(tmp_path, "v")


def _options(catalog: Catalog) -> ViewOptions:
    return catalog.view("v").options


def _add(catalog: Catalog) -> None:
    catalog.add_view("v", "SELECT old", OLD.to_json(), ViewOptions.from_stored({"strategy": "group_hash"}))


def _committed(catalog: Catalog, store: ViewStore, definition: ViewDef, **meta: object) -> Version:
    """A sync of the view that committed a version whose rows follow `definition`, still running."""
    sync = catalog.queue_sync("v")
    catalog.update_sync(sync.id, status="running")
    current = store.current()
    staged = store.staged_version(sync.id, current.number + 1 if current is not None else 1)
    staged.path.mkdir(parents=True)
    return store.commit(staged, {"definition": definition.to_json(), **meta})


def _recorded(catalog: Catalog, version: Version) -> None:
    catalog.update_sync(version.sync_id, status="succeeded")


def _queued(catalog: Catalog, store: ViewStore) -> SyncRecord:
    """A sync queued as the service queues one (service/jobs.py)."""

    def redefines(view: ViewRecord) -> bool:
        return pending_redefinition(catalog, store, view) is not None

    return catalog.queue_sync("v", "api", redefines=redefines)


def test_a_redefinition_waits_for_the_sync_that_applies_it(catalog, store):
    _add(catalog)
    _recorded(catalog, _committed(catalog, store, OLD))
    assert pending_redefinition(catalog, store, catalog.view("v")) is None
    record = catalog.redefine_view("v", "SELECT new", NEW.to_json(), _options(catalog))
    assert record.definition == NEW.to_json() and pending_redefinition(catalog, store, record) == OLD
    # a second PUT before that sync: the rows still follow the first definition
    again = catalog.redefine_view("v", "SELECT newer", NEW.to_json(), _options(catalog))
    assert pending_redefinition(catalog, store, again) == OLD
    sync = _queued(catalog, store)
    assert sync.trigger == "redefine", "whatever starts it"
    with pytest.raises(Conflict, match="cannot be redefined while its sync"):
        catalog.redefine_view("v", "SELECT x", OLD.to_json(), _options(catalog))
    catalog.update_sync(sync.id, status="failed")  # the rows still follow OLD: it waits for the next
    assert pending_redefinition(catalog, store, catalog.view("v")) == OLD
    _recorded(catalog, _committed(catalog, store, NEW))
    assert pending_redefinition(catalog, store, catalog.view("v")) is None
    assert _queued(catalog, store).trigger == "api"


def test_a_put_back_to_what_the_rows_follow_leaves_nothing_to_apply(catalog, store):
    _add(catalog)
    _recorded(catalog, _committed(catalog, store, OLD))
    catalog.redefine_view("v", "SELECT new", NEW.to_json(), _options(catalog))
    back = catalog.redefine_view("v", "SELECT old", OLD.to_json(), _options(catalog))
    assert pending_redefinition(catalog, store, back) is None and _queued(catalog, store).trigger == "api"


def test_a_view_never_loaded_is_redefined_with_nothing_to_apply(catalog, store):
    _add(catalog)
    record = catalog.redefine_view("v", "SELECT new", NEW.to_json(), _options(catalog))
    assert pending_redefinition(catalog, store, record) is None and _queued(catalog, store).trigger == "api"


def test_a_version_a_widening_sync_committed_is_no_redefinition(catalog, store):
    """Its rows follow the widened definition before the catalog adopts it, as its sync is recorded."""
    _add(catalog)
    _recorded(catalog, _committed(catalog, store, OLD))
    widened = _committed(catalog, store, WIDENED, definition_before=OLD.to_json())
    assert pending_redefinition(catalog, store, catalog.view("v")) is None, "the sync has yet to hand it on"
    assert catalog.adopt_definition("v", OLD.to_json(), WIDENED.to_json())
    _recorded(catalog, widened)
    assert pending_redefinition(catalog, store, catalog.view("v")) is None
    # a PUT of the definition the widening replaced, once adopted: the rows follow the wider one
    back = catalog.redefine_view("v", "SELECT old", OLD.to_json(), _options(catalog))
    assert pending_redefinition(catalog, store, back) == WIDENED
    assert _queued(catalog, store).trigger == "redefine"


def test_its_own_sync_may_redefine_a_view(catalog):
    """A table view following its table: the sync under way stores the new definition and applies it."""
    _add(catalog)
    sync = catalog.queue_sync("v")
    record = redefine_within(catalog, "v", sync.id, "SELECT new", NEW)
    assert record.definition == NEW.to_json()
    assert catalog.sync("v", sync.id).trigger == "redefine"
    with pytest.raises(Conflict):
        redefine_within(catalog, "v", "another-sync", "SELECT old", OLD)


def _syncs(*pairs: tuple[str, str]) -> list[SyncRecord]:
    at = "2026-01-01T00:00:00+00:00"
    return [SyncRecord(i, "v", "succeeded", None, at, at, at, {}, None, trigger) for i, trigger in pairs]


def test_the_feed_is_cut_where_a_sync_redefined_the_view(tmp_path, catalog):
    _add(catalog)
    catalog.redefine_view("v", "SELECT new", NEW.to_json(), _options(catalog))
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
