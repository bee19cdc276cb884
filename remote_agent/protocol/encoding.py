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
from decimal import Context, Decimal
from itertools import repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from .types import Column, LogicalType

#: Group hashes default to 128 bits; 64 is allowed where a smaller hash is worth the risk.
DEFAULT_HASH_BITS = 128
SUPPORTED_HASH_BITS = (64, 128)

_NULL = b"\x00"
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_CANONICAL_NAN = struct.pack(">Q", 0x7FF8000000000000)
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


_ENCODERS: dict[str, Callable[[object], bytes]] = {
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


_BINARY_NULL = pa.scalar(_NULL, pa.binary())
#: Decimals up to this precision fit their unscaled value in an int64 (the Arrow path).
_INT64_DECIMAL_DIGITS = 18


def _tagged(tag: bytes, body: np.ndarray) -> pa.Array:
    """A binary array of `tag` + each row of `body` (an n x width uint8 matrix)."""
    n, width = body.shape
    out = np.empty((n, width + 1), dtype=np.uint8)
    out[:, 0] = tag[0]
    out[:, 1:] = body
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width + 1), n, [None, pa.py_buffer(out.tobytes())])
    return fixed.cast(pa.binary())


def _big_endian(values: np.ndarray, dtype: str) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(values.astype(dtype)).view(np.uint8).reshape(len(values), width)


def _length_prefixed(tag: bytes, data: pa.Array) -> pa.Array:
    """`tag` + big-endian u32 byte length + the bytes, per value (data: binary)."""
    lengths = pc.binary_length(data).fill_null(0).to_numpy(zero_copy_only=False)
    return pc.binary_join_element_wise(_tagged(tag, _big_endian(lengths, ">u4")), data, pa.scalar(b"", pa.binary()))


def _decimal_text(array: pa.Array) -> pa.Array | None:
    """canonical_decimal of every value of a decimal128 array of precision <= 18, as binary."""
    if not pa.types.is_decimal128(array.type) or array.type.precision > _INT64_DECIMAL_DIGITS:
        return None
    # The low 8 bytes of each 16-byte little-endian value are the unscaled value itself.
    words = np.frombuffer(array.buffers()[1], dtype="<i8")[2 * array.offset : 2 * (array.offset + len(array)) : 2]
    unscaled = np.where(array.is_valid().to_numpy(zero_copy_only=False), words, 0)
    magnitude = np.abs(unscaled)
    zeros = np.zeros(len(array), dtype=np.int64)
    for _ in range(_INT64_DECIMAL_DIGITS + 1):  # strip trailing decimal zeros (normalize)
        strip = (magnitude % 10 == 0) & (magnitude != 0)
        if not strip.any():
            break
        magnitude = np.where(strip, magnitude // 10, magnitude)
        zeros += strip
    text = pc.binary_join_element_wise(
        pc.if_else(pa.array(unscaled < 0), "-", ""),
        pa.array(magnitude).cast(pa.string()),
        "e",
        pa.array(zeros - array.type.scale).cast(pa.string()),
        "",
    )
    return pc.if_else(pa.array(unscaled == 0), "0", text).cast(pa.binary())


def _encode_column_arrow(type_: LogicalType, array: pa.Array) -> pa.Array | None:
    """The column's canonical encodings computed on whole arrays; None where only the
    value-by-value path applies (wide decimals, unexpected Arrow types)."""
    kind = type_.kind
    t = array.type
    if kind == "int" and pa.types.is_integer(t):
        body = _big_endian(array.cast(pa.int64()).fill_null(0).to_numpy(), ">i8")
        encoded = _tagged(b"i", body)
    elif kind == "float" and pa.types.is_floating(t):
        values = array.cast(pa.float64()).fill_null(0.0).to_numpy() + 0.0  # + 0.0 turns -0.0 into 0.0
        bits = np.ascontiguousarray(values.astype(">f8")).view(">u8").copy()
        bits[np.isnan(values)] = 0x7FF8000000000000
        encoded = _tagged(b"f", bits.view(np.uint8).reshape(len(values), 8))
    elif kind == "text" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
        encoded = _length_prefixed(b"s", array.cast(pa.binary()))
    elif kind == "bytes" and (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        encoded = _length_prefixed(b"b", array.cast(pa.binary()))
    elif kind == "bool" and pa.types.is_boolean(t):
        encoded = pc.if_else(array, pa.scalar(b"?\x01", pa.binary()), pa.scalar(b"?\x00", pa.binary()))
    elif kind == "date" and (pa.types.is_date32(t) or pa.types.is_date64(t)):
        days = array.cast(pa.date32()).cast(pa.int32()).fill_null(0).to_numpy()
        encoded = _tagged(b"d", _big_endian(days, ">i4"))
    elif kind in ("timestamp", "timestamptz") and pa.types.is_timestamp(t) and t.unit == "us":
        # Naive values count from the naive epoch, aware ones are stored in UTC: either way
        # the stored integer is what the value-by-value path computes.
        micros = array.view(pa.int64()).fill_null(0).to_numpy()
        encoded = _tagged(b"T" if kind == "timestamp" else b"Z", _big_endian(micros, ">i8"))
    elif kind == "decimal":
        text = _decimal_text(array)
        if text is None:
            return None
        encoded = _length_prefixed(b"n", text)
    else:
        return None
    return pc.if_else(array.is_valid(), encoded, _BINARY_NULL)


def _encode_column(type_: LogicalType, array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if len(array) == 0:
        return pa.array([], pa.binary())
    encoded = _encode_column_arrow(type_, array)
    if encoded is None:
        encoded = pa.array(_encode_column_python(type_, array), pa.binary())
    return encoded


def encode_rows(batch: pa.RecordBatch | pa.Table, columns: Sequence[Column]) -> list[bytes]:
    """Canonical bytes of every row of `batch`, columns taken in the order of `columns`."""
    if batch.num_rows == 0:
        return []
    parts = [_encode_column(c.type, batch.column(c.name)) for c in columns]
    return pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.binary())).to_pylist()


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
