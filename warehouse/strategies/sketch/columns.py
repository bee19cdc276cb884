"""Changed columns: the updated rows of a peeled sketch, rebuilt from their old rows and
only the cells that changed (protocol 4; deltasieve_protocol/column_digests.py).

The agent named each updated row by key, with a digest per column and its row hash. The
warehouse reads those keys' old rows from the snapshot, compares their column digests, and
asks the agent (POST /v1/sketch/cells, the session of the sketch answer) for the cells
whose digest differs; a key it cannot find asks for every cell. It rebuilds each new row
from the old one and those cells, and keeps it when its row hash agrees with the agent's
check (the whole hash, or its low 16 bits); a row whose digests collided (one changed cell
in 256, in this exchange only: the agent salts them afresh each time) does not hash right
and is fetched whole (/v1/fetch), as are all of them if the agent no longer holds the
session (410). With short checks the XOR of the whole hashes, in the agent's summary, must
then match the rows kept and fetched; when it does not (a wrong row whose low bits agreed),
every updated row is fetched whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from deltasieve_protocol import column_digests, frames
from deltasieve_protocol.fingerprints import row_fingerprints, sketch_seeds
from deltasieve_protocol.models import SketchCellsControl
from warehouse.errors import AgentRejected
from warehouse.store import parquet_files
from warehouse.strategies.base import SEND_BATCH_ROWS, SiteContext, fetch_exchange

#: Column of the row's position in the agent's order, while old rows are matched to keys.
_AT = "__ds_at"


def updated_rows(ctx: SiteContext, stored: pa.Table, secret: int, summary: dict, digests: pa.Table) -> list[Path]:
    """The new rows of the updated keys in `digests` (the sketch answer's UPDATED_DIGESTS,
    `summary` its summary), filed in the site's staging: the rebuilt ones, and those
    fetched whole. `stored`: the stored rows of (at least) those keys."""
    columns, key = ctx.site.columns, ctx.key_columns()
    _, row_seed = sketch_seeds(secret)
    keys = digests.select([c.name for c in key]).cast(pa.schema([ctx.rows_schema().field(c.name) for c in key]))
    old, found = _old_rows(ctx, stored, keys)
    digest_seed = column_digests.exchange_seed(row_seed, summary.get("digest_salt", 0))
    bits = summary.get("digest_bits", column_digests.DIGEST_BITS)
    changed = column_digests.digests_matrix(digests.column(column_digests.DIGESTS), len(columns)) != (
        column_digests.column_digests(old, columns, digest_seed, bits)
    )
    changed[~found] = True  # no old row to rebuild from: every cell
    rebuilt_path, fetched_path = ctx.staging / "sketch-rebuilt.parquet", ctx.staging / "sketch-fetched.parquet"
    m = ctx.metrics
    try:
        cells = _cells(ctx, secret, summary["session"], changed)
    except AgentRejected as exc:
        if exc.status != 410:
            raise
        m.cells_fallback_rows = keys.num_rows
        fetch_exchange(ctx, keys, fetched_path)
        return [fetched_path]
    rebuilt = column_digests.rebuild(old, cells, changed)
    hashes = row_fingerprints(rebuilt, columns, row_seed)
    right = column_digests.checks_match(hashes, digests.column(column_digests.CHECK))
    pq.write_table(rebuilt.filter(pa.array(right)), rebuilt_path)
    m.cells_received = int(changed[right].sum())
    m.cells_fallback_rows = int((~right).sum())
    paths = [rebuilt_path]
    if not right.all():
        fetch_exchange(ctx, keys.filter(pa.array(~right)), fetched_path)
        paths.append(fetched_path)
    if column_digests.HASH_XOR not in summary:  # each row's whole hash checked it
        return paths
    # short checks: a wrong row whose low bits agree (one collision in 65,536) shows in the XOR
    # of the whole hashes, all but 2**-64 of the time; then every updated row comes whole
    got = hashes[right]
    if not right.all():
        fetched = parquet_files.read(fetched_path).cast(ctx.rows_schema())
        got = np.concatenate([got, row_fingerprints(fetched, columns, row_seed)])
    if column_digests.xor_agrees(got, summary):
        return paths
    m.cells_received = 0
    m.cells_fallback_rows = keys.num_rows
    fetch_exchange(ctx, keys, fetched_path)
    return [fetched_path]


def _old_rows(ctx: SiteContext, stored: pa.Table, keys: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """The rows of `stored` (stored rows of a superset of `keys`) of `keys`, in their order
    (NULL where a key is not found), and which were found."""
    names = [c.name for c in ctx.key_columns()]
    rows = stored.select([c.name for c in ctx.site.columns]).cast(ctx.rows_schema())
    # match on the key columns alone: a join carries every type as a key, not every type as a payload
    at = keys.append_column(_AT, pa.array(np.arange(keys.num_rows), pa.int64()))
    there = rows.select(names).append_column("__ds_row", pa.array(np.arange(rows.num_rows), pa.int64()))
    matched = at.join(there, names, join_type="left outer").sort_by(_AT)
    row = matched.column("__ds_row")
    return rows.take(row), row.is_valid().to_numpy(zero_copy_only=False)


def _cells(ctx: SiteContext, secret: int, session: str, changed: np.ndarray) -> pa.Table:
    """The cells the bitmaps ask for, one row per updated row (NULL rows where none is asked)."""
    control = SketchCellsControl(site=ctx.spec(), seed=secret, session=session)
    body = [
        frames.json_frame(frames.CONTROL, control.model_dump(exclude_defaults=True) | {"protocol": control.protocol})
    ]
    for start in range(0, len(changed), SEND_BATCH_ROWS):
        part = changed[start : start + SEND_BATCH_ROWS]
        batch = pa.record_batch([column_digests.bitmap_array(part)], names=[column_digests.CHANGED])
        body.append(frames.arrow_frame(frames.CHANGED_COLUMNS, batch))
    got = [frame.batch() for frame in ctx.client.exchange("/v1/sketch/cells", body) if frame.kind == frames.CELLS]
    schema = ctx.rows_schema()
    cells = pa.Table.from_batches(got).cast(schema) if got else schema.empty_table()
    asked = changed.any(axis=1)
    # the agent sent the rows that ask for a cell, in order: place them, NULL rows between
    place = np.full(len(changed), -1, np.int64)
    place[asked] = np.arange(int(asked.sum()))
    return cells.take(pa.array(place, mask=place < 0))
