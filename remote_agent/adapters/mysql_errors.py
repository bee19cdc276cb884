"""MySQL and MariaDB errors as the agent's: told by the server's error number, never by its words."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from remote_agent.errors import SourceDenied, SourceRefused, SourceUnavailable, SourceValueRefused

try:  # the `mysql` extra, as in mysql.py
    import MySQLdb
except ImportError:  # pragma: no cover - the suite installs it
    MySQLdb = None

#: Server errors that mean "this role may not do that".
_DENIED = {1142, 1143, 1044, 1045}  # table, column, database, login
#: A statement the server stopped at its time limit: MariaDB's 1969 (max_statement_time),
#: MySQL's 3024 (max_execution_time).
_TIMED_OUT = {1969, 3024}
#: The client library's own errors (CR_*: no connection, the server gone away, a lost
#: connection mid-query), [low, high).
CLIENT_ERRORS = (2000, 3000)
#: Server errors of a connection or a statement ended from outside, which a later read may
#: pass: too many connections (1040), shutdown (1053), aborted connection (1152), network
#: reads and writes (1158-1161), a lock wait or deadlock (1205, 1213), a killed query or
#: connection (1317, 1927), MySQL's idle disconnect (4031).
_LOST = {1040, 1053, 1152, 1158, 1159, 1160, 1161, 1205, 1213, 1317, 1927, 4031}


@contextlib.contextmanager
def driver_errors(timeout_s: float) -> Iterator[None]:
    """The driver's errors as the agent's, told by the server's error number: a timeout or a
    lost connection (a later read may pass), or a refusal of the statement that a retry meets
    again: a privilege, a value or type it cannot cast (1366, 4078...), SQL it does not take."""
    try:
        yield
    except MySQLdb.Error as exc:
        number = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        text = str(exc.args[-1]) if exc.args else str(exc)
        if number in _TIMED_OUT:
            raise SourceUnavailable(f"MySQL/MariaDB statement exceeded the {timeout_s:g} s statement timeout") from None
        if number is None or number in _LOST or CLIENT_ERRORS[0] <= number < CLIENT_ERRORS[1]:
            raise SourceUnavailable(f"MySQL/MariaDB connection failed during a read: {text}") from None
        kind = SourceRefused
        if number in _DENIED:
            kind = SourceDenied
        elif isinstance(exc, MySQLdb.DataError):
            kind = SourceValueRefused
        raise kind(f"{text} (error {number})", engine="MySQL/MariaDB") from None
