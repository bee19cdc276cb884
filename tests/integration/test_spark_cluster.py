"""The service on a real Spark cluster: a standalone master and worker, not local[*].

The master and the worker come from PySpark's own distribution (tests/support/spark_cluster.py),
each its own JVM; the executor is a third. The service points SERVICE_SPARK_MASTER at the
master and runs randomized rounds on a SQLite source with `auto` and `group_hash`; after every sync the view equals the truth read from the source.

The executors' Python (PYSPARK_PYTHON) has the project's dependencies but not the project,
and the worker runs outside the repository without PYTHONPATH, so the group hashes and
sketches computed in Python tasks work only because the service ships its code. The data
directory is a plain local path: driver and executor run on this machine and see it under
the same name, as a shared filesystem would give them on a cluster of several hosts.
"""

from __future__ import annotations

import json

import pytest

from tests.support.legacy import SQLITE_VIEWS, SqliteLegacy, with_strategy
from tests.support.oracle import run_rounds
from tests.support.spark_cluster import SparkCluster, can_import
from workloads.harness import Api, start_agent, start_service

pytestmark = pytest.mark.integration

#: The same view with the default strategy (none named: auto) and with group_hash, whose
#: group planning and hashing run in Python tasks on the executor.
VIEWS = {
    "people_auto": SQLITE_VIEWS["people_v"][:4],
    "people_group_hash": with_strategy(SQLITE_VIEWS["people_v"], "group_hash"),
}
ROUNDS = 2
#: Spark properties of the service's application: the driver where the cluster, bound to
#: 127.0.0.1, reaches it; an executor that fits the worker's 1g; and shuffles as wide as
#: the cluster's one core needs. Spark's 200 partitions made each sync of these
#: 400-row tables 15-20 s instead of 3-5 s.
CLUSTER_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.sql.shuffle.partitions": "2",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, logs_dir):
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"), logs_dir)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_randomized_rounds_on_a_standalone_cluster_are_exact(cluster, tmp_path, logs_dir):
    python = cluster.python
    assert not can_import(python, tmp_path, "warehouse"), "the executors' Python must not find deltasieve by itself"
    assert can_import(python, tmp_path, "pyarrow", "numpy", "xxhash", "pyspark"), "nor lack its dependencies"
    legacy = SqliteLegacy(tmp_path / "legacy.db", seed=20261125)
    agent = start_agent(f"sqlite:///{legacy.path}", logs_dir)
    service = start_service(
        tmp_path / "warehouse",
        logs_dir,
        env={
            "SERVICE_SPARK_MASTER": cluster.master_url,
            "SERVICE_SPARK_DRIVER_MEMORY": "1g",
            "SERVICE_SPARK_CONF": json.dumps(CLUSTER_CONF),
            "PYSPARK_PYTHON": str(cluster.python),
        },
    )
    api = Api(service.url)
    try:
        api.add_source("src", agent.url)
        last = run_rounds(api, legacy, VIEWS, ROUNDS)
        (app,) = [a for a in cluster.state()["activeapps"] if a["name"] == "deltasieve"]
        assert app["cores"] == 1, f"the service's application has no executor on the cluster: {app}"
        assert last["people_group_hash"]["metrics"]["groups_sent"] > 0, last["people_group_hash"]["metrics"]
    finally:
        api.close()
        service.stop()
        agent.stop()
