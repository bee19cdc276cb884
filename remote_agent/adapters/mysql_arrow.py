"""MySQL/MariaDB chunks as canonical Arrow columns: the server's text, cast by Arrow, no Python value per cell.

Over the text protocol every value arrives as text; mysql_result.py copies it into one
Arrow binary column per result column, and Arrow casts whole columns in C: text checked
as UTF-8, numbers, decimals and dates parsed.

A cast that would change a value fails instead (a decimal with more digits than its
scale, a zero date, a timestamp Arrow cannot parse): the chunk is then read again through
mysqlclient's converters (`Reader.arrow` returns None), which give what the rest of the
agent expects, e.g. NULL for a zero date.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from deltasieve_protocol.types import LogicalType


def canonical(columns: Sequence[pa.Array], types: Sequence[LogicalType], schema: pa.Schema) -> pa.Table | None:
    """The server's text of each column (binary arrays) as canonical columns of `schema`, or None where a cast would change a value.

    >>> schema = pa.schema([("i", pa.int64()), ("d", pa.decimal128(10, 2)), ("t", pa.timestamp("us"))])
    >>> types = [LogicalType("int"), LogicalType("decimal", 10, 2), LogicalType("timestamp")]
    >>> def text(*values): return [pa.array([v], pa.binary()) for v in values]
    >>> canonical(text(b"7", b"1.50", b"2024-01-02 03:04:05.5"), types, schema).to_pylist()[0]
    {'i': 7, 'd': Decimal('1.50'), 't': datetime.datetime(2024, 1, 2, 3, 4, 5, 500000)}
    >>> canonical(text(None, None, None), types, schema).to_pylist()[0]
    {'i': None, 'd': None, 't': None}
    >>> canonical(text(b"1", b"1.505", b"2024-01-02"), types, schema) is None  # would round
    True
    >>> canonical(text(b"1", b"1.50", b"0000-00-00 00:00:00"), types, schema) is None  # a zero date
    True
    """
    arrays = []
    for raw, type_, field in zip(columns, types, schema, strict=True):
        array = _column(raw, type_, field.type)
        if array is None:
            return None
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(raw: pa.Array, type_: LogicalType, target: pa.DataType) -> pa.Array | None:
    kind = type_.kind
    try:
        if kind == "bytes":
            return raw.cast(target)
        text = raw.cast(pa.string())  # refuses bytes that are not UTF-8
        if kind == "text":
            return text.cast(target)
        if kind == "bool":  # BIT(1) read as its number
            return pc.not_equal(text.cast(pa.int64()), 0)
        if kind in ("date", "timestamp", "timestamptz"):
            return _dates(text, target)
        return text.cast(target)  # int, float, decimal: refuses rounding and overflow
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _dates(text: pa.Array, target: pa.DataType) -> pa.Array | None:
    """Dates and timestamps from the server's text; None on a zero date (or a zero month or day)."""
    if pc.any(pc.match_substring_regex(text, r"^0000|-00")).as_py():
        return None
    if pa.types.is_date32(target):
        return text.cast(target)
    parsed = text.cast(pa.timestamp("us"))
    return parsed.cast(target) if target.tz is None else pc.assume_timezone(parsed, "UTC").cast(target)
