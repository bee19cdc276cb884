"""A multiset view over several sites, kept as combinations of its sites' grouped rows.

Each site of a view over tables without a key is read grouped (multiset.py): its distinct
rows, each with its count, keyed by all of it. The assembly joins those rows; a row it
selects is a *combination*: one grouped row of each site (NULLs for a LEFT JOIN site
without partner), with every site's columns, flags and count (`__ds_count_<site>`). The
view holds each combination's content as often as the product of its counts, a padded
site counting once.

A combination is keyed by the keys of its site rows, so the warehouse stores the
combinations as the rows of a keyed view (`stored_view`), and keeps them by the same means:
the delta rules or the recompute (join_delta.py), the overlay (layers.py). Only the last
step differs. The view's delta is not the combinations' delta, whose lines may cancel:
two combinations can give one content (site rows that differ in a column the view does not
select), and an updated combination has a new count, not a new content. So the delta is
counted by content: for every content, the occurrences the combinations that may have
changed hold now, less those they held before (combinations that did not change hold as
many on both sides). A positive difference is an `insert` of that many occurrences, a
negative one a `delete`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from functools import reduce

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltasieve_protocol.grouped import COUNT_COLUMN
from deltasieve_protocol.types import Column, LogicalType
from warehouse.multisets import multiset
from warehouse.names import DELETE, INSERT, OP
from warehouse.viewdef import ViewDef
from warehouse.viewdef.grouped_site import site_count

_SIGNED = "__ds_signed"


def stored_view(view: ViewDef) -> ViewDef:
    """The keyed view of `view`'s combinations (its sites' columns, each count named after
    its site), keyed by its sites' keys: what the warehouse stores and maintains.

    >>> from warehouse.viewdef import SiteQuery
    >>> from warehouse.multisets.multiset import _cols
    >>> sites = [SiteQuery("a", "", _cols("m text", "__ds_count int"), ["m"]), SiteQuery("b", "", _cols("t text", "__ds_count int"), ["t"])]
    >>> combos = stored_view(ViewDef("", _cols("m text"), [], sites, "SELECT ...", None, [1], {"count": "__ds_count", "nulls": {}}))
    >>> [c.name for c in combos.columns], combos.key, combos.left_sites, combos.multiset
    (['m', '__ds_count_0', 't', '__ds_count_1'], ['m', 't'], [1], None)
    """
    columns = [
        Column(site_count(i), LogicalType("int")) if c.name == COUNT_COLUMN else c
        for i, site in enumerate(view.sites)
        for c in site.columns
    ]
    key = [k for site in view.sites for k in site.key]
    return ViewDef(view.sql, columns, key, view.sites, view.assembly, None, list(view.left_sites))


def occurrences(combos: pa.Table, view: ViewDef) -> pa.Table:
    """The view's content of each combination (NULL where flagged, or padded) and the
    number of times it holds it (the count column).

    >>> from warehouse.multisets.multiset import _cols
    >>> v = ViewDef("", _cols("m text"), [], [None, None], "", None, [1], {"count": COUNT_COLUMN, "nulls": {"m": "__ds_null_m"}})
    >>> combos = pa.table({"m": ["x", ""], "__ds_null_m": [False, True], "__ds_count_0": [2, 1], "__ds_count_1": pa.array([3, None], pa.int64())})
    >>> occurrences(combos, v).to_pylist()
    [{'m': 'x', '__ds_count': 6}, {'m': None, '__ds_count': 1}]
    """
    counts = [
        pc.fill_null(combos.column(site_count(i)), 1).to_numpy(zero_copy_only=False).astype(np.int64)
        for i in range(len(view.sites))
    ]
    content = multiset.restored(combos, view)
    return content.append_column(COUNT_COLUMN, pa.array(reduce(operator.mul, counts), pa.int64()))


def net_lines(old: pa.Table, new: pa.Table, view: ViewDef) -> pa.Table:
    """The view's delta lines (OP, its columns, the count) between the combinations `old`
    and `new`: by content, the occurrences `new` holds less those `old` holds.

    >>> from warehouse.multisets.multiset import _cols
    >>> v = ViewDef("", _cols("m text"), [], [None], "", None, [], {"count": COUNT_COLUMN, "nulls": {}})
    >>> old = pa.table({"m": ["a", "b", "c"], "__ds_count_0": [1, 2, 1]})
    >>> new = pa.table({"m": ["b", "c", "c", "d"], "__ds_count_0": [5, 1, 0, 1]})
    >>> net_lines(old, new, v).sort_by("m").to_pylist()
    [{'__op': 'delete', 'm': 'a', '__ds_count': 1}, {'__op': 'insert', 'm': 'b', '__ds_count': 3}, {'__op': 'insert', 'm': 'd', '__ds_count': 1}]
    """
    names = [c.name for c in view.columns]
    sides = []
    for combos, sign in ((old, -1), (new, 1)):
        occ = occurrences(combos, view)
        signed = pc.multiply(occ.column(COUNT_COLUMN), sign)
        sides.append(occ.select(names).append_column(_SIGNED, signed))
    both = pa.concat_tables(sides)
    net = both.group_by(names, use_threads=False).aggregate([(_SIGNED, "sum")])
    change = net.column(f"{_SIGNED}_sum").to_numpy(zero_copy_only=False)
    out = net.select(names).append_column(COUNT_COLUMN, pa.array(np.abs(change), pa.int64()))
    out = out.add_column(0, OP, pa.array(np.where(change > 0, INSERT, DELETE), pa.string()))
    return out.filter(pa.array(change != 0)).cast(multiset.delta_schema(view))


def spark_lines(old: DataFrame | None, new: DataFrame, view: ViewDef) -> DataFrame:
    """`net_lines` on Spark, for a recompute: `old` and `new` are all the combinations (no
    `old` for a load)."""
    names = [c.name for c in view.columns]
    before = None if old is None else spark_occurrences(old, view)
    return spark_net(before, spark_occurrences(new, view), names)


def spark_occurrences(combos: DataFrame, view: ViewDef) -> DataFrame:
    """`occurrences` on Spark: each combination's content and the number of times it holds it."""
    flags = view.null_flags
    content = [
        (F.when(F.col(flags[n]), F.lit(None)).otherwise(F.col(n)) if n in flags else F.col(n)).alias(n)
        for n in (c.name for c in view.columns)
    ]
    product = reduce(
        operator.mul, [F.coalesce(F.col(site_count(i)), F.lit(1)).cast("bigint") for i in range(len(view.sites))]
    )
    return combos.select(*content, product.alias(COUNT_COLUMN))


def spark_net(old: DataFrame | None, new: DataFrame, names: list[str]) -> DataFrame:
    """The delta lines (OP, `names`, the count) from the contents `old` to `new`, each with
    its number of occurrences (the count column; a content may come more than once): by
    content, NULL equal to NULL (a grouping), the occurrences `new` holds less those `old`
    holds, an `insert` of that many where positive, a `delete` where negative, no line where
    none."""
    signed = lambda rows, sign: rows.select(*names, (F.col(COUNT_COLUMN) * F.lit(sign)).alias(_SIGNED))  # noqa: E731
    rows = signed(new, 1) if old is None else signed(new, 1).unionByName(signed(old, -1))
    net = rows.groupBy(*names).agg(F.sum(_SIGNED).alias(_SIGNED)).filter(F.col(_SIGNED) != 0)
    op = F.when(F.col(_SIGNED) > 0, F.lit(INSERT)).otherwise(F.lit(DELETE)).alias(OP)
    return net.select(op, *names, F.abs(F.col(_SIGNED)).cast("bigint").alias(COUNT_COLUMN))


def view_batches(combos: Iterator[pa.RecordBatch], view: ViewDef, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The view's rows of a stream of stored combinations: each content as often as it is held."""
    names = [c.name for c in view.columns]
    for batch in combos:
        held = occurrences(pa.Table.from_batches([batch]), view)
        counts = held.column(COUNT_COLUMN).to_numpy(zero_copy_only=False)
        rows = held.select(names).take(pa.array(np.repeat(np.arange(held.num_rows), counts)))
        yield from rows.to_batches(max_chunksize=batch_rows)


def counted(rows: pa.Table, site: int) -> pa.Table:
    """Rows of a grouped site with its count named as the combinations name it (the joins on
    the driver join the sites' rows as they are, and every site has a count).

    >>> counted(pa.table({"m": ["x"], COUNT_COLUMN: [2]}), 1).column_names
    ['m', '__ds_count_1']
    """
    names = [site_count(site) if n == COUNT_COLUMN else n for n in rows.column_names]
    return rows.rename_columns(names)
