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

Every commit of a sync also carries a Delta transaction id (`txn`, APP_ID and the view
version): a commit whose first write landed while its answer was lost (object storage:
object_storage.py) and that delta-rs writes again then conflicts with its own first landing
instead of being committed twice; the applier's next turn reads the sync id back.

On S3 (`storage`: object_storage.py) the table is signed in to with the destination's own
credentials; the file rewrite and its cache take local tables only, a table on S3 is
applied by the MERGE.

Maintenance (`maintain`, delta_upkeep.py): the files' layout, compaction every
OPTIMIZE_EVERY versions, vacuum keeping the last `keep_versions` view versions. No upkeep
commit carries a sync id or changes rows; time travel to a view version (`DeltaTable(uri,
version=v)` of the commit carrying it) works while its files are kept.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Schema, Transaction, write_deltalake
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
from warehouse.destinations.modes import (
    MERGE,
    Changes,
    Publishing,
    Stamp,
    apply_to,
    check_held,
    check_names,
    matches,
    plan,
    repeated,
    stamped,
)
from warehouse.destinations.object_storage import storage_options
from warehouse.errors import WarehouseError
from warehouse.multisets.multiset import COUNT
from warehouse.names import INSERT, OP
from warehouse.view_options import DestinationSpec


class DestinationRefused(WarehouseError):
    """The table's place is not one to write to (a directory of other files)."""


__all__ = ["MAINTENANCE", "OPTIMIZE_EVERY", "SYNC_ID", "DeltaDestination", "DestinationRefused", "from_spec"]

VIEW_VERSION = "deltasieve.view_version"
#: The application id of the Delta transaction (`txn`) each sync's commit carries (_properties).
APP_ID = "deltasieve"
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
        publishing: Publishing = MERGE,
    ):
        self.uri = uri
        self.publishing = publishing
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
        synced_at: dt.datetime | None = None,
        with_metadata: bool = False,
    ) -> None:
        """Overwrite the table (schema too) with `rows` in one commit marked as a rebuild
        (its metadata: every row written by sync `sync_id` at `synced_at`, unless the rows
        carry theirs: `with_metadata`)."""
        view = arrow_schema(columns)
        schema = self._schema(view)
        if with_metadata:
            whole = pa.Table.from_batches([_cast(b, schema) for b in rows], schema=schema)
        else:
            whole = pa.Table.from_batches([_cast(b, view) for b in rows], schema=view)
            whole = stamped(whole, self.publishing, Stamp.of(sync_id, synced_at))
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
        synced_at: dt.datetime | None = None,
    ) -> None:
        """One sync's delta in one commit (see the module); a missing table starts empty."""
        view = arrow_schema(columns)
        schema = self._schema(view)
        stamp = Stamp.of(sync_id, synced_at)
        properties = _properties(sync_id, version)
        table = self._table()
        if table is None:  # the view's load, every line an insert (base.py): a new table in key order
            rows = pa.Table.from_batches(list(_inserted(delta, view, multiset)), schema=view)
            self._overwrite(_key_ordered(stamped(rows, self.publishing, stamp), key), properties)
            return
        # one sync's delta, held whole: the merge reads it as one source
        batches = [_cast(b, _delta_schema(view, multiset)) for b in delta]
        lines = pa.Table.from_batches(batches, schema=_delta_schema(view, multiset))
        current = pa.schema(table.schema().to_arrow())
        check_held(self.publishing, current.names, view.names)
        evolution = schema_change(current, schema)

        def changes() -> Changes:  # made where a path needs them (the file rewrite does not)
            return plan(lines, view, key, multiset, self.publishing, stamp)

        if evolution == "widened":  # rewritten in this sync's commit: see the module
            rows = table.to_pyarrow_table()
            rows = _with_columns(rows.select([n for n in schema.names if n in rows.schema.names]), schema)
            self._overwrite(_key_ordered(apply_to(rows, changes(), key, multiset, self.publishing), key), properties)
            return
        before = table.version()
        if multiset:
            self._apply_multiset(table, view, schema, changes(), properties, evolution == "added")
        elif self.publishing.mode == "merge" and evolution is None and is_local(self.uri) and usable(key, schema):
            # the merge mode's rows: the delta's, stamped (a delete line's metadata is not read)
            rewritten = stamped(lines.select([OP, *view.names]), self.publishing, stamp)
            if not apply_by_rewrite(table, schema, rewritten, key[0], properties, self.cache):
                self._apply_keyed(table, schema, key, changes(), properties, False)
        else:
            self._apply_keyed(table, schema, key, changes(), properties, evolution == "added")
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

    def _schema(self, view: pa.Schema) -> pa.Schema:
        """The table's columns: the view's, then its mode's (DestinationRefused on a clash of names)."""
        try:
            check_names(self.publishing, view.names)
        except ValueError as exc:
            raise DestinationRefused(f"{self.uri}: {exc}") from None
        return self.publishing.schema(view)

    def _apply_keyed(
        self, table: DeltaTable, schema: pa.Schema, key: list[str], changes: Changes, properties, evolve: bool
    ) -> None:
        """One MERGE on the key (null-safe) taking the four primitives (modes.py): each source
        row says by its side which (r: remove, c: close, u: upsert, a: append)."""
        closing = [_quoted(n) for n in changes.closing]
        closed = _conformed(changes.close, schema)
        for name, value in changes.closing.items():
            at = closed.schema.get_field_index(name)
            closed = closed.set_column(at, closed.schema.field(at), pa.repeat(value, closed.num_rows))
        source = pa.concat_tables(
            [
                _sided(_conformed(changes.remove, schema), "r"),
                _sided(closed, "c"),
                _sided(changes.upsert.cast(schema), "u"),
                _sided(changes.append.cast(schema), "a"),
            ]
        )
        if not source.num_rows:
            return
        side = f"s.{_SIDE}"
        on = [f"({side} <> 'a')", *(f"(t.{_quoted(k)} IS NOT DISTINCT FROM s.{_quoted(k)})" for k in key)]
        live = self.publishing.live
        if live is not None:
            on.append(f"({side} <> 'c' OR t.{_quoted(live[0])} = {str(live[1]).lower()})")
        values = {_quoted(n): f"s.{_quoted(n)}" for n in schema.names}
        (
            _merge(table, source, " AND ".join(on), properties, evolve)
            .when_matched_delete(f"{side} = 'r'")
            .when_matched_update({c: f"s.{c}" for c in closing} or values, f"{side} = 'c'")
            .when_matched_update(values, f"{side} = 'u'")
            .when_not_matched_insert(values, f"{side} IN ('u', 'a')")
            .execute()
        )

    def _apply_multiset(
        self, table: DeltaTable, view: pa.Schema, schema: pa.Schema, changes: Changes, properties, evolve: bool
    ) -> None:
        """Appended rows appended; the contents a REMOVE or CLOSE touches rewritten: every row
        of them deleted by one MERGE (null-safe on every view column) and their rows after the
        change (modes.apply_to) inserted by it, beside the appended ones."""
        names = view.names
        touched = pa.concat_tables([changes.remove.select(names), changes.close.select(names)])
        if touched.num_rows == 0:
            write_deltalake(
                table,
                changes.append.cast(schema),
                mode="append",
                schema_mode="merge" if evolve else None,
                commit_properties=properties,
            )
            return
        held = _rows_of(table, touched, names, schema)
        after = apply_to(
            held, replace(changes, upsert=schema.empty_table(), append=schema.empty_table()), [], True, self.publishing
        )
        source = pa.concat_tables(
            [
                _sided(_conformed(touched, schema), "d"),
                _sided(pa.concat_tables([after, changes.append.cast(schema)]), "i"),
            ]
        )
        on = " AND ".join(
            [f"(s.{_SIDE} = 'd')", *(f"(t.{_quoted(n)} IS NOT DISTINCT FROM s.{_quoted(n)})" for n in names)]
        )
        values = {_quoted(n): f"s.{_quoted(n)}" for n in schema.names}
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
    """A sync's commit: its id and view version in the commit's metadata, and a Delta
    transaction id (`txn` APP_ID, the view version): a commit that delta-rs writes again
    after its first try landed unseen (an answer lost on the way back from S3) then
    conflicts with that first one instead of being committed twice."""
    return CommitProperties(
        custom_metadata={SYNC_ID: sync_id, VIEW_VERSION: str(version), **(extra or {})},
        app_transactions=[Transaction(APP_ID, version)],
    )


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
            rows = repeated(rows, pa.chunked_array([batch.column(COUNT)]))
        yield from rows.to_batches()


def _key_ordered(rows: pa.Table, key: list[str]) -> pa.Table:
    """A keyed view's rows sorted by its key, so that each file holds a range of keys
    (delta_upkeep.py); a multiset view's as they are.

    >>> _key_ordered(pa.table({"k": [3, 1, 2]}), ["k"]).column("k").to_pylist()
    [1, 2, 3]
    """
    return rows.sort_by([(k, "ascending") for k in key]) if key and rows.num_rows else rows


def _conformed(keys: pa.Table, schema: pa.Schema) -> pa.Table:
    """`keys` (some columns of the table) in the table's schema, NULL in the others."""
    return _with_columns(keys, schema)


def _empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def _with_columns(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` in `schema`: its columns cast (widened), those it lacks NULL (the columns it
    has that `schema` lacks left out).

    >>> _with_columns(pa.table({"a": [1], "x": [2]}), pa.schema([("a", pa.int64()), ("b", pa.string())])).to_pylist()
    [{'a': 1, 'b': None}]
    """
    arrays = [
        rows.column(f.name).cast(f.type) if f.name in rows.schema.names else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _sided(rows: pa.Table, side: str) -> pa.Table:
    return rows.append_column(_SIDE, pa.array([side] * rows.num_rows, pa.string()))


def _rows_of(table: DeltaTable, contents: pa.Table, names: list[str], schema: pa.Schema) -> pa.Table:
    """Every row of `table` equal to a row of `contents` on the view's columns `names` (NULL
    equal to NULL), in `schema` (NULL in columns it lacks), read through a scan of the table
    filtered on the first column's values."""
    dataset = table.to_pyarrow_dataset()
    first = contents.column(names[0])
    wanted = pc.is_in(pc.field(names[0]), value_set=first.drop_null().combine_chunks())
    if first.null_count:
        wanted = wanted | pc.field(names[0]).is_null()
    held = _with_columns(dataset.to_table(filter=wanted), schema)
    return held.filter(pa.array(matches(held, contents, names)))


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
    """The Delta table of a view's spec: its `uri`, or DATA_DIR/tables/<view>; on S3 signed
    in with its `storage`, its credentials resolved (object_storage.py)."""
    options = storage_options(spec.storage) if spec.storage is not None else None
    return DeltaDestination(
        spec.uri or default_table_uri(data_dir, view),
        options,
        keep_versions=keep_versions,
        publishing=Publishing.of(spec),
    )
