"""Canonical row encoding and the seeded row and group hashes (spec: openapi/row-encoding.md).

The encoding works on Arrow data whose types follow `LogicalType.arrow()`, so the agent
(rows read from SQLite or PostgreSQL, converted to Arrow) and the warehouse (rows read by
Spark from Parquet, handed over as Arrow) run the very same code on the same values.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import Context, Decimal
from typing import Callable, Iterable, Sequence

import pyarrow as pa
import xxhash

from .types import Column, LogicalType

#: Group hashes default to 128 bits; 64 is allowed where a smaller hash is worth the risk.
DEFAULT_HASH_BITS = 128
SUPPORTED_HASH_BITS = (64, 128)

_NULL = b"\x00"
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
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
        v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return b"T" + _I64.pack(_micros(v - _EPOCH))


def _enc_timestamptz(v: dt.datetime) -> bytes:
    if v.tzinfo is None:
        v = v.replace(tzinfo=dt.timezone.utc)
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


def _encode_column(type_: LogicalType, array: pa.Array | pa.ChunkedArray) -> list[bytes]:
    encoder = _ENCODERS[type_.kind]
    return [_NULL if v is None else encoder(v) for v in array.to_pylist()]


def encode_rows(batch: pa.RecordBatch | pa.Table, columns: Sequence[Column]) -> list[bytes]:
    """Canonical bytes of every row of `batch`, columns taken in the order of `columns`."""
    if batch.num_rows == 0:
        return []
    parts = [_encode_column(c.type, batch.column(c.name)) for c in columns]
    return [b"".join(row) for row in zip(*parts)]


def _hasher(bits: int) -> Callable[[bytes, int], int]:
    if bits == 128:
        return xxhash.xxh3_128_intdigest
    if bits == 64:
        return xxhash.xxh3_64_intdigest
    raise ValueError(f"hash width {bits} not supported; use one of {SUPPORTED_HASH_BITS}")


def row_hashes(batch: pa.RecordBatch | pa.Table, columns: Sequence[Column], seed: int, bits: int = DEFAULT_HASH_BITS) -> list[int]:
    """Seeded hash of every row: xxh3 (64 or 128 bits) of its canonical encoding."""
    hasher = _hasher(bits)
    return [hasher(row, seed) for row in encode_rows(batch, columns)]


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
