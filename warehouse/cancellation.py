"""A sync's stop request: raised at its next step, its agent calls closed, its Spark jobs cancelled.

The service asks (`request`); the sync looks (`check`) at each step and at each chunk it
reads from an agent, and whatever blocks — an agent that has not answered yet, a Spark job
— is ended by the closers registered for it. The commit is the point of no return: once a
sync has passed it, a request is refused and the sync ends as it would have.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from warehouse.errors import Cancelled

log = logging.getLogger("warehouse.cancellation")


class Cancellation:
    """One sync's stop request; thread-safe.

    >>> c = Cancellation()
    >>> closed = []
    >>> c.on_request(lambda: closed.append("agent"))
    >>> c.requested, c.request(), c.request(), closed
    (False, True, True, ['agent'])
    >>> c.check()
    Traceback (most recent call last):
    warehouse.errors.Cancelled: cancelled
    >>> late = Cancellation()
    >>> late.point_of_no_return()
    >>> late.request(), late.requested
    (False, False)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requested = threading.Event()
        self._committing = False
        self._closers: list[Callable[[], None]] = []

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def request(self) -> bool:
        """Ask the sync to stop; False when it is past its commit (it ends as it would have)."""
        with self._lock:
            if self._committing:
                return False
            first = not self._requested.is_set()
            self._requested.set()
            closers = list(self._closers) if first else []
        for close in closers:
            _close_quietly(close)
        return True

    def on_request(self, close: Callable[[], None]) -> None:
        """Run `close` when a stop is requested (at once if it already was)."""
        with self._lock:
            if not self._requested.is_set():
                self._closers.append(close)
                return
        _close_quietly(close)

    def check(self) -> None:
        """Raise Cancelled if a stop was requested."""
        if self._requested.is_set():
            raise Cancelled("cancelled")

    def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, or raise Cancelled as soon as a stop is requested."""
        if self._requested.wait(seconds):
            raise Cancelled("cancelled")

    def point_of_no_return(self) -> None:
        """The sync commits now: raise Cancelled if a stop was requested, else refuse later ones."""
        with self._lock:
            self.check()
            self._committing = True


def _close_quietly(close: Callable[[], None]) -> None:
    """Run a closer; one that fails (an engine already gone, a connection already shut) has
    nothing left to stop, and must not keep the others from running nor fail the requester.

    >>> def gone():
    ...     raise ConnectionRefusedError(111, "Connection refused")
    >>> _close_quietly(gone)
    """
    try:
        close()
    except Exception as exc:
        log.debug("a stop's closer failed: %s: %s", type(exc).__name__, exc)
