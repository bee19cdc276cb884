"""Chunks of a SQLite query read straight into canonical Arrow columns (adbc-driver-sqlite).

The ADBC SQLite driver steps the statement and builds its columns in C: no Python object
per value, where Python's sqlite3 makes a tuple of objects per row and RowConverter turns
them into Arrow again.

Its connection is a second one to the same file, opened read-only (a `file:...?mode=ro`
URI, then `PRAGMA query_only`) and in autocommit mode: each chunk is one SELECT, hence one
read transaction of its own that ends when the statement does, one snapshot per read as the
sqlite3 reads take it. The driver has no busy timeout and no way to interrupt a statement
(it does not implement cancel): a locked database is an error, which sends the chunk to
sqlite3 (busy timeout, progress handler), but a chunk the driver does read is not bounded
by the agent's statement timeout.

SQLite is dynamically typed: the driver gives each column the Arrow type of the storage
classes it finds in its first batch, converting the others (a real in a text column as
'1.500000e+00', an integer in a blob column as its digits) or failing on a later value of
another class. Its first batch is made the whole chunk (`INFER_ROWS`), so that the type
covers every value read, and `canonical` takes a column only where its values read exactly
as RowConverter's would; anything else makes it return None and the caller reads that
chunk through sqlite3 and RowConverter instead, which convert, or refuse, as before:

- int: integers only (a real or a text in the chunk: sqlite3's path);
- float: reals, integers (exact in a double: Python's float() of the same integer);
- decimal: reals with no more digits than the scale, integers that fit (columns.finish's
  rules; the converter rounds or refuses the others);
- text: text, and integers (their digits, as Python's str() writes them); a value reading
  like a converted real ('1.5e+00', 'inf', any such text) or invalid UTF-8: sqlite3's path;
- bytes: blobs and text (its UTF-8); a value reading like a converted number: sqlite3's;
- bool: the integers 0 and 1 (text such as 'true': sqlite3's path);
- date: text of the form YYYY-MM-DD, years 1-9999 (columns.dates_from_text);
- timestamp, timestamptz: text of the form YYYY-MM-DD[( |T)HH:MM[:SS[.ffffff]]], which
  Arrow's parser and datetime.fromisoformat read alike, naive (UTC for timestamptz); any
  other form (an offset, more digits, a number) is the converter's to judge;
- a column of NULLs only: NULLs of its type.

The next chunk binds the last row's key back as its cursor and compares it with Python's
`==` (chunks.py): a key column must hold what sqlite3 would hand over, so only int keys
and text keys with no value reading like a number take this path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

import adbc_driver_manager
import adbc_driver_sqlite.dbapi as adbc
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltasieve_protocol.types import LogicalType
from remote_agent.adapters.columns import dates_from_text, decimals_from_floats, whole
from remote_agent.errors import SourceUnavailable

#: Rows the driver reads before fixing a column's type: more than any chunk, so that the
#: type (and the conversions it implies) covers every value of the chunk.
INFER_ROWS = 2**30  # the driver refuses 2**31 - 1

#: How the driver writes a real it converts to text: printf's %e, or inf.
_CONVERTED_REAL = r"^-?(inf|[0-9]\.[0-9]{6}e[+-][0-9]{2,3})$"
#: The timestamps Arrow's parser reads as datetime.fromisoformat does (other forms: the converter).
_PLAIN_TIMESTAMP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}([ T][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?)?$"
#: An integer's digits: how the driver writes an integer it converts to text or bytes.
_DIGITS = r"^-?[0-9]+$"
_DOT, _F, _MINUS, _ZERO, _NINE = (ord(c) for c in ".f-09")


def connect(path: str) -> adbc.Connection:
    """A read-only ADBC connection to the SQLite file at `path`, in autocommit mode."""
    try:
        conn = adbc.connect(f"file:{quote(path)}?mode=ro", autocommit=True)
    except adbc_driver_manager.Error as exc:
        raise SourceUnavailable(f"cannot open SQLite database {path} through ADBC: {str(exc).strip()}") from None
    with conn.cursor() as cursor:
        cursor.execute("PRAGMA query_only = ON")
    return conn


#: Parameters the driver binds as sqlite3 does. Others differ (a datetime is bound with a
#: 'T', where sqlite3's adapter writes a space) or fail: their chunk is sqlite3's.
_BOUND_ALIKE = (int, float, str, bytes)


def read_table(conn: adbc.Connection, sql: str, params: Sequence[Any] = ()) -> pa.Table | None:
    """All rows of one SELECT as the driver types them, in one batch; None if the driver fails (busy, mixed types)."""
    if not all(isinstance(p, _BOUND_ALIKE) for p in params):
        return None
    with conn.cursor() as cursor:
        try:
            cursor.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(INFER_ROWS)})
            cursor.execute(sql, tuple(params) if params else None)
            return cursor.fetch_arrow_table()
        except (adbc_driver_manager.Error, pa.ArrowException, ValueError, TypeError):  # a parameter it cannot bind too
            return None


def canonical(table: pa.Table, types: Sequence[LogicalType], schema: pa.Schema, key: Sequence[int]) -> pa.Table | None:
    """The driver's table as canonical columns of `schema`, or None if a value needs sqlite3's path.

    `key`: positions of the key columns, which must hold exactly what sqlite3 would.

    >>> t = pa.table({"k": [1, 2], "n": pa.array([1.25, None]), "ok": [1, 0]})
    >>> types = [LogicalType("int"), LogicalType("decimal", 4, 2), LogicalType("bool")]
    >>> schema = pa.schema([(f, t.arrow()) for f, t in zip("k n ok".split(), types)])
    >>> canonical(t, types, schema, [0]).to_pylist()
    [{'k': 1, 'n': Decimal('1.25'), 'ok': True}, {'k': 2, 'n': None, 'ok': False}]
    >>> canonical(t, types, schema, [1]) is None  # a decimal key
    True
    """
    arrays = []
    for i, (column, type_, field) in enumerate(zip(table.columns, types, schema)):
        array = whole(column)
        if i in key and not _exact_key(array, type_.kind):
            return None
        array = _column(array, type_, field.type)
        if array is None:
            return None
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema)


def _exact_key(array: pa.Array, kind: str) -> bool:
    """Whether sqlite3 would hand over these key values as they are: integers, or text no number was converted to."""
    if kind == "int":
        return pa.types.is_int64(array.type)
    if kind == "text" and pa.types.is_string(array.type):
        return not _any_digits(array)
    return array.null_count == len(array)


def _column(array: pa.Array, type_: LogicalType, target: pa.DataType) -> pa.Array | None:
    if array.null_count == len(array):
        return pa.nulls(len(array), target)
    convert = _CONVERSIONS.get((type_.kind, str(array.type)))
    if convert is None:
        return None
    try:
        return convert(array, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _text(array: pa.Array, target: pa.DataType) -> pa.Array | None:
    array.validate(full=True)  # invalid UTF-8 (a blob): the converter's error
    return None if _any_converted_real(array) else array


def _bytes(array: pa.Array, target: pa.DataType) -> pa.Array | None:
    if _any_converted_real(array) or _any_digits(array):
        return None
    return array.cast(target)


def _any_converted_real(array: pa.Array) -> bool:
    """Whether a value of a string or binary array reads like a real the driver wrote as text (`_CONVERTED_REAL`).

    Only the values that could match are matched against the pattern: those of 3 or 4 bytes
    ending in f ([-]inf), and those of 12 to 14 bytes ending in a digit with a dot as their
    second or third byte ([-]d.dddddde±dd[d]), told apart by numpy over the array's offsets
    and bytes. Matching every value of those lengths was most of the conversion's time on
    students rows, whose names have 3 or 4 letters.

    >>> _any_converted_real(pa.array(["Ava", "1.500000e+00", None])), _any_converted_real(pa.array(["inf!", "-inf"]))
    (True, True)
    >>> _any_converted_real(pa.array(["Ava", "1.5e+00", "+61 447 523 189", "Olaf", "1.5000000e+00", None]))
    False
    >>> _any_converted_real(pa.array([b"-1.000000e+300"]).slice(0)), _any_converted_real(pa.array(["x", "inf"]).slice(0, 1))
    (True, False)
    """
    starts, ends, data = _layout(array)
    lengths = ends - starts
    short = (lengths == 3) | (lengths == 4)
    long = (lengths >= 12) & (lengths <= 14)
    if not (short.any() or long.any()):
        return False
    last = data[np.maximum(ends, 1) - 1]
    short &= last == _F
    long &= (last >= _ZERO) & (last <= _NINE)
    if long.any():
        second, third = (data[np.minimum(starts + i, len(data) - 1)] for i in (1, 2))
        long &= (second == _DOT) | (third == _DOT)
    return _any_match(array, short | long, _CONVERTED_REAL)


def _any_digits(array: pa.Array) -> bool:
    """Whether a value of a string or binary array is an integer's digits (`_DIGITS`): only
    the values that begin with a digit or a minus and end in a digit are matched.

    >>> _any_digits(pa.array(["a1", "-", "12a", None])), _any_digits(pa.array([b"x", b"-12"]))
    (False, True)
    """
    starts, ends, data = _layout(array)
    present = ends > starts
    if not present.any():
        return False
    first, last = data[np.minimum(starts, len(data) - 1)], data[np.maximum(ends, 1) - 1]
    digit_first = (first >= _ZERO) & (first <= _NINE)
    candidates = present & (digit_first | (first == _MINUS)) & (last >= _ZERO) & (last <= _NINE)
    return _any_match(array, candidates, _DIGITS)


def _layout(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each value of a string or binary array starts and ends in its bytes, and the bytes
    (a null's slot may hold any bytes: a value matched for it is dropped by `_any_match`)."""
    _, offsets, values = array.buffers()
    if offsets is None:  # no values
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.uint8)
    width = np.int64 if pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type) else np.int32
    bounds = np.frombuffer(offsets, width, count=len(array) + 1, offset=array.offset * np.dtype(width).itemsize)
    data = np.frombuffer(values, np.uint8) if values is not None and values.size else np.zeros(1, np.uint8)
    return bounds[:-1], bounds[1:], data


def _any_match(array: pa.Array, candidates: np.ndarray, pattern: str) -> bool:
    """Whether a non-null value among the `candidates` (a mask) matches `pattern`."""
    if not candidates.any():
        return False
    chosen = array.take(pa.array(np.flatnonzero(candidates)))
    return bool(pc.any(pc.match_substring_regex(chosen, pattern)).as_py())


def _bools(array: pa.Array, target: pa.DataType) -> pa.Array | None:
    low, high = (v.as_py() for v in pc.min_max(array).values())
    return array.cast(target) if low >= 0 and high <= 1 else None


def _timestamps(array: pa.Array, target: pa.DataType) -> pa.Array | None:
    """Naive ISO timestamps as `target`; a naive one is UTC in a timestamptz column, as the converter reads it.

    >>> _timestamps(pa.array(["2024-03-01T12:00", None]), pa.timestamp("us", tz="UTC")).to_pylist()[0].isoformat()
    '2024-03-01T12:00:00+00:00'
    >>> _timestamps(pa.array(["2024-03-01 12:00:00+02:00"]), pa.timestamp("us")) is None
    True
    """
    if not pc.all(pc.match_substring_regex(array, _PLAIN_TIMESTAMP)).as_py():
        return None
    return array.cast(pa.timestamp("us")).cast(target)  # year 0, 24:00, a 30th of February: refused


#: (logical kind, the driver's Arrow type) -> the canonical array, None if a value needs the converter.
_CONVERSIONS: dict[tuple[str, str], Callable[[pa.Array, pa.DataType], pa.Array | None]] = {
    ("int", "int64"): lambda a, t: a,
    ("float", "double"): lambda a, t: a,
    ("float", "int64"): lambda a, t: a.cast(t),  # safe: refuses an integer a double would round
    ("decimal", "double"): lambda a, t: decimals_from_floats(a, t),
    ("decimal", "int64"): lambda a, t: a.cast(t),  # safe: refuses one too wide for the precision
    ("text", "string"): _text,
    ("bytes", "binary"): _bytes,
    ("bytes", "string"): _bytes,
    ("bool", "int64"): _bools,
    ("date", "string"): lambda a, t: dates_from_text(a),
    ("timestamp", "string"): _timestamps,
    ("timestamptz", "string"): _timestamps,
}


def close(conn: adbc.Connection | None) -> None:
    """Close `conn` if open, whatever state it is in."""
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()
