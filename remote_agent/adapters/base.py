"""What every database adapter provides: schema description and read-only streaming reads."""

from __future__ import annotations

import contextlib
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from sqlglot import exp

from deltasieve_protocol.schema import ColumnInfo, TableInfo
from deltasieve_protocol.types import LogicalType
from remote_agent.adapters.tokens import SourceToken
from remote_agent.errors import BadRequest, UnsupportedQuery

__all__ = ["Adapter", "ColumnInfo", "TableInfo"]

#: Rows fetched from the database per round trip of the cursor.
DEFAULT_FETCH_ROWS = 5_000


class Reader(ABC):
    """A read-only transaction: every statement sees the same state of the database."""

    @abstractmethod
    def stream(
        self, sql: str, params: Sequence[Any] = (), fetch_rows: int = DEFAULT_FETCH_ROWS
    ) -> Iterator[list[tuple]]:
        """Run one SELECT and yield its rows in lists of at most `fetch_rows`."""

    def rows(self, sql: str, params: Sequence[Any] = (), *, limit: int) -> list[tuple]:
        """All rows of one SELECT that returns at most `limit` rows (LIMIT, or bound keys), in one fetch.

        One fetch is one statement, so the statement timeout bounds the whole read.
        """
        return list(itertools.chain.from_iterable(self.stream(sql, params, fetch_rows=limit + 1)))

    def arrow(
        self,
        sql: str,
        params: Sequence[Any] = (),
        *,
        types: Sequence[LogicalType],
        schema: pa.Schema,
        key: Sequence[int] = (),
    ) -> pa.Table | None:
        """The rows `rows()` would return, as canonical columns of `schema`, without a Python value each.

        `types` are the columns' logical types; `key` the positions of the key columns,
        whose values in the last row a scan binds back as the next chunk's cursor
        (`Adapter.rebind`), as it would the values `rows()` hands over. None (the default):
        the reader has no such path, or some value needs the adapter's converter; read
        the rows with `rows()`.
        The read may be a transaction of its own: use it for a read of one statement.
        """
        return None


class Session(ABC):
    """One read-only connection; each `read()` is a transaction of its own, ended on exit.

    Between two reads the connection holds no transaction, hence no lock and no snapshot.
    """

    @abstractmethod
    def read(self) -> contextlib.AbstractContextManager[Reader]:
        """Begin a read-only transaction; leaving the block ends it."""


class Adapter(ABC):
    """One legacy database. Subclasses are registered by URL scheme in `adapters/__init__.py`."""

    #: sqlglot dialect the adapter's SQL is written in.
    dialect: str = ""
    #: SELECT of one row, one column: the database's own clock as text in the form its
    #: timestamp columns compare with (the timestamp strategy's watermark); None: no clock.
    clock_sql: str | None = None
    #: What turns a SELECT into its query plan without running it (read-only); None: no plans.
    explain_prefix: str | None = None
    #: Whether the database stamps row versions with transaction ids the agent can read
    #: and compare (the row_version strategy).
    row_versions: bool = False
    #: Whether a lookup by key (`WHERE k IN (...)`) matches only rows whose key equals a
    #: bound one as Python compares them; False (a case-blind collation, say): the agent
    #: drops the rows it did not ask for.
    exact_lookups: bool = True
    #: Whether every scan's values go through RowConverter, so that a column a view reads
    #: as a stronger type than declared (column_types) is read strictly; False: the reads
    #: are cast by Arrow (a directory of dump files), and such a view is refused.
    strict_reads: bool = True

    def __init__(self, url: str, *, statement_timeout_s: float, arrow_reads: bool = False):
        self.url = url
        self.statement_timeout_s = statement_timeout_s
        #: read scan chunks straight into Arrow where the adapter can (`Reader.arrow`)
        self.arrow_reads = arrow_reads

    #: Modules the readers' fork server imports before it forks a reader (readahead.start):
    #: what a reader of this adapter would otherwise load at every scan.
    reader_preload: tuple[str, ...] = ()

    #: Whether tables outside the connection's default schema can be read (PostgreSQL
    #: schemas, MySQL databases): `describe(schemas)` names them schema.table.
    schemas: bool = False

    @abstractmethod
    def describe(self, schemas: Sequence[str] | None = ()) -> list[TableInfo]:
        """Every table (and view) the read-only connection can read, with columns, types and keys.

        Those of the connection's default schema by their names; with `schemas` (an adapter
        whose `schemas` is True), also every readable table of those, named schema.table;
        with None, of every schema the connection can read but the system's.
        """

    def describe_tables(self, names: Sequence[str], schemas: Sequence[str] | None = ()) -> list[TableInfo]:
        """The tables of `describe(schemas)` named `names` (those that exist): what one site
        query reads, without describing the rest of a database of thousands of tables. By
        default `describe`'s, filtered; an adapter that can ask for the few overrides it."""
        wanted = set(names)
        return [t for t in self.describe(schemas) if t.name in wanted]

    @abstractmethod
    def session(self) -> contextlib.AbstractContextManager[Session]:
        """Open a read-only connection, closed on exit."""

    @contextlib.contextmanager
    def read(self) -> Iterator[Reader]:
        """Open a connection with one read-only transaction."""
        with self.session() as session, session.read() as reader:
            yield reader

    @abstractmethod
    def converter(self, column: ColumnInfo) -> Callable[[Any], Any]:
        """Function turning a raw value of this column into its canonical Python value."""

    def wire_type(self, column: ColumnInfo) -> pa.DataType | None:
        """The Arrow type the driver's values of this column are read as, a batch at a time.

        Arrow must read every value the driver can hand over for this column exactly as
        `converter` would (after `columns.finish`), or refuse it; None (the default):
        the column is converted value by value.
        """
        return None

    def key_order(self, column: ColumnInfo, ref: exp.Expression, unique: bool) -> exp.Expression:
        """The key column `ref` as chunks order and cut it, and a grouped query groups it.

        Keyset pagination compares keys in the database, and the agent tells a chunk's last
        key from the next by Python's equality: the two must agree on which values are
        equal, or rows sharing a key as the database sees it would be skipped or read
        twice. `unique`: the column comes from a table whose unique key lies in the query's
        key, so no two rows hold values the database holds equal. The default: the column
        as it is (an index on it serves the order).
        """
        return ref

    def can_lookup(self, key_types: Sequence[LogicalType]) -> bool:
        """Whether rows can be found by binding canonical key values in a WHERE clause."""
        return True

    def range_key(self, column: ColumnInfo, ref: exp.Expression, origin: str) -> exp.Expression | None:
        """The key column `ref` (`origin`: "table.column") as an expression the database orders as Python orders its values.

        A ranged re-read (strategies/range_checksum.py) bounds the key in the WHERE clause
        while the agent places each row in a range by Python's order of the canonical
        values: both must agree, or a row would be read in no range or in the wrong one.
        None (the default): no such guarantee, the request reads the whole site query.
        """
        return None

    def bind(self, value: Any) -> Any:
        """A canonical value as a statement parameter."""
        return value

    def rebind(self, value: Any) -> Any:
        """A value as the driver read it, as a parameter comparing equal to the stored value."""
        return value

    def source_clock(self, session: Session) -> str | None:
        """The database's clock now, as `clock_sql` reads it (None when the adapter has none)."""
        if self.clock_sql is None:
            return None
        with session.read() as reader:
            value = reader.rows(self.clock_sql, limit=1)[0][0]
        return None if value is None else str(value)

    def query_plan(self, session: Session, sql: str) -> list[str] | None:
        """The database's plan of a SELECT (not run), one line per step; None when the adapter has none."""
        if self.explain_prefix is None:
            return None
        with session.read() as reader:
            rows = reader.rows(f"{self.explain_prefix} {sql}", limit=1000)
        return [str(r[-1]) for r in rows]

    def require_row_versions(self) -> None:
        """Refuse (422) a row_version request on a database without readable row versions."""
        if not self.row_versions:
            raise UnsupportedQuery(
                f"row_version needs PostgreSQL (its row versions' xmin and snapshots); this agent reads a {self.dialect} "
                "database: use another strategy, e.g. timestamp or auto"
            )

    def source_snapshot(self, session: Session) -> dict:
        """The database's current snapshot: xmin, xmax, xip (64-bit transaction ids), the
        server's identity (`system_identifier`) and WAL positions (`wal_lsn`, and on a standby
        `replayed_lsn`: warehouse/strategies/row_version/xid_snapshots.py), each None when it cannot be read."""
        self.require_row_versions()
        raise NotImplementedError

    def changed_since_condition(self, alias: str, since_xmin: int) -> Any:
        """The condition (a sqlglot expression) keeping the rows of table `alias` written since `since_xmin`."""
        self.require_row_versions()
        raise NotImplementedError

    def change_token(self) -> SourceToken:
        """The database's change token now (remote_agent/change_tokens.py), or why it has none."""
        return SourceToken(None, f"a {self.dialect} source gives no change token")

    def pinned(self, dumps: dict[str, str] | None) -> Adapter:
        """The adapter a request reads through: a database is read as it is, so naming dump
        files is refused; a directory of dumps fixes each table's file (files.py)."""
        if dumps:
            raise BadRequest(f"this agent reads a {self.dialect} database, not dump files: `dumps` names no file here")
        return self

    def dumps_read(self, tables: Sequence[str]) -> dict[str, str] | None:
        """The dump file of each of `tables` a request reads (None: a database, no files)."""
        return None

    def check(self) -> None:
        """Fail fast (SourceUnavailable) if the database cannot be opened."""
        self.describe()
