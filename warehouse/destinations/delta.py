"""A view published as a Delta Lake table (delta-rs): one commit per sync that changed it.

Every commit that changes rows carries `deltasieve.sync_id` and `deltasieve.view_version`
in its commit info (a rebuild also `deltasieve.rebuild`: why); `applied` reads the newest
such commit back from the table's log, so the table itself says which sync it holds.

How a sync's delta is applied, in one commit:

- keyed view: the files the delta's keys fall in rewritten and committed as removes and
  adds (delta_rewrite.py) where the key is one integer column and the columns did not
  change; otherwise one MERGE on the key (null-safe equality): a delete line deletes the
  row, an insert or update line upserts it. Either rewrites only the files holding touched
  keys (the table's files are key ranges: delta_upkeep.py).
- multiset view (rows repeated as often as they occur): a content whose occurrences only
  grow is appended. A content that loses n of its m occurrences is deleted whole by the
  MERGE, and its m - n remaining copies are inserted by the same MERGE (m is counted in the
  table before: a scan of the table filtered on those contents), beside the appended rows.
- columns added to the view: the MERGE evolves the table's schema (merge_schema), the rows
  before it NULL in them. A column widened (a decimal's precision, an int read as a
  decimal...): Delta without the typeWidening feature cannot widen in place, so that
  sync's commit overwrites the table with its rows cast to the new types and the delta
  applied (still one commit, carrying the sync id). Anything else (a column dropped,
  renamed or narrowed) is CannotFollow: the applier rebuilds the table.

Protocol: delta-rs writes reader version 1 and writer version 2 (what every reader of
Delta takes: Spark, Databricks, Trino, DuckDB, Polars), without deletion vectors (delta-rs
never writes them: a delete rewrites the files it touches, so a table's current files are
its rows, and `file_uris()` read as Parquet is the table). A view with a `timestamp`
column (without time zone) needs Delta's timestampNtz feature: reader 3 / writer 7, read by
Spark 3.4+, delta-rs and DuckDB's delta extension.

Maintenance (`maintain`, delta_upkeep.py): the files' layout, compaction every
OPTIMIZE_EVERY versions, vacuum keeping the last `keep_versions` view versions. No upkeep
commit carries a sync id or changes rows; time travel to a view version (`DeltaTable(uri,
version=v)` of the commit carrying it) works while its files are kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Schema, write_deltalake
from deltalake.exceptions import TableNotFoundError

from deltasieve_protocol.types import Column, LogicalType, arrow_schema
from warehouse.destinations import DEFAULT_KEEP_VERSIONS, default_table_uri
from warehouse.destinations.base import CannotFollow
from warehouse.destinations.delta_file_cache import CACHE, FileCache
from warehouse.destinations.delta_rewrite import apply_by_rewrite, file_key, local_dir, usable
from warehouse.destinations.delta_upkeep import (
    MAINTENANCE,
    OPTIMIZE_EVERY,
    SYNC_ID,
    configuration,
    maintain,
)
from warehouse.errors import WarehouseError
from warehouse.multisets.multiset import COUNT
from warehouse.names import DELETE, INSERT, OP
from warehouse.view_options import DestinationSpec


class DestinationRefused(WarehouseError):
    """The table's place is not one to write to (a directory of other files)."""


__all__ = ["MAINTENANCE", "OPTIMIZE_EVERY", "SYNC_ID", "DeltaDestination", "DestinationRefused", "from_spec"]

VIEW_VERSION = "deltasieve.view_version"
REBUILD = "deltasieve.rebuild"
#: Commits read back from the log to find the newest sync id: a sync's commit is followed by
#: at most upkeep commits (delta_upkeep.py): a layout, a compaction, a vacuum's two.
HISTORY_LOOKBACK = 16
_SIDE = "__ds_side"


def delta_type(t: LogicalType) -> str:
    """The Delta Lake type of a column of logical type `t`: delta-rs' name for the Arrow type written.

    >>> [delta_type(LogicalType.parse(s)) for s in ("int", "decimal(38,10)", "timestamp", "timestamptz")]
    ['long', 'decimal(38,10)', 'timestamp_ntz', 'timestamp']
    """
    (field,) = Schema.from_arrow(arrow_schema([Column("c", t)])).fields
    return str(json.loads(field.to_json())["type"])


def _quoted(name: str) -> str:
    """A column name as delta-rs' SQL predicates read it.

    >>> _quoted('a"b')
    '`a"b`'
    """
    return "`" + name.replace("`", "``") + "`"


class DeltaDestination:
    """A view's Delta Lake table at `uri` (a local path or any URI delta-rs writes to)."""

    kind = "delta"

    def __init__(
        self,
        uri: str,
        storage_options: dict[str, str] | None = None,
        keep_versions: int = DEFAULT_KEEP_VERSIONS,
        cache: FileCache = CACHE,
    ):
        self.uri = uri
        self.storage_options = storage_options
        self.keep_versions = keep_versions
        self.cache = cache

    def describe(self) -> dict:
        return {"kind": self.kind, "uri": self.uri}

    def _table(self) -> DeltaTable | None:
        self._check_place()
        try:
            return DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def applied(self) -> str | None:
        """The sync id of the newest commit that carries one, or None for no table."""
        table = self._table()
        if table is None:
            return None
        for limit in (HISTORY_LOOKBACK, None):
            for commit in table.history(limit):
                if SYNC_ID in commit:
                    return str(commit[SYNC_ID])
        return None

    def version_of(self, sync_id: str) -> int | None:
        """The table version of the commit that applied sync `sync_id` (time travel to it reads
        the view as of that sync), looked for among the latest commits; None when not found."""
        table = self._table()
        if table is None:
            return None
        for commit in table.history(HISTORY_LOOKBACK):
            if commit.get(SYNC_ID) == sync_id:
                return int(commit["version"])
        return None

    def rebuild(
        self,
        sync_id: str,
        version: int,
        columns: list[Column],
        key: list[str],
        rows: Iterable[pa.RecordBatch],
        multiset: bool,
        reason: str,
    ) -> None:
        """Overwrite the table (schema too) with `rows` in one commit marked as a rebuild."""
        schema = arrow_schema(columns)
        whole = pa.Table.from_batches([_cast(b, schema) for b in rows], schema=schema)
        self._overwrite(_key_ordered(whole, key), _properties(sync_id, version, {REBUILD: reason}))

    def _check_place(self) -> None:
        """Refuse a local directory that holds files and no Delta table: never write into one."""
        if not is_local(self.uri):
            return
        path = Path(urlparse(self.uri).path if self.uri.startswith("file:") else self.uri)
        if path.is_dir() and not (path / "_delta_log").is_dir() and any(path.iterdir()):
            raise DestinationRefused(f"{self.uri} is a directory that holds files and no Delta table: not written to")

    def _overwrite(self, data, properties: CommitProperties) -> None:
        self._check_place()
        self._forget_files()
        write_deltalake(
            self.uri,
            data,
            mode="overwrite",
            schema_mode="overwrite",
            storage_options=self.storage_options,
            configuration=configuration(),
            commit_properties=properties,
        )

    def apply(
        self,
        sync_id: str,
        version: int,
        columns: list[Column],
        key: list[str],
        delta: Iterable[pa.RecordBatch],
        multiset: bool,
    ) -> None:
        """One sync's delta in one commit (see the module); a missing table starts empty."""
        schema = arrow_schema(columns)
        properties = _properties(sync_id, version)
        table = self._table()
        if table is None:  # the view's load, every line an insert (base.py): a new table in key order
            rows = pa.Table.from_batches(list(_inserted(delta, schema, multiset)), schema=schema)
            self._overwrite(_key_ordered(rows, key), properties)
            return
        # one sync's delta, held whole: the merge reads it as one source
        batches = [_cast(b, _delta_schema(schema, multiset)) for b in delta]
        changes = pa.Table.from_batches(batches, schema=_delta_schema(schema, multiset))
        current = pa.schema(table.schema().to_arrow())
        evolution = schema_change(current, schema)
        if evolution == "widened":  # rewritten in this sync's commit: see the module
            rows = table.to_pyarrow_table()
            rows = rows.select([n for n in schema.names if n in rows.schema.names])
            rows = _with_columns(rows, schema)
            self._overwrite(_key_ordered(_applied_to(rows, changes, key, multiset), key), properties)
            return
        before = table.version()
        if multiset:
            self._apply_multiset(table, schema, changes, properties, evolution == "added")
        else:
            self._apply_keyed(table, schema, key, changes, properties, evolution == "added")
        if DeltaTable(self.uri, storage_options=self.storage_options).version() == before:
            # a merge that changed nothing commits nothing; the sync is still recorded
            write_deltalake(
                self.uri,
                _empty(schema),
                mode="append",
                schema_mode="merge",
                storage_options=self.storage_options,
                commit_properties=properties,
            )
        self.maintain(before, key)

    def _apply_keyed(
        self, table: DeltaTable, schema: pa.Schema, key: list[str], changes: pa.Table, properties, evolve: bool
    ) -> None:
        if not evolve and is_local(self.uri) and usable(key, schema):
            if apply_by_rewrite(table, schema, changes, key[0], properties, self.cache):
                return
        on = " AND ".join(f"(t.{_quoted(k)} IS NOT DISTINCT FROM s.{_quoted(k)})" for k in key)
        values = {_quoted(n): f"s.{_quoted(n)}" for n in schema.names}
        deleting = f"s.{_quoted(OP)} = '{DELETE}'"
        (
            _merge(table, changes, on, properties, evolve)
            .when_matched_delete(deleting)
            .when_matched_update(values, f"NOT ({deleting})")
            .when_not_matched_insert(values, f"NOT ({deleting})")
            .execute()
        )

    def _apply_multiset(
        self, table: DeltaTable, schema: pa.Schema, changes: pa.Table, properties, evolve: bool
    ) -> None:
        names = schema.names
        deletes = changes.filter(pc.equal(changes.column(OP), DELETE))
        inserts = changes.filter(pc.not_equal(changes.column(OP), DELETE))
        added = _repeated(inserts.select(names), inserts.column(COUNT))
        if deletes.num_rows == 0:
            write_deltalake(
                table,
                added,
                mode="append",
                schema_mode="merge" if evolve else None,
                commit_properties=properties,
            )
            return
        gone = deletes.select(names)
        present = _counts_of(table, gone, names)  # occurrences of each deleted content now
        remaining = pc.subtract(present, deletes.column(COUNT)).to_pylist()
        if any(r is None or r < 0 for r in remaining):
            raise CannotFollow("the table holds fewer occurrences of a row than the sync deletes: rebuild it")
        kept = _repeated(gone, pa.array(remaining, pa.int64()))
        source = pa.concat_tables(
            [
                _sided(gone, "d"),
                _sided(pa.concat_tables([kept, added.cast(kept.schema)]), "i"),
            ]
        )
        on = " AND ".join(
            [f"(s.{_SIDE} = 'd')", *(f"(t.{_quoted(n)} IS NOT DISTINCT FROM s.{_quoted(n)})" for n in names)]
        )
        values = {_quoted(n): f"s.{_quoted(n)}" for n in names}
        (
            _merge(table, source, on, properties, evolve)
            .when_matched_delete()
            .when_not_matched_insert(values, f"(s.{_SIDE} = 'i')")
            .execute()
        )

    def maintain(self, before: int, key: list[str]) -> None:
        """The upkeep due after an apply from table version `before` (delta_upkeep.py)."""
        table = self._table()
        if table is not None and maintain(table, before, key, self.keep_versions):
            self._forget_files()  # compacted: every current file is new

    def _forget_files(self) -> None:
        """Let go of the rows the cache holds of this table's files (all of them replaced)."""
        if is_local(self.uri):
            self.cache.forget(file_key(local_dir(self.uri), ""))


def _merge(table: DeltaTable, source: pa.Table, on: str, properties: CommitProperties, evolve: bool):
    """A MERGE of `source` (alias s) into the table (alias t) on `on`, the clauses to follow."""
    return table.merge(
        source,
        on,
        source_alias="s",
        target_alias="t",
        merge_schema=evolve,
        commit_properties=properties,
        streamed_exec=False,  # the delta is held whole: its key range prunes the files read
    )


def _properties(sync_id: str, version: int, extra: dict[str, str] | None = None) -> CommitProperties:
    return CommitProperties(custom_metadata={SYNC_ID: sync_id, VIEW_VERSION: str(version), **(extra or {})})


def _delta_schema(schema: pa.Schema, multiset: bool) -> pa.Schema:
    fields = [pa.field(OP, pa.string()), *schema]
    if multiset:
        fields.append(pa.field(COUNT, pa.int64()))
    return pa.schema(fields)


def _cast(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([batch.column(f.name).cast(f.type) for f in schema], schema=schema)


def _inserted(delta: Iterable[pa.RecordBatch], schema: pa.Schema, multiset: bool) -> Iterator[pa.RecordBatch]:
    """The rows a load's delta inserts, batch by batch (a multiset's repeated by their count);
    a line that is not an insert ends it with CannotFollow."""
    for batch in delta:
        batch = _cast(batch, _delta_schema(schema, multiset))
        if pc.any(pc.not_equal(batch.column(OP), INSERT)).as_py():
            raise CannotFollow("a delta applied to no table holds more than inserts: the table is rebuilt")
        rows = pa.Table.from_batches([batch]).select(schema.names)
        if multiset:
            rows = _repeated(rows, batch.column(COUNT))
        yield from rows.to_batches()


def _key_ordered(rows: pa.Table, key: list[str]) -> pa.Table:
    """A keyed view's rows sorted by its key, so that each file holds a range of keys
    (delta_upkeep.py); a multiset view's as they are.

    >>> _key_ordered(pa.table({"k": [3, 1, 2]}), ["k"]).column("k").to_pylist()
    [1, 2, 3]
    """
    return rows.sort_by([(k, "ascending") for k in key]) if key and rows.num_rows else rows


def _empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def _with_columns(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` in `schema`: its columns cast (widened), those it lacks NULL."""
    arrays = [
        rows.column(f.name).cast(f.type) if f.name in rows.schema.names else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _repeated(rows: pa.Table, counts: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Each row of `rows` as often as its count says.

    >>> _repeated(pa.table({"a": [1, 2, 3]}), pa.array([2, 0, 1])).column("a").to_pylist()
    [1, 1, 3]
    """
    counts = pa.chunked_array([counts]) if isinstance(counts, pa.Array) else counts
    repeat = counts.to_numpy() if counts.num_chunks else []
    indices = np.repeat(np.arange(rows.num_rows), np.asarray(repeat, dtype=np.int64))
    return rows.take(pa.array(indices, pa.int64()))


def _sided(rows: pa.Table, side: str) -> pa.Table:
    return rows.append_column(_SIDE, pa.array([side] * rows.num_rows, pa.string()))


def _counts_of(table: DeltaTable, contents: pa.Table, names: list[str]) -> pa.Array:
    """How often each row of `contents` occurs in `table` (rows equal on every column, NULL
    equal to NULL), read through a scan of the table filtered on the first column's values."""
    dataset = table.to_pyarrow_dataset()
    first = contents.column(names[0])
    wanted = pc.is_in(pc.field(names[0]), value_set=first.drop_null().combine_chunks())
    if first.null_count:
        wanted = wanted | pc.field(names[0]).is_null()
    held = dataset.to_table(columns=names, filter=wanted)
    # grouped with the contents themselves (each once, at its place), as a join would not
    # match NULL with NULL: a group's count less one is the occurrences held
    at = "__ds_at"
    marked = contents.append_column(at, pa.array(range(contents.num_rows), pa.int64()))
    held = held.cast(contents.schema).append_column(at, pa.nulls(held.num_rows, pa.int64()))
    groups = pa.concat_tables([marked, held]).group_by(names, use_threads=False)
    counted = groups.aggregate([(at, "max"), ([], "count_all")]).sort_by(f"{at}_max")
    counted = counted.filter(pc.is_valid(counted.column(f"{at}_max")))
    return pc.subtract(counted.column("count_all"), 1).combine_chunks()


def _applied_to(rows: pa.Table, changes: pa.Table, key: list[str], multiset: bool) -> pa.Table:
    """`rows` with a delta applied, in Arrow (a new table, or a rewrite that widens columns).

    >>> rows = pa.table({"k": [1, 2], "v": ["a", "b"]})
    >>> changes = pa.table({OP: ["update", "delete", "insert"], "k": [1, 2, 3], "v": ["A", None, "c"]})
    >>> _applied_to(rows, changes, ["k"], False).sort_by("k").to_pylist()
    [{'k': 1, 'v': 'A'}, {'k': 3, 'v': 'c'}]
    """
    names = rows.schema.names
    changes = changes.select([OP, *names] + ([COUNT] if multiset else [])).cast(
        pa.schema([changes.schema.field(OP), *rows.schema] + ([changes.schema.field(COUNT)] if multiset else []))
    )
    deleting = pc.equal(changes.column(OP), DELETE)
    if not multiset:
        touched = changes.select(key)
        kept = rows.join(touched, key, join_type="left anti", use_threads=False) if rows.num_rows else rows
        return pa.concat_tables([kept, changes.filter(pc.invert(deleting)).select(names)])
    marked = rows.append_column(COUNT, pa.array([1] * rows.num_rows, pa.int64()))
    signed = pc.if_else(deleting, pc.negate(changes.column(COUNT)), changes.column(COUNT))
    moves = changes.select(names).append_column(COUNT, signed)
    totals = pa.concat_tables([marked, moves.cast(marked.schema)]).group_by(names, use_threads=False)
    summed = totals.aggregate([(COUNT, "sum")])
    counts = pc.max_element_wise(summed.column(f"{COUNT}_sum"), 0)
    return _repeated(summed.select(names), counts)


def schema_change(current: pa.Schema, wanted: pa.Schema) -> str | None:
    """How the view's columns `wanted` differ from the table's `current`: None (same),
    "added" (new columns only), "widened" (some cast losslessly, maybe some added); raise
    CannotFollow otherwise.

    >>> a = pa.schema([("k", pa.int64()), ("d", pa.decimal128(5, 2))])
    >>> schema_change(a, a) is None
    True
    >>> schema_change(a, a.append(pa.field("x", pa.string())))
    'added'
    >>> schema_change(a, pa.schema([("k", pa.int64()), ("d", pa.decimal128(9, 2))]))
    'widened'
    """
    names = set(wanted.names)
    gone = [n for n in current.names if n not in names]
    if gone:
        raise CannotFollow(f"the view no longer has column(s) {', '.join(gone)}: the Delta table is rebuilt")
    change = None
    for field in current:
        new = wanted.field(field.name).type
        if _same_type(field.type, new):
            continue
        if not _widens(field.type, new):
            raise CannotFollow(f"column {field.name} changed from {field.type} to {new}: the Delta table is rebuilt")
        change = "widened"
    if change is None and len(wanted) > len(current):
        change = "added"
    return change


def _same_type(held: pa.DataType, new: pa.DataType) -> bool:
    """Equal types, as Delta hands back what it stored (large or view strings and binaries)."""
    if held == new:
        return True
    strings = (pa.string(), pa.large_string(), pa.string_view())
    binaries = (pa.binary(), pa.large_binary(), pa.binary_view())
    return (held in strings and new in strings) or (held in binaries and new in binaries)


def _widens(held: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of `held` is a value of `new`.

    >>> _widens(pa.decimal128(5, 2), pa.decimal128(9, 3)), _widens(pa.decimal128(5, 2), pa.decimal128(5, 3))
    (True, False)
    >>> _widens(pa.decimal128(38, 10), pa.string()), _widens(pa.string(), pa.decimal128(38, 10))
    (True, False)
    """
    if pa.types.is_decimal(held) and pa.types.is_decimal(new):
        return new.scale >= held.scale and new.precision - new.scale >= held.precision - held.scale
    if pa.types.is_integer(held) and pa.types.is_decimal(new):
        return new.precision - new.scale >= 19
    if pa.types.is_integer(held) and pa.types.is_integer(new):
        return new.bit_width >= held.bit_width
    if pa.types.is_date(held) and pa.types.is_timestamp(new):
        return new.tz is None
    # every decimal has an exact text (viewdef/widening.py)
    return pa.types.is_decimal(held) and new in (pa.string(), pa.large_string(), pa.string_view())


def is_local(uri: str) -> bool:
    """Whether `uri` is a path on this machine (no scheme, or file://).

    >>> is_local("/data/tables/v"), is_local("file:///data/t"), is_local("s3://b/t")
    (True, True, False)
    """
    return urlparse(uri).scheme in ("", "file")


def from_spec(
    spec: DestinationSpec, data_dir: Path, view: str, keep_versions: int = DEFAULT_KEEP_VERSIONS
) -> DeltaDestination:
    """The Delta table of a view's spec: its `uri`, or DATA_DIR/tables/<view>."""
    return DeltaDestination(spec.uri or default_table_uri(data_dir, view), keep_versions=keep_versions)
