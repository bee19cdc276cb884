"""A keyed view's syncs applied by rewriting the touched files (delta_rewrite.py) against an
oracle in Python: scattered changes, keys below, between and above the files' ranges, files
that outgrow their size and split; the table read back with deltalake after every sync.
Each test runs with the rows of written files kept in memory (delta_file_cache.py) and
without: the same table either way, and the kept rows taken when their files are rewritten."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltasieve_protocol.types import Column, LogicalType
from warehouse.destinations import delta_upkeep
from warehouse.destinations.delta import SYNC_ID, DeltaDestination
from warehouse.destinations.delta_file_cache import FileCache
from warehouse.names import OP
from workloads.published import view_rows

COLUMNS = [Column("k", LogicalType("int")), Column("v", LogicalType("text")), Column("on", LogicalType("date"))]
SCHEMA = pa.schema([pa.field(OP, pa.string()), *(pa.field(c.name, c.type.arrow()) for c in COLUMNS)])


def _row(rng: random.Random, k: int) -> dict:
    return {"k": k, "v": rng.choice([f"value {rng.random():.6f}", None]), "on": None}


@pytest.fixture(params=["kept", "read"])
def cache(request) -> FileCache:
    """The rows of written files kept in memory, or a budget of 0: every file read back."""
    return FileCache() if request.param == "kept" else FileCache(budget_bytes=0)


def _ranges(uri: str) -> list[tuple[int, int]]:
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    return sorted(zip(actions.column("min.k").to_pylist(), actions.column("max.k").to_pylist(), strict=True))


def test_rounds_rewrite_touched_files_in_one_commit_each(tmp_path, monkeypatch, cache):
    monkeypatch.setattr(delta_upkeep, "TARGET_FILE_BYTES", 16 * 1024)  # the table's delta.targetFileSize
    uri = str(tmp_path / "t")
    destination = DeltaDestination(uri, cache=cache)
    rng = random.Random(37)
    truth = {k: _row(rng, k) for k in range(1000, 33000, 8)}
    load = [{OP: "insert", **r} for r in truth.values()]
    destination.apply("load", 1, COLUMNS, ["k"], [pa.RecordBatch.from_pylist(load, schema=SCHEMA)], False)
    assert len(DeltaTable(uri).file_uris()) >= 4
    then = {}
    for n in range(12):
        keys = list(truth)
        lines = []
        for k in rng.sample(keys, 40):
            if rng.random() < 0.3:
                lines.append({OP: "delete", "k": k, "v": None, "on": None})
                del truth[k]
            else:
                truth[k] = _row(rng, k)
                lines.append({OP: "update", **truth[k]})
        # new keys: below every file, in the gaps between keys, above every file; round 5 crowds one range
        fresh = [rng.randrange(0, 1000), rng.randrange(33000, 40000), *(rng.randrange(1001, 33000) for _ in range(5))]
        if n == 5:
            low, high = _ranges(uri)[1]
            fresh += list(range(low, high))  # every key in the second file's range: 8 times its rows
        for k in {k for k in fresh if k not in truth}:
            truth[k] = _row(rng, k)
            lines.append({OP: "insert", **truth[k]})
        files = len(DeltaTable(uri).file_uris())
        destination.apply(f"s{n}", n + 2, COLUMNS, ["k"], [pa.RecordBatch.from_pylist(lines, schema=SCHEMA)], False)
        table = DeltaTable(uri)
        assert {r["k"]: r for r in view_rows(table).to_pylist()} == truth, f"sync s{n}"
        commit = next(c for c in table.history() if SYNC_ID in c)  # upkeep commits may follow it
        assert commit[SYNC_ID] == f"s{n}" and commit["operation"] != "MERGE", commit
        ranges = _ranges(uri)
        assert all(high < low for (_, high), (low, _) in zip(ranges, ranges[1:], strict=False)), ranges
        if n == 5:  # the crowded files outgrew their size: split in key ranges
            assert len(ranges) > files, (files, ranges)
        then[f"s{n}"] = (int(commit["version"]), dict(truth))
    # the load's files are read (delta-rs wrote them); after it, most rewrites took kept rows
    assert (cache.hits > cache.misses) == (cache.budget_bytes > 0) and cache.misses >= 4, (cache.hits, cache.misses)
    protocol = DeltaTable(uri).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    for version, rows in then.values():  # time travel to every sync's commit
        assert {r["k"]: r for r in view_rows(DeltaTable(uri, version=version)).to_pylist()} == rows


def test_a_key_of_two_columns_goes_through_the_merge(tmp_path):
    uri = str(tmp_path / "t")
    destination = DeltaDestination(uri)
    columns = [Column("a", LogicalType("int")), Column("b", LogicalType("int")), Column("v", LogicalType("text"))]
    schema = pa.schema([pa.field(OP, pa.string()), *(pa.field(c.name, c.type.arrow()) for c in columns)])
    load = [{OP: "insert", "a": i % 7, "b": i, "v": "x"} for i in range(50)]
    destination.apply("load", 1, columns, ["a", "b"], [pa.RecordBatch.from_pylist(load, schema=schema)], False)
    lines = [{OP: "update", "a": 3, "b": 3, "v": "y"}, {OP: "delete", "a": 4, "b": 4, "v": None}]
    destination.apply("s1", 2, columns, ["a", "b"], [pa.RecordBatch.from_pylist(lines, schema=schema)], False)
    table = DeltaTable(uri)
    assert table.history(1)[0]["operation"] == "MERGE"
    rows = {(r["a"], r["b"]): r["v"] for r in view_rows(table).to_pylist()}
    assert len(rows) == 49 and rows[(3, 3)] == "y" and (4, 4) not in rows


def test_files_written_before_a_column_was_added(tmp_path, cache):
    uri = str(tmp_path / "t")
    destination = DeltaDestination(uri, cache=cache)
    load = [{OP: "insert", "k": k, "v": "x", "on": None} for k in range(100)]
    destination.apply("load", 1, COLUMNS, ["k"], [pa.RecordBatch.from_pylist(load, schema=SCHEMA)], False)
    lines = [{OP: "update", "k": 5, "v": "x5", "on": None}]  # rewritten (and kept) without the column
    destination.apply("s0", 2, COLUMNS, ["k"], [pa.RecordBatch.from_pylist(lines, schema=SCHEMA)], False)
    wider = [*COLUMNS, Column("w", LogicalType("int"))]
    schema = SCHEMA.append(pa.field("w", pa.int64()))
    lines = [{OP: "insert", "k": 1000, "v": "y", "on": None, "w": 1}]  # MERGEd: a file of its own
    destination.apply("s1", 3, wider, ["k"], [pa.RecordBatch.from_pylist(lines, schema=schema)], False)
    lines = [
        {OP: "update", "k": 2, "v": "z", "on": None, "w": 2},
        {OP: "delete", "k": 3, "v": None, "on": None, "w": None},
    ]
    destination.apply("s2", 4, wider, ["k"], [pa.RecordBatch.from_pylist(lines, schema=schema)], False)
    table = DeltaTable(uri)
    assert table.history(1)[0]["operation"] != "MERGE"
    rows = {r["k"]: (r["v"], r["w"]) for r in view_rows(table).to_pylist()}
    assert len(rows) == 100 and rows[1000] == ("y", 1) and rows[2] == ("z", 2) and rows[4] == ("x", None)
    assert rows[5] == ("x5", None)
    assert cache.hits == (1 if cache.budget_bytes else 0), cache.hits  # s2 took s0's file, kept without `w`


def test_a_table_written_whole_lets_go_of_its_kept_files(tmp_path):
    cache = FileCache()
    destination = DeltaDestination(str(tmp_path / "t"), cache=cache)
    other = DeltaDestination(str(tmp_path / "t2"), cache=cache)  # a name that starts like the first
    load = [{OP: "insert", "k": k, "v": "x", "on": None} for k in range(100)]
    lines = [{OP: "update", "k": 5, "v": "x5", "on": None}]
    for d in (destination, other):
        d.apply("load", 1, COLUMNS, ["k"], [pa.RecordBatch.from_pylist(load, schema=SCHEMA)], False)
        d.apply("s1", 2, COLUMNS, ["k"], [pa.RecordBatch.from_pylist(lines, schema=SCHEMA)], False)
    kept = cache.held_bytes
    assert kept > 0
    destination.rebuild("s2", 3, COLUMNS, ["k"], pa.Table.from_pylist(load, schema=SCHEMA).to_batches(), False, "test")
    assert 0 < cache.held_bytes < kept  # the rebuilt table's file let go, the other table's kept
