"""The delta of a view over several sites, from the deltas of its fragments (delta rules).

A view over several sites is the assembly (a Spark SQL join with the conditions across
sites) of the site fragments F_0, F_1, ... Every view row is made of one row of each
fragment, and carries each of those rows' keys (a view selects the key of every table).
A sync changed some fragment rows: C_i, the keys of site i inserted, updated or deleted,
and D_i, its inserted and updated rows as they are now. Then:

- a stored row of the view that holds no key of any C_i is made of unchanged fragment
  rows, all still there with the same values: it is a row of the new view too; and a row
  of the new view made of unchanged rows only was one of the old view. So only
- the *old candidates*, stored rows that hold a key of some C_i (one filtered read of
  the stored view), and
- the *new candidates*, new view rows made of at least one changed row: the union over i
  of the assembly with F_i replaced by D_i and the others by their new fragments (the
  delta rule of site i; a row made of changed rows of two sites comes out of both terms
  and is counted once, by its view key)

can differ, and the view's delta is the difference between those two sets, matched by the
view key.

A table joined by LEFT JOIN is a site of its own, read nowhere but in its ON and the
select list (binding checks it): a view row is an inner tuple with one partner of each
left site, or NULLs where it has none, and the view's key is the inner tuple's key
(`inner_key`) plus the keys of the left sites that may match several rows (NULL in a
padded row). A left site's term keeps the rows that found a changed partner. Then every
inner tuple that a candidate holds is compared whole: all its stored rows (read by its
key) against all its rows as they are now (joined anew from its inner rows), so that a
padded row gives way to the rows of new partners and comes back when the last one goes.
Keys are matched NULL to NULL throughout (null_keys.py).

Both sets are gathered on the driver (Arrow). The stored view is read filtered by the
changed keys. Each term joins a few changed rows with the rows of the other fragments
equal to them on the columns the join conditions equate (read with a filter): in Arrow
when every condition across sites is such an equality (equi_join.py), else as one Spark
job over those cut fragments (a broadcast of the change, no shuffle). The work grows with
the change, apart from the filtered reads of the stored view and of the fragments.

The other way, recomputing the whole join (`join` of every fragment) and comparing it with
the stored view, stays for the first sync, for an audit (mode=verify) and for a change too
large to gain from the rules (`recompute_reason`).
"""

from __future__ import annotations

import operator
from functools import cached_property, reduce
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltasieve_protocol.types import arrow_schema, key_columns
from warehouse import null_keys
from warehouse.deltas import equi_join
from warehouse.deltas.changed_columns import CHANGED_TYPE, arrow_changed, same_values
from warehouse.multisets import combinations
from warehouse.names import CHANGED, DELETE, INSERT, KEEP, OP, UPDATE, spark_schema
from warehouse.store import layers
from warehouse.store.versions import Version
from warehouse.viewdef import ViewDef
from warehouse.viewdef.decomposition import assembly_over, site_equalities

#: A site whose change holds more than this share of its rows is joined whole: the view is
#: recomputed (the rules would join about as much, in more passes).
RECOMPUTE_SHARE = 0.5
#: The rules gather the changed rows and the candidates on the driver (Arrow): up to this
#: many of either; a larger change recomputes the join on Spark.
DRIVER_ROWS = 250_000
_INDEX, _OLD = "__i", "__o_"


class TooLarge(Exception):
    """The candidates outgrew DRIVER_ROWS: recompute instead."""


def recompute_reason(changed: list[int], fragment_rows: list[int]) -> str | None:
    """Why the rules would not pay for a change of `changed[i]` rows at site i, whose
    fragment now holds `fragment_rows[i]` (None when they do).

    >>> recompute_reason([5, 0], [100, 10]) is None
    True
    >>> recompute_reason([5, 6], [100, 10])
    'site 1 changed 6 of its 10 rows (more than 50 %)'
    """
    if sum(changed) > DRIVER_ROWS:
        return f"the sites changed {sum(changed)} rows (more than {DRIVER_ROWS} are joined on Spark)"
    for i, (n, rows) in enumerate(zip(changed, fragment_rows, strict=True)):
        if n > 1 and n > RECOMPUTE_SHARE * max(rows, 1):
            return f"site {i} changed {n} of its {rows} rows (more than {round(100 * RECOMPUTE_SHARE)} %)"
    return None


def first_per_key(table: pa.Table, key: list[str]) -> pa.Table:
    """`table` with one row per key, the first.

    >>> first_per_key(pa.table({"k": [3, 3, 1, 2, 1], "v": ["a", "b", "c", "d", "e"]}), ["k"]).column("v").to_pylist()
    ['a', 'c', 'd']
    """
    indexed = table.append_column(_INDEX, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    first = indexed.group_by(key, use_threads=False).aggregate([(_INDEX, "min")]).column(f"{_INDEX}_min")
    return table.take(np.sort(first.to_numpy()))


def view_changes(old: pa.Table, new: pa.Table, key: list[str]) -> pa.Table:
    """insert / update / delete rows (OP + the columns, and CHANGED: the columns each
    update changed) turning the rows `old` into `new`, matched by `key` (NULL equal to
    NULL, in the key as in the values; NaN to NaN); rows equal in both are left out.

    >>> old = pa.table({"k": [1, 2, 3], "v": ["a", "b", None], "w": [1, 2, 3]})
    >>> new = pa.table({"k": [2, 3, 4], "v": ["B", None, "d"], "w": [None, 3, 4]})
    >>> view_changes(old, new, ["k"]).sort_by("k").drop_columns([CHANGED]).to_pylist()
    [{'__op': 'delete', 'k': 1, 'v': 'a', 'w': 1}, {'__op': 'update', 'k': 2, 'v': 'B', 'w': None}, {'__op': 'insert', 'k': 4, 'v': 'd', 'w': 4}]
    >>> view_changes(old, new, ["k"]).sort_by("k").column(CHANGED).to_pylist()
    [None, ['v', 'w'], None]

    A key part may be NULL (a padded row of a LEFT JOIN): it still matches.

    >>> old = pa.table({"c": [7, 7], "o": pa.array([None, 1], pa.int64()), "v": ["a", "b"]})
    >>> new = pa.table({"c": [7], "o": pa.array([None], pa.int64()), "v": ["A"]})
    >>> view_changes(old, new, ["c", "o"]).sort_by("o").select([OP, "o", CHANGED]).to_pylist()
    [{'__op': 'delete', 'o': 1, '__ds_changed': None}, {'__op': 'update', 'o': None, '__ds_changed': ['v']}]
    """
    names = new.schema.names
    values = [c for c in names if c not in key]
    o = old.select(names).rename_columns([c if c in key else _OLD + c for c in names])
    o = o.append_column("__in_o", pa.array(np.ones(o.num_rows, dtype=bool)))
    n = new.append_column("__in_n", pa.array(np.ones(new.num_rows, dtype=bool)))
    j = null_keys.full_join(o, n, key)
    in_o, in_n = (pc.fill_null(j.column(c), False) for c in ("__in_o", "__in_n"))
    same = reduce(pc.and_, [same_values(j.column(v), j.column(_OLD + v)) for v in values], pc.and_(in_o, in_n))
    op = pc.if_else(in_n, pc.if_else(in_o, pc.if_else(same, KEEP, UPDATE), INSERT), DELETE)
    rows = {c: j.column(c) if c in key else pc.if_else(in_n, j.column(c), j.column(_OLD + c)) for c in names}
    changed = arrow_changed(
        {v: j.column(_OLD + v) for v in values}, {v: j.column(v) for v in values}, pc.equal(op, UPDATE)
    )
    return (
        pa.table({OP: op, **rows, CHANGED: changed})
        .filter(pc.not_equal(op, KEEP))
        .cast(pa.schema([pa.field(OP, pa.string()), *new.schema, pa.field(CHANGED, CHANGED_TYPE)]))
    )


class JoinDelta:
    """The delta rules over one sync's fragments. The assembly runs under temporary names
    of its own (several syncs may share the Spark session)."""

    def __init__(self, spark: SparkSession, view: ViewDef, tag: str, staging: Path, staged: Version):
        self.spark, self.view, self.tag, self.staging, self.staged = spark, view, tag, staging, staged
        if view.assembly is None:
            raise ValueError("a view of one site has no assembly to maintain")
        self.assembly: str = view.assembly
        self.schema = arrow_schema(view.columns)
        self.links = site_equalities(self.assembly)
        #: the assembly as equalities, evaluated on the driver; None: by Spark
        self.equi = equi_join.plan(view)
        self._registered: list[str] = []

    @cached_property
    def fragments(self) -> list[DataFrame]:
        """The new fragments as Spark frames (site columns), made when first asked for: the
        rules on the driver need none."""
        return [
            layers.frame(self.spark, self.staged, i, site.columns, site.key).select(*[c.name for c in site.columns])
            for i, site in enumerate(self.view.sites)
        ]

    def join(self, tables: list[DataFrame], term: str) -> DataFrame:
        """The view's rows from `tables` standing for site 0, 1, ..."""
        names = [f"{term}_site_{i}_{self.tag}" for i in range(len(tables))]
        for name, table in zip(names, tables, strict=True):
            table.createOrReplaceTempView(name)
        self._registered += names
        return self.spark.sql(assembly_over(self.assembly, names)).select(*self.schema.names)

    def old_candidates(self, stored: Version, changes: list[pa.Table]) -> pa.Table:
        """The stored view rows that hold a changed key of some site (read with Arrow, the
        files filtered on each site's first key column as they are read)."""
        wanted = [
            (site.key, change.select(site.key).group_by(site.key).aggregate([]))
            for site, change in zip(self.view.sites, changes, strict=True)
            if change.num_rows
        ]
        if not wanted:
            return self.schema.empty_table()
        coarse = reduce(operator.or_, [ds.field(k[0]).isin(pc.unique(t.column(k[0]))) for k, t in wanted])
        rows = layers.view_lookup(stored, self.view, coarse)
        hits = [
            rows.join(t.cast(pa.schema([self.schema.field(c) for c in k])), k, join_type="left semi") for k, t in wanted
        ]
        return first_per_key(pa.concat_tables([h.select(self.schema.names) for h in hits]), self.view.key)

    def new_candidates(self, changes: list[pa.Table]) -> pa.Table:
        """The new view rows made of at least one changed fragment row, each once: for each
        site, its inserted and updated rows joined with the other fragments."""
        terms, found = [], []
        for i, (site, change) in enumerate(zip(self.view.sites, changes, strict=True)):
            now = change.filter(pc.not_equal(change.column(OP), DELETE)).drop_columns([OP])
            if not now.num_rows:
                continue
            if self.equi is not None:
                start = combinations.counted(now, i) if site.grouped else now
                found.append(self._checked(self.equi.rows(i, start, self._fetch)))
                continue
            rows = self._frame(now, site.columns, f"site-change-{i}")
            tables = [rows if j == i else self._reduced(j, i, now) or f for j, f in enumerate(self.fragments)]
            term = self.join(tables, f"d{i}")
            if i in self.view.left_sites:  # only the rows that found a changed partner
                term = term.filter(reduce(operator.and_, [F.col(k).isNotNull() for k in site.key]))
            terms.append(term)
        return self._gathered(found, terms)

    def _gathered(self, found: list[pa.Table], terms: list[DataFrame]) -> pa.Table:
        """The rows found on the driver and those of the Spark `terms`, each key once."""
        if terms:  # one Spark job for all the terms: their scans run side by side
            found.append(self._checked(reduce(DataFrame.unionByName, terms).limit(DRIVER_ROWS + 1).toArrow()))
        if not found:
            return self.schema.empty_table()
        return first_per_key(pa.concat_tables(found), self.view.key)

    def _checked(self, rows: pa.Table) -> pa.Table:
        """`rows` in the view's schema, unless there are more than the driver may hold."""
        if rows.num_rows > DRIVER_ROWS:
            raise TooLarge(f"the changed rows join more than {DRIVER_ROWS} rows of the view")
        return rows.select(self.schema.names).cast(self.schema)

    def _fetch(self, j: int, wanted: ds.Expression) -> pa.Table:
        """The rows of fragment j that satisfy `wanted` (its columns), read with Arrow (a
        grouped site's count named as in the combinations)."""
        site = self.view.sites[j]
        rows = layers.rows_where(self.staged, j, site.columns, site.key, wanted)
        if rows.num_rows > DRIVER_ROWS:
            raise TooLarge(f"the changed rows join more than {DRIVER_ROWS} rows of site {j}")
        rows = rows.select([c.name for c in site.columns])
        return combinations.counted(rows, j) if site.grouped else rows

    def _inner_tuples(self, stored: Version, old: pa.Table, new: pa.Table) -> tuple[pa.Table, pa.Table]:
        """With LEFT JOINs: every stored row and every current row of each inner tuple the
        candidates hold (by `inner_key`). A tuple's rows are compared as a whole: its
        partners may come and go (a padded row gives way to the rows of new partners, and
        comes back when the last goes), whatever changed keys they hold."""
        inner = self.inner_key
        held = pa.concat_tables([old.select(inner), new.select(inner)]).group_by(inner).aggregate([]).select(inner)
        if not held.num_rows:
            return old, new
        wanted = ds.field(inner[0]).isin(pc.unique(held.column(inner[0])))
        old = layers.view_lookup(stored, self.view, wanted).join(held, inner, join_type="left semi")
        old = old.select(self.schema.names)
        rows = pa.concat_tables([old, new])  # every inner tuple's site keys, as stored and as now
        if self.equi is not None:
            first = next(j for j in range(len(self.view.sites)) if j not in self.view.left_sites)
            key = self.view.sites[first].key
            keys = rows.select(key).group_by(key).aggregate([]).select(key)
            start = self._fetch(first, ds.field(key[0]).isin(pc.unique(keys.column(key[0])).drop_null()))
            now = self.equi.rows(first, start.join(keys, key, join_type="left semi"), self._fetch)
            new = self._gathered([self._checked(now.join(held, inner, join_type="left semi"))], [])
        else:
            new = self._gathered([], [self._rejoined(rows, held)])
        return old, new

    @cached_property
    def inner_key(self) -> list[str]:
        """The part of the view's key that identifies a row's inner tuple (the key less the
        keys of the tables joined by LEFT JOIN, which may be NULL)."""
        left = {k for j in self.view.left_sites for k in self.view.sites[j].key}
        return [k for k in self.view.key if k not in left]

    def _reduced(self, j: int, i: int, now: pa.Table) -> DataFrame | None:
        """Fragment j cut to the rows that may join site i's rows `now`: those equal to them
        on the columns a join condition equates (read with Arrow, filtered as read), so
        that the join reads a few rows, not the fragment; None where no equality links them
        (of columns equi_join.hash_equal accepts)."""
        mine, theirs = self.view.sites[i], self.view.sites[j]
        types = {(i, c.name): c.type for c in mine.columns} | {(j, c.name): c.type for c in theirs.columns}
        wanted = []
        for a, col_a, b, col_b in self.links:
            if {a, b} != {i, j}:
                continue
            here, there = ((a, col_a), (b, col_b)) if a == i else ((b, col_b), (a, col_a))
            if not equi_join.hash_equal(types[here], types[there]):
                continue
            wanted.append(ds.field(there[1]).isin(pc.unique(now.column(here[1])).drop_null()))
        if not wanted:
            return None
        rows = layers.rows_where(self.staged, j, theirs.columns, theirs.key, reduce(operator.and_, wanted))
        return self._frame(rows.select([c.name for c in theirs.columns]), theirs.columns, f"reduced-{i}-{j}")

    def _rejoined(self, rows: pa.Table, held: pa.Table) -> DataFrame:
        """On Spark: the view rows, as they are now, of the inner tuples `held` (by
        `inner_key`): the inner sites reduced to the rows `rows` hold, the left ones whole."""
        tables = []
        for j, (site, fragment) in enumerate(zip(self.view.sites, self.fragments, strict=True)):
            if j in self.view.left_sites:
                tables.append(fragment)
                continue
            keys = rows.select(site.key).group_by(site.key).aggregate([]).select(site.key)
            keys = self._frame(keys, key_columns(self.view.columns, site.key), f"held-{j}")
            tables.append(fragment.join(F.broadcast(keys), site.key, "left_semi"))
        inner = self._frame(held, key_columns(self.view.columns, self.inner_key), "held-inner")
        return self.join(tables, "r").join(F.broadcast(inner), self.inner_key, "left_semi")

    def _frame(self, rows: pa.Table, columns: list, name: str) -> DataFrame:
        """`rows` (Arrow) as a Spark frame, through a Parquet file in the sync's staging."""
        path = self.staging / name
        layers.write_part(rows, path)
        return self.spark.read.schema(spark_schema(columns)).parquet(str(path))

    def candidates(self, stored: Version, changes: list[pa.Table]) -> tuple[pa.Table, pa.Table]:
        """The rows of the view stored at `stored` that may have changed, and those rows as
        the join of the staged fragments has them, whose changes since then are `changes`:
        per site, its delta (OP + the site's columns, inserts and updates as now, deletes as
        they were). `view_changes` of the two is the view's delta."""
        old = self.old_candidates(stored, changes)
        new = self.new_candidates(changes)
        if self.view.left_sites:
            old, new = self._inner_tuples(stored, old, new)
        return old, new

    def release(self) -> None:
        for name in self._registered:
            self.spark.catalog.dropTempView(name)
        self._registered.clear()


def upserted(delta: DataFrame) -> DataFrame:
    """The rows a delta inserts or updates, as they are now (the view's columns)."""
    return delta.filter(F.col(OP).isin(INSERT, UPDATE)).drop(OP)
