"""The agent's answer to /v1/snapshot_diff: the change between two dumps, computed at the legacy host.

The warehouse names the dump files its copy was made from (`previous`); the agent compares
the site query over them with the site query over the current dumps and ships only the
differential — the rows inserted or updated (their current values) and the keys deleted —
so the link carries the change, not the dump.

Both dumps are read once each, in their files' order, as ⟨K, b⟩ records: the key and a
64-bit hash of the row (the record compression of Labio and Garcia-Molina, "Efficient
Snapshot Differential Algorithms for Data Warehousing"; DuckDB hashes the rows as it reads
them), so the algorithm holds a key and a hash per record, never a row. The differential algorithm (remote_agent/differential/) is
the request's: the window algorithm by default (bounded memory, one pass; a record that
moved further than its aging buffers reach comes out as a delete and an insert of one key,
a *useless pair* the warehouse folds), or the sort-merge or partitioned-hash outer join,
exact whatever the order, spilling to the agent's cache directory. The rows of the inserted
and updated keys are then picked from a second read of the current dump.

When the previous dumps are the current ones nothing is read. When one of them is gone
(or never was a dump of its table) the summary says so (`previous_gone`) and nothing is
shipped: the warehouse falls back to another strategy.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from deltasieve_protocol import frames
from deltasieve_protocol.types import Column, arrow_schema
from deltasieve_protocol.wire import UID, key_values
from remote_agent.adapters.base import Adapter
from remote_agent.adapters.dumps import quoted
from remote_agent.differential import DELETE, Change
from remote_agent.differential.partitioned_hash import partitioned_hash
from remote_agent.differential.sort_merge import sort_merge
from remote_agent.differential.window import window, window_blocks
from remote_agent.errors import AgentError, UnsupportedQuery
from remote_agent.sitequery import ValidatedQuery
from remote_agent.timings import Timings

if TYPE_CHECKING:  # imported by the adapters' registry for a file source only (it brings DuckDB)
    from remote_agent.adapters.files import FileAdapter

#: The records' hash column (not a column a site query can have: names starting "__" are reserved).
HASH_COLUMN = "__ds_b"


def _hashed(adapter: FileAdapter, query: ValidatedQuery, batch_rows: int, timings: Timings, counts: dict, side: str):
    """The site query over `adapter`'s dumps as batches of its key columns and a row hash,
    in the files' order: the hash is DuckDB's 64-bit hash of the row's columns, computed by
    the engine as it reads (both dumps are hashed by the same engine in the same answer, so
    only equality matters)."""
    names = [c.name for c in query.columns]
    by_name = {c.name: c for c in query.columns}
    keys = ", ".join(quoted(k) for k in query.key)
    sql = (
        f"SELECT {keys}, hash({', '.join(quoted(n) for n in names)}) AS {quoted(HASH_COLUMN)} "
        f"FROM ({query.sql}) AS {quoted('__site')}"
    )
    schema = pa.schema([*[pa.field(k, by_name[k].type.arrow()) for k in query.key], pa.field(HASH_COLUMN, pa.uint64())])
    for batch in timings.timed("read_s", adapter.in_file_order(sql, schema, batch_rows)):
        counts[side] += batch.num_rows
        yield batch


def records(adapter: FileAdapter, query: ValidatedQuery, batch_rows: int, timings: Timings, counts: dict, side: str):
    """⟨K, b⟩ records one by one: the key (a value, or a tuple of a composite key) and the hash."""
    for batch in _hashed(adapter, query, batch_rows, timings, counts, side):
        with timings.phase("hash_s"):
            pairs = zip(key_values(batch, query.key), batch.column(HASH_COLUMN).to_pylist())
        yield from pairs


def record_arrays(
    adapter: FileAdapter, query: ValidatedQuery, batch_rows: int, timings: Timings, counts: dict, side: str
):
    """⟨K, b⟩ records as arrays a batch at a time (a key of one integer column)."""
    for batch in _hashed(adapter, query, batch_rows, timings, counts, side):
        yield batch.column(0).to_numpy(), batch.column(HASH_COLUMN).to_numpy()


def differential(
    algorithm: str, read, query: ValidatedQuery, *, block_rows: int, aging_rows: int, spill_dir: Path
) -> Iterator[Change]:
    """The chosen algorithm's differential of the records `read(records_fn, side)` yields."""
    if algorithm == "window":
        by_name = {c.name: c for c in query.columns}
        if len(query.key) == 1 and by_name[query.key[0]].type.kind == "int":  # blocks matched in NumPy
            return window_blocks(
                read(record_arrays, "old"), read(record_arrays, "new"), block_rows=block_rows, aging_rows=aging_rows
            )
        return window(read(records, "old"), read(records, "new"), block_rows=block_rows, aging_rows=aging_rows)
    if algorithm == "sort_merge":
        return sort_merge(read(records, "old"), read(records, "new"), run_records=aging_rows, spill_dir=spill_dir)
    return partitioned_hash(read(records, "old"), read(records, "new"), spill_dir=spill_dir)


def snapshot_diff_answer(
    adapter: Adapter,
    query: ValidatedQuery,
    previous: dict[str, str],
    *,
    algorithm: str,
    block_rows: int,
    aging_rows: int,
    batch_rows: int,
) -> Iterator[bytes]:
    """The answer's frames: CHANGED_ROWS (inserted and updated rows), DELETED_KEYS, the summary last.

    Steps: pin the previous dumps (gone: say so and stop), compare the dumps' names
    (the same: nothing changed), check the current keys, ship the deleted keys as the
    differential finds them, then read and ship the current rows of the other changed keys.
    """
    files = sys.modules.get("remote_agent.adapters.files")  # not loaded: no adapter reads dump files
    if files is None or not isinstance(adapter, files.FileAdapter):
        raise UnsupportedQuery(
            f"snapshot_diff compares dump files; this agent reads a {adapter.dialect} database: use another strategy"
        )
    started = time.monotonic()
    timings = Timings()
    current = adapter.dumps_read(query.tables)
    stats: dict = {
        "dumps": current,
        "previous_dumps": {t: previous.get(t) for t in query.tables},
        "algorithm": algorithm,
        "rows_scanned": 0,
    }
    try:
        old_adapter = _previous_dumps(adapter, query, previous)
    except AgentError as exc:
        stats.update(previous_gone=exc.message, elapsed_s=_since(started))
        yield frames.json_frame(frames.SUMMARY, stats)
        return
    if old_adapter.dumps_read(query.tables) == current:
        stats.update(unchanged=True, records_old=0, records_new=0, inserts=0, updates=0, deletes=0)
        stats["elapsed_s"] = _since(started)
        yield frames.json_frame(frames.SUMMARY, stats)
        return
    # the current dumps' keys checked unique and non-NULL before they are compared (the
    # window would fold a key met twice into one record)
    with timings.phase("read_s"):
        adapter.check_keys(query.tables)
    counts = {"old": 0, "new": 0}
    ops = {"insert": 0, "update": 0, "delete": 0}
    with tempfile.TemporaryDirectory(dir=_spill_root(adapter)) as spill:
        sides = {"old": old_adapter, "new": adapter}

        def read(fn, side: str):
            return fn(sides[side], query, batch_rows, timings, counts, side)

        changes = differential(
            algorithm, read, query, block_rows=block_rows, aging_rows=aging_rows, spill_dir=Path(spill)
        )
        wanted = yield from _deleted_keys(changes, query, batch_rows, ops)
    shipped = yield from _changed_rows(adapter, query, wanted, batch_rows, timings)
    stats.update(
        records_old=counts["old"],
        records_new=counts["new"],
        rows_scanned=counts["new"],
        inserts=ops["insert"],
        updates=ops["update"],
        deletes=ops["delete"],
        rows_shipped=shipped,
        block_rows=block_rows if algorithm == "window" else None,
        aging_rows=aging_rows if algorithm != "partitioned_hash" else None,
        elapsed_s=_since(started),
        timings=timings.to_json(),
    )
    yield frames.json_frame(frames.SUMMARY, stats)


def _since(started: float) -> float:
    """Seconds since `started` (time.monotonic()), as the summary shows them."""
    return round(time.monotonic() - started, 4)


def _previous_dumps(adapter: FileAdapter, query: ValidatedQuery, previous: dict[str, str]) -> FileAdapter:
    """The adapter pinned to the previous dumps of the query's tables; AgentError when one is not named or gone."""
    old_adapter = adapter.pinned({t: previous[t] for t in query.tables if t in previous})
    missing = [t for t in query.tables if t not in previous]
    if missing:
        raise UnsupportedQuery(f"no previous dump named for table(s) {missing}")
    return old_adapter


def _deleted_keys(
    changes: Iterable[Change], query: ValidatedQuery, batch_rows: int, ops: dict[str, int]
) -> Generator[bytes, None, set]:
    """DELETED_KEYS frames of up to `batch_rows` keys as the differential finds them, each op
    counted in `ops`; returns the keys inserted or updated, whose rows are shipped next."""
    by_name = {c.name: c for c in query.columns}
    key_schema = pa.schema([pa.field(UID, pa.int64()), *arrow_schema([Column(k, by_name[k].type) for k in query.key])])
    wanted: set = set()
    gone: list = []
    for change in changes:
        ops[change.op] += 1
        if change.op == DELETE:
            gone.append(change.key)
            if len(gone) >= batch_rows:
                yield _deleted_frame(gone, query, key_schema)
                gone = []
        else:
            wanted.add(change.key)
    if gone:
        yield _deleted_frame(gone, query, key_schema)
    return wanted


def _changed_rows(
    adapter: FileAdapter, query: ValidatedQuery, wanted: set, batch_rows: int, timings: Timings
) -> Generator[bytes, None, int]:
    """CHANGED_ROWS frames: the current rows of the `wanted` keys (the second read); returns how many."""
    if not wanted:
        return 0
    schema = arrow_schema([Column(c.name, c.type) for c in query.columns])
    by_name = {c.name: c for c in query.columns}
    key_schema = pa.schema([pa.field(k, by_name[k].type.arrow()) for k in query.key])
    keys = list(wanted)
    columns = [keys] if len(query.key) == 1 else [list(c) for c in zip(*keys)]
    table = pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, key_schema)], schema=key_schema)
    shipped = 0
    for batch in timings.timed("lookup_s", adapter.rows_of_keys(query.sql, table, schema, batch_rows)):
        shipped += batch.num_rows
        yield frames.arrow_frame(frames.CHANGED_ROWS, batch)
    return shipped


def _spill_root(adapter: FileAdapter) -> Path:
    adapter.cache.mkdir(parents=True, exist_ok=True)
    return adapter.cache


def _deleted_frame(keys: list, query: ValidatedQuery, schema: pa.Schema) -> bytes:
    columns = list(zip(*keys)) if len(query.key) > 1 else [keys]
    data = [pa.array([-1] * len(keys), pa.int64())] + [
        pa.array(list(col), schema.field(i + 1).type) for i, col in enumerate(columns)
    ]
    return frames.arrow_frame(frames.DELETED_KEYS, pa.RecordBatch.from_arrays(data, schema=schema))
