"""A history destination built by the applier (service/publishing.py) on a real catalog and
view store: from the deltas kept since the view's load, each version valid from its own
sync's time, or, once the load's delta is gone, from the current rows at the rebuild; the
rebuild's commit says which."""

from __future__ import annotations

import datetime as dt
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from service.catalog import Catalog
from service.publishing import Publisher
from service.settings import ServiceSettings
from warehouse.destinations.modes import Publishing
from warehouse.multisets.multiset import _cols
from warehouse.names import OP
from warehouse.store.versions import ViewStore
from warehouse.view_options import DestinationSpec, ViewOptions
from warehouse.viewdef import ViewDef

VIEW = ViewDef("SELECT ...", _cols("id int", "v text"), ["id"], [])
#: The view's syncs: each one's delta lines.
SYNCS = [
    [{OP: "insert", "id": 1, "v": "a"}, {OP: "insert", "id": 2, "v": "b"}],
    [{OP: "update", "id": 1, "v": "A"}],
    [{OP: "delete", "id": 2, "v": None}, {OP: "insert", "id": 3, "v": "c"}],
]
START = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)


@pytest.fixture
def synced(tmp_path):
    """A catalog and a store holding a keyed view's three syncs (versions and deltas); their times."""
    catalog = Catalog(tmp_path / "catalog.db")
    catalog.add_view("v", "SELECT ...", VIEW.to_json(), ViewOptions.from_stored({"strategy": "group_hash"}))
    store = ViewStore(tmp_path, "v")
    times = []
    schema = pa.schema([(OP, pa.string()), ("id", pa.int64()), ("v", pa.string())])
    for n, lines in enumerate(SYNCS):
        sync = catalog.queue_sync("v")
        staged = store.staged_version(sync.id, n + 1)
        staged.path.mkdir(parents=True)
        store.staged_delta(sync.id).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(lines, schema=schema), store.staged_delta(sync.id) / "part-0.parquet")
        store.commit(staged, {"definition": VIEW.to_json(), "sync_id": sync.id})
        at = START + dt.timedelta(hours=n)
        metrics = {"rows_inserted": 1, "rows_updated": 0, "rows_deleted": 0}
        catalog.update_sync(sync.id, status="succeeded", metrics=metrics, finished_at=at.isoformat())
        times.append(at)
    yield catalog, store, times
    catalog.close()


def test_a_history_destination_is_built_from_the_kept_deltas(tmp_path, synced):
    catalog, _, times = synced
    uri = str(tmp_path / "history")
    Publisher(ServiceSettings(data_dir=tmp_path), catalog).catch_up(
        "v", DestinationSpec(kind="delta", uri=uri, mode="history")
    )
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    versions = sorted((r["id"], r["v"], r["_deltasieve_valid_from"], r["_deltasieve_valid_to"]) for r in rows)
    assert versions == [
        (1, "A", times[1], None),
        (1, "a", times[0], times[1]),
        (2, "b", times[0], times[2]),
        (3, "c", times[2], None),
    ]
    (rebuilt,) = [c for c in DeltaTable(uri).history() if "deltasieve.rebuild" in c]
    assert "its history rebuilt from the deltas kept since the view's load" in rebuilt["deltasieve.rebuild"]


def test_without_the_load_s_delta_the_history_starts_at_the_rebuild(tmp_path, synced):
    catalog, store, _ = synced
    first, *_, last = catalog.succeeded_after("v", None)
    shutil.rmtree(store.delta(first.id))  # as retention or a lost disk leaves it
    publisher = Publisher(ServiceSettings(data_dir=tmp_path), catalog)
    assert publisher._history(catalog.view("v"), store, last.id, VIEW, Publishing("history")) is None
