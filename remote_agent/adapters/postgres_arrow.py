"""Chunks of a PostgreSQL query read straight into canonical Arrow columns (ADBC, binary COPY).

The ADBC PostgreSQL driver sends a query without parameters as `COPY (query) TO STDOUT
(FORMAT binary)`, the server's bulk export, and parses the binary rows into Arrow in C: no
Python object per value (scripts/pg_read_drivers.py measures it against psycopg's paths).
COPY TO STDOUT only reads: it runs in a read-only transaction and on a hot standby, under
the statement timeout, needs nothing but SELECT on what the query reads, and the agent's
query is one of its own SELECTs. Its connection is opened with the psycopg connection's
own conninfo, so it has the same read-only default, statement and idle timeouts and
session settings; each read is one `BEGIN ... READ ONLY` REPEATABLE READ transaction.

The driver's columns are taken only where they read exactly as psycopg's values would
after the converters; anything else (a numeric with more digits than its scale, 'NaN'
numerics, dates or timestamps outside Python's years 1-9999, such as 'infinity', a type
the driver hands over in another form) makes `canonical` return None, and the caller
reads that chunk through psycopg instead, whose converters round or refuse as before.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import adbc_driver_manager
import adbc_driver_postgresql.dbapi as adbc
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from adbc_driver_postgresql import StatementOptions

from deltasieve_protocol.types import LogicalType
from remote_agent.adapters import postgres_errors
from remote_agent.adapters.columns import whole
from remote_agent.errors import SourceUnavailable

#: How every Arrow read begins its transaction, as the psycopg connection's own reads do.
BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"

_EPOCH = dt.datetime(1970, 1, 1)
#: Dates and timestamps Python can hold (psycopg refuses the others, e.g. 'infinity').
_DAYS = ((dt.date(1, 1, 1) - _EPOCH.date()).days, (dt.date(9999, 12, 31) - _EPOCH.date()).days)
_MICROS = (
    (dt.datetime(1, 1, 1) - _EPOCH) // dt.timedelta(microseconds=1),
    (dt.datetime(9999, 12, 31, 23, 59, 59, 999999) - _EPOCH) // dt.timedelta(microseconds=1),
)


def connect(conninfo: str) -> adbc.Connection:
    """An ADBC connection in autocommit mode: `read_table` begins and ends each transaction itself.

    The driver's own transactions would begin with a bare BEGIN (READ ONLY only by the
    session default), which the agent's audit of the server's log refuses to see.
    """
    try:
        return adbc.connect(conninfo, autocommit=True)
    except adbc_driver_manager.Error as exc:
        raise SourceUnavailable(f"cannot open PostgreSQL's Arrow connection: {str(exc).strip()}") from None


def read_table(conn: adbc.Connection, sql: str, timeout_s: float) -> pa.Table:
    """All rows of one SELECT (no parameters), in one read-only transaction ended before returning.

    The server runs it as `COPY (SELECT ...) TO STDOUT (FORMAT binary)`: the driver plans
    the SELECT (unnamed, not run) for its columns' types, then reads the COPY's rows.
    """
    with conn.cursor() as cursor:
        cursor.adbc_statement.set_options(**{StatementOptions.USE_COPY.value: "true"})
        try:
            cursor.execute(BEGIN)
            cursor.execute(sql)
            return cursor.fetch_arrow_table()
        except adbc_driver_manager.Error as exc:
            raise _error(exc, timeout_s) from None
        finally:
            try:
                cursor.execute("ROLLBACK")
            except adbc_driver_manager.Error:
                pass


def _error(exc: adbc_driver_manager.Error, timeout_s: float) -> Exception:
    """The agent's error for a driver error, as the psycopg reader maps them (postgres_errors.py)."""
    return postgres_errors.read_error(
        getattr(exc, "sqlstate", None) or None,
        str(exc).strip(),
        timeout_s,
        link_failed=isinstance(exc, adbc_driver_manager.OperationalError),
        value_failed=isinstance(exc, adbc_driver_manager.DataError),
    )


def canonical(table: pa.Table, types: Sequence[LogicalType], schema: pa.Schema) -> pa.Table | None:
    """The driver's table as canonical columns of `schema`, or None if a value needs psycopg's path.

    >>> t = pa.table({"a": pa.array([1, None], pa.int32()), "b": pa.array([0.1, None], pa.float32())})
    >>> canonical(t, [LogicalType("int"), LogicalType("float")], pa.schema([("a", pa.int64()), ("b", pa.float64())])).to_pylist()
    [{'a': 1, 'b': 0.1}, {'a': None, 'b': None}]
    """
    arrays = []
    for column, type_, field in zip(table.columns, types, schema):
        array = _column(whole(column), type_, field.type)
        if array is None:
            return None
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(array: pa.Array, type_: LogicalType, target: pa.DataType) -> pa.Array | None:
    if isinstance(array.type, pa.BaseExtensionType):  # numeric arrives as its text (an opaque extension)
        array = array.storage
    kind, wire = type_.kind, array.type
    try:
        if kind == "int" and pa.types.is_integer(wire):
            return array.cast(target)
        if kind == "float" and pa.types.is_float32(wire):
            return _shortest_doubles(array)
        if kind == "decimal" and pa.types.is_string(wire):
            return array.cast(target)  # refuses a value that would be rounded, 'NaN', too wide
        if kind == "date" and wire == target:
            return array if _within(array.cast(pa.int32()), _DAYS) else None
        if kind in ("timestamp", "timestamptz") and wire == target:
            return array if _within(array.cast(pa.int64()), _MICROS) else None
        if wire == target:  # int64, float64, text, bytes, bool
            return array
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return None


def _within(values: pa.Array, bounds: tuple[int, int]) -> bool:
    low, high = pc.min_max(values).values()
    return low.as_py() is None or (low.as_py() >= bounds[0] and high.as_py() <= bounds[1])


def _shortest_doubles(array: pa.Array) -> pa.Array:
    """`real` values as the doubles their shortest text reads as, as psycopg reads them (0.1, not 0.100000001).

    >>> _shortest_doubles(pa.array([0.1, None, float("nan")], pa.float32())).to_pylist()[:2]
    [0.1, None]
    """
    floats = array.fill_null(0.0).to_numpy(zero_copy_only=False)
    doubles = floats.astype(str).astype(np.float64)  # numpy's float32 text is the shortest that reads back
    return pa.array(doubles, pa.float64(), mask=array.is_null().to_numpy(zero_copy_only=False))
