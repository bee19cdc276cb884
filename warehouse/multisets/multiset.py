"""Views over tables without a key: multisets of rows, kept as distinct rows with counts.

A table without a primary or unique key may hold equal rows several times, and nothing but
a row's content tells rows apart: the view is a multiset. Its site query is grouped
(viewdef/decomposition.py): each distinct row once with its number of occurrences (the
count column), NULL read as a filler value beside a flag, keyed by all of it. Occurrence k
of a row exists while its count is at least k, so the keyed relation *content -> count*
is the multiset, stored compactly, and every strategy keeps it exactly as it keeps a keyed
fragment.

This module turns that fragment into the view: its rows (NULL where flagged, each row as
often as it occurs) and its delta. A row that appears is an `insert` of its content with
the number of occurrences that appeared, one that goes a `delete` with the number that
went; a change of count is an insert (or delete) of the difference. The delta's `count`
column holds that number on every line (1 for an update of a matched pair, see
matching.py); the API shows it where it is above one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from deltasieve_protocol.grouped import COUNT_COLUMN
from deltasieve_protocol.types import Column, LogicalType, arrow_schema
from warehouse.names import DELETE, INSERT, OP, UPDATE
from warehouse.viewdef import ViewDef

#: The delta's column holding how many occurrences a line inserts or deletes.
COUNT = COUNT_COLUMN
#: A matched pair's update carries the old row in these columns (matching.py).
OLD_PREFIX = "__ds_old_"


def delta_schema(view: ViewDef, *, with_old: bool = False) -> pa.Schema:
    """OP, the view's columns, the count, and (with `with_old`) the old row of an update."""
    columns = arrow_schema(view.columns)
    fields = [pa.field(OP, pa.string()), *columns, pa.field(COUNT, pa.int64())]
    if with_old:
        fields += [pa.field(OLD_PREFIX + f.name, f.type) for f in columns]
    return pa.schema(fields)


def restored(rows: pa.Table, view: ViewDef) -> pa.Table:
    """The view's columns of fragment rows, NULL where the row's flag says it was NULL.

    >>> v = ViewDef("", _cols("a int", "b text"), [], [], multiset={"count": COUNT, "nulls": {"b": "__ds_null_b"}})
    >>> restored(pa.table({"a": [1, 2], "b": ["x", ""], "__ds_null_b": [False, True], COUNT: [1, 3]}), v).to_pylist()
    [{'a': 1, 'b': 'x'}, {'a': 2, 'b': None}]
    """
    names = [c.name for c in view.columns]
    flags = view.null_flags
    out = {}
    for name in names:
        column = rows.column(name)
        if name in flags:
            column = pc.if_else(rows.column(flags[name]), pa.scalar(None, column.type), column)
        out[name] = column
    return pa.table(out)


def view_rows(rows: pa.Table, view: ViewDef) -> pa.Table:
    """The view's rows of fragment rows: NULLs restored, each row as often as it occurs.

    >>> v = ViewDef("", _cols("a int"), [], [], multiset={"count": COUNT, "nulls": {}})
    >>> view_rows(pa.table({"a": [7, 8], COUNT: [2, 1]}), v).column("a").to_pylist()
    [7, 7, 8]
    """
    counts = rows.column(view.count_column).to_numpy(zero_copy_only=False)
    return restored(rows, view).take(pa.array(np.repeat(np.arange(rows.num_rows), counts)))


def view_batches(fragment: Iterator[pa.RecordBatch], view: ViewDef, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The view's rows of a stream of fragment batches, at most `batch_rows` a batch."""
    for batch in fragment:
        yield from view_rows(pa.Table.from_batches([batch]), view).to_batches(max_chunksize=batch_rows)


def lines(changes: pa.Table, old_counts: pa.Table, view: ViewDef, key: list[str]) -> pa.Table:
    """The view's delta lines of a batch of the fragment's delta (OP and site columns; an
    update holds the new count, a delete the old one): inserts and deletes with a count.

    `old_counts`: the stored `key` (the site's) and count of (at least) every key the batch updates.

    >>> v = ViewDef("", _cols("a int"), [], [], multiset={"count": COUNT, "nulls": {}})
    >>> changes = pa.table({OP: ["insert", "update", "update", "delete"], "a": [1, 2, 3, 4], COUNT: [2, 5, 1, 3]})
    >>> lines(changes, pa.table({"a": [2, 3], COUNT: [4, 3]}), v, ["a"]).to_pylist()
    [{'__op': 'insert', 'a': 1, '__ds_count': 2}, {'__op': 'insert', 'a': 2, '__ds_count': 1},
     {'__op': 'delete', 'a': 3, '__ds_count': 2}, {'__op': 'delete', 'a': 4, '__ds_count': 3}]
    """
    ops = changes.column(OP)
    new = changes.column(COUNT)
    updates = changes.filter(pc.equal(ops, UPDATE))
    was = np.zeros(changes.num_rows, dtype=np.int64)
    if updates.num_rows:
        index = pa.table({"__i": pa.array(np.flatnonzero(pc.equal(ops, UPDATE).to_numpy(zero_copy_only=False)))})
        keyed = pa.Table.from_arrays([*updates.select(key).columns, index.column("__i")], names=[*key, "__i"])
        old = old_counts.select([*key, COUNT]).rename_columns([*key, "__old"])
        joined = keyed.join(
            old.cast(pa.schema([keyed.schema.field(k) for k in key] + [old.schema.field("__old")])), key
        )
        was[joined.column("__i").to_numpy()] = joined.column("__old").to_numpy()
    now = new.to_numpy(zero_copy_only=False).astype(np.int64)
    is_update = pc.equal(ops, UPDATE).to_numpy(zero_copy_only=False)
    grew = is_update & (now > was)
    op = np.where(is_update, np.where(grew, INSERT, DELETE), ops.to_numpy(zero_copy_only=False))
    count = np.where(is_update, np.abs(now - was), now)
    out = restored(changes, view)
    out = out.add_column(0, OP, pa.array(op, pa.string())).append_column(COUNT, pa.array(count, pa.int64()))
    return out.filter(pa.array(count > 0))


def write_lines(changes: Path, old_counts, view: ViewDef, target: Path, batch_rows: int) -> tuple[int, int]:
    """Stream the fragment's delta stored in `changes` into the view's delta lines in
    `target`, one batch at a time. `old_counts(keys)` reads the stored counts of the keys
    the fragment's delta updates (their number is the change's, read at once).

    Returns the occurrences inserted and deleted.
    """
    site = view.sites[0]
    schema = arrow_schema(site.columns)
    out_schema = delta_schema(view)
    target.mkdir(parents=True, exist_ok=True)
    dataset = ds.dataset(changes, format="parquet")
    if not dataset.files:  # Spark writes no file for an empty delta
        pq.write_table(out_schema.empty_table(), target / "part-0.zstd.parquet", compression="zstd")
        return 0, 0
    updated = dataset.to_table(columns=site.key, filter=ds.field(OP) == UPDATE).cast(site.key_schema())
    old = old_counts(updated) if updated.num_rows else pa.schema([*updated.schema, schema.field(COUNT)]).empty_table()
    inserted = deleted = 0
    with pq.ParquetWriter(target / "part-0.zstd.parquet", out_schema, compression="zstd") as writer:
        for batch in dataset.to_batches(columns=[OP, *schema.names], batch_size=batch_rows):
            table = pa.Table.from_batches([batch]).cast(pa.schema([pa.field(OP, pa.string()), *schema]))
            out = lines(table, old, view, site.key).select(out_schema.names).cast(out_schema)
            writer.write_table(out)
            inserted += _total(out, INSERT)
            deleted += _total(out, DELETE)
    return inserted, deleted


def _total(delta: pa.Table, op: str) -> int:
    return pc.sum(delta.filter(pc.equal(delta.column(OP), op)).column(COUNT)).as_py() or 0


def _cols(*specs: str) -> list[Column]:
    """Columns from "name type" strings (the examples' views)."""
    return [Column(n, LogicalType.parse(t)) for n, t in (s.split() for s in specs)]
