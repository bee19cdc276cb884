"""The agent's answer to /v1/extract: steps 2 and 3, in one scan of the site query.

The warehouse sends units (group hash, see group_hash.py) and per-tuple hashes (tuple
hash, see tuple_hash.py) in one request. The agent reads the site query once and answers
with:

- rows whose key is in no unit (new tuples and the part the warehouse left ungrouped);
- keys of a unit that are gone from the site query, with the unit's uid;
- for a unit that lost keys, the hash and count of what is left, so the warehouse can check
  the surviving part against its own copy without resending the unit;
- the current rows of every intact unit whose hash differs;
- rows whose per-tuple hash differs, and keys sent with a hash that are gone.

Memory is bounded by the request, not by the table: about 17 bytes per unit key (plus the
key's own bytes when it is not a single integer; see keyindex.py), about 80 per unit, the
request body while it is decoded, and one batch of rows in flight.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from deltasieve_protocol import frames
from deltasieve_protocol.encoding import limbs_to_bytes, row_hash_limbs
from deltasieve_protocol.models import SiteColumn
from deltasieve_protocol.types import Column
from deltasieve_protocol.wire import COUNT, HASH, UID, key_values
from remote_agent import readahead
from remote_agent.adapters.base import Adapter, Session
from remote_agent.adapters.rows import RowConverter
from remote_agent.errors import SourceDataError
from remote_agent.settings import ScanSettings
from remote_agent.sitequery import ValidatedQuery
from remote_agent.strategies.checks import check_columns, duplicate_key, key_columns
from remote_agent.strategies.fetch import lookup_rows
from remote_agent.strategies.group_hash import UnitIndex
from remote_agent.strategies.tuple_hash import TupleIndex
from remote_agent.timings import Timings


def _first_repeat(positions: np.ndarray, seen: np.ndarray) -> int | None:
    """Index into `positions` of the first one met before (in an earlier batch or this one).

    >>> _first_repeat(np.array([3, 1, 3]), np.zeros(4, bool))
    2
    >>> _first_repeat(np.array([0, 1]), np.array([False, True]))
    1
    >>> _first_repeat(np.array([0, 1]), np.zeros(2, bool)) is None
    True
    """
    again = seen[positions]
    if again.any():
        return int(np.flatnonzero(again)[0])
    order = np.argsort(positions, kind="stable")
    same = np.flatnonzero(positions[order][1:] == positions[order][:-1])
    return int(order[same[0] + 1]) if len(same) else None


class Extraction:
    """One extraction request: state and the generator of response frames."""

    def __init__(
        self,
        adapter: Adapter,
        query: ValidatedQuery,
        expected_columns: list[SiteColumn],
        units: UnitIndex,
        *,
        seed: int,
        bits: int,
        batch_rows: int,
        tuples: TupleIndex | None = None,
        scan: ScanSettings | None = None,
        source_clock: bool = False,
        query_plan: bool = False,
        source_snapshot: bool = False,
    ):
        scan = scan or ScanSettings()
        check_columns(query, expected_columns)
        self.source_clock = source_clock
        self.source_snapshot = source_snapshot
        self.query_plan = query_plan
        self.adapter = adapter
        self.query = query
        self.units = units
        self.tuples = tuples or TupleIndex(key_columns(query))
        self.units.freeze()
        self.tuples.freeze()
        self.seed = seed
        self.bits = bits
        self.batch_rows = batch_rows
        self.scan = scan
        self.converter = RowConverter(adapter, query.columns, query.where(), hash_key=query.hash_key)
        self.hash_columns = [Column(c.name, c.type) for c in query.columns]
        self.stats: dict[str, Any] = {
            "rows_scanned": 0,
            "rows_ungrouped": 0,
            "rows_changed": 0,
            "units": len(units.uids),
            "unit_keys": len(units.keys),
            "tuple_hashes": len(self.tuples.keys),
        }
        self.timings = Timings()
        self.pacer = scan.pacer()

    def run(self) -> Iterator[bytes]:
        """The answer's frames, the summary last."""
        return self.timings.sending(self._run())

    def _run(self) -> Iterator[bytes]:
        started = time.monotonic()
        # One connection; every chunk and every lookup is a short transaction of its own
        # (see chunks.py for why the answer stays exact).
        with self.adapter.session() as session:
            if self.source_clock:  # before the scan: a row written during it is stamped later
                self.stats["source_clock"] = self.adapter.source_clock(session)
            if self.source_snapshot:  # likewise: a row written during the scan is newer than it
                self.stats["source_snapshot"] = self.adapter.source_snapshot(session)
            if self.query_plan:
                self.stats["query_plan"] = self.adapter.query_plan(session, self.query.sql)
            dumps = self.adapter.dumps_read(self.query.tables)
            if dumps is not None:  # the dump files read: the snapshot_diff strategy's state
                self.stats["dumps"] = dumps
            yield from self._scan(session)
            scanned = time.monotonic()
            yield from self._deleted_and_broken()
            changed = self._changed_units()
            yield from self._changed_rows(session, changed)
        self.stats.update(
            scan_s=round(scanned - started, 4),
            elapsed_s=round(time.monotonic() - started, 4),
            timings=self.timings.to_json(),
            pacing=self.pacer.report(),
        )
        yield frames.json_frame(frames.SUMMARY, self.stats)

    def _scan(self, session: Session) -> Iterator[bytes]:
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        timings = self.timings
        scanned = readahead.batches(
            self.adapter,
            self.query,
            self.converter,
            self.scan,
            batch_rows=self.batch_rows,
            timings=timings,
            session=session,
            pacer=self.pacer,
        )
        with contextlib.closing(scanned):
            for batch in scanned:
                self.stats["rows_scanned"] += batch.num_rows
                if len(self.tuples.keys):
                    with timings.phase("hash_s"):
                        batch, changed = self._compare_tuples(batch)
                    if changed is not None:
                        self.stats["rows_changed"] += changed.num_rows
                        yield frames.arrow_frame(frames.CHANGED_ROWS, changed)
                with timings.phase("hash_s"):
                    in_unit = self._meet_units(batch)
                if not in_unit.all():
                    rest = batch.filter(pa.array(~in_unit))
                    pending.append(rest)
                    pending_rows += rest.num_rows
                    self.stats["rows_ungrouped"] += rest.num_rows
                    if pending_rows >= self.batch_rows:
                        yield frames.arrow_frame(frames.UNGROUPED_ROWS, pa.Table.from_batches(pending))
                        pending, pending_rows = [], 0
        if pending:
            yield frames.arrow_frame(frames.UNGROUPED_ROWS, pa.Table.from_batches(pending))

    def _meet_units(self, batch: pa.RecordBatch) -> np.ndarray:
        """Add the hashes of the batch's rows that belong to a unit to their units' sums;
        which rows do."""
        units = self.units
        positions = units.keys.find(batch)
        in_unit = positions >= 0
        if in_unit.any():
            met = positions[in_unit]
            repeat = _first_repeat(met, units.keys.seen)
            if repeat is not None:
                raise self._duplicate(batch, int(np.flatnonzero(in_unit)[repeat]))
            units.met(met, row_hash_limbs(batch.filter(pa.array(in_unit)), self.hash_columns, self.seed, self.bits))
        return in_unit

    def _duplicate(self, batch: pa.RecordBatch, row: int) -> SourceDataError:
        keys = key_values(batch, self.query.key)
        return duplicate_key(keys[row], self.query, batch, keys)

    def _compare_tuples(self, batch: pa.RecordBatch):
        """Split off rows that carry a per-tuple hash; return the rest and the changed ones."""
        tuples = self.tuples
        positions = tuples.keys.find(batch)
        hashed = positions >= 0
        if not hashed.any():
            return batch, None
        met = positions[hashed]
        repeat = _first_repeat(met, tuples.keys.seen)
        if repeat is not None:
            raise self._duplicate(batch, int(np.flatnonzero(hashed)[repeat]))
        tuples.keys.seen[met] = True
        sub = batch.filter(pa.array(hashed))
        got = row_hash_limbs(sub, self.hash_columns, self.seed, tuples.bits)
        changed = (got != tuples.expected[met]).any(axis=1)
        out = sub.filter(pa.array(changed)) if changed.any() else None
        return batch.filter(pa.array(~hashed)), out

    def _deleted_and_broken(self) -> Iterator[bytes]:
        yield from self._deleted_tuples()
        units = self.units
        gone = np.flatnonzero(~units.keys.seen)
        for start in range(0, len(gone), self.batch_rows):
            part = gone[start : start + self.batch_rows]
            yield self._deleted_frame(units.uids[units.keys.payload[part]], units.keys.keys(part))
        self.stats["keys_deleted"] = len(gone)
        broken = np.flatnonzero(units.counts < units.sizes)
        self.stats["units_broken"] = len(broken)
        for start in range(0, len(broken), self.batch_rows):
            part = broken[start : start + self.batch_rows]
            batch = pa.RecordBatch.from_pydict(
                {
                    UID: pa.array(units.uids[part], pa.int64()),
                    HASH: pa.array(limbs_to_bytes(units.totals(part)), pa.binary(self.bits // 8)),
                    COUNT: pa.array(units.counts[part], pa.int64()),
                }
            )
            yield frames.arrow_frame(frames.BROKEN_UNITS, batch)

    def _deleted_tuples(self) -> Iterator[bytes]:
        """Keys sent with a per-tuple hash that the scan did not meet (uid -1: no unit)."""
        tuples = self.tuples
        gone = np.flatnonzero(~tuples.keys.seen)
        self.stats["tuples_deleted"] = len(gone)
        for start in range(0, len(gone), self.batch_rows):
            part = gone[start : start + self.batch_rows]
            yield self._deleted_frame(np.full(len(part), -1, np.int64), tuples.keys.keys(part))

    def _deleted_frame(self, uids: np.ndarray, keys: pa.Table) -> bytes:
        data = {UID: pa.array(uids, pa.int64())}
        for name in self.query.key:
            data[name] = keys.column(name).combine_chunks()
        return frames.arrow_frame(frames.DELETED_KEYS, pa.RecordBatch.from_pydict(data))

    def _changed_units(self) -> np.ndarray:
        units = self.units
        whole = np.flatnonzero(units.counts == units.sizes)
        differ = (units.totals(whole) != units.expected[whole]).any(axis=1)
        changed = whole[differ]
        self.stats["units_changed"] = len(changed)
        self.stats["units_identical"] = len(units.uids) - len(changed) - self.stats["units_broken"]
        return changed

    def _changed_rows(self, session: Session, changed: np.ndarray) -> Iterator[bytes]:
        if not len(changed):
            return
        units = self.units
        wanted = np.flatnonzero(np.isin(units.keys.payload, changed))
        keys = key_values(units.keys.keys(wanted), [c.name for c in units.key])
        sent = 0
        looked_up = lookup_rows(
            self.adapter, session, self.query, self.converter, keys, self.batch_rows, self.scan.chunk_rows
        )
        for batch in self.timings.timed("lookup_s", looked_up):
            sent += batch.num_rows
            yield frames.arrow_frame(frames.CHANGED_ROWS, batch)
        self.stats["rows_changed"] += sent
