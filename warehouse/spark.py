"""The Spark session the warehouse works with."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

#: Shuffle partitions: Spark's 200 suits a cluster; small local jobs drown in task overhead.
DEFAULT_SHUFFLE_PARTITIONS = 8


def build_session(master: str = "local[*]", *, app_name: str = "deltasieve", driver_memory: str = "2g", shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS, extra_conf: dict[str, str] | None = None) -> SparkSession:
    """Start (or reuse) the Spark session; `master` may be a cluster URL.

    Timestamps are read and written in UTC so that the canonical encoding does not depend
    on the machine's time zone. Python workers run the interpreter that runs the driver.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.parquet.compression.codec", "zstd")
        # Standard microsecond timestamps (not INT96), so readers other than Spark see the zone.
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
