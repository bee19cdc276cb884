"""Concurrent syncs share one Spark session: each one's jobs, those its site threads start
too, are in its own job group, so cancelling one sync's group stops its jobs and no other's.

The threads below do what service/jobs.py and SyncRun._extract_all do: a sync's thread sets
its job group, and the threads that extract its sites side by side run wrapped in
inheritable_thread_target.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from pyspark.util import inheritable_thread_target

from warehouse.spark import build_session

#: Elements of the slow job, each taking SLEEP_S in a task: seconds of work on two cores.
ELEMENTS, SLEEP_S = 16, 0.4


@pytest.fixture(scope="module")
def spark():
    return build_session("local[2]")


def slow_count(spark) -> int:
    return spark.sparkContext.parallelize(range(ELEMENTS), ELEMENTS).map(lambda x: time.sleep(SLEEP_S) or x).count()


def test_cancelling_one_syncs_job_group_stops_its_site_jobs_only(spark):
    sc = spark.sparkContext
    results: dict[str, object] = {}

    def sync(group: str) -> None:
        sc.setJobGroup(group, f"sync {group}", interruptOnCancel=True)

        def site() -> None:
            try:
                results[group] = slow_count(spark)
            except Exception as exc:  # the cancelled job's error
                results[group] = exc

        with ThreadPoolExecutor(1) as pool:
            pool.submit(inheritable_thread_target(site)).result()

    threads = {group: threading.Thread(target=sync, args=(group,)) for group in ("a", "b")}
    for thread in threads.values():
        thread.start()
    deadline = time.monotonic() + 60
    tracker = sc.statusTracker()
    while not (tracker.getJobIdsForGroup("a") and tracker.getJobIdsForGroup("b")):
        assert time.monotonic() < deadline, "the site threads' jobs are not in their syncs' job groups"
        time.sleep(0.05)
    sc.cancelJobGroup("a")
    for thread in threads.values():
        thread.join(120)
    assert isinstance(results["a"], Exception), results["a"]
    assert "cancel" in str(results["a"]).lower()
    assert results["b"] == ELEMENTS
