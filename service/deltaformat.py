"""Deltas and rows as the API sends them: NDJSON (the default) or Parquet, streamed.

A delta line in NDJSON is `{"sync"?, "op", "count"?, "row", "changed"?, "old"?,
"before"?}`: `sync` on the change feed only; `count` where a multiset line stands for more
than one occurrence; `changed` on updates: the names of the columns whose value the update
changed, in the view's column order (NULL to a value and back count; left out where the
delta does not keep it); `old` on a matched update of a multiset view; `before` on
updates when asked for (null where it cannot be known). In Parquet the same fields are
columns: `sync` (feed), `op`, `count` (multiset views: every line's count), `row` (a struct
of the view's columns), `changed` (a list of strings), `old` (multiset views with
`match`), `before` (with `with_before`), null where NDJSON leaves the field out. Rows in
Parquet are the view's columns, flat.

A sync that redefined the view (PUT) starts its lines with `{"sync", "op": "schema",
"columns": [{"name", "type"}...], "key"}`, in a delta and on the feed; the lines after it
have the new columns. One Parquet file has one schema: a Parquet request spanning such a
sync is refused (409) with the requests that give the same lines in parts.

Parquet is written row group by row group (one per batch) into the response, its footer
last, so neither answer holds more than a batch in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from deltasieve_protocol.types import Column, arrow_schema
from service.feed import BEFORE, COUNT, OLD, UPDATE, Item, SchemaChange, Shape
from service.jsonvalues import to_json_value
from warehouse.deltas.changed_columns import CHANGED_TYPE
from warehouse.names import CHANGED, OP

NDJSON = "application/x-ndjson"
PARQUET = "application/vnd.apache.parquet"
Format = Literal["ndjson", "parquet"]
FORMAT_HELP = (
    "ndjson (one JSON object per line, the default) or parquet (one Parquet file, application/vnd.apache.parquet)"
)
MEDIA_TYPES = {"ndjson": NDJSON, "parquet": PARQUET}


def _json(value):
    if isinstance(value, dict):
        return {k: to_json_value(v) for k, v in value.items()}
    return value


def encode_delta(fmt: Format, batches: Iterable[Item], shape: Shape, *, feed: bool) -> tuple[Iterator[bytes], str]:
    """A delta stream in `fmt`, and its media type."""
    encode = delta_parquet if fmt == "parquet" else delta_ndjson
    return encode(batches, shape, feed=feed), MEDIA_TYPES[fmt]


def delta_ndjson(batches: Iterable[Item], shape: Shape, *, feed: bool) -> Iterator[bytes]:
    """NDJSON lines of normalized delta batches (feed.py), each tagged with its sync on the
    feed; a schema line where a sync redefined the view, the lines after it in its shape."""
    names = shape.names
    for item in batches:
        if isinstance(item, SchemaChange):
            shape, names = item.shape, item.shape.names
            yield (json.dumps(item.line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
            continue
        sync_id, batch = item
        data = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        lines = []
        for i in range(batch.num_rows):
            obj: dict[str, Any] = {"sync": sync_id} if feed else {}
            op = obj["op"] = data[OP][i]
            if shape.view.multiset and data[COUNT][i] > 1:
                obj["count"] = data[COUNT][i]
            obj["row"] = {n: to_json_value(data[n][i]) for n in names}
            if shape.changed and op == UPDATE and data[CHANGED][i] is not None:
                obj["changed"] = data[CHANGED][i]
            if shape.matched and op == UPDATE and data[OLD][i] is not None:
                obj["old"] = _json(data[OLD][i])
            if shape.with_before and op == UPDATE:
                obj["before"] = _json(data[BEFORE][i])
            lines.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
        if lines:
            yield ("\n".join(lines) + "\n").encode("utf-8")


def delta_parquet(batches: Iterable[Item], shape: Shape, *, feed: bool) -> Iterator[bytes]:
    """One Parquet file of normalized delta batches (columns as the module says); the caller
    refuses a request spanning a redefinition (redefinitions.parquet_refused)."""
    row_type = shape.row_type()
    fields = ([pa.field("sync", pa.string())] if feed else []) + [pa.field("op", pa.string())]
    if shape.view.multiset:
        fields.append(pa.field("count", pa.int64()))
    fields.append(pa.field("row", row_type))
    if shape.changed:
        fields.append(pa.field("changed", CHANGED_TYPE))
    if shape.matched:
        fields.append(pa.field("old", row_type))
    if shape.with_before:
        fields.append(pa.field("before", row_type))
    schema = pa.schema(fields)

    def tables() -> Iterator[pa.RecordBatch]:
        for item in batches:
            assert not isinstance(item, SchemaChange), "a Parquet answer spanning a redefinition is refused"
            sync_id, batch = item
            arrays = [pa.array([sync_id] * batch.num_rows, pa.string())] if feed else []
            arrays.append(batch.column(OP))
            if shape.view.multiset:
                arrays.append(batch.column(COUNT))
            arrays.append(pa.StructArray.from_arrays([batch.column(n) for n in shape.names], fields=list(row_type)))
            if shape.changed:
                arrays.append(batch.column(CHANGED))
            if shape.matched:
                arrays.append(batch.column(OLD))
            if shape.with_before:
                arrays.append(batch.column(BEFORE))
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return parquet_stream(tables(), schema)


def rows_parquet(batches: Iterable[pa.RecordBatch], columns: list[Column]) -> Iterator[bytes]:
    """One Parquet file of a view's rows: its columns in their logical types."""
    schema = arrow_schema(columns)

    def cast() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            arrays = [batch.column(f.name).cast(f.type) for f in schema]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return parquet_stream(cast(), schema)


class _Chunks:
    """A write-only file that keeps what is written until it is taken."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.position = 0
        self.closed = False

    def write(self, data) -> int:
        data = bytes(data)
        self.parts.append(data)
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


def parquet_stream(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[bytes]:
    """A Parquet file of `batches`, yielded as it is written (a row group per batch, the footer last).

    >>> import io
    >>> schema = pa.schema([("a", pa.int64())])
    >>> data = b"".join(parquet_stream([pa.record_batch({"a": [1, 2]}), pa.record_batch({"a": [3]})], schema))
    >>> pq.read_table(io.BytesIO(data)).column("a").to_pylist()
    [1, 2, 3]
    """
    sink = _Chunks()
    writer = pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema, compression="zstd")
    try:
        for batch in batches:
            if batch.num_rows:
                writer.write_batch(batch)
                yield sink.take()
    finally:
        writer.close()  # also when the client went away: the writer lets go of the sink
    yield sink.take()
