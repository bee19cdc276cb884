"""The Spark session the warehouse works with."""

from __future__ import annotations

import atexit
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

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
    ship_code: bool = True,
) -> SparkSession:
    """Start (or reuse) the Spark session; `master` may be a cluster URL.

    Timestamps are read and written in UTC so that the canonical encoding does not depend
    on the machine's time zone. Python workers run the interpreter that runs the driver.
    Local masters get few shuffle partitions and no adaptive execution; a cluster keeps
    Spark's defaults. `extra_conf` (SERVICE_SPARK_CONF) overrides either. Without
    `driver_memory`, `default_driver_memory` sizes the heap. On a cluster, unless
    `ship_code` is false (deltasieve installed on the workers), the session sends the code
    its Python tasks import to the executors (`ship_executor_code`). The executors run
    PYSPARK_PYTHON, by default the driver's interpreter path, which must then exist on
    every worker with pyarrow, numpy and xxhash.
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
        # Pools share the cores fairly: a sync's jobs (the default pool) are not queued behind
        # a background build's whole stage (sketch_prep.POOL); within a pool jobs stay FIFO.
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    for key, value in {**tuning, **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if cores is None and ship_code:
        ship_executor_code(session)
    return session


def warm_up(session: SparkSession) -> None:
    """Run a first small job: Spark's first job costs seconds (code generation, Python
    workers started for an Arrow UDF), which a sync should not pay."""

    def same(batches):
        yield from batches

    session.range(1_000).mapInArrow(same, "id bigint").groupBy().count().collect()


#: The packages whose functions run in Python tasks on the executors: mapInArrow and the
#: like call the warehouse's hashing, grouping and sketches, which use the protocol's
#: row encoding and fingerprints.
EXECUTOR_PACKAGES = ("warehouse", "deltasieve_protocol")
#: The name under which a session on a cluster sends those packages to its executors.
CODE_ARCHIVE = "deltasieve-code.zip"

_archive: Path | None = None


def code_archive() -> Path:
    """A zip of EXECUTOR_PACKAGES as this process imported them (made once per process)."""
    global _archive
    if _archive is None or not _archive.exists():
        directory = Path(tempfile.mkdtemp(prefix="deltasieve-code-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        path = directory / CODE_ARCHIVE
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name in EXECUTOR_PACKAGES:
                init = importlib.import_module(name).__file__
                if init is None:  # a namespace package: nothing says which files are its own
                    raise RuntimeError(f"package {name} has no __init__.py to ship from")
                package = Path(init).parent
                for source in sorted(package.rglob("*.py")):
                    archive.write(source, source.relative_to(package.parent))
        _archive = path
    return _archive


def executor_import_error(message: str) -> str | None:
    """What to tell the user when a Python task failed for want of a module on an executor.

    `message` is the failure as Spark reports it (a PythonException with the worker's
    traceback); None when it is not a missing module.

    >>> print(executor_import_error("PythonException: ... ModuleNotFoundError: No module named 'deltasieve_protocol'"))
    the Spark executors cannot import deltasieve_protocol: leave SERVICE_SPARK_SHIP_CODE on (the default) so that the service sends its code, or install deltasieve for the Python that PYSPARK_PYTHON names on every worker
    >>> print(executor_import_error("ModuleNotFoundError: No module named 'xxhash'"))
    the Spark executors cannot import xxhash: PYSPARK_PYTHON must name a Python with deltasieve's dependencies (pyarrow, numpy, xxhash, ...) on every worker
    >>> executor_import_error("java.lang.OutOfMemoryError: Java heap space") is None
    True
    """
    found = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", message)
    if not found:
        return None
    module = found.group(1)
    if module.split(".")[0] in EXECUTOR_PACKAGES:
        return (
            f"the Spark executors cannot import {module}: leave SERVICE_SPARK_SHIP_CODE on (the default) so that "
            "the service sends its code, or install deltasieve for the Python that PYSPARK_PYTHON names on every worker"
        )
    return (
        f"the Spark executors cannot import {module}: PYSPARK_PYTHON must name a Python with deltasieve's "
        "dependencies (pyarrow, numpy, xxhash, ...) on every worker"
    )


def ship_executor_code(session: SparkSession) -> None:
    """Send EXECUTOR_PACKAGES to the executors of `session`, once per context.

    A cluster's executors start Python workers that know nothing of this process's
    sys.path; without the code, every task that runs one of our functions fails with
    "No module named 'warehouse'".
    """
    context = session.sparkContext
    if CODE_ARCHIVE not in (context._python_includes or []):
        context.addPyFile(str(code_archive()))


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
