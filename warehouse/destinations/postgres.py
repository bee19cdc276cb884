"""A view published to a table of a PostgreSQL warehouse: loaded with COPY, each sync's delta
applied in one transaction that also records the sync (#37).

The table has the view's columns in the exactly matching PostgreSQL types (`pg_type`), the
view's key as its primary key (or, where the key holds NULL, a unique index that lets NULL
match NULL); a multiset view's table has no key and holds each row as often as the view does. Beside it, in the same schema, `deltasieve_applied` lists the syncs
whose changes each view's table holds, by view and table (`table_name`: a view may have
several tables in one schema): a rebuild or an apply writes its row in the
transaction that changes the data, so the warehouse database itself says where the table
stands (`applied`), and a crash anywhere leaves either both or neither.

Rows travel by COPY as CSV (postgres_copy.py); a delta is copied into a temporary table and
applied by key, or a multiset's by ctid, in proportion to its size (postgres_apply.py).

Columns the view gained are added and widened types (viewdef/widening.py) altered in the
same transaction; any other difference (a column gone, a narrowed or changed type, another
key) raises CannotFollow, and the caller rebuilds the table.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.conninfo import make_conninfo

from deltasieve_protocol.types import Column, LogicalType
from warehouse.destinations.base import CannotFollow
from warehouse.destinations.modes import MERGE, Publishing, Stamp, check_held, check_names, stamped
from warehouse.destinations.postgres_apply import apply_delta, create, drop_indexes, index, value
from warehouse.destinations.postgres_copy import copy_into, logical_type, pg_type, repeated
from warehouse.errors import DestinationError
from warehouse.view_options import DestinationSpec
from warehouse.viewdef.widening import widens

KIND = "postgres"
#: The table listing, per view, the syncs its table holds (the issue names its columns).
APPLIED = "deltasieve_applied"
#: The column of deltasieve_applied naming the table a sync was applied to. Rows written before
#: it existed hold '': they are the view's table's in that schema, whichever it is.
TABLE_NAME = "table_name"
#: Seconds to wait for the warehouse to answer a connection, unless the url says
#: (connect_timeout=): libpq waits as long as TCP does, and a destination that is down
#: should fail its attempt and be retried, not hold its applier for minutes.
CONNECT_TIMEOUT_S = 10
#: The schema a table named without one goes to.
DEFAULT_SCHEMA = "public"
#: A name the table option accepts: PostgreSQL's unquoted identifier, at most 63 bytes. It is
#: quoted all the same, so its case is kept.
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


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


class PostgresDestination:
    """The table `table` (SCHEMA.TABLE or TABLE) of the PostgreSQL database at `url`, holding view `view`."""

    kind = KIND

    def __init__(self, url: str, table: str, view: str, publishing: Publishing = MERGE):
        check({"kind": KIND, "url": url, "table": table})
        self.url, self.view, self.publishing = url, view, publishing
        self.schema, self.name = split_table(table)
        self.table = sql.Identifier(self.schema, self.name)
        self.log = sql.Identifier(self.schema, APPLIED)
        #: The index postgres_apply.index makes beside or instead of a primary key (within 63 bytes).
        self.own_index = (self.schema, f"{self.name[:52]}_deltasieve")

    def describe(self) -> dict:
        return {"kind": KIND, "url": masked(self.url), "table": f"{self.schema}.{self.name}"}

    def applied(self) -> str | None:
        """The last sync whose changes the table holds, as the warehouse database records it."""
        with self._connect() as conn:
            if value(conn, "SELECT to_regclass(%s)", [self.table.as_string(conn)]) is None:
                return None  # a table that is not there holds no sync, whatever the log says
            if value(conn, "SELECT to_regclass(%s)", [self.log.as_string(conn)]) is None:
                return None
            query = "SELECT sync_id FROM {} WHERE view = %s ORDER BY seq DESC LIMIT 1"
            params = [self.view]
            if self._log_names_tables(conn):
                query = "SELECT sync_id FROM {} WHERE view = %s AND table_name IN (%s, '') ORDER BY seq DESC LIMIT 1"
                params.append(self.name)
            row = conn.execute(sql.SQL(query).format(self.log), params).fetchone()
            return row[0] if row else None

    def version_of(self, sync_id: str) -> int | None:
        """None: a PostgreSQL table has no versions (deltasieve_applied says which sync it holds)."""
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
        """Replace the table's rows with `rows` (a multiset's repeated, or with their COUNT),
        each written by sync `sync_id` at `synced_at` (modes.py) unless they carry their
        metadata (`with_metadata`), in one transaction."""
        key = [] if multiset else key
        stamp = Stamp.of(sync_id, synced_at)
        table_columns = self._columns(columns)
        with self._connect() as conn, conn.transaction():
            self._begin(conn)
            shape = self._shape(conn)
            if shape is not None and shape[:2] == ({c.name: c.type for c in table_columns}, key):
                drop_indexes(conn, self.table, self.own_index)
                conn.execute(sql.SQL("TRUNCATE {}").format(self.table))
            else:  # created anew with the view's columns (a table of other columns cannot take them)
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self.table))
                create(conn, self.table, table_columns)
            targets = [sql.Identifier(c.name) for c in table_columns]
            if with_metadata:
                written = repeated(rows)
            else:
                tables = (stamped(pa.Table.from_batches([b]), self.publishing, stamp) for b in repeated(rows))
                written = (b for t in tables for b in t.to_batches())
            copy_into(conn, self.table, targets, written, table_columns)
            current = self.publishing.name("current") if self.publishing.mode == "history" and key else None
            index(conn, self.table, self.own_index, columns, key, current)
            self._record(conn, sync_id, version, rebuild=reason)

    def _columns(self, columns: list[Column]) -> list[Column]:
        """The table's columns: the view's, then its mode's (DestinationError on a clash of names)."""
        try:
            check_names(self.publishing, [c.name for c in columns])
        except ValueError as exc:
            raise DestinationError(f"{self.schema}.{self.name}: {exc}", transient=False) from None
        return [*columns, *self.publishing.columns()]

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
        """Apply one sync's stored delta in the destination's mode (modes.py) and record
        `sync_id`, in one transaction; nothing when the table holds that sync already
        (applied, then the caller crashed)."""
        key = [] if multiset else key
        table_columns = self._columns(columns)
        with self._connect() as conn, conn.transaction():
            self._begin(conn)
            done = conn.execute(
                sql.SQL("SELECT 1 FROM {} WHERE view = %s AND table_name IN (%s, '') AND sync_id = %s").format(
                    self.log
                ),
                [self.view, self.name, sync_id],
            ).fetchone()
            if done:
                return
            nullable_key = self._evolve(conn, table_columns, key, [c.name for c in columns])
            stamp = Stamp.of(sync_id, synced_at)
            apply_delta(conn, self.table, columns, key, delta, multiset, nullable_key, self.publishing, stamp)
            self._record(conn, sync_id, version, rebuild=None)

    @contextmanager
    def _connect(self) -> Iterator[psycopg.Connection]:
        """A connection, errors told without the url's password."""
        try:
            url = (
                self.url
                if "connect_timeout" in self.url
                else make_conninfo(self.url, connect_timeout=CONNECT_TIMEOUT_S)
            )
            with psycopg.connect(url, autocommit=True) as conn:
                yield conn
        except CannotFollow:
            raise
        except psycopg.Error as e:
            message = self._scrub(f"{self.describe()['table']}: {e}")
            raise DestinationError(message, transient=_transient(e)) from None

    def _scrub(self, text: str) -> str:
        """`text` without the url's password, as written in it or percent-decoded (as libpq may echo it)."""
        parts = urlsplit(self.url)
        secrets = [parts.password or ""] + re.findall(r"(?:^|&)password=([^&]*)", parts.query)
        for secret in {s for raw in secrets if raw for s in (raw, unquote(raw))}:
            text = text.replace(secret, "***")
        return text

    def _begin(self, conn: psycopg.Connection) -> None:
        """Take the table's lock (one writer at a time) and make the schema's bookkeeping table."""
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"deltasieve:{self.schema}.{self.name}"])
        schema = sql.Identifier(self.schema)
        if value(conn, "SELECT to_regnamespace(%s)", [schema.as_string(conn)]) is None:
            _create_missing(conn, sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
        if value(conn, "SELECT to_regclass(%s)", [self.log.as_string(conn)]) is None:
            _create_missing(
                conn,
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (view text NOT NULL, table_name text NOT NULL DEFAULT '', "
                    "sync_id text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
                    "version bigint, rebuild text, seq bigserial NOT NULL, PRIMARY KEY (view, table_name, sync_id))"
                ).format(self.log),
            )
        if not self._log_names_tables(conn):
            self._name_tables_in_log(conn)

    def _record(self, conn: psycopg.Connection, sync_id: str, version: int, rebuild: str | None) -> None:
        """Record `sync_id` as the table's latest (a rebuild says why in `rebuild`)."""
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (view, table_name, sync_id, version, rebuild) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (view, table_name, sync_id) DO UPDATE SET applied_at = clock_timestamp(), "
                "version = excluded.version, rebuild = excluded.rebuild, seq = nextval(pg_get_serial_sequence(%s, 'seq'))"
            ).format(self.log),
            [self.view, self.name, sync_id, version, rebuild, self.log.as_string(conn)],
        )

    def _log_names_tables(self, conn: psycopg.Connection) -> bool:
        """Whether the schema's deltasieve_applied has its table_name column (written since a
        view could have two tables in one schema)."""
        return bool(
            value(
                conn,
                "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s AND NOT attisdropped",
                [self.log.as_string(conn), TABLE_NAME],
            )
        )

    def _name_tables_in_log(self, conn: psycopg.Connection) -> None:
        """Give an older deltasieve_applied its table_name column ('' for the rows it holds) and
        key it by view, table and sync, under a lock of its own so that two tables of the schema
        do not both do it."""
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"deltasieve:{self.log.as_string(conn)}"]
        )
        if self._log_names_tables(conn):
            return
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN table_name text NOT NULL DEFAULT ''").format(self.log))
        primary = value(
            conn,
            "SELECT max(conname) FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'p'",
            [self.log.as_string(conn)],
        )
        if primary is not None:
            conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(self.log, sql.Identifier(primary)))
        conn.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY (view, table_name, sync_id)").format(self.log))

    def _shape(self, conn: psycopg.Connection) -> tuple[dict[str, LogicalType | None], list[str], bool] | None:
        """The table's columns (their logical types; None for a type no view column has), its
        key (the primary key's columns, or those of the unique index that lets NULL match
        NULL), and whether it is that index; None when there is no table."""
        oid = value(conn, "SELECT to_regclass(%s)::oid", [self.table.as_string(conn)])
        if oid is None:
            return None
        columns = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [oid],
        ).fetchall()
        key = conn.execute(
            "SELECT a.attname, NOT i.indisprimary AND pg_get_indexdef(i.indexrelid) LIKE '%% NULLS NOT DISTINCT%%' "
            "FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = %s AND (i.indisprimary OR (i.indisunique AND i.indexrelid = to_regclass(%s))) "
            "ORDER BY array_position(i.indkey::int2[], a.attnum)",
            [oid, sql.Identifier(*self.own_index).as_string(conn)],
        ).fetchall()
        return {name: logical_type(t) for name, t in columns}, [k for k, _ in key], any(n for _, n in key)

    def _evolve(self, conn: psycopg.Connection, columns: list[Column], key: list[str], view: list[str]) -> bool:
        """Alter the table to `columns` (the view's, `view`, and the mode's) where that keeps
        every row (columns added, types widened, synced_at and sync_id added to a table
        written before the modes), CannotFollow otherwise; whether its key may hold NULL."""
        shape = self._shape(conn)
        if shape is None:
            raise CannotFollow(f"table {self.schema}.{self.name} does not exist")
        have, have_key, nullable_key = shape
        check_held(self.publishing, list(have), view)
        if have_key != key:
            raise CannotFollow(f"the table's key is ({', '.join(have_key)}), the view's ({', '.join(key)})")
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
        return nullable_key


def _create_missing(conn: psycopg.Connection, statement: sql.Composed) -> None:
    """Create what was missing (asked first: CREATE ... IF NOT EXISTS needs the privilege to
    create even where the object exists), in a savepoint: another view's writer may create
    it at the same time, and IF NOT EXISTS does not shield a concurrent creation."""
    try:
        with conn.transaction():
            conn.execute(statement)
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable, psycopg.errors.DuplicateSchema):
        pass


def _transient(error: psycopg.Error) -> bool:
    """Whether a retry may help: the server unreachable or the connection lost (SQLSTATE class 08), or none told."""
    state = getattr(error, "sqlstate", None)
    return state is None or state.startswith("08") or state.startswith("57")


def from_spec(spec: DestinationSpec, data_dir: Path, view: str, keep_versions: int = 0) -> PostgresDestination:
    """The destination a view's `{"kind": "postgres", "url", "table"}` names (warehouse/destinations/__init__.py);
    a table keeps no versions of its own, so `keep_versions` is not used."""
    assert spec.url is not None and spec.table is not None, "a postgres destination has url and table (DestinationIn)"
    return PostgresDestination(spec.url, spec.table, view, Publishing.of(spec))
