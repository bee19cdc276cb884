"""One sync's delta applied to a PostgreSQL destination's table, from a temporary table
the delta was copied into, in the caller's transaction.

A keyed view: INSERT ... ON CONFLICT (key) DO UPDATE takes inserts and updates, a DELETE
joined on the key deletes; each line is an index lookup on the primary key, so the apply
costs in proportion to the delta. Measured against a DELETE of updated and deleted keys
followed by an INSERT (scripts/pg_destination_load.py, 1M rows): as fast at 1,000 lines,
a little faster at 10,000 and 100,000 (0.54 s against 0.61, 2.2 against 2.6): one index
probe a line rather than two, and an update in place of a deleted and an inserted row.

A multiset view: n copies of a deleted row are removed by their ctid, n copies of an
inserted one added with generate_series. A row is matched by all its columns, NULL matching
NULL; an equality joined with IS NOT DISTINCT FROM can be neither hashed nor looked up in an
index, so the deleted rows are taken in groups of the same NULL columns, each joined with
`=` on its other columns and IS NULL on those: a hash join, or index lookups on the table's
index over its first bounded-width columns (`index`) where the planner prefers them.

Either way, a delete (or update) of a row the table lacks means the table is not the view
the delta was computed from: CannotFollow, and the caller rebuilds it.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg
import pyarrow as pa
from psycopg import sql

from deltasieve_protocol.types import Column
from warehouse.destinations.base import CannotFollow
from warehouse.destinations.modes import APPEND, CLOSE, MERGE, REMOVE, UPSERT, Publishing, Stamp
from warehouse.destinations.postgres_copy import copy_into, multiset_lines, pg_type
from warehouse.multisets.multiset import COUNT
from warehouse.names import INSERT, OP

#: The temporary table's columns beside the view's (no view column is named __ds_*).
_OP, _N = "__ds_op", "__ds_n"
_TEMP = sql.Identifier("__ds_delta")
#: Column kinds of bounded width, which a multiset table's index may hold (a long text would
#: pass btree's limit of about 2.7 kB an entry and fail the insert).
_BOUNDED = ("int", "float", "decimal", "bool", "date", "timestamp", "timestamptz")
#: Columns in that index: enough to narrow a lookup to few rows, few enough to stay small.
INDEX_COLUMNS = 4


def create(conn: psycopg.Connection, table: sql.Identifier, columns: list[Column]) -> None:
    """Create the table of a view with its columns (its indexes come after its load: `index`)."""
    parts = [sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(pg_type(c.type))) for c in columns]
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(table, sql.SQL(", ").join(parts)))


def index(
    conn: psycopg.Connection,
    table: sql.Identifier,
    own_index: tuple[str, str],
    columns: list[Column],
    key: list[str],
    current: str | None = None,
) -> None:
    """Give a loaded table its key, built at once after the load (quicker than row by row
    during the COPY): a primary key; where the rows hold NULL in the key (a LEFT JOIN's
    table's key), the unique index `own_index` (schema, name) NULLS NOT DISTINCT (PostgreSQL
    15 on), since a primary key cannot hold NULL. A history table (`current`: the column
    that marks a key's current version) holds many rows a key: `own_index` is unique over
    its current rows only. Without a key (a multiset), `own_index` over its first
    bounded-width columns (of `columns`, the view's), if it has any, for a delete's lookups."""
    if key:
        any_null = sql.SQL(" OR ").join(sql.SQL("{} IS NULL").format(sql.Identifier(k)) for k in key)
        nullable = value(conn, sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {})").format(table, any_null))
        if nullable or current is not None:
            conn.execute(
                sql.SQL("CREATE UNIQUE INDEX {} ON {} ({}){}{}").format(
                    sql.Identifier(own_index[1]),
                    table,
                    _names(key),
                    sql.SQL(" NULLS NOT DISTINCT" if nullable else ""),
                    sql.SQL(" WHERE {}").format(sql.Identifier(current)) if current is not None else sql.SQL(""),
                )
            )
        else:
            conn.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(table, _names(key)))
        return
    indexed = [c.name for c in columns if c.type.kind in _BOUNDED][:INDEX_COLUMNS]
    if indexed:
        conn.execute(sql.SQL("CREATE INDEX {} ON {} ({})").format(sql.Identifier(own_index[1]), table, _names(indexed)))


def drop_indexes(conn: psycopg.Connection, table: sql.Identifier, own_index: tuple[str, str]) -> None:
    """Drop what `index` made (a user's own indexes stay), before the table is loaded again:
    the primary key and the NOT NULL it put on its columns (the rows to come may hold NULL
    there), or `own_index`."""
    oid = value(conn, "SELECT to_regclass(%s)::oid", [table.as_string(conn)])
    for (name,) in conn.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s AND contype = 'p'", [oid]):
        conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(table, sql.Identifier(name)))
    not_null = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND attnotnull AND NOT attisdropped", [oid]
    ).fetchall()
    for (name,) in not_null:
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP NOT NULL").format(table, sql.Identifier(name)))
    conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(*own_index)))


def apply_delta(
    conn: psycopg.Connection,
    table: sql.Identifier,
    columns: list[Column],
    key: list[str],
    delta: Iterable[pa.RecordBatch],
    multiset: bool,
    nullable_key: bool,
    publishing: Publishing = MERGE,
    stamp: Stamp | None = None,
) -> None:
    """Copy the delta into a temporary table (dropped at commit) and apply it to `table` in
    `publishing`'s mode (modes.py; `columns`: the view's, `stamp`: the sync's metadata;
    `nullable_key`: its key is a unique index that lets NULL match NULL, `index`)."""
    names = _names([c.name for c in columns])
    conn.execute(
        sql.SQL(
            "CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {}, ''::text AS {}, 0::bigint AS {} FROM {} WITH NO DATA"
        ).format(_TEMP, names, sql.Identifier(_OP), sql.Identifier(_N), table)
    )
    lines = multiset_lines(delta, [c.name for c in columns]) if multiset else _counted(delta)
    targets = [sql.Identifier(c.name) for c in columns] + [sql.Identifier(_OP), sql.Identifier(_N)]
    copy_into(conn, _TEMP, targets, lines, columns, [OP, COUNT])
    conn.execute(sql.SQL("ANALYZE {}").format(_TEMP))  # the planner then sizes the delta right
    mode = _Mode(publishing, stamp or Stamp.of("", None), multiset)
    if multiset:
        _apply_multiset(conn, table, columns, mode)
        return
    any_null = sql.SQL(" OR ").join(sql.SQL("{} IS NULL").format(sql.Identifier(k)) for k in key)
    if not nullable_key and value(conn, sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {})").format(_TEMP, any_null)):
        raise CannotFollow("the view's key holds NULL now, which the table's primary key cannot")
    _apply_keyed(conn, table, columns, key, nullable_key, mode)


class _Mode:
    """A destination's mode as SQL: which delta lines take each primitive, and the metadata
    values the sync writes (constants: SQL literals cast to their types)."""

    def __init__(self, publishing: Publishing, stamp: Stamp, multiset: bool):
        self.publishing, self.multiset = publishing, multiset
        self.fresh = {c.name: _literal(publishing.fresh(stamp)[c.name], c) for c in publishing.columns()}
        closing = publishing.closing(stamp)
        self.closing = {c.name: _literal(closing[c.name], c) for c in publishing.columns() if c.name in closing}

    def ops(self, action: str) -> list[str]:
        return self.publishing.lines_taking(action, self.multiset)

    def live(self, alias: str) -> sql.Composable:
        """A condition on a table row (as `alias`) that it is live (true in merge mode)."""
        live = self.publishing.live
        if live is None:
            return sql.SQL("true")
        # written as the history index's predicate (`index`), so that the planner may use it
        flag = sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(live[0]))
        return flag if live[1] else sql.SQL("NOT ") + flag

    def sets(self) -> sql.Composable:
        return sql.SQL(", ").join(sql.SQL("{} = {}").format(sql.Identifier(n), v) for n, v in self.closing.items())


def _literal(value: pa.Scalar, column: Column) -> sql.Composable:
    """A metadata value as a typed SQL literal."""
    return sql.SQL("CAST({} AS {})").format(sql.Literal(value.as_py()), sql.SQL(pg_type(column.type)))


def _counted(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    """A keyed view's delta lines with a count of one each (the temporary table's shape)."""
    for batch in batches:
        yield batch.append_column(COUNT, pa.array([1] * batch.num_rows, pa.int64()))


def _apply_keyed(
    conn: psycopg.Connection,
    table: sql.Identifier,
    columns: list[Column],
    key: list[str],
    nullable_key: bool,
    mode: _Mode,
) -> None:
    """REMOVE and CLOSE joined on the key, then UPSERT (INSERT ... ON CONFLICT) and APPEND (modes.py)."""
    op = sql.Identifier(_OP)
    # NULL matching NULL where the key may hold it; such a join cannot use the index, and
    # costs a scan of the table (docs/views/destination-postgres.md)
    same = sql.SQL("t.{0} IS NOT DISTINCT FROM d.{0}" if nullable_key else "t.{0} = d.{0}")
    on = sql.SQL(" AND ").join(same.format(sql.Identifier(k)) for k in key)
    missing = 0
    for action in (REMOVE, CLOSE):
        ops = mode.ops(action)
        if not ops:
            continue
        if action == REMOVE:
            statement = sql.SQL("DELETE FROM {} t USING {} d WHERE {} AND d.{} = ANY(%s)").format(table, _TEMP, on, op)
        else:
            statement = sql.SQL("UPDATE {} t SET {} FROM {} d WHERE {} AND d.{} = ANY(%s) AND {}").format(
                table, mode.sets(), _TEMP, on, op, mode.live("t")
            )
        done = conn.execute(statement, [ops]).rowcount
        missing += value(conn, sql.SQL("SELECT count(*) FROM {} WHERE {} = ANY(%s)").format(_TEMP, op), [ops]) - done
    wrong = _upsert(conn, table, columns, key, on, mode) if mode.ops(UPSERT) else 0
    if mode.ops(APPEND):
        try:
            with conn.transaction():  # a second current version of a key: the unique index refuses it
                _append(conn, table, columns, mode, counted=False)
        except psycopg.errors.UniqueViolation:
            raise CannotFollow(
                "the table is not the view the delta was computed from: an insert found its key"
            ) from None
    if wrong or missing:
        raise CannotFollow(
            f"the table is not the view the delta was computed from: {wrong} inserts or updates found their row "
            f"where it should not be, {missing} deletes or updates found none"
        )


def _upsert(
    conn: psycopg.Connection,
    table: sql.Identifier,
    columns: list[Column],
    key: list[str],
    on: sql.Composable,
    mode: _Mode,
) -> int:
    """INSERT ... ON CONFLICT (key) DO UPDATE of the lines that UPSERT; how many found the
    table other than the delta says (merge: an update that inserted or an insert that
    updated; soft_delete: an update that inserted, an insert finding a deleted row being
    right)."""
    op = sql.Identifier(_OP)
    view = [c.name for c in columns]
    written = _names([*view, *mode.fresh])
    selected = sql.SQL(", ").join([*(sql.Identifier(n) for n in view), *mode.fresh.values()])
    values = [n for n in view if n not in key] + list(mode.fresh)
    sets = sql.SQL(", ").join(sql.SQL("{0} = excluded.{0}").format(sql.Identifier(n)) for n in values)
    # xmax = 0 on a returned row: the INSERT made it, no conflict updated it
    wrong = (
        sql.SQL("t.fresh <> (d.{} = %s)") if mode.publishing.mode == "merge" else sql.SQL("t.fresh AND d.{} <> %s")
    ).format(op)
    return value(
        conn,
        sql.SQL(
            "WITH done AS (INSERT INTO {table} AS t ({written}) SELECT {selected} FROM {temp} WHERE {op} = ANY(%s) "
            "ON CONFLICT ({key}) DO UPDATE SET {sets} RETURNING {returned}, xmax = 0 AS fresh) "
            "SELECT count(*) FROM done t JOIN {temp} d ON {on} WHERE {wrong}"
        ).format(
            table=table,
            written=written,
            selected=selected,
            temp=_TEMP,
            op=op,
            key=_names(key),
            sets=sets,
            returned=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(k)) for k in key),
            on=on,
            wrong=wrong,
        ),
        [mode.ops(UPSERT), INSERT],
    )


def _append(conn: psycopg.Connection, table: sql.Identifier, columns: list[Column], mode: _Mode, counted: bool) -> None:
    """INSERT the lines that APPEND, with the sync's metadata (a multiset's each COUNT times)."""
    view = [c.name for c in columns]
    selected = sql.SQL(", ").join([*(sql.Identifier(n) for n in view), *mode.fresh.values()])
    series = sql.SQL(", generate_series(1, {})").format(sql.Identifier(_N)) if counted else sql.SQL("")
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}{} WHERE {} = ANY(%s)").format(
            table, _names([*view, *mode.fresh]), selected, _TEMP, series, sql.Identifier(_OP)
        ),
        [mode.ops(APPEND)],
    )


def _apply_multiset(conn: psycopg.Connection, table: sql.Identifier, columns: list[Column], mode: _Mode) -> None:
    """REMOVE or CLOSE n live copies of each deleted row, then APPEND the inserted ones n times each."""
    op, n = sql.Identifier(_OP), sql.Identifier(_N)
    for action in (REMOVE, CLOSE):
        ops = mode.ops(action)
        if not ops:
            continue
        nulls = sql.SQL(", ").join(sql.SQL("{} IS NULL").format(sql.Identifier(c.name)) for c in columns)
        patterns = conn.execute(
            sql.SQL("SELECT DISTINCT {} FROM {} WHERE {} = ANY(%s)").format(nulls, _TEMP, op), [ops]
        ).fetchall()
        done = sum(_take_copies(conn, table, columns, pattern, ops, action, mode) for pattern in patterns)
        expected = value(
            conn, sql.SQL("SELECT coalesce(sum({}), 0) FROM {} WHERE {} = ANY(%s)").format(n, _TEMP, op), [ops]
        )
        if done != expected:
            raise CannotFollow(f"the table lacks {expected - done} of the rows the delta deletes")
    _append(conn, table, columns, mode, counted=True)


def _take_copies(
    conn: psycopg.Connection,
    table: sql.Identifier,
    columns: list[Column],
    pattern: tuple,
    ops: list[str],
    action: str,
    mode: _Mode,
) -> int:
    """Delete (REMOVE) or close (CLOSE) the live copies the delta's lines of `ops` whose NULL
    columns are `pattern`'s (a flag a column) ask for; the number taken."""
    null = [sql.Identifier(c.name) for c, is_null in zip(columns, pattern) if is_null]
    valued = [sql.Identifier(c.name) for c, is_null in zip(columns, pattern) if not is_null]
    which = [sql.SQL("{} = ANY(%s)").format(sql.Identifier(_OP))]
    which += [sql.SQL("{} IS NULL").format(c) for c in null] + [sql.SQL("{} IS NOT NULL").format(c) for c in valued]
    on: list[sql.Composable] = [sql.SQL("t.{0} = d.{0}").format(c) for c in valued]
    on += [sql.SQL("t.{} IS NULL").format(c) for c in null] + [mode.live("t")]
    grouped = sql.SQL(", ").join(valued) if valued else sql.SQL("()")
    taking = (sql.SQL("DELETE FROM {table}") if action == REMOVE else sql.SQL("UPDATE {table} SET {sets}")).format(
        table=table, sets=mode.sets()
    )
    statement = sql.SQL(
        "WITH d AS (SELECT row_number() OVER () AS line, {cols}sum({n}) AS n FROM {temp} WHERE {which} GROUP BY {grouped}), "
        "victims AS (SELECT t.ctid AS tid, row_number() OVER (PARTITION BY d.line) AS k, d.n FROM {table} t JOIN d ON {on}) "
        "{taking} WHERE ctid = ANY(ARRAY(SELECT tid FROM victims WHERE k <= n))"
    ).format(
        cols=sql.SQL("").join(sql.SQL("{}, ").format(c) for c in valued),
        n=sql.Identifier(_N),
        temp=_TEMP,
        which=sql.SQL(" AND ").join(which),
        grouped=grouped,
        table=table,
        on=sql.SQL(" AND ").join(on),
        taking=taking,
    )
    return conn.execute(statement, [ops]).rowcount


def value(conn: psycopg.Connection, query, params: list | None = None):
    """The one value a query answers."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, "an aggregate or a function call answers one row"
    return row[0]


def _names(names: list[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)
