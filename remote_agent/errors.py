"""Errors of the agent, under one root; each says whether retrying can help."""

from __future__ import annotations

from deltasieve_protocol import error_codes


class AgentError(Exception):
    """Root of the agent's errors. `status` is the HTTP status the API answers with."""

    status = 400
    transient = False
    #: What kind of error, for programs (ErrorOut.code): one of deltasieve_protocol/error_codes.py.
    code: str = error_codes.BAD_REQUEST

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def fields(self) -> dict:
        """What the error answer holds besides `detail`: its code and what goes with it."""
        return {"code": self.code}


class BadRequest(AgentError):
    """The request is malformed or asks for something the agent does not allow."""

    status = 400


class Forbidden(AgentError):
    """The site query touches a table or column this agent does not expose."""

    status = 403
    code = error_codes.FORBIDDEN


class UnsupportedQuery(AgentError):
    """The site query is not a plain SELECT-project-join the agent will run."""

    status = 422
    code = error_codes.UNSUPPORTED_QUERY


class SourceDataError(AgentError):
    """The source's data breaks an assumption (duplicate or NULL key, unreadable value)."""

    status = 409
    code = error_codes.SOURCE_DATA


class SchemaChanged(SourceDataError):
    """Columns of the site query are no longer of the types the view was registered with.

    `changes` lists them, one {"table", "column", "old", "new"} each (new: None when gone):
    the warehouse reads them to tell or to take the change (deltasieve_protocol.models.SchemaChangeOut).
    """

    code = error_codes.SCHEMA_CHANGED

    def __init__(self, message: str, changes: list[dict]):
        super().__init__(message)
        self.changes = changes

    def fields(self) -> dict:
        return {"code": self.code, "changes": self.changes}


class SourceRefused(AgentError):
    """The database refused a statement of the read: a value or type it cannot cast, a privilege
    the agent's role lacks, SQL it does not take; any error of the read but a lost connection or
    a timeout (SourceUnavailable). A retry meets the same refusal: the view or the source must change.

    `table` and `column` say where, when the database or the agent can tell (`located`);
    `source_message` is the database's own words.
    """

    status = 424
    code = error_codes.SOURCE_ERROR

    def __init__(
        self, source_message: str, *, engine: str = "the database", table: str | None = None, column: str | None = None
    ):
        self.source_message = source_message
        self.engine = engine
        self.table = table
        self.column = column
        self.tables: tuple[str, ...] = (table,) if table else ()
        super().__init__(self._told())

    def _told(self) -> str:
        where = ""
        if self.tables:
            where = f" of table {self.tables[0]!r}" if len(self.tables) == 1 else f" of tables {list(self.tables)!r}"
        if self.column:
            where += f", column {self.column!r}"
        return f"{self.engine} refused the read{where}: {self.source_message}"

    def located(self, tables: tuple[str, ...]) -> SourceRefused:
        """Say which tables the refused read reads, when the database did not name its table."""
        if not self.table and tables:
            self.tables = tuple(dict.fromkeys(tables))
            self.table = tables[0] if len(self.tables) == 1 else None
            self.message = self._told()
            self.args = (self.message,)
        return self

    def fields(self) -> dict:
        return {"code": self.code, "table": self.table, "column": self.column, "source_message": self.source_message}

    def __reduce__(self):  # pickled by a reader process (readahead.py): rebuilt with its fields
        return (_rebuilt, (type(self), self.__dict__.copy()))


def _rebuilt(cls: type[SourceRefused], state: dict) -> SourceRefused:
    exc = cls.__new__(cls)
    exc.__dict__.update(state)
    exc.args = (state["message"],)
    return exc


class SourceDenied(SourceRefused, Forbidden):
    """The database refused the read for want of a privilege (a table or column the role may not SELECT)."""

    status = 403
    code = error_codes.SOURCE_ERROR


class SourceValueRefused(SourceRefused, SourceDataError):
    """The database could not give a value of the read (a cast or an output that fails on the data)."""

    status = 409
    code = error_codes.SOURCE_ERROR


class SourceUnavailable(AgentError):
    """The legacy database could not be reached or timed out; worth a retry."""

    status = 503
    transient = True
    code = error_codes.SOURCE_UNAVAILABLE


class ReaderLost(AgentError):
    """The agent's reader process (see readahead.py) ended without finishing its scan."""

    status = 503
    transient = True
    code = error_codes.READER_LOST


class UnknownSite(AgentError):
    """A control message names its site by a reference this agent does not hold (deltasieve_protocol/siterefs.py):
    the warehouse sends it again in full."""

    status = 409
    code = error_codes.UNKNOWN_SITE


class Gone(AgentError):
    """A sketch session the agent no longer holds (expired, dropped, or the agent restarted)."""

    status = 410
    code = error_codes.SESSION_GONE


class Busy(AgentError):
    """Too many extractions at once; retry after a while."""

    status = 429
    transient = True
    code = error_codes.BUSY


def changed_column(origin: str | None, name: str, old: str, new: str | None) -> dict:
    """One changed column as SchemaChanged lists it; `origin` is "table.column" (None: unknown).

    >>> changed_column("orders.amount", "amount", "decimal(14,2)", "decimal(16,4)")
    {'table': 'orders', 'column': 'amount', 'old': 'decimal(14,2)', 'new': 'decimal(16,4)'}
    >>> changed_column(None, "who", "text", None)["table"] is None
    True
    """
    table, _, column = origin.rpartition(".") if origin else ("", "", name)
    return {"table": table or None, "column": column, "old": old, "new": new}


#: Characters of one value quoted in an error message's example row.
EXAMPLE_VALUE_CHARS = 80


def example_row(row: dict) -> str:
    """A row for an error message, long values cut: {'id': 7, 'name': 'Ann'}."""
    parts = []
    for name, value in row.items():
        text = repr(value)
        if len(text) > EXAMPLE_VALUE_CHARS:
            text = text[:EXAMPLE_VALUE_CHARS] + "..."
        parts.append(f"{name!r}: {text}")
    return "{" + ", ".join(parts) + "}"
