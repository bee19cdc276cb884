"""Running an iterator one item ahead of its consumer, in a thread of its own.

The agent's scans read a chunk of rows from the database, then convert and hash it. The
drivers release the GIL while the database works (SQLite's steps, PostgreSQL's network
waits), so reading the next chunk in a thread while the current one is hashed and sent
overlaps the two. At most `depth` items are read ahead: with chunks of rows, memory holds
the consumer's chunk and `depth` more, whatever the size of the table.

The producer thread owns the iterator for its whole life (a chunk's transaction begins
and ends in that thread), and is stopped and joined before `prefetched` returns, however
the consumer leaves (end, error, or closing the generator early): the caller may use the
connection again as soon as the loop is over.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: Items read ahead by default: one chunk in the making while the consumer works on its own.
DEFAULT_DEPTH = 1
#: Seconds between the producer's checks of whether the consumer left while it waits for room.
_POLL_S = 0.05

_END = object()


class _Failed:
    """An exception raised by the producer, carried to the consumer."""

    def __init__(self, error: BaseException):
        self.error = error


def prefetched(items: Iterable[T], depth: int = DEFAULT_DEPTH) -> Iterator[T]:
    """The items of `items`, in order, produced by a thread at most `depth` items ahead.

    An exception of the producer is raised in the consumer, where the item would have come.

    >>> list(prefetched(iter(range(5))))
    [0, 1, 2, 3, 4]
    >>> def failing():
    ...     yield 1
    ...     raise ValueError("boom")
    >>> it = prefetched(failing())
    >>> next(it)
    1
    >>> next(it)
    Traceback (most recent call last):
    ...
    ValueError: boom
    """
    if depth < 1:
        raise ValueError("depth must be at least 1")
    handoff: queue.Queue = queue.Queue()
    room = threading.Semaphore(depth)  # a permit per item the producer may hold unconsumed
    stop = threading.Event()

    def produce() -> None:
        source = iter(items)
        try:
            while True:
                while not room.acquire(timeout=_POLL_S):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                try:
                    item = next(source)
                except StopIteration:
                    handoff.put(_END)
                    return
                handoff.put(item)
        except BaseException as exc:  # handed to the consumer, which raises it
            handoff.put(_Failed(exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()  # in this thread: a generator's cleanup (ending a transaction) runs where it ran

    def consume() -> Iterator[T]:
        # Started here, at the first item asked for: a consumer that never asks starts no thread.
        thread = threading.Thread(target=produce, name="prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item = handoff.get()
                room.release()
                if item is _END:
                    return
                if isinstance(item, _Failed):
                    raise item.error
                yield item
        finally:
            stop.set()
            thread.join()

    return consume()
