"""Errors of the agent, under one root; each says whether retrying can help."""

from __future__ import annotations


class AgentError(Exception):
    """Root of the agent's errors. `status` is the HTTP status the API answers with."""

    status = 400
    transient = False
    #: What kind of error, for programs (ErrorOut.code); None: told by its status alone.
    code: str | None = None

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def fields(self) -> dict:
        """What the error answer holds besides `detail`: its code and what goes with it."""
        return {"code": self.code} if self.code else {}


class BadRequest(AgentError):
    """The request is malformed or asks for something the agent does not allow."""

    status = 400


class Forbidden(AgentError):
    """The site query touches a table or column this agent does not expose."""

    status = 403


class UnsupportedQuery(AgentError):
    """The site query is not a plain SELECT-project-join the agent will run."""

    status = 422


class SourceDataError(AgentError):
    """The source's data breaks an assumption (duplicate or NULL key, unreadable value)."""

    status = 409


class SchemaChanged(SourceDataError):
    """Columns of the site query are no longer of the types the view was registered with.

    `changes` lists them, one {"table", "column", "old", "new"} each (new: None when gone):
    the warehouse reads them to tell or to take the change (protocol.models.SchemaChangeOut).
    """

    code = "schema_changed"

    def __init__(self, message: str, changes: list[dict]):
        super().__init__(message)
        self.changes = changes

    def fields(self) -> dict:
        return {"code": self.code, "changes": self.changes}


class SourceUnavailable(AgentError):
    """The legacy database could not be reached or timed out; worth a retry."""

    status = 503
    transient = True


class ReaderLost(AgentError):
    """The agent's reader process (see readahead.py) ended without finishing its scan."""

    status = 503
    transient = True


class UnknownSite(AgentError):
    """A control message names its site by a reference this agent does not hold (protocol/siterefs.py):
    the warehouse sends it again in full."""

    status = 409
    code = "unknown_site"


class Gone(AgentError):
    """A sketch session the agent no longer holds (expired, dropped, or the agent restarted)."""

    status = 410


class Busy(AgentError):
    """Too many extractions at once; retry after a while."""

    status = 429
    transient = True


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
