"""The command's conversion of NDJSON rows and delta lines to CSV and Parquet, and its
promise to be a pure client of the API."""

from __future__ import annotations

import ast
import base64
import csv
import datetime as dt
import io
import math
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq

from deltasieve_cli import formats

ROOT = Path(__file__).resolve().parents[3]

#: A view of every logical type, as GET /v1/views/{name} describes it.
VIEW = {
    "columns": ["id", "amount", "ratio", "name", "blob", "ok", "day", "at", "at_utc", "odd"],
    "column_types": {
        "id": "int",
        "amount": "decimal(10,2)",
        "ratio": "float",
        "name": "text",
        "blob": "bytes",
        "ok": "bool",
        "day": "date",
        "at": "timestamp",
        "at_utc": "timestamptz",
        "odd": "some_future_type",
    },
}
ROW = {
    "id": 7,
    "amount": "12.50",
    "ratio": "NaN",
    "name": 'a, "quoted" name',
    "blob": base64.b64encode(b"\x00\x01").decode(),
    "ok": True,
    "day": "2025-03-01",
    "at": "2025-03-01T10:11:12.500000",
    "at_utc": "2025-03-01T10:11:12+00:00",
    "odd": {"x": 1},
}


def parquet(lines, columns, **kw) -> list[dict]:
    sink = io.BytesIO()
    formats.write(lines, columns, "parquet", sink, **kw)
    return pq.read_table(io.BytesIO(sink.getvalue())).to_pylist()


def test_rows_to_parquet_keep_each_type():
    [back] = parquet([ROW, {"id": 8}], formats.row_columns(VIEW))[:1]
    assert back["amount"] == Decimal("12.50") and math.isnan(back["ratio"])
    assert back["blob"] == b"\x00\x01" and back["ok"] is True and back["day"] == dt.date(2025, 3, 1)
    assert back["at"] == dt.datetime(2025, 3, 1, 10, 11, 12, 500000)
    assert back["at_utc"] == dt.datetime(2025, 3, 1, 10, 11, 12, tzinfo=dt.UTC)
    assert back["odd"] == '{"x": 1}'  # a type the client does not know stays text
    assert back["name"] == ROW["name"] and back["id"] == 7


def test_rows_to_csv_as_text_bytes_in_base64():
    sink = io.BytesIO()
    assert formats.write([ROW, {"id": 8}], formats.row_columns(VIEW), "csv", sink) == 2
    first, second = csv.DictReader(io.StringIO(sink.getvalue().decode()))
    assert first["amount"] == "12.50" and first["blob"] == ROW["blob"] and first["name"] == ROW["name"]
    assert first["day"] == "2025-03-01" and second["id"] == "8" and second["amount"] == ""


def test_a_keyed_delta_has_no_count_nor_old_columns():
    view = {"columns": ["k", "v"], "column_types": {"k": "int", "v": "text"}}
    lines = [{"op": "insert", "row": {"k": 1, "v": "a"}}, {"op": "delete", "row": {"k": 2}}]
    columns = formats.delta_columns(view)
    optional = [formats.COUNT, formats.CHANGED, "old.k", "old.v"]
    back = parquet(map(formats.flat_delta, lines), columns, optional=optional, defaults={formats.COUNT: 1})
    assert back == [{"op": "insert", "k": 1, "v": "a"}, {"op": "delete", "k": 2, "v": None}]


def test_a_keyless_delta_keeps_counts_and_old_rows():
    view = {"columns": ["a", "b"], "column_types": {"a": "float", "b": "text"}}
    lines = [
        {"op": "insert", "count": 3, "row": {"a": 1.5, "b": "x"}},
        {"op": "delete", "row": {"a": 2.0, "b": "y"}},
        {"op": "update", "row": {"a": 2.5, "b": "z"}, "old": {"a": 2.4, "b": "z"}},
    ]
    columns = formats.delta_columns(view)
    optional = [formats.COUNT, formats.CHANGED, "old.a", "old.b"]
    back = parquet(map(formats.flat_delta, lines), columns, optional=optional, defaults={formats.COUNT: 1})
    assert [r["count"] for r in back] == [3, 1, 1]
    assert [r["old.a"] for r in back] == [None, None, 2.4] and back[2]["a"] == 2.5


def test_a_feed_with_before_has_sync_and_typed_before_columns():
    """`changes --with-before`: the line's sync first, the replaced row as before.COLUMN, typed."""
    view = {"columns": ["k", "price"], "column_types": {"k": "int", "price": "decimal(8,2)"}}
    lines = [
        {"sync": "s1", "op": "insert", "row": {"k": 1, "price": "1.00"}},
        {
            "sync": "s2",
            "op": "update",
            "row": {"k": 1, "price": "2.50"},
            "changed": ["price"],
            "before": {"k": 1, "price": "1.00"},
        },
    ]
    columns = formats.delta_columns(view, feed=True, with_before=True)
    optional = [formats.COUNT, formats.CHANGED, "old.k", "old.price"]
    back = parquet(map(formats.flat_delta, lines), columns, optional=optional, defaults={formats.COUNT: 1})
    assert list(back[0]) == ["sync", "op", "changed", "k", "price", "before.k", "before.price"]
    assert [r["changed"] for r in back] == [None, ["price"]]
    assert [r["sync"] for r in back] == ["s1", "s2"] and back[0]["before.price"] is None
    assert back[1]["before.price"] == Decimal("1.00") and back[1]["price"] == Decimal("2.50")


def test_changed_columns_in_csv_are_the_names_joined():
    view = {"columns": ["k", "a", "b"], "column_types": {"k": "int", "a": "text", "b": "int"}}
    lines = [
        {"op": "update", "row": {"k": 1, "a": "x", "b": None}, "changed": ["a", "b"]},
        {"op": "insert", "row": {"k": 2, "a": "y", "b": 3}},
    ]
    sink = io.BytesIO()
    formats.write(map(formats.flat_delta, lines), formats.delta_columns(view), "csv", sink, optional=[formats.COUNT])
    first, second = csv.DictReader(io.StringIO(sink.getvalue().decode()))
    assert first["changed"] == "a|b" and second["changed"] == ""


def test_many_rows_cross_batches():
    view = {"columns": ["k"], "column_types": {"k": "int"}}
    rows = [{"k": i} for i in range(formats.BATCH_ROWS * 2 + 5)]
    assert [r["k"] for r in parquet(rows, formats.row_columns(view))] == list(range(len(rows)))
    assert parquet([], formats.row_columns(view)) == []


def test_the_command_imports_nothing_of_the_service_agent_or_warehouse():
    """A pure client of the REST API: it must run where only the API can be reached."""
    for path in sorted((ROOT / "deltasieve_cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                assert name.split(".")[0] not in ("service", "warehouse", "remote_agent", "workloads"), (path, name)
