"""A view published as an Apache Iceberg table (pyiceberg): one snapshot per sync that
changed it, in the catalog the destination names (iceberg_catalog.py).

Every snapshot this destination commits carries `deltasieve.sync_id` and
`deltasieve.view_version` in its summary (a rebuild also `deltasieve.rebuild`: why), and is
committed together with any change of the table's schema in one catalog commit, so the
table itself says which sync it holds: `applied` reads the newest snapshot that carries a
sync id. A commit that finds the table moved on (another writer) fails rather than being
retried on top of it (the table's `commit.retry.num-retries` is 0): the service tries again
from what the table then holds.

Types, exactly (`iceberg_type`): int long, float double, decimal(p,s) decimal(p,s), text
string, bytes binary, bool boolean, date date, timestamp timestamp (microseconds, no zone),
timestamptz timestamptz (microseconds, UTC). Every column is optional. The table is
unpartitioned, format version 2, and holds no delete files: a change rewrites the data files
it touches (copy-on-write): a reader needs no more than Iceberg's format version 2, and the
current snapshot's data files read as Parquet are the table.

The table holds the view's columns, then its mode's metadata columns (modes.py: merge,
soft_delete or history, `_deltasieve_synced_at` and `_deltasieve_sync_id` in every mode).
How a sync's delta is applied, in one snapshot: `modes.plan` turns it into the four
primitives; the data files that may hold a key (a multiset's content) a REMOVE, CLOSE or
UPSERT touches (pruned by the file statistics of its first column, over the delta's range)
are read, and those that do hold one are rewritten (copy-on-write): their rows, with the
change applied by `modes.apply_to`, written again beside the appended rows, in key order,
in an overwrite snapshot that removes the files read; a change that touches no file (new
keys, a history's new versions of keys not held) is an append. A delete or close that finds
no row (the table is not the view the delta was computed from) is CannotFollow: the
service rebuilds the table. A rebuild writes the view's rows (a history: as the service
replayed it from the kept deltas) in one overwrite snapshot. After a sync's commit, the
snapshots older than the last `keep_versions` syncs' are expired when due
(iceberg_upkeep.py); `version_of` a sync is its snapshot's id.

The view's columns changed: columns added are added, in the view's order; a decimal whose
precision grew at the same scale is promoted in place (what Iceberg's schema evolution
allows); any other change (a column gone, any other widening: int or a scale to decimal,
decimal to text, date to timestamp) is CannotFollow, and the rebuild gives the column its
new type under a new field id in the rebuild's snapshot.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError, NoSuchTableError
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    GreaterThanOrEqual,
    IsNull,
    LessThanOrEqual,
    Or,
    Reference,
)
from pyiceberg.expressions.literals import literal
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IcebergType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from deltasieve_protocol.types import Column, LogicalType, arrow_schema
from warehouse.defaults import DEFAULT_KEEP_VERSIONS
from warehouse.destinations.base import CannotFollow
from warehouse.destinations.iceberg_catalog import open_catalog, properties, shown
from warehouse.destinations.iceberg_upkeep import PROPERTIES as UPKEEP_PROPERTIES
from warehouse.destinations.iceberg_upkeep import expire
from warehouse.destinations.modes import (
    MERGE,
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
from warehouse.errors import DestinationError
from warehouse.multisets.multiset import COUNT
from warehouse.names import INSERT, OP
from warehouse.view_options import DestinationSpec

KIND = "iceberg"
SYNC_ID = "deltasieve.sync_id"
VIEW_VERSION = "deltasieve.view_version"
REBUILD = "deltasieve.rebuild"
#: The properties a new table is created with: a commit that finds the table moved on
#: fails (see the module) rather than being replayed on rows it did not read; old metadata
#: files deleted by the catalog (iceberg_upkeep.py).
TABLE_PROPERTIES = {"commit.retry.num-retries": "0", **UPKEEP_PROPERTIES}
#: Logical types whose delta range prunes the files read (a float's NaN is outside any
#: range, and Iceberg keeps no bounds of it; a bool or bytes range prunes little).
_RANGED = ("int", "decimal", "text", "date", "timestamp", "timestamptz")


def iceberg_type(t: LogicalType) -> IcebergType:
    """The Iceberg type of a column of logical type `t`.

    >>> [str(iceberg_type(LogicalType.parse(s))) for s in ("int", "decimal(38,10)", "timestamp", "timestamptz")]
    ['long', 'decimal(38, 10)', 'timestamp', 'timestamptz']
    """
    if t.kind == "decimal":
        return DecimalType(t.precision, t.scale)
    return {
        "int": LongType(),
        "float": DoubleType(),
        "text": StringType(),
        "bytes": BinaryType(),
        "bool": BooleanType(),
        "date": DateType(),
        "timestamp": TimestampType(),
        "timestamptz": TimestamptzType(),
    }[t.kind]


def logical_type(t: IcebergType) -> LogicalType | None:
    """The logical type a table's column of Iceberg type `t` holds (None: none of them).

    >>> logical_type(DecimalType(9, 2)), logical_type(TimestamptzType())
    (LogicalType(kind='decimal', precision=9, scale=2), LogicalType(kind='timestamptz', precision=0, scale=0))
    >>> from pyiceberg.types import IntegerType
    >>> logical_type(IntegerType()) is None
    True
    """
    if isinstance(t, DecimalType):
        return LogicalType("decimal", t.precision, t.scale)
    kinds: dict[type, str] = {
        LongType: "int",
        DoubleType: "float",
        StringType: "text",
        BinaryType: "bytes",
        BooleanType: "bool",
        DateType: "date",
        TimestampType: "timestamp",
        TimestamptzType: "timestamptz",
    }
    kind = kinds.get(type(t))
    return LogicalType(kind) if kind else None


def iceberg_schema(columns: list[Column]) -> Schema:
    """A new table's schema: the view's columns in order, optional, field ids from 1.

    >>> print(iceberg_schema([Column("k", LogicalType("int")), Column("d", LogicalType("decimal", 5, 2))]))
    table {
      1: k: optional long
      2: d: optional decimal(5, 2)
    }
    """
    fields = [NestedField(i + 1, c.name, iceberg_type(c.type), required=False) for i, c in enumerate(columns)]
    return Schema(*fields)


def promotes(old: LogicalType, new: LogicalType) -> bool:
    """Whether Iceberg's schema evolution turns a column of `old` into one of `new` in place.

    >>> t = LogicalType.parse
    >>> promotes(t("decimal(9,2)"), t("decimal(12,2)")), promotes(t("decimal(9,2)"), t("decimal(12,4)"))
    (True, False)
    >>> promotes(t("int"), t("decimal(20,0)")), promotes(t("date"), t("timestamp"))
    (False, False)
    """
    return old.kind == new.kind == "decimal" and new.scale == old.scale and new.precision >= old.precision


def split_table(table: str) -> tuple[str, str]:
    """(namespace, table) of the `table` option NAMESPACE.TABLE.

    >>> split_table("erp.students")
    ('erp', 'students')
    """
    namespace, _, name = table.partition(".")
    if not namespace or not name or "." in name:
        raise ValueError(f"an iceberg destination's table is NAMESPACE.TABLE: got {table!r}")
    return namespace, name


class IcebergDestination:
    """Table `table` (NAMESPACE.TABLE) of the Iceberg catalog `props` (pyiceberg's properties)."""

    kind = KIND

    def __init__(
        self,
        props: dict[str, str],
        table: str,
        data_dir: Path,
        shown: dict | None = None,
        publishing: Publishing = MERGE,
        keep_versions: int = DEFAULT_KEEP_VERSIONS,
    ):
        self.props, self.data_dir, self.publishing = props, Path(data_dir), publishing
        self.keep_versions = keep_versions
        self.identifier = split_table(table)
        self.shown = shown or {"type": props.get("type", "sql")}

    def describe(self) -> dict:
        return {"kind": KIND, "catalog": self.shown, "table": ".".join(self.identifier)}

    def _catalog(self) -> Any:
        try:
            return open_catalog(self.props, self.data_dir)
        except Exception as exc:  # the catalog's database or server: unreachable, refusing
            raise DestinationError(f"{self._name()}: the catalog cannot be opened: {exc}", transient=True) from None

    def _name(self) -> str:
        return f"iceberg table {'.'.join(self.identifier)}"

    def _load(self) -> Table | None:
        try:
            return self._catalog().load_table(self.identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def applied(self) -> str | None:
        """The sync id of the newest snapshot that carries one, or None for no table."""
        table = self._load()
        return None if table is None else _carried(table)

    def version_of(self, sync_id: str) -> int | None:
        """The id of the snapshot that applied sync `sync_id` (time travel to it reads the view
        as of that sync: `table.scan(snapshot_id=...)`); None once it was expired, or never made."""
        table = self._load()
        if table is None:
            return None
        for snapshot in table.snapshots():
            if snapshot.summary and snapshot.summary.additional_properties.get(SYNC_ID) == sync_id:
                return snapshot.snapshot_id
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
        """Replace every row (the schema too) with `rows` in one snapshot marked as a rebuild
        (each row written by sync `sync_id` at `synced_at`, unless `rows` carry their
        metadata: `with_metadata`, a history replayed from the kept deltas)."""
        table_columns = self._columns(columns)
        view, schema = arrow_schema(columns), arrow_schema(table_columns)
        if with_metadata:
            whole = pa.Table.from_batches([_cast(b, schema) for b in rows], schema=schema)
        else:
            whole = pa.Table.from_batches([_cast(b, view) for b in rows], schema=view)
            whole = stamped(whole, self.publishing, Stamp.of(sync_id, synced_at))
        summary = _summary(sync_id, version, {REBUILD: reason[:1000]})
        table = self._load()
        if table is None:
            self._create(table_columns, _key_ordered(whole, key), summary)
            return
        tx = table.transaction()
        _replace_columns(tx, table.schema(), table_columns)
        held = [task.file for task in table.scan().plan_files()]
        self._commit_files(tx, table, held, _key_ordered(whole, key), summary)

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
        """One sync's delta in one snapshot (see the module); a missing table is created by
        the view's load (every line an insert). Nothing when the table holds that sync."""
        table_columns = self._columns(columns)
        view, schema = arrow_schema(columns), arrow_schema(table_columns)
        shape = _delta_schema(view, multiset)
        lines = pa.Table.from_batches([_cast(b, shape) for b in delta], schema=shape)
        stamp, summary = Stamp.of(sync_id, synced_at), _summary(sync_id, version)
        table = self._load()
        if table is None:
            if pc.any(pc.not_equal(lines.column(OP), INSERT)).as_py():
                raise CannotFollow(f"{self._name()} does not exist and the delta holds more than inserts: rebuilt")
            rows = lines.select(view.names)
            rows = repeated(rows, lines.column(COUNT)) if multiset else rows
            self._create(table_columns, _key_ordered(stamped(rows, self.publishing, stamp), key), summary)
            return
        if _carried(table) == sync_id:
            return  # applied, then the service stopped before noting it
        check_held(self.publishing, [f.name for f in table.schema().fields], view.names)
        tx = table.transaction()
        _evolve(tx, table.schema(), table_columns)
        changes = plan(lines, view, key, multiset, self.publishing, stamp)
        names = key if not multiset else view.names
        # the keys (a multiset's contents) whose rows the change rewrites; an APPEND reads nothing
        wanted = [changes.remove, changes.close] + ([] if multiset else [changes.upsert])
        touching = pa.concat_tables([t.select(names).cast(pa.schema([view.field(n) for n in names])) for t in wanted])
        first = next(c for c in columns if c.name == names[0])
        files, held = self._holding(table, schema, first, touching, names)
        after = apply_to(held, changes, key, multiset, self.publishing)
        self._commit_files(tx, table, files, _key_ordered(after, key), summary)

    def _columns(self, columns: list[Column]) -> list[Column]:
        """The table's columns: the view's, then its mode's metadata columns (refused by name where they clash)."""
        try:
            check_names(self.publishing, [c.name for c in columns])
        except ValueError as exc:
            raise DestinationError(f"{self._name()}: {exc}") from None
        return [*columns, *self.publishing.columns()]

    def _holding(
        self, table: Table, schema: pa.Schema, first: Column, touching: pa.Table, names: list[str]
    ) -> tuple[list, pa.Table]:
        """The data files holding a row equal to one of `touching` on `names` (NULL matching
        NULL), and all their rows (in `schema`): what the change rewrites. The files read
        are those the range of `first` (names[0]) in `touching` may be in."""
        if touching.num_rows == 0 or table.current_snapshot() is None:
            return [], schema.empty_table()
        tasks = list(table.scan(row_filter=_range(touching, first)).plan_files())
        if any(task.delete_files for task in tasks):
            raise CannotFollow(f"{self._name()} holds delete files another writer made: rebuilt")
        reader = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
        files, parts = [], []
        for task in tasks:
            rows = _with_columns(reader.to_table([task]), schema)
            if matches(rows, touching, names).any():
                files.append(task.file)
                parts.append(rows)
        return files, pa.concat_tables(parts) if parts else schema.empty_table()

    def _create(self, columns: list[Column], rows: pa.Table, summary: dict[str, str]) -> None:
        """The table created with `rows` as its first snapshot, in one catalog commit."""
        catalog = self._catalog()
        catalog.create_namespace_if_not_exists(self.identifier[0])
        tx = catalog.create_table_transaction(self.identifier, iceberg_schema(columns), properties=TABLE_PROPERTIES)
        tx.append(rows, snapshot_properties=summary)
        self._commit(tx)

    def _commit_files(self, tx: Transaction, table: Table, removed: list, rows: pa.Table, summary: dict) -> None:
        """One snapshot in `tx` that removes the data files `removed` and adds `rows`; committed."""
        if not removed:
            tx.append(rows, snapshot_properties=summary)
        else:
            with tx.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
                for data_file in removed:
                    overwrite.delete_data_file(data_file)
                if rows.num_rows:
                    written = _dataframe_to_data_files(
                        table_metadata=tx.table_metadata, df=rows, io=table.io, write_uuid=overwrite.commit_uuid
                    )
                    for data_file in written:
                        overwrite.append_data_file(data_file)
        expire(self._commit(tx), self.keep_versions, SYNC_ID)

    def _commit(self, tx: Transaction) -> Table:
        try:
            return tx.commit_transaction()
        except CommitFailedException as exc:
            raise DestinationError(f"{self._name()} changed while a sync was applied: {exc}", transient=True) from None


def _carried(table: Table) -> str | None:
    """The sync id of the newest snapshot of the table's main branch that carries one."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        carried = snapshot.summary.additional_properties.get(SYNC_ID) if snapshot.summary else None
        if carried is not None:
            return str(carried)
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return None


def _evolve(tx: Transaction, current: Schema, columns: list[Column]) -> None:
    """The table's schema in `tx` made the view's `columns` where Iceberg does that in place
    (columns added, a decimal's precision grown, the order); CannotFollow otherwise."""
    have = {f.name: logical_type(f.field_type) for f in current.fields}
    wanted = {c.name for c in columns}
    gone = [name for name in have if name not in wanted]
    if gone:
        raise CannotFollow(f"the view has no column {', '.join(gone)} any more: the Iceberg table is rebuilt")
    for c in columns:
        old = have.get(c.name, c.type)
        if old != c.type and (old is None or not promotes(old, c.type)):
            raise CannotFollow(
                f"column {c.name} changed from {old or 'another type'} to {c.type}, "
                "which Iceberg cannot promote in place: the table is rebuilt"
            )
    _change_columns(tx, have, columns)


def _replace_columns(tx: Transaction, current: Schema, columns: list[Column]) -> None:
    """The table's schema in `tx` made the view's `columns`, whatever it was: a column gone
    or of a type Iceberg cannot promote is dropped, and added anew (a new field id)."""
    have = {f.name: logical_type(f.field_type) for f in current.fields}
    wanted = {c.name: c.type for c in columns}
    dropped = [
        n for n, t in have.items() if n not in wanted or t is None or (t != wanted[n] and not promotes(t, wanted[n]))
    ]
    if dropped:
        with tx.update_schema() as update:
            for name in dropped:
                update.delete_column((name,))
    _change_columns(tx, {n: t for n, t in have.items() if n not in dropped}, columns)


def _change_columns(tx: Transaction, have: dict[str, LogicalType | None], columns: list[Column]) -> None:
    """Add the columns `have` lacks, promote those whose type differs, put them in the view's order."""
    order = [n for n in have] + [c.name for c in columns if c.name not in have]
    changed = [c for c in columns if have.get(c.name) != c.type]
    if not changed and order == [c.name for c in columns]:
        return
    with tx.update_schema() as update:
        for c in changed:
            if c.name in have:
                update.update_column((c.name,), field_type=iceberg_type(c.type))
            else:
                update.add_column((c.name,), iceberg_type(c.type))
        if order != [c.name for c in columns]:
            update.move_first((columns[0].name,))
            for before, c in zip(columns, columns[1:]):
                update.move_after((c.name,), (before.name,))


def _range(lines: pa.Table, column: Column) -> BooleanExpression:
    """A filter that keeps every file that may hold a row `lines` match on `column`: the
    lines' range of it (and its NULL); everything for a type not ranged (_RANGED)."""
    name = column.name
    values = lines.column(name)
    if column.type.kind not in _RANGED:
        return AlwaysTrue()
    bounds = pc.min_max(values).as_py()
    ranged: BooleanExpression | None = None
    if bounds["min"] is not None:
        low = GreaterThanOrEqual(term=Reference(name), value=literal(bounds["min"]))
        ranged = And(low, LessThanOrEqual(term=Reference(name), value=literal(bounds["max"])))
    if values.null_count:
        null = IsNull(term=Reference(name))
        ranged = null if ranged is None else Or(ranged, null)
    return ranged if ranged is not None else AlwaysTrue()


def _summary(sync_id: str, version: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {SYNC_ID: sync_id, VIEW_VERSION: str(version), **(extra or {})}


def _delta_schema(schema: pa.Schema, multiset: bool) -> pa.Schema:
    fields = [pa.field(OP, pa.string()), *schema]
    if multiset:
        fields.append(pa.field(COUNT, pa.int64()))
    return pa.schema(fields)


def _cast(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([batch.column(f.name).cast(f.type) for f in schema], schema=schema)


def _with_columns(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` as read from the table, in the view's `schema`: cast (a promoted decimal, a
    large string), the columns it lacks NULL."""
    arrays = [
        rows.column(f.name).cast(f.type) if f.name in rows.schema.names else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _key_ordered(rows: pa.Table, key: list[str]) -> pa.Table:
    """A keyed view's rows sorted by its key (each file then holds a range of keys, which
    prunes the files a later delta reads); a multiset view's as they are.

    >>> _key_ordered(pa.table({"k": [3, 1, 2]}), ["k"]).column("k").to_pylist()
    [1, 2, 3]
    """
    return rows.sort_by([(k, "ascending") for k in key]) if key and rows.num_rows else rows


def from_spec(
    spec: DestinationSpec, data_dir: Path, view: str, keep_versions: int = DEFAULT_KEEP_VERSIONS
) -> IcebergDestination:
    """The destination a view's `{"kind": "iceberg", "catalog"?, "table"}` names
    (warehouse/destinations/__init__.py), keeping the snapshots of its last `keep_versions`
    syncs (iceberg_upkeep.py); its catalog's secrets resolved by the caller."""
    assert spec.table is not None, "an iceberg destination has a table (DestinationIn)"
    catalog = spec.catalog
    return IcebergDestination(
        properties(catalog, data_dir), spec.table, data_dir, shown(catalog), Publishing.of(spec), keep_versions
    )
