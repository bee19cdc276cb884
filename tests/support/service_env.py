"""The JVM options and Spark properties of the services and JVMs the test suites start: the
main suite (tests/conftest.py) and the orchestrators' (tests/orchestrators/conftest.py), which
runs in virtualenvs of its own and so cannot load the main suite's conftest."""

from __future__ import annotations

import os

#: JVM options of every JVM the suite starts (the services' Spark, the in-process Spark of
#: the unit tests, the standalone cluster): the client compiler only and the serial
#: collector. The suite's syncs are short jobs on small tables, where C2's compilations and
#: G1's threads compete with the work for two cores: measured here on an idle machine, 18
#: syncs of a 3,000-row view with a service of their own took 62.6 s against 72.7 s with
#: the JVM's defaults (the 15 after the loads 31.1 s against 39.0). Semantics are the same; the
#: benchmarks and the product keep the defaults. A JDK_JAVA_OPTIONS of the caller wins.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Spark properties of the services the suite starts (SERVICE_SPARK_CONF; a module that
#: sets its own, like the standalone cluster's, replaces them): expressions and plans are
#: evaluated as interpreted (Spark runs its own test suite both ways; results are the same)
#: rather than compiled to Java for each new query shape, which the suite's hundreds of
#: views over small tables pay for and rarely win back. Measured here, serially: the same
#: three modules took 93 CPU-seconds against 103 with code generation (the JVM's share is
#: half); over the whole suite the gain was within one run's noise. The benchmarks and the
#: product keep Spark's defaults.
TEST_SPARK_CONF = '{"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}'


def use_suite_service_env() -> None:
    """Set both in this process's environment, which the processes it starts inherit, unless
    the caller's environment has its own."""
    os.environ.setdefault("JDK_JAVA_OPTIONS", TEST_JVM_OPTIONS)
    os.environ.setdefault("SERVICE_SPARK_CONF", TEST_SPARK_CONF)
