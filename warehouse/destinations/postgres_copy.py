"""A view's rows and deltas as PostgreSQL's COPY takes them: the exact type of each logical
type, and CSV written by Arrow's C writer.

CSV rather than COPY's binary format: every logical type has an exact text form (floats in
their shortest round-trip digits, decimals and timestamps as digits, dates as ISO text,
bytea in hex), Arrow writes it in C, and no value but bytes' passes through Python; psycopg's
binary COPY converts every value in Python and took 10.6 s to load 1M rows where CSV took
5.9 (scripts/pg_destination_load.py). ADBC's binary ingest (4.3 s) runs on a connection of
its own, outside the transaction that records the sync.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from psycopg import sql

from deltasieve_protocol.types import Column, LogicalType
from warehouse.multisets.multiset import COUNT, OLD_PREFIX
from warehouse.names import DELETE, INSERT, OP, UPDATE

#: Rows per CSV chunk handed to COPY: enough to keep the writer's calls few, small in memory.
COPY_BATCH_ROWS = 65_536
#: A multiset delta's old rows as the change feed normalizes them (service/feed.py): one struct.
FEED_OLD = "__ds_old"

_PG_TYPES = {
    "int": "bigint",
    "float": "double precision",
    "text": "text",
    "bytes": "bytea",
    "bool": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamptz": "timestamptz",
}
#: format_type()'s names of those types, back to the logical type.
_FROM_PG = {
    "bigint": "int",
    "double precision": "float",
    "text": "text",
    "bytea": "bytes",
    "boolean": "bool",
    "date": "date",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
}
_NUMERIC = re.compile(r"^numeric\((\d+),(\d+)\)$")


def pg_type(t: LogicalType) -> str:
    """The PostgreSQL type holding exactly the values of logical type `t`.

    >>> [pg_type(LogicalType.parse(s)) for s in ("int", "float", "decimal(14,2)", "timestamp", "timestamptz")]
    ['bigint', 'double precision', 'numeric(14,2)', 'timestamp', 'timestamptz']
    >>> [pg_type(LogicalType.parse(s)) for s in ("text", "bytes", "bool", "date")]
    ['text', 'bytea', 'boolean', 'date']
    """
    if t.kind == "decimal":
        return f"numeric({t.precision},{t.scale})"
    return _PG_TYPES[t.kind]


def logical_type(pg: str) -> LogicalType | None:
    """The logical type a column of PostgreSQL type `pg` (as format_type names it) holds,
    None for a type no view column maps to.

    >>> logical_type("numeric(16,4)"), logical_type("timestamp with time zone"), logical_type("integer")
    (LogicalType(kind='decimal', precision=16, scale=4), LogicalType(kind='timestamptz', precision=0, scale=0), None)
    """
    match = _NUMERIC.match(pg)
    if match:
        return LogicalType("decimal", int(match.group(1)), int(match.group(2)))
    kind = _FROM_PG.get(pg)
    return LogicalType(kind) if kind else None


def csv_chunks(batches: Iterable[pa.RecordBatch], columns: list[Column], extra: Sequence[str] = ()) -> Iterator[bytes]:
    """CSV for COPY of `batches`: the view's columns in their logical types (bytes as bytea's
    hex), then the `extra` columns as they are; NULL unquoted and empty, every value quoted.

    >>> cols = [Column("a", LogicalType("int")), Column("b", LogicalType("bytes")), Column("c", LogicalType("text"))]
    >>> b"".join(csv_chunks([pa.record_batch({"a": [1, None], "b": [b"\\x01", None], "c": ["", None]})], cols))
    b'"1","\\\\x01",""\\n,,\\n'
    """
    options = pacsv.WriteOptions(include_header=False, quoting_style="all_valid", batch_size=COPY_BATCH_ROWS)
    for batch in batches:
        if not batch.num_rows:
            continue
        arrays = []
        for c in columns:
            array = batch.column(c.name).cast(c.type.arrow())
            if c.type.kind == "bytes":  # bytea's hex input: \x then two digits a byte
                array = pa.array([None if v is None else "\\x" + v.hex() for v in array.to_pylist()], pa.string())
            arrays.append(array)
        arrays += [batch.column(name) for name in extra]
        sink = io.BytesIO()
        pacsv.write_csv(pa.table(arrays, names=[c.name for c in columns] + list(extra)), sink, options)
        yield sink.getvalue()


def repeated(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Rows carrying a COUNT column, each as often as it says (rows without one as they are).

    >>> [b.to_pylist() for b in repeated([pa.record_batch({"a": [7, 8], COUNT: [2, 1]})])]
    [[{'a': 7}, {'a': 7}, {'a': 8}]]
    """
    for batch in batches:
        if COUNT not in batch.schema.names:
            yield batch
            continue
        counts = batch.column(COUNT).to_numpy(zero_copy_only=False)
        rows = batch.drop_columns([COUNT])
        yield rows.take(pa.array(np.repeat(np.arange(batch.num_rows), counts)))


def multiset_lines(batches: Iterable[pa.RecordBatch], names: list[str]) -> Iterator[pa.RecordBatch]:
    """A multiset delta as inserts and deletes with counts: a matched update (its old row in
    OLD_PREFIX columns as stored, or in one FEED_OLD struct as the feed gives it) becomes a
    delete of one old row and an insert of one new one.

    >>> b = pa.record_batch({OP: ["insert", "update"], "a": [1, 2], COUNT: [3, 1], OLD_PREFIX + "a": [None, 5]})
    >>> [(x.column(OP).to_pylist(), x.column("a").to_pylist()) for x in multiset_lines([b], ["a"])]
    [(['insert', 'insert'], [1, 2]), (['delete'], [5])]
    """
    for batch in batches:
        ops = batch.column(OP).cast(pa.string())
        updates = pc.equal(ops, UPDATE).fill_null(False)
        counts = batch.column(COUNT).cast(pa.int64()) if COUNT in batch.schema.names else pa.array([1] * len(batch))
        new_ops = pc.if_else(updates, pa.scalar(INSERT), ops)
        yield pa.record_batch([new_ops, *[batch.column(n) for n in names], counts], names=[OP, *names, COUNT])
        if pc.any(updates).as_py():
            olds = batch.filter(updates)
            if FEED_OLD in olds.schema.names:
                struct = olds.column(FEED_OLD)
                old = [struct.field(c) for c in names]
            else:
                old = [olds.column(OLD_PREFIX + c) for c in names]
            n = olds.num_rows
            yield pa.record_batch(
                [pa.array([DELETE] * n), *old, pa.array([1] * n, pa.int64())], names=[OP, *names, COUNT]
            )


def copy_into(
    conn, table, names: Sequence, batches: Iterable[pa.RecordBatch], columns: list[Column], extra: Sequence[str] = ()
) -> None:
    """COPY `batches` into `table`'s columns `names` (sql.Identifier each): the view's `columns`, then `extra`."""
    statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(table, sql.SQL(", ").join(names))
    with conn.cursor().copy(statement) as copy:
        for chunk in csv_chunks(batches, columns, extra):
            copy.write(chunk)
