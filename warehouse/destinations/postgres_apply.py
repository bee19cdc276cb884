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
from warehouse.destinations.postgres_copy import copy_into, multiset_lines, pg_type
from warehouse.multisets.multiset import COUNT
from warehouse.names import DELETE, INSERT, OP

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
    conn: psycopg.Connection, table: sql.Identifier, own_index: tuple[str, str], columns: list[Column], key: list[str]
) -> None:
    """Give a loaded table its key, built at once after the load (quicker than row by row
    during the COPY): a primary key; where the rows hold NULL in the key (a LEFT JOIN's
    table's key), the unique index `own_index` (schema, name) NULLS NOT DISTINCT (PostgreSQL
    15 on), since a primary key cannot hold NULL. Without a key (a multiset), `own_index`
    over its first bounded-width columns, if it has any, for a delete's lookups."""
    if key:
        any_null = sql.SQL(" OR ").join(sql.SQL("{} IS NULL").format(sql.Identifier(k)) for k in key)
        if value(conn, sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {})").format(table, any_null)):
            conn.execute(
                sql.SQL("CREATE UNIQUE INDEX {} ON {} ({}) NULLS NOT DISTINCT").format(
                    sql.Identifier(own_index[1]), table, _names(key)
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
) -> None:
    """Copy the delta into a temporary table (dropped at commit) and apply it to `table`
    (`nullable_key`: its key is a unique index that lets NULL match NULL, `index`)."""
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
    if multiset:
        _apply_multiset(conn, table, columns)
        return
    any_null = sql.SQL(" OR ").join(sql.SQL("{} IS NULL").format(sql.Identifier(k)) for k in key)
    if not nullable_key and value(conn, sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {})").format(_TEMP, any_null)):
        raise CannotFollow("the view's key holds NULL now, which the table's primary key cannot")
    _apply_keyed(conn, table, columns, key, nullable_key)


def _counted(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    """A keyed view's delta lines with a count of one each (the temporary table's shape)."""
    for batch in batches:
        yield batch.append_column(COUNT, pa.array([1] * batch.num_rows, pa.int64()))


def _apply_keyed(
    conn: psycopg.Connection, table: sql.Identifier, columns: list[Column], key: list[str], nullable_key: bool
) -> None:
    op, names = sql.Identifier(_OP), _names([c.name for c in columns])
    # NULL matching NULL where the key may hold it; such a join cannot use the index, and
    # costs a scan of the table (docs/views/destination-postgres.md)
    same = sql.SQL("t.{0} IS NOT DISTINCT FROM d.{0}" if nullable_key else "t.{0} = d.{0}")
    on = sql.SQL(" AND ").join(same.format(sql.Identifier(k)) for k in key)
    values = [c.name for c in columns if c.name not in key] or key[:1]  # a view of key columns only sets one to itself
    sets = sql.SQL(", ").join(sql.SQL("{0} = excluded.{0}").format(sql.Identifier(n)) for n in values)
    # xmax = 0 on a returned row: the INSERT made it, no conflict updated it; an update line
    # that inserts, or an insert line that updates, is a row the table should not have had
    wrong = value(
        conn,
        sql.SQL(
            "WITH done AS (INSERT INTO {table} AS t ({names}) SELECT {names} FROM {temp} WHERE {op} <> %s "
            "ON CONFLICT ({key}) DO UPDATE SET {sets} RETURNING {returned}, xmax = 0 AS fresh) "
            "SELECT count(*) FROM done t JOIN {temp} d ON {on} WHERE t.fresh <> (d.{op} = %s)"
        ).format(
            table=table,
            names=names,
            temp=_TEMP,
            op=op,
            key=_names(key),
            sets=sets,
            returned=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(k)) for k in key),
            on=on,
        ),
        [DELETE, INSERT],
    )
    deleted = conn.execute(
        sql.SQL("DELETE FROM {} t USING {} d WHERE {} AND d.{} = %s").format(table, _TEMP, on, op), [DELETE]
    ).rowcount
    expected = value(conn, sql.SQL("SELECT count(*) FROM {} WHERE {} = %s").format(_TEMP, op), [DELETE])
    if wrong or deleted != expected:
        raise CannotFollow(
            f"the table is not the view the delta was computed from: {wrong} inserts or updates found their row "
            f"where it should not be, {expected - deleted} deletes found none"
        )


def _apply_multiset(conn: psycopg.Connection, table: sql.Identifier, columns: list[Column]) -> None:
    op, n = sql.Identifier(_OP), sql.Identifier(_N)
    nulls = sql.SQL(", ").join(sql.SQL("{} IS NULL").format(sql.Identifier(c.name)) for c in columns)
    patterns = conn.execute(
        sql.SQL("SELECT DISTINCT {} FROM {} WHERE {} = %s").format(nulls, _TEMP, op), [DELETE]
    ).fetchall()
    deleted = sum(_delete_copies(conn, table, columns, pattern) for pattern in patterns)
    expected = value(conn, sql.SQL("SELECT coalesce(sum({}), 0) FROM {} WHERE {} = %s").format(n, _TEMP, op), [DELETE])
    if deleted != expected:
        raise CannotFollow(f"the table lacks {expected - deleted} of the rows the delta deletes")
    names = _names([c.name for c in columns])
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}, generate_series(1, {}) WHERE {} = %s").format(
            table, names, names, _TEMP, n, op
        ),
        [INSERT],
    )


def _delete_copies(conn: psycopg.Connection, table: sql.Identifier, columns: list[Column], pattern: tuple) -> int:
    """Delete the copies the delta's deletes whose NULL columns are `pattern`'s (a flag a
    column) ask for; the number deleted."""
    null = [sql.Identifier(c.name) for c, is_null in zip(columns, pattern) if is_null]
    valued = [sql.Identifier(c.name) for c, is_null in zip(columns, pattern) if not is_null]
    which = [sql.SQL("{} = %s").format(sql.Identifier(_OP))]
    which += [sql.SQL("{} IS NULL").format(c) for c in null] + [sql.SQL("{} IS NOT NULL").format(c) for c in valued]
    on = [sql.SQL("t.{0} = d.{0}").format(c) for c in valued] + [sql.SQL("t.{} IS NULL").format(c) for c in null]
    grouped = sql.SQL(", ").join(valued) if valued else sql.SQL("()")
    statement = sql.SQL(
        "WITH d AS (SELECT row_number() OVER () AS line, {cols}sum({n}) AS n FROM {temp} WHERE {which} GROUP BY {grouped}), "
        "victims AS (SELECT t.ctid AS tid, row_number() OVER (PARTITION BY d.line) AS k, d.n FROM {table} t JOIN d ON {on}) "
        "DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT tid FROM victims WHERE k <= n))"
    ).format(
        cols=sql.SQL("").join(sql.SQL("{}, ").format(c) for c in valued),
        n=sql.Identifier(_N),
        temp=_TEMP,
        which=sql.SQL(" AND ").join(which),
        grouped=grouped,
        table=table,
        on=sql.SQL(" AND ").join(on) if on else sql.SQL("true"),
    )
    return conn.execute(statement, [DELETE]).rowcount


def value(conn: psycopg.Connection, query, params: list | None = None):
    """The one value a query answers."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, "an aggregate or a function call answers one row"
    return row[0]


def _names(names: list[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)
