"""The Iceberg destination against an oracle in Python, in its embedded SQLite catalog:
random keyed and multiset deltas applied one snapshot each, read back with pyiceberg's own
scan and, independently, as the Parquet files the snapshot lists; every logical type's
values exact; schema changes; rebuilds; a sync applied twice."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog

from deltasieve_protocol.types import Column, LogicalType, arrow_schema
from tests.support.multisets import random_bag_delta
from warehouse.destinations import available, open_destination, public
from warehouse.destinations.base import CannotFollow
from warehouse.destinations.iceberg import REBUILD, SYNC_ID, IcebergDestination
from warehouse.destinations.iceberg_catalog import CATALOG_NAME, properties
from warehouse.destinations.modes import MERGE
from warehouse.multisets.multiset import COUNT
from warehouse.names import OP
from warehouse.view_options import DestinationSpec

T = LogicalType.parse
KEYED = [
    Column("k", T("int")),
    Column("v", T("text")),
    Column("d", T("decimal(20,4)")),
    Column("at", T("timestamp")),
    Column("tz", T("timestamptz")),
    Column("day", T("date")),
    Column("raw", T("bytes")),
    Column("ok", T("bool")),
    Column("x", T("float")),
]
BAG = [Column("a", T("int")), Column("b", T("text"))]
#: The merge mode's metadata columns (modes.py), left out where rows are compared with the view.
METADATA = {c.name for c in MERGE.columns()}


def _destination(data_dir: Path, table: str = "wh.t") -> IcebergDestination:
    spec = DestinationSpec(kind="iceberg", table=table)
    destination = open_destination(spec, data_dir, "v")
    assert isinstance(destination, IcebergDestination)
    return destination


def _table(data_dir: Path, table: str = "wh.t"):
    return load_catalog(CATALOG_NAME, **properties(None, data_dir)).load_table(tuple(table.split(".")))


def _rows(data_dir: Path, table: str = "wh.t") -> list[dict]:
    """The table's rows as pyiceberg's scan reads them, checked against the Parquet files
    its current snapshot lists read without pyiceberg (it holds no delete files)."""
    t = _table(data_dir, table)
    scanned = t.scan().to_arrow().to_pylist()
    files = [task.file.file_path.removeprefix("file://") for task in t.scan().plan_files()]
    assert not any(task.delete_files for task in t.scan().plan_files())
    raw = [r for f in files for r in pq.read_table(f).to_pylist()]
    key = repr
    assert sorted(map(key, scanned)) == sorted(map(key, raw))
    return [{k: v for k, v in r.items() if k not in METADATA} for r in scanned]


def _carried(data_dir: Path, table: str = "wh.t") -> list[str]:
    t = _table(data_dir, table)
    out, snapshot = [], t.current_snapshot()
    while snapshot is not None:
        out.append(snapshot.summary.additional_properties[SYNC_ID])
        snapshot = t.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return out[::-1]


def _value(rng: random.Random, k: int) -> dict:
    return {
        "k": k,
        "v": rng.choice([None, "", "é", f"v{rng.random():.6f}"]),
        "d": rng.choice([None, Decimal(rng.randrange(-(10**19), 10**19)) / 10**4]),
        "at": datetime(2024, 2, 29, 23, 59, 59, 999999) - timedelta(microseconds=rng.randrange(10**12)),
        "tz": rng.choice([None, datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC) + timedelta(days=rng.randrange(9))]),
        "day": rng.choice([None, date(1, 1, 1), date(9999, 12, 31), date(2024, 2, 29)]),
        "raw": rng.choice([None, b"", b"\x00\xff", bytes(rng.randrange(256) for _ in range(5))]),
        "ok": rng.choice([None, True, False]),
        "x": rng.choice([None, -0.0, 1e308, 5e-324, rng.random()]),
    }


def _keyed_delta(rng: random.Random, truth: dict) -> list[dict]:
    lines = []
    for k in rng.sample(list(truth), min(len(truth), rng.randrange(0, 8))):
        if rng.random() < 0.4:
            lines.append({OP: "delete", "k": k})
            del truth[k]
        else:
            truth[k] = _value(rng, k)
            lines.append({OP: "update", **truth[k]})
    for _ in range(rng.randrange(0, 12)):
        k = rng.choice([None, *range(-500, 500)])
        if k in truth or any(line["k"] == k for line in lines):
            continue
        truth[k] = _value(rng, k)
        lines.append({OP: "insert", **truth[k]})
    return lines


def test_keyed_rounds_one_snapshot_each(tmp_path):
    destination = _destination(tmp_path)
    assert destination.applied() is None
    rng = random.Random(11)
    truth: dict = {}
    schema = pa.schema([pa.field(OP, pa.string()), *arrow_schema(KEYED)])
    syncs = []
    for n in range(8):
        if n == 0:  # the load
            lines = [{OP: "insert", **_value(rng, k)} for k in range(150)]
            truth.update({line["k"]: {k: v for k, v in line.items() if k != OP} for line in lines})
        else:
            lines = _keyed_delta(rng, truth)
        batch = pa.RecordBatch.from_pylist(lines, schema=schema)
        destination.apply(f"s{n}", n + 1, KEYED, ["k"], [batch], False)
        syncs.append(f"s{n}")
        assert destination.applied() == f"s{n}"
        assert {r["k"]: r for r in _rows(tmp_path)} == truth, f"sync {n}"
    assert _carried(tmp_path) == syncs  # one snapshot each, carrying its sync id
    # the same sync again (applied, then the service stopped before noting it): nothing
    destination.apply(syncs[-1], 8, KEYED, ["k"], [batch], False)
    assert _carried(tmp_path) == syncs


def test_old_snapshots_are_expired_and_their_files_deleted(tmp_path):
    """Keeping 2 syncs: fewer than 4 snapshots after each sync; time travel to each sync still held reads
    the view as of it (pyiceberg's scan of the snapshot `version_of` names), an expired sync
    has no version; every data file on disk is read by a snapshot kept, none is missing."""
    spec = DestinationSpec(kind="iceberg", table="wh.t")
    destination = open_destination(spec, tmp_path, "v", keep_versions=2)
    columns = KEYED[:2]
    schema = pa.schema([pa.field(OP, pa.string()), *arrow_schema(columns)])
    rng, truth, as_of = random.Random(5), {}, {}
    for n in range(9):
        if n == 0:
            lines = [{OP: "insert", "k": k, "v": f"v{k}"} for k in range(40)]
        else:
            lines = [{OP: "update", "k": k, "v": f"v{k}.{n}"} for k in rng.sample(sorted(truth), 5)]
            lines += [{OP: "insert", "k": 100 + n, "v": "new"}]
        truth.update({line["k"]: line["v"] for line in lines})
        as_of[f"s{n}"] = dict(truth)
        destination.apply(f"s{n}", n + 1, columns, ["k"], [pa.RecordBatch.from_pylist(lines, schema=schema)], False)
        table = _table(tmp_path)
        assert len(table.snapshots()) < 4, f"sync {n}: {len(table.snapshots())} snapshots"
    held = _carried(tmp_path)
    assert held[-1] == "s8" and 2 <= len(held) < 4, held
    for sync, rows in as_of.items():
        version = destination.version_of(sync)
        if sync not in held:
            assert version is None, sync
            continue
        read = table.scan(snapshot_id=version).to_arrow()
        assert dict(zip(read.column("k").to_pylist(), read.column("v").to_pylist())) == rows, sync
    read_by_kept = {
        e.data_file.file_path.removeprefix("file://")
        for s in table.snapshots()
        for m in s.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
    }
    on_disk = {str(p) for p in Path(table.location().removeprefix("file://")).rglob("*.parquet")}
    assert on_disk == read_by_kept


def test_a_delta_that_disagrees_with_the_table_is_rebuilt(tmp_path):
    destination = _destination(tmp_path)
    columns = KEYED[:2]
    schema = pa.schema([pa.field(OP, pa.string()), *arrow_schema(columns)])
    load = pa.RecordBatch.from_pylist([{OP: "insert", "k": 1, "v": "a"}], schema=schema)
    destination.apply("s1", 1, columns, ["k"], [load], False)
    with pytest.raises(CannotFollow):  # a delete of a key the table lacks
        destination.apply(
            "s2", 2, columns, ["k"], [pa.RecordBatch.from_pylist([{OP: "delete", "k": 2}], schema)], False
        )
    with pytest.raises(CannotFollow):  # a table that is not there, and a delta that is no load
        _destination(tmp_path, "wh.other").apply(
            "s2", 2, columns, ["k"], [pa.RecordBatch.from_pylist([{OP: "delete", "k": 1}], schema)], False
        )
    assert destination.applied() == "s1" and _rows(tmp_path) == [{"k": 1, "v": "a"}]


def test_multiset_rounds(tmp_path):
    destination = _destination(tmp_path, "wh.bag")
    schema = pa.schema([pa.field(OP, pa.string()), *arrow_schema(BAG), pa.field(COUNT, pa.int64())])
    rng = random.Random(3)
    truth: Counter = Counter()
    for n in range(8):
        lines = random_bag_delta(rng, truth)
        destination.apply(f"s{n}", n + 1, BAG, [], [pa.RecordBatch.from_pylist(lines, schema=schema)], True)
        held = Counter((r["a"], r["b"]) for r in _rows(tmp_path, "wh.bag"))
        assert held == +truth, f"sync {n}"
    assert _carried(tmp_path, "wh.bag") == [f"s{n}" for n in range(8)]
    too_many = [{OP: "delete", "a": 9, "b": "never", COUNT: 1}]
    with pytest.raises(CannotFollow):
        destination.apply("s8", 9, BAG, [], [pa.RecordBatch.from_pylist(too_many, schema=schema)], True)


def test_schema_changes_and_rebuilds(tmp_path):
    destination = _destination(tmp_path)
    first = [Column("k", T("int")), Column("d", T("decimal(6,2)"))]
    schema = pa.schema([pa.field(OP, pa.string()), *arrow_schema(first)])
    lines = [{OP: "insert", "k": 1, "d": Decimal("1.50")}, {OP: "insert", "k": 2, "d": None}]
    destination.apply("s1", 1, first, ["k"], [pa.RecordBatch.from_pylist(lines, schema=schema)], False)
    # a column added before the others, a decimal's precision grown: in place
    wider = [Column("note", T("text")), Column("k", T("int")), Column("d", T("decimal(12,2)"))]
    wide = pa.schema([pa.field(OP, pa.string()), *arrow_schema(wider)])
    big = [{OP: "update", "note": "n", "k": 2, "d": Decimal("1234567890.12")}]
    destination.apply("s2", 2, wider, ["k"], [pa.RecordBatch.from_pylist(big, schema=wide)], False)
    table = _table(tmp_path)
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
        ("note", "string"),
        ("k", "long"),
        ("d", "decimal(12, 2)"),
        ("_deltasieve_synced_at", "timestamptz"),
        ("_deltasieve_sync_id", "string"),
    ]
    assert sorted(_rows(tmp_path), key=lambda r: r["k"]) == [
        {"note": None, "k": 1, "d": Decimal("1.50")},
        {"note": "n", "k": 2, "d": Decimal("1234567890.12")},
    ]
    assert _carried(tmp_path) == ["s1", "s2"]
    # a scale Iceberg cannot promote, a column dropped: the table is rebuilt, in one snapshot
    scaled = [Column("k", T("int")), Column("d", T("decimal(14,4)"))]
    with pytest.raises(CannotFollow):
        destination.apply("s3", 3, scaled, ["k"], [], False)
    assert destination.applied() == "s2"  # nothing written
    rows = pa.record_batch({"k": [9], "d": pa.array([Decimal("0.0001")], pa.decimal128(14, 4))})
    destination.rebuild("s3", 3, scaled, ["k"], [rows], False, "redefined")
    table = _table(tmp_path)
    assert [(f.name, str(f.field_type)) for f in table.schema().fields][:2] == [("k", "long"), ("d", "decimal(14, 4)")]
    assert _rows(tmp_path) == [{"k": 9, "d": Decimal("0.0001")}]
    assert table.current_snapshot().summary.additional_properties[REBUILD] == "redefined"
    assert destination.applied() == "s3" and _carried(tmp_path) == ["s1", "s2", "s3"]
    # time travel to a sync's snapshot reads the table as that sync left it
    s2 = next(s for s in table.snapshots() if s.summary.additional_properties[SYNC_ID] == "s2")
    assert len(table.scan(snapshot_id=s2.snapshot_id).to_arrow()) == 2


def test_shown_and_available(tmp_path):
    spec = DestinationSpec(kind="iceberg", table="wh.t")
    assert available("iceberg")
    assert public(spec, tmp_path, "v") == _destination(tmp_path).describe()


@pytest.mark.parametrize(
    ("kind", "make"),
    [
        ("decimal(12,3)", lambda i: Decimal(i) / 1000),
        ("text", lambda i: f"key {i:04d}"),
        ("date", lambda i: date(2000, 1, 1) + timedelta(days=i)),
        ("timestamp", lambda i: datetime(2000, 1, 1) + timedelta(seconds=i)),
        ("timestamptz", lambda i: datetime(2000, 1, 1, tzinfo=UTC) + timedelta(microseconds=i)),
    ],
)
def test_keys_of_every_ranged_type_are_matched_exactly(tmp_path, kind, make):
    destination = _destination(tmp_path)
    columns = [Column("k", T(kind)), Column("v", T("int"))]
    schema = pa.schema([pa.field(OP, pa.string()), *arrow_schema(columns)])
    load = [{OP: "insert", "k": make(i), "v": i} for i in range(40)] + [{OP: "insert", "k": None, "v": -1}]
    destination.apply("s1", 1, columns, ["k"], [pa.RecordBatch.from_pylist(load, schema=schema)], False)
    lines = [
        {OP: "update", "k": make(3), "v": 300},
        {OP: "delete", "k": make(39)},
        {OP: "update", "k": None, "v": -2},
        {OP: "insert", "k": make(40), "v": 40},
    ]
    destination.apply("s2", 2, columns, ["k"], [pa.RecordBatch.from_pylist(lines, schema=schema)], False)
    expected = {make(i): i for i in range(41) if i != 39} | {make(3): 300, None: -2}
    assert {r["k"]: r["v"] for r in _rows(tmp_path)} == expected


_CRASHING = """
import os, signal, sys
import pyarrow as pa
from pyiceberg.table import Transaction
from deltasieve_protocol.types import Column, LogicalType
from warehouse.destinations.iceberg import IcebergDestination
from warehouse.destinations.iceberg_catalog import properties
from warehouse.names import OP

Transaction.commit_transaction = lambda self: os.kill(os.getpid(), signal.SIGKILL)
columns = [Column("k", LogicalType("int")), Column("v", LogicalType("text"))]
schema = pa.schema([(OP, pa.string()), ("k", pa.int64()), ("v", pa.string())])
lines = pa.RecordBatch.from_pylist([{OP: "update", "k": 1, "v": "new"}, {OP: "insert", "k": 3, "v": "c"}], schema)
IcebergDestination(properties(None, sys.argv[1]), "wh.t", sys.argv[1]).apply("s2", 2, columns, ["k"], [lines], False)
"""


def test_a_process_killed_before_its_commit_leaves_the_table_as_it_was(tmp_path):
    """Killed with its data files written and its commit not made: the table holds the sync
    before, and the service applying the sync again applies it once (and once only: the
    keyed rounds apply a sync twice)."""
    import subprocess
    import sys

    columns = [Column("k", T("int")), Column("v", T("text"))]
    schema = pa.schema([pa.field(OP, pa.string()), *arrow_schema(columns)])
    destination = _destination(tmp_path)
    load = [{OP: "insert", "k": 1, "v": "a"}, {OP: "insert", "k": 2, "v": "b"}]
    destination.apply("s1", 1, columns, ["k"], [pa.RecordBatch.from_pylist(load, schema=schema)], False)
    ended = subprocess.run([sys.executable, "-c", _CRASHING, str(tmp_path)], env={"PYTHONPATH": "."})
    assert ended.returncode == -9
    assert destination.applied() == "s1"
    assert sorted(_rows(tmp_path), key=lambda r: r["k"]) == [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]
    lines = [{OP: "update", "k": 1, "v": "new"}, {OP: "insert", "k": 3, "v": "c"}]
    destination.apply("s2", 2, columns, ["k"], [pa.RecordBatch.from_pylist(lines, schema=schema)], False)
    assert _carried(tmp_path) == ["s1", "s2"]
    assert sorted(_rows(tmp_path), key=lambda r: r["k"]) == [
        {"k": 1, "v": "new"},
        {"k": 2, "v": "b"},
        {"k": 3, "v": "c"},
    ]


def test_a_postgresql_catalog_by_reference(tmp_path, postgres, monkeypatch):
    import psycopg

    from service.publishing import usable
    from service.secrets import Secrets

    monkeypatch.setenv("ICEBERG_CATALOG_URL", postgres.owner_url)
    spec = DestinationSpec.model_validate(
        {"kind": "iceberg", "table": "bi.orders", "catalog": {"uri": "env:ICEBERG_CATALOG_URL"}}
    )
    destination = open_destination(usable(spec, Secrets(None), "view 'v'"), tmp_path, "v")
    shown = destination.describe()["catalog"]
    assert shown["type"] == "sql" and postgres.owner_url.split(":")[2].split("@")[0] not in str(shown), shown
    assert destination.applied() is None
    schema = pa.schema([pa.field(OP, pa.string()), *arrow_schema(KEYED)])
    rng, truth = random.Random(5), {}
    for n in range(4):
        lines = _keyed_delta(rng, truth)
        destination.apply(f"s{n}", n + 1, KEYED, ["k"], [pa.RecordBatch.from_pylist(lines, schema=schema)], False)
        assert destination.applied() == f"s{n}"
    # read back by a catalog of its own, the table listed in the warehouse's database
    props = properties(usable(spec, Secrets(None), "v").catalog, tmp_path)
    table = load_catalog(CATALOG_NAME, **props).load_table(("bi", "orders"))
    view = [c.name for c in KEYED]
    assert {r["k"]: r for r in table.scan(selected_fields=tuple(view)).to_arrow().to_pylist()} == truth
    with psycopg.connect(postgres.owner_url) as conn:
        listed = conn.execute(
            "SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = %s", [CATALOG_NAME]
        )
        assert listed.fetchall() == [("bi", "orders")]
