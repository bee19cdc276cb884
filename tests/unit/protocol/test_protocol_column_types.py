"""Reading columns as a stronger type (deltasieve_protocol/column_types.py): the converters and the ranged read's text bound."""

from __future__ import annotations

import datetime as dt
import random
import re
from decimal import Decimal

import pytest

from deltasieve_protocol.column_types import READABLE, check_pair, converter, text_bound
from deltasieve_protocol.types import LogicalType

T = LogicalType.parse


@pytest.mark.parametrize(
    ("declared", "asked", "raw", "value"),
    [
        ("text", "timestamp", "2026-11-27 03:40:05", dt.datetime(2026, 11, 27, 3, 40, 5)),
        ("text", "timestamp", "2026-11-27T03:40:05.123456+00:00", dt.datetime(2026, 11, 27, 3, 40, 5, 123456)),
        ("text", "timestamptz", "2026-11-27T03:40:05Z", dt.datetime(2026, 11, 27, 3, 40, 5, tzinfo=dt.UTC)),
        ("text", "date", "2026-02-28", dt.date(2026, 2, 28)),
        ("text", "int", "-42", -42),
        ("text", "decimal(10,2)", "7", Decimal("7.00")),
        ("text", "decimal(10,2)", "-.5", Decimal("-0.50")),
        ("text", "bool", "TRUE", True),
        ("text", "bool", "0", False),
        ("int", "bool", 1, True),
        ("decimal(38,10)", "int", Decimal("12.0000000000"), 12),
        ("decimal(38,10)", "int", 3.0, 3),  # SQLite hands a NUMERIC column's values over as floats
        ("text", "timestamp", None, None),
    ],
)
def test_values_that_read(declared, asked, raw, value):
    assert converter(T(declared), T(asked))(raw) == value


@pytest.mark.parametrize(
    ("declared", "asked", "raw", "words"),
    [
        ("text", "timestamp", "2026-11-27 3:40:05", "is not a timestamp written"),
        ("text", "timestamp", "2026-11-27T03:40:05+02:00", "in UTC"),  # another zone: refused, not converted
        ("text", "timestamp", "2026-11-27", "is not a timestamp written"),
        ("text", "timestamp", "2026-02-30 00:00:00", "day is out of range"),
        ("text", "timestamp", "2026-11-27 03:40:05.1234567", "is not a timestamp written"),
        ("text", "date", "2026-11-27 00:00:00", "is not a date"),
        ("text", "int", "12.0", "is not an integer"),
        ("text", "int", " 12", "is not an integer"),
        ("text", "int", "99999999999999999999", "is not an integer"),
        ("text", "decimal(4,2)", "1.005", "more than 2 fractional digits"),
        ("text", "decimal(4,2)", "100", "does not fit decimal(4,2)"),
        ("text", "decimal(4,2)", "1e3", "is not a decimal"),
        ("text", "bool", "yes", "is not a boolean"),
        ("int", "bool", 2, "is not a boolean"),
        ("decimal(38,10)", "int", Decimal("1.5"), "is not an integer"),
    ],
)
def test_values_that_do_not_read_are_refused_never_guessed(declared, asked, raw, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        converter(T(declared), T(asked))(raw)


def test_only_the_documented_pairs_are_allowed():
    kinds = ("int", "float", "decimal(10,2)", "text", "bytes", "bool", "date", "timestamp", "timestamptz")
    for declared in kinds:
        for asked in kinds:
            allowed = T(asked).kind in READABLE.get(T(declared).kind, ())
            if allowed:
                check_pair(T(declared), T(asked))
            else:
                with pytest.raises(ValueError, match="allowed"):
                    check_pair(T(declared), T(asked))


def _written(value: dt.datetime, rng: random.Random) -> str:
    """A timestamp as a legacy application may write it: any separator, fraction and UTC zone."""
    text = value.isoformat(sep=rng.choice(" T"), timespec="microseconds")
    digits = rng.randrange(7)
    if value.microsecond % 10 ** (6 - digits) == 0:  # the fraction fits: write it with `digits`, trailing zeros kept
        text = text[: len(text) - 6 + digits].rstrip(".")
    return text + rng.choice(["", "Z", "+00:00", "-00:00"])


def test_the_text_bound_reads_a_row_exactly_when_it_is_at_or_after_the_bound():
    rng = random.Random(36)
    base = dt.datetime(2026, 11, 27, 3, 40, 5)
    steps = [1, 3600, 86_400]
    for _ in range(30_000):

        def near() -> dt.datetime:
            micros = rng.choice([0, 500_000, 250_000, 100_000, 1, 999_999, rng.randrange(10**6)])
            return base + dt.timedelta(microseconds=micros, seconds=rng.randrange(-2, 3) * rng.choice(steps))

        row = near()
        bound_text = near().strftime("%Y-%m-%d %H:%M:%S.%f")[: rng.choice([19, 21, 23, 26])]
        bound = dt.datetime.fromisoformat(bound_text)
        text = _written(row, rng)
        b = text_bound(bound_text)
        read = text >= b.lowest and (text < b.gap[0] or text >= b.gap[1]) and text not in b.early
        assert read == (row >= bound), (text, bound_text)
