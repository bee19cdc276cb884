"""The audit of a database's own statement log: everything the agent's role ran only read.

Shared by the PostgreSQL and MariaDB security tests; each says how its dialect quotes,
which first words a reading session may use, how a read-only transaction begins, what
counts as a write or a lock, and which statements only hand the client the rows of a read
inside them (PostgreSQL's `COPY (query) TO STDOUT`, audited as that query). PostgreSQL's
dialect is here (`POSTGRES`), where the unit tests hold it to what it must refuse.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    #: Patterns of string literals and quoted names, blanked before any word is looked at:
    #: they may say anything (the hostile payloads' do).
    quoted: Sequence[str]
    #: The first words a reading session may start a statement with.
    reading: frozenset[str]
    #: The first word of a transaction's beginning, and whether a beginning is read-only.
    begin: str
    read_only: Callable[[str], bool]
    #: Anything that writes, locks, changes the session's read-only state or reaches outside.
    writes_or_locks: re.Pattern
    #: The read inside a statement that only sends its rows to the client, audited in the
    #: statement's place; None: the statement is not one (`copy_to_stdout`).
    unwrap: Callable[[str], str | None] = lambda bare: None


def problems(statements: Iterable[str], dialect: Dialect) -> list[str]:
    """What in `statements` was not a read, one line each (empty: all of them read).

    >>> d = Dialect([r"'(?:[^']|'')*'"], frozenset({"SELECT", "BEGIN"}), "BEGIN",
    ...             lambda s: "READ ONLY" in s.upper(), re.compile(r"\\bDELETE\\b", re.I))
    >>> problems(["SELECT 'DELETE'", "BEGIN READ ONLY", "BEGIN", "SELECT 1 FROM t; DELETE FROM t", "DROP t"], d)
    ['a transaction not begun read-only: BEGIN', 'writes or locks (DELETE): SELECT 1 FROM t; DELETE FROM t', 'starts with DROP: DROP t']
    """
    found = []
    for sql in statements:
        bare = sql
        for pattern in dialect.quoted:
            bare = re.sub(pattern, "''", bare)
        bare = dialect.unwrap(bare) or bare
        first = bare.split(None, 1)[0].upper().rstrip(";") if bare.split() else ""
        if first not in dialect.reading:
            found.append(f"starts with {first}: {sql[:200]}")
        elif first == dialect.begin and not dialect.read_only(bare):
            found.append(f"a transaction not begun read-only: {sql[:200]}")
        elif dialect.writes_or_locks.search(bare):
            found.append(f"writes or locks ({dialect.writes_or_locks.search(bare).group(0)}): {sql[:200]}")
    return found


_COPY_HEAD = re.compile(r"\s*COPY\s*\(\s*(?=(?:SELECT|WITH)\b)", re.I)
#: What may follow the query: the client's end of the copy, and at most its format.
_COPY_TAIL = re.compile(r"\s*TO\s+STDOUT(?:\s*(?:WITH\s*)?\(\s*FORMAT\s+\w+\s*\))?\s*;?\s*", re.I)


def copy_to_stdout(bare: str) -> str | None:
    """The query of `COPY (SELECT ...) TO STDOUT [(FORMAT f)]`, a read whose rows go to the
    client; None for any other statement: a COPY from anywhere, to a file or a program, of a
    whole table, or followed by anything but its format.

    `bare` has its quoted strings and names blanked, so that no parenthesis in them can end
    the query early.

    >>> copy_to_stdout("COPY (SELECT a FROM t WHERE (b > '')) TO STDOUT (FORMAT binary)")
    "SELECT a FROM t WHERE (b > '')"
    >>> [copy_to_stdout(s) for s in ("COPY t FROM STDIN", "COPY (SELECT 1) TO ''", "COPY (SELECT 1) TO PROGRAM ''",
    ...                              "COPY t TO STDOUT", "COPY (SELECT 1) TO STDOUT; COPY t FROM STDIN")]
    [None, None, None, None, None]
    """
    head = _COPY_HEAD.match(bare)
    if head is None:
        return None
    depth = 1
    for end in range(head.end(), len(bare)):
        depth += {"(": 1, ")": -1}.get(bare[end], 0)
        if depth == 0:
            break
    else:
        return None
    if _COPY_TAIL.fullmatch(bare, end + 1) is None:
        return None
    return bare[head.end() : end].strip()


#: PostgreSQL: anything that writes, locks, changes the session's read-only state or reaches
#: outside the database. COPY is one wherever it stands, but as the whole statement
#: `copy_to_stdout` takes apart.
POSTGRES_WRITES_OR_LOCKS = re.compile(
    r"\b(INSERT|UPDATE|DELETE|MERGE|CREATE|ALTER|DROP|TRUNCATE|COPY|LOCK|GRANT|REVOKE|VACUUM|ANALYZE|REINDEX|CLUSTER"
    r"|REFRESH|CALL|DO|LISTEN|NOTIFY|IMPORT|SECURITY\s+LABEL|COMMENT\s+ON|PREPARE\s+TRANSACTION|READ\s+WRITE|read_only"
    r"|nextval|setval|set_config|pg_advisory\w*|lo_\w+|pg_read\w*|pg_write\w*|pg_file\w*|pg_sleep\w*|dblink\w*"
    r"|pg_terminate_backend|pg_cancel_backend|pg_reload_conf|pg_rotate_logfile|txid_current|pg_current_xact_id"
    r"|FOR\s+(NO\s+KEY\s+)?UPDATE|FOR\s+(KEY\s+)?SHARE)\b",
    re.I,
)
#: How the audit reads PostgreSQL's log: quotes, the words a reading session starts with, and
#: the ADBC driver's `COPY (SELECT ...) TO STDOUT (FORMAT binary)` audited as its SELECT.
POSTGRES = Dialect(
    quoted=[r"'(?:[^']|'')*'", r'"(?:[^"]|"")*"'],
    reading=frozenset({"SELECT", "WITH", "DECLARE", "FETCH", "CLOSE", "BEGIN", "COMMIT", "ROLLBACK", "SHOW", "SET"}),
    begin="BEGIN",
    read_only=lambda bare: "READ ONLY" in bare.upper(),
    writes_or_locks=POSTGRES_WRITES_OR_LOCKS,
    unwrap=copy_to_stdout,
)
