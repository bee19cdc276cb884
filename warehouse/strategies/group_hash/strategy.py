"""group_hash: groups of stable tuples with one hash each (Lu, Liu and Hyland).

Algorithms 1 (group selection) and 2 (delta extraction) of "Delta Extraction Optimization
for View Maintenance in a Limited Collaborative Environment".

plan: the statistics give each tuple an update probability; the planner (grouping.py, on
the executors) groups the most stable tuples while a group's expected benefit grows and
hashes each group. exchange: the agent gets the units (uid, group hash) and their keys,
reads the site query once and answers with new and ungrouped rows, deleted keys, the rows
of units whose hash differs, and the units that lost tuples (with what is left's hash).
follow_up (regroup): such a unit's surviving part is checked here against the plan's row
hashes, and only the survivors of units that changed are fetched. An ungrouped tuple that
still exists always comes back, so the ungrouped keys that did not are named deleted; the
answer then accounts for every key of the snapshot, and the delta can be built from the
touched tuples alone (an overlay, no pass over the fragment).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltasieve_protocol import frames
from deltasieve_protocol.encoding import combine, hash_from_bytes
from deltasieve_protocol.types import arrow_schema
from deltasieve_protocol.wire import COUNT, HASH, key_values
from deltasieve_protocol.wire import UID as WIRE_UID
from warehouse.planning import cost_model as planning
from warehouse.planning import update_counts
from warehouse.store import parquet_files
from warehouse.strategies.base import (
    SEND_BATCH_ROWS,
    Answer,
    FragmentBuild,
    SiteEstimate,
    Strategy,
    extract_exchange,
    fetch_exchange,
)
from warehouse.strategies.group_hash.grouping import (
    BENEFIT,
    GROUP_HASH,
    KIND,
    MEMBER,
    ROW_HASH,
    UID,
    UNIT,
    Grouping,
    bucket_bounds,
    in_order,
    members,
    plan_groups,
    units,
)


class GroupHash(Strategy):
    name = "group_hash"

    @property
    def _plan(self) -> Path:
        return self.ctx.staging / "plan"

    def plan(self) -> None:
        """Group and hash the snapshot's tuples on the sync's executor (grouping.py: the same
        plan on either), then count what the plan sends."""
        ctx, snapshot = self.ctx, self.snapshot
        if snapshot.read is None:
            return
        assert ctx.current is not None, "a stored fragment follows the load"
        opts = ctx.sync.options
        obs, upd = snapshot.observed
        prior = None if opts.prior_mode == "paper" else planning.site_prior(obs, upd, opts.default_prior)
        p_delete = planning.deletion_probability(snapshot.history)
        ctx.metrics.planning = {"prior": prior, "p_delete": p_delete, "grouping": opts.grouping}
        buckets = opts.plan_partitions or ctx.sync.spark.sparkContext.defaultParallelism
        bounds = bucket_bounds(update_counts.load(ctx.current.site_dir(ctx.index)), prior, buckets)
        grouping = Grouping(prior, p_delete, snapshot.cost, ctx.sync.seed, opts.hash_bits, opts.grouping)
        plan_groups(snapshot.on(ctx.sync.executor), ctx.site.columns, ctx.site.key, grouping, bounds, self._plan)
        m = ctx.metrics
        member_rows, unit_rows = members(self._plan), units(self._plan)  # each plan's files found once
        grouped = member_rows.count_rows(filter=pc.field(UID).is_valid())
        m.groups_sent, m.tuples_grouped = unit_rows.count_rows(), grouped
        m.tuples_ungrouped = member_rows.count_rows() - grouped
        benefit = unit_rows.to_table(columns=[BENEFIT]).column(BENEFIT)
        m.expected_benefit_bytes = round(pc.sum(benefit).as_py() or 0.0, 1)

    def exchange(self) -> Answer:
        return extract_exchange(self.ctx, self._frames())

    def _frames(self) -> Iterator[bytes]:
        """The request's data frames, read from the plan in its order (grouping.in_order)."""
        ctx = self.ctx
        if self.snapshot.read is None:
            return
        key = ctx.site.key
        key_types = {c.name: c.type.arrow() for c in ctx.site.columns}
        width = ctx.sync.options.hash_bits // 8
        for batch in in_order(self._plan, pc.field(KIND) == UNIT, [UID, GROUP_HASH], SEND_BATCH_ROWS):
            out = pa.RecordBatch.from_arrays(
                [batch.column(0), batch.column(1).cast(pa.binary(width))], names=[WIRE_UID, HASH]
            )
            yield frames.delta_or_plain_frame(
                frames.UNITS, frames.UNITS_DELTA, out
            )  # uids ascend: their differences pack small
        grouped = (pc.field(KIND) == MEMBER) & pc.field(UID).is_valid()
        for batch in in_order(self._plan, grouped, [UID, *key], SEND_BATCH_ROWS):
            arrays = [batch.column(0)] + [batch.column(i + 1).cast(key_types[k]) for i, k in enumerate(key)]
            names = [WIRE_UID, *key]
            plain = (
                pa.Table.from_arrays(arrays, names=names)
                .sort_by([(n, "ascending") for n in names])
                .combine_chunks()
                .to_batches()[0]
            )
            # A unit's keys come in key order and its uid repeats: as differences they
            # pack into a fraction of the bytes (the agent adds them back up).
            yield frames.delta_or_plain_frame(frames.UNIT_KEYS, frames.UNIT_KEYS_DELTA, plain)

    def follow_up(self, answer: Answer) -> Answer:
        """Regroup, then name the ungrouped tuples that are gone."""
        if self.snapshot.read is None:
            return answer
        return self._ungrouped_gone(self._regroup(answer))

    def fragment_build(self) -> FragmentBuild:
        if self.snapshot.read is None:
            return FragmentBuild.WHOLE
        return FragmentBuild.TOUCHED  # every key not returned or deleted is a member of an intact unit

    def _ungrouped_gone(self, answer: Answer) -> Answer:
        """The answer with the ungrouped keys that did not come back added to its deleted keys.

        The agent knows grouped keys only (from the units), so it reports their deletion;
        an ungrouped tuple is shipped whenever it exists, so one missing from the rows is
        deleted. O(ungrouped tuples), all of which the agent returned anyway.
        """
        ctx, key = self.ctx, self.ctx.site.key
        key_schema = arrow_schema(ctx.key_columns())
        ungrouped = members(self._plan).to_table(columns=key, filter=pc.field(UID).is_null())
        if ungrouped.num_rows == 0:
            return answer
        came = pa.concat_tables([parquet_files.read(p, key).cast(key_schema) for p in answer.returned])
        gone = ungrouped.cast(key_schema).join(came, key, join_type="left anti")
        if gone.num_rows == 0:
            return answer
        schema = ctx.deleted_schema()
        named = parquet_files.read(answer.deleted).cast(schema) if answer.deleted is not None else schema.empty_table()
        no_unit = pa.array(np.full(gone.num_rows, -1, np.int64))  # uid -1: no unit, as the agent writes it
        gone = gone.add_column(0, WIRE_UID, no_unit).select(schema.names).cast(schema)
        path = ctx.staging / "deleted-with-ungrouped.parquet"
        pq.write_table(pa.concat_tables([named, gone]), path)
        return Answer(answer.returned, path, answer.summary)

    def _regroup(self, answer: Answer) -> Answer:
        """Check the surviving part of every unit that lost tuples; re-fetch only those that changed."""
        ctx = self.ctx
        broken = pq.read_table(ctx.staging / "broken.parquet")
        if broken.num_rows == 0:
            return answer
        key = ctx.site.key
        reported = {
            uid: (hash_from_bytes(h), n)
            for uid, h, n in zip(
                broken.column(WIRE_UID).to_pylist(), broken.column(HASH).to_pylist(), broken.column(COUNT).to_pylist()
            )
        }
        gone = set(key_values(pq.read_table(answer.deleted), key))
        wanted = pc.field(UID).isin(pa.array(list(reported), pa.int64())) & pc.field(ROW_HASH).is_valid()
        found = members(self._plan).to_table(columns=[*key, UID, ROW_HASH], filter=wanted)
        survivors: dict[int, list] = {}
        sums: dict[int, int] = {}
        for k, uid, rh in zip(
            key_values(found, key), found.column(UID).to_pylist(), found.column(ROW_HASH).to_pylist()
        ):
            if k in gone:
                continue
            survivors.setdefault(uid, []).append(k)
            sums[uid] = sums.get(uid, 0) + hash_from_bytes(rh)
        bits = ctx.sync.options.hash_bits
        changed = [
            uid
            for uid, (h, n) in reported.items()
            if n and (combine([sums.get(uid, 0)], bits) != h or len(survivors.get(uid, ())) != n)
        ]
        ctx.metrics.groups_regrouped_changed = len(changed)
        if not changed:
            return answer
        keys = [k for uid in changed for k in survivors.get(uid, [])]
        key_cols = ctx.key_columns()
        if len(key_cols) == 1:
            key_table = pa.table({key_cols[0].name: pa.array(keys, key_cols[0].type.arrow())})
        else:
            key_table = pa.table(
                {c.name: pa.array([k[i] for k in keys], c.type.arrow()) for i, c in enumerate(key_cols)}
            )
        refetched = ctx.staging / "refetched.parquet"
        ctx.metrics.rows_received += fetch_exchange(ctx, key_table, refetched)
        return Answer([*answer.returned, refetched], answer.deleted)

    def unchanged_keys(self) -> DataFrame | None:
        """Members of a unit: unchanged unless the unit came back or the key was deleted."""
        if self.snapshot.read is None:
            return None
        plan = self.ctx.sync.spark.read.parquet(str(self._plan))
        return plan.filter((F.col(KIND) == MEMBER) & F.col(UID).isNotNull()).select(*self.ctx.site.key)

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """A full ship less the benefit of the best group size for tuples of the mean update rate.

        The plan itself does better where tuples differ in stability; its own figure is
        `expected_benefit_bytes` in the sync's metrics.

        >>> from warehouse.planning.cost_model import CostModel
        >>> est = SiteEstimate(10_000, 0.001, 0.0, CostModel(50, 4, 16), 128)
        >>> round(GroupHash.expected_bytes(est)) < est.full_bytes
        True
        """
        cost = estimate.cost
        p_update = min(max(estimate.p_update, 0.0), 1.0)
        p_delete = min(max(estimate.p_delete, 0.0), 1.0)
        # group_survival([p_update] * size, p_delete) for each size, bit for bit: its products
        # in its order, carried on from the size before (ascending) instead of started afresh
        # for each, as auto prices every site with it at every sync
        step = (1.0 - p_delete) * (1.0 - p_update)
        best, survival, grown = 0.0, 1.0, 0
        for size in _SIZES:
            for _ in range(size - grown):
                survival = survival * step
            grown = size
            per_tuple = planning.expected_benefit(size, survival, cost) / size
            best = max(best, per_tuple)
        return estimate.full_bytes - estimate.rows * best


#: Group sizes tried by the closed-form estimate (a geometric ladder up to the planner's cap).
_SIZES = sorted({int(round(1.5**i)) for i in range(0, 21)} | {planning.MAX_GROUP_SIZE})
