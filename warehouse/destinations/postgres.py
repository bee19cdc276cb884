"""A view published to a table of a PostgreSQL warehouse: loaded with COPY, each sync's delta
applied in one transaction that also records the sync (#37).

The table has the view's columns in the exactly matching PostgreSQL types (`pg_type`), the
view's key as its primary key; a multiset view's table has no key and holds each row as
often as the view does. Beside it, in the same schema, `deltasieve_applied` lists the syncs
whose changes each view's table holds: a rebuild or an apply writes its row in the
transaction that changes the data, so the warehouse database itself says where the table
stands (`applied`), and a crash anywhere leaves either both or neither.

Rows travel as CSV written by Arrow's C writer into `COPY ... FROM STDIN (FORMAT csv)`: every
logical type has an exact text form (floats in their shortest round-trip digits, decimals
and timestamps as digits, bytea in hex), and no value passes through Python but bytes'.
A delta is copied into a temporary table first, then applied by key: a DELETE joined on the
key for deletes and updates and an INSERT of inserts and updates, each an index lookup per
line, so an apply costs in proportion to the delta, not to the table. A multiset view's
delta deletes n copies of a row by their ctid and inserts n copies with generate_series.

Columns the view gained are added and widened types (viewdef/widening.py) altered in the
same transaction; any other difference (a column gone, a narrowed or changed type, another
key) raises CannotFollow, and the caller rebuilds the table.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from psycopg import sql

from protocol.types import Column, LogicalType
from warehouse.destinations.base import CannotFollow
from warehouse.errors import DestinationError
from warehouse.multisets.multiset import COUNT, OLD_PREFIX
from warehouse.names import DELETE, INSERT, OP, UPDATE
from warehouse.viewdef.widening import widens

KIND = "postgres"
#: The table listing, per view, the syncs its table holds (the issue names its columns).
APPLIED = "deltasieve_applied"
#: The schema a table named without one goes to.
DEFAULT_SCHEMA = "public"
#: A name the table option accepts: PostgreSQL's unquoted identifier, at most 63 bytes. It is
#: quoted all the same, so its case is kept.
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
#: The temporary table's columns beside the view's (names no view column starts with "__ds_").
_OP, _N = "__ds_op", "__ds_n"
#: Rows per CSV chunk handed to COPY: enough to keep the writer's calls few, small in memory.
COPY_BATCH_ROWS = 65_536

_PG_TYPES = {
    "int": "bigint",
    "float": "double precision",
    "text": "text",
    "bytes": "bytea",
    "bool": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamptz": "timestamptz",
}
#: format_type()'s names of those types, back to the logical type.
_FROM_PG = {
    "bigint": "int",
    "double precision": "float",
    "text": "text",
    "bytea": "bytes",
    "boolean": "bool",
    "date": "date",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
}
_NUMERIC = re.compile(r"^numeric\((\d+),(\d+)\)$")


def pg_type(t: LogicalType) -> str:
    """The PostgreSQL type holding exactly the values of logical type `t`.

    >>> [pg_type(LogicalType.parse(s)) for s in ("int", "float", "decimal(14,2)", "timestamp", "timestamptz")]
    ['bigint', 'double precision', 'numeric(14,2)', 'timestamp', 'timestamptz']
    >>> [pg_type(LogicalType.parse(s)) for s in ("text", "bytes", "bool", "date")]
    ['text', 'bytea', 'boolean', 'date']
    """
    if t.kind == "decimal":
        return f"numeric({t.precision},{t.scale})"
    return _PG_TYPES[t.kind]


def logical_type(pg: str) -> LogicalType | None:
    """The logical type a column of PostgreSQL type `pg` (as format_type names it) holds,
    None for a type no view column maps to.

    >>> logical_type("numeric(16,4)"), logical_type("timestamp with time zone"), logical_type("integer")
    (LogicalType(kind='decimal', precision=16, scale=4), LogicalType(kind='timestamptz', precision=0, scale=0), None)
    """
    match = _NUMERIC.match(pg)
    if match:
        return LogicalType("decimal", int(match.group(1)), int(match.group(2)))
    kind = _FROM_PG.get(pg)
    return LogicalType(kind) if kind else None


def masked(url: str) -> str:
    """`url` with its password, if any, replaced by ***.

    >>> masked("postgresql://loader:s3cret@db.example:5432/wh?sslmode=require")
    'postgresql://loader:***@db.example:5432/wh?sslmode=require'
    >>> masked("postgresql://db.example/wh?user=loader&password=s3cret")
    'postgresql://db.example/wh?user=loader&password=***'
    >>> masked("postgresql:///wh")
    'postgresql:///wh'
    """
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}:***@{host}"
    query = re.sub(r"(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    if (netloc, query) == (parts.netloc, parts.query):
        return url  # nothing to hide (and urlunsplit would drop an empty host's //)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def split_table(table: str) -> tuple[str, str]:
    """(schema, table) of the `table` option: SCHEMA.TABLE, or TABLE in schema public.

    >>> split_table("erp.students"), split_table("Students")
    (('erp', 'students'), ('public', 'Students'))
    >>> split_table('x"; drop table y')
    Traceback (most recent call last):
    ...
    ValueError: table must be SCHEMA.TABLE or TABLE, each a letter or _ then letters, digits or _ (at most 63): got 'x"; drop table y'
    """
    parts = table.split(".") if isinstance(table, str) else []
    if not 1 <= len(parts) <= 2 or not all(_IDENTIFIER.match(p) for p in parts):
        raise ValueError(
            "table must be SCHEMA.TABLE or TABLE, each a letter or _ then letters, digits or _ "
            f"(at most 63): got {table!r}"
        )
    return (DEFAULT_SCHEMA, parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def check(spec: dict) -> None:
    """Check a `{"kind": "postgres", "url", "table"}` destination of the view option; ValueError says what is wrong.

    >>> check({"kind": "postgres", "url": "postgresql://u:pw@h/wh", "table": "erp.students"})
    >>> check({"kind": "postgres", "url": "mysql://u:pw@h/wh", "table": "t"})
    Traceback (most recent call last):
    ...
    ValueError: a postgres destination's url must start with postgresql:// (or postgres://): got 'mysql://u:***@h/wh'
    """
    unknown = set(spec) - {"kind", "url", "table"}
    if unknown:
        raise ValueError(f"a postgres destination takes kind, url and table; unknown: {', '.join(sorted(unknown))}")
    url = spec.get("url")
    if not isinstance(url, str) or urlsplit(url).scheme not in ("postgresql", "postgres"):
        shown = masked(url) if isinstance(url, str) else url
        raise ValueError(f"a postgres destination's url must start with postgresql:// (or postgres://): got {shown!r}")
    if "table" not in spec:
        raise ValueError("a postgres destination needs a table: SCHEMA.TABLE or TABLE")
    split_table(spec["table"])


def csv_chunks(batches: Iterable[pa.RecordBatch], columns: list[Column], extra: Sequence[str] = ()) -> Iterator[bytes]:
    """CSV for COPY of `batches`: the view's columns in their logical types (bytes as bytea's
    hex), then the `extra` columns as they are; NULL unquoted and empty, every value quoted.

    >>> cols = [Column("a", LogicalType("int")), Column("b", LogicalType("bytes")), Column("c", LogicalType("text"))]
    >>> b"".join(csv_chunks([pa.record_batch({"a": [1, None], "b": [b"\\x01", None], "c": ["", None]})], cols))
    b'"1","\\\\x01",""\\n,,\\n'
    """
    options = pacsv.WriteOptions(include_header=False, quoting_style="all_valid", batch_size=COPY_BATCH_ROWS)
    for batch in batches:
        if not batch.num_rows:
            continue
        arrays = []
        for c in columns:
            array = batch.column(c.name).cast(c.type.arrow())
            if c.type.kind == "bytes":  # bytea's hex input: \x then two digits a byte
                array = pa.array([None if v is None else "\\x" + v.hex() for v in array.to_pylist()], pa.string())
            arrays.append(array)
        arrays += [batch.column(name) for name in extra]
        sink = io.BytesIO()
        pacsv.write_csv(pa.table(arrays, names=[c.name for c in columns] + list(extra)), sink, options)
        yield sink.getvalue()


def repeated(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Rows carrying a COUNT column, each as often as it says (rows without one as they are).

    >>> [b.to_pylist() for b in repeated([pa.record_batch({"a": [7, 8], COUNT: [2, 1]})])]
    [[{'a': 7}, {'a': 7}, {'a': 8}]]
    """
    for batch in batches:
        if COUNT not in batch.schema.names:
            yield batch
            continue
        counts = batch.column(COUNT).to_numpy(zero_copy_only=False)
        rows = batch.drop_columns([COUNT])
        yield rows.take(pa.array(np.repeat(np.arange(batch.num_rows), counts)))


def multiset_lines(batches: Iterable[pa.RecordBatch], names: list[str]) -> Iterator[pa.RecordBatch]:
    """A multiset delta as inserts and deletes with counts: a matched update (its old row
    in OLD_PREFIX columns) becomes a delete of one old row and an insert of one new one.

    >>> b = pa.record_batch({OP: ["insert", "update"], "a": [1, 2], COUNT: [3, 1], OLD_PREFIX + "a": [None, 5]})
    >>> [(x.column(OP).to_pylist(), x.column("a").to_pylist()) for x in multiset_lines([b], ["a"])]
    [(['insert', 'insert'], [1, 2]), (['delete'], [5])]
    """
    for batch in batches:
        ops = batch.column(OP).cast(pa.string())
        updates = pc.equal(ops, UPDATE).fill_null(False)
        counts = batch.column(COUNT).cast(pa.int64()) if COUNT in batch.schema.names else pa.array([1] * len(batch))
        new_ops = pc.if_else(updates, pa.scalar(INSERT), ops)
        yield pa.record_batch([new_ops, *[batch.column(n) for n in names], counts], names=[OP, *names, COUNT])
        if pc.any(updates).as_py():
            olds = batch.filter(updates)
            n = olds.num_rows
            arrays = [
                pa.array([DELETE] * n),
                *[olds.column(OLD_PREFIX + c) for c in names],
                pa.array([1] * n, pa.int64()),
            ]
            yield pa.record_batch(arrays, names=[OP, *names, COUNT])


class PostgresDestination:
    """The table `table` (SCHEMA.TABLE or TABLE) of the PostgreSQL database at `url`, holding view `view`."""

    kind = KIND

    def __init__(self, url: str, table: str, view: str):
        check({"kind": KIND, "url": url, "table": table})
        self.url, self.view = url, view
        self.schema, self.name = split_table(table)
        self.table = sql.Identifier(self.schema, self.name)
        self.log = sql.Identifier(self.schema, APPLIED)

    def describe(self) -> dict:
        return {"kind": KIND, "url": masked(self.url), "table": f"{self.schema}.{self.name}"}

    def applied(self) -> str | None:
        """The last sync whose changes the table holds, as the warehouse database records it."""
        with self._connect() as conn:
            if _value(conn, "SELECT to_regclass(%s)", [self.log.as_string(conn)]) is None:
                return None
            row = conn.execute(
                sql.SQL("SELECT sync_id FROM {} WHERE view = %s ORDER BY seq DESC LIMIT 1").format(self.log),
                [self.view],
            ).fetchone()
            return row[0] if row else None

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
        """Replace the table's rows with `rows` (a multiset's repeated, or with their COUNT), in one transaction."""
        key = [] if multiset else key
        with self._connect() as conn, conn.transaction():
            self._begin(conn)
            if self._shape(conn) == ({c.name: c.type for c in columns}, key):
                conn.execute(sql.SQL("TRUNCATE {}").format(self.table))
            else:  # created anew with the view's columns (a table of other columns cannot take them)
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self.table))
                conn.execute(_create(self.table, columns, key))
            self._copy(conn, self.table, columns, repeated(rows))
            self._record(conn, sync_id, version, rebuild=reason)

    def apply(
        self,
        sync_id: str,
        version: int,
        columns: list[Column],
        key: list[str],
        delta: Iterable[pa.RecordBatch],
        multiset: bool,
    ) -> None:
        """Apply one sync's stored delta and record `sync_id`, in one transaction; nothing
        when the table holds that sync already (applied, then the caller crashed)."""
        key = [] if multiset else key
        with self._connect() as conn, conn.transaction():
            self._begin(conn)
            done = conn.execute(
                sql.SQL("SELECT 1 FROM {} WHERE view = %s AND sync_id = %s").format(self.log), [self.view, sync_id]
            ).fetchone()
            if done:
                return
            self._evolve(conn, columns, key)
            temp = sql.Identifier("__ds_delta")
            names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
            conn.execute(
                sql.SQL(
                    "CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {}, ''::text AS {}, 0::bigint AS {} FROM {} WITH NO DATA"
                ).format(temp, names, sql.Identifier(_OP), sql.Identifier(_N), self.table)
            )
            view_names = [c.name for c in columns]
            lines = multiset_lines(delta, view_names) if multiset else _keyed_lines(delta)
            self._copy(conn, temp, columns, lines, extra=[OP, COUNT])
            conn.execute(sql.SQL("ANALYZE {}").format(temp))  # the planner picks index lookups for a small delta
            if multiset:
                _apply_multiset(conn, self.table, temp, columns)
            else:
                _apply_keyed(conn, self.table, temp, columns, key)
            self._record(conn, sync_id, version, rebuild=None)

    @contextmanager
    def _connect(self) -> Iterator[psycopg.Connection]:
        """A connection, errors told without the url's password."""
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                yield conn
        except CannotFollow:
            raise
        except psycopg.Error as e:
            raise DestinationError(self._scrub(f"{self.describe()['table']}: {e}"), transient=_transient(e)) from None

    def _scrub(self, text: str) -> str:
        password = urlsplit(self.url).password
        return text.replace(password, "***") if password else text

    def _begin(self, conn: psycopg.Connection) -> None:
        """Take the table's lock (one writer at a time) and make the schema's bookkeeping table."""
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"deltasieve:{self.schema}.{self.name}"])
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
        try:
            with conn.transaction():  # a savepoint: another view's writer may create it at the same time
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} (view text NOT NULL, sync_id text NOT NULL, "
                        "applied_at timestamptz NOT NULL DEFAULT clock_timestamp(), version bigint, "
                        "rebuild text, seq bigserial NOT NULL, PRIMARY KEY (view, sync_id))"
                    ).format(self.log)
                )
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
            pass

    def _record(self, conn: psycopg.Connection, sync_id: str, version: int, rebuild: str | None) -> None:
        """Record `sync_id` as the table's latest (a rebuild says why in `rebuild`)."""
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (view, sync_id, version, rebuild) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (view, sync_id) DO UPDATE SET applied_at = clock_timestamp(), "
                "version = excluded.version, rebuild = excluded.rebuild, seq = nextval(pg_get_serial_sequence(%s, 'seq'))"
            ).format(self.log),
            [self.view, sync_id, version, rebuild, self.log.as_string(conn)],
        )

    def _shape(self, conn: psycopg.Connection) -> tuple[dict[str, LogicalType | None], list[str]] | None:
        """The table's columns (their logical types; None for a type no view column has) and
        primary key, None when there is no table."""
        oid = _value(conn, "SELECT to_regclass(%s)::oid", [self.table.as_string(conn)])
        if oid is None:
            return None
        columns = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [oid],
        ).fetchall()
        key = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = %s AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)",
            [oid],
        ).fetchall()
        return {name: logical_type(t) for name, t in columns}, [k for (k,) in key]

    def _evolve(self, conn: psycopg.Connection, columns: list[Column], key: list[str]) -> None:
        """Alter the table to `columns` where that keeps every row (columns added, types
        widened); CannotFollow otherwise."""
        shape = self._shape(conn)
        if shape is None:
            raise CannotFollow(f"table {self.schema}.{self.name} does not exist")
        have, have_key = shape
        if have_key != key:
            raise CannotFollow(f"the table's primary key is ({', '.join(have_key)}), the view's ({', '.join(key)})")
        wanted = {c.name: c.type for c in columns}
        gone = [name for name in have if name not in wanted]
        if gone:
            raise CannotFollow(f"the view has no column {', '.join(gone)} any more")
        changes = []
        for c in columns:
            old = have.get(c.name)
            name, new = sql.Identifier(c.name), sql.SQL(pg_type(c.type))
            if c.name not in have:
                changes.append(sql.SQL("ADD COLUMN {} {}").format(name, new))
            elif old != c.type:
                if old is None or not widens(old, c.type):
                    raise CannotFollow(f"column {c.name} changed type from {old or 'another type'} to {c.type}")
                changes.append(sql.SQL("ALTER COLUMN {} TYPE {} USING {}::{}").format(name, new, name, new))
        if changes:
            conn.execute(sql.SQL("ALTER TABLE {} ").format(self.table) + sql.SQL(", ").join(changes))

    def _copy(self, conn, table, columns: list[Column], batches, extra: Sequence[str] = ()) -> None:
        names = [sql.Identifier(c.name) for c in columns] + [sql.Identifier(n) for n in (_OP, _N)[: len(extra)]]
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(table, sql.SQL(", ").join(names))
        with conn.cursor().copy(statement) as copy:
            for chunk in csv_chunks(batches, columns, list(extra)):
                copy.write(chunk)


def _create(table: sql.Identifier, columns: list[Column], key: list[str]) -> sql.Composed:
    parts = [sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(pg_type(c.type))) for c in columns]
    if key:
        parts.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in key)))
    return sql.SQL("CREATE TABLE {} ({})").format(table, sql.SQL(", ").join(parts))


def _keyed_lines(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A keyed view's delta lines with a count of one each (the temporary table's shape)."""
    for batch in batches:
        yield batch.append_column(COUNT, pa.array([1] * batch.num_rows, pa.int64()))


def _apply_keyed(conn, table, temp, columns: list[Column], key: list[str]) -> None:
    """Delete the rows of the delta's updated and deleted keys, then insert its inserts and
    updates; a delete or update of a key the table lacks means it diverged: CannotFollow."""
    on = sql.SQL(" AND ").join(sql.SQL("t.{0} = d.{0}").format(sql.Identifier(k)) for k in key)
    op = sql.Identifier(_OP)
    deleted = conn.execute(
        sql.SQL("DELETE FROM {} t USING {} d WHERE {} AND d.{} <> %s").format(table, temp, on, op), [INSERT]
    ).rowcount
    expected = _value(conn, sql.SQL("SELECT count(*) FROM {} WHERE {} <> %s").format(temp, op), [INSERT])
    if deleted != expected:
        raise CannotFollow(f"the table lacks {expected - deleted} of the rows the delta updates or deletes")
    names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE {} <> %s").format(table, names, names, temp, op), [DELETE]
    )


def _apply_multiset(conn, table, temp, columns: list[Column]) -> None:
    """Delete n copies of each deleted row (by ctid; NULL matching NULL), then insert n copies
    of each inserted one; fewer copies than a delete asks for means the table diverged."""
    names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
    same = sql.SQL(" AND ").join(
        sql.SQL("t.{0} IS NOT DISTINCT FROM d.{0}").format(sql.Identifier(c.name)) for c in columns
    )
    op, n = sql.Identifier(_OP), sql.Identifier(_N)
    deleted = conn.execute(
        sql.SQL(
            "WITH d AS (SELECT row_number() OVER () AS line, {names}, sum({n}) AS n FROM {temp} WHERE {op} = %s GROUP BY {names}), "
            "victims AS (SELECT t.ctid AS tid, row_number() OVER (PARTITION BY d.line) AS k, d.n FROM {table} t JOIN d ON {same}) "
            "DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT tid FROM victims WHERE k <= n))"
        ).format(names=names, n=n, temp=temp, op=op, table=table, same=same),
        [DELETE],
    ).rowcount
    expected = _value(conn, sql.SQL("SELECT coalesce(sum({}), 0) FROM {} WHERE {} = %s").format(n, temp, op), [DELETE])
    if deleted != expected:
        raise CannotFollow(f"the table lacks {expected - deleted} of the rows the delta deletes")
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}, generate_series(1, {}) WHERE {} = %s").format(
            table, names, names, temp, n, op
        ),
        [INSERT],
    )


def _value(conn: psycopg.Connection, query, params: list) -> object:
    """The one value a query answers."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, "an aggregate or a function call answers one row"
    return row[0]


def _transient(error: psycopg.Error) -> bool:
    """Whether a retry may help: the server unreachable or the connection lost (SQLSTATE class 08), or none told."""
    state = getattr(error, "sqlstate", None)
    return state is None or state.startswith("08") or state.startswith("57")
