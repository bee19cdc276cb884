"""Where a with_before stream finds the rows before its first sync (service/feed.py)."""

from __future__ import annotations

import json

import pytest

from service import feed
from service.errors import Gone
from service.records import SyncRecord
from warehouse.formats import STORAGE_FORMAT
from warehouse.multisets.multiset import _cols
from warehouse.store.versions import ViewStore
from warehouse.viewdef import ViewDef

VIEW = ViewDef("", _cols("id int", "v text"), ["id"], [])


def _store(tmp_path, versions: dict[int, str], deltas: list[str]) -> ViewStore:
    store = ViewStore(tmp_path, "v")
    for number, sync_id in versions.items():
        path = store.root / "versions" / str(number)
        path.mkdir(parents=True)
        (path / "meta.json").write_text(json.dumps({"format": STORAGE_FORMAT, "sync_id": sync_id}))
    for sync_id in deltas:
        store.delta(sync_id).mkdir(parents=True)
    (store.root / "versions" / "9").mkdir()  # half written: no meta.json
    return store


def _syncs(*ids: str) -> list[SyncRecord]:
    at = "2026-01-01T00:00:00+00:00"
    return [SyncRecord(i, "v", "succeeded", None, at, at, at, {}, None, "api") for i in ids]


def test_the_version_of_a_sync_is_found_while_it_is_stored(tmp_path):
    store = _store(tmp_path, {1: "a", 2: "b"}, [])
    assert store.version_of("b").number == 2 and store.version_of("b").sync_id == "b"
    assert store.version_of("c") is None
    assert ViewStore(tmp_path, "other").version_of("a") is None


def test_a_stream_starts_from_the_version_before_it_else_from_every_delta_since_the_load(tmp_path):
    store = _store(tmp_path, {2: "b"}, ["a", "b", "c"])
    shape = feed.Shape(VIEW, matched=False, with_before=True)
    assert feed.start(store, _syncs("a", "b"), shape) == feed.Start(version=store.version_of("b"))
    assert feed.start(store, _syncs("a", "b", "c"), shape) == feed.Start(deltas=tuple(store.delta(i) for i in "abc"))
    assert feed.start(store, [], shape) == feed.Start()  # from the load: nothing before it
    plain = feed.Shape(VIEW, matched=False, with_before=False)
    assert feed.start(store, _syncs("a", "x"), plain) == feed.Start()  # nothing read without with_before
    with pytest.raises(Gone, match="sync x .*with_before"):
        feed.start(store, _syncs("a", "x"), shape)


def test_a_delta_serves_its_changed_columns_and_an_older_one_none(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from warehouse.deltas.changed_columns import CHANGED_TYPE
    from warehouse.names import CHANGED, OP

    lines = {OP: ["update", "insert"], "id": [1, 2], "v": ["a", "b"]}
    new, old = tmp_path / "new", tmp_path / "old"
    new.mkdir(), old.mkdir()
    pq.write_table(pa.table({**lines, CHANGED: pa.array([["v"], None], CHANGED_TYPE)}), new / "part-0.parquet")
    pq.write_table(pa.table(lines), old / "part-0.parquet")  # stored before CHANGED was kept
    served = feed.Shape(VIEW, matched=False, with_before=False, changed=True)
    (batch,) = feed.delta_batches(new, served, 100)
    assert batch.column(CHANGED).to_pylist() == [["v"], None]
    (batch,) = feed.delta_batches(old, served, 100)
    assert batch.column(CHANGED).to_pylist() == [None, None]
    (batch,) = feed.delta_batches(new, feed.Shape(VIEW, matched=False, with_before=False), 100)
    assert CHANGED not in batch.schema.names  # publishing reads the lines without it
