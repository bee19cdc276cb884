"""A MySQL/MariaDB result copied into Arrow by compiled loops: the server's text, no Python object per value.

mysqlclient hands every value of a row over as a Python object (bytes or str, even with
its converters removed), which costs more than the server's sending of it; the client
floor itself (tests/benchmarks/floors.py) is such rows. Here mysqlclient only sends the
statement (`query`); the result is taken with the C client library mysqlclient is linked
against: `mysql_store_result` on the connection's `MYSQL*`, then a compiled loop over
`mysql_fetch_row` and `mysql_fetch_lengths` (deltasieve_protocol/kernels/mysql_rows.py)
copies each value, as the server sent it over the text protocol, into one Arrow binary
column per result column (NULL as null). Arrow then casts those columns to their canonical
types (mysql_arrow.py). The session, its read-only transaction, its statement timeout and
the query's errors stay mysqlclient's; an error while the rows arrive (the statement
timeout, a lost connection) is raised as mysqlclient's `OperationalError` with the client's
error number.

The loops are kernels of `deltasieve_protocol.compiled`: built ahead of time at install
with the others, so that the agent's readers run them without numba or its LLVM library
(or, from a missing or stale build, compiled just in time with its warning). They take the
two row functions as addresses, found through mysqlclient's own extension module (`dlsym`
searches the libraries it loaded), so they are those of the very library that made the
connection, libmariadb or MySQL's libmysqlclient alike.

The connection's `MYSQL*` comes from mysqlclient's `_get_native_connection` (a capsule;
there since mysqlclient 1.4, documented as made for another project's use): without it,
`native_connection` is None and the adapter reads rows through the converters instead.

Measured on 1M students rows: scripts/mysql_read_drivers.py.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pyarrow as pa

from deltasieve_protocol import compiled

try:  # the `mysql` extra, as in mysql.py
    import MySQLdb
    from MySQLdb import _mysql
except ImportError:  # pragma: no cover - the suite installs it
    MySQLdb = _mysql = None

#: The largest byte count of one column of one chunk: Arrow's binary offsets are 32-bit.
MAX_COLUMN_BYTES = 2**31 - 1
_CAPSULE = b"_mysql.connection.native_connection"
#: The client library's row functions the compiled loops call, by their addresses.
_ROW_FUNCTIONS = ("mysql_fetch_row", "mysql_fetch_lengths")


def _client_library() -> tuple[Any, tuple[int, int]]:
    """The C client's functions mysqlclient uses, typed for ctypes, and the addresses of its
    row functions (`_ROW_FUNCTIONS`) for the compiled loops; None and no addresses without
    mysqlclient, or where a pointer or an `unsigned long` is not the 64-bit word the loops read."""
    if _mysql is None or ctypes.sizeof(ctypes.c_void_p) != 8 or ctypes.sizeof(ctypes.c_ulong) != 8:
        return None, (0, 0)
    client = ctypes.CDLL(_mysql.__file__)
    pointer, count = ctypes.c_void_p, ctypes.c_uint64
    for name, args, result in [
        ("mysql_store_result", [pointer], pointer),
        ("mysql_num_rows", [pointer], count),
        ("mysql_num_fields", [pointer], ctypes.c_uint),
        ("mysql_data_seek", [pointer, count], None),
        ("mysql_free_result", [pointer], None),
        ("mysql_errno", [pointer], ctypes.c_uint),
        ("mysql_error", [pointer], ctypes.c_char_p),
    ]:
        function = getattr(client, name)
        function.argtypes, function.restype = args, result
    fetch_row, fetch_lengths = (ctypes.cast(getattr(client, name), pointer).value or 0 for name in _ROW_FUNCTIONS)
    return client, (fetch_row, fetch_lengths)


_client, _row_functions = _client_library()
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def native_connection(conn: Any) -> int | None:
    """The address of a mysqlclient connection's `MYSQL` struct; None where mysqlclient does not hand it over."""
    get = getattr(conn, "_get_native_connection", None)
    if _client is None or get is None:
        return None
    return _capsule_pointer(get(), _CAPSULE)


def stored_columns(mysql: int) -> list[pa.Array] | None:
    """The result of the statement the connection `mysql` (`native_connection`) just ran, as binary columns.

    Each column holds the server's text of its values (over the text protocol every value is
    text: numbers and dates as digits, strings in the connection's character set, BLOBs as
    their bytes). None: a column's bytes would overflow Arrow's offsets (read the rows instead).

    Raises:
        MySQLdb.OperationalError: the rows did not all arrive (the statement's timeout, a lost
            connection), or the statement returned no rows at all.
    """
    result = _client.mysql_store_result(mysql)
    if not result:
        number = _client.mysql_errno(mysql)
        message = (_client.mysql_error(mysql) or b"").decode("utf-8", "replace")
        raise MySQLdb.OperationalError(number, message if number else "the statement returned no result set")
    try:
        rows, fields = _client.mysql_num_rows(result), _client.mysql_num_fields(result)
        sizes = compiled.kernel("mysql_column_bytes")(*_row_functions, result, rows, fields)
        if fields and int(sizes.max()) > MAX_COLUMN_BYTES:
            return None
        _client.mysql_data_seek(result, 0)
        starts = np.zeros(fields + 1, np.int64)
        np.cumsum(sizes, out=starts[1:])
        data = np.empty(int(starts[-1]), np.uint8)
        offsets = np.zeros((fields, rows + 1), np.int32)
        valid = np.zeros((fields, (rows + 7) // 8), np.uint8)
        nulls = compiled.kernel("mysql_copy_rows")(*_row_functions, result, rows, fields, starts, data, offsets, valid)
    finally:
        _client.mysql_free_result(result)
    buffer = pa.py_buffer(data)
    return [
        pa.Array.from_buffers(
            pa.binary(),
            rows,
            [pa.py_buffer(valid[c]) if nulls[c] else None, pa.py_buffer(offsets[c])]
            + [buffer.slice(int(starts[c]), int(sizes[c]))],
            null_count=int(nulls[c]),
        )
        for c in range(fields)
    ]


def load_reader() -> None:
    """Load the row loops (the extension built ahead of time, or numba's compilation of their
    source where that build is missing or stale: `deltasieve_protocol.compiled`), so that no read pays for it.

    Without mysqlclient there is nothing to read with, and nothing is loaded.

    >>> load_reader()
    """
    if _client is None:  # pragma: no cover - the suite installs mysqlclient
        return
    empty = np.zeros(1, np.int64)
    compiled.kernel("mysql_column_bytes")(*_row_functions, 0, 0, 0)
    compiled.kernel("mysql_copy_rows")(
        *_row_functions, 0, 0, 0, empty, np.zeros(0, np.uint8), np.zeros((0, 1), np.int32), np.zeros((0, 0), np.uint8)
    )
