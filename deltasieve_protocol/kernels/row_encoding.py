"""The canonical row encoding in numba: a batch's rows in one call, no Python object per row (`encode`).

The kernel takes every batch in one layout of plain NumPy arrays (deltasieve_protocol/row_kernel.py
lays a batch out and checks it), so that one compiled version serves every schema: per column
a kind (row_kinds.py), a tag byte and a parameter, and either one int64 per row or the bytes
of each row. It writes the rows one after another into one byte buffer, what
`hash_slices` (xxh3.py) hashes row by row; the rows are bit for bit those of
`encoding.reference_encoded_rows` (spec: openapi/row-encoding.md).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from deltasieve_protocol.kernels.byte_intrinsics import copy_bytes, store_be32, store_be64
from deltasieve_protocol.kernels.row_kinds import DAYS, DECIMAL, FLAG, FLOAT, PREFIXED, VERBATIM, WORD

_NULL = np.uint8(0)
_U = np.uint64
_SIGN64 = _U(0x8000000000000000)
_EXPONENT64 = _U(0x7FF0000000000000)
_MANTISSA64 = _U(0x000FFFFFFFFFFFFF)
_CANONICAL_NAN = _U(0x7FF8000000000000)


@njit(cache=True, nogil=True)
def _put_digits(out, at, magnitude):
    """Write the decimal digits of the uint64 `magnitude` at `out[at]`; return where they end."""
    digits = 1
    rest = magnitude // _U(10)
    while rest:
        digits += 1
        rest //= _U(10)
    for k in range(digits - 1, -1, -1):
        out[at + k] = np.uint8(ord("0") + magnitude % _U(10))
        magnitude //= _U(10)
    return at + digits


@njit(cache=True, nogil=True)
def _put_decimal(out, at, unscaled, scale):
    """Write the length and canonical text of the decimal `unscaled` * 10**-`scale` at
    `out[at]` (after its tag): '0', or the coefficient without its trailing zeros, 'e' and
    the exponent. Return where it ends."""
    text = at + 4
    end = text
    if unscaled == 0:
        out[end] = np.uint8(ord("0"))
        end += 1
    else:
        if unscaled < 0:
            out[end] = np.uint8(ord("-"))
            end += 1
        magnitude = _U(unscaled)
        if unscaled < 0:
            magnitude = _U(0) - magnitude  # two's complement: right for the least int64 too
        exponent = -scale
        while magnitude % _U(10) == _U(0):
            magnitude //= _U(10)
            exponent += 1
        end = _put_digits(out, end, magnitude)
        out[end] = np.uint8(ord("e"))
        end += 1
        if exponent < 0:
            out[end] = np.uint8(ord("-"))
            end += 1
            exponent = -exponent
        end = _put_digits(out, end, _U(exponent))
    store_be32(out, at, end - text)
    return end


@njit(cache=True, nogil=True)
def encode(kinds, tags, params, slots, values, valid, offsets, data, out, starts):
    """Write the rows' encodings one after another into `out` (room for the widest values,
    uint8), where each starts into `starts` (int64, rows + 1); return where they end."""
    columns = kinds.shape[0]
    rows = valid.shape[1]
    at = 0
    for r in range(rows):
        starts[r] = at
        for c in range(columns):
            kind = kinds[c]
            slot = slots[c]
            if not valid[c, r]:
                out[at] = _NULL
                at += 1
                continue
            if kind != VERBATIM:
                out[at] = np.uint8(tags[c])
                at += 1
            if kind == WORD:
                store_be64(out, at, values[slot, r])
                at += 8
            elif kind == FLOAT:
                bits = _U(values[slot, r])
                if bits & _EXPONENT64 == _EXPONENT64 and bits & _MANTISSA64 != _U(0):
                    bits = _CANONICAL_NAN
                elif bits == _SIGN64:
                    bits = _U(0)
                store_be64(out, at, bits)
                at += 8
            elif kind == DAYS:
                store_be32(out, at, values[slot, r])
                at += 4
            elif kind == FLAG:
                out[at] = np.uint8(values[slot, r] != 0)
                at += 1
            elif kind == DECIMAL:
                at = _put_decimal(out, at, values[slot, r], params[c])
            else:
                begin = offsets[slot, r]
                size = offsets[slot, r + 1] - begin
                if kind == PREFIXED:
                    store_be32(out, at, size)
                    at += 4
                copy_bytes(out, at, data, begin, size)
                at += size
    starts[rows] = at
    return at
