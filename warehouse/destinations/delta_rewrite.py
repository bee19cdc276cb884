"""A keyed view's sync applied to its Delta table by rewriting only the files it touches.

The sync's delta says exactly which keys it deletes, updates and inserts, and the table's
log says the key range of every file (its min/max statistics; the files are key ranges:
delta_upkeep.py). So no join is needed to find the rows to change: a file is touched when a
changed key falls in its range (it may hold that key), or when it is the file a new row goes
to (the one whose range starts at or below the row's key: ranges stay apart). Each touched
file is read with pyarrow (or taken from the rows its own last rewrite kept in memory:
delta_file_cache.py), its changed keys dropped, its new rows added, and written back as
one file (its rows in no particular order: its key range is what readers and the next sync
prune by), or, once it outgrew the table's target size (`delta.targetFileSize`) by half, sorted by
the key and cut in files of that size; the removes and the adds
are ONE Delta commit (`create_write_transaction`), carrying the sync's id like any other.

Nothing else changes: the protocol (no deletion vectors: a file is removed whole, its rows
written again), time travel (the removed files stay until vacuum), the table's schema.

It takes a single-column key of integers (what `rewrite_plan` says it can do); other keys,
NULL keys, files without statistics and changed columns go through the MERGE (delta.py).
Parquet settings of the files it writes: snappy, as delta-rs; a dictionary only for the
columns that had a small one (DICTIONARY_BYTES). Statistics of the files it writes: the row count, every column's NULL count, and the
min/max of integer, date, string and (NaN-free) float columns, taken from the Parquet
footer the writer makes anyway.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from deltalake.transaction import AddAction, RemoveAction

from warehouse.destinations.delta_file_cache import CACHE, FileCache
from warehouse.destinations.delta_upkeep import FILE_SIZE_PROPERTY, TARGET_FILE_BYTES
from warehouse.names import DELETE, OP

#: Parquet writer settings of the rewritten files: snappy (what delta-rs writes by default),
#: statistics kept in the footer too (readers that ignore the log's prune with them).
COMPRESSION = "snappy"
#: Files rewritten at once: pyarrow reads, filters and writes without the GIL, so the
#: rewrite of a sync that touches many files takes the machine's cores as a MERGE would.
THREADS = max(1, min(4, os.cpu_count() or 1))
#: A rewritten file is split (its rows sorted by the key, cut in files of the target size)
#: once it holds this many times the rows of a target-size file; until then it stays one file.
SPLIT_AT = 1.5
#: A column is dictionary-encoded when its file held it in at most this many bytes a value
#: (before compression): names, codes, dates, yes; keys, phone numbers, addresses, no. Writing
#: a dictionary for those only takes a third less time than for every column (the writer
#: gives up on a unique column's dictionary only after building it) and the file is smaller.
DICTIONARY_BYTES = 4


@dataclass(frozen=True)
class Plan:
    """Which current files one sync rewrites and the new rows each one takes.

    `files` are indices into the table's add actions; `rows[i]` indexes the delta's
    upserted rows that file `files[i]` takes.
    """

    files: list[int]
    rows: list[np.ndarray]


def usable(key: list[str], schema: pa.Schema) -> bool:
    """Whether a table keyed on `key` is applied by file rewrite (one integer key column).

    >>> usable(["k"], pa.schema([("k", pa.int64()), ("v", pa.string())]))
    True
    >>> usable(["k", "v"], pa.schema([("k", pa.int64()), ("v", pa.string())]))
    False
    """
    return len(key) == 1 and pa.types.is_integer(schema.field(key[0]).type)


def rewrite_plan(lows: np.ndarray, highs: np.ndarray, changed: np.ndarray, upserted: np.ndarray) -> Plan:
    """The files to rewrite, given each file's key range [lows[i], highs[i]], the keys the sync
    changes (`changed`: every line's key) and the keys of the rows it writes (`upserted`).

    A file is rewritten when a changed key falls in its range; a written row goes to the
    file with the highest low at or below its key (the first file for keys below all), so
    that files stay key ranges apart.

    >>> plan = rewrite_plan(np.array([0, 10, 20]), np.array([9, 19, 29]), np.array([5, 25, 40]), np.array([5, 40]))
    >>> plan.files, [r.tolist() for r in plan.rows]
    ([0, 2], [[0], [1]])
    """
    order = np.argsort(lows, kind="stable")
    ordered = np.sort(changed)
    holding = np.searchsorted(ordered, highs, side="right") - np.searchsorted(ordered, lows, side="left") > 0
    at = np.searchsorted(lows[order], upserted, side="right") - 1
    home = order[np.maximum(at, 0)] if len(order) else np.zeros(0, np.int64)
    files = sorted(set(np.flatnonzero(holding).tolist()) | set(home.tolist()))
    return Plan(files, [np.flatnonzero(home == f) for f in files])


def apply_by_rewrite(
    table: DeltaTable,
    schema: pa.Schema,
    changes: pa.Table,
    key: str,
    properties: CommitProperties,
    cache: FileCache = CACHE,
) -> bool:
    """Apply a keyed delta (`OP` and the view's columns `schema`, those of the table) by
    rewriting the files it touches, in one commit; False (nothing done) when the table is
    not one this can write (see `plain_files`) or its statistics do not allow it. The rows
    of the files it writes are kept in `cache`, and taken from it when it rewrites them."""
    if not plain_files(table):
        return False
    actions = pa.table(table.get_add_actions(flatten=True))
    lows, highs = f"min.{key}", f"max.{key}"
    if actions.num_rows == 0 or lows not in actions.column_names:
        return False
    if actions.column(lows).null_count or actions.column(highs).null_count or changes.column(key).null_count:
        return False  # a file without statistics, or a NULL key: the MERGE finds its rows
    if any("://" in p or p.startswith("/") for p in actions.column("path").to_pylist()):
        return False  # a file outside the table's directory
    upserts = changes.filter(pc.not_equal(changes.column(OP), DELETE)).select(schema.names).cast(schema)
    plan = rewrite_plan(
        actions.column(lows).to_numpy(),
        actions.column(highs).to_numpy(),
        changes.column(key).to_numpy(),
        upserts.column(key).to_numpy(),
    )
    if not plan.files:
        return False
    root = local_dir(table.table_uri)
    target_bytes = int(table.metadata().configuration.get(FILE_SIZE_PROPERTY, TARGET_FILE_BYTES))
    changed = pc.unique(changes.column(key).combine_chunks())
    now = int(time.time() * 1000)

    def rewritten(f: int, taken: np.ndarray) -> tuple[RemoveAction, list[AddAction]]:
        path, size = actions.column("path")[f].as_py(), actions.column("size_bytes")[f].as_py()
        kept_rows = cache.take(file_key(root, path))
        if kept_rows is None:
            held_file = pq.ParquetFile(str(root / path))
            held = _in_schema(held_file, schema)  # read on this thread: the files are the parallel work
            encoded = dictionary_columns(held_file.metadata)
        else:
            held, encoded = _conformed(kept_rows.rows, schema), kept_rows.encoded
        kept = held.filter(pc.invert(pc.is_in(held.column(key), value_set=changed)))
        rows = pa.concat_tables([kept, upserts.take(pa.array(taken, pa.int64()))])
        per_file = max(1, int(target_bytes * max(held.num_rows, 1) / max(size, 1)))
        if rows.num_rows <= per_file * SPLIT_AT:  # still one file: its rows in no particular order
            return RemoveAction(path, True, now, size), [_written(root, rows, now, encoded, cache)]
        rows = rows.sort_by(key)  # split into key ranges
        parts = [rows.slice(at, per_file) for at in range(0, rows.num_rows, per_file)]
        return RemoveAction(path, True, now, size), [_written(root, part, now, encoded, cache) for part in parts]

    with ThreadPoolExecutor(THREADS) as pool:  # pyarrow reads and writes without the GIL
        done = list(pool.map(rewritten, plan.files, plan.rows))
    files: list[AddAction | RemoveAction] = [remove for remove, _ in done]
    files += [add for _, adds in done for add in adds]
    table.create_write_transaction(files, mode="append", schema=table.schema(), commit_properties=properties)
    return True


def plain_files(table: DeltaTable) -> bool:
    """Whether the table's current rows are its files' rows as Parquet holds them, and a
    commit of new files needs nothing but their adds: no deletion vectors or column mapping
    (reader features beyond timestampNtz), no partitions, no CHECK constraints to enforce."""
    protocol = table.protocol()
    if protocol.min_reader_version == 2 or set(protocol.reader_features or []) - {"timestampNtz"}:
        return False
    metadata = table.metadata()
    if metadata.partition_columns:
        return False
    return not any(name.startswith("delta.constraints.") for name in metadata.configuration)


def local_dir(uri: str) -> Path:
    """The directory of a local table's URI (a path, or file://)."""
    return Path(unquote(urlparse(uri).path) if uri.startswith("file:") else uri)


def file_key(root: Path, path: str) -> str:
    """The name a file of the table at `root` is kept under in the cache: its real path."""
    return os.path.realpath(root / path)


def _in_schema(file: pq.ParquetFile, schema: pa.Schema) -> pa.Table:
    """A file's rows in the table's columns: NULL in the columns added after it was written."""
    names = [n for n in schema.names if n in file.schema_arrow.names]
    return _conformed(file.read(columns=names, use_threads=False), schema)


def _conformed(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` in the table's columns and types: NULL in the columns added after they were written.

    >>> _conformed(pa.table({"k": [1], "gone": [2]}), pa.schema([("k", pa.int64()), ("v", pa.string())])).to_pylist()
    [{'k': 1, 'v': None}]
    """
    arrays = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def dictionary_columns(footer: pq.FileMetaData) -> list[str]:
    """The columns of a file worth dictionary-encoding when it is written again: those its
    footer shows at most DICTIONARY_BYTES a value before compression (few distinct values)."""
    values = max(footer.num_rows, 1)
    sizes: dict[str, int] = {}
    for g in range(footer.num_row_groups):
        group = footer.row_group(g)
        for j in range(group.num_columns):
            chunk = group.column(j)
            sizes[chunk.path_in_schema] = sizes.get(chunk.path_in_schema, 0) + chunk.total_uncompressed_size
    return [name for name, size in sizes.items() if size / values <= DICTIONARY_BYTES]


def _written(root: Path, rows: pa.Table, now: int, encoded: list[str], cache: FileCache) -> AddAction:
    """`rows` written as a new Parquet file of the table (`encoded`: the columns to
    dictionary-encode), kept in `cache`; its add action."""
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    footers: list[pq.FileMetaData] = []
    pq.write_table(rows, str(root / name), compression=COMPRESSION, use_dictionary=encoded, metadata_collector=footers)
    size = (root / name).stat().st_size
    cache.put(file_key(root, name), rows, encoded)
    return AddAction(name, size, {}, now, True, json.dumps(stats(rows, footers[0]), allow_nan=False))


def stats(rows: pa.Table, footer: pq.FileMetaData) -> dict:
    """A file's Delta statistics, from the Parquet footer its writer made: row count, NULL
    counts, min/max of the columns readers prune by (integers, dates, strings, floats
    without NaN: Parquet leaves NaN out of a float's min/max, which Delta readers do not;
    nor ±Infinity, which JSON cannot write and Delta readers then cannot read).

    >>> rows = pa.table({"k": [3, 1], "s": ["b", None], "d": [dt.date(2020, 1, 2), None], "f": [1.0, float("nan")]})
    >>> footers = []
    >>> pq.write_table(rows, pa.BufferOutputStream(), metadata_collector=footers)
    >>> stats(rows, footers[0])
    {'numRecords': 2, 'minValues': {'k': 1, 's': 'b', 'd': '2020-01-02'}, 'maxValues': {'k': 3, 's': 'b', 'd': '2020-01-02'}, 'nullCount': {'k': 0, 's': 1, 'd': 1, 'f': 0}}
    >>> rows = pa.table({"f": [1.0, float("inf")]})
    >>> pq.write_table(rows, pa.BufferOutputStream(), metadata_collector=footers)
    >>> stats(rows, footers[-1])
    {'numRecords': 2, 'minValues': {}, 'maxValues': {}, 'nullCount': {'f': 0}}
    """
    lows: dict = {}
    highs: dict = {}
    nulls: dict = {}
    groups = [footer.row_group(g) for g in range(footer.num_row_groups)]
    for j, field in enumerate(rows.schema):
        kind, column = field.type, rows.column(j)
        nulls[field.name] = column.null_count
        ranged = (
            pa.types.is_integer(kind)
            or pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_date32(kind)
            or (pa.types.is_floating(kind) and not pc.any(pc.is_nan(column)).as_py())
        )
        found = [g.column(j).statistics for g in groups]
        bounds = [s for s in found if s is not None and s.has_min_max]
        if not ranged or not bounds or len(bounds) < len(found):
            continue
        low, high = min(s.min for s in bounds), max(s.max for s in bounds)
        if isinstance(low, float) and not (math.isfinite(low) and math.isfinite(high)):
            continue
        if isinstance(low, dt.date):
            low, high = low.isoformat(), high.isoformat()
        lows[field.name], highs[field.name] = low, high
    return {"numRecords": rows.num_rows, "minValues": lows, "maxValues": highs, "nullCount": nulls}
