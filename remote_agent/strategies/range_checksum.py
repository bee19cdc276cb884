"""Range checksums at the source: the agent's side of the range-checksum strategy.

The baseline of query-based change detection by key ranges (incremental differencing with
range checksums) and of tools such as data-diff: the warehouse sends key ranges with the
row count and hash sum it expects in each; the agent reads the rows of those ranges, sums
each range's rows, answers with the ranges that differ, and ships in full the rows of
ranges the warehouse asked for (the small ones, at the bottom of the bisection).

It reads only what the ranges cover: merged where they touch and capped in number
(key_intervals.py), each interval a keyset-chunked read with its bounds in the WHERE
clause (`ValidatedQuery.within`), built here from the request's values as bound
parameters. The first round's ranges cover every key, so it reads the whole site query;
a later round reads the ranges that differed. It reads the whole site query instead when
the adapter cannot make the database order a key column as Python orders its values
(`Adapter.range_key`), since the agent places rows in ranges by Python's order; the
summary says which (`ranged`, `intervals`, `full_scan_reason`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pyarrow as pa

from deltasieve_protocol import frames
from deltasieve_protocol.encoding import combine, hash_from_bytes, hash_to_bytes, row_hashes
from deltasieve_protocol.ranges import RangeSet, RangesOverlap
from deltasieve_protocol.types import Column
from deltasieve_protocol.wire import COUNT, HASH, HI, LO, RID, SHIP, key_values
from remote_agent import key_intervals, readahead
from remote_agent.adapters.base import Adapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.errors import BadRequest
from remote_agent.settings import ScanSettings
from remote_agent.sitequery import ValidatedQuery
from remote_agent.timings import Timings


def range_set(key: list[str], batches) -> RangeSet:
    """The ranges of a request's frames, sorted and checked (400 when they overlap)."""
    ranges = RangeSet(key=key)
    for batch in batches:
        add_ranges(ranges, batch)
    try:
        ranges.freeze()
    except RangesOverlap as exc:
        raise BadRequest(str(exc)) from None
    return ranges


def add_ranges(ranges: RangeSet, batch: pa.RecordBatch) -> None:
    """Append the ranges of one RANGES frame."""
    names = [RID, SHIP, COUNT, HASH] + [LO + k for k in ranges.key] + [HI + k for k in ranges.key]
    missing = [n for n in names if n not in batch.schema.names]
    if missing:
        raise BadRequest(f"range frame lacks columns {missing}")
    los = _bounds(batch, LO, ranges.key)
    his = _bounds(batch, HI, ranges.key)
    for rid, ship, count, h, lo, hi in zip(
        batch.column(RID).to_pylist(),
        batch.column(SHIP).to_pylist(),
        batch.column(COUNT).to_pylist(),
        batch.column(HASH).to_pylist(),
        los,
        his,
    ):
        ranges.append(rid, lo, hi, ship, (count, hash_from_bytes(h) if h is not None else 0))


def _bounds(batch: pa.RecordBatch, prefix: str, key: list[str]) -> list:
    cols = [batch.column(prefix + k).to_pylist() for k in key]
    out: list[object] = []
    for values in zip(*cols):
        if all(v is None for v in values):
            out.append(None)
        else:
            out.append(values[0] if len(key) == 1 else tuple(values))
    return out


def ranged_query(adapter: Adapter, query: ValidatedQuery, ranges: RangeSet) -> tuple[ValidatedQuery, dict]:
    """The query read over the request's ranges only, and what the summary says of it.

    The whole query (and the reason) when a key column might sort otherwise at the source
    than in Python, or when the ranges span every key.
    """
    names = [c.name for c in query.columns]
    ordered, indexed = [], True
    for name in query.key:
        position = names.index(name)
        column, stored = query.columns[position], query.key_column(name)
        key = adapter.range_key(column, stored, query.origins[position])
        if key is None:
            reason = (
                f"the source may not order key column {name!r} ({column.declared or column.type}) as the agent does"
            )
            return query, {"ranged": False, "intervals": 0, "full_scan_reason": reason}
        ordered.append(key)
        indexed = indexed and key is stored
    limit = key_intervals.MAX_INTERVALS if indexed else key_intervals.MAX_UNINDEXED_INTERVALS
    intervals = key_intervals.plan(list(zip(ranges.los, ranges.his)), limit)
    if not intervals:
        return query, {"ranged": False, "intervals": 0, "full_scan_reason": "the ranges span every key"}
    bound = [(_bound(adapter, lo), _bound(adapter, hi)) for lo, hi in intervals]
    return query.within(bound, ordered), {"ranged": True, "intervals": len(bound), "full_scan_reason": None}


def _bound(adapter: Adapter, value) -> tuple | None:
    if value is None:
        return None
    return tuple(adapter.bind(v) for v in (value if isinstance(value, tuple) else (value,)))


def range_scan(
    adapter: Adapter,
    query: ValidatedQuery,
    ranges: RangeSet,
    *,
    seed: int,
    bits: int,
    batch_rows: int,
    scan: ScanSettings | None = None,
) -> Iterator[bytes]:
    """Read the ranges once (in chunks, see chunks.py; paced, see pacing.py); ship rows of ranges marked ship; report the other ranges that differ."""
    scan = scan or ScanSettings()
    timings = Timings()
    pacer = scan.pacer()
    read, reading = ranged_query(adapter, query, ranges)

    def answer() -> Iterator[bytes]:
        started = time.monotonic()
        converter = RowConverter(adapter, query.columns, query.where(), hash_key=query.hash_key)
        sums = _RangeSums(ranges, [Column(c.name, c.type) for c in query.columns], seed, bits)
        shipment = _Shipment(batch_rows)
        scanned = 0
        batches = readahead.batches(adapter, read, converter, scan, batch_rows=batch_rows, timings=timings, pacer=pacer)
        with contextlib.closing(batches):
            for batch in batches:
                scanned += batch.num_rows
                with timings.phase("hash_s"):
                    to_ship = sums.add(batch, [ranges.locate(k) for k in key_values(batch, query.key)])
                yield from shipment.add(batch, to_ship)
        yield from shipment.rest()
        differ = sums.differing()
        yield from sums.frames(differ, batch_rows)
        yield frames.json_frame(
            frames.SUMMARY,
            {
                "rows_scanned": scanned,
                "rows_shipped": shipment.rows,
                "ranges": len(ranges.rids),
                "ranges_differing": len(differ),
                **reading,
                "elapsed_s": round(time.monotonic() - started, 4),
                "timings": timings.to_json(),
                "pacing": pacer.report(),
            },
        )

    return timings.sending(answer())


class _RangeSums:
    """The rows counted and hash-summed per range of the request, as the scan places them."""

    def __init__(self, ranges: RangeSet, columns: list[Column], seed: int, bits: int):
        self.ranges, self.columns, self.seed, self.bits = ranges, columns, seed, bits
        self.counts = [0] * len(ranges.rids)
        self.sums = [0] * len(ranges.rids)

    def add(self, batch: pa.RecordBatch, where: list[int | None]) -> list[bool]:
        """Count and sum the rows of ranges not shipped (`where`: each row's range, None: none);
        returns which rows are shipped instead."""
        ship = self.ranges.ship
        to_ship = [i is not None and ship[i] for i in where]
        to_sum = [i is not None and not ship[i] for i in where]
        if any(to_sum):
            summed = batch.filter(pa.array(to_sum))
            placed = (i for i, s in zip(where, to_sum) if s and i is not None)
            for i, h in zip(placed, row_hashes(summed, self.columns, self.seed, self.bits)):
                self.counts[i] += 1
                self.sums[i] += h
        return to_ship

    def differing(self) -> list[int]:
        """Positions of the ranges not shipped whose count or sum differs from what the warehouse expects."""
        return [
            i
            for i in range(len(self.counts))
            if not self.ranges.ship[i]
            and (self.counts[i], combine([self.sums[i]], self.bits)) != self.ranges.expected[i]
        ]

    def frames(self, differ: list[int], batch_rows: int) -> Iterator[bytes]:
        """RANGE_SUMS frames of up to `batch_rows` differing ranges: their id, count and hash sum."""
        bits = self.bits
        for start in range(0, len(differ), batch_rows):
            part = differ[start : start + batch_rows]
            yield frames.arrow_frame(
                frames.RANGE_SUMS,
                pa.RecordBatch.from_pydict(
                    {
                        RID: pa.array([self.ranges.rids[i] for i in part], pa.int64()),
                        COUNT: pa.array([self.counts[i] for i in part], pa.int64()),
                        HASH: pa.array(
                            [hash_to_bytes(combine([self.sums[i]], bits), bits) for i in part], pa.binary(bits // 8)
                        ),
                    }
                ),
            )


class _Shipment:
    """The rows of shipped ranges, sent as ROWS frames of at least `batch_rows` rows (the last fewer)."""

    def __init__(self, batch_rows: int):
        self.batch_rows = batch_rows
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        #: Rows shipped so far.
        self.rows = 0

    def add(self, batch: pa.RecordBatch, to_ship: list[bool]) -> Iterator[bytes]:
        """Keep the rows of `batch` marked in `to_ship`; a ROWS frame once enough are kept."""
        if not any(to_ship):
            return
        out = batch.filter(pa.array(to_ship))
        self.pending.append(out)
        self.pending_rows += out.num_rows
        self.rows += out.num_rows
        if self.pending_rows >= self.batch_rows:
            yield from self.rest()

    def rest(self) -> Iterator[bytes]:
        """The rows kept and not yet sent, as one ROWS frame."""
        if self.pending:
            yield frames.arrow_frame(frames.ROWS, pa.Table.from_batches(self.pending))
            self.pending, self.pending_rows = [], 0
