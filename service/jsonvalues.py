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

from deltasieve_protocol.types import Column


def to_json_value(value):
    """JSON-ready form of one canonical value.

    >>> to_json_value(Decimal("1.50")), to_json_value(b"\\x00\\xff"), to_json_value(float("nan"))
    ('1.50', 'AP8=', 'NaN')
    >>> to_json_value(Decimal("-1E-10")), to_json_value(Decimal("0E-10")), to_json_value(Decimal("1E+3"))
    ('-0.0000000001', '0.0000000000', '1000')
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Decimal):  # positional always: str() would give 1E-10 for a tiny one
        return format(value, "f")
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


#: Rows per batch read (and per chunk of NDJSON written).
BATCH_ROWS = 8192


def ndjson_lines(
    source: Path | Iterable[pa.RecordBatch], columns: list[Column], *, batch_rows: int = BATCH_ROWS
) -> Iterator[bytes]:
    """Stream a Parquet dataset (or Arrow batches) of rows as NDJSON, one batch in memory at a time.

    Values are first cast to the columns' logical Arrow types, so the JSON does not depend
    on how the Parquet writer chose to store them. (Deltas: deltaformat.py.)
    """
    names = [c.name for c in columns]
    types = {c.name: c.type.arrow() for c in columns}
    batches = (
        ds.dataset(source, format="parquet").to_batches(columns=names, batch_size=batch_rows)
        if isinstance(source, Path)
        else source
    )
    for batch in batches:
        data = {name: batch.column(name).cast(types[name]).to_pylist() for name in names}
        lines = [
            json.dumps({c: to_json_value(data[c][i]) for c in names}, ensure_ascii=False, separators=(",", ":"))
            for i in range(batch.num_rows)
        ]
        if lines:
            yield ("\n".join(lines) + "\n").encode("utf-8")
