"""The agent's side of /v1/sketch: set reconciliation of the site query with the warehouse.

The warehouse sends its reconciliation table (an IBLT of (key fingerprint, row hash) pairs,
see deltasieve_protocol/iblt.py), compact and shrunk to a width `w`, and names a wider width `A` that
`w` divides. The agent reads the site query once, in its usual chunks, folds the pair of
every row into a table of its own `A` cells wide, shrinks that to `w`, subtracts it from the
warehouse's and peels what is left:

- pairs only the source holds are new or changed rows: their current rows go back (ROWS);
- pairs only the warehouse holds whose key came back in no row are deleted rows: their
  keys go back (DELETED_KEYS), or for a key that is not its own fingerprint, the
  fingerprint (GONE_FINGERPRINTS: the agent never saw that key), which the warehouse
  looks up in its fragment; the old side of an update needs nothing, the warehouse finds
  it in its fragment too;
- a table that does not peel (more differences than it was sized for) is said so in the
  summary. If `w` is narrower than `A`, the agent keeps its table (a `Reconciliation`)
  under a session id for a while, and the warehouse may send its table again, wider, in a
  request naming that session: a new stage without a new read of the source. A small
  first stage makes a sync with no change cost almost nothing; the second is sized by the
  statistics.

Memory: the agent's table (21 bytes a cell in memory, `A` cells per sub-table: a small
multiple of what the statistics expect) and one batch of rows with its fingerprints: each
batch is folded in as it is read (iblt_fold.py: nothing held beside the table). A key of
one integer column is its own fingerprint, so the keys of the rows to send come straight
out of the peel. Any other key is written with its fingerprint to a temporary file on the
agent's disk while the site query is read (never to the database), and read back to find
the keys of the differing pairs.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from deltasieve_protocol import frames
from deltasieve_protocol.fingerprints import (
    integer_key,
    key_fingerprints,
    keys_from_fingerprints,
    row_fingerprints,
    sketch_seeds,
)
from deltasieve_protocol.iblt import Iblt, Peeled
from deltasieve_protocol.types import Column
from deltasieve_protocol.wire import KEY_FP, key_values
from remote_agent import readahead
from remote_agent.adapters.base import Adapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.errors import BadRequest, Gone
from remote_agent.pacing import Pacer
from remote_agent.settings import ScanSettings, SketchSettings
from remote_agent.sitequery import ValidatedQuery
from remote_agent.strategies.checks import key_columns
from remote_agent.strategies.fetch import lookup_rows
from remote_agent.strategies.sketch_columns import UpdatedRows
from remote_agent.timings import Timings

#: Bytes of one cell of the agent's table in memory (compact: a count byte, two 64-bit
#: sums, a 32-bit checksum).
CELL_MEMORY = 21


def table_width(asked: int, sent: int, hashes: int, budget_bytes: int) -> int:
    """Cells per sub-table of the agent's own table: the width asked for when it fits the
    memory budget, else the widest multiple of the sent width that divides it and fits
    (the sent width at least). The summary names the width built, so that the warehouse
    sends no later stage wider than it.

    >>> table_width(1_120, 70, 3, 1_120 * 3 * CELL_MEMORY), table_width(1_120, 70, 3, 600 * 3 * CELL_MEMORY)
    (1120, 560)
    >>> table_width(1_120, 70, 3, 10)
    70
    """
    if asked * hashes * CELL_MEMORY <= budget_bytes:
        return asked
    steps = asked // sent
    fits = [m for m in range(1, steps + 1) if steps % m == 0 and sent * m * hashes * CELL_MEMORY <= budget_bytes]
    return sent * max(fits, default=1)


#: Rows per spilled batch and per DELETED_KEYS frame.
SPILL_ROWS = 65_536
#: Seconds a kept reconciliation waits for the warehouse's next stage.
SESSION_TTL_S = 600.0


class Reconciliation:
    """The source's side of one sketch exchange: its table, and its keys' fingerprints if spilled."""

    def __init__(self, query: ValidatedQuery, seed: int, width: int, hashes: int, spill_dir: str | None = None):
        self.query = query
        self.seed = seed
        self.key = key_columns(query)
        self.columns = [Column(c.name, c.type) for c in query.columns]
        self.table = Iblt(width * hashes, hashes, seed, compact=True)
        self.rows_scanned = 0
        self._dir = Path(tempfile.mkdtemp(prefix="deltasieve-sketch-", dir=spill_dir))
        #: whether a key is its own fingerprint (one integer column): else keys are spilled
        self.own_fingerprints = integer_key(self.key)
        self._spill = None if self.own_fingerprints else _Spill(self._dir / "keys.arrow", self.key)
        self.touched = time.monotonic()
        #: the updated rows held for the cells request (protocol 4: sketch_columns.py)
        self.updated: UpdatedRows | None = None

    def scan(
        self,
        adapter: Adapter,
        converter: RowConverter,
        scan: ScanSettings,
        batch_rows: int,
        timings: Timings,
        pacer: Pacer | None = None,
    ) -> None:
        """Read the site query once and fold every row's pair into the table."""
        key_seed, row_seed = sketch_seeds(self.seed)
        scanned = readahead.batches(
            adapter, self.query, converter, scan, batch_rows=batch_rows, timings=timings, pacer=pacer
        )
        with contextlib.closing(scanned):
            for batch in scanned:
                self.rows_scanned += batch.num_rows
                with timings.phase("hash_s"):
                    kf = key_fingerprints(batch, self.key, key_seed)
                    self.table.add(kf, row_fingerprints(batch, self.columns, row_seed), normalize=False)
                if self._spill is not None:
                    self._spill.write(kf, batch)
        with timings.phase("hash_s"):
            self.table.normalize()  # once, not per batch: a pass over the whole table
        if self._spill is not None:
            self._spill.close()

    def peel(self, sent: Iblt) -> tuple[Peeled, int]:
        """The pairs only one side holds (plus: the warehouse, minus: the source), and the
        number of empty cells of the difference before peeling (how the warehouse gauges
        the number of differences when the peel fails). The difference is written over
        `sent`, which is of no use after."""
        if sent.hashes != self.table.hashes or sent.seed != self.seed or not sent.compact:
            raise BadRequest(f"the sketch table {sent!r} does not match this exchange's (seed, hashes, compact)")
        if self.table.width % sent.width:
            raise BadRequest(
                f"the sketch table is {sent.width} cells wide, which does not divide this exchange's width {self.table.width}"
            )
        # The difference is written over the sent table, the agent's own (maybe wider)
        # one left whole for a later stage: never a third table.
        difference = sent.subtract_folded(self.table)
        empty = difference.empty_cells()
        self.touched = time.monotonic()
        return difference.peel(in_place=True), empty

    def forget_table(self) -> None:
        """Let go of the table: after a complete peel no later stage reads it (a session
        kept for the cells request then serves no sketch stage)."""
        self.table = Iblt(self.table.hashes, self.table.hashes, self.seed, compact=True)

    def key_table(self, fingerprints: np.ndarray) -> pa.Table:
        """The keys with these fingerprints (of rows the source holds), each beside its
        fingerprint (column KEY_FP)."""
        if self._spill is None:
            keys = keys_from_fingerprints(fingerprints, self.key)
            return keys.add_column(0, KEY_FP, pa.array(fingerprints, pa.uint64()))
        return self._spill.key_table(fingerprints)

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


class Reconciliations:
    """Reconciliations kept between the stages of their exchanges, by session id.

    At most `limit` are kept (the oldest is dropped first), none longer than `ttl_s` idle.
    A session is taken out while a request uses it, so two requests never share one.
    """

    def __init__(self, limit: int, ttl_s: float = SESSION_TTL_S):
        self.limit = limit
        self.ttl_s = ttl_s
        self._kept: OrderedDict[str, Reconciliation] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, rec: Reconciliation) -> str:
        session = secrets.token_hex(16)
        with self._lock:
            self._expire()
            self._kept[session] = rec
            while len(self._kept) > self.limit:
                self._kept.popitem(last=False)[1].close()
        return session

    def take(self, session: str) -> Reconciliation:
        with self._lock:
            self._expire()
            rec = self._kept.pop(session, None)
        if rec is None:
            raise Gone(
                f"sketch session {session!r} is not held here (expired after {self.ttl_s:g} s, dropped for a newer one, "
                "or the agent restarted): start the exchange again"
            )
        return rec

    def restore(self, session: str, rec: Reconciliation) -> None:
        """Put back a reconciliation taken for a request that never started."""
        with self._lock:
            self._kept[session] = rec

    def close(self) -> None:
        with self._lock:
            while self._kept:
                self._kept.popitem()[1].close()

    def __len__(self) -> int:
        return len(self._kept)

    def _expire(self) -> None:
        now = time.monotonic()
        for session in [s for s, rec in self._kept.items() if now - rec.touched > self.ttl_s]:
            self._kept.pop(session).close()


@dataclass(frozen=True)
class SketchStage:
    """What a sketch request asks besides its table: the exchange's seed, the width of the
    agent's table it asks for (per sub-table), and rows per ROWS frame."""

    seed: int
    width: int
    batch_rows: int


def sketch_answer(
    adapter: Adapter,
    query: ValidatedQuery,
    sent: Iblt,
    stage: SketchStage,
    *,
    rec: Reconciliation | None,
    kept: Reconciliations,
    settings: SketchSettings | None = None,
    said: dict | None = None,
) -> Iterator[bytes]:
    """The answer of /v1/sketch, as frames; see the module docstring. `said`: fields its
    summary carries besides (the change token's answer, when it rode on the request).

    With `settings.digest_bits` (protocol 4), updated rows go as column digests of that many
    bits and are held for the cells request (sketch_columns.py); None: whole, as in protocol 3.

    `rec` is the kept reconciliation of a later stage, None on the first (which reads the
    site query into a new one `stage.width` cells wide per sub-table, or narrower to stay
    within `settings.table_bytes`: see `table_width`).
    """
    settings = settings or SketchSettings()
    seed, width, batch_rows = stage.seed, stage.width, stage.batch_rows
    converter = RowConverter(adapter, query.columns, query.where(), hash_key=query.hash_key)
    if rec is None and width % sent.width:
        raise BadRequest(
            f"the sketch table is {sent.width} cells wide, which does not divide the width {width} asked for"
        )
    if rec is not None and rec.table.width % sent.width:
        raise BadRequest(
            f"the sketch table is {sent.width} cells wide, which does not divide the width {rec.table.width} "
            "of the table this session holds (the width its first answer named)"
        )

    timings = Timings()
    scan, table_bytes, digest_bits = settings.scan, settings.table_bytes, settings.digest_bits
    pacer = scan.pacer()

    def answer() -> Iterator[bytes]:
        nonlocal rec, sent
        started = time.monotonic()
        if rec is None:
            built = width if table_bytes is None else table_width(width, sent.width, sent.hashes, table_bytes)
            rec = Reconciliation(query, seed, built, sent.hashes, settings.spill_dir)
            try:
                rec.scan(adapter, converter, scan, batch_rows, timings, pacer)
            except BaseException:
                rec.close()
                raise
        keep = False
        try:
            peeled, empty = rec.peel(sent)
            summary = {
                "rows_scanned": rec.rows_scanned,
                "complete": peeled.complete,
                "cells": sent.cells,
                "empty_cells": empty,
                "width": rec.table.width,  # the agent's own table: no later stage may be wider
                "pacing": pacer.report(),  # of this stage's scan (none when a kept table serves it)
                **(said or {}),
            }
            narrower = sent.width < rec.table.width
            del sent  # the peel wrote over it: its memory is the lookups' now
            if not peeled.complete:
                if narrower:  # a wider stage may follow: keep the table
                    summary["session"] = kept.keep(rec)
                    keep = True
                summary.update(elapsed_s=round(time.monotonic() - started, 4), timings=timings.to_json())
                yield frames.json_frame(frames.SUMMARY, summary)
                return
            rec.forget_table()  # the difference is whole: no later stage will need the table
            updated = None
            if digest_bits is not None:  # a key on both sides was updated
                both = np.intersect1d(peeled.minus_keys, peeled.plus_keys)
                updated = UpdatedRows(both, rec.key, rec.columns, seed, digest_bits, settings.row_check_bits)
                rec.updated = updated

            def hold() -> str:
                """Keep the reconciliation, with its updated rows, for the cells request."""
                nonlocal keep
                assert rec is not None
                keep = True
                return kept.keep(rec)

            yield from _rows_and_deletes(
                adapter, rec, converter, peeled, summary, batch_rows, scan.chunk_rows, started, timings, updated, hold
            )
        finally:
            if not keep:
                rec.close()

    return timings.sending(answer())


def _rows_and_deletes(
    adapter: Adapter,
    rec: Reconciliation,
    converter: RowConverter,
    peeled: Peeled,
    summary: dict,
    batch_rows: int,
    chunk_rows: int,
    started: float,
    timings: Timings,
    updated: UpdatedRows | None = None,
    hold: Callable[[], str] | None = None,
) -> Iterator[bytes]:
    """The rows of the pairs only the source holds (the updated ones as `updated` says),
    then the keys gone from it."""
    query = rec.query
    key_seed, _ = sketch_seeds(rec.seed)
    wanted = rec.key_table(np.unique(peeled.minus_keys))
    found: list[np.ndarray] = []
    sent = 0
    with adapter.session() as session:
        keys = key_values(wanted, query.key)
        looked_up = lookup_rows(adapter, session, query, converter, keys, batch_rows, chunk_rows)
        for batch in timings.timed("lookup_s", looked_up):
            sent += batch.num_rows
            with timings.phase("hash_s"):
                found.append(key_fingerprints(batch, rec.key, key_seed))
            if updated is None:
                yield frames.arrow_frame(frames.ROWS, batch)
            else:
                yield from updated.split(batch, found[-1])
    # wanted keys whose row left between the read and the lookup, and keys only the warehouse holds
    returned = pa.array(np.concatenate([np.zeros(0, np.uint64), *found]), pa.uint64())
    gone = [wanted.filter(pc.invert(pc.is_in(wanted.column(KEY_FP), value_set=returned)))]
    only_warehouse = np.setdiff1d(peeled.plus_keys, peeled.minus_keys)
    if rec.own_fingerprints:
        gone.append(rec.key_table(only_warehouse))
        unnamed = only_warehouse[:0]
    else:  # a key the source no longer holds was never spilled: the warehouse names it
        unnamed = only_warehouse
    deleted = 0
    for batch in pa.concat_tables(gone).drop_columns([KEY_FP]).to_batches(max_chunksize=SPILL_ROWS):
        deleted += batch.num_rows
        yield frames.arrow_frame(frames.DELETED_KEYS, batch)
    for start in range(0, unnamed.size, SPILL_ROWS):
        part = pa.record_batch([pa.array(unnamed[start : start + SPILL_ROWS], pa.uint64())], names=[KEY_FP])
        deleted += part.num_rows
        yield frames.arrow_frame(frames.GONE_FINGERPRINTS, part)
    if updated is not None and updated.rows and hold is not None:
        summary = {**summary, **updated.summary(), "session": hold()}
    yield frames.json_frame(
        frames.SUMMARY,
        {
            **summary,
            "differences": len(peeled.plus_keys) + len(peeled.minus_keys),
            "rows_sent": sent,
            "deleted_sent": deleted,
            "elapsed_s": round(time.monotonic() - started, 4),
            "timings": timings.to_json(),
        },
    )


class _Spill:
    """Fingerprints with their keys, written to a file while the site query is read."""

    def __init__(self, path: Path, key: list[Column]):
        self.path = path
        self.names = [c.name for c in key]
        fields = [pa.field(KEY_FP, pa.uint64())] + [pa.field(c.name, c.type.arrow()) for c in key]
        self.schema = pa.schema(fields)
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = ipc.new_stream(self._sink, self.schema, options=ipc.IpcWriteOptions(compression="zstd"))

    def write(self, fingerprints: np.ndarray, batch: pa.RecordBatch) -> None:
        arrays = [pa.array(fingerprints, pa.uint64())] + [batch.column(n) for n in self.names]
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))

    def close(self) -> None:
        self._writer.close()
        self._sink.close()

    def key_table(self, fingerprints: np.ndarray) -> pa.Table:
        """The keys spilled with these fingerprints, beside them: one read of the file."""
        if len(fingerprints) == 0:
            return self.schema.empty_table()
        wanted = pa.array(fingerprints, pa.uint64())
        with pa.OSFile(str(self.path), "rb") as source:
            hits = [b.filter(pc.is_in(b.column(KEY_FP), value_set=wanted)) for b in ipc.open_stream(source)]
        return pa.Table.from_batches(hits, schema=self.schema)
