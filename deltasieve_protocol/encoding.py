"""Canonical row encoding and the seeded row and group hashes (spec: openapi/row-encoding.md).

The encoding works on Arrow data whose types follow `LogicalType.arrow()`, so the agent
(rows read from SQLite or PostgreSQL, converted to Arrow) and the warehouse (rows read by
Spark from Parquet, handed over as Arrow) run the very same code on the same values.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from functools import lru_cache
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from deltasieve_protocol import row_kernel
from deltasieve_protocol.defaults import DEFAULT_HASH_BITS
from deltasieve_protocol.types import Column, LogicalType

SUPPORTED_HASH_BITS = (64, 128)

_NULL = b"\x00"
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_CANONICAL_NAN_BITS = np.uint64(0x7FF8000000000000)
_CANONICAL_NAN = struct.pack(">Q", int(_CANONICAL_NAN_BITS))
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")
#: Decimal context wide enough that normalizing never rounds a decimal(38, s).
_WIDE = Context(prec=80)


def canonical_decimal(value: Decimal) -> str:
    """Canonical text of an exact decimal: coefficient without trailing zeros, 'e', exponent.

    >>> canonical_decimal(Decimal("12.50")), canonical_decimal(Decimal("-0.00")), canonical_decimal(Decimal("300"))
    ('125e-1', '0', '3e2')
    """
    if not value.is_finite():
        raise ValueError(f"decimal {value} is not finite")
    if value.is_zero():
        return "0"
    sign, digits, exponent = value.normalize(_WIDE).as_tuple()
    coefficient = "".join(map(str, digits))
    return f"{'-' if sign else ''}{coefficient}e{exponent}"


def _enc_int(v: int) -> bytes:
    return b"i" + _I64.pack(v)


def _enc_float(v: float) -> bytes:
    if math.isnan(v):
        return b"f" + _CANONICAL_NAN
    return b"f" + _F64.pack(v + 0.0)  # + 0.0 turns -0.0 into 0.0


def _enc_decimal(v: Decimal) -> bytes:
    text = canonical_decimal(v).encode("ascii")
    return b"n" + _U32.pack(len(text)) + text


def _enc_text(v: str) -> bytes:
    data = v.encode("utf-8")
    return b"s" + _U32.pack(len(data)) + data


def _enc_bytes(v: bytes) -> bytes:
    return b"b" + _U32.pack(len(v)) + bytes(v)


def _enc_bool(v: bool) -> bytes:
    return b"?\x01" if v else b"?\x00"


def _enc_date(v: dt.date) -> bytes:
    return b"d" + _I32.pack((v - _EPOCH_DATE).days)


def _micros(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _enc_timestamp(v: dt.datetime) -> bytes:
    if v.tzinfo is not None:
        v = v.astimezone(dt.UTC).replace(tzinfo=None)
    return b"T" + _I64.pack(_micros(v - _EPOCH))


def _enc_timestamptz(v: dt.datetime) -> bytes:
    if v.tzinfo is None:
        v = v.replace(tzinfo=dt.UTC)
    return b"Z" + _I64.pack(_micros(v - _EPOCH_TZ))


#: The encoder of each logical type's values; each takes the Python type its kind decodes to
#: (int for int, Decimal for decimal, ...), which the kind vouches for, not the signature.
_ENCODERS: dict[str, Callable[[Any], bytes]] = {
    "int": _enc_int,
    "float": _enc_float,
    "decimal": _enc_decimal,
    "text": _enc_text,
    "bytes": _enc_bytes,
    "bool": _enc_bool,
    "date": _enc_date,
    "timestamp": _enc_timestamp,
    "timestamptz": _enc_timestamptz,
}


def encode_value(type_: LogicalType, value: object) -> bytes:
    """Canonical bytes of one value of the given logical type (None is NULL)."""
    if value is None:
        return _NULL
    return _ENCODERS[type_.kind](value)


def _encode_column_python(type_: LogicalType, array: pa.Array | pa.ChunkedArray) -> list[bytes]:
    """Value by value: the definition the Arrow path below must match bit for bit."""
    encoder = _ENCODERS[type_.kind]
    return [_NULL if v is None else encoder(v) for v in array.to_pylist()]


#: Decimals up to this precision fit their unscaled value in an int64 (the Arrow path).
_INT64_DECIMAL_DIGITS = 18
_EMPTY = pa.scalar(b"", pa.binary())


@dataclass
class _Piece:
    """One column's encodings, in the form the row assembly takes them.

    Each row's head is fixed-width: `fields`, (dtype, values) in order, the values one per
    row or one for all (a tag, a payload, a length prefix, the digits of a decimal).
    `lengths` (None: the whole head) is how many bytes of each head belong to the
    encoding, `keep` (rows x width, None: the first `lengths`) which ones. `data` is what
    follows the head of a length-prefixed value (binary, null where the value is NULL).
    `whole`, instead of all that, is every value's complete encoding (the value-by-value
    path).
    """

    fields: list[tuple[np.dtype, int | np.ndarray]]
    lengths: np.ndarray | None = None
    keep: np.ndarray | None = None
    data: pa.Array | None = None
    whole: pa.Array | None = None

    @property
    def width(self) -> int:
        return sum(np.dtype(dtype).itemsize for dtype, _ in self.fields)

    def mark_nulls(self, array: pa.Array) -> _Piece:
        """Cut the head of every NULL of `array` to one 0 byte (the tag, its first field)."""
        if array.null_count:
            valid = array.is_valid().to_numpy(zero_copy_only=False)
            dtype, tag = self.fields[0]
            self.fields[0] = (dtype, np.where(valid, tag, 0))
            self.lengths = np.where(valid, self.width if self.lengths is None else self.lengths, 1)
            if self.keep is not None:
                self.keep[~valid, 1:] = False
        return self


_TAG = np.dtype("u1")


def _fixed(tag: bytes, values: np.ndarray, dtype: str) -> _Piece:
    """A tag and one fixed-width big-endian payload per value."""
    return _Piece([(_TAG, tag[0]), (np.dtype(dtype), values)])


def _length_prefixed(tag: bytes, data: pa.Array) -> _Piece:
    """`tag` + big-endian u32 byte length + the bytes, per value (data: binary)."""
    lengths = pc.binary_length(data).fill_null(0).to_numpy(zero_copy_only=False)
    return _Piece([(_TAG, tag[0]), (np.dtype(">u4"), lengths)], data=data).mark_nulls(data)


#: Powers of ten an int64 holds, least significant first.
_POWERS = 10 ** np.arange(_INT64_DECIMAL_DIGITS + 1, dtype=np.int64)


def _decimal_piece(array: pa.Array) -> _Piece | None:
    r"""The encodings of a decimal128 array of precision <= 18, its canonical text
    (canonical_decimal) written digit by digit into the head.

    >>> p = _decimal_piece(pa.array([Decimal("12.50"), Decimal("-0.03"), Decimal(0), None], pa.decimal128(4, 2)))
    >>> [bytes(row[keep]) for row, keep in zip(_head_matrix([p], 4), p.keep)]
    [b'n\x00\x00\x00\x06125e-1', b'n\x00\x00\x00\x05-3e-2', b'n\x00\x00\x00\x010', b'\x00']
    """
    if not pa.types.is_decimal128(array.type) or array.type.precision > _INT64_DECIMAL_DIGITS:
        return None
    n = len(array)
    # The low 8 bytes of each 16-byte little-endian value are the unscaled value itself.
    words = np.frombuffer(array.buffers()[1], dtype="<i8")[2 * array.offset : 2 * (array.offset + n) : 2]
    unscaled = np.where(array.is_valid().to_numpy(zero_copy_only=False), words, 0)
    magnitude = np.abs(unscaled)
    zeros = np.zeros(n, dtype=np.int64)
    strip = np.flatnonzero((magnitude % 10 == 0) & (magnitude != 0))
    while strip.size:  # strip trailing decimal zeros (normalize), of the values that have them
        magnitude[strip] //= 10
        zeros[strip] += 1
        strip = strip[magnitude[strip] % 10 == 0]
    exponent = zeros - array.type.scale
    size = np.abs(exponent)
    nonzero = magnitude != 0
    negative = unscaled < 0
    # The text's places: sign, the digits right-aligned (as many as the largest value
    # has), 'e', the exponent's sign and two digits; `keep` picks each value's.
    ndigits = np.maximum(np.searchsorted(_POWERS, magnitude, side="right"), 1)  # zero is the one digit '0'
    places = int(ndigits.max(initial=1))
    digits = np.empty((n, places), np.uint8)
    rest = magnitude.copy()
    for place in range(places - 1, -1, -1):
        digits[:, place] = rest % 10 + ord("0")
        rest //= 10
    keep = np.empty((n, 5 + 1 + places + 4), bool)
    keep[:, :5] = True
    keep[:, 5] = negative
    np.less(np.arange(places, 0, -1), ndigits[:, None] + 1, out=keep[:, 6 : 6 + places])
    tail = keep[:, 6 + places :]
    tail[:, 0], tail[:, 1], tail[:, 2], tail[:, 3] = nonzero, nonzero & (exponent < 0), nonzero & (size >= 10), nonzero
    text = negative + ndigits + nonzero * (2 + (exponent < 0) + (size >= 10))
    piece = _Piece(
        [
            (_TAG, ord("n")),
            (np.dtype(">u4"), text),
            (_TAG, ord("-")),
            (np.dtype((np.uint8, (places,))), digits),
            (_TAG, ord("e")),
            (_TAG, ord("-")),
            (_TAG, size // 10 + ord("0")),
            (_TAG, size % 10 + ord("0")),
        ],
        lengths=5 + text,
        keep=keep,
    )
    return piece.mark_nulls(array)


#: Decimals of at most this many digits are encoded by lookup: the encodings of all their
#: (at most 2 * 10**4 - 1) unscaled values, made once per type, taken row by row (a tenth of the time
#: of `_decimal_piece` on 1M decimal(4, 2) values).
_TABLED_DECIMAL_DIGITS = 4


@lru_cache(maxsize=32)
def _decimal_encodings(precision: int, scale: int) -> pa.Array:
    """The encodings of every decimal(precision, scale) by its unscaled value plus
    10**precision - 1 (NULL's last), made by `_decimal_piece`."""
    bound = 10**precision - 1
    unscaled = np.arange(-bound, bound + 1, dtype=np.int64)
    words = np.stack([unscaled, unscaled >> 63], axis=1)  # 16-byte little-endian two's complement
    values = pa.Array.from_buffers(pa.decimal128(precision, scale), len(unscaled), [None, pa.py_buffer(words)])
    piece = _decimal_piece(values)
    assert piece is not None, "a decimal of up to 18 digits is computed"
    return pa.concat_arrays([_rows([piece], len(values)), pa.array([_NULL], pa.binary())])


def _tabled_decimal_piece(array: pa.Array) -> _Piece | None:
    r"""The encodings of a decimal128 array of at most _TABLED_DECIMAL_DIGITS digits, by lookup.

    >>> p = _tabled_decimal_piece(pa.array([Decimal("12.50"), Decimal("-0.03"), None], pa.decimal128(4, 2)))
    >>> p.whole.to_pylist()
    [b'n\x00\x00\x00\x06125e-1', b'n\x00\x00\x00\x05-3e-2', b'\x00']
    """
    if not pa.types.is_decimal128(array.type) or array.type.precision > _TABLED_DECIMAL_DIGITS:
        return None
    n, bound = len(array), 10**array.type.precision - 1
    words = np.frombuffer(array.buffers()[1], dtype="<i8")[2 * array.offset : 2 * (array.offset + n) : 2]
    valid = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else None
    slots = words + bound if valid is None else np.where(valid, words + bound, 0)
    if slots.size and (slots.min() < 0 or slots.max() > 2 * bound):  # more digits than the type says
        return None
    if valid is not None:
        slots[~valid] = 2 * bound + 1
    return _Piece([], whole=_decimal_encodings(array.type.precision, array.type.scale).take(slots))


def _encode_column_arrow(type_: LogicalType, array: pa.Array) -> _Piece | None:
    """The column's canonical encodings computed on whole arrays; None where only the
    value-by-value path applies (wide decimals, unexpected Arrow types)."""
    kind = type_.kind
    t = array.type
    if kind == "int" and pa.types.is_integer(t):
        piece = _fixed(b"i", array.cast(pa.int64()).fill_null(0).to_numpy(), ">i8")
    elif kind == "float" and pa.types.is_floating(t):
        values = array.cast(pa.float64()).fill_null(0.0).to_numpy() + 0.0  # + 0.0 turns -0.0 into 0.0
        bits = np.where(np.isnan(values), _CANONICAL_NAN_BITS, values.view(np.uint64))
        piece = _fixed(b"f", bits, ">u8")
    elif kind == "text" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return _length_prefixed(b"s", array.cast(pa.binary()))
    elif kind == "bytes" and (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        return _length_prefixed(b"b", array.cast(pa.binary()))
    elif kind == "bool" and pa.types.is_boolean(t):
        piece = _fixed(b"?", array.fill_null(False).to_numpy(zero_copy_only=False), "u1")
    elif kind == "date" and (pa.types.is_date32(t) or pa.types.is_date64(t)):
        piece = _fixed(b"d", array.cast(pa.date32()).cast(pa.int32()).fill_null(0).to_numpy(), ">i4")
    elif kind in ("timestamp", "timestamptz") and pa.types.is_timestamp(t) and t.unit == "us":
        # Naive values count from the naive epoch, aware ones are stored in UTC: either way
        # the stored integer is what the value-by-value path computes.
        micros = array.view(pa.int64()).fill_null(0).to_numpy()
        piece = _fixed(b"T" if kind == "timestamp" else b"Z", micros, ">i8")
    elif kind == "decimal":
        return _tabled_decimal_piece(array) or _decimal_piece(array)
    else:
        return None
    return piece.mark_nulls(array)


def _piece(type_: LogicalType, array: pa.Array | pa.ChunkedArray) -> _Piece:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    piece = _encode_column_arrow(type_, array)
    if piece is None:
        piece = _Piece([], whole=pa.array(_encode_column_python(type_, array), pa.binary()))
    return piece


def _head_matrix(pieces: list[_Piece], rows: int) -> np.ndarray:
    """The heads of the pieces side by side, rows x their widths (uint8)."""
    fields = [field for p in pieces for field in p.fields]
    record = np.empty(rows, np.dtype([(f"f{i}", dtype) for i, (dtype, _) in enumerate(fields)]))
    for i, (_, values) in enumerate(fields):
        record[f"f{i}"] = values
    return record.view(np.uint8).reshape(rows, record.dtype.itemsize)


def _heads(pieces: list[_Piece], rows: int) -> list[pa.Array]:
    """The heads of consecutive pieces as one binary array (none for no piece): each row's
    kept bytes, in order."""
    if not pieces:
        return []
    matrix = _head_matrix(pieces, rows)
    if all(p.lengths is None for p in pieces):
        data = matrix.reshape(-1)
        offsets = np.arange(0, (rows + 1) * matrix.shape[1], matrix.shape[1], dtype=np.int32)
    else:
        keep = np.ones(matrix.shape, bool)
        sizes = np.zeros(rows, np.int64)
        start = 0
        for p in pieces:
            width = p.width
            if p.keep is not None:
                keep[:, start : start + width] = p.keep
            elif p.lengths is not None:
                np.less(np.arange(width), p.lengths[:, None], out=keep[:, start : start + width])
            sizes += width if p.lengths is None else p.lengths
            start += width
        data = matrix[keep]
        offsets = np.zeros(rows + 1, np.int32)
        np.cumsum(sizes, dtype=np.int32, out=offsets[1:])
    return [pa.BinaryArray.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])]


def _rows(pieces: list[_Piece], rows: int) -> pa.Array:
    """The concatenation of the pieces' encodings, row by row: one binary array.

    The heads between two pieces with bytes of their own (`data`, `whole`) are put
    together with NumPy; one Arrow join then copies each row's parts into place, skipping
    the data of NULLs.
    """
    parts: list[pa.Array] = []
    waiting: list[_Piece] = []
    for piece in pieces:
        if piece.whole is None:
            waiting.append(piece)
        if piece.data is not None or piece.whole is not None:
            parts += _heads(waiting, rows) + [piece.data if piece.whole is None else piece.whole]
            waiting = []
    parts += _heads(waiting, rows)
    if not parts:
        return pa.array([b""] * rows, pa.binary())
    if len(parts) == 1 and not parts[0].null_count:
        return parts[0]
    return pc.binary_join_element_wise(*parts, _EMPTY, null_handling="skip")


def _encode_column(type_: LogicalType, array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The canonical encoding of every value of one column, as a binary array."""
    if len(array) == 0:
        return pa.array([], pa.binary())
    return _rows([_piece(type_, array)], len(array))


def reference_encoded_rows(batch: pa.RecordBatch | pa.Table, columns: Sequence[Column]) -> pa.Array:
    """Canonical bytes of every row of `batch` as one binary array, columns taken in the order of
    `columns`, assembled with NumPy and Arrow: the definition `encoded_rows` is tested against."""
    if batch.num_rows == 0:
        return pa.array([], pa.binary())
    return _rows([_piece(c.type, batch.column(c.name)) for c in columns], batch.num_rows)


def row_bytes(batch: pa.RecordBatch | pa.Table, columns: Sequence[Column]) -> row_kernel.EncodedRows:
    """Canonical bytes of every row of `batch`, columns taken in the order of `columns`, as the
    compiled kernel lays them out (one buffer and its offsets); what the kernel does not
    encode itself is encoded column by column as `reference_encoded_rows` does."""
    return row_kernel.encode(batch, columns, _encode_column)


def encoded_rows(batch: pa.RecordBatch | pa.Table, columns: Sequence[Column]) -> pa.Array:
    """Canonical bytes of every row of `batch` as one binary array, columns taken in the order of `columns`."""
    if batch.num_rows == 0:
        return pa.array([], pa.binary())
    return row_bytes(batch, columns).to_arrow()


def encode_rows(batch: pa.RecordBatch | pa.Table, columns: Sequence[Column]) -> list[bytes]:
    """Canonical bytes of every row of `batch`, columns taken in the order of `columns`."""
    return encoded_rows(batch, columns).to_pylist()


def _hasher(bits: int) -> Callable[[bytes, int], int]:
    if bits == 128:
        return xxhash.xxh3_128_intdigest
    if bits == 64:
        return xxhash.xxh3_64_intdigest
    raise ValueError(f"hash width {bits} not supported; use one of {SUPPORTED_HASH_BITS}")


def row_hashes(
    batch: pa.RecordBatch | pa.Table, columns: Sequence[Column], seed: int, bits: int = DEFAULT_HASH_BITS
) -> list[int]:
    """Seeded hash of every row: xxh3 (64 or 128 bits) of its canonical encoding."""
    return list(map(_hasher(bits), encode_rows(batch, columns), repeat(seed)))


_DIGESTS = {64: xxhash.xxh3_64_digest, 128: xxhash.xxh3_128_digest}
#: Row hashes are summed in 32-bit limbs held in 64-bit lanes: a group of up to 2**32 rows
#: cannot overflow a lane, so the sums need no Python integers.
LIMB_BITS = 32
_LIMB_MASK = np.uint64((1 << LIMB_BITS) - 1)


def row_hash_limbs(
    batch: pa.RecordBatch | pa.Table, columns: Sequence[Column], seed: int, bits: int = DEFAULT_HASH_BITS
) -> np.ndarray:
    """The row hashes of `row_hashes` as a (rows, bits/32) uint64 array of 32-bit limbs, most significant first."""
    if bits not in _DIGESTS:
        raise ValueError(f"hash width {bits} not supported; use one of {SUPPORTED_HASH_BITS}")
    data = b"".join(map(_DIGESTS[bits], encode_rows(batch, columns), repeat(seed)))
    return np.frombuffer(data, dtype=">u4").reshape(-1, bits // LIMB_BITS).astype(np.uint64)


def limbs_from_bytes(hashes: Sequence[bytes], bits: int = DEFAULT_HASH_BITS) -> np.ndarray:
    """Wire hashes (big-endian, bits/8 bytes each) as limbs, like `row_hash_limbs`."""
    return np.frombuffer(b"".join(hashes), dtype=">u4").reshape(-1, bits // LIMB_BITS).astype(np.uint64)


def carry_limbs(sums: np.ndarray) -> np.ndarray:
    """Limb sums (each below 2**64) reduced to one hash modulo 2**bits, still as limbs.

    >>> carry_limbs(np.array([[0, 0, 1, 2**32 + 5]], np.uint64)).tolist()
    [[0, 0, 2, 5]]
    """
    out = np.empty_like(sums)
    carry = np.zeros(len(sums), np.uint64)
    for i in range(sums.shape[1] - 1, -1, -1):
        total = sums[:, i] + carry  # below 2**64: a lane holds under 2**32 limbs plus their carry
        out[:, i] = total & _LIMB_MASK
        carry = total >> np.uint64(LIMB_BITS)
    return out


def limbs_to_bytes(limbs: np.ndarray) -> list[bytes]:
    """Carried limbs back to wire hashes (big-endian bytes)."""
    data = limbs.astype(">u4").tobytes()
    width = limbs.shape[1] * LIMB_BITS // 8
    return [data[i : i + width] for i in range(0, len(data), width)]


def combine(hashes: Iterable[int], bits: int = DEFAULT_HASH_BITS) -> int:
    """Group hash: the sum of the row hashes modulo 2**bits.

    Additive, so a group's hash minus the hashes of rows that left it is the hash of the
    rows that stayed; that is what lets the warehouse check a shrunken group locally.

    >>> combine([2**128 - 1, 2], bits=128)
    1
    """
    return sum(hashes) % (1 << bits)


def hash_to_bytes(value: int, bits: int = DEFAULT_HASH_BITS) -> bytes:
    """Fixed-width big-endian bytes of a hash, as it travels on the wire."""
    return value.to_bytes(bits // 8, "big")


def hash_from_bytes(data: bytes) -> int:
    return int.from_bytes(data, "big")
