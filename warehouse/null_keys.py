"""Arrow joins on keys that may hold NULL, NULL matching NULL.

A view with a LEFT JOIN that may match several rows keeps the joined table's key in its own
(`customer, order`), and a customer without orders has the row (`customer`, NULL). Rows are
matched by that key when the view's delta is computed and when its overlay is applied, and
there NULL must match NULL, as Spark's `<=>` does; Arrow's hash join never matches NULLs. So
each key column is joined as two: its value with NULL replaced by a filler of its type, and
whether it was NULL (the filler cannot be confused with a real value: the flag differs).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_VALUE, _NULL = "__nk_", "__nn_"


def filler(t: pa.DataType) -> pa.Scalar:
    """A value of type `t` to stand in for NULL beside a flag.

    >>> filler(pa.int64()).as_py(), filler(pa.string()).as_py(), filler(pa.date32()).as_py()
    (0, '', datetime.date(1970, 1, 1))
    """
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.scalar("", t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.scalar(b"", t)
    if pa.types.is_boolean(t):
        return pa.scalar(False, t)
    if pa.types.is_decimal(t):
        return pa.scalar(Decimal(0), t)
    if pa.types.is_date(t):
        return pa.scalar(dt.date(1970, 1, 1), t)
    return pa.scalar(0, pa.int64()).cast(t)  # numbers, timestamps


def _flagged(table: pa.Table, key: list[str]) -> tuple[pa.Table, list[str]]:
    names = []
    for k in key:
        column = table.column(k)
        table = table.append_column(_VALUE + k, pc.fill_null(column, filler(column.type)))
        table = table.append_column(_NULL + k, pc.is_null(column))
        names += [_VALUE + k, _NULL + k]
    return table, names


def join(left: pa.Table, right: pa.Table, key: list[str], join_type: str) -> pa.Table:
    """`left` semi- or anti-joined with `right` on `key`, NULL matching NULL (the left
    columns only).

    >>> a = pa.table({"k": [1, None, 2], "v": ["a", "b", "c"]})
    >>> join(a, pa.table({"k": pa.array([None, 2], pa.int64())}), ["k"], "left anti").to_pylist()
    [{'k': 1, 'v': 'a'}]
    >>> join(a, pa.table({"k": pa.array([None, 2], pa.int64())}), ["k"], "left semi").to_pylist()
    [{'k': None, 'v': 'b'}, {'k': 2, 'v': 'c'}]
    >>> join(a, pa.table({"k": pa.array([2], pa.int64())}), ["k"], "left anti").to_pylist()
    [{'k': 1, 'v': 'a'}, {'k': None, 'v': 'b'}]
    >>> b = pa.table({"k": [1, 1, None], "n": ["x", None, None], "v": [1, 2, 3]})
    >>> keys = pa.table({"k": [1, None], "n": pa.array([None, None], pa.string())})
    >>> sorted(join(b, keys, ["k", "n"], "left semi").to_pylist(), key=str)
    [{'k': 1, 'n': None, 'v': 2}, {'k': None, 'n': None, 'v': 3}]
    """
    if join_type not in ("left semi", "left anti"):
        raise ValueError(f"null_keys.join keeps the left side only, not {join_type!r}")
    if len(key) == 1 and _membership_matches(left.schema.field(key[0]).type, right.schema.field(key[0]).type):
        # one key column: a membership test, which matches NULL with NULL itself and costs a
        # tenth of a hash join's set-up for the few thousand rows a small sync joins
        found = pc.is_in(left.column(key[0]), value_set=right.column(key[0]).combine_chunks(), skip_nulls=False)
        return left.filter(found if join_type == "left semi" else pc.invert(found))
    names = left.schema.names
    flagged, keys = _flagged(left, key)
    other, _ = _flagged(right.select(key), key)
    return flagged.join(other.drop_columns(key), keys, join_type=join_type).select(names)


def _membership_matches(left: pa.DataType, right: pa.DataType) -> bool:
    """Whether a membership test of `right`'s values matches keys of type `left` as the
    hash join does: one type, and not a floating one (whose NaN the two may treat apart).

    >>> _membership_matches(pa.int64(), pa.int64()), _membership_matches(pa.int64(), pa.int32())
    (True, False)
    >>> _membership_matches(pa.float64(), pa.float64())
    False
    """
    return left == right and not pa.types.is_floating(left)


def full_join(left: pa.Table, right: pa.Table, key: list[str]) -> pa.Table:
    """The full outer join of `left` and `right` on `key`, NULL matching NULL: the key
    columns once (from whichever side has the row), every other column of both sides
    (their names must differ).

    >>> a = pa.table({"k": [1, None], "x": ["a", "b"]})
    >>> b = pa.table({"k": pa.array([None, 3], pa.int64()), "y": ["B", "C"]})
    >>> sorted(full_join(a, b, ["k"]).to_pylist(), key=str)
    [{'k': 1, 'x': 'a', 'y': None}, {'k': 3, 'x': None, 'y': 'C'}, {'k': None, 'x': 'b', 'y': 'B'}]
    """
    marked = left.append_column("__in_left", pa.array(np.ones(left.num_rows, dtype=bool)))
    lf, keys = _flagged(marked, key)
    rf, _ = _flagged(right, key)
    rf = rf.rename_columns([f"__right_{n}" if n in key else n for n in rf.schema.names])
    j = lf.join(rf, keys, join_type="full outer")
    in_left = pc.fill_null(j.column("__in_left"), False)
    out = {k: pc.if_else(in_left, j.column(k), j.column(f"__right_{k}")) for k in key}
    others = [n for n in [*left.schema.names, *right.schema.names] if n not in key]
    return pa.table({**out, **{n: j.column(n) for n in others}})
