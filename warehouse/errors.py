"""Errors of the warehouse side, under one root; each marked terminal or transient."""

from __future__ import annotations

from enum import StrEnum

from deltasieve_protocol.error_codes import HASH_KEY_MISSING, SOURCE_ERROR


class Remedy(StrEnum):
    """A way out of a failure that goes through the service's API. The warehouse names it and
    says it in words; the service adds how, in its own terms (service/remedies.py)."""

    #: Change the view's definition to fit the source as it is now.
    REDEFINE = "redefine"
    #: Let the view take lossless widenings of its columns' types.
    EVOLVE = "evolve"


class WarehouseError(Exception):
    """Root of the warehouse's errors."""

    transient = False
    #: What kind of failure, for programs (the sync record's error_code); None: not told apart.
    code: str | None = None
    #: The ways out the service adds to the message, in its own terms.
    remedies: tuple[Remedy, ...] = ()

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class AgentUnavailable(WarehouseError):
    """The agent could not be reached, timed out or broke the stream off; a retry may help."""

    transient = True
    code = "agent_unreachable"


class AgentBusy(AgentUnavailable):
    """The agent runs its maximum of extractions already (429): a request may wait for a slot."""


class AgentRejected(WarehouseError):
    """The agent refused the request (bad token, forbidden table, unsupported query...)."""

    def __init__(
        self, message: str, status: int | None = None, code: str | None = None, changes: list[dict] | None = None
    ):
        super().__init__(message)
        self.status = status
        #: The agent's code for the refusal and, for "schema_changed", the changed columns
        #: (deltasieve_protocol.models.ErrorOut); None from an agent that predates them.
        self.agent_code = code
        self.changes = changes or []
        if status == 401:  # the agent does not take the source's token
            self.code = "agent_refused"
        elif code == HASH_KEY_MISSING:  # a view hashes a column, and its agent has no key to hash with
            self.code = code


class SourceError(WarehouseError):
    """The source's database refused a read of the sync (a value or type it cannot cast, a
    privilege the agent's role lacks, SQL it does not take): a retry meets the same refusal.

    `table`, `column` and `source_message` are the agent's (deltasieve_protocol.models.ErrorOut): where,
    when known, and the database's own words.
    """

    code = SOURCE_ERROR

    def __init__(
        self, message: str, table: str | None = None, column: str | None = None, source_message: str | None = None
    ):
        super().__init__(message)
        self.table = table
        self.column = column
        self.source_message = source_message


class SourceDataError(WarehouseError):
    """Source data breaks an assumption of the view (duplicate or NULL key, changed column)."""


class SchemaChanged(WarehouseError):
    """A column the view reads changed at its source in a way its schema policy does not take."""

    code = "schema_changed"


class TableChanged(WarehouseError):
    """A table view's table gained or lost columns (pipeline/table_follow.py): the view follows it."""

    code = "schema_changed"

    def __init__(self, message: str, changes: list[dict]):
        super().__init__(message)
        self.changes = changes


class ProtocolError(WarehouseError):
    """The agent's answer is not a well-formed frame sequence (truncated or corrupt)."""

    transient = True


class StorageError(WarehouseError):
    """The versioned store is missing or inconsistent."""


class FormatError(StorageError):
    """Stored state is in a format this deltasieve does not read: written by another
    deltasieve, newer or from before 0.1.0 (formats.py). `found` is the format number the
    data names (None: none), `expected` the one this deltasieve reads."""

    code = "stored_format"

    def __init__(self, message: str, found: object = None, expected: int | None = None):
        super().__init__(message)
        self.found = found
        self.expected = expected


class SchemaUnavailable(WarehouseError):
    """A source's agent did not give its schema (unreachable or refusing); `source` names it."""

    def __init__(self, source: str, cause: WarehouseError):
        super().__init__(f"cannot read the schema of source {source!r}: {cause.message}")
        self.source = source
        self.transient = cause.transient
        self.code = cause.code


class Cancelled(WarehouseError):
    """The sync was cancelled (the service was asked to stop it) before it committed."""

    code = "cancelled"


class DestinationError(WarehouseError):
    """A destination (destinations/) failed to take a sync's changes; `transient` when a retry may help."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


class SecretUnavailable(WarehouseError):
    """A secret the catalog refers to cannot be had: its environment variable is not set, its
    file cannot be read, or the key that encrypted it is not the service's. Terminal: the
    operator fixes the environment."""

    code = "secret_unavailable"
