"""Group selection and group hashing, bucket by bucket: on the executors (a Spark frame) or
in this process (an Arrow table, the Arrow executor: warehouse/executor.py), alike.

The snapshot's tuples are cut into buckets, ranges of update probability whose bounds come
from the update statistics' histogram (update_counts.py, so both executors cut the same
ones without a pass over the rows), and sorted inside each bucket, most stable first, then
by key. Each bucket then runs the group builder of `planning` on its own tuples, hashes the
grouped ones with the sync's seed, and emits two kinds of rows, told apart by their `KIND`
column (`MEMBER` or `UNIT`; the other kind's columns are NULL):

- a member row per snapshot tuple: its key, its unit id (NULL when ungrouped) and its
  row hash (kept so a unit that lost tuples can be re-checked without the agent);
- a unit row per closed group: unit id, group hash, size and expected benefit.

A unit id is the bucket's number in its high 32 bits and the group's in the low ones. The
plan's files hold the buckets in order (`plan_groups`); `members` and `units` read one kind
each out of it, and `in_order` reads rows bucket by bucket as they were emitted, in batches
of a fixed size, so the requests made from the plan are the same bytes whichever executor
planned it.

Buckets hold disjoint ranges of probability, so each stops about where one pass over
the globally sorted list would have: only group boundaries at bucket edges differ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltasieve_protocol.encoding import combine, hash_to_bytes, row_hashes
from deltasieve_protocol.types import Column
from warehouse.executor import ascending
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
BUCKET = "__bucket"


def tuple_probability(tno: int, uno: int, prior: float | None) -> float:
    """A tuple's update probability from its counts, as `probability` and `probabilities`
    compute it (the same operations in the same order, so the same double).

    >>> tuple_probability(4, 2, None), tuple_probability(4, 2, 0.5), tuple_probability(1, 1, 2.0)
    (0.5, 0.375, 1.0)
    """
    p = float(uno) / float(tno) if prior is None else (float(uno) - 1.0 + prior) / float(tno)
    return min(max(p, 0.0), 1.0)


def probability(prior: float | None) -> SparkColumn:
    """Update probability per tuple from its statistics (see planning.update_probability), on the executors."""
    # tno: syncs seen, uno: updates seen, each counting the tuple's entry.
    tno, uno = F.col(TNO).cast("double"), F.col(UNO).cast("double")
    if prior is None:
        p = uno / tno
    else:
        p = (uno - F.lit(1.0) + F.lit(prior)) / tno
    return F.least(F.greatest(p, F.lit(0.0)), F.lit(1.0))


def probabilities(rows: pa.Table, prior: float | None) -> pa.Array:
    """The same in this process, over an Arrow table's statistics columns."""
    tno, uno = pc.cast(rows.column(TNO), pa.float64()), pc.cast(rows.column(UNO), pa.float64())
    p = pc.divide(uno, tno) if prior is None else pc.divide(pc.add(pc.subtract(uno, 1.0), prior), tno)
    return pc.min_element_wise(pc.max_element_wise(p, 0.0), 1.0).combine_chunks()


def bucket_bounds(hist: Counter, prior: float | None, buckets: int) -> list[float]:
    """Upper bounds of up to `buckets` ranges of update probability that hold about as many
    of the tuples `hist` counts (update_counts.py: tuples per (tno, uno)) each; a
    probability is never split between two. A tuple of probability p is in the bucket
    numbered by how many bounds lie below p.

    >>> hist = Counter({(1, 1): 3, (2, 2): 1, (4, 1): 4})
    >>> bucket_bounds(hist, None, 2), bucket_bounds(hist, None, 1), bucket_bounds(Counter(), None, 4)
    ([0.25], [], [])
    """
    counts: Counter = Counter()
    for (tno, uno), n in hist.items():
        if tno > 0 and n > 0:
            counts[tuple_probability(tno, uno, prior)] += n
    bounds: list[float] = []
    total, seen = sum(counts.values()), 0
    values = sorted(counts)
    for p in values[:-1]:
        seen += counts[p]
        if len(bounds) < buckets - 1 and seen * buckets >= (len(bounds) + 1) * total:
            bounds.append(p)
    return bounds


def bucket_of(bounds: list[float]) -> SparkColumn:
    """The bucket of each tuple's probability (`PROB`), on the executors."""
    bucket = F.lit(0)
    for b in bounds:
        bucket = bucket + F.when(F.col(PROB) > F.lit(b), 1).otherwise(0)
    return bucket.cast("int")


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


class _BucketPlan:
    """The group builder run over one bucket's tuples, pushed in order (most stable first)."""

    def __init__(self, bucket: int, columns: list[Column], key: list[str], grouping: Grouping):
        self.bucket, self.columns, self.key, self.grouping = bucket, columns, key, grouping
        self.builder = GroupBuilder(grouping.p_delete, grouping.cost, criterion=grouping.criterion)
        self.sums: dict[int, int] = {}
        self.reported = 0
        self.key_types: list[pa.DataType] | None = None
        # Rows whose group is still open wait here: the group may yet be rejected. An open
        # group holds at most MAX_GROUP_SIZE tuples, so this stays small.
        self.pending: list[tuple[pa.RecordBatch, list, list]] = []
        self.emitted = 0

    def push(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        builder, seed, bits = self.builder, self.grouping.seed, self.grouping.bits
        self.key_types = [batch.schema.field(k).type for k in self.key]
        groups = [builder.push(p) for p in batch.column(PROB).to_pylist()]
        member = [g is not None for g in groups]
        hashes: list[bytes | None] = [None] * batch.num_rows
        if any(member):
            grouped_hashes = iter(row_hashes(batch.filter(pa.array(member)), self.columns, seed, bits))
            for i, g in enumerate(groups):
                if g is not None:
                    h = next(grouped_hashes)
                    self.sums[g] = self.sums.get(g, 0) + h
                    hashes[i] = hash_to_bytes(h, bits)
        self.pending.append((batch, groups, hashes))
        yield from self._flush(builder.open_start if builder.open_start is not None else builder.pushed)
        yield from self._units()

    def finish(self) -> Iterator[pa.RecordBatch]:
        self.builder.finish()
        yield from self._flush(self.builder.pushed)
        yield from self._units()

    def _uid(self, group: int) -> int:
        return (self.bucket << 32) | group

    def _flush(self, final: int) -> Iterator[pa.RecordBatch]:
        rejected = self.builder.rejected.index if self.builder.rejected is not None else None
        width = self.grouping.bits // 8
        while self.pending and self.emitted < final:
            batch, groups, hashes = self.pending[0]
            take = min(batch.num_rows, final - self.emitted)
            uids = [None if g is None or g == rejected else self._uid(g) for g in groups[:take]]
            row_hash = [h if u is not None else None for h, u in zip(hashes[:take], uids, strict=True)]
            yield _tuple_rows(batch.slice(0, take), self.key, uids, row_hash, width)
            self.emitted += take
            if take == batch.num_rows:
                self.pending.pop(0)
            else:
                self.pending[0] = (batch.slice(take), groups[take:], hashes[take:])

    def _units(self) -> Iterator[pa.RecordBatch]:
        closed = self.builder.closed[self.reported :]
        self.reported = len(self.builder.closed)
        if closed:
            assert self.key_types is not None, "a closed group had tuples pushed"
            bits = self.grouping.bits
            n = len(closed)
            arrays = [pa.nulls(n, t) for t in self.key_types] + [
                pa.array([UNIT] * n, pa.string()),
                pa.array([self._uid(g.index) for g in closed], pa.int64()),
                pa.nulls(n, pa.binary()),
                pa.array([hash_to_bytes(combine([self.sums.pop(g.index)], bits), bits) for g in closed], pa.binary()),
                pa.array([g.size for g in closed], pa.int32()),
                pa.array([g.benefit for g in closed], pa.float64()),
            ]
            yield pa.RecordBatch.from_arrays(arrays, names=_plan_names(self.key))


def _plan_names(key: list[str]) -> list[str]:
    return [*key, KIND, UID, ROW_HASH, GROUP_HASH, GROUP_SIZE, BENEFIT]


def _planner(
    columns: list[Column], key: list[str], grouping: Grouping
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The plan rows of batches sorted by bucket, probability and key: one `_BucketPlan` per bucket."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        plan: _BucketPlan | None = None
        for batch in batches:
            buckets = batch.column(BUCKET).to_numpy(zero_copy_only=False)
            cuts = [0, *(np.flatnonzero(np.diff(buckets)) + 1).tolist(), batch.num_rows]
            for lo, hi in zip(cuts, cuts[1:], strict=False):
                if hi <= lo:
                    continue
                bucket = int(buckets[lo])
                if plan is None or plan.bucket != bucket:
                    if plan is not None:
                        yield from plan.finish()
                    plan = _BucketPlan(bucket, columns, key, grouping)
                yield from plan.push(batch.slice(lo, hi - lo))
        if plan is not None:
            yield from plan.finish()

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
    return pa.RecordBatch.from_arrays(arrays, names=_plan_names(key))


def plan_groups(
    snapshot: DataFrame | pa.Table,
    columns: list[Column],
    key: list[str],
    grouping: Grouping,
    bounds: list[float],
    plan: Path,
) -> None:
    """Store the grouping plan of a snapshot (site columns + update statistics columns) in
    `plan`: a Spark frame's computed on the executors, an Arrow table's in this process
    (the Arrow executor), the same rows in the same order either way.

    On the executors the buckets of probability (`bucket_bounds`) are range-partitioned: a
    partition holds whole buckets, and its file (named in the partitions' order) follows
    the previous one's, so the plan's files read in name order hold the buckets in order,
    each as its planner emitted it. In this process the plan is one such file."""
    run = _planner(columns, key, grouping)
    order = [BUCKET, PROB, *key]
    if isinstance(snapshot, pa.Table):
        p = probabilities(snapshot, grouping.prior)
        buckets = np.searchsorted(np.asarray(bounds, np.float64), p.to_numpy(), side="left")
        ordered = snapshot.append_column(PROB, p).append_column(BUCKET, pa.array(buckets, pa.int32()))
        ordered = ordered.sort_by(ascending(order))
        schema = pa.schema(
            [ordered.schema.field(k) for k in key]
            + [pa.field(n, t) for n, t in ((KIND, pa.string()), (UID, pa.int64()), (ROW_HASH, pa.binary()))]
            + [
                pa.field(n, t)
                for n, t in ((GROUP_HASH, pa.binary()), (GROUP_SIZE, pa.int32()), (BENEFIT, pa.float64()))
            ]
        )
        plan.mkdir(parents=True, exist_ok=True)
        rows = pa.Table.from_batches(list(run(ordered.to_batches(max_chunksize=PLAN_BATCH_ROWS))), schema)
        pq.write_table(rows, plan / "part-00000.parquet")
        return
    with_p = snapshot.withColumn(PROB, probability(grouping.prior)).withColumn(BUCKET, bucket_of(bounds))
    ordered_frame = with_p.repartitionByRange(len(bounds) + 1, F.col(BUCKET)).sortWithinPartitions(*order)
    ordered_frame.mapInArrow(run, plan_schema(columns, key)).write.parquet(str(plan))


#: Rows per batch the planner is handed in this process (the plan does not depend on it).
PLAN_BATCH_ROWS = 10_000


def _files(plan: Path) -> list[Path]:
    """The plan's files in name order: the buckets in order (see `plan_groups`)."""
    return sorted(plan.glob("part-*.parquet"))


def _dataset(plan: Path) -> ds.Dataset:
    return ds.dataset([str(f) for f in _files(plan)], format="parquet")


def units(plan: Path) -> ds.Dataset:
    """The unit rows of a stored plan: uid, group hash, size, expected benefit."""
    return _dataset(plan).filter(pc.field(KIND) == UNIT)


def members(plan: Path) -> ds.Dataset:
    """The member rows of a stored plan: key, uid (NULL: left ungrouped), row hash."""
    return _dataset(plan).filter(pc.field(KIND) == MEMBER)


def in_order(plan: Path, wanted: pc.Expression, columns: list[str], rows: int) -> Iterator[pa.RecordBatch]:
    """`columns` of the plan's rows that are `wanted`, bucket by bucket in the order they
    were emitted, in batches of `rows` rows (the last fewer): the same batches whichever
    executor stored the plan."""
    held: list[pa.Table] = []
    count = 0
    read = list(dict.fromkeys([*columns, KIND, UID]))
    for path in _files(plan):
        for batch in pq.ParquetFile(path).iter_batches(columns=read):
            part = pa.Table.from_batches([batch]).filter(wanted).select(columns)
            if part.num_rows:
                held.append(part)
                count += part.num_rows
            while count >= rows:
                table = pa.concat_tables(held).combine_chunks()
                yield table.slice(0, rows).to_batches()[0]
                rest = table.slice(rows)
                held, count = [rest], rest.num_rows
    if count:
        yield pa.concat_tables(held).combine_chunks().to_batches()[0]
