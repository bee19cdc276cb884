"""The service's Spark session, started again when its JVM dies.

An out-of-memory error in a task ends Spark's whole JVM on a local master. Without a
restart every later sync would fail with a refused connection while /health still said
ok. Syncs take the session at their start and ask, when they fail, whether the engine
died under them, so that their error says so.
"""

from __future__ import annotations

import logging
import threading

from pyspark.sql import SparkSession

from service.settings import ServiceSettings
from warehouse.spark import build_session, forget_dead_session, jvm_alive, warm_up

log = logging.getLogger("service.engine")

ENGINE_LOST = (
    "the warehouse's Spark engine stopped during this sync (its JVM exited; the service log says why, "
    "most often Java heap space: raise SERVICE_SPARK_DRIVER_MEMORY). The engine has been restarted and "
    "the view is unchanged; sync again"
)


class SparkEngine:
    """Holds the current session; `generation` counts the sessions started so far."""

    def __init__(self, settings: ServiceSettings):
        self.settings = settings
        self._lock = threading.Lock()
        self.generation = 0
        self.session = self._build()

    def _build(self) -> SparkSession:
        s = self.settings
        session = build_session(
            s.spark_master,
            driver_memory=s.spark_driver_memory,
            extra_conf=s.spark_conf,
            ship_code=s.spark_ship_code,
        )
        threading.Thread(target=self._warm_up, args=(session,), name="spark-warm-up", daemon=True).start()
        return session

    @staticmethod
    def _warm_up(session: SparkSession) -> None:
        """Spark's first job, run beside the service's start rather than in the first sync."""
        try:
            warm_up(session)
        except Exception as exc:  # a session that died meanwhile is replaced by the next sync
            log.warning("Spark's warm-up job failed: %s", exc)

    def current(self) -> tuple[SparkSession, int]:
        """A live session and its generation; a dead one is replaced first."""
        with self._lock:
            if not jvm_alive(self.session):
                self._restart("found dead before a sync")
            return self.session, self.generation

    def lost(self, generation: int) -> bool:
        """Whether the session of `generation` died (it is replaced when it has not been yet)."""
        with self._lock:
            if generation != self.generation:
                return True
            if jvm_alive(self.session):
                return False
            self._restart("died during a sync")
            return True

    def _restart(self, why: str) -> None:
        log.error(
            "Spark's JVM %s (see the lines above for the cause, often java.lang.OutOfMemoryError); starting a new session",
            why,
        )
        forget_dead_session()
        self.session = self._build()
        self.generation += 1
        log.warning("Spark session %d started", self.generation)
