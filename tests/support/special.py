"""The suite's second service: the settings of the modules that inject faults.

test_agent_failures needs short agent timeouts and few retries; test_spark_engine a kill
file that reaches Spark's JVM, and a heap of its own; test_crashes the kill file, a short
rotation of the sketch tables' secret, and a process it can SIGKILL and start again on
the same data. None of these changes what the other modules see (an unarmed kill file
costs a lookup, a healthy agent answers well within the timeouts, a rotation only makes
a sketch table be rebuilt sooner, a low SERVICE_SMALL_SYNC_ROWS only sends the views of more
than a few thousand rows through Spark, exact as on Arrow), nor does the file its syncs' OpenLineage events are
written to (test_orchestration reads it), so they share one service (`special_service` in
tests/conftest.py): one Spark JVM started and one first sync of a fresh JVM paid (10-30 s
here) instead of one per module.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from warehouse.faults import KILL_FILE_ENV
from workloads.harness import Api, free_port, start_service

AGENT_READ_TIMEOUT_S = 3
AGENT_RETRIES = 2
AGENT_RETRY_BACKOFF_S = 0.2
#: A call that trickles bytes (never idle for the read timeout) still ends at this deadline.
AGENT_DEADLINE_S = 20
#: The heap the service is given (the default is a quarter of the machine: test_spark_memory.py).
HEAP = "3g"
#: Syncs a sketch table's secret serves here (a short rotation, to see one happen).
SKETCH_ROTATION = 3
#: Stored plus delta rows up to which a view syncs on Arrow here (SERVICE_SMALL_SYNC_ROWS): low,
#: so that the fault modules' views of a few thousand rows run the Spark path that the main
#: service runs only above 250,000 rows, and a view crosses the threshold in a few syncs
#: (test_small_syncs).
SMALL_SYNC_ROWS = 1_500
#: Seconds between the periodic checks of the sources' agents: longer than the suite.
SOURCE_CHECK_INTERVAL_S = 86_400


class SpecialService:
    """The service process, which a test may kill and start again on the same data and port."""

    def __init__(self, root: Path, logs_dir: Path):
        self.data_dir = root / "warehouse"
        self.kill_file = root / "kill-at"
        #: every sync's OpenLineage events, one per line (the file transport)
        self.lineage_file = root / "lineage.ndjson"
        self.logs_dir = logs_dir
        self.port = free_port()  # kept across restarts, so every module's client stays valid
        self.proc = None
        self.api = None
        #: whether a sync the kill interrupted is retried after the restart (the service's
        #: default): off here, so that a test sees the interrupted state it armed
        self.retry_interrupted = False
        self.start()

    @property
    def url(self) -> str:
        return self.proc.url

    def env(self) -> dict[str, str]:
        """Faults armed through `kill_file`, tight agent calls, HEAP, SKETCH_ROTATION, no periodic
        source check, interrupted syncs retried only when `retry_interrupted` says so, lineage
        events into `lineage_file`, SMALL_SYNC_ROWS."""
        return {
            KILL_FILE_ENV: str(self.kill_file),
            "SERVICE_SPARK_DRIVER_MEMORY": HEAP,
            "SERVICE_AGENT_READ_TIMEOUT_S": str(AGENT_READ_TIMEOUT_S),
            "SERVICE_AGENT_RETRIES": str(AGENT_RETRIES),
            "SERVICE_AGENT_RETRY_BACKOFF_S": str(AGENT_RETRY_BACKOFF_S),
            "SERVICE_AGENT_DEADLINE_S": str(AGENT_DEADLINE_S),
            "SERVICE_SKETCH_SEED_ROTATION": str(SKETCH_ROTATION),
            # no periodic check of the sources' agents after the one at start: its request
            # would take a fault that test_agent_failures plans for a sync's connection
            "SERVICE_SOURCE_CHECK_INTERVAL_S": str(SOURCE_CHECK_INTERVAL_S),
            "SERVICE_RETRY_INTERRUPTED": str(self.retry_interrupted).lower(),
            "SERVICE_OPENLINEAGE_FILE": str(self.lineage_file),
            "SERVICE_SMALL_SYNC_ROWS": str(SMALL_SYNC_ROWS),
        }

    def start(self) -> None:
        self.proc = start_service(self.data_dir, self.logs_dir, port=self.port, env=self.env())
        self.api = Api(self.proc.url)

    def reap(self) -> None:
        """Kill what is left of the process group (Spark's JVM outlives a SIGKILLed parent)."""
        self.api.close()
        try:
            os.killpg(self.proc.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.proc.wait(timeout=30)
        self.proc.stop()

    def restart(self, retry_interrupted: bool = False) -> None:
        self.reap()
        self.retry_interrupted = retry_interrupted
        self.start()

    def stop(self) -> None:
        self.api.close()
        self.proc.stop()
