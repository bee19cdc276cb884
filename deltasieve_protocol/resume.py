"""Resuming a full read after a failure: which keys a resumed extract can start after.

A full read of the site query (an extract with no units and no tuple hashes) comes back in
key order, the agent reading it by keyset pagination (remote_agent/chunks.py). When the
answer breaks off, the warehouse keeps the rows of the whole frames it received and its
retry sends the extract again with `resume_after`, the key of the last row it kept; the
agent then reads the rows strictly after that key, compared by the database as between
two chunks, and names the answer so (`RESUMED_HEADER`). An agent that does not name it
read from the start (it predates the field, or cannot resume by this key), and the
warehouse replaces what it kept with that answer.

The key travels as JSON in the control frame, so only keys whose canonical values JSON
carries exactly, and that the database compares as bound parameters exactly as it stores
them, can be resumed after: integers and text. Others (floats, decimals, dates and
times, bytes, a column read as another type) are read from the start again.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Response header of an extract that honoured `resume_after` (its rows follow that key).
RESUMED_HEADER = "X-Resumed-After"
#: Logical types of the key columns a read can be resumed after.
RESUMABLE_KINDS = ("int", "text")


def resumable_value(kind: str, value: object) -> bool:
    """Whether `value`, a key column's value of logical type `kind` from JSON, can be resumed after.

    >>> resumable_value("int", 7), resumable_value("text", "a"), resumable_value("int", True)
    (True, True, False)
    >>> resumable_value("int", "7"), resumable_value("float", 1.5), resumable_value("text", None)
    (False, False, False)
    """
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "text":
        return isinstance(value, str)
    return False


def resumable_key(kinds: Sequence[str], after: Sequence[object]) -> bool:
    """Whether a read can be resumed after the key `after` of key columns of logical types `kinds`.

    >>> resumable_key(["int", "text"], [3, "x"]), resumable_key(["int"], [3, 4]), resumable_key(["date"], ["2024-01-01"])
    (True, False, False)
    """
    return len(kinds) == len(after) and all(resumable_value(k, v) for k, v in zip(kinds, after))
