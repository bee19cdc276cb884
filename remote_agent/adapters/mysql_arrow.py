"""MySQL/MariaDB chunks straight into Arrow: the server's text, cast by Arrow, no Python value per cell.

Over the text protocol every value arrives as text. mysqlclient's converters turn each
into a Python int, Decimal or datetime, one call a value; read without them, numbers and
dates stay bytes and text stays str, and Arrow casts whole columns in C. Measured at
200,000 rows (scripts/mysql_read_drivers.py): 392k rows/s against 217k with the
converters.

A cast that would change a value fails instead (a decimal with more digits than its
scale, a zero date, a timestamp Arrow cannot parse): the chunk is then read again through
the converters (`Reader.arrow` returns None), which give what the rest of the agent
expects, e.g. NULL for a zero date.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltasieve_protocol.types import LogicalType

#: What a column's text is first read as: everything but text and bytes arrives as bytes.
_STRING_KINDS = {"text"}


def raw_converter(converter: dict) -> dict:
    """A connection's converter table kept to the text and JSON types: every other value stays the server's bytes.

    >>> from MySQLdb.constants import FIELD_TYPE
    >>> from MySQLdb.converters import conversions
    >>> kept = raw_converter(conversions)
    >>> FIELD_TYPE.NEWDECIMAL in kept, FIELD_TYPE.DATETIME in kept, FIELD_TYPE.VAR_STRING in kept
    (False, False, True)
    """
    from MySQLdb.constants import FIELD_TYPE

    kept = {
        FIELD_TYPE.STRING,
        FIELD_TYPE.VAR_STRING,
        FIELD_TYPE.VARCHAR,
        FIELD_TYPE.TINY_BLOB,
        FIELD_TYPE.MEDIUM_BLOB,
        FIELD_TYPE.LONG_BLOB,
        FIELD_TYPE.BLOB,
        FIELD_TYPE.JSON,
    }
    return {k: v for k, v in converter.items() if k in kept}


def canonical(rows: Sequence[tuple], types: Sequence[LogicalType], schema: pa.Schema) -> pa.Table | None:
    """Raw rows (bytes for numbers and dates) as canonical columns of `schema`, or None where a cast would change a value.

    >>> schema = pa.schema([("i", pa.int64()), ("d", pa.decimal128(10, 2)), ("t", pa.timestamp("us"))])
    >>> types = [LogicalType("int"), LogicalType("decimal", 10, 2), LogicalType("timestamp")]
    >>> canonical([(b"7", b"1.50", b"2024-01-02 03:04:05.5"), (None, None, None)], types, schema).to_pylist()[0]
    {'i': 7, 'd': Decimal('1.50'), 't': datetime.datetime(2024, 1, 2, 3, 4, 5, 500000)}
    >>> canonical([(b"1", b"1.505", b"2024-01-02")], types, schema) is None  # would round
    True
    >>> canonical([(b"1", b"1.50", b"0000-00-00 00:00:00")], types, schema) is None  # a zero date
    True
    """
    columns = list(zip(*rows)) if rows else [() for _ in schema]
    arrays = []
    for values, type_, field in zip(columns, types, schema):
        array = _column(values, type_, field.type)
        if array is None:
            return None
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(values: Sequence[Any], type_: LogicalType, target: pa.DataType) -> pa.Array | None:
    kind = type_.kind
    try:
        if kind in _STRING_KINDS or kind == "bytes":
            return pa.array(values, target)
        text = pa.array(values, pa.binary()).cast(pa.string())
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
