"""The exact delta of a site query, and the next fragment with its update statistics.

Inputs: the stored snapshot (site columns + update statistics columns), the keys the plan put in units,
the rows the agent returned (new, ungrouped, changed groups, re-fetched survivors) and the
keys the agent reported deleted. Every returned row is compared with the stored one column
by column, so the delta holds real changes only and the update statistics count only real updates.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltasieve_protocol.types import Column, arrow_schema
from warehouse.deltas.changed_columns import spark_changed
from warehouse.names import CHANGED, DELETE, INSERT, KEEP, OP, TNO, UNO, UPDATE

_R = "__r_"


@dataclass
class DeltaResult:
    classified: DataFrame  # persisted; call release() when done
    inserted: int
    updated: int
    deleted: int
    kept: int
    before: int

    def fragment(self, columns: list[Column]) -> DataFrame:
        return self.classified.filter(F.col(OP) != DELETE).select(*[c.name for c in columns], TNO, UNO)

    def delta(self, columns: list[Column]) -> DataFrame:
        return self.classified.filter(F.col(OP).isin(INSERT, UPDATE, DELETE)).select(OP, *[c.name for c in columns])

    def write_delta(self, path, columns: list[Column]) -> None:
        """Stage the delta as stored: OP, the site columns and the columns each update changed."""
        self.classified.filter(F.col(OP).isin(INSERT, UPDATE, DELETE)).select(
            OP, *[c.name for c in columns], CHANGED
        ).write.parquet(str(path))

    def delta_table(self, columns: list[Column]) -> pa.Table:
        """The delta gathered on the driver (OP + site columns in their logical Arrow types)."""
        schema = pa.schema([pa.field(OP, pa.string()), *arrow_schema(columns)])
        return self.delta(columns).toArrow().select(schema.names).cast(schema)

    def key_changes(self, key: list[str]) -> tuple[pa.Table, pa.Table]:
        """The keys this delta inserts and those it deletes (what changes the fragment's set of keys)."""
        ops = self.classified.filter(F.col(OP).isin(INSERT, DELETE)).select(OP, *key).toArrow()
        return split_key_changes(ops, key)

    def release(self) -> None:
        self.classified.unpersist()


def split_key_changes(ops: pa.Table, key: list[str]) -> tuple[pa.Table, pa.Table]:
    """The keys of the inserts and of the deletes among rows tagged with their operation.

    >>> ins, dels = split_key_changes(pa.table({OP: ["insert", "update", "delete"], "id": [1, 2, 3]}), ["id"])
    >>> ins.column("id").to_pylist(), dels.column("id").to_pylist()
    ([1], [3])
    """
    ops = ops.select([OP, *key])
    return (
        ops.filter(pc.equal(ops.column(OP), INSERT)).select(key),
        ops.filter(pc.equal(ops.column(OP), DELETE)).select(key),
    )


def build_delta(
    snapshot: DataFrame,
    columns: list[Column],
    key: list[str],
    *,
    grouped_keys: DataFrame,
    returned: DataFrame,
    deleted_keys: DataFrame,
) -> DeltaResult:
    """Classify every tuple as insert / update / delete / keep and count them."""
    values = [c.name for c in columns if c.name not in key]
    s = (
        snapshot.select(*[c.name for c in columns], TNO, UNO)
        .join(grouped_keys.select(*key).withColumn("__grouped", F.lit(True)), key, "left")
        .join(deleted_keys.select(*key).withColumn("__gone", F.lit(True)), key, "left")
        .withColumn("__in_s", F.lit(True))
    )
    r = returned.select(*key, *[F.col(v).alias(_R + v) for v in values]).withColumn("__in_r", F.lit(True))
    j = s.join(r, key, "full_outer")
    in_s = F.coalesce(F.col("__in_s"), F.lit(False))
    in_r = F.coalesce(F.col("__in_r"), F.lit(False))
    grouped = F.coalesce(F.col("__grouped"), F.lit(False))
    gone = F.coalesce(F.col("__gone"), F.lit(False))
    same = reduce(lambda a, b: a & b, [F.col(v).eqNullSafe(F.col(_R + v)) for v in values], F.lit(True))
    op = (
        F.when(in_s & in_r, F.when(same, F.lit(KEEP)).otherwise(F.lit(UPDATE)))
        .when(in_s & grouped & ~gone, F.lit(KEEP))
        .when(in_s, F.lit(DELETE))
        .otherwise(F.lit(INSERT))
    )
    j = j.withColumn(OP, op)
    out = [
        F.col(c.name)
        if c.name in key
        else F.when(in_r & (F.col(OP) != DELETE), F.col(_R + c.name)).otherwise(F.col(c.name)).alias(c.name)
        for c in columns
    ]
    syncs_seen = F.when(in_s, F.col(TNO) + 1).otherwise(F.lit(1)).cast("bigint").alias(TNO)
    updates_seen = (
        F.when(in_s, F.col(UNO) + F.when(F.col(OP) == UPDATE, 1).otherwise(0))
        .otherwise(F.lit(1))
        .cast("bigint")
        .alias(UNO)
    )
    changed = spark_changed([(v, F.col(v), F.col(_R + v)) for v in values], F.col(OP) == UPDATE).alias(CHANGED)
    classified = j.select(F.col(OP), *out, syncs_seen, updates_seen, changed).persist(StorageLevel.MEMORY_AND_DISK)
    counts = {row[OP]: row["count"] for row in classified.groupBy(OP).count().collect()}
    inserted, updated, deleted, kept = (counts.get(x, 0) for x in (INSERT, UPDATE, DELETE, KEEP))
    return DeltaResult(classified, inserted, updated, deleted, kept, before=updated + deleted + kept)


def view_delta(old: DataFrame, new: DataFrame, columns: list[str], key: list[str]) -> DataFrame:
    """insert / update / delete rows turning `old` into `new`, matched by `key` (NULL
    matching NULL: a view's key may hold a LEFT JOIN's columns), with the columns each
    update changed (CHANGED)."""
    values = [c for c in columns if c not in key]
    o = old.select(*[F.col(k).alias("__ok_" + k) for k in key], *[F.col(v).alias("__o_" + v) for v in values])
    o = o.withColumn("__in_o", F.lit(True))
    n = new.withColumn("__in_n", F.lit(True))
    j = o.join(n, reduce(lambda a, b: a & b, [F.col("__ok_" + k).eqNullSafe(F.col(k)) for k in key]), "full_outer")
    in_o = F.coalesce(F.col("__in_o"), F.lit(False))
    in_n = F.coalesce(F.col("__in_n"), F.lit(False))
    same = F.lit(True)
    for v in values:
        same = same & F.col(v).eqNullSafe(F.col("__o_" + v))
    op = (
        F.when(in_o & in_n, F.when(same, F.lit("keep")).otherwise(F.lit(UPDATE)))
        .when(in_n, F.lit(INSERT))
        .otherwise(F.lit(DELETE))
    )
    prefix = {c: "__ok_" if c in key else "__o_" for c in columns}
    out = [F.when(in_n, F.col(c)).otherwise(F.col(prefix[c] + c)).alias(c) for c in columns]
    changed = spark_changed([(v, F.col("__o_" + v), F.col(v)) for v in values], op == UPDATE).alias(CHANGED)
    return j.select(op.alias(OP), *out, changed).filter(F.col(OP) != "keep")


def counted(delta: DataFrame) -> tuple[int, int, int]:
    """Rows a delta inserts, updates and deletes."""
    counts = {r[OP]: r["count"] for r in delta.groupBy(OP).count().collect()}
    return counts.get(INSERT, 0), counts.get(UPDATE, 0), counts.get(DELETE, 0)
