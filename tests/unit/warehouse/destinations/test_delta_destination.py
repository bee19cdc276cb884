"""The Delta destination against an oracle in Python: random keyed and multiset deltas
applied one commit each, read back with deltalake; schema changes; rebuilds."""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from deltasieve_protocol.types import Column, LogicalType
from tests.support.multisets import random_bag_delta
from warehouse.destinations import delta_upkeep
from warehouse.destinations.base import CannotFollow
from warehouse.destinations.delta import MAINTENANCE, OPTIMIZE_EVERY, SYNC_ID, DeltaDestination, DestinationRefused
from warehouse.multisets.multiset import COUNT
from warehouse.names import OP
from workloads.published import view_rows

KEYED = [Column("k", LogicalType("int")), Column("v", LogicalType("text")), Column("d", LogicalType("decimal", 6, 2))]
BAG = [Column("a", LogicalType("int")), Column("b", LogicalType("text"))]


def _carried(uri: str) -> list[str]:
    return [c[SYNC_ID] for c in reversed(DeltaTable(uri).history()) if SYNC_ID in c]


def _keyed_delta(rng: random.Random, truth: dict) -> list[dict]:
    lines = []
    keys = list(truth)
    for k in rng.sample(keys, min(len(keys), rng.randrange(0, 6))):
        if rng.random() < 0.4:
            lines.append({OP: "delete", "k": k, "v": None, "d": None})
            del truth[k]
        else:
            truth[k] = {"k": k, "v": f"u{rng.random():.3f}", "d": Decimal(rng.randrange(-9999, 9999)) / 100}
            lines.append({OP: "update", **truth[k]})
    for _ in range(rng.randrange(0, 6)):
        k = rng.choice([None, *range(1000)]) if None not in truth else rng.randrange(1000)
        if k in truth:
            continue
        truth[k] = {"k": k, "v": rng.choice(["x", None]), "d": None}
        lines.append({OP: "insert", **truth[k]})
    return lines


def test_keyed_rounds_one_commit_each(tmp_path):
    uri = str(tmp_path / "t")
    keep = 5
    destination = DeltaDestination(uri, keep_versions=keep)
    assert destination.applied() is None
    rng = random.Random(7)
    truth: dict = {}
    then: list[dict] = []
    schema = pa.schema([pa.field(OP, pa.string()), *(pa.field(c.name, c.type.arrow()) for c in KEYED)])
    for n in range(OPTIMIZE_EVERY + 3):  # past one compaction and several vacuums
        lines = _keyed_delta(rng, truth)
        destination.apply(f"s{n}", n + 1, KEYED, ["k"], [pa.RecordBatch.from_pylist(lines, schema=schema)], False)
        assert destination.applied() == f"s{n}"
        then.append(dict(truth))
    rows = {r["k"]: r for r in view_rows(DeltaTable(uri)).to_pylist()}
    assert rows == truth
    assert _carried(uri) == [f"s{n}" for n in range(OPTIMIZE_EVERY + 3)]
    history = DeltaTable(uri).history()
    operations = [c["operation"] for c in history]
    assert "OPTIMIZE" in operations and "VACUUM END" in operations
    assert not any(SYNC_ID in c for c in history if MAINTENANCE in c), "maintenance commits carry no sync id"
    # time travel works to each of the last `keep` view versions (the vacuum keeps their files)
    carrying = {c[SYNC_ID]: c["version"] for c in history if SYNC_ID in c}
    # the version the lineage events report: the commit that carries the sync's id
    last = OPTIMIZE_EVERY + 3
    assert [destination.version_of(f"s{n}") for n in range(last - 3, last)] == [
        carrying[f"s{n}"] for n in range(last - 3, last)
    ]
    assert destination.version_of("never-applied") is None
    for n in range(OPTIMIZE_EVERY + 3 - keep, OPTIMIZE_EVERY + 3):
        old = view_rows(DeltaTable(uri, version=carrying[f"s{n}"])).to_pylist()
        assert {r["k"]: r for r in old} == then[n], f"time travel to s{n}"
    # and the disk holds the files of those versions, not of every version since the load
    on_disk = len(list((tmp_path / "t").glob("*.parquet")))
    assert on_disk <= 3 * keep + len(DeltaTable(uri).file_uris()), on_disk


def test_keyed_table_in_key_ranges_sync_rewrites_only_touched_files(tmp_path, monkeypatch):
    """Written in key order in files of the target size, a delta touching recent keys
    rewrites the files holding them, one spread over every key rewrites all."""
    monkeypatch.setattr(delta_upkeep, "TARGET_FILE_BYTES", 64 * 1024)
    uri = str(tmp_path / "ranges")
    destination = DeltaDestination(uri)
    columns = [Column("k", LogicalType("int")), Column("v", LogicalType("text"))]
    schema = pa.schema([pa.field(OP, pa.string()), pa.field("k", pa.int64()), pa.field("v", pa.string())])
    n = 60_000
    order = random.Random(1).sample(range(n), n)  # the load arrives in no key order
    load = pa.RecordBatch.from_pydict({OP: ["insert"] * n, "k": order, "v": [f"value {k:08d}" for k in order]}, schema)
    destination.apply("load", 1, columns, ["k"], [load], False)
    files = len(DeltaTable(uri).file_uris())
    assert files >= 4, files

    def rewritten(keys: list[int], sync: str) -> int:
        lines = pa.RecordBatch.from_pydict({OP: ["update"] * len(keys), "k": keys, "v": ["new"] * len(keys)}, schema)
        destination.apply(sync, 2, columns, ["k"], [lines], False)
        version = next(int(c["version"]) for c in DeltaTable(uri).history() if c.get(SYNC_ID) == sync)
        before = set(DeltaTable(uri, version=version - 1).file_uris())
        return len(before - set(DeltaTable(uri, version=version).file_uris()))

    recent, spread = list(range(n - 500, n)), list(range(0, n, 997))
    assert rewritten(recent, "recent") <= 2
    assert rewritten(spread, "spread") >= files - 1
    rows = view_rows(DeltaTable(uri))
    assert rows.num_rows == n and pc.sum(pc.equal(rows.column("v"), "new")).as_py() == len({*recent, *spread})


def test_multiset_deletes_n_of_m_copies(tmp_path):
    uri = str(tmp_path / "bag")
    destination = DeltaDestination(uri)
    schema = pa.schema(
        [pa.field(OP, pa.string()), pa.field("a", pa.int64()), pa.field("b", pa.string()), pa.field(COUNT, pa.int64())]
    )
    rng = random.Random(3)
    truth: Counter = Counter()
    for n in range(8):
        lines = random_bag_delta(rng, truth)
        destination.apply(f"s{n}", n + 1, BAG, [], [pa.RecordBatch.from_pylist(lines, schema=schema)], True)
        held = Counter((r["a"], r["b"]) for r in view_rows(DeltaTable(uri)).to_pylist())
        assert held == +truth, f"sync {n}"
    assert _carried(uri) == [f"s{n}" for n in range(8)]


def test_schema_changes(tmp_path):
    uri = str(tmp_path / "t")
    destination = DeltaDestination(uri)
    schema = pa.schema([pa.field(OP, pa.string()), *(pa.field(c.name, c.type.arrow()) for c in KEYED)])
    first = [{OP: "insert", "k": 1, "v": "a", "d": Decimal("1.50")}, {OP: "insert", "k": 2, "v": "b", "d": None}]
    destination.apply("s1", 1, KEYED, ["k"], [pa.RecordBatch.from_pylist(first, schema=schema)], False)
    added = [*KEYED, Column("extra", LogicalType("text"))]
    line = pa.RecordBatch.from_pylist(
        [{OP: "update", "k": 1, "v": "a", "d": Decimal("1.50"), "extra": "e"}],
        schema=schema.append(pa.field("extra", pa.string())),
    )
    destination.apply("s2", 2, added, ["k"], [line], False)
    assert sorted(view_rows(DeltaTable(uri)).to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "v": "a", "d": Decimal("1.50"), "extra": "e"},
        {"k": 2, "v": "b", "d": None, "extra": None},
    ]
    widened = [KEYED[0], KEYED[1], Column("d", LogicalType("decimal", 12, 2)), added[3]]
    wide = pa.schema([pa.field(OP, pa.string()), *(pa.field(c.name, c.type.arrow()) for c in widened)])
    big = [{OP: "update", "k": 2, "v": "b", "d": Decimal("1234567890.12"), "extra": None}]
    destination.apply("s3", 3, widened, ["k"], [pa.RecordBatch.from_pylist(big, schema=wide)], False)
    table = DeltaTable(uri)
    assert table.schema().to_arrow().field("d").type == pa.decimal128(12, 2)
    assert {r["k"]: r["d"] for r in view_rows(table).to_pylist()} == {
        1: Decimal("1.50"),
        2: Decimal("1234567890.12"),
    }
    assert _carried(uri) == ["s1", "s2", "s3"]
    with pytest.raises(CannotFollow):
        destination.apply("s4", 4, KEYED[:2], ["k"], [], False)  # a column dropped
    assert destination.applied() == "s3"  # nothing written
    destination.rebuild("s4", 4, KEYED[:2], ["k"], [pa.record_batch({"k": [9], "v": ["z"]})], False, "redefined")
    table = DeltaTable(uri)
    assert view_rows(table).to_pylist() == [{"k": 9, "v": "z"}]
    assert table.history(1)[0]["deltasieve.rebuild"] == "redefined" and destination.applied() == "s4"
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)


def test_a_directory_of_other_files_is_never_written_to(tmp_path):
    (tmp_path / "precious.txt").write_text("keep")
    destination = DeltaDestination(str(tmp_path))
    with pytest.raises(DestinationRefused):
        destination.rebuild("s1", 1, BAG, [], [], True, "first")
    with pytest.raises(DestinationRefused):
        destination.applied()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]


def test_a_decimal_column_widened_to_text_is_rewritten_in_place(tmp_path):
    # PostgreSQL's unconstrained numeric, once decimal(38,10), now read as the text PostgreSQL prints
    uri = str(tmp_path / "t")
    destination = DeltaDestination(uri)
    old = [Column("k", LogicalType("int")), Column("n", LogicalType("decimal", 38, 10))]
    schema = pa.schema([pa.field(OP, pa.string()), *(pa.field(c.name, c.type.arrow()) for c in old)])
    rows = [{OP: "insert", "k": 1, "n": Decimal("1.5")}, {OP: "insert", "k": 2, "n": Decimal("2")}]
    destination.apply("s1", 1, old, ["k"], [pa.RecordBatch.from_pylist(rows, schema=schema)], False)
    new = [old[0], Column("n", LogicalType("text"))]
    text = pa.schema([pa.field(OP, pa.string()), *(pa.field(c.name, c.type.arrow()) for c in new)])
    line = [{OP: "update", "k": 1, "n": "NaN"}]
    destination.apply("s2", 2, new, ["k"], [pa.RecordBatch.from_pylist(line, schema=text)], False)
    table = DeltaTable(uri)
    assert table.schema().to_arrow().field("n").type in (pa.string(), pa.large_string(), pa.string_view())
    assert sorted(view_rows(table).to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "n": "NaN"},
        {"k": 2, "n": "2.0000000000"},  # its exact text at the old scale, until the sync that updates it
    ]
    assert _carried(uri) == ["s1", "s2"]
