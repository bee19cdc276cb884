"""Reading columns as a stronger type (protocol/column_types.py): the converters and the ranged read's text bound."""

from __future__ import annotations

import datetime as dt
import random
import re
from decimal import Decimal

import pytest

from protocol.column_types import READABLE, check_pair, converter, text_bound_terms
from protocol.types import LogicalType

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


def test_the_text_bound_never_misses_a_row_and_errs_only_within_a_second():
    rng = random.Random(36)
    base = dt.datetime(2026, 11, 27, 3, 40, 5)
    for _ in range(20_000):

        def near() -> dt.datetime:
            return base + dt.timedelta(
                microseconds=rng.choice([0, 500_000, 100_000, 1, 999_999])
                + rng.randrange(-3, 4) * 10**6 * rng.choice([1, 3600, 86_400])
            )

        row, bound = near(), near()
        bound_text = bound.strftime("%Y-%m-%d %H:%M:%S.%f")[: rng.choice([19, 23, 26])]
        bound = dt.datetime.fromisoformat(bound_text)
        text = _written(row, rng)
        lowest, gap_start, gap_end = text_bound_terms(bound_text)
        read = text >= lowest and (text < gap_start or text >= gap_end)
        if row >= bound:
            assert read, (text, bound_text)
        elif read:  # only a Z after a shorter fraction sorts late, within the same second
            assert text.endswith("Z") and bound - row < dt.timedelta(seconds=1), (text, bound_text)
