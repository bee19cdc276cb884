"""NDJSON rows and delta lines of the API turned into CSV or Parquet, with pyarrow.

The API's JSON values follow the contract (README, "Values in JSON"): exact decimals as
strings, dates and timestamps as ISO 8601, bytes as base64, NaN and infinities as strings.
Parquet gets each column in the Arrow type of its logical type (the view's `column_types`),
so a decimal stays exact and a date is a date; CSV writes the same values as text, bytes
kept in base64. A type this client does not know stays text.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

FORMATS = ("ndjson", "csv", "parquet")
#: Records turned into an Arrow batch at a time (a batch holds them as compact columns).
BATCH_ROWS = 10_000
#: The column of a delta line's operation, and the prefix of a keyless update's old row.
OP, COUNT, OLD_PREFIX = "op", "count", "old."
#: The change feed's column of a line's sync, and the prefix of the row an update replaced (with_before).
SYNC, BEFORE_PREFIX = "sync", "before."
#: The column of the names of the columns an update changed, and its type here: in Parquet a
#: list of strings, in CSV the names joined by "|" (a JSON array where a name holds a "|").
CHANGED, CHANGED_LIST = "changed", "list<text>"

_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _joined(names: list[str]) -> str:
    """The names of a `changed` list as one CSV field.

    >>> _joined(["name", "city"]), _joined([]), _joined(["a|b"])
    ('name|city', '', '["a|b"]')
    """
    return json.dumps(names, ensure_ascii=False) if any("|" in n for n in names) else "|".join(names)


def _timestamp(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def arrow_type(logical: str, *, for_csv: bool) -> tuple[pa.DataType, Callable]:
    """The Arrow type of an API column type, and the function from its JSON value to it.

    >>> arrow_type("decimal(8,2)", for_csv=False)[0]
    Decimal128Type(decimal128(8, 2))
    >>> arrow_type("date", for_csv=False)[1]("2025-01-31")
    datetime.date(2025, 1, 31)
    >>> arrow_type("mystery", for_csv=False)[0]
    DataType(string)
    """
    same = lambda v: v  # noqa: E731
    if logical == CHANGED_LIST:
        return (pa.string(), _joined) if for_csv else (pa.list_(pa.string()), same)
    match = _DECIMAL.match(logical.replace(" ", ""))
    if match:
        return pa.decimal128(max(int(match.group(1)), 1), int(match.group(2))), Decimal
    known = {
        "int": (pa.int64(), int),
        "float": (pa.float64(), lambda v: _FLOATS.get(v, v)),
        "text": (pa.string(), same),
        "bytes": (pa.string(), same) if for_csv else (pa.binary(), base64.b64decode),
        "bool": (pa.bool_(), same),
        "date": (pa.date32(), dt.date.fromisoformat),
        "timestamp": (pa.timestamp("us"), _timestamp),
        "timestamptz": (pa.timestamp("us", tz="UTC"), _timestamp),
    }
    return known.get(logical, (pa.string(), lambda v: v if isinstance(v, str) else json.dumps(v)))


class Table:
    """Flat records with typed columns, converted to Arrow a batch at a time."""

    def __init__(self, columns: list[tuple[str, str]], *, for_csv: bool):
        self.names = [name for name, _ in columns]
        typed = [arrow_type(logical, for_csv=for_csv) for _, logical in columns]
        self.schema = pa.schema([pa.field(name, t) for name, (t, _) in zip(self.names, typed)])
        self.converters = [convert for _, convert in typed]

    def batch(self, records: list[dict]) -> pa.RecordBatch:
        arrays = []
        for name, convert, field in zip(self.names, self.converters, self.schema):
            values = [None if (v := r.get(name)) is None else convert(v) for r in records]
            arrays.append(pa.array(values, type=field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def row_columns(view: dict) -> list[tuple[str, str]]:
    """The (name, logical type) of each column of a view (GET /v1/views/{name})."""
    types = view.get("column_types", {})
    return [(name, types.get(name, "text")) for name in view["columns"]]


def delta_columns(view: dict, *, feed: bool = False, with_before: bool = False) -> list[tuple[str, str]]:
    """A delta line flattened: `sync` (`feed`: a line of the change feed), `op`, `count` (the
    equal rows a line of a keyless view stands for), `changed` (the columns an update
    changed), the row's columns, `old.COLUMN` for the vanished row of a keyless view's
    paired update, and `before.COLUMN` (`with_before`) for the row an update replaced.
    `write` leaves out `count`, `changed` and `old.` when no line has them."""
    columns = row_columns(view)
    return [
        *([(SYNC, "text")] if feed else []),
        (OP, "text"),
        (COUNT, "int"),
        (CHANGED, CHANGED_LIST),
        *columns,
        *((OLD_PREFIX + n, t) for n, t in columns),
        *((BEFORE_PREFIX + n, t) for n, t in (columns if with_before else [])),
    ]


def flat_delta(line: dict) -> dict:
    """One NDJSON delta (or change feed) line as one flat record (see `delta_columns`).

    >>> flat_delta({"op": "update", "row": {"a": 1}, "old": {"a": 0}})
    {'op': 'update', 'a': 1, 'old.a': 0}
    >>> flat_delta({"op": "insert", "count": 3, "row": {"a": 1}})
    {'op': 'insert', 'count': 3, 'a': 1}
    >>> flat_delta({"sync": "s1", "op": "update", "row": {"a": 1}, "changed": ["a"], "before": {"a": 0}})
    {'sync': 's1', 'op': 'update', 'changed': ['a'], 'a': 1, 'before.a': 0}
    """
    out = {SYNC: line["sync"]} if SYNC in line else {}
    out.update({OP: line["op"], **({COUNT: line["count"]} if "count" in line else {})})
    out.update({**({CHANGED: line["changed"]} if "changed" in line else {}), **line.get("row", {})})
    for prefix, part in ((OLD_PREFIX, "old"), (BEFORE_PREFIX, "before")):
        for name, value in (line.get(part) or {}).items():
            out[prefix + name] = value
    return out


def write(
    records: Iterable[dict],
    columns: list[tuple[str, str]],
    fmt: str,
    out: BinaryIO,
    *,
    optional: Iterable[str] = (),
    defaults: dict | None = None,
) -> int:
    """Write flat records as CSV or Parquet to `out`; returns how many were written.

    Columns named in `optional` are left out when no record has a value in them (a keyed
    view's delta has no `count` nor `old.` columns): that is known only after the last
    record, so the records are held until then, as Arrow batches. In a column kept, a
    missing value becomes its `defaults` entry, if it has one.
    """
    table = Table(columns, for_csv=fmt == "csv")
    batches, chunk, count = [], [], 0
    for record in records:
        chunk.append(record)
        if len(chunk) == BATCH_ROWS:
            batches.append(table.batch(chunk))
            count, chunk = count + len(chunk), []
    if chunk or not batches:
        batches.append(table.batch(chunk))
        count += len(chunk)
    data = pa.Table.from_batches(batches, schema=table.schema)
    empty = [name for name in optional if name in data.column_names and data[name].null_count == len(data)]
    data = data.drop_columns(empty)
    for name, value in (defaults or {}).items():
        if name in data.column_names:
            i = data.column_names.index(name)
            data = data.set_column(i, name, pc.fill_null(data[name], pa.scalar(value, data.schema.field(i).type)))
    if fmt == "csv":
        pacsv.write_csv(data, out)
    elif fmt == "parquet":
        pq.write_table(data, out)
    else:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    return count
