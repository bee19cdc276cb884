"""Reading a column as a stronger type than its source declares (a view's `column_types`).

A legacy database may keep timestamps in a TEXT column, integers in text, flags as 0/1
integers. A view may ask for such a column to be read as the type its values hold; only
the (declared, asked) pairs of `READABLE` are allowed. The agent reads the column's raw
values with `converter` (strict: a value that does not read as the asked type exactly is
an error naming it, never a guess), both when the view is defined (a sample) and at every
sync. Timestamps as text are read in UTC only, so that a ranged read can compare the
stored text with a bound (`text_bound`) exactly.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from deltasieve_protocol.types import LogicalType

#: Declared kind -> the kinds a column of it may be read as.
READABLE: dict[str, tuple[str, ...]] = {
    "text": ("int", "decimal", "bool", "date", "timestamp", "timestamptz"),
    "int": ("bool",),
    "decimal": ("int",),
}
#: Text read as a timestamp: ISO 8601 with a space or a T, seconds, up to six fractional
#: digits, and no zone or a UTC one (Z, +00:00, -00:00).
TIMESTAMP_TEXT = "YYYY-MM-DD HH:MM:SS[.ffffff] or YYYY-MM-DDTHH:MM:SS[.ffffff], in UTC (no zone, Z or +00:00)"
_TIMESTAMP_RE = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)(Z|[+-]00:00)?")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_INT_RE = re.compile(r"[+-]?\d{1,19}")
_DECIMAL_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_BOOL_TEXT = {"1": True, "0": False, "true": True, "false": False, "t": True, "f": False}
#: Raw values quoted in messages are cut to this many characters.
_QUOTED = 200


def allowed_pairs() -> str:
    """The pairs `READABLE` allows, for messages.

    >>> allowed_pairs()
    'text -> int, decimal(p,s), bool, date, timestamp, timestamptz; int -> bool; decimal(p,s) -> int'
    """
    shown = lambda kind: "decimal(p,s)" if kind == "decimal" else kind  # noqa: E731
    return "; ".join(f"{shown(d)} -> {', '.join(map(shown, asked))}" for d, asked in READABLE.items())


def check_pair(declared: LogicalType, asked: LogicalType) -> None:
    """Refuse (ValueError) a pair `READABLE` does not allow.

    >>> check_pair(LogicalType.parse("text"), LogicalType.parse("timestamp"))
    >>> check_pair(LogicalType.parse("float"), LogicalType.parse("int"))
    Traceback (most recent call last):
    ...
    ValueError: a float column cannot be read as int; allowed (declared -> asked): text -> int, decimal(p,s), bool, date, timestamp, timestamptz; int -> bool; decimal(p,s) -> int
    """
    if asked.kind not in READABLE.get(declared.kind, ()):
        raise ValueError(
            f"a {declared} column cannot be read as {asked}; allowed (declared -> asked): {allowed_pairs()}"
        )


def quoted(value: Any) -> str:
    """A raw value as messages quote it, cut to a bounded length.

    >>> quoted("2026-13-01"), len(quoted("x" * 500))
    ("'2026-13-01'", 203)
    """
    text = repr(value)
    return text if len(text) <= _QUOTED else text[:_QUOTED] + "..."


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8")
    raise ValueError(f"{quoted(value)} is not text")


def _timestamp(value: Any) -> dt.datetime:
    text = _text(value)
    match = _TIMESTAMP_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{quoted(value)} is not a timestamp written {TIMESTAMP_TEXT}")
    try:
        return dt.datetime.fromisoformat(f"{match.group(1)} {match.group(2)}")
    except ValueError as exc:
        raise ValueError(f"{quoted(value)} is not a timestamp: {exc}") from None


def _timestamptz(value: Any) -> dt.datetime:
    return _timestamp(value).replace(tzinfo=dt.UTC)


def _date(value: Any) -> dt.date:
    text = _text(value)
    if _DATE_RE.fullmatch(text) is None:
        raise ValueError(f"{quoted(value)} is not a date written YYYY-MM-DD")
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{quoted(value)} is not a date: {exc}") from None


def _int(value: Any) -> int:
    if isinstance(value, str):
        if _INT_RE.fullmatch(value) is None:
            raise ValueError(f"{quoted(value)} is not an integer written in digits")
        number = int(value)
    elif isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        if not Decimal(value).is_finite() or Decimal(value) != int(value):
            raise ValueError(f"{quoted(value)} is not an integer")
        number = int(value)
    else:
        raise ValueError(f"{quoted(value)} is not an integer")
    if not -(2**63) <= number < 2**63:
        raise ValueError(f"{quoted(value)} does not fit a 64-bit integer")
    return number


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        flag = _BOOL_TEXT.get(value.lower())
        if flag is None:
            raise ValueError(f"{quoted(value)} is not a boolean (0, 1, true, false, t or f)")
        return flag
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool) and value in (0, 1):
        return value == 1
    raise ValueError(f"{quoted(value)} is not a boolean (0 or 1)")


def _decimal(asked: LogicalType) -> Callable[[Any], Decimal]:
    quantum = Decimal(1).scaleb(-asked.scale)
    limit = Decimal(1).scaleb(asked.precision - asked.scale)

    def convert(value: Any) -> Decimal:
        text = _text(value)
        if _DECIMAL_RE.fullmatch(text) is None:
            raise ValueError(f"{quoted(value)} is not a decimal written in digits")
        try:
            number = Decimal(text)
            exact = number.quantize(quantum)
        except InvalidOperation:
            raise ValueError(f"{quoted(value)} does not fit {asked}") from None
        if exact != number:
            raise ValueError(f"{quoted(value)} has more than {asked.scale} fractional digits ({asked})")
        if exact.copy_abs() >= limit:
            raise ValueError(f"{quoted(value)} does not fit {asked}")
        return exact

    return convert


_SIMPLE: dict[str, Callable[[Any], Any]] = {
    "int": _int,
    "bool": _bool,
    "date": _date,
    "timestamp": _timestamp,
    "timestamptz": _timestamptz,
}


def converter(declared: LogicalType, asked: LogicalType) -> Callable[[Any], Any]:
    """The strict reader of a raw value of a `declared` column as `asked` (None stays NULL).

    >>> read = converter(LogicalType.parse("text"), LogicalType.parse("timestamp"))
    >>> read("2026-11-27T03:40:00.5Z"), read(None)
    (datetime.datetime(2026, 11, 27, 3, 40, 0, 500000), None)
    >>> read("2026-11-27 03:40")
    Traceback (most recent call last):
    ...
    ValueError: '2026-11-27 03:40' is not a timestamp written YYYY-MM-DD HH:MM:SS[.ffffff] or YYYY-MM-DDTHH:MM:SS[.ffffff], in UTC (no zone, Z or +00:00)
    >>> converter(LogicalType.parse("text"), LogicalType.parse("decimal(6,2)"))("12.50")
    Decimal('12.50')
    >>> converter(LogicalType.parse("text"), LogicalType.parse("decimal(6,2)"))("1.005")
    Traceback (most recent call last):
    ...
    ValueError: '1.005' has more than 2 fractional digits (decimal(6,2))
    >>> converter(LogicalType.parse("int"), LogicalType.parse("bool"))(1)
    True
    """
    check_pair(declared, asked)
    inner = _decimal(asked) if asked.kind == "decimal" else _SIMPLE[asked.kind]

    def convert(value: Any) -> Any:
        return None if value is None else inner(value)

    return convert


def _minimal(bound: str) -> str:
    """A timestamp's text with its fraction's trailing zeros (and a bare point) cut."""
    if "." not in bound:
        return bound
    return bound.rstrip("0").rstrip(".")


@dataclass(frozen=True)
class TextBound:
    """A ranged read's lower bound as a text timestamp column compares with it:
    `col >= lowest AND (col < gap[0] OR col >= gap[1]) AND col NOT IN early`."""

    lowest: str
    gap: tuple[str, str]
    early: tuple[str, ...]


def text_bound(bound: str) -> TextBound:
    """The text comparison of a column of TIMESTAMP_TEXT values with `bound` ('YYYY-MM-DD HH:MM:SS[.f]', UTC).

    A value is at or after the bound exactly when it so compares. The fraction is written
    with its trailing zeros cut: '…:05.5' then sorts at or after it whether a value says
    '.5', '.50' or '.500', and '…:05' after '…:05'. A value with a space is compared by its
    day and time; one with a T sorts after every value with a space on its day, so the
    values of the bound's day with a T and an earlier time (the gap) are left out. A zone
    '+00:00' or '-00:00' sorts before the digits and the point, as the end of the text
    does; a 'Z' sorts after them, so a value whose fraction is a shorter start of the
    bound's, then 'Z' ('…:05Z' for '…:05.5'), would sort after the bound though earlier:
    those few texts (`early`) are left out by name.

    >>> text_bound("2026-11-27 03:40:05.500")
    TextBound(lowest='2026-11-27 03:40:05.5', gap=('2026-11-27T', '2026-11-27T03:40:05.5'), early=('2026-11-27 03:40:05Z', '2026-11-27T03:40:05Z'))
    >>> text_bound("2026-11-27 03:40:05.000")
    TextBound(lowest='2026-11-27 03:40:05', gap=('2026-11-27T', '2026-11-27T03:40:05'), early=())
    >>> text_bound("2026-11-27 03:40:05.25").early[:2]
    ('2026-11-27 03:40:05Z', '2026-11-27 03:40:05.2Z')
    """
    lowest = _minimal(bound.replace("T", " ", 1))
    day, time, fraction = lowest[:10], lowest[11:19], lowest[20:]
    early = tuple(
        f"{day}{sep}{time}{'.' if digits else ''}{fraction[:digits]}Z"
        for sep in " T"
        for digits in range(len(fraction))
    )
    return TextBound(lowest, (day + "T", day + "T" + lowest[11:]), early)
