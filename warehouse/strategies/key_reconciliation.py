"""The key reconciliation of the change-stamp strategies: which keys the site query gained and lost.

A changed read (changed_rows.py) returns the rows stamped or written since the last sync;
a row deleted outright, or one that left the WHERE clause, leaves nothing to read, so each
sync also compares the keys the site query holds now with the snapshot's, over the site
query projected on its key columns: every key shipped, range checksums over the key-only
query, or a sketch of the keys (sketch/keys.py), whichever the statistics expect to move the
fewest bytes; a key sketch that does not peel ships the keys.

The reconciliation reads nothing of the changed read, so it runs beside it (`Beside`): on
its own connection to the agent (a sibling client, whose bytes are added to the site's)
and in a key-only context of its own (its own staging and metrics), while the site's thread
reads the changed rows. A sync then takes about as long as the slower of the two rather
than their sum. Which read comes first does not matter: the delta is built from the rows
read, the keys gained and lost and the snapshot, whichever way the two interleave with the
source's writes (a key gained that the changed read missed has its row fetched; a row read
whose key is gone is a delete); what either read misses because a write fell between them
is found by the next sync, as when they ran one after the other.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.util import inheritable_thread_target

from warehouse.agent_client import AgentClient
from warehouse.deltas.unique_keys import check_unique
from warehouse.errors import AgentBusy
from warehouse.metrics import add_timings
from warehouse.names import spark_schema
from warehouse.strategies.base import SiteContext, SiteEstimate, Snapshot, extract_exchange
from warehouse.strategies.range_checksum import INITIAL_RANGES, RangeChecksum
from warehouse.strategies.sketch import keys as key_sketch
from warehouse.strategies.sketch import tables as sketch_tables
from warehouse.strategies.stamps import keys_sql
from warehouse.viewdef import SiteQuery


def key_costs(estimate: SiteEstimate) -> dict[str, float]:
    """What each way of reconciling the keys is expected to move: every key shipped, range
    checksums over the key-only query (its first round's ranges counted in full), or a
    sketch of the keys (key_sketch.py). Only deletes and inserts change the set of keys.

    >>> from warehouse.planning.cost_model import CostModel
    >>> costs = key_costs(SiteEstimate(1_000_000, 0.01, 0.001, CostModel(60, 5, 16), 128, inserts=5000.0))
    >>> min(costs, key=costs.get), costs["ship"]
    ('sketch', 5000000.0)
    >>> costs = key_costs(SiteEstimate(200, 0.01, 0.1, CostModel(60, 5, 16), 128))
    >>> min(costs, key=costs.get)
    'ship'
    """
    cost = estimate.cost
    first_round = INITIAL_RANGES * (2 * cost.key_bytes + estimate.hash_bits / 8 + 9)  # bounds, hash, id, count
    return {
        "ship": estimate.rows * cost.key_bytes,
        "range_checksum": RangeChecksum.expected_bytes(key_sketch.keys_only(estimate)) + first_round,
        "sketch": key_sketch.expected_bytes(estimate),
    }


def cheapest(estimate: SiteEstimate) -> str:
    """The way of reconciling the keys expected to move the fewest bytes (the simplest on a tie)."""
    costs = key_costs(estimate)
    return min(costs, key=costs.__getitem__)


@dataclass
class KeysFound:
    """The keys the site query gained (`new`) and lost (`gone`) since the snapshot, and what finding them cost."""

    new: pa.Table
    gone: pa.Table
    #: the strategy report's key fields: key_reconciliation, keys_reconciled, and the way's own
    report: dict = field(default_factory=dict)
    #: rows the agent read, and its seconds and their split (`agent_timings`), over the way's requests
    rows_scanned: int = 0
    agent_seconds: float = 0.0
    agent_timings: dict[str, float] | None = None
    #: the table of the snapshot's keys a key sketch used (staged with the sync's delta)
    key_table: sketch_tables.SiteSketch | None = None


def reconcile(ctx: SiteContext, snapshot: Snapshot, method: str) -> KeysFound:
    """The keys gained and lost, found by `method` (`cheapest`'s names); a key sketch that
    peels nothing ships the keys. Its steps run on the sync's executor (warehouse/executor.py)."""
    keys_site = key_site(ctx)
    found = None
    if method == "sketch":
        found = _by_sketch(ctx, snapshot, keys_site)
    elif method == "range_checksum":
        found = _by_ranges(ctx, snapshot, keys_site)
    if found is None:
        unpeeled = method == "sketch"
        found = _shipped(ctx, snapshot, keys_site)
        if unpeeled:
            found.report["key_sketch_peeled"] = False
    return found


def key_site(ctx: SiteContext) -> SiteQuery:
    """The site query projected on its key columns (read as the site query reads them)."""
    site = ctx.site
    read_from = {k: v for k, v in site.read_from.items() if k in site.key}
    return SiteQuery(site.source, keys_sql(site), ctx.key_columns(), site.key, site.dialect, read_from)


def _shipped(ctx: SiteContext, snapshot: Snapshot, keys_site: SiteQuery) -> KeysFound:
    """Every current key of the site query, shipped."""
    keys_ctx, _ = key_sketch.key_only_context(ctx, snapshot, keys_site, "ts-keys")
    keys = extract_exchange(keys_ctx, prefix="ts-keys-")
    km = keys_ctx.metrics
    new, gone = _change_to(ctx, snapshot, keys.returned[0])
    report = {"key_reconciliation": "ship", "keys_reconciled": km.rows_received}
    return KeysFound(new, gone, report, km.rows_scanned or 0, km.agent_seconds or 0.0, km.agent_timings)


def _by_sketch(ctx: SiteContext, snapshot: Snapshot, keys_site: SiteQuery) -> KeysFound | None:
    """The keys gained and lost, by a sketch of the key-only site query; None when no
    stage peeled (the keys are then shipped)."""
    try:
        new, gone, sketch = key_sketch.present_keys(ctx, snapshot, keys_site)
    except key_sketch.KeysUnresolved:
        return None
    km = sketch.ctx.metrics
    report = {
        "key_reconciliation": "sketch",
        "keys_reconciled": km.rows_received,
        "key_sketch_bytes": km.sketch_bytes,
        "key_sketch_stages": km.sketch_stages,
        "key_table": "kept" if sketch.table_kept else "built",
    }
    found = KeysFound(new, gone, report, km.rows_scanned or 0, km.agent_seconds or 0.0, km.agent_timings)
    found.key_table = sketch.stored
    return found


def _by_ranges(ctx: SiteContext, snapshot: Snapshot, keys_site: SiteQuery) -> KeysFound:
    """The keys gained and lost, by range checksums over the key-only site query: the
    keys of ranges found equal are the snapshot's; of the ranges that differ, those shipped
    back that the snapshot lacks are new, and those it holds that did not come back are gone
    (the exchange names them deleted)."""
    keys_ctx, keys_snapshot = key_sketch.key_only_context(ctx, snapshot, keys_site, "ts-key-ranges")
    ranges = RangeChecksum(keys_ctx, keys_snapshot)
    ranges.plan()
    answer = ranges.exchange()
    km = keys_ctx.metrics
    report = {
        "key_reconciliation": "range_checksum",
        "keys_reconciled": km.rows_received,
        "key_ranges_sent": km.groups_sent,
        "key_range_rounds": km.range_rounds,
    }
    key, key_schema = ctx.site.key, ctx.key_schema()
    shipped = pa.concat_tables([pq.read_table(p).select(key).cast(key_schema) for p in answer.returned])
    check_unique(shipped, key, key_sketch.source_of(ctx))  # a key held twice in a range found equal changes its sums
    new = shipped.join(ranges.shipped_keys(), key, join_type="left anti")
    assert answer.deleted is not None, "a range exchange names the keys its shipped ranges lost"
    gone = pq.read_table(answer.deleted).select(key).cast(key_schema)
    return KeysFound(new, gone, report, km.rows_scanned or 0, km.agent_seconds or 0.0, km.agent_timings)


def _change_to(ctx: SiteContext, snapshot: Snapshot, present: Path) -> tuple[pa.Table, pa.Table]:
    """The keys gained and lost by the snapshot to become `present` (a file of every key
    the site query holds now; a key it holds twice fails the sync): compared in this
    process on the Arrow executor (warehouse/executor.py), else on the executors."""
    key, key_schema = ctx.site.key, ctx.key_schema()
    known = snapshot.on(ctx.sync.executor)
    if isinstance(known, pa.Table):
        now = pq.read_table(present).select(key).cast(key_schema)
        check_unique(now, key, key_sketch.source_of(ctx))
        known = known.select(key).cast(key_schema)
        return now.join(known, key, join_type="left anti"), known.join(now, key, join_type="left anti")
    spark = ctx.sync.spark
    now_frame = spark.read.schema(spark_schema(ctx.key_columns())).parquet(str(present))
    check_unique(now_frame, key, key_sketch.source_of(ctx))
    known_frame = known.select(*key)
    new = now_frame.join(known_frame, key, "left_anti").toArrow().select(key).cast(key_schema)
    gone = known_frame.join(now_frame, key, "left_anti").toArrow().select(key).cast(key_schema)
    return new, gone


class Beside:
    """A key reconciliation running in a thread of its own, beside the site's changed read.

    It calls the agent through a sibling of the site's client, so that each client's calls
    run one after another and every byte is counted once; `result` adds the sibling's bytes
    to the site's. When the agent has no slot free for a second request at once (429) the
    reconciliation runs again in the caller's thread, after the changed read.
    """

    def __init__(self, ctx: SiteContext, snapshot: Snapshot, method: str):
        self.ctx, self.snapshot, self.method = ctx, snapshot, method
        self.client: AgentClient | None = ctx.client.sibling()
        self._found: KeysFound | None = None
        self._error: BaseException | None = None
        self._started = time.monotonic()
        self.seconds: float | None = None
        self._thread = threading.Thread(
            target=inheritable_thread_target(self._run), name=f"keys-{ctx.index}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        assert self.client is not None, "the sibling is closed only after the thread ends"
        try:
            self._found = reconcile(replace(self.ctx, client=self.client), self.snapshot, self.method)
        except BaseException as exc:  # raised again in the site's thread by `result`
            self._error = exc
        finally:
            self.seconds = round(time.monotonic() - self._started, 3)

    def wait(self) -> None:
        """Let the reconciliation end (its result or error kept), and count its bytes with the site's.

        Called whatever happens to the changed read: no thread is left writing into the
        site's staging, which a retry of the site wipes.
        """
        self._thread.join()
        if self.client is not None:
            self.client.close()
            self.ctx.client.counter.absorb(self.client.counter)
            self.client = None

    def result(self) -> KeysFound:
        """The keys found (again in this thread when the agent had no slot free for it)."""
        self.wait()
        if isinstance(self._error, AgentBusy):
            started = time.monotonic()
            found = reconcile(self.ctx, self.snapshot, self.method)
            self.seconds = round(time.monotonic() - started, 3)
            found.report["key_reconciliation_beside"] = False
            return found
        if self._error is not None:
            raise self._error
        assert self._found is not None
        self._found.report["key_reconciliation_beside"] = True
        return self._found


def add_agent_time(ctx: SiteContext, found: KeysFound) -> None:
    """Count the reconciliation's agent time and rows read with the site's (its metrics are apart)."""
    m = ctx.metrics
    m.agent_seconds = round((m.agent_seconds or 0.0) + found.agent_seconds, 4)
    m.agent_timings = add_timings(m.agent_timings, found.agent_timings)
