"""What an adapter reads its change token with (remote_agent/change_tokens.py says what a token is)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

C = TypeVar("C")
T = TypeVar("T")


@dataclass(frozen=True)
class SourceToken:
    """What an adapter read: a token, or None and why there is none."""

    value: str | None
    reason: str | None = None


class KeptConnection(Generic[C]):
    """A connection the agent keeps open for reading tokens, opened at the first use and
    again after a failure; `serial` counts the openings (a reopened connection's tokens
    never equal the earlier ones')."""

    def __init__(self, connect: Callable[[], C], close: Callable[[C], None]):
        self._connect, self._close = connect, close
        self._conn: C | None = None
        self._lock = threading.Lock()
        self.serial = 0

    def __getstate__(self) -> dict:
        """Copied (to the agent's reader process) unopened: a connection stays with its process."""
        return {"_connect": self._connect, "_close": self._close, "serial": 0}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _conn=None, _lock=threading.Lock())

    def use(self, work: Callable[[C, int], T]) -> T:
        """`work(connection, serial)`, on the kept connection; a failure closes it."""
        with self._lock:
            if self._conn is None:
                self._conn = self._connect()
                self.serial += 1
            try:
                return work(self._conn, self.serial)
            except BaseException:
                self._drop()
                raise

    def reopen(self) -> None:
        """Close the connection: the next use opens a new one, with a new serial."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                self._close(conn)
            except Exception:  # closing what failed: nothing more to do
                pass
