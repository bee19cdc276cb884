"""The destination modes (warehouse/destinations/modes.py) on each kind, against an oracle in
Python: random rounds of keyed and multiset deltas applied one commit each to a Delta table
(on local disk and in a bucket of the suite's S3-protocol server), to an Iceberg table and to
a PostgreSQL table (a server the suite starts), in merge, soft_delete and history
mode, with a column added, a decimal widened and a rebuild among them; after every round the
table read back says:

- merge: the view's rows, each with the id and time of the sync that last wrote it;
- soft_delete: its live rows are the view, its deleted rows the keys deleted (with their
  last values and the deleting sync's time; a multiset: every occurrence deleted);
- history: its current rows are the view, and as of each sync's time (valid_from <= T and
  (valid_to IS NULL or valid_to > T)) the view as that sync left it.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from psycopg.rows import dict_row
from pyiceberg.catalog import load_catalog

from deltasieve_protocol.types import Column, LogicalType
from warehouse.destinations.base import CannotFollow
from warehouse.destinations.delta import SYNC_ID, DeltaDestination, DestinationRefused
from warehouse.destinations.iceberg import SYNC_ID as ICEBERG_SYNC_ID
from warehouse.destinations.iceberg import IcebergDestination
from warehouse.destinations.iceberg_catalog import CATALOG_NAME, open_catalog, properties
from warehouse.destinations.modes import Publishing
from warehouse.destinations.postgres import PostgresDestination
from warehouse.errors import DestinationError
from warehouse.multisets.multiset import COUNT
from warehouse.names import OP
from warehouse.view_options import MetadataColumns

MODES = ["merge", "soft_delete", "history"]
KINDS = ["delta", "postgres", "iceberg"]
#: The rounds run on a Delta table in a bucket of the suite's S3 server too (moto's), and on an
#: Iceberg table of the suite's REST catalog (tests/support/iceberg_rest.py).
ROUND_KINDS = [*KINDS, "delta_s3", "iceberg_rest"]
START = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
META = MetadataColumns()
ROUNDS = 14
#: Rounds at which the view's columns change, and the one at which the table is rebuilt.
ADD_AT, WIDEN_AT, REBUILD_AT = 4, 8, 11


def _keyed_columns(n: int) -> list[Column]:
    d = LogicalType("decimal", 9 if n >= WIDEN_AT else 6, 2)
    columns = [Column("k", LogicalType("int")), Column("v", LogicalType("text")), Column("d", d)]
    return columns + ([Column("w", LogicalType("text"))] if n >= ADD_AT else [])


BAG = [Column("a", LogicalType("int")), Column("b", LogicalType("text"))]


def _at(n: int) -> dt.datetime:
    return START + dt.timedelta(minutes=n)


class Table:
    """A destination of one kind and mode, and its rows read back as dicts."""

    def __init__(self, kind: str, mode: str, tmp_path, postgres, name: str, server=None):
        publishing = Publishing(mode)
        self.kind = kind
        self.storage_options = None
        if kind == "delta_s3":
            self.uri, self.storage_options = f"s3://{server.bucket()}/{name}", server.storage_options()
            self.destination = DeltaDestination(self.uri, self.storage_options, publishing=publishing)
        elif kind == "delta":
            self.uri = str(tmp_path / name)
            self.destination = DeltaDestination(self.uri, publishing=publishing)
        elif kind in ("iceberg", "iceberg_rest"):  # read back by pyiceberg's scan
            # the embedded catalog under tmp_path, or the REST catalog (a table name of its own)
            self.props = properties(None, tmp_path) if kind == "iceberg" else {"type": "rest", "uri": server.uri}
            self.name = f"modes.{name}" if kind == "iceberg" else f"modes.{name}_{abs(hash(str(tmp_path))):x}"
            self.destination = IcebergDestination(self.props, self.name, tmp_path, publishing=publishing)
        else:
            self.url, self.name = postgres.owner_url, f"modes.{name}"
            self.destination = PostgresDestination(self.url, self.name, name, publishing)

    def rows(self) -> list[dict]:
        if self.kind in ("delta", "delta_s3"):
            return DeltaTable(self.uri, storage_options=self.storage_options).to_pyarrow_table().to_pylist()
        if self.kind in ("iceberg", "iceberg_rest"):
            table = load_catalog(CATALOG_NAME, **self.props).load_table(tuple(self.name.split(".")))
            return table.scan().to_arrow().to_pylist()
        with psycopg.connect(self.url, row_factory=dict_row) as conn:
            return conn.execute(f"SELECT * FROM {self.name}").fetchall()


def _view(row: dict, names: list[str]) -> tuple:
    return tuple(row.get(n) for n in names)


def _keyed_round(rng: random.Random, truth: dict, n: int) -> list[dict]:
    """Random lines of one sync (no key twice), `truth` moved on with them."""
    names = [c.name for c in _keyed_columns(n)]
    lines = []
    for k in rng.sample(sorted(truth, key=repr), min(len(truth), rng.randrange(0, 8))):
        if rng.random() < 0.4:
            lines.append({OP: "delete", **{c: None for c in names}, "k": k})
            del truth[k]
        else:
            truth[k] = {**truth[k], "v": f"u{rng.randrange(100)}", "d": Decimal(rng.randrange(-9999, 9999)) / 100}
            if "w" in names:
                truth[k]["w"] = rng.choice([None, "w"])
            lines.append({OP: "update", **truth[k]})
    if n == 0:  # a NULL key, as a LEFT JOIN's view has: NULL matches NULL
        truth[None] = {"k": None, "v": "null key", "d": None}
        lines.append({OP: "insert", **truth[None]})
    for _ in range(rng.randrange(0, 8)):
        k = rng.randrange(40)
        if k in truth or any(line["k"] == k for line in lines):
            continue
        truth[k] = {"k": k, "v": rng.choice(["x", None]), "d": None, **({"w": "new"} if "w" in names else {})}
        lines.append({OP: "insert", **truth[k]})
    return lines


def _bag_round(rng: random.Random, truth: Counter) -> list[dict]:
    lines = []
    for content in rng.sample(sorted(truth, key=repr), min(len(truth), rng.randrange(0, 4))):
        gone = rng.randrange(1, truth[content] + 1)
        truth[content] -= gone
        lines.append({OP: "delete", "a": content[0], "b": content[1], COUNT: gone})
    for _ in range(rng.randrange(0, 4)):
        content = (rng.choice([None, 1, 2, 3]), rng.choice([None, "p", "q"]))
        count = rng.randrange(1, 3)
        truth[content] += count
        lines.append({OP: "insert", "a": content[0], "b": content[1], COUNT: count})
    for content in [c for c, m in truth.items() if m <= 0]:
        del truth[content]
    return lines


def _batch(lines: list[dict], columns: list[Column], multiset: bool) -> list[pa.RecordBatch]:
    fields = [pa.field(OP, pa.string()), *(pa.field(c.name, c.type.arrow()) for c in columns)]
    if multiset:
        fields.append(pa.field(COUNT, pa.int64()))
    return [pa.RecordBatch.from_pylist(lines, schema=pa.schema(fields))] if lines else []


def _applied(table: Table, n: int, columns: list[Column], key: list[str], delta: list[pa.RecordBatch]) -> bool:
    """Apply sync n's delta as the applier does: False where the table cannot follow (only
    a PostgreSQL destination's first sync, whose table a rebuild creates)."""
    try:
        table.destination.apply(f"s{n}", n, columns, key, delta, not key, _at(n))
    except CannotFollow:
        assert (n, table.kind) == (0, "postgres"), "only a missing table is rebuilt"
        return False
    return True


def _live(rows: list[dict], mode: str) -> list[dict]:
    if mode == "soft_delete":
        return [r for r in rows if not r[META.deleted]]
    if mode == "history":
        assert all(r[META.current] == (r[META.valid_to] is None) for r in rows)
        return [r for r in rows if r[META.current]]
    return rows


def _as_of(rows: list[dict], at: dt.datetime) -> list[dict]:
    return [r for r in rows if r[META.valid_from] <= at and (r[META.valid_to] is None or r[META.valid_to] > at)]


def _server(kind: str, request):
    """The suite's S3 server or REST catalog where the kind needs one (started on first use)."""
    needs = {"delta_s3": "s3_server", "iceberg_rest": "iceberg_rest"}.get(kind)
    return request.getfixturevalue(needs) if needs else None


@pytest.mark.parametrize("kind", ROUND_KINDS)
@pytest.mark.parametrize("mode", MODES)
def test_keyed_rounds(kind, mode, tmp_path, postgres, request):
    table = Table(kind, mode, tmp_path, postgres, f"keyed_{mode}", _server(kind, request))
    rng = random.Random(f"{kind} {mode}")
    truth: dict = {}
    written: dict = {}  # key -> (sync, time) of the sync that last wrote its row
    deleted: dict = {}  # soft_delete: key -> (its last row, the deleting sync's time)
    snapshots: list[tuple[dt.datetime, dict]] = []
    for n in range(ROUNDS):
        columns, names, sync = _keyed_columns(n), [c.name for c in _keyed_columns(n)], f"s{n}"
        if n >= ADD_AT:
            for row in truth.values():
                row.setdefault("w", None)
        before = {k: dict(r) for k, r in truth.items()}
        lines = [] if n == REBUILD_AT else _keyed_round(rng, truth, n)
        if n == REBUILD_AT or not _applied(table, n, columns, ["k"], _batch(lines, columns, False)):
            # a rebuild (as the applier does where the table cannot follow, or has none):
            # the table starts again from the view's rows
            rows = [pa.RecordBatch.from_pylist(list(truth.values()), schema=_schema(columns))] if truth else []
            table.destination.rebuild(sync, n, columns, ["k"], rows, False, "test", _at(n))
            written, deleted, snapshots = dict.fromkeys(truth, (sync, _at(n))), {}, []
        else:
            for line in lines:  # what the oracle expects of the metadata
                if line[OP] == "delete":
                    deleted[line["k"]] = (before[line["k"]], _at(n))
                    written.pop(line["k"])
                else:
                    deleted.pop(line["k"], None)
                    written[line["k"]] = (sync, _at(n))
        assert table.destination.applied() == sync
        snapshots.append((_at(n), {k: dict(r) for k, r in truth.items()}))
        rows = table.rows()
        live = _live(rows, mode)
        assert {r["k"]: _view(r, names) for r in live} == {k: _view(r, names) for k, r in truth.items()}, sync
        if mode != "history":
            assert {r["k"]: (r[META.sync_id], r[META.synced_at]) for r in live} == written
        if mode == "soft_delete":
            gone = {r["k"]: (_view(r, names), r[META.deleted_at]) for r in rows if r[META.deleted]}
            assert gone == {k: (_view(row, names), at) for k, (row, at) in deleted.items()}, sync
        if mode == "history":
            for at, then in snapshots:
                held = {r["k"]: _view(r, names) for r in _as_of(rows, at)}
                assert held == {k: _view(r, names) for k, r in then.items()}, f"{sync}: as of {at}"


@pytest.mark.parametrize("kind", ROUND_KINDS)
@pytest.mark.parametrize("mode", MODES)
def test_multiset_rounds(kind, mode, tmp_path, postgres, request):
    table = Table(kind, mode, tmp_path, postgres, f"bag_{mode}", _server(kind, request))
    rng = random.Random(f"bag {kind} {mode}")
    truth: Counter = Counter()
    deleted: Counter = Counter()
    snapshots: list[tuple[dt.datetime, Counter]] = []
    names = [c.name for c in BAG]
    for n in range(ROUNDS):
        sync = f"s{n}"
        lines = [] if n == REBUILD_AT else _bag_round(rng, truth)
        if n == REBUILD_AT or not _applied(table, n, BAG, [], _batch(lines, BAG, True)):
            rows = [{"a": a, "b": b} for (a, b), m in truth.items() for _ in range(m)]
            batches = [pa.RecordBatch.from_pylist(rows, schema=_schema(BAG))] if rows else []
            table.destination.rebuild(sync, n, BAG, [], batches, True, "test", _at(n))
            deleted, snapshots = Counter(), []
        else:
            deleted.update({(x["a"], x["b"]): x[COUNT] for x in lines if x[OP] == "delete"})
        snapshots.append((_at(n), Counter(truth)))
        rows = table.rows()
        assert Counter(_view(r, names) for r in _live(rows, mode)) == truth, sync
        if mode == "soft_delete":
            assert Counter(_view(r, names) for r in rows if r[META.deleted]) == deleted, sync
        if mode == "history":
            for at, then in snapshots:
                assert Counter(_view(r, names) for r in _as_of(rows, at)) == then, f"{sync}: as of {at}"


def _schema(columns: list[Column]) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.type.arrow()) for c in columns])


KEYED = _keyed_columns(0)


@pytest.mark.parametrize("kind", KINDS)
def test_a_table_written_before_the_modes_takes_the_metadata_in_place(kind, tmp_path, postgres):
    """Its rows keep NULL metadata until a sync writes them; another mode's table cannot follow."""
    table = Table(kind, "merge", tmp_path, postgres, "before_modes")
    rows = pa.table({"k": [1, 2], "v": ["a", "b"], "d": pa.array([None, None], pa.decimal128(6, 2))})
    if kind == "delta":
        write_deltalake(table.uri, rows, commit_properties=CommitProperties(custom_metadata={SYNC_ID: "s0"}))
    elif kind == "iceberg":
        catalog = open_catalog(table.props, tmp_path)
        catalog.create_namespace_if_not_exists("modes")
        catalog.create_table(("modes", "before_modes"), rows.schema).append(rows, {ICEBERG_SYNC_ID: "s0"})
    else:
        with psycopg.connect(table.url, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA IF NOT EXISTS modes")
            conn.execute("CREATE TABLE modes.before_modes (k bigint PRIMARY KEY, v text, d numeric(6,2))")
            conn.execute("INSERT INTO modes.before_modes VALUES (1, 'a', NULL), (2, 'b', NULL)")
    lines = [{OP: "update", "k": 2, "v": "B", "d": None}]
    table.destination.apply("s1", 1, KEYED, ["k"], _batch(lines, KEYED, False), False, _at(1))
    rows = {r["k"]: r for r in table.rows()}
    assert (rows[1][META.sync_id], rows[1][META.synced_at]) == (None, None)
    assert (rows[2]["v"], rows[2][META.sync_id], rows[2][META.synced_at]) == ("B", "s1", _at(1))
    history = Table(kind, "history", tmp_path, postgres, "before_modes")
    with pytest.raises(CannotFollow, match="history mode's column"):
        history.destination.apply("s2", 2, KEYED, ["k"], _batch(lines, KEYED, False), False, _at(2))
    history.destination.rebuild(
        "s1", 1, KEYED, ["k"], [pa.RecordBatch.from_pylist(lines[:1], schema=_schema(KEYED))], False, "mode", _at(1)
    )
    assert [(r["k"], r[META.current], r[META.valid_from]) for r in history.rows()] == [(2, True, _at(1))]


@pytest.mark.parametrize("kind", KINDS)
def test_renamed_metadata_columns_and_a_clash_with_the_view(kind, tmp_path, postgres):
    names = MetadataColumns(valid_from="_fivetran_start", valid_to="_fivetran_end", current="_fivetran_active")
    table = Table(kind, "history", tmp_path, postgres, "renamed")
    table.destination.publishing = Publishing("history", names)
    rows = [pa.RecordBatch.from_pylist([{"k": 1, "v": "a", "d": None}], schema=_schema(KEYED))]
    table.destination.rebuild("s1", 1, KEYED, ["k"], rows, False, "load", _at(1))
    (row,) = table.rows()
    assert (row["_fivetran_start"], row["_fivetran_end"], row["_fivetran_active"]) == (_at(1), None, True)
    clashing = [Column("k", LogicalType("int")), Column("_fivetran_active", LogicalType("bool"))]
    with pytest.raises((DestinationRefused, DestinationError), match="_fivetran_active, a column of the view"):
        table.destination.rebuild("s2", 2, clashing, ["k"], [], False, "load", _at(2))


PAGE = Path(__file__).parents[4] / "docs" / "results" / "destinations.md"
STUDENTS = [Column("id", LogicalType("int")), Column("name", LogicalType("text"))]
EXAMPLE = [
    [{OP: "insert", "id": 1, "name": "Ada"}, {OP: "insert", "id": 2, "name": "Bo"}],
    [{OP: "update", "id": 1, "name": "Ada L."}],
    [{OP: "delete", "id": 2, "name": None}],
]


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S+00")
    return str(value)


def _first_table(text: str) -> list[list[str]]:
    """The cells of the first Markdown table in `text` (its header, then its rows)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    block = lines[start:end]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block]
    return [cells[0], *cells[2:]]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", MODES)
def test_the_worked_examples_of_the_page(kind, mode, tmp_path, postgres):
    """Each mode's table on docs/results/destinations.md, after each of its three syncs, is the table written."""
    section = PAGE.read_text().split(f"### {mode}\n", 1)[1].split("\n### ", 1)[0]
    table = Table(kind, mode, tmp_path, postgres, f"students_{mode}")
    for n, lines in enumerate(EXAMPLE):
        sync, at = f"s{n + 1}", dt.datetime(2026, 3, 2, 10 + n, 0, 5, tzinfo=dt.UTC)
        try:
            table.destination.apply(sync, n + 1, STUDENTS, ["id"], _batch(lines, STUDENTS, False), False, at)
        except CannotFollow:  # a PostgreSQL table's load: the applier creates it by a rebuild
            rows = [pa.RecordBatch.from_pylist(lines, schema=_schema(STUDENTS))]
            table.destination.rebuild(sync, n + 1, STUDENTS, ["id"], rows, False, "load", at)
        shown = _first_table(section.split(f"After `{sync}`:\n", 1)[1])
        written = sorted(table.rows(), key=lambda r: (r["id"], _cell(r.get(META.valid_from))))
        assert [shown[0], *([_cell(r[c]) for c in shown[0]] for r in written)] == shown, sync
