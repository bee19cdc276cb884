"""MySQL and MariaDB adapter (mysqlclient): a read-only session, one consistent snapshot per read.

Every read is `START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT` (InnoDB's repeatable
read: one state for every statement of the read), ended by ROLLBACK. The session is read
only besides (`SET SESSION TRANSACTION READ ONLY`), each statement is bounded by the
server's own timeout (`max_statement_time` on MariaDB, `max_execution_time` on MySQL), and
the session's settings that change what a value reads as or what SQL means are fixed:
UTC, utf8mb4, and an `sql_mode` in which sqlglot's MySQL SQL means what it says.

The family's traps and what the adapter makes of them:

- collations that are blind to case, accents or trailing spaces: a key column that a
  unique key of its table does not cover is ordered, cut and grouped by its UTF-8 bytes
  (`key_order`), and rows a lookup matches but Python would not are dropped;
- `TINYINT(1)` (MySQL's BOOLEAN) may hold any tiny integer: read as an int; `BIT(1)` as a
  boolean, wider `BIT(n)` as the unsigned number it holds;
- `BIGINT UNSIGNED` (and `BIT(64)`) as decimal(20,0), exact beyond 2**63;
- `DATETIME` as a timestamp without zone, `TIMESTAMP` as an instant (read in UTC);
- zero dates ('0000-00-00', or a zero month or day) read as NULL, as the driver reads
  them (and as common change-capture tools do): such columns are described nullable;
- spatial types as extended WKB bytes (`GEOMETRY_AS_EWKB`);
- `TIME`, `JSON` and other types as their text.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.tokens import TokenType

from deltasieve_protocol import sitesql
from deltasieve_protocol.models import TableKind
from deltasieve_protocol.types import MAX_DECIMAL_PRECISION, LogicalType
from remote_agent.adapters import mysql_arrow, mysql_result
from remote_agent.adapters.base import DEFAULT_FETCH_ROWS, Adapter, ColumnInfo, Reader, Session, TableInfo
from remote_agent.adapters.convert import converter_for
from remote_agent.adapters.mysql_errors import driver_errors
from remote_agent.adapters.tokens import SourceToken
from remote_agent.errors import BadRequest, SourceUnavailable

try:  # the `mysql` extra: an agent for SQLite, PostgreSQL or dump files does without it
    import MySQLdb
    import MySQLdb.cursors
except ImportError:  # pragma: no cover - the suite installs it
    MySQLdb = None

#: Seconds to wait for a TCP connection when the URL sets no `connect_timeout`.
DEFAULT_CONNECT_TIMEOUT_S = 10

#: The session's sql_mode: none of ANSI_QUOTES (a double-quoted string would be a name),
#: NO_BACKSLASH_ESCAPES (sqlglot escapes a backslash in a literal with a backslash),
#: PIPES_AS_CONCAT or PAD_CHAR_TO_FULL_LENGTH (CHAR values would keep their padding).
SQL_MODE = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"

#: What selects a column whose type has no logical counterpart: its text.
CAST_TO_TEXT = "CAST({col} AS CHAR)"
#: BIT(n) as the unsigned number it holds (the driver hands over its bytes).
BIT_AS_NUMBER = "CAST({col} AS UNSIGNED)"
#: A spatial value as extended WKB, the form PostGIS's ST_AsEWKB writes: the server's
#: (little-endian) WKB as is when the SRID is 0; otherwise with the 0x20000000 flag set in
#: its type word (bytes 2-5, the flag in the last of them) and the SRID, 4 bytes
#: little-endian, after it. `{wkb}` stands for the column's WKB. (A cast to text, which
#: the server refuses for these types, is what the agent did before.)
_EWKB = (
    "CASE WHEN ST_SRID({col}) = 0 THEN {wkb} "
    "ELSE CONCAT(SUBSTR({wkb}, 1, 4), CHAR(ASCII(SUBSTR({wkb}, 5, 1)) | 32), "
    "REVERSE(UNHEX(LPAD(HEX(ST_SRID({col})), 8, '0'))), SUBSTR({wkb}, 6)) END"
)
#: MariaDB's WKB is x then y whatever the SRID.
GEOMETRY_AS_EWKB = _EWKB.replace("{wkb}", "ST_AsWKB({col})")
#: MySQL 8 writes a geographic SRID's points latitude first unless told otherwise; PostGIS
#: and the readers of EWKB take x = longitude. (Not tested here: no MySQL 8 server.)
MYSQL8_GEOMETRY_AS_EWKB = _EWKB.replace("{wkb}", "ST_AsWKB({col}, 'axis-order=long-lat')")
_EWKB_FORMS = (GEOMETRY_AS_EWKB, MYSQL8_GEOMETRY_AS_EWKB)

_INTEGERS = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"}
_TEXTS = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_BYTES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_FLOATS = {"float", "double", "real", "double precision"}
_DATES = {"date", "datetime", "timestamp"}
_SPATIAL = {
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
    "geomcollection",
}
#: `utf8_bytes` of a column `x`: text in utf8mb4 whatever the column's character set, then its bytes.
_UTF8_BYTES = sqlglot.parse_one("CAST(CAST(x AS CHAR CHARACTER SET utf8mb4) AS BINARY)", read="mysql")
_WIDTH = re.compile(r"\((\d+)(?:,(\d+))?\)")

#: The server's own databases, never described as the source's.
_SYSTEM_DATABASES = ("mysql", "information_schema", "performance_schema", "sys")


def logical_type(data_type: str, column_type: str, mariadb: bool = True) -> tuple[LogicalType, str | None]:
    """Map information_schema's DATA_TYPE and COLUMN_TYPE to a logical type and a `read_as` template.

    `mariadb`: the server is MariaDB, not MySQL (their spatial functions differ).

    >>> for d, c in [("int", "int(11)"), ("tinyint", "tinyint(1)"), ("bigint", "bigint(20) unsigned"),
    ...              ("decimal", "decimal(10,2)"), ("decimal", "decimal(65,30)"), ("bit", "bit(1)"),
    ...              ("bit", "bit(12)"), ("datetime", "datetime(6)"), ("timestamp", "timestamp"),
    ...              ("enum", "enum('a','b')"), ("time", "time"), ("longblob", "longblob"),
    ...              ("point", "point"), ("polygon", "polygon"), ("geometry", "geometry")]:
    ...     kind, read_as = logical_type(d, c)
    ...     print(f"{c:20} {kind!s:15} {'EWKB' if read_as == GEOMETRY_AS_EWKB else read_as}")
    int(11)              int             None
    tinyint(1)           int             None
    bigint(20) unsigned  decimal(20,0)   None
    decimal(10,2)        decimal(10,2)   None
    decimal(65,30)       text            CAST({col} AS CHAR)
    bit(1)               bool            CAST({col} AS UNSIGNED)
    bit(12)              int             CAST({col} AS UNSIGNED)
    datetime(6)          timestamp       None
    timestamp            timestamptz     None
    enum('a','b')        text            None
    time                 text            CAST({col} AS CHAR)
    longblob             bytes           None
    point                bytes           EWKB
    polygon              bytes           EWKB
    geometry             bytes           EWKB
    >>> logical_type("point", "point", mariadb=False)[1] == MYSQL8_GEOMETRY_AS_EWKB
    True
    """
    d, c = data_type.lower(), column_type.lower()
    width = _WIDTH.search(c)
    if d in _INTEGERS:
        if d == "bigint" and "unsigned" in c:
            return LogicalType("decimal", 20, 0), None
        return LogicalType("int"), None
    if d == "bit":
        bits = int(width.group(1)) if width else 1
        if bits == 1:
            return LogicalType("bool"), BIT_AS_NUMBER
        return (LogicalType("int") if bits < 64 else LogicalType("decimal", 20, 0)), BIT_AS_NUMBER
    if d in ("decimal", "numeric"):
        precision = int(width.group(1)) if width else 10
        scale = int(width.group(2) or 0) if width else 0
        if precision <= MAX_DECIMAL_PRECISION:
            return LogicalType("decimal", precision, scale), None
        return LogicalType("text"), CAST_TO_TEXT  # too wide for Spark: exact text instead
    if d in _FLOATS:
        return LogicalType("float"), None
    if d in _TEXTS:
        return LogicalType("text"), None
    if d in _BYTES:
        return LogicalType("bytes"), None
    if d == "date":
        return LogicalType("date"), None
    if d == "datetime":
        return LogicalType("timestamp"), None
    if d == "timestamp":
        return LogicalType("timestamptz"), None
    if d in _SPATIAL:
        return LogicalType("bytes"), GEOMETRY_AS_EWKB if mariadb else MYSQL8_GEOMETRY_AS_EWKB
    return LogicalType("text"), CAST_TO_TEXT


def format_placeholders(sql: str) -> str:
    """sqlglot's `?` placeholders as the driver's `%s`, every other `%` doubled.

    >>> format_placeholders("SELECT a % 2 FROM t WHERE b LIKE 'x%?' AND c = ?")
    "SELECT a %% 2 FROM t WHERE b LIKE 'x%%?' AND c = %s"
    """
    spots = {tok.start for tok in MySQL().tokenize(sql) if tok.token_type == TokenType.PLACEHOLDER}
    return "".join("%s" if i in spots else "%%" if ch == "%" else ch for i, ch in enumerate(sql))


def utf8_bytes(ref: exp.Expression) -> exp.Expression:
    """A text expression as its UTF-8 bytes, which compare as Python compares the strings.

    >>> utf8_bytes(exp.column("k", "t")).sql("mysql")
    'CAST(CAST(t.k AS CHAR CHARACTER SET utf8mb4) AS BINARY)'
    """
    tree = _UTF8_BYTES.copy()
    column = tree.find(exp.Column)
    assert isinstance(tree, exp.Cast) and column is not None, "_UTF8_BYTES is a CAST of the column x"
    column.replace(ref.copy())
    return tree


class _MysqlReader(Reader):
    def __init__(self, conn: Any, timeout_s: float, native: int | None):
        self.conn = conn
        self.timeout_s = timeout_s
        #: the connection's MYSQL struct, where scan chunks are read into Arrow (mysql_result.py)
        self.native = native

    def arrow(
        self,
        sql: str,
        params: Sequence[Any] = (),
        *,
        types: Sequence[LogicalType],
        schema: pa.Schema,
        key: Sequence[int] = (),
    ) -> pa.Table | None:
        # The same statement through mysqlclient, its result copied as the server's text by
        # compiled code (mysql_result.py) and cast by Arrow (mysql_arrow.py).
        if self.native is None:
            return None
        # As bytes: a bound binary value (a cursor's EWKB, say) need not be UTF-8 (mogrify's str would be).
        query = format_placeholders(sql).encode() % tuple(map(self.conn.literal, params)) if params else sql
        with driver_errors(self.timeout_s):
            self.conn.query(query)
            columns = mysql_result.stored_columns(self.native)
        return None if columns is None else mysql_arrow.canonical(columns, types, schema)

    def stream(
        self, sql: str, params: Sequence[Any] = (), fetch_rows: int = DEFAULT_FETCH_ROWS
    ) -> Iterator[list[tuple]]:
        # SSCursor streams the result (mysql_use_result): one fetch of rows in memory at a time.
        cursor = self.conn.cursor(MySQLdb.cursors.SSCursor)
        try:
            with driver_errors(self.timeout_s):
                if params:
                    cursor.execute(format_placeholders(sql), tuple(params))
                else:
                    cursor.execute(sql)
                while True:
                    rows = list(cursor.fetchmany(fetch_rows))
                    if rows:
                        yield rows
                    if len(rows) < fetch_rows:
                        return
        finally:
            with contextlib.suppress(MySQLdb.Error):
                cursor.close()  # reads what is left of a streamed result


class _MysqlSession(Session):
    def __init__(self, conn: Any, timeout_s: float, native: int | None):
        self.conn = conn
        self.timeout_s = timeout_s
        self.native = native

    @contextlib.contextmanager
    def read(self) -> Iterator[Reader]:
        # InnoDB's consistent read: the snapshot is taken now, and every statement of the
        # read sees it; READ ONLY makes the server refuse a write in it. ROLLBACK leaves
        # the connection idle: no snapshot, no lock (not even a metadata lock) held.
        with driver_errors(self.timeout_s):
            self.conn.query("START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT")
        try:
            yield _MysqlReader(self.conn, self.timeout_s, self.native)
        finally:
            with contextlib.suppress(MySQLdb.Error):
                self.conn.rollback()


class MysqlAdapter(Adapter):
    dialect = "mysql"
    #: The wall clock in the session's time zone (UTC), in the form DATETIME literals take.
    clock_sql = "SELECT DATE_FORMAT(NOW(6), '%Y-%m-%d %H:%i:%s.%f')"
    #: EXPLAIN without ANALYZE plans the statement and runs nothing.
    explain_prefix = "EXPLAIN"
    exact_lookups = False
    #: the compiled reader's loops, loaded once in the readers' fork server
    reader_preload = ("remote_agent.adapters.mysql_preload",)

    def __init__(self, url: str, *, statement_timeout_s: float, arrow_reads: bool = False):
        """`arrow_reads`: read scan chunks into Arrow with compiled code (mysql_result.py, cast
        by mysql_arrow.py) on the session's own connection; otherwise through the converters."""
        super().__init__(url, statement_timeout_s=statement_timeout_s, arrow_reads=arrow_reads)
        if MySQLdb is None:
            raise SourceUnavailable(
                "reading MySQL or MariaDB needs the mysqlclient driver: pip install 'deltasieve[mysql]' "
                "(it builds against libmariadb: apt-get install pkg-config libmariadb-dev)"
            )
        parts = urlsplit(url)
        database = unquote(parts.path.lstrip("/"))
        if not parts.hostname or not database or "/" in database:
            raise BadRequest("MySQL URL must be mysql://USER[:PASSWORD]@HOST[:PORT]/DB (or mariadb://...)")
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            port = parts.port or 3306
            connect_timeout = int(float(options.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT_S)))
        except ValueError:
            raise BadRequest("MySQL URL: the port and connect_timeout must be numbers") from None
        self.user = unquote(parts.username or "")
        self._password = unquote(parts.password or "")
        self.where = f"{parts.hostname}:{port}/{database}"
        self.database = database
        self._connect_args: dict[str, Any] = {
            "host": parts.hostname,
            "port": port,
            "user": self.user,
            "password": self._password,
            "database": database,
            "charset": "utf8mb4",
            "connect_timeout": connect_timeout,
            "autocommit": False,
        }
        if "unix_socket" in options:
            self._connect_args["unix_socket"] = options["unix_socket"]
        for option in ("ssl_mode", "ssl_ca"):
            if option in options:
                self._connect_args[option] = options[option]
        #: Set by the first connection: whether the server is MariaDB (its timeout variable).
        self._mariadb: bool | None = None

    def _redact(self, text: str) -> str:
        return text.replace(self._password, "***") if self._password else text

    def _connect(self) -> Any:
        try:
            conn = MySQLdb.connect(**self._connect_args)
        except MySQLdb.Error as exc:
            message = self._redact(str(exc.args[-1] if exc.args else exc))
            raise SourceUnavailable(
                f"cannot connect to MySQL/MariaDB at {self.where} as {self.user or 'default user'}: {message}"
            ) from None
        try:
            if self._mariadb is None:
                conn.query("SELECT VERSION()")
                self._mariadb = "mariadb" in str(conn.store_result().fetch_row()[0][0]).lower()
            seconds = max(self.statement_timeout_s, 0.001)
            limit = (
                f"max_statement_time = {seconds:.3f}"
                if self._mariadb
                else f"max_execution_time = {max(1, round(seconds * 1000))}"
            )
            # A transaction left idle (an agent stalled mid-read) is ended after as long as a
            # statement may run (MariaDB; MySQL has no such bound, its wait_timeout applies).
            idle = f", idle_transaction_timeout = {max(1, round(seconds))}" if self._mariadb else ""
            conn.query("SET SESSION TRANSACTION READ ONLY")
            conn.query(f"SET SESSION time_zone = '+00:00', SESSION sql_mode = '{SQL_MODE}', SESSION {limit}{idle}")
        except MySQLdb.Error as exc:
            conn.close()
            raise SourceUnavailable(f"MySQL/MariaDB session set-up failed at {self.where}: {exc.args[-1]}") from None
        return conn

    schemas = True

    def change_token(self) -> SourceToken:
        return SourceToken(
            None,
            "MariaDB and MySQL give a SELECT-only user no exact change counter (the binary log's GTID position "
            "misses writes made with sql_log_bin=0; InnoDB's counters are statistics): every sync reads",
        )

    def describe(self, schemas: Sequence[str] | None = ()) -> list[TableInfo]:
        conn = self._connect()
        try:
            cursor = conn.cursor()
            cursor.execute("SELECT DATABASE()")
            default = cursor.fetchone()[0]
            if schemas is None:  # every database the login can see (information_schema shows no other)
                cursor.execute(
                    "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME NOT IN (%s, %s, %s, %s)",
                    _SYSTEM_DATABASES,
                )
                schemas = sorted(name for (name,) in cursor.fetchall() if name != default)
            # the URL's database, then the other databases --allow names (tables named database.table)
            wanted = list(dict.fromkeys([default, *schemas]))
            where = f"TABLE_SCHEMA IN ({', '.join(['%s'] * len(wanted))})"
            cursor.execute(
                f"SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE {where} "
                "AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED', 'VIEW') ORDER BY TABLE_SCHEMA, TABLE_NAME",
                wanted,
            )
            kinds: dict[tuple[str, str], TableKind] = {
                (schema, table): "view" if kind == "VIEW" else "table" for schema, table, kind in cursor.fetchall()
            }
            names = list(kinds)
            cursor.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE "
                f"FROM information_schema.COLUMNS WHERE {where} ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
                wanted,
            )
            columns: dict[tuple[str, str], list[ColumnInfo]] = {n: [] for n in names}
            for schema, table, name, data_type, column_type, nullable in cursor.fetchall():
                if (schema, table) not in columns:
                    continue
                type_, read_as = logical_type(data_type, column_type, mariadb=self._mariadb is not False)
                # a zero date reads as NULL, whatever the column's NOT NULL says
                may_be_null = nullable == "YES" or data_type.lower() in _DATES
                columns[schema, table].append(ColumnInfo(name, type_, may_be_null, column_type, read_as))
            # Unique indexes over whole columns (no prefix of a text column, no expression).
            cursor.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS "
                f"WHERE {where} AND NON_UNIQUE = 0 ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
                wanted,
            )
            indexes: dict[tuple[str, str, str], list] = {}
            for schema, table, index, column, sub_part in cursor.fetchall():
                indexes.setdefault((schema, table, index), []).append(None if sub_part is not None else column)
            primary: dict[tuple[str, str], tuple[str, ...]] = {}
            uniques: dict[tuple[str, str], list[tuple[str, ...]]] = {n: [] for n in names}
            for (schema, table, index), cols in indexes.items():
                if (schema, table) not in uniques or None in cols:
                    continue
                if index == "PRIMARY":
                    primary[schema, table] = tuple(cols)
                else:
                    uniques[schema, table].append(tuple(cols))
            # a table of the URL's database that --allow also names as database.table comes twice
            named = [(s, t, None) for s, t in names if s == default] + [(s, t, s) for s, t in names if s in schemas]
            return [
                TableInfo(
                    t if qualifier is None else f"{s}.{t}",
                    tuple(columns[s, t]),
                    primary.get((s, t), ()),
                    tuple(uniques[s, t]),
                    qualifier,
                    kinds[s, t],
                )
                for s, t, qualifier in named
            ]
        except MySQLdb.OperationalError as exc:
            raise SourceUnavailable(
                f"MySQL/MariaDB connection failed while reading the catalog: {self._redact(str(exc.args[-1]))}"
            ) from None
        finally:
            conn.close()

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        conn = self._connect()
        try:
            native = mysql_result.native_connection(conn) if self.arrow_reads else None
            if native is not None:
                # loaded (or, from a missing or stale build, compiled) before any transaction:
                # seconds spent inside one would hold its snapshot, and idle_transaction_timeout ends it
                mysql_result.load_reader()
            yield _MysqlSession(conn, self.statement_timeout_s, native)
        finally:
            with contextlib.suppress(MySQLdb.Error):
                conn.rollback()
            conn.close()

    def query_plan(self, session: Session, sql: str) -> list[str] | None:
        with session.read() as reader:
            rows = reader.rows(f"{self.explain_prefix} {sql}", limit=1000)
        return [" ".join(str(v) for v in row if v is not None) for row in rows]

    def key_order(self, column: ColumnInfo, ref: exp.Expression, unique: bool) -> exp.Expression:
        # A collation may hold 'a', 'A', 'á' and 'a ' equal; where two rows could hold such
        # values, order by the bytes, which tell them apart as Python does (no index helps).
        if column.read_as in _EWKB_FORMS and isinstance(ref, exp.Column):
            # a spatial column is compared with the EWKB read, which its stored form is not
            return sitesql.wrap_read_as(column.read_as, ref, self.dialect)
        if unique or column.type.kind != "text" or column.read_as:
            return ref
        return utf8_bytes(ref)

    def range_key(self, column: ColumnInfo, ref: exp.Expression, origin: str) -> exp.Expression | None:
        # Integers and dates compare as Python compares them; text by its UTF-8 bytes, which
        # is code point order, Python's order of str (`utf8_bytes`); bytes byte-wise (but
        # BINARY(n) pads with zero bytes, which then count). Not: decimals (a value with
        # more digits than its canonical scale), floats, timestamps of either kind (a zero
        # date reads as NULL), anything read through read_as.
        if column.read_as:
            return None
        kind = column.type.kind
        if kind in ("int", "date") or (kind == "bytes" and column.declared.lower().startswith(("varbinary", "blob"))):
            return ref
        if kind == "text" and not column.declared.lower().startswith(("enum", "set")):
            return utf8_bytes(ref)
        return None

    def can_lookup(self, key_types: Sequence[LogicalType]) -> bool:
        # A FLOAT read as its shortest decimal text would not match the stored single.
        return all(t.kind != "float" for t in key_types)

    def wire_type(self, column: ColumnInfo) -> pa.DataType | None:
        # The driver's values follow the column's type (int, float, Decimal, str, bytes,
        # date, datetime): Arrow reads them as the canonical type, refusing a decimal that
        # needs rounding. TIMESTAMP comes as a naive datetime in UTC (the session's zone),
        # booleans as 0/1 from BIT(1): those go value by value.
        if column.type.kind in ("timestamptz", "bool") or column.read_as:
            return None
        return column.type.arrow()

    def converter(self, column: ColumnInfo) -> Callable[[Any], Any]:
        return converter_for(column.type)
