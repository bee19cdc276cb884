"""The MySQL/MariaDB reader's loops: a stored result's rows, as the C client holds them, copied into Arrow's buffers.

The agent's MySQL adapter (remote_agent/adapters/mysql_result.py) stores a result with the C
client library mysqlclient is linked against and hands these loops the result's address and
the addresses of the library's `mysql_fetch_row` and `mysql_fetch_lengths`, as integers. The
loops call the two through those addresses: code built ahead of time cannot link to a library
by name, and the addresses are those of the very library that made the connection
(libmariadb or MySQL's libmysqlclient alike). A `MYSQL_ROW` is an array of `char*` (0 for
NULL) and its lengths an array of `unsigned long`: both 64-bit words on the 64-bit Linux
machines the agent runs on (the adapter checks, and reads rows through mysqlclient elsewhere).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_WORD = ir.IntType(64)
_BYTE_POINTER = ir.IntType(8).as_pointer()


@intrinsic
def call_at(typingctx, function, argument):
    """Call the C function at address `function`, of one pointer and returning a pointer, with
    the address `argument`; its result as an integer address (0: NULL)."""

    def codegen(context, builder, signature, args):
        callee_type = ir.FunctionType(_BYTE_POINTER, [_BYTE_POINTER])
        callee = builder.inttoptr(args[0], callee_type.as_pointer())
        result = builder.call(callee, [builder.inttoptr(args[1], _BYTE_POINTER)])
        return builder.ptrtoint(result, _WORD)

    if not all(isinstance(t, types.Integer) for t in (function, argument)):
        return None
    return types.int64(types.int64, types.int64), codegen


@intrinsic
def word_at(typingctx, address, index):
    """The 64-bit word `index` of the array of words at `address`."""

    def codegen(context, builder, signature, args):
        return builder.load(builder.gep(builder.inttoptr(args[0], _WORD.as_pointer()), [args[1]]))

    if not all(isinstance(t, types.Integer) for t in (address, index)):
        return None
    return types.int64(types.int64, types.int64), codegen


@intrinsic
def copy_from_address(typingctx, target, at, address, count):
    """Copy `count` bytes from the memory at `address` to `target[at:]` (a uint8 array)."""

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        source = builder.inttoptr(args[2], _BYTE_POINTER)
        cgutils.raw_memcpy(builder, builder.gep(array.data, [args[1]]), source, args[3], 1)
        return context.get_dummy_value()

    if not (isinstance(target, types.Array) and target.dtype == types.uint8):
        return None
    if not all(isinstance(t, types.Integer) for t in (at, address, count)):
        return None
    return types.none(target, types.int64, types.int64, types.int64), codegen


@njit(cache=True, nogil=True)
def column_bytes(fetch_row, fetch_lengths, result, rows, fields):  # pragma: no cover - compiled
    """The bytes of each column over the stored result's `rows` rows of `fields` columns (its
    row cursor ends past them); `fetch_row` and `fetch_lengths`: the client's functions' addresses."""
    sizes = np.zeros(fields, np.int64)
    for _ in range(rows):
        call_at(fetch_row, result)
        lengths = call_at(fetch_lengths, result)
        for c in range(fields):
            sizes[c] += word_at(lengths, c)
    return sizes


@njit(cache=True, nogil=True)
def copy_rows(fetch_row, fetch_lengths, result, rows, fields, starts, data, offsets, valid):  # pragma: no cover
    """Copy every value of the stored result into `data` (column c from `starts[c]` on), its
    end into `offsets[c]` and its validity bit into `valid[c]`; returns the NULLs of each column."""
    at = starts[:-1].copy()
    nulls = np.zeros(fields, np.int64)
    for i in range(rows):
        cells = call_at(fetch_row, result)
        lengths = call_at(fetch_lengths, result)
        for c in range(fields):
            cell = word_at(cells, c)
            if cell == 0:
                nulls[c] += 1
            else:
                length = word_at(lengths, c)
                valid[c, i >> 3] |= np.uint8(1 << (i & 7))
                copy_from_address(data, at[c], cell, length)
                at[c] += length
            offsets[c, i + 1] = at[c] - starts[c]
    return nulls
