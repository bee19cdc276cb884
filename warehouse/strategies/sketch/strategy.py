"""sketch: set reconciliation of (key fingerprint, row hash) pairs with an IBLT, O(differences).

plan: the fragment's table (sketch_tables.py; when missing or due for a new seed, the one built in
the background after the last commit, sketch_prep.py, or else one built now on the
executors) is shrunk, for each stage of the exchange, to a width that divides it. The
statistics size the main stage: cells for the expected number of differing pairs (two per
update, one per delete and per insert) plus a margin for their spread, so that about 1 %
of syncs fail to peel. exchange: the table shrunk to one cell per sub-table (the probe, 45
bytes: every pair XORed into one cell) goes first when the main stage is much wider and the
statistics give a fair chance of no change (budget.probe_pays): the
agent reads the site query once into a table of its own, a few times wider than the main
stage, and compares the difference with the probe: a sync with no change ends there (a table one
cell wide peels nothing, iblt.py, it only says whether the sides agree). A difference of
one cell is missed only if its count is 0 modulo 4 and the XORs of its pairs' 64-bit row
hashes and of their 32-bit checksums both vanish: for an update that takes a collision of
the row's old and new hash, which every width misses alike (the pairs are then the same);
for more pairs, a chance of about 2**-96 with hashes seeded by the table's secret. Otherwise the agent keeps its table, and the main stage,
then if need be a wider one (sized from how full the failed difference was), follow
without a new read. The agent answers with the rows of the pairs only it holds (new and
changed rows) and the keys only the warehouse holds (deleted rows). When no stage peels,
the site falls back to the group-hash exchange, one more scan. The first stage may carry
the change token (`exchange_carrying`, pipeline/change_token.py): the agent reads it before
any row and, when it is the kept one, ends the exchange there. stage: the table of the new
fragment is the old one minus the pairs of the fragment's replaced and deleted rows (read
from the snapshot by key) plus the pairs of the returned rows, O(changes).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError
from pyspark.sql import DataFrame

from deltasieve_protocol import frames, iblt_bytes
from deltasieve_protocol.defaults import ROW_CHECK_BITS
from deltasieve_protocol.fingerprints import key_fingerprints, row_fingerprints, sketch_seeds
from deltasieve_protocol.iblt_sizing import cells_for
from deltasieve_protocol.models import MAX_SKETCH_WIDTH, ChangeTokenOut, SketchControl, TokenCheck
from deltasieve_protocol.wire import KEY_FP
from warehouse.errors import AgentRejected, ProtocolError
from warehouse.executor import ARROW
from warehouse.metrics import add_timings
from warehouse.names import spark_schema
from warehouse.store import parquet_files
from warehouse.store.read_ahead import ReadAhead
from warehouse.store.sinks import Sink
from warehouse.store.versions import Version
from warehouse.strategies.base import Answer, Built, FragmentBuild, SiteContext, SiteEstimate, Snapshot, Strategy
from warehouse.strategies.full_ship import FullShip
from warehouse.strategies.group_hash.strategy import GroupHash
from warehouse.strategies.sketch import budget, columns
from warehouse.strategies.sketch import prep as sketch_prep
from warehouse.strategies.sketch import tables as sketch_tables

#: Share of syncs allowed to fail to peel at the stage the statistics size.
PEEL_FAILURE = 0.01
#: Cells per sub-table of the probe, the first stage when the main one is much wider: one
#: cell tells a sync with no change in 45 bytes; 16 cells peeled a handful of updates but
#: cost 1.8 KB on every sync, changed or not.
PROBE_WIDTH = 1
#: The agent's table is up to this many times as wide as the main stage (and at most the
#: stored width): a later stage can be that wide without a new read of the source.
HEADROOM = 16
#: Differing pairs, as a share of the rows, that the agent's table resolves from its one
#: read whatever the statistics expect: after a sync without change they expect none, and
#: the first change would outgrow a table sized from them (HEADROOM times nothing) and fall
#: back to group_hash, one more scan of the source (measured: 45-51 s instead of ~4 s at 1M
#: rows, tests/benchmarks/results/join-1m.md round 2). Only the stages sent cost bytes;
#: this costs the agent memory: 5 % of 1M rows is ~62,000 cells, ~1.5 MB.
SURPRISE_SHARE = 0.05
#: Bytes of a deleted key on the wire, for the estimate (an integer; text keys cost more).
DELETED_KEY_BYTES = 8


def token_answer(summary: dict, agent: str) -> ChangeTokenOut | None:
    """The agent's answer to the change token that rode on a stage, from its summary (None:
    the summary has none, as an older agent's).

    >>> token_answer({"change_token": {"change_token": "a/1", "unchanged": True}}, "x").unchanged
    True
    >>> token_answer({"complete": True}, "x") is None
    True
    """
    raw = summary.get("change_token")
    if raw is None:
        return None
    try:
        return ChangeTokenOut.model_validate(raw)
    except ValidationError as exc:
        raise ProtocolError(f"malformed change token in the sketch answer of the agent at {agent}: {exc}") from None


def differences_seen(width: int, empty_cells: int, hashes: int = sketch_tables.HASHES) -> float:
    """How many differing pairs fill a difference table of `hashes` sub-tables `width` wide
    to leave `empty_cells` empty: each pair takes one cell per sub-table, so a cell stays
    empty with probability exp(-pairs / width). Infinite when none is empty.

    >>> round(differences_seen(100, 3 * 37)), differences_seen(100, 0)
    (99, inf)
    """
    if empty_cells <= 0:
        return math.inf
    return -width * math.log(min(1.0, empty_cells / (hashes * width)))


class Sketch(Strategy):
    name = "sketch"
    #: A change too large to be worth reconciling ships the site query whole (budget.py).
    ships_whole = True

    def __init__(self, ctx: SiteContext, snapshot: Snapshot):
        super().__init__(ctx, snapshot)
        #: the exchange that stands in for the sketch's this sync, when the plan hands the site to one
        self.fallback: Strategy | None = None

    def plan(self) -> None:
        ctx = self.ctx
        est = self.snapshot.statistics
        m = ctx.metrics
        stored = (
            sketch_tables.SiteSketch.load(sketch_tables.sketch_dir(ctx.current, ctx.index)) if ctx.current else None
        )
        if stored is None or sketch_tables.needs_new_table(
            stored.syncs, stored.table.width, est.rows, ctx.sync.options.sketch_seed_rotation
        ):
            stored = self._new_table()
            m.sketch_rebuilt = True
        self.stored = stored
        m.differences_expected = round(est.differences, 1)
        cells = cells_for(est.differences, est.differences_variance, PEEL_FAILURE, sketch_tables.HASHES)
        self.main = sketch_tables.sent_width(cells, stored.table.width)
        if self.main is None:  # more differences expected than the stored table can resolve
            self._fall_back(GroupHash)
            return
        if self._guessing():  # what a failure may cost stays within budget.RISK of a full ship
            self.main = budget.capped_width(self.main, PROBE_WIDTH, stored.table.width, est.full_bytes)
        floor = math.ceil(
            cells_for(SURPRISE_SHARE * est.rows, 0.0, PEEL_FAILURE, sketch_tables.HASHES) / sketch_tables.HASHES
        )
        self.widest = agent_width(self.main, stored.table.width, floor)
        probe = sketch_tables.divisor_at_least(PROBE_WIDTH, self.widest)
        # the probe pays where most syncs find nothing; not where the statistics expect changes
        wanted = probe is not None and budget.probe_pays(probe, self.main, est.changes, est.observed)
        self.first = probe if probe is not None and 4 * probe <= self.main and wanted else self.main
        #: whether a peel brings the updated rows whole (no cells request) rather than as digests
        self.whole_updates = budget.whole_updates(est.updates, len(ctx.site.columns), est.cost)
        m.updates_whole = self.whole_updates or None

    def _guessing(self) -> bool:
        """Whether auto chose this exchange on the prior alone (the first sync after a load):
        then what it may spend before the change is known is bounded (budget.py). A view that
        asks for sketch itself keeps its exchange as the statistics size it."""
        observed = self.snapshot.statistics.observed
        return not observed and self.ships_whole and self.ctx.sync.options.strategy == "auto"

    def _new_table(self) -> sketch_tables.SiteSketch:
        """The table prepared after the last commit (sketch_prep.py), else one built now."""
        ctx, m = self.ctx, self.ctx.metrics
        rows = self.snapshot.statistics.rows
        assert ctx.current is not None, "a sketch sync follows the load"
        if ctx.sync.sketches is not None:
            table, m.sketch_waited_s = ctx.sync.sketches.take(ctx.current, ctx.index, rows)
        else:
            table = sketch_prep.load_prepared(ctx.current, ctx.index, rows)
        m.sketch_prepared = table is not None
        if table is None:
            t0 = time.monotonic()
            table = sketch_tables.build(self._fragment(), ctx.site.columns, ctx.key_columns(), rows)
            m.sketch_built_inline_s = round(time.monotonic() - t0, 3)
        return table

    def exchange(self) -> Answer:
        if self.fallback is not None:
            return self.fallback.exchange()
        return self._exchange_reading_ahead(None)

    def carries_token(self) -> bool:
        return self.fallback is None  # a fall-back planned already starts another exchange

    def exchange_carrying(self, since: str) -> Answer:
        assert self.carries_token(), "the token rides on a sketch stage"
        return self._exchange_reading_ahead(since)

    def _exchange_reading_ahead(self, since: str | None) -> Answer:
        # the stored rows the answer will touch are decoded while the agent reads (store/read_ahead.py)
        with self.ctx.read_ahead() as ahead:
            return self._exchange(ahead, since)

    def _exchange(self, ahead: ReadAhead | None, since: str | None) -> Answer:
        """The stages, the first carrying the change token `since` (None: none rides)."""
        m = self.ctx.metrics
        main = self.main
        assert main is not None, "plan falls back when no width can peel"
        width, session = self.first, None
        m.sketch_cells = m.sketch_bytes = m.sketch_stages = 0
        token: ChangeTokenOut | None = None  # the agent's answer to the token, from the first stage
        while True:
            try:
                summary, returned_path, deleted_path = self._stage(width, session, since)
            except AgentRejected as exc:
                if exc.status != 410:
                    raise
                summary = {"complete": False}  # the agent dropped its table: start over another way
            if since is not None:  # the first stage's answer says the token (an older agent's does not)
                token, since = token_answer(summary, self.ctx.client.url), None
                answered = Answer([returned_path], deleted_path, change_token=token)
                if answered.unchanged:  # the agent read nothing: nothing to find
                    m.differences_found = 0
                    return answered
            if summary.get("complete"):
                break
            # the agent may have built a narrower table than asked (its memory budget)
            self.widest = min(self.widest, summary.get("width") or self.widest)
            if width >= main:
                m.peel_failed = True
            est = self.snapshot.statistics
            following: int | type[Strategy] = FullShip if self._guessing() else GroupHash
            if summary.get("session"):  # the agent kept its table for a wider stage
                stage = Stage(width, summary.get("empty_cells", 0), main, self.widest, m.sketch_bytes)
                following = stage.following(est, self._guessing(), self.ships_whole)
                if following is GroupHash:
                    following = GroupHash
            if not isinstance(following, int):
                if ahead is not None:
                    ahead.close()  # the fall-back finds its rows its own way
                return replace(self._fall_back(following).exchange(), change_token=token)
            width, session = following, summary["session"]
        m.differences_found = summary.get("differences", 0)
        paths = [returned_path]
        digests = pa.Table.from_batches(self.digests) if self.digests else None  # protocol 4: updated rows as digests
        # read here for the rebuild, or to take what was read ahead; else site_sync reads them
        touched = None
        if digests is not None or ahead is not None:
            touched = self._read_touched(digests, returned_path, deleted_path, ahead)
        if digests is not None:
            assert touched is not None, "updated keys are touched ones"
            t0 = time.monotonic()
            paths += columns.updated_rows(self.ctx, touched, self.stored.secret, summary, digests)
            m.phases["changed_cells"] = round(time.monotonic() - t0, 3)
        self.returned_paths = paths
        self.returned = pa.concat_tables([parquet_files.read(p).cast(self.ctx.rows_schema()) for p in paths])
        return Answer(paths, deleted_path, touched_rows=touched, change_token=token)

    def _read_touched(
        self, digests: pa.Table | None, returned_path: Path, deleted_path: Path, ahead: ReadAhead | None
    ) -> pa.Table | None:
        """The stored rows of every key the answer touches (updated, returned or deleted), read
        once, taking the row groups `ahead` decoded while the agent answered: the rebuild of
        the updated rows takes its old rows from them, and the delta is built from them
        (Answer.touched_rows) instead of a second read of the fragment. None when the answer
        touched no key."""
        ctx = self.ctx
        t0 = time.monotonic()
        names = [c.name for c in ctx.key_columns()]
        schema = pa.schema([ctx.rows_schema().field(n) for n in names])
        parts = [parquet_files.read(returned_path, names), parquet_files.read(deleted_path)]
        if digests is not None:
            parts.append(digests)
        keys = pa.concat_tables([part.select(names).cast(schema) for part in parts])
        if not keys.num_rows:
            return None
        rows = ctx.stored_rows(keys.group_by(names).aggregate([]), self.snapshot, ahead)
        ctx.metrics.phases["read_touched"] = round(time.monotonic() - t0, 3)
        return rows

    def _stage(self, width: int, session: str | None, since: str | None = None) -> tuple[dict, Path, Path]:
        """One POST /v1/sketch with the table `width` wide, carrying the change token `since`
        (the first stage only; None: none); the answer's summary and files."""
        ctx = self.ctx
        m = ctx.metrics
        control = SketchControl(
            site=ctx.spec(),
            seed=self.stored.secret,
            batch_rows=ctx.sync.options.batch_rows,
            width=self.widest,
            session=session,
            row_check_bits=ROW_CHECK_BITS,
            expected_rows=m.rows_before,  # a small scan is read without a reader process
            updated_rows="whole" if self.whole_updates else "digests",
            change_token=TokenCheck(since=since) if since is not None else None,
        )
        table = self.stored.table.shrink(width).to_compact()
        sent = frames.frame(frames.SKETCH_CELLS, iblt_bytes.to_bytes(table))
        m.sketch_stages = (m.sketch_stages or 0) + 1  # exchange counts from 0
        m.sketch_cells = (m.sketch_cells or 0) + table.cells
        m.sketch_bytes = (m.sketch_bytes or 0) + len(sent)
        # defaults left out (the agent reads them as the same); a list, so that the client
        # may name the site by reference
        message = control.model_dump(exclude_defaults=True) | {"protocol": control.protocol}
        body = [frames.json_frame(frames.CONTROL, message), sent]
        returned_path = ctx.staging / "sketch-returned.parquet"
        deleted_path = ctx.staging / "sketch-deleted.parquet"
        summary = None
        key_schema = pa.schema([pa.field(c.name, c.type.arrow()) for c in ctx.key_columns()])
        unnamed: list[np.ndarray] = []
        self.digests: list[pa.RecordBatch] = []
        with Sink(returned_path, ctx.rows_schema()) as returned, Sink(deleted_path, key_schema) as deleted:
            for frame in ctx.client.exchange("/v1/sketch", body):
                if frame.kind == frames.ROWS:
                    returned.write(frame.batch())
                    ctx.tick(returned.rows)
                elif frame.kind == frames.DELETED_KEYS:
                    deleted.write(frame.batch())
                elif frame.kind == frames.UPDATED_DIGESTS:
                    self.digests.append(frame.batch())
                elif frame.kind == frames.GONE_FINGERPRINTS:
                    unnamed.append(frame.batch().column(KEY_FP).to_numpy())
                elif frame.kind == frames.SUMMARY:
                    summary = frame.json()
            if summary is None:
                raise ProtocolError("sketch answer ended without a summary")
            if unnamed:
                for batch in self._keys_of(np.concatenate(unnamed)).to_batches():
                    deleted.write(batch)
        m.rows_scanned = summary.get("rows_scanned", m.rows_scanned or 0)
        m.agent_seconds = round((m.agent_seconds or 0) + summary.get("elapsed_s", 0), 4)
        m.agent_timings = add_timings(m.agent_timings, summary.get("timings"))
        if summary.get("pacing", {}).get("chunks"):  # a stage served by a kept table read nothing
            m.agent_pacing = summary["pacing"]
        m.rows_received = returned.rows
        return summary, returned_path, deleted_path

    def _keys_of(self, fingerprints: np.ndarray) -> pa.Table:
        """The snapshot keys with these fingerprints (keys that are not their own), on the
        executors: a pass over the fragment, made only when such a key was deleted."""
        ctx = self.ctx
        key = ctx.key_columns()
        schema = pa.schema([pa.field(c.name, c.type.arrow()) for c in key])
        key_seed, _ = sketch_seeds(self.stored.secret)
        wanted = pa.array(fingerprints, pa.uint64())

        def run(batches):
            for batch in batches:
                fps = pa.array(key_fingerprints(batch, key, key_seed))
                yield batch.filter(pc.is_in(fps, value_set=wanted))

        stored = self._fragment()
        if isinstance(stored, pa.Table):
            found = pa.Table.from_batches(
                list(run(stored.select(schema.names).to_batches())), stored.select(schema.names).schema
            )
        else:
            found = stored.select(*[c.name for c in key]).mapInArrow(run, spark_schema(key)).toArrow()
        return found.cast(schema)

    def _fragment(self) -> DataFrame | pa.Table:
        """The stored fragment: an Arrow table on the Arrow executor, else a Spark frame."""
        return self.snapshot.on(self.ctx.sync.executor)

    def _fall_back(self, to: type[Strategy]) -> Strategy:
        """Hand the site to another exchange for this sync (planned from the same snapshot):
        group_hash's, or full_ship's when the change is too large to be worth reconciling; it."""
        self.ctx.metrics.fallback = to.name
        self.fallback = to(self.ctx, self.snapshot)
        self.fallback.plan()
        return self.fallback

    def follow_up(self, answer: Answer) -> Answer:
        return self.fallback.follow_up(answer) if self.fallback is not None else answer

    def unchanged_keys(self) -> DataFrame | None:
        if self.fallback is not None:
            return self.fallback.unchanged_keys()
        return self.snapshot.stored.select(*self.ctx.site.key)

    def fragment_build(self) -> FragmentBuild:
        # the peel named every pair that differs; the fall-back says for itself
        return FragmentBuild.TOUCHED if self.fallback is None else self.fallback.fragment_build()

    def stage(self, staged: Version, built: Built) -> None:
        """The new fragment's table: the old one less the pairs of the rows replaced or
        deleted, plus the pairs of the returned rows."""
        if self.fallback is not None:
            return  # rebuilt from the fragment at the next sketch sync
        ctx = self.ctx
        key, columns = ctx.key_columns(), ctx.site.columns
        table = self.stored.table.copy()
        table.add(*self._old_pairs(built.touched_rows), sign=-1)
        table.add(*self.stored.pairs(self.returned, columns, key))
        sketch_tables.SiteSketch(table, self.stored.syncs + 1).save(sketch_tables.sketch_dir(staged, ctx.index))

    def _old_pairs(self, touched_rows: pa.Table | None) -> tuple[np.ndarray, np.ndarray]:
        """The pairs of the snapshot rows whose key came back or was deleted: from the rows
        the delta was built from when it was built from those alone, else on the executors."""
        ctx = self.ctx
        key, columns = ctx.key_columns(), ctx.site.columns
        names = [c.name for c in key]
        if touched_rows is None and ctx.sync.executor == ARROW:
            keys = [
                parquet_files.read(p, names) for p in [*self.returned_paths, ctx.staging / "sketch-deleted.parquet"]
            ]
            wanted = pa.concat_tables([k.cast(ctx.key_schema()) for k in keys]).group_by(names).aggregate([])
            touched_rows = ctx.stored_rows(wanted, self.snapshot)
        if touched_rows is not None:
            rows = touched_rows.select([c.name for c in columns]).cast(ctx.rows_schema())
            return self.stored.pairs(rows, columns, key)
        key_schema = spark_schema(key)
        touched = ctx.sync.spark.read.schema(key_schema).parquet(*[str(p) for p in self.returned_paths])
        touched = touched.select(*names).unionByName(
            ctx.sync.spark.read.schema(key_schema).parquet(str(ctx.staging / "sketch-deleted.parquet"))
        )
        key_seed, row_seed = sketch_seeds(self.stored.secret)

        def run(batches):
            for batch in batches:
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array(key_fingerprints(batch, key, key_seed).view(np.int64)),
                        pa.array(row_fingerprints(batch, columns, row_seed).view(np.int64)),
                    ],
                    names=["k", "h"],
                )

        old = (
            self.snapshot.stored.select(*[c.name for c in columns])
            .join(touched.distinct(), names, "left_semi")
            .mapInArrow(run, "k bigint, h bigint")
            .toArrow()
        )
        return (
            old.column("k").to_numpy().astype(np.int64).view(np.uint64),
            old.column("h").to_numpy().astype(np.int64).view(np.uint64),
        )

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """The main stage's table one way; changed and new rows, and deleted keys, the other.

        >>> from warehouse.planning.cost_model import CostModel
        >>> est = SiteEstimate(100_000, 0.001, 0.0, CostModel(50, 4, 16), 128)
        >>> 0 < Sketch.expected_bytes(est) < 0.1 * est.full_bytes
        True
        """
        cells = cells_for(estimate.differences, estimate.differences_variance, PEEL_FAILURE, sketch_tables.HASHES)
        width = sketch_tables.sent_width(cells, sketch_tables.stored_width(estimate.rows))
        if width is None:
            return float("inf")
        probed = width >= 4 * PROBE_WIDTH and budget.probe_pays(PROBE_WIDTH, width, estimate.changes, estimate.observed)
        probe = iblt_bytes.table_bytes(PROBE_WIDTH * sketch_tables.HASHES) if probed else 0
        rows_back = estimate.updates + estimate.inserts
        return (
            probe
            + iblt_bytes.table_bytes(width * sketch_tables.HASHES)
            + rows_back * estimate.cost.tuple_bytes
            + estimate.deletes * DELETED_KEY_BYTES
        )


@dataclass(frozen=True)
class Stage:
    """A stage that failed to peel: `width` wide, its difference `empty` cells empty, in an
    exchange whose main stage is `main` wide, the agent's table `widest`, `sunk` bytes of
    tables sent so far."""

    width: int
    empty: int
    main: int
    widest: int
    sunk: int

    def following(self, est: SiteEstimate, guessing: bool, ships_whole: bool = True) -> int | type[Strategy]:
        """The width of the next stage, or the exchange the site falls back to: group_hash
        when no stage the agent's table allows can peel (full_ship for a sync that guessed,
        `Sketch._guessing`), full_ship when the next stage is not worth it (budget.py).

        The first sync after a 10M-row load: the main stage (430,080 cells a sub-table)
        does not divide the agent's memory-capped table (645,120); the stage after the
        probe is the widest that stays within the budget of a guess:

        >>> from warehouse.planning.cost_model import CostModel
        >>> est = SiteEstimate(9_500_000, 0.05, 0.0, CostModel(45.36, 4.0, 17.66), 64, observed=False)
        >>> Stage(1, 0, 430_080, 645_120, 71).following(est, guessing=True)
        322560
        >>> Stage(1, 0, 430_080, 645_120, 71).following(est, guessing=False)  # sized from observations
        645120
        >>> Stage(322_560, 0, 430_080, 645_120, 16_000_071).following(est, guessing=True).name
        'full_ship'
        """
        wider = next_width(self.width, self.empty, self.main, self.widest)
        if wider is None:  # the agent's table cannot resolve it either
            return FullShip if guessing else GroupHash
        seen = differences_seen(self.width, self.empty)
        if guessing and not math.isfinite(seen):  # only a lower bound: the widest affordable
            wider = budget.affordable_width(wider, self.width, self.widest, self.sunk, est.full_bytes)
        if ships_whole and not budget.worth_another_stage(
            wider, seen, self.sunk, est.full_bytes, est.cost.tuple_bytes, not guessing
        ):
            return FullShip
        return wider


def next_width(width: int, empty_cells: int, main: int, widest: int) -> int | None:
    """The width of the stage after one `width` wide failed to peel, leaving `empty_cells`
    of its difference empty: the main width after the probe, else twice the last, or wider
    if the difference held more pairs than that peels. A difference with no empty cell
    holds at least width * ln(3 * width) pairs (fewer would leave one empty). None when
    even the agent's table (`widest`) is too narrow for them: the site falls back at once
    rather than send a table that cannot peel.

    >>> next_width(16, 0, 630, 10080), next_width(630, 1800, 630, 10080), next_width(630, 0, 630, 10080)
    (630, 1260, 2520)
    >>> next_width(42_000, 0, 42_000, 161_280) is None  # half a million pairs or more
    True
    """
    want = main if width < main else 2 * width
    seen = differences_seen(width, empty_cells)
    if not math.isfinite(seen):
        seen = width * math.log(sketch_tables.HASHES * width)
    want = max(want, math.ceil(cells_for(seen, seen, PEEL_FAILURE, sketch_tables.HASHES) / sketch_tables.HASHES))
    return sketch_tables.divisor_at_least(want, widest) if width < widest else None


def agent_width(main: int, stored: int, floor: int = 0) -> int:
    """Width of the agent's table: the narrowest multiple of the main stage's width that
    divides the stored width and is HEADROOM times as wide, and at least `floor` (the
    stored width if none is), within what an agent builds (MAX_SKETCH_WIDTH).

    >>> agent_width(14, 1260), agent_width(630, 1260), agent_width(315 * 2**11, 315 * 2**14)
    (252, 1260, 1290240)
    >>> agent_width(14, 1260, floor=600)  # the statistics expect few differences; more may come
    630
    """
    fits = [d for d in sketch_tables.divisors(stored) if d % main == 0 and d <= max(main, MAX_SKETCH_WIDTH)]
    wide = [d for d in fits if d >= max(HEADROOM * main, floor)]
    return min(wide) if wide else max(fits)
