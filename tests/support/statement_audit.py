"""The audit of a database's own statement log: everything the agent's role ran only read.

Shared by the PostgreSQL and MariaDB security tests; each says how its dialect quotes,
which first words a reading session may use, how a read-only transaction begins and what
counts as a write or a lock.
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
        first = bare.split(None, 1)[0].upper().rstrip(";") if bare.split() else ""
        if first not in dialect.reading:
            found.append(f"starts with {first}: {sql[:200]}")
        elif first == dialect.begin and not dialect.read_only(bare):
            found.append(f"a transaction not begun read-only: {sql[:200]}")
        elif dialect.writes_or_locks.search(bare):
            found.append(f"writes or locks ({dialect.writes_or_locks.search(bare).group(0)}): {sql[:200]}")
    return found
