"""Destination modes: what one sync's delta does to a published table in each mode, and the
load metadata every mode writes.

A destination (base.py) has a mode (`DestinationSpec.mode`) and the names of its metadata
columns (`DestinationSpec.columns`, MetadataColumns). Its table holds the view's columns and,
after them, the mode's metadata columns (`Publishing.fields`):

- `merge` (the default): the view's rows as they are now, each with `synced_at` (the commit
  time of the sync that last wrote it, timestamp with time zone, UTC) and `sync_id`.
- `soft_delete`: the same, and a row deleted from the view stays, flagged: `deleted` true and
  `deleted_at` the deleting sync's time (false and NULL while live). A key inserted again is
  live again (its row replaced). A multiset's deleted occurrences stay, each flagged.
- `history`: one row per version of each row: `valid_from` (the sync that wrote the version),
  `valid_to` (the sync that replaced or deleted it; NULL while current) and `current`. An
  update closes the key's current version and opens a new one; a delete closes it. The
  table as of time T is its rows with `valid_from <= T AND (valid_to IS NULL OR valid_to > T)`.

Times are the sync's commit time: a change at the source is known only to lie between the
commit of the sync before and that of the sync that saw it.

How a kind implements the modes: with four primitives, the same in every mode (`ACTIONS`
says which each delta line takes):

- UPSERT (keyed): the line's row, with the fresh metadata (`Publishing.fresh`), replaces
  whatever row the table has for its key (or is added);
- APPEND: the line's row, with the fresh metadata, is added (a multiset's COUNT times);
- REMOVE: the key's row is deleted (a multiset: COUNT rows equal to the line on the view's
  columns, NULL equal to NULL);
- CLOSE: the key's live row (`Publishing.live`: not deleted, or current) takes the values
  `Publishing.closing` gives (a multiset: COUNT live rows equal to the line).

In one commit, REMOVE and CLOSE first, then UPSERT and APPEND (a history update closes the
key's version before the new one is added). All the metadata values of one sync are constants
(`fresh`, `closing`): a SQL destination writes them as typed literals beside its COPY of the
delta, the lines of each primitive picked by operation (`Publishing.lines_taking`;
postgres_apply.py); a destination that works in Arrow takes `plan`'s tables (delta.py), and
`apply_to` applies them to rows held in memory (a rewrite of the whole table). `replay`
builds a history from a view's kept deltas (the applier's rebuild of a history destination,
handed to `rebuild` with `with_metadata`). `Publishing.columns` gives the metadata columns'
logical types, `Publishing.fields` their Arrow types, for a kind that creates its table.

A table written before the modes (no metadata columns) takes `synced_at` and `sync_id` in
place at its next sync (NULL in the rows it had); a table whose columns are those of another
mode (or other names) cannot follow (`check_held`): the applier rebuilds it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltasieve_protocol.types import Column, LogicalType
from warehouse.destinations.base import CannotFollow
from warehouse.multisets.multiset import COUNT
from warehouse.names import DELETE, INSERT, OP, UPDATE
from warehouse.view_options import DEFAULT_MODE, DestinationMode, DestinationSpec, MetadataColumns

UPSERT, APPEND, REMOVE, CLOSE = "upsert", "append", "remove", "close"

#: (mode, multiset, delta op) -> what the line does to the table, in order.
ACTIONS: dict[tuple[str, bool, str], tuple[str, ...]] = {
    ("merge", False, INSERT): (UPSERT,),
    ("merge", False, UPDATE): (UPSERT,),
    ("merge", False, DELETE): (REMOVE,),
    ("merge", True, INSERT): (APPEND,),
    ("merge", True, DELETE): (REMOVE,),
    ("soft_delete", False, INSERT): (UPSERT,),
    ("soft_delete", False, UPDATE): (UPSERT,),
    ("soft_delete", False, DELETE): (CLOSE,),
    ("soft_delete", True, INSERT): (APPEND,),
    ("soft_delete", True, DELETE): (CLOSE,),
    ("history", False, INSERT): (APPEND,),
    ("history", False, UPDATE): (CLOSE, APPEND),
    ("history", False, DELETE): (CLOSE,),
    ("history", True, INSERT): (APPEND,),
    ("history", True, DELETE): (CLOSE,),
}

#: The metadata columns (MetadataColumns' fields) each mode writes, in the table's order.
MODE_COLUMNS: dict[str, tuple[str, ...]] = {
    "merge": ("synced_at", "sync_id"),
    "soft_delete": ("deleted", "deleted_at", "synced_at", "sync_id"),
    "history": ("valid_from", "valid_to", "current", "synced_at", "sync_id"),
}
#: The metadata columns a table of any mode may take in place (one written before the modes).
ADDED_IN_PLACE = ("synced_at", "sync_id")

#: The logical type of each metadata column (deltasieve_protocol.types).
LOGICAL: dict[str, LogicalType] = {
    "synced_at": LogicalType("timestamptz"),
    "sync_id": LogicalType("text"),
    "deleted": LogicalType("bool"),
    "deleted_at": LogicalType("timestamptz"),
    "valid_from": LogicalType("timestamptz"),
    "valid_to": LogicalType("timestamptz"),
    "current": LogicalType("bool"),
}
#: Their Arrow types (timestamps: microseconds, UTC).
TYPES: dict[str, pa.DataType] = {name: t.arrow() for name, t in LOGICAL.items()}


@dataclass(frozen=True)
class Stamp:
    """The sync a commit applies, as its metadata columns tell it: its id and its commit time (UTC)."""

    sync_id: str
    at: dt.datetime

    @classmethod
    def of(cls, sync_id: str, at: dt.datetime | str | None) -> Stamp:
        """A stamp from a time as the catalog keeps it (ISO 8601), or now when unknown.

        >>> Stamp.of("s1", "2026-01-02T03:04:05.678+00:00").at.isoformat()
        '2026-01-02T03:04:05.678000+00:00'
        """
        if at is None:
            at = dt.datetime.now(dt.UTC)
        elif isinstance(at, str):
            at = dt.datetime.fromisoformat(at)
        if at.tzinfo is None:
            at = at.replace(tzinfo=dt.UTC)
        return cls(sync_id, at.astimezone(dt.UTC))


@dataclass(frozen=True)
class Publishing:
    """A destination's mode and the names of its metadata columns.

    >>> p = Publishing("history")
    >>> [f.name for f in p.fields()]
    ['_deltasieve_valid_from', '_deltasieve_valid_to', '_deltasieve_current', '_deltasieve_synced_at', '_deltasieve_sync_id']
    >>> p.live
    ('_deltasieve_current', True)
    """

    mode: DestinationMode = DEFAULT_MODE
    names: MetadataColumns = MetadataColumns()

    @classmethod
    def of(cls, spec: DestinationSpec) -> Publishing:
        return cls(spec.mode, spec.columns)

    def name(self, column: str) -> str:
        """The table's name of metadata column `column` (a MetadataColumns field)."""
        return str(getattr(self.names, column))

    def fields(self) -> list[pa.Field]:
        """The metadata columns of the mode, in the table's order after the view's columns."""
        return [pa.field(self.name(c), TYPES[c]) for c in MODE_COLUMNS[self.mode]]

    def columns(self) -> list[Column]:
        """The metadata columns with their logical types (for a kind that maps those, as PostgreSQL's).

        >>> [(c.name, str(c.type)) for c in Publishing().columns()]
        [('_deltasieve_synced_at', 'timestamptz'), ('_deltasieve_sync_id', 'text')]
        """
        return [Column(self.name(c), LOGICAL[c]) for c in MODE_COLUMNS[self.mode]]

    def lines_taking(self, action: str, multiset: bool) -> list[str]:
        """The delta operations whose lines take `action` in this mode (ACTIONS), for a kind
        that applies the delta in SQL.

        >>> Publishing("history").lines_taking(CLOSE, False), Publishing("history").lines_taking(APPEND, False)
        (['update', 'delete'], ['insert', 'update'])
        """
        return [op for op in (INSERT, UPDATE, DELETE) if action in ACTIONS.get((self.mode, multiset, op), ())]

    def schema(self, view: pa.Schema) -> pa.Schema:
        """The table's schema: the view's columns, then the metadata columns."""
        return pa.schema([*view, *self.fields()])

    @property
    def live(self) -> tuple[str, bool] | None:
        """The column and value that mark a live row (one CLOSE may touch), None in merge mode."""
        if self.mode == "soft_delete":
            return self.name("deleted"), False
        if self.mode == "history":
            return self.name("current"), True
        return None

    def fresh(self, stamp: Stamp) -> dict[str, pa.Scalar]:
        """The metadata of a row the sync writes (UPSERT, APPEND; a load and a rebuild).

        >>> at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
        >>> {k: str(v) for k, v in Publishing("soft_delete").fresh(Stamp("s1", at)).items()}
        ... # doctest: +NORMALIZE_WHITESPACE
        {'_deltasieve_deleted': 'False', '_deltasieve_deleted_at': 'None',
         '_deltasieve_synced_at': '2026-01-02 00:00:00+00:00', '_deltasieve_sync_id': 's1'}
        """
        values = {
            "synced_at": stamp.at,
            "sync_id": stamp.sync_id,
            "deleted": False,
            "deleted_at": None,
            "valid_from": stamp.at,
            "valid_to": None,
            "current": True,
        }
        return {self.name(c): pa.scalar(values[c], TYPES[c]) for c in MODE_COLUMNS[self.mode]}

    def closing(self, stamp: Stamp) -> dict[str, pa.Scalar]:
        """The values a row CLOSE touches takes (its view columns stay as they were).

        >>> at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
        >>> sorted(Publishing("history").closing(Stamp("s1", at)))
        ['_deltasieve_current', '_deltasieve_sync_id', '_deltasieve_synced_at', '_deltasieve_valid_to']
        >>> Publishing("merge").closing(Stamp("s1", at))
        {}
        """
        values = {
            "soft_delete": {"deleted": True, "deleted_at": stamp.at},
            "history": {"valid_to": stamp.at, "current": False},
        }.get(self.mode)
        if values is None:
            return {}
        values = {**values, "synced_at": stamp.at, "sync_id": stamp.sync_id}
        return {self.name(c): pa.scalar(v, TYPES[c]) for c, v in values.items()}


#: The default: merge mode, the default names.
MERGE = Publishing()


def check_names(publishing: Publishing, view_columns: Iterable[str]) -> None:
    """ValueError, naming them, when the mode's metadata columns clash with the view's
    columns or with each other, or a column of another mode is renamed.

    >>> check_names(Publishing("merge"), ["id", "name"])
    >>> check_names(Publishing("history", MetadataColumns(current="id")), ["id"])
    Traceback (most recent call last):
    ...
    ValueError: the history mode's metadata column current is named id, a column of the view: rename it ("columns": {"current": ...})
    >>> check_names(Publishing("merge", MetadataColumns(current="active")), [])
    Traceback (most recent call last):
    ...
    ValueError: the merge mode writes no current column (it writes synced_at and sync_id): leave it out of "columns"
    """
    used = MODE_COLUMNS[publishing.mode]
    for given in sorted(publishing.names.model_fields_set - set(used)):
        raise ValueError(
            f"the {publishing.mode} mode writes no {given} column (it writes {_listed(used)}): "
            'leave it out of "columns"'
        )
    seen: dict[str, str] = {}
    view = set(view_columns)
    for column in used:
        name = publishing.name(column)
        if name in view:
            raise ValueError(
                f"the {publishing.mode} mode's metadata column {column} is named {name}, a column of the view: "
                f'rename it ("columns": {{"{column}": ...}})'
            )
        if name in seen:
            raise ValueError(f"metadata columns {seen[name]} and {column} are both named {name}: name them apart")
        seen[name] = column


def check_held(publishing: Publishing, held: Iterable[str], view_columns: Iterable[str]) -> list[str]:
    """The metadata columns an existing table (its columns `held`) lacks and takes in place
    (synced_at and sync_id of a table written before the modes); CannotFollow when it lacks
    others or holds columns that are neither the view's nor the mode's (another mode's).

    >>> check_held(Publishing(), ["k", "v"], ["k", "v"])
    ['_deltasieve_synced_at', '_deltasieve_sync_id']
    >>> check_held(Publishing("history"), ["k", "_deltasieve_synced_at", "_deltasieve_sync_id"], ["k"])
    Traceback (most recent call last):
    ...
    warehouse.destinations.base.CannotFollow: the table lacks the history mode's column(s) _deltasieve_valid_from, _deltasieve_valid_to, _deltasieve_current (published in another mode or with other names): it is rebuilt
    """
    held = list(held)
    wanted = {f.name for f in publishing.fields()}
    missing = [c for c in MODE_COLUMNS[publishing.mode] if publishing.name(c) not in held]
    lacking = [publishing.name(c) for c in missing if c not in ADDED_IN_PLACE]
    if lacking:
        raise CannotFollow(
            f"the table lacks the {publishing.mode} mode's column(s) {', '.join(lacking)} "
            "(published in another mode or with other names): it is rebuilt"
        )
    view = set(view_columns)
    other = [c for c in held if c not in wanted and c not in view and c in _EVERY_DEFAULT_NAME]
    if other:
        raise CannotFollow(f"the table holds {', '.join(other)}, not of the {publishing.mode} mode: it is rebuilt")
    return [publishing.name(c) for c in missing]


#: Every metadata column's default name: a table holding one its mode does not write was
#: published in another mode.
_EVERY_DEFAULT_NAME = frozenset(MetadataColumns().model_dump().values())


@dataclass(frozen=True)
class Changes:
    """What one sync does to a table, as Arrow tables (`plan`); empty tables where nothing.

    - `remove`, `close`: keyed: the key columns of the rows to delete, or whose live row to
      close; multiset: the view's columns and COUNT (occurrences), each content once.
    - `upsert`: keyed: whole rows (view and metadata columns) replacing their key's row.
    - `append`: whole rows to add (a multiset's already repeated as often as they occur).
    - `closing`: the values closed rows take (`Publishing.closing`).
    """

    remove: pa.Table
    close: pa.Table
    upsert: pa.Table
    append: pa.Table
    closing: dict[str, pa.Scalar]


def stamped(rows: pa.Table, publishing: Publishing, stamp: Stamp) -> pa.Table:
    """`rows` (the view's columns) with the metadata of rows the sync writes.

    >>> at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    >>> row = stamped(pa.table({"k": [1]}), Publishing(), Stamp("s1", at)).to_pylist()[0]
    >>> row["k"], row["_deltasieve_synced_at"].isoformat(), row["_deltasieve_sync_id"]
    (1, '2026-01-02T00:00:00+00:00', 's1')
    """
    for name, value in publishing.fresh(stamp).items():
        rows = rows.append_column(pa.field(name, value.type), pa.repeat(value, rows.num_rows))
    return rows


def plan(
    delta: pa.Table, view: pa.Schema, key: list[str], multiset: bool, publishing: Publishing, stamp: Stamp
) -> Changes:
    """The Changes one sync's `delta` (base.py: OP, the view's columns `view`, a multiset's
    COUNT) makes in `publishing`'s mode.

    >>> at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    >>> view = pa.schema([("k", pa.int64()), ("v", pa.string())])
    >>> delta = pa.table({OP: ["insert", "update", "delete"], "k": [1, 2, 3], "v": ["a", "b", None]})
    >>> c = plan(delta, view, ["k"], False, Publishing("history"), Stamp("s9", at))
    >>> c.close.to_pylist(), c.append.select(["k", "v", "_deltasieve_current"]).to_pylist(), c.upsert.num_rows
    ([{'k': 2}, {'k': 3}], [{'k': 1, 'v': 'a', '_deltasieve_current': True}, {'k': 2, 'v': 'b', '_deltasieve_current': True}], 0)
    >>> c = plan(delta, view, ["k"], False, Publishing("merge"), Stamp("s9", at))
    >>> c.remove.to_pylist(), c.upsert.column("k").to_pylist(), c.close.num_rows
    ([{'k': 3}], [1, 2], 0)
    >>> bag = pa.table({OP: ["insert", "delete", "delete"], "k": [1, 2, 2], "v": ["a", None, None], COUNT: [2, 1, 3]})
    >>> c = plan(bag, view, [], True, Publishing("soft_delete"), Stamp("s9", at))
    >>> c.append.column("k").to_pylist(), c.close.to_pylist()
    ([1, 1], [{'k': 2, 'v': None, '__ds_count': 4}])
    """
    names = view.names
    schema = publishing.schema(view)
    ops = delta.column(OP)
    by_action: dict[str, list[pa.Table]] = {UPSERT: [], APPEND: [], REMOVE: [], CLOSE: []}
    for op in (INSERT, UPDATE, DELETE):
        acts = ACTIONS.get((publishing.mode, multiset, op))
        if acts is None:
            continue
        lines = delta.filter(pc.equal(ops, op))
        if not lines.num_rows:
            continue
        for action in acts:
            by_action[action].append(lines)
    fresh = publishing.fresh(stamp)

    def whole(tables: list[pa.Table], repeat: bool) -> pa.Table:
        rows = [_conformed(t.select(names), view) for t in tables]
        if repeat:
            rows = [repeated(r, t.column(COUNT)) for r, t in zip(rows, tables, strict=True)]
        out = pa.concat_tables(rows) if rows else view.empty_table()
        for name, value in fresh.items():
            out = out.append_column(pa.field(name, value.type), pa.repeat(value, out.num_rows))
        return out.cast(schema)

    def which(tables: list[pa.Table]) -> pa.Table:
        if not multiset:
            shape = pa.schema([view.field(k) for k in key])
            return (
                pa.concat_tables([_conformed(t.select(key), shape) for t in tables]) if tables else shape.empty_table()
            )
        counted = pa.schema([*view, pa.field(COUNT, pa.int64())])
        rows = [_conformed(t.select([*names, COUNT]), counted) for t in tables]
        return _summed(pa.concat_tables(rows), names) if rows else counted.empty_table()

    return Changes(
        remove=which(by_action[REMOVE]),
        close=which(by_action[CLOSE]),
        upsert=whole(by_action[UPSERT], False),
        append=whole(by_action[APPEND], multiset),
        closing=publishing.closing(stamp),
    )


def apply_to(rows: pa.Table, changes: Changes, key: list[str], multiset: bool, publishing: Publishing) -> pa.Table:
    """`rows` (a whole table, or every row of the keys or contents `changes` touch) with
    `changes` applied, in Arrow; CannotFollow when a REMOVE or CLOSE finds fewer rows than
    it takes (the rows are not the view the delta was computed from).

    >>> at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    >>> view = pa.schema([("k", pa.int64()), ("v", pa.string())])
    >>> p = Publishing("history")
    >>> rows = stamped(pa.table({"k": [1, 2], "v": ["a", "b"]}), p, Stamp("s1", at))
    >>> later = Stamp("s2", at + dt.timedelta(hours=1))
    >>> delta = pa.table({OP: ["update", "delete"], "k": [1, 2], "v": ["A", None]})
    >>> out = apply_to(rows, plan(delta, view, ["k"], False, p, later), ["k"], False, p)
    >>> out.select(["k", "v", "_deltasieve_current", "_deltasieve_sync_id"]).to_pylist()
    ... # doctest: +NORMALIZE_WHITESPACE
    [{'k': 1, 'v': 'a', '_deltasieve_current': False, '_deltasieve_sync_id': 's2'},
     {'k': 2, 'v': 'b', '_deltasieve_current': False, '_deltasieve_sync_id': 's2'},
     {'k': 1, 'v': 'A', '_deltasieve_current': True, '_deltasieve_sync_id': 's2'}]
    """
    schema = rows.schema
    names = [f.name for f in schema if f.name not in {m.name for m in publishing.fields()}]
    live = _live_mask(rows, publishing)
    if multiset:
        gone = _occurrences(rows, live, changes.remove, names)
        closed = _occurrences(rows, live & ~gone, changes.close, names)
    else:
        gone = matches(rows, changes.remove, key)
        closed = matches(rows, changes.close, key) & live
        if int(gone.sum()) != changes.remove.num_rows or int(closed.sum()) != changes.close.num_rows:
            raise CannotFollow("the table is not the view the delta was computed from: a delete or update found no row")
        replaced = matches(rows, changes.upsert.select(key), key) if changes.upsert.num_rows else gone & False
        gone = gone | replaced
    if closed.any():
        arrays = []
        for field in schema:
            column = rows.column(field.name)
            if field.name in changes.closing:
                value = changes.closing[field.name].cast(field.type)
                column = pc.if_else(pa.array(closed), pa.repeat(value, rows.num_rows), column)
            arrays.append(column)
        rows = pa.Table.from_arrays(arrays, schema=schema)
    kept = rows.filter(pa.array(~gone))
    return pa.concat_tables([kept, changes.upsert.cast(schema), changes.append.cast(schema)])


def replay(
    deltas: Iterable[tuple[Stamp, pa.Table]], view: pa.Schema, key: list[str], multiset: bool, publishing: Publishing
) -> pa.Table:
    """The table a destination in `publishing`'s mode holds after `deltas` (each sync's stamp
    and delta, oldest first, the first the view's load), built in memory: how a history
    table is rebuilt from the deltas the service keeps.

    >>> view = pa.schema([("k", pa.int64()), ("v", pa.string())])
    >>> at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    >>> load = pa.table({OP: ["insert"], "k": [1], "v": ["a"]})
    >>> update = pa.table({OP: ["update"], "k": [1], "v": ["b"]})
    >>> deltas = [(Stamp("s1", at), load), (Stamp("s2", at + dt.timedelta(days=1)), update)]
    >>> replay(deltas, view, ["k"], False, Publishing("history")).select(["v", "_deltasieve_sync_id"]).to_pylist()
    [{'v': 'a', '_deltasieve_sync_id': 's2'}, {'v': 'b', '_deltasieve_sync_id': 's2'}]
    """
    rows = publishing.schema(view).empty_table()
    for stamp, delta in deltas:
        rows = apply_to(rows, plan(delta, view, key, multiset, publishing, stamp), key, multiset, publishing)
    return rows


def _live_mask(rows: pa.Table, publishing: Publishing) -> np.ndarray:
    """Which rows are live (all of them in merge mode; NULL counts as live: a row written
    before the mode's columns)."""
    live = publishing.live
    if live is None or live[0] not in rows.column_names:
        return np.ones(rows.num_rows, bool)
    flag = rows.column(live[0]).fill_null(live[1])
    return np.asarray(pc.equal(flag, live[1]).to_numpy(zero_copy_only=False), bool)


def _comparable(left: pa.ChunkedArray | pa.Array, right: pa.ChunkedArray | pa.Array) -> list[tuple[pa.Array, pa.Array]]:
    """Two columns as pairs of (is NULL, value with NULL filled) columns, so that a hash join
    on them matches NULL with NULL and nothing else."""
    left, right = pa.chunked_array([left]) if isinstance(left, pa.Array) else left, right
    right = pa.chunked_array([right]) if isinstance(right, pa.Array) else right
    right = right.cast(left.type)
    both = pa.chunked_array(left.chunks + right.chunks, left.type)
    valued = both.drop_null()
    if len(valued):
        filler = valued[0]
        fill = lambda a: a.fill_null(filler)  # noqa: E731
    else:  # every value NULL: the flags alone compare
        fill = lambda a: pa.chunked_array([pa.array(np.zeros(len(a), np.int8))])  # noqa: E731
    return [(left.is_null(), fill(left)), (right.is_null(), fill(right))]


def _matched(rows: pa.Table, wanted: pa.Table, columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (row index in `rows`, row index in `wanted`) equal on `columns`, NULL equal to NULL."""
    if not rows.num_rows or not wanted.num_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    left: dict[str, pa.ChunkedArray | pa.Array] = {"__l": pa.array(np.arange(rows.num_rows))}
    right: dict[str, pa.ChunkedArray | pa.Array] = {"__r": pa.array(np.arange(wanted.num_rows))}
    on = []
    for i, c in enumerate(columns):
        (ln, lv), (rn, rv) = _comparable(rows.column(c), wanted.column(c))
        left[f"n{i}"], left[f"v{i}"], right[f"n{i}"], right[f"v{i}"] = ln, lv, rn, rv
        on += [f"n{i}", f"v{i}"]
    joined = pa.table(left).join(pa.table(right), on, join_type="inner", use_threads=False)
    return joined.column("__l").to_numpy(), joined.column("__r").to_numpy()


def matches(rows: pa.Table, keys: pa.Table, key: list[str]) -> np.ndarray:
    """Which rows equal one row of `keys` on the columns `key`, NULL equal to NULL.

    >>> matches(pa.table({"k": [1, None, 2], "v": [1, 2, 3]}), pa.table({"k": [None, 2]}), ["k"]).tolist()
    [False, True, True]
    """
    mask = np.zeros(rows.num_rows, bool)
    at, _ = _matched(rows, keys, key)
    mask[at] = True
    return mask


def _occurrences(rows: pa.Table, live: np.ndarray, contents: pa.Table, names: list[str]) -> np.ndarray:
    """Which rows a multiset's REMOVE or CLOSE of `contents` (view columns and COUNT) takes:
    of each content, its first COUNT live rows; CannotFollow when there are fewer."""
    mask = np.zeros(rows.num_rows, bool)
    if not contents.num_rows:
        return mask
    at, which = _matched(rows, contents, names)
    keep = live[at]
    at, which = at[keep], which[keep]
    order = np.lexsort((at, which))
    at, which = at[order], which[order]
    starts = np.searchsorted(which, np.arange(contents.num_rows))
    rank = np.arange(len(at)) - starts[which]
    wanted = contents.column(COUNT).to_numpy()
    taken = rank < wanted[which]
    if np.bincount(which[taken], minlength=contents.num_rows).tolist() != wanted.tolist():
        raise CannotFollow("the table holds fewer occurrences of a row than the sync deletes: it is rebuilt")
    mask[at[taken]] = True
    return mask


def _summed(lines: pa.Table, names: list[str]) -> pa.Table:
    """A multiset's lines (view columns and COUNT) with each content once, its counts summed
    (grouping matches NULL with NULL).

    >>> _summed(pa.table({"a": [1, None, 1, None], COUNT: [1, 2, 3, 4]}), ["a"]).to_pylist()
    [{'a': 1, '__ds_count': 4}, {'a': None, '__ds_count': 6}]
    """
    summed = lines.group_by(names, use_threads=False).aggregate([(COUNT, "sum")])
    return summed.rename_columns([*names, COUNT]).select([*names, COUNT]).cast(lines.schema)


def _conformed(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` cast to `schema` (a delta's columns to the view's types)."""
    return pa.Table.from_arrays([rows.column(f.name).cast(f.type) for f in schema], schema=schema)


def repeated(rows: pa.Table, counts: pa.ChunkedArray) -> pa.Table:
    """Each row of `rows` as often as its count says.

    >>> repeated(pa.table({"a": [1, 2]}), pa.chunked_array([[2, 0]])).column("a").to_pylist()
    [1, 1]
    """
    repeat = np.asarray(counts.to_numpy(), dtype=np.int64) if len(counts) else np.zeros(0, np.int64)
    return rows.take(pa.array(np.repeat(np.arange(rows.num_rows), repeat), pa.int64()))


def _listed(names: Iterable[str]) -> str:
    """`names` as a sentence lists them.

    >>> _listed(["a", "b", "c"])
    'a, b and c'
    """
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
