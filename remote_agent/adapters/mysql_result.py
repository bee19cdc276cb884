"""A MySQL/MariaDB result copied into Arrow by a compiled loop: the server's text, no Python object per value.

mysqlclient hands every value of a row over as a Python object (bytes or str, even with
its converters removed), which costs more than the server's sending of it; the client
floor itself (tests/benchmarks/floors.py) is such rows. Here mysqlclient only sends the
statement (`query`); the result is taken with the C client library mysqlclient is linked
against: `mysql_store_result` on the connection's `MYSQL*`, then a numba-compiled loop
over `mysql_fetch_row` and `mysql_fetch_lengths` copies each value, as the server sent it
over the text protocol, into one Arrow binary column per result column (NULL as null).
Arrow then casts those columns to their canonical types (mysql_arrow.py). The session,
its read-only transaction, its statement timeout and the query's errors stay mysqlclient's;
an error while the rows arrive (the statement timeout, a lost connection) is raised as
mysqlclient's `OperationalError` with the client's error number.

The connection's `MYSQL*` comes from mysqlclient's `_get_native_connection` (a capsule;
there since mysqlclient 1.4, documented as made for another project's use): without it,
`native_connection` is None and the adapter reads rows through the converters instead. The
client library's functions are found through mysqlclient's own extension module (`dlsym`
searches the libraries it loaded), so they are those of the very library that made the
connection, libmariadb or MySQL's libmysqlclient alike.

Measured on 1M students rows: scripts/mysql_read_drivers.py.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pyarrow as pa
from llvmlite import binding, ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

try:  # the `mysql` extra, as in mysql.py
    import MySQLdb
    from MySQLdb import _mysql
except ImportError:  # pragma: no cover - the suite installs it
    MySQLdb = _mysql = None

#: The largest byte count of one column of one chunk: Arrow's binary offsets are 32-bit.
MAX_COLUMN_BYTES = 2**31 - 1
_CAPSULE = b"_mysql.connection.native_connection"

#: The client library's row functions, called from compiled code by name (registered below).
#: `MYSQL_ROW` is an array of `char*` (0 for NULL), the lengths an array of `unsigned long`:
#: both 64-bit words on the 64-bit Linux machines the agent runs on.
_fetch_row = types.ExternalFunction("mysql_fetch_row", types.CPointer(types.uint64)(types.uint64))
_fetch_lengths = types.ExternalFunction("mysql_fetch_lengths", types.CPointer(types.uint64)(types.uint64))


def _client_library() -> Any:
    """The C client's functions mysqlclient uses, typed for ctypes, and the row functions
    made known to numba's linker; None without mysqlclient, or where a pointer or an
    `unsigned long` is not the 64-bit word the compiled loops read."""
    if _mysql is None or ctypes.sizeof(ctypes.c_void_p) != 8 or ctypes.sizeof(ctypes.c_ulong) != 8:
        return None
    client = ctypes.CDLL(_mysql.__file__)
    for name in ("mysql_fetch_row", "mysql_fetch_lengths"):
        binding.add_symbol(name, ctypes.cast(getattr(client, name), ctypes.c_void_p).value)
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
    return client


_client = _client_library()
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
        sizes = _column_bytes(result, rows, fields)
        if fields and int(sizes.max()) > MAX_COLUMN_BYTES:
            return None
        _client.mysql_data_seek(result, 0)
        starts = np.zeros(fields + 1, np.int64)
        np.cumsum(sizes, out=starts[1:])
        data = np.empty(int(starts[-1]), np.uint8)
        offsets = np.zeros((fields, rows + 1), np.int32)
        valid = np.zeros((fields, (rows + 7) // 8), np.uint8)
        nulls = _copy_rows(result, rows, fields, starts, data, offsets, valid)
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


def compile_reader() -> None:
    """Compile (or load from numba's cache) the row loops, so that no read pays for it; `make install` calls it.

    Without mysqlclient there is nothing to read with, and nothing is compiled.

    >>> compile_reader()
    """
    if _client is None:  # pragma: no cover - the suite installs mysqlclient
        return
    empty = np.zeros(1, np.int64)
    _column_bytes(0, 0, 0)
    _copy_rows(0, 0, 0, empty, np.zeros(0, np.uint8), np.zeros((0, 1), np.int32), np.zeros((0, 0), np.uint8))


@intrinsic
def _copy_from_address(typingctx, target, at, address, count):
    """Copy `count` bytes from the memory at `address` to `target[at:]` (a uint8 array)."""

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        source = builder.inttoptr(args[2], ir.IntType(8).as_pointer())
        cgutils.raw_memcpy(builder, builder.gep(array.data, [args[1]]), source, args[3], 1)
        return context.get_dummy_value()

    if not (isinstance(target, types.Array) and target.dtype == types.uint8):
        return None
    if not all(isinstance(t, types.Integer) for t in (at, address, count)):
        return None
    return types.none(target, at, address, count), codegen


@njit(cache=True, nogil=True)
def _column_bytes(result, rows, fields):  # pragma: no cover - compiled
    """The bytes of each column over the stored result's rows (its row cursor ends past them)."""
    sizes = np.zeros(fields, np.int64)
    for _ in range(rows):
        _fetch_row(result)
        lengths = carray(_fetch_lengths(result), fields)
        for c in range(fields):
            sizes[c] += lengths[c]
    return sizes


@njit(cache=True, nogil=True)
def _copy_rows(result, rows, fields, starts, data, offsets, valid):  # pragma: no cover - compiled
    """Copy every value of the stored result into `data` (column c from `starts[c]` on), its
    end into `offsets[c]` and its validity bit into `valid[c]`; returns the NULLs of each column."""
    at = starts[:-1].copy()
    nulls = np.zeros(fields, np.int64)
    for i in range(rows):
        cells = carray(_fetch_row(result), fields)
        lengths = carray(_fetch_lengths(result), fields)
        for c in range(fields):
            if cells[c] == 0:
                nulls[c] += 1
            else:
                valid[c, i >> 3] |= np.uint8(1 << (i & 7))
                _copy_from_address(data, at[c], cells[c], lengths[c])
                at[c] += lengths[c]
            offsets[c, i + 1] = at[c] - starts[c]
    return nulls
