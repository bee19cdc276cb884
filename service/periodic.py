"""A background thread that runs one round of some upkeep every so many seconds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("service.periodic")


class Periodic:
    """Runs `round()` every `interval_s` seconds (the first at start when `at_start`) until
    stopped; a round that raises is logged and the next one tries again."""

    def __init__(self, name: str, interval_s: float, round: Callable[[], object], *, at_start: bool = False):
        self.name = name
        self.interval_s = interval_s
        self.round = round
        self.at_start = at_start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 20) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _loop(self) -> None:
        if not self.at_start and self._stop.wait(self.interval_s):
            return
        while not self._stop.is_set():
            try:
                self.round()
            except Exception:  # one failed round says nothing of the next
                log.exception("%s: a round failed", self.name)
            if self._stop.wait(self.interval_s):
                return
