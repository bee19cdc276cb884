"""PostgreSQL's errors of a read as the agent's, told apart by SQLSTATE (psycopg's and ADBC's alike).

A timeout, a lost or refused connection, a server going down or out of resources, a
transaction the server rolled back: a later read may pass (SourceUnavailable). Anything else
the server answers a statement with is a refusal that a retry meets again (SourceRefused):
a privilege the role lacks, a value that does not cast or print, SQL it does not take.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql as pgsql

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


#: Date and time types by OID, and the range of their values Python (hence the agent and
#: Spark) can hold: years 1 to 9999. PostgreSQL's run from 4713 BC to 5874897 AD, and infinity.
_HELD = {
    1082: ("date", "'0001-01-01'::date", "'9999-12-31'::date"),
    1114: ("timestamp", "'0001-01-01'::timestamp", "'9999-12-31 23:59:59.999999'::timestamp"),
    1184: ("timestamptz", "'0001-01-01 00:00:00+00'::timestamptz", "'9999-12-31 23:59:59.999999+00'::timestamptz"),
}


def unholdable(
    conn: psycopg.Connection, query: str, args: Sequence[Any] | None, columns: Sequence[Any]
) -> AgentError | None:
    """The error naming a value the driver could not hold (a date of 'infinity', a timestamp BC),
    with its column and its row, found by a second read of `query` (whose result has `columns`,
    the cursor's description) for a date or time beyond Python's years; None if none is found.

    The driver fails a whole fetch at such a value, before the agent sees its row: only a read
    that holds those columns as text can say which row it is.
    """
    dated = [(c.name, _HELD[c.type_code]) for c in columns if c.type_code in _HELD]
    if not dated:
        return None
    outside = pgsql.SQL(" OR ").join(
        pgsql.SQL("q.{} NOT BETWEEN {} AND {}").format(pgsql.Identifier(name), pgsql.SQL(low), pgsql.SQL(high))
        for name, (_, low, high) in dated
    )
    texts = {name for name, _ in dated}
    picked = pgsql.SQL(", ").join(
        pgsql.SQL("CAST(q.{} AS TEXT)" if c.name in texts else "q.{}").format(pgsql.Identifier(c.name)) for c in columns
    )
    locate = pgsql.SQL("SELECT {} FROM ({}) AS q WHERE {} LIMIT 1").format(picked, pgsql.SQL(query), outside)
    with conn.cursor() as cursor:
        found = cursor.execute(locate, args).fetchone()
    if found is None:
        return None
    row = {c.name: v for c, v in zip(columns, found)}
    name, (kind, _, _) = next((n, held) for n, held in dated if not _within(row[n]))
    return SourceValueRefused(
        f"column {name!r} holds {row[name]!r}, which no {kind} of Python or Spark can hold (their years run from 1 "
        f"to 9999), in the row {row}. Fix the value at the source, or leave the column out of the view "
        '("exclude_columns" on a table view or a mirror, or a view that does not select it)',
        engine=ENGINE,
        column=name,
    )


def _within(text: str | None) -> bool:
    """Whether a date or time's text (DateStyle ISO) is one Python holds: years 1 to 9999, no BC, not infinite.

    >>> _within("2024-02-29"), _within("infinity"), _within("0044-03-15 BC"), _within("10000-01-01"), _within(None)
    (True, False, False, False, True)
    """
    if text is None:
        return True
    year = text.split("-", 1)[0]
    return year.isdigit() and len(year) == 4 and year != "0000" and not text.endswith(" BC")
