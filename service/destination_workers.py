"""Worker threads that apply destinations at the same time, never two on one destination.

Each kind of destination (Delta tables, PostgreSQL tables) has its own few daemon threads,
so a slow or unreachable PostgreSQL warehouse holds only PostgreSQL work: a view's Delta
table is applied beside it, not after it. A job is submitted under its destination's key
(view, place); while one is queued or running under a key, another is refused, so a
destination is only ever worked on by one thread, and the syncs it is handed stay in order.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("service.publishing")

Key = tuple[str, str]
Job = tuple[Key, Callable[[], None]]


class DestinationWorkers:
    """`per_kind` daemon threads for each kind; `done(key)` is called after every job (it may submit again)."""

    def __init__(self, per_kind: int, done: Callable[[Key], None]):
        self.per_kind = max(1, per_kind)
        self._done = done
        self._lock = threading.Lock()
        self._busy: set[Key] = set()
        self._queues: dict[str, queue.SimpleQueue[Job | None]] = {}
        self._threads: list[threading.Thread] = []

    def busy(self, key: Key) -> bool:
        """Whether a job of destination `key` is queued or running."""
        with self._lock:
            return key in self._busy

    def submit(self, kind: str, key: Key, job: Callable[[], None]) -> bool:
        """Run `job` on a thread of `kind`, unless destination `key` has one already (False)."""
        with self._lock:
            if key in self._busy:
                return False
            self._busy.add(key)
            jobs = self._queues.get(kind)
            if jobs is None:  # a kind's threads start with its first job
                jobs = self._queues[kind] = queue.SimpleQueue()
                for i in range(self.per_kind):
                    thread = threading.Thread(target=self._work, args=(jobs,), name=f"publish-{kind}-{i}", daemon=True)
                    thread.start()
                    self._threads.append(thread)
        jobs.put((key, job))
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """End every thread once its job is done (waiting at most `timeout` seconds in all)."""
        with self._lock:
            for jobs in self._queues.values():
                for _ in range(self.per_kind):
                    jobs.put(None)
            threads = list(self._threads)
        per_thread = timeout / max(1, len(threads))
        for thread in threads:
            thread.join(per_thread)

    def _work(self, jobs: queue.SimpleQueue[Job | None]) -> None:
        while (item := jobs.get()) is not None:
            key, job = item
            try:
                job()
            except Exception:  # the thread outlives whatever went wrong: the publisher looks again later
                log.exception("publishing: destination %s of view %s failed", key[1], key[0])
            finally:
                with self._lock:
                    self._busy.discard(key)
            self._done(key)
