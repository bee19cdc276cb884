"""The versioned store's pointer and metadata: the format number written, any other refused."""

from __future__ import annotations

import json

import pytest

from warehouse.errors import FormatError
from warehouse.formats import STORAGE_FORMAT
from warehouse.store.versions import ViewStore


def committed(tmp_path) -> ViewStore:
    store = ViewStore(tmp_path, "v")
    staged = store.staged_version("s1", 1)
    store.staging("s1")
    staged.path.mkdir()
    store.commit(staged, {"metrics": {"rows_inserted": 3}})
    return store


def test_commit_writes_the_format_into_current_and_meta(tmp_path):
    store = committed(tmp_path)
    assert STORAGE_FORMAT == 4
    assert json.loads((store.root / "CURRENT").read_text()) == {"format": 4, "version": 1, "sync_id": "s1"}
    assert store.current().meta() == {"format": 4, "metrics": {"rows_inserted": 3}}


def test_a_store_without_a_format_is_refused_naming_the_file(tmp_path):
    store = committed(tmp_path)
    (store.root / "CURRENT").write_text(json.dumps({"version": 1, "sync_id": "s1"}))
    with pytest.raises(FormatError, match="without a format number") as info:
        store.current()
    assert str(store.root / "CURRENT") in info.value.message and "create it again" in info.value.message
    (store.root / "CURRENT").write_text(json.dumps({"format": STORAGE_FORMAT, "version": 1, "sync_id": "s1"}))
    meta = store.root / "versions" / "1" / "meta.json"
    meta.write_text(json.dumps({"format": 2, "metrics": {"rows_inserted": 3}}))
    with pytest.raises(FormatError, match="format 2, and this deltasieve reads format 4") as info:
        store.current().meta()
    assert str(meta) in info.value.message and (info.value.found, info.value.expected) == (2, STORAGE_FORMAT)


def test_a_newer_store_is_refused_with_a_hint_to_upgrade(tmp_path):
    store = committed(tmp_path)
    (store.root / "CURRENT").write_text(json.dumps({"format": STORAGE_FORMAT + 1, "version": 1, "sync_id": "s1"}))
    with pytest.raises(FormatError, match="upgrade deltasieve"):
        store.current()
    (store.root / "CURRENT").write_text(json.dumps({"format": STORAGE_FORMAT, "version": 1, "sync_id": "s1"}))
    (store.root / "versions" / "1" / "meta.json").write_text(json.dumps({"format": STORAGE_FORMAT + 1}))
    with pytest.raises(FormatError, match="upgrade deltasieve"):
        store.current().meta()
