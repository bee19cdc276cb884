"""The publisher's workers: a slow destination of one kind does not hold another kind's, and
one destination is never worked on by two threads at once."""

from __future__ import annotations

import threading
import time

from service.destination_workers import DestinationWorkers


def test_kinds_run_side_by_side_and_a_destination_once_at_a_time():
    done = threading.Event()
    workers = DestinationWorkers(2, lambda key: done.set())
    release = threading.Event()
    delta_ran = threading.Event()
    try:
        assert workers.submit("postgres", ("v", "postgres wh t"), lambda: release.wait(10))
        # the same destination again while its job runs: refused, never a second thread on it
        assert not workers.submit("postgres", ("v", "postgres wh t"), lambda: None)
        assert workers.busy(("v", "postgres wh t"))
        # the view's Delta table is applied while the PostgreSQL one hangs
        assert workers.submit("delta", ("v", "delta /t/v"), delta_ran.set)
        assert delta_ran.wait(5), "a slow PostgreSQL destination held the Delta table"
        assert workers.busy(("v", "postgres wh t"))
        release.set()
        deadline = time.monotonic() + 5
        while workers.busy(("v", "postgres wh t")):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert done.is_set()
        assert workers.submit("postgres", ("v", "postgres wh t"), lambda: None)  # free again
    finally:
        release.set()
        workers.stop()


def test_a_failing_job_frees_its_destination():
    workers = DestinationWorkers(1, lambda key: None)

    def fails() -> None:
        raise RuntimeError("down")

    try:
        assert workers.submit("delta", ("v", "d"), fails)
        deadline = time.monotonic() + 5
        while workers.busy(("v", "d")):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        workers.stop()
