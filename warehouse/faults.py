"""Test-only fault injection: end the process abruptly at a named point of a sync.

Point `DELTASIEVE_KILL_FILE` at a file in the service's environment. When a sync reaches
a checkpoint whose name the file holds, the process removes the file (so the kill fires
once) and kills itself with SIGKILL, as a power cut or an out-of-memory kill would. The
crash tests arm the file, run a sync, and restart the service on the same data directory
to prove that a sync is atomic. In normal operation the variable is unset and a
checkpoint costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

KILL_FILE_ENV = "DELTASIEVE_KILL_FILE"
#: A file holding `spark:POINT` kills only Spark's JVM at that point, as its own exit on
#: java.lang.OutOfMemoryError would; the service process lives on.
SPARK_TARGET = "spark"

#: Where a sync can be cut, in the order a sync reaches them.
POINTS = (
    "exchange_units",  # the agent's answer is streaming in
    "fragments_written",  # the new fragments and statistics are staged
    "delta_written",  # the view's delta is staged too
    "before_visible",  # the version (its sample too) is moved into place; CURRENT still names the old one
    "after_visible",  # CURRENT names the new version; the catalog has not heard yet
)
#: Where publishing can be cut (service/publishing.py): the view committed and its delta is
#: read, its destination not yet applied; and the destination applied, the catalog not told.
PUBLISHING = ("before_publish", "after_publish")
#: A point where only the JVM is killed in the tests: a site starts planning (group_hash
#: plans on Spark; the later steps of a small sync may need no Spark at all).
PLANNING = "plan_groups"


def checkpoint(point: str) -> None:
    path = os.environ.get(KILL_FILE_ENV)
    if not path:
        return
    armed = Path(path)
    try:
        target, _, name = armed.read_text().strip().rpartition(":")
        if name != point:
            return
        armed.unlink()
    except OSError:
        return
    if target == SPARK_TARGET:
        _kill_spark_jvm()
    else:
        os.kill(os.getpid(), signal.SIGKILL)


def _kill_spark_jvm() -> None:
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        raise RuntimeError("fault point set for the Spark JVM, but this process started none")
    process = gateway.proc
    process.kill()
    process.wait()
