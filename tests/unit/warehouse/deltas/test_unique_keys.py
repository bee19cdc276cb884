"""Returned rows that share a key fail the sync with an example: the same check and the same
message whether the rows come as a Spark DataFrame or as a pyarrow Table."""

from __future__ import annotations

import pyarrow as pa
import pytest

from warehouse.deltas.unique_keys import check_unique
from warehouse.errors import SourceDataError
from warehouse.spark import build_session

ROWS = "k bigint, v string, x double"
ARROW_ROWS = pa.schema([("k", pa.int64()), ("v", pa.string()), ("x", pa.float64())])


@pytest.fixture(scope="module")
def spark():
    return build_session("local[2]")


def arrow(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(ARROW_ROWS.names, r, strict=True)) for r in rows], schema=ARROW_ROWS)


@pytest.fixture(params=["spark", "arrow"])
def as_rows(request):
    """Rows (tuples of k, v, x) as one executor of the check takes them."""
    if request.param == "arrow":
        return arrow
    spark = request.getfixturevalue("spark")
    return lambda rows: spark.createDataFrame(rows, ROWS)


def test_a_key_returned_twice_is_refused_with_its_rows(as_rows):
    rows = as_rows([(1, "a", 1.0), (1, "b", 2.0), (2, "c", 3.0)])
    with pytest.raises(SourceDataError, match=r"key \{'k': 1\} occurs 2 times") as caught:
        check_unique(rows, ["k"], "site query of view v")
    assert "'v': 'a'" in caught.value.message and "'v': 'b'" in caught.value.message  # the rows, not only the key


def test_rows_with_distinct_keys_pass(as_rows):
    check_unique(as_rows([(1, "a", 1.0), (2, "a", 2.0)]), ["k"], "site query of view v")
    check_unique(as_rows([(1, "a", 1.0), (1, "b", 2.0)]), ["k", "v"], "site query of view v")  # a key of two columns
    check_unique(as_rows([]), ["k"], "site query of view v")


def test_both_executors_say_the_same(spark):
    rows = [(7, "a", 1.0), (7, "b", 2.0), (7, "c", 3.0), (8, "d", 4.0)]
    messages = []
    for table in (spark.createDataFrame(rows, ROWS), arrow(rows)):
        with pytest.raises(SourceDataError) as caught:
            check_unique(table, ["k"], "table 'people'")
        messages.append(caught.value.message)
    assert messages[0] == messages[1]
    assert messages[0].startswith(
        "table 'people': key {'k': 7} occurs 3 times, e.g. in the rows [{'k': 7, 'v': 'a', 'x': 1.0}, {'k': 7, 'v': 'b', 'x': 2.0}]; "
        "the declared key ['k'] is not unique at the source"
    )


def test_a_null_key_held_twice_is_quoted_with_its_rows(spark):
    """NULL matches NULL on both executors: the rows quoted are those of the NULL key."""
    rows = [(None, "a", 1.0), (2, "b", 2.0), (None, "c", 3.0)]
    messages = []
    for table in (spark.createDataFrame(rows, ROWS), arrow(rows)):
        with pytest.raises(SourceDataError, match=r"key \{'k': None\} occurs 2 times") as caught:
            check_unique(table, ["k"], "table 'people'")
        messages.append(caught.value.message)
    assert messages[0] == messages[1]
    assert "'v': 'a'" in messages[1] and "'v': 'c'" in messages[1]
