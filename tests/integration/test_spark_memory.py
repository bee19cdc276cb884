"""The service's Spark JVM gets the heap the settings promise.

On a local master the driver runs every task, and 2g ran out of heap on a 1M-row view of
1 KB rows; the default is now a quarter of the machine. Checked on the real JVM's command
line, the only place the heap size takes effect.
"""

from __future__ import annotations

import pytest

from tests.support.jvm import java_heap
from warehouse.spark import default_driver_memory, machine_memory_bytes
from workloads.harness import start_service

pytestmark = pytest.mark.integration


def test_the_default_heap_is_a_quarter_of_the_machine(service):
    expected = default_driver_memory("local[*]", machine_memory_bytes())
    assert java_heap(service.proc.pid) == expected
    assert int(expected.removesuffix("m")) >= 2048


def test_the_heap_can_be_set(tmp_path, logs_dir):
    proc = start_service(tmp_path / "warehouse", logs_dir, env={"SERVICE_SPARK_DRIVER_MEMORY": "3g"})
    try:
        assert java_heap(proc.proc.pid) == "3g"
    finally:
        proc.stop()
