"""The Spark session the warehouse works with."""

from __future__ import annotations

import os
import re
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


def build_session(master: str = "local[*]", *, app_name: str = "deltasieve", driver_memory: str = "2g", extra_conf: dict[str, str] | None = None) -> SparkSession:
    """Start (or reuse) the Spark session; `master` may be a cluster URL.

    Timestamps are read and written in UTC so that the canonical encoding does not depend
    on the machine's time zone. Python workers run the interpreter that runs the driver.
    Local masters get few shuffle partitions and no adaptive execution; a cluster keeps
    Spark's defaults. `extra_conf` (SERVICE_SPARK_CONF) overrides either.
    """
    cores = local_cores(master)
    tuning = {"spark.sql.adaptive.enabled": "true"} if cores is None else {
        "spark.sql.shuffle.partitions": str(LOCAL_PARTITIONS_PER_CORE * cores),
        "spark.sql.adaptive.enabled": "false",
    }
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
