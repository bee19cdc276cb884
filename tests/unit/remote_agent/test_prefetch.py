"""prefetched: items in order, read at most `depth` ahead in a thread that always ends."""

from __future__ import annotations

import threading
import time

import pytest

from remote_agent.prefetch import prefetched


class Source:
    """A generator that records what it produced, and in which thread it ran and ended."""

    def __init__(self, n: int, fail_at: int | None = None):
        self.n = n
        self.fail_at = fail_at
        self.produced = 0
        self.threads: set[str] = set()
        self.closed_in: str | None = None

    def __iter__(self):
        try:
            for i in range(self.n):
                self.threads.add(threading.current_thread().name)
                if i == self.fail_at:
                    raise RuntimeError(f"failed at {i}")
                self.produced += 1
                yield i
        finally:
            self.closed_in = threading.current_thread().name


def wait_for(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_items_come_in_order_from_another_thread():
    source = Source(50)
    assert list(prefetched(iter(source))) == list(range(50))
    assert source.threads == {"prefetch"}
    assert source.closed_in == "prefetch"


@pytest.mark.parametrize("depth", [1, 2])
def test_reads_at_most_depth_ahead(depth):
    source = Source(10)
    items = prefetched(iter(source), depth=depth)
    assert next(items) == 0
    wait_for(lambda: source.produced == 1 + depth)
    time.sleep(0.2)  # the producer has had every chance to read further
    assert source.produced == 1 + depth
    items.close()


def test_the_producers_error_is_raised_where_its_item_would_come():
    source = Source(10, fail_at=3)
    items = prefetched(iter(source))
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="failed at 3"):
        next(items)
    assert source.closed_in == "prefetch"


def test_leaving_early_stops_and_joins_the_producer():
    source = Source(1_000)
    items = prefetched(iter(source))
    assert next(items) == 0
    items.close()
    # close() returns once the thread is joined: the source's cleanup has run, in its thread
    assert source.closed_in == "prefetch"
    assert source.produced <= 2
    assert not any(t.name == "prefetch" for t in threading.enumerate())


def test_a_consumer_that_never_asks_starts_no_thread():
    source = Source(3)
    prefetched(iter(source))
    assert source.produced == 0
    assert not any(t.name == "prefetch" for t in threading.enumerate())
