"""PostgreSQL's errors of a read as the agent's, told apart by SQLSTATE (psycopg's and ADBC's alike).

A timeout, a lost or refused connection, a server going down or out of resources, a
transaction the server rolled back: a later read may pass (SourceUnavailable). Anything else
the server answers a statement with is a refusal that a retry meets again (SourceRefused):
a privilege the role lacks, a value that does not cast or print, SQL it does not take.
"""

from __future__ import annotations

from remote_agent.errors import (
    AgentError,
    SourceDataError,
    SourceDenied,
    SourceRefused,
    SourceUnavailable,
    SourceValueRefused,
)

ENGINE = "PostgreSQL"
#: query_canceled: the statement timeout, or a cancel from outside.
CANCELED = "57014"
#: insufficient_privilege: a table or column the role may not read.
DENIED = "42501"
#: data_exception: a value that does not cast, print or fit.
VALUE_CLASS = "22"
#: Classes a later read may pass: connection exception, transaction rollback (serialization
#: failure, a standby's recovery conflict), insufficient resources, operator intervention
#: (shutdown), system error.
TRANSIENT_CLASSES = frozenset({"08", "40", "53", "57", "58"})


def read_error(
    state: str | None,
    message: str,
    timeout_s: float,
    *,
    link_failed: bool,
    value_failed: bool = False,
    table: str | None = None,
    column: str | None = None,
) -> AgentError:
    """The agent's error for a failed statement of a read.

    Args:
        state: the SQLSTATE the server answered, None when none came (the driver's own error).
        link_failed: without a SQLSTATE, whether the driver says the connection failed.
        value_failed: without a SQLSTATE, whether the driver could not hold a value (a date of
            'infinity'): the source's data, not a refusal of the server.
        table, column: where, when the server says (its error's diagnostic fields).

    >>> type(read_error("42501", "permission denied for table t", 1, link_failed=False)).__name__
    'SourceDenied'
    >>> read_error("0A000", "not supported", 1, link_failed=False, table="t").message
    "PostgreSQL refused the read of table 't': not supported"
    >>> type(read_error(None, "server closed the connection", 1, link_failed=True)).__name__
    'SourceUnavailable'
    """
    if state == CANCELED:
        if "timeout" in message:  # the two causes share a SQLSTATE; only the text tells them apart
            return SourceUnavailable(f"{ENGINE} statement exceeded the {timeout_s:g} s statement timeout")
        return SourceUnavailable(f"{ENGINE} statement was cancelled: {message}")
    if (state is None and link_failed) or (state is not None and state[:2] in TRANSIENT_CLASSES):
        return SourceUnavailable(f"{ENGINE} connection failed during a read: {message}")
    if state is None and value_failed:
        return SourceDataError(f"{ENGINE} value cannot be read: {message}")
    kind = SourceRefused
    if state == DENIED:
        kind = SourceDenied
    elif state is not None and state.startswith(VALUE_CLASS):
        kind = SourceValueRefused
    return kind(message, engine=ENGINE, table=table, column=column)
