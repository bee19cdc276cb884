"""Values of view rows as JSON, per CONTRACT.md: exact decimals as strings, dates and
timestamps as ISO 8601, bytes as base64, NULL as null; non-finite floats as strings."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from remote_agent.protocol.types import Column


def to_json_value(value):
    """JSON-ready form of one canonical value.

    >>> to_json_value(Decimal("1.50")), to_json_value(b"\\x00\\xff"), to_json_value(float("nan"))
    ('1.50', 'AP8=', 'NaN')
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


#: Rows per batch read (and per chunk of NDJSON written).
BATCH_ROWS = 8192


def ndjson_lines(
    source: Path | Iterable[pa.RecordBatch],
    columns: list[Column],
    *,
    op_column: str | None = None,
    count_column: str | None = None,
    old_prefix: str | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[bytes]:
    """Stream a Parquet dataset (or Arrow batches) as NDJSON, one batch in memory at a time.

    Values are first cast to the columns' logical Arrow types, so the JSON does not depend
    on how the Parquet writer chose to store them. A delta of a multiset view has a
    `count_column` (shown as "count" beside "op" where above one) and, when its view
    matches rows, the old row of an update in columns named `old_prefix` + column (shown
    as "old").
    """
    names = [c.name for c in columns]
    wanted = ([op_column] if op_column else []) + names
    types = {c.name: c.type.arrow() for c in columns}
    olds: list[str] = []
    if isinstance(source, Path):
        dataset = ds.dataset(source, format="parquet")
        if count_column:
            wanted.append(count_column)
        if old_prefix and old_prefix + names[0] in dataset.schema.names:
            olds = [old_prefix + n for n in names]
            types.update({old_prefix + c.name: c.type.arrow() for c in columns})
        source = dataset.to_batches(columns=wanted + olds, batch_size=batch_rows)
    for batch in source:
        data = {
            name: (batch.column(name).cast(types[name]) if name in types else batch.column(name)).to_pylist()
            for name in wanted + olds
        }
        lines = []
        for i in range(batch.num_rows):
            row = {c: to_json_value(data[c][i]) for c in names}
            obj = {"op": data[op_column][i], "row": row} if op_column else row
            if count_column and data[count_column][i] > 1:
                obj = {"op": obj["op"], "count": data[count_column][i], "row": row}
            if olds and obj["op"] == "update":
                obj["old"] = {c: to_json_value(data[o][i]) for c, o in zip(names, olds)}
            lines.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
        if lines:
            yield ("\n".join(lines) + "\n").encode("utf-8")
