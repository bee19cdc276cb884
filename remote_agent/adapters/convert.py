"""Conversions from raw database values to the canonical Python value of a logical type.

Shared by adapters whose drivers hand back loosely typed values (SQLite stores dates as
text, booleans as integers and decimals as floats). A value that cannot be read as its
column's type raises ValueError with the offending value in the message.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from deltasieve_protocol.types import LogicalType

_TRUE = {"1", "t", "true", "y", "yes", "on"}
_FALSE = {"0", "f", "false", "n", "no", "off"}


def _to_int(v: Any) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        return int(v.strip())
    raise ValueError(f"not an integer: {v!r}")


def _to_float(v: Any) -> float:
    if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str):
        return float(v)
    raise ValueError(f"not a number: {v!r}")


#: Enough digits for any decimal(38, s) value (Python's default context keeps only 28).
_WIDE = Context(prec=80)


def decimal_converter(type_: LogicalType) -> Callable[[Any], Decimal]:
    """The converter of a decimal column: the value at the column's scale, exactly, or ValueError.

    A float is read as its shortest text (SQLite keeps decimals as REAL); a value with more
    fractional digits than the scale, or too many integer digits, is refused, never rounded.

    >>> convert = decimal_converter(LogicalType.parse("decimal(38,10)"))
    >>> convert(1.5), convert(10**27), convert("-0.0000000001")
    (Decimal('1.5000000000'), Decimal('1000000000000000000000000000.0000000000'), Decimal('-1E-10'))
    >>> convert(0.123456789012345)
    Traceback (most recent call last):
    ...
    ValueError: decimal 0.123456789012345 has more than 10 fractional digits: decimal(38,10) would round it
    >>> convert(1.2345678901234568e28)
    Traceback (most recent call last):
    ...
    ValueError: decimal 1.2345678901234568e+28 does not fit decimal(38,10)
    """
    quantum = Decimal(1).scaleb(-type_.scale)
    limit = Decimal(10).scaleb(type_.precision - type_.scale - 1)  # exact, no context rounding

    def convert(v: Any) -> Decimal:
        if isinstance(v, Decimal):
            d = v
        elif isinstance(v, float):
            d = Decimal(repr(v))  # shortest repr: 12.34 stays 12.34
        elif isinstance(v, (int, str)) and not isinstance(v, bool):
            try:
                d = Decimal(str(v).strip())
            except InvalidOperation:
                raise ValueError(f"not a decimal: {v!r}") from None
        else:
            raise ValueError(f"not a decimal: {v!r}")
        if not d.is_finite():
            raise ValueError(f"decimal {v!r} is not finite")
        q = d.quantize(quantum, context=_WIDE)
        if q != d:  # a value is delivered exactly or refused, never rounded to the scale
            raise ValueError(f"decimal {v!r} has more than {type_.scale} fractional digits: {type_} would round it")
        if q.copy_abs() >= limit:  # copy_abs: abs() would round to the context's 28 digits
            raise ValueError(f"decimal {v!r} does not fit {type_}")
        return q

    return convert


def _to_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8")
    if isinstance(v, (int, float, Decimal)):
        return str(v)
    raise ValueError(f"not text: {v!r}")


def _to_bytes(v: Any) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    raise ValueError(f"not bytes: {v!r}")


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        s = v.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    raise ValueError(f"not a boolean: {v!r}")


def _to_date(v: Any) -> dt.date:
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    if isinstance(v, str):
        return dt.date.fromisoformat(v.strip())
    raise ValueError(f"not a date: {v!r}")


def _parse_datetime(v: Any) -> dt.datetime:
    if isinstance(v, dt.datetime):
        return v
    if isinstance(v, dt.date):
        return dt.datetime(v.year, v.month, v.day)
    if isinstance(v, str):
        return dt.datetime.fromisoformat(v.strip())
    raise ValueError(f"not a timestamp: {v!r}")


def _to_timestamp(v: Any) -> dt.datetime:
    d = _parse_datetime(v)
    if d.tzinfo is not None:
        d = d.astimezone(dt.UTC).replace(tzinfo=None)
    return d


def _to_timestamptz(v: Any) -> dt.datetime:
    d = _parse_datetime(v)
    if d.tzinfo is None:
        return d.replace(tzinfo=dt.UTC)
    return d.astimezone(dt.UTC)


_SIMPLE: dict[str, Callable[[Any], Any]] = {
    "int": _to_int,
    "float": _to_float,
    "text": _to_text,
    "bytes": _to_bytes,
    "bool": _to_bool,
    "date": _to_date,
    "timestamp": _to_timestamp,
    "timestamptz": _to_timestamptz,
}


def converter_for(type_: LogicalType) -> Callable[[Any], Any]:
    """The lenient converter for `type_` (None passes through as NULL)."""
    inner = decimal_converter(type_) if type_.kind == "decimal" else _SIMPLE[type_.kind]

    def convert(v: Any) -> Any:
        return None if v is None else inner(v)

    return convert
