"""PostgreSQL adapter (psycopg 3): read-only session, one REPEATABLE READ snapshot per read.

Reads stream through a server-side cursor, so the agent holds one fetch of rows at a time
whatever the size of the table.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
import pyarrow as pa
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.tokens import TokenType

from deltasieve_protocol import sitesql
from deltasieve_protocol.models import TableKind
from deltasieve_protocol.types import LogicalType
from remote_agent.adapters import postgres_arrow, postgres_errors
from remote_agent.adapters.base import DEFAULT_FETCH_ROWS, Adapter, ColumnInfo, Reader, Session, TableInfo
from remote_agent.adapters.convert import converter_for
from remote_agent.adapters.postgres_types import BOUND_BACK, TYPMOD, logical_type
from remote_agent.adapters.tokens import KeptConnection, SourceToken
from remote_agent.errors import BadRequest, SourceUnavailable
from remote_agent.rowversions import changed_since_condition, current_snapshot

#: Seconds to wait for a TCP connection when the URL sets no `connect_timeout`; libpq
#: would otherwise wait for the operating system's timeout (minutes) on a silent host.
DEFAULT_CONNECT_TIMEOUT_S = 10

#: The SQLSTATE a hot standby gives when it cancels a query (or ends an idle transaction's
#: session) whose snapshot or locks the replay of the primary's WAL cannot wait for
#: (serialization_failure: a read-only read meets it on a standby only, and may retry).
RECOVERY_CONFLICT = "40001"

#: application_name of the agent's sessions, as pg_stat_activity shows them.
APPLICATION_NAME = "deltasieve-agent"

#: Session settings that fix how values are rendered, so that a value cast to text (and
#: hence its hash) is the same at every sync whatever the server's or role's defaults are.
_SESSION_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO,YMD",
    "IntervalStyle": "postgres",
    "extra_float_digits": "1",  # shortest exact text for floats (a lower value would round)
    "bytea_output": "hex",
}

#: pg_class.relkind of the relations `describe` lists, as TableInfo.kind names them.
_RELATION_KINDS: dict[str, TableKind] = {"r": "table", "p": "table", "v": "view", "m": "materialized view"}
#: Logical types whose PostgreSQL order is Python's order of their values (`range_key`).
_ORDERED_AS_PYTHON = {"int", "date", "timestamp", "timestamptz", "bytes"}
#: Declared text types that COLLATE "C" compares byte-wise.
_BYTEWISE_TEXT = {"text", "character varying", "varchar"}


@functools.lru_cache(maxsize=256)
def psycopg_placeholders(sql: str) -> str:
    """Escape every `%` of `sql` that is not a `%s` placeholder, as psycopg requires.

    sqlglot renders placeholders as `%s` but leaves `%` in literals and the modulo
    operator as they are, which psycopg would take for malformed placeholders. Kept per
    text: a scan's chunks after the first share one statement, which sqlglot's tokenizer
    took milliseconds to read again for each chunk.

    >>> psycopg_placeholders("SELECT a % 2 FROM t WHERE b LIKE 'x%s%' AND c = %s")
    "SELECT a %% 2 FROM t WHERE b LIKE 'x%%s%%' AND c = %s"
    """
    tokens = Postgres().tokenize(sql)
    placeholders = {
        tok.start
        for tok, nxt in itertools.pairwise(tokens)
        if tok.token_type == TokenType.MOD and nxt.start == tok.end + 1 and nxt.text == "s"
    }
    return "".join("%%" if ch == "%" and i not in placeholders else ch for i, ch in enumerate(sql))


# Every relation the login may read in a schema it may use, the system's left out: tables,
# partitioned tables, views and materialized views. One of a search-path schema that an
# unqualified name resolves to is named as it is; one of another schema (`schema_list`'s,
# or every other with `all_schemas`) as schema.table, so that one of a search-path schema
# that --allow also names comes twice, once each way. `parent`: a partition's root, or the
# table an inheriting one inherits from first, named the same way (NULL when unreadable).
_TABLES_SQL = """
WITH rel AS (
    SELECT c.oid, c.relname, n.nspname, c.relkind,
           n.nspname = ANY (pg_catalog.current_schemas(false)) AND pg_catalog.pg_table_is_visible(c.oid) AS bare,
           CASE WHEN c.relispartition THEN pg_catalog.pg_partition_root(c.oid)
                ELSE (SELECT i.inhparent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid
                      ORDER BY i.inhseqno LIMIT 1) END AS parent,
           c.relispartition
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'v', 'm')
      AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
      AND pg_catalog.has_schema_privilege(n.oid, 'USAGE')
      AND pg_catalog.has_table_privilege(c.oid, 'SELECT')
), named AS (
    SELECT oid, relname AS name, NULL::text AS schema, relkind, parent, relispartition FROM rel WHERE bare
  UNION ALL
    SELECT oid, nspname || '.' || relname, nspname, relkind, parent, relispartition FROM rel
    WHERE nspname = ANY (%(schema_list)s::text[]) OR (%(all_schemas)s AND NOT bare)
)
SELECT named.oid, named.name, named.schema, named.relkind, named.relispartition,
       (SELECT CASE WHEN p.bare THEN p.relname ELSE p.nspname || '.' || p.relname END FROM rel p WHERE p.oid = named.parent)
FROM named
ORDER BY 2
"""

# A domain column is mapped by the type at the bottom of its chain of domains (psycopg
# receives values of that type), while `declared` keeps the domain's own name. The last
# column says whether the column's collation compares byte by byte: "C" or "POSIX", or the
# database's default where that is a libc C or POSIX locale (`range_key`). The last but one
# is the kind of that bottom type (pg_type.typtype: "c" for a composite, `logical_type`).
_COLUMNS_SQL = """
WITH RECURSIVE domain_base(oid, base, typmod, depth) AS (
    SELECT t.oid, t.typbasetype, t.typtypmod, 0 FROM pg_catalog.pg_type t WHERE t.typtype = 'd'
  UNION ALL
    SELECT d.oid, t.typbasetype, t.typtypmod, d.depth + 1
    FROM domain_base d JOIN pg_catalog.pg_type t ON t.oid = d.base
    WHERE t.typtype = 'd'
)
SELECT a.attrelid, a.attname,
       pg_catalog.format_type(a.atttypid, a.atttypmod),
       NOT a.attnotnull,
       pg_catalog.format_type(b.base, b.typmod),
       ty.typtype,
       COALESCE(co.collname IN ('C', 'POSIX') OR (co.oid = 100 AND (
           SELECT db.datcollate IN ('C', 'POSIX') AND COALESCE(pg_catalog.to_jsonb(db) ->> 'datlocprovider', 'c') = 'c'
           FROM pg_catalog.pg_database db WHERE db.datname = pg_catalog.current_database())), false)
FROM pg_catalog.pg_attribute a
LEFT JOIN LATERAL (
    SELECT d.base, d.typmod FROM domain_base d WHERE d.oid = a.atttypid ORDER BY d.depth DESC LIMIT 1
) b ON true
JOIN pg_catalog.pg_type ty ON ty.oid = COALESCE(b.base, a.atttypid)
LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
WHERE a.attrelid = ANY (%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum
"""

# Unique indexes over plain columns only: no expression, no predicate, valid; the
# columns of an INCLUDE clause are not part of the key.
_KEYS_SQL = """
SELECT i.indrelid, i.indisprimary,
       ARRAY(SELECT a.attname
             FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE k.ord <= i.indnkeyatts
             ORDER BY k.ord)
FROM pg_catalog.pg_index i
WHERE i.indrelid = ANY (%s) AND i.indisunique AND i.indisvalid
  AND i.indexprs IS NULL AND i.indpred IS NULL AND NOT 0 = ANY (i.indkey::int2[])
ORDER BY i.indrelid, i.indisprimary DESC, i.indexrelid
"""


class _PostgresReader(Reader):
    def __init__(self, conn: psycopg.Connection, timeout_s: float, arrow_conn: Callable[[], Any] | None = None):
        self.conn = conn
        self.timeout_s = timeout_s
        self._cursors = itertools.count()
        self._arrow_conn = arrow_conn

    def arrow(
        self,
        sql: str,
        params: Sequence[Any] = (),
        *,
        types: Sequence[LogicalType],
        schema: pa.Schema,
        key: Sequence[int] = (),
    ) -> pa.Table | None:
        # Parameters are rendered as literals by psycopg (as its client-side cursors do):
        # the driver would type a str as text, where the server must infer the type.
        arrow_conn = self._arrow_conn() if self._arrow_conn is not None else None
        if arrow_conn is None:
            return None
        query = psycopg.ClientCursor(self.conn).mogrify(psycopg_placeholders(sql), tuple(params)) if params else sql
        table = postgres_arrow.read_table(arrow_conn, query, self.timeout_s)
        return postgres_arrow.canonical(table, types, schema)

    def stream(
        self, sql: str, params: Sequence[Any] = (), fetch_rows: int = DEFAULT_FETCH_ROWS
    ) -> Iterator[list[tuple]]:
        # Without parameters psycopg sends the text untouched, so `%` needs no escaping.
        query, args = (psycopg_placeholders(sql), tuple(params)) if params else (sql, None)
        # A named cursor lives on the server: each fetchmany() is one FETCH of `fetch_rows`.
        cursor = self.conn.cursor(name=f"deltasieve_{next(self._cursors)}")
        try:
            cursor.execute(query, args)
            while True:
                rows = cursor.fetchmany(fetch_rows)
                if rows:
                    yield rows
                if len(rows) < fetch_rows:  # a short fetch is the last: spare the empty one
                    return
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.DataError) and exc.sqlstate is None and cursor.description:
                named = postgres_errors.unholdable(self.conn, query, args, cursor.description)
                if named is not None:
                    raise named from None
            if exc.sqlstate == RECOVERY_CONFLICT:
                raise SourceUnavailable(
                    f"the PostgreSQL standby cancelled the read to replay its primary's changes ({exc}); a later "
                    "read may pass: hot_standby_feedback = on or a longer max_standby_streaming_delay on the "
                    "standby make it rarer"
                ) from None
            raise postgres_errors.read_error(
                exc.sqlstate,
                str(exc).strip(),
                self.timeout_s,
                link_failed=isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError),
                value_failed=isinstance(exc, psycopg.DataError),
                table=exc.diag.table_name,
                column=exc.diag.column_name,
            ) from None
        finally:
            with contextlib.suppress(psycopg.Error):
                cursor.close()


class _PostgresSession(Session):
    def __init__(self, conn: psycopg.Connection, timeout_s: float, open_arrow: Callable[[], Any] | None = None):
        self.conn = conn
        self.timeout_s = timeout_s
        self._open_arrow = open_arrow
        self._arrow: Any = None

    def arrow_conn(self) -> Any:
        """The session's ADBC connection, opened at the first Arrow read (a scan's first chunk)."""
        if self._arrow is None and self._open_arrow is not None:
            self._arrow = self._open_arrow()
        return self._arrow

    def close(self) -> None:
        if self._arrow is not None:
            with contextlib.suppress(Exception):
                self._arrow.close()
            self._arrow = None

    @contextlib.contextmanager
    def read(self) -> Iterator[Reader]:
        # psycopg begins the transaction at the first statement; rollback ends it (nothing
        # was written), leaving the connection idle: no snapshot, no lock.
        try:
            yield _PostgresReader(self.conn, self.timeout_s, self.arrow_conn)
        finally:
            with contextlib.suppress(psycopg.Error):
                self.conn.rollback()


#: The change token's parts (remote_agent/change_tokens.py): the snapshot a transaction started
#: now takes, whether the server is a standby, the cluster's identity and the WAL timeline (the
#: first eight hex digits of a WAL file's name; a standby refuses pg_walfile_name).
_TOKEN_SQL = """
SELECT pg_current_snapshot()::text, pg_is_in_recovery(),
       (SELECT system_identifier::text FROM pg_control_system()),
       CASE WHEN pg_is_in_recovery() THEN NULL ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END
"""


class PostgresAdapter(Adapter):
    dialect = "postgres"
    #: The wall clock (not the transaction's start) in the session's time zone, without an
    #: offset: a literal of this form compares right with timestamp and timestamptz columns.
    clock_sql = "SELECT to_char(clock_timestamp(), 'YYYY-MM-DD HH24:MI:SS.US')"
    #: EXPLAIN without ANALYZE plans the statement and runs nothing.
    explain_prefix = "EXPLAIN"
    row_versions = True

    def __init__(self, url: str, *, statement_timeout_s: float, arrow_reads: bool = False):
        """`arrow_reads`: read scan chunks through ADBC into Arrow (postgres_arrow.py), as the
        agent does by default; without it, psycopg reads them through a server-side cursor."""
        super().__init__(url, statement_timeout_s=statement_timeout_s, arrow_reads=arrow_reads)
        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError:
            raise BadRequest("PostgreSQL URL must be postgresql://USER[:PASSWORD]@HOST[:PORT]/DB") from None
        self._password = str(params.get("password") or "")
        self.where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}/{params.get('dbname') or ''}"
        self.user = str(params.get("user") or "")
        # Read-only twice over: the session default and the connection's own setting.
        # Ours come after any options of the URL so that they win.
        timeout_ms = str(max(1, round(statement_timeout_s * 1000)))
        # A transaction left idle (an agent that stalled mid-read) is ended by the server
        # after as long as a statement may run: no snapshot outlives the bound.
        settings = {
            "default_transaction_read_only": "on",
            "statement_timeout": timeout_ms,
            "idle_in_transaction_session_timeout": timeout_ms,
            **_SESSION_SETTINGS,
        }
        options = " ".join(f"-c {k}={v}" for k, v in settings.items())
        params["options"] = f"{params['options']} {options}" if params.get("options") else options
        params.setdefault("connect_timeout", str(DEFAULT_CONNECT_TIMEOUT_S))
        # The DBA sees who we are in pg_stat_activity (a URL's application_name wins).
        params.setdefault("application_name", APPLICATION_NAME)
        self._conninfo = make_conninfo("", **params)
        #: "table.column" of the columns whose collation compares byte by byte (`describe`).
        self._bytewise: frozenset[str] = frozenset()
        #: The connection change tokens are read on (`change_token`), kept between requests.
        self._tokens: KeptConnection[psycopg.Connection] = KeptConnection(self._connect, psycopg.Connection.close)

    def _redact(self, text: str) -> str:
        return text.replace(self._password, "***") if self._password else text

    def _connect(self) -> psycopg.Connection:
        try:
            conn = psycopg.connect(self._conninfo, autocommit=False)
        except psycopg.Error as exc:
            message = self._redact(str(exc).strip())
            raise SourceUnavailable(
                f"cannot connect to PostgreSQL at {self.where} as {self.user or 'default user'}: {message}"
            ) from None
        conn.read_only = True
        # One snapshot for the whole transaction, so every statement of a read agrees.
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        return conn

    schemas = True

    def describe(self, schemas: Sequence[str] | None = ()) -> list[TableInfo]:
        conn = self._connect()
        try:
            # a table of a search-path schema that --allow also names as schema.table comes twice: same oid
            asked = {"schema_list": list(schemas or ()), "all_schemas": schemas is None}
            tables = conn.execute(_TABLES_SQL, asked).fetchall()
            oids = list(dict.fromkeys(oid for oid, *_ in tables))
            columns: dict[int, list[ColumnInfo]] = {oid: [] for oid in oids}
            table_names: dict[int, list[str]] = {oid: [] for oid in oids}
            for oid, name, *_ in tables:
                table_names[oid].append(name)
            bytewise: set[str] = set()
            for oid, name, declared, nullable, base, typtype, byte_order in conn.execute(_COLUMNS_SQL, (oids,)):
                type_, read_as = logical_type(base or declared, typtype)
                columns[oid].append(ColumnInfo(name, type_, nullable=nullable, declared=declared, read_as=read_as))
                if byte_order:
                    bytewise.update(f"{table}.{name}" for table in table_names[oid])
            self._bytewise = frozenset(bytewise)
            primary: dict[int, tuple[str, ...]] = {}
            uniques: dict[int, list[tuple[str, ...]]] = {oid: [] for oid in oids}
            for oid, is_primary, names in conn.execute(_KEYS_SQL, (oids,)):
                if is_primary:
                    primary[oid] = tuple(names)
                else:
                    uniques[oid].append(tuple(names))
            return [
                TableInfo(
                    name,
                    tuple(columns[oid]),
                    primary.get(oid, ()),
                    tuple(uniques[oid]),
                    schema,
                    "partition" if is_partition else _RELATION_KINDS[relkind],
                    parent,
                )
                for oid, name, schema, relkind, is_partition, parent in tables
            ]
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(
                f"PostgreSQL connection failed while reading the catalog: {self._redact(str(exc))}"
            ) from None
        finally:
            conn.close()

    def _connect_arrow(self) -> Any:
        try:
            return postgres_arrow.connect(self._conninfo)
        except SourceUnavailable as exc:
            raise SourceUnavailable(self._redact(str(exc))) from None

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        conn = self._connect()
        session = _PostgresSession(conn, self.statement_timeout_s, self._connect_arrow if self.arrow_reads else None)
        try:
            yield session
        finally:
            session.close()
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
            conn.close()

    def query_plan(self, session: Session, sql: str) -> list[str] | None:
        if not isinstance(session, _PostgresSession):
            raise TypeError("a PostgreSQL query plan is read in a PostgreSQL session")
        # EXPLAIN cannot run in the named cursor that stream() declares: a client-side one.
        with session.read(), session.conn.cursor() as cursor:
            cursor.execute(f"{self.explain_prefix} {sql}")
            return [row[0] for row in cursor.fetchall()]

    def source_snapshot(self, session: Session) -> dict:
        return current_snapshot(session)

    def change_token(self) -> SourceToken:
        def read(conn: psycopg.Connection, _serial: int) -> tuple:
            try:
                return conn.execute(_TOKEN_SQL).fetchone() or ()
            finally:
                conn.rollback()  # idle again: no snapshot held between requests

        try:
            snapshot, standby, identity, timeline = self._tokens.use(read)
        except psycopg.Error as exc:  # before PostgreSQL 13, or pg_control_system() revoked
            return SourceToken(None, f"PostgreSQL gave no snapshot to compare: {self._redact(str(exc).strip())}")
        except SourceUnavailable as exc:
            return SourceToken(None, exc.message)
        if standby:
            return SourceToken(
                None, "a hot standby: its snapshot does not list the transactions in progress, so it proves nothing"
            )
        return SourceToken(f"pg/{identity}/{timeline}/{snapshot}")

    def changed_since_condition(self, alias: str, since_xmin: int) -> Any:
        return changed_since_condition(alias, since_xmin)

    def rebind(self, value: Any) -> Any:
        # A float goes back as its text, typed by the server as the column's own type: a
        # `real` read as 0.1 and bound as a double would not compare equal to itself.
        if isinstance(value, float):
            return repr(value)
        return value

    def key_order(self, column: ColumnInfo, ref: exp.Expression, unique: bool) -> exp.Expression:
        # A key column read through read_as is compared with what was read: the cursor binds
        # it back. A text the server casts back to an equal value (a numeric's, an inet's) may
        # be compared as stored, by the column's index, where no two rows can hold values the
        # server holds equal but whose texts differ (1.5 and 1.50): `unique`. Any other (JSON
        # text, EWKB; such a column of a multiset) is ordered, cut and grouped as it is read,
        # and distinct texts are distinct to the server as to Python.
        if column.read_as is None or not isinstance(ref, exp.Column) or (unique and column.read_as in BOUND_BACK):
            return ref
        return sitesql.wrap_read_as(column.read_as, ref, self.dialect)

    def range_key(self, column: ColumnInfo, ref: exp.Expression, origin: str) -> exp.Expression | None:
        # Integers, dates, timestamps (timestamptz by instant, as Python compares aware
        # datetimes) and bytea (byte-wise) sort as Python sorts their values. text and
        # varchar sort by the column's collation, which may be a language's (ICU,
        # en_US.utf8: case and accents first): COLLATE "C" compares them byte-wise, which
        # for UTF-8 is code point order, Python's order of str. It is left out where the
        # column's collation is byte-wise already (seen by `describe`), because an index
        # serves only comparisons in its own collation, and "C" is not "default" to the
        # planner even in a database whose default is C. Not: char(n) (trailing
        # blanks do not count), citext (case-blind), domains; numeric (a value with more
        # digits than its canonical scale would fall on the other side of a bound),
        # floats (NaN sorts above every number), and anything read through read_as.
        if column.read_as:
            return None
        kind = column.type.kind
        if kind in _ORDERED_AS_PYTHON:
            return ref
        if kind == "text" and TYPMOD.sub("", column.declared.strip().lower()) in _BYTEWISE_TEXT:
            if origin in self._bytewise:
                return ref
            return exp.Collate(this=ref, expression=exp.Identifier(this="C", quoted=True))
        return None

    def can_lookup(self, key_types: Sequence[LogicalType]) -> bool:
        # A `real` compared with a bound double is widened first, so the shortest decimal
        # form we read (0.1) would not match the stored float4 (0.100000001...).
        return all(t.kind != "float" for t in key_types)

    def wire_type(self, column: ColumnInfo) -> pa.DataType | None:
        # psycopg's values follow the column's type (int, float, Decimal, str, bytes, bool,
        # date, datetime): Arrow reads them as the canonical type, converting aware
        # timestamps to UTC as the converters do, and refuses a decimal that needs rounding.
        return column.type.arrow()

    def converter(self, column: ColumnInfo) -> Callable[[Any], Any]:
        # psycopg already returns Decimal, date, datetime and bytes; the shared converters
        # quantize decimals, turn buffers into bytes and timestamptz into UTC.
        return converter_for(column.type)
