"""The exact delta of a site from the touched tuples alone, in Arrow on the driver.

When a strategy vouches for every snapshot key that the agent neither returned nor
reported deleted (the sketch exchange does: its peel names every differing pair), only
the touched keys can change. Their stored rows (read by key from the fragment) are
compared with the returned rows column by column, as delta.build_delta compares them
over the whole snapshot, with the same outcome: insert, update, delete or keep, update
statistics counted alike. The work grows with the change, not with the fragment.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltasieve_protocol.types import Column, arrow_schema
from warehouse.deltas.changed_columns import CHANGED_TYPE, arrow_changed, same_values
from warehouse.deltas.site_delta import split_key_changes
from warehouse.names import CHANGED, DELETE, INSERT, KEEP, OP, TNO, UNO, UPDATE
from warehouse.store import layers

_R = "__r_"
_IN_S, _IN_R, _GONE = "__in_s", "__in_r", "__gone"


@dataclass
class TouchedDelta:
    """The classified touched tuples; counts as DeltaResult's."""

    changed: pa.Table  # OP + site columns + update statistics: inserted and updated rows as they are now
    delta: pa.Table  # OP + site columns: inserts and updates as now, deletes as they were
    left: pa.Table  # stored rows (with update statistics) that an update replaced or a delete removed
    inserted: int
    updated: int
    deleted: int
    kept: int
    before: int
    #: The columns each line of `delta` changed (CHANGED: a list on updates, else null).
    changed_columns: pa.Array

    def write_delta(self, path: Path, columns: list[Column]) -> None:
        """Stage the delta as stored: OP, the site columns and the columns each update changed."""
        layers.write_part(self.delta.append_column(pa.field(CHANGED, CHANGED_TYPE), self.changed_columns), path)

    def delta_table(self, columns: list[Column]) -> pa.Table:
        """The delta (OP + site columns), as DeltaResult.delta_table has it."""
        return self.delta

    def key_changes(self, key: list[str]) -> tuple[pa.Table, pa.Table]:
        """The keys this delta inserts and those it deletes."""
        return split_key_changes(self.delta, key)

    def release(self) -> None:
        """Nothing to release (DeltaResult's persisted frames have no Arrow counterpart)."""


def stored_schema(columns: list[Column]) -> pa.Schema:
    """Arrow schema of stored rows: the site columns and the update statistics (TNO, UNO)."""
    return arrow_schema(columns).append(pa.field(TNO, pa.int64())).append(pa.field(UNO, pa.int64()))


def classify(
    old: pa.Table, returned: pa.Table, deleted: pa.Table, columns: list[Column], key: list[str], before: int
) -> TouchedDelta:
    """Classify the touched tuples: `old` the stored rows of the touched keys (site columns
    and update statistics, syncs seen counted up to the current version), `returned` the
    agent's rows, `deleted` the keys it reported gone, `before` the fragment's size."""
    schema = arrow_schema(columns)
    values = [c.name for c in columns if c.name not in key]
    old = old.select(stored_schema(columns).names).cast(stored_schema(columns))
    returned = returned.select(schema.names).cast(schema)
    gone = _marked(
        deleted.select(key).cast(pa.schema([schema.field(k) for k in key])).group_by(key).aggregate([]), _GONE
    )
    r = _marked(returned.rename_columns([c if c in key else _R + c for c in schema.names]), _IN_R)
    j = _marked(old, _IN_S).join(gone, keys=key, join_type="left outer").join(r, keys=key, join_type="full outer")
    in_s, in_r, was_gone = (pc.fill_null(j.column(c), False) for c in (_IN_S, _IN_R, _GONE))
    same = reduce(
        pc.and_, [same_values(j.column(v), j.column(_R + v)) for v in values], pa.array(np.ones(j.num_rows, dtype=bool))
    )
    op = pc.if_else(
        pc.and_(in_s, in_r),
        pc.if_else(same, KEEP, UPDATE),
        pc.if_else(pc.and_(in_s, was_gone), DELETE, pc.if_else(in_s, KEEP, INSERT)),
    )
    is_new = pc.or_(pc.equal(op, INSERT), pc.equal(op, UPDATE))
    is_left = pc.or_(pc.equal(op, UPDATE), pc.equal(op, DELETE))
    now = {c: j.column(c if c in key else _R + c) for c in schema.names}
    was = {c: j.column(c) for c in schema.names}
    inserted = pc.equal(op, INSERT)
    changed = pa.table(
        {
            OP: op,
            **now,
            TNO: pc.if_else(inserted, 1, pc.add(j.column(TNO), 1)),
            UNO: pc.if_else(inserted, 1, pc.add(j.column(UNO), 1)),
        }
    ).filter(is_new)
    is_deleted = pc.equal(op, DELETE)
    lines = pc.or_(is_new, is_deleted)
    delta = pa.table({OP: op, **{c: pc.if_else(is_deleted, was[c], now[c]) for c in schema.names}}).filter(lines)
    changed_columns = arrow_changed(
        {v: was[v].filter(lines) for v in values},
        {v: now[v].filter(lines) for v in values},
        pc.equal(delta.column(OP), UPDATE),
    )
    left = pa.table({**was, TNO: j.column(TNO), UNO: j.column(UNO)}).filter(is_left)
    counts = {name: pc.sum(pc.equal(op, name)).as_py() or 0 for name in (INSERT, UPDATE, DELETE)}
    return TouchedDelta(
        changed,
        delta,
        left.cast(stored_schema(columns)),
        counts[INSERT],
        counts[UPDATE],
        counts[DELETE],
        before - counts[UPDATE] - counts[DELETE],
        before,
        changed_columns,
    )


def _marked(table: pa.Table, name: str) -> pa.Table:
    """`table` with a column `name` true in every row (which side of a join a row came from)."""
    return table.append_column(name, pa.array(np.ones(table.num_rows, dtype=bool)))
