"""The range-checksum strategy: key ranges with checksums, bisected where they differ.

A baseline for the benchmarks (the approach of query-based incremental differencing with
range checksums, and of data-diff / reladiff), available to users as a view option. Each
round the warehouse sends key ranges with the row count and hash sum of its snapshot in
each; the agent reads the rows of those ranges and names the ranges that differ.
Differing ranges are split into `BISECTION_FACTOR` parts by the snapshot's keys for the
next round; a differing range of at most `SHIP_THRESHOLD` snapshot rows is shipped whole
next round and compared here.

The first round's ranges cover every key: one scan of the site query at the source. Each
later round asks only about the ranges that differed, and the agent reads only those,
with their bounds in the WHERE clause (remote_agent/strategies/range_checksum.py): a sync
reads about N + (changed ranges x range size) rows, where it read N per round before. The
agent reads the whole site query in a later round too where it cannot guarantee that the
source orders the key as Python does (e.g. SQLite text keys, PostgreSQL floats); the
sync's `range_reads` says what each round read. The traffic is small.
"""

from __future__ import annotations

import glob
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from deltasieve_protocol import frames
from deltasieve_protocol.encoding import combine, hash_from_bytes, hash_to_bytes
from deltasieve_protocol.models import RangesControl
from deltasieve_protocol.ranges import RangeSet
from deltasieve_protocol.types import Column
from deltasieve_protocol.wire import COUNT, HASH, HI, LO, RID, SHIP, key_values
from warehouse.errors import ProtocolError
from warehouse.executor import ascending
from warehouse.names import spark_schema
from warehouse.store.sinks import Sink
from warehouse.strategies.base import Answer, FragmentBuild, SiteContext, SiteEstimate, Strategy, wire_hash_bits
from warehouse.strategies.hashing import ROW_HASH, row_hashes_of

#: Ranges of the first round.
INITIAL_RANGES = 64
#: Parts a differing range is split into (reladiff's default is 32).
BISECTION_FACTOR = 16
#: A range with at most this many snapshot rows is shipped whole rather than split.
SHIP_THRESHOLD = 64
#: Rounds before every remaining differing range is shipped whole.
MAX_ROUNDS = 12


@dataclass
class Range:
    lo: object  # None: unbounded below
    hi: object  # None: unbounded above
    count: int = 0
    total: int = 0  # sum of row hashes (not reduced)
    first: int = 0  # position of its first row in the sorted snapshot


def _sorted_parts(path: Path) -> list[str]:
    return sorted(glob.glob(str(path / "part-*.parquet")))


def _stream(path: Path, key: list[str]) -> Iterator[tuple[object, int]]:
    """(key, row hash) of the sorted snapshot, in key order."""
    for part in _sorted_parts(path):
        table = pq.read_table(part, columns=[*key, ROW_HASH])
        for batch in table.to_batches(max_chunksize=65_536):
            yield from zip(key_values(batch, key), (hash_from_bytes(h) for h in batch.column(ROW_HASH).to_pylist()))


def initial_ranges(path: Path, key: list[str], total_rows: int) -> list[Range]:
    """Equal-count ranges over the whole key space (the first unbounded below, the last above)."""
    size = max(1, math.ceil(total_rows / INITIAL_RANGES))
    ranges: list[Range] = []
    for pos, (k, h) in enumerate(_stream(path, key)):
        if pos % size == 0:
            if ranges:
                ranges[-1].hi = k
            ranges.append(Range(lo=k if ranges else None, hi=None, first=pos))
        ranges[-1].count += 1
        ranges[-1].total += h
    return ranges or [Range(None, None)]


def split(path: Path, key: list[str], differing: list[Range]) -> list[Range]:
    """Split each differing range into up to BISECTION_FACTOR parts of equal snapshot counts."""
    index = _index(key, differing)
    parts: dict[int, list[Range]] = {i: [] for i in range(len(differing))}
    seen = [0] * len(differing)
    for k, h in _stream(path, key):
        i = index.locate(k)
        if i is None:
            continue
        i = index.rids[i]
        r = differing[i]
        size = max(1, math.ceil(r.count / BISECTION_FACTOR))
        if seen[i] % size == 0:
            subs = parts[i]
            if subs:
                subs[-1].hi = k
            subs.append(Range(lo=k if subs else r.lo, hi=r.hi))
        parts[i][-1].count += 1
        parts[i][-1].total += h
        seen[i] += 1
    out = []
    for i, r in enumerate(differing):
        out.extend(parts[i] or [Range(r.lo, r.hi)])  # a range the snapshot has no row in
    return out


def _index(key: list[str], ranges: list[Range]) -> RangeSet:
    rs = RangeSet(key=key)
    for i, r in enumerate(ranges):
        rs.append(i, r.lo, r.hi, False, (r.count, r.total))
    rs.freeze()
    return rs


def ranges_frame(ranges: list[Range], ship: list[bool], key_cols: list[Column], bits: int, first_rid: int = 0) -> bytes:
    data: dict[str, pa.Array] = {
        RID: pa.array(range(first_rid, first_rid + len(ranges)), pa.int64()),
        SHIP: pa.array(ship, pa.bool_()),
        COUNT: pa.array([r.count for r in ranges], pa.int64()),
        HASH: pa.array([hash_to_bytes(combine([r.total], bits), bits) for r in ranges], pa.binary(bits // 8)),
    }
    for j, c in enumerate(key_cols):
        for prefix, attr in ((LO, "lo"), (HI, "hi")):
            values = [getattr(r, attr) for r in ranges]
            data[prefix + c.name] = pa.array(
                [None if v is None else (v if len(key_cols) == 1 else v[j]) for v in values], c.type.arrow()
            )
    return frames.arrow_frame(frames.RANGES, pa.RecordBatch.from_pydict(data))


@dataclass
class RangeOutcome:
    shipped: list[Range]
    rounds: int
    ranges_sent: int
    rows_scanned: int
    #: The agent's pacing of its last round's scan (remote_agent/pacing.py).
    pacing: dict | None = None
    #: Per round: rows read, whether the read was ranged, its intervals (the agent's summary).
    reads: list[dict] = field(default_factory=list)

    def read_report(self) -> dict:
        """What the rounds read at the source, for the sync's metrics (`range_reads`)."""
        reasons = {r["full_scan_reason"] for r in self.reads[1:] if r.get("full_scan_reason")}
        return {
            "ranged_rounds": sum(1 for r in self.reads if r.get("ranged")),
            "rows_per_round": [r["rows"] for r in self.reads],
            "intervals_per_round": [r.get("intervals", 0) for r in self.reads],
            "full_scan_reasons": sorted(reasons),
        }


def bisect_ranges(ctx: SiteContext, sorted_snapshot: Path, on_rows: Callable[[pa.RecordBatch], None]) -> RangeOutcome:
    """Run the bisection rounds over the site's snapshot, its rows' hashes in key order in
    `sorted_snapshot`; rows of shipped ranges go to `on_rows`.

    Each round ships the small ranges found to differ in the previous round and checks the
    parts of the large ones; a range is shipped only once its checksum said it differs.
    """
    key = ctx.site.key
    check = initial_ranges(sorted_snapshot, key, ctx.metrics.rows_before or 0)
    to_ship: list[Range] = []
    shipped: list[Range] = []
    rounds = sent = scanned = 0
    summary: dict | None = None
    reads: list[dict] = []
    while check or to_ship:
        rounds += 1
        if rounds >= MAX_ROUNDS:  # give up bisecting: ship what is left
            to_ship, check = to_ship + check, []
        batch = to_ship + check
        ship = [True] * len(to_ship) + [False] * len(check)
        sent += len(batch)
        differing_ids, summary = _range_round(ctx, batch, ship, on_rows)
        if any(ship[i] for i in differing_ids):
            raise ProtocolError("the agent reported a shipped range as differing")
        scanned += summary.get("rows_scanned", 0)
        reads.append(
            {
                "rows": summary.get("rows_scanned", 0),
                **{k: summary.get(k) for k in ("ranged", "intervals", "full_scan_reason")},
            }
        )
        shipped.extend(to_ship)
        differing = [batch[i] for i in sorted(set(differing_ids))]
        to_ship = [r for r in differing if r.count <= SHIP_THRESHOLD]
        large = [r for r in differing if r.count > SHIP_THRESHOLD]
        check = split(sorted_snapshot, key, large) if large else []
    return RangeOutcome(shipped, rounds, sent, scanned, summary.get("pacing") if summary else None, reads)


def _range_round(
    ctx: SiteContext, batch: list[Range], ship: list[bool], on_rows: Callable[[pa.RecordBatch], None]
) -> tuple[list[int], dict]:
    """One POST /v1/ranges: the ranges of `batch`, each shipped or checked as `ship` says;
    the ids of the checked ones that differ, and the round's summary."""
    options = ctx.sync.options
    bits, batch_rows, key_cols = options.hash_bits, options.batch_rows, ctx.key_columns()
    control = RangesControl(site=ctx.spec(), seed=ctx.sync.seed, hash_bits=wire_hash_bits(bits), batch_rows=batch_rows)
    body = [frames.json_frame(frames.CONTROL, control.model_dump())]
    for start in range(0, len(batch), batch_rows):
        body.append(
            ranges_frame(
                batch[start : start + batch_rows], ship[start : start + batch_rows], key_cols, bits, first_rid=start
            )
        )
    differing_ids: list[int] = []
    summary = None
    for frame in ctx.client.exchange("/v1/ranges", iter(body)):
        if frame.kind == frames.ROWS:
            on_rows(frame.batch())
        elif frame.kind == frames.RANGE_SUMS:
            differing_ids.extend(frame.batch().column(RID).to_pylist())
        elif frame.kind == frames.SUMMARY:
            summary = frame.json()
    if summary is None:
        raise ProtocolError("range round ended without a summary")
    return differing_ids, summary


def keys_by_ranges(
    sorted_snapshot: Path, key_cols: list[Column], shipped: list[Range]
) -> Iterator[tuple[bool, pa.RecordBatch]]:
    """The snapshot's keys, each batch with whether its keys lie in a shipped range (True)
    or in none (False: verified unchanged by checksum)."""
    key = [c.name for c in key_cols]
    index = _index(key, shipped) if shipped else None
    schema = pa.schema([pa.field(c.name, c.type.arrow()) for c in key_cols])
    buffers: dict[bool, list] = {False: [], True: []}
    for k, _ in _stream(sorted_snapshot, key):
        inside = index is not None and index.locate(k) is not None
        buffer = buffers[inside]
        buffer.append(k)
        if len(buffer) >= 65_536:
            yield inside, _key_batch(buffer, key_cols, schema)
            buffers[inside] = []
    for inside, buffer in buffers.items():
        if buffer:
            yield inside, _key_batch(buffer, key_cols, schema)


def _key_batch(keys: list, key_cols: list[Column], schema: pa.Schema) -> pa.RecordBatch:
    if len(key_cols) == 1:
        return pa.RecordBatch.from_arrays([pa.array(keys, key_cols[0].type.arrow())], schema=schema)
    return pa.RecordBatch.from_arrays(
        [pa.array([k[j] for k in keys], c.type.arrow()) for j, c in enumerate(key_cols)], schema=schema
    )


def sorted_hashes(rows: DataFrame | pa.Table, ctx: SiteContext, path: Path) -> None:
    """Write the row hashes of the stored `rows` in key order to `path`, as part files whose
    names follow that order: a Spark frame's sorted on the executors, an Arrow table's (the
    Arrow executor: warehouse/executor.py) in this process, one file."""
    site, sync = ctx.site, ctx.sync
    hashed = row_hashes_of(rows, site.columns, site.key, sync.seed, sync.options.hash_bits)
    if isinstance(hashed, pa.Table):
        path.mkdir(parents=True, exist_ok=True)
        pq.write_table(hashed.sort_by(ascending(site.key)), path / "part-00000.parquet")
    else:
        hashed.orderBy(*site.key).write.parquet(str(path))


class RangeChecksum(Strategy):
    name = "range_checksum"

    @property
    def _sorted(self) -> Path:
        return self.ctx.staging / "sorted"

    @property
    def _verified(self) -> Path:
        return self.ctx.staging / "verified.parquet"

    @property
    def _inside(self) -> Path:
        return self.ctx.staging / "shipped-keys.parquet"

    def plan(self) -> None:
        """The snapshot's row hashes in key order, to cut ranges from, on the sync's executor."""
        sorted_hashes(self.snapshot.on(self.ctx.sync.executor), self.ctx, self._sorted)

    def exchange(self) -> Answer:
        """The bisection rounds; then the snapshot's keys sorted by whether a shipped range
        holds them, and those the shipped ranges no longer hold named deleted (a shipped
        range comes back whole), so that the answer accounts for every key."""
        ctx = self.ctx
        key_cols, key = ctx.key_columns(), ctx.site.key
        key_schema = pa.schema([pa.field(c.name, c.type.arrow()) for c in key_cols])
        returned_path = ctx.staging / "returned.parquet"
        with Sink(returned_path, ctx.rows_schema()) as returned:
            outcome = bisect_ranges(ctx, self._sorted, returned.write)
        with Sink(self._verified, key_schema) as verified, Sink(self._inside, key_schema) as inside:
            for shipped, batch in keys_by_ranges(self._sorted, key_cols, outcome.shipped):
                (inside if shipped else verified).write(batch)
        came = pq.read_table(returned_path, columns=key).cast(key_schema)
        deleted_path = ctx.staging / "deleted.parquet"
        pq.write_table(self.shipped_keys().join(came, key, join_type="left anti"), deleted_path)
        m = ctx.metrics
        m.rows_scanned, m.rows_received, m.groups_sent = outcome.rows_scanned, returned.rows, outcome.ranges_sent
        m.range_rounds, m.ranges_shipped = outcome.rounds, len(outcome.shipped)
        m.range_reads = outcome.read_report()
        m.agent_pacing = outcome.pacing
        m.tuples_ungrouped = sum(r.count for r in outcome.shipped)
        m.tuples_grouped = verified.rows
        return Answer([returned_path], deleted_path)

    def fragment_build(self) -> FragmentBuild:
        return FragmentBuild.TOUCHED  # a key outside the shipped ranges is verified; inside, returned or deleted

    def shipped_keys(self) -> pa.Table:
        """The snapshot keys inside the ranges shipped (after `exchange`)."""
        return pq.read_table(self._inside).cast(self.ctx.key_schema())

    def unchanged_keys(self) -> DataFrame | None:
        """The snapshot keys outside every range shipped: their ranges' checksums matched."""
        ctx, spark = self.ctx, self.ctx.sync.spark
        return spark.read.schema(spark_schema(ctx.key_columns())).parquet(str(self._verified))

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """Checksums of the differing ranges at each bisection level, then their rows shipped.

        Each changed tuple is taken to sit in its own range down to the bottom, where a range
        of up to SHIP_THRESHOLD rows travels whole: an upper bound when changes cluster.

        >>> from warehouse.planning.cost_model import CostModel
        >>> est = SiteEstimate(1_000_000, 0.0001, 0.0, CostModel(50, 4, 16), 128)
        >>> 0 < RangeChecksum.expected_bytes(est) < est.full_bytes
        True
        """
        cost = estimate.cost
        per_range = 2 * cost.key_bytes + estimate.hash_bits / 8 + 9  # bounds, hash, id, count
        changes = estimate.changes
        ranges = INITIAL_RANGES
        size = max(1.0, estimate.rows / INITIAL_RANGES)
        total = 0.0
        while size > SHIP_THRESHOLD:
            total += min(ranges, max(1.0, changes) * BISECTION_FACTOR) * per_range
            ranges *= BISECTION_FACTOR
            size /= BISECTION_FACTOR
        shipped = min(estimate.rows, changes * min(size, SHIP_THRESHOLD))
        return total + shipped * cost.tuple_bytes
