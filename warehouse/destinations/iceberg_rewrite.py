"""Which rows of an Iceberg table's files one sync's delta removes, in Arrow: the
copy-on-write half of the Iceberg destination (iceberg.py), which rewrites the files those
rows are in without them.

Rows are matched on `names` (a keyed view's key, every column of a multiset view's), NULL
matching NULL, by grouping the held rows together with the delta's lines (Arrow's group-by
keeps NULL as a value of its own, where a join would never match it):

- keyed: every held row whose key a line names is removed (an update's or an insert's new
  row is written anew beside); a line that must find its key (an update, a delete) and
  does not means the table is not the view the delta was computed from;
- multiset: a delete line of count n removes n of the held rows equal to it (the first n
  found); fewer than n held is the same disagreement.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_ROW, _WANT = "__ds_row", "__ds_want"


class Disagreement(ValueError):
    """The table lacks rows the delta changes: it is not the view the delta was computed from."""


def removed_rows(held: pa.Table, lines: pa.Table, names: list[str], wanted: pa.Array, every: bool) -> np.ndarray:
    """The positions in `held` of the rows `lines` remove, ascending.

    Args:
        held: the rows of the files that may hold what the delta changes.
        lines: the delta's lines, with at least the columns `names`.
        names: the columns rows are matched on.
        wanted: per line, how many equal rows it must find (0: none need be held).
        every: remove every held row a line matches (keyed); else as many as its lines want (multiset).

    Raises:
        Disagreement: a content's lines want more rows than are held.

    >>> held = pa.table({"k": [1, None, 3, 3], "v": ["a", "b", "c", "c"]})
    >>> removed_rows(held, pa.table({"k": [None, 2]}), ["k"], pa.array([1, 0]), every=True).tolist()
    [1]
    >>> removed_rows(held, pa.table({"k": [3], "v": ["c"]}), ["k", "v"], pa.array([1]), every=False).tolist()
    [2]
    >>> removed_rows(held, pa.table({"k": [4]}), ["k"], pa.array([1]), every=True)
    Traceback (most recent call last):
    ...
    warehouse.destinations.iceberg_rewrite.Disagreement: 1 line(s) of the delta change rows the table does not hold
    """
    keys = held.select(names)
    rows = keys.append_column(_ROW, pa.array(np.arange(held.num_rows), pa.int64()))
    rows = rows.append_column(_WANT, pa.nulls(held.num_rows, pa.int64()))
    asked = lines.select(names).cast(keys.schema).append_column(_ROW, pa.nulls(lines.num_rows, pa.int64()))
    asked = asked.append_column(_WANT, pc.cast(wanted, pa.int64()))
    groups = pa.concat_tables([rows, asked]).group_by(names, use_threads=False)
    # the held rows come first in each group's list (use_threads=False keeps input order)
    out = groups.aggregate([(_ROW, "list"), (_ROW, "count"), (_WANT, "sum")])
    counted = out.column(f"{_WANT}_sum").combine_chunks()
    have = out.column(f"{_ROW}_count").combine_chunks().to_numpy(zero_copy_only=False)
    asked_for = pc.fill_null(counted, -1).to_numpy(zero_copy_only=False)
    named = asked_for >= 0  # the groups some line names
    short = named & (asked_for > have)
    if short.any():
        raise Disagreement(f"{int(short.sum())} line(s) of the delta change rows the table does not hold")
    take = np.where(named, have if every else asked_for, 0)
    lists = out.column(f"{_ROW}_list").combine_chunks()
    flat = pc.fill_null(pc.list_flatten(lists), -1).to_numpy(zero_copy_only=False)
    parent = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    offsets = lists.offsets.to_numpy()[:-1]
    position = np.arange(len(flat)) - offsets[parent]
    return np.sort(flat[position < take[parent]].astype(np.int64))
