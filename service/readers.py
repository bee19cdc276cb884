"""Readers of a view's deltas in flight, so that retention leaves what they stream alone."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterable, Iterator


class Readers:
    """Counts the change-feed and delta readers of each view; retention removes a view's syncs
    only while it has none (`excluding`), and a reader that comes meanwhile waits for the
    removals under way (a batch of views' records and files, a short step).

    >>> readers = Readers()
    >>> with readers.reading("v"):
    ...     with readers.excluding("v") as alone:
    ...         alone
    False
    >>> with readers.excluding("v") as alone:
    ...     alone
    True
    """

    def __init__(self) -> None:
        self._count: Counter[str] = Counter()
        self._removing: set[str] = set()
        self._changed = threading.Condition()

    def hold(self, view: str) -> None:
        """Count one more reader of `view` (after a removal under way has ended)."""
        with self._changed:
            self._changed.wait_for(lambda: view not in self._removing)
            self._count[view] += 1

    def release(self, view: str) -> None:
        with self._changed:
            self._count[view] -= 1
            if self._count[view] <= 0:
                del self._count[view]
            self._changed.notify_all()

    @contextlib.contextmanager
    def reading(self, view: str) -> Iterator[None]:
        self.hold(view)
        try:
            yield
        finally:
            self.release(view)

    def streamed(self, view: str, body: Iterable[bytes]) -> Iterator[bytes]:
        """`body`, with the reader `hold` already counted released once it is streamed (or dropped)."""
        try:
            yield from body
        finally:
            self.release(view)

    @contextlib.contextmanager
    def excluding(self, view: str) -> Iterator[bool]:
        """Whether `view` has no reader; while True, no reader starts on it."""
        with self._changed:
            alone = self._count[view] == 0 if view in self._count else True
            if alone:
                self._removing.add(view)
        try:
            yield alone
        finally:
            if alone:
                with self._changed:
                    self._removing.discard(view)
                    self._changed.notify_all()
