"""The stored deltas of a view's syncs as one stream of Arrow batches: a sync's delta, or
the change feed (the deltas of every succeeded sync after one), optionally with the row
each update replaced.

Every batch is normalized: `OP`, the view's columns cast to their logical types, `COUNT`
for a multiset view, `OLD` (a struct: the old row of a matched update of a multiset view
with `match`, as stored), on the answers served `CHANGED` (a list: the columns an update
changed, as the delta stores it, deltas/changed_columns.py; of a multiset's matched update
from its old row; null on other lines and where the delta does not keep it) and, with
`with_before`, `BEFORE` (a struct: the row an update replaced, null on other lines).

Where the old row of an update comes from: a keyed view's delta stores only the new row.
The row an update of sync k replaced is the view's row as of sync k-1, so the stream first
reads the keys its updates touch (the op and key columns of its deltas), then their rows as
of the sync before its first one, and rolls them forward through its own deltas. Those rows
are read from that sync's version when it is still stored (the current version and the
older ones kept since the service started, `ViewStore.cleanup`), decoding only the rows of
the first key column's values. Without that version they are rolled forward from the deltas
themselves: every earlier delta back to the view's load, whose delta holds every row of the
view. Memory: one row per updated key. A multiset view's matched updates carry their old
row in the delta already (`OLD`), which `BEFORE` repeats.

Across a redefinition (PUT; the sync that applied it marked its delta,
pipeline/redefine.py) the deltas have other columns: the stream is cut there
(redefinitions.segments), a SchemaChange goes before that sync's lines, and each part is
read in its own shape. That sync's updates carry no `BEFORE` (the rows they replace have
the old columns); the part after it starts from the version it committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from service.catalog import Catalog
from service.errors import Gone
from service.records import SyncRecord, ViewRecord
from service.redefinitions import Segment
from warehouse.deltas.changed_columns import CHANGED_TYPE, arrow_changed
from warehouse.multisets import multiset
from warehouse.names import CHANGED, OP
from warehouse.pipeline.redefine import redefined
from warehouse.reading.rows import view_batches
from warehouse.store.layers import lookup, view_lookup
from warehouse.store.versions import Version, ViewStore
from warehouse.viewdef import ViewDef
from warehouse.viewdef.redefinition import schema_line

COUNT = multiset.COUNT
OLD = "__ds_old"
BEFORE = "__ds_before"
UPDATE, INSERT, DELETE = "update", "insert", "delete"


@dataclass(frozen=True)
class Shape:
    """What the normalized batches of a view's deltas hold."""

    view: ViewDef
    matched: bool  # a multiset view with `match`: updates carry their old row (OLD)
    with_before: bool
    changed: bool = False  # the lines carry CHANGED: the columns each update changed

    @classmethod
    def of(cls, view: ViewRecord, with_before: bool, changed: bool = False) -> Shape:
        """The shape of the deltas of a view as the catalog holds it."""
        return cls(ViewDef.of_view(view.name, view.definition), view.options.match is not None, with_before, changed)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.view.columns]

    def row_type(self) -> pa.StructType:
        return pa.struct([pa.field(c.name, c.type.arrow()) for c in self.view.columns])

    def schema(self, before: bool | None = None) -> pa.Schema:
        """The normalized batches' schema; `before=False`: without BEFORE (as a delta is read)."""
        fields = [pa.field(OP, pa.string())]
        fields += [pa.field(c.name, c.type.arrow()) for c in self.view.columns]
        if self.view.multiset:
            fields.append(pa.field(COUNT, pa.int64()))
        if self.matched:
            fields.append(pa.field(OLD, self.row_type()))
        if self.changed:
            fields.append(pa.field(CHANGED, CHANGED_TYPE))
        if self.with_before if before is None else before:
            fields.append(pa.field(BEFORE, self.row_type()))
        return pa.schema(fields)


def stored(store: ViewStore, syncs: Iterable[SyncRecord], why: str = "") -> list[tuple[str, Path]]:
    """(sync id, delta directory) of each sync, or Gone naming the first whose delta is not kept."""
    out = []
    for sync in syncs:
        path = store.delta(sync.id)
        if not path.is_dir():
            raise Gone(
                f"the delta of sync {sync.id} (finished {sync.finished_at}) is no longer stored{why}; "
                f"read the view's rows (GET /v1/views/{store.view}/rows) and follow the feed after the sync "
                "its X-Last-Sync header names"
            )
        out.append((sync.id, path))
    return out


def delta_batches(path: Path, shape: Shape, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """One stored delta as normalized batches (without BEFORE)."""
    dataset = ds.dataset(path, format="parquet")
    names = shape.names
    present = set(dataset.schema.names)
    if OP not in present:  # a delta directory without data files: no changes
        return
    wanted = [OP, *names] + ([COUNT] if shape.view.multiset else [])
    olds = (
        [multiset.OLD_PREFIX + n for n in names] if shape.matched and multiset.OLD_PREFIX + names[0] in present else []
    )
    changed = [CHANGED] if shape.changed and CHANGED in present else []
    row_type, schema = shape.row_type(), shape.schema(before=False)
    for batch in dataset.to_batches(columns=wanted + olds + changed, batch_size=batch_rows):
        arrays = [batch.column(OP).cast(pa.string())]
        arrays += [batch.column(n).cast(row_type.field(n).type) for n in names]
        if shape.view.multiset:
            arrays.append(batch.column(COUNT).cast(pa.int64()))
        if shape.matched:
            arrays.append(_old_rows(batch, olds, row_type))
        if shape.changed:
            arrays.append(_changed(shape, arrays, batch.column(CHANGED) if changed else None))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _changed(shape: Shape, arrays: list[pa.Array], stored: pa.Array | None) -> pa.Array:
    """The columns each update of a normalized batch (its `arrays` so far) changed: as
    stored; of a multiset's matched update, its old row (OLD, last) against the new one;
    null where a delta that does not keep CHANGED does not say."""
    if stored is not None:
        return stored.cast(CHANGED_TYPE)
    if not shape.matched:
        return pa.nulls(len(arrays[0]), CHANGED_TYPE)
    olds = arrays[-1]
    updates = pc.and_(pc.equal(arrays[0], UPDATE), pc.is_valid(olds))
    names = shape.names
    return arrow_changed({n: olds.field(n) for n in names}, dict(zip(names, arrays[1 : 1 + len(names)])), updates)


def _old_rows(batch: pa.RecordBatch, olds: list[str], row_type: pa.StructType) -> pa.Array:
    """A multiset delta's stored old rows as one struct column (null but on updates)."""
    not_update = pc.not_equal(batch.column(OP), UPDATE).fill_null(True)
    if not olds:
        return pa.nulls(batch.num_rows, row_type)
    fields = [batch.column(o).cast(row_type.field(i).type) for i, o in enumerate(olds)]
    return pa.StructArray.from_arrays(fields, fields=list(row_type), mask=not_update)


@dataclass(frozen=True)
class Start:
    """Where the rows before a stream's first sync come from (with_before on a keyed view):
    the version of the sync before it, or else the deltas of every sync up to that one.
    Neither for a stream that starts with the view's load."""

    version: Version | None = None
    deltas: tuple[Path, ...] = ()


#: Why a with_before answer needs older deltas (said when one is gone).
WITH_BEFORE_NEEDS = (
    " (with_before reads every delta since the view's load to find the rows updates replaced, "
    "when the version before the first sync asked for is no longer stored)"
)


def start(store: ViewStore, earlier: list[SyncRecord], shape: Shape) -> Start:
    """The Start of a stream after the succeeded syncs `earlier` (oldest first): Gone when
    it would need a delta that is no longer stored. Deltas are rolled forward only from
    the view's load: past a sync that redefined the view (whose delta is a difference, in
    other columns) only the version tells, and without it the rows are not known."""
    if not shape.with_before or shape.view.multiset or not earlier:
        return Start()
    version = store.version_of(earlier[-1].id)
    if version is not None:
        return Start(version=version)
    if any(s.trigger == "redefine" and redefined(store.delta(s.id)) is not None for s in earlier):
        return Start()
    return Start(deltas=tuple(p for _, p in stored(store, earlier, WITH_BEFORE_NEEDS)))


@dataclass(frozen=True)
class SchemaChange:
    """In a stream of deltas: the sync `sync_id` redefined the view; the lines that follow
    have `shape` (its delta and the later ones) and `line` says so to the reader."""

    sync_id: str
    shape: Shape
    line: dict


Item = tuple[str, pa.RecordBatch] | SchemaChange


def deltas_of(
    catalog: Catalog, store: ViewStore, view: ViewRecord, parts: list[Segment], with_before: bool, batch_rows: int
) -> tuple[Shape, Iterator[Item]]:
    """The shape of the first lines and the stream of the deltas of the syncs of `parts`
    (succeeded syncs of `view`, oldest first, cut where one redefined the view:
    redefinitions.segments), a SchemaChange before each such sync's lines; Gone, before
    anything streams, when a delta it needs is no longer stored. The syncs before the first
    are looked up only where with_before needs the rows they left."""
    matched = view.options.match is not None
    shapes = [Shape(p.view, matched, with_before, True) for p in parts] or [Shape.of(view, with_before, True)]
    feeds = [stored(store, p.syncs) for p in parts]
    begins = []
    for part, shape in zip(parts, shapes, strict=False):
        if part.redefined:  # the rows before the syncs after it are those it left, when still stored
            version = store.version_of(part.syncs[0].id) if shape.with_before and not shape.view.multiset else None
            begins.append(Start(version=version))
            continue
        earlier = []
        if shape.with_before and not shape.view.multiset:
            earlier = catalog.succeeded_before(view.name, part.syncs[0].id)
        begins.append(start(store, earlier, shape))

    def items() -> Iterator[Item]:
        for part, shape, feed, begin in zip(parts, shapes, feeds, begins, strict=False):  # no parts: one shape
            if part.redefined:
                sync_id = part.syncs[0].id
                yield SchemaChange(sync_id, shape, schema_line(sync_id, shape.view))
                for batch in delta_batches(feed[0][1], shape, batch_rows):  # before: the old rows have other columns
                    nulls = [pa.nulls(batch.num_rows, shape.row_type())] if shape.with_before else []
                    yield sync_id, pa.RecordBatch.from_arrays([*batch.columns, *nulls], schema=shape.schema())
                feed = feed[1:]
            yield from stream(shape, begin, feed, batch_rows)

    return shapes[0], items()


def stream(
    shape: Shape, begin: Start, feed: list[tuple[str, Path]], batch_rows: int
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """(sync id, normalized batch) of each delta of `feed`, in order; with `with_before`,
    `begin` tells the rows the feed's updates replaced."""
    if not shape.with_before:
        for sync_id, path in feed:
            for batch in delta_batches(path, shape, batch_rows):
                yield sync_id, batch
        return
    if shape.view.multiset:  # only matched updates, whose old row the delta holds
        for sync_id, path in feed:
            for batch in delta_batches(path, shape, batch_rows):
                before = batch.column(OLD) if shape.matched else pa.nulls(batch.num_rows, shape.row_type())
                yield sync_id, pa.RecordBatch.from_arrays([*batch.columns, before], schema=shape.schema())
        return
    tracker = RowsOfKeys(shape, _updated_keys(shape, [p for _, p in feed], batch_rows))
    if tracker.keys and begin.version is not None:
        tracker.take(_version_rows(shape, begin.version, tracker.keys, batch_rows))
    elif tracker.keys:
        for path in begin.deltas:
            for batch in delta_batches(path, shape, batch_rows):
                tracker.apply(batch)
    for sync_id, path in feed:
        for batch in delta_batches(path, shape, batch_rows):
            before = tracker.before(batch)
            tracker.apply(batch)
            yield sync_id, pa.RecordBatch.from_arrays([*batch.columns, before], schema=shape.schema())


def _version_rows(shape: Shape, version: Version, keys: set[tuple], batch_rows: int) -> Iterable[pa.RecordBatch]:
    """Rows of the view as of `version`, read with Arrow, the files filtered on the first key
    column's values in `keys` as they are read (all rows where one of those is NULL)."""
    view = shape.view
    row_type = shape.row_type()
    if view.assembly is None and view.sites[0].key == view.key:
        key_types = pa.schema([row_type.field(k) for k in view.key])
        wanted = pa.Table.from_pylist([dict(zip(view.key, k)) for k in keys], schema=key_types)
        site = view.sites[0]
        return lookup(version, 0, site.columns, site.key, wanted).select(shape.names).to_batches(batch_rows)
    firsts = {k[0] for k in keys}
    if None in firsts:
        return view_batches(version, view, batch_rows)
    where = ds.field(view.key[0]).isin(pa.array(sorted(firsts, key=repr), row_type.field(view.key[0]).type))
    return view_lookup(version, view, where).select(shape.names).to_batches(batch_rows)


def _updated_keys(shape: Shape, paths: list[Path], batch_rows: int) -> set[tuple]:
    """The keys the deltas at `paths` update (read: the op and key columns only)."""
    key = shape.view.key
    types = shape.row_type()
    keys: set[tuple] = set()
    for path in paths:
        dataset = ds.dataset(path, format="parquet")
        if OP not in dataset.schema.names:
            continue
        updates = ds.field(OP) == UPDATE
        for batch in dataset.to_batches(columns=key, filter=updates, batch_size=batch_rows):
            columns = [batch.column(k).cast(types.field(k).type).to_pylist() for k in key]
            keys.update(zip(*columns))
    return keys


class RowsOfKeys:
    """The view's current row of each of some keys, kept while its deltas are applied in order.

    >>> from warehouse.viewdef import ViewDef
    >>> from warehouse.multisets.multiset import _cols
    >>> view = ViewDef("", _cols("id int", "v text"), ["id"], [])
    >>> rows = RowsOfKeys(Shape(view, False, True), {(1,), (2,)})
    >>> rows.apply(pa.record_batch({OP: ["insert", "insert", "insert"], "id": [1, 2, 3], "v": ["a", "b", "c"]}))
    >>> rows.before(pa.record_batch({OP: ["update", "delete"], "id": [1, 3], "v": ["A", None]})).to_pylist()
    [{'id': 1, 'v': 'a'}, None]
    """

    def __init__(self, shape: Shape, keys: set[tuple]):
        self.key = shape.view.key
        self.names = shape.names
        self.row_type = shape.row_type()
        self.keys = keys
        self.rows: dict[tuple, dict] = {}
        first = self.row_type.field(self.key[0]).type if self.key else None
        # a first cut in Arrow by the first key column, so that a large delta (the load's)
        # costs Python objects only for the rows of the keys asked for
        self.first_values = pa.array(sorted({k[0] for k in keys}, key=repr), first) if keys else None

    def _of_keys(self, batch: pa.RecordBatch) -> list[dict]:
        if not self.keys:
            return []
        try:
            batch = batch.filter(pc.is_in(batch.column(self.key[0]), value_set=self.first_values))
        except pa.ArrowNotImplementedError:  # a type is_in does not take: filter in Python alone
            pass
        rows = batch.select([OP, *self.names]).to_pylist()
        return [r for r in rows if tuple(r[k] for k in self.key) in self.keys]

    def take(self, rows: Iterable[pa.RecordBatch]) -> None:
        """Take the rows of the keys kept from the view's rows at some version."""
        for batch in rows:
            arrays = [batch.column(n).cast(self.row_type.field(n).type) for n in self.names]
            inserts = pa.array([INSERT] * batch.num_rows, pa.string())
            self.apply(pa.RecordBatch.from_arrays([inserts, *arrays], names=[OP, *self.names]))

    def apply(self, batch: pa.RecordBatch) -> None:
        """Take a delta batch's changes to the keys kept."""
        for row in self._of_keys(batch):
            k = tuple(row[c] for c in self.key)
            if row[OP] == DELETE:
                self.rows.pop(k, None)
            else:
                self.rows[k] = {n: row[n] for n in self.names}

    def before(self, batch: pa.RecordBatch) -> pa.Array:
        """The rows the batch's updates replace (null on its other lines, and where unknown)."""
        ops = batch.column(OP).to_pylist()
        if UPDATE not in ops:
            return pa.nulls(batch.num_rows, self.row_type)
        keys = zip(*[batch.column(k).to_pylist() for k in self.key])
        rows = [self.rows.get(k) if op == UPDATE else None for op, k in zip(ops, keys)]
        return pa.array(rows, type=self.row_type)
