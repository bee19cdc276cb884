"""The Spark session the warehouse works with."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from pyspark.sql import SparkSession

#: Shuffle partitions per local core. Spark's 200 (with adaptive execution coalescing them)
#: suits a cluster; on one machine a sync is many small jobs, and their task overhead is
#: most of a sync's time: two per core, without adaptive re-planning, made small syncs
#: about 15 % and 200k-row syncs 20-25 % faster than 8 partitions with it.
LOCAL_PARTITIONS_PER_CORE = 2


def local_cores(master: str) -> int | None:
    """Cores of a local master (local, local[4], local[*], local[4,2]); None for a cluster.

    >>> local_cores("local[3]"), local_cores("local"), local_cores("spark://host:7077")
    (3, 1, None)
    """
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\*|\d+)(?:,\d+)?\]", master)
    if not match:
        return None
    return os.cpu_count() or 1 if match.group(1) == "*" else int(match.group(1))


#: Driver heap bounds on a local master, where the driver also runs every task: a quarter
#: of the machine, so that a 1M-row view of 1 KB rows (about 1 GB to classify and cache)
#: fits; 2g ran out of heap there.
LOCAL_DRIVER_MEMORY_MIN_MIB = 2048
LOCAL_DRIVER_MEMORY_MAX_MIB = 16384
#: With a cluster master the tasks run on executors; the driver only plans and collects.
CLUSTER_DRIVER_MEMORY = "2g"


def default_driver_memory(master: str, machine_bytes: int | None) -> str:
    """The driver heap to ask for when SERVICE_SPARK_DRIVER_MEMORY is not set.

    >>> default_driver_memory("local[*]", 24 * 2**30), default_driver_memory("local[2]", 4 * 2**30)
    ('6144m', '2048m')
    >>> default_driver_memory("local[*]", 256 * 2**30), default_driver_memory("spark://h:7077", 24 * 2**30)
    ('16384m', '2g')
    """
    if local_cores(master) is None:
        return CLUSTER_DRIVER_MEMORY
    quarter = (machine_bytes or 0) // 4 // 2**20
    return f"{min(max(quarter, LOCAL_DRIVER_MEMORY_MIN_MIB), LOCAL_DRIVER_MEMORY_MAX_MIB)}m"


#: Where a container's memory limit is found (cgroup v2, then v1).
CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def machine_memory_bytes() -> int | None:
    """Memory this process may use: physical memory, or a container's lower limit (None if unknown)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = None
    limits = [physical] if physical else []
    for name in CGROUP_LIMIT_FILES:
        try:
            text = open(name).read().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" (v2) means no limit
            limits.append(int(text))
        break
    return min(limits) if limits else None


def build_session(
    master: str = "local[*]",
    *,
    app_name: str = "deltasieve",
    driver_memory: str | None = None,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Start (or reuse) the Spark session; `master` may be a cluster URL.

    Timestamps are read and written in UTC so that the canonical encoding does not depend
    on the machine's time zone. Python workers run the interpreter that runs the driver.
    Local masters get few shuffle partitions and no adaptive execution; a cluster keeps
    Spark's defaults. `extra_conf` (SERVICE_SPARK_CONF) overrides either. Without
    `driver_memory`, `default_driver_memory` sizes the heap.
    """
    cores = local_cores(master)
    driver_memory = driver_memory or default_driver_memory(master, machine_memory_bytes())
    tuning = (
        {"spark.sql.adaptive.enabled": "true"}
        if cores is None
        else {
            "spark.sql.shuffle.partitions": str(LOCAL_PARTITIONS_PER_CORE * cores),
            "spark.sql.adaptive.enabled": "false",
        }
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.compression.codec", "zstd")
        # Standard microsecond timestamps (not INT96), so readers other than Spark see the zone.
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    for key, value in {**tuning, **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def warm_up(session: SparkSession) -> None:
    """Run a first small job: Spark's first job costs seconds (code generation, Python
    workers started for an Arrow UDF), which a sync should not pay."""

    def same(batches):
        yield from batches

    session.range(1_000).mapInArrow(same, "id bigint").groupBy().count().collect()


#: Seconds to wait for the gateway process to exit when the JVM stops answering.
JVM_EXIT_WAIT_S = 5.0


def jvm_alive(session: SparkSession) -> bool:
    """Whether the session's JVM still runs and its context is not stopped.

    On a local master an out-of-memory error in a task makes Spark exit the whole JVM;
    the Python side keeps a session object whose every call is then refused.
    """
    context = session.sparkContext
    process = getattr(context._gateway, "proc", None)
    if process is not None and process.poll() is not None:
        return False
    try:
        return not context._jsc.sc().isStopped()
    except Exception:  # py4j's errors: with the JVM process still running, not a reason to replace it
        if process is None:
            return False
        # The gateway process is the spark-submit wrapper: after its JVM is killed it lingers
        # a moment before it exits, and meanwhile the dead JVM must not pass for alive.
        try:
            process.wait(timeout=JVM_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return True
        return False


def forget_dead_session() -> None:
    """Drop PySpark's singletons of a session whose JVM died, so that a new one can start.

    PySpark keeps one gateway and one active context per process and would hand the dead
    ones out again; these are the class attributes it checks (PySpark 4.x).
    """
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        try:
            gateway.shutdown()
        except Exception:  # the JVM end is gone already; only local sockets are closed
            pass
    with SparkContext._lock:
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
