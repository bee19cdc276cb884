"""Group selection and group hashing on the executors, partition by partition.

The snapshot is range-partitioned by update probability and sorted inside each partition,
most stable first. Each partition then runs the group builder of `planning` on its own
tuples, hashes the grouped ones with the sync's seed, and emits two kinds of rows, told
apart by their `KIND` column (`MEMBER` or `UNIT`; the other kind's columns are NULL):

- a member row per snapshot tuple: its key, its unit id (NULL when ungrouped) and its
  row hash (kept so a unit that lost tuples can be re-checked without the agent);
- a unit row per closed group: unit id, group hash, size and expected benefit.

`members` and `units` read one kind each out of the stored plan.

Partitions hold disjoint ranges of probability, so each stops about where one pass over
the globally sorted list would have: only group boundaries at partition edges differ.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltasieve_protocol.encoding import combine, hash_to_bytes, row_hashes
from deltasieve_protocol.types import Column
from warehouse.names import TNO, UNO
from warehouse.planning.cost_model import DEFAULT_GROUPING, CostModel, GroupBuilder

PROB = "__p"
KIND = "__kind"
MEMBER, UNIT = "m", "u"
UID = "__uid"
ROW_HASH = "__rh"
GROUP_HASH = "__ghash"
GROUP_SIZE = "__gsize"
BENEFIT = "__eb"


def probability(prior: float | None) -> SparkColumn:
    """Update probability per tuple from its statistics (see planning.update_probability)."""
    # tno: syncs seen, uno: updates seen, each counting the tuple's entry.
    tno, uno = F.col(TNO).cast("double"), F.col(UNO).cast("double")
    if prior is None:
        p = uno / tno
    else:
        p = (uno - F.lit(1.0) + F.lit(prior)) / tno
    return F.least(F.greatest(p, F.lit(0.0)), F.lit(1.0))


def plan_schema(columns: list[Column], key: list[str]) -> str:
    keyed = {c.name: c for c in columns}
    fields = [f"`{k}` {keyed[k].type.spark_ddl()}" for k in key]
    return ", ".join(
        fields
        + [
            f"{KIND} string",
            f"{UID} bigint",
            f"{ROW_HASH} binary",
            f"{GROUP_HASH} binary",
            f"{GROUP_SIZE} int",
            f"{BENEFIT} double",
        ]
    )


@dataclass(frozen=True)
class Grouping:
    """What a snapshot is grouped by: the statistics, the measured sizes and the hash."""

    prior: float | None  # P(update) of a tuple not yet seen updated; None: the paper's uno / tno
    p_delete: float
    cost: CostModel
    seed: int
    bits: int
    criterion: str = DEFAULT_GROUPING


def _partition_planner(
    columns: list[Column], key: list[str], grouping: Grouping
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    seed, bits = grouping.seed, grouping.bits
    width = bits // 8

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None, "runs on an executor, within a task"
        partition = task.partitionId()
        builder = GroupBuilder(grouping.p_delete, grouping.cost, criterion=grouping.criterion)
        sums: dict[int, int] = {}
        reported = 0
        key_types = None
        # Rows whose group is still open wait here: the group may yet be rejected. An open
        # group holds at most MAX_GROUP_SIZE tuples, so this stays small.
        pending: list[tuple[pa.RecordBatch, list, list]] = []
        emitted = 0

        def flush(final: int) -> Iterator[pa.RecordBatch]:
            nonlocal emitted
            rejected = builder.rejected.index if builder.rejected is not None else None
            while pending and emitted < final:
                batch, groups, hashes = pending[0]
                take = min(batch.num_rows, final - emitted)
                uids = [None if g is None or g == rejected else (partition << 32) | g for g in groups[:take]]
                row_hash = [h if u is not None else None for h, u in zip(hashes[:take], uids)]
                yield _tuple_rows(batch.slice(0, take), key, uids, row_hash, width)
                emitted += take
                if take == batch.num_rows:
                    pending.pop(0)
                else:
                    pending[0] = (batch.slice(take), groups[take:], hashes[take:])

        def units() -> Iterator[pa.RecordBatch]:
            nonlocal reported
            closed = builder.closed[reported:]
            reported = len(builder.closed)
            if closed:
                yield _unit_rows(closed, sums, partition, key, key_types, bits)

        for batch in batches:
            key_types = [batch.schema.field(k).type for k in key]
            groups = [builder.push(p) for p in batch.column(PROB).to_pylist()]
            member = [g is not None for g in groups]
            hashes: list[bytes | None] = [None] * batch.num_rows
            if any(member):
                grouped_hashes = iter(row_hashes(batch.filter(pa.array(member)), columns, seed, bits))
                for i, g in enumerate(groups):
                    if g is not None:
                        h = next(grouped_hashes)
                        sums[g] = sums.get(g, 0) + h
                        hashes[i] = hash_to_bytes(h, bits)
            pending.append((batch, groups, hashes))
            yield from flush(builder.open_start if builder.open_start is not None else builder.pushed)
            yield from units()
        builder.finish()
        yield from flush(builder.pushed)
        yield from units()

    return run


def _tuple_rows(batch: pa.RecordBatch, key: list[str], uids, hashes, width: int) -> pa.RecordBatch:
    n = batch.num_rows
    arrays = [batch.column(k) for k in key] + [
        pa.array([MEMBER] * n, pa.string()),
        pa.array(uids, pa.int64()),
        pa.array(hashes, pa.binary()),
        pa.nulls(n, pa.binary()),
        pa.nulls(n, pa.int32()),
        pa.nulls(n, pa.float64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, names=key + [KIND, UID, ROW_HASH, GROUP_HASH, GROUP_SIZE, BENEFIT])


def _unit_rows(closed, sums: dict[int, int], partition: int, key: list[str], key_types, bits: int) -> pa.RecordBatch:
    n = len(closed)
    arrays = [pa.nulls(n, t) for t in key_types] + [
        pa.array([UNIT] * n, pa.string()),
        pa.array([(partition << 32) | g.index for g in closed], pa.int64()),
        pa.nulls(n, pa.binary()),
        pa.array([hash_to_bytes(combine([sums.pop(g.index)], bits), bits) for g in closed], pa.binary()),
        pa.array([g.size for g in closed], pa.int32()),
        pa.array([g.benefit for g in closed], pa.float64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, names=key + [KIND, UID, ROW_HASH, GROUP_HASH, GROUP_SIZE, BENEFIT])


def plan_groups(
    snapshot: DataFrame, columns: list[Column], key: list[str], grouping: Grouping, partitions: int
) -> DataFrame:
    """The grouping plan of a snapshot (site columns + update statistics columns), computed on the executors
    in `partitions` ranges of update probability."""
    with_p = snapshot.withColumn(PROB, probability(grouping.prior))
    ordered = with_p.repartitionByRange(max(1, partitions), F.col(PROB)).sortWithinPartitions(PROB, *key)
    planner = _partition_planner(columns, key, grouping)
    return ordered.mapInArrow(planner, plan_schema(columns, key))


def units(plan: Path) -> ds.Dataset:
    """The unit rows of a stored plan: uid, group hash, size, expected benefit."""
    return ds.dataset(plan, format="parquet").filter(pc.field(KIND) == UNIT)


def members(plan: Path) -> ds.Dataset:
    """The member rows of a stored plan: key, uid (NULL: left ungrouped), row hash."""
    return ds.dataset(plan, format="parquet").filter(pc.field(KIND) == MEMBER)
