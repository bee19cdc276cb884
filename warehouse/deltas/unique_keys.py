"""A site's returned rows must not share a key: the check, on Spark or in Arrow.

The declared key is the source's word that no two of its rows share one. A sync that meets
two rows with one key cannot tell which is the row now, so it fails with a SourceDataError
that quotes the key, how often it occurs and some of its rows, for the source to be fixed.
The rows come as a Spark DataFrame (the whole-fragment build, key reconciliation) or as a
pyarrow Table (the builds and answers compared on the driver); both are checked by the same
rule and fail with the same message.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from warehouse.errors import SourceDataError

#: Rows sharing a duplicate key that an error message quotes.
DUPLICATE_EXAMPLES = 2

#: A key that rows share: its values, how many rows hold it, and up to DUPLICATE_EXAMPLES of them.
Duplicate = tuple[dict[str, Any], int, list[dict[str, Any]]]


def check_unique(rows: DataFrame | pa.Table, key: list[str], what: str) -> None:
    """Fail with an example key and its rows if two of `rows` share a key; `what` names the
    rows in the message. A DataFrame is checked on the executors, a Table on the driver.

    >>> check_unique(pa.table({"k": [1, 2], "v": ["a", "b"]}), ["k"], "the site query")
    >>> check_unique(pa.table({"k": [1, 2, 2], "v": ["a", "b", "c"]}), ["k"], "the site query")
    Traceback (most recent call last):
    ...
    warehouse.errors.SourceDataError: the site query: key {'k': 2} occurs 2 times, e.g. in the rows [{'k': 2, 'v': 'b'}, {'k': 2, 'v': 'c'}]; ...
    """
    found = _first_duplicate_arrow(rows, key) if isinstance(rows, pa.Table) else _first_duplicate_spark(rows, key)
    if found is not None:
        raise duplicate_key_error(what, key, *found)


def duplicate_key_error(what: str, key: list[str], example: dict, count: int, quoted: list[dict]) -> SourceDataError:
    """The error of a key that is not unique at the source, with an example and its rows.

    >>> print(duplicate_key_error("table 'people'", ["id"], {"id": 7}, 3, [{"id": 7, "name": "Bo"}]).message)
    table 'people': key {'id': 7} occurs 3 times, e.g. in the rows [{'id': 7, 'name': 'Bo'}];
    the declared key ['id'] is not unique at the source:
    remove the duplicate rows, or redefine the view with a key that is unique
    """
    return SourceDataError(
        f"{what}: key {example} occurs {count} times, e.g. in the rows {quoted}; the declared key {key} is not unique at the source: "
        "remove the duplicate rows, or redefine the view with a key that is unique"
    )


def _first_duplicate_spark(rows: DataFrame, key: list[str]) -> Duplicate | None:
    """The first key that rows of a Spark DataFrame share, if any (NULL matching NULL)."""
    dup = rows.groupBy(*key).count().filter(F.col("count") > 1).limit(1).collect()
    if not dup:
        return None
    example = {k: dup[0][k] for k in key}
    match = reduce(lambda a, b: a & b, [F.col(k).eqNullSafe(F.lit(v)) for k, v in example.items()])
    quoted = [r.asDict() for r in rows.filter(match).limit(DUPLICATE_EXAMPLES).collect()]
    return example, dup[0]["count"], quoted


def _first_duplicate_arrow(rows: pa.Table, key: list[str]) -> Duplicate | None:
    """The first key that rows of a pyarrow Table share, if any (NULL matching NULL, as on Spark).

    >>> _first_duplicate_arrow(pa.table({"a": [1, 1, 1, 2], "b": [5, 6, 7, 8]}), ["a"])
    ({'a': 1}, 3, [{'a': 1, 'b': 5}, {'a': 1, 'b': 6}])
    >>> _first_duplicate_arrow(pa.table({"a": [None, 2, None], "b": [5, 6, 7]}), ["a"])
    ({'a': None}, 2, [{'a': None, 'b': 5}, {'a': None, 'b': 7}])
    >>> _first_duplicate_arrow(pa.table({"a": [1, 1], "b": [5, 6]}), ["a", "b"]) is None
    True
    """
    counts = rows.group_by(key).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts.column("count_all"), 1))
    if not dup.num_rows:
        return None
    example = {k: dup.column(k)[0].as_py() for k in key}
    match = reduce(pc.and_, [_same(rows.column(k), dup.column(k)[0]) for k in key])
    quoted = rows.filter(match).slice(0, DUPLICATE_EXAMPLES).to_pylist()
    return example, dup.column("count_all")[0].as_py(), quoted


def _same(column: pa.ChunkedArray, value: pa.Scalar) -> pa.ChunkedArray:
    """Whether each value of `column` is `value`, NULL being NULL (Arrow's equal says NULL)."""
    return pc.is_null(column) if not value.is_valid else pc.fill_null(pc.equal(column, value), False)
